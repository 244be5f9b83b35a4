"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the chunk-parallel Kimi Delta Attention and Gated DeltaNet forward
(``schedule="parallel"``: kda/ and gdn/chunk_parallel_prep_kernel.py, kda/chunk_parallel_{state,out}_kernel.py shared by
both families): for each family the three kernels build from the plan alone, really issue WGMMA (m64n64k16 bf16 ->
fp32) and cp.async, never touch local memory (PTX) nor spill (cubin), carry the cudnn symbol prefix (Rule 6), and a
plan with another token total and sequence count reuses the same three artifacts (Rule 4); KDA's prep kernel has the
restructured kernel's shape (256 threads at two CTAs per SM, vectorized shared stores, ``ex2.approx`` decays, an fp32
g read by 32-bit loads), also at K = 64. The execute path's workspace and g-alignment checks run here too (they decline
before any launch). One compile of the three kernels per family (K = 128, varlen, states, L2 norm), about 12 s (KDA)
and 6 s (GDN) on one core, the KDA prep at K = 64 (about 4 s) and GDN's tuning knobs' prep and state-pass variants
(about 5 s)."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


def _plan(T, N, D=128, H=4, Hk=2, fam=KDA):
    return compile_varlen_plan(fam, T, N, D, H, Hk, schedule="parallel")


def _drop_cached(fam):
    from cudnn.kernel_cache import kernel_cache

    for key in list(kernel_cache._entries):
        if key[0] == fam.cache_family and "Parallel" in type(key[1]).__name__:
            kernel_cache._entries.pop(key)


# K = 128. KDA prep (m64n64 only; since session 6 its step 3 is 4 row blocks x (8 + 8) m64n16k16, checked by
# _check_kda_prep): 8 (U, two V blocks) + 8 (-Wm) = 16; GDN prep
# (restructured): 8 (K K^T) + 8 (Q K^T) + 8 (U) + 8 (-Wm) = 32; output (V-wide): 2 V blocks x (8 (Qg S0^T) + 4 (P Vn)) =
# 24. The state pass's MMA shapes are its own file's business (v_slice, stages): any WGMMA there.
@pytest.mark.parametrize("fam, wgmmas, prep", [(KDA, 16, "kdachunk_parallel_prep"), (GDN, 32, "gdnchunk_parallel_prep")], ids=["kda", "gdn"])
def test_parallel_kernels_issue_wgmma_never_spill_and_are_one_artifact_for_every_batch(tmp_path, fam, wgmmas, prep):
    from cudnn.kernel_cache import kernel_cache

    plan = _plan(1000, 5, fam=fam)
    plan.parallel_fused = False  # the three kernels alone (the per-call fused pair: test_parallel_state_out.py)
    plan.check_support()
    _drop_cached(fam)  # build them here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 3 and all(n.startswith("cudnn_") and "cutlass" not in n.lower() for n in names), names
    assert sum(prep in n for n in names) == 1 and sum("chunk_parallel_state" in n for n in names) == 1, names
    mma = "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"
    prep_ptx = _ptx_of(tmp_path, prep)
    assert prep_ptx.count(mma) == wgmmas and _ptx_of(tmp_path, "chunk_parallel_out").count(mma) == 24
    state_ptx, out_ptx = _ptx_of(tmp_path, "chunk_parallel_state"), _ptx_of(tmp_path, "chunk_parallel_out")
    assert "wgmma.mma_async" in state_ptx
    # the overlapped output (``parallel_overlap``, default since session 31: ``OVERLAP_VARIANT`` = ovl-stsm): the state
    # pass lets the output grid launch and copies by stmatrix.trans, the output kernel polls the ready flags
    assert plan._ready_flags and "griddepcontrol.launch_dependents" in state_ptx and "ld.relaxed.gpu" in out_ptx
    assert any("stmatrix.sync.aligned" in line and ".trans" in line for line in state_ptx.splitlines())
    assert "cp.async.cg.shared.global" in text  # workspace tiles staged by 16-byte cp.async (output)
    assert "cp.async.bulk.tensor" in _ptx_of(tmp_path, "chunk_parallel_state")  # the state pass by TMA (the default)
    assert "ld.global.v4" in text and "st.global.v4" in text  # q, k, v rows in; workspace tiles out, by 16-byte vectors
    assert "fence.proxy.async.shared::cta" in text
    assert "ld.local" not in text and "st.local" not in text
    frames = frame_sizes(tmp_path)
    assert len(frames) == 3 and all(f <= 8 for f in frames), frames
    if fam is KDA:
        _check_kda_prep(prep_ptx, 128)
        assert prep_ptx.count("ld.global.b32") >= 32 and prep_ptx.count("ld.global.b16") <= 2, (
            prep_ptx.count("ld.global.b32"),
            prep_ptx.count("ld.global.b16"),
        )  # g by 32-bit words, 32 per thread (beta stays 2-byte aligned: one pair of 16-bit loads)
        assert plan._parallel_g_align == 4  # an fp32 g is bound 4-byte aligned (execute checks the address)

    misses = kernel_cache.stats.misses
    other = _plan(123457, 77, fam=fam)  # another token total and sequence count: the same three artifacts
    other.parallel_fused = False
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_parallel == plan._compiled_parallel


