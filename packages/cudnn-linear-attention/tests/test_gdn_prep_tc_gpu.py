"""The restructured Gated DeltaNet prep kernel (``gdn/chunk_parallel_prep_tc_kernel.py``), GDN's default prep since
session 6 (``GdnParallelPrepKey.restructured = True``, ``tc_ctas_per_sm = 3``), and its two-CTA form
(``tc_ctas_per_sm = 2``), against the one-warpgroup prep kernel (``gdn/chunk_parallel_prep_kernel.py``, the
``gdn-prep-base`` variant): GPU correctness and the compile-only build checks.

GPU tier (``gpu``): fresh random inputs, poisoned outputs and a poisoned workspace (all-ones bytes: NaN in bf16 and
fp32); o and the final state by the FlashAttention rule against the fp32 token-by-token recurrence
(``_parallel_cases.check``) and against the ``gdn-prep-base`` plan (at most twice its error plus the rule's noise),
and every workspace array the prep kernel writes (``w``, ``u``, ``kd``, ``qg``, ``p``, ``ge``, ``rf``) against the
one-warpgroup prep kernel's within bf16 rounding of the array's scale, on every active chunk slot -- the failure
message lists every array's error, so a wrong result points at the step that differs. The varlen batch has 1-token,
one-chunk, one-past-a-chunk, empty and long (24-chunk) sequences, GVA (4 value heads over 2 q/k heads) and initial /
final states.

Compile tier (``compile_only``, CPU with ``CUTE_DSL_ARCH=sm_90a``): the kernel builds at K = 128 and 64 with no local
memory and frame size 0 at 256 threads and two or three CTAs per SM, its WGMMAs, vector stores and barriers are the
designed ones, it has well under the one-warpgroup kernel's instructions, and the key routes as designed.

``staged_w`` (session 8, issue #7; ``GdnParallelPrepKey.staged_w``, default ON since the session-8 A/B -- H200, T =
32k, H = 64: prep 1891.3 vs 2065.5 us --; the kernel without it is the A/B baseline ``gdn-prep7``; module docstring of
the kernel, "Staged W"): -Wm staged in Qn's dead bytes and written by 16-byte stores. So the restructured builds above
(``GTC``, the default) stage W; the two-CTA structure check builds the kernel without it. GPU: bitwise the kernel
without it (every prep array, o, the final state) and the FlashAttention rule against the recurrence, at three CTAs per
SM (K = 128, against ``gdn-prep7``) and two (K = 64). Compile: no spill at both, one warpgroup named barrier, the W
fragment stores replaced by D / 16 16-byte stores per thread, ValueError without ``restructured`` (so the one-warpgroup
kernel's keys set ``staged_w=False``: ``gdn-prep-base``).

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_gdn_prep_tc_gpu.py -q
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import frame_sizes, kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN  # noqa: E402

GTC = {"prep": {"restructured": True, "tc_ctas_per_sm": 2}}  # the two-CTA form (W staged: the default staged_w)
GTC3 = {}  # the default: three CTAs per SM (T over Qn, the bf16 inverses over A), W staged
BASE = "gdn-prep-base"  # the one-warpgroup prep kernel: the reference plan
PREP_ARRAYS = ("w", "u", "kd", "qg", "p", "ge", "rf")  # what the prep kernel writes (vnt, h: the state pass)


def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")


# ---- GPU tier --------------------------------------------------------------------------------------------------------


# Pruned to four ids (each compiles the one-warpgroup and the restructured prep kernel for its configuration; the state
# pass and the output kernel are shared per head dim; the 3-CTA id reuses the first id's reference kernels): both head dims, L2
# norm on and off, g and beta each in fp32 and bf16, both gate regimes (weak decay; strong decay where exp(G) underflows
# inside a chunk), two and three CTAs per SM (K = 64 at three CTAs: the dense test).
@pytest.mark.gpu
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype, beta_dtype, variant",
    [
        (128, True, "weak", "float32", "float32", GTC),
        (128, False, "safe_gate", "bfloat16", "bfloat16", GTC),
        (64, True, "safe_gate", "float32", "bfloat16", GTC),
        (128, True, "weak", "float32", "float32", GTC3),
    ],
    ids=["d128-l2-weak-fp32", "d128-strong-bf16gb", "d64-l2-strong-bf16b", "3cta-d128-l2-weak-fp32"],
)
def test_gtc_matches_recurrence_default_schedule_and_default_workspace(D, l2norm, regime, g_dtype, beta_dtype, variant):
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_prep_variant(GDN, variant, D, l2norm, regime, g_dtype, beta_dtype, PREP_ARRAYS, label="gtc", baseline=BASE)


@pytest.mark.gpu
def test_gtc_dense_batch_and_long_thd_sequence_with_narrow_state_pass():
    """Three CTAs per SM at K = 64 on a dense [B, L] batch (B = 2, L = 300: the dense slot table; no L2 norm, bf16 g),
    and the two-CTA form at K = 128 on one 4096-token THD sequence (64 chunks through the state pass), no initial
    state: the FlashAttention rule against the fp32 recurrence."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_variant_dense_and_long_thd(GDN, GTC3, 64, GTC)


