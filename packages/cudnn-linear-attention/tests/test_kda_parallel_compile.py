"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the chunk-parallel Kimi Delta Attention and Gated DeltaNet forward
(``schedule="parallel"``: kda/ and gdn/chunk_parallel_prep_kernel.py, kda/chunk_parallel_{state,out}_kernel.py shared by
both families): for each family the three kernels build from the plan alone,
really issue WGMMA (m64n64k16 bf16 -> fp32) and cp.async, never touch local memory (PTX) nor spill (cubin), carry the
cudnn symbol prefix (Rule 6), and a plan with another token total and sequence count reuses the same three artifacts
(Rule 4). The execute path's workspace check runs here too (it declines before any launch). One compile of the three
kernels per family (K = 128, varlen, states, L2 norm), about 12 s (KDA) and 6 s (GDN) on one core, plus the tuning
knobs' prep and state-pass variants (about 9 s and 4 s)."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


def _plan(T, N, D=128, H=4, Hk=2, fam=KDA):
    from cudnn.api_base import TensorDesc

    qk = TensorDesc.contiguous((T, Hk, D), "bfloat16", "q")
    v = TensorDesc.contiguous((T, H, D), "bfloat16", "v")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    return fam.adapter_class()(
        qk,
        qk,
        v,
        TensorDesc.contiguous(fam.gate_shape((T,), H, D), "float32", "g"),
        TensorDesc.contiguous((T, H), "float32", "beta"),
        v,
        use_qk_l2norm_in_kernel=True,
        initial_state=st,
        final_state=st,
        cu_seqlens=TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens"),
        schedule="parallel",
    )


def _drop_cached(fam):
    from cudnn.kernel_cache import kernel_cache

    for key in list(kernel_cache._entries):
        if key[0] == fam.cache_family and "Parallel" in type(key[1]).__name__:
            kernel_cache._entries.pop(key)


# K = 128. KDA prep: 4 row blocks x (8 (K' K'_I^T) + 8 (Q' K'_I^T)) + 8 (U, two V blocks) + 8 (-Wm) = 80; GDN prep:
# 8 (K K^T) + 8 (Q K^T) + 8 (U) + 8 (-Wm) = 32; state pass: two unrolled stages x (8 (Vn) + 8 (S)) = 32;
# output: 8 (Qg S0^T) + 4 (P Vn) = 12.
@pytest.mark.parametrize("fam, wgmmas, prep", [(KDA, 124, "kdachunk_parallel_prep"), (GDN, 76, "gdnchunk_parallel_prep")], ids=["kda", "gdn"])
def test_parallel_kernels_issue_wgmma_never_spill_and_are_one_artifact_for_every_batch(tmp_path, fam, wgmmas, prep):
    from cudnn.kernel_cache import kernel_cache

    plan = _plan(1000, 5, fam=fam)
    plan.check_support()
    _drop_cached(fam)  # build them here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 3 and all(n.startswith("cudnn_") and "cutlass" not in n.lower() for n in names), names
    assert sum(prep in n for n in names) == 1 and sum("chunk_parallel_state" in n for n in names) == 1, names
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == wgmmas
    assert "cp.async.cg.shared.global" in text  # workspace tiles staged by 16-byte cp.async (state pass, output)
    assert "ld.global.v4" in text and "st.global.v4" in text  # q, k, v rows in; workspace tiles out, by 16-byte vectors
    assert "fence.proxy.async.shared::cta" in text
    assert "ld.local" not in text and "st.local" not in text
    frames = frame_sizes(tmp_path)
    assert len(frames) == 3 and all(f <= 8 for f in frames), frames

    misses = kernel_cache.stats.misses
    other = _plan(123457, 77, fam=fam)  # another token total and sequence count: the same three artifacts
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_parallel == plan._compiled_parallel


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


def _ptx_of(tmp_path, part):
    import glob

    (text,) = [open(f).read() for f in glob.glob(os.path.join(str(tmp_path), "**", f"*{part}*.ptx"), recursive=True)]
    return text


def _local_memory_users(tmp_path) -> list[str]:
    """The dumped PTX files (by name) that touch local memory."""
    import glob

    files = glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True)
    return [os.path.basename(f) for f in files if any(op in open(f).read() for op in ("ld.local", "st.local"))]


