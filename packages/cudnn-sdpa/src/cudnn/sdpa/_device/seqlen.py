"""Per-sequence extents and token offsets of one (batch) tile, shared by the sdpa forward and backward kernels.

Dense plans use the launch's static extents with zero offsets; THD varlen plans read the sequence's bounds
from the int32 cumulative lengths ``cu_seqlens_q`` / ``cu_seqlens_kv`` (B + 1) on the device.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr


@cute.jit
def sequence_extents(
    mCuQ: cute.Tensor | None,
    mCuK: cute.Tensor | None,
    batch: Int32,
    seqlen_q_static: Int32,
    seqlen_k_static: Int32,
    varlen: cutlass.Constexpr[bool],
):
    """``(seqlen_q, seqlen_k, offset_q, offset_k)`` of sequence ``batch``: with ``varlen`` its lengths and first
    tokens from ``mCuQ`` / ``mCuK``, else the static extents and offsets 0."""
    seqlen_q = seqlen_q_static
    seqlen_k = seqlen_k_static
    offset_q = Int32(0)
    offset_k = Int32(0)
    if const_expr(varlen):
        offset_q = mCuQ[batch]
        seqlen_q = mCuQ[batch + 1] - offset_q
        offset_k = mCuK[batch]
        seqlen_k = mCuK[batch + 1] - offset_k
    return seqlen_q, seqlen_k, offset_q, offset_k


@cute.jit
def cu_seqlens_tensors(cu_q_ptr: cute.Pointer | None, cu_k_ptr: cute.Pointer | None, batch: Int32, varlen: cutlass.Constexpr[bool]):
    """``(mCuQ, mCuK)``: the int32 (B + 1) cumulative-length tensors of a THD varlen launch, ``(None, None)`` otherwise."""
    mCuQ, mCuK = None, None
    if const_expr(varlen):
        mCuQ = cute.make_tensor(cu_q_ptr, cute.make_layout((batch + 1,)))
        mCuK = cute.make_tensor(cu_k_ptr, cute.make_layout((batch + 1,)))
    return mCuQ, mCuK
