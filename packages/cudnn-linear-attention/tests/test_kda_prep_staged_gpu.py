"""The KDA prep kernel's staged-store options (``kda/chunk_parallel_prep_kernel.py``, module docstring "Staged kd and
W", session 8, issue #7), ON by default since the session-8 A/B (H200, T = 32k, H = 64: prep 2270.5 vs 2587.8 us); the
kernel without them is the A/B baseline ``kp7`` (``set_parallel_options(plan, "kp7")``, both off), ``staged_kd`` alone
is reached through ``set_parallel_options(plan, {"prep": {...}})``:

- ``staged_kd`` (needs ``ref_table``, the default): ``(K exp(G_C - G))^T`` staged in shared memory (G's dead tail,
  XOR-swizzled: conflict-free) and written by coalesced 16-byte stores -- whole 128-byte channel rows per warp --
  instead of 8 scattered 2-byte stores per 16-byte chunk from registers (half sectors);
- ``staged_w``: ``-Wm`` staged from the accumulator in shared memory (the G / A region, dead in step 5) and written by
  warpgroup 1 by 16-byte stores instead of 4-byte fragment stores (half sectors), after one named barrier.

Both compute every value by the same operations as the kernel without them (kd: the same fp32 product, rounded once to
bf16; -Wm: the same accumulator, negated and rounded once), so the contract is BITWISE: every prep workspace array, o
and the final state equal the ``kp7`` plan's bit for bit.

GPU tier (``gpu``): fresh random inputs, poisoned outputs and an all-ones (NaN) workspace; the varlen batch of
``_parallel_cases.LENGTHS`` (1-token, one-chunk, one-past-a-chunk, empty and 24-chunk sequences; GVA 4 value heads over
2 q/k heads; initial and final states): the options against ``kp7`` (bitwise), o and the final state also by the
FlashAttention rule against the fp32 recurrence; both options on a dense [2, 300] batch (K = 64) and one 4096-token THD
sequence (K = 128) against the recurrence; a warm execute with both never syncs or allocates and replays under
CUDA-graph capture.

Compile tier (``compile_only``, CPU, ``CUTE_DSL_ARCH=sm_90a``): the fields default on (the default key is both), a key
with ``ref_table`` off and the staged stores left on and ``staged_w`` without ``staged_kd`` (alone, ptxas spills at K =
128) are ValueErrors, every KDA prep baseline of ``PARALLEL_VARIANTS`` is an accepted key; both options (the default
key) at K = 128 (varlen, fp32 g, L2 norm) and K = 64 (dense, bf16 g), and ``staged_kd`` alone at K = 128, build with
256 threads at two CTAs per SM, the unstaged kernel's WGMMAs, 18 CTA barriers (+ one warpgroup named barrier with
``staged_w``), no local memory, frame size 0, and the designed stores: no 2-byte kd global store (only P's 32 remain),
D / 4 2-byte shared stores, D / 32 more 16-byte global stores (kd), no 4-byte W fragment store and D / 16 more 16-byte
global stores (W); the ``kp7`` K = 128 build is checked to fail those store counts. Four prep compiles, about 25 s on
one core.

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_kda_prep_staged_gpu.py -q
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import frame_sizes, kernel_symbols

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA  # noqa: E402
from _prep_cases import PREP_ARRAYS, skip_unless_kda_dsl  # noqa: E402
from _prep_cases import require_kda_gpu as _gpu  # noqa: E402

KW = {"prep": {"staged_kd": True, "staged_w": True}}  # both: the default key since session 8 (measured as kp8)
K_ONLY = {"prep": {"staged_kd": True, "staged_w": False}}  # staged_w needs staged_kd (alone it spills at K = 128)
KP7 = "kp7"  # neither: the A/B baseline, the reference of the bitwise checks


# ---- GPU tier --------------------------------------------------------------------------------------------------------


# Pruned to four ids (each compiles the option's prep kernel and kp7's for its configuration; the state pass and the
# output kernel are shared per head dim): both head dims, L2 norm on and off, g fp32 and bf16, both gate regimes, both
# options together (the default) and staged_kd alone (staged_w needs it).
@pytest.mark.gpu
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype, variant",
    [
        (128, True, "safe_gate", "float32", KW),
        (128, False, "weak", "bfloat16", K_ONLY),
        (128, True, "weak", "float32", KW),
        (64, False, "safe_gate", "bfloat16", KW),
    ],
    ids=["d128-l2-strong-kw", "d128-weak-bf16g-kd", "d128-l2-weak-kw", "d64-strong-bf16g-kw"],
)
def test_staged_stores_are_bitwise_kp7_and_match_the_recurrence(D, l2norm, regime, g_dtype, variant):
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_prep_bitwise(KDA, KP7, variant, D, l2norm, regime, g_dtype, PREP_ARRAYS, f"{variant['prep']} vs kp7")


@pytest.mark.gpu
def test_staged_dense_batch_and_long_thd_sequence():
    """Both options at K = 64 on a dense [B, L] batch (B = 2, L = 300: the dense slot table, a length not a multiple of
    64, no L2 norm, bf16 g) and at K = 128 on one 4096-token THD sequence (64 chunks, L2 norm), no initial state: the
    FlashAttention rule against the fp32 recurrence."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_variant_dense_and_long_thd(KDA, KW, 64, KW)


@pytest.mark.gpu
@pytest.mark.detector
def test_staged_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The plan with both options executes with no host sync, no allocation (three executes), and a CUDA-graph replay
    equal to eager."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA, KW)


# ---- compile tier ----------------------------------------------------------------------------------------------------

BASE = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
BASE64 = dict(head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False)


