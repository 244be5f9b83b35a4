"""check_support of the causal_conv1d adapters on metadata only (no GPU, no kernel build): what is accepted,
what is declined (NotImplementedError naming the tensor) and what is malformed (ValueError); and the
compile key holds plan-time values only (Rule 4)."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")


def _fwd(**kw):
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    T, D, W, N = kw.pop("T", 300), kw.pop("D", 256), kw.pop("W", 4), kw.pop("N", 3)
    dt = kw.pop("dtype", "bfloat16")
    x = kw.pop("x", TensorDesc.contiguous((T, D), dt, "x"))
    args = dict(
        x=x,
        weight=kw.pop("weight", TensorDesc.contiguous((D, W), "bfloat16", "weight")),
        out=kw.pop("out", TensorDesc.contiguous(x.shape, dt, "out")),
        cu_seqlens=kw.pop("cu_seqlens", TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")),
        activation=kw.pop("activation", "silu"),
    )
    args.update(kw)
    return CausalConv1d(**args)


def test_accepts_thd_dense_and_strided_token_views():
    assert _fwd().check_support()
    assert _fwd(x=TensorDesc((300, 256), (768, 1), "bfloat16", "x")).check_support()  # a slice of a fused [T, 3D] projection
    dense = TensorDesc.contiguous((2, 100, 256), "bfloat16", "x")
    assert _fwd(x=dense, out=dense, cu_seqlens=None).check_support()
    st = TensorDesc.contiguous((3, 256, 3), "float32", "initial_states")
    assert _fwd(initial_states=st, final_states=st, bias=TensorDesc.contiguous((256,), "bfloat16", "bias")).check_support()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(weight=TensorDesc((256, 4), (1, 256), "bfloat16", "weight")), "weight"),
        (dict(W=5), "width 5"),
        (dict(x=TensorDesc((300, 256), (260, 1), "bfloat16", "x")), "token stride"),
        (dict(x=TensorDesc((300, 256), (1, 300), "bfloat16", "x")), "unit channel stride"),
        (dict(D=100, weight=TensorDesc.contiguous((100, 4), "bfloat16", "weight")), "multiple of 8"),
        (dict(cu_seqlens=TensorDesc.contiguous((4,), "int64", "cu_seqlens")), "int32"),
        (dict(dtype="float8_e4m3fn"), "dtype"),
    ],
)
def test_declines_what_the_kernel_cannot_address(kw, match):
    with pytest.raises(NotImplementedError, match=match):
        _fwd(**kw).check_support()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(activation="gelu"), "activation"),
        (dict(initial_states=TensorDesc.contiguous((2, 256, 3), "bfloat16", "initial_states")), "initial_states"),
        (dict(out=TensorDesc.contiguous((299, 256), "bfloat16", "out")), "out"),
        (dict(bias=TensorDesc.contiguous((256,), "float32", "bias")), "bias"),
    ],
)
def test_malformed_values_raise_value_error(kw, match):
    with pytest.raises(ValueError, match=match):
        _fwd(**kw).check_support()


def test_compile_key_is_plan_time_only():
    """Token totals, sequence counts and strides never reach the key (they are kernel arguments)."""
    a, b = _fwd(T=300, N=3), _fwd(T=70000, N=41, x=TensorDesc((70000, 256), (512, 1), "bfloat16", "x"))
    a.check_support()
    b.check_support()
    assert a.compile_key() == b.compile_key()
    c = _fwd(activation=None)
    c.check_support()
    assert c.compile_key() != a.compile_key()


def test_backward_and_update_support():
    from cudnn.linear_attention.conv1d.api import CausalConv1dBackward, CausalConv1dUpdate

    x = TensorDesc.contiguous((300, 256), "bfloat16", "x")
    w = TensorDesc.contiguous((256, 3), "bfloat16", "weight")
    cu = TensorDesc.contiguous((4,), "int32", "cu_seqlens")
    bwd = CausalConv1dBackward(x, w, x, x, w, cu_seqlens=cu, activation="silu")
    assert bwd.check_support()
    assert bwd.scratch_workspace_bytes() > 0
    with pytest.raises(ValueError, match="bias and dbias"):
        CausalConv1dBackward(x, w, x, x, w, bias=TensorDesc.contiguous((256,), "bfloat16"), cu_seqlens=cu).check_support()
    xb = TensorDesc.contiguous((8, 256), "bfloat16", "x")
    state = TensorDesc.contiguous((16, 256, 2), "bfloat16", "conv_state")
    assert CausalConv1dUpdate(xb, state, w, xb, conv_state_indices=TensorDesc.contiguous((8,), "int32")).check_support()
    with pytest.raises(ValueError, match="conv_state"):
        CausalConv1dUpdate(xb, TensorDesc.contiguous((16, 256, 3), "bfloat16", "conv_state"), w, xb).check_support()


def test_tensors_on_two_devices_are_a_value_error():
    """A host cu_seqlens (or any tensor on another device than x) is malformed: the kernel would dereference it on the GPU."""
    x = TensorDesc((300, 256), (256, 1), "bfloat16", "x", "cuda:0")
    w = TensorDesc((256, 4), (4, 1), "bfloat16", "weight", "cuda:0")
    ok = _fwd(x=x, weight=w, out=TensorDesc((300, 256), (256, 1), "bfloat16", "out", "cuda:0"), cu_seqlens=TensorDesc((4,), (1,), "int32", "cu", "cuda:0"))
    assert ok.check_support()
    bad = _fwd(x=x, weight=w, out=TensorDesc((300, 256), (256, 1), "bfloat16", "out", "cuda:0"), cu_seqlens=TensorDesc((4,), (1,), "int32", "cu", "cpu"))
    with pytest.raises(ValueError, match="cu_seqlens on cpu"):
        bad.check_support()
