"""Every node kind through the reference engine against plain torch (CPU): matmul, every pointwise builder
(forward and *_backward against autograd), every reduction mode. Attention lives in test_graph_sdpa.py.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import cudnn  # noqa: E402
from cudnn.graph.ops_pointwise import BACKWARD, BINARY_01, BINARY_AB, COMPARE, POINTWISE_METHODS, UNARY  # noqa: E402
from cudnn_testing.tolerance import assert_close_fa  # noqa: E402

SHAPE = (2, 5, 7)
FP32 = cudnn.data_type.FLOAT


def _graph(io=FP32):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=FP32, compute_data_type=FP32, handle=cudnn.create_handle(device="cpu"))


def _run(graph, binds: dict, out_t, out_shape, dtype=torch.float32):
    out_t.set_output(True)
    graph.build([cudnn.heur_mode.A])
    buf = torch.full(out_shape, float("nan"), dtype=dtype) if dtype.is_floating_point else torch.full(out_shape, -7, dtype=dtype)
    graph.execute({**binds, out_t: buf}, None)
    return buf


def _positive(shape=SHAPE):
    return torch.rand(shape) * 2 + 0.25


_TORCH_UNARY = {
    "abs": torch.abs,
    "ceil": torch.ceil,
    "cos": torch.cos,
    "erf": torch.erf,
    "exp": torch.exp,
    "floor": torch.floor,
    "gelu": F.gelu,
    "gelu_approx_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "identity": lambda x: x,
    "log": torch.log,
    "logical_not": lambda x: (x == 0).float(),
    "neg": torch.neg,
    "reciprocal": torch.reciprocal,
    "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "softplus": F.softplus,
    "sqrt": torch.sqrt,
    "tan": torch.tan,
    "tanh": torch.tanh,
    "elu": F.elu,
}
_POSITIVE_ONLY = {"log", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("method", sorted(UNARY))
def test_unary_pointwise(method):
    x_t = _positive() if method in _POSITIVE_ONLY else torch.randn(SHAPE)
    if method == "logical_not":
        x_t = torch.randint(0, 2, SHAPE).float()
    if method == "tan":
        x_t = x_t.clamp(-1.2, 1.2)
    g = _graph()
    x = g.tensor_like(x_t)
    out = _run(g, {x: x_t}, getattr(g, method)(input=x), SHAPE)
    torch.testing.assert_close(out, _TORCH_UNARY[method](x_t), rtol=1e-5, atol=1e-5)


_TORCH_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "add_square": lambda a, b: a + b * b,
    "logical_and": lambda a, b: ((a != 0) & (b != 0)).float(),
    "logical_or": lambda a, b: ((a != 0) | (b != 0)).float(),
    "max": torch.maximum,
    "min": torch.minimum,
    "mod": torch.fmod,
    "pow": torch.pow,
    "cmp_eq": lambda a, b: (a == b).float(),
    "cmp_neq": lambda a, b: (a != b).float(),
    "cmp_gt": lambda a, b: (a > b).float(),
    "cmp_ge": lambda a, b: (a >= b).float(),
    "cmp_lt": lambda a, b: (a < b).float(),
    "cmp_le": lambda a, b: (a <= b).float(),
}


@pytest.mark.parametrize("method", sorted([*BINARY_AB, *BINARY_01, *COMPARE]))
def test_binary_pointwise_with_broadcast(method):
    a_t = torch.randn(SHAPE)
    b_t = torch.randn(1, SHAPE[1], 1)  # broadcasts over dims 0 and 2
    if method in ("pow", "div", "mod"):
        a_t, b_t = _positive(), _positive((1, SHAPE[1], 1))
    if method.startswith(("cmp", "logical")):
        a_t, b_t = torch.randint(-1, 2, SHAPE).float(), torch.randint(-1, 2, (1, SHAPE[1], 1)).float()
    g = _graph()
    a, b = g.tensor_like(a_t), g.tensor_like(b_t)
    if method in BINARY_AB:
        y = getattr(g, method)(a=a, b=b)
    elif method in BINARY_01:
        y = getattr(g, method)(input0=a, input1=b)
    else:
        y = getattr(g, method)(input=a, comparison=b)
    out = _run(g, {a: a_t, b: b_t}, y, SHAPE)
    torch.testing.assert_close(out, _TORCH_BINARY[method](a_t, b_t), rtol=1e-5, atol=1e-5)


_TORCH_FORWARD_OF = {
    "tanh_backward": torch.tanh,
    "sigmoid_backward": torch.sigmoid,
    "elu_backward": F.elu,
    "gelu_backward": F.gelu,
    "gelu_approx_tanh_backward": lambda x: F.gelu(x, approximate="tanh"),
    "softplus_backward": F.softplus,
}


def _autograd_backward(fwd, x_t, dy_t):
    x = x_t.clone().requires_grad_(True)
    fwd(x).backward(dy_t)
    return x.grad


@pytest.mark.parametrize("method", sorted(BACKWARD))
def test_backward_pointwise_against_autograd(method):
    x_t, dy_t = torch.randn(SHAPE), torch.randn(SHAPE)
    g = _graph()
    x, dy = g.tensor_like(x_t), g.tensor_like(dy_t)
    out = _run(g, {x: x_t, dy: dy_t}, getattr(g, method)(loss=dy, input=x), SHAPE)
    torch.testing.assert_close(out, _autograd_backward(_TORCH_FORWARD_OF[method], x_t, dy_t), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "method, kwargs, fwd",
    [
        ("relu", {}, F.relu),
        ("relu", {"lower_clip": -0.5, "upper_clip": 1.0}, lambda x: torch.clamp(x, -0.5, 1.0)),
        ("relu", {"negative_slope": 0.1}, lambda x: F.leaky_relu(x, 0.1)),
        ("leaky_relu", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2)),
        ("swish", {}, F.silu),
        ("swish", {"swish_beta": 1.7}, lambda x: x * torch.sigmoid(1.7 * x)),
        ("silu", {}, F.silu),
    ],
)
def test_parametrized_activations_and_their_backward(method, kwargs, fwd):
    x_t, dy_t = torch.randn(SHAPE) * 2, torch.randn(SHAPE)
    g = _graph()
    x = g.tensor_like(x_t)
    out = _run(g, {x: x_t}, getattr(g, method)(input=x, **kwargs), SHAPE)
    torch.testing.assert_close(out, fwd(x_t), rtol=1e-5, atol=1e-5)
    if method == "silu":
        return
    bwd = {"relu": "relu_backward", "leaky_relu": "leaky_relu_backward", "swish": "swish_backward"}[method]
    g = _graph()
    x, dy = g.tensor_like(x_t), g.tensor_like(dy_t)
    out = _run(g, {x: x_t, dy: dy_t}, getattr(g, bwd)(loss=dy, input=x, **kwargs), SHAPE)
    torch.testing.assert_close(out, _autograd_backward(fwd, x_t, dy_t), rtol=1e-5, atol=1e-5)


def test_bias_scale_select_gen_index():
    x_t, b_t, s_t = torch.randn(SHAPE), torch.randn(1, 1, SHAPE[2]), torch.randn(SHAPE[0], 1, 1)
    m_t = torch.randint(0, 2, SHAPE).float()
    g = _graph()
    x, b, s, m = (g.tensor_like(t) for t in (x_t, b_t, s_t, m_t))
    y = g.binary_select(input0=g.bias(input=x, bias=b), input1=g.scale(input=x, scale=s), mask=m)
    out = _run(g, {x: x_t, b: b_t, s: s_t, m: m_t}, y, SHAPE)
    torch.testing.assert_close(out, torch.where(m_t != 0, x_t + b_t, x_t * s_t))
    g = _graph()
    x = g.tensor_like(x_t)
    idx = g.gen_index(input=x, axis=1)
    out = _run(g, {x: x_t}, idx, SHAPE, dtype=torch.int32)
    assert idx.get_data_type() is cudnn.data_type.INT32
    assert torch.equal(out, torch.arange(SHAPE[1], dtype=torch.int32).view(1, -1, 1).expand(SHAPE))


def test_every_pointwise_builder_is_covered():
    covered = {
        *UNARY,
        *BINARY_AB,
        *BINARY_01,
        *COMPARE,
        *BACKWARD,
        "relu",
        "leaky_relu",
        "relu_backward",
        "leaky_relu_backward",
        "swish",
        "silu",
        "swish_backward",
    }
    covered |= {"bias", "scale", "binary_select", "gen_index"}
    assert covered == set(POINTWISE_METHODS)


def test_bf16_chain_rounds_intermediates_to_their_dtype():
    """A virtual bf16 intermediate is rounded to bf16 before the next node (the graph's declaration)."""
    x_t = torch.randn(SHAPE).bfloat16()
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.BFLOAT16, handle=cudnn.create_handle(device="cpu"))
    x = g.tensor_like(x_t)
    y = g.exp(input=g.mul(a=x, b=x))
    out = _run(g, {x: x_t}, y, SHAPE, dtype=torch.bfloat16)
    ref = torch.exp((x_t.float() * x_t.float()).bfloat16().float())
    assert_close_fa(out, ref, ref.bfloat16(), "exp(x*x)")