@pytest.mark.gpu
@pytest.mark.detector
def test_gtc_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The two-CTA restructured prep's plan executes with no host sync, no allocation (three executes), and a
    CUDA-graph replay equal to eager (the default plan's: ``test_gdn_parallel_gpu.py``)."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(GDN, GTC)


STAGED_W = {"prep": {"staged_w": True}}  # session 8: -Wm through shared memory (default three CTAs per SM): the default
STAGED_W2 = {"prep": {"tc_ctas_per_sm": 2, "staged_w": True}}  # the same at two CTAs per SM
UNSTAGED = "gdn-prep7"  # the restructured kernel without staged_w (three CTAs per SM): the A/B baseline
UNSTAGED2 = {"prep": {"tc_ctas_per_sm": 2, "staged_w": False}}  # the same at two CTAs per SM


# Two ids (each compiles the staged kernel and the kernel without it): both head dims, both CTA counts, L2 norm on and
# off, g fp32 and bf16, both gate regimes.
@pytest.mark.gpu
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype, variant, reference",
    [(128, True, "weak", "float32", STAGED_W, UNSTAGED), (64, False, "safe_gate", "bfloat16", STAGED_W2, UNSTAGED2)],
    ids=["3cta-d128-l2-weak", "2cta-d64-strong-bf16g"],
)
def test_staged_w_is_bitwise_the_kernel_without_it(D, l2norm, regime, g_dtype, variant, reference):
    _gpu()
    torch = pytest.importorskip("torch")
    import _parallel_cases as cases

    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(GDN, (sum(cases.LENGTHS),), 4, 2, D, l2norm, len(cases.LENGTHS), regime)
    g = g.to(getattr(torch, g_dtype))
    o0, s0, ws0 = cases.execute_variant(GDN, reference, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1, ws1 = cases.execute_variant(GDN, variant, q, k, v, g, beta, h0, cu, l2norm)
    cases.assert_prep_arrays_close(ws0, ws1, cases.LENGTHS, 4, D, PREP_ARRAYS, PREP_ARRAYS, label=f"{variant['prep']}")
    do = (o0.float() - o1.float()).abs().max().item()
    ds = (s0 - s1).abs().max().item()
    assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{variant} vs {reference}: max |option - reference|: o {do}, final_state {ds}"
    ref_o, ref_s, low_o, low_s = cases.refs(GDN, q, k, v, g.float(), beta, h0, l2norm, cu, False)
    cases.check(o1, ref_o, low_o, f"o {variant}")
    cases.check(s1, ref_s, low_s, f"final_state {variant}")
    assert torch.equal(s1[3], h0[3])  # the empty sequence passes its state through


# ---- compile tier ----------------------------------------------------------------------------------------------------


def _compile_prep(key, tmp_path):
    """PTX text of the prep kernel ``key`` routes to, built directly (not through the kernel cache), and the dump dir."""
    import _parallel_cases as cases

    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep

    return cases.compile_prep_ptx(GatedDeltaNetParallelPrep.for_key(key), key, tmp_path)


def _instructions(ptx: str) -> int:
    import _parallel_cases as cases

    return cases.ptx_instructions(ptx)


@pytest.mark.compile_only
def test_gtc_routing_and_bad_combinations():
    """``restructured`` (default True since session 6) routes to the restructured module at three (default) or two CTAs
    per SM, ``restructured = False`` with ``staged_w = False`` (``gdn-prep-base``) to the one-warpgroup kernel; with
    ``prefetch`` or ``two_per_sm``, ``tc_ctas_per_sm`` other than 2 without it or other than 2 / 3 with it, and without it
    the default ``staged_w`` left on, it is a ValueError; the plan takes ``gdn-prep-base`` / ``gdn-prep7`` through
    ``set_parallel_options``, and the adapter's prep knobs select the one-warpgroup kernel (``_prep_options``: with
    ``staged_w`` off)."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")
    pytest.importorskip("cutlass")
    from _delta_rule_cases import compile_varlen_plan

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.gdn.chunk_parallel_prep_tc_kernel import GatedDeltaNetParallelPrepTc

    base = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    key = GdnParallelPrepKey(**base)
    assert key.restructured and key.tc_ctas_per_sm == 3 and GatedDeltaNetParallelPrep.for_key(key) is GatedDeltaNetParallelPrepTc
    assert GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, tc_ctas_per_sm=2)) is GatedDeltaNetParallelPrepTc
    assert GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, restructured=False, tc_ctas_per_sm=2, staged_w=False)) is GatedDeltaNetParallelPrep
    with pytest.raises(ValueError, match="staged_w=True needs restructured=True"):
        GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, restructured=False, tc_ctas_per_sm=2))
    assert GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, staged_w=False)) is GatedDeltaNetParallelPrepTc
    for bad in ({"prefetch": True}, {"two_per_sm": True}):
        with pytest.raises(ValueError, match="restructured takes neither"):
            GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, **bad))
    for bad in ({"restructured": False}, {"tc_ctas_per_sm": 4}):
        with pytest.raises(ValueError, match="tc_ctas_per_sm"):
            GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, **bad))
    plan = compile_varlen_plan(GDN, 1000, 5)
    assert plan._prep_options() == {}
    set_parallel_options(plan, BASE)
    assert plan._prep_options() == {"restructured": False, "tc_ctas_per_sm": 2, "staged_w": False}
    plan = compile_varlen_plan(GDN, 1000, 5)
    set_parallel_options(plan, UNSTAGED)
    assert plan._prep_options() == {"restructured": True, "staged_w": False}
    for knob, field in (("parallel_prefetch", "prefetch"), ("parallel_prep_two_per_sm", "two_per_sm")):
        plan = compile_varlen_plan(GDN, 1000, 5)
        setattr(plan, knob, True)
        assert plan._prep_options() == {field: True, "restructured": False, "tc_ctas_per_sm": 2, "staged_w": False}
        GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, **plan._prep_options()))  # a key the one-warpgroup kernel builds


@pytest.mark.compile_only
def test_gtc_prep_builds_without_spills_with_a_fraction_of_the_default_instructions(tmp_path):
    """The two-CTA form without ``staged_w`` (its W stores are the ones ``staged_w`` replaces:
    ``test_staged_w_builds_without_spills_with_16_byte_w_stores``) at K = 128 (varlen, fp32 g / beta, L2 norm): one
    kernel with the cudnn prefix, 256 threads at two CTAs per SM
    (``.minnctapersm 2``: registers capped at 128), no local memory, frame size 0; 2 x 8 K-major m64n64k16 WGMMAs (A,
    P: one warpgroup each) + 2 x (2 x 4) with the B operand MN-major (U = (T Diag(beta)) V, W = (T Diag(beta exp G)) Kn);
    every bf16 shared tile written 16 bytes at a time (no 16-bit shared stores), U by 8-byte and P / W by 4-byte pairs,
    qg by 16-byte vectors, V by four 16-byte cp.async per thread; 11 CTA barriers (2 gates / element pass, 1 after A / P,
    1 + 6 solve, 1 before U / W); the per-element decays of A and P by ``ex2.approx``; and under half the one-warpgroup prep
    kernel's PTX instructions. The default two-CTA form (W staged) at K = 64 (dense, bf16 g / beta, no L2 norm) builds
    the same way (WGMMAs, V loads, no 16-bit shared stores, no spill)."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GdnParallelPrepKey

    base = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    ptx = _compile_prep(GdnParallelPrepKey(**base, tc_ctas_per_sm=2, staged_w=False), tmp_path / "gtc")
    names = kernel_symbols(ptx)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "chunk_parallel_prep_tc" in names[0] and "cutlass" not in names[0].lower(), names
    assert ".reqntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", ptx)
    assert len(mma) == 32 == ptx.count("wgmma.mma_async") and mma.count("1") == 16, mma  # 16 with B MN-major (U, W)
    assert "st.shared.b16" not in ptx and "st.shared.u16" not in ptx and ptx.count("st.shared.v4.b32") >= 12
    assert ptx.count("st.global.v2.b32") == 32  # U: 2 blocks x 16 fp32 pairs
    assert ptx.count("st.global.b32") >= 48  # P (16) and W (2 x 16) bf16 pairs, rf, ge
    assert ptx.count("st.global.v4.b32") == 4 and ptx.count("cp.async.cg.shared.global") == 4  # qg, V
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == 11 and not re.findall(r"bar\.sync\s+[1-9]", ptx)
    assert ptx.count("ex2.approx") >= 48  # A and P: 32 decays each, less those ptxas-side analysis proves masked (sm_90a 4.8.1: 30 each)
    assert "ld.local" not in ptx and "st.local" not in ptx and all(f == 0 for f in frame_sizes(tmp_path / "gtc"))

    default = _compile_prep(GdnParallelPrepKey(**base, restructured=False, tc_ctas_per_sm=2, staged_w=False), tmp_path / "default")  # gdn-prep-base
    n_gtc, n_default = _instructions(ptx), _instructions(default)
    assert 0 < n_gtc < n_default / 2, (n_gtc, n_default)

    key64 = GdnParallelPrepKey(head_dim=64, g_dtype="BFloat16", beta_dtype="BFloat16", l2norm=False, varlen=False, tc_ctas_per_sm=2)
    ptx64 = _compile_prep(key64, tmp_path / "d64")
    assert ptx64.count("wgmma.mma_async") == 16 and ptx64.count("cp.async.cg.shared.global") == 2 and "st.shared.b16" not in ptx64
    assert "ld.local" not in ptx64 and all(f == 0 for f in frame_sizes(tmp_path / "d64"))


