"""Plan-time arguments shared by the attention forward and backward adapters: pure Python (no torch, no cutlass)."""

from __future__ import annotations

from cudnn.api_base import as_desc
from cudnn.datatypes import data_type

#: Element types both directions serve, and their compile-key names.
IO_DTYPES = (data_type.BFLOAT16, data_type.HALF)
DT_NAME = {data_type.BFLOAT16: "bf16", data_type.HALF: "fp16"}


def norm_window(window_size) -> tuple[int, int]:
    """``(left, right)`` of a ``window_size`` argument: None -> ``(-1, -1)`` (unbounded); ValueError below -1."""
    if window_size is None:
        return -1, -1
    left, right = (int(window_size[0]), int(window_size[1]))
    if left < -1 or right < -1:
        raise ValueError(f"window_size={tuple(window_size)}: each side must be >= 0, or -1 for unbounded")
    return left, right


def tma_strides(shape, strides):
    """(b, h, s) strides for a TMA descriptor: a dim of extent <= 1 is never stepped, so its stride (0 for the
    THD batch, or whatever torch reports for a size-1 dim) is replaced by the tensor's span, a valid 16-byte multiple."""
    span = max([abs(st) * max(sh, 1) for sh, st in zip(shape, strides, strict=False)] + [8])
    span = (span + 7) // 8 * 8
    return tuple(st if sh > 1 else span for sh, st in zip(shape, strides, strict=False))


def init_attention_options(
    api, sinks, cu_seqlens_q, cu_seqlens_kv, page_table, is_causal, causal_bottom_right, window_size, scale, max_seqlen_q, max_seqlen_kv, lse_log2
) -> None:
    """Store the options both adapters take (sinks, THD / paged operands as TensorDescs, mask flags, scale, LSE base)
    on ``api`` under their argument names; ``window_size`` normalized by :func:`norm_window`."""
    api.sinks = as_desc(sinks, "sinks")
    api.cu_seqlens_q, api.cu_seqlens_kv = as_desc(cu_seqlens_q, "cu_seqlens_q"), as_desc(cu_seqlens_kv, "cu_seqlens_kv")
    api.page_table = as_desc(page_table, "page_table")
    api.is_causal = bool(is_causal)
    api.causal_bottom_right = bool(causal_bottom_right)
    api.window_size = norm_window(window_size)
    api.scale = scale
    api.max_seqlen_q, api.max_seqlen_kv = max_seqlen_q, max_seqlen_kv
    api.lse_log2 = bool(lse_log2)


def check_thd_varlen(api, owner: str, tensors) -> None:
    """check_support of a THD varlen declaration: both ``cu_seqlens`` given (ValueError), every tensor in ``tensors``
    (T, H, D) (ValueError), each ``cu_seqlens`` a contiguous 1-D int32 tensor (NotImplementedError), both of one
    length B + 1 (ValueError)."""
    api._value_error_if(api.cu_seqlens_q is None or api.cu_seqlens_kv is None, f"{owner}: THD varlen needs both cu_seqlens_q and cu_seqlens_kv")
    for d in tensors:
        api._value_error_if(d.rank != 3, f"{owner}: THD varlen takes (T, H, D) tensors; got {d.describe()}")
    for cu in (api.cu_seqlens_q, api.cu_seqlens_kv):
        api._decline_if(cu.dtype != data_type.INT32 or cu.rank != 1, f"{owner}: {cu.describe()} must be a 1-D int32 tensor")
        api._decline_if(cu.shape[0] > 1 and cu.stride[0] != 1, f"{owner}: {cu.describe()} must be contiguous")
    api._value_error_if(
        api.cu_seqlens_q.shape != api.cu_seqlens_kv.shape,
        f"{owner}: {api.cu_seqlens_q.describe()} and {api.cu_seqlens_kv.describe()} must have the same length (B + 1)",
    )
