"""Glue shared by the graph-API engines ``sdpa_fwd_sm90`` (cudnn/sdpa/engines.py) and ``sdpa_bwd_sm90``
(cudnn/sdpa/bwd/engine.py): graph tensors to TensorDescs, the mask and scale attributes of an ``sdpa`` /
``sdpa_backward`` node, and the built plan's common half. Imports neither torch nor cutlass (the Router imports
the engines during discovery).

Mask mapping: causal / band masks with the node's diagonal alignment (right bound R -> ``window_right = R``; left
bound L, i.e. keys ``j > i - L``, -> ``window_left = L - 1``); ``attn_scale`` a number or a pass-by-value tensor
(default 1.0, upstream's).
"""

from __future__ import annotations

from cudnn.api_base import TensorDesc


def graph_desc(t, name: str, rank: int | None = None) -> TensorDesc:
    """A graph tensor's TensorDesc (its first ``rank`` dims when given, e.g. stats ``[b, h, s, 1]`` -> 3)."""
    dims, strides = tuple(t.dim), tuple(t.stride)
    if rank is not None:
        dims, strides = dims[:rank], strides[:rank]
    return TensorDesc(dims, strides, t.data_type, name)


def mask_and_scale(engine: str, ins: dict, attrs: dict) -> tuple:
    """Declines (NotImplementedError) a device-tensor ``attn_scale`` and band bounds that mask every key; returns
    ``(scale_tensor, bottom_right, window_size, scale_value)`` for the adapter and the plan."""
    from cudnn.graph.engine import decline_if

    scale_t = ins.get("attn_scale")
    decline_if(scale_t is not None and not scale_t.is_pass_by_value, f"{engine}: attn_scale {scale_t.describe() if scale_t else ''} must be pass-by-value")
    left, right = attrs.get("diagonal_band_left_bound"), attrs.get("diagonal_band_right_bound")
    decline_if(left is not None and left < 1, f"{engine}: diagonal_band_left_bound={left} (< 1 masks every key) is not served")
    decline_if(right is not None and right < 0, f"{engine}: diagonal_band_right_bound={right} (< 0) is not served")
    bottom_right = str(getattr(attrs.get("diagonal_alignment"), "name", attrs.get("diagonal_alignment"))).upper().endswith("BOTTOM_RIGHT")
    window_size = (-1 if left is None else left - 1, -1 if right is None else right)
    scale = attrs.get("attn_scale")
    return scale_t, bottom_right, window_size, (1.0 if scale is None else float(scale))


class SdpaGraphPlan:
    """A built plan: the compiled adapter plus the uids it reads from the variant pack (subclasses add ``execute``)."""

    name = ""
    supports_overrides = False

    def __init__(self, adapter, uids: dict, scale_uid, scale_value: float):
        self.adapter = adapter
        self.uids = uids
        self.scale_uid = scale_uid
        self.scale_value = scale_value

    def get_workspace_size(self) -> int:
        return self.adapter.scratch_workspace_bytes()

    def _scale(self, variant_pack) -> float:
        """The softmax scale of this launch: the plan's value, or the variant pack's host ``attn_scale`` (no device read)."""
        if self.scale_uid is None:
            return self.scale_value
        s = variant_pack[self.scale_uid]
        if hasattr(s, "is_cuda") and s.is_cuda:
            raise ValueError(f"{self.name}: attn_scale must be a pass-by-value host number or host tensor")
        return float(s)


class SdpaGraphEngine:
    """An engine over one adapter: subclasses set ``name``, ``plan_class`` and ``_adapter(graph)``, which declines
    what is not served and returns ``(adapter, uids, scale_uid, scale_value)`` with ``check_support()`` done."""

    name = ""
    priority = 100
    is_reference = False
    plan_class = SdpaGraphPlan

    def _adapter(self, graph):
        raise NotImplementedError

    def check_support(self, graph) -> None:
        self._adapter(graph)

    def build_plan(self, graph):
        adapter, uids, scale_uid, scale = self._adapter(graph)
        adapter.compile()
        return self.plan_class(adapter, uids, scale_uid, scale)

    def __repr__(self) -> str:
        return f"<engine {self.name} priority={self.priority}>"
