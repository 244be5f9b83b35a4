"""The Router with fake engines: ranking, select/deselect, declines falling through (check_support and
build_plan), the reference engine's CUDA policy, workspace and override filters, discovery from entry
points and the namespace scan, a family whose import fails, and the error that lists every reason.
"""

from __future__ import annotations

import textwrap

import pytest

import cudnn
from cudnn.graph import cudnnGraphNotSupportedError
from cudnn.graph.engine import Engine, EngineRegistry, Plan, decline_if, single_node
from cudnn.graph.router import REFERENCE_ON_CUDA, discover, namespace_engine_modules

FP32 = cudnn.data_type.FLOAT


class FakePlan(Plan):
    def __init__(self, name, workspace=0, overrides=False, log=None):
        self.name, self._ws, self.supports_overrides, self.log = name, workspace, overrides, log if log is not None else []

    def get_workspace_size(self):
        return self._ws

    def execute(self, variant_pack, workspace, stream, **kwargs):
        self.log.append((self.name, sorted(variant_pack), workspace, stream, kwargs))


class FakeEngine(Engine):
    def __init__(self, name, priority=0, decline=None, build_decline=None, workspace=0, overrides=False, kind="matmul"):
        self.name, self.priority = name, priority
        self.decline, self.build_decline, self.workspace, self.overrides, self.kind = decline, build_decline, workspace, overrides, kind
        self.log = []

    def check_support(self, graph):
        single_node(graph, self.kind, self.name)
        decline_if(self.decline is not None, f"{self.name}: {self.decline}")

    def build_plan(self, graph):
        decline_if(self.build_decline is not None, f"{self.name}: {self.build_decline}")
        return FakePlan(self.name, self.workspace, self.overrides, self.log)


class FakeReference(FakeEngine):
    is_reference = True


def _graph(device=None, **kw):
    handle = cudnn.create_handle(device=device) if device else None
    g = cudnn.pygraph(io_data_type=FP32, handle=handle, **kw)
    a = g.tensor(name="a", dim=[1, 4, 8])
    b = g.tensor(name="b", dim=[1, 8, 2])
    c = g.matmul(name="mm", A=a, B=b)
    c.set_output(True)
    g.validate()
    g.build_operation_graph()
    return g, (a, b, c)


def _registry(*engines):
    reg = EngineRegistry()
    for e in engines:
        reg.add(e)
    return reg


def test_two_engines_accepting_rank_by_priority_and_first_builds():
    low, high = FakeEngine("low", priority=1), FakeEngine("high", priority=10)
    g, (a, b, c) = _graph("cuda:0")
    g.create_execution_plans([cudnn.heur_mode.A], registry=_registry(low, high))
    assert g.get_execution_plan_count() == 2
    assert [g.get_plan_name_at_index(i) for i in range(2)] == ["high", "low"]
    g.check_support()
    g.build_plans()  # HEURISTICS_CHOICE: the first that builds
    g.execute(_pack(a, b, c), None)
    assert high.log and not low.log


def _pack(a, b, c):
    return {t: _FakeArr(t.dim) for t in (a, b, c)}


def test_equal_priority_keeps_registration_order_and_policy_all_builds_every_plan():
    first, second = FakeEngine("first"), FakeEngine("second")
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=_registry(first, second))
    g.build_plans(cudnn.build_plan_policy.ALL)
    assert g.get_plan_names() == ["first", "second"]
    g.execute_plan_at_index(_pack(a, b, c), None, 1)
    assert second.log and not first.log


def test_select_and_deselect_engines():
    e1, e2, e3 = FakeEngine("e1", 3), FakeEngine("e2", 2), FakeEngine("e3", 1)
    reg = _registry(e1, e2, e3)
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=reg)
    g.deselect_engines(["e1"])
    assert g.get_plan_names() == ["e2", "e3"]
    assert g.get_declines()["e1"] == "deselected by deselect_engines()"
    g.select_engines(["e3"])
    assert g.get_plan_names() == ["e3"]
    g.build_plans()
    g.execute(_pack(a, b, c), None)
    assert e3.log and not e2.log
    # before create_execution_plans, select_engines is the request
    g2, _ = _graph("cuda")
    g2.select_engines(["e2"])
    g2.create_execution_plans(registry=reg)
    assert g2.get_plan_names() == ["e2"]
    # and create_execution_plans(engines=...) is the same request; unknown names are an error
    g3, _ = _graph("cuda")
    g3.create_execution_plans(engines=["e3", "e1"], registry=reg)
    assert g3.get_plan_names() == ["e1", "e3"]
    with pytest.raises(ValueError, match=r"unknown engine\(s\) \['nope'\]; registered engines: \['e1', 'e2', 'e3'\]"):
        g3.create_execution_plans(engines=["nope"], registry=reg)


def test_check_support_decline_falls_through():
    picky, ok = FakeEngine("picky", 10, decline="K must be a multiple of 64"), FakeEngine("ok", 1)
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=_registry(picky, ok))
    assert g.get_plan_names() == ["ok"]
    assert g.get_declines() == {"picky": "picky: K must be a multiple of 64"}


