"""The forward kernel's compile key and tile table: pure Python (no cutlass), so check_support can build it."""

from __future__ import annotations

from dataclasses import dataclass

from .._host.attention_key import AttentionKey


@dataclass(frozen=True)
class SdpaFwdKey(AttentionKey):
    """Everything the compiled kernel specializes on (Rule 4: plan-time values only, no extents): the shared
    :class:`~cudnn.sdpa._host.attention_key.AttentionKey` fields (dtype ... bottom_right), then these."""

    has_lse: bool
    lse_log2: bool
    has_sinks: bool
    varlen: bool
    pack_gqa: bool = False  # the G query heads of one kv head share a tile (rows p = s * G + g): decode / short S_q with GQA
    split_kv: bool = False  # dense only: the key blocks of a tile split over a runtime number of CTAs, fp32 partial O and LSE
    # in the caller's workspace, merged by a combine kernel launched right after (decode when B * H_kv cannot fill the GPU)
    page_size: int = 0  # paged KV (dense Q): K/V are page pools [pages, page_size, H_kv, D] addressed through an int32 page
    # table [B, max_pages]; page_size a multiple of the key tile (one TMA box never straddles pages) or, smaller, a
    # multiple of 8 dividing it into <= 16 pages (one TMA box per page into the stage's rows); 0 = contiguous K/V

    kv_stages: int = 0  # depth of the K/V shared-memory ring; 0 = tile_config's (a plan-time tuning knob, e.g. 3 for decode)
    page_prefetch: bool = False  # paged KV: the producer warp reads the page table 32 entries at a time (one coalesced
    # load, lane i holding page base + i) and broadcasts each block's page with a shuffle, instead of one dependent
    # global load in front of every K/V TMA (the decode plan under A/B; see docs/sdpa.md)
    tile_m64: bool = False  # 64-row query tile and one consumer warpgroup (no ping-pong): half the padded tensor-core
    # work of a pack-GQA decode tile (G of the rows are real), for decode where the MMA time nears the K/V stream time
    tile_n: int = 0  # key tile rows; 0 = tile_config's (a plan-time tuning knob, e.g. 176 for d = 128 non-causal as FA3 picks)
    packed_cvt: bool = False  # P converted to 16 bits one 8-element k-block at a time (paired cvt.rn.bf16x2.f32): the whole-
    # fragment convert falls back to scalar converts when its length is not a power of two (tile_n 80 / 112 / 192 of the
    # d = 256 / 192 / 64 tiles, and any tuned tile_n), costing registers and injected warpgroup waits
    persistent: bool = False  # dense / THD: a grid of at most the launch's CTA budget (the SM count), each CTA walking the
    # tiles with a static stride (L2-grouped order, longest-first with a causal / window mask); the next tile's K/V loads
    # run under the epilogue, its Q load waits only for the O store to have read shared memory
    varlen_lpt: bool = False  # THD varlen: the tile order's (head, batch) pairs numbered batch-fastest, so an L2 group is
    # whole heads over every sequence and the m-blocks of all sequences run longest-first together (group size from T_kv)
    varlen_compact: bool = False  # THD varlen: a grid of (T_q + B * (tile_m - 1)) // tile_m * H CTAs (no CTA for tiles past
    # a sequence's end), the batch found by a warp prefix sum over cu_seqlens_q, and inside a sequence L2 sections of
    # heads with the m-block slowest (reversed with a causal / window mask): see fwd/varlen_schedule.py
    tile_m: int = 0  # query tile rows; 0 = tile_config's (128), 192 = three consumer warpgroups of 64 rows in a round-robin
    # GEMM-issue order (FA4's sm90 tile for d <= 64); 64 is spelled tile_m64 (one consumer warpgroup)
    varlen_tma_o: bool = False  # THD varlen: O stored by one TMA per tile through a ragged view (rows past the sequence's
    # end clipped by the TMA bounds) instead of predicated 16-byte stores from the consumer threads
    o_rescale_early: bool = False  # O's online-softmax rescale applied under the next S GEMM, before the PV GEMM is issued,
    # instead of after the PV GEMM drains (same products, same order: bitwise the default); FA4 does this for d_v > 128
    mask_r2p: bool = False  # masks (key length, causal, window) as one [lo, hi) interval per row turned into 32-bit keep masks
    # and one select per score (R2P + FSEL, MaskInfo.apply_r2p) instead of an ``if`` per score (d = 128 causal, SASS per
    # thread per masked key block: 615 instructions with packed_cvt, 1510 without it, 538 here; FA4 568): bitwise the default
    persistent_pairs: bool = False  # persistent: the work unit is the pair of query blocks (M - 1 - j, j) of one (head,
    # batch), about M + 1 causal key blocks each, dealt by the static stride (StaticPersistentTileScheduler.tile_pair)
    exp2_emu: int = 0  # N > 0: in key blocks with no masked score, one exponential in N per row on the FMA pipe (degree-3
    # polynomial, _device/softmax.exp2_fma) instead of MUFU.EX2, whose 4 lanes per SM partition bound d = 64 blocks
    ragged_tail: bool = False  # the first key block a warpgroup processes (the highest: the sequence's partial last block,
    # or the causal diagonal) at the width its rows can see, the narrowest of ragged_tail_widths(tile_n) covering it: a
    # narrower S GEMM (N = 64 / 128), its mask, softmax and P convert on that slice, and its PV GEMM's k-loop stopped there
    spin_wait: bool = False  # the consumers' full-barrier waits (Q, K, V) spin on ``mbarrier.try_wait`` with no suspend-time
    # hint (ptxas: TRYWAIT in a loop, no NANOSLEEP) instead of the DSL wait (hint 10 ms: TRYWAIT, then NANOSLEEP.SYNCS
    # 0x989680 + PHASECHK while the phase is incomplete); see _device/pipeline.consumer_wait
    spin_wait_producer: bool = False  # the same for the producer warp's empty-barrier waits (Q, K, V slots free)
    wg_epilogue: bool = False  # persistent dense plans whose O has its own shared-memory tile (separate_o): each consumer
    # warpgroup stores its 64 rows of O by itself (stmatrix into its half of sO, one 64-row TMA store from its first warp,
    # named barriers of that warpgroup only), with the wait for the store's read of sO deferred to the warpgroup's next
    # epilogue, instead of both warpgroups meeting at one barrier and warp 4 storing 128 rows and waiting at once
    q_stages: int = 0  # Q buffers of a persistent plan whose O has its own shared-memory tile: 0 / 1 = one (the next tile's
    # Q loads once every consumer's last S GEMM of this tile is done), 2 = two (it loads while this tile runs)
    pinned_desc: bool = False  # the key-block loop's S and PV GEMMs from descriptors computed once per tile and pinned
    # (_device/wgmma_desc.py) instead of cute.gemm's per-issue rebuild, which NVVM rematerializes inside the loop
    kv_multicast: bool = False  # persistent dense unmasked plans: CTA pairs (clusters of 2) run query blocks 2u and 2u + 1 of
    # one (head, batch) in step, each TMA-loading half of every K / V tile and multicasting it to both: half the K / V
    # bytes out of L2 per query block (a phantom second block past S_q, odd M, computes on zero rows and stores nothing)

    @property
    def paged(self) -> bool:
        return self.page_size > 0


