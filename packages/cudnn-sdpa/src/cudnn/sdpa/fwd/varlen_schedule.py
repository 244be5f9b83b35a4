"""THD varlen tile order without empty CTAs (the forward's ``varlen_compact`` plan option).

The default THD grid is ``ceil(max_seqlen_q / tile_m) * H * B`` CTAs, and every tile past its sequence's end still
launches a CTA that initializes its barriers, reads ``cu_seqlens`` and exits (on a mix of 7 sequences of 512 to 4927
tokens: 2288 of 4368 CTAs). Its L2 groups are ``group_heads`` consecutive (head, batch) pairs sized for the longest
sequence, so the last sequence's last group starts its longest tiles when the rest of the grid is nearly done.

This order launches ``(T_q + B * (tile_m - 1)) // tile_m * H`` CTAs (at least the real tile count: the sum of
``ceil(n_b / tile_m)`` is at most that bound; the excess, under B per head, sits at the end of the grid and exits).
Linear tile ``t`` is decoded on the device:

1. batch: each warp reads 32 entries of ``cu_seqlens_q`` per round (lane i: batch base + i, lanes 0..30 count),
   turns them into m-block counts and takes their inclusive warp prefix sum; batch b owns the tiles
   ``[H * M_<b, H * M_<=b)`` (M the cumulative m-block counts). A ballot over ``start + H * M_<=lane <= t`` counts the
   batches wholly before ``t``. Rounds of 31 batches repeat only when B > 31.
2. inside the batch (``n_m`` m-blocks, ``H`` heads): sections of ``nh`` heads (the largest power of two <= 16 whose
   K/V blocks of this sequence fit ``l2_blocks``, at most H), the m-block varying slowest inside a section, reversed
   with ``longest_first`` (causal / window): all heads of a sequence run their longest tiles first, so every
   sequence, the last one included, is scheduled longest-processing-time first.

Invalid tiles (past the last batch) come back with ``batch = 0`` and an m-block whose first row lies past any
sequence, so the kernel's "tile past the sequence's end" guard skips them. Warp-uniform: every warp of the CTA runs
the same decode (one coalesced 32-entry load per round, five shuffles, one ballot) and gets the same tile.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr

#: An m-block whose first row (m * tile_m, tile_m <= 256) is past any sequence and still fits an Int32.
PAST_END_M_BLOCK = (1 << 31) // 256 - 1
#: K/V bytes of one sequence's L2 section (the H200 has 50 MB of L2; the rest holds Q and O streams).
L2_SECTION_BYTES = 40 << 20
#: Rounds of 31 batches whose cu_seqlens loads one decode step issues together (the unrolled step below is written
#: for 4: up to 124 sequences cost one load latency, more cost one more per 124).
ROUNDS_PER_STEP = 4


def grid_blocks(total_q, num_batch, tile_m: int):
    """Host side (inside ``__call__``): an upper bound on the sum over sequences of ``ceil(n_b / tile_m)``."""
    return (total_q + num_batch * (tile_m - 1)) // tile_m


def l2_blocks(tile_n: int, head_dim: int, head_dim_v: int) -> int:
    """K/V key blocks (both tiles, 16-bit) one L2 section may hold."""
    return max(1, L2_SECTION_BYTES // (tile_n * (head_dim + head_dim_v) * 2))


@cute.jit
def _m_block_counts(mCuQ: cute.Tensor, first: Int32, lane: Int32, num_batch: Int32, tile_m: cutlass.Constexpr[int]):
    """``(n_m, cum)`` of lane ``lane``: the m-block count of batch ``first + lane`` (0 for lane 31 and past the last
    batch) and its inclusive prefix sum over the warp."""
    b = first + lane
    cu = Int32(0)
    if b <= num_batch:
        cu = mCuQ[b]
    nxt = cute.arch.shuffle_sync_down(cu, 1)
    n_m = Int32(0)
    if b < num_batch:
        if lane < 31:
            n_m = (nxt - cu + tile_m - 1) // tile_m
    cum = n_m
    for i in cutlass.range_constexpr(5):
        up = cute.arch.shuffle_sync_up(cum, 1 << i)
        if lane >= (1 << i):
            cum = cum + up
    return n_m, cum


@cute.jit
def varlen_tile(
    mCuQ: cute.Tensor,
    num_heads: Int32,
    num_batch: Int32,
    tile_m: cutlass.Constexpr[int],
    tile_n: cutlass.Constexpr[int],
    l2_kv_blocks: cutlass.Constexpr[int],
    longest_first: cutlass.Constexpr[bool],
):
    """``(m_block, head, batch)`` of this CTA (``block_idx.x``) in the compact THD order (see the module doc)."""
    bidx, _, _ = cute.arch.block_idx()
    lin = Int32(bidx)
    lane = cute.arch.lane_idx()
    first = Int32(0)
    start = Int32(0)  # first linear tile of batch `first`
    # Skip whole groups of ROUNDS_PER_STEP rounds (31 batches each) that end at or before `lin`: the rounds' loads
    # are independent, so a step costs one load latency (no iteration unless B > 31 * ROUNDS_PER_STEP).
    step_batches = 31 * ROUNDS_PER_STEP
    for _ in cutlass.range((num_batch + step_batches - 1) // step_batches - 1, unroll=1):
        step_tiles = Int32(0)
        for r in cutlass.range_constexpr(ROUNDS_PER_STEP):
            _, cum_r = _m_block_counts(mCuQ, first + 31 * r, lane, num_batch, tile_m)
            step_tiles = step_tiles + cute.arch.shuffle_sync(cum_r, 31) * num_heads
        if start + step_tiles <= lin:
            start = start + step_tiles
            first = first + step_batches
    # The step holding `lin`: its rounds' counts (independent loads), then the round holding `lin` picked in order.
    n_m, cum = _m_block_counts(mCuQ, first, lane, num_batch, tile_m)
    n_1, cum_1 = _m_block_counts(mCuQ, first + 31, lane, num_batch, tile_m)
    n_2, cum_2 = _m_block_counts(mCuQ, first + 62, lane, num_batch, tile_m)
    n_3, cum_3 = _m_block_counts(mCuQ, first + 93, lane, num_batch, tile_m)
    t_0 = cute.arch.shuffle_sync(cum, 31) * num_heads
    t_1 = cute.arch.shuffle_sync(cum_1, 31) * num_heads
    t_2 = cute.arch.shuffle_sync(cum_2, 31) * num_heads
    if start + t_0 <= lin:
        start = start + t_0
        first = first + 31
        n_m = n_1
        cum = cum_1
        if start + t_1 <= lin:
            start = start + t_1
            first = first + 31
            n_m = n_2
            cum = cum_2
            if start + t_2 <= lin:
                start = start + t_2
                first = first + 31
                n_m = n_3
                cum = cum_3
    idx = cute.arch.popc(cute.arch.vote_ballot_sync(start + cum * num_heads <= lin))
    sel = cutlass.min(idx, Int32(31))
    batch = first + idx
    nb = cute.arch.shuffle_sync(n_m, sel)
    before = cute.arch.shuffle_sync(cum - n_m, sel)
    m_block = Int32(PAST_END_M_BLOCK)
    head = Int32(0)
    if batch < num_batch:
        t = lin - start - before * num_heads
        # Heads per L2 section: the largest power of two <= 16 whose K/V blocks of this sequence fit the budget.
        kv_blocks = (nb * tile_m + tile_n - 1) // tile_n
        nh = Int32(1)
        for p in cutlass.range_constexpr(1, 5):
            if kv_blocks * (1 << p) <= l2_kv_blocks:
                nh = Int32(1 << p)
        nh = cutlass.min(nh, num_heads)
        per_section = nh * nb
        section = t // per_section
        r = t - section * per_section
        heads_here = cutlass.min(nh, num_heads - section * nh)
        m = r // heads_here
        head = section * nh + r - m * heads_here
        m_block = m
        if const_expr(longest_first):
            m_block = nb - 1 - m
    else:
        batch = Int32(0)
    return m_block, head, batch


def varlen_tile_reference(cu_seqlens_q, heads: int, tile_m: int, tile_n: int, head_dim: int, head_dim_v: int, longest_first: bool):
    """Host-side lane-by-lane emulation of :func:`varlen_tile` (the same rounds, prefix sums, ballot and section
    arithmetic), for tests: the ``(m_block, head, batch)`` of every CTA of the grid, ``None`` where the device code
    returns an invalid tile (``batch = 0``, ``m_block = PAST_END_M_BLOCK``)."""
    num_batch = len(cu_seqlens_q) - 1
    budget = l2_blocks(tile_n, head_dim, head_dim_v)

    def counts(first):
        n_m = []
        for lane in range(32):
            b = first + lane
            nxt_b = first + min(lane + 1, 31)
            cu = cu_seqlens_q[b] if b <= num_batch else 0
            nxt = cu_seqlens_q[nxt_b] if nxt_b <= num_batch else 0
            n_m.append(-(-(nxt - cu) // tile_m) if b < num_batch and lane < 31 else 0)
        cum = [sum(n_m[: i + 1]) for i in range(32)]
        return n_m, cum

    out = []
    step_batches = 31 * ROUNDS_PER_STEP
    for lin in range(grid_blocks(cu_seqlens_q[-1], num_batch, tile_m) * heads):
        first = start = 0
        for _ in range((num_batch + step_batches - 1) // step_batches - 1):
            step_tiles = sum(counts(first + 31 * r)[1][31] * heads for r in range(ROUNDS_PER_STEP))
            if start + step_tiles <= lin:
                start, first = start + step_tiles, first + step_batches
        rounds = [counts(first + 31 * r) for r in range(ROUNDS_PER_STEP)]
        n_m, cum = rounds[0]
        for r in range(ROUNDS_PER_STEP - 1):
            if start + rounds[r][1][31] * heads <= lin:
                start, first = start + rounds[r][1][31] * heads, first + 31
                n_m, cum = rounds[r + 1]
            else:
                break
        idx = sum(1 for lane in range(32) if start + cum[lane] * heads <= lin)
        sel = min(idx, 31)
        batch, nb, before = first + idx, n_m[sel], cum[sel] - n_m[sel]
        if batch >= num_batch:
            out.append(None)
            continue
        t = lin - start - before * heads
        kv_blocks = -(-(nb * tile_m) // tile_n)
        nh = 1
        for p in range(1, 5):
            if kv_blocks * (1 << p) <= budget:
                nh = 1 << p
        nh = min(nh, heads)
        section, r = divmod(t, nh * nb)
        here = min(nh, heads - section * nh)
        m, hr = divmod(r, here)
        out.append((nb - 1 - m if longest_first else m, section * nh + hr, batch))
    return out
