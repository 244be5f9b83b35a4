"""Which tile a CTA works on. One tile per CTA, grid (m_blocks, heads, batch).

For causal (and sliding-window) attention the blocks with the most key blocks run first (longest-processing-
time order): m_block is taken in reverse of blockIdx.x, so the wave tail is made of short tiles.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr


class SingleTileScheduler:
    """Device side: ``tile()`` returns ``(m_block, head, batch)`` of this CTA."""

    def __init__(self, num_m_blocks: Int32, longest_first: bool):
        self.num_m_blocks = num_m_blocks
        self.longest_first = longest_first

    @staticmethod
    def grid(num_m_blocks, num_heads, num_batch):
        return (num_m_blocks, num_heads, num_batch)

    @cute.jit
    def tile(self):
        bidx, bidy, bidz = cute.arch.block_idx()
        m_block = Int32(bidx)
        if const_expr(self.longest_first):
            m_block = self.num_m_blocks - 1 - m_block
        return m_block, Int32(bidy), Int32(bidz)
