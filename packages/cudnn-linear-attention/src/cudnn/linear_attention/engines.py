"""Graph-API engines of cudnn.linear_attention, announced to the core Router through the ``cudnn.engines`` entry point.

``gdn_fwd_sm90`` serves a graph of exactly one ``gdn`` node, ``kda_fwd_sm90`` one ``kda`` node (cudnn.graph.ops_linear_attention),
thin over :class:`cudnn.linear_attention.gdn.api.GatedDeltaNetFwdSm90` / :class:`cudnn.linear_attention.kda.api.KimiDeltaAttentionFwdSm90`:
the node's tensors become the adapter's TensorDescs (ports map one to one: q, k, v, g, beta, cu_seqlens, initial_state; O is the
adapter's ``o``, final_state its ``final_state``), the node's attributes its plan-time flags (``use_qk_l2norm`` ->
``use_qk_l2norm_in_kernel``, the resolved ``scale_value`` -> ``scale``), and ``execute`` hands the variant pack's tensors to the
adapter's ``execute`` on the handle's stream.

Declined here (NotImplementedError naming the attribute or tensor): a CPU graph, a ``compute_data_type`` other than FLOAT, a virtual
``O`` / ``final_state``, ragged offsets on any tensor (packed sequences are declared with ``cu_seqlens``). Declined by the adapter's own
``check_support`` (metadata only, naming tensor, shape, stride and dtype): dtypes other than bf16 q/k/v/O, fp32 or bf16 g/beta, fp32
states and int32 ``cu_seqlens``; head dims other than K = V in {64, 128}; strides the kernel cannot address natively (Rule 2).

This module imports neither torch nor cutlass at top level (the Router imports it during discovery); ``check_support`` is metadata
only, ``build_plan`` compiles (and allocates nothing), ``execute`` validates and launches (Rules 1-3, 8; recipe R1).

Schedule: an engine's ``schedule`` class attribute (``"parallel"``, the default: the three chunk-parallel kernels, or
``"serial"``: one kernel, no workspace) is the adapter's ``schedule``; with ``"parallel"`` the plan's ``get_workspace_size()`` is the adapter's
``scratch_workspace_bytes()`` for the graph's declared token total and sequence count, and ``execute`` hands the graph's
workspace buffer to the adapter, which carves it (R2) and raises when it is missing or short. The attribute's default is
``_host/chunk_parallel.py::DEFAULT_SCHEDULE`` (shared with the public ops).
"""

from __future__ import annotations

from cudnn.datatypes import data_type

from ._host.chunk_parallel import DEFAULT_SCHEDULE

_PORTS = ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state")


def _desc(t, name: str):
    from cudnn.api_base import TensorDesc

    return None if t is None else TensorDesc(tuple(t.dim), tuple(t.stride), t.data_type, name)


class DeltaRulePlan:
    """A built ``gdn_fwd_sm90`` / ``kda_fwd_sm90`` plan: the compiled adapter plus the uids it reads (serial schedule: one
    launch, no workspace; parallel: three launches over the graph's workspace)."""

    supports_overrides = False

    def __init__(self, name: str, adapter, uids: dict):
        self.name = name
        self.adapter = adapter
        self.uids = uids

    def get_workspace_size(self) -> int:
        return int(self.adapter.scratch_workspace_bytes())

    def execute(self, variant_pack, workspace, stream, **kwargs) -> None:
        u = self.uids

        def get(port):
            uid = u.get(port)
            return None if uid is None else variant_pack[uid]

        self.adapter.execute(
            get("q"),
            get("k"),
            get("v"),
            get("g"),
            get("beta"),
            get("O"),
            get("initial_state"),
            get("final_state"),
            get("cu_seqlens"),
            current_stream=stream,
            workspace=workspace,
        )


