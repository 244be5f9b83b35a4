"""The KDA prep kernel's solve and gate options (``kda/chunk_parallel_prep_kernel.py``, module docstring "Solve and gate
options"), ON by default since session 6 (H200, T = 8k, H = 16: prep 174.9 us against 182.8 without them); the kernel
without them, the session-6 first default, is the A/B baseline ``kp6`` (``set_parallel_options(plan, "kp6")``:
``{"prep": {"tiled_solve": False, "lean_gates": False, "staged_kd": False, "staged_w": False}}``: without the session-8
staged stores either, which are bitwise too -- ``test_kda_prep_staged_gpu.py``):

- ``tiled_solve``: the solve's off-diagonal bands on a 1 x 4 register tile per thread (16-byte shared reads of A, T and
  Y: about a quarter of the band solve's shared-memory wavefronts);
- ``lean_gates`` (needs ``tiled_solve``): step 1's g loads from one base pointer and a 32-bit token stride, predicated
  on the row being in the chunk (no clamp, no select: about 3 SASS instructions per load instead of 9).

Both compute every value by the same operations in the same order as the kernel without them (the solve's sums keep
their order, every product an FMA as there; a g row past the chunk is 0 either way), so the contract is BITWISE: every
prep workspace array, o and the final state of the default plan equal ``kp6``'s (and ``tiled_solve`` alone's) bit for
bit. A rounding-level difference shows as the bitwise tests alone failing while the recurrence checks pass (then the FMA
contraction of the tiled sums differs from the untiled one's: read the failure's per-array errors). (``pack_round``, q / k
rounded to bf16 in pairs, lost the A/B -- 183.2 against 182.8 us -- and is gone.)

GPU tier (``gpu``): fresh random inputs, poisoned outputs and an all-ones (NaN) workspace; the varlen batch of
``_parallel_cases.LENGTHS`` (1-token, one-chunk, one-past-a-chunk, empty and 24-chunk sequences; GVA 4 value heads over
2 q/k heads; initial and final states) at K = 128 and 64, L2 norm on / off, g fp32 / bf16, weak and fla ``safe_gate``
decays: the default against ``kp6`` (four ids) and ``tiled_solve`` alone (two ids); o and the final state also by the
FlashAttention rule against the fp32 recurrence. ``kp6`` on a dense [2, 300] batch (K = 64) and one 4096-token THD
sequence (K = 128) against the recurrence; a warm ``kp6`` execute never syncs or allocates and replays under CUDA-graph
capture (the default's own: ``test_kda_parallel_gpu.py``).

Compile tier (``compile_only``, CPU, ``CUTE_DSL_ARCH=sm_90a``): the fields default on, ``lean_gates`` without
``tiled_solve`` is a ValueError, ``pack_round`` is no field; the default, ``tiled_solve`` alone and ``kp6`` at K = 128
(varlen, fp32 g, L2 norm), the default and ``kp6`` at K = 64 (dense, bf16 g) build with the same WGMMAs, 256 threads at
two CTAs per SM, 18 CTA barriers (+ the staged stores' named barrier, not in ``kp6``), no local memory, frame size 0; the tiled solve reads shared memory by 16-byte vectors
(scalar ``ld.shared`` 267 -> 11 at K = 128) with every product still an FMA (``kp6``'s FMA count + 320 at both head dims:
the unrolled 1 x 4 tile); ``lean_gates`` removes at least 2 PTX instructions per g load. Three prep compiles at K = 128
and two at K = 64, about 20 s on one core.

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_kda_prep_speed_gpu.py -q
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

KP6 = {
    "prep": {"tiled_solve": False, "lean_gates": False, "staged_kd": False, "staged_w": False}
}  # the session-6 first default (variant kp6): the A/B baseline
TS = {"prep": {"lean_gates": False}}  # tiled_solve alone


# ---- GPU tier --------------------------------------------------------------------------------------------------------


# Pruned to six ids (each compiles the default's and the baseline's prep kernel for its configuration; the state pass
# and the output kernel are shared per head dim): both head dims, L2 norm on and off, g fp32 and bf16 (lean_gates reads
# both), both gate regimes, the default against kp6 (both options) and against tiled_solve alone (lean_gates).
@pytest.mark.gpu
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype, variant",
    [
        (128, True, "safe_gate", "float32", KP6),
        (128, True, "weak", "float32", TS),
        (128, False, "safe_gate", "bfloat16", KP6),
        (128, True, "weak", "bfloat16", KP6),
        (64, True, "safe_gate", "float32", KP6),
        (64, False, "weak", "bfloat16", TS),
    ],
    ids=["d128-l2-strong-kp6", "d128-l2-weak-ts", "d128-strong-bf16g-kp6", "d128-l2-weak-bf16g-kp6", "d64-l2-strong-kp6", "d64-weak-bf16g-ts"],
)
def test_default_is_bitwise_the_baseline_and_matches_the_recurrence(D, l2norm, regime, g_dtype, variant):
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_prep_bitwise(KDA, variant, None, D, l2norm, regime, g_dtype, PREP_ARRAYS, f"default vs {variant['prep']}")


@pytest.mark.gpu
def test_baseline_dense_batch_and_long_thd_sequence():
    """``kp6`` at K = 64 on a dense [B, L] batch (B = 2, L = 300: the dense slot table, no L2 norm, bf16 g) and at K = 128
    on one 4096-token THD sequence (64 chunks, L2 norm), no initial state: the FlashAttention rule against the fp32
    recurrence (the default's own: ``test_kda_parallel_gpu.py``)."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_variant_dense_and_long_thd(KDA, KP6, 64, KP6)


@pytest.mark.gpu
@pytest.mark.detector
def test_baseline_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The ``kp6`` plan executes with no host sync, no allocation (three executes), and a CUDA-graph replay equal to eager
    (the default's own: ``test_kda_parallel_gpu.py``)."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA, KP6)


# ---- compile tier ----------------------------------------------------------------------------------------------------

BASE = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)


def _compile_prep(key, tmp_path):
    """PTX text of the prep kernel of ``key``, built directly (not through the kernel cache), dumped under ``tmp_path``."""
    import _parallel_cases as cases

    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KimiDeltaAttentionParallelPrep

    return cases.compile_prep_ptx(KimiDeltaAttentionParallelPrep, key, tmp_path, 4 if key.g_dtype == "Float32" else 2)


def _shape(ptx: str, tmp_path, d: int, staged: bool = True) -> None:
    """The prep kernel's shape, with the solve and gate options or without: one cudnn-prefixed kernel, 256 threads at two
    CTAs per SM, D / 2 m64n16k16 and D / 8 m64n64k16 WGMMAs, 18 CTA barriers (and, with the staged stores -- ``staged``,
    the default key's --, warpgroup 1's one named barrier), no local memory, frame size 0."""
    names = kernel_symbols(ptx)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kdachunk_parallel_prep" in names[0], names
    assert ".reqntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n16k16") == d // 2 and ptx.count("wgmma.mma_async.sync.aligned.m64n64k16") == d // 8
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == 18
    assert len(re.findall(r"bar\.sync\s+[1-9]", ptx)) == len(re.findall(r"bar\.sync\s+1,\s*128;", ptx)) == (1 if staged else 0)
    assert "ld.local" not in ptx and "st.local" not in ptx
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), frames


