"""The backward kernels' compile key, tile table and workspace layout: pure Python (no cutlass), so
check_support and scratch_workspace_bytes run anywhere."""

from __future__ import annotations

from dataclasses import dataclass

from .._host.attention_key import AttentionKey

#: Rows per CTA of the preprocess and postprocess kernels; the scratch is padded to a multiple of it.
PREPOST_ROWS = 128
#: Query rows per dQ semaphore of the deterministic mode: the main kernel's tile_m (64) for every served head dim.
SEM_ROWS = 64
_ALIGN = 128


@dataclass(frozen=True)
class SdpaBwdKey(AttentionKey):
    """Everything the compiled backward kernels specialize on (Rule 4: plan-time values only, no extents): the shared
    :class:`~cudnn.sdpa._host.attention_key.AttentionKey` fields (dtype ... bottom_right), then these."""

    lse_log2: bool  # the saved LSE is in base 2 (the forward's ``lse_log2``)
    has_sinks: bool
    varlen: bool
    deterministic: bool
    # Schedule variants of the main kernel (plan-time A/B options; the defaults are the verified schedule):
    dq_tma: bool = False  # dQ partials staged in shared memory, added into the accumulator by one TMA reduce-add per warpgroup
    stats_tma: bool = False  # lse_log2 / dpsum rows bulk-copied into shared memory with Q / dO (same pipeline stage)
    ds_double_buffer: bool = False  # two dS^T buffers: drops the "dS^T free" barrier of every query block
    prepost_vec: bool = False  # pre/postprocess: four adjacent threads per row (coalesced) instead of one
    split_d: bool = False  # the split-head-dim main kernel (kernel_splitd_sm90.py): serves D = D_v = 256 (and 128)
    # dQ partials staged in shared memory in MMA-fragment order (16-byte stores) and added by ONE non-tensor bulk
    # reduce-add (cp.reduce.async.bulk .add.f32) per warpgroup; the accumulator then holds every 64-row query block in
    # that order (see DQ_BULK_ROWS) and the postprocess reads it so. Exclusive with dq_tma (the same stage, other layout).
    dq_bulk: bool = False
    # with dq_bulk (or dq_tma): warp 1 of the producer warpgroup issues the bulk (or TMA) reduce-adds (named-barrier
    # handshake per consumer warpgroup), so no consumer thread waits on a bulk group or issues one
    dq_writer: bool = False
    # with dq_tma: query blocks of 80 rows instead of 64 (FA3 / FA4's d128 tile): dQ computed transposed (dQ^T = K^T dS^T,
    # the head dim split over the consumer warpgroups) and staged for the TMA reduce-add through a 128-byte swizzle;
    # dense D = D_v = 128 only (the 64-row scratch padding and the varlen row layout assume tile_m | PREPOST_ROWS).
    # With dq_bulk instead (m80 bulk, session 9): each warpgroup's 64 x 80 dQ^T fragment staged in fragment order (ten
    # 16-byte stores a thread) and added by ONE 20 KiB bulk reduce-add into an 80-row fragment-ordered accumulator block
    # (see m80_bulk_rows); the scratch rows are padded to whole 80-row blocks (padded_rows) and the postprocess reads
    # that order; dense only
    tile_m80: bool = False
    # with dq_tma, 64-row blocks: m80's transposed dQ^T and 128-byte-swizzled staging (two 64 x 32 TMA boxes of 128-byte
    # rows per warpgroup instead of dq_tma's eight 64 x 8 boxes of 32-byte rows); D = D_v = 128 (dense or varlen)
    dq_t128: bool = False
    # with split_d + dq_bulk + ds_double_buffer: S^T on consumer warpgroup 1 and dP^T on warpgroup 2, each the whole
    # 64 x 64 tile (64 x 64 WGMMAs instead of two 64 x 32 per GEMM: a third less shared-memory operand traffic for
    # them); warpgroup 2 reads P^T back (bf16, ldmatrix) to form dS^T (see kernel_splitd_bulk_sm90.py)
    sdp_wg: bool = False
    # with sdp_wg: dV on warpgroup 1 and dK on warpgroup 2, each the whole 64 x D accumulator, as RS WGMMAs (64 x 256)
    # from the P^T / dS^T registers the warpgroup already holds (no A operand from shared memory; dQ stays split)
    dkv_rs: bool = False
    # with dkv_rs: both warpgroups' RS GEMMs (dV on 1, dK on 2) from ONE call site (dkv_rs issues them from the two
    # sides of a branch, which makes ptxas serialize every WGMMA of the kernel: C7512), each as soon as its P^T / dS^T
    # registers are formed, before the P^T / dS^T barrier (only dQ needs it), so warpgroup 1's dV runs while warpgroup 2
    # forms dS^T; Q / dO released per warpgroup right after its last read; the producer loads dO before Q (dO is freed
    # first). See kernel_splitd_bulk_sm90.py
    dkv_early: bool = False
    # query blocks of 128 rows instead of 64 at D = D_v = 64 (FA3's d64 tile, kBlockM = kBlockN = 128): each block's
    # fixed costs (barriers, the dS^T round trip, dQ reduce-adds, lse / dpsum loads) over twice the rows, and the S^T /
    # dP^T WGMMAs at N = 128; takes stats_tma, combines with ds2, prepost and the atomic, dq_tma or dq_bulk + dq_writer
    # dQ paths, dense or varlen (the 128-row scratch padding is a multiple of the tile); see kernel_sm90.py
    tile_m128: bool = False
    # P^T and dS^T converted to the element type by one inline ``cvt.rn.{bf16,f16}x2.f32`` per pair of registers
    # (session 8): LLVM re-forms dS^T's conversions after the branches between the stmatrix and the dK WGMMA (one set
    # for the stmatrix, one for the RS WGMMA: 16 of each per query block and thread at 64 x 64), which an inline
    # conversion cannot be; the same rounding (cvt.rn is what the default lowers to)
    pack_once: bool = False
    # with tile_m128 + dq_bulk: dQ's 128 rows split over the consumer warpgroups (FA3 / FA4's d64 dQ) instead of the
    # head dim: each warpgroup one 64 x D accumulator in m64n64k16 WGMMAs (8 a block instead of 16 m64n32k16), staged
    # as one whole 64-row fragment-ordered block (the same accumulator order: see kernel_sm90.py) and added by ONE
    # 16 KiB bulk reduce-add per warpgroup instead of two
    dq_rows: bool = False
    # dS kept in shared memory as dS (queries, keys; keys contiguous) instead of dS^T (FA3 / FA4's layout): written by
    # transposed stmatrix (the four stores of a thread step over 16-query rows of the buffer, whole swizzle periods apart:
    # one base address plus immediates, where dS^T's step across a swizzled row and recompute each address per block),
    # read by dQ = dS K as a K-major A operand; not with m80 / dqt (their dQ^T reads dS^T) or split_d
    ds_kmajor: bool = False
    # with stats_tma (the 64-wide main kernel: 64-, 80- or 128-row query blocks): the preprocess stores lse_log2 / dpsum
    # permuted inside each 16-row group (row 8 j + 2 l + b of the group at 4 l + 2 j + b, j, b in {0, 1}, l < 4: see
    # stats_perm_row) so that the four query columns 8 j + 2 l + b (j = 2 i, 2 i + 1) of a consumer thread are one
    # 16-byte word: at m128 16 LDS.128 per block and thread instead of 32 LDS.64, at 64 rows 8 instead of 16 (session
    # 20: in the m128 default; at 64 / 80 rows opt-in, 0.96x-0.99x in the H200 A/B)
    stats_vec4: bool = False
    # with stats_vec4: each query block's lse_log2 words loaded into registers right after the S^T GEMM is issued and its
    # dpsum words before the wait for dP^T, instead of at their first use after those waits (ptxas does not hoist the
    # shared-memory loads above a wgmma wait: session-16 ncu source view, d64 s1k causal, the first FFMA after each
    # LDS.128 waiting on it, ~5% of the kernel's warp samples); 32 more registers live across each wait (no frame without
    # GQA, 48 bytes with causal GQA). Opt-in: the session-16 H200 A/B found no gain (docs/benchmarks/sdpa_bwd_s16_stearly.md)
    stats_early: bool = False
    # D = 192 / D_v = 128: FA4's 64 x 96 tile (kernel_n96_sm90.py): a CTA owns 96 keys, each consumer warpgroup 48 of
    # them for S / dP (M = the 64 queries), dK^T = Q^T dS and dV^T = dO^T P with M = the head dim, every GEMM SS (P and
    # dS through shared memory), dQ = dS K staged in dq_bulk's fragment order for the writer warp. Takes dq_bulk +
    # dq_writer (and optionally stats_tma, prepost_vec, ds_double_buffer: a second dS buffer, pack_once); nothing else
    # of the main kernel's variants
    tile_n96: bool = False
    # Fixed-cost variants (notes/bwd_fixed_cost.md A / B; opt-in, default PTX unchanged; the session-15 H200 A/B found
    # neither faster than the default, docs/benchmarks/sdpa_bwd_s15_fixed_d128.md / _d64.md):
    # the consumers' full-barrier waits (K / V at the start of the key block, Q / dO of every query block) spin on
    # ``mbarrier.try_wait`` with no suspend-time hint, so no NANOSLEEP (``_device/pipeline.consumer_wait``, the forward's
    # ``SdpaFwdKey.spin_wait``); every main kernel (64-wide, split_d, split_d bulk, n96)
    spin_wait: bool = False
    # FA4's prologue order: K rides on the first Q stage's full barrier and V on the first dO stage's (their
    # transaction bytes added by an ``mbarrier.expect_tx``), issued K, Q0, V, dO0; the consumers' separate K / V wait is
    # dropped (the first S^T waits for K + Q0 only, the first dP^T for V + dO0). A key block that sees no query block
    # loads neither and waits for nothing (its epilogue overwrites sK / sV with no TMA in flight). Not split_d
    kv_with_q: bool = False
    # Programmatic Dependent Launch (FA4's): the three kernels launched with ``use_pdl``; the main kernel's producer
    # issues K / V before its ``griddepcontrol.wait`` (the preprocess writes neither), every other warp waits first;
    # the preprocess triggers its dependents once its loads are issued, the main kernel after its epilogue, and the
    # postprocess waits before reading the dQ accumulator. Every main kernel (64-wide, split_d, split_d bulk, n96)
    pdl: bool = False
    # L2 prefetch of the next wave's K / V: when the producer issues its CTA's last Q / dO load it decodes tile
    # ``blockIdx.x + resident_ctas`` (a runtime launch argument: SM count x CTAs per SM) with the tile scheduler's
    # arithmetic and, inside the grid, issues TMA L2 prefetches (``cute.prefetch``) of that tile's K and V. Dense, not
    # split_d. (pdl and kv_prefetch: no gain in the session-15 H200 A/B, docs/benchmarks/sdpa_bwd_s15_pdl_*.md; off)
    kv_prefetch: bool = False
    # the grouped 3-D grid (``_device/tile_scheduler.py``): a plan whose L2 groups hold several (kv head, batch) pairs
    # (masked and varlen plans: budget groups) launches ``(group_heads, key blocks, pairs / group_heads)`` when the group
    # size divides the pairs (the host picks the largest divisor within half of the budget's size), so each CTA's tile
    # costs one integer division instead of the 1-D decode's three (session-16 ncu, d64 s1k causal: the prologue's
    # 2174 warp samples vs FA4's 632). The same tile order. Every main kernel. Opt-in until an H200 A/B
    grouped_grid: bool = False
    # The pre- and postprocess's memory-level parallelism (session-18 ncu, d128 s1k causal: our preprocess at 69% of
    # DRAM bandwidth, 40 registers, 12 CTAs per SM, 1.29 waves; FA4's 78%). With prepost_vec, the preprocess issues
    # every O / dO / LSE load of its four 8-row passes before the first store (rows past the sequence's end read its
    # last row, their results are discarded), one memory round trip per CTA instead of four; with dq_bulk (not m80)
    # a postprocess CTA converts one 64-row fragment block instead of two (a 17 KB staging tile instead of 35 KB:
    # 12 CTAs per SM instead of 6). In every default tuning since the session-18 H200 A/B (bwd/api.py DEFAULT_TUNING)
    prepost_mlp: bool = False
    # A persistent grid (session 19): at most one CTA per SM (the host's ``resident_ctas``), each walking tiles until
    # none is left: its first tile is its block index, every next one a ticket from an int32 counter in the workspace
    # (``atomicAdd`` + grid size; the preprocess zeroes it), so the walk keeps the tile order and the hardware
    # scheduler's balance. The producer warp draws the tickets and hands each tile to the consumers and the dq_writer
    # warp through a one-slot shared-memory mailbox (an mbarrier pair); the Q / dO ring and the K / V stage carry over
    # tiles, so the next tile's first Q / dO loads run under the last query block and the dK / dV epilogue, and no CTA
    # launch, barrier init or register reconfiguration is paid per tile. Dense, not deterministic, the 64-wide main
    # kernel only (not split_d / n96), not with kv_with_q / pdl / kv_prefetch / grouped_grid.
    persistent: bool = False
    # The consumers' Q / dO stage releases (step: one arrive per consumer warp and query block) from the lane
    # ``elect.sync`` picks instead of PipelineTmaAsync's ``thread_idx % 32 == 0`` test, whose thread index ptxas re-reads
    # (S2R) inside the query-block loop: in the session-19 ncu source view (d128 s1k causal, persistent) the test waited
    # on it for 1751 short-scoreboard samples of 37772. The 64-wide main kernel (not split_d / n96)
    elect_release: bool = False
    # dQ accumulator without the preprocess's zeroing (session 20): the dq_writer warp takes a ticket per query block
    # (``atom.add`` on an int32 flag per (batch, head, 64-row block) in the workspace, zeroed by the preprocess); the
    # first arrival bulk-STORES its staged partial instead of reduce-adding it and, once the stores completed, marks the
    # flag done (release); every later arrival waits for that mark (acquire) before its reduce-add. The preprocess then
    # writes no dQ accumulator (at D = D_v its fp32 zeros were as many bytes as the O / dO it reads) and the
    # postprocess writes 0 for a block no key block reached (flag 0). dq_bulk + dq_writer of the 64-wide main kernel
    # (64-, 80- and 128-row blocks: a block's flag is the one of the 64 scratch rows it starts in; not split_d / n96),
    # dense and THD varlen
    dq_first_store: bool = False

    def __post_init__(self):
        if self.prepost_mlp and not self.prepost_vec:
            raise ValueError("SdpaBwdKey: prepost_mlp (mlp) schedules prepost_vec's preprocess passes (set prepost)")
        if self.persistent:
            bad = [f for f in ("varlen", "deterministic", "split_d", "tile_n96", "kv_with_q", "pdl", "kv_prefetch", "grouped_grid") if getattr(self, f)]
            if bad:
                raise ValueError(
                    "SdpaBwdKey: persistent (pers) serves dense, non-deterministic plans of the 64-wide main kernel without "
                    f"kv_with_q, pdl, kv_prefetch or grouped_grid; got {bad}"
                )
        if self.dq_first_store:
            bad = [f for f in ("split_d", "tile_n96") if getattr(self, f)]
            if bad or not (self.dq_bulk and self.dq_writer):
                raise ValueError(
                    "SdpaBwdKey: dq_first_store (dqfs) is a dq_bulk + dq_writer schedule of the 64-wide main kernel (64-, 80- "
                    f"or 128-row blocks; not split_d, n96); got dq_bulk={self.dq_bulk}, dq_writer={self.dq_writer}, {bad}"
                )
        if self.elect_release and (self.split_d or self.tile_n96):
            raise ValueError(f"SdpaBwdKey: elect_release (elr) serves the 64-wide main kernel's step; got split_d={self.split_d}, tile_n96={self.tile_n96}")
        if self.kv_prefetch and (self.varlen or self.split_d):
            raise ValueError(
                "SdpaBwdKey: kv_prefetch (kvpf) serves dense plans of the 64-wide and n96 main kernels (not varlen: a tile's "
                f"K / V rows come from cu_seqlens; not split_d); got varlen={self.varlen}, split_d={self.split_d}"
            )
        if self.kv_with_q and self.split_d:
            raise ValueError(
                "SdpaBwdKey: kv_with_q (kvq) is a prologue of the 64-wide and n96 main kernels (not split_d: its dkv_early "
                "dO-first order and per-warpgroup waits are not covered)"
            )
        if self.tile_n96:
            self._check_n96()
        if self.tile_m128 and (self.head_dim != 64 or self.head_dim_v != 64 or self.deterministic or self.tile_m80 or self.dq_t128 or self.split_d):
            raise ValueError(
                "SdpaBwdKey: tile_m128 (m128) serves D = D_v = 64 only, without deterministic (its turn counters count "
                "64-row query blocks: SEM_ROWS), m80, dqt or split_d; "
                f"got D = {self.head_dim}/{self.head_dim_v}, deterministic={self.deterministic}, tile_m80={self.tile_m80}, "
                f"dq_t128={self.dq_t128}, split_d={self.split_d}"
            )
        if self.tile_m128 and not self.stats_tma:
            raise ValueError(
                "SdpaBwdKey: tile_m128 (m128) takes stats_tma (each column's lse_log2 / dpsum is read where it is used: "
                "from global memory instead of the staged rows, a windowed kernel spills at 128 rows)"
            )
        if self.tile_m128 and self.dq_bulk and not self.dq_writer:
            raise ValueError(
                "SdpaBwdKey: tile_m128 (m128) with dq_bulk takes dq_writer (the consumers issuing the two bulk reduce-adds "
                "per warpgroup themselves spill at 128 rows)"
            )
        if self.dq_rows and not (self.tile_m128 and self.dq_bulk):
            raise ValueError(
                "SdpaBwdKey: dq_rows (dqrows) is a schedule of tile_m128 + dq_bulk (set m128 and dq_bulk: each consumer warpgroup "
                f"adds one whole 64-row fragment-ordered block); got tile_m128={self.tile_m128}, dq_bulk={self.dq_bulk}"
            )
        if self.stats_vec4 and not self.stats_tma:
            raise ValueError("SdpaBwdKey: stats_vec4 (stats4) is a layout of the staged lse_log2 / dpsum rows (set stats_tma)")
        if self.stats_early and not self.stats_vec4:
            raise ValueError("SdpaBwdKey: stats_early (stearly) schedules stats_vec4's lse_log2 / dpsum words (set stats4)")
        if self.ds_kmajor and (self.tile_m80 or self.dq_t128 or self.split_d):
            raise ValueError("SdpaBwdKey: ds_kmajor (dsk) is a dS layout of the 64-wide main kernel's dQ = dS K (not m80, dqt or split_d)")
        if self.pack_once and self.split_d:
            raise ValueError("SdpaBwdKey: pack_once (pack1) is a schedule of the 64-wide main kernel (kernel_sm90.py's step), not of split_d's")
        if self.dq_tma and self.deterministic:
            raise ValueError("SdpaBwdKey: dq_tma has no deterministic mode (the fixed-order dQ reduction uses the atomic path)")
        if self.dq_bulk and (self.deterministic or self.dq_tma):
            raise ValueError("SdpaBwdKey: dq_bulk excludes deterministic and dq_tma (it replaces dq_tma's reduce-add)")
        if self.dq_writer and not (self.dq_bulk or self.dq_tma):
            raise ValueError("SdpaBwdKey: dq_writer is a schedule of dq_bulk's (or dq_tma's) reduce-adds (set dq_bulk or dq_tma too)")
        if self.tile_m80 and (not (self.dq_tma or self.dq_bulk) or self.varlen or self.split_d or self.head_dim != 128 or self.head_dim_v != 128):
            raise ValueError(
                "SdpaBwdKey: tile_m80 (m80) is a dq_tma or dq_bulk schedule for dense D = D_v = 128 (set dq_tma or dq_bulk; no varlen, "
                f"split_d, deterministic); got D = {self.head_dim}/{self.head_dim_v}, dq_tma={self.dq_tma}, dq_bulk={self.dq_bulk}, varlen={self.varlen}"
            )
        if self.dq_t128 and (not self.dq_tma or self.tile_m80 or self.split_d or self.head_dim != 128 or self.head_dim_v != 128):
            raise ValueError(
                "SdpaBwdKey: dq_t128 is a dq_tma staging for D = D_v = 128 at 64 rows (set dq_tma; m80 implies it); "
                f"got D = {self.head_dim}/{self.head_dim_v}, dq_tma={self.dq_tma}, tile_m80={self.tile_m80}"
            )
        if self.dkv_rs and self.head_dim != self.head_dim_v:
            raise ValueError(f"SdpaBwdKey: dkv_rs (dkvrs) keeps dV and dK in one accumulator shape (D = D_v); got {self.head_dim}/{self.head_dim_v}")
        if self.dkv_rs and not self.sdp_wg:
            raise ValueError("SdpaBwdKey: dkv_rs (dkvrs) is a schedule of sdp_wg (set sdpwg: the warpgroup holding P^T runs dV, the one holding dS^T dK)")
        if self.dkv_early and not self.dkv_rs:
            raise ValueError(
                "SdpaBwdKey: dkv_early (dkvearly) is a schedule of dkv_rs (set sdpwg and dkvrs: it moves their RS GEMMs ahead of the dS^T barrier)"
            )
        if self.sdp_wg and not (self.split_d and self.dq_bulk and self.ds_double_buffer):
            raise ValueError(
                "SdpaBwdKey: sdp_wg (sdpwg) is a schedule of split_d + dq_bulk with ds_double_buffer (set all three); "
                f"got split_d={self.split_d}, dq_bulk={self.dq_bulk}, ds_double_buffer={self.ds_double_buffer}"
            )
        if self.split_d and (self.dq_tma or self.stats_tma):
            raise ValueError(
                "SdpaBwdKey: split_d combines with deterministic, ds_double_buffer, prepost_vec, (at D = 256 and 192) dq_bulk, dq_writer, sdp_wg and "
                "(at D = D_v = 256) dkv_rs, dkv_early only (no dq_tma, stats_tma)"
            )
        if self.split_d and self.dq_bulk and self.head_dim not in (192, 256):
            raise ValueError(f"SdpaBwdKey: split_d + dq_bulk (FA4's d256 schedule) serves D = 256 and D = 192; got {self.head_dim}/{self.head_dim_v}")
        if self.split_d and (self.head_dim, self.head_dim_v) not in SPLIT_D_HEAD_DIMS:
            raise ValueError(f"SdpaBwdKey: split_d serves (D, D_v) in {SPLIT_D_HEAD_DIMS}; got {self.head_dim}/{self.head_dim_v}")

    def _check_n96(self):
        """tile_n96 (n96): D = 192 / D_v = 128 with dq_bulk + dq_writer (its dQ path), optionally stats_tma, prepost_vec,
        ds_double_buffer (a second dS buffer only) and pack_once."""
        if (self.head_dim, self.head_dim_v) not in N96_HEAD_DIMS:
            raise ValueError(f"SdpaBwdKey: tile_n96 (n96) serves (D, D_v) in {N96_HEAD_DIMS}; got {self.head_dim}/{self.head_dim_v}")
        if not (self.dq_bulk and self.dq_writer):
            raise ValueError(
                "SdpaBwdKey: tile_n96 (n96) takes dq_bulk + dq_writer (its dQ leaves through the writer warp's bulk reduce-adds; "
                f"no deterministic mode: deterministic plans keep the split-D atomic path); got dq_bulk={self.dq_bulk}, dq_writer={self.dq_writer}"
            )
        others = ("split_d", "sdp_wg", "dkv_rs", "dkv_early", "tile_m80", "tile_m128", "dq_t128", "dq_tma", "ds_kmajor")
        others += ("dq_rows", "stats_vec4", "stats_early")
        bad = [f for f in others if getattr(self, f)]
        if bad:
            raise ValueError(
                f"SdpaBwdKey: tile_n96 (n96) combines with dq_bulk, dq_writer, stats_tma, prepost_vec, ds_double_buffer (a "
                f"second dS buffer; a second P does not fit next to the 224 KiB), pack_once, spin_wait, kv_with_q, pdl and kv_prefetch only; got {bad}"
            )


