"""Torch integration of the attention forward: the ``torch.ops.cudnn.sdpa_fwd`` custom op (with a fake
implementation, so ``torch.compile(fullgraph=True)`` traces through it) and
:func:`scaled_dot_product_attention`, which mirrors ``torch.nn.functional.scaled_dot_product_attention``.

Both call :func:`cudnn.sdpa.fwd.api.sdpa_fwd` (one implementation). What the kernel cannot serve raises
NotImplementedError; nothing falls back to another implementation.
"""

from __future__ import annotations

import torch

from .._host.torch_glue import OP_NAMESPACE as _LIB
from .._host.torch_glue import absent_output
from .api import _alloc_like_layout, sdpa_fwd


@torch.library.custom_op(f"{_LIB}::sdpa_fwd", mutates_args=(), device_types="cuda")
def _sdpa_fwd_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    scale: float | None = None,
    sinks: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_kv: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_kv: int | None = None,
    return_lse: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    res = sdpa_fwd(
        q,
        k,
        v,
        is_causal=is_causal,
        causal_bottom_right=causal_bottom_right,
        window_size=(window_left, window_right),
        scale=scale,
        sinks=sinks,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_kv=cu_seqlens_kv,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_kv=max_seqlen_kv,
        return_lse=return_lse,
    )
    lse = res["lse"] if return_lse else absent_output(q)
    return res["o"], lse


@_sdpa_fwd_op.register_fake
def _(
    q,
    k,
    v,
    is_causal=False,
    causal_bottom_right=False,
    window_left=-1,
    window_right=-1,
    scale=None,
    sinks=None,
    cu_seqlens_q=None,
    cu_seqlens_kv=None,
    max_seqlen_q=None,
    max_seqlen_kv=None,
    return_lse=False,
):
    o = _alloc_like_layout(torch, q, v.shape[-1], q.dtype, q.device)
    varlen = cu_seqlens_q is not None
    if return_lse:
        lse = q.new_empty((q.shape[1], q.shape[0]) if varlen else tuple(q.shape[:3]), dtype=torch.float32)
    else:
        lse = absent_output(q)
    return o, lse


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False
):
    """``torch.nn.functional.scaled_dot_product_attention`` on our kernel: (B, H, L, E) inputs, any strides with
    unit-stride E. ``is_causal`` is top-left aligned (torch's convention). Raises NotImplementedError for what it
    cannot serve (an ``attn_mask``, dropout, other ranks) instead of falling back."""
    if attn_mask is not None:
        raise NotImplementedError(
            f"cudnn.sdpa.scaled_dot_product_attention: attn_mask (shape={tuple(attn_mask.shape)}, dtype={attn_mask.dtype}) is not served; "
            "use is_causal, or cudnn.sdpa.sdpa_fwd(window_size=..., causal_bottom_right=...)"
        )
    if dropout_p != 0.0:
        raise NotImplementedError(f"cudnn.sdpa.scaled_dot_product_attention: dropout_p={dropout_p} is not served (forward without dropout only)")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise NotImplementedError(f"cudnn.sdpa.scaled_dot_product_attention: {name} (shape={tuple(t.shape)}) must be rank 4 (B, H, L, E)")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(
            f"cudnn.sdpa.scaled_dot_product_attention: query has {query.shape[1]} heads and key {key.shape[1]}; pass enable_gqa=True for grouped-query attention"
        )
    # Save the LSE only when a backward will need it (otherwise the backward would rerun the forward).
    need_grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    o, _ = torch.ops.cudnn.sdpa_fwd(query, key, value, is_causal=is_causal, scale=scale, return_lse=need_grad)
    return o


# The backward (cudnn.sdpa.bwd) is the autograd formula of torch.ops.cudnn.sdpa_fwd.
from ..bwd.autograd import register as _register_bwd  # noqa: E402

_register_bwd()
