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
- not served (declined with NotImplementedError): paged KV (``page_table``), split-KV decode, dropout,
  arbitrary additive masks, fp8.
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc, TupleDict, as_desc
from cudnn.datatypes import data_type

_HEAD_DIMS = (64, 96, 128, 192, 256)
_IO_DTYPES = (data_type.BFLOAT16, data_type.HALF)
_DT_NAME = {data_type.BFLOAT16: "bf16", data_type.HALF: "fp16"}
#: Pack-GQA (the G query heads of a kv head share one query tile, so K/V are read once per kv head) is chosen
#: automatically for dense plans with S_q at most this (decode, speculative decoding, short chunks).
PACK_GQA_MAX_SEQLEN_Q = 64
#: This family's CuTe DSL runtime floor (mirrors cudnn.sdpa.CUTEDSL_MIN_VERSION; kept here so api.py needs no package import).
_DSL_FLOOR = "4.8.0"


def _norm_window(window_size) -> tuple[int, int]:
    if window_size is None:
        return -1, -1
    left, right = (int(window_size[0]), int(window_size[1]))
    if left < -1 or right < -1:
        raise ValueError(f"window_size={tuple(window_size)}: each side must be >= 0, or -1 for unbounded")
    return left, right


class SdpaFwdSm90(APIBase):
    """Flash attention forward on sm_90a. Build from tensors or TensorDescs plus plan-time flags.

    ``check_support()`` validates the declaration; ``compile()`` builds (or fetches from the kernel cache) the
    kernel; ``execute(q, k, v, o, lse=None, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None,
    current_stream=None)`` launches it. The kernel is generic in every extent (B, H, S, T), so a plan serves any
    tensors with the planned dtypes, head dims, head ratio, masks and optional operands; execute() checks that
    contract and launches, never converting, allocating or synchronizing.
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
    ):
        super().__init__()
        self.pack_gqa = pack_gqa
        self.q, self.k, self.v = as_desc(q, "q"), as_desc(k, "k"), as_desc(v, "v")
        self.o, self.lse = as_desc(o, "o"), as_desc(lse, "lse")
        self.sinks = as_desc(sinks, "sinks")
        self.cu_seqlens_q, self.cu_seqlens_kv = as_desc(cu_seqlens_q, "cu_seqlens_q"), as_desc(cu_seqlens_kv, "cu_seqlens_kv")
        self.page_table = as_desc(page_table, "page_table")
        self.is_causal = bool(is_causal)
        self.causal_bottom_right = bool(causal_bottom_right)
        self.window_size = _norm_window(window_size)
        self.scale = scale
        self.max_seqlen_q = max_seqlen_q
        self.max_seqlen_kv = max_seqlen_kv
        self.lse_log2 = bool(lse_log2)
        self.key = None

    # ------------------------------------------------------------------------------------------ plan
    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None or self.cu_seqlens_kv is not None

    def check_support(self) -> bool:
        from cudnn.dsl_gate import cutedsl_requirement_error, cutedsl_too_old

        if cutedsl_too_old(_DSL_FLOOR):
            raise NotImplementedError(str(cutedsl_requirement_error("cudnn.sdpa.SdpaFwdSm90", _DSL_FLOOR)))
        q, k, v = self.q, self.k, self.v
        self._value_error_if(q is None or k is None or v is None, "SdpaFwdSm90: q, k and v are required")
        self._decline_if(
            self.page_table is not None,
            f"SdpaFwdSm90: {self.page_table.describe() if self.page_table else 'page_table'}: paged KV is not served by this engine yet; "
            "pass contiguous per-sequence K/V (dense or THD with cu_seqlens_kv)",
        )
        for d in (q, k, v):
            self._check_dtype(d, _IO_DTYPES, "SdpaFwdSm90")
        self._decline_if(
            k.dtype != q.dtype or v.dtype != q.dtype, f"SdpaFwdSm90: q, k, v must share one dtype; got {q.describe()}, {k.describe()}, {v.describe()}"
        )
        if self.varlen:
            self._value_error_if(self.cu_seqlens_q is None or self.cu_seqlens_kv is None, "SdpaFwdSm90: THD varlen needs both cu_seqlens_q and cu_seqlens_kv")
            for d in (q, k, v):
                self._value_error_if(d.rank != 3, f"SdpaFwdSm90: THD varlen takes (T, H, D) tensors; got {d.describe()}")
            for cu in (self.cu_seqlens_q, self.cu_seqlens_kv):
                self._decline_if(cu.dtype != data_type.INT32 or cu.rank != 1, f"SdpaFwdSm90: {cu.describe()} must be a 1-D int32 tensor")
                self._decline_if(cu.shape[0] > 1 and cu.stride[0] != 1, f"SdpaFwdSm90: {cu.describe()} must be contiguous")
            self._value_error_if(
                self.cu_seqlens_q.shape != self.cu_seqlens_kv.shape,
                f"SdpaFwdSm90: {self.cu_seqlens_q.describe()} and {self.cu_seqlens_kv.describe()} must have the same length (B + 1)",
            )
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
            self._compiled_kernel = _compiled(self.key)

    def scratch_workspace_bytes(self) -> int:
        return 0

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
    ):
        """Launch on ``current_stream`` (None: torch's current stream). Validates; never converts, allocates or syncs."""
        if self._compiled_kernel is None:
            raise RuntimeError("SdpaFwdSm90.execute: call compile() first (or use the adapter as a callable)")
        key = self.key
        _check_io(key, q, k, v, o)
        if key.has_lse != (lse is not None):
            raise ValueError(
                f"SdpaFwdSm90.execute: the plan was built {'with' if key.has_lse else 'without'} lse; got lse={'a tensor' if lse is not None else None}"
            )
        if key.has_sinks != (sinks is not None):
            raise ValueError(
                f"SdpaFwdSm90.execute: the plan was built {'with' if key.has_sinks else 'without'} sinks; got sinks={'a tensor' if sinks is not None else None}"
            )
        if key.varlen != (cu_seqlens_q is not None):
            raise ValueError(f"SdpaFwdSm90.execute: the plan was built {'for' if key.varlen else 'without'} THD varlen; cu_seqlens_q must match")
        return _launch(
            self._compiled_kernel,
            key,
            q,
            k,
            v,
            o,
            lse,
            sinks,
            cu_seqlens_q,
            cu_seqlens_kv,
            max_seqlen_q,
            self._mask_window,
            self.scale if scale is None else scale,
            current_stream,
        )


# ---------------------------------------------------------------------------------------------- internals
def _make_key(*args):
    from .kernel_key import SdpaFwdKey

    return SdpaFwdKey(*args)


def _compiled(key):
    from cudnn.kernel_cache import kernel_cache

    def build():
        from .kernel_sm90 import compile_sdpa_fwd

        return compile_sdpa_fwd(key)

    return kernel_cache.get_or_compile(key, build, family="sdpa")


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


def _check_io(key, q, k, v, o) -> None:
    t = _torch_bits()
    want = t["torch_dt"][key.dtype]
    rank = 3 if key.varlen else 4
    for name, x, d in (("q", q, key.head_dim), ("k", k, key.head_dim), ("v", v, key.head_dim_v), ("o", o, key.head_dim_v)):
        if x is None or x.dtype != want or x.dim() != rank or x.shape[-1] != d or x.stride(-1) != 1 or not x.is_cuda:
            got = "None" if x is None else f"shape={tuple(x.shape)} stride={tuple(x.stride())} dtype={x.dtype} device={x.device}"
            raise ValueError(
                f"SdpaFwdSm90.execute: {name} ({got}) does not match the plan: a CUDA {want} rank-{rank} tensor with head dim {d} and unit stride there"
            )
        if x.data_ptr() % 16:
            raise ValueError(f"SdpaFwdSm90.execute: {name} address 0x{x.data_ptr():x} is not 16-byte aligned (TMA)")
        for i in range(rank - 1):
            if x.stride(i) % 8 and x.shape[i] > 1:
                raise ValueError(f"SdpaFwdSm90.execute: {name} stride {x.stride(i)} of dim {i} is not a multiple of 16 bytes (TMA)")
    hq = q.shape[-2] if key.varlen else q.shape[1]
    hk = k.shape[-2] if key.varlen else k.shape[1]
    if hk * key.qhead_per_kvhead != hq:
        raise ValueError(f"SdpaFwdSm90.execute: the plan has {key.qhead_per_kvhead} query heads per kv head; got H_q={hq}, H_kv={hk}")
    if tuple(o.shape[:-1]) != tuple(q.shape[:-1]) or tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise ValueError(
            f"SdpaFwdSm90.execute: o {tuple(o.shape)} must match q {tuple(q.shape)} and v {tuple(v.shape)} must match k {tuple(k.shape)} outside the head dim"
        )
    if not key.varlen and k.shape[0] != q.shape[0]:
        raise ValueError(f"SdpaFwdSm90.execute: batch of q {q.shape[0]} and k {k.shape[0]} differ")


def _tma_strides(shape, strides):
    """(b, h, s) strides for a TMA descriptor: a dim of extent <= 1 is never stepped, so its stride (0 for the
    THD batch, or whatever torch reports for a size-1 dim) is replaced by the tensor's span, a valid 16-byte multiple."""
    span = max([abs(st) * max(sh, 1) for sh, st in zip(shape, strides, strict=False)] + [8])
    span = (span + 7) // 8 * 8
    return tuple(st if sh > 1 else span for sh, st in zip(shape, strides, strict=False))


_GROUP_CACHE: dict = {}


def _group_heads(key, seqlen_k: int) -> int:
    """(head, batch) pairs per L2 group of the tile order: 1 (m-block fastest) unless the mask makes tiles uneven."""
    if not (key.mask_right or key.mask_left):
        return 1
    g = _GROUP_CACHE.get((key.head_dim, key.head_dim_v, seqlen_k))
    if g is None:
        from .._device.tile_scheduler import SingleTileScheduler

        g = _GROUP_CACHE[(key.head_dim, key.head_dim_v, seqlen_k)] = SingleTileScheduler.group_heads_for(seqlen_k, key.head_dim, key.head_dim_v)
    return g


def _launch(compiled, key, q, k, v, o, lse, sinks, cu_q, cu_k, max_seqlen_q, window, scale, stream):
    from cudnn._torch_stream import launch_stream_handle

    t = _torch_bits()
    mk, gmem = t["make_ptr"], t["gmem"]
    dt = t["dt"][q.dtype]
    d = key.head_dim
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if key.varlen:
        if cu_k is None or max_seqlen_q is None:
            raise ValueError("SdpaFwdSm90.execute: THD varlen needs cu_seqlens_kv and max_seqlen_q (a host int; the device lengths are never read back)")
        for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_k)):
            if cu.dtype != t["torch"].int32 or cu.dim() != 1 or not cu.is_cuda or cu.device != q.device:
                raise ValueError(f"SdpaFwdSm90.execute: {name} must be a 1-D int32 CUDA tensor on {q.device}; got {cu.dtype} on {cu.device}")
        if cu_k.shape != cu_q.shape:
            raise ValueError("SdpaFwdSm90.execute: cu_seqlens_q and cu_seqlens_kv must have the same length")
        batch = cu_q.shape[0] - 1
        heads, heads_kv = q.shape[1], k.shape[1]
        sq, sk = q.shape[0], k.shape[0]
        grid_q = int(max_seqlen_q)
        qs, ks, vs, os_ = (_tma_strides((1, x.shape[1], x.shape[0]), (0, x.stride(1), x.stride(0))) for x in (q, k, v, o))
        lse_s = (0, lse.stride(0), lse.stride(1)) if lse is not None else (0, 0, 0)
        cu_q_ptr = mk(t["i32"], cu_q.data_ptr(), gmem, assumed_align=4)
        cu_k_ptr = mk(t["i32"], cu_k.data_ptr(), gmem, assumed_align=4)
    else:
        batch, heads, sq = q.shape[0], q.shape[1], q.shape[2]
        heads_kv, sk = k.shape[1], k.shape[2]
        grid_q = sq
        qs, ks, vs, os_ = (_tma_strides(tuple(x.shape[:3]), (x.stride(0), x.stride(1), x.stride(2))) for x in (q, k, v, o))
        lse_s = (lse.stride(0), lse.stride(1), lse.stride(2)) if lse is not None else (0, 0, 0)
        cu_q_ptr = cu_k_ptr = None
    if lse is not None and (lse.dtype != t["torch"].float32 or lse.device != q.device):
        raise ValueError(f"SdpaFwdSm90.execute: lse must be float32 on {q.device}; got {lse.dtype} on {lse.device}")
    if sinks is not None and (sinks.dtype != t["torch"].float32 or sinks.shape != (heads,) or sinks.device != q.device or (heads > 1 and sinks.stride(0) != 1)):
        raise ValueError(f"SdpaFwdSm90.execute: sinks must be a contiguous float32 ({heads},) tensor on {q.device}")
    if grid_q == 0 or batch == 0 or heads == 0:
        return o
    left, right = window  # effective window: causal already folded in as right = 0
    handle = launch_stream_handle(stream, q.device)
    compiled(
        mk(dt, q.data_ptr(), gmem, assumed_align=16),
        mk(dt, k.data_ptr(), gmem, assumed_align=16),
        mk(dt, v.data_ptr(), gmem, assumed_align=16),
        mk(dt, o.data_ptr(), gmem, assumed_align=16),
        mk(t["f32"], lse.data_ptr(), gmem, assumed_align=4) if lse is not None else None,
        mk(t["f32"], sinks.data_ptr(), gmem, assumed_align=4) if sinks is not None else None,
        cu_q_ptr,
        cu_k_ptr,
        batch,
        heads,
        heads_kv,
        sq,
        sk,
        grid_q,
        _group_heads(key, sk if not key.varlen else grid_q),
        tuple(qs),
        tuple(ks),
        tuple(vs),
        tuple(os_),
        lse_s,
        scale * math.log2(math.e),
        max(left, 0),
        max(right, 0),
        t["cuda"].CUstream(handle),
    )
    return o


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
) -> TupleDict:
    """Attention forward. Returns ``TupleDict(o=..., lse=...)`` (``lse`` is None unless ``return_lse`` or ``lse`` given).

    Picks the adapter for the device's architecture (sm_90 only for now), caches one plan per compile key, and
    allocates ``o`` (in q's memory order) and ``lse`` on the launch stream when the caller passes none.
    """
    from cudnn._torch_stream import stream_context

    t = _torch_bits()
    torch = t["torch"]
    if page_table is not None:
        raise NotImplementedError(
            f"sdpa_fwd: page_table (shape={tuple(page_table.shape)}, dtype={page_table.dtype}): paged KV is not served yet; pass contiguous K/V"
        )
    if q.is_cuda and torch.cuda.get_device_capability(q.device) != (9, 0):
        raise NotImplementedError(
            f"sdpa_fwd: {torch.cuda.get_device_name(q.device)} (sm_{''.join(map(str, torch.cuda.get_device_capability(q.device)))}) is not served; sm_90 only"
        )
    varlen = cu_seqlens_q is not None or cu_seqlens_kv is not None
    want_lse = bool(return_lse) or lse is not None
    window = _norm_window(window_size)
    pkey = (
        q.dtype,
        q.shape[-1],
        v.shape[-1],
        (q.shape[-2] // max(k.shape[-2], 1)) if varlen else (q.shape[1] // max(k.shape[1], 1)),
        bool(is_causal),
        bool(causal_bottom_right),
        window,
        want_lse,
        bool(lse_log2),
        sinks is not None,
        varlen,
        (not varlen) and q.shape[2] <= PACK_GQA_MAX_SEQLEN_Q,
        q.device,
    )
    plan = _PLANS.get(pkey)
    if plan is None:
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
        )
        plan.check_support()
        plan.compile()
        _PLANS[pkey] = plan
    if varlen and max_seqlen_q is None:
        raise ValueError("sdpa_fwd: THD varlen needs max_seqlen_q (a host int; device lengths are never read back)")
    with stream_context(stream, q.device):
        if out is None:
            out = _alloc_like_layout(torch, q, v.shape[-1], q.dtype, q.device)
        if want_lse and lse is None:
            lse = torch.empty((q.shape[1], q.shape[0]) if varlen else tuple(q.shape[:3]), dtype=torch.float32, device=q.device)
    plan.execute(q, k, v, out, lse if want_lse else None, sinks, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, current_stream=stream, scale=scale)
    return TupleDict(o=out, lse=lse if want_lse else None)
