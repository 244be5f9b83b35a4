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
- Chunk-interleaved runs (``plan.chunk`` = 8 / 16 / 32; 8 the dense default since session 15): bitwise the contiguous-runs
  plan's (``chunk`` 0) y and final states over dense T 1 / 7 / 1000 / 16384 and batches of L 1001 / 13 / 4099, D 4096 and
  2560 (a partial channel block), W 2-4, bf16 / fp32, initial / final states on and off, steady on and off
  (``test_forward_chunk_is_bitwise_the_default``); varlen (chunk 8 / 16): 1-token, empty and long sequences, 64 random
  lengths over 32k tokens, every token its own sequence (T = 4099) (``test_forward_varlen_chunk_is_bitwise_the_default``).
- Fused final states (``plan.final_fused``, the dense default with final states since session 16; varlen plans take the
  separate kernel by default since session 28): bitwise the separate
  ``final_kernel``'s (``final_fused = False``) and the reference's over dense batches (L 1, 2, 1001, 1024) and varlen ones
  (1-token, empty, shorter-than-W - 1, long sequences; 64 random lengths; every token its own sequence; T = 0), the three
  grids, with and without initial states, bf16 / fp32 states (``test_fused_final_states_are_bitwise_the_separate_kernel``);
  final states in place of the initial states take the separate pair and equal a run on copies, eager and graph-replayed
  (``test_fused_plan_with_final_states_in_place_of_initial_states``).
- Warp walk (``plan.warp_walk = True``: the warp walks ``cu_seqlens`` with a window of entries in its lanes): bitwise the
  per-token walk's y and final states over varlen batches with 1-token, empty, shorter-than-W - 1 and long sequences,
  64 random lengths, every token its own sequence (T 4099 and 16384), a density-guess miss and no token; D 4096, 2600
  (a 5-lane warp) and 8 (one lane); contiguous runs and chunk 8, with and without states
  (``test_forward_warp_walk_is_bitwise_the_default``).
- Window shift (``plan.shift_always``, the default since session 25: the per-token path shifts the register window for
  every token of a group, only the walk and the store guarded): bitwise the guarded shift's y and final states over the
  dense and varlen batches above, runs, chunks and the warp walk, with and without states
  (``test_forward_shift_always_is_bitwise_the_guarded_shift``).
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


#: (variant fields, grid_ctas, width, bias, activation, layout, dtype, D) of session 9's opt-in forward variants
#: (``Conv1dFwdKey.l2_prefetch``: L2 prefetch P groups ahead; ``Conv1dFwdKey.steady``: the steady-group path): the
#: benchmark's shape family (bf16, W 4, bias, SiLU) varlen with initial / final states, 1-token sequences and a partial
#: channel CTA, both variants combined; dense fp16 W 3 with batch boundaries inside groups (L = 1573), each variant alone
#: (the deepest prefetch, 4 groups); fp32 with one run per channel block (7 CTAs); 1-token sequences with states (no
#: group is ever steady). Five compiles; their default twins are keys of CASES above (shared when the file runs whole) but
#: the dense fp16 one.
VARIANT_CASES = [
    ({"steady": True, "l2_prefetch": 2}, None, 4, True, "silu", "varlen", "bfloat16", 392),
    ({"steady": True}, 1056, 3, False, None, "dense", "float16", 384),
    ({"l2_prefetch": 4}, 1056, 3, False, None, "dense", "float16", 384),
    ({"steady": True, "l2_prefetch": 1}, 7, 4, True, "silu", "varlen", "float32", 4096),
    ({"steady": True}, None, 2, True, None, "ones", "float16", 256),
]


