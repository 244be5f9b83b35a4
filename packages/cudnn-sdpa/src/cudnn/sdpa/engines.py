"""Graph-API engines of cudnn.sdpa, announced to the core Router through the ``cudnn.engines`` entry point.

``sdpa_fwd_sm90`` serves a graph of exactly one ``sdpa`` node (inference, or with stats) on sm_90, thin over
:class:`cudnn.sdpa.fwd.api.SdpaFwdSm90`: the graph's tensors become the adapter's TensorDescs, the node's
attributes its plan-time flags, and ``execute`` hands the variant pack's tensors to ``SdpaFwdSm90.execute``.

Mapping of the node's attributes (see cudnn.graph.ops_sdpa): causal / band masks with the node's diagonal
alignment (right bound R -> ``window_right = R``; left bound L, i.e. keys ``j > i - L``, -> ``window_left = L - 1``),
``attn_scale`` as a number or a pass-by-value tensor (default 1.0, upstream's), ``sink_token [1, h_q, 1, 1]``
fp32, ``stats [b, h_q, s_q, 1]`` fp32 natural-log LSE. Declined (NotImplementedError naming the input): bias,
ALiBi, padding masks (seq_len_q / seq_len_kv), THD ragged offsets, paged KV, dropout, block masks, score_mod,
score_max / score_sum_exp outputs, a device-tensor attn_scale.

This module imports neither torch nor cutlass at top level (the Router imports it during discovery).
"""

from __future__ import annotations

from cudnn.api_base import TensorDesc

from ._host.graph_engine import SdpaGraphEngine, SdpaGraphPlan, graph_desc, mask_and_scale
from .bwd.engine import SdpaBwdSm90Engine


class _SdpaFwdPlan(SdpaGraphPlan):
    """A built plan: the compiled adapter plus the uids it reads from the variant pack."""

    name = "sdpa_fwd_sm90"

    def execute(self, variant_pack, workspace, stream, **kwargs) -> None:
        u = self.uids
        scale = self._scale(variant_pack)
        stats = variant_pack[u["stats"]].squeeze(-1) if u.get("stats") is not None else None  # a view
        sinks = variant_pack[u["sink_token"]].view(-1) if u.get("sink_token") is not None else None
        self.adapter.execute(
            variant_pack[u["q"]], variant_pack[u["k"]], variant_pack[u["v"]], variant_pack[u["o"]], stats, sinks, current_stream=stream, scale=scale
        )


class SdpaFwdSm90Engine(SdpaGraphEngine):
    """Engine ``sdpa_fwd_sm90``: one ``sdpa`` node, Hopper, bf16/fp16 (see the module docstring for the mapping)."""

    name = "sdpa_fwd_sm90"
    plan_class = _SdpaFwdPlan

    _DECLINED_INPUTS = ("bias", "seq_len_q", "seq_len_kv", "paged_attention_k_table", "paged_attention_v_table", "block_mask", "dropout_seed", "dropout_offset")

    def _adapter(self, graph):
        from cudnn.graph.engine import decline_if, single_node

        from .fwd.api import SdpaFwdSm90

        node = single_node(graph, "sdpa", self.name)
        decline_if(graph.device is not None and str(graph.device) == "cpu", f"{self.name}: the graph is on the CPU; this engine runs on sm_90 GPUs")
        ins, outs, attrs = node.inputs, node.outputs, node.attrs
        for port in self._DECLINED_INPUTS:
            t = ins.get(port)
            decline_if(t is not None, f"{self.name}: input {port} ({t.describe() if t is not None else ''}) is not served")
        for flag in ("use_alibi_mask", "use_padding_mask", "unfuse_fma"):
            decline_if(bool(attrs.get(flag)), f"{self.name}: {flag}=True is not served")
        for flag in ("dropout", "score_mod", "rng_dump"):
            decline_if(attrs.get(flag) is not None, f"{self.name}: {flag} is not served")
        for port in ("score_max", "score_sum_exp"):
            decline_if(outs.get(port) is not None, f"{self.name}: output {port} is not served")
        for port in ("q", "k", "v", "o"):
            t = ins.get(port) if port != "o" else outs.get(port)
            decline_if(
                t.ragged_offset is not None,
                f"{self.name}: {t.describe()}: THD ragged offsets are not served by this engine yet (cudnn.sdpa.sdpa_fwd takes cu_seqlens)",
            )
        scale_t, bottom_right, window_size, scale = mask_and_scale(self.name, ins, attrs)
        stats = outs.get("stats")
        sink = ins.get("sink_token")
        adapter = SdpaFwdSm90(
            graph_desc(ins["q"], "q"),
            graph_desc(ins["k"], "k"),
            graph_desc(ins["v"], "v"),
            graph_desc(outs["o"], "o"),
            graph_desc(stats, "stats", 3) if stats is not None else None,
            causal_bottom_right=bottom_right,
            window_size=window_size,
            sinks=TensorDesc((sink.dim[1],), (sink.stride[1],), sink.data_type, "sink_token") if sink is not None else None,
        )
        adapter.check_support()
        uids = {"q": ins["q"].uid, "k": ins["k"].uid, "v": ins["v"].uid, "o": outs["o"].uid}
        uids["stats"] = stats.uid if stats is not None else None
        uids["sink_token"] = sink.uid if sink is not None else None
        return adapter, uids, (scale_t.uid if scale_t is not None else None), scale


def register(registry) -> None:
    """Register this family's engines with ``registry`` (cudnn.graph's engine registry)."""
    registry.add(SdpaFwdSm90Engine())
    registry.add(SdpaBwdSm90Engine())