def _compile_prep(key, tmp_path):
    import _parallel_cases as cases

    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KimiDeltaAttentionParallelPrep

    return cases.compile_prep_ptx(KimiDeltaAttentionParallelPrep, key, tmp_path, 4 if key.g_dtype == "Float32" else 2)


def _count(ptx: str, pattern: str) -> int:
    return len(re.findall(pattern, ptx))


def _stores(ptx: str) -> dict:
    return {
        "st.global.b16": _count(ptx, r"\bst\.global\.b16\s"),  # kd elements (default) and P elements (always: 32)
        "st.global.v2.b16": _count(ptx, r"\bst\.global\.v2\.b16\s"),  # W fragment pairs (default)
        "st.global.v4": _count(ptx, r"\bst\.global\.v4\.b32\s"),  # qg (always), kd / W (staged)
        "st.shared.b16": _count(ptx, r"\bst\.shared\.b16\s"),  # the staged kd
        "st.shared.v2.b16": _count(ptx, r"\bst\.shared\.v2\.b16\s"),  # the staged W pairs
        "named bar": _count(ptx, r"bar\.sync\s+1,\s*128;"),
    }


def _expected(d: int, kd: bool, w: bool) -> dict:
    """The designed store counts per thread (PTX, unrolled): P 32 2-byte stores; qg d / 32 16-byte stores; kd d / 4
    2-byte stores to global (default) or to shared plus d / 32 16-byte global stores; W d / 4 pairs to global (default)
    or to shared plus d / 16 16-byte global stores and one named barrier."""
    return {
        "st.global.b16": 32 + (0 if kd else d // 4),
        "st.global.v2.b16": 0 if w else d // 4,
        "st.global.v4": d // 32 + (d // 32 if kd else 0) + (d // 16 if w else 0),
        "st.shared.b16": d // 4 if kd else 0,
        "st.shared.v2.b16": d // 4 if w else 0,
        "named bar": 1 if w else 0,
    }


def _shape(ptx: str, tmp_path, d: int) -> None:
    """One cudnn-prefixed kernel, 256 threads at two CTAs per SM, every build's WGMMAs (D / 2 m64n16k16, D / 8
    m64n64k16), 18 CTA barriers, no local memory, frame size 0."""
    names = kernel_symbols(ptx)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kdachunk_parallel_prep" in names[0], names
    assert ".reqntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n16k16") == d // 2 and ptx.count("wgmma.mma_async.sync.aligned.m64n64k16") == d // 8
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == 18 and not re.findall(r"bar\.sync\s+[2-9]", ptx)
    assert "ld.local" not in ptx and "st.local" not in ptx
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), frames


@pytest.mark.compile_only
def test_staged_fields_default_on_and_their_prerequisite():
    """``staged_kd`` / ``staged_w`` default to True since session 8 (the default key is both; ``kp7`` turns both off);
    ``ref_table`` off with the staged stores left on (kd is formed from the ref_table element pass) and ``staged_w``
    without ``staged_kd`` (alone ptxas spills at K = 128) are ValueErrors naming the accepted combinations; every KDA
    prep baseline of ``PARALLEL_VARIANTS`` (``kp5`` / ``kn`` turn ``ref_table`` off, so the staged stores too) is a key
    the kernel accepts."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    key = KdaParallelPrepKey(**BASE)
    assert key.staged_kd and key.staged_w
    kp7 = PARALLEL_VARIANTS[KP7]["prep"]
    assert kp7 == {"staged_kd": False, "staged_w": False}
    assert key == KdaParallelPrepKey(**BASE, **KW["prep"]) != KdaParallelPrepKey(**BASE, **kp7)
    with pytest.raises(ValueError, match=r"staged_kd=True needs ref_table=True"):
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, ref_table=False, tiled_solve=False, lean_gates=False))
    with pytest.raises(ValueError, match=r"staged_w=True needs staged_kd=True.*'staged_kd': False, 'staged_w': False"):
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, staged_kd=False))
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **KW["prep"]))  # accepted
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **K_ONLY["prep"]))  # accepted
    for name in ("kp5", "kn", "kp6", KP7):  # accepted: the baselines
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **PARALLEL_VARIANTS[name]["prep"]))


@pytest.mark.compile_only
def test_staged_builds_without_spills_with_the_designed_stores(tmp_path):
    """Both options (the default key) at K = 128 (varlen, fp32 g, L2 norm) and K = 64 (dense, bf16 g, no L2 norm),
    ``staged_kd`` alone at K = 128: ``_shape`` and exactly the store counts of ``_expected``; the ``kp7`` K = 128 build
    has the unstaged counts (so the staged counts are not what any build gives: the check fails on the kernel without
    the options)."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey

    assert KdaParallelPrepKey(**BASE) == KdaParallelPrepKey(**BASE, staged_kd=True, staged_w=True)  # "kw" is the default's build
    for name, base, kd, w in (("kw", BASE, True, True), ("k", BASE, True, False), ("kw64", BASE64, True, True)):
        ptx = _compile_prep(KdaParallelPrepKey(**base, staged_kd=kd, staged_w=w), tmp_path / name)
        _shape(ptx, tmp_path / name, base["head_dim"])
        assert _stores(ptx) == _expected(base["head_dim"], kd, w), (name, _stores(ptx), _expected(base["head_dim"], kd, w))
    unstaged = _compile_prep(KdaParallelPrepKey(**BASE, **PARALLEL_VARIANTS[KP7]["prep"]), tmp_path / "kp7")
    _shape(unstaged, tmp_path / "kp7", 128)
    assert _stores(unstaged) == _expected(128, False, False) != _expected(128, True, True), _stores(unstaged)