@pytest.mark.parametrize(("fields", "grid_ctas", "width", "bias", "activation", "layout", "dtype", "D"), VARIANT_CASES)
def test_forward_variants_are_bitwise_the_default(fields, grid_ctas, width, bias, activation, layout, dtype, D):
    """``plan.l2_prefetch = P`` only asks L2 for data and ``plan.steady = True`` runs the same fp32 operations in the same
    order without the per-token sequence walk and history branches: y and the final states equal the same grid without
    them bit for bit (NaN-poisoned outputs), within the tolerance rule of the fp32 reference; both plans then re-bind the
    tiny batch (a run shorter than a group); warm executes of the variant plan neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    plans = {}
    for lengths in (LENGTHS, TINY):
        x, w, b, cu, init = _inputs(width, bias, layout, dtype, D, lengths)
        with_final = layout in ("varlen", "ones")
        outs = []
        for variant in (False, True):
            y = torch.full(x.shape, float("nan"), device="cuda", dtype=x.dtype)
            fin = torch.full((_n_seqs(x, cu), D, width - 1), float("nan"), device="cuda", dtype=x.dtype) if with_final else None
            key = (variant, tuple(x.shape) if cu is None else None)
            if key not in plans:
                plan = CausalConv1d(x, w, torch.empty_like(x), b, cu, init, fin, activation)
                plan.grid_ctas = grid_ctas
                for name, value in fields.items():  # the reference plan has every option of the case off (steady is on by default since session 9)
                    setattr(plan, name, value if variant else type(value)(0))
                plan.compile()
                ck = plan.compile_key()
                assert all(getattr(ck, name) == (value if variant else 0) for name, value in fields.items()), ck
                plans[key] = plan
            plans[key].execute(x, w, y, b, cu, init, fin)
            outs.append((y, fin))
        torch.cuda.synchronize()
        (y0, f0), (y1, f1) = outs
        y_ref, _ = causal_conv1d_ref(x, w, b, activation, cu, init)
        _check(y1, y_ref, f"y ({fields}, T={x.shape[0] * (x.shape[1] if x.dim() == 3 else 1)})")
        assert torch.equal(y0, y1), (y0.float() - y1.float()).abs().max()
        if with_final:
            assert torch.equal(f0, f1)
    plan = plans[(True, tuple(x.shape) if cu is None else None)]
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, cu, init, f1 if with_final else None), repeats=3)


def test_public_update_host_path_is_bitwise_the_custom_op_and_captures(monkeypatch):
    """The decode update's session-9 host path (``torch_op.UPDATE_DIRECT_EAGER``, ``UPDATE_TVM_FFI``,
    ``api.UPDATE_FAST_HOST_DEFAULT``) against session 8's (custom op, DSL entry, full validation): three decode steps
    with slot indices (a padding row included) give the same outputs and states bit for bit; a step of the new path
    captured in a CUDA graph replays like eager; on a side stream the tvm-ffi + memo launch is ordered after the
    stream's producer."""
    from cudnn.linear_attention import causal_conv1d_update
    from cudnn.linear_attention.conv1d import api, torch_op
    from cudnn_testing import detectors

    B, D, S, W = 9, 1024, 16, 4
    xs = [torch.randn(B, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    idx = torch.tensor([3, 0, -1, 15, 7, 8, 4, 1, 2], device="cuda", dtype=torch.int32)
    state0 = torch.randn(S, D, W - 1, device="cuda", dtype=torch.bfloat16)
    runs = {}
    for new in (False, True):
        monkeypatch.setattr(torch_op, "UPDATE_DIRECT_EAGER", new)
        monkeypatch.setattr(torch_op, "UPDATE_TVM_FFI", new)
        monkeypatch.setattr(api, "UPDATE_FAST_HOST_DEFAULT", new)
        state = state0.clone()
        outs = [causal_conv1d_update(x, state, w, b, "silu", conv_state_indices=idx) for x in xs]
        torch.cuda.synchronize()
        runs[new] = (outs, state)
    live = idx >= 0  # a padding row (index < 0) is skipped: its out row is never written (torch.empty garbage)
    for a, c in zip(runs[False][0], runs[True][0], strict=True):
        assert torch.equal(a[live], c[live])
    assert torch.equal(runs[False][1], runs[True][1])

    # capture: one step of the new path (its plan is warm) from state0, replayed, == the eager step from state0
    state = state0.clone()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out_g = causal_conv1d_update(xs[0], state, w, b, "silu", conv_state_indices=idx)
    state.copy_(state0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out_g[live], runs[True][0][0][live])
    eager_state = state0.clone()
    causal_conv1d_update(xs[0], eager_state, w, b, "silu", conv_state_indices=idx)
    torch.cuda.synchronize()
    assert torch.equal(state, eager_state)

    # stream order: the adapter (tvm-ffi when importable, memo) on a side stream after that stream's producer of x
    out = torch.empty_like(xs[0])
    plan = api.CausalConv1dUpdate(xs[0], state, w, out, b, idx, "silu")
    plan.tvm_ffi = torch_op.tvm_ffi_available()
    plan.compile()
    src = torch.randn_like(xs[0])
    x = xs[0].clone()
    state.copy_(state0)
    plan.execute(x, state, w, out, b, idx)  # warm: the memo holds this layout
    state.copy_(state0)
    torch.cuda.synchronize()

    def produce():
        x.copy_(src)

    detectors.run_on_side_stream_with_sentinel(lambda s: plan.execute(x, state, w, out, b, idx, current_stream=s), produce)
    ref_state, ref_out = state0.clone(), out.clone()  # padding rows: not written by either launch
    plan.execute(src, ref_state, w, ref_out, b, idx)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_out) and torch.equal(state, ref_state)


#: (chunk, dtype, width, bias, activation, states) of the chunk-interleaved runs (``Conv1dFwdKey.chunk``;
#: dense); states: None, "init" (initial and final states) or "final"; steady: the plan's ``steady`` (both plans; False:
#: every group takes the per-token path, so its halo fetches are the ones exercised). Nine chunk compiles plus their
#: default twins.
CHUNK_CASES = [
    (8, "bfloat16", 4, True, "silu", None, True),
    (16, "bfloat16", 4, True, "silu", None, True),
    (32, "bfloat16", 4, True, "silu", None, True),
    (8, "bfloat16", 2, True, "silu", "init", True),
    (16, "float32", 3, False, None, "init", True),
    (32, "bfloat16", 3, False, "silu", "final", True),
    (8, "float32", 2, False, None, None, True),
    (32, "float32", 4, True, "silu", "init", True),
    (16, "bfloat16", 4, True, "silu", "init", False),
]
#: dense [B, L]: one sequence of 1, 7, 1000 and 16384 tokens (fewer tokens than a chunk, a partial last chunk, T16k), and
#: batches whose length is no multiple of any chunk (sequence starts inside chunks and groups)
CHUNK_SHAPES = [(1, 1), (1, 7), (1, 1000), (1, 16384), (3, 1001), (5, 13), (4, 4099)]


@pytest.mark.parametrize(("chunk", "dtype", "width", "bias", "activation", "states", "steady"), CHUNK_CASES)
def test_forward_chunk_is_bitwise_the_default(chunk, dtype, width, bias, activation, states, steady):
    """``plan.chunk = C`` walks CTA row j's chunks j, j + n_runs, ... of C tokens with the run's per-token fp32 math in the
    same order (per chunk: the sequence located arithmetically, the window from the W - 1 halo tokens, zero or the initial
    state before a sequence start; the steady path as the default): y and the final states equal the default plan's
    (``chunk`` 0, same ``steady``) bit for bit (NaN-poisoned outputs), and y is within the tolerance rule of the fp32 reference, for every
    dense shape of CHUNK_SHAPES at D = 4096 and D = 2560 (a partial channel block); warm executes neither synchronize
    nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
        for B, L in CHUNK_SHAPES:
            x = torch.randn(B, L, D, device="cuda", dtype=dt)
            init = torch.randn(B, D, width - 1, device="cuda", dtype=dt) if states == "init" else None
            outs = []
            for c in (0, chunk):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((B, D, width - 1), float("nan"), device="cuda", dtype=dt) if states else None
                plan = CausalConv1d(x, w, y, b, None, init, fin, activation)
                plan.chunk, plan.steady = c, steady
                plan.compile()
                key = plan.compile_key()
                assert key.chunk == c and key.grid_ctas == _default_grid(x) and key.steady is steady, key
                plan.execute(x, w, y, b, None, init, fin)
                outs.append((y, fin, plan))
            torch.cuda.synchronize()
            (y0, f0, _), (y1, f1, plan) = outs
            y_ref, _ = causal_conv1d_ref(x, w, b, activation, None, init)
            _check(y1, y_ref, f"y (chunk={chunk}, B={B}, L={L}, D={D})")
            assert torch.equal(y0, y1), (B, L, D, (y0.float() - y1.float()).abs().max())
            if states:
                assert torch.equal(f0, f1), (B, L, D)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, None, init, f1), repeats=3)


def _random_lengths(n, total, seed):
    """``n`` random sequence lengths (some empty) summing to ``total``."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.sort(torch.randint(0, total + 1, (n - 1,), generator=g)).values.tolist()
    return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]


