"""The issue's example graph (matmul + bias + relu) through the reference engine on the CPU, in every upstream form.

Run: PYTHONPATH=$(ls -d packages/*/src | tr '\\n' ':')shared python -m pytest packages/cudnn-core/tests/test_graph_example.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
from cudnn_testing.tolerance import assert_close_fa  # noqa: E402

M, K, N = 96, 64, 80


def _inputs(dtype=torch.bfloat16, device="cpu"):
    x = torch.randn(1, M, K, device=device).to(dtype)
    w = (torch.randn(1, K, N, device=device) / K**0.5).to(dtype)
    b = torch.randn(1, 1, N, device=device).to(dtype)
    return x, w, b


def _refs(x, w, b):
    ref = torch.relu(x.double() @ w.double() + b.double()).float()
    lowp = torch.relu(x @ w + b)
    return ref, lowp


def build_example(x_t, w_t, b_t, handle=None, engines=None):
    """The issue's code, verbatim apart from the device and the engine request."""
    graph = cudnn.pygraph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    x = graph.tensor(name="x", dim=[1, M, K], stride=[M * K, K, 1], data_type=cudnn.data_type.BFLOAT16)
    w = graph.tensor_like(w_t)
    bias = graph.tensor_like(b_t)
    y = graph.matmul(name="mm", A=x, B=w)
    z = graph.relu(input=graph.add(a=y, b=bias))
    z.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK], **({"engines": engines} if engines else {}))
    graph.check_support()
    graph.build_plans()
    return graph, (x, w, bias, z)


def test_issue_example_on_cpu_matches_torch():
    x_t, w_t, b_t = _inputs()
    handle = cudnn.create_handle()
    graph, (x, w, bias, z) = build_example(x_t, w_t, b_t, handle=handle)
    assert graph.get_plan_name_at_index(0) == "reference"  # a CPU graph (tensor_like of CPU tensors) gets the oracle
    ws = torch.empty(graph.get_workspace_size(), device="cpu", dtype=torch.uint8)
    z_t = torch.full((1, M, N), float("nan"), dtype=torch.bfloat16)  # poisoned
    graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, ws, handle=handle)
    ref, lowp = _refs(x_t, w_t, b_t)
    assert_close_fa(z_t, ref, lowp, "z")


def test_variant_pack_by_uid_and_repeat_execute():
    graph, (x, w, bias, z) = build_example(*_inputs())
    for _ in range(2):  # fresh inputs each time: bindings are per call
        x_t, w_t, b_t = _inputs()
        z_t = torch.full((1, M, N), float("nan"), dtype=torch.bfloat16)
        graph.execute({x.get_uid(): x_t, w.get_uid(): w_t, bias.get_uid(): b_t, z.get_uid(): z_t}, None)
        assert_close_fa(z_t, *_refs(x_t, w_t, b_t), "z")


def test_build_shorthand_and_plan_queries():
    x_t, w_t, b_t = _inputs()
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT, handle=cudnn.create_handle(device="cpu"))
    x, w, b = graph.tensor_like(x_t), graph.tensor_like(w_t), graph.tensor_like(b_t)
    z = graph.relu(graph.bias(graph.matmul(x, w), b))
    z.set_output(True)
    graph.build([cudnn.heur_mode.A])
    assert graph.get_execution_plan_count() == 1 and graph.get_plan_names() == ["reference"]
    assert graph.get_workspace_size() == 0 and graph.get_workspace_size_plan_at_index(0) == 0
    assert z.get_data_type() is cudnn.data_type.BFLOAT16  # io_data_type default for a non-virtual output
    assert graph.query_tensor_attributes_of_uid(z.get_uid()) is z
    z_t = torch.full((1, M, N), float("nan"), dtype=torch.bfloat16)
    graph.execute_plan_at_index({x: x_t, w: w_t, b: b_t, z: z_t}, None, 0)
    assert_close_fa(z_t, *_refs(x_t, w_t, b_t), "z")


