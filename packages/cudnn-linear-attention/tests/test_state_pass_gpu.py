"""GPU tier of the chunk-parallel forward's state pass (``kda/chunk_parallel_state_kernel.py`` key and routing,
``kda/chunk_parallel_state_narrow_kernel.py`` the one kernel), both families, through the adapters'
``schedule="parallel"`` with the state-pass key options set by ``set_parallel_options(plan, {"state": {...}})``:

- the session-5 state pass (``state-base``: ``v_slice`` = 32, two cp.async stages) against the fp32 token-by-token
  recurrence (FlashAttention rule, ``_parallel_cases.check``) on the varlen batch (1-token, one-chunk, empty,
  24-chunk sequences; GVA; h0 / ht);
- the options that change only when data moves -- the default since session 6 (``tma`` + ``tma_store``, four stages),
  ``tma`` without the TMA stores, other stage counts -- bitwise equal to it (same operations on the same operands in
  the same order);
- the other slice widths (16, 64: another fp32 accumulation order inside the MMAs) against the recurrence and within
  twice the default's error;
- a dense batch and a 4096-token sequence (64 chunks) without an initial state at three TMA stages;
- the execute of a plan with ``parallel_state_stages = 2`` (the TMA kernel at two stages): no sync, no allocation,
  CUDA-graph replay equal to eager (the default plan's: ``test_{kda,gdn}_parallel_gpu.py``).

Compile-only (CPU) checks of the default and the baselines: ``test_state_pass_compile_only`` below (frame size 0, the
MMA shapes, TMA and mbarrier instructions emitted, the barrier count).
Run: ``source ci/gpu_env.sh; ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_state_pass_gpu.py -q``."""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, frame_sizes, skip_unless_family_dsl  # noqa: E402


def _gpu():
    from cudnn_testing.markers import skip_unless_sm90

    pytest.importorskip("torch")
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


def _run(fam, state, q, k, v, g, beta, h0, cu, l2norm, final=True):
    """``(o, final_state)`` of one parallel-schedule execute with the state-pass key options ``state`` ({} = the
    default plan); poisoned outputs, a workspace of all-ones bytes (NaN in bf16 and fp32) sized for the batch."""
    import _parallel_cases as cases

    return cases.execute_variant(fam, {"state": state} if state else None, q, k, v, g, beta, h0, cu, l2norm, final)[:2]


def _varlen(fam, D, l2norm, regime="safe_gate"):
    import _parallel_cases as cases

    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, D, l2norm, len(cases.LENGTHS), regime)
    return q, k, v, g, beta, h0, cu


BASE = {"tma": False, "tma_store": False, "stages": 2}  # the session-5 state pass (PARALLEL_VARIANTS["state-base"])