#: varlen batches of the chunk-interleaved runs: 1-token, empty (repeated offsets: leading, inner, trailing) and long
#: sequences; 64 random lengths over 32k tokens; every token its own sequence (T = 4099); one sequence
CHUNK_VARLEN_LENGTHS = [
    [0, 0, 1, 1, 0, 5, 1, 0, 0, 3000, 1, 2, 0, 517, 1, 3, 0],
    [20000],
    _random_lengths(64, 32768, 15),
    [1] * 4099,
    [9, 0, 7, 0, 0, 1],
]
#: (chunk, dtype, width, bias, activation, states, steady): states None, "init" (initial and final) or "final"
CHUNK_VARLEN_CASES = [
    (8, "bfloat16", 4, True, "silu", None, True),
    (8, "bfloat16", 4, True, "silu", "init", True),
    (16, "bfloat16", 4, True, "silu", "init", True),
    (16, "float32", 3, False, None, "final", True),
    (8, "bfloat16", 2, True, "silu", "init", False),
]


@pytest.mark.parametrize(("chunk", "dtype", "width", "bias", "activation", "states", "steady"), CHUNK_VARLEN_CASES)
def test_forward_varlen_chunk_is_bitwise_the_default(chunk, dtype, width, bias, activation, states, steady):
    """``plan.chunk = C`` on varlen plans (per chunk: a binary search over ``cu_seqlens`` from the previous chunk's
    sequence, then the per-token walk past empty sequences): y and the final states equal the contiguous-runs plan's
    (``chunk`` 0, same ``steady``) bit for bit (NaN-poisoned outputs), y within the tolerance rule of the fp32 reference,
    for every batch of CHUNK_VARLEN_LENGTHS at D = 4096 and 2560; one plan pair re-binds every batch (T and N are runtime);
    warm executes neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
        plans = {}
        for lengths in CHUNK_VARLEN_LENGTHS:
            T, N = sum(lengths), len(lengths)
            x = torch.randn(T, D, device="cuda", dtype=dt)
            cu = _cu(lengths)
            init = torch.randn(N, D, width - 1, device="cuda", dtype=dt) if states == "init" else None
            outs = []
            for c in (0, chunk):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt) if states else None
                plan = plans.get(c)
                if plan is None:
                    plan = plans[c] = CausalConv1d(x, w, y, b, cu, init, fin, activation)
                    plan.chunk, plan.steady = c, steady
                    plan.compile()
                    key = plan.compile_key()
                    assert key.chunk == c and key.varlen and key.grid_ctas == _default_grid(x) and key.steady is steady, key
                plan.execute(x, w, y, b, cu, init, fin)
                outs.append((y, fin))
            torch.cuda.synchronize()
            (y0, f0), (y1, f1) = outs
            name = f"y (varlen chunk={chunk}, N={N}, T={T}, D={D})"
            y_ref, _ = causal_conv1d_ref(x, w, b, activation, cu, init)
            _check(y1, y_ref, name)
            assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
            if states:
                assert torch.equal(f0, f1), name
    plan = plans[chunk]
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, cu, init, f1), repeats=3)


#: varlen batches of the fused final states: 1-token, empty (leading, inner, trailing) and shorter-than-W - 1 sequences
#: next to long ones; 64 random lengths (some empty) over 32k tokens; every token its own sequence; no token at all
FUSED_VARLEN_LENGTHS = [
    [0, 0, 1, 1, 0, 2, 1, 0, 0, 3000, 1, 2, 0, 517, 1, 3, 0],
    _random_lengths(64, 32768, 16),
    [1] * 4099,
    [0, 0, 0],
    [5000],
]
#: (layout, dtype, states dtype, width, init, grid_ctas, chunk): the forward's grids (run grid with the dense chunk-8
#: default and chunk 0, the varlen default of contiguous runs and chunk 8, the 64-token CTAs), with and without initial
#: states, bf16 / fp32 x, states of x's dtype or fp32, W 2-4
FUSED_CASES = [
    ("dense", "bfloat16", "bfloat16", 4, True, None, None),
    ("dense", "bfloat16", "bfloat16", 4, False, None, 0),
    ("dense", "float32", "float32", 3, True, 0, None),
    ("varlen", "bfloat16", "bfloat16", 4, True, None, None),
    ("varlen", "bfloat16", "float32", 4, False, None, 8),
    ("varlen", "bfloat16", "bfloat16", 2, True, None, 16),
    ("varlen", "float32", "float32", 3, True, 0, None),
]
#: dense [B, L]: shorter than W - 1, one token, a batch boundary inside every chunk, the benchmark's states batch
FUSED_DENSE_SHAPES = [(3, 2), (5, 1), (4, 1001), (16, 1024)]


@pytest.mark.parametrize(("layout", "dtype", "sdt", "width", "init", "grid_ctas", "chunk"), FUSED_CASES)
def test_fused_final_states_are_bitwise_the_separate_kernel(layout, dtype, sdt, width, init, grid_ctas, chunk):
    """``final_fused`` (the dense default with final states: the forward kernel writes them, no second launch) against
    ``final_fused = False`` (``final_kernel`` after the forward kernel), and on the run grid the fused final states as
    the grid's tail (``final_tail``, session 28): y and the final states equal bit for bit (NaN-poisoned outputs, so an
    unwritten row shows), the final states equal the fp32 reference's (copies of x or of the initial states, exact),
    over FUSED_DENSE_SHAPES / FUSED_VARLEN_LENGTHS at D 4096 and 2560 (a partial channel block); one varlen plan per
    variant re-binds every batch; warm executes of the fused plan neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt, st_dt = getattr(torch, dtype), getattr(torch, sdt)
    batches = FUSED_VARLEN_LENGTHS if layout == "varlen" else FUSED_DENSE_SHAPES
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=dt)
        plans = {}
        for batch in batches:
            if layout == "varlen":
                T, N = sum(batch), len(batch)
                x, cu = torch.randn(T, D, device="cuda", dtype=dt), _cu(batch)
            else:
                N, L = batch
                x, cu = torch.randn(N, L, D, device="cuda", dtype=dt), None
            i_s = torch.randn(N, D, width - 1, device="cuda", dtype=st_dt) if init else None
            outs = {}
            variants = [(False, False), (True, False)] + ([(True, True)] if grid_ctas != 0 else [])  # (final_fused, final_tail)
            for fused, tail in variants:
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=st_dt)
                key = (fused, tail, None if cu is not None else tuple(x.shape))
                plan = plans.get(key)
                if plan is None:
                    plan = plans[key] = CausalConv1d(x, w, y, b, cu, i_s, fin, "silu")
                    plan.grid_ctas, plan.chunk, plan.final_fused, plan.final_tail = grid_ctas, chunk, fused, tail
                    plan.compile()
                    assert plan.compile_key().final_fused is fused and plan.compile_key().final_tail is tail
                plan.execute(x, w, y, b, cu, i_s, fin)
                outs[fused, tail] = (y, fin)
            torch.cuda.synchronize()
            name = f"{layout} {batch if layout == 'dense' else (N, sum(batch))} D={D}"
            _, f_ref = causal_conv1d_ref(x, w, b, "silu", cu, i_s)
            for v in variants[1:]:
                assert torch.equal(outs[False, False][0], outs[v][0]), (name, v)
                assert torch.equal(outs[False, False][1], outs[v][1]), (name, v)
                assert torch.equal(outs[v][1], f_ref.to(st_dt)), (name, v)
    plan = plans[key]
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y, b, cu, i_s, fin), repeats=3)


