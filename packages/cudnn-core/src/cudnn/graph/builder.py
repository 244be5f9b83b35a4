"""``cudnn.pygraph``: build a graph, plan it through the Router, execute it. Pure Python until a plan is built.

Lifecycle (upstream's)::

    graph = cudnn.pygraph(io_data_type=..., intermediate_data_type=..., compute_data_type=..., handle=h)
    x = graph.tensor(name="x", dim=[...], stride=[...], data_type=...)      # or graph.tensor_like(torch_tensor)
    y = graph.matmul(name="mm", A=x, B=w); y.set_output(True)
    graph.validate()                     # shape / dtype inference, uids; GraphValidationError names node and tensor
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])   # ranked; raises listing declines
    graph.check_support()
    graph.build_plans()                  # first plan that builds (a decline moves on); build_plan_policy.ALL: all
    graph.execute({x: x_t, w: w_t, y: y_t}, workspace, handle=h)
    # or graph.build([cudnn.heur_mode.A]) for the five steps.

Nothing here imports torch or cutlass: engines' ``check_support`` is metadata-only, and the first heavy
import happens in an engine's ``build_plan``.
"""

from __future__ import annotations

import threading
from typing import Any

from ..datatypes import data_type, to_data_type
from .binding import bind_variant_pack, check_workspace, parse_overrides
from .descriptors import contiguous_stride, tensor
from .engine import Plan
from .enums import build_plan_policy, heur_mode, reduction_mode, tensor_reordering
from .errors import GraphValidationError
from .handles import Handle, check_handle
from .nodes import Node, node_kind
from .ops_linear_attention import LinearAttentionOps
from .ops_pointwise import PointwiseOps
from .ops_sdpa import SdpaOps

NOT_SET = data_type.NOT_SET


class _Candidate:
    __slots__ = ("engine", "plan", "reason")

    def __init__(self, engine):
        self.engine = engine
        self.plan: Plan | None = None
        self.reason: str | None = None

    @property
    def name(self) -> str:
        return self.engine.name


