"""The one engine contract of the graph API (Rule 9): every family's engines and the reference engine.

An **engine** turns a validated graph into a **plan**; the Router (``cudnn.graph.router``) asks every
registered engine, ranks the ones that accept, and the graph builds and executes the first that builds.
The caller never branches on which engine was picked: same variant pack, workspace, stream, overrides.

Writing an engine (a family's ``cudnn/<family>/engines.py``)::

    from cudnn.graph.engine import Engine, Plan, decline_if, single_node

    class SdpaFwdSm90Engine(Engine):
        name = "sdpa_fwd_sm90"          # unique; users select / deselect engines by this name
        priority = 100                  # higher ranks first among kernel engines (reference is always last)

        def check_support(self, graph):               # metadata only: no torch, no cutlass import
            node = single_node(graph, "sdpa")         # declines unless the graph is exactly one sdpa node
            q = node.inputs["q"]
            decline_if(q.data_type not in (BF16, FP16), f"sdpa_fwd_sm90: q {q.describe()}: accepted dtypes bf16, fp16")
            ...                                       # decline with NotImplementedError naming tensor, shape, stride, dtype

        def build_plan(self, graph):                  # may import torch / the family's api.py; compiles the kernel
            return SdpaFwdPlan(...)                   # never allocates device memory, never syncs (Rule 8)

    def register(registry):                           # the ``cudnn.engines`` entry point (pyproject) calls this
        registry.add(SdpaFwdSm90Engine())

The module that defines ``register`` must import neither torch nor cutlass at top level: the Router
imports it while discovering engines, and ``create_execution_plans`` / ``check_support`` must stay light.

Discovery: the Router loads the ``cudnn.engines`` entry-point group (installed wheels) AND scans the
``cudnn`` namespace for ``cudnn.<pkg>.engines`` modules (src trees on PYTHONPATH, e.g. the GPU host),
calling each ``register(registry)`` once. A family whose import fails is absent; its error is reported
when nothing serves a graph.

What an engine sees (``graph`` is the validated ``cudnn.pygraph``; read it, never mutate it):

- ``graph.nodes``: tuple of :class:`cudnn.graph.nodes.Node` in topological (creation) order. A node has
  ``kind`` (``"matmul"``, ``"pointwise"``, ``"reduction"``, ``"sdpa"``, ``"sdpa_backward"`` or a kind a
  family registered), ``name``, ``inputs`` / ``outputs`` (port name -> tensor or None; ports are listed
  in ``cudnn.graph.nodes``), ``attrs`` (plan-time values, e.g. ``attrs["mode"]`` of a pointwise node is a
  ``cudnn.pointwise_mode``) and ``compute_data_type``.
- tensors (``cudnn.tensor``): ``name``, ``uid``, ``dim``, ``stride`` (tuples), ``data_type``,
  ``is_virtual`` (an intermediate: never in the variant pack), ``is_pass_by_value`` (a host scalar),
  ``ragged_offset`` (a tensor or None), ``value`` (a Python number for a compile-time constant, e.g. the
  ``0.5`` of ``graph.mul(a=x, b=0.5)``: bake it in, it is never in the variant pack), ``describe()`` for
  error messages.
- ``graph.inputs()`` / ``graph.outputs()``: the non-virtual tensors the caller binds at execute.
- ``graph.device``: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... or None when the graph does not say (no
  handle, no ``tensor_like``); ``graph.io_data_type`` / ``intermediate_data_type`` / ``compute_data_type``;
  ``graph.is_override_shape_enabled``.

A plan's ``execute(variant_pack, workspace, stream)``:

- ``variant_pack``: dict uid -> tensor, already validated by the graph against the declared dims,
  strides (extent-1 dims excepted), dtypes and one device; every non-virtual tensor is present; by-value
  tensors arrive as given (a Python number or a host tensor); ragged tensors arrive with their storage
  (their extent is runtime: only dtype and device were checked).
- ``workspace``: None when ``get_workspace_size()`` is 0 and the caller passed none, else the caller's
  1-D uint8 tensor on the operands' device holding at least ``get_workspace_size()`` bytes. Carve it with
  ``cudnn.workspace.Workspace.over(workspace, self.get_workspace_size(), self.name, device=...)`` (R2).
- ``stream``: the raw stream of the execute-time handle (None: torch's current stream); launch on it and
  run any torch work inside ``cudnn._torch_stream.stream_context(stream, device)`` (R1).
- ``overrides`` (keyword, only when ``supports_overrides`` is True): dict uid -> (dim, stride) for the
  execute-time shape/stride overrides; the graph has already checked the bound tensors against them.
  A plan with ``supports_overrides = False`` never sees overrides: the graph rejects them before launch
  (Rule 1) and, on a graph built with ``is_override_shape_enabled=True``, declines the plan at build.

Rules a plan obeys (reviewers cite them): execute validates only: no conversion, allocation, copy, sync
or device-to-host read (Rules 1-3); plans own no device memory and never block the host at build or at
execute, so building the first plan inside ``torch.cuda.graph`` capture works (Rule 8); compile keys are
plan-time values only (Rule 4); what ``check_support`` accepts, the kernel serves natively (Rule 2).

The reference engine (``cudnn.graph.reference``, ``is_reference = True``) is the oracle: pure PyTorch,
fp32 compute, every node kind. It is ranked after every kernel engine and is offered for a CUDA (or
unknown-device) graph only when asked for by name: ``graph.create_execution_plans(..., engines=["reference"])``
or ``graph.select_engines(["reference"])`` before ``create_execution_plans``. A family's tests run one
graph-building function twice, once per route, and compare (Rule 9: same caller code for both engines)::

    g_kernel = build(); g_kernel.create_execution_plans(engines=["sdpa_fwd_sm90"]); ...
    g_ref = build(); g_ref.create_execution_plans(engines=["reference"]); ...
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["Engine", "Plan", "EngineRegistry", "decline_if", "single_node", "nodes_of_kind"]


class Plan:
    """A built, executable plan. Subclass it (or duck-type: ``name``, ``get_workspace_size``, ``execute``)."""

    #: The plan's name (normally its engine's name); ``graph.get_plan_name_at_index`` reports it.
    name: str = "plan"
    #: True when ``execute`` consumes execute-time shape/stride overrides (``overrides=`` keyword).
    supports_overrides: bool = False

    def get_workspace_size(self) -> int:
        """Bytes of caller workspace ``execute`` carves (0 when none)."""
        return 0

    def execute(self, variant_pack: dict[int, Any], workspace: Any, stream: Any, **kwargs) -> None:
        """Launch on ``stream``. Validate only; never convert, allocate, copy, sync or read device values."""
        raise NotImplementedError(f"{type(self).__name__} does not implement execute")


class Engine:
    """An engine: ``check_support(graph)`` accepts (returns) or declines (raises NotImplementedError), ``build_plan(graph)`` builds."""

    #: Unique engine name; ``select_engines`` / ``deselect_engines`` / ``create_execution_plans(engines=...)`` use it.
    name: str = "engine"
    #: Rank among kernel engines: higher first; ties keep registration order.
    priority: int = 0
    #: Only the reference engine sets this: ranked last, offered on CUDA only when asked for by name.
    is_reference: bool = False

    def check_support(self, graph) -> None:
        """Metadata-only check (no torch, no cutlass). Decline with NotImplementedError(reason); ValueError for malformed attributes."""
        raise NotImplementedError(f"{self.name}: check_support is not implemented")

    def build_plan(self, graph) -> Plan:
        """Build (compile) a plan for ``graph``; may decline late with NotImplementedError, never allocates device memory or syncs."""
        raise NotImplementedError(f"{self.name}: build_plan is not implemented")

    def __repr__(self) -> str:
        return f"<engine {self.name} priority={self.priority}{' reference' if self.is_reference else ''}>"


def decline_if(condition: bool, message: str) -> None:
    """Raise ``NotImplementedError(message)`` when ``condition`` holds (the decline idiom of ``check_support``)."""
    if condition:
        raise NotImplementedError(message)


def nodes_of_kind(graph, kind: str) -> list:
    """The graph's nodes of ``kind`` in topological order."""
    return [n for n in graph.nodes if n.kind == kind]