@pytest.mark.parametrize(
    "a_shape, b_shape, transpose_b",
    [((3, 17, 24), (3, 24, 9), False), ((2, 17, 24), (1, 24, 9), False), ((1, 33, 16), (1, 16, 12), True)],
)
def test_matmul_batch_broadcast_and_strided_b(a_shape, b_shape, transpose_b):
    a_t = torch.randn(a_shape).bfloat16()
    b_t = torch.randn(b_shape).bfloat16()
    if transpose_b:  # a column-major B: strides (K*N, 1, K)
        b_t = torch.randn(b_shape[0], b_shape[2], b_shape[1]).bfloat16().transpose(1, 2)
    g = _graph(cudnn.data_type.BFLOAT16)
    a, b = g.tensor_like(a_t), g.tensor_like(b_t)
    assert b.get_stride() == list(b_t.stride())
    c = g.matmul(A=a, B=b)
    out_shape = (max(a_shape[0], b_shape[0]), a_shape[1], b_shape[2])
    out = _run(g, {a: a_t, b: b_t}, c, out_shape, dtype=torch.bfloat16)
    ref = a_t.double() @ b_t.double()
    assert_close_fa(out, ref.float(), (a_t @ b_t), "C")


_REDUCE = {
    "ADD": lambda x, d: x.sum(d, keepdim=True),
    "MUL": lambda x, d: x.prod(d[0], keepdim=True) if len(d) == 1 else x.prod(d[0], keepdim=True).prod(d[1], keepdim=True),
    "MIN": lambda x, d: x.amin(d, keepdim=True),
    "MAX": lambda x, d: x.amax(d, keepdim=True),
    "AMAX": lambda x, d: x.abs().amax(d, keepdim=True),
    "AVG": lambda x, d: x.mean(d, keepdim=True),
    "NORM1": lambda x, d: torch.linalg.vector_norm(x, 1, d, keepdim=True),
    "NORM2": lambda x, d: torch.linalg.vector_norm(x, 2, d, keepdim=True),
    "MUL_NO_ZEROS": lambda x, d: torch.where(x == 0, torch.ones_like(x), x).prod(d[0], keepdim=True),
}