@pytest.mark.parametrize("layout", ["dense", "varlen"])
def test_fused_plan_with_final_states_in_place_of_initial_states(layout):
    """The rolling-state update through a fused plan: ``final_states`` is ``initial_states`` (one buffer, updated in
    place). The fused kernel would race (a CTA could overwrite a sequence's initial state before another read it), so
    execute launches the plan's separate pair: y and the updated states equal a run on copies (separate initial and
    final buffers, the fused kernel) bit for bit and the fp32 reference's states; a CUDA-graph-captured in-place call
    replays the same; the overlap check reads metadata only (no sync, no allocation)."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    D, width = 4096, 4
    w = torch.randn(D, width, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    if layout == "varlen":
        lengths = [0, 1, 2, 3000, 1, 0, 517, 2]
        x, cu, N = torch.randn(sum(lengths), D, device="cuda", dtype=torch.bfloat16), _cu(lengths), len(lengths)
    else:
        N = 16
        x, cu = torch.randn(N, 1024, D, device="cuda", dtype=torch.bfloat16), None
    state0 = torch.randn(N, D, width - 1, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    state = state0.clone()
    plan = CausalConv1d(x, w, y, b, cu, state, state, "silu")
    plan.final_fused = True  # the varlen default is the separate kernel (session 28)
    plan.compile()
    assert plan.compile_key().final_fused and plan._sep is not None

    ref_y, ref_f = torch.full_like(x, float("nan")), torch.full_like(state0, float("nan"))
    plan.execute(x, w, ref_y, b, cu, state0.clone(), ref_f)  # disjoint buffers: the fused kernel
    plan.execute(x, w, y, b, cu, state, state)  # in place: the separate pair
    torch.cuda.synchronize()
    assert torch.equal(y, ref_y) and torch.equal(state, ref_f)
    _, f_ref = causal_conv1d_ref(x, w, b, "silu", cu, state0)
    assert torch.equal(state, f_ref.to(state.dtype))

    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        plan.execute(x, w, y, b, cu, state, state)
    y.fill_(float("nan"))
    state.copy_(state0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, ref_y) and torch.equal(state, ref_f)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y, b, cu, state, state), repeats=3)


#: varlen batches of the warp walk: 1-token, empty (leading, inner, trailing), shorter-than-W - 1 and long sequences; 64
#: random lengths (some empty) over 32k tokens; every token its own sequence (T = 4099, and the benchmark's T = 16384);
#: 1-token runs around one long sequence and 100 empty ones (the density guess misses: the search takes over; the
#: window slides past the empties); no token at all; one sequence
WARP_WALK_LENGTHS = [
    [0, 0, 1, 1, 0, 2, 1, 0, 0, 3000, 1, 2, 0, 517, 1, 3, 0],
    _random_lengths(64, 32768, 17),
    [1] * 4099,
    [1] * 16384,
    [1] * 700 + [20000] + [0] * 100 + [1] * 700 + [2, 1, 2],
    [0, 0, 0],
    [5000],
]
#: (chunk, dtype, width, bias, activation, states, steady): the varlen default (contiguous runs, chunk None) and chunk 8,
#: with and without initial / final states ("init": both, "final": final only), steady on and off, bf16 / fp32, W 2-4
WARP_WALK_CASES = [
    (None, "bfloat16", 4, True, "silu", None, True),
    (None, "bfloat16", 4, True, "silu", "init", True),
    (8, "bfloat16", 4, True, "silu", None, True),
    (8, "bfloat16", 4, True, "silu", "init", True),
    (8, "float32", 3, False, None, "final", True),
    (0, "bfloat16", 2, True, "silu", "final", False),
]


@pytest.mark.parametrize(("chunk", "dtype", "width", "bias", "activation", "states", "steady"), WARP_WALK_CASES)
def test_forward_warp_walk_is_bitwise_the_default(chunk, dtype, width, bias, activation, states, steady):
    """``plan.warp_walk = True`` (the warp's lanes hold a window of ``cu_seqlens`` entries: a token's sequence is a ballot
    and two shuffles, a chunk's a density guess then a 33-ary search) finds the sequences the per-token walk finds: y and
    the final states equal the ``warp_walk = False`` plan's (same chunk and steady) bit for bit (NaN-poisoned outputs),
    y within the tolerance rule of the fp32 reference and the final states equal to its (batches of up to 5000
    sequences), for every batch of
    WARP_WALK_LENGTHS at D = 4096, 2600 (bf16: a warp of 5 working lanes, a window of 5 entries) and 8 (bf16: one lane, a
    window of one entry); one plan pair re-binds every batch (T and N are runtime); warm executes neither synchronize
    nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    for D in (4096, 2600, 8) if dtype == "bfloat16" else (4096, 2600):
        w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
        plans = {}
        for lengths in WARP_WALK_LENGTHS:
            T, N = sum(lengths), len(lengths)
            x = torch.randn(T, D, device="cuda", dtype=dt)
            cu = _cu(lengths)
            init = torch.randn(N, D, width - 1, device="cuda", dtype=dt) if states == "init" else None
            outs = []
            for walk in (False, True):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt) if states else None
                plan = plans.get(walk)
                if plan is None:
                    plan = plans[walk] = CausalConv1d(x, w, y, b, cu, init, fin, activation)
                    plan.chunk, plan.steady, plan.warp_walk = chunk, steady, walk
                    plan.compile()
                    key = plan.compile_key()
                    assert key.warp_walk is walk and key.varlen and key.grid_ctas == _default_grid(x) and key.steady is steady, key
                plan.execute(x, w, y, b, cu, init, fin)
                outs.append((y, fin))
            torch.cuda.synchronize()
            (y0, f0), (y1, f1) = outs
            name = f"y (warp_walk, chunk={chunk}, N={N}, T={T}, D={D})"
            assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
            if states:
                assert torch.equal(f0, f1), name
            if N <= 5000:  # the reference loops over the sequences in Python: the 16k-sequence batch is checked bitwise only
                y_ref, f_ref = causal_conv1d_ref(x, w, b, activation, cu, init)
                if T:
                    _check(y1, y_ref, name)
                if states:
                    assert torch.equal(f1, f_ref.to(dt)), name
    plan = plans[True]
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, cu, init, f1), repeats=3)


