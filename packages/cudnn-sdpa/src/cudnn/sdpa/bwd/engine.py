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

from .._host.graph_engine import SdpaGraphEngine, SdpaGraphPlan, graph_desc, mask_and_scale


class _SdpaBwdPlan(SdpaGraphPlan):
    name = "sdpa_bwd_sm90"

    def execute(self, variant_pack, workspace, stream, **kwargs) -> None:
        u = self.uids
        scale = self._scale(variant_pack)
        vp = variant_pack
        self.adapter.execute(
            vp[u["q"]], vp[u["k"]], vp[u["v"]], vp[u["o"]], vp[u["dO"]], vp[u["stats"]].squeeze(-1), vp[u["dQ"]], vp[u["dK"]], vp[u["dV"]],
            workspace, current_stream=stream, scale=scale,
        )  # fmt: skip


class SdpaBwdSm90Engine(SdpaGraphEngine):
    """Engine ``sdpa_bwd_sm90``: one ``sdpa_backward`` node, Hopper, bf16/fp16 (see the module docstring)."""

    name = "sdpa_bwd_sm90"
    plan_class = _SdpaBwdPlan

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
        scale_t, bottom_right, window_size, scale = mask_and_scale(self.name, ins, attrs)
        adapter = SdpaBwdSm90(
            graph_desc(ins["q"], "q"),
            graph_desc(ins["k"], "k"),
            graph_desc(ins["v"], "v"),
            graph_desc(ins["o"], "o"),
            graph_desc(ins["dO"], "dO"),
            graph_desc(ins["stats"], "stats", 3),
            graph_desc(outs["dQ"], "dQ"),
            graph_desc(outs["dK"], "dK"),
            graph_desc(outs["dV"], "dV"),
            causal_bottom_right=bottom_right,
            window_size=window_size,
            deterministic=bool(attrs.get("use_deterministic_algorithm")),
        )
        adapter.check_support()
        uids = {p: ins[p].uid for p in ("q", "k", "v", "o", "dO", "stats")}
        uids.update({p: outs[p].uid for p in ("dQ", "dK", "dV")})
        return adapter, uids, (scale_t.uid if scale_t is not None else None), scale


def register(registry) -> None:
    """Register the backward engine with ``registry`` (cudnn.graph's engine registry)."""
    registry.add(SdpaBwdSm90Engine())