# MUL_NO_ZEROS over one axis only: its multi-axis path is MUL's
@pytest.mark.parametrize("mode, dims", [(m, d) for m in sorted(_REDUCE) for d in ((2,), (0, 2)) if not (m == "MUL_NO_ZEROS" and len(d) > 1)])
def test_reduction_modes(mode, dims):
    x_t = torch.randn(SHAPE) * 0.9
    if mode == "MUL_NO_ZEROS":
        x_t[0, 0, :3] = 0
    out_shape = tuple(1 if i in dims else s for i, s in enumerate(SHAPE))
    g = _graph()
    x = g.tensor_like(x_t)
    y = g.reduction(input=x, mode=getattr(cudnn.reduction_mode, mode))
    y.set_dim(list(out_shape))
    out = _run(g, {x: x_t}, y, out_shape)
    torch.testing.assert_close(out, _REDUCE[mode](x_t, list(dims)), rtol=1e-5, atol=1e-5)


def test_matmul_then_reduction_amax_epilogue():
    """A gemm-amax shaped graph: C = A @ B (output) and amax(|C|) (output) from one graph."""
    a_t, b_t = torch.randn(1, 16, 32), torch.randn(1, 32, 8)
    g = _graph()
    a, b = g.tensor_like(a_t), g.tensor_like(b_t)
    c = g.matmul(A=a, B=b)
    amax = g.reduction(input=c, mode=cudnn.reduction_mode.AMAX)
    amax.set_dim([1, 1, 1]).set_output(True)
    c.set_output(True)
    g.build()
    c_buf, amax_buf = torch.full((1, 16, 8), math.nan), torch.full((1, 1, 1), math.nan)
    g.execute({a: a_t, b: b_t, c: c_buf, amax: amax_buf}, None)
    torch.testing.assert_close(c_buf, a_t @ b_t)
    torch.testing.assert_close(amax_buf, (a_t @ b_t).abs().amax().view(1, 1, 1))


def test_a_family_node_kind_joins_the_graph_and_the_reference_engine():
    """Room for kda / gdn / grouped matmul: a new kind, its builder and its reference op, registered from outside core."""
    from cudnn.graph.nodes import register_graph_method, register_node_kind, set_shape
    from cudnn.graph.reference import register_reference_op

    def infer(graph, node):
        x = node.inputs["x"]
        set_shape(node, "y", node.outputs["y"], x.dim)
        node.outputs["y"]._data_type = x.data_type

    def reference(ctx):
        ctx.output("y", ctx.input("x").cumsum(dim=-1) * ctx.attrs["alpha"])

    register_node_kind("toy_cumsum", infer, replace=True)
    register_graph_method(
        "toy_cumsum", lambda self, x, alpha=1.0, name="": self.add_node("toy_cumsum", name, {"x": x}, ["y"], {"alpha": alpha}).outputs["y"], replace=True
    )
    register_reference_op("toy_cumsum", reference, replace=True)
    x_t = torch.randn(SHAPE)
    g = _graph()
    x = g.tensor_like(x_t)
    out = _run(g, {x: x_t}, g.toy_cumsum(x, alpha=2.0), SHAPE)
    torch.testing.assert_close(out, x_t.cumsum(-1) * 2.0)
