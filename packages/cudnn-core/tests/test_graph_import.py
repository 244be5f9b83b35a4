"""Fresh interpreters: ``import cudnn; cudnn.pygraph(...)`` and building a graph through
``create_execution_plans`` / ``check_support`` import neither torch nor cutlass (nor any family's kernel
code through engine discovery); ``build_plans`` is where the reference engine first imports torch.
"""

from __future__ import annotations

import importlib.util

import pytest

from cudnn_testing.subproc import check_fresh, run_fresh

HEAVY = ("torch", "cutlass", "cuda", "tvm_ffi", "numpy")

_BUILD = """
import sys, cudnn
M, K, N = 64, 32, 48
graph = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=cudnn.create_handle(device="cpu"))
x = graph.tensor(name="x", dim=[1, M, K], stride=[M * K, K, 1], data_type=cudnn.data_type.BFLOAT16)
w = graph.tensor(name="w", dim=[1, K, N], stride=[K * N, N, 1], data_type=cudnn.data_type.BFLOAT16)
bias = graph.tensor(name="bias", dim=[1, 1, N], stride=[N, N, 1], data_type=cudnn.data_type.BFLOAT16)
y = graph.matmul(name="mm", A=x, B=w)
z = graph.relu(input=graph.add(a=y, b=bias))
z.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)
q = graph.tensor(name="q", dim=[1, 2, 8, 16], data_type=cudnn.data_type.BFLOAT16)
graph.validate(); graph.build_operation_graph()
graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
graph.check_support()
print("PLANS", graph.get_plan_names())
print("HEAVY", sorted(m for m in HEAVY if m in sys.modules))
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="build_plans of the reference engine needs torch (not installed on this lane)")
def test_graph_build_through_check_support_imports_nothing_heavy():
    out = check_fresh(f"HEAVY = {HEAVY!r}\n" + _BUILD + "graph.build_plans()\nprint('AFTER_BUILD', 'torch' in sys.modules)\n")
    assert "PLANS ['reference']" in out
    assert "HEAVY []" in out, out
    assert "AFTER_BUILD True" in out  # the reference engine's build_plan is the first heavy import


def test_graph_build_through_check_support_works_with_torch_and_cutlass_absent():
    proc = run_fresh(f"HEAVY = {HEAVY!r}\n" + _BUILD + "graph.build_plans()\n", blocked=("torch", "cutlass"))
    assert "PLANS ['reference']" in proc.stdout and "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode != 0 and "No module named 'torch'" in proc.stderr  # build_plans needs torch, and says so


def test_lazy_exports_resolve_to_the_graph_package():
    out = check_fresh(
        """
        import sys, cudnn
        names = ["pygraph", "Graph", "heur_mode", "create_handle", "destroy_handle", "set_stream", "get_stream",
                 "build_plan_policy", "norm_forward_phase", "reduction_mode", "pointwise_mode", "tensor",
                 "diagonal_alignment", "attention_implementation", "cudnnGraphNotSupportedError"]
        for n in names:
            assert getattr(cudnn, n) is getattr(sys.modules["cudnn.graph"], n), n
        assert isinstance(cudnn.tensor, type) and cudnn.tensor.__name__ == "tensor"   # the class, not a submodule
        print("OK", "torch" in sys.modules)
        """
    )
    assert "OK False" in out
