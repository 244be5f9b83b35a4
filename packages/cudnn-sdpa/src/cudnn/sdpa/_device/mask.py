"""Attention masks and the key-block range they leave, shared by forward and backward.

Query row ``i`` (0-based within its sequence) may attend key column ``j`` iff

    j < seqlen_k                                       (always)
    j <= i + offset + window_right                     (when ``mask_right``: causal has window_right = 0)
    j >= i + offset - window_left                      (when ``mask_left``)

with ``offset = seqlen_k - seqlen_q`` for bottom-right alignment and 0 for top-left. Masked scores become
-inf before the softmax. A tile whose every key is masked still runs one (fully masked) key block, so its
rows come out as O = 0, LSE = -inf without a separate code path.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .mma_sm90 import acc_view_mn


class MaskInfo:
    """Plan-time mask flags plus the runtime extents of the current (batch, m_block) tile."""

    def __init__(
        self,
        tile_m: int,
        tile_n: int,
        mask_right: bool,
        mask_left: bool,
        seqlen_q: Int32,
        seqlen_k: Int32,
        offset: Int32,
        window_left: Int32,
        window_right: Int32,
        rows_per_query: int = 1,
    ):
        self.rows_per_query = rows_per_query  # pack-GQA: tile row p is query p // rows_per_query
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.mask_right = mask_right
        self.mask_left = mask_left
        self.seqlen_q = seqlen_q
        self.seqlen_k = seqlen_k
        self.offset = offset
        self.window_left = window_left
        self.window_right = window_right

    @cute.jit
    def query_lo(self, m_block: Int32) -> Int32:
        """First query index of the tile."""
        return (m_block * self.tile_m) // self.rows_per_query

    @cute.jit
    def query_hi(self, m_block: Int32) -> Int32:
        """One past the last query index of the tile."""
        return ((m_block + 1) * self.tile_m - 1) // self.rows_per_query + 1

    @cute.jit
    def n_block_range(self, m_block: Int32):
        """``(n_block_min, n_block_max)`` of key blocks this query block may see; never empty (see module doc)."""
        n_block_max = (self.seqlen_k + self.tile_n - 1) // self.tile_n
        if const_expr(self.mask_right):
            last_col = self.query_hi(m_block) + self.offset + self.window_right
            n_block_max = cutlass.min(n_block_max, (cutlass.max(last_col, 0) + self.tile_n - 1) // self.tile_n)
        n_block_min = Int32(0)
        if const_expr(self.mask_left):
            first_col = self.query_lo(m_block) + self.offset - self.window_left
            n_block_min = cutlass.max(first_col, 0) // self.tile_n
        n_block_max = cutlass.max(n_block_max, n_block_min + 1)
        return n_block_min, n_block_max

    @cute.jit
    def n_block_min_right_masked(self, m_block: Int32, n_block_min: Int32) -> Int32:
        """Key blocks at or above this index need the right (causal) mask; those below it do not."""
        res = n_block_min
        if const_expr(self.mask_right):
            lim = self.query_lo(m_block) + self.offset + self.window_right + 1
            res = cutlass.max(n_block_min, cutlass.max(lim, 0) // self.tile_n)
        return res

    @cute.jit
    def n_block_max_left_masked(self, m_block: Int32, n_block_min: Int32) -> Int32:
        """Key blocks below this index need the left (window) mask; those at or above it do not."""
        res = n_block_min
        if const_expr(self.mask_left):
            lim = self.query_hi(m_block) - 1 + self.offset - self.window_left
            res = cutlass.max(n_block_min, (cutlass.max(lim, 0) + self.tile_n - 1) // self.tile_n)
        return res

    @cute.jit
    def apply(
        self,
        acc_S: cute.Tensor,
        tScS_mn: cute.Tensor,
        t0ScS_mn: cute.Tensor,
        m_block: Int32,
        n_block: Int32,
        mask_seqlen: cutlass.Constexpr[bool],
        mask_causal_window: cutlass.Constexpr[bool],
    ):
        """Set masked scores of this thread's fragment to -inf.

        ``tScS_mn`` are this thread's (row, col) coordinates inside the tile and ``t0ScS_mn`` thread 0's (static
        offsets): comparing static offsets against per-thread limits keeps the inner loop to one compare each.
        """
        acc_S_mn = acc_view_mn(acc_S)
        thr_row = tScS_mn[0, 0][0]
        thr_col = tScS_mn[0, 0][1]
        col_base = n_block * self.tile_n + thr_col
        if const_expr(mask_seqlen):
            seq_limit = self.seqlen_k - col_base
            for c in cutlass.range_constexpr(cute.size(acc_S_mn.shape[1])):
                if t0ScS_mn[0, c][1] >= seq_limit:
                    for r in cutlass.range_constexpr(cute.size(acc_S_mn.shape[0])):
                        acc_S_mn[r, c] = -Float32.inf
        if const_expr(mask_causal_window and (self.mask_right or self.mask_left)):
            for r in cutlass.range_constexpr(cute.size(acc_S_mn.shape[0])):
                row = (m_block * self.tile_m + thr_row + t0ScS_mn[r, 0][0]) // self.rows_per_query
                diag = row + self.offset - col_base
                right_limit = diag + self.window_right
                left_limit = diag - self.window_left
                for c in cutlass.range_constexpr(cute.size(acc_S_mn.shape[1])):
                    col = t0ScS_mn[0, c][1]
                    if const_expr(self.mask_right):
                        if col > right_limit:
                            acc_S_mn[r, c] = -Float32.inf
                    if const_expr(self.mask_left):
                        if col < left_limit:
                            acc_S_mn[r, c] = -Float32.inf

    @cute.jit
    def apply_r2p(
        self,
        acc_S: cute.Tensor,
        tScS_mn: cute.Tensor,
        t0ScS_mn: cute.Tensor,
        m_block: Int32,
        n_block: Int32,
        mask_seqlen: cutlass.Constexpr[bool],
        mask_causal_window: cutlass.Constexpr[bool],
    ):
        """:meth:`apply` (same arguments, same result: the same scores become -inf) written for the register file.

        :meth:`apply` masks with one ``if`` statement per element; the DSL lowers each to a branch region whose merge
        re-selects the live scores: at d = 128 a masked 64 x 128 block costs 615 SASS instructions per thread (437
        unmasked), and 1510 (996 FSEL) when the whole P fragment is converted at once (``packed_cvt`` off), the merges
        then cascading through every score. Here each row's kept columns form one interval ``[lo, hi)`` (the key
        length and the right limit folded into ``hi`` by a min, the left limit into ``lo``), turned into a 32-bit keep
        mask per 32 elements of the thread's row (element ``e`` of the row holds column ``8 * (e // 2) + e % 2``
        relative to the thread's first column), and each score is a select on one bit of it: ptxas moves the bits to
        predicates with R2P (one per 8 scores) and emits one FSEL per score (FA4's sm90 mask does the same)."""
        acc_S_mn = acc_view_mn(acc_S)
        nrow = cute.size(acc_S_mn.shape[0])
        ncol = cute.size(acc_S_mn.shape[1])
        for c in cutlass.range_constexpr(ncol):  # the element -> column map the bit index relies on (static coordinates)
            col0 = t0ScS_mn[0, c][1]
            if const_expr(isinstance(col0, int)):
                assert col0 == 8 * (c // 2) + c % 2, f"apply_r2p: unexpected accumulator column order ({c} -> {col0})"
        thr_row = tScS_mn[0, 0][0]
        col_base = n_block * self.tile_n + tScS_mn[0, 0][1]
        big = Int32(1 << 30)
        hi_seq = big
        if const_expr(mask_seqlen):
            hi_seq = self.seqlen_k - col_base
        use_rows = mask_causal_window and (self.mask_right or self.mask_left)
        if const_expr(not use_rows):
            if const_expr(mask_seqlen):  # one interval for every row
                hi_e = self._col_to_elem(hi_seq)
                for s in cutlass.range_constexpr((ncol + 31) // 32):
                    keep = self._keep_bits(Int32(0), hi_e, s)
                    for i in cutlass.range_constexpr(min(32, ncol - 32 * s)):
                        kept = cutlass.Boolean(keep & (cutlass.Uint32(1) << i))
                        for r in cutlass.range_constexpr(nrow):
                            acc_S_mn[r, 32 * s + i] = acc_S_mn[r, 32 * s + i] if kept else -Float32.inf
        else:
            for r in cutlass.range_constexpr(nrow):
                row = (m_block * self.tile_m + thr_row + t0ScS_mn[r, 0][0]) // self.rows_per_query
                diag = row + self.offset - col_base
                hi = hi_seq
                if const_expr(self.mask_right):
                    hi = cutlass.min(hi, diag + self.window_right + 1)
                lo = Int32(0)
                if const_expr(self.mask_left):
                    lo = diag - self.window_left
                hi_e = self._col_to_elem(hi)
                lo_e = self._col_to_elem(lo)
                for s in cutlass.range_constexpr((ncol + 31) // 32):
                    keep = self._keep_bits(lo_e, hi_e, s)
                    for i in cutlass.range_constexpr(min(32, ncol - 32 * s)):
                        kept = cutlass.Boolean(keep & (cutlass.Uint32(1) << i))
                        acc_S_mn[r, 32 * s + i] = acc_S_mn[r, 32 * s + i] if kept else -Float32.inf

    @cute.jit
    def _col_to_elem(self, col: Int32) -> Int32:
        """The number of a thread's row elements whose relative column (0, 1, 8, 9, 16, ...) is below ``col``
        (clamped to >= 0 first, so the division and remainder are of a non-negative number)."""
        x = cutlass.max(col, Int32(0))
        return (x // 8) * 2 + cutlass.min(x % 8, Int32(2))

    @cute.jit
    def _keep_bits(self, lo_e: Int32, hi_e: Int32, s: cutlass.Constexpr[int]) -> cutlass.Uint32:
        """Bit ``i`` set iff element ``32 s + i`` lies in ``[lo_e, hi_e)``: ``(1 << n_hi) - (1 << n_lo)`` in 64 bits with
        both counts clamped to [0, 32] (no shift by the register width), truncated to 32 bits."""
        n_hi = cutlass.min(cutlass.max(hi_e - 32 * s, Int32(0)), Int32(32))
        n_lo = cutlass.min(cutlass.max(lo_e - 32 * s, Int32(0)), n_hi)
        one = cutlass.Int64(1)
        return cutlass.Uint32((one << cutlass.Int64(n_hi)) - (one << cutlass.Int64(n_lo)))