#: (D, D_v) of the split-D main kernel.
SPLIT_D_HEAD_DIMS = ((128, 128), (192, 128), (256, 256))
#: (D, D_v) of the 96-key main kernel (tile_n96).
N96_HEAD_DIMS = ((192, 128),)

#: Names of the schedule variants accepted by ``SdpaBwdSm90(..., _tuning=...)`` and the key field each one sets.
TUNING_FIELDS = {
    "dq_tma": "dq_tma",
    "stats_tma": "stats_tma",
    "ds2": "ds_double_buffer",
    "prepost": "prepost_vec",
    "split_d": "split_d",
    "dq_bulk": "dq_bulk",
    "dq_writer": "dq_writer",
    "m80": "tile_m80",
    "dqt": "dq_t128",
    "sdpwg": "sdp_wg",
    "dkvrs": "dkv_rs",
    "dkvearly": "dkv_early",
    "m128": "tile_m128",
    "pack1": "pack_once",
    "dqrows": "dq_rows",
    "dsk": "ds_kmajor",
    "stats4": "stats_vec4",
    "stearly": "stats_early",
    "n96": "tile_n96",
    "spin": "spin_wait",
    "kvq": "kv_with_q",
    "pdl": "pdl",
    "kvpf": "kv_prefetch",
    "g3d": "grouped_grid",
    "mlp": "prepost_mlp",
    "pers": "persistent",
    "elr": "elect_release",
    "dqfs": "dq_first_store",
}