@pytest.mark.compile_only
@pytest.mark.parametrize("D", [128, 64])
def test_gtc_three_ctas_per_sm_builds_without_spills_in_70_kb(D, tmp_path):
    """``tc_ctas_per_sm = 3`` (the default key, W staged since session 8): ``.minnctapersm 3`` (registers capped at 80)
    with no local memory and frame size 0, the same WGMMAs and CTA barriers as the two-CTA build (plus ``staged_w``'s
    one named barrier of warpgroup 1), and shared memory small enough for three CTAs per SM (the highest static offset,
    the last per-token table, under 76 KB - 256 B: 3 x (76 KB + 1 KB reserved) <= 228 KB)."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GdnParallelPrepKey

    key = GdnParallelPrepKey(head_dim=D, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)  # the default
    assert key.tc_ctas_per_sm == 3 and key.staged_w
    ptx = _compile_prep(key, tmp_path)
    assert ".reqntid 256, 1, 1" in ptx and ".minnctapersm 3" in ptx
    assert ptx.count("wgmma.mma_async") == D // 4 and len(re.findall(r"bar\.sync\s+0;", ptx)) == 11
    assert len(re.findall(r"bar\.sync\s+[1-9]", ptx)) == len(re.findall(r"bar\.sync\s+1,\s*128;", ptx)) == 1  # staged_w's named barrier
    offsets = [int(x) for x in re.findall(r"\[%r\d+\+(\d+)\]", ptx)]
    assert max(offsets) < 76 * 1024 - 256, max(offsets)
    assert "ld.local" not in ptx and "st.local" not in ptx and all(f == 0 for f in frame_sizes(tmp_path))


@pytest.mark.compile_only
def test_staged_w_builds_without_spills_with_16_byte_w_stores(tmp_path):
    """``staged_w`` (default on since session 8) at K = 128 (three CTAs per SM: the default key) and K = 64 (two): no
    local memory, frame size 0, the unstaged kernel's WGMMAs and 11 CTA barriers plus one named barrier of warpgroup 1's
    128 threads; against the K = 128 build without it (``gdn-prep7``): the W fragment pairs (D / 4 ``st.global.b32``
    per thread) gone, D / 16 more 16-byte global stores and D / 4 bf16-pair shared stores. Without ``restructured`` it
    is a ValueError."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")
    pytest.importorskip("cutlass")
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey

    base = dict(g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    assert GdnParallelPrepKey(head_dim=128, **base) == GdnParallelPrepKey(head_dim=128, **base, tc_ctas_per_sm=3, staged_w=True)  # "d128" below
    with pytest.raises(ValueError, match="staged_w=True needs restructured=True"):
        GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(head_dim=128, **base, restructured=False, tc_ctas_per_sm=2, staged_w=True))

    def count(ptx, pattern):
        return len(re.findall(pattern, ptx))

    unstaged = _compile_prep(GdnParallelPrepKey(head_dim=128, **base, **PARALLEL_VARIANTS[UNSTAGED]["prep"]), tmp_path / "unstaged")  # gdn-prep7
    for name, d, ctas in (("d128", 128, 3), ("d64", 64, 2)):
        ptx = _compile_prep(GdnParallelPrepKey(head_dim=d, **base, tc_ctas_per_sm=ctas, staged_w=True), tmp_path / name)
        assert f".minnctapersm {ctas}" in ptx and ptx.count("wgmma.mma_async") == d // 4
        assert count(ptx, r"bar\.sync\s+0;") == 11 and count(ptx, r"bar\.sync\s+1,\s*128;") == 1
        assert count(ptx, r"\bst\.shared\.v2\.b16\s") == d // 4
        assert "ld.local" not in ptx and "st.local" not in ptx and all(f == 0 for f in frame_sizes(tmp_path / name))
        if d == 128:
            assert count(ptx, r"\bst\.global\.v4\.b32\s") == count(unstaged, r"\bst\.global\.v4\.b32\s") + d // 16
            assert count(ptx, r"\bst\.global\.b32\s") == count(unstaged, r"\bst\.global\.b32\s") - d // 4
            assert count(unstaged, r"bar\.sync\s+1,") == 0 and "st.shared.v2.b16" not in unstaged
