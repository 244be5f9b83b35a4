"""Opt-in bf16 U in the chunk-parallel forward's workspace (issue #7; the ``ub16`` variant of
``_host/chunk_parallel.py::PARALLEL_VARIANTS``: ``u_bf16`` on the prep key -- KDA's, GDN's restructured -- and on the
state-pass key). The prep kernel rounds U = Tm (beta V) to bf16 when storing it (first half of the workspace's ``u``
region, the carve unchanged: ``_device/chunk_parallel.py``, "bf16 U"); the state pass fetches it as a bf16 TMA box and
widens it into the fp32 ``Vn = U - Wm S0^T`` accumulator.

Compile-only tier (CPU, ``CUTE_DSL_ARCH=sm_90a``):

- the variant and the key fields (default off), the ValueErrors: prep and state keys of one plan that disagree (both
  families, both directions: raised at compile, before any build), ``u_bf16`` on GDN's one-warpgroup prep, ``u_bf16``
  on the cp.async state pass;
- the three kernels with ``u_bf16`` built directly next to the defaults (K = 128, varlen, states): no spill (frame size
  0), cudnn symbols, and the U traffic in PTX: in both prep kernels the default's fp32 U pair stores
  (``st.global.v2.b32``, D / 4 per thread, the prep kernels' only 8-byte global stores) become bf16 pair stores
  (``cvt.rn.bf16x2.f32`` + ``st.global.b32``), nothing else changes (K = 64 builds too); in the state pass the fp32
  shared reads of U (``ld.shared.b32``: 64 x 32 / 128 threads = 16 per chunk, x 4 unrolled stages) become 2-byte
  ``ld.shared.b16`` + ``cvt.f32.bf16``, and the stage's TMA transaction count drops by half the U bytes (41472 -> 37376
  at K = 128, v_slice = 32); the other slice widths (16 at K = 64 dense, 64 at K = 128) build with no spill.

GPU tier (both families, K = 128; poisoned outputs, a workspace of all-ones bytes): on the varlen batch (1-token, one-chunk,
empty, 24-chunk sequences; GVA; initial and final states) the bf16 U in the workspace is exactly the default's fp32 U
rounded to bf16 on every active chunk slot, the second half of the ``u`` region stays untouched and the other prep arrays
are bitwise the default's; o and the final state by the FlashAttention rule against the fp32 recurrence (the bf16
chunked reference as lowp) and within twice the default plan's error; the empty sequence passes its state through. A
dense batch and a 4096-token sequence (64 chunks), both with initial and final states, the same way; the ``ub16`` execute
never syncs or allocates and replays under CUDA-graph capture.

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_parallel_u_bf16.py -m compile_only`` (CPU);
GPU: ``source ci/gpu_env.sh; ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_parallel_u_bf16.py -q``."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402

UB16 = {"prep": {"u_bf16": True}, "state": {"u_bf16": True}}


def _plan(fam, T=1000, N=5, D=128, H=4, Hk=2):
    return compile_varlen_plan(fam, T, N, D, H, Hk, schedule="parallel")


# ---- compile-only tier -------------------------------------------------------------------------------------------


@pytest.mark.compile_only
def test_ub16_variant_keys_and_the_mismatch_value_errors():
    """``ub16`` sets ``u_bf16`` on the prep and state keys (default False on all three keys); a plan whose prep and state
    keys disagree raises at compile naming both keys (KDA and GDN, prep-only and state-only), before any build (the
    kernel cache sees no miss); GDN's one-warpgroup prep and the cp.async state pass decline ``u_bf16``."""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

    assert PARALLEL_VARIANTS["ub16"] == UB16
    base = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    assert not KdaParallelPrepKey(**base).u_bf16 and not GdnParallelPrepKey(**base).u_bf16
    assert not KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True).u_bf16
    for fam in (KDA, GDN):
        p = _plan(fam)
        set_parallel_options(p, "ub16")
        assert p._prep_options().get("u_bf16") is True and p._state_options().get("u_bf16") is True
        for half, prep_v, state_v in (("prep", True, False), ("state", False, True)):
            p = _plan(fam)
            set_parallel_options(p, {half: {"u_bf16": True}})
            misses = kernel_cache.stats.misses
            with pytest.raises(
                ValueError, match=rf"prep key \w+PrepKey\.u_bf16={prep_v} and the state-pass key KdaParallelStateKey\.u_bf16={state_v} disagree"
            ):
                p.compile()
            assert kernel_cache.stats.misses == misses  # raised before any build
    with pytest.raises(ValueError, match="u_bf16=True needs restructured=True"):
        GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, restructured=False, tc_ctas_per_sm=2, u_bf16=True))
    with pytest.raises(ValueError, match="u_bf16=True needs tma=True"):
        KimiDeltaAttentionParallelState.for_key(
            KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True, tma=False, tma_store=False, stages=2, u_bf16=True)
        )