def _check_kda_prep(prep: str, d: int) -> None:
    """The default KDA prep kernel's PTX at head dim ``d`` (``narrow_ap`` + ``ref_table`` + ``tiled_solve`` +
    ``lean_gates`` since session 6, ``staged_kd`` + ``staged_w`` since session 8): 256 threads
    at two CTAs per SM (``.minnctapersm 2``: registers capped at 128); step 3 as 4 row blocks x 2 x D / 16 K-major
    m64n16k16 WGMMAs (A^T, P^T) and 2 x 4 x D / 64 m64n64k16 with the B operand MN-major (U = (T Diag(beta)) V, W: no
    transposed stores); every bf16 operand tile written 16 bytes at a time (``st.shared.v4``: Q', K', K exp(G) and the
    four K'_I blocks, one store per 8 channels); the only 16-bit shared stores are the staged stores' (D / 4 2-byte kd
    elements, D / 4 bf16 pairs of -Wm: ``test_kda_prep_staged_gpu.py``); the exps: three per element of the element pass
    (3 x D / 4 per thread: log2 gates, no per-exp multiply) plus the 10 ratios of the reference-row table and exp(G_C),
    none for K'_I; V by D / 32 16-byte cp.async per thread; the solve's bands by 16-byte shared reads (``tiled_solve``:
    at most 32 scalar ``ld.shared``, 267 without it at K = 128); 18 CTA barriers (2 gates, 2 per row block, 1 + 6 solve,
    1 before U / W) and one named barrier (warpgroup 1's 128 threads before its staged -Wm stores); no local memory."""
    import re

    n16 = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n16k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", prep)
    n64 = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", prep)
    assert ".reqntid 256, 1, 1" in prep and ".minnctapersm 2" in prep
    assert len(n16) == d // 2 and set(n16) == {"0"} and len(n64) == d // 8 and set(n64) == {"1"}, (n16, n64)
    assert prep.count("wgmma.mma_async") == d // 2 + d // 8
    assert prep.count("st.shared.v4.b32") >= 7 * d // 32 and "st.shared.u16" not in prep
    assert len(re.findall(r"\bst\.shared\.b16\s", prep)) == d // 4 and len(re.findall(r"\bst\.shared\.v2\.b16\s", prep)) == d // 4
    assert 3 * d // 4 <= prep.count("ex2.approx.ftz.f32") <= 3 * d // 4 + 16 and prep.count("cp.async.cg.shared.global") == d // 32
    assert (
        len(re.findall(r"bar\.sync\s+0;", prep)) == 18 and len(re.findall(r"bar\.sync\s+[1-9]", prep)) == len(re.findall(r"bar\.sync\s+1,\s*128;", prep)) == 1
    )
    assert len(re.findall(r"ld\.shared\.(b32|f32|u32)\b", prep)) <= 32, len(re.findall(r"ld\.shared\.(b32|f32|u32)\b", prep))
    assert "ld.local" not in prep and "st.local" not in prep


