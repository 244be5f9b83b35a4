"""Which sequence a token belongs to, on device, for packed (varlen, ``cu_seqlens`` int32 [N + 1]) or dense
(every sequence ``seq_len`` tokens) token streams. Used by the causal_conv1d kernels.

A sequence is ``(n, bos, nxt)``: its index, its first token and the first token of the next sequence (its
end). ``varlen`` is a plan-time flag; in the dense case ``cu_ptr`` is unused and may be None.
"""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr


@cute.jit
def locate_sequence(cu_ptr: cute.Pointer | None, t0: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """``(n, bos, nxt)`` of the sequence holding token ``t0`` (varlen: binary search over ``cu_seqlens``)."""
    return locate_sequence_from(cu_ptr, t0, Int32(0), n_seqs, seq_len, varlen)


@cute.jit
def _last_start_at_or_before(mCu: cute.Tensor, t0: Int32, lo: Int32, hi: Int32) -> Int32:
    """Binary search: the last ``n`` in ``[lo, hi]`` with ``cu[n] <= t0``, given ``cu[lo] <= t0``."""
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if mCu[mid] <= t0:
            lo = mid
        else:
            hi = mid - 1
    return lo


@cute.jit
def locate_sequence_guess(cu_ptr: cute.Pointer, t0: Int32, n_seqs: Int32, T: Int32):
    """:func:`locate_sequence` (varlen) that first tries the sequence the average density predicts, ``t0 N / T`` (exact
    for equal lengths, every token its own sequence included): two independent loads, ``cu[g]`` and ``cu[g + 1]``; if
    they hold ``t0`` that is the sequence (the last ``n`` with ``cu[n] <= t0``, as the binary search finds), else the
    binary search runs on the side of ``g`` they rule in. The same ``(n, bos, nxt)``."""
    mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
    g = cutlass.min((t0.to(Float32) * n_seqs.to(Float32) * cute.arch.rcp_approx(cutlass.max(T, 1).to(Float32))).to(Int32), n_seqs - 1)
    g = cutlass.max(g, 0)
    a = mCu[g]
    b = mCu[g + 1]
    lo = Int32(0)
    hi = n_seqs
    if a <= t0:
        lo = g
        if b <= t0:
            lo = g + 1
        else:
            hi = g  # cu[g] <= t0 < cu[g + 1]: found
    else:
        hi = g - 1
    lo = _last_start_at_or_before(mCu, t0, lo, hi)
    return lo, mCu[lo], mCu[lo + 1]


@cute.jit
def locate_sequence_from(cu_ptr: cute.Pointer | None, t0: Int32, lo: Int32, n_seqs: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """:func:`locate_sequence` given a sequence ``lo`` that starts at or before ``t0`` (``cu_seqlens[lo] <= t0``; sequence
    indices never decrease along T): varlen searches ``[lo, N]`` only (no upper bound: empty sequences); dense as it."""
    n = Int32(0)
    bos = Int32(0)
    nxt = Int32(0)
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        n = _last_start_at_or_before(mCu, t0, lo, n_seqs)
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


# Warp-cooperative walk (varlen only; ``Conv1dFwdKey.warp_walk``). Every thread of a warp handles the same tokens, so a
# token's sequence is warp-uniform: the warp's ``K`` working lanes (a prefix of it: ``lanes`` is their mask) hold a
# window of ``cu_seqlens`` entries, lane ``j`` holding ``cw = cu[min(base + 1 + j, N)]`` (clamped entries are T, past
# every token), and ``cb = cu[base] <= t``. A token's sequence is then ``base`` plus the count of window entries at or
# before it (a ballot), its bounds two shuffles: no dependent load per sequence crossed. The values are those of
# :func:`advance_sequence` / :func:`locate_sequence_from`: ``n`` is the last index with ``cu[n] <= t``.


@cute.jit
def warp_locate(cu_ptr: cute.Pointer, t0: Int32, lo: Int32, cb: Int32, n_seqs: Int32, T: Int32, lane: Int32, nl: Int32, lanes: Int32):
    """:func:`locate_sequence_from` (varlen) by the warp, given ``cb = cu[lo] <= t0``: first a window of K = ``nl`` entries
    (one load per lane) at the sequence the average density predicts (``lo + (t0 - cb) (N - lo) / (T - cb)``, a guess:
    exact for equal lengths, every token its own sequence included), which holds ``t0``'s sequence unless the lengths
    vary a lot; else a (K + 1)-ary search over what the window left (one load per lane per round: about log_{K + 1} of
    the range, 3 for 16k sequences at K = 32, instead of one load per halving), then the window there. Returns ``(n, bos,
    nxt, base, cb, cw)``: the sequence of ``t0`` and the window state of :func:`warp_advance`."""
    mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
    hi = n_seqs  # cu[lo] <= t0 < cu[hi] (cu[N] = T > t0): the sequence is in [lo, hi)
    guess = lo + ((t0 - cb).to(Float32) * (n_seqs - lo).to(Float32) * cute.arch.rcp_approx((T - cb).to(Float32))).to(Int32)
    b = cutlass.min(cutlass.max(guess - (nl >> 2), lo), n_seqs)  # the window cu[b .. b + K) (clamped at N: T)
    cw = mCu[cutlass.min(b + lane, n_seqs)]
    cnt = cute.arch.popc(cute.arch.vote_ballot_sync(cw <= t0, lanes))
    base = b - 1  # found (0 < cnt < K): window base b - 1; its cb is never read (cu[b] <= t0 <= every later token)
    if cnt == 0 or cnt == nl:
        if cnt == 0:  # cu[b] > t0: before the window (b > lo)
            hi = b
        else:  # cu[b + K - 1] <= t0: past it
            lo = b + nl - 1
            cb = cute.arch.shuffle_sync(cw, nl - 1, lanes)
        while hi - lo > nl:
            step = (hi - lo + nl) // (nl + 1)  # ceil((hi - lo) / (K + 1)): K probes cut the range into K + 1 parts
            v = mCu[cutlass.min(lo + (lane + 1) * step, n_seqs)]
            c = cute.arch.popc(cute.arch.vote_ballot_sync(v <= t0, lanes))
            if c > 0:
                cb = cute.arch.shuffle_sync(v, c - 1, lanes)
            lo = lo + c * step
            hi = cutlass.min(lo + step, hi)
        cw = mCu[cutlass.min(lo + 1 + lane, n_seqs)]  # hi - lo <= K: the window holds cu[hi] > t0
        cnt = cute.arch.popc(cute.arch.vote_ballot_sync(cw <= t0, lanes))
        base = lo
    bos = cute.arch.shuffle_sync(cw, cutlass.max(cnt - 1, 0), lanes)
    if cnt == 0:
        bos = cb
    nxt = cute.arch.shuffle_sync(cw, cnt, lanes)
    return base + cnt, bos, nxt, base, cb, cw


@cute.jit
def warp_advance(cu_ptr: cute.Pointer, t: Int32, base: Int32, cb: Int32, cw: Int32, n_seqs: Int32, lane: Int32, nl: Int32, lanes: Int32):
    """:func:`advance_sequence` (varlen) from the warp's window ``(base, cb, cw)`` (see :func:`warp_locate`): a ballot, a
    popcount and two shuffles per token; the window slides by K entries (one load per lane) when every entry is at or
    before ``t``. Returns ``(n, bos, nxt, base, cb, cw)``."""
    cnt = cute.arch.popc(cute.arch.vote_ballot_sync(cw <= t, lanes))
    while cnt == nl:
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        cb = cute.arch.shuffle_sync(cw, nl - 1, lanes)
        base = base + nl
        cw = mCu[cutlass.min(base + 1 + lane, n_seqs)]
        cnt = cute.arch.popc(cute.arch.vote_ballot_sync(cw <= t, lanes))
    bos = cute.arch.shuffle_sync(cw, cutlass.max(cnt - 1, 0), lanes)
    if cnt == 0:
        bos = cb
    nxt = cute.arch.shuffle_sync(cw, cnt, lanes)
    return base + cnt, bos, nxt, base, cb, cw
