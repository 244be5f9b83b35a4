"""GPU correctness of causal_conv1d (forward, backward, decode update) against the fp32 reference
(shared/cudnn_testing/reference_linear_attention.py), FlashAttention tolerance rule: the error may be at
most twice the rounding of the reference to the output dtype, plus noise. Fresh random inputs, outputs
poisoned with NaN. Grid: widths 2-4 x bias x SiLU on varlen batches with 1-token, short and multi-CTA
sequences; dense batches; fp32 and bf16 activations; strided token views; initial and final states."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_linear_attention import causal_conv1d_ref, causal_conv1d_update_ref
from cudnn_testing.tolerance import assert_close_fa, rel_error

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

# 1-token sequences at both ends and in the middle, a sequence shorter than W - 1, and ones spanning CTAs.
LENGTHS = [1, 130, 1, 2, 517, 1, 64, 3, 1000, 1]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")


def _cu(lengths):
    from cudnn_testing.data import cu_seqlens

    return cu_seqlens(lengths, "cuda")


def _check(out, ref, name):
    assert_close_fa(out, ref, ref.to(out.dtype), name=name)


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_forward_varlen(width, bias, activation):
    from cudnn.linear_attention import causal_conv1d

    D = 384
    T = sum(LENGTHS)
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, width, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16) if bias else None
    cu = _cu(LENGTHS)
    init = torch.randn(len(LENGTHS), D, width - 1, device="cuda", dtype=torch.bfloat16)
    y, final = causal_conv1d(x, w, b, activation, cu_seqlens=cu, initial_states=init, output_final_states=True)
    y_ref, f_ref = causal_conv1d_ref(x, w, b, activation, cu, init)
    _check(y, y_ref, "y")
    _check(final, f_ref, "final_states")
    y0 = causal_conv1d(x, w, b, activation, cu_seqlens=cu)  # no states: zeros before each sequence
    _check(y0, causal_conv1d_ref(x, w, b, activation, cu)[0], "y (no initial states)")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_forward_dense_and_dtypes(dtype):
    from cudnn.linear_attention import causal_conv1d

    x = torch.randn(3, 333, 256, device="cuda", dtype=dtype)
    w = torch.randn(256, 4, device="cuda", dtype=torch.float32) * 0.5
    b = torch.randn(256, device="cuda", dtype=torch.float32)
    y, final = causal_conv1d(x, w, b, "silu", output_final_states=True)
    y_ref, f_ref = causal_conv1d_ref(x, w, b, "silu")
    _check(y, y_ref, "y")
    _check(final, f_ref, "final_states")


def test_forward_strided_token_view_of_a_fused_projection():
    """x is a column slice of a [T, 3D] projection (token stride 3D): read natively, no copy."""
    from cudnn.linear_attention import causal_conv1d

    D = 256
    qkv = torch.randn(sum(LENGTHS), 3 * D, device="cuda", dtype=torch.bfloat16)
    x = qkv[:, D : 2 * D]
    w = torch.randn(D, 4, device="cuda", dtype=torch.bfloat16)
    cu = _cu(LENGTHS)
    _check(causal_conv1d(x, w, None, "silu", cu_seqlens=cu), causal_conv1d_ref(x, w, None, "silu", cu)[0], "y")


def test_forward_writes_every_element_and_nothing_else():
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, T = 128, 777
    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, 3, device="cuda", dtype=torch.bfloat16)
    cu = _cu([7, 700, 70])
    guard = torch.full((T + 64, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = guard[:T]
    CausalConv1d(x, w, out, cu_seqlens=cu)(x, w, out, cu_seqlens=cu)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    assert torch.isnan(guard[T:]).all()


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("varlen", [True, False])
def test_backward_matches_fp32_autograd(width, activation, varlen):
    from cudnn.linear_attention import causal_conv1d

    D = 256
    if varlen:
        cu = _cu(LENGTHS)
        shape = (sum(LENGTHS), D)
    else:
        cu, shape = None, (2, 700, D)
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(D, width, device="cuda", dtype=torch.float32) * 0.5).requires_grad_()
    b = torch.randn(D, device="cuda", dtype=torch.float32, requires_grad=True)
    n = len(LENGTHS) if varlen else 2
    init = torch.randn(n, D, width - 1, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    y = causal_conv1d(x, w, b, activation, cu_seqlens=cu, initial_states=init)
    dx, dw, db, dinit = torch.autograd.grad(y, (x, w, b, init), dy)

    xr, wr, br, ir = (t.detach().float().requires_grad_() for t in (x, w, b, init))
    y_ref, _ = causal_conv1d_ref(xr, wr, br, activation, cu, ir)
    dx_r, dw_r, db_r, di_r = torch.autograd.grad(y_ref, (xr, wr, br, ir), dy.float())
    _check(dx, dx_r, "dx")
    _check(dinit, di_r, "dinitial_states")
    # dweight / dbias are sums over every token (fp32 partials, deterministic): relative error
    assert rel_error(dw, dw_r) < 1e-4, rel_error(dw, dw_r)
    assert rel_error(db, db_r) < 1e-4, rel_error(db, db_r)


def test_backward_is_deterministic():
    from cudnn.linear_attention import causal_conv1d

    x = torch.randn(5000, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(512, 4, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(5000, 512, device="cuda", dtype=torch.bfloat16)
    cu = _cu([1000, 3000, 1000])
    g1 = torch.autograd.grad(causal_conv1d(x, w, None, "silu", cu_seqlens=cu), (x, w), dy)
    g2 = torch.autograd.grad(causal_conv1d(x, w, None, "silu", cu_seqlens=cu), (x, w), dy)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2, strict=True))


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("indices", [False, True])
def test_update_matches_reference_and_rolls_state(width, indices):
    from cudnn.linear_attention import causal_conv1d_update

    B, D, S = 9, 512, 16
    x = torch.randn(B, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, width, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    state = torch.randn(S, D, width - 1, device="cuda", dtype=torch.float32)
    idx = torch.tensor([3, 0, -1, 15, 7, 8, -1, 1, 2], device="cuda", dtype=torch.int32) if indices else None
    out_ref, state_ref = causal_conv1d_update_ref(x, state, w, b, "silu", idx)
    out = causal_conv1d_update(x, state, w, b, "silu", conv_state_indices=idx)
    live = torch.ones(B, dtype=torch.bool) if idx is None else (idx >= 0).cpu()
    _check(out[live.cuda()], out_ref[live.cuda()], "out")
    torch.testing.assert_close(state, state_ref, atol=0, rtol=0)  # a pure shift: exact


def test_update_with_strided_state_view():
    """A [S, D, W - 1] state stored as [S, W - 1, D] (channel-innermost): read natively, element by element."""
    from cudnn.linear_attention import causal_conv1d_update

    B, D, W = 5, 256, 4
    x = torch.randn(B, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16)
    state = torch.randn(B, W - 1, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    out_ref, state_ref = causal_conv1d_update_ref(x, state, w, None, None)
    out = causal_conv1d_update(x, state, w)
    _check(out, out_ref, "out")
    torch.testing.assert_close(state.float(), state_ref, atol=0, rtol=0)


def test_prefill_then_decode_continues_the_sequence():
    """causal_conv1d with final states, then causal_conv1d_update steps == the forward over the whole sequence."""
    from cudnn.linear_attention import causal_conv1d, causal_conv1d_update

    D = 256
    x = torch.randn(2, 40, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, 4, device="cuda", dtype=torch.bfloat16)
    full = causal_conv1d(x, w, None, "silu")
    _, state = causal_conv1d(x[:, :36].contiguous(), w, None, "silu", output_final_states=True)
    for t in range(36, 40):
        out = causal_conv1d_update(x[:, t].contiguous(), state, w, None, "silu")
        torch.testing.assert_close(out, full[:, t], atol=2e-2, rtol=2e-2)


def test_torch_compile_traces_the_custom_ops():
    from cudnn.linear_attention import causal_conv1d

    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, 4, device="cuda", dtype=torch.bfloat16)
    cu = _cu([100, 200])
    f = torch.compile(lambda x, w: causal_conv1d(x, w, None, "silu", cu_seqlens=cu) * 2, fullgraph=True)
    torch.testing.assert_close(f(x, w), causal_conv1d(x, w, None, "silu", cu_seqlens=cu) * 2)


def test_tvm_ffi_launch_route_matches_the_dsl_entry_bit_for_bit():
    """The tvm-ffi entry (``plan.tvm_ffi = True``) launches the same device code: forward (varlen, states) and update
    (indices, in-place state) give the same bits as the DSL's own entry, on torch's current stream and on an explicit
    side stream, eager and replayed from a CUDA graph; warm executes neither sync nor allocate."""
    pytest.importorskip("tvm_ffi")
    from cudnn.linear_attention.conv1d.api import CausalConv1d, CausalConv1dUpdate
    from cudnn_testing import detectors

    D, W = 512, 4
    cu = _cu(LENGTHS)
    x = torch.randn(sum(LENGTHS), D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    init = torch.randn(len(LENGTHS), D, W - 1, device="cuda", dtype=torch.bfloat16)
    outs = []
    for route in (False, True):
        y, fin = torch.full_like(x, float("nan")), torch.full_like(init, float("nan"))
        plan = CausalConv1d(x, w, y, b, cu, init, fin, "silu")
        plan.tvm_ffi = route
        plan.compile()
        assert (plan._entry is not None) == route
        plan.execute(x, w, y, b, cu, init, fin)
        y2 = torch.full_like(x, float("nan"))  # before the side stream's wait, which orders its fill before the side launch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        plan.execute(x, w, y2, b, cu, init, fin, current_stream=side)
        torch.cuda.current_stream().wait_stream(side)
        if route:
            detectors.assert_no_sync_no_alloc(lambda plan=plan, y=y, fin=fin: plan.execute(x, w, y, b, cu, init, fin), repeats=3)
        outs.append((y, fin, y2))
    torch.cuda.synchronize()
    for a, c in zip(outs[0], outs[1], strict=True):
        assert torch.equal(a, c)

    B, S = 64, 80
    xs = torch.randn(B, D, device="cuda", dtype=torch.bfloat16)
    idx = torch.randperm(S, device="cuda")[:B].to(torch.int32)
    idx[::7] = -1
    state0 = torch.randn(S, D, W - 1, device="cuda", dtype=torch.bfloat16)
    res = []
    for route in (False, True):
        st, out = state0.clone(), torch.full_like(xs, float("nan"))
        plan = CausalConv1dUpdate(xs, st, w, out, b, idx, "silu")
        plan.tvm_ffi = route
        plan.compile()
        plan.execute(xs, st, w, out, b, idx)
        graph = torch.cuda.CUDAGraph()
        st_g, out_g = state0.clone(), torch.full_like(xs, float("nan"))
        with torch.cuda.graph(graph):
            plan.execute(xs, st_g, w, out_g, b, idx)
        graph.replay()
        res.append((st, out, st_g, out_g))
    torch.cuda.synchronize()
    live = idx >= 0
    for a, c in zip(res[0], res[1], strict=True):
        if a.shape == xs.shape:
            a, c = a[live], c[live]
        assert torch.equal(a, c)
    assert torch.equal(res[1][0], res[1][2]) and torch.equal(res[1][1][live], res[1][3][live])  # replay == eager


# ---------------------------------------------------------------------------------------------- issue 7: host path
def _issue7_inputs(width, bias, layout, dtype):
    dt = getattr(torch, dtype)
    D = 384  # 48 channel vectors (bf16): a partial CTA along channels
    lengths = LENGTHS + [3000]  # a sequence spanning many CTAs, and a partial last CTA along tokens
    cu = init = None
    if layout == "dense":
        x = torch.randn(3, 333, D, device="cuda", dtype=dt)
    elif layout == "strided":
        x = torch.randn(sum(lengths), 3 * D, device="cuda", dtype=dt)[:, D : 2 * D]
        cu = _cu(lengths)
    else:
        x = torch.randn(sum(lengths), D, device="cuda", dtype=dt)
        cu = _cu(lengths)
        init = torch.randn(len(lengths), D, width - 1, device="cuda", dtype=dt)
    w = torch.randn(D, width, device="cuda", dtype=torch.float32 if dtype == "float32" else dt) * 0.5
    b = torch.randn(D, device="cuda", dtype=w.dtype) if bias else None
    return x, w, b, cu, init


@pytest.mark.parametrize("layout", ["varlen", "dense"])
def test_public_fast_paths_are_bitwise_the_custom_op(monkeypatch, layout):
    """The public forward's eager fast path (``torch_op.DIRECT_EAGER``, default on) and the op's tvm-ffi route (``FWD_TVM_FFI``,
    default on) give the custom op's bits on the DSL route (varlen with states and final states, dense); the fast path never
    synchronizes."""
    from cudnn.linear_attention import causal_conv1d
    from cudnn.linear_attention.conv1d import torch_op

    x, w, b, cu, init = _issue7_inputs(4, True, layout, "bfloat16")
    kw = dict(cu_seqlens=cu, initial_states=init, output_final_states=True)
    res = []
    for direct, tvm in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(torch_op, "DIRECT_EAGER", direct)
        monkeypatch.setattr(torch_op, "FWD_TVM_FFI", tvm)
        causal_conv1d(x, w, b, "silu", **kw)  # builds the plan (a compile may synchronize)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            res.append(causal_conv1d(x, w, b, "silu", **kw))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    for y, fin in res[1:]:
        assert torch.equal(y, res[0][0]) and torch.equal(fin, res[0][1])


def test_public_forward_rebinds_another_sequence_count_with_states():
    """One cached plan serves varlen batches of 3 and then 5 sequences with initial and final states (it raised before)."""
    from cudnn.linear_attention import causal_conv1d

    D = 256
    w = torch.randn(D, 4, device="cuda", dtype=torch.bfloat16)
    for lengths in ([5, 100, 1], [1, 2, 300, 7, 64]):
        cu = _cu(lengths)
        x = torch.randn(sum(lengths), D, device="cuda", dtype=torch.bfloat16)
        init = torch.randn(len(lengths), D, 3, device="cuda", dtype=torch.bfloat16)
        y, final = causal_conv1d(x, w, None, "silu", cu_seqlens=cu, initial_states=init, output_final_states=True)
        y_ref, f_ref = causal_conv1d_ref(x, w, None, "silu", cu, init)
        _check(y, y_ref, "y")
        _check(final, f_ref, "final_states")