@pytest.mark.parametrize("fam, prep", [(KDA, "kdachunk_parallel_prep"), (GDN, "gdnchunk_parallel_prep")], ids=["kda", "gdn"])
def test_tuning_options_are_their_own_artifacts_and_never_spill(tmp_path, fam, prep):
    """The parallel schedule's opt-in knobs, each a compile-key field whose default leaves the key (and so the default
    PTX) unchanged, each variant free of local memory and spills:

    - ``parallel_prefetch`` (``{Kda,Gdn}ParallelPrepKey.prefetch``) issues a chunk's global reads at once and reads an
      fp32 g by 32-bit loads (KDA: 64 per thread; the default reads pairs of 16-bit loads under a predicate per token);
    - ``parallel_state_stages = 3`` (``KdaParallelStateKey.stages``): three shared-memory stages in the state pass, each
      chunk waiting only for the chunk after it (``cp.async.wait_group 1``);
    - ``parallel_prep_two_per_sm`` (``{Kda,Gdn}ParallelPrepKey.two_per_sm``): the prep kernel launched for two CTAs per
      SM (``.minnctapersm 2``); KDA declines it together with prefetch (that pair spills);
    - KDA's ``parallel_fast_exp`` (``KdaParallelPrepKey.fast_exp``): the per-element decays without the precise expf's
      range reduction (``fma.rm``); GDN declines it.

    GDN: one plan with prefetch, 3 stages and two CTAs per SM. KDA: prefetch with 3 stages, then two CTAs per SM with
    the fast exp (a second prep artifact)."""
    import re

    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    plan = _plan(1000, 5, fam=fam)
    plan.parallel_prefetch = True
    plan.parallel_state_stages = 3
    plan.parallel_prep_two_per_sm = fam is GDN
    plan.check_support()
    with keep_artifacts(tmp_path / "a") as ptx:  # the output kernel may be a cache hit: the prep and the state pass (new keys) build here
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert sum(prep in n for n in names) == 1 and sum("chunk_parallel_state" in n for n in names) == 1, names
    assert all(n.startswith("cudnn_") for n in names), names
    assert text.count("ld.global.b32") >= (64 if fam is KDA else 2) and text.count("ld.global.b16") <= 2  # g by words (beta stays 2-byte aligned)
    state_ptx = _ptx_of(tmp_path / "a", "chunk_parallel_state")
    assert len(re.findall(r"cp\.async\.wait_group\s+1;", state_ptx)) == 4 and not re.findall(r"cp\.async\.wait_group\s+0;", state_ptx)
    assert not _local_memory_users(tmp_path / "a") and all(f == 0 for f in frame_sizes(tmp_path / "a")), (
        _local_memory_users(tmp_path / "a"),
        frame_sizes(tmp_path / "a"),
    )
    assert (".minnctapersm 2" in _ptx_of(tmp_path / "a", prep)) == (fam is GDN)
    if fam is KDA:
        two = _plan(1000, 5)
        two.parallel_prep_two_per_sm = True
        two.parallel_fast_exp = True
        with keep_artifacts(tmp_path / "b"):
            two.compile()
        prep_ptx = _ptx_of(tmp_path / "b", prep)
        assert ".minnctapersm 2" in prep_ptx and "ld.local" not in prep_ptx and all(f == 0 for f in frame_sizes(tmp_path / "b"))
        assert prep_ptx.count("fma.rm.f32") <= 2, prep_ptx.count("fma.rm.f32")  # fast_exp: only exp(G_C) keeps the precise expf
        with pytest.raises(ValueError, match="spills registers"):
            both = _plan(1000, 5)
            both.parallel_prefetch = both.parallel_prep_two_per_sm = True
            both.compile()
    else:
        with pytest.raises(ValueError, match="parallel_fast_exp is not available"):
            other = _plan(1000, 5, fam=GDN)
            other.parallel_fast_exp = True
            other.compile()
    pk = KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    sk = KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True)
    assert not (pk.prefetch or pk.fast_exp or pk.two_per_sm) and sk.stages == 2  # the defaults: the verified kernels' keys
    with pytest.raises(ValueError, match="parallel_state_stages=4"):
        bad = _plan(1000, 5, fam=fam)
        bad.parallel_state_stages = 4
        bad.compile()
