"""``cudnn.Graph``: the context-manager form that builds on exit (upstream's wrapper). torch is needed to execute.

    with cudnn.Graph(io_data_type=cudnn.data_type.BFLOAT16, compute_data_type=cudnn.data_type.FLOAT,
                     inputs=["mm::A", "mm::B"], outputs=["mm::C"]) as g:
        c = g.matmul(name="mm", A=a_torch, B=b_torch)      # torch tensors become tensor_like descriptors
        c.set_output(True)
    out = g(a_torch, b_torch)                              # positional, in the order of ``inputs``
    outs = g({"mm::A": a, "mm::B": b})                     # or a dict; missing outputs are allocated

Tensors are named ``<node>::<argument>`` (inputs) and ``<node>::<index>`` or their own name (outputs);
they may also be addressed by cudnn.tensor, uid, or the torch tensor used while building. On exit the
graph runs ``validate, build_operation_graph, create_execution_plans(heuristics), check_support,
build_plans``; a workspace of ``get_workspace_size()`` bytes is allocated once (``workspace_alloc=False``
to pass your own at call time).
"""

from __future__ import annotations

from typing import Any

from ..datatypes import to_data_type
from .builder import pygraph
from .descriptors import tensor
from .enums import heur_mode

#: pygraph methods that are not node builders (called through unchanged).
_PASS_THROUGH = {
    "tensor",
    "tensor_like",
    "tensor_scalar",
    "get_workspace_size",
    "get_workspace_size_plan_at_index",
    "query_tensor_attributes_of_uid",
    "get_execution_plan_count",
    "get_plan_name_at_index",
    "get_plan_names",
    "get_declines",
    "nodes",
    "tensors",
    "device",
    "inputs",
    "outputs",
    "name",
}
_LIFECYCLE = {
    "validate",
    "build_operation_graph",
    "create_execution_plans",
    "check_support",
    "build_plans",
    "build",
    "execute",
    "execute_plan_at_index",
    "add_node",
}


def _is_array(obj: Any) -> bool:
    return not isinstance(obj, tensor) and hasattr(obj, "shape") and hasattr(obj, "dtype") and hasattr(obj, "stride")