def single_node(graph, kind: str, engine: str | None = None):
    """The graph's only node, which must be of ``kind``; declines (NotImplementedError) otherwise."""
    who = engine or kind
    kinds = [n.kind for n in graph.nodes]
    if len(kinds) != 1 or kinds[0] != kind:
        raise NotImplementedError(f"{who}: serves a graph of exactly one {kind} node; this graph has nodes {kinds}")
    return graph.nodes[0]


class EngineRegistry:
    """Engines by name, in registration order; ``register(registry)`` functions call :meth:`add`.

    ``load_errors`` maps a family (entry point or ``cudnn.<pkg>.engines`` module) to the error its import
    or ``register`` raised; the Router reports them when nothing serves a graph.
    """

    def __init__(self) -> None:
        self._engines: dict[str, Engine] = {}
        self._order: dict[str, int] = {}
        self._counter = 0
        self.load_errors: dict[str, str] = {}
        self.loaded_sources: set[str] = set()
        self._lock = threading.RLock()

    def add(self, engine: Engine, *, replace: bool = False) -> Engine:
        """Register ``engine`` (an :class:`Engine` or a duck-typed object with ``name``/``check_support``/``build_plan``)."""
        name = getattr(engine, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"an engine needs a non-empty string name; got {name!r} on {type(engine).__name__}")
        for method in ("check_support", "build_plan"):
            if not callable(getattr(engine, method, None)):
                raise TypeError(f"engine {name!r} has no callable {method}()")
        with self._lock:
            if name in self._engines and not replace and self._engines[name] is not engine:
                raise ValueError(f"engine name {name!r} is already registered by {type(self._engines[name]).__name__}; engine names must be unique")
            self._engines[name] = engine
            if name not in self._order:
                self._order[name] = self._counter
                self._counter += 1
        return engine

    def remove(self, name: str) -> None:
        with self._lock:
            self._engines.pop(name, None)
            self._order.pop(name, None)

    def get(self, name: str) -> Engine | None:
        return self._engines.get(name)

    def names(self) -> list[str]:
        return [e.name for e in self.ranked()]

    def ranked(self) -> list[Engine]:
        """Kernel engines by priority (high first, then registration order), the reference engine(s) last."""
        with self._lock:
            engines = list(self._engines.values())
        return sorted(engines, key=lambda e: (bool(getattr(e, "is_reference", False)), -int(getattr(e, "priority", 0)), self._order[e.name]))

    def __contains__(self, name: str) -> bool:
        return name in self._engines

    def __len__(self) -> int:
        return len(self._engines)

    def __repr__(self) -> str:
        return f"EngineRegistry({self.names()}, load_errors={sorted(self.load_errors)})"
