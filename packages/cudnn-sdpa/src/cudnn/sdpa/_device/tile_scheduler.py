"""Which tile a CTA works on. One tile per CTA on a 1-D grid of ``num_m_blocks * heads * batch`` CTAs.

The linear block id is decoded so that ``group_heads`` consecutive (head, batch) pairs form an L2 group: inside
a group the m-block varies slowest, so the K/V of the group stay in L2 while all its query blocks run. With
``longest_first`` (causal, sliding window) m_block is taken in reverse, so the blocks with the most key blocks
start first and the tail of the last wave is made of short tiles (longest-processing-time order).
``group_heads`` is a runtime value the host derives from the K/V footprint (no recompile per shape).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr


class SingleTileScheduler:
    """Device side: ``tile()`` returns ``(m_block, head, batch)`` of this CTA."""

    def __init__(self, num_m_blocks: Int32, num_heads: Int32, num_batch: Int32, group_heads: Int32, longest_first: bool):
        self.num_m_blocks = num_m_blocks
        self.num_heads = num_heads
        self.num_batch = num_batch
        self.group_heads = group_heads
        self.longest_first = longest_first

    @staticmethod
    def grid(num_m_blocks, num_heads, num_batch):
        return (num_m_blocks * num_heads * num_batch, 1, 1)

    @staticmethod
    def group_heads_for(seqlen_k: int, head_dim: int, head_dim_v: int, l2_budget_bytes: int = 8 << 20) -> int:
        """How many (head, batch) pairs' K/V fit the L2 budget together (host side)."""
        per_head = max(1, seqlen_k) * (head_dim + head_dim_v) * 2
        return max(1, min(1 << 16, l2_budget_bytes // per_head))

    @cute.jit
    def tile(self):
        bidx, _, _ = cute.arch.block_idx()
        lin = Int32(bidx)
        num_hb = self.num_heads * self.num_batch
        per_group = self.group_heads * self.num_m_blocks
        group = lin // per_group
        rem = lin - group * per_group
        first_hb = group * self.group_heads
        heads_here = cutlass.min(self.group_heads, num_hb - first_hb)
        m_block = rem // heads_here
        hb = first_hb + rem - m_block * heads_here
        if const_expr(self.longest_first):
            m_block = self.num_m_blocks - 1 - m_block
        batch = hb // self.num_heads
        head = hb - batch * self.num_heads
        return m_block, head, batch