#: (layout, chunk, warp_walk, dtype, width, bias, activation, states, steady) of the window-shift A/B (``shift_always``,
#: the default since session 25, against the guarded shift): dense contiguous runs and the chunk-8 default, the varlen
#: contiguous runs, chunk 8 and the warp walk (on chunk 8: the stateless varlen default); with and without initial / final states, steady on and off,
#: bf16 / fp32, W 2-4
SHIFT_CASES = [
    ("dense", 0, False, "bfloat16", 4, True, "silu", None, True),
    ("dense", None, False, "bfloat16", 4, True, "silu", "init", True),
    ("dense", 16, False, "float32", 3, False, None, "final", False),
    ("varlen", None, False, "bfloat16", 4, True, "silu", None, True),
    ("varlen", None, False, "bfloat16", 4, True, "silu", "init", True),
    ("varlen", 8, False, "bfloat16", 2, True, "silu", "init", True),
    ("varlen", None, True, "bfloat16", 4, True, "silu", "final", True),
    ("varlen", 8, True, "float32", 3, False, None, None, False),
    ("varlen", 8, True, "bfloat16", 4, True, "silu", None, True),  # a stateless varlen plan's default since session 29
]


@pytest.mark.parametrize(("layout", "chunk", "walk", "dtype", "width", "bias", "activation", "states", "steady"), SHIFT_CASES)
def test_forward_shift_always_is_bitwise_the_guarded_shift(layout, chunk, walk, dtype, width, bias, activation, states, steady):
    """``plan.shift_always`` (True, the default: a group on the per-token path shifts the register window and computes
    every token, past the run's or chunk's end too, with only the sequence walk and the store guarded) stores what the
    guarded shift (``shift_always = False``, the default until session 25) stores: y and the final states equal bit for
    bit (NaN-poisoned outputs, so a token stored past the run would show as a changed neighbour or a missing one), y
    within the tolerance rule of the fp32 reference, over the dense CHUNK_SHAPES and the varlen WARP_WALK_LENGTHS batches
    (1-token, empty, shorter-than-W - 1 and long sequences, every token its own sequence, no token) at D = 4096 and 2560;
    one varlen plan pair re-binds every batch; warm executes neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    batches = [[L] * B for B, L in CHUNK_SHAPES] if layout == "dense" else WARP_WALK_LENGTHS
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
        plans = {}
        for lengths in batches:
            T, N = sum(lengths), len(lengths)
            if layout == "dense":
                x, cu = torch.randn(N, lengths[0], D, device="cuda", dtype=dt), None
            else:
                x, cu = torch.randn(T, D, device="cuda", dtype=dt), _cu(lengths)
            init = torch.randn(N, D, width - 1, device="cuda", dtype=dt) if states == "init" else None
            outs = []
            for shift in (False, True):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt) if states else None
                slot = (shift, tuple(x.shape)) if layout == "dense" else shift  # a dense plan per shape (a kernel-cache hit)
                plan = plans.get(slot)
                if plan is None:
                    plan = plans[slot] = CausalConv1d(x, w, y, b, cu, init, fin, activation)
                    plan.chunk, plan.steady, plan.shift_always = chunk, steady, shift
                    if layout == "varlen":  # explicit: a stateless varlen plan's default is the walk on chunk 8 (session 29)
                        plan.warp_walk = walk
                    plan.compile()
                    key = plan.compile_key()
                    assert key.shift_always is shift and key.warp_walk is walk and key.grid_ctas == _default_grid(x) and key.steady is steady, key
                plan.execute(x, w, y, b, cu, init, fin)
                outs.append((y, fin))
            torch.cuda.synchronize()
            (y0, f0), (y1, f1) = outs
            name = f"y (shift_always, {layout}, chunk={chunk}, walk={walk}, N={N}, T={T}, D={D})"
            assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
            if states:
                assert torch.equal(f0, f1), name
            if T and N <= 5000:  # the reference loops over the sequences in Python
                y_ref, _ = causal_conv1d_ref(x, w, b, activation, cu, init)
                _check(y1, y_ref, name)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, cu, init, f1), repeats=3)


#: (dtype, width, bias, activation, states, steady) of the first-sequence A/B (``locate_guess``: varlen contiguous runs)
LOCATE_CASES = [
    ("bfloat16", 4, True, "silu", None, True),
    ("bfloat16", 4, True, "silu", "init", True),
    ("float32", 3, False, None, "final", False),
]


@pytest.mark.parametrize(("dtype", "width", "bias", "activation", "states", "steady"), LOCATE_CASES)
def test_forward_locate_guess_is_bitwise_the_binary_search(dtype, width, bias, activation, states, steady):
    """``plan.locate_guess`` (a run's first sequence from the density guess ``t0 N / T`` before any binary search) finds
    the sequence the binary search finds: y and the final states equal the ``locate_guess = False`` plan's bit for bit
    (NaN-poisoned outputs), y within the tolerance rule of the fp32 reference, over WARP_WALK_LENGTHS (even lengths where
    the guess is exact, random lengths with empty sequences, 1-token runs around a long sequence and 100 empty ones
    where it misses, no token) at D = 4096 and 2600; warm executes neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    for D in (4096, 2600) if dtype == "bfloat16" else (4096,):
        w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
        plans = {}
        for lengths in WARP_WALK_LENGTHS:
            T, N = sum(lengths), len(lengths)
            x, cu = torch.randn(T, D, device="cuda", dtype=dt), _cu(lengths)
            init = torch.randn(N, D, width - 1, device="cuda", dtype=dt) if states == "init" else None
            outs = []
            for guess in (False, True):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt) if states else None
                plan = plans.get(guess)
                if plan is None:
                    plan = plans[guess] = CausalConv1d(x, w, y, b, cu, init, fin, activation)
                    plan.steady, plan.locate_guess, plan.warp_walk = steady, guess, False  # contiguous runs
                    plan.compile()
                    key = plan.compile_key()
                    assert key.locate_guess is guess and key.chunk == 0 and not key.warp_walk and key.steady is steady, key
                plan.execute(x, w, y, b, cu, init, fin)
                outs.append((y, fin))
            torch.cuda.synchronize()
            (y0, f0), (y1, f1) = outs
            name = f"y (locate_guess, N={N}, T={T}, D={D})"
            assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
            if states:
                assert torch.equal(f0, f1), name
            if T and N <= 5000:  # the reference loops over the sequences in Python
                y_ref, _ = causal_conv1d_ref(x, w, b, activation, cu, init)
                _check(y1, y_ref, name)
    plan = plans[True]
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, cu, init, f1), repeats=3)


