"""GPU tests of the causal_conv1d forward's bulk-copy variant (``CausalConv1d.bulk_stages`` / ``bulk_group``,
``Conv1dFwdKey.bulk_stages``; fwd_bulk_kernel.py: x staged through a ring of shared-memory stages by ``cp.async.bulk`` on
mbarriers) against the default plan (the register run grid) and the fp32 reference.

- Bitwise: the variant runs the default's per-token fp32 math in its order, so y and the final states equal the default
  plan's bit for bit (outputs poisoned with NaN first, so an unwritten token shows), both within the FlashAttention rule
  of ``causal_conv1d_ref``.
- Grid: varlen with 1-token sequences, a sequence shorter than W - 1 and sequences spanning many runs, initial / final
  states; a batch of 1-token sequences; dense [B, L, D]; a strided token view; partial channel CTAs (49 bf16 vectors,
  50 fp32 ones); bf16 / fp16 / fp32; W 2-4; bias and SiLU on and off; steady on and off; 2-4 stages of 2-16 rows; the
  plan's default grid, 3 runs and 1056 CTAs. A second, tiny batch (T = 3: a run shorter than one stage) re-binds each
  varlen plan.
- Detectors on a variant plan: warm executes neither synchronize nor allocate; the first execute inside a CUDA-graph
  capture replays like eager.

Run: ``source ci/gpu_env.sh; python3 -m pytest -q packages/cudnn-linear-attention/tests/test_conv1d_bulk_gpu.py``.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_linear_attention import causal_conv1d_ref
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

LENGTHS = [1, 130, 1, 2, 517, 1, 64, 3, 1000, 1, 3000]
TINY = [1, 2]

#: (stages, group, steady, grid_ctas, width, bias, activation, layout, dtype, D); grid_ctas None: the plan's default
CASES = [
    (4, 8, None, None, 4, True, "silu", "varlen", "bfloat16", 392),  # the benchmark's family; a partial channel CTA
    (2, 16, False, 3, 3, False, None, "varlen", "bfloat16", 384),  # few long runs crossing every sequence
    (4, 4, None, None, 2, True, None, "ones", "float16", 256),  # 1-token sequences with states
    (3, 8, True, 1056, 4, False, "silu", "dense", "bfloat16", 384),  # batch boundaries inside stages
    (4, 2, None, None, 4, True, None, "strided", "float16", 384),
    (2, 8, True, 7, 4, True, "silu", "varlen", "float32", 4096),  # fp32: 8 channel blocks, 7 CTAs -> one run each
    (4, 8, None, None, 4, True, "silu", "varlen", "float32", 400),  # 100 fp32 vectors: a partial channel CTA
]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")


def _cu(lengths):
    from cudnn_testing.data import cu_seqlens

    return cu_seqlens(lengths, "cuda")


def _inputs(width, bias, layout, dtype, D, lengths):
    dt = getattr(torch, dtype)
    cu = init = None
    T = sum(lengths)
    if layout == "dense":
        x = torch.randn(3, max(T // 3, 1), D, device="cuda", dtype=dt)
    elif layout == "strided":
        x = torch.randn(T, 3 * D, device="cuda", dtype=dt)[:, D : 2 * D]
        cu = _cu(lengths)
    elif layout == "ones":
        n = min(T, 600)
        x = torch.randn(n, D, device="cuda", dtype=dt)
        cu = _cu([1] * n)
        init = torch.randn(n, D, width - 1, device="cuda", dtype=dt)
    else:
        x = torch.randn(T, D, device="cuda", dtype=dt)
        cu = _cu(lengths)
        init = torch.randn(len(lengths), D, width - 1, device="cuda", dtype=dt)
    w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
    b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
    return x, w, b, cu, init


def _plan(x, w, b, cu, init, fin, activation, bulk, steady, grid_ctas):
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    plan = CausalConv1d(x, w, torch.empty_like(x), b, cu, init, fin, activation)
    if bulk is not None:
        plan.bulk_stages, plan.bulk_group = bulk
        plan.steady = steady
        if grid_ctas is not None:
            plan.grid_ctas = grid_ctas
    plan.compile()
    assert plan.compile_key().bulk_stages == (bulk[0] if bulk is not None else 0)
    return plan


@pytest.mark.parametrize(("stages", "group", "steady", "grid_ctas", "width", "bias", "activation", "layout", "dtype", "D"), CASES)
def test_bulk_variant_is_bitwise_the_default(stages, group, steady, grid_ctas, width, bias, activation, layout, dtype, D):
    plans = {}
    for lengths in (LENGTHS, TINY):
        x, w, b, cu, init = _inputs(width, bias, layout, dtype, D, lengths)
        with_final = layout in ("varlen", "ones")
        n_seqs = cu.shape[0] - 1 if cu is not None else x.shape[0]
        outs = []
        for bulk in (None, (stages, group)):
            y = torch.full(x.shape, float("nan"), device="cuda", dtype=x.dtype)
            fin = torch.full((n_seqs, D, width - 1), float("nan"), device="cuda", dtype=x.dtype) if with_final else None
            key = (bulk, tuple(x.shape) if cu is None else None)
            if key not in plans:
                plans[key] = _plan(x, w, b, cu, init, fin, activation, bulk, steady, grid_ctas)
            plans[key].execute(x, w, y, b, cu, init, fin)
            outs.append((y, fin))
        torch.cuda.synchronize()
        (y0, f0), (y1, f1) = outs
        y_ref, f_ref = causal_conv1d_ref(x, w, b, activation, cu, init)
        assert_close_fa(y1, y_ref, y_ref.to(y1.dtype), name=f"y (bulk {stages}x{group}, T={sum(lengths)})")
        assert torch.equal(y0, y1), (y0.float() - y1.float()).abs().max()
        if with_final:
            assert torch.equal(f0, f1)


def test_bulk_variant_large_dense_is_bitwise_the_default():
    """A benchmark-sized dense batch (T 8k x D 4096 bf16, W 4, bias, SiLU): every run is many stages long."""
    x, w, b, _, _ = _inputs(4, True, "dense", "bfloat16", 4096, [24576])
    outs = []
    for bulk in (None, (4, 8), (4, 4)):
        y = torch.full(x.shape, float("nan"), device="cuda", dtype=x.dtype)
        _plan(x, w, b, None, None, None, "silu", bulk, None, None).execute(x, w, y, b)
        outs.append(y)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_bulk_variant_no_sync_no_alloc_and_replays_from_a_graph():
    from cudnn_testing import detectors

    x, w, b, cu, init = _inputs(4, True, "varlen", "bfloat16", 384, LENGTHS)
    y = torch.empty_like(x)
    plan = _plan(x, w, b, cu, init, None, "silu", (4, 8), None, None)
    detectors.assert_capture_matches_eager(lambda: plan.execute(x, w, y, b, cu, init), [y])
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y, b, cu, init), repeats=3)