def test_build_plan_decline_moves_to_the_next_plan():
    late, ok = FakeEngine("late", 10, build_decline="no tile config fits"), FakeEngine("ok", 1)
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=_registry(late, ok))
    assert g.get_plan_names() == ["late", "ok"]
    g.build_plans()
    assert g.get_plan_names() == ["ok"]
    assert "no tile config fits" in g.get_declines()["late"]
    g.execute(_pack(a, b, c), None)
    assert ok.log


def test_error_lists_every_decline_reason():
    engines = [FakeEngine("gemm_sm90", 10, decline="A is fp32; accepted bf16, fp16"), FakeEngine("sdpa_sm90", 5, kind="sdpa"), FakeReference("reference", -100)]
    g, _ = _graph("cuda:0")
    with pytest.raises(cudnnGraphNotSupportedError) as info:
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK], registry=_registry(*engines))
    msg = str(info.value)
    assert "no engine serves graph 'test_graph' (device cuda:0; nodes: matmul 'mm')" in msg
    assert "gemm_sm90: gemm_sm90: A is fp32; accepted bf16, fp16" in msg
    assert "sdpa_sm90: sdpa_sm90: serves a graph of exactly one sdpa node; this graph has nodes ['matmul']" in msg
    assert f"reference: {REFERENCE_ON_CUDA}" in msg
    assert set(info.value.declines) == {"gemm_sm90", "sdpa_sm90", "reference"}


def test_build_failure_of_every_plan_lists_reasons():
    g, _ = _graph("cuda")
    g.create_execution_plans(registry=_registry(FakeEngine("x", build_decline="compile failed: smem")))
    with pytest.raises(cudnnGraphNotSupportedError, match=r"no plan builds for graph 'test_graph'(.|\n)*- x: build_plan declined: x: compile failed: smem"):
        g.build_plans()


def test_reference_is_ranked_last_and_offered_on_cuda_only_by_name():
    ref, kernel = FakeReference("reference", 10**6), FakeEngine("kernel", -5)
    reg = _registry(ref, kernel)
    g, _ = _graph("cuda")
    g.create_execution_plans(registry=reg)
    assert g.get_plan_names() == ["kernel"]  # not offered on CUDA unless asked for
    g.create_execution_plans(engines=["reference"], registry=reg)
    assert g.get_plan_names() == ["reference"]
    g_unknown, _ = _graph(None)  # unknown device: same policy as CUDA
    g_unknown.create_execution_plans(registry=reg)
    assert g_unknown.get_plan_names() == ["kernel"]
    g_cpu, _ = _graph("cpu")
    g_cpu.create_execution_plans(registry=reg)
    assert g_cpu.get_plan_names() == ["kernel", "reference"]  # offered, but never ahead of a kernel engine


def test_deselect_workspace_greater_than():
    big, small = FakeEngine("big", 10, workspace=1 << 20), FakeEngine("small", 1, workspace=256)
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=_registry(big, small))
    g.deselect_workspace_greater_than(4096)
    g.build_plans()
    assert g.get_plan_names() == ["small"] and g.get_workspace_size() == 256
    assert "needs 1048576 workspace bytes > deselect_workspace_greater_than(4096)" in g.get_declines()["big"]
    g2, _ = _graph("cuda")
    g2.create_execution_plans(registry=_registry(big, small))
    g2.build_plans(cudnn.build_plan_policy.ALL)
    g2.deselect_workspace_greater_than(4096)  # after build: filters built plans
    assert g2.get_plan_names() == ["small"]


def test_override_enabled_graph_declines_tensor_only_plans_and_keeps_capable_ones():
    fixed, flexible = FakeEngine("fixed", 10), FakeEngine("flexible", 1, overrides=True)
    g, (a, b, c) = _graph("cuda", is_override_shape_enabled=True)
    g.create_execution_plans(registry=_registry(fixed, flexible))
    g.build_plans()
    assert g.get_plan_names() == ["flexible"]
    assert "cannot consume execute-time shape/stride overrides" in g.get_declines()["fixed"]
    pack = {a: _FakeArr((1, 3, 8)), b: _FakeArr((1, 8, 2)), c: _FakeArr((1, 3, 2))}
    g.execute(pack, None, override_uids=[a.uid, c.uid], override_shapes=[[1, 3, 8], [1, 3, 2]], override_strides=[[24, 8, 1], [6, 2, 1]])
    assert flexible.log[-1][4]["overrides"] == {a.uid: ((1, 3, 8), (24, 8, 1)), c.uid: ((1, 3, 2), (6, 2, 1))}


def test_handle_stream_reaches_the_plan():
    e = FakeEngine("e")
    g, (a, b, c) = _graph("cuda")
    g.create_execution_plans(registry=_registry(e))
    g.build_plans()
    h = cudnn.create_handle()
    cudnn.set_stream(handle=h, stream=12345)
    pack = {a: _FakeArr((1, 4, 8)), b: _FakeArr((1, 8, 2)), c: _FakeArr((1, 4, 2))}
    g.execute(pack, None, handle=h)
    assert e.log[-1][3] == 12345 and e.log[-1][1] == sorted([a.uid, b.uid, c.uid])


