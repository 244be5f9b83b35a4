"""Attention backward surfaces over one implementation: the :class:`SdpaBwdSm90` APIBase adapter and the
:func:`sdpa_bwd` wrapper (which picks the adapter, caches plans and allocates outputs and scratch).

Imports neither torch nor cutlass at module level: ``check_support`` on TensorDescs runs anywhere; the kernel
modules are imported inside ``compile()``.

Contract (conventions of the forward, cudnn.sdpa.fwd.api):

- dense: q (B, H, S_q, D), k (B, H_kv, S_kv, D), v (B, H_kv, S_kv, D_v), o and do (B, H, S_q, D_v), lse (B, H, S_q)
  fp32 as the forward saved it (natural log, or base 2 with ``lse_log2``); dq / dk / dv shaped like q / k / v.
  Any strides with a unit-stride head dim and 16-byte multiples elsewhere (BSHD and BHSD both native, no copy);
- bf16 / fp16; D = D_v in {64, 96, 128}, D = D_v = 256 (the split-D kernel, D256_TUNING) and D = 192 with D_v = 128
  (the 96-key kernel, D192_TUNING; the split-D kernel through tuning "split_d"); deterministic plans at both pairs take
  SPLIT_D_DETERMINISTIC_TUNING; H a multiple of H_kv (GQA / MQA: dk, dv reduced over the group);
- masks: ``is_causal`` (top-left, or bottom-right with ``causal_bottom_right``), ``window_size=(left, right)``;
- ``sinks`` (H,) fp32 as in the forward; their gradient ``dsinks`` (H,) fp32 is written by execute (a fixed-order sum);
- scratch: ``scratch_workspace_bytes()`` bytes of caller workspace (fp32 LSE in log2 units, dO.O row sums and the
  fp32 dQ accumulator; a persistent plan's int32 tile counter), carved by ``execute`` (recipe R2), never allocated there;
- three launches per execute: preprocess, main kernel, postprocess (all on ``current_stream``), through their tvm-ffi
  entries when apache-tvm-ffi is importable (the forward's switch, ``CUDNN_SDPA_TVM_FFI=0``: the DSL's generic entry).
- THD varlen (``cu_seqlens_q`` and ``cu_seqlens_kv`` given): q (T_q, H, D), k / v (T_kv, H_kv, D), o / do (T_q, H, D_v),
  lse (H, T_q) (the forward's), int32 cumulative lengths (B + 1); ``max_seqlen_q`` / ``max_seqlen_kv`` (host ints) size
  the grids; token totals are runtime extents (one compile serves every batch, Rule 4);
- not served yet (declined with NotImplementedError): other D != D_v, paged KV.
- ``deterministic=True``: the key blocks that see a query block add into its fp32 dQ accumulator in ascending
  order (int32 turn counters in the workspace), so dq is bitwise reproducible; dk / dv always are (reduced
  inside one CTA, GQA included).
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
from .._host.plan_args import norm_window as _norm_window
from .._host.plan_args import tma_strides as _tma_strides

_HEAD_DIMS = (64, 96, 128)
#: (D, D_v) pairs only the split-D main kernel serves (a plan's tuning must include "split_d").
_SPLIT_D_PAIRS = ((192, 128), (256, 256))
#: (D, D_v) pairs the 96-key main kernel serves (a plan's tuning must include "n96": kernel_n96_sm90.py).
_N96_PAIRS = ((192, 128),)
_DSL_FLOOR = "4.8.0"  # mirrors cudnn.sdpa.CUTEDSL_MIN_VERSION (api.py imports no package module)
_OWNER = "SdpaBwdSm90"
#: Schedule variants (kernel_key.TUNING_FIELDS names) a plan built without ``_tuning`` gets, for D <= 128; the dQ
#: reduce-add variants (dq_tma, dq_bulk, dq_writer) are dropped for deterministic plans. dq_bulk (the dQ partial in
#: MMA-fragment order, one bulk reduce-add per warpgroup) since the H200 A/B of session 4 (docs/benchmarks/sdpa_bwd_quick_ab.md,
#: "ours-bulk"): d128 s8k 554.5 vs 477.0 TFLOP/s (dq_tma), causal 535.0 vs 462.8; test_sdpa_bwd_variants.py checks it.
#: Every default takes prepost + mlp (the pre- / postprocess's memory-level parallelism) since session 18's H200 A/B
#: (docs/benchmarks/sdpa_bwd_s18_mlpab.md, "ours-mlp" vs "ours", 2 rounds): +2-5% on the short causal rows and d64 s1k
#: (d128 s1k causal 341.8 vs 326.4 TFLOP/s, s2k causal 439.9 vs 425.1, d64 s1k 403.5 vs 392.8, causal 299.3 vs 290.7),
#: -1% to +1% at d128 s2k / s4k causal and d64 s2k, -2% on d128 s1k non-causal (470.6 vs 478.9; its m80 postprocess is
#: unchanged and its preprocess measured 81.1 -> 74.9 us); per kernel (sdpa_bwd_s18_mlp_kernels.md) the preprocess
#: 76.5 -> 71.3 us, the postprocess 56.0 -> 51.0 at d128 s1k causal.
DEFAULT_TUNING: tuple[str, ...] = ("dq_bulk", "stats_tma", "ds2", "prepost", "mlp")
#: Variants of a causal plan built without ``_tuning`` (D <= 128): DEFAULT_TUNING plus dq_writer (a producer-warpgroup
#: warp issues the bulk reduce-adds, FA3 / FA4's schedule). Session-4 runs, d128 s8k causal: 555.6 vs 535.0 TFLOP/s
#: (docs/benchmarks/sdpa_bwd_quick_ab.md, "ours-bulkw" vs "ours-bulk"), 600.2 vs 552.9 (a second run), and as the default
#: 555.6 vs 549.6 (sdpa_bwd_quick.md, "ours" vs "ours-bulk"); non-causal it loses (500.0 vs 554.5, 491.7 vs 559.8).
#: Session 20 (issue #6): ``dqfs`` (kernel_key.SdpaBwdKey.dq_first_store: the preprocess zeroes no dQ accumulator, each
#: query block's first dq_writer bulk-stores its partial) here and in D64_TUNING. H200, settled, ours-dqfs / ours
#: (docs/benchmarks/sdpa_bwd_s20_dqfs.md, 2 rounds; sdpa_bwd_s20_dqfs_all.md, 3 rounds): d128 causal s1k 1.06x / 1.07x, s2k 1.02x, s4k 1.02x / 1.02x, s8k 1.02x; d64
#: s1k 1.05x, causal 1.05x, s4k 1.01x, causal 1.01x; per kernel (sdpa_bwd_s20_dqfs_kernels.md) d128 s4k causal 1193.3
#: -> 1158.2 us per call. Left out: the m80 non-causal d128 default (0.97x at s1k, 1.01x at s4k: its key blocks walk
#: the query blocks in step, so most arrivals wait for a first store still in flight).
CAUSAL_TUNING: tuple[str, ...] = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "mlp", "dqfs")
#: The variants a deterministic plan cannot take (another accumulation order per run).
_NONDETERMINISTIC_TUNING = ("dq_tma", "dq_bulk", "dq_writer", "dqfs")
#: Variants that serve D = D_v = 256 for a plan built without ``_tuning`` (they must include "split_d"); None: head
#: dim 256 is declined. Session 5: the split-D kernel with FA4's dQ path from the writer warp, S^T / dP^T on one
#: warpgroup each and dV / dK as register-sourced 64 x 256 WGMMAs ("ours-splitdr", kernel_splitd_bulk_sm90.py): H200,
#: d256 s8k b2, 408.7 TFLOP/s (causal 412.4) vs 311.4 (307.2) for the previous default split_d + ds2 + prepost, FA4
#: 378.1 (367.1), torch-cudnn 356.1 (378.8) (docs/benchmarks/sdpa_bwd_d256.md as of commit a61bf0d, one run); its
#: GPU tests passed there (test_sdpa_bwd_variants.py). Then "dkvearly" (both RS GEMMs from one call site: ptxas no longer
#: serializes the kernel's WGMMAs, C7512): 484.5 / causal 478.5 vs 415.0 / 419.3 for dkvrs in the same run, FA4 380.1 /
#: 363.3, torch-cudnn 356.8 / 384.5 (sdpa_bwd_d256.md, session 5 call 3: 1.27x / 1.24x the better peer). Deterministic
#: plans take SPLIT_D_DETERMINISTIC_TUNING.
D256_TUNING: tuple[str, ...] | None = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "mlp", "sdpwg", "dkvrs", "dkvearly")
#: Variants of a plan built without ``_tuning`` at D = D_v = 64 (non-deterministic; deterministic plans keep
#: CAUSAL_TUNING / DEFAULT_TUNING without the dQ reduce-add variants); None: those defaults. Session 8 (issue #6):
#: FA3 / FA4's d64 tile, 128-row query blocks (``m128``, kernel_key.SdpaBwdKey.tile_m128), with dS^T converted once
#: (``pack1``), dS kept K-major (``dsk``), dQ's 128 rows split over the warpgroups (``dqrows``) and lse_log2 / dpsum read as
#: 16-byte words (``stats4``), causal and not. H200 (docs/benchmarks/sdpa_bwd_instr.md, "ours-m128x", one run): d64 s4k
#: 482.0 vs 438.2 TFLOP/s for the session-7 default, causal 456.5 vs 428.9; s8k 503.2 vs 450.6, causal 491.3 vs 416.2
#: (FA4 502.4 / 466.6 / 519.2 / 488.2); m128 alone: docs/benchmarks/sdpa_bwd_m128.md. GPU tests: test_sdpa_bwd_variants.py.
D64_TUNING: tuple[str, ...] | None = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "mlp", "m128", "pack1", "dsk", "dqrows", "stats4", "dqfs")
#: Variants of a non-causal dense plan at D = D_v = 128 built without ``_tuning`` (non-deterministic, no window, no sinks;
#: varlen and the other masks keep DEFAULT_TUNING); None: DEFAULT_TUNING. Session 9 (issue #6): FA3 / FA4's non-causal
#: d128 tile, 80-row query blocks (``m80``) with dq_bulk's dQ path from the writer warp (``dq_writer``), dS^T converted
#: once (``pack1``: without it ptxas serializes the 80-row kernel's WGMMAs). H200, 3 interleaved rounds
#: (docs/benchmarks/sdpa_bwd_m80b.md, "ours-m80bw"): d128 s4k 550.4 vs 530.6 TFLOP/s, s8k 574.5 vs 564.0 (FA4 584.6 /
#: 601.7); causal it loses (495.9 vs 518.4 at s4k), so causal plans keep CAUSAL_TUNING. GPU tests: test_sdpa_bwd_variants.py.
D128_NONCAUSAL_TUNING: tuple[str, ...] | None = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "mlp", "m80", "pack1")
#: Variants of a plan built without ``_tuning`` at D = 192, D_v = 128 (DeepSeek-style heads; non-deterministic). Session
#: 14 (issue #6): FA4's 64 x 96 tile (``n96``, kernel_n96_sm90.py: 48 keys per warpgroup, dK^T / dV^T with the head dim
#: as M, all-SS GEMMs) with dq_bulk's dQ path from the writer warp, lse_log2 / dpsum with the Q / dO loads, the
#: vectorized pre/postprocess and a second dS buffer. H200 (docs/benchmarks/sdpa_bwd_s14_n96.md, 2 rounds, "ours-n96s",
#: without ds2): s4k 466.8 / causal 427.9, s8k 484.6 / 457.8 TFLOP/s against 385.4 / 371.0 / 394.8 / 393.7 for session
#: 13's default (the split-D kernel: split_d, dq_bulk, dq_writer, ds2, prepost), FA4 466.4 / 416.7 / 485.5 / 445.9; ds2
#: on top ("ours-n96s2", sdpa_bwd_s14_n96b.md and sdpa_bwd_s14_n96c.md): 0.98x-1.03x of n96s per cell, 1.012x on the
#: mean of the 8 cells. None: declined.
D192_TUNING: tuple[str, ...] | None = ("dq_bulk", "dq_writer", "stats_tma", "prepost", "mlp", "n96", "ds2")
#: (D, causal) pairs whose plain plans built without ``_tuning`` (D = D_v, dense, no window, no sinks, non-deterministic)
#: also take ``pers``, the persistent grid (kernel_key.SdpaBwdKey.persistent: one CTA per SM drawing key tiles from a
#: workspace counter, the dK / dV epilogue staged through the dS^T buffers). Session 19 (issue #6), H200, settled, 3
#: interleaved rounds, ours-pers / ours (docs/benchmarks/sdpa_bwd_s19_pers.md, sdpa_bwd_s19_pers_long.md): d64 non-causal
#: 1.04x / 1.05x / 1.03x / 1.03x / 1.02x at s1k-s16k; d128 causal 1.05x / 1.00x (s1k, two runs), 1.04x (s2k), 1.03x (s4k),
#: 0.99x (s8k), 1.02x (s16k). Left out: d64 causal (1.02x at s1k / s2k in two runs, 0.99x / 0.97x / 0.96x at s4k / s8k /
#: s16k: a length rule would need the query length in the key and in sdpa_bwd's plan cache) and d128 non-causal (0.97x
#: at s1k; 1.00x at s4k in session 19's call 1). GPU tests: test_sdpa_bwd_variants.py (pers).
PERSISTENT_SCOPE: frozenset[tuple[int, bool]] = frozenset({(64, False), (128, True)})
#: Variants of a deterministic plan at the split-D pairs (D256_TUNING / D192_TUNING set): the split-D kernel's atomic
#: dQ path in the turn counters' fixed order (its bulk / writer schedules have no deterministic mode).
SPLIT_D_DETERMINISTIC_TUNING: tuple[str, ...] = ("split_d", "ds2", "prepost", "mlp")


class SdpaBwdSm90(APIBase):
    """Flash attention backward on sm_90a. Build from tensors or TensorDescs plus the forward's plan-time flags.

    ``check_support()`` validates the declaration; ``compile()`` builds (or fetches from the kernel cache) the three
    kernels; ``execute(q, k, v, o, do, lse, dq, dk, dv, workspace, current_stream=None, scale=None)`` launches them.
    The kernels are generic in every extent (B, H, S), so a plan serves any tensors with the planned dtypes, head
    dims, head ratio and masks; ``workspace`` must hold ``workspace_bytes_for(plan, q)`` bytes (``scratch_workspace_bytes()``
    for the declared shapes).
    """

    def __init__(
        self,
        q,
        k,
        v,
        o,
        do,
        lse,
        dq=None,
        dk=None,
        dv=None,
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
        deterministic: bool = False,
        _tuning: tuple[str, ...] | None = None,
        _l2_group_dq: bool = False,
        _group_heads: int | None = None,
    ):
        super().__init__()
        self.q, self.k, self.v = as_desc(q, "q"), as_desc(k, "k"), as_desc(v, "v")
        self.o, self.do, self.lse = as_desc(o, "o"), as_desc(do, "do"), as_desc(lse, "lse")
        self.dq, self.dk, self.dv = as_desc(dq, "dq"), as_desc(dk, "dk"), as_desc(dv, "dv")
        init_attention_options(
            self, sinks, cu_seqlens_q, cu_seqlens_kv, page_table, is_causal, causal_bottom_right, window_size, scale, max_seqlen_q, max_seqlen_kv, lse_log2
        )
        self.deterministic = bool(deterministic)
        # Private A/B switch for the main kernel's schedule variants (kernel_key.TUNING_FIELDS names, e.g. ("dq_tma",)):
        # for benchmarks and tests (e.g. ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128"): 128-row query
        # blocks at D = 64); None takes DEFAULT_TUNING / CAUSAL_TUNING / D64_TUNING / D256_TUNING in check_support.
        self._tuning_arg = None if _tuning is None else tuple(_tuning)
        self._tuning = ()
        # Private A/B switch of the main kernel's launch order (a runtime argument, not in the compile key): size the L2
        # groups of (kv head, batch) pairs counting the fp32 dQ accumulator next to Q and dO (fewer heads per group).
        self._l2_group_dq = bool(_l2_group_dq)
        # Private A/B switch, the same launch order fixed: (kv head, batch) pairs per L2 group (1: every key block of one
        # head before the next head, FA4's order; 0: groups sized from the 16 MiB budget, _group_heads, for every plan);
        # None: the library's rule (FULL_GROUP_HEADS for unmasked dense plans, else the budget).
        if _group_heads is not None and (type(_group_heads) is not int or _group_heads < 0):
            raise ValueError(f"{_OWNER}: _group_heads must be None or an int >= 0; got {_group_heads!r}")
        self._group_heads_arg = _group_heads
        self.key = None

    # ------------------------------------------------------------------------------------------ plan
    def check_support(self) -> bool:
        from cudnn.dsl_gate import cutedsl_requirement_error, cutedsl_too_old

        if cutedsl_too_old(_DSL_FLOOR):
            raise NotImplementedError(str(cutedsl_requirement_error("cudnn.sdpa.SdpaBwdSm90", _DSL_FLOOR)))
        q, k, v, o, do, lse = self.q, self.k, self.v, self.o, self.do, self.lse
        self._value_error_if(any(x is None for x in (q, k, v, o, do, lse)), f"{_OWNER}: q, k, v, o, do and lse are all required")
        self._decline_if(self.page_table is not None, f"{_OWNER}: {self.page_table.describe() if self.page_table else ''}: paged KV has no backward")
        varlen = self.varlen
        for d in (q, k, v, o, do):
            self._check_dtype(d, _IO_DTYPES, _OWNER)
        self._decline_if(
            any(x.dtype != q.dtype for x in (k, v, o, do)),
            f"{_OWNER}: q, k, v, o, do must share one dtype; got {q.describe()}, {k.describe()}, {v.describe()}, {o.describe()}, {do.describe()}",
        )
        if varlen:
            check_thd_varlen(self, _OWNER, (q, k, v, o, do))
            sq, h, dq_ = q.shape
            sk, hk, dk_ = k.shape
            self._value_error_if(tuple(v.shape[:2]) != (sk, hk), f"{_OWNER}: tokens/heads disagree: {k.describe()}, {v.describe()}")
            dv_ = v.shape[2]
            io_shape, lse_shape = (sq, h, dv_), (h, sq)
        else:
            for d in (q, k, v, o, do):
                self._value_error_if(d.rank != 4, f"{_OWNER}: dense attention takes rank-4 (B, H, S, D) tensors; got {d.describe()}")
            self._value_error_if(
                self.max_seqlen_q is not None or self.max_seqlen_kv is not None, f"{_OWNER}: max_seqlen_q/kv are for THD varlen (with cu_seqlens)"
            )
            b, h, sq, dq_ = q.shape
            bk, hk, sk, dk_ = k.shape
            self._value_error_if(
                tuple(v.shape[:3]) != (bk, hk, sk) or bk != b, f"{_OWNER}: batch/heads/length disagree: {q.describe()}, {k.describe()}, {v.describe()}"
            )
            dv_ = v.shape[3]
            io_shape, lse_shape = (b, h, sq, dv_), (b, h, sq)
        self._value_error_if(dk_ != dq_, f"{_OWNER}: q and k head dims differ: {q.describe()}, {k.describe()}")
        # D128_NONCAUSAL_TUNING's and PERSISTENT_SCOPE's scope: dense, no window, no sinks
        plain = not varlen and tuple(self.window_size) == (-1, -1) and self.sinks is None
        self._tuning = self._tuning_arg if self._tuning_arg is not None else _default_tuning(dq_, dv_, self.deterministic, self.is_causal, plain)
        served = tuple((d, d) for d in _HEAD_DIMS) + (_SPLIT_D_PAIRS if "split_d" in self._tuning else ())  # the split-D kernel's: a variant
        served += _N96_PAIRS if "n96" in self._tuning else ()  # the 96-key kernel's: a variant too
        self._decline_if(
            (dq_, dv_) not in served,
            f"{_OWNER}: {q.describe()}, {v.describe()}: head dim {dq_} with value head dim {dv_} not served by the backward "
            f"(deterministic={self.deterministic}, tuning={self._tuning}); accepted (D, D_v): {served}",
        )
        self._value_error_if(hk == 0 or h % hk != 0, f"{_OWNER}: query heads {h} must be a multiple of key/value heads {hk} (GQA/MQA)")
        for d in (o, do):
            self._value_error_if(tuple(d.shape) != io_shape, f"{_OWNER}: {d.describe()} must have shape {io_shape}")
        self._decline_if(lse.dtype != data_type.FLOAT, f"{_OWNER}: {lse.describe()} must be float32")
        self._value_error_if(tuple(lse.shape) != lse_shape, f"{_OWNER}: {lse.describe()} must have shape {lse_shape} (the forward's LSE)")
        if self.sinks is not None:
            self._decline_if(
                self.sinks.dtype != data_type.FLOAT or self.sinks.shape != (h,) or (h > 1 and self.sinks.stride[0] != 1),
                f"{_OWNER}: {self.sinks.describe()} must be a contiguous float32 tensor of shape ({h},) (one logit per query head)",
            )
        for grad, like in ((self.dq, q), (self.dk, k), (self.dv, v)):
            if grad is not None:
                self._decline_if(grad.dtype != q.dtype, f"{_OWNER}: {grad.describe()} must have q's dtype {q.dtype.short}")
                self._value_error_if(tuple(grad.shape) != tuple(like.shape), f"{_OWNER}: {grad.describe()} must have shape {like.shape}")
        for d in (q, k, v, o, do, self.dq, self.dk, self.dv):
            if d is not None:
                self._check_strides(d)
        left, right = self.window_size
        self.key = _make_key(
            _DT_NAME[q.dtype],
            dq_,
            dv_,
            h // hk,
            self.is_causal or right >= 0,
            left >= 0,
            self.causal_bottom_right,
            self.lse_log2,
            self.sinks is not None,
            varlen,
            self.deterministic,
            self._tuning,
        )
        self._mask_window = (max(left, 0), 0 if self.is_causal else max(right, 0))
        self._is_supported = True
        return True

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None or self.cu_seqlens_kv is not None

    def _check_strides(self, d: TensorDesc) -> None:
        self._check_unit_stride(d, d.rank - 1, _OWNER)
        for i, (s, st) in enumerate(zip(d.shape[:-1], d.stride[:-1], strict=False)):
            self._decline_if(
                st < 0 or (s > 1 and (st % 8 != 0 or st == 0)),
                f"{_OWNER}: {d.describe()}: stride {st} of dim {i} is not a positive multiple of 8 elements (16 bytes), "
                "which the TMA descriptor needs; such layouts are declined, not copied (Rule 2)",
            )

    def compile(self) -> None:
        from ..fwd.api import _raw_tvm_ffi_entry, _use_tvm_ffi

        self._ensure_support_checked()
        if self._compiled_kernel is None:
            tvm_ffi = _use_tvm_ffi()  # the forward's switch (CUDNN_SDPA_TVM_FFI=0: the DSL's generic entry)
            compiled = _compiled(self.key, tvm_ffi)
            # what execute() calls: the three launches' positional tvm_ffi.Functions, or the DSL's compiled functions
            entries = tuple(_raw_tvm_ffi_entry(f) for f in compiled) if tvm_ffi else compiled
            self._fast = _FastLaunch(self, entries, tvm_ffi)  # what execute() reads (the memo, fast_guard)
            self._entries, self._tvm_ffi, self._compiled_kernel = entries, tvm_ffi, compiled

    def scratch_workspace_bytes(self) -> int:
        """Workspace bytes ``execute`` carves for the declared shapes (see :func:`workspace_bytes_for`)."""
        self._ensure_support_checked()
        n_seq = self.cu_seqlens_q.shape[0] - 1 if self.varlen else None
        return _ws_layout(self.key, self.q.shape, n_seq)[-1]

    # ------------------------------------------------------------------------------------------ run
    def execute(
        self,
        q,
        k,
        v,
        o,
        do,
        lse,
        dq,
        dk,
        dv,
        workspace,
        sinks=None,
        dsinks=None,
        cu_seqlens_q=None,
        cu_seqlens_kv=None,
        max_seqlen_q: int | None = None,
        max_seqlen_kv: int | None = None,
        current_stream=None,
        scale: float | None = None,
    ):
        """Launch on ``current_stream`` (None: torch's current stream). Validates; never converts, allocates or syncs.

        The full validation (:func:`_validate`) runs once per distinct call metadata: shapes, strides, dtypes and devices
        of every tensor, which optional operands are given, ``max_seqlen_q`` / ``max_seqlen_kv``. Its result, the three
        launches' scalar arguments (never an address), is memoized on the plan, so a repeated call reads the metadata,
        checks the alignment of every address it passes (:func:`_fire`) and launches; ``scale`` and the stream are read
        per call. With ``fast_guard`` (``plan.fast_guard`` before compile(); None: FAST_GUARD_DEFAULT) a call repeating
        the layout that repeated last is matched by one C++ TensorGuards check of all its tensors instead of the metadata
        tuple (cudnn.sdpa._host.fast_guard); it reuses the memo entry the full validation produced for that metadata.
        """
        fast = getattr(self, "_fast", None)
        if fast is None:
            raise RuntimeError(f"{_OWNER}.execute: call compile() first (or use the adapter as a callable)")
        if self.scale is not fast.scale:  # the plan's scale was reassigned: entries carry the default scale
            fast.restart(self.scale)
        got = None
        gs = fast.guard  # fast_guard: (check, aliases, positions, non-tensor signature, memo entry) of the last repeated layout
        if gs is not None:
            try:
                hit = gs[3] == (max_seqlen_q, max_seqlen_kv, sinks is None, dsinks is None, cu_seqlens_q is None, cu_seqlens_kv is None) and guard_passes(
                    gs[0], gs[1], gs[2], _call_tensors(q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_seqlens_q, cu_seqlens_kv)
                )
            except Exception:  # not tensors: the memo path (and the full validation) names the problem
                hit = False
            if hit:
                got = gs[4]
            else:
                fast.guard = None  # another layout: the memo path until a layout repeats (no stale check per call)
        if got is None:
            got = fast.entry(self, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
        return _fire(
            fast.entries, fast.tvm, got, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_seqlens_q, cu_seqlens_kv, scale, current_stream,
            fast.stream_fn,
        )  # fmt: skip


def workspace_bytes_for(plan: SdpaBwdSm90, q, cu_seqlens_q=None) -> int:
    """Workspace bytes ``plan.execute`` needs for runtime tensor ``q`` (dense (B, H, S_q, D), or THD (T_q, H, D) with
    ``cu_seqlens_q``): host shapes only, no device read."""
    plan._ensure_support_checked()
    return _ws_layout(plan.key, tuple(q.shape), (cu_seqlens_q.shape[0] - 1) if cu_seqlens_q is not None else None)[-1]


# ---------------------------------------------------------------------------------------------- internals
def _ws_layout(key, q_shape, n_seq):
    """Workspace layout for a plan's key and q's shape; THD varlen pads every sequence to PREPOST_ROWS in one row range."""
    from .kernel_key import M80_BULK_ROWS, PREPOST_ROWS, m80_bulk, workspace_layout

    if key.varlen:
        t_q, h, d = q_shape
        return workspace_layout(1, h, t_q + n_seq * PREPOST_ROWS, d, key.has_sinks, key.deterministic)
    b, h, sq, d = q_shape
    rows = M80_BULK_ROWS if m80_bulk(key) else None  # m80 + dq_bulk (dense): whole 80-row fragment-ordered dQ blocks per (batch, head)
    return workspace_layout(b, h, sq, d, key.has_sinks, key.deterministic, block_rows=rows, persistent=key.persistent, dq_flags=key.dq_first_store)


def _default_tuning(d: int, d_v: int, deterministic: bool, causal: bool = False, plain: bool = False) -> tuple[str, ...]:
    """The variants of a plan built without ``_tuning``: D256_TUNING for D = D_v = 256 and D192_TUNING for D = 192,
    D_v = 128 (SPLIT_D_DETERMINISTIC_TUNING when deterministic), D64_TUNING
    (when set) for D = D_v = 64 (non-deterministic), D128_NONCAUSAL_TUNING (when set) for a non-causal ``plain`` (dense,
    no window, no sinks) non-deterministic plan at D = D_v = 128, else CAUSAL_TUNING (causal) or DEFAULT_TUNING, without
    the dQ reduce-add variants when deterministic; plus ``pers`` for a ``plain`` non-deterministic plan in PERSISTENT_SCOPE."""
    if (d, d_v) in _SPLIT_D_PAIRS:
        tuning = D256_TUNING if d == 256 else D192_TUNING  # deterministic: the split-D kernel's turn order at both pairs
        if tuning is None:
            return ()
        return SPLIT_D_DETERMINISTIC_TUNING if deterministic else tuple(tuning)
    pers = ("pers",) if plain and not deterministic and d == d_v and (d, bool(causal)) in PERSISTENT_SCOPE else ()
    if d == 64 and d_v == 64 and D64_TUNING is not None and not deterministic:
        return tuple(D64_TUNING) + pers
    if d == 128 and d_v == 128 and plain and not causal and D128_NONCAUSAL_TUNING is not None and not deterministic:
        return tuple(D128_NONCAUSAL_TUNING) + pers
    return tuple(t for t in (CAUSAL_TUNING if causal else DEFAULT_TUNING) if not (deterministic and t in _NONDETERMINISTIC_TUNING)) + pers


def _make_key(*args):
    from .kernel_key import TUNING_FIELDS, SdpaBwdKey

    *fields, tuning = args
    unknown = [t for t in tuning if t not in TUNING_FIELDS]
    if unknown:
        raise ValueError(f"{_OWNER}: unknown _tuning option(s) {unknown}; known: {sorted(TUNING_FIELDS)}")
    return SdpaBwdKey(*fields, **{TUNING_FIELDS[t]: True for t in tuning})


def _compiled(key, tvm_ffi: bool = False):
    """(preprocess, main, postprocess) compiled for ``key``; ``tvm_ffi``: their tvm-ffi entries (another cache entry)."""
    from cudnn.kernel_cache import kernel_cache

    def build():
        from .kernel_prepost_sm90 import compile_sdpa_bwd_post, compile_sdpa_bwd_pre
        from .kernel_sm90 import compile_sdpa_bwd_main

        return tuple(f(key, tvm_ffi) for f in (compile_sdpa_bwd_pre, compile_sdpa_bwd_main, compile_sdpa_bwd_post))

    return kernel_cache.get_or_compile((key, "tvm-ffi") if tvm_ffi else key, build, family="sdpa_bwd")


_TORCH = {}


def _torch_bits():
    if not _TORCH:
        import cuda.bindings.driver as cuda
        import cutlass
        import cutlass.cute as cute
        import torch
        from cutlass.cute.runtime import make_ptr

        _TORCH.update(
            torch=torch,
            cuda=cuda,
            make_ptr=make_ptr,
            gmem=cute.AddressSpace.gmem,
            dt={torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16},
            f32=cutlass.Float32,
            i32=cutlass.Int32,
            torch_dt={"bf16": torch.bfloat16, "fp16": torch.float16},
        )
    return _TORCH


def _check_io(key, q, k, v, o, do, lse, dq, dk, dv) -> None:
    t = _torch_bits()
    want = t["torch_dt"][key.dtype]
    rank = 3 if key.varlen else 4
    named = (("q", q, key.head_dim), ("k", k, key.head_dim), ("v", v, key.head_dim_v), ("o", o, key.head_dim_v), ("do", do, key.head_dim_v))
    named += (("dq", dq, key.head_dim), ("dk", dk, key.head_dim), ("dv", dv, key.head_dim_v))
    for name, x, d in named:
        if x is None or x.dtype != want or x.dim() != rank or x.shape[-1] != d or x.stride(-1) != 1 or not _cuda_on(x, q.device):
            got = "None" if x is None else f"shape={tuple(x.shape)} stride={tuple(x.stride())} dtype={x.dtype} device={x.device}"
            raise ValueError(
                f"{_OWNER}.execute: {name} ({got}) does not match the plan: a CUDA {want} rank-{rank} tensor on q's device with head dim {d} "
                "and unit stride there"
            )
        if x.data_ptr() % 16:
            raise ValueError(f"{_OWNER}.execute: {name} address 0x{x.data_ptr():x} is not 16-byte aligned (TMA)")
        for i in range(rank - 1):
            if x.shape[i] > 1 and (x.stride(i) % 8 or x.stride(i) <= 0):
                raise ValueError(f"{_OWNER}.execute: {name} stride {x.stride(i)} of dim {i} is not a positive multiple of 16 bytes (TMA)")
    h, hk = q.shape[-2] if key.varlen else q.shape[1], k.shape[-2] if key.varlen else k.shape[1]
    if hk * key.qhead_per_kvhead != h:
        raise ValueError(f"{_OWNER}.execute: the plan has {key.qhead_per_kvhead} query heads per kv head; got H_q={h}, H_kv={hk}")
    for name, x, like in (("v", v, k), ("o", o, q), ("do", do, q), ("dq", dq, q), ("dk", dk, k), ("dv", dv, k)):
        if tuple(x.shape[:-1]) != tuple(like.shape[:-1]):
            raise ValueError(f"{_OWNER}.execute: {name} {tuple(x.shape)} disagrees with {tuple(like.shape)} outside the head dim")
    if not key.varlen and k.shape[0] != q.shape[0]:
        raise ValueError(f"{_OWNER}.execute: batch of q {q.shape[0]} and k {k.shape[0]} differ")
    want_lse = (h, q.shape[0]) if key.varlen else tuple(q.shape[:3])
    if lse is None or lse.dtype != t["torch"].float32 or tuple(lse.shape) != want_lse or lse.device != q.device:
        got = "None" if lse is None else f"shape={tuple(lse.shape)} dtype={lse.dtype} device={lse.device}"
        raise ValueError(f"{_OWNER}.execute: lse ({got}) must be a float32 {want_lse} tensor on {q.device} (the forward's LSE)")


_GROUP_CACHE: dict = {}
#: (kv head, batch) pairs per L2 group of the main kernel's launch order for unmasked dense plans (no causal, no window,
#: not varlen); None / 0: groups sized from the L2 budget (:func:`_group_heads`), as for masked plans, whose budget
#: groups keep the long (low) key blocks of many heads together at the front (longest first). 1 since session 15: each
#: head's key blocks launch consecutively (FA4's order), so a wave holds every key block of its heads and each head's
#: Q / dO reads and dQ reduce-adds come from CTAs running together (ncu, d128 s1k: budget order 41% DRAM throughput at
#: 67% L2 hits vs FA4's 24% at 80%). H200, two runs (docs/benchmarks/sdpa_bwd_s15_order_*.md, _g1_*.md): non-causal
#: +1-5% on d64 s1k-s16k and d128 s2k-s16k, within noise at d256 / 192 and d128 s1k (-1.4%, -2.2%); causal with this
#: order lost 2-5%, hence masked plans keep the budget groups (except SHORT_D64_CAUSAL_ROWS' short d64 causal plans).
FULL_GROUP_HEADS: int | None = 1
#: Causal dense plans at D = D_v = 64 with at most this many query rows take FULL_GROUP_HEADS' order too (0: none).
#: Session 18, H200, 3 interleaved rounds each (docs/benchmarks/sdpa_bwd_s18_order.md, sdpa_bwd_s18_order_d64.md,
#: "ours-g1" vs "ours"): d64 s1k b16 causal +3.5% and +3.0% (310.9 vs 300.4, 311.1 vs 302.0 TFLOP/s; FA4 315.0 / 317.8);
#: s2k +1% / -0%, s4k -1%, s8k -4%, s16k +0%; d128 s1k causal -2% (so not at d128). A third run with the rule in place
#: (sdpa_bwd_s18_order_rule.md, "ours" vs "ours-gbudget"): d64 s1k causal 299.6 vs 298.5 (1.00x), s2k 1.00x: a small gain
#: at best (+2.2% over the three runs, none negative).
SHORT_D64_CAUSAL_ROWS = 1024


def _full_order(key, seqlen_q: int, window: tuple[int, int]) -> bool:
    """Whether the plan's main kernel launches in FULL_GROUP_HEADS' order (rather than L2-budget groups): unmasked
    dense plans, and causal dense plans (``window``: the plan's mask window, (left, 0) for causal) at D = D_v = 64 with
    at most SHORT_D64_CAUSAL_ROWS query rows."""
    if key.varlen or not FULL_GROUP_HEADS:
        return False
    if not (key.mask_left or key.mask_right):
        return True
    causal = key.mask_right and not key.mask_left and window[1] == 0
    return causal and key.head_dim == key.head_dim_v == 64 and seqlen_q <= SHORT_D64_CAUSAL_ROWS


def _group_heads(key, seqlen_q: int, with_dq: bool = False) -> int:
    """(kv head, batch) pairs per L2 group of the main kernel's tile order: Q and dO of the group's query heads (with
    ``with_dq``, the plan's ``_l2_group_dq``, also their fp32 dQ accumulator rows) within 16 MiB."""
    ck = (key.head_dim, key.head_dim_v, key.qhead_per_kvhead, seqlen_q, bool(with_dq))
    g = _GROUP_CACHE.get(ck)
    if g is None:
        per_head = max(1, seqlen_q) * (key.head_dim + key.head_dim_v) * 2 * key.qhead_per_kvhead
        if with_dq:
            per_head += max(1, seqlen_q) * key.head_dim * 4 * key.qhead_per_kvhead
        g = _GROUP_CACHE[ck] = max(1, min(1 << 16, (16 << 20) // per_head))
    return g


def _launch(
    compiled, key, q, k, v, o, do, lse, dq, dk, dv, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv, workspace, window, scale, stream, l2_group_dq=False,
    tvm_ffi=False,
):  # fmt: skip
    """The three launches on ``compiled`` = (pre, main, post) without a plan's memo: :func:`_derive` (the THD and workspace
    checks, the launch scalars) then :func:`_fire`; tvm-ffi entries (``tvm_ffi``: pointers as int addresses, the stream
    as its raw handle) or the DSL's compiled functions (cute pointers, a CUstream)."""
    from ..fwd.api import _stream_accessor

    entry = _derive(key, q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k, max_seqlen_q, max_seqlen_kv, workspace, window, scale, l2_group_dq)
    return _fire(compiled, tvm_ffi, entry, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, None, stream, _stream_accessor())


def _cuda_on(x, device) -> bool:
    """``x`` is a CUDA tensor on ``device`` (an address handed to the kernels is a contract, Rule 5)."""
    return x.is_cuda and x.device == device


def _validate(plan, scale, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv):
    """The full execute-time check of a call against ``plan`` and its launch entry (:func:`_derive`, the default scale
    ``scale``): raises what execute() raised before the memo. Reads metadata and this call's addresses, nothing else."""
    key = plan.key
    if key.has_sinks != (sinks is not None) or key.has_sinks != (dsinks is not None):
        raise ValueError(
            f"{_OWNER}.execute: the plan was built {'with' if key.has_sinks else 'without'} sinks; sinks and dsinks must both be "
            f"{'given' if key.has_sinks else 'None'}"
        )
    if key.varlen != (cu_q is not None) or key.varlen != (cu_k is not None):
        raise ValueError(f"{_OWNER}.execute: the plan was built {'for' if key.varlen else 'without'} THD varlen; cu_seqlens_q/kv must match")
    _check_io(key, q, k, v, o, do, lse, dq, dk, dv)
    if sinks is not None:
        h = q.shape[1]
        for name, x in (("sinks", sinks), ("dsinks", dsinks)):
            if x.dtype != _torch_bits()["torch"].float32 or tuple(x.shape) != (h,) or x.device != q.device or (h > 1 and x.stride(0) != 1):
                raise ValueError(f"{_OWNER}.execute: {name} must be a contiguous float32 ({h},) tensor on {q.device}")
    return _derive(
        key, q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k, max_seqlen_q, max_seqlen_kv, workspace, plan._mask_window, scale, plan._l2_group_dq,
        plan._group_heads_arg,
    )  # fmt: skip


def _derive(key, q, k, v, o, do, lse, dq, dk, dv, cu_q, cu_k, max_seqlen_q, max_seqlen_kv, workspace, window, scale, l2_group_dq, group_heads=None):
    """The THD operand and workspace checks of a call and its launch entry, from metadata only:
    ``(offsets, total, pre, main, post, device)``: the workspace byte offsets of (lse_log2, dpsum, dq_accum, the sink
    partials or None, the semaphore slot or None, dq_first_store's flags or None), the workspace bytes, each launch's
    arguments after its pointers and before the stream (None: that launch has no work; all None: nothing to launch), with ``scale`` (None: 1 / sqrt(D))
    as the default scale, and q's device index; ``group_heads`` fixes the main kernel's L2 groups (None: the library's rule, FULL_GROUP_HEADS where
    :func:`_full_order` says so; 0: from the L2 budget)."""
    from cudnn.workspace import Workspace

    from .kernel_key import M80_BULK_ROWS, PREPOST_ROWS, dq_flags_offset, m80_bulk, padded_rows

    if key.varlen:
        for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_k)):
            if cu.dtype != _torch_bits()["torch"].int32 or cu.dim() != 1 or not _cuda_on(cu, q.device) or (cu.shape[0] > 1 and cu.stride(0) != 1):
                raise ValueError(f"{_OWNER}.execute: {name} must be a contiguous 1-D int32 CUDA tensor on {q.device}; got {cu.dtype} on {cu.device}")
        if cu_k.shape != cu_q.shape:
            raise ValueError(f"{_OWNER}.execute: cu_seqlens_q and cu_seqlens_kv must have the same length")
        if max_seqlen_q is None or max_seqlen_kv is None:
            raise ValueError(f"{_OWNER}.execute: THD varlen needs max_seqlen_q and max_seqlen_kv (host ints; device lengths are never read back)")
        b, h, hk = cu_q.shape[0] - 1, q.shape[1], k.shape[1]
        sq, sk = q.shape[0], k.shape[0]  # token totals: runtime extents, never compile keys (Rule 4)
        grid_q, grid_k = int(max_seqlen_q), int(max_seqlen_kv)
        s_pad = padded_rows(sq + b * PREPOST_ROWS)
        qs, ks, vs, os_, dos, dqs, dks, dvs = (_tma_strides((1, x.shape[1], x.shape[0]), (0, x.stride(1), x.stride(0))) for x in (q, k, v, o, do, dq, dk, dv))
        lse_s = (0, lse.stride(0), lse.stride(1))
        n_seq = b
    else:
        if cu_q is not None or cu_k is not None or max_seqlen_q is not None or max_seqlen_kv is not None:
            raise ValueError(f"{_OWNER}.execute: cu_seqlens / max_seqlen are for THD varlen plans")
        b, h, sq, _ = q.shape
        hk, sk = k.shape[1], k.shape[2]
        grid_q, grid_k = sq, sk
        s_pad = padded_rows(sq, M80_BULK_ROWS if m80_bulk(key) else None)
        qs, ks, vs, os_, dos, dqs, dks, dvs = (_tma_strides(tuple(x.shape[:3]), (x.stride(0), x.stride(1), x.stride(2))) for x in (q, k, v, o, do, dq, dk, dv))
        lse_s = (lse.stride(0), lse.stride(1), lse.stride(2))
        n_seq = None
    off_lse, off_dpsum, off_dq, off_sink, off_sem, total = _ws_layout(key, tuple(q.shape), n_seq)
    Workspace.over(workspace, total, _OWNER, device=q.device)
    # the semaphore slot: the deterministic turn counters, or the persistent grid's tile counter and / or dq_first_store's
    # flags (the postprocess reads those: their own offset)
    slot = key.deterministic or key.persistent or key.dq_first_store
    flags = off_sem + 4 * dq_flags_offset(key.persistent) if key.dq_first_store else None
    offsets = (off_lse, off_dpsum, off_dq, off_sink if key.has_sinks else None, off_sem if slot else None, flags)
    if b == 0 or h == 0 or (grid_q == 0 and grid_k == 0):
        return offsets, total, None, None, None, q.get_device()
    scale = 1.0 / math.sqrt(key.head_dim) if scale is None else float(scale)
    left, right = window
    pre = (b, h, sq, grid_q, s_pad, os_, dos, lse_s) if grid_q > 0 else None
    main = None
    if grid_k > 0:
        resident = _resident_ctas(q.device) if key.kv_prefetch or key.persistent else 0  # one main-kernel CTA per SM
        groups = group_heads
        if groups is None:  # the library's rule: FULL_GROUP_HEADS for unmasked dense plans (and _full_order's short d64 rows)
            groups = FULL_GROUP_HEADS if _full_order(key, grid_q, window) else 0
        groups = groups or _group_heads(key, grid_q, l2_group_dq)
        if key.grouped_grid:  # a group size dividing the pairs: the grouped 3-D grid
            from .._device.tile_scheduler import SingleTileScheduler

            groups = SingleTileScheduler.grouped_heads(groups, hk * b)
        main = (b, h, hk, sq, sk, grid_k, s_pad, groups, resident)
        main += (qs, ks, vs, dos, dks, dvs, scale * _LOG2E, scale, left, right)
    post = (b, h, sq, grid_q, s_pad, dqs, scale) if grid_q > 0 else None
    return offsets, total, pre, main, post, q.get_device()


_LOG2E = math.log2(math.e)


def _resident_ctas(device) -> int:
    """kv_prefetch's and persistent's launch argument: main-kernel CTAs resident at once on ``device`` (its SM count:
    one CTA per SM, the kernel's shared memory allows no second)."""
    from ..fwd.api import _sm_count

    return _sm_count(str(device))


#: Pointer arguments of the (pre, main, post) launches for the DSL's generic entry: (element type, assumed alignment),
#: "io" standing for the plan's 16-bit type (the tvm-ffi entries take the int addresses as they are).
_PTR_SPECS = (
    (("io", 16), ("io", 16), ("f32", 4), ("f32", 16), ("f32", 16), ("f32", 16), ("f32", 4), ("f32", 16), ("i32", 16), ("i32", 4)),
    (("io", 16),) * 6 + (("f32", 16),) * 3 + (("i32", 16), ("i32", 4), ("i32", 4)),
    (("f32", 16), ("io", 16), ("f32", 16), ("f32", 4), ("i32", 16), ("i32", 4)),
)


def _fire(entries, tvm, entry, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, scale, stream, stream_fn):
    """The per-call part of a launch on a validated ``entry`` (:func:`_derive`): the addresses of this call's tensors
    (each checked for the alignment the kernels assume: 16 bytes for the TMA operands, 128 for the workspace, 4 for the
    fp32 / int32 operands), ``scale`` (None: the entry's), the stream (None: torch's current one through
    ``stream_fn``), then the three launches on ``entries`` (tvm-ffi entries when ``tvm``). Returns (dq, dk, dv)."""
    qp, kp, vp, op, dop = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), do.data_ptr()
    dqp, dkp, dvp, lp, base = dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), lse.data_ptr(), workspace.data_ptr()
    sp = dsp = cqp = ckp = None
    if sinks is not None:
        sp, dsp = sinks.data_ptr(), dsinks.data_ptr()
    if cu_q is not None:
        cqp, ckp = cu_q.data_ptr(), cu_k.data_ptr()
    offsets, total, pre_t, main_t, post_t, dev = entry
    if (qp | kp | vp | op | dop | dqp | dkp | dvp) & 15 or (base & 127 and total) or (lp | (sp or 0) | (dsp or 0) | (cqp or 0) | (ckp or 0)) & 3:
        _raise_misaligned(q, k, v, o, do, lse, dq, dk, dv, workspace, total, sinks, dsinks, cu_q, cu_k)
    if pre_t is None and main_t is None:
        return dq, dk, dv
    if scale is not None:  # a per-call scale: the entry's default one replaced
        s = float(scale)
        if main_t is not None:
            main_t = (*main_t[:-4], s * _LOG2E, s, *main_t[-2:])
        if post_t is not None:
            post_t = (*post_t[:-1], s)
    if stream is None:
        handle = stream_fn(dev)
    elif type(stream) is int:  # a raw handle: what launch_stream_handle returns for it
        handle = stream
    else:
        from ..fwd.api import _launch_stream_handle

        handle = _launch_stream_handle(stream)
    lse2, dpsum, dqacc = base + offsets[0], base + offsets[1], base + offsets[2]
    part = None if offsets[3] is None else base + offsets[3]
    sem = None if offsets[4] is None else base + offsets[4]
    flags = None if offsets[5] is None else base + offsets[5]
    pre, main, post = entries if tvm else (_typed_entry(f, spec, q.dtype) for f, spec in zip(entries, _PTR_SPECS, strict=True))
    if pre_t is not None:
        pre(op, dop, lp, lse2, dpsum, dqacc, sp, part, sem, cqp, *pre_t, handle)
    if main_t is not None:
        main(qp, kp, vp, dop, dkp, dvp, lse2, dpsum, dqacc, sem, cqp, ckp, *main_t, handle)
    if post_t is not None:
        post(dqacc, dqp, part, dsp, flags, cqp, *post_t, handle)
    return dq, dk, dv


def _typed_entry(fn, spec, io_dtype):
    """``fn`` (a DSL compiled function) taking the tvm-ffi entries' arguments: the int addresses become cute pointers
    per ``spec`` (None stays None), the raw stream handle a CUstream."""
    t = _torch_bits()
    types = {"io": t["dt"][io_dtype], "f32": t["f32"], "i32": t["i32"]}

    def call(*args):
        n = len(spec)
        ptrs = (None if a is None else t["make_ptr"](types[ty], a, t["gmem"], assumed_align=al) for a, (ty, al) in zip(args[:n], spec, strict=True))
        fn(*ptrs, *args[n:-1], t["cuda"].CUstream(args[-1]))

    return call


def _raise_misaligned(q, k, v, o, do, lse, dq, dk, dv, workspace, total, sinks, dsinks, cu_q, cu_k):
    """The error of the first operand whose address breaks the alignment the kernels assume (:func:`_check_io`'s
    message for the TMA operands, Workspace.over's for the workspace)."""
    for name, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("dq", dq), ("dk", dk), ("dv", dv)):
        if x.data_ptr() % 16:
            raise ValueError(f"{_OWNER}.execute: {name} address 0x{x.data_ptr():x} is not 16-byte aligned (TMA)")
    if total:
        from cudnn.workspace import Workspace

        Workspace.over(workspace, total, _OWNER, device=q.device)
    for name, x in (("lse", lse), ("sinks", sinks), ("dsinks", dsinks), ("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_k)):
        if x is not None and x.data_ptr() % 4:
            raise ValueError(f"{_OWNER}.execute: {name} address 0x{x.data_ptr():x} is not 4-byte aligned")


#: ``plan.fast_guard`` (an attribute set before compile()) None means FAST_GUARD_DEFAULT: a repeated execute() matches its
#: tensors' metadata with one C++ TensorGuards call instead of the metadata tuple (the forward's option, see execute).
FAST_GUARD_DEFAULT = True


class _FastLaunch:
    """A compiled plan's per-call state, what execute() reads with one attribute load: the launch entries, the current
    stream accessor, the memo (call metadata -> launch entry of :func:`_derive`), the last (metadata, entry) pair (a
    repeated call compares one tuple instead of hashing) and the fast_guard state (guards kept per layout).
    ``memo_on`` False makes every call run the full validation (the reference path of tests and benchmarks)."""

    __slots__ = ("entries", "tvm", "stream_fn", "guard_on", "memo_on", "scale", "memo", "last", "guard", "guards", "ws_bytes")

    def __init__(self, plan, entries, tvm: bool):
        from ..fwd.api import _stream_accessor, _tensor_guards

        fast_guard = getattr(plan, "fast_guard", None)
        fast_guard = FAST_GUARD_DEFAULT if fast_guard is None else fast_guard
        if fast_guard not in (True, False):
            raise ValueError(f"{_OWNER}: fast_guard={fast_guard!r} must be True, False or None")
        self.entries, self.tvm, self.stream_fn = entries, tvm, _stream_accessor()
        self.guard_on = bool(fast_guard) and _tensor_guards() is not None  # inactive where this torch has no TensorGuards
        self.memo_on = True
        self.ws_bytes: dict = {}  # sdpa_bwd: (q's shape, len(cu_seqlens_q)) -> workspace bytes
        self.restart(plan.scale)

    def restart(self, scale) -> None:
        """Empty memo and guards for a plan whose default scale is ``scale`` (every entry carries it)."""
        self.scale = scale
        self.memo, self.last, self.guard, self.guards = {}, (None, None), None, {}

    def entry(self, plan, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv):
        """The launch entry of a call the guard did not serve: the last call's when the metadata repeats, else the
        memo's, else the full validation's (memoized). A layout seen twice in a row installs its guard (fast_guard)."""
        from ..fwd.api import _LAUNCH_MEMO_MAX

        got, meta, repeat = None, None, False
        if self.memo_on:
            try:
                meta = _call_meta(q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv)
                pair = self.last  # replaced as one object (thread-safe)
                if meta == pair[0]:
                    got, repeat = pair[1], True
                else:
                    got = self.memo.get(meta)
                    if got is not None:
                        self.last = (meta, got)
            except (AttributeError, TypeError):  # not tensors (or unhashable metadata): the full validation names the problem
                meta = None
        if got is None:
            got = _validate(plan, self.scale, q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv)
            if meta is not None:
                if len(self.memo) >= _LAUNCH_MEMO_MAX:
                    self.memo.clear()
                self.memo[meta] = got
                self.last = (meta, got)
        if repeat and self.guard_on:  # this layout repeated: the next call checks its guard first
            sig = (max_seqlen_q, max_seqlen_kv, sinks is None, dsinks is None, cu_q is None, cu_k is None)  # as execute() compares it
            self.guard = self._install_guard(meta, _call_tensors(q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k), sig, got)
        return got

    def _install_guard(self, meta, tensors, sig, got):
        """The guard ``(check, aliases, positions, sig, got)`` of the layout ``meta`` (built once per layout, see
        cached_guard), or None; a torch whose TensorGuards makes none turns fast_guard off for the plan."""
        from ..fwd.api import _GUARD_BUILDS_MAX, _LAUNCH_MEMO_MAX, _tensor_guards

        def build():
            parts = guard_over(_tensor_guards(), tensors)
            return None if parts is None else (*parts, sig, got)

        guard = cached_guard(self.guards, meta, lambda gs: guard_passes(gs[0], gs[1], gs[2], tensors), build, _GUARD_BUILDS_MAX, _LAUNCH_MEMO_MAX)
        if guard is False:
            self.guard_on = False
            return None
        return guard


def _call_tensors(q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k) -> tuple:
    """A call's tensor arguments in execute's order, the optional ones given only."""
    given = (q, k, v, o, do, lse, dq, dk, dv, workspace)
    if sinks is None and dsinks is None and cu_q is None and cu_k is None:
        return given
    return given + tuple(x for x in (sinks, dsinks, cu_q, cu_k) if x is not None)


def _call_meta(q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_q, cu_k, max_seqlen_q, max_seqlen_kv) -> tuple:
    """What a memo entry is keyed on: shape, strides, dtype and device index of every tensor argument, then (when any is
    given) the optional tensors' and ``max_seqlen_q`` / ``max_seqlen_kv``. Never an address."""
    meta = (
        q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype, k.get_device(),
        v.shape, v.stride(), v.dtype, v.get_device(), o.shape, o.stride(), o.dtype, o.get_device(),
        do.shape, do.stride(), do.dtype, do.get_device(), lse.shape, lse.stride(), lse.dtype, lse.get_device(),
        dq.shape, dq.stride(), dq.dtype, dq.get_device(), dk.shape, dk.stride(), dk.dtype, dk.get_device(),
        dv.shape, dv.stride(), dv.dtype, dv.get_device(), workspace.shape, workspace.stride(), workspace.dtype, workspace.get_device(),
    )  # fmt: skip
    if sinks is None and dsinks is None and cu_q is None and cu_k is None and max_seqlen_q is None and max_seqlen_kv is None:
        return meta
    opt = tuple(None if x is None else (x.shape, x.stride(), x.dtype, x.get_device()) for x in (sinks, dsinks, cu_q, cu_k))
    return meta + opt + (max_seqlen_q, max_seqlen_kv)


# ---------------------------------------------------------------------------------------------- wrapper
_PLANS: dict[Any, SdpaBwdSm90] = {}


def sdpa_bwd(
    q,
    k,
    v,
    o,
    do,
    lse,
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
    deterministic: bool = False,
    dq=None,
    dk=None,
    dv=None,
    stream=None,
) -> TupleDict:
    """Attention backward. Returns ``TupleDict(dq=..., dk=..., dv=...)`` (plus ``dsinks`` when ``sinks`` is given).

    ``o`` and ``lse`` are the forward's outputs (``sdpa_fwd(..., return_lse=True)``), with the same options passed
    here. Picks the adapter for the device's architecture (sm_90 only, checked once per device), caches one plan per
    compile key, and allocates dq / dk / dv (in q's / k's / v's memory order, strides computed once per layout) and the
    scratch workspace on the launch stream.
    """
    from ..fwd.api import _NULL_CTX, _empty_like_layout

    torch = _torch_bits()["torch"]
    if q.is_cuda:
        _require_sm90(torch, q)
    window = (-1, -1) if window_size is None else _norm_window(window_size)
    varlen = cu_seqlens_q is not None or cu_seqlens_kv is not None
    pkey = (
        q.dtype,
        q.shape[-1],
        v.shape[-1],
        (q.shape[-2] // max(k.shape[-2], 1)) if varlen else (q.shape[1] // max(k.shape[1], 1)),
        bool(is_causal),
        bool(causal_bottom_right),
        window,
        bool(lse_log2),
        sinks is not None,
        varlen,
        page_table is not None,
        bool(deterministic),
        q.get_device(),
    )
    plan = _PLANS.get(pkey)
    if plan is None:
        plan = SdpaBwdSm90(
            q,
            k,
            v,
            o,
            do,
            lse,
            is_causal=is_causal,
            causal_bottom_right=causal_bottom_right,
            window_size=window,
            sinks=sinks,
            cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_kv=max_seqlen_kv,
            page_table=page_table,
            lse_log2=lse_log2,
            deterministic=deterministic,
        )
        plan.check_support()
        plan.compile()
        _PLANS[pkey] = plan
    if stream is None:
        ctx = _NULL_CTX
    else:
        from cudnn._torch_stream import stream_context

        ctx = stream_context(stream, q.device)
    with ctx:
        if dq is None:
            dq = _empty_like_layout(torch, q, q.shape[-1], q.dtype)
        if dk is None:
            dk = _empty_like_layout(torch, k, k.shape[-1], k.dtype)
        if dv is None:
            dv = _empty_like_layout(torch, v, v.shape[-1], v.dtype)
        workspace = torch.empty(_workspace_bytes(plan, q, cu_seqlens_q), dtype=torch.uint8, device=q.device)
        dsinks = torch.empty(sinks.shape, dtype=torch.float32, device=q.device) if sinks is not None else None
    plan.execute(
        q, k, v, o, do, lse, dq, dk, dv, workspace, sinks, dsinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q if varlen else None,
        max_seqlen_kv if varlen else None, current_stream=stream, scale=scale,
    )  # fmt: skip
    if sinks is not None:
        return TupleDict(dq=dq, dk=dk, dv=dv, dsinks=dsinks)
    return TupleDict(dq=dq, dk=dk, dv=dv)


_SM90_DEVICES: dict = {}


def _require_sm90(torch, q) -> None:
    """NotImplementedError unless q's CUDA device is sm_90 (the capability read once per device index)."""
    dev = q.get_device()
    ok = _SM90_DEVICES.get(dev)
    if ok is None:
        ok = _SM90_DEVICES[dev] = torch.cuda.get_device_capability(dev) == (9, 0)
    if not ok:
        cc = "".join(map(str, torch.cuda.get_device_capability(dev)))
        raise NotImplementedError(f"sdpa_bwd: {torch.cuda.get_device_name(dev)} (sm_{cc}) is not served; sm_90 only")


def _workspace_bytes(plan: SdpaBwdSm90, q, cu_seqlens_q) -> int:
    """:func:`workspace_bytes_for` remembered on the compiled plan per (q's shape, number of sequences)."""
    cache = plan._fast.ws_bytes
    wk = (q.shape, None if cu_seqlens_q is None else cu_seqlens_q.shape[0])
    got = cache.get(wk)
    if got is None:
        if len(cache) >= 64:  # THD token totals change per batch: keep the cache small
            cache.clear()
        got = cache[wk] = workspace_bytes_for(plan, q, cu_seqlens_q)
    return got
