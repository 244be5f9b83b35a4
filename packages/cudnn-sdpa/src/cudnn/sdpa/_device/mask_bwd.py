"""The backward's view of the attention masks: which query blocks a key block sees, and the mask applied to a
transposed score tile S^T (rows = keys, columns = queries), as the sm_90a backward computes S^T = K Q^T.

Same convention as :mod:`.mask` (the forward's): query row ``i`` may attend key ``j`` iff ``j < seqlen_k`` and

    j <= i + offset + window_right      (``mask_right``; causal has window_right = 0)
    j >= i + offset - window_left       (``mask_left``)

with ``offset = seqlen_k - seqlen_q`` (bottom-right alignment) or 0 (top-left). A key block that no query row
sees gets an empty range (``m_block_max <= m_block_min``): its dK and dV are zero.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .mask import MaskInfo
from .mma_sm90 import acc_view_mn


class MaskInfoBwd(MaskInfo):
    """Plan-time mask flags plus the runtime extents of the current (batch, n_block) tile: the forward's
    :class:`~.mask.MaskInfo` (same constructor, same fields, one query per tile row) seen from a key block."""

    @cute.jit
    def m_block_range(self, n_block: Int32):
        """``(m_block_min, m_block_max)``: query blocks holding at least one row that sees a key of ``n_block``."""
        m_block_max = (self.seqlen_q + self.tile_m - 1) // self.tile_m
        m_block_min = Int32(0)
        if const_expr(self.mask_right):
            # rows i >= j - offset - window_right see key j; the block's first key is n_block * tile_n
            first_row = n_block * self.tile_n - self.offset - self.window_right
            m_block_min = cutlass.max(first_row, 0) // self.tile_m
        if const_expr(self.mask_left):
            # rows i <= j - offset + window_left see key j; the block's last key is (n_block + 1) * tile_n - 1
            last_row = (n_block + 1) * self.tile_n - 1 - self.offset + self.window_left
            m_block_max = cutlass.min(m_block_max, (cutlass.max(last_row, -1) + self.tile_m) // self.tile_m)
        return m_block_min, m_block_max

    @cute.jit
    def m_block_min_unmasked(self, n_block: Int32, m_block_min: Int32) -> Int32:
        """Query blocks below this index cross the right (causal) boundary of ``n_block`` and need the mask."""
        res = m_block_min
        if const_expr(self.mask_right):
            # block m is fully visible iff its first row sees the block's last key:
            # m * tile_m + offset + window_right >= (n_block + 1) * tile_n - 1
            need = (n_block + 1) * self.tile_n - 1 - self.offset - self.window_right
            res = cutlass.max(m_block_min, (cutlass.max(need, 0) + self.tile_m - 1) // self.tile_m)
        return res

    @cute.jit
    def m_block_max_unmasked(self, n_block: Int32, m_block_max: Int32) -> Int32:
        """Query blocks at or above this index cross the left (window) boundary of ``n_block`` and need the mask."""
        res = m_block_max
        if const_expr(self.mask_left):
            # block m is fully visible iff its last row still sees the block's first key:
            # (m + 1) * tile_m - 1 + offset - window_left <= n_block * tile_n
            lim = n_block * self.tile_n - self.offset + self.window_left + 1
            res = cutlass.min(m_block_max, cutlass.max(lim, 0) // self.tile_m)
        return res

    @cute.jit
    def apply_transposed(
        self,
        acc_St: cute.Tensor,
        tScS_mn: cute.Tensor,
        m_block: Int32,
        n_block: Int32,
        mask_seqlen: cutlass.Constexpr[bool],
        mask_rows: cutlass.Constexpr[bool] = False,
    ):
        """Set masked entries of this thread's S^T fragment to -inf. ``tScS_mn[r, c]`` is the (key, query)
        coordinate of element (r, c) inside the (tile_n, tile_m) tile. ``mask_rows`` also masks queries at or past
        ``seqlen_q`` (for a query block that ends past the rows its statistics were written for)."""
        acc_mn = acc_view_mn(acc_St)
        for r in cutlass.range_constexpr(cute.size(acc_mn.shape[0])):
            col_k = n_block * self.tile_n + tScS_mn[r, 0][0]
            for c in cutlass.range_constexpr(cute.size(acc_mn.shape[1])):
                row_q = m_block * self.tile_m + tScS_mn[r, c][1]
                diag = row_q + self.offset
                if const_expr(mask_seqlen):
                    if col_k >= self.seqlen_k:
                        acc_mn[r, c] = -Float32.inf
                if const_expr(mask_rows):
                    if row_q >= self.seqlen_q:
                        acc_mn[r, c] = -Float32.inf
                if const_expr(self.mask_right):
                    if col_k > diag + self.window_right:
                        acc_mn[r, c] = -Float32.inf
                if const_expr(self.mask_left):
                    if col_k < diag - self.window_left:
                        acc_mn[r, c] = -Float32.inf

    @cute.jit
    def n_block_min_for(self, m_block: Int32) -> Int32:
        """The lowest key block that sees query block ``m_block`` (key blocks ``n_block_min_for(m) ..`` that see it
        are contiguous): the deterministic dQ reduction visits them in this order."""
        res = Int32(0)
        if const_expr(self.mask_left):
            first_col = m_block * self.tile_m + self.offset - self.window_left
            res = cutlass.max(first_col, 0) // self.tile_n
        return res
