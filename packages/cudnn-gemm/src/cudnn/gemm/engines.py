"""Graph-API engines of cudnn.gemm, announced to the core Router through the ``cudnn.engines`` entry point.

``gemm_sm90``: a graph that is one ``matmul`` node, optionally followed by a bias ``add`` (pointwise ADD
of the matmul output and a (..., 1, N) tensor) and then optionally by one activation (``relu`` without
clips, ``gelu``, ``gelu_approx_tanh``), every intermediate virtual. It lowers to one
:class:`cudnn.gemm.GemmSm90` launch with the epilogue fused. Everything else is declined with the reason.

This module imports neither torch nor cutlass at top level (the Router imports it during discovery);
``check_support`` runs on metadata only, ``build_plan`` compiles (and allocates nothing), ``execute``
validates and launches on the handle's stream (Rules 1-3, 8; recipe R1).
"""

from __future__ import annotations

from cudnn.datatypes import data_type

_ACT_MODES = {"RELU_FWD": "relu", "GELU_FWD": "gelu_erf", "GELU_APPROX_TANH_FWD": "gelu_tanh"}


def _analyze(graph, who: str):
    """(matmul node, bias tensor or None, activation, output tensor); declines with NotImplementedError."""
    from cudnn.graph.engine import decline_if

    nodes = list(graph.nodes)
    decline_if(not nodes or nodes[0].kind != "matmul", f"{who}: serves matmul [+ bias add] [+ activation]; graph nodes are {[n.kind for n in nodes]}")
    mm = nodes[0]
    cur = mm.outputs["C"]
    bias = None
    act = "none"
    for node in nodes[1:]:
        decline_if(node.kind != "pointwise", f"{who}: node {node.name} ({node.kind}) cannot fuse into the GEMM epilogue")
        mode = node.attrs["mode"].name
        ins = [t for t in node.inputs.values() if t is not None]
        decline_if(cur not in ins, f"{who}: node {node.name} does not consume the previous result {cur.describe()}")
        decline_if(not cur.is_virtual, f"{who}: intermediate {cur.describe()} must be virtual to fuse")
        if mode == "ADD" and bias is None and act == "none":
            other = [t for t in ins if t is not cur]
            decline_if(len(other) != 1, f"{who}: bias add {node.name} needs exactly one other operand")
            bias = other[0]
            n = cur.dim[-1]
            decline_if(
                bias.is_virtual or bias.is_pass_by_value or bias.dim[-1] != n or any(d != 1 for d in bias.dim[:-1]),
                f"{who}: bias {bias.describe()} must be a (..., 1, {n}) tensor broadcast over rows",
            )
        elif mode in _ACT_MODES and act == "none":
            for key in ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope"):
                decline_if(node.attrs.get(key) not in (None, 0.0) and mode == "RELU_FWD", f"{who}: relu with {key} is not served")
            act = _ACT_MODES[mode]
        else:
            raise NotImplementedError(f"{who}: pointwise {mode} in {node.name} is not a fusable epilogue (bias add, then one activation)")
        cur = node.outputs["OUT_0"]
    decline_if(cur.is_virtual, f"{who}: the final result {cur.describe()} must be a graph output")
    return mm, bias, act, cur


def _desc(t, name, device):
    from cudnn.api_base import TensorDesc

    return TensorDesc(t.dim, t.stride, t.data_type, name, device)


class GemmSm90Engine:
    """matmul [+ bias] [+ relu | gelu | gelu_tanh] as one sm90 GEMM with a fused epilogue."""

    name = "gemm_sm90"
    priority = 100
    is_reference = False

    def check_support(self, graph) -> None:
        from cudnn.graph.engine import decline_if

        mm, bias, act, out = _analyze(graph, self.name)
        a, b = mm.inputs["A"], mm.inputs["B"]
        decline_if(graph.device is not None and not str(graph.device).startswith("cuda"), f"{self.name}: graph device {graph.device} is not CUDA")
        decline_if(a.is_virtual or b.is_virtual, f"{self.name}: A and B must be graph inputs")
        decline_if(a.rank != b.rank or a.rank not in (2, 3) or out.rank != a.rank, f"{self.name}: A {a.describe()}, B {b.describe()} must both be rank 2 or 3")
        decline_if(a.rank == 3 and a.dim[0] != b.dim[0], f"{self.name}: batch broadcast between A {a.describe()} and B {b.describe()} is not served")
        plan = self._adapter(graph, mm, bias, act, out)
        plan.check_support()  # the adapter's own declines (dtypes, majors, TMA alignment), metadata only

    def _adapter(self, graph, mm, bias, act, out):
        from .dense.api import GemmSm90

        dev = graph.device if graph.device and graph.device != "cuda" else None
        bias_desc = None
        if bias is not None:
            from cudnn.api_base import TensorDesc

            bias_desc = TensorDesc((bias.dim[-1],), (1,), bias.data_type, "bias", dev)
        return GemmSm90(_desc(mm.inputs["A"], "A", dev), _desc(mm.inputs["B"], "B", dev), _desc(out, "out", dev), bias=bias_desc, activation=act)

    def build_plan(self, graph):
        mm, bias, act, out = _analyze(graph, self.name)
        adapter = self._adapter(graph, mm, bias, act, out)
        adapter.compile()
        return GemmSm90Plan(self.name, adapter, mm.inputs["A"].uid, mm.inputs["B"].uid, out.uid, None if bias is None else bias.uid)


class GemmSm90Plan:
    """A built ``gemm_sm90`` plan: one launch, no workspace."""

    supports_overrides = False

    def __init__(self, name, adapter, a_uid, b_uid, out_uid, bias_uid):
        self.name = name
        self.adapter = adapter
        self.uids = (a_uid, b_uid, out_uid, bias_uid)

    def get_workspace_size(self) -> int:
        return 0

    def execute(self, variant_pack, workspace, stream, **kwargs) -> None:
        a_uid, b_uid, out_uid, bias_uid = self.uids
        bias = None
        if bias_uid is not None:
            t = variant_pack[bias_uid]
            bias = t.view(t.shape[-1])  # a (..., 1, N) broadcast row as its (N,) view: no copy
        self.adapter.execute(variant_pack[a_uid], variant_pack[b_uid], variant_pack[out_uid], bias=bias, current_stream=stream)


def register(registry) -> None:
    """Register this family's engines with ``registry`` (cudnn.graph's engine registry)."""
    registry.add(GemmSm90Engine())


__all__ = ["GemmSm90Engine", "register"]
_ = data_type