# Both families, both head dims (GDN at K = 128 in the dense / long test below); pruned to what tells the options apart:
# the default (TMA loads and stores, four stages) at both head dims and in both families, TMA loads with the cp.async
# path's stores, two and three TMA stages, cp.async at four stages.
BITWISE = [  # the cp.async option first: a TMA option that hung (an mbarrier never completing) would stop the rest
    (KDA, 128, True, {"stages": 4, "tma": False, "tma_store": False}),
    (KDA, 128, True, {}),
    (KDA, 128, True, {"tma_store": False, "stages": 2}),
    (KDA, 128, True, {"stages": 3}),
    (KDA, 64, False, {"tma_store": False}),
    (GDN, 64, False, {"stages": 2}),
    (GDN, 128, True, {}),
    # session 30: the transposed copies by stmatrix.trans (``stmatrix``), on the default TMA loop and the cp.async one
    (KDA, 128, True, {"stmatrix": True}),
    (GDN, 64, False, {"stmatrix": True, "stages": 2}),
    (KDA, 128, True, {"stmatrix": True, "stages": 2, "tma": False, "tma_store": False}),
]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fam, D, l2norm, opts",
    BITWISE,
    ids=[
        "kda-d128-cpasync-s4",
        "kda-d128-default",
        "kda-d128-tma-s2",
        "kda-d128-tma-st-s3",
        "kda-d64-tma-s4",
        "gdn-d64-tma-st-s2",
        "gdn-d128-default",
        "kda-d128-stmatrix",
        "gdn-d64-stmatrix-s2",
        "kda-d128-stmatrix-cpasync",
    ],
)
def test_state_pass_options_match_recurrence_and_are_bitwise_the_default(fam, D, l2norm, opts):
    """The session-5 state pass (``BASE``) by the FlashAttention rule against the fp32 recurrence; the option (``{}``:
    the default) equal to it bit for bit (o and the final state); the empty sequence passes its state through exactly."""
    import _parallel_cases as cases
    import torch

    _gpu()
    q, k, v, g, beta, h0, cu = _varlen(fam, D, l2norm)
    o0, s0 = _run(fam, BASE, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1 = _run(fam, opts, q, k, v, g, beta, h0, cu, l2norm)
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, False)
    cases.check(o0, ref_o, low_o, "o state-base")
    cases.check(s0, ref_s, low_s, "final_state state-base")
    assert torch.isfinite(o1.float()).all() and torch.isfinite(s1).all(), f"{opts}: non-finite output (an unwritten or unfetched tile)"
    do = (o0.float() - o1.float()).abs().max().item()
    ds = (s0 - s1).abs().max().item()
    assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{opts}: max |option - state-base|: o {do}, final_state {ds}"
    assert torch.equal(s1[3], h0[3])


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fam, D, l2norm, opts",
    [(KDA, 128, True, {"v_slice": 64, **BASE}), (GDN, 64, False, {"v_slice": 16, "tma_store": False, "stages": 2})],
    ids=["kda-v64-base", "gdn-v16-tma-s2"],
)
def test_other_slice_widths_match_recurrence_and_default(fam, D, l2norm, opts):
    """Another slice width (the fp32 accumulation order inside the MMAs differs; the combinations GPU-verified in
    session 5): the FlashAttention rule against the recurrence, and at most twice the default's error plus the rule's
    noise."""
    import _parallel_cases as cases

    from cudnn_testing.tolerance import assert_close_fa

    _gpu()
    q, k, v, g, beta, h0, cu = _varlen(fam, D, l2norm, "weak")
    o0, s0 = _run(fam, {}, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1 = _run(fam, opts, q, k, v, g, beta, h0, cu, l2norm)
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, False)
    cases.check(o1, ref_o, low_o, f"o {opts}")
    cases.check(s1, ref_s, low_s, f"final_state {opts}")
    assert_close_fa(o1, ref_o, o0, name=f"o {opts} vs default", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(s1, ref_s, s0, name=f"final_state {opts} vs default", factor=2.0, noise=1e-3 * ref_s.abs().max().item())


@pytest.mark.gpu
def test_tma_state_pass_dense_batch_and_long_sequence():
    """``tma`` + ``tma_store`` with three stages on a dense [B, L] batch (B = 2, L = 300: the dense slot table) and one 4096-token THD
    sequence (64 chunks), no initial state, K = 128, Gated DeltaNet (KDA's K = 128 runs above): the FlashAttention rule
    against the fp32 recurrence."""
    import _parallel_cases as cases

    _gpu()
    fam = GDN
    for lead, batched in (((2, 300), True), ((4096,), False)):
        q, k, v, g, beta, _ = cases.inputs(fam, lead, 2, 2, 128, True, lead[0] if batched else 1, "safe_gate")
        o, ht = _run(fam, {"tma": True, "tma_store": True, "stages": 3}, q, k, v, g, beta, None, None, True)
        ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, None, True, None, batched)
        cases.check(o, ref_o, low_o, f"o tma {lead}")
        cases.check(ht, ref_s, low_s, f"final_state tma {lead}")


@pytest.mark.gpu
@pytest.mark.detector
def test_two_stage_state_pass_execute_never_syncs_or_allocates_and_replays_under_capture():
    """A plan with ``parallel_state_stages = 2`` (the TMA state pass at two stages; TMA descriptors encoded on the host
    per launch): no host sync, no allocation over three executes, and a CUDA-graph replay equal to eager."""
    import _parallel_cases as cases

    _gpu()
    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA, {"state": {"stages": 2}})


# -- compile-only (CPU, CUTE_DSL_ARCH=sm_90a): the options build, spill nothing and emit what they claim -----------------