class Graph:
    """Build a graph inside ``with``; it is planned on exit and callable afterwards."""

    def __init__(self, *, handle=None, inputs=None, outputs=None, heuristics=None, workspace_alloc: bool = True, engines: list[str] | None = None, **kwargs):
        for what, value in (("inputs", inputs), ("outputs", outputs), ("heuristics", heuristics)):
            if value is not None and not isinstance(value, (list, tuple)):
                raise ValueError(f"{what} must be a list or tuple")
        for key in ("io_data_type", "intermediate_data_type", "compute_data_type"):
            if key in kwargs:
                kwargs[key] = to_data_type(kwargs[key])
        self._kwargs = kwargs
        self._handle = None if isinstance(handle, str) and handle == "auto" else handle  # "auto": torch's current stream
        self._inputs_spec = list(inputs or [])
        self._outputs_spec = list(outputs or [])
        self._heuristics = list(heuristics or [heur_mode.A, heur_mode.FALLBACK])
        self._engines = engines
        self._workspace_alloc = workspace_alloc
        self._workspace = None
        self._graph: pygraph | None = None
        self._by_array: dict[int, tuple[Any, tensor]] = {}
        self._tensor_in: dict[str, tensor] = {}
        self._tensor_out: dict[str, tensor] = {}
        self._counts: dict[str, int] = {}
        self._input_order: list[tensor] | None = None
        self._output_order: list[tensor] | None = None
        self._built = False

    # -- building --------------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        if self._graph is not None:
            raise RuntimeError("Graph already created")
        self._graph = pygraph(handle=self._handle, **self._kwargs)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self._graph = None
            return False
        g = self._graph
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(self._heuristics, engines=self._engines)
        g.check_support()
        g.build_plans()
        self._built = True
        if self._workspace_alloc:
            import torch

            self._workspace = torch.empty(g.get_workspace_size(), device=self._device(), dtype=torch.uint8)
        if self._inputs_spec or self._outputs_spec:
            self.set_io_tuples(self._inputs_spec, self._outputs_spec)
        return False

    def _device(self) -> str:
        return self._graph.device or "cuda"

    def _as_graph_tensor(self, obj: Any) -> Any:
        if _is_array(obj):
            key = id(obj)
            if key not in self._by_array:
                src = obj.detach() if getattr(obj, "requires_grad", False) else obj
                self._by_array[key] = (obj, self._graph.tensor_like(src))  # keep obj alive: ids stay unique
            return self._by_array[key][1]
        if isinstance(obj, tuple):
            return tuple(self._as_graph_tensor(o) for o in obj)
        return obj

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        graph = self.__dict__.get("_graph")
        if graph is None:
            raise RuntimeError(f"Graph.{name}: enter the `with cudnn.Graph(...) as g:` block first")
        attr = getattr(graph, name)
        if name in _PASS_THROUGH or not callable(attr):
            return attr
        if name in _LIFECYCLE:
            raise RuntimeError(f"calling {name} via cudnn.Graph is not allowed: the graph is built when the `with` block exits")
        if self._built:
            raise RuntimeError(f"Graph.{name}: the graph was already built; add nodes inside the `with` block")

        def builder(*args, **kwargs):
            count = self._counts.get(name, 0)
            self._counts[name] = count + 1
            node_name = kwargs.setdefault("name", f"{name}.{count}") or f"{name}.{count}"
            kwargs["name"] = node_name
            args = [self._as_graph_tensor(a) for a in args]
            kwargs = {k: self._as_graph_tensor(v) for k, v in kwargs.items()}
            for i, a in enumerate(args):
                if isinstance(a, tensor):
                    self._tensor_in[f"{node_name}::{i}"] = a
            for k, v in kwargs.items():
                if isinstance(v, tensor):
                    self._tensor_in[f"{node_name}::{k}"] = v
            out = attr(*args, **kwargs)
            outs = [out] if isinstance(out, tensor) else list(out or [])
            for i, t in enumerate(outs):
                if isinstance(t, tensor):
                    self._tensor_out[f"{node_name}::{i}"] = t
                    self._tensor_out.setdefault(t.name, t)
            return out

        return builder

    # -- io ----------------------------------------------------------------------------------------
    def _find(self, key: Any, table: dict[str, tensor]) -> tensor:
        if isinstance(key, tensor):
            return key
        if isinstance(key, str):
            if key in table:
                return table[key]
            for t in table.values():
                if t.name == key:
                    return t
        elif isinstance(key, int):
            for t in table.values():
                if t.uid == key:
                    return t
        elif id(key) in self._by_array:
            return self._by_array[id(key)][1]
        raise ValueError(f"{key!r} is not a tensor of this graph; known names: {sorted(table)}")

    def set_io_tuples(self, inputs: list, outputs: list) -> None:
        """The order of positional inputs and returned outputs."""
        if not self._built:
            self._inputs_spec, self._outputs_spec = list(inputs), list(outputs)
            return
        ins = [self._find(k, self._tensor_in) for k in inputs]
        outs = [self._find(k, self._tensor_out) for k in outputs]
        for i, t in enumerate(ins):
            if t.is_virtual:
                raise ValueError(f"input at index {i} ({t.describe()}) is a virtual tensor")
        self._input_order, self._output_order = ins, outs

    def _alloc(self, t: tensor, handle):
        import torch

        from ..datatypes import to_torch_dtype

        device = self._device()
        if device.startswith("cuda"):
            from .._torch_stream import stream_context

            with stream_context(getattr(handle, "stream", None), device):  # R2: allocate on the launch stream
                return torch.empty_strided(t.dim, t.stride, dtype=to_torch_dtype(t.data_type), device=device)
        return torch.empty_strided(t.dim, t.stride, dtype=to_torch_dtype(t.data_type), device=device)

    def __call__(self, *args, handle=None, workspace=None):
        """Execute: ``g(x, w)`` (positional, after inputs/outputs or set_io_tuples) or ``g({name: tensor})`` (returns the dict)."""
        if not self._built:
            raise RuntimeError("the graph is built when the `with` block exits; call it afterwards")
        handle = handle if handle is not None else self._handle
        workspace = workspace if workspace is not None else self._workspace
        g = self._graph
        if len(args) == 1 and isinstance(args[0], dict):
            given = args[0]
            pack: dict[tensor, Any] = {}
            for key, value in given.items():
                table = {**self._tensor_in, **self._tensor_out}
                pack[self._find(key, table)] = value
            for t in {id(t): t for t in self._tensor_out.values()}.values():
                if not t.is_virtual and t not in pack:
                    given[t.name] = pack[t] = self._alloc(t, handle)  # keyed by the output's (current) name
            g.execute(pack, workspace, handle=handle)
            return given
        if self._input_order is None:
            raise ValueError("positional execution needs inputs=/outputs= (or set_io_tuples) first")
        if len(args) != len(self._input_order):
            raise ValueError(f"number of arguments ({len(args)}) does not match number of inputs ({len(self._input_order)})")
        pack = dict(zip(self._input_order, args, strict=False))
        results = [self._alloc(t, handle) for t in self._output_order]
        pack.update(zip(self._output_order, results, strict=False))
        g.execute(pack, workspace, handle=handle)
        return results[0] if len(results) == 1 else tuple(results)