def _scalar_shared_loads(ptx: str) -> int:
    return len(re.findall(r"ld\.shared\.(b32|f32|u32)\b", ptx))


@pytest.mark.compile_only
def test_solve_and_gate_fields_default_on_and_their_prerequisite():
    """``tiled_solve`` / ``lean_gates`` default to True (the default key is the session-6 kernel with both; ``kp6`` turns
    both off); ``lean_gates`` without ``tiled_solve`` (it spills at the 128-register cap) is a ValueError naming the
    accepted combinations; ``pack_round`` (removed after the A/B) is no field of the key."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    assert PARALLEL_VARIANTS["kp6"] == KP6  # this file's baseline is the named variant
    key = KdaParallelPrepKey(**BASE)
    assert key.tiled_solve and key.lean_gates
    assert key == KdaParallelPrepKey(**BASE, tiled_solve=True, lean_gates=True) != KdaParallelPrepKey(**BASE, **KP6["prep"])
    with pytest.raises(ValueError, match=r"lean_gates=True needs tiled_solve=True.*'tiled_solve': False, 'lean_gates': False"):
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, tiled_solve=False))
    with pytest.raises(TypeError, match="pack_round"):
        KdaParallelPrepKey(**BASE, pack_round=True)
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **KP6["prep"]))  # accepted: the baseline
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **TS["prep"]))  # accepted: tiled_solve alone


@pytest.mark.compile_only
def test_default_builds_without_spills_vectorizes_the_solve_and_leans_the_gates(tmp_path):
    """K = 128 (varlen, fp32 g / beta, L2 norm): the default, ``tiled_solve`` alone and ``kp6`` keep one shape
    (``_shape``); the tiled solve's shared reads are 16-byte vectors (scalar ``ld.shared`` at most 32, against at least
    256 in ``kp6``: the band solve's column reads) and its products all FMAs (``kp6``'s ``fma.rn.f32`` count + 320: 576
    band FMAs unrolled on the 1 x 4 tile instead of 256, so no product became a separate multiply and add -- the bitwise
    premise); ``lean_gates`` has at least 64 fewer PTX instructions than ``tiled_solve`` alone (32 g loads without the
    clamp and select). The default and ``kp6`` at K = 64 (dense, bf16 g, no L2 norm) the same way."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    import _parallel_cases as cases

    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey

    default = _compile_prep(KdaParallelPrepKey(**BASE), tmp_path / "default")
    _shape(default, tmp_path / "default", 128)
    ts = _compile_prep(KdaParallelPrepKey(**BASE, **TS["prep"]), tmp_path / "ts")
    _shape(ts, tmp_path / "ts", 128)
    kp6 = _compile_prep(KdaParallelPrepKey(**BASE, **KP6["prep"]), tmp_path / "kp6")
    _shape(kp6, tmp_path / "kp6", 128, staged=False)
    assert _scalar_shared_loads(kp6) >= 256 and _scalar_shared_loads(ts) <= 32 and _scalar_shared_loads(default) <= 32, (
        _scalar_shared_loads(kp6),
        _scalar_shared_loads(ts),
        _scalar_shared_loads(default),
    )
    assert ts.count("fma.rn.f32") == default.count("fma.rn.f32") == kp6.count("fma.rn.f32") + 320, (kp6.count("fma.rn.f32"), default.count("fma.rn.f32"))
    assert ts.count("mul.f32") == kp6.count("mul.f32")
    assert cases.ptx_instructions(default) <= cases.ptx_instructions(ts) - 64, (cases.ptx_instructions(default), cases.ptx_instructions(ts))

    key64 = dict(head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False)
    d64 = _compile_prep(KdaParallelPrepKey(**key64), tmp_path / "d64")
    _shape(d64, tmp_path / "d64", 64)
    d64_kp6 = _compile_prep(KdaParallelPrepKey(**key64, **KP6["prep"]), tmp_path / "d64kp6")
    _shape(d64_kp6, tmp_path / "d64kp6", 64, staged=False)
    assert d64.count("fma.rn.f32") == d64_kp6.count("fma.rn.f32") + 320 and _scalar_shared_loads(d64) <= 32 < _scalar_shared_loads(d64_kp6)