class _FakeArr:
    """A metadata-only CUDA 'tensor' (shape, stride(), dtype, device): the shared checks need nothing more."""

    def __init__(self, shape):
        self.shape = shape
        self.dtype = "torch.float32"
        self.device = "cuda:0"
        st, acc = [], 1
        for s in reversed(shape):
            st.append(acc)
            acc *= s
        self._stride = tuple(reversed(st))

    def stride(self):
        return self._stride


# -- discovery ------------------------------------------------------------------------------------------
def _family(tmp_path, name, engines_py):
    pkg = tmp_path / "cudnn" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines.py").write_text(textwrap.dedent(engines_py))
    return str(tmp_path / "cudnn")


GOOD = """
from cudnn.graph.engine import Engine, single_node
class GoodEngine(Engine):
    name = "good_fam_engine"
    priority = 3
    def check_support(self, graph):
        single_node(graph, "matmul", self.name)
    def build_plan(self, graph):
        raise NotImplementedError("not in this test")
def register(registry):
    registry.add(GoodEngine())
"""
BROKEN = """
import frobnicate_kernels_that_are_not_installed  # the family's import fails
def register(registry):
    raise AssertionError("never reached")
"""


def test_namespace_scan_finds_family_engines_and_reports_a_broken_family(tmp_path):
    good = _family(tmp_path / "a", "goodfam", GOOD)
    broken = _family(tmp_path / "b", "brokenfam", BROKEN)
    paths = [good, broken]
    assert namespace_engine_modules(paths) == ["cudnn.goodfam.engines", "cudnn.brokenfam.engines"]
    import cudnn as pkg

    saved = list(pkg.__path__)
    pkg.__path__.extend(paths)  # as extend_path does for src trees on PYTHONPATH
    try:
        reg = discover(entry_points=False, paths=paths)
    finally:
        pkg.__path__[:] = saved
    assert "good_fam_engine" in reg and "reference" in reg
    assert "cudnn.brokenfam.engines" in reg.load_errors
    assert "ModuleNotFoundError: No module named 'frobnicate_kernels_that_are_not_installed'" in reg.load_errors["cudnn.brokenfam.engines"]
    # a graph nothing serves reports the broken family's import error with every decline
    g = cudnn.pygraph(io_data_type=FP32)
    x = g.tensor(name="x", dim=[4])
    g.relu(input=x).set_output(True)
    g.validate()
    g.build_operation_graph()
    with pytest.raises(cudnnGraphNotSupportedError) as info:
        g.create_execution_plans(registry=reg)
    msg = str(info.value)
    assert "good_fam_engine: good_fam_engine: serves a graph of exactly one matmul node" in msg
    assert "reference: the reference engine (pure PyTorch) serves a CUDA graph" in msg
    assert "families whose engines failed to load (absent):\n  - cudnn.brokenfam.engines: ModuleNotFoundError" in msg
    assert info.value.import_errors == reg.load_errors


def test_entry_points_are_loaded_once_and_failures_recorded(monkeypatch):
    from cudnn.graph import router

    class EP:
        def __init__(self, name, value, fn):
            self.name, self.value, self._fn = name, value, fn

        def load(self):
            return self._fn()

    def good():
        return lambda reg: reg.add(FakeEngine("from_entry_point", 7))

    def bad():
        raise ImportError("cannot import name 'SdpaFwdSm90' (cudnn-sdpa is half-installed)")

    eps = [
        EP("reference", "cudnn.graph.reference:register", lambda: (_ for _ in ()).throw(AssertionError("loaded twice"))),
        EP("goodfam", "cudnn.goodfam_ep.engines:register", good),
        EP("sdpa_broken", "cudnn.sdpa_broken.engines:register", bad),
    ]
    monkeypatch.setattr(router, "_entry_points", lambda: eps)
    reg = discover(namespace=False)
    assert reg.names() == ["from_entry_point", "reference"]
    assert reg.load_errors == {"cudnn.sdpa_broken.engines": "ImportError: cannot import name 'SdpaFwdSm90' (cudnn-sdpa is half-installed)"}


def test_engine_names_are_unique_and_contract_is_checked():
    reg = _registry(FakeEngine("dup"))
    with pytest.raises(ValueError, match="already registered"):
        reg.add(FakeEngine("dup"))

    class NoBuild:
        name = "nobuild"

        def check_support(self, graph):
            return None

    with pytest.raises(TypeError, match="has no callable build_plan"):
        reg.add(NoBuild())


def test_default_registry_discovers_the_repository_families():
    """Every family present in this environment loads its engines without error (a family's broken engines.py shows here)."""
    reg = cudnn.graph.router.default_registry()
    assert "reference" in reg
    present = namespace_engine_modules()
    if not present:
        pytest.skip("no family wheel or src tree is on this lane (cudnn-core alone)")
    for module in present:
        assert module in reg.loaded_sources
    assert not reg.load_errors, reg.load_errors