#: (layout, dtype, states dtype, width, chunk): the contiguous final states' vector stores (``Conv1dFwdKey.final_contiguous``)
#: on the dense chunk-8 default, the varlen contiguous-runs default and varlen chunk 8; bf16 states (16-byte slices at
#: W 2), fp32 states next to bf16 x (96-byte slices at W 4), fp32 x and states
CONTIG_CASES = [
    ("dense", "bfloat16", "bfloat16", 4, None),
    ("dense", "bfloat16", "float32", 2, None),
    ("varlen", "bfloat16", "bfloat16", 4, None),
    ("varlen", "bfloat16", "bfloat16", 3, 8),
    ("varlen", "float32", "float32", 4, None),
]


@pytest.mark.parametrize(("layout", "dtype", "sdt", "width", "chunk"), CONTIG_CASES)
def test_forward_contiguous_final_states_are_bitwise_the_elementwise_path(layout, dtype, sdt, width, chunk):
    """Contiguous [N, D, W - 1] final states (``final_contiguous``, the default for that declared layout since session 26:
    each thread's slice assembled in registers and written with vector stores) against ``final_contiguous = False``
    (element by element, any strides): y and the final states equal bit for bit (NaN-poisoned outputs), and the final
    states equal the fp32 reference's, over FUSED_DENSE_SHAPES / FUSED_VARLEN_LENGTHS at D 4096 and 2560, fused and
    separate final states, with contiguous initial states and with initial states as a strided view; final states as a
    strided view build an element-wise plan with the same bits; a contiguous plan refuses, naming the tensor, final
    states at an address that is not 16-byte aligned, which ``final_contiguous = False`` serves with the same bits."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    dt, st_dt = getattr(torch, dtype), getattr(torch, sdt)
    batches = FUSED_VARLEN_LENGTHS if layout == "varlen" else FUSED_DENSE_SHAPES
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=dt)
        for batch in batches:
            if layout == "varlen":
                T, N = sum(batch), len(batch)
                x, cu = torch.randn(T, D, device="cuda", dtype=dt), _cu(batch)
            else:
                N, L = batch
                x, cu = torch.randn(N, L, D, device="cuda", dtype=dt), None
            i_s = torch.randn(N, D, width - 1, device="cuda", dtype=st_dt)
            i_v = torch.empty(N, D, width, device="cuda", dtype=st_dt)[:, :, : width - 1].copy_(i_s)  # strides (D W, W, 1)
            outs = {}
            for name, contig, fused, init, strided in (
                ("vec", None, None, i_s, False),
                ("vec-sep", None, False, i_s, False),
                ("vec-init-view", None, None, i_v, False),
                ("elem", False, None, i_s, False),
                ("final-view", None, None, i_s, True),
            ):
                y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                if strided:
                    fin = torch.full((N, D, width), float("nan"), device="cuda", dtype=st_dt)[:, :, 1:]
                else:
                    fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=st_dt)
                plan = CausalConv1d(x, w, y, b, cu, init, fin, "silu")
                plan.chunk, plan.final_fused, plan.final_contiguous = chunk, fused, contig
                plan.compile()
                assert plan.compile_key().final_contiguous is name.startswith("vec"), (name, plan.compile_key())
                plan.execute(x, w, y, b, cu, init, fin)
                outs[name] = (y, fin)
            torch.cuda.synchronize()
            label = f"{layout} {batch if layout == 'dense' else (N, sum(batch))} D={D}"
            for name in ("vec-sep", "vec-init-view", "elem", "final-view"):
                assert torch.equal(outs["vec"][0], outs[name][0]), (label, name)
                assert torch.equal(outs["vec"][1], outs[name][1]), (label, name)
            _, f_ref = causal_conv1d_ref(x, w, b, "silu", cu, i_s)
            assert torch.equal(outs["vec"][1], f_ref.to(st_dt)), label
    # final states at an address that is not 16-byte aligned (contiguous, one element into a buffer)
    odd = torch.full((N * D * (width - 1) + 1,), float("nan"), device="cuda", dtype=st_dt)[1:].view(N, D, width - 1)
    assert odd.data_ptr() % 16
    y = torch.empty_like(x)
    fin = torch.empty((N, D, width - 1), device="cuda", dtype=st_dt)
    plan = CausalConv1d(x, w, y, b, cu, i_s, fin, "silu")
    plan.chunk = chunk
    plan.compile()
    with pytest.raises(ValueError, match="final_states.*16-byte aligned"):
        plan.execute(x, w, y, b, cu, i_s, odd)
    plan.execute(x, w, y, b, cu, i_s, fin)
    loose = CausalConv1d(x, w, y, b, cu, i_s, odd, "silu")
    loose.chunk, loose.final_contiguous = chunk, False
    loose.compile()
    loose.execute(x, w, y, b, cu, i_s, odd)
    torch.cuda.synchronize()
    assert torch.equal(odd, fin)


#: (B, L) dense batches of the seeded-starts A/B: sequence starts on chunk starts (L a multiple of 8, 16), off them
#: (13, 1001, 4099), sequences shorter than a group and than W - 1 (1, 2, 7)
SEEDED_SHAPES = [(512, 32), (8, 24), (2, 8), (5, 13), (3, 1001), (4, 4099), (16, 2), (64, 1), (1, 7)]
#: (dtype, width, chunk, final) of the seeded-starts A/B
SEEDED_CASES = [("bfloat16", 4, 8, True), ("bfloat16", 4, 16, False), ("float16", 2, 8, True), ("float32", 3, 8, False)]


@pytest.mark.parametrize(("dtype", "width", "chunk", "final"), SEEDED_CASES)
def test_forward_seeded_starts_are_bitwise_the_default(dtype, width, chunk, final):
    """``plan.seeded_starts`` (session 27, the default on dense chunks with initial states of x's dtype: a chunk that
    starts a sequence receives that sequence's initial-state entries as its halo, so its first group takes the steady
    path) stores what the per-token path (``seeded_starts = False``) stores: y and the final states equal bit for bit
    (NaN-poisoned outputs), y within the tolerance rule of the fp32 reference, over SEEDED_SHAPES at D = 4096 and 2560,
    with contiguous initial states (the halo read by 16-byte loads: ``initial_contiguous``) and with initial states as a
    strided view (element loads); a plan reading contiguous initial states refuses, naming the tensor, initial states at
    an address that is not 16-byte aligned, which ``initial_contiguous = False`` serves with the same bits; warm executes
    neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    dt = getattr(torch, dtype)
    for D in (4096, 2560):
        w = torch.randn(D, width, device="cuda", dtype=dt) * 0.5
        b = torch.randn(D, device="cuda", dtype=dt)
        for B, L in SEEDED_SHAPES:
            x = torch.randn(B, L, D, device="cuda", dtype=dt)
            i_s = torch.randn(B, D, width - 1, device="cuda", dtype=dt)
            i_v = torch.empty(B, D, width + 1, device="cuda", dtype=dt)[:, :, 2:].copy_(i_s)  # strides (D (W + 1), W + 1, 1)
            for init in (i_s, i_v):
                outs = []
                for seed in (False, True):
                    y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
                    fin = torch.full((B, D, width - 1), float("nan"), device="cuda", dtype=dt) if final else None
                    plan = CausalConv1d(x, w, y, b, None, init, fin, "silu")
                    plan.chunk, plan.seeded_starts = chunk, seed
                    plan.compile()
                    key = plan.compile_key()
                    assert key.seeded_starts is seed and key.chunk == chunk and key.steady, key
                    assert key.init_contiguous is (seed and init is i_s), key
                    plan.execute(x, w, y, b, None, init, fin)
                    outs.append((y, fin))
                torch.cuda.synchronize()
                (y0, f0), (y1, f1) = outs
                name = f"y (seeded_starts, B={B}, L={L}, D={D}, strided init={init is i_v})"
                assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
                if final:
                    assert torch.equal(f0, f1), name
                y_ref, _ = causal_conv1d_ref(x, w, b, "silu", None, i_s)
                _check(y1, y_ref, name)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y1, b, None, init, f1), repeats=3)
    # initial states at an address that is not 16-byte aligned (contiguous, one element into a buffer)
    odd = torch.empty(B * D * (width - 1) + 1, device="cuda", dtype=dt)[1:].view(B, D, width - 1).copy_(i_s)
    assert odd.data_ptr() % 16
    y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
    plan = CausalConv1d(x, w, y, b, None, i_s, None, "silu")
    plan.chunk = chunk
    plan.compile()
    assert plan.compile_key().init_contiguous
    with pytest.raises(ValueError, match="initial_states.*16-byte aligned.*initial_contiguous = False"):
        plan.execute(x, w, y, b, None, odd, None)
    loose = CausalConv1d(x, w, y, b, None, odd, None, "silu")
    loose.chunk, loose.initial_contiguous = chunk, False
    loose.compile()
    assert loose.compile_key().seeded_starts and not loose.compile_key().init_contiguous
    loose.execute(x, w, y, b, None, odd, None)
    y2 = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
    plan.execute(x, w, y2, b, None, i_s, None)
    torch.cuda.synchronize()
    assert torch.equal(y, y2)