def _global_stores(ptx: str) -> Counter:
    return Counter(re.findall(r"\bst\.global((?:\.[a-z0-9]+)+)", ptx))


def _compile_state(key, tmp_path) -> str:
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KimiDeltaAttentionParallelState
    from cudnn_testing.compile_only import keep_artifacts

    ptrs = [fp("Int32", 4) if key.varlen else None, fp("Float32", 4) if key.has_initial else None, fp("Float32", 4) if key.has_final else None]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(KimiDeltaAttentionParallelState.for_key(key)(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0))
        return ptx()


def _no_spill(ptx: str, tmp_path) -> None:
    from cudnn_testing.compile_only import assert_cudnn_symbols

    assert len(assert_cudnn_symbols(ptx)) == 1
    assert "ld.local" not in ptx and "st.local" not in ptx
    sizes = frame_sizes(tmp_path)
    assert sizes and all(f == 0 for f in sizes), sizes


@pytest.mark.compile_only
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_ub16_prep_stores_u_as_bf16_pairs_and_never_spills(fam, tmp_path):
    """The family's prep kernel (KDA's; GDN's restructured) with ``u_bf16`` next to the default (K = 128, varlen): no
    spill, and exactly the U stores change: the default's D / 4 fp32 pair stores per thread (``st.global.v2.b32``: the
    only 8-byte global stores of either kernel) become D / 4 bf16 pair stores (``st.global.b32`` of a
    ``cvt.rn.bf16x2.f32``: two 2-byte bf16 elements); every other global store and the WGMMAs are the default's. Then
    ``u_bf16`` at K = 64 (dense, no L2 norm) builds with no spill and no fp32 U store."""
    import _parallel_cases as cases

    skip_unless_family_dsl(fam)
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    D = 128
    base = dict(head_dim=D, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    texts = []
    for i, u_bf16 in enumerate((False, True)):
        if fam is KDA:
            key = KdaParallelPrepKey(**base, u_bf16=u_bf16)
            kernel_t, g_align = KimiDeltaAttentionParallelPrep, 4
        else:
            key = GdnParallelPrepKey(**base, u_bf16=u_bf16)
            kernel_t, g_align = GatedDeltaNetParallelPrep.for_key(key), 2
        text = cases.compile_prep_ptx(kernel_t, key, tmp_path / str(i), g_align)
        _no_spill(text, tmp_path / str(i))
        texts.append(text)
    default, ub16 = texts
    s0, s1 = _global_stores(default), _global_stores(ub16)
    assert s0[".v2.b32"] == D // 4 and s1[".v2.b32"] == 0, (s0, s1)
    assert s1[".b32"] - s0[".b32"] == D // 4, (s0, s1)
    assert {k: v for k, v in s0.items() if k not in (".v2.b32", ".b32")} == {k: v for k, v in s1.items() if k not in (".v2.b32", ".b32")}
    assert ub16.count("cvt.rn.bf16x2.f32") - default.count("cvt.rn.bf16x2.f32") == D // 4
    assert ub16.count("wgmma.mma_async") == default.count("wgmma.mma_async") > 0
    # K = 64, dense, no L2 norm: builds with no spill, no fp32 U pair store left
    key = type(key)(head_dim=64, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=False, u_bf16=True)
    kernel_t = KimiDeltaAttentionParallelPrep if fam is KDA else GatedDeltaNetParallelPrep.for_key(key)
    text = cases.compile_prep_ptx(kernel_t, key, tmp_path / "d64", g_align)
    _no_spill(text, tmp_path / "d64")
    assert _global_stores(text)[".v2.b32"] == 0 and _global_stores(text)[".b32"] >= 64 // 4


@pytest.mark.compile_only
def test_ub16_state_pass_reads_u_as_bf16_and_never_spills(tmp_path):
    """The state pass with ``u_bf16`` next to the default (K = 128, v_slice 32, four TMA stages, varlen, states): no
    spill; U enters the Vn accumulators by 2-byte shared reads widened to fp32 (64 x 32 / 128 = 16 per chunk, the chunk
    loop unrolled over 4 stages: 64 ``ld.shared.b16`` + ``cvt.f32.bf16``, in place of the default's 64 fp32
    ``ld.shared.b32``); each stage's TMA transaction count is the default's less half the fp32 U box (41472 -> 37376
    bytes: -Wm 16 KB, kd 16 KB, U 64 x 32 x 2, exp(G_C) 512); the MMAs unchanged. Then ``u_bf16`` at the other slice
    widths (16 at K = 64 dense, 64 at K = 128; their bf16 TMA boxes are 32 / 128 bytes wide) builds with no spill."""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    default = _compile_state(KdaParallelStateKey(**base), tmp_path / "0")
    ub16 = _compile_state(KdaParallelStateKey(**base, u_bf16=True), tmp_path / "1")
    _no_spill(default, tmp_path / "0")
    _no_spill(ub16, tmp_path / "1")

    def ld_shared(t):
        return Counter(re.findall(r"\bld\.shared((?:\.[a-z0-9]+)+)", t))

    l0, l1 = ld_shared(default), ld_shared(ub16)
    assert l0[".b16"] == 0 and l1[".b16"] == 64 and l0[".b32"] - l1[".b32"] == 64, (l0, l1)
    assert default.count("cvt.f32.bf16") == 0 and ub16.count("cvt.f32.bf16") == 64
    tx0, tx1 = 2 * 64 * 128 * 2 + 64 * 32 * 4 + 128 * 4, 2 * 64 * 128 * 2 + 64 * 32 * 2 + 128 * 4
    assert (tx0, tx1) == (41472, 37376)
    assert re.search(rf"\b{tx0}\b", default) and not re.search(rf"\b{tx0}\b", ub16) and re.search(rf"\b{tx1}\b", ub16)
    mma = re.compile(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)")
    assert mma.findall(default) == mma.findall(ub16) and mma.findall(ub16)
    for i, (d, vw, varlen) in enumerate(((64, 16, False), (128, 64, True))):
        key = KdaParallelStateKey(head_dim=d, varlen=varlen, has_initial=varlen, has_final=True, v_slice=vw, u_bf16=True)
        text = _compile_state(key, tmp_path / f"w{i}")
        _no_spill(text, tmp_path / f"w{i}")
        assert "cp.async.bulk.tensor" in text and text.count("cvt.f32.bf16") > 0


# ---- GPU tier ----------------------------------------------------------------------------------------------------


def _gpu(fam):
    from cudnn_testing.markers import skip_unless_sm90

    pytest.importorskip("torch")
    skip_unless_sm90()
    skip_unless_family_dsl(fam)


def _u_regions(ws, slots, heads, d):
    """``(u as fp32, u's first half as bf16, u's second half as bytes)`` of workspace ``ws`` ([slots, heads, 64 d] each but the last)."""
    import torch

    from cudnn.linear_attention._host.chunk_parallel import _ARRAYS, workspace_offsets

    i = [name for name, _, _ in _ARRAYS].index("u")
    off = workspace_offsets(slots, heads, d)[i]
    n = slots * heads * 64 * d
    region = ws[off : off + 4 * n]
    return region.view(torch.float32).view(slots, heads, -1), region[: 2 * n].view(torch.bfloat16).view(slots, heads, -1), region[2 * n :]


def _check_against_refs_and_default(fam, o1, s1, o0, s0, q, k, v, g, beta, h0, l2norm, cu, batched, label):
    import _parallel_cases as cases

    from cudnn_testing.tolerance import assert_close_fa

    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, batched)
    cases.check(o0, ref_o, low_o, f"o default {label}")  # the default plan itself (the reference of the next two)
    cases.check(o1, ref_o, low_o, f"o ub16 {label}")
    cases.check(s1, ref_s, low_s, f"final_state ub16 {label}")
    assert_close_fa(o1, ref_o, o0, name=f"o ub16 vs default {label}", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(s1, ref_s, s0, name=f"final_state ub16 vs default {label}", factor=2.0, noise=1e-3 * ref_s.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fam, D, l2norm, regime",
    # K = 128 only (the benchmarked shape): the U recast and the bf16 tile are head-dim agnostic (K = 64 builds: the
    # compile-only tests above), and every build costs GPU-host time
    [(KDA, 128, True, "weak"), (GDN, 128, True, "weak")],
    ids=["kda-d128", "gdn-d128"],
)
def test_ub16_varlen_u_is_the_default_u_rounded_and_outputs_match_recurrence(fam, D, l2norm, regime):
    """Varlen batch (``_parallel_cases.LENGTHS``: 1-token, one-chunk, one-past, empty, 24-chunk sequences; GVA, h0 / ht):
    the bf16 U in the first half of the ``u`` region equals the default plan's fp32 U rounded to bf16 on every active
    slot (the same fp32 values rounded at the store: bitwise), the second half is untouched (all-ones bytes), the other
    prep arrays are bitwise the default's; o and the final state by the FlashAttention rule against the fp32 recurrence
    and within twice the default's error; the empty sequence passes its state through."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    H = 4
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), H, 2, D, l2norm, len(cases.LENGTHS), regime)
    o0, s0, ws0 = cases.execute_variant(fam, None, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1, ws1 = cases.execute_variant(fam, "ub16", q, k, v, g, beta, h0, cu, l2norm)
    slots = sum(cases.LENGTHS) // 64 + len(cases.LENGTHS)
    idx = torch.tensor(cases.active_slots(cases.LENGTHS), device="cuda")
    u_f32 = _u_regions(ws0, slots, H, D)[0][idx]
    _, u_b16, tail = _u_regions(ws1, slots, H, D)
    assert torch.isfinite(u_f32).all()
    diff = (u_b16[idx].float() - u_f32.to(torch.bfloat16).float()).abs().max().item()
    assert torch.equal(u_b16[idx], u_f32.to(torch.bfloat16)), f"bf16 U != bf16(default fp32 U): max diff {diff}"
    assert bool((tail == 0xFF).all()), "the bf16 U wrote past the first half of the u region"
    names = ["w", "kd", "qg", "p", "ge"] + (["rf"] if fam is GDN else [])  # every other array the prep writes (rf: GDN only)
    cases.assert_prep_arrays_close(ws0, ws1, cases.LENGTHS, H, D, names, bitwise=names, label="ub16")
    assert torch.isfinite(o1.float()).all() and torch.isfinite(s1).all()
    _check_against_refs_and_default(fam, o1, s1, o0, s0, q, k, v, g, beta, h0, l2norm, cu, False, "varlen")
    assert torch.equal(s1[3], h0[3])


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_ub16_dense_with_states_and_long_sequence_match_recurrence(fam):
    """A dense [B, L] batch (B = 2, L = 300: the dense slot table) and one 4096-token THD sequence without cu_seqlens
    (64 chunks through the state pass: the bf16 U's rounding accumulates over the longest walk), both with initial and
    final states, K = 128, L2 norm: the FlashAttention rule against the fp32 recurrence and within twice the default's
    error."""
    _gpu(fam)
    import _parallel_cases as cases

    for lead, batched in (((2, 300), True), ((4096,), False)):  # both dense-slot-table plans: the same compiled kernels
        q, k, v, g, beta, h0 = cases.inputs(fam, lead, 2, 2, 128, True, lead[0] if batched else 1, "weak")
        o0, s0, _ = cases.execute_variant(fam, None, q, k, v, g, beta, h0, None, True)
        o1, s1, _ = cases.execute_variant(fam, "ub16", q, k, v, g, beta, h0, None, True)
        _check_against_refs_and_default(fam, o1, s1, o0, s0, q, k, v, g, beta, h0, True, None, batched, str(lead))


@pytest.mark.gpu
@pytest.mark.detector
def test_ub16_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The ``ub16`` plan (KDA; the host path is the family-agnostic default's): no host sync, no allocation over three
    executes, a CUDA-graph replay equal to eager."""
    _gpu(KDA)
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA, variant="ub16")
