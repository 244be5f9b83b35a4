"""GPU tests of the causal_conv1d forward's run grid (``CausalConv1d.grid_ctas`` / ``Conv1dFwdKey.grid_ctas``: about
``grid_ctas`` CTAs, each walking one contiguous token run, ``kernel_runs`` in fwd_kernel.py; the default since session 6,
``grid_ctas`` None = 4 x the device's SMs, 528 on an H200) against the 64-token CTAs (``grid_ctas = 0``, ``kernel``) and
the fp32 reference.

- Bitwise: the run kernel does the 64-token kernel's fp32 math in its order, so y and the final states equal the
  64-token kernel's bit for bit (outputs poisoned with NaN first, so an unwritten token shows), and both are within the
  FlashAttention rule of ``causal_conv1d_ref``.
- Grid: varlen with 1-token sequences, sequences spanning many runs and initial / final states; a batch of 1-token
  sequences; dense [B, L, D]; a strided token view; odd channel counts (a partial channel CTA: 49 bf16 vectors, 50 fp32
  ones); bf16 / fp16 / fp32; W 2-4; bias and SiLU on and off; the default grid (4 x SMs; on an H200 528, and at these
  token counts the floor of 64 tokens per run caps it: 74 runs of 63 or 64 tokens, an uneven split), 3 (few long runs
  crossing every sequence), 7 with fp32 D = 4096 (fewer CTAs than the 8 channel blocks: one run per block) and 1056. A
  second, tiny batch (T = 3: one run shorter than a group of 4) re-binds each varlen plan. Pruned to 7 run-grid compiles
  (plus their 64-token twins), about 25 s of compiles.
- Detectors on the default plan: warm executes neither synchronize nor allocate; the first execute inside a CUDA-graph
  capture replays like eager; the public op (the run grid) gives the bits of the op with ``api.FWD_GRID_CTAS_DEFAULT = 0``.

Run: ``source ci/gpu_env.sh; python3 -m pytest -q packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py``.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_linear_attention import causal_conv1d_ref
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

# 1-token sequences at both ends and in the middle, a sequence shorter than W - 1, ones spanning many runs.
LENGTHS = [1, 130, 1, 2, 517, 1, 64, 3, 1000, 1, 3000]
TINY = [1, 2]  # T = 3: fewer tokens than runs (and than one group of 4)

#: (grid_ctas, width, bias, activation, layout, dtype, D); grid_ctas None: the plan's default (4 x SMs)
CASES = [
    (None, 4, True, "silu", "varlen", "bfloat16", 384),
    (None, 4, True, "silu", "varlen", "bfloat16", 392),  # 49 vectors: a partial channel CTA
    (3, 3, False, None, "varlen", "bfloat16", 384),
    (None, 2, True, None, "ones", "float16", 256),
    (1056, 4, False, "silu", "dense", "bfloat16", 384),
    (None, 4, True, None, "strided", "float16", 384),
    (7, 4, True, "silu", "varlen", "float32", 4096),  # 8 fp32 channel blocks: 7 // 8 -> 1 run each
]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")


def _cu(lengths):
    from cudnn_testing.data import cu_seqlens

    return cu_seqlens(lengths, "cuda")


def _check(out, ref, name):
    assert_close_fa(out, ref, ref.to(out.dtype), name=name)


def _inputs(width, bias, layout, dtype, D, lengths):
    """(x, w, b, cu, init) for the case; ``lengths`` is the varlen batch (dense / ones derive their own sizes from it)."""
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


def _n_seqs(x, cu):
    return cu.shape[0] - 1 if cu is not None else x.shape[0]


def _default_grid(x) -> int:
    """4 x the SM count of x's device: what the plan's default (``grid_ctas`` None) must resolve to (528 on an H200)."""
    return 4 * torch.cuda.get_device_properties(x.device).multi_processor_count


def _plan(x, w, b, cu, init, fin, activation, grid_ctas):
    """A forward plan with ``grid_ctas`` (None: left at the plan's default), compiled; checks the key's grid."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    plan = CausalConv1d(x, w, torch.empty_like(x), b, cu, init, fin, activation)
    if grid_ctas is not None:
        plan.grid_ctas = grid_ctas
    assert plan.grid_ctas == grid_ctas
    plan.compile()
    assert plan.compile_key().grid_ctas == (_default_grid(x) if grid_ctas is None else grid_ctas)
    return plan


@pytest.mark.parametrize(("grid_ctas", "width", "bias", "activation", "layout", "dtype", "D"), CASES)
def test_run_grid_is_bitwise_the_64_token_kernel(grid_ctas, width, bias, activation, layout, dtype, D):
    """y and final states of the run grid (the default or an explicit CTA count) == the 64-token kernel's
    (``grid_ctas = 0``), bit for bit, and within the tolerance rule of the fp32 reference; the same two plans then
    re-bind a tiny batch (fewer tokens than runs)."""
    plans = {}
    for lengths in (LENGTHS, TINY):
        x, w, b, cu, init = _inputs(width, bias, layout, dtype, D, lengths)
        with_final = layout in ("varlen", "ones")
        outs = []
        for opt in (0, grid_ctas):
            y = torch.full(x.shape, float("nan"), device="cuda", dtype=x.dtype)
            fin = torch.full((_n_seqs(x, cu), D, width - 1), float("nan"), device="cuda", dtype=x.dtype) if with_final else None
            key = (opt, tuple(x.shape) if cu is None else None)  # a dense plan is built for its [B, L, D]; varlen re-binds
            if key not in plans:
                plans[key] = _plan(x, w, b, cu, init, fin, activation, opt)
            plans[key].execute(x, w, y, b, cu, init, fin)
            outs.append((y, fin))
        torch.cuda.synchronize()
        (y0, f0), (y1, f1) = outs
        y_ref, f_ref = causal_conv1d_ref(x, w, b, activation, cu, init)
        _check(y0, y_ref, f"y (64-token kernel, T={sum(lengths)})")
        _check(y1, y_ref, f"y (grid_ctas={grid_ctas}, T={sum(lengths)})")
        assert torch.equal(y0, y1), (y0.float() - y1.float()).abs().max()
        if with_final:
            _check(f1, f_ref, "final_states (run grid)")
            assert torch.equal(f0, f1)


def test_run_grid_no_sync_no_alloc_and_replays_from_a_graph():
    """The default plan (the run grid, memoized host path, the plan's launch route): warm executes neither synchronize nor
    allocate; its first execute inside a CUDA-graph capture replays like eager."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    x, w, b, cu, init = _inputs(4, True, "varlen", "bfloat16", 384, LENGTHS)
    y = torch.empty_like(x)
    plan = CausalConv1d(x, w, y, b, cu, init, activation="silu")
    plan.compile()
    assert plan.compile_key().grid_ctas == _default_grid(x)
    detectors.assert_capture_matches_eager(lambda: plan.execute(x, w, y, b, cu, init), [y])
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y, b, cu, init), repeats=3)


@pytest.mark.parametrize("layout", ["varlen", "dense"])
def test_public_op_run_grid_gives_the_64_token_bits(monkeypatch, layout):
    """The public op's default plan (the run grid, 4 x SMs) returns the bits of the op with ``api.FWD_GRID_CTAS_DEFAULT = 0``
    (the 64-token CTAs; a plan of its own in the op's cache): varlen with initial and final states; dense."""
    from cudnn.linear_attention import causal_conv1d
    from cudnn.linear_attention.conv1d import api, torch_op

    x, w, b, cu, init = _inputs(4, True, layout, "bfloat16", 384, LENGTHS)
    kw = dict(cu_seqlens=cu, initial_states=init, output_final_states=True)
    assert api.FWD_GRID_CTAS_DEFAULT is None
    res = [causal_conv1d(x, w, b, "silu", **kw)]
    monkeypatch.setattr(api, "FWD_GRID_CTAS_DEFAULT", 0)
    res.append(causal_conv1d(x, w, b, "silu", **kw))
    torch.cuda.synchronize()
    grids = {p.compile_key().grid_ctas for p in torch_op._PLANS.values() if isinstance(p, api.CausalConv1d)}
    assert {0, _default_grid(x)} <= grids, grids
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
