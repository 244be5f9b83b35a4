"""``sdpa`` and ``sdpa_backward`` builders of ``cudnn.pygraph``, with upstream's argument names. Pure Python.

Layout: q ``[b, h_q, s_q, d_qk]``, k ``[b, h_k, s_kv, d_qk]``, v ``[b, h_v, s_kv, d_v]`` (any strides: BSHD
is a permuted BHSD), o ``[b, h_q, s_q, d_v]`` laid out like q, stats ``[b, h_q, s_q, 1]`` FLOAT holding
``max + log(sum(exp(s - max)))`` (natural log) per row.

Masks, normalized as upstream does: ``use_causal_mask`` is a band with right bound 0 aligned top-left,
``use_causal_mask_bottom_right`` the same aligned bottom-right, ``sliding_window_length=W`` a left bound
of W (row i sees kv j with ``i - W < j``, relative to the aligned diagonal). Variable lengths:
``use_padding_mask=True`` with ``seq_len_q`` / ``seq_len_kv`` ``[b, 1, 1, 1]`` int32; THD (packed) tensors
carry a ragged offset ``[b + 1, 1, 1, 1]`` in elements (``tensor.set_ragged_offset``). Paged KV: k / v
are containers ``[num_blocks, h, block_size, d]`` and ``paged_attention_k_table`` / ``_v_table``
``[b, 1, max_pages, 1]`` int32 map each sequence's pages. ``sink_token`` ``[1, h_q, 1, 1]`` FLOAT is
a per-head logit that joins the softmax denominator and contributes no value.
"""

from __future__ import annotations

from ..datatypes import data_type
from .enums import attention_implementation
from .enums import diagonal_alignment as _align
from .errors import GraphValidationError

NOT_SET = data_type.NOT_SET