#: dq_bulk: query rows per fragment-ordered block of the dQ accumulator (the main kernel's tile_m). Block ``m`` of a
#: (batch, head) occupies the same bytes as rows ``[64 m, 64 m + 64)`` of the row-major layout (so the workspace size,
#: the varlen padding and the preprocess's zeroing are unchanged); inside it, consumer warpgroup ``w`` owns the
#: contiguous ``64 * D / 2`` floats from ``w * 64 * D / 2``, and its thread ``t``'s accumulator register ``p`` sits at
#: ``(p // 4) * 512 + 4 t + p % 4`` (16-byte groups, thread-interleaved: what one 16-byte store per thread and group
#: writes conflict-free, and what one contiguous bulk reduce-add per warpgroup adds).
DQ_BULK_ROWS = 64


def stats_perm_row(row):
    """stats_vec4: where the preprocess stores scratch row ``row`` of lse_log2 / dpsum (a permutation inside each aligned
    16-row group: row 8 j + 2 l + b of the group goes to 4 l + 2 j + b). Works on ints and on DSL integers."""
    return (row // 16) * 16 + ((row % 8) // 2) * 4 + ((row // 8) % 2) * 2 + row % 2


def tile_config(head_dim: int, head_dim_v: int) -> tuple[int, int, int]:
    """(tile_m, tile_n, num_stages) of the main kernel: a CTA owns ``tile_n`` keys (two consumer warpgroups of 64
    rows each) and walks query blocks of ``tile_m`` rows through a ``num_stages`` ring of Q and dO."""
    d = max(head_dim, head_dim_v)
    if d <= 128:
        return 64, 128, 2
    raise ValueError(f"head dim {head_dim}/{head_dim_v} has no backward tile yet")


#: m80 + dq_bulk: query rows per fragment-ordered block of the dQ accumulator (the main kernel's tile_m). Block ``m``
#: of a (batch, head) occupies the floats ``[80 D m, 80 D (m + 1))`` of its scratch; inside it, consumer warpgroup
#: ``w`` owns the contiguous ``80 D / 2`` floats from ``w * 80 D / 2`` (its half of the head dim, dQ^T's M), and its
#: thread ``t``'s dQ^T accumulator register ``p`` sits at ``(p // 4) * 512 + 4 t + p % 4`` (DQ_BULK_ROWS's order, ten
#: 16-byte groups a thread instead of eight).
M80_BULK_ROWS = 80


def m80_bulk(key) -> bool:
    """The key's dQ accumulator is in m80's 80-row fragment-ordered blocks (tile_m80 with dq_bulk)."""
    return bool(getattr(key, "tile_m80", False) and getattr(key, "dq_bulk", False))


def padded_rows(seqlen_q: int, block_rows: int | None = None) -> int:
    """Rows of the per-(batch, head) scratch: S_q rounded up to the pre/postprocess tile (a multiple of tile_m: 64, and
    128 with tile_m128; m80's last block may end past it and is masked). ``block_rows`` (m80 + dq_bulk: 80): S_q first
    rounded up to whole blocks of that many rows, so every fragment-ordered block lies inside its head's scratch."""
    s = max(int(seqlen_q), 0)
    if block_rows:
        s = (s + block_rows - 1) // block_rows * block_rows
    return (s + PREPOST_ROWS - 1) // PREPOST_ROWS * PREPOST_ROWS


def _al(n: int) -> int:
    return (int(n) + _ALIGN - 1) // _ALIGN * _ALIGN


def workspace_layout(
    batch: int,
    heads: int,
    seqlen_q: int,
    head_dim: int,
    has_sinks: bool = False,
    deterministic: bool = False,
    block_rows: int | None = None,
    persistent: bool = False,
    dq_flags: bool = False,
) -> tuple[int, int, int, int, int, int]:
    """Byte offsets of (lse_log2, dpsum, dq_accum, dsink_partials, dq_semaphores) in the workspace and its total size.

    ``lse_log2`` and ``dpsum`` are fp32 (B, H, S_pad); ``dq_accum`` is fp32 (B, H, S_pad, D), row-major;
    ``dsink_partials`` (only with sinks) is fp32 (B, H, S_pad / 32): one partial sink gradient per warp of rows;
    ``dq_semaphores`` (only when deterministic) is int32 (B, H, S_pad / SEM_ROWS): one turn counter per query block; with
    ``persistent`` instead (never both) the same slot holds the persistent grid's int32 tile counter; with ``dq_flags``
    (dq_first_store) the slot holds (after that counter's 128 bytes when persistent) int32 (B, H, S_pad / SEM_ROWS):
    one first-store flag per 64 scratch rows, a main-kernel query block (64, 80 or 128 rows) using the one of the rows
    it starts in (:func:`dq_flag_index`, :func:`dq_flags_offset`). ``block_rows``: see :func:`padded_rows`."""
    s_pad = padded_rows(seqlen_q, block_rows)
    rows = int(batch) * int(heads) * s_pad
    off_lse = 0
    off_dpsum = off_lse + _al(4 * rows)
    off_dq = off_dpsum + _al(4 * rows)
    off_sink = off_dq + _al(4 * rows * int(head_dim))
    off_sem = off_sink + (_al(4 * rows // 32) if has_sinks else 0)
    total = off_sem + (_al(4 * rows // SEM_ROWS) if deterministic else _al(4) if persistent else 0)
    if dq_flags:
        total += _al(4 * rows // SEM_ROWS)
    return off_lse, off_dpsum, off_dq, off_sink, off_sem, total


def dq_flag_index(row):
    """dq_first_store: the flag of the query block starting at scratch row ``row`` (of its (batch, head); varlen: the
    sequence's first scratch row plus the block's): the one of the 64 rows it starts in. Distinct for the blocks of
    one head at every tile_m >= 64, and inside the rows the preprocess zeroes. Works on ints and on DSL integers."""
    return row // SEM_ROWS


def dq_flags_offset(persistent: bool) -> int:
    """dq_first_store: int32 elements from the semaphore slot's start to the first-store flags (after the persistent
    grid's tile counter, one 128-byte unit, when there is one)."""
    return _ALIGN // 4 if persistent else 0