def separate_o(key) -> bool:
    """Whether a persistent plan's O gets its own shared-memory tile (else it reuses Q's buffer): when the 227 KB budget
    holds it next to Q and the K/V ring (d <= 128 with key tiles up to 128 rows, d = 192 at 112; not d = 256)."""
    extra_q = (max(key.q_stages, 1) - 1) * 2 * tile_m_of(key) * key.head_dim  # the second Q buffer (q_stages = 2)
    return key.persistent and smem_bytes(key.head_dim, key.head_dim_v, key.kv_stages, key.tile_n) + extra_q + 2 * tile_m_of(key) * key.head_dim_v <= SMEM_BYTES


def ragged_tail_widths(tile_n: int) -> tuple[int, ...]:
    """The S GEMM widths a ``ragged_tail`` plan compiles for its first key block: 64 and 128 where narrower than the key
    tile, then the tile itself (at most three, chosen at runtime from the visible key count; never a compile-key value)."""
    return tuple(w for w in (64, 128) if w < tile_n) + (tile_n,)


#: Most key splits a split-KV launch uses (the combine kernel loops over them at runtime; this bounds the workspace).
MAX_SPLITS = 64
#: Rows of the merged output one combine CTA handles (one warp per row).
COMBINE_ROWS_PER_CTA = 4


def split_workspace_bytes(num_splits: int, batch: int, heads: int, seqlen_q: int, head_dim_v: int) -> tuple[int, int]:
    """(bytes of the fp32 partial O [splits, B, H, S_q, D_v], total bytes with the fp32 partial LSE [splits, B, H, S_q]
    after it), each part rounded up to 256 bytes."""
    rows = num_splits * batch * heads * seqlen_q
    o_bytes = (rows * head_dim_v * 4 + 255) // 256 * 256
    return o_bytes, o_bytes + (rows * 4 + 255) // 256 * 256


def tile_config(head_dim: int, head_dim_v: int) -> tuple[int, int, int, bool]:
    """(tile_m, tile_n, num_stages, pingpong) for a head-dim pair (the shared memory budget is 227 KB)."""
    d = max(head_dim, head_dim_v)
    if d <= 64:
        return 128, 192, 2, True
    if d <= 128:
        return 128, 128, 2, True
    if d <= 192:
        return 128, 112, 2, False
    return 128, 80, 2, False


#: Shared memory per CTA on sm_90 (227 KB) and what the kernel keeps besides Q / K / V (barriers, 1 KB alignment).
SMEM_BYTES = 232448
SMEM_RESERVE = 2048


def tile_n_of(key) -> int:
    """The key tile rows of a plan: ``key.tile_n``, or tile_config's."""
    return key.tile_n or tile_config(key.head_dim, key.head_dim_v)[1]


def tile_m_of(key) -> int:
    """The query tile rows of a plan: 64 with ``tile_m64``, else ``key.tile_m`` or tile_config's."""
    return 64 if key.tile_m64 else key.tile_m or tile_config(key.head_dim, key.head_dim_v)[0]


def smem_bytes(head_dim: int, head_dim_v: int, kv_stages: int = 0, tile_n: int = 0, tile_m: int = 0) -> int:
    """Shared memory of one forward CTA: the Q tile of ``tile_m`` rows (reused for O) and ``kv_stages`` K and V tiles
    of ``tile_n`` rows (0: tile_config's), 16-bit elements."""
    default_m, default_n, stages, _ = tile_config(head_dim, head_dim_v)
    tile_m = tile_m or default_m
    stages = kv_stages or stages
    tile_n = tile_n or default_n
    return 2 * (tile_m * max(head_dim, head_dim_v) + stages * tile_n * (head_dim + head_dim_v)) + SMEM_RESERVE