@pytest.mark.parametrize("states", [None, "init"])
def test_varlen_per_call_chunks_are_bitwise_the_runs(states):
    """A varlen plan left at ``chunk = None`` (session 27) launches its per-call chunk key for a call whose sequences
    average at least ``FWD_VARLEN_CHUNK_MIN_LEN`` tokens and the contiguous runs below: one such plan, re-bound to batches
    on both sides of the rule (the rule's length exactly and one token under it, 256 random lengths over 16k tokens, 1-token
    sequences, empty sequences, a single long one), stores y and the final states of the ``chunk = 0`` plan bit for bit
    (NaN-poisoned outputs), y within the tolerance rule of the fp32 reference; a call captured in a CUDA graph replays
    the same bits; warm executes neither synchronize nor allocate."""
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing import detectors

    L, D, width, dt = api.FWD_VARLEN_CHUNK_MIN_LEN, 4096, 4, torch.bfloat16
    w = torch.randn(D, width, device="cuda", dtype=dt) * 0.5
    b = torch.randn(D, device="cuda", dtype=dt)
    batches = [[L] * 64, [L] * 63 + [L - 1], _random_lengths(256, 16384, 3), [1] * 3000, [0, 0, 5, 0, 3000, 0], [20000]]
    plans = {}
    for lengths in batches:
        T, N = sum(lengths), len(lengths)
        x, cu = torch.randn(T, D, device="cuda", dtype=dt), _cu(lengths)
        init = torch.randn(N, D, width - 1, device="cuda", dtype=dt) if states else None
        outs = []
        for chunk in (None, 0):
            y = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
            fin = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt)
            if chunk not in plans:
                plans[chunk] = CausalConv1d(x, w, y, b, cu, init, fin, "silu")
                plans[chunk].chunk = chunk
                plans[chunk].warp_walk = False  # the per-call rule (a stateless plan's default is the walk on chunk 8)
                plans[chunk].compile()
            plans[chunk].execute(x, w, y, b, cu, init, fin)
            outs.append((y, fin))
        torch.cuda.synchronize()
        (y0, f0), (y1, f1) = outs
        name = f"y (per-call chunks, N={N}, T={T}, chunks={T >= L * N})"
        assert torch.equal(y0, y1), (name, (y0.float() - y1.float()).abs().max())
        assert torch.equal(f0, f1), name
        if N <= 5000:
            y_ref, _ = causal_conv1d_ref(x, w, b, "silu", cu, init)
            _check(y0, y_ref, name)
    assert plans[None]._alt is not None and plans[0]._alt is None
    plan = plans[None]
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    yg = torch.full(x.shape, float("nan"), device="cuda", dtype=dt)
    fg = torch.full((N, D, width - 1), float("nan"), device="cuda", dtype=dt)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        plan.execute(x, w, yg, b, cu, init, fg)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y0) and torch.equal(fg, f0)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, w, y0, b, cu, init, f0), repeats=3)