@pytest.mark.compile_only
def test_state_pass_compile_only(tmp_path):
    """K = 128, varlen, h0 / ht: the default key (v_slice 32, TMA loads and stores, four stages) routes to the narrow
    kernel; it issues the four operands by ``cp.async.bulk.tensor`` (per chunk 2 K / 64 + 2 boxes, three stages ahead
    in the prologue, the loop unrolled over the four stages), waits on mbarriers, has no cp.async and two CTA barriers
    per chunk, and writes h and vnt by TMA stores issued by one elected lane (each group waited for reading before its
    tile is rewritten, all at the end). ``tma`` without ``tma_store`` at two stages (``parallel_state_stages = 2``'s
    data movement minus the stores) keeps the 16-byte global stores. Both with the cudnn prefix, frame size 0 and no
    local memory. Unknown widths / stage counts and ``tma_store`` without ``tma`` are ValueErrors. (The cp.async
    baseline's build: ``test_parallel_variants_compile.py``.)"""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrow
    from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    key = KdaParallelStateKey(**base)
    assert (key.v_slice, key.stages, key.tma, key.tma_store) == (32, 4, True, True)
    assert KimiDeltaAttentionParallelState.for_key(key) is KimiDeltaAttentionParallelStateNarrow
    with pytest.raises(ValueError, match="v_slice=48"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=48))
    with pytest.raises(ValueError, match="stages=5"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, stages=5))
    with pytest.raises(ValueError, match="tma_store=True needs tma=True"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, tma=False))

    ptrs = [fp("Int32", 4), fp("Float32", 4), fp("Float32", 4)]
    texts = {}
    for name, extra in (("default", {}), ("tma", {"tma_store": False, "stages": 2})):
        key = KdaParallelStateKey(**base, **extra)
        with keep_artifacts(tmp_path / name) as ptx:
            cute.compile(KimiDeltaAttentionParallelState.for_key(key)(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0))
            texts[name] = ptx()
        names = kernel_symbols(texts[name])
        assert len(names) == 1 and names[0].startswith("cudnn_") and "cutlass" not in names[0].lower(), names
        assert "ld.local" not in texts[name] and "st.local" not in texts[name]
        assert all(f == 0 for f in frame_sizes(tmp_path / name)), (name, frame_sizes(tmp_path / name))
        stages = key.stages
        mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k16)", texts[name])
        assert mma == ["m64n32k16"] * (stages * 16), (name, len(mma))
        # loads: 6 boxes per chunk (-Wm 2, kd 2, U, exp(G_C)), for the prologue's stages - 1 chunks and the unrolled loop's stages
        loads = texts[name].count("cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes")
        assert loads == 6 * (2 * stages - 1) and texts[name].count("mbarrier.arrive.expect_tx") == 2 * stages - 1, (name, loads)
        assert "cp.async.cg" not in texts[name] and "cp.async.wait_group" not in texts[name] and "mbarrier.try_wait.parity" in texts[name]
        assert len(re.findall(r"bar\.sync\s+0;", texts[name])) == 1 + 2 * stages  # prologue + two per chunk
    d, tma = texts["default"], texts["tma"]
    # tma_store: h (K / 64 boxes) and vnt (one box) per chunk by TMA from one elected lane, no 16-byte global stores left
    # (the final state's are 4-byte); each store group waited for reading before its tile is rewritten, all of them at the end
    stores = re.findall(r"elect\.sync[^\n]*\n(?:[^\n]*\n){0,6}?\s*cp\.async\.bulk\.tensor\.2d\.global\.shared", d)
    assert d.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 3 * 4 and len(stores) == 2 * 4, len(stores)
    assert "st.global.v4" not in d and "st.global.v4" in tma and "cp.async.bulk.tensor.2d.global" not in tma
    assert d.count("cp.async.bulk.wait_group.read") == 2 * 4 and len(re.findall(r"cp\.async\.bulk\.wait_group\s+0;", d)) == 1


@pytest.mark.compile_only
@pytest.mark.parametrize(
    "D, extra", [(128, {}), (64, {"stages": 2}), (128, {"tma": False, "tma_store": False, "stages": 2})], ids=["d128", "d64-s2", "d128-cpasync"]
)
def test_stmatrix_compile_only(tmp_path, D, extra):
    """``stmatrix`` (session 30): per chunk the Vn^T copy (VW / 16 instructions) and the state copy (K / 64 x VW / 16)
    by ``stmatrix.sync.aligned...trans``; the only 2-byte shared stores left are the initial state's (once per CTA); the
    same WGMMAs, frame 0."""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

    assert PARALLEL_VARIANTS["stsm"] == {"state": {"stmatrix": True}}  # (the fused kernel's: test_parallel_state_out.py)
    texts = {}
    for sm in (False, True):
        key = KdaParallelStateKey(head_dim=D, varlen=True, has_initial=True, has_final=True, stmatrix=sm, **extra)
        with keep_artifacts(tmp_path / str(sm)) as ptx:
            cute.compile(
                KimiDeltaAttentionParallelState.for_key(key)(key),
                fp("Int32", 4),
                fp("Float32", 4),
                fp("Float32", 4),
                *fake_workspace_pointers(),
                *[Int32(8)] * 5,
                cuda.CUstream(0),
            )
            texts[sm] = ptx()
        assert kernel_symbols(texts[sm])[0].startswith("cudnn_") and all(f == 0 for f in frame_sizes(tmp_path / str(sm)))
    stages, vw, nh = key.stages, key.v_slice, D // 64
    t0, t1 = texts[False], texts[True]
    assert t1.count("stmatrix.sync.aligned") == stages * (vw // 16) * (1 + nh) and "stmatrix" not in t0
    assert t1.count("st.shared.b16") == vw * D // 128  # load_state_t's initial copy only
    mma = r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k16)"
    assert re.findall(mma, t0) == re.findall(mma, t1)