class pygraph(PointwiseOps, SdpaOps, LinearAttentionOps):  # noqa: N801 - upstream's spelling
    """A graph of tensors and nodes; see the module docstring for the lifecycle."""

    def __init__(
        self,
        name: str = "test_graph",
        io_data_type: Any = NOT_SET,
        intermediate_data_type: Any = NOT_SET,
        compute_data_type: Any = NOT_SET,
        handle: Handle | None = None,
        sm_count: int | None = None,
        sm_version: int | None = None,
        kernel_cache: Any = None,
        device_property: Any = None,
        is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False,
    ):
        self.name = str(name)
        self.io_data_type = to_data_type(io_data_type)
        self.intermediate_data_type = to_data_type(intermediate_data_type)
        self.compute_data_type = to_data_type(compute_data_type)
        self.handle = check_handle(handle)
        self.sm_count = sm_count
        self.sm_version = sm_version
        self.kernel_cache = kernel_cache
        self.device_property = device_property
        self.is_dynamic_shape_enabled = bool(is_dynamic_shape_enabled)
        self.is_override_shape_enabled = bool(is_override_shape_enabled)
        self._tensors: list[tensor] = []
        self._nodes: list[Node] = []
        self._node_names: dict[str, int] = {}
        self._lock = threading.RLock()
        # engine requests survive re-validation: select/deselect before create_execution_plans are requests
        self._requested: list[str] | None = None
        self._deselected: set[str] = set()
        self._max_workspace: int | None = None
        self._reset_state()

    # -- state -----------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        self._validated = False
        self._op_graph_built = False
        self._candidates: list[_Candidate] = []
        self._declines: dict[str, str] = {}
        self._registry = None
        self._by_uid: dict[int, tensor] = {}
        self._io_tensors: list[tensor] = []
        self._stale: str | None = None

    def _invalidate(self, reason: str) -> None:
        if self._validated or self._candidates:
            had_plans = any(c.plan is not None for c in self._candidates)
            self._reset_state()
            if had_plans:
                self._stale = reason

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes)

    @property
    def tensors(self) -> tuple[tensor, ...]:
        return tuple(self._tensors)

    @property
    def device(self) -> str | None:
        """The handle's device, else the device of the tensors given to ``tensor_like``, else None (unknown)."""
        if self.handle is not None and self.handle.device is not None:
            return self.handle.device
        for t in self._tensors:
            if t.device is not None:
                return t.device
        return None

    def inputs(self) -> list[tensor]:
        """Non-virtual tensors no node produces (the caller binds them), constants excluded."""
        return [t for t in self._tensors if t.producer is None and not t.is_virtual and t.value is None and self._used(t)]

    def outputs(self) -> list[tensor]:
        """Non-virtual node outputs (the caller binds their buffers)."""
        return [t for t in self._tensors if t.producer is not None and not t.is_virtual]

    def _used(self, t: tensor) -> bool:
        if any(t is u for n in self._nodes for u in n.inputs.values()):
            return True
        return any(u.ragged_offset is t for u in self._tensors)

    # -- tensors ---------------------------------------------------------------------------------
    def _adopt(self, t: tensor) -> tensor:
        if t._graph is not None and t._graph is not self:
            raise GraphValidationError(f"tensor {t.describe()} belongs to another graph")
        if t._graph is None:
            t._graph = self
            self._tensors.append(t)
            self._invalidate("a tensor was added")
        return t

    def tensor(
        self,
        dim=None,
        stride=None,
        data_type=NOT_SET,
        is_virtual=False,
        is_pass_by_value=False,
        ragged_offset=None,
        reordering_type=tensor_reordering.NONE,
        name="",
        uid=-1,
    ) -> tensor:
        """A graph input (or, with ``is_virtual``, an intermediate). Stride defaults to compact row-major."""
        t = tensor(name, dim, stride, data_type, is_virtual, is_pass_by_value, ragged_offset, reordering_type, uid)
        if ragged_offset is not None:
            self._adopt(ragged_offset)
        return self._adopt(t)

    def tensor_like(self, input, name: str = "") -> tensor:
        """A descriptor with the shape, strides, dtype and device of ``input`` (a torch tensor, or a cudnn.tensor to copy)."""
        if isinstance(input, tensor):
            t = tensor(name or input.name, input.dim, input.stride, input.data_type, False, input.is_pass_by_value, None, input.get_reordering_type())
            t.device = input.device
            return self._adopt(t)
        if isinstance(input, (int, float)) and not isinstance(input, bool):
            return self._constant(input, 1, name)
        try:
            shape, stride, dt, dev = tuple(input.shape), tuple(input.stride()), input.dtype, input.device
        except AttributeError:
            raise TypeError(f"tensor_like needs a torch tensor (shape, stride(), dtype, device) or a cudnn.tensor, got {type(input).__name__}") from None
        t = tensor(name, shape, stride, to_data_type(dt), False, False)
        t.device = str(dev)
        return self._adopt(t)

    def tensor_scalar(self, value, scalar_type=None) -> tensor:
        """A compile-time constant scalar (upstream's ``tensor_scalar``)."""
        return self._constant(value, 1, "")

    def _constant(self, value, rank: int, name: str) -> tensor:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GraphValidationError(f"a constant operand must be an int or float, got {value!r}")
        dt = data_type.FLOAT if isinstance(value, float) else data_type.INT32
        t = tensor(name or f"const_{value}", [1] * max(rank, 1), [1] * max(rank, 1), dt, False, True)
        t.value = value
        return self._adopt(t)

    def query_tensor_attributes_of_uid(self, uid: int) -> tensor:
        self._require_validated("query_tensor_attributes_of_uid")
        try:
            return self._by_uid[int(uid)]
        except KeyError:
            raise ValueError(f"unknown uid {uid}; the graph's uids are {sorted(self._by_uid)}") from None

    # -- nodes -----------------------------------------------------------------------------------
    def _node_name(self, kind: str, name: str) -> str:
        if not name:
            index = self._node_names.get(kind, 0)
            self._node_names[kind] = index + 1
            name = f"{kind}.{index}"
        if any(n.name == name for n in self._nodes):
            raise GraphValidationError(f"node name {name!r} is already used in graph {self.name!r}")
        return name

    def _check_operand(self, node_name: str, port: str, t: Any) -> tensor:
        if not isinstance(t, tensor):
            raise GraphValidationError(
                f"node {node_name!r}: input {port} must be a cudnn.tensor (from graph.tensor / tensor_like / a node), got {type(t).__name__}"
            )
        if t._graph is not self:
            if t._graph is None:
                return self._adopt(t)
            raise GraphValidationError(f"node {node_name!r}: input {port} {t.describe()} belongs to another graph")
        return t

    def add_node(
        self,
        kind: str,
        name: str,
        inputs: dict[str, Any],
        outputs: list[str],
        attrs: dict[str, Any] | None = None,
        compute_data_type: Any = NOT_SET,
        given_outputs: dict[str, tensor] | None = None,
    ) -> Node:
        """Add a node of a registered ``kind``: ``inputs`` port -> tensor (None: absent), new virtual ``outputs`` by port.

        ``given_outputs`` are caller-made output tensors (e.g. sdpa_backward's ``dBias``). Families building
        kda / gdn / grouped-matmul nodes call this from a method added with ``register_graph_method``.
        """
        node_kind(kind)
        with self._lock:
            name = self._node_name(kind, name)
            ins = {p: (None if t is None else self._check_operand(name, p, t)) for p, t in inputs.items()}
            outs: dict[str, tensor | None] = {}
            for port in outputs:
                t = tensor(f"{name}::{port}", None, None, NOT_SET, True)
                outs[port] = self._adopt(t)
            for port, t in (given_outputs or {}).items():
                t = self._check_operand(name, port, t)
                if t.producer is not None:
                    raise GraphValidationError(f"node {name!r}: output {port} {t.describe()} is already produced by node {t.producer.name!r}")
                outs[port] = t
            node = Node(kind, name, ins, outs, dict(attrs or {}), to_data_type(compute_data_type))
            for t in outs.values():
                if t is not None:
                    t.producer = node
            self._nodes.append(node)
            self._invalidate("a node was added")
        return node

    def _pointwise(self, mode, operands: list, compute_data_type, name: str, method: str, attrs: dict | None = None) -> tensor:
        rank = next((t.rank for t in operands if isinstance(t, tensor) and t.dim), 1)
        if all(not isinstance(t, tensor) for t in operands):
            raise GraphValidationError(f"{method}: at least one operand must be a cudnn.tensor")
        ins = {}
        for i, t in enumerate(operands):
            if isinstance(t, (int, float)) and not isinstance(t, bool):
                t = self._constant(t, rank, "")
            ins[f"IN_{i}"] = t
        node = self.add_node("pointwise", name or "", ins, ["OUT_0"], {"mode": mode, "method": method, **(attrs or {})}, compute_data_type)
        return node.outputs["OUT_0"]

    def matmul(self, A, B, compute_data_type=NOT_SET, padding=0.0, name="") -> tensor:
        """``C = A @ B`` over the last two dims, batch dims broadcast (equal or 1). Returns C."""
        node = self.add_node("matmul", name, {"A": A, "B": B}, ["C"], {"padding": float(padding)}, compute_data_type)
        return node.outputs["C"]

    def reduction(self, input, mode, compute_data_type=NOT_SET, name="") -> tensor:
        """Reduce ``input``; set the returned tensor's dim (``set_dim``) with 1 at every reduced axis."""
        if not isinstance(mode, reduction_mode) or mode is reduction_mode.NOT_SET:
            raise GraphValidationError(f"reduction node {name!r}: mode must be a cudnn.reduction_mode other than NOT_SET, got {mode!r}")
        node = self.add_node("reduction", name, {"X": input}, ["Y"], {"mode": mode}, compute_data_type)
        return node.outputs["Y"]

    # -- lifecycle -------------------------------------------------------------------------------
    def validate(self) -> None:
        """Infer and check every shape and dtype, assign uids. Raises GraphValidationError naming node and tensor."""
        with self._lock:
            self._reset_state()
            for t in self._tensors:  # re-infer from scratch: the caller may have changed dims since the last validate
                t._clear_inferred()
            if not self._nodes:
                raise GraphValidationError(f"graph {self.name!r} has no nodes")
            for t in list(self._tensors):  # ragged offsets attached with set_ragged_offset join the graph
                r = t.ragged_offset
                if r is not None and r._graph is None:
                    r._graph = self
                    self._tensors.append(r)
                elif r is not None and r._graph is not self:
                    raise GraphValidationError(f"tensor {t.describe()}: its ragged offset {r.describe()} belongs to another graph")
            devices = {t.device for t in self._tensors if t.device is not None}
            if len({d.split(":")[0] for d in devices}) > 1:
                raise GraphValidationError(f"graph {self.name!r} mixes devices {sorted(devices)} (tensor_like sources); one graph runs on one device")
            if self.handle is not None and self.handle.device is not None and devices:
                d = next(iter(devices))
                if d.split(":")[0] != self.handle.device.split(":")[0]:
                    raise GraphValidationError(f"graph {self.name!r}: handle device {self.handle.device} differs from tensor_like device {d}")
            for t in self._tensors:
                if t.producer is None:
                    self._validate_source(t)
            for node in self._nodes:
                cdt = node.compute_data_type
                if cdt is NOT_SET:
                    node.compute_data_type = self.compute_data_type if self.compute_data_type is not NOT_SET else data_type.FLOAT
                node_kind(node.kind).infer(self, node)
                for port, t in node.outputs.items():
                    if t is not None and t.data_type is NOT_SET:
                        raise GraphValidationError(
                            f"{node.describe()}: output {port} {t.describe()} has no data type; set_data_type() or give the graph an io_data_type"
                        )
            self._assign_uids()
            self._io_tensors = [t for t in self._tensors if not t.is_virtual and t.value is None and (t.producer is not None or self._used(t))]
            self._validated = True

    def _validate_source(self, t: tensor) -> None:
        if t.is_virtual:
            if self._used(t):
                raise GraphValidationError(f"tensor {t.describe()} is virtual but no node produces it; graph inputs are non-virtual")
            return
        if not t.dim:
            raise GraphValidationError(f"input tensor {t.describe()} has no dim")
        if not t.stride:
            t._infer("stride", contiguous_stride(t.dim))
        if len(t.stride) != len(t.dim):
            raise GraphValidationError(f"input tensor {t.describe()}: stride and dim differ in rank")
        if any(d < 0 for d in t.dim) or any(s < 0 for s in t.stride):
            raise GraphValidationError(f"input tensor {t.describe()}: negative extents or strides are not accepted")
        if t.data_type is NOT_SET:
            if self.io_data_type is NOT_SET:
                raise GraphValidationError(f"input tensor {t.describe()} has no data type; set data_type or the graph's io_data_type")
            t._infer("dtype", self.io_data_type)

    def _assign_uids(self) -> None:
        seen: dict[int, tensor] = {}
        for t in self._tensors:
            if t._uid_assigned:
                if t.uid in seen:
                    raise GraphValidationError(f"uid {t.uid} is used by both {seen[t.uid].describe()} and {t.describe()}")
                seen[t.uid] = t
        next_uid = 1
        for t in self._tensors:
            if not t._uid_assigned:
                while next_uid in seen:
                    next_uid += 1
                t._uid = next_uid
                seen[next_uid] = t
        self._by_uid = seen

    def _require_validated(self, what: str) -> None:
        if not self._validated:
            stale = f" (invalidated: {self._stale})" if self._stale else ""
            raise RuntimeError(f"{what}: graph {self.name!r} is not validated{stale}; call validate() and build_operation_graph() first (or build())")

    def build_operation_graph(self) -> None:
        self._require_validated("build_operation_graph")
        self._op_graph_built = True

    def select_engines(self, names: list[str]) -> None:
        """Keep only the named engines: before ``create_execution_plans`` it is the request (the reference engine included); after, a filter."""
        names = [str(n) for n in names]
        if self._candidates:
            self._candidates = [c for c in self._candidates if c.name in names]
        else:
            self._requested = names

    def deselect_engines(self, names: list[str]) -> None:
        """Drop the named engines (now, and from later ``create_execution_plans``)."""
        self._deselected |= {str(n) for n in names}
        for c in [c for c in self._candidates if c.name in self._deselected]:
            self._declines[c.name] = "deselected by deselect_engines()"
        self._candidates = [c for c in self._candidates if c.name not in self._deselected]

    def deselect_workspace_greater_than(self, workspace: int) -> None:
        """Drop plans needing more than ``workspace`` bytes (built plans now; the rest when they build)."""
        self._max_workspace = int(workspace)
        keep = []
        for c in self._candidates:
            if c.plan is not None and c.plan.get_workspace_size() > self._max_workspace:
                self._declines[c.name] = f"needs {c.plan.get_workspace_size()} workspace bytes > deselect_workspace_greater_than({self._max_workspace})"
                continue
            keep.append(c)
        self._candidates = keep

    def create_execution_plans(self, heur_modes=None, *, engines: list[str] | None = None, registry=None) -> None:
        """Ask every engine (``check_support``); keep the ones that accept, ranked. Raises listing every decline when none does.

        ``engines``: consider only these engine names (this is how the reference engine is asked for by name
        on CUDA). ``registry``: an ``EngineRegistry`` to use instead of the discovered one (tests).
        """
        from . import router

        if not self._op_graph_built:
            self._require_validated("create_execution_plans")
            raise RuntimeError(f"create_execution_plans: call build_operation_graph() on graph {self.name!r} first")
        modes = [heur_mode.A] if heur_modes is None else (list(heur_modes) if isinstance(heur_modes, (list, tuple)) else [heur_modes])
        for m in modes:
            if not isinstance(m, heur_mode):
                raise ValueError(f"create_execution_plans takes cudnn.heur_mode values, got {m!r}")
        self._registry = registry if registry is not None else router.default_registry()
        requested = list(engines) if engines is not None else self._requested
        accepted, declines = router.rank_engines(self, self._registry, requested, self._deselected)
        self._declines = declines
        self._candidates = [_Candidate(e) for e in accepted]
        if not self._candidates:
            raise router.not_supported_error(self, declines, self._registry)

    def create_execution_plan(self, engine_name: str) -> None:
        """Plans for one named engine (upstream builds one plan from an engine id; here, from a name)."""
        self.create_execution_plans(engines=[engine_name])

    def check_support(self) -> None:
        """Raise unless at least one plan remains (after select / deselect)."""
        from . import router

        if not self._candidates:
            if self._registry is None:
                raise RuntimeError(f"check_support: call create_execution_plans() on graph {self.name!r} first")
            raise router.not_supported_error(self, self._declines, self._registry, "no plan remains for")

    def build_plans(self, policy: build_plan_policy = build_plan_policy.HEURISTICS_CHOICE) -> None:
        """Build plans in rank order: the first that builds (HEURISTICS_CHOICE) or all (ALL). A decline moves to the next plan."""
        from . import router

        self.check_support()
        built = 0
        for c in list(self._candidates):
            if c.plan is None and not self._build_candidate(c):
                continue
            built += 1
            if policy is build_plan_policy.HEURISTICS_CHOICE:
                break
        self._candidates = [c for c in self._candidates if c.reason is None]
        if not built:
            raise router.not_supported_error(self, self._declines, self._registry, "no plan builds for")

    def _build_candidate(self, c: _Candidate) -> bool:
        try:
            plan = c.engine.build_plan(self)
        except NotImplementedError as exc:
            c.reason = f"build_plan declined: {exc}"
            self._declines[c.name] = c.reason
            return False
        if self.is_override_shape_enabled and not getattr(plan, "supports_overrides", False):
            c.reason = "its plan cannot consume execute-time shape/stride overrides and the graph was created with is_override_shape_enabled=True"
            self._declines[c.name] = c.reason
            return False
        if self._max_workspace is not None and plan.get_workspace_size() > self._max_workspace:
            c.reason = f"needs {plan.get_workspace_size()} workspace bytes > deselect_workspace_greater_than({self._max_workspace})"
            self._declines[c.name] = c.reason
            return False
        c.plan = plan
        return True

    def build_plan_at_index(self, index: int) -> None:
        from . import router

        c = self._candidate(index)
        if c.plan is None and not self._build_candidate(c):
            raise router.not_supported_error(self, {c.name: c.reason}, self._registry, f"plan {index} does not build for")

    def build(self, heur_modes=None, *, engines: list[str] | None = None) -> None:
        """``validate, build_operation_graph, create_execution_plans, check_support, build_plans`` in one call."""
        self.validate()
        self.build_operation_graph()
        self.create_execution_plans(heur_modes if heur_modes is not None else [heur_mode.A], engines=engines)
        self.check_support()
        self.build_plans()

    # -- plan queries ----------------------------------------------------------------------------
    def get_execution_plan_count(self) -> int:
        return len(self._candidates)

    def get_engine_count(self) -> int:
        return len(self._candidates)

    def _candidate(self, index: int) -> _Candidate:
        if not (0 <= int(index) < len(self._candidates)):
            raise IndexError(f"plan index {index} is out of range; graph {self.name!r} has {len(self._candidates)} plans")
        return self._candidates[int(index)]

    def get_plan_name_at_index(self, index: int) -> str:
        return self._candidate(index).name

    def get_plan_names(self) -> list[str]:
        return [c.name for c in self._candidates]

    def get_declines(self) -> dict[str, str]:
        """Engines that did not make (or stay in) the plan list, with their reasons."""
        return dict(self._declines)

    def _built(self, index: int | None = None) -> tuple[int, Plan]:
        if self._stale is not None:
            raise RuntimeError(f"graph {self.name!r} changed after its plans were built ({self._stale}); build it again")
        if index is not None:
            c = self._candidate(index)
            if c.plan is None:
                raise RuntimeError(f"plan {index} ({c.name}) of graph {self.name!r} is not built; call build_plan_at_index({index}) or build_plans()")
            return int(index), c.plan
        for i, c in enumerate(self._candidates):
            if c.plan is not None:
                return i, c.plan
        raise RuntimeError(f"graph {self.name!r} has no built plan; call build_plans() (or build()) first")

    def get_workspace_size(self) -> int:
        """Workspace bytes of the plan ``execute`` runs (the first built)."""
        return int(self._built()[1].get_workspace_size())

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return int(self._built(index)[1].get_workspace_size())

    def get_behavior_notes(self) -> list:
        return []

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        return []

    def select_numeric_notes(self, notes) -> None:
        return None

    def deselect_numeric_notes(self, notes) -> None:
        return None

    def select_behavior_notes(self, notes) -> None:
        return None

    def deselect_behavior_notes(self, notes) -> None:
        return None

    # -- execute ---------------------------------------------------------------------------------
    def execute(
        self, variant_pack: dict, workspace: Any = None, handle: Handle | None = None, override_uids=None, override_shapes=None, override_strides=None
    ) -> None:
        """Run the first built plan. ``variant_pack``: tensor or uid -> torch tensor (by-value: a number or host tensor)."""
        index, plan = self._built()
        self._execute_plan(plan, variant_pack, workspace, handle, override_uids, override_shapes, override_strides)

    def execute_plan_at_index(
        self, variant_pack: dict, workspace: Any, index: int, handle: Handle | None = None, override_uids=None, override_shapes=None, override_strides=None
    ) -> None:
        _, plan = self._built(index)
        self._execute_plan(plan, variant_pack, workspace, handle, override_uids, override_shapes, override_strides)

    def _execute_plan(self, plan: Plan, variant_pack, workspace, handle, override_uids, override_shapes, override_strides) -> None:
        handle = check_handle(handle)
        overrides = parse_overrides(self, override_uids, override_shapes, override_strides)
        if overrides and not getattr(plan, "supports_overrides", False):
            raise ValueError(f"plan {plan.name!r} cannot consume execute-time shape/stride overrides; nothing was launched")
        pack, device = bind_variant_pack(self, variant_pack, overrides)
        if handle is not None and handle.device is not None and device is not None:
            if handle.device.split(":")[0] != device.split(":")[0] or (":" in handle.device and ":" in device and handle.device != device):
                raise ValueError(f"handle device {handle.device} differs from the operands' device {device}")
        ws = check_workspace(workspace, int(plan.get_workspace_size()), device, f"graph {self.name!r} plan {plan.name!r}")
        stream = handle.stream if handle is not None else None
        if overrides:
            plan.execute(pack, ws, stream, overrides=overrides)
        else:
            plan.execute(pack, ws, stream)

    def __repr__(self) -> str:
        nodes = ", ".join(f"{n.kind} {n.name!r}" for n in self._nodes)
        return f"cudnn.pygraph({self.name!r}, nodes=[{nodes}], plans={self.get_plan_names()})"