def _normalize_mask(op: str, use_causal_mask, use_causal_mask_bottom_right, sliding_window_length, diagonal_alignment, left, right):
    if use_causal_mask and use_causal_mask_bottom_right:
        raise GraphValidationError(f"{op}: use_causal_mask and use_causal_mask_bottom_right cannot both be true")
    if sliding_window_length is not None and left is not None:
        raise GraphValidationError(f"{op}: sliding_window_length and diagonal_band_left_bound cannot be set at the same time")
    if (use_causal_mask or use_causal_mask_bottom_right) and right is not None:
        raise GraphValidationError(f"{op}: use_causal_mask(_bottom_right) and diagonal_band_right_bound cannot be set at the same time")
    if not isinstance(diagonal_alignment, _align):
        raise GraphValidationError(f"{op}: diagonal_alignment must be a cudnn.diagonal_alignment, got {diagonal_alignment!r}")
    if sliding_window_length is not None:
        left = sliding_window_length
    if use_causal_mask:
        diagonal_alignment, right = _align.TOP_LEFT, 0
    if use_causal_mask_bottom_right:
        diagonal_alignment, right = _align.BOTTOM_RIGHT, 0
    for what, value in (("diagonal_band_left_bound / sliding_window_length", left), ("diagonal_band_right_bound", right)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise GraphValidationError(f"{op}: {what} must be an int (or None), got {value!r}")
    return {"diagonal_alignment": diagonal_alignment, "diagonal_band_left_bound": left, "diagonal_band_right_bound": right}


def _scale_attr(op: str, attn_scale):
    """(float attr, tensor input) from ``attn_scale`` (a number or a graph tensor)."""
    if attn_scale is None:
        return None, None
    if isinstance(attn_scale, bool):
        raise GraphValidationError(f"{op}: attn_scale must be a float or a cudnn.tensor, got {attn_scale!r}")
    if isinstance(attn_scale, (int, float)):
        return float(attn_scale), None
    return None, attn_scale


class SdpaOps:
    """Mixin of ``cudnn.pygraph``: attention builders (``add_node`` / ``_check_operand`` live in the builder)."""

    def sdpa(
        self,
        q,
        k,
        v,
        is_inference=None,
        attn_scale=None,
        bias=None,
        block_mask=None,
        use_alibi_mask=False,
        use_padding_mask=False,
        seq_len_q=None,
        seq_len_kv=None,
        use_causal_mask=False,
        use_causal_mask_bottom_right=False,
        sliding_window_length=None,
        diagonal_alignment=_align.TOP_LEFT,
        diagonal_band_left_bound=None,
        diagonal_band_right_bound=None,
        dropout=None,
        rng_dump=None,
        paged_attention_k_table=None,
        paged_attention_v_table=None,
        paged_attention_max_seq_len_kv=None,
        compute_data_type=NOT_SET,
        name="",
        score_mod=None,
        generate_stats=None,
        implementation=attention_implementation.AUTO,
        score_max=None,
        score_sum_exp=None,
        sink_token=None,
        unfuse_fma=False,
    ):
        """Attention forward; returns ``[o, stats]`` (stats is None unless ``generate_stats``). Exactly one of generate_stats / is_inference."""
        op = f"sdpa node {name!r}"
        if (generate_stats is None) == (is_inference is None):
            raise GraphValidationError(f"{op}: exactly one of generate_stats / is_inference must be set (prefer generate_stats)")
        if generate_stats is None:
            if not isinstance(is_inference, bool):
                raise GraphValidationError(f"{op}: is_inference must be a bool, got {is_inference!r}")
            generate_stats = not is_inference
        if not isinstance(generate_stats, bool):
            raise GraphValidationError(f"{op}: generate_stats must be a bool, got {generate_stats!r}")
        if paged_attention_max_seq_len_kv is not None and not isinstance(paged_attention_max_seq_len_kv, int):
            raise GraphValidationError(f"{op}: paged_attention_max_seq_len_kv must be an int (or None)")
        if dropout is not None and (not isinstance(dropout, tuple) or len(dropout) not in (2, 3)):
            raise GraphValidationError(f"{op}: dropout must be (probability, seed, offset) or (mask, scale)")
        scale_value, scale_tensor = _scale_attr(op, attn_scale)
        attrs = {
            "attn_scale": scale_value,
            "generate_stats": generate_stats,
            "use_alibi_mask": bool(use_alibi_mask),
            "use_padding_mask": bool(use_padding_mask),
            "use_causal_mask": bool(use_causal_mask),
            "use_causal_mask_bottom_right": bool(use_causal_mask_bottom_right),
            "sliding_window_length": sliding_window_length,
            "dropout": dropout,
            "rng_dump": rng_dump,
            "paged_attention_max_seq_len_kv": paged_attention_max_seq_len_kv,
            "score_mod": score_mod,
            "implementation": implementation,
            "unfuse_fma": bool(unfuse_fma),
            **_normalize_mask(
                op,
                use_causal_mask,
                use_causal_mask_bottom_right,
                sliding_window_length,
                diagonal_alignment,
                diagonal_band_left_bound,
                diagonal_band_right_bound,
            ),
        }
        inputs = {
            "q": q,
            "k": k,
            "v": v,
            "attn_scale": scale_tensor,
            "bias": bias,
            "seq_len_q": seq_len_q,
            "seq_len_kv": seq_len_kv,
            "paged_attention_k_table": paged_attention_k_table,
            "paged_attention_v_table": paged_attention_v_table,
            "sink_token": sink_token,
            "block_mask": block_mask,
        }
        if dropout is not None and len(dropout) == 3:
            inputs["dropout_seed"], inputs["dropout_offset"] = dropout[1], dropout[2]
        given = {p: t for p, t in (("score_max", score_max), ("score_sum_exp", score_sum_exp)) if t is not None}
        outputs = ["o", "stats"] if generate_stats else ["o"]
        node = self.add_node("sdpa", name, inputs, outputs=outputs, attrs=attrs, compute_data_type=compute_data_type, given_outputs=given)
        return [node.outputs["o"], node.outputs.get("stats")]

    def sdpa_backward(
        self,
        q,
        k,
        v,
        o,
        dO,
        stats,
        attn_scale=None,
        bias=None,
        dBias=None,
        use_alibi_mask=False,
        use_padding_mask=False,
        seq_len_q=None,
        seq_len_kv=None,
        max_total_seq_len_q=None,
        max_total_seq_len_kv=None,
        use_causal_mask=False,
        use_causal_mask_bottom_right=False,
        sliding_window_length=None,
        diagonal_alignment=_align.TOP_LEFT,
        diagonal_band_left_bound=None,
        diagonal_band_right_bound=None,
        dropout=None,
        rng_dump=None,
        use_deterministic_algorithm=False,
        compute_data_type=NOT_SET,
        name="",
        score_mod=None,
        score_mod_bprop=None,
        sink_token=None,
        dSink_token=None,
    ):
        """Attention backward; returns ``[dQ, dK, dV]``. ``dBias`` / ``dSink_token`` are caller-made output tensors."""
        op = f"sdpa_backward node {name!r}"
        scale_value, scale_tensor = _scale_attr(op, attn_scale)
        attrs = {
            "attn_scale": scale_value,
            "use_alibi_mask": bool(use_alibi_mask),
            "use_padding_mask": bool(use_padding_mask),
            "use_causal_mask": bool(use_causal_mask),
            "use_causal_mask_bottom_right": bool(use_causal_mask_bottom_right),
            "sliding_window_length": sliding_window_length,
            "max_total_seq_len_q": max_total_seq_len_q,
            "max_total_seq_len_kv": max_total_seq_len_kv,
            "dropout": dropout,
            "rng_dump": rng_dump,
            "use_deterministic_algorithm": bool(use_deterministic_algorithm),
            "score_mod": score_mod,
            "score_mod_bprop": score_mod_bprop,
            **_normalize_mask(
                op,
                use_causal_mask,
                use_causal_mask_bottom_right,
                sliding_window_length,
                diagonal_alignment,
                diagonal_band_left_bound,
                diagonal_band_right_bound,
            ),
        }
        inputs = {
            "q": q,
            "k": k,
            "v": v,
            "o": o,
            "dO": dO,
            "stats": stats,
            "attn_scale": scale_tensor,
            "bias": bias,
            "seq_len_q": seq_len_q,
            "seq_len_kv": seq_len_kv,
            "sink_token": sink_token,
        }
        given = {p: t for p, t in (("dBias", dBias), ("dSink_token", dSink_token)) if t is not None}
        node = self.add_node("sdpa_backward", name, inputs, outputs=["dQ", "dK", "dV"], attrs=attrs, compute_data_type=compute_data_type, given_outputs=given)
        return [node.outputs["dQ"], node.outputs["dK"], node.outputs["dV"]]

    # upstream aliases
    def scaled_dot_product_flash_attention(self, *args, **kwargs):
        return self.sdpa(*args, **kwargs)

    def scaled_dot_product_flash_attention_backward(self, *args, **kwargs):
        return self.sdpa_backward(*args, **kwargs)
