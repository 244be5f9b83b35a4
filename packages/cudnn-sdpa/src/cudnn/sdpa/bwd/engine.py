"""Graph-API engine ``sdpa_bwd_sm90``: a graph of exactly one ``sdpa_backward`` node on sm_90, thin over
:class:`cudnn.sdpa.bwd.api.SdpaBwdSm90` (the graph's tensors become the adapter's TensorDescs, the node's attributes
its plan-time flags; ``execute`` hands the variant pack's tensors and the caller's workspace to the adapter).

Mapping (the forward engine's, cudnn/sdpa/engines.py): causal / band masks with the node's diagonal alignment (right
bound R -> ``window_right = R``; left bound L -> ``window_left = L - 1``), ``attn_scale`` a number or a pass-by-value
tensor (default 1.0, upstream's), ``stats [b, h_q, s_q, 1]`` fp32 natural-log LSE. Declined (NotImplementedError
naming the input): bias / dBias, ALiBi, padding masks, THD ragged offsets, dropout, score_mod, sinks.
``use_deterministic_algorithm`` maps to ``deterministic=True``.

Registered by cudnn/sdpa/engines.py's ``register`` (one line the forward's owner adds:
``from .bwd.engine import SdpaBwdSm90Engine; registry.add(SdpaBwdSm90Engine())``). Imports neither torch nor cutlass
at top level.
"""

from __future__ import annotations

from cudnn.api_base import TensorDesc


def _desc(t, name: str, rank: int | None = None) -> TensorDesc:
    dims, strides = tuple(t.dim), tuple(t.stride)
    if rank is not None:
        dims, strides = dims[:rank], strides[:rank]
    return TensorDesc(dims, strides, t.data_type, name)


class _SdpaBwdPlan:
    name = "sdpa_bwd_sm90"
    supports_overrides = False

    def __init__(self, adapter, uids: dict, scale_uid, scale_value: float):
        self.adapter, self.uids, self.scale_uid, self.scale_value = adapter, uids, scale_uid, scale_value

    def get_workspace_size(self) -> int:
        return self.adapter.scratch_workspace_bytes()

    def execute(self, variant_pack, workspace, stream, **kwargs) -> None:
        u = self.uids
        scale = self.scale_value
        if self.scale_uid is not None:
            s = variant_pack[self.scale_uid]
            if hasattr(s, "is_cuda") and s.is_cuda:
                raise ValueError("sdpa_bwd_sm90: attn_scale must be a pass-by-value host number or host tensor")
            scale = float(s)  # a host value: no device read
        vp = variant_pack
        self.adapter.execute(
            vp[u["q"]], vp[u["k"]], vp[u["v"]], vp[u["o"]], vp[u["dO"]], vp[u["stats"]].squeeze(-1), vp[u["dQ"]], vp[u["dK"]], vp[u["dV"]],
            workspace, current_stream=stream, scale=scale,
        )  # fmt: skip


class SdpaBwdSm90Engine:
    """Engine ``sdpa_bwd_sm90``: one ``sdpa_backward`` node, Hopper, bf16/fp16 (see the module docstring)."""

    name = "sdpa_bwd_sm90"
    priority = 100
    is_reference = False

    _DECLINED_INPUTS = ("bias", "seq_len_q", "seq_len_kv", "sink_token")

    def _adapter(self, graph):
        from cudnn.graph.engine import decline_if, single_node

        from .api import SdpaBwdSm90

        node = single_node(graph, "sdpa_backward", self.name)
        decline_if(graph.device is not None and str(graph.device) == "cpu", f"{self.name}: the graph is on the CPU; this engine runs on sm_90 GPUs")
        ins, outs, attrs = node.inputs, node.outputs, node.attrs
        for port in self._DECLINED_INPUTS:
            t = ins.get(port)
            decline_if(t is not None, f"{self.name}: input {port} ({t.describe() if t is not None else ''}) is not served")
        for port in ("dBias", "dSink_token"):
            decline_if(outs.get(port) is not None, f"{self.name}: output {port} is not served")
        for flag in ("use_alibi_mask", "use_padding_mask"):
            decline_if(bool(attrs.get(flag)), f"{self.name}: {flag}=True is not served")
        for flag in ("dropout", "score_mod", "score_mod_bprop", "rng_dump"):
            decline_if(attrs.get(flag) is not None, f"{self.name}: {flag} is not served")
        for port in ("q", "k", "v", "o", "dO"):
            t = ins[port]
            decline_if(t.ragged_offset is not None, f"{self.name}: {t.describe()}: THD ragged offsets are not served by the backward yet")
        scale_t = ins.get("attn_scale")
        decline_if(
            scale_t is not None and not scale_t.is_pass_by_value, f"{self.name}: attn_scale {scale_t.describe() if scale_t else ''} must be pass-by-value"
        )
        left, right = attrs.get("diagonal_band_left_bound"), attrs.get("diagonal_band_right_bound")
        decline_if(left is not None and left < 1, f"{self.name}: diagonal_band_left_bound={left} (< 1 masks every key) is not served")
        decline_if(right is not None and right < 0, f"{self.name}: diagonal_band_right_bound={right} (< 0) is not served")
        bottom_right = str(getattr(attrs.get("diagonal_alignment"), "name", attrs.get("diagonal_alignment"))).upper().endswith("BOTTOM_RIGHT")
        adapter = SdpaBwdSm90(
            _desc(ins["q"], "q"),
            _desc(ins["k"], "k"),
            _desc(ins["v"], "v"),
            _desc(ins["o"], "o"),
            _desc(ins["dO"], "dO"),
            _desc(ins["stats"], "stats", 3),
            _desc(outs["dQ"], "dQ"),
            _desc(outs["dK"], "dK"),
            _desc(outs["dV"], "dV"),
            causal_bottom_right=bottom_right,
            window_size=(-1 if left is None else left - 1, -1 if right is None else right),
            deterministic=bool(attrs.get("use_deterministic_algorithm")),
        )
        adapter.check_support()
        uids = {p: ins[p].uid for p in ("q", "k", "v", "o", "dO", "stats")}
        uids.update({p: outs[p].uid for p in ("dQ", "dK", "dV")})
        scale = attrs.get("attn_scale")
        return adapter, uids, (scale_t.uid if scale_t is not None else None), (1.0 if scale is None else float(scale))

    def check_support(self, graph) -> None:
        self._adapter(graph)

    def build_plan(self, graph):
        adapter, uids, scale_uid, scale = self._adapter(graph)
        adapter.compile()
        return _SdpaBwdPlan(adapter, uids, scale_uid, scale)

    def __repr__(self) -> str:
        return f"<engine {self.name} priority={self.priority}>"


def register(registry) -> None:
    """Register the backward engine with ``registry`` (cudnn.graph's engine registry)."""
    registry.add(SdpaBwdSm90Engine())
