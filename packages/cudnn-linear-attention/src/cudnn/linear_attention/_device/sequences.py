"""Which sequence a token belongs to, on device, for packed (varlen, ``cu_seqlens`` int32 [N + 1]) or dense
(every sequence ``seq_len`` tokens) token streams. Used by the causal_conv1d kernels.

A sequence is ``(n, bos, nxt)``: its index, its first token and the first token of the next sequence (its
end). ``varlen`` is a plan-time flag; in the dense case ``cu_ptr`` is unused and may be None.
"""

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr


@cute.jit
def locate_sequence(cu_ptr: cute.Pointer | None, t0: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """``(n, bos, nxt)`` of the sequence holding token ``t0`` (varlen: binary search over ``cu_seqlens``)."""
    return locate_sequence_from(cu_ptr, t0, Int32(0), n_seqs, seq_len, varlen)


@cute.jit
def locate_sequence_from(cu_ptr: cute.Pointer | None, t0: Int32, lo: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """:func:`locate_sequence` given a sequence ``lo`` that starts at or before ``t0`` (``cu_seqlens[lo] <= t0``; sequence
    indices never decrease along T): varlen searches ``[lo, N]`` only (no upper bound: empty sequences); dense as it."""
    n = Int32(0)
    bos = Int32(0)
    nxt = Int32(0)
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        hi = n_seqs
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if mCu[mid] <= t0:
                lo = mid
            else:
                hi = mid - 1
        n = lo
        bos = mCu[n]
        nxt = mCu[n + 1]
    else:
        n = t0 // seq_len
        bos = n * seq_len
        nxt = bos + seq_len
    return n, bos, nxt


@cute.jit
def advance_sequence(cu_ptr: cute.Pointer | None, t: Int32, n: Int32, bos: Int32, nxt: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """Walk ``(n, bos, nxt)`` forward until it holds token ``t >= bos`` (varlen: past empty sequences too); returns it."""
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        while t >= nxt:
            n = n + 1
            bos = nxt
            nxt = mCu[n + 1]
    else:
        if t >= nxt:
            n = n + 1
            bos = nxt
            nxt = nxt + seq_len
    return n, bos, nxt


@cute.jit
def sequence_bounds(cu_ptr: cute.Pointer | None, n: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """``(bos, eos)``: first token and end of sequence ``n``."""
    bos = Int32(0)
    eos = Int32(0)
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        bos = mCu[n]
        eos = mCu[n + 1]
    else:
        bos = n * seq_len
        eos = bos + seq_len
    return bos, eos
