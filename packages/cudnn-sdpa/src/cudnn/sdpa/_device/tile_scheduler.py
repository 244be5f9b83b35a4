"""Which tile a CTA works on: one tile per CTA on a 1-D grid of ``num_m_blocks * heads * batch`` CTAs
(:class:`SingleTileScheduler`), or a persistent grid walking the same order (:class:`StaticPersistentTileScheduler`).

The linear block id is decoded so that ``group_heads`` consecutive (head, batch) pairs form an L2 group: inside
a group the m-block varies slowest, so the K/V of the group stay in L2 while all its query blocks run. With
``longest_first`` (causal, sliding window) m_block is taken in reverse, so the blocks with the most key blocks
start first and the tail of the last wave is made of short tiles (longest-processing-time order).
``group_heads`` is a runtime value the host derives from the K/V footprint (no recompile per shape).

The tile order with ``group_heads`` = 1 and no ``longest_first`` / ``batch_fastest`` (unmasked plans) is the block
order of a 3-D grid ``(num_m_blocks, heads, batch)``: :meth:`SingleTileScheduler.grid` launches that grid when it may
(``group_heads`` = 1 at launch, heads and batch within the grid's y / z limit of 65535) and the CTA reads its tile from
its block index, skipping the decode's three runtime integer divisions (~100 instructions on every warp at the CTA's
start, ahead of the producer's first TMA: session-16 ncu source view, 2.5% of the d = 128 s1k forward's warp samples
against FA4's 3-D grid). Otherwise the grid is 1-D and the decode runs (:meth:`SingleTileScheduler.tile` checks the
launched grid's y / z extents, so one compiled kernel serves both).
With ``grouped`` (the backward key's opt-in ``grouped_grid``: masked and varlen plans, whose L2 groups hold several
pairs) a group size that divides ``heads * batch`` launches the grouped 3-D grid ``(group_heads, num_m_blocks,
heads * batch / group_heads)``: block ``(p, m, g)`` is pair ``g * group_heads + p`` at m-block ``m``, the decode's order
exactly (x fastest, so :meth:`SingleTileScheduler.linear_id` is the decode's linear id), leaving one division
(pair -> head, batch) of the three; a group size of 1 launches the plain 3-D grid; any other size keeps the 1-D decode.
Not with ``longest_first`` (the forward's masked plans keep the 1-D decode).
With ``batch_fastest`` (THD varlen, the forward's ``varlen_lpt``) the pairs are numbered head-major, so a group holds
whole heads across every sequence: the m-blocks of all sequences then run longest-first together, instead of the
groups of the last sequences (often the longest) running last.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr


class SingleTileScheduler:
    """Device side: ``tile()`` returns ``(m_block, head, batch)`` of this CTA."""

    def __init__(
        self,
        num_m_blocks: Int32,
        num_heads: Int32,
        num_batch: Int32,
        group_heads: Int32,
        longest_first: bool,
        batch_fastest: bool = False,
        grouped_grid: bool = False,
    ):
        self.num_m_blocks = num_m_blocks
        self.num_heads = num_heads
        self.num_batch = num_batch
        self.group_heads = group_heads
        self.longest_first = longest_first
        self.batch_fastest = batch_fastest  # (head, batch) pairs numbered batch-fastest (THD varlen: a group = one head's sequences)
        self.grouped_grid = grouped_grid  # launched by grid(..., grouped=True): reads the grouped or plain 3-D grid

    #: The CUDA grid's y / z extent limit.
    GRID_YZ_MAX = 65535

    @staticmethod
    def grid(num_m_blocks, num_heads, num_batch, group_heads=None, grouped=False):
        """The launch grid: 1-D (``num_m_blocks * num_heads * num_batch``), or with ``group_heads`` given (a plan whose
        kernel decodes with ``longest_first`` and ``batch_fastest`` off) 3-D
        ``(num_m_blocks, num_heads, num_batch)`` when ``group_heads`` = 1 and both fit :attr:`GRID_YZ_MAX`; with
        ``grouped`` also ``(group_heads, num_m_blocks, heads * batch / group_heads)`` when ``group_heads`` > 1 divides
        ``heads * batch`` and both fit (runtime values: selected at launch)."""
        if group_heads is None:
            return (num_m_blocks * num_heads * num_batch, 1, 1)
        lim = SingleTileScheduler.GRID_YZ_MAX
        flat = num_m_blocks * num_heads * num_batch
        tiled = (group_heads == 1) & (num_heads <= lim) & (num_batch <= lim)
        x = cutlass.select_(tiled, num_m_blocks, flat)
        y = cutlass.select_(tiled, num_heads, Int32(1))
        z = cutlass.select_(tiled, num_batch, Int32(1))
        if grouped:
            num_hb = num_heads * num_batch
            num_groups = num_hb // group_heads
            fits = (group_heads > 1) & (num_groups * group_heads == num_hb) & (num_m_blocks <= lim) & (num_groups <= lim)
            x = cutlass.select_(fits, group_heads, x)
            y = cutlass.select_(fits, num_m_blocks, y)
            z = cutlass.select_(fits, num_groups, z)
        return (Int32(x), Int32(y), Int32(z))

    @staticmethod
    def grouped_heads(group_heads: int, num_hb: int) -> int:
        """Host side, ``grouped`` plans: ``num_hb`` when the (head, batch) pairs fit one group (the same order), else the
        largest divisor of ``num_hb`` at most ``group_heads`` when it is at least half of it (the grouped 3-D grid's group
        size: the same L2 budget, a few pairs fewer per group), else ``group_heads`` (the 1-D decode)."""
        if 0 < num_hb <= group_heads:
            return num_hb
        for d in range(group_heads, max(1, (group_heads + 1) // 2) - 1, -1):
            if num_hb % d == 0:
                return d
        return group_heads

    @staticmethod
    @cute.jit
    def linear_id() -> Int32:
        """This CTA's linear block id over a 1-D or 3-D grid (x fastest): its position in the tile order."""
        bidx, bidy, bidz = cute.arch.block_idx()
        gdx, gdy, _ = cute.arch.grid_dim()
        return Int32(bidx) + Int32(gdx) * (Int32(bidy) + Int32(gdy) * Int32(bidz))

    @staticmethod
    def group_heads_for(seqlen_k: int, head_dim: int, head_dim_v: int, l2_budget_bytes: int = 8 << 20) -> int:
        """How many (head, batch) pairs' K/V fit the L2 budget together (host side)."""
        per_head = max(1, seqlen_k) * (head_dim + head_dim_v) * 2
        return max(1, min(1 << 16, l2_budget_bytes // per_head))

    @cute.jit
    def tile(self):
        """This CTA's ``(m_block, head, batch)``: its block index on a 3-D grid (see :meth:`grid`; the grouped grid's
        one division), else the decode of its 1-D block id."""
        bidx, bidy, bidz = cute.arch.block_idx()
        assert not (self.grouped_grid and (self.longest_first or self.batch_fastest)), "grouped_grid: not with longest_first / batch_fastest"
        if const_expr(self.longest_first or self.batch_fastest):  # never launched 3-D
            return self.tile_at(Int32(bidx))
        _, gdy, gdz = cute.arch.grid_dim()
        m_block, head, batch = Int32(bidx), Int32(bidy), Int32(bidz)
        if Int32(gdy) * Int32(gdz) == 1:  # a 1-D grid (or one block per y / z, where the 3-D grids and the decode agree)
            m_block, head, batch = self.tile_at(Int32(bidx))
        else:
            if const_expr(self.grouped_grid):
                if self.group_heads != 1:  # (pair in group, m-block, group)
                    hb = Int32(bidz) * self.group_heads + Int32(bidx)
                    m_block = Int32(bidy)
                    batch = hb // self.num_heads
                    head = hb - batch * self.num_heads
        return m_block, head, batch

    @cute.jit
    def tile_at(self, lin: Int32):
        """``(m_block, head, batch)`` of linear block id ``lin`` (:meth:`tile` decodes its own block id with it; the
        backward's ``kv_prefetch`` another CTA's)."""
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
        batch, head = None, None
        if const_expr(self.batch_fastest):
            head = hb // self.num_batch
            batch = hb - head * self.num_batch
        else:
            batch = hb // self.num_heads
            head = hb - batch * self.num_heads
        return m_block, head, batch


class StaticPersistentTileScheduler:
    """Device side of a persistent launch: a grid of at most one CTA per SM, CTA ``c`` taking the linear tiles
    ``c, c + grid, c + 2 * grid, ...`` decoded in :class:`SingleTileScheduler`'s order (L2 groups of ``group_heads``
    (head, batch) pairs, m-block slowest inside a group; m-block reversed with ``longest_first``, so the tiles with the
    most key blocks are taken first and the last round is made of short ones). ``num_tiles_here(...)`` is how many
    tiles this CTA runs and ``tile(i, ...)`` its ``i``-th ``(m_block, head, batch)``. Static methods (no device-side
    object: a value carried through a dynamic loop must be a runtime value).

    ``pairs=True`` in :meth:`num_tiles_here` selects :meth:`tile_pair` instead of :meth:`tile` (the forward's
    ``persistent_pairs``). ``cluster_m`` > 1 (the forward's ``kv_multicast``, grid from :meth:`grid_clusters`): the work
    unit is ``cluster_m`` consecutive query blocks of one (head, batch), cluster ``c`` (CTAs ``c * cluster_m + r``) takes
    the units ``c, c + clusters, ...`` in the same grouped order and its CTA ``r`` block ``cluster_m * u + r`` of each, so
    the CTAs of a cluster walk the same (head, batch) sequence in step; a block past the last (M not a multiple of
    ``cluster_m``) is returned as is: the caller runs it on zero rows and stores nothing."""

    @staticmethod
    def grid(num_m_blocks, num_heads, num_batch, max_ctas):
        """``min(tiles, max_ctas)`` CTAs (``max_ctas`` is a runtime value: the host passes the SM count)."""
        return (cutlass.min(num_m_blocks * num_heads * num_batch, max_ctas), 1, 1)

    @staticmethod
    def grid_clusters(num_m_blocks, num_heads, num_batch, max_ctas, cluster_m: int):
        """The persistent grid of ``cluster_m`` > 1: ``cluster_m * min(units, max_ctas // cluster_m)`` CTAs, a unit being
        ``cluster_m`` consecutive query blocks of one (head, batch)."""
        units = (num_m_blocks + cluster_m - 1) // cluster_m * num_heads * num_batch
        return (cutlass.min(units, max_ctas // cluster_m) * cluster_m, 1, 1)

    @staticmethod
    @cute.jit
    def num_tiles_here(
        num_m_blocks: Int32, num_heads: Int32, num_batch: Int32, pairs: cutlass.Constexpr[bool] = False, cluster_m: cutlass.Constexpr[int] = 1
    ) -> Int32:
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        if const_expr(cluster_m > 1):  # the cluster's units (every CTA of a cluster runs as many)
            bidx, gdim = Int32(bidx) // cluster_m, Int32(gdim) // cluster_m
            num_m_blocks = (num_m_blocks + cluster_m - 1) // cluster_m
        total = num_m_blocks * num_heads * num_batch
        res = (total - Int32(bidx) + Int32(gdim) - 1) // Int32(gdim)
        if const_expr(pairs):  # two tile slots per pair (the second of a middle pair is empty)
            units = (num_m_blocks + 1) // 2 * num_heads * num_batch
            res = (units - Int32(bidx) + Int32(gdim) - 1) // Int32(gdim) * 2
        return res

    @staticmethod
    @cute.jit
    def tile(
        i: Int32,
        num_m_blocks: Int32,
        num_heads: Int32,
        num_batch: Int32,
        group_heads: Int32,
        longest_first: cutlass.Constexpr[bool],
        batch_fastest: cutlass.Constexpr[bool] = False,
        cluster_m: cutlass.Constexpr[int] = 1,
    ):
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        rank = Int32(0)
        if const_expr(cluster_m > 1):  # decode the cluster's unit, then take this CTA's block of it
            rank = Int32(bidx) % cluster_m
            bidx, gdim = Int32(bidx) // cluster_m, Int32(gdim) // cluster_m
            num_m_blocks = (num_m_blocks + cluster_m - 1) // cluster_m
        lin = Int32(bidx) + i * Int32(gdim)
        num_hb = num_heads * num_batch
        per_group = group_heads * num_m_blocks
        group = lin // per_group
        rem = lin - group * per_group
        first_hb = group * group_heads
        heads_here = cutlass.min(group_heads, num_hb - first_hb)
        m_block = rem // heads_here
        hb = first_hb + rem - m_block * heads_here
        if const_expr(longest_first):
            m_block = num_m_blocks - 1 - m_block
        if const_expr(cluster_m > 1):
            m_block = m_block * cluster_m + rank
        batch, head = None, None
        if const_expr(batch_fastest):
            head = hb // num_batch
            batch = hb - head * num_batch
        else:
            batch = hb // num_heads
            head = hb - batch * num_heads
        return m_block, head, batch

    @staticmethod
    def grid_pairs(num_m_blocks, num_heads, num_batch, max_ctas):
        """The persistent grid of :meth:`tile_pair`: ``min(pairs, max_ctas)`` CTAs."""
        return (cutlass.min((num_m_blocks + 1) // 2 * num_heads * num_batch, max_ctas), 1, 1)

    @staticmethod
    @cute.jit
    def tile_pair(i: Int32, num_m_blocks: Int32, num_heads: Int32, num_batch: Int32, batch_fastest: cutlass.Constexpr[bool] = False):
        """The ``i``-th ``(m_block, head, batch)`` of this CTA when the work unit is a pair of query blocks of one (head,
        batch): ``m = M - 1 - j`` then ``m = j`` (M = ``num_m_blocks``, j < ceil(M / 2)). Under a causal mask block ``m``
        sees about ``m + 1`` key blocks, so every pair costs about M + 1 blocks: the static stride deals equal work to
        every CTA (plain striding of the longest-first order hands the first CTAs the longest tile of every round).
        Pairs of one (head, batch) are consecutive, so the CTAs running at once share a few heads' K/V in L2. The
        second slot of a middle pair (odd M, ``j = M - 1 - j``) returns ``m = M``, past the last block: the callers'
        bounds check skips it (as it skips THD tiles past a sequence's end)."""
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        per_hb = (num_m_blocks + 1) // 2
        unit = Int32(bidx) + (i // 2) * Int32(gdim)
        hb = unit // per_hb
        j = unit - hb * per_hb
        m_block = num_m_blocks - 1 - j
        if i % 2 == 1:
            m_block = j
            if j == num_m_blocks - 1 - j:
                m_block = num_m_blocks
        batch, head = None, None
        if const_expr(batch_fastest):
            head = hb // num_batch
            batch = hb - head * num_batch
        else:
            batch = hb // num_heads
            head = hb - batch * num_heads
        return m_block, head, batch