def test_with_graph_builds_on_exit_positional_and_dict_calls():
    x_t, w_t, b_t = _inputs()
    with cudnn.Graph(
        io_data_type=cudnn.data_type.BFLOAT16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        inputs=["mm::A", "mm::B", "add::b"],
        outputs=["out"],
    ) as g:
        y = g.matmul(name="mm", A=x_t, B=w_t)
        z = g.relu(input=g.add(name="add", a=y, b=b_t), name="act")
        z.set_output(True).set_name("out")
    assert g.get_execution_plan_count() == 1
    out = g(x_t, w_t, b_t)
    assert out.shape == (1, M, N) and out.dtype == torch.bfloat16
    assert_close_fa(out, *_refs(x_t, w_t, b_t), "positional")
    x2, w2, b2 = _inputs()
    res = g({"mm::A": x2, "mm::B": w2, "add::b": b2})
    assert_close_fa(res["out"], *_refs(x2, w2, b2), "dict")


def test_with_graph_rejects_lifecycle_calls_and_propagates_errors():
    x_t, w_t, _ = _inputs()
    with pytest.raises(cudnn.graph.GraphValidationError, match="K=64 but B"):
        with cudnn.Graph(io_data_type=cudnn.data_type.BFLOAT16) as g:
            g.matmul(name="mm", A=x_t, B=torch.randn(1, 32, N).bfloat16()).set_output(True)
    with cudnn.Graph(io_data_type=cudnn.data_type.BFLOAT16) as g:
        g.matmul(name="mm", A=x_t, B=w_t).set_output(True)
        with pytest.raises(RuntimeError, match="not allowed"):
            g.build_plans()


def test_scalar_by_value_and_constant_operands():
    x_t = torch.randn(2, 3, 4)
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=cudnn.create_handle(device="cpu"))
    x = graph.tensor_like(x_t)
    s = graph.tensor(name="s", dim=[1, 1, 1], stride=[1, 1, 1], data_type=cudnn.data_type.FLOAT, is_pass_by_value=True)
    y = graph.add(a=graph.scale(input=x, scale=s), b=0.5)  # by-value tensor, then a Python-number constant
    y.set_output(True)
    graph.build()
    out = torch.full_like(x_t, float("nan"))
    graph.execute({x: x_t, s: 3.0, y: out}, None)
    torch.testing.assert_close(out, x_t * 3.0 + 0.5)
    graph.execute({x: x_t, s: torch.tensor([[[-2.0]]]), y: out}, None)  # a host tensor works too
    torch.testing.assert_close(out, x_t * -2.0 + 0.5)


def test_execute_time_overrides_reach_the_reference_plan():
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, handle=cudnn.create_handle(device="cpu"), is_override_shape_enabled=True)
    a = graph.tensor(name="a", dim=[1, 8, 16], stride=[128, 16, 1])
    b = graph.tensor(name="b", dim=[1, 16, 4], stride=[64, 4, 1])
    c = graph.matmul(A=a, B=b)
    c.set_output(True)
    graph.build()
    a_t, b_t = torch.randn(1, 5, 16), torch.randn(1, 16, 4)  # M = 5 instead of 8
    c_t = torch.full((1, 5, 4), float("nan"))
    graph.execute(
        {a: a_t, b: b_t, c: c_t}, None, override_uids=[a.uid, c.uid], override_shapes=[[1, 5, 16], [1, 5, 4]], override_strides=[[80, 16, 1], [20, 4, 1]]
    )
    torch.testing.assert_close(c_t, a_t @ b_t)
    with pytest.raises(ValueError, match="override declares"):
        graph.execute(
            {a: a_t, b: b_t, c: c_t}, None, override_uids=[a.uid, c.uid], override_shapes=[[1, 6, 16], [1, 5, 4]], override_strides=[[96, 16, 1], [20, 4, 1]]
        )
