"""The ``gemm_sm90`` graph engine: which graphs it accepts (metadata only, CPU), the plan it builds
(compile-only), and its execute against the fp32 reference (GPU)."""

from __future__ import annotations

import pytest

import cudnn
from cudnn.datatypes import data_type
from cudnn_testing.markers import skip_unless_cutedsl


def _graph(m=256, n=512, k=128, bias=True, act="gelu_approx_tanh", b_stride=None):
    g = cudnn.pygraph(io_data_type=data_type.BFLOAT16, compute_data_type=data_type.FLOAT)
    a = g.tensor(name="A", dim=[1, m, k], stride=[m * k, k, 1], data_type=data_type.BFLOAT16)
    b = g.tensor(name="B", dim=[1, k, n], stride=b_stride or [k * n, 1, k], data_type=data_type.BFLOAT16)
    y = g.matmul(name="mm", A=a, B=b)
    tensors = {"A": a, "B": b}
    if bias:
        bt = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=data_type.BFLOAT16)
        y = g.bias(name="bias_add", input=y, bias=bt)
        tensors["bias"] = bt
    if act:
        y = getattr(g, act)(name="act", input=y)
    y.set_output(True).set_data_type(data_type.BFLOAT16)
    tensors["Y"] = y
    return g, tensors


def test_engine_accepts_matmul_bias_activation():
    skip_unless_cutedsl("4.8.0", "cudnn.gemm engine")
    from cudnn.gemm.engines import GemmSm90Engine

    g, _ = _graph()
    g.validate()
    GemmSm90Engine().check_support(g)


@pytest.mark.parametrize(
    "kw,match",
    [(dict(act="sigmoid"), "not a fusable epilogue"), (dict(k=130), "multiple of 8"), (dict(b_stride=[128 * 512, 512 * 3, 3]), "unit stride")],
)
def test_engine_declines_with_reason(kw, match):
    from cudnn.gemm.engines import GemmSm90Engine

    g, _ = _graph(**kw)
    g.validate()
    with pytest.raises(NotImplementedError, match=match):
        GemmSm90Engine().check_support(g)


@pytest.mark.compile_only
def test_engine_builds_plan():
    skip_unless_cutedsl("4.8.0", "cudnn.gemm engine")
    from cudnn.gemm.engines import GemmSm90Engine

    g, _ = _graph(act="relu")
    g.validate()
    plan = GemmSm90Engine().build_plan(g)
    assert plan.get_workspace_size() == 0 and plan.adapter.config.activation == "relu" and plan.adapter.config.bias == "n"


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_approx_tanh", None])
def test_engine_executes_through_graph(act):
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_gemm import reference
    from cudnn_testing.tolerance import assert_close_fa

    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm engine")
    torch = pytest.importorskip("torch")
    m, n, k = 300, 520, 136
    g, t = _graph(m, n, k, act=act)
    g.build([cudnn.heur_mode.A])
    assert g.get_plan_name_at_index(0) == "gemm_sm90", g.get_plan_names()
    a = torch.randn(1, m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, n, k, device="cuda", dtype=torch.bfloat16).transpose(-1, -2)
    bias = torch.randn(1, 1, n, device="cuda", dtype=torch.bfloat16)
    y = torch.full((1, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    g.execute({t["A"]: a, t["B"]: b, t["bias"]: bias, t["Y"]: y}, None)
    torch.cuda.synchronize()
    name = {"relu": "relu", "gelu": "gelu_erf", "gelu_approx_tanh": "gelu_tanh", None: "none"}[act]
    ref, _ = reference(a, b, bias=bias[0, 0], activation=name)
    low, _ = reference(a, b, bias=bias[0, 0], activation=name, lowp=True)
    assert_close_fa(y, ref, low, name=f"graph matmul+bias+{act}")
