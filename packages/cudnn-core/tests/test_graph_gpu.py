"""The graph API on a GPU (marked ``gpu``: skipped without one; run with ci/gpu_tests.sh on the GPU host).

- the issue's example, unchanged apart from the device, through whatever kernel engine serves it (skips,
  listing every decline, while no family engine does);
- the same graph through the reference engine asked for by name (the CUDA policy);
- the core execute path never synchronizes (detector), and a first build + execute inside a
  ``torch.cuda.graph`` capture works, then replays.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
from cudnn_testing.tolerance import assert_close_fa  # noqa: E402

pytestmark = pytest.mark.gpu

M, K, N = 256, 128, 192


def _inputs():
    x = torch.randn(1, M, K, device="cuda").bfloat16()
    w = (torch.randn(1, K, N, device="cuda") / K**0.5).bfloat16()
    b = torch.randn(1, 1, N, device="cuda").bfloat16()
    return x, w, b


def _example(x_t, w_t, b_t, engines=None):
    graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
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


def _check(z_t, x_t, w_t, b_t):
    ref = torch.relu(x_t.float() @ w_t.float() + b_t.float())
    lowp = torch.relu(x_t @ w_t + b_t)
    assert_close_fa(z_t, ref, lowp, "z")


def test_issue_example_on_cuda_through_a_kernel_engine():
    x_t, w_t, b_t = _inputs()
    try:
        graph, (x, w, bias, z) = _example(x_t, w_t, b_t)
    except cudnn.cudnnGraphNotSupportedError as exc:
        pytest.skip(f"no kernel engine serves the example graph yet:\n{exc}")
    assert graph.get_plan_name_at_index(0) != "reference", "the reference engine must never be picked implicitly on CUDA"
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    ws = torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)
    z_t = torch.full((1, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, ws, handle=handle)
    torch.cuda.synchronize()
    _check(z_t, x_t, w_t, b_t)


def test_reference_engine_on_cuda_by_name_and_on_a_side_stream():
    x_t, w_t, b_t = _inputs()
    graph, (x, w, bias, z) = _example(x_t, w_t, b_t, engines=["reference"])
    assert graph.get_plan_names() == ["reference"]
    z_t = torch.full((1, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)  # filled before the side stream's wait
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    handle = cudnn.create_handle(device="cuda")
    cudnn.set_stream(handle=handle, stream=side.cuda_stream)
    graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, None, handle=handle)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    _check(z_t, x_t, w_t, b_t)


@pytest.mark.detector
def test_execute_path_never_synchronizes():
    """Rule 3 / R9 for the shared execute path (binding, workspace check, dispatch) with the reference plan."""
    x_t, w_t, b_t = _inputs()
    graph, (x, w, bias, z) = _example(x_t, w_t, b_t, engines=["reference"])
    z_t = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
    ws = torch.empty(max(graph.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, ws)  # warm
    torch.cuda.set_sync_debug_mode("error")
    try:
        graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    _check(z_t, x_t, w_t, b_t)


@pytest.mark.detector
def test_first_build_and_execute_inside_cuda_graph_capture():
    """Rule 8: the lazy first build happens inside capture (as in a serving stack's graph-cache miss)."""
    x_t, w_t, b_t = _inputs()
    z_t = torch.full((1, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cg = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        with torch.cuda.graph(cg, stream=stream):
            graph, (x, w, bias, z) = _example(x_t, w_t, b_t, engines=["reference"])
            handle = cudnn.create_handle(device="cuda", stream=stream.cuda_stream)
            graph.execute({x: x_t, w: w_t, bias: b_t, z: z_t}, None, handle=handle)
    torch.cuda.current_stream().wait_stream(stream)
    x_t.copy_(torch.randn_like(x_t))  # replay reads the new inputs
    cg.replay()
    torch.cuda.synchronize()
    _check(z_t, x_t, w_t, b_t)