def test_kda_prep_at_k64_dense_bf16_g_without_l2norm(tmp_path):
    """The KDA prep kernel alone at K = 64, dense, bf16 g, no L2 norm (V past T Diag(beta) instead of over K'_I): the
    same shape checks, no spill."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    key = KdaParallelPrepKey(head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False)
    ptrs = [fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 2), fp("Float32", 2), None]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(
            KimiDeltaAttentionParallelPrep(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0)
        )
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kdachunk_parallel_prep" in names[0], names
    _check_kda_prep(text, 64)
    assert all(f == 0 for f in frame_sizes(tmp_path))


def test_parallel_execute_declines_a_short_workspace_before_launching():
    """The workspace comes from the caller (R2) and is sized from the runtime token total and sequence count; a
    buffer one byte short is a ValueError from the metadata check (no launch: CPU tensors never reach a kernel)."""
    torch = pytest.importorskip("torch")

    T, N, H, D = 200, 3, 4, 128
    q = torch.zeros(T, 2, D, dtype=torch.bfloat16)
    v = torch.zeros(T, H, D, dtype=torch.bfloat16)
    g = torch.zeros(T, H, D)
    beta = torch.zeros(T, H)
    st = torch.zeros(N, H, D, D)
    cu = torch.tensor([0, 1, 150, 200], dtype=torch.int32)
    plan = KDA.adapter_class()(q, q, v, g, beta, v, use_qk_l2norm_in_kernel=True, initial_state=st, final_state=st, cu_seqlens=cu, schedule="parallel")
    plan.compile()
    need = plan.scratch_workspace_bytes(T, N)
    assert need == plan.scratch_workspace_bytes()  # the plan's own extents by default
    slots = T // 64 + N
    assert need >= slots * H * (64 * D * (2 + 4 + 2 + 2 + 2) + 64 * 64 * 2 + D * 4 + D * D * 2)
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(q, q, v, g, beta, v, st, st, cu, workspace=torch.zeros(need - 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(q, q, v, g, beta, v, st, st, cu)
    # the prep kernel reads an fp32 g by 32-bit loads: a g at an address 2 mod 4 is refused before any launch
    g_bad = torch.frombuffer(bytearray(g.numel() * 4 + 2), dtype=torch.float32, offset=2, count=g.numel()).view(g.shape)
    assert g_bad.data_ptr() % 4 == 2
    raw = torch.zeros(need + 128, dtype=torch.uint8)
    ws = raw[(-raw.data_ptr()) % 128 :][:need]  # a workspace that passes every check of its own
    with pytest.raises(ValueError, match="g at 0x[0-9a-f]+ is not 4-byte aligned"):
        plan.execute(q, q, v, g_bad, beta, v, st, st, cu, workspace=ws)


def _ptx_of(tmp_path, part):
    import glob

    (text,) = [open(f).read() for f in glob.glob(os.path.join(str(tmp_path), "**", f"*{part}*.ptx"), recursive=True)]
    return text


def _local_memory_users(tmp_path) -> list[str]:
    """The dumped PTX files (by name) that touch local memory."""
    import glob

    files = glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True)
    return [os.path.basename(f) for f in files if any(op in open(f).read() for op in ("ld.local", "st.local"))]


def test_tuning_options_are_their_own_artifacts_and_never_spill(tmp_path):
    """GDN's knobs, each a compile-key field whose default leaves the key (and so the default PTX) unchanged, in one
    plan, free of local memory and spills:

    - ``parallel_prefetch`` (``GdnParallelPrepKey.prefetch``, an option of the one-warpgroup prep kernel, which it
      selects) issues a chunk's global reads at once and reads an fp32 g by 32-bit loads;
    - ``parallel_state_stages = 3`` (``KdaParallelStateKey.stages``): three TMA stages in the state pass (the default
      is four): prologue 2 + loop 3 chunks' ``mbarrier.arrive.expect_tx``;
    - ``parallel_prep_two_per_sm`` (``GdnParallelPrepKey.two_per_sm``): the one-warpgroup prep kernel launched for
      two CTAs per SM (``.minnctapersm 2``, 128 threads).

    ``parallel_fast_exp`` is no family's option (a ValueError); KDA's prep knobs: ``test_kda_parallel_support.py``."""

    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    prep = "gdnchunk_parallel_prep"
    plan = _plan(1000, 5, fam=GDN)
    plan.parallel_prefetch = True
    plan.parallel_state_stages = 3
    plan.parallel_prep_two_per_sm = True
    plan.check_support()
    with keep_artifacts(tmp_path / "a") as ptx:  # the output kernel may be a cache hit: the prep and the state pass (new keys) build here
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert sum(prep in n for n in names) == 1 and sum("chunk_parallel_state" in n for n in names) == 1, names
    assert all(n.startswith("cudnn_") for n in names), names
    assert text.count("ld.global.b32") >= 2 and text.count("ld.global.b16") <= 2  # g by words (beta stays 2-byte aligned)
    state_ptx = _ptx_of(tmp_path / "a", "chunk_parallel_state")
    assert state_ptx.count("mbarrier.arrive.expect_tx") == 2 + 3 and "cp.async.wait_group" not in state_ptx
    assert not _local_memory_users(tmp_path / "a") and all(f == 0 for f in frame_sizes(tmp_path / "a")), (
        _local_memory_users(tmp_path / "a"),
        frame_sizes(tmp_path / "a"),
    )
    assert ".minnctapersm 2" in _ptx_of(tmp_path / "a", prep) and ".reqntid 128, 1, 1" in _ptx_of(tmp_path / "a", prep)
    with pytest.raises(ValueError, match="parallel_fast_exp is not available"):
        other = _plan(1000, 5, fam=GDN)
        other.parallel_fast_exp = True
        other.compile()
    pk = GdnParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    sk = KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True)
    assert not (pk.prefetch or pk.two_per_sm) and pk.restructured and sk.stages == 4 and sk.tma and sk.tma_store  # the defaults
    with pytest.raises(ValueError, match="parallel_state_stages=5"):
        bad = _plan(1000, 5, fam=GDN)
        bad.parallel_state_stages = 5
        bad.compile()