class _DeltaRuleEngine:
    """One node kind over one adapter class; subclasses set ``name``, ``kind`` and ``_adapter_class``."""

    name = ""
    kind = ""
    priority = 100
    is_reference = False
    schedule = DEFAULT_SCHEDULE  # the adapter's schedule ("parallel": three chunk-parallel kernels over the graph's workspace)

    def _adapter_class(self):
        raise NotImplementedError

    def _adapter(self, graph):
        """(adapter with check_support() done, uids by port); declines with NotImplementedError naming what is not served."""
        from cudnn.graph.engine import decline_if, single_node

        node = single_node(graph, self.kind, self.name)
        decline_if(
            graph.device is not None and not str(graph.device).startswith("cuda"),
            f"{self.name}: the graph is on {graph.device}; this engine runs on sm_90 GPUs",
        )
        decline_if(
            node.compute_data_type not in (data_type.FLOAT, data_type.NOT_SET),
            f"{self.name}: compute_data_type={node.compute_data_type.name} is not served (the kernel accumulates and carries the state in FLOAT)",
        )
        ins, outs, attrs = node.inputs, node.outputs, node.attrs
        for port, t in list(ins.items()) + list(outs.items()):
            decline_if(
                t is not None and t.ragged_offset is not None,
                f"{self.name}: {port} {t.describe() if t is not None else ''} has a ragged offset; packed sequences are declared with cu_seqlens",
            )
        for port, t in outs.items():
            decline_if(
                t is not None and t.is_virtual, f"{self.name}: output {port} {t.describe() if t is not None else ''} must be a graph output (set_output(True))"
            )
        adapter = self._adapter_class()(
            _desc(ins["q"], "q"),
            _desc(ins["k"], "k"),
            _desc(ins["v"], "v"),
            _desc(ins["g"], "g"),
            _desc(ins["beta"], "beta"),
            _desc(outs["O"], "O"),
            scale=float(attrs["scale_value"]),
            use_qk_l2norm_in_kernel=bool(attrs.get("use_qk_l2norm")),
            initial_state=_desc(ins.get("initial_state"), "initial_state"),
            final_state=_desc(outs.get("final_state"), "final_state"),
            cu_seqlens=_desc(ins.get("cu_seqlens"), "cu_seqlens"),
            schedule=self.schedule,
        )
        try:
            adapter.check_support()
        except ValueError as exc:  # malformed for this kernel (the node accepted it): a decline that names why
            raise NotImplementedError(f"{self.name}: {exc}") from exc
        except NotImplementedError as exc:
            raise NotImplementedError(f"{self.name}: {exc}") from exc
        uids = {p: (ins[p].uid if ins.get(p) is not None else None) for p in _PORTS}
        uids.update({p: (t.uid if t is not None else None) for p, t in outs.items()})
        return adapter, uids

    def check_support(self, graph) -> None:
        self._adapter(graph)

    def build_plan(self, graph) -> DeltaRulePlan:
        adapter, uids = self._adapter(graph)
        adapter.compile()
        return DeltaRulePlan(self.name, adapter, uids)

    def __repr__(self) -> str:
        return f"<engine {self.name} priority={self.priority}>"


class GdnFwdSm90Engine(_DeltaRuleEngine):
    """Engine ``gdn_fwd_sm90``: one ``gdn`` node on :class:`GatedDeltaNetFwdSm90`."""

    name = "gdn_fwd_sm90"
    kind = "gdn"

    def _adapter_class(self):
        from .gdn.api import GatedDeltaNetFwdSm90

        return GatedDeltaNetFwdSm90


class KdaFwdSm90Engine(_DeltaRuleEngine):
    """Engine ``kda_fwd_sm90``: one ``kda`` node on :class:`KimiDeltaAttentionFwdSm90`."""

    name = "kda_fwd_sm90"
    kind = "kda"

    def _adapter_class(self):
        from .kda.api import KimiDeltaAttentionFwdSm90

        return KimiDeltaAttentionFwdSm90


def register(registry) -> None:
    """Register this family's engines with ``registry`` (cudnn.graph's engine registry)."""
    registry.add(GdnFwdSm90Engine())
    registry.add(KdaFwdSm90Engine())


__all__ = ["GdnFwdSm90Engine", "KdaFwdSm90Engine", "DeltaRulePlan", "register"]
