"""Attention forward surfaces over one implementation: the :class:`SdpaFwdSm90` APIBase adapter and the
:func:`sdpa_fwd` wrapper (which picks the adapter, caches plans and allocates outputs).

Imports neither torch nor cutlass at module level: ``check_support`` on TensorDescs runs anywhere; the kernel
module is imported inside ``compile()``.

Contract (see docs/sdpa.md for the full list):

- dense: q (B, H, S_q, D), k (B, H_kv, S_kv, D), v (B, H_kv, S_kv, D_v), o (B, H, S_q, D_v), lse (B, H, S_q) fp32;
  any strides with a unit-stride head dim and 16-byte multiples elsewhere (BSHD and BHSD both native);
- THD varlen (``cu_seqlens_q`` and ``cu_seqlens_kv`` given): q (T_q, H, D), k/v (T_kv, H_kv, D), o (T_q, H, D_v),
  lse (H, T_q); ``max_seqlen_q`` (a host int) sizes the grid;
- bf16 / fp16; D in {64, 96, 128, 192, 256}, D_v <= D from the same set; H a multiple of H_kv;
- masks: ``is_causal`` (top-left, or bottom-right with ``causal_bottom_right``), ``window_size=(left, right)``
  (-1 = unbounded, same alignment); ``sinks`` (H,) fp32; LSE in natural log (``lse_log2`` for base 2).
- paged KV (``page_table`` int32 (B, max_pages) + page pools (pages, page_size, H_kv, D), per-sequence KV lengths from
  ``cu_seqlens_kv``; page_size a multiple of the key tile, or a multiple of 8 dividing it into at most 16 pages, e.g.
  16 / 32 / 64 at D = 128) and split-KV (``split_kv=True``: fp32 partials in the caller's
  workspace, a combine kernel) are served for dense queries (both still to be verified on a GPU);
- not served (declined with NotImplementedError): other page sizes, THD queries with paged KV or
  split-KV, dropout, arbitrary additive masks, fp8.

Launch: tvm-ffi when apache-tvm-ffi is importable (see ``execute``), validation memoized per tensor metadata.
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc, TupleDict, as_desc
from cudnn.datatypes import data_type

from .._host.fast_guard import cached_guard, guard_over, guard_passes
from .._host.plan_args import DT_NAME as _DT_NAME
from .._host.plan_args import IO_DTYPES as _IO_DTYPES
from .._host.plan_args import check_thd_varlen, init_attention_options
from .._host.plan_args import tma_strides as _tma_strides

_HEAD_DIMS = (64, 96, 128, 192, 256)
#: Pack-GQA (the G query heads of a kv head share one query tile, so K/V are read once per kv head) is chosen
#: automatically for dense plans with S_q at most this (decode, speculative decoding, short chunks).
PACK_GQA_MAX_SEQLEN_Q = 64
#: Defaults of the two decode plan options (benchmarks/sdpa_fwd.py --only=decode): ``page_prefetch=None`` means
#: PAGE_PREFETCH_DEFAULT for paged plans; ``tile_m64=None`` means TILE_M64_DECODE_DEFAULT for pack-GQA tiles whose
#: packed rows (S_q * G) fit 64. tile_m64 is on since the 2026-11-29 H200 run (its GPU tests pass; paged decode B=64,
#: S_kv=8k: 4342 vs 3360 GB/s at page 256, 4292 vs 3339 at page 16; dense decode 4380 vs 4366: sdpa_fwd_decode.md);
#: page_prefetch stays off (3398 vs 3360, within noise).
PAGE_PREFETCH_DEFAULT = False
TILE_M64_DECODE_DEFAULT = True
#: Defaults of the prefill plan options (benchmarks/sdpa_fwd.py --quick; H200 A/B of 2026-11-29 session 3 in
#: docs/benchmarks/sdpa_fwd_quick.md): ``packed_cvt=None`` means PACKED_CVT_DEFAULT (True whenever ``tile_n`` is
#: given): on, d64 s8k 451 vs 351 TFLOP/s, d256 703 vs 673 (the same code at d128). ``persistent=None`` means
#: PERSISTENT_DEFAULT for dense / THD plans: off, it lost on causal d128 (415 vs 510 at s4k) and d256.
PACKED_CVT_DEFAULT = True
PERSISTENT_DEFAULT = False
#: ``varlen_lpt=None`` means VARLEN_LPT_DEFAULT for THD varlen plans (the tile order's L2 groups made of whole heads):
#: off, no gain on the varlen mix (348 vs 350).
VARLEN_LPT_DEFAULT = False
#: ``varlen_compact=None`` means VARLEN_COMPACT_DEFAULT for THD varlen plans (no CTA for tiles past a sequence's end;
#: per-sequence L2 sections of heads, longest-first inside each sequence: fwd/varlen_schedule.py): on since the session-4
#: H200 A/B (docs/benchmarks/sdpa_fwd_quick_ab.md, varlen d128 7 seqs causal: 503.7 vs 490.8 TFLOP/s; with varlen_tma_o 553.6).
VARLEN_COMPACT_DEFAULT = True
#: ``varlen_tma_o=None`` means VARLEN_TMA_O_DEFAULT for THD varlen plans (O stored by one TMA per tile through a ragged
#: view instead of predicated stores from the consumers, as dense plans store it): on since the session-4 A/B (with
#: varlen_compact: 553.6 vs 490.8 TFLOP/s, FA4 562.5; sdpa_fwd_quick_ab.md).
VARLEN_TMA_O_DEFAULT = True
#: ``o_rescale_early=None`` means O_RESCALE_EARLY_DEFAULT (O's softmax rescale under the next S GEMM instead of after the
#: PV GEMM drains; bitwise the same; FA4 does it for d_v > 128) for d_v > 128 when True: on since the session-4 A/B
#: (d256 s8k: 722.3 vs 683.6 TFLOP/s, FA4 729.3; sdpa_fwd_quick_ab.md).
O_RESCALE_EARLY_DEFAULT = True
#: ``tile_m=None`` on a plan with head dims <= 64 that can take it (no paged KV, split-KV, pack-GQA, tile_m64 or
#: persistent) means 192 rows (three consumer warpgroups, key tile 128) when True: on since the session-4 A/B (d64 s8k:
#: 519.6 vs 462.3 TFLOP/s, FA4 541.5; sdpa_fwd_quick_ab.md).
TILE_M192_D64_DEFAULT = True
#: ``mask_r2p=None`` means MASK_R2P_DEFAULT (masked blocks select each score on one bit of a per-row 32-bit keep mask,
#: R2P + FSEL, instead of an ``if`` per score: d = 128 causal masked block 538 SASS instructions per thread instead of 615
#: (1510 with packed_cvt off); bitwise the same). On since the session-6 H200 A/B (docs/benchmarks/sdpa_fwd_subset.md,
#: ours-tail vs ours-tail-r2p): every causal row faster, d128 s1k / s4k / s8k 407.2 / 554.4 / 583.7 -> 417.0 / 560.1 /
#: 599.7 TFLOP/s, d256 s2k / s8k 526.7 / 622.5 -> 561.1 / 638.2, varlen 516.8 -> 527.9. Head dims <= 64 keep the
#: branch: there it lost in session 4 (docs/benchmarks/sdpa_fwd_causal.md: d64 s8k 525.1 vs 542.9, causal 472.0 vs 494.5).
MASK_R2P_DEFAULT = True
#: ``persistent_pairs=None`` means PERSISTENT_PAIRS_DEFAULT on persistent plans (the work unit of the static tile stride
#: is the pair of query blocks M - 1 - j and j of one head: equal causal work per unit).
PERSISTENT_PAIRS_DEFAULT = False
#: ``persistent=None`` and ``persistent_pairs=None`` on a dense causal d = 128 / 128 plan (no window's left edge, not
#: THD varlen, no paged KV, split-KV or pack-GQA) mean persistent + pairs when True. On since the session-6 H200 A/B
#: (sdpa_fwd_subset.md, ours-tail-pairs-r2p vs ours-tail-r2p): d128 causal s1k b16 462.5 vs 417.0 TFLOP/s, s4k 569.7 vs
#: 560.1, s8k 602.0 vs 599.7 (FA4 315.2 / 571.2 / 616.8). Other head dims and masks keep the one-tile grid (not measured).
PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT = True
#: ``exp2_emu=None`` means EXP2_EMU_DEFAULT (0: every exponential on MUFU.EX2; N > 0: one in N per row of the key blocks
#: with no masked score on the FMA pipe, a degree-3 polynomial of relative error 7.5e-5): off until an H200 A/B (d = 64,
#: where the 4 MUFU lanes per SM partition, not the tensor cores, bound a key block).
EXP2_EMU_DEFAULT = 0
#: ``tile_n=None`` on an unmasked, unpaged, unpacked d = 128 / 128 plan takes this key tile when nonzero (0: tile_config's
#: 128): 192 (FA4's sm90 choice), d128 non-causal s4k 626 vs 611, s8k 655 vs 604 (176: 596 / 616).
TILE_N_NONCAUSAL_D128_DEFAULT = 192
#: ``persistent=None`` and ``tile_n=None`` on an unmasked dense d = 128 / 128 plan (not THD varlen, no paged KV, split-KV,
#: pack-GQA or ``kv_stages``) mean the persistent grid with the 128-row key tile when True (TILE_N_NONCAUSAL_D128_DEFAULT
#: then applies to ``persistent=False`` only). With that tile O gets its own shared-memory tile, so Q is released after a
#: tile's last S GEMM and the next tile's Q loads under its last PV GEMM and epilogue. On since the session-21 H200 A/B
#: (docs/benchmarks/sdpa_fwd_s21_tile.md, settled, 2 rounds; ours (192, one tile per CTA) / persistent + 128 / FA4): s1k
#: 560.2 / 587.5 / 550.5 TFLOP/s, s2k 582.1 / 629.8 / 608.3, s4k 636.4 / 675.0 / 638.0, s8k 652.8 / 665.8 / 668.8, s16k
#: 658.9 / 667.4 / 669.9, s32k 663.6 / 675.5 / 666.1. Under ncu (sdpa_s21/call1): 373.9K / 679.7K / 1297.7K cycles at
#: s1k / s2k / s4k against 433.1K / 734.0K / 1325.5K (FA4 412.1K / 705.9K / 1310.5K).
PERSISTENT_NONCAUSAL_D128_DEFAULT = True
#: ``ragged_tail=None`` means RAGGED_TAIL_DEFAULT (the first key block of a warpgroup, the sequence's partial last block or
#: the causal diagonal, run at the width its rows can see: an S GEMM of N = 64 / 128 instead of the whole key tile, its
#: softmax on that slice and its PV GEMM's k-loop stopped there) for prefill plans (not paged, not split-KV: decode plans
#: keep the full-width block; the paged page-16 decode kernel spills 4 bytes with it). On since the session-5 H200 A/B
#: (docs/benchmarks/sdpa_fwd_quick.md, "ours-tail"): d128 s4k 654.9 vs 633.5 TFLOP/s, s1k causal 405.7 vs 389.0, s4k
#: causal 572.7 vs 558.5, s8k causal 595.4 vs 580.5, d256 735.0 vs 721.4, varlen 532.0 vs 522.9; d64 s8k 532.4 vs 539.7
#: (no partial block there: noise). Its 19 GPU tests (bitwise vs the plan without it, and vs fp32) passed there.
RAGGED_TAIL_DEFAULT = True
#: ``l2_group_mb=None`` means L2_GROUP_MB_DEFAULT (host only, not a compile-key field: the same kernel, another launch
#: scalar): with a causal / window mask the tile order runs ``group_heads`` (head, batch) pairs together, m-block slowest
#: and longest-first inside the group, as many pairs as this many MiB of K/V hold (S_kv * (D + D_v) * 2 bytes each). One
#: pair per group (8 MiB at d = 256, S_kv = 8k) makes the longest-first order per head only: the last head's longest tiles
#: start near the end of the grid and run alone (a dispatch model of the d256 s8k b2 causal grid: 90% of the ideal
#: makespan with 1 pair, 99.5% with 2 or 4; d256 s2k b8: 91% with 4, 98% with 16; FA4's LPT scheduler sizes its sections
#: from 50 MB, a power of two heads: the same groups as 32 MiB on every causal row of sdpa_fwd.md). 8: the order measured
#: so far for head dims <= 128 (d128 causal rows of the A/B: s1k 392.2 vs 406.4 with 32, s4k 558.2 vs 556.5).
L2_GROUP_MB_DEFAULT = 8
#: L2_GROUP_MB_DEFAULT for head dims > 128: 32, FA4's section size, since the session-6 H200 A/B (sdpa_fwd_subset.md,
#: ours-l2g32: d256 causal s8k b2 666.5 vs 637.3 TFLOP/s, s2k b8 545.5 vs 539.7; FA4 666.0 / 596.4).
L2_GROUP_MB_WIDE_DEFAULT = 32
#: ``spin_wait=None`` means SPIN_WAIT_DEFAULT (the consumers' full-barrier waits on Q / K / V as a spin on
#: ``mbarrier.try_wait`` with no suspend-time hint: no NANOSLEEP.SYNCS in their SASS, FA4's consumer form; the default
#: alternative is the DSL's wait, whose 10 ms hint ptxas turns into TRYWAIT + NANOSLEEP.SYNCS + PHASECHK). On since the
#: session-9 H200 A/B (docs/benchmarks/sdpa_fwd_spin.md, 3 rounds, same prepared path): +1.4% / +1.6% d128 s4k / s8k,
#: +3.1% / +3.2% causal, +1.6% d64 s4k; bitwise the same outputs. ``spin_wait_producer=None``: SPIN_WAIT_PRODUCER_DEFAULT, the same for the producer
#: warp's empty-barrier waits (the waits that really sleep in the session-8 d128 profile: /work/notes/s8/fwd_ncu.md); off:
#: it measured within noise of the default in the same A/B.
SPIN_WAIT_DEFAULT = True
SPIN_WAIT_PRODUCER_DEFAULT = False
#: ``pinned_desc=None`` means PINNED_DESC_DEFAULT on persistent d = 128 / 128 prefill plans: the key-block loop's S and PV
#: GEMMs issued from descriptors pinned once per tile (SdpaFwdKey.pinned_desc, _device/wgmma_desc.py). Off after the
#: session-22 H200 A/B (docs/sdpa.md "Measured", docs/benchmarks/sdpa_s22/): 2,450 cycles per key block under ncu against
#: the default's 2,487, but ~4% lower settled clock at the 700 W cap, and the harness A/B (sdpa_fwd_s22_pinned.md) had
#: the default ahead on 9 of 12 d128 rows (0.97x-1.02x).
PINNED_DESC_DEFAULT = False
#: ``kv_multicast=None`` means KV_MULTICAST_DEFAULT on persistent dense unmasked plans: CTA pairs (clusters of 2) share
#: every K / V tile through TMA multicast (SdpaFwdKey.kv_multicast), half the K / V bytes out of L2. Off after the
#: session-23 H200 A/B (docs/sdpa.md "Measured"): ~1% higher settled clock at the 700 W cap, 1.4-1.9% more cycles per call,
#: and in the harness behind at s1k (592.7 vs 635.6 TFLOP/s) and within the run's spread elsewhere.
KV_MULTICAST_DEFAULT = False
#: ``wg_epilogue=None`` means WG_EPILOGUE_DEFAULT on persistent dense d = 128 / 128 plans whose O has its own
#: shared-memory tile (each consumer warpgroup stores its 64 rows of O alone, no barrier shared with the other; see
#: SdpaFwdKey.wg_epilogue), and ``q_stages=None`` Q_STAGES_DEFAULT Q buffers on persistent d = 128 / 128 plans where O has
#: its own tile next to two (the next tile's Q loads while this tile runs; SdpaFwdKey.q_stages). Both on since the
#: session-21 H200 A/B of the two together on the persistent d = 128 defaults: under ncu (sdpa_s21/call3) 360.6K / 666.4K /
#: 1285.4K cycles at non-causal s1k / s2k / s4k against 376.6K / 678.7K / 1295.6K, causal s4k 685.3K against 693.9K (FA4
#: 408.2K / 709.2K / 1312.6K / 733.8K); through the harness (sdpa_fwd_s21_epi.md, settled, 2 rounds) non-causal s1k /
#: s2k / s4k 600.4 / 641.6 / 658.4 TFLOP/s against 579.3 / 620.2 / 646.4, s8k-s32k and the causal rows within the runs'
#: spread (-2% to +3%). Other head dims and explicit persistent plans of them take the options only when asked.
WG_EPILOGUE_DEFAULT = True
Q_STAGES_DEFAULT = 2
#: ``fast_guard=None`` means FAST_GUARD_DEFAULT (host only, not a compile-key field): a repeated execute() checks its
#: tensors' metadata with one C++ call (torch's dynamo ``TensorGuards``: dtype, device, dispatch keys, sizes and strides
#: of every tensor argument at once) against the layout that repeated last instead of building and comparing the
#: metadata tuple in Python (Python side of a plain call 2.5 -> 1.5 us on the 2-core CPU dev host, THD 3.5 -> 2.6;
#: benchmarks/sdpa_fwd.py --overhead has the GPU-host rows). One guard per layout, built on its first repeat (~4 us).
#: The memo and the full validation are unchanged behind it. On since the H200 A/B (sdpa_fwd_overhead.md, session 5: a
#: prepared execute 6.7 us vs 8.4 with the memo path alone; THD 9.0 vs 10.2).
FAST_GUARD_DEFAULT = True
#: This family's CuTe DSL runtime floor (mirrors cudnn.sdpa.CUTEDSL_MIN_VERSION; kept here so api.py needs no package import).
_DSL_FLOOR = "4.8.0"


class SdpaFwdSm90(APIBase):
    """Flash attention forward on sm_90a. Build from tensors or TensorDescs plus plan-time flags.

    ``check_support()`` validates the declaration; ``compile()`` builds (or fetches from the kernel cache) the
    kernel; ``execute(q, k, v, o, lse=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None,
    current_stream=None)`` launches it. The kernel is generic in every extent (B, H, S, T), so a plan serves any
    tensors with the planned dtypes, head dims, head ratio, masks and optional operands; execute() checks that
    contract and launches, never converting, allocating or synchronizing.

    Plan-time tuning knobs (compile-key fields, off by default until a GPU A/B shows a win): ``kv_stages`` (K/V ring
    depth); for paged KV, ``page_prefetch`` (the producer warp reads the page table 32 entries per coalesced load and
    broadcasts each block's page by shuffle instead of a dependent load in front of every K/V TMA); ``tile_m64``
    (dense or paged: a 64-row query tile on one consumer warpgroup, halving the padded MMA work of a pack-GQA decode
    tile, where only G rows are real); for prefill, ``tile_n`` (key tile rows, a multiple of 16 in [64, 256] within
    the shared memory budget, e.g. 176 for d = 128 non-causal), ``packed_cvt`` (P converted to 16 bits in paired
    converts: the whole-fragment convert is scalar for key tiles whose fragment length is not a power of two, i.e.
    the default d = 64 / 192 / 256 tiles), ``persistent`` (dense / THD: one CTA per SM walking the tiles, K/V loads of the
    next tile under the epilogue), ``tile_m`` (192 for head dims <= 64: three consumer warpgroups, key tile 128 unless
    ``tile_n`` is given); for THD varlen, ``varlen_lpt`` (head-major L2 groups), ``varlen_compact`` (one CTA per real
    tile, batch found on the device by a warp prefix sum over ``cu_seqlens_q``, per-sequence L2 sections longest-first)
    and ``varlen_tma_o`` (O stored by TMA through a ragged view instead of predicated stores); ``o_rescale_early`` (O's
    online-softmax rescale issued under the next S GEMM instead of after the PV GEMM drains, bitwise the same);
    ``mask_r2p`` (masked key blocks select scores on per-row 32-bit keep masks instead of one branch per score, bitwise
    the same); ``persistent_pairs`` (persistent plans: each CTA takes query blocks M - 1 - j and j of one head back to
    back, so the static stride deals equal causal work to every CTA); ``exp2_emu`` (N > 0: one exponential in N per row of
    the unmasked key blocks computed on the FMA pipe instead of MUFU, 7.5e-5 relative error); ``ragged_tail`` (the first
    key block of each warpgroup, the partial last block or the causal diagonal, at the width its rows see: S GEMM N = 64
    or 128 instead of the key tile, softmax on that slice, PV k-loop stopped there); ``spin_wait`` (the consumer warpgroups'
    Q / K / V full-barrier waits spin on ``mbarrier.try_wait`` without the suspend-time hint, so no NANOSLEEP) and
    ``spin_wait_producer`` (the same for the producer warp's empty-barrier waits).

    Host-side options (no compile-key field, the same kernel): ``fast_guard`` (execute() checks a repeated call's tensor
    metadata with one C++ TensorGuards call instead of building the metadata tuple in Python; see :meth:`execute`);
    ``l2_group_mb`` (causal / window masks: the MiB of K/V one L2 group of the longest-first tile order may hold, which
    sets how many (head, batch) pairs run longest-first together; see L2_GROUP_MB_DEFAULT).
    """

    def __init__(
        self,
        q,
        k,
        v,
        o=None,
        lse=None,
        *,
        is_causal: bool = False,
        causal_bottom_right: bool = False,
        window_size: tuple[int, int] | None = None,
        scale: float | None = None,
        sinks=None,
        cu_seqlens_q=None,
        cu_seqlens_kv=None,
        max_seqlen_q: int | None = None,
        max_seqlen_kv: int | None = None,
        page_table=None,
        lse_log2: bool = False,
        pack_gqa: bool | None = None,
        split_kv: bool = False,
        kv_stages: int | None = None,
        page_prefetch: bool | None = None,
        tile_m64: bool | None = None,
        tile_n: int | None = None,
        packed_cvt: bool | None = None,
        persistent: bool | None = None,
        varlen_lpt: bool | None = None,
        varlen_compact: bool | None = None,
        tile_m: int | None = None,
        varlen_tma_o: bool | None = None,
        o_rescale_early: bool | None = None,
        mask_r2p: bool | None = None,
        persistent_pairs: bool | None = None,
        exp2_emu: int | None = None,
        fast_guard: bool | None = None,
        ragged_tail: bool | None = None,
        l2_group_mb: int | None = None,
        spin_wait: bool | None = None,
        spin_wait_producer: bool | None = None,
        wg_epilogue: bool | None = None,
        q_stages: int | None = None,
        pinned_desc: bool | None = None,
        kv_multicast: bool | None = None,
    ):
        super().__init__()
        self.fast_guard = fast_guard  # None: FAST_GUARD_DEFAULT (host-side execute option, see execute)
        self.l2_group_mb = l2_group_mb  # None: L2_GROUP_MB_DEFAULT (host-side launch scalar, see L2_GROUP_MB_DEFAULT)
        self.tile_n = tile_n  # None: tile_config's
        self.packed_cvt = packed_cvt  # None: PACKED_CVT_DEFAULT, or True with tile_n
        self.persistent = persistent  # None: PERSISTENT_DEFAULT for dense / THD plans (not paged, split or pack-GQA)
        self.varlen_lpt = varlen_lpt  # None: VARLEN_LPT_DEFAULT for THD varlen plans
        self.varlen_compact = varlen_compact  # None: VARLEN_COMPACT_DEFAULT for THD varlen plans
        self.tile_m = tile_m  # None: tile_config's (128); 192: three consumer warpgroups (head dims <= 64)
        self.varlen_tma_o = varlen_tma_o  # None: VARLEN_TMA_O_DEFAULT for THD varlen plans (not persistent)
        self.o_rescale_early = o_rescale_early  # None: O_RESCALE_EARLY_DEFAULT
        self.mask_r2p = mask_r2p  # None: MASK_R2P_DEFAULT
        self.persistent_pairs = persistent_pairs  # None: PERSISTENT_PAIRS_DEFAULT on persistent plans
        self.exp2_emu = exp2_emu  # None: EXP2_EMU_DEFAULT
        self.ragged_tail = ragged_tail  # None: RAGGED_TAIL_DEFAULT
        self.spin_wait = spin_wait  # None: SPIN_WAIT_DEFAULT
        self.spin_wait_producer = spin_wait_producer  # None: SPIN_WAIT_PRODUCER_DEFAULT
        self.wg_epilogue = wg_epilogue  # None: WG_EPILOGUE_DEFAULT on the plans that can take it
        self.q_stages = q_stages  # None: Q_STAGES_DEFAULT on the plans that can take it
        self.pinned_desc = pinned_desc  # None: PINNED_DESC_DEFAULT on the plans that can take it
        self.kv_multicast = kv_multicast  # None: KV_MULTICAST_DEFAULT on the plans that can take it
        self.kv_stages = kv_stages
        self.page_prefetch = page_prefetch  # None: PAGE_PREFETCH_DEFAULT for paged plans
        self.tile_m64 = tile_m64  # None: TILE_M64_DECODE_DEFAULT for pack-GQA decode tiles
        self._tvm_ffi = False
        self.pack_gqa = pack_gqa
        self.split_kv = bool(split_kv)
        self.q, self.k, self.v = as_desc(q, "q"), as_desc(k, "k"), as_desc(v, "v")
        self.o, self.lse = as_desc(o, "o"), as_desc(lse, "lse")
        init_attention_options(
            self, sinks, cu_seqlens_q, cu_seqlens_kv, page_table, is_causal, causal_bottom_right, window_size, scale, max_seqlen_q, max_seqlen_kv, lse_log2
        )
        self.key = None
        self._fast = None  # set by compile() (see _prepare_launch)
        self._guard = None  # fast_guard (see execute)

    # ------------------------------------------------------------------------------------------ plan
    @property
    def varlen(self) -> bool:
        """THD queries and keys (paged KV uses cu_seqlens_kv for per-batch KV lengths only, with dense queries)."""
        return self.cu_seqlens_q is not None or (self.cu_seqlens_kv is not None and self.page_table is None)

    @property
    def paged(self) -> bool:
        return self.page_table is not None

    def check_support(self) -> bool:
        from cudnn.dsl_gate import cutedsl_requirement_error, cutedsl_too_old

        if cutedsl_too_old(_DSL_FLOOR):
            raise NotImplementedError(str(cutedsl_requirement_error("cudnn.sdpa.SdpaFwdSm90", _DSL_FLOOR)))
        q, k, v = self.q, self.k, self.v
        self._value_error_if(q is None or k is None or v is None, "SdpaFwdSm90: q, k and v are required")
        for d in (q, k, v):
            self._check_dtype(d, _IO_DTYPES, "SdpaFwdSm90")
        self._decline_if(
            k.dtype != q.dtype or v.dtype != q.dtype, f"SdpaFwdSm90: q, k, v must share one dtype; got {q.describe()}, {k.describe()}, {v.describe()}"
        )
        page_size = 0
        if self.paged:
            pt, cu = self.page_table, self.cu_seqlens_kv
            self._decline_if(
                self.cu_seqlens_q is not None, f"SdpaFwdSm90: paged KV takes dense (B, H, S_q, D) queries; THD queries are not served with it ({pt.describe()})"
            )
            self._value_error_if(cu is None, "SdpaFwdSm90: paged KV needs cu_seqlens_kv (B + 1 int32; batch b's KV length is cu[b + 1] - cu[b])")
            self._value_error_if(q.rank != 4, f"SdpaFwdSm90: paged KV takes rank-4 (B, H, S_q, D) queries; got {q.describe()}")
            for d in (k, v):
                self._value_error_if(d.rank != 4, f"SdpaFwdSm90: paged KV takes page pools (pages, page_size, H_kv, D); got {d.describe()}")
            self._decline_if(
                pt.dtype != data_type.INT32 or pt.rank != 2 or (pt.shape[1] > 1 and pt.stride[1] != 1),
                f"SdpaFwdSm90: {pt.describe()} must be an int32 (B, max_pages) tensor with unit stride along pages",
            )
            self._decline_if(cu.dtype != data_type.INT32 or cu.rank != 1, f"SdpaFwdSm90: {cu.describe()} must be a 1-D int32 tensor")
            self._decline_if(cu.shape[0] > 1 and cu.stride[0] != 1, f"SdpaFwdSm90: {cu.describe()} must be contiguous")
            b, h, _, dq = q.shape
            _, page_size, hk, dk = k.shape
            _, ps_v, hv, dv = v.shape
            self._value_error_if((ps_v, hv) != (page_size, hk) or v.shape[0] != k.shape[0], f"SdpaFwdSm90: {k.describe()} and {v.describe()} disagree")
            self._value_error_if(
                pt.shape[0] != b or cu.shape[0] != b + 1, f"SdpaFwdSm90: {pt.describe()} / {cu.describe()} must have B = {b} rows / B + 1 entries"
            )
            from .kernel_key import tile_config

            tile_n = tile_config(dq, dv)[1] if dq in _HEAD_DIMS and dv in _HEAD_DIMS else 1
            small_ok = 0 < page_size < tile_n and tile_n % page_size == 0 and page_size % 8 == 0 and tile_n // page_size <= 16
            self._decline_if(
                page_size % tile_n != 0 and not small_ok,
                f"SdpaFwdSm90: {k.describe()}: page_size {page_size} is neither a multiple of the key tile ({tile_n} rows for head dims "
                f"{dq}/{dv}) nor a multiple of 8 dividing it into at most 16 pages",
            )
            for d in (k, v):
                self._decline_if(
                    page_size > 1 and d.shape[0] > 1 and d.stride[0] != page_size * d.stride[1],
                    f"SdpaFwdSm90: {d.describe()}: a page must be page_size consecutive token rows (page stride = page_size * token stride)",
                )
        elif self.varlen:
            check_thd_varlen(self, "SdpaFwdSm90", (q, k, v))
            _, h, dq = q.shape
            _, hk, dk = k.shape
            _, hv, dv = v.shape
            self._value_error_if(hk != hv, f"SdpaFwdSm90: {k.describe()} and {v.describe()} disagree on heads")
        else:
            for d in (q, k, v):
                self._value_error_if(d.rank != 4, f"SdpaFwdSm90: dense attention takes rank-4 (B, H, S, D) tensors; got {d.describe()}")
            b, h, _, dq = q.shape
            bk, hk, sk, dk = k.shape
            bv, hv, sv, dv = v.shape
            self._value_error_if(
                (bk, hk, sk) != (bv, hv, sv) or bk != b, f"SdpaFwdSm90: batch/heads/length disagree: {q.describe()}, {k.describe()}, {v.describe()}"
            )
            self._value_error_if(
                self.max_seqlen_q is not None or self.max_seqlen_kv is not None, "SdpaFwdSm90: max_seqlen_q/kv are for THD varlen (with cu_seqlens)"
            )
            self._value_error_if(self.cu_seqlens_kv is not None, "SdpaFwdSm90: cu_seqlens_kv without cu_seqlens_q is for paged KV (with page_table)")
        self._value_error_if(dk != dq, f"SdpaFwdSm90: q and k head dims differ: {q.describe()}, {k.describe()}")
        self._decline_if(dq not in _HEAD_DIMS, f"SdpaFwdSm90: {q.describe()}: head dim {dq} not served; accepted: {_HEAD_DIMS}")
        self._decline_if(
            dv not in _HEAD_DIMS or dv > dq, f"SdpaFwdSm90: {v.describe()}: value head dim {dv} not served; accepted: {_HEAD_DIMS} and <= q's head dim {dq}"
        )
        self._value_error_if(hk == 0 or h % hk != 0, f"SdpaFwdSm90: query heads {h} must be a multiple of key/value heads {hk} (GQA/MQA)")
        for d in (q, k, v):
            self._check_strides(d)
        if self.o is not None:
            self._decline_if(self.o.dtype != q.dtype, f"SdpaFwdSm90: {self.o.describe()} must have q's dtype {q.dtype.short}")
            want = (*q.shape[:-1], dv)
            self._value_error_if(tuple(self.o.shape) != want, f"SdpaFwdSm90: {self.o.describe()} must have shape {want}")
            self._check_strides(self.o)
        if self.lse is not None:
            self._decline_if(self.lse.dtype != data_type.FLOAT, f"SdpaFwdSm90: {self.lse.describe()} must be float32")
            want = (h, q.shape[0]) if self.varlen else tuple(q.shape[:3])
            self._value_error_if(tuple(self.lse.shape) != want, f"SdpaFwdSm90: {self.lse.describe()} must have shape {want}")
        if self.sinks is not None:
            self._decline_if(
                self.sinks.dtype != data_type.FLOAT or self.sinks.shape != (h,) or (h > 1 and self.sinks.stride[0] != 1),
                f"SdpaFwdSm90: {self.sinks.describe()} must be a contiguous float32 tensor of shape ({h},) (one logit per query head)",
            )
        left, right = self.window_size
        mask_right = self.is_causal or right >= 0
        mask_left = left >= 0
        self._mask_window = (max(left, 0), 0 if self.is_causal else max(right, 0))
        g = h // hk
        can_pack = not self.varlen and g > 1 and 128 % g == 0
        pack = self.pack_gqa if self.pack_gqa is not None else (can_pack and q.shape[2] <= PACK_GQA_MAX_SEQLEN_Q)
        self._decline_if(bool(pack) and not can_pack, f"SdpaFwdSm90: pack_gqa needs dense layouts and a head ratio dividing 128; got {g} ({q.describe()})")
        if self.kv_stages is not None:
            from .kernel_key import SMEM_BYTES, smem_bytes

            self._value_error_if(self.kv_stages not in (2, 3, 4), f"SdpaFwdSm90: kv_stages={self.kv_stages!r} must be 2, 3 or 4 (or None)")
            need = smem_bytes(dq, dv, self.kv_stages)
            self._decline_if(
                need > SMEM_BYTES,
                f"SdpaFwdSm90: kv_stages={self.kv_stages} needs {need} bytes of shared memory for head dims {dq}/{dv}; {SMEM_BYTES} are available",
            )
        self._value_error_if(
            bool(self.page_prefetch) and not self.paged,
            "SdpaFwdSm90: page_prefetch is a paged-KV option (it needs page_table); this plan has contiguous K/V",
        )
        prefetch = self.page_prefetch if self.page_prefetch is not None else (self.paged and PAGE_PREFETCH_DEFAULT)
        m64_ok = not self.varlen and (not pack or 64 % g == 0)
        m64 = self.tile_m64 if self.tile_m64 is not None else (TILE_M64_DECODE_DEFAULT and bool(pack) and m64_ok and q.shape[2] * g <= 64)
        self._decline_if(
            bool(m64) and not m64_ok,
            f"SdpaFwdSm90: tile_m64 serves dense or paged layouts (pack-GQA with a head ratio dividing 64); got {q.describe()}, ratio {g}",
        )
        self._decline_if(
            self.split_kv and self.varlen,
            f"SdpaFwdSm90: split_kv serves dense (B, H, S, D) layouts; THD varlen is not split ({q.describe()})",
        )
        if self.tile_m is not None:
            self._value_error_if(self.tile_m not in (128, 192), f"SdpaFwdSm90: tile_m={self.tile_m!r} must be 128 or 192 (or None; 64 is tile_m64)")
        tile_m192 = self.tile_m == 192 or (
            self.tile_m is None
            and TILE_M192_D64_DEFAULT
            and max(dq, dv) <= 64
            and not (self.paged or self.split_kv or pack or m64 or self.persistent or (self.tile_n is not None and self.tile_n != 128))
        )
        if tile_m192:
            self._decline_if(
                max(dq, dv) > 64 or self.paged or self.split_kv or bool(pack) or bool(m64),
                f"SdpaFwdSm90: tile_m=192 (three consumer warpgroups) serves head dims <= 64 without paged KV, split-KV, pack-GQA "
                f"or tile_m64; got {q.describe()}",
            )
        unmasked_d128 = self.tile_n is None and (dq, dv) == (128, 128) and not (mask_right or mask_left) and not self.paged and not pack and not self.kv_stages
        noncausal_d128_pers = (
            PERSISTENT_NONCAUSAL_D128_DEFAULT
            and unmasked_d128
            and self.persistent is None
            and not self.varlen
            and not self.split_kv
            and not self.persistent_pairs
        )
        one_tile = not self.paged and not self.split_kv and not pack  # one query tile per (m_block, head, batch)
        causal_d128_pairs = (
            PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT
            and self.persistent is None
            and self.persistent_pairs is None
            and one_tile
            and not self.varlen
            and (dq, dv) == (128, 128)
            and self.is_causal
            and not mask_left
        )
        persistent = self.persistent if self.persistent is not None else ((PERSISTENT_DEFAULT or causal_d128_pairs or noncausal_d128_pers) and one_tile)
        # The one-tile grid's unmasked d = 128 key tile; a persistent plan keeps tile_config's 128 (O then has its own tile).
        tile_n_default = TILE_N_NONCAUSAL_D128_DEFAULT if unmasked_d128 and not persistent else 0
        if tile_m192 and self.tile_n is None:  # FA4's d <= 64 sm90 tile is 192 x 128 (192 x 192 would need > 160 registers)
            tile_n_default = 128
        if self.tile_n is not None:
            from .kernel_key import SMEM_BYTES, smem_bytes

            self._value_error_if(
                not isinstance(self.tile_n, int) or self.tile_n % 16 != 0 or not 64 <= self.tile_n <= 256,
                f"SdpaFwdSm90: tile_n={self.tile_n!r} must be a multiple of 16 in [64, 256] (or None)",
            )
            self._decline_if(self.paged, f"SdpaFwdSm90: tile_n is not served with paged KV (the page size is checked against the default tile); {k.describe()}")
            need = smem_bytes(dq, dv, self.kv_stages or 0, self.tile_n, 192 if tile_m192 else 0)
            self._decline_if(
                need > SMEM_BYTES,
                f"SdpaFwdSm90: tile_n={self.tile_n} needs {need} bytes of shared memory for head dims {dq}/{dv}; {SMEM_BYTES} are available",
            )
        self._decline_if(
            bool(persistent) and not one_tile,
            f"SdpaFwdSm90: persistent serves dense and THD varlen plans without paged KV, split-KV or pack-GQA; got {q.describe()}",
        )
        packed_cvt = self.packed_cvt if self.packed_cvt is not None else (PACKED_CVT_DEFAULT or self.tile_n is not None or bool(tile_n_default))
        self._value_error_if(
            bool(self.persistent_pairs) and not persistent,
            "SdpaFwdSm90: persistent_pairs is the work unit of a persistent grid; pass persistent=True with it",
        )
        pairs = self.persistent_pairs if self.persistent_pairs is not None else (bool(persistent) and (PERSISTENT_PAIRS_DEFAULT or causal_d128_pairs))
        exp2_emu = self.exp2_emu if self.exp2_emu is not None else EXP2_EMU_DEFAULT
        self._value_error_if(
            isinstance(exp2_emu, bool) or not isinstance(exp2_emu, int) or not (exp2_emu == 0 or 2 <= exp2_emu <= 64),
            f"SdpaFwdSm90: exp2_emu={exp2_emu!r} must be 0 (every exponential on MUFU) or an int N in [2, 64] (one in N on the FMA pipe)",
        )
        self._value_error_if(
            self.ragged_tail is not None and not isinstance(self.ragged_tail, bool),
            f"SdpaFwdSm90: ragged_tail={self.ragged_tail!r} must be a bool (or None)",
        )
        for opt in ("spin_wait", "spin_wait_producer", "wg_epilogue"):
            self._value_error_if(
                getattr(self, opt) is not None and not isinstance(getattr(self, opt), bool),
                f"SdpaFwdSm90: {opt}={getattr(self, opt)!r} must be a bool (or None)",
            )
        self._value_error_if(
            self.l2_group_mb is not None and (isinstance(self.l2_group_mb, bool) or not isinstance(self.l2_group_mb, int) or not 1 <= self.l2_group_mb <= 1024),
            f"SdpaFwdSm90: l2_group_mb={self.l2_group_mb!r} must be an int in [1, 1024] (MiB of K/V per L2 group of the tile order) or None",
        )
        self._value_error_if(bool(self.varlen_lpt) and not self.varlen, "SdpaFwdSm90: varlen_lpt is a THD varlen option (it needs cu_seqlens_q)")
        varlen_lpt = self.varlen_lpt if self.varlen_lpt is not None else (self.varlen and VARLEN_LPT_DEFAULT)
        self._value_error_if(bool(self.varlen_compact) and not self.varlen, "SdpaFwdSm90: varlen_compact is a THD varlen option (it needs cu_seqlens_q)")
        varlen_compact = (
            self.varlen_compact if self.varlen_compact is not None else (self.varlen and VARLEN_COMPACT_DEFAULT and not persistent and not varlen_lpt)
        )
        self._decline_if(
            bool(varlen_compact) and (bool(persistent) or bool(varlen_lpt)),
            f"SdpaFwdSm90: varlen_compact is its own THD tile order; it is not combined with persistent or varlen_lpt ({q.describe()})",
        )
        self._value_error_if(bool(self.varlen_tma_o) and not self.varlen, "SdpaFwdSm90: varlen_tma_o is a THD varlen option (it needs cu_seqlens_q)")
        varlen_tma_o = self.varlen_tma_o if self.varlen_tma_o is not None else (self.varlen and VARLEN_TMA_O_DEFAULT and not persistent)
        self._decline_if(
            bool(varlen_tma_o) and bool(persistent),
            f"SdpaFwdSm90: varlen_tma_o is served on the one-tile-per-CTA grid, not with persistent ({q.describe()})",
        )
        from .kernel_key import SdpaFwdKey, separate_o

        def o_tile_fits(q_buffers):  # a persistent plan's O in its own shared-memory tile next to q_buffers Q tiles
            probe = SdpaFwdKey(
                "bf16", dq, dv, g, False, False, False, False, False, False, False,
                persistent=True, kv_stages=self.kv_stages or 0, tile_n=self.tile_n or tile_n_default, q_stages=q_buffers,
            )  # fmt: skip
            return bool(persistent) and separate_o(probe)

        self._value_error_if(
            self.q_stages is not None and (isinstance(self.q_stages, bool) or self.q_stages not in (1, 2)),
            f"SdpaFwdSm90: q_stages={self.q_stages!r} must be 1 or 2 (Q buffers of a persistent plan) or None",
        )
        self._decline_if(
            self.q_stages == 2 and not o_tile_fits(2),
            f"SdpaFwdSm90: q_stages=2 serves persistent plans whose O has its own shared-memory tile next to two Q tiles (d = 128 with a "
            f"key tile of at most 128 rows); got {q.describe()}, persistent={bool(persistent)}, tile_n={self.tile_n or tile_n_default or 'default'}",
        )
        measured = (dq, dv) == (128, 128)  # the defaults below were measured on the d = 128 persistent plans only
        q_stages = self.q_stages if self.q_stages is not None else (2 if Q_STAGES_DEFAULT == 2 and measured and o_tile_fits(2) else 1)
        wg_epi_ok = not self.varlen and o_tile_fits(q_stages)
        self._decline_if(
            bool(self.wg_epilogue) and not wg_epi_ok,
            f"SdpaFwdSm90: wg_epilogue serves persistent dense plans whose O has its own shared-memory tile (d <= 128 with a key tile of at most "
            f"128 rows, d = 192 at 112); got {q.describe()}, persistent={bool(persistent)}, tile_n={self.tile_n or tile_n_default or 'default'}",
        )
        wg_epilogue = self.wg_epilogue if self.wg_epilogue is not None else (WG_EPILOGUE_DEFAULT and measured and wg_epi_ok)
        # pinned_desc: 128-byte-swizzled Q / K / V tiles (head dims 64 or 128) on a prefill plan; the key-block loop's GEMMs
        pinned_ok = dq in (64, 128) and dv in (64, 128) and not (pack or m64 or self.split_kv or self.paged)
        self._decline_if(
            bool(self.pinned_desc) and not pinned_ok,
            f"SdpaFwdSm90: pinned_desc serves prefill plans (no paged KV, split-KV, pack-GQA or tile_m64) with head dims 64 or 128 (Q / K / V "
            f"tiles of 128-byte swizzle); got {q.describe()}, {v.describe()}",
        )
        pinned_desc = self.pinned_desc if self.pinned_desc is not None else (PINNED_DESC_DEFAULT and pinned_ok and bool(persistent) and measured)
        # kv_multicast: the two CTAs of a cluster walk the same key blocks, so every tile of the plan sees the same key range
        mcast_ok = bool(persistent) and not (self.varlen or pairs or mask_right or mask_left)
        self._value_error_if(
            self.kv_multicast is not None and not isinstance(self.kv_multicast, bool),
            f"SdpaFwdSm90: kv_multicast={self.kv_multicast!r} must be a bool (or None)",
        )
        self._decline_if(
            bool(self.kv_multicast) and not mcast_ok,
            f"SdpaFwdSm90: kv_multicast serves persistent dense plans without a causal or window mask and without persistent_pairs (the two "
            f"query blocks of a cluster must see the same key blocks); got {q.describe()}, persistent={bool(persistent)}, is_causal={self.is_causal}, "
            f"window_size={self.window_size}, persistent_pairs={bool(pairs)}",
        )
        kv_multicast = self.kv_multicast if self.kv_multicast is not None else (KV_MULTICAST_DEFAULT and mcast_ok and measured)
        self.key = _make_key(
            _DT_NAME[q.dtype],
            dq,
            dv,
            g,
            mask_right,
            mask_left,
            self.causal_bottom_right,
            self.lse is not None,
            self.lse_log2,
            self.sinks is not None,
            self.varlen,
            bool(pack),
            self.split_kv,
            page_size,
            self.kv_stages or 0,
            bool(prefetch),
            bool(m64),
            self.tile_n or tile_n_default,
            bool(packed_cvt),
            bool(persistent),
            bool(varlen_lpt),
            bool(varlen_compact),
            192 if tile_m192 else 0,
            bool(varlen_tma_o),
            bool(self.o_rescale_early if self.o_rescale_early is not None else (O_RESCALE_EARLY_DEFAULT and dv > 128)),
            bool(self.mask_r2p if self.mask_r2p is not None else (MASK_R2P_DEFAULT and max(dq, dv) > 64)),
            bool(pairs),
            int(exp2_emu),
            bool(self.ragged_tail if self.ragged_tail is not None else (RAGGED_TAIL_DEFAULT and not (self.paged or self.split_kv))),
            bool(self.spin_wait if self.spin_wait is not None else SPIN_WAIT_DEFAULT),
            bool(self.spin_wait_producer if self.spin_wait_producer is not None else SPIN_WAIT_PRODUCER_DEFAULT),
            bool(wg_epilogue),
            0 if q_stages == 1 else q_stages,
            bool(pinned_desc),
            bool(kv_multicast),
        )
        self._is_supported = True
        return True

    def _check_strides(self, d: TensorDesc) -> None:
        self._check_unit_stride(d, d.rank - 1, "SdpaFwdSm90")
        align = 8  # 16 bytes of 16-bit elements: the TMA descriptor's stride granularity
        for i, (s, st) in enumerate(zip(d.shape[:-1], d.stride[:-1], strict=False)):
            self._decline_if(
                st < 0 or (s > 1 and st % align != 0),
                f"SdpaFwdSm90: {d.describe()}: stride {st} of dim {i} is not a non-negative multiple of {align} elements (16 bytes), "
                "which the TMA descriptor needs; such layouts are declined, not copied (Rule 2)",
            )

    def compile(self) -> None:
        self._ensure_support_checked()
        if self._compiled_kernel is None:
            self._tvm_ffi = _use_tvm_ffi()
            self._compiled_kernel = _compiled(self.key, self._tvm_ffi)
            self._prepare_launch()

    @property
    def _compiled_kernel(self):
        return self._kernel

    @_compiled_kernel.setter
    def _compiled_kernel(self, fn) -> None:
        # The entry execute() calls: for a tvm-ffi artifact its positional tvm_ffi.Function (see _raw_tvm_ffi_entry).
        self._kernel = fn
        self._entry = _raw_tvm_ffi_entry(fn) if fn is not None and getattr(self, "_tvm_ffi", False) else fn

    def _prepare_launch(self) -> None:
        """Plan-time constants of the launch (torch dtype, default scale, window), so execute() only reads the tensors."""
        t = _torch_bits()
        key = self.key
        self._torch_dtype = t["torch_dt"][key.dtype]
        self._rank = 3 if key.varlen else 4
        self._default_scale_log2 = (1.0 / math.sqrt(key.head_dim) if self.scale is None else float(self.scale)) * _LOG2E
        self._window_args = (max(self._mask_window[0], 0), max(self._mask_window[1], 0))
        self._sm_count = _sm_count(self.q.device)
        self._l2_group_bytes = (self.l2_group_mb if self.l2_group_mb is not None else _default_l2_group_mb(key)) << 20
        self._launch_args: dict = {}  # tensor metadata -> validated scalar launch arguments (see execute)
        stream_fn = _stream_accessor()
        fast_guard = self.fast_guard if self.fast_guard is not None else FAST_GUARD_DEFAULT
        if fast_guard not in (True, False):
            raise ValueError(f"SdpaFwdSm90: fast_guard={self.fast_guard!r} must be True, False or None")
        # fast_guard is active where this torch has TensorGuards (else execute() is the memo path alone: the same results).
        self._fast_guard_active = bool(fast_guard) and _tensor_guards() is not None
        self._guard = None  # fast_guard: the guard of the last repeated call (see _make_guard), replaced as one object
        self._guards: dict = {}  # fast_guard: metadata tuple -> (its guard or None, guards built for it) (_install_guard)
        # What a repeated execute() reads with one attribute load: the memo, the stream accessor, the entry kind, a
        # one-slot list holding the last (metadata, memo entry) pair (a repeated call compares instead of hashing) and
        # whether fast_guard is active.
        self._fast = (self._launch_args, stream_fn, self._tvm_ffi, [(None, None)], self._fast_guard_active)

    def _install_guard(self, meta, q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace, num_splits, page_table, got, dev):
        """fast_guard: the guard for the layout ``meta`` that just repeated (the memo path's cold branch).

        Guards are built once per layout (about 4 us) and kept by metadata, so a layout coming back reinstalls its guard
        after checking it passes on this call's tensors (a guard built under another dispatch state, e.g. inference
        mode, does not): a layout whose guard fails here is rebuilt at most ``_GUARD_BUILDS_MAX`` times, then served by
        the memo path alone. A TensorGuards that cannot be built turns fast_guard off for the plan."""
        memo, stream_fn, tvm, last, _ = self._fast
        guard = cached_guard(
            self._guards,
            meta,
            lambda gs: _guard_hit(gs, q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace, num_splits, page_table),
            lambda: _make_guard(q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace, num_splits, page_table, got, dev, tvm, stream_fn),
            _GUARD_BUILDS_MAX,
            _LAUNCH_MEMO_MAX,
        )
        if guard is False:  # this torch's TensorGuards does not serve: the memo path from now on (no retry per call)
            self._fast = (memo, stream_fn, tvm, last, False)
            self._fast_guard_active = False
            return None
        return guard

    def scratch_workspace_bytes(self) -> int:
        """0, or for a split-KV plan the fp32 partial O and LSE of the declared shapes at the split count execute()
        picks for them (see :meth:`workspace_bytes_for`)."""
        if not self.split_kv:
            return 0
        self._ensure_support_checked()
        b, h, sq, _ = self.q.shape
        if self.paged:  # the longest KV a sequence can have: max_pages * page_size
            return self.workspace_bytes_for(b, h, sq, self.k.shape[2], self.page_table.shape[1] * self.k.shape[1])
        return self.workspace_bytes_for(b, h, sq, self.k.shape[1], self.k.shape[2])

    def workspace_bytes_for(self, batch: int, heads: int, seqlen_q: int, heads_kv: int, seqlen_k: int, num_splits: int | None = None) -> int:
        """Workspace bytes execute() needs for these runtime extents (0 for a plan without split_kv). Paged plans:
        ``seqlen_k`` is ``page_table.shape[1] * page_size``."""
        if not self.split_kv:
            return 0
        self._ensure_support_checked()
        splits = num_splits_for(self.key, batch, heads, heads_kv, seqlen_q, seqlen_k, _sm_count(self.q.device), num_splits)
        from .kernel_key import split_workspace_bytes

        return split_workspace_bytes(splits, batch, heads, seqlen_q, self.key.head_dim_v)[1]

    # ------------------------------------------------------------------------------------------ run
    def execute(
        self,
        q,
        k,
        v,
        o,
        lse=None,
        sinks=None,
        cu_seqlens_q=None,
        cu_seqlens_kv=None,
        max_seqlen_q: int | None = None,
        current_stream=None,
        scale: float | None = None,
        workspace=None,
        num_splits: int | None = None,
        page_table=None,
    ):
        """Launch on ``current_stream`` (None: torch's current stream). Validates; never converts, allocates or syncs.

        Split-KV plans: ``workspace`` (contiguous uint8 on q's device, :meth:`workspace_bytes_for` bytes) holds the
        fp32 partials; ``num_splits`` forces a split count (None: the heuristic of :func:`num_splits_for`).
        Paged plans: ``k`` / ``v`` are page pools, ``page_table`` the int32 (B, max_pages) table and ``cu_seqlens_kv``
        the (B + 1) cumulative KV lengths (only the differences are read, on the device).

        The full validation runs once per distinct tensor metadata (shapes, strides, dtypes, devices, which optional
        operands are given, ``max_seqlen_q``); its result, the kernel's scalar arguments, is memoized on the plan, so a
        repeated call reads the metadata, checks the 16-byte alignment of the four TMA base addresses and launches.
        With ``fast_guard`` a call whose tensors and non-tensor arguments match the layout that repeated last (two calls
        in a row with one metadata tuple install that layout's guard) skips building the metadata tuple: one C++ check of
        every tensor's dtype, device, dispatch keys, sizes and strides (torch's ``TensorGuards``) stands in for it, so the
        memo entry it reuses is the one the full validation produced for exactly this metadata; any other call takes the
        memo path (and clears the guard, so a changing layout pays one failed check, not one per call).
        """
        got = None
        gs = self._guard  # fast_guard: (TensorGuards.check, non-tensor signature or None, memo entry, device, tail, stream accessor)
        if gs is not None:
            try:
                if gs[1] is None and (
                    lse is None and sinks is None and cu_seqlens_q is None and cu_seqlens_kv is None and max_seqlen_q is None and workspace is None
                    and num_splits is None and page_table is None
                ):  # fmt: skip
                    hit = gs[0](q, k, v, o)  # a plain call on a plain guard of four distinct tensors
                else:
                    hit = _guard_hit(gs, q, k, v, o, lse, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, workspace, num_splits, page_table)
            except Exception:  # not tensors: the memo path below (and the full validation) names the problem
                hit = False
            if hit:
                tail = gs[4]  # the prebuilt launch arguments of a plain call on the tvm-ffi entry, else None
                if tail is not None and scale is None and current_stream is None:  # the common call: nothing else to read
                    qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
                    if (qp | kp | vp | op) & 15:
                        _raise_misaligned(qp, kp, vp, op)
                    self._entry(qp, kp, vp, op, *tail, gs[5](gs[3]))
                    return o
                got, dev = gs[2], gs[3]
            else:
                self._guard = None  # another layout: the memo path until a layout repeats (no stale check per call)
        fast = self._fast
        if fast is None:
            raise RuntimeError("SdpaFwdSm90.execute: call compile() first (or use the adapter as a callable)")
        memo, stream_fn, tvm, last, guard_on = fast
        if got is None:  # the memo path: the metadata tuple against the last call's, else the memo, else the full validation
            repeat = False
            try:
                dev = q.get_device()
                meta = (
                    q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), o.shape, o.stride(),
                    q.dtype, k.dtype, v.dtype, o.dtype, dev, k.get_device(), v.get_device(), o.get_device(),
                )  # fmt: skip
                plain = (
                    lse is None and sinks is None and cu_seqlens_q is None and cu_seqlens_kv is None and max_seqlen_q is None and workspace is None
                    and num_splits is None and page_table is None
                )  # fmt: skip
                if not plain:  # a longer key: never equal to a plain call's
                    meta += (
                        None if lse is None else (lse.shape, lse.stride(), lse.dtype, lse.get_device()),
                        None if sinks is None else (sinks.shape, sinks.stride(), sinks.dtype, sinks.get_device()),
                        None if cu_seqlens_q is None else (cu_seqlens_q.shape, cu_seqlens_q.stride(), cu_seqlens_q.dtype, cu_seqlens_q.get_device()),
                        None if cu_seqlens_kv is None else (cu_seqlens_kv.shape, cu_seqlens_kv.stride(), cu_seqlens_kv.dtype, cu_seqlens_kv.get_device()),
                        max_seqlen_q,
                        None if workspace is None else (workspace.shape, workspace.dtype, workspace.get_device()),
                        num_splits,
                        None if page_table is None else (page_table.shape, page_table.stride(), page_table.dtype, page_table.get_device()),
                    )
                pair = last[0]  # (metadata, memo entry) of the previous call, replaced as one object (thread-safe)
                if meta == pair[0]:  # one tuple comparison, no hashing
                    got = pair[1]
                    repeat = True
                else:
                    got = memo.get(meta)
                    if got is not None:
                        last[0] = (meta, got)
            except (AttributeError, TypeError):  # not tensors (or unhashable metadata): the full validation names the problem
                meta, got, plain, dev = None, None, False, None
            if got is None:
                args = _validate(
                    self.key, q, k, v, o, lse, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, workspace, num_splits, self._sm_count, page_table,
                    self._l2_group_bytes,
                )  # fmt: skip
                # memo entry: (scalars, lse_part_offset, the launch arguments after the four data pointers at the plan's scale
                # for a call with no optional operand, else None), or _EMPTY
                got = args if args is _EMPTY else (*args, (None,) * 7 + args[0] + (self._default_scale_log2, *self._window_args) if plain else None)
                if meta is not None:
                    if len(memo) >= _LAUNCH_MEMO_MAX:
                        memo.clear()
                    memo[meta] = got
                    last[0] = (meta, got)
            if repeat and guard_on and got is not _EMPTY:  # this layout repeated: the next call checks its guard first
                self._guard = self._install_guard(
                    meta, q, k, v, o, lse, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, workspace, num_splits, page_table, got, dev
                )
        if got is _EMPTY:
            return o
        qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        if (qp | kp | vp | op) & 15:
            _raise_misaligned(qp, kp, vp, op)
        if current_stream is None:
            handle = stream_fn(q.get_device() if dev is None else dev)
        elif type(current_stream) is int:  # a raw handle: what launch_stream_handle returns for it
            handle = current_stream
        else:
            handle = _launch_stream_handle(current_stream)
        args, lse_part_offset, tail = got
        if tail is not None and scale is None and tvm:  # the common call: prebuilt arguments
            self._entry(qp, kp, vp, op, *tail, handle)
            return o
        scale_log2 = self._default_scale_log2 if scale is None else float(scale) * _LOG2E
        wl, wr = self._window_args
        lp = None if lse is None else lse.data_ptr()
        sp = None if sinks is None else sinks.data_ptr()
        cqp = None if cu_seqlens_q is None else cu_seqlens_q.data_ptr()
        ckp = None if cu_seqlens_kv is None else cu_seqlens_kv.data_ptr()
        opp = lpp = None
        if lse_part_offset is not None:
            opp = workspace.data_ptr()
            if opp % _WS_ALIGN:
                raise ValueError(f"SdpaFwdSm90.execute: workspace address 0x{opp:x} is not {_WS_ALIGN}-byte aligned")
            lpp = opp + lse_part_offset
        ptp = None if page_table is None else page_table.data_ptr()
        if tvm:
            self._entry(qp, kp, vp, op, lp, sp, cqp, ckp, opp, lpp, ptp, *args, scale_log2, wl, wr, handle)
        else:
            _launch_generic(self._entry, self._torch_dtype, qp, kp, vp, op, lp, sp, cqp, ckp, opp, lpp, ptp, args, scale_log2, wl, wr, handle)
        return o


# ---------------------------------------------------------------------------------------------- internals
def _make_key(*args):
    from .kernel_key import SdpaFwdKey

    return SdpaFwdKey(*args)


_LOG2E = math.log2(math.e)
#: Alignment of the split-KV workspace base (cudnn.workspace.WORKSPACE_ALIGNMENT).
_WS_ALIGN = 128
#: Distinct tensor metadata a plan memoizes validated launch arguments for (cleared when full).
_LAUNCH_MEMO_MAX = 64
#: The memoized launch arguments of an empty problem (nothing to launch).
_EMPTY = ()
_TENSOR_GUARDS: list = []
#: fast_guard: guards built for one layout at most (a layout whose guard keeps failing is served by the memo path alone).
_GUARD_BUILDS_MAX = 2


def _tensor_guards():
    """torch's C++ tensor-metadata guard class (``torch._C._dynamo.guards.TensorGuards``, the check torch.compile runs
    on every compiled-frame call), or None where this torch has none (then ``fast_guard`` is inactive)."""
    if not _TENSOR_GUARDS:
        try:
            from torch._C._dynamo.guards import TensorGuards
        except Exception:  # no dynamo in this torch build
            TensorGuards = None
        _TENSOR_GUARDS.append(TensorGuards)
    return _TENSOR_GUARDS[0]


def _make_guard(q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace, num_splits, page_table, got, dev, tvm, stream_fn):
    """The fast_guard entry for a call whose metadata the memo path just matched:
    ``(check, signature, got, dev, tail, stream_fn, aliases, positions)``.

    The call's tensors are q, k, v, o, then the optional ones given, in execute's argument order. ``check`` is
    ``TensorGuards.check`` built from the distinct ones (``positions`` in that list; TensorGuards rejects a repeated
    object) with their sizes and strides as static values: it returns True only for tensors with the same dtype, device
    (type and index, through the dispatch keys), requires_grad, sizes and strides, i.e. the metadata the memo keys on
    (stricter for the workspace, whose strides the memo does not key on). ``aliases`` lists the (first, later) positions
    that were one object (``k is v``): a later call must repeat them, so every position is checked. ``signature`` is
    None for a call with no optional argument and four distinct tensors, else which optional tensors are None plus
    ``max_seqlen_q`` and ``num_splits`` (the memo's non-tensor key parts). ``tail`` is the memo entry's prebuilt launch
    arguments for a plain call on the tvm-ffi entry (``got[2]``), else None. Returns None when TensorGuards cannot be
    built or does not pass on the tensors it was built from (then the memo path serves every call, as without the option)."""
    opt = (lse, sinks, cu_q, cu_k, workspace, page_table)
    parts = guard_over(_tensor_guards(), [x for x in (q, k, v, o, *opt) if x is not None])
    if parts is None:  # no TensorGuards, or one that takes other arguments: no guard, the memo path
        return None
    check, aliases, positions = parts
    plain = all(x is None for x in opt) and max_seqlen_q is None and num_splits is None
    if plain and not aliases:
        sig = None
    else:
        sig = (lse is None, sinks is None, cu_q is None, cu_k is None, workspace is None, page_table is None, max_seqlen_q, num_splits)
    return (check, sig, got, dev, got[2] if plain and tvm else None, stream_fn, aliases, positions)


def _guard_hit(gs, q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace, num_splits, page_table) -> bool:
    """The fast_guard check of any call (execute inlines the plain one; see :func:`_make_guard`): the same non-tensor
    signature, the same aliases, and the distinct tensors pass ``check``."""
    sig = gs[1]
    if sig is None:
        plain = lse is None and sinks is None and cu_q is None and cu_k is None and max_seqlen_q is None and workspace is None
        return plain and num_splits is None and page_table is None and gs[0](q, k, v, o)
    if sig != (lse is None, sinks is None, cu_q is None, cu_k is None, workspace is None, page_table is None, max_seqlen_q, num_splits):
        return False
    return guard_passes(gs[0], gs[6], gs[7], [x for x in (q, k, v, o, lse, sinks, cu_q, cu_k, workspace, page_table) if x is not None])


def _use_tvm_ffi() -> bool:
    """The tvm-ffi launch entry when apache-tvm-ffi is importable; ``CUDNN_SDPA_TVM_FFI=0`` forces the DSL's own entry."""
    import os

    from cudnn._compat import tvm_ffi_available

    return tvm_ffi_available() and os.environ.get("CUDNN_SDPA_TVM_FFI", "1") != "0"


def _raw_tvm_ffi_entry(fn):
    """The positional ``tvm_ffi.Function`` under a DSL tvm-ffi compiled function.

    The DSL's wrapper (``TVMFFIJitCompiledFunction[WithKwargs].__call__``) walks every argument in Python to turn cute
    Pointer objects into integer addresses and maps keyword arguments; execute() passes integer addresses
    (``tensor.data_ptr()``, which the tvm-ffi DataPointer parameter accepts), ints, a float and None positionally, so
    that walk is identity work costing microseconds per launch. A function loaded from the disk cache already is a
    plain ``tvm_ffi.Function``. Anything else is returned unchanged."""
    get = getattr(fn, "__tvm_ffi_object__", None)
    raw = get() if get is not None else None
    if raw is not None:
        return raw
    try:
        import tvm_ffi
    except ImportError:
        return fn
    if isinstance(fn, tvm_ffi.Function) and type(fn) is not tvm_ffi.Function:
        import functools

        return functools.partial(tvm_ffi.Function.__call__, fn)
    return fn


def _compiled(key, tvm_ffi: bool = False):
    from cudnn.kernel_cache import kernel_cache

    def build():
        from .kernel_sm90 import compile_sdpa_fwd

        return compile_sdpa_fwd(key, tvm_ffi=tvm_ffi)

    return kernel_cache.get_or_compile((key, "tvm-ffi") if tvm_ffi else key, build, family="sdpa")


_TORCH = {}


def _torch_bits():
    if not _TORCH:
        import torch

        _TORCH.update(torch=torch, torch_dt={"bf16": torch.bfloat16, "fp16": torch.float16})
    return _TORCH


def _current_stream_handle(device_index: int) -> int:
    from cudnn._torch_stream import current_stream_handle

    return current_stream_handle(device_index)


_CURRENT_STREAM_HANDLE = _current_stream_handle


def _stream_accessor():
    """The current-stream accessor a prepared execute() calls: core's ``current_stream_handle`` itself (no wrapper
    call per launch), or the stub a test stood in for ``_current_stream_handle``."""
    fn = _current_stream_handle
    if fn is _CURRENT_STREAM_HANDLE:
        from cudnn._torch_stream import current_stream_handle as fn
    return fn


_STREAM_HANDLE: list = []


def _launch_stream_handle(stream) -> int:
    """The raw handle of a caller-given stream (not None): core's ``stream_handle`` (an int as is, a torch stream's
    ``cuda_stream``, a CUstream's pointer), which is what ``launch_stream_handle(stream, device)`` returns for any stream
    but None (the device only picks torch's current stream for None); bound once, no import per call."""
    if not _STREAM_HANDLE:
        from cudnn._torch_stream import stream_handle

        _STREAM_HANDLE.append(stream_handle)
    return _STREAM_HANDLE[0](stream)


def _raise_misaligned(qp, kp, vp, op):
    for name, p in (("q", qp), ("k", kp), ("v", vp), ("o", op)):
        if p % 16:
            raise ValueError(f"SdpaFwdSm90.execute: {name} address 0x{p:x} is not 16-byte aligned (TMA)")


def _require_cuda(name: str, x, device) -> None:
    """Every operand is a CUDA tensor on q's device (a raw address handed to the kernel is a contract, Rule 5)."""
    if not x.is_cuda or (device is not None and x.device != device):
        raise ValueError(f"SdpaFwdSm90.execute: {name} must be a CUDA tensor on {device}; got device {x.device}")


def _check_io(key, q, k, v, o) -> None:
    t = _torch_bits()
    want = t["torch_dt"][key.dtype]
    rank = 3 if key.varlen else 4
    for name, x, d in (("q", q, key.head_dim), ("k", k, key.head_dim), ("v", v, key.head_dim_v), ("o", o, key.head_dim_v)):
        if x is None or not hasattr(x, "data_ptr") or x.dtype != want or x.dim() != rank or x.shape[-1] != d or x.stride(-1) != 1:
            got = "None" if x is None else f"shape={tuple(x.shape)} stride={tuple(x.stride())} dtype={x.dtype} device={x.device}"
            raise ValueError(
                f"SdpaFwdSm90.execute: {name} ({got}) does not match the plan: a CUDA {want} rank-{rank} tensor with head dim {d} and unit stride there"
            )
        _require_cuda(name, x, q.device)
        for i in range(rank - 1):
            if x.stride(i) % 8 and x.shape[i] > 1:
                raise ValueError(f"SdpaFwdSm90.execute: {name} stride {x.stride(i)} of dim {i} is not a multiple of 16 bytes (TMA)")
    hq = q.shape[-2] if key.varlen else q.shape[1]
    hk = k.shape[-2] if key.varlen or key.paged else k.shape[1]
    if hk * key.qhead_per_kvhead != hq:
        raise ValueError(f"SdpaFwdSm90.execute: the plan has {key.qhead_per_kvhead} query heads per kv head; got H_q={hq}, H_kv={hk}")
    if tuple(o.shape[:-1]) != tuple(q.shape[:-1]) or tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError(
            f"SdpaFwdSm90.execute: o {tuple(o.shape)} must match q {tuple(q.shape)} and v {tuple(v.shape)} must match k {tuple(k.shape)} outside the head dim"
        )
    if not key.varlen and not key.paged and k.shape[0] != q.shape[0]:
        raise ValueError(f"SdpaFwdSm90.execute: batch of q {q.shape[0]} and k {k.shape[0]} differ")


_GROUP_CACHE: dict = {}


def _default_l2_group_mb(key) -> int:
    """The MiB of K/V per L2 group of the causal tile order when the plan leaves ``l2_group_mb`` unset."""
    return L2_GROUP_MB_WIDE_DEFAULT if max(key.head_dim, key.head_dim_v) > 128 else L2_GROUP_MB_DEFAULT


def _group_heads(key, seqlen_k: int, l2_bytes: int | None = None) -> int:
    """(head, batch) pairs per L2 group of the tile order: 1 (m-block fastest) unless the mask makes tiles uneven, else
    as many as ``l2_bytes`` of K/V hold (the plan's ``l2_group_mb``; None: the default for the key's head dims)."""
    if not (key.mask_right or key.mask_left):
        return 1
    if l2_bytes is None:
        l2_bytes = _default_l2_group_mb(key) << 20
    g = _GROUP_CACHE.get((key.head_dim, key.head_dim_v, seqlen_k, l2_bytes))
    if g is None:
        from .._device.tile_scheduler import SingleTileScheduler

        g = SingleTileScheduler.group_heads_for(seqlen_k, key.head_dim, key.head_dim_v, l2_bytes)
        _GROUP_CACHE[(key.head_dim, key.head_dim_v, seqlen_k, l2_bytes)] = g
    return g


def _validate(key, q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, workspace=None, num_splits=None, sm_count=132, page_table=None, l2_bytes=None) -> tuple:
    """The full execute-time check of the tensors against the plan; returns ``(scalars, lse_part_offset)``: the
    kernel's scalar launch arguments (``kernel_sm90.LAUNCH_SCALARS``) and, for split-KV, the byte offset of the
    partial LSE in the workspace (else None); or ``_EMPTY`` when there is nothing to launch. Reads metadata only."""
    t = _torch_bits()
    torch = t["torch"]
    _check_io(key, q, k, v, o)
    if key.has_lse != (lse is not None):
        raise ValueError(
            f"SdpaFwdSm90.execute: the plan was built {'with' if key.has_lse else 'without'} lse; got lse={'a tensor' if lse is not None else None}"
        )
    if key.has_sinks != (sinks is not None):
        raise ValueError(
            f"SdpaFwdSm90.execute: the plan was built {'with' if key.has_sinks else 'without'} sinks; got sinks={'a tensor' if sinks is not None else None}"
        )
    if key.varlen != (cu_q is not None):
        raise ValueError(f"SdpaFwdSm90.execute: the plan was built {'for' if key.varlen else 'without'} THD varlen; cu_seqlens_q must match")
    if key.paged != (page_table is not None):
        raise ValueError(f"SdpaFwdSm90.execute: the plan was built {'with' if key.paged else 'without'} paged KV; page_table must match")
    seqlen_k_hint = None  # paged: the longest KV a sequence can have (max_pages * page_size), for the heuristics
    if key.paged:
        if cu_k is None:
            raise ValueError("SdpaFwdSm90.execute: paged KV needs cu_seqlens_kv (B + 1 int32; batch b's KV length is cu[b + 1] - cu[b])")
        batch, heads, sq = q.shape[0], q.shape[1], q.shape[2]
        pages, page_size, heads_kv = k.shape[0], k.shape[1], k.shape[2]
        if page_size != key.page_size:
            raise ValueError(f"SdpaFwdSm90.execute: the plan has page_size {key.page_size}; k {tuple(k.shape)} has {page_size}")
        for name, x in (("k", k), ("v", v)):
            if pages > 1 and x.stride(0) != page_size * x.stride(1):
                raise ValueError(f"SdpaFwdSm90.execute: {name} stride {tuple(x.stride())}: a page must be page_size consecutive token rows")
        if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.shape[0] != batch or (page_table.shape[1] > 1 and page_table.stride(1) != 1):
            raise ValueError(f"SdpaFwdSm90.execute: page_table must be an int32 ({batch}, max_pages) tensor with unit stride along pages")
        if cu_k.dtype != torch.int32 or cu_k.dim() != 1 or cu_k.shape[0] != batch + 1 or (batch > 0 and cu_k.stride(0) != 1):
            raise ValueError(f"SdpaFwdSm90.execute: cu_seqlens_kv must be a contiguous int32 ({batch + 1},) tensor")
        _require_cuda("page_table", page_table, q.device)
        _require_cuda("cu_seqlens_kv", cu_k, q.device)
        sk = pages * page_size
        seqlen_k_hint = page_table.shape[1] * page_size
        grid_q = sq
        qs, os_ = (_tma_strides(tuple(x.shape[:3]), (x.stride(0), x.stride(1), x.stride(2))) for x in (q, o))
        ks, vs = (_tma_strides((1, heads_kv, sk), (0, x.stride(2), x.stride(1))) for x in (k, v))
        lse_want = tuple(q.shape[:3])
        lse_s = (lse.stride(0), lse.stride(1), lse.stride(2)) if lse is not None else (0, 0, 0)
        pt_stride = page_table.stride(0) if batch > 1 else max(page_table.shape[1], 1)
    elif key.varlen:
        if cu_k is None or max_seqlen_q is None:
            raise ValueError("SdpaFwdSm90.execute: THD varlen needs cu_seqlens_kv and max_seqlen_q (a host int; the device lengths are never read back)")
        for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_k)):
            if cu.dtype != torch.int32 or cu.dim() != 1 or (cu.shape[0] > 1 and cu.stride(0) != 1):
                raise ValueError(
                    f"SdpaFwdSm90.execute: {name} must be a contiguous 1-D int32 CUDA tensor on {q.device}; got {cu.dtype}, shape {tuple(cu.shape)}"
                )
            _require_cuda(name, cu, q.device)
        if cu_k.shape != cu_q.shape:
            raise ValueError("SdpaFwdSm90.execute: cu_seqlens_q and cu_seqlens_kv must have the same length")
        batch = cu_q.shape[0] - 1
        heads, heads_kv = q.shape[1], k.shape[1]
        sq, sk = q.shape[0], k.shape[0]
        grid_q = int(max_seqlen_q)
        qs, ks, vs, os_ = (_tma_strides((1, x.shape[1], x.shape[0]), (0, x.stride(1), x.stride(0))) for x in (q, k, v, o))
        lse_want = (heads, sq)
        lse_s = (0, lse.stride(0), lse.stride(1)) if lse is not None else (0, 0, 0)
        pt_stride = 0
    else:
        if cu_k is not None:
            raise ValueError("SdpaFwdSm90.execute: the plan is dense; cu_seqlens_kv is for THD varlen plans")
        batch, heads, sq = q.shape[0], q.shape[1], q.shape[2]
        heads_kv, sk = k.shape[1], k.shape[2]
        grid_q = sq
        qs, ks, vs, os_ = (_tma_strides(tuple(x.shape[:3]), (x.stride(0), x.stride(1), x.stride(2))) for x in (q, k, v, o))
        lse_want = tuple(q.shape[:3])
        lse_s = (lse.stride(0), lse.stride(1), lse.stride(2)) if lse is not None else (0, 0, 0)
        pt_stride = 0
    if lse is not None:
        if lse.dtype != torch.float32 or tuple(lse.shape) != lse_want:
            raise ValueError(f"SdpaFwdSm90.execute: lse must be a float32 tensor of shape {lse_want}; got {lse.dtype}, shape {tuple(lse.shape)}")
        _require_cuda("lse", lse, q.device)
    if sinks is not None:
        if sinks.dtype != torch.float32 or tuple(sinks.shape) != (heads,) or (heads > 1 and sinks.stride(0) != 1):
            raise ValueError(f"SdpaFwdSm90.execute: sinks must be a contiguous float32 ({heads},) tensor on {q.device}")
        _require_cuda("sinks", sinks, q.device)
    if grid_q == 0 or batch == 0 or heads == 0:
        return _EMPTY
    sk_hint = sk if seqlen_k_hint is None else seqlen_k_hint
    l2_bytes = _default_l2_group_mb(key) << 20 if l2_bytes is None else l2_bytes
    group = _group_heads(key, sk_hint if not key.varlen else grid_q, l2_bytes)
    if key.varlen_lpt:  # whole heads per L2 group: as many heads as the budget holds of all T_kv tokens, times B sequences
        from .._device.tile_scheduler import SingleTileScheduler

        group = min(heads * batch, SingleTileScheduler.group_heads_for(sk, key.head_dim, key.head_dim_v, l2_bytes) * batch)
    splits, lse_part_offset = 1, None
    if key.persistent:
        splits = sm_count  # the launch's CTA budget (LAUNCH_SCALARS' num_splits slot)
    if key.split_kv:
        from cudnn.workspace import Workspace

        from .kernel_key import split_workspace_bytes

        splits = num_splits_for(key, batch, heads, heads_kv, sq, sk_hint, sm_count, num_splits)
        lse_part_offset, need = split_workspace_bytes(splits, batch, heads, sq, key.head_dim_v)
        Workspace.over(workspace, need, "SdpaFwdSm90 (split-KV)", device=q.device)
    elif workspace is not None or num_splits not in (None, 1):
        raise ValueError("SdpaFwdSm90.execute: workspace / num_splits are for split_kv plans; this plan was built without split_kv")
    return (batch, heads, heads_kv, sq, sk, grid_q, group, splits, pt_stride, *qs, *ks, *vs, *os_, *lse_s), lse_part_offset


def num_splits_for(key, batch, heads, heads_kv, seqlen_q, seqlen_k, sm_count=132, requested=None) -> int:
    """Key splits of a split-KV launch. ``requested`` (an int) is clamped to [1, MAX_SPLITS] and to the key blocks;
    None picks enough splits to give every SM a CTA, with at least two key blocks per split. The count is then
    reduced so no split is empty when every tile sees all key blocks (no causal / window mask)."""
    from .kernel_key import MAX_SPLITS, tile_m_of, tile_n_of

    tile_n = tile_n_of(key)
    tile_m = tile_m_of(key)
    rows = seqlen_q * (key.qhead_per_kvhead if key.pack_gqa else 1)
    ctas = max(1, -(-rows // tile_m) * (heads_kv if key.pack_gqa else heads) * batch)
    n_blocks = max(1, -(-seqlen_k // tile_n))
    if requested is None:
        splits = min(max(1, sm_count // ctas), max(1, n_blocks // 2))
    else:
        splits = int(requested)
    splits = max(1, min(splits, MAX_SPLITS, n_blocks))
    per = -(-n_blocks // splits)
    return -(-n_blocks // per)


_SM_COUNT: dict = {}


def _sm_count(device) -> int:
    """Multiprocessors of ``device`` (a TensorDesc device string or None); 132 (H100 / H200 SXM) without CUDA."""
    got = _SM_COUNT.get(device)
    if got is None:
        got = 132
        try:
            import torch

            if torch.cuda.is_available():
                dev = torch.device(device) if device and str(device).startswith("cuda") else torch.device("cuda", torch.cuda.current_device())
                got = int(torch.cuda.get_device_properties(dev).multi_processor_count)
        except ImportError:
            pass
        _SM_COUNT[device] = got
    return got


_GENERIC = {}


def _launch_generic(fn, torch_dtype, qp, kp, vp, op, lp, sp, cqp, ckp, opp, lpp, ptp, args, scale_log2, wl, wr, handle) -> None:
    """The DSL's own entry (no apache-tvm-ffi): typed pointers and a CUstream object, converted per call (~100+ us)."""
    if not _GENERIC:
        import cuda.bindings.driver as cuda
        import cutlass
        import cutlass.cute as cute
        import torch
        from cutlass.cute.runtime import make_ptr

        _GENERIC.update(
            cuda=cuda, make_ptr=make_ptr, gmem=cute.AddressSpace.gmem, f32=cutlass.Float32, i32=cutlass.Int32,
            dt={torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16},
        )  # fmt: skip
    g = _GENERIC
    mk, gmem, dt = g["make_ptr"], g["gmem"], g["dt"][torch_dtype]

    def p32(dtype, p):
        return None if p is None else mk(dtype, p, gmem, assumed_align=4)

    fn(
        mk(dt, qp, gmem, assumed_align=16),
        mk(dt, kp, gmem, assumed_align=16),
        mk(dt, vp, gmem, assumed_align=16),
        mk(dt, op, gmem, assumed_align=16),
        p32(g["f32"], lp),
        p32(g["f32"], sp),
        p32(g["i32"], cqp),
        p32(g["i32"], ckp),
        None if opp is None else mk(g["f32"], opp, gmem, assumed_align=16),
        None if lpp is None else mk(g["f32"], lpp, gmem, assumed_align=16),
        p32(g["i32"], ptp),
        *args,
        scale_log2,
        wl,
        wr,
        g["cuda"].CUstream(handle),
    )


# ---------------------------------------------------------------------------------------------- wrapper
_PLANS: dict[Any, SdpaFwdSm90] = {}


def _alloc_like_layout(torch, q, shape_last: int, dtype, device):
    """An output with q's shape except the head dim, laid out in q's memory order (BSHD stays BSHD)."""
    shape = (*q.shape[:-1], shape_last)
    order = sorted(range(q.dim() - 1), key=lambda i: -q.stride(i)) + [q.dim() - 1]
    stored = torch.empty([shape[i] for i in order], dtype=dtype, device=device)
    inv = [order.index(i) for i in range(q.dim())]
    return stored.permute(*inv)


def sdpa_fwd(
    q,
    k,
    v,
    *,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_size: tuple[int, int] | None = None,
    scale: float | None = None,
    sinks=None,
    cu_seqlens_q=None,
    cu_seqlens_kv=None,
    max_seqlen_q: int | None = None,
    max_seqlen_kv: int | None = None,
    page_table=None,
    return_lse: bool = False,
    lse_log2: bool = False,
    out=None,
    lse=None,
    stream=None,
    num_splits: int | None = None,
) -> TupleDict:
    """Attention forward. Returns ``TupleDict(o=..., lse=...)`` (``lse`` is None unless ``return_lse`` or ``lse`` given).

    Picks the adapter for the device's architecture (sm_90 only for now), caches one plan per plan-relevant metadata
    (dtypes, device, rank, head dims, head ratio, flags; never extents), and allocates ``o`` (in q's memory order) and
    ``lse`` on the launch stream when the caller passes none. A cached call costs one dict lookup on a small tuple
    before the plan's execute().

    ``num_splits`` (dense only): None or 1 runs one CTA per query tile (the verified path); 0 lets the split-KV
    heuristic decide per call (decode when B * H_kv tiles cannot fill the GPU); N > 1 forces N key splits. Split-KV
    allocates its fp32 partials on the launch stream and merges them with a second kernel (unverified on GPU yet).
    """
    paged = page_table is not None
    varlen = cu_seqlens_q is not None or (cu_seqlens_kv is not None and not paged)
    want_lse = return_lse or lse is not None
    qs, ks = q.shape, k.shape
    if window_size is not None and type(window_size) is not tuple:
        window_size = tuple(window_size)
    split = num_splits is not None and num_splits != 1 and not varlen and len(qs) == 4 and len(ks) == 4
    # (heads_kv, the longest KV): paged pools are (pages, page_size, H_kv, D)
    hk_sk = ((ks[2], page_table.shape[-1] * ks[1]) if paged else (ks[1], ks[2])) if len(ks) == 4 else (0, 0)
    if split and num_splits == 0:  # auto: the heuristic on these extents
        num_splits = _auto_splits(q, v, qs, hk_sk)
        split = num_splits > 1
    pkey = (
        q.dtype,
        k.dtype,
        v.dtype,
        q.get_device(),
        len(qs),
        qs[-1],
        v.shape[-1],
        qs[-2] // (ks[-2] or 1) if varlen else qs[1] // (hk_sk[0] or 1) if len(qs) == 4 else 0,
        is_causal,
        causal_bottom_right,
        window_size,
        want_lse,
        lse_log2,
        sinks is not None,
        varlen,
        (not varlen) and len(qs) == 4 and qs[2] <= PACK_GQA_MAX_SEQLEN_Q,
        split,
        ks[1] if paged else 0,
    )
    plan = _PLANS.get(pkey)
    if plan is None:
        plan = _new_plan(
            q, k, v, is_causal, causal_bottom_right, window_size, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, want_lse, lse_log2, varlen,
            split, page_table,
        )  # fmt: skip
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[pkey] = plan
    if varlen and max_seqlen_q is None:
        raise ValueError("sdpa_fwd: THD varlen needs max_seqlen_q (a host int; device lengths are never read back)")
    if out is None or (want_lse and lse is None):
        out, lse = _alloc_outputs(q, v, out, lse, want_lse, varlen, stream)
    if split or paged:
        workspace = _alloc_workspace(plan, q, hk_sk, num_splits, stream) if split else None
        plan.execute(
            q, k, v, out, lse if want_lse else None, sinks, None, cu_seqlens_kv if paged else None, None, stream, scale, workspace, num_splits if split else None,
            page_table,
        )  # fmt: skip
    else:
        plan.execute(q, k, v, out, lse if want_lse else None, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q if varlen else None, stream, scale)
    return TupleDict(o=out, lse=lse if want_lse else None)


def _auto_splits(q, v, qs, hk_sk) -> int:
    """The split count the heuristic picks for a dense or paged call (1: no split), from metadata only."""
    from .kernel_key import SdpaFwdKey

    hk, sk = hk_sk
    g = qs[1] // (hk or 1)
    pack = g > 1 and 128 % g == 0 and qs[2] <= PACK_GQA_MAX_SEQLEN_Q
    key = SdpaFwdKey("bf16", qs[-1], v.shape[-1], g, False, False, False, False, False, False, False, pack, True)
    return num_splits_for(key, qs[0], qs[1], hk, qs[2], sk, _sm_count(str(q.device)))


def _alloc_workspace(plan, q, hk_sk, num_splits, stream):
    """The split-KV partials' workspace for this call, allocated on the launch stream and q's device."""
    from cudnn._torch_stream import stream_context

    torch = _torch_bits()["torch"]
    nbytes = plan.workspace_bytes_for(q.shape[0], q.shape[1], q.shape[2], hk_sk[0], hk_sk[1], num_splits)
    with stream_context(stream, q.device) if stream is not None else _NULL_CTX:
        return torch.empty(nbytes, dtype=torch.uint8, device=q.device)


#: Plans sdpa_fwd keeps (cleared when full; each holds a reference to a kernel-cache entry, not a compile).
_PLANS_MAX = 256


def _new_plan(
    q, k, v, is_causal, causal_bottom_right, window, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv, want_lse, lse_log2, varlen, split=False,
    page_table=None,
):  # fmt: skip
    torch = _torch_bits()["torch"]
    if q.is_cuda and torch.cuda.get_device_capability(q.device) != (9, 0):
        raise NotImplementedError(
            f"sdpa_fwd: {torch.cuda.get_device_name(q.device)} (sm_{''.join(map(str, torch.cuda.get_device_capability(q.device)))}) is not served; sm_90 only"
        )
    plan = SdpaFwdSm90(
        q,
        k,
        v,
        lse=(TensorDesc.contiguous((q.shape[1], q.shape[0]) if varlen else tuple(q.shape[:3]), "float32", "lse") if want_lse else None),
        is_causal=is_causal,
        causal_bottom_right=causal_bottom_right,
        window_size=window,
        sinks=sinks,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_kv=cu_seqlens_kv,
        max_seqlen_q=max_seqlen_q if varlen else None,
        max_seqlen_kv=max_seqlen_kv if varlen else None,
        lse_log2=lse_log2,
        split_kv=split,
        page_table=page_table,
    )
    plan.check_support()
    plan.compile()
    return plan


_OUT_LAYOUT: dict = {}


def _alloc_outputs(q, v, out, lse, want_lse, varlen, stream):
    """``o`` with q's shape (head dim D_v) in q's memory order, and the fp32 ``lse``, allocated on the launch stream
    (and q's device): the strides per (q shape, q strides, D_v) are computed once."""
    from cudnn._torch_stream import stream_context

    torch = _torch_bits()["torch"]
    with stream_context(stream, q.device) if stream is not None else _NULL_CTX:
        if out is None:
            out = _empty_like_layout(torch, q, v.shape[-1], q.dtype)
        if want_lse and lse is None:
            lse = torch.empty((q.shape[1], q.shape[0]) if varlen else tuple(q.shape[:3]), dtype=torch.float32, device=q.device)
    return out, lse


def _empty_like_layout(torch, x, shape_last: int, dtype):
    """:func:`_alloc_like_layout` on ``x``'s device with its strides computed once per (x's shape, strides, ``shape_last``)
    (one ``torch.empty_strided`` per call)."""
    lk = (x.shape, x.stride(), shape_last)
    layout = _OUT_LAYOUT.get(lk)
    if layout is None:
        if len(_OUT_LAYOUT) >= _PLANS_MAX:
            _OUT_LAYOUT.clear()
        probe = _alloc_like_layout(torch, x, shape_last, dtype, "meta")
        layout = _OUT_LAYOUT[lk] = (tuple(probe.shape), probe.stride())
    return torch.empty_strided(layout[0], layout[1], dtype=dtype, device=x.device)


class _NullCtx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NULL_CTX = _NullCtx()
