"""Split-K reduction for the sm90 GEMM: the second launch of a ``split_k > 1`` plan, in CuTe DSL.

The GEMM launch (``kernel_sm90`` with ``GemmSm90Config.split_k = S``) writes S raw fp32 partial sums per
output into the caller's workspace, laid out as ``W[l, s, m, n]`` (row stride ``ldp`` = N rounded up to
4 elements, slab stride ``M * ldp``). This kernel computes, for every output::

    acc = W[l, 0, m, n] + W[l, 1, m, n] + ... + W[l, S-1, m, n]      # fixed order: deterministic
    D[m, n, l] = cast(act(alpha * scale_a * scale_b * acc + bias) * scale_d)

so a split-K result is bit-identical from run to run (no atomics), and the epilogue is the same math as
the fused one (``_device.epilogue``). One thread per output, consecutive threads on consecutive columns
(coalesced workspace reads and D writes). What split-K serves (alpha, bias, activation, fp8 scales) is
decided by ``GemmSm90.check_support``; C, the stored pre-activation, dsrelu, swiglu and amax are declined.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from .._device import epilogue as epi_ops
from .kernel_sm90 import _DTYPES, GemmSm90Config

THREADS = 256


class SplitKReduceSm90:
    """``__init__`` holds the plan (the GEMM's :class:`GemmSm90Config`), ``__call__`` launches the reduction."""

    def __init__(self, cfg: GemmSm90Config):
        if cfg.split_k < 2:
            raise ValueError(f"the split-K reduction needs split_k >= 2, got {cfg.split_k}")
        self.cfg = cfg
        self.d_dtype = _DTYPES[cfg.d_dtype]

    @cute.jit
    def __call__(
        self,
        pW: cute.Pointer,
        pD: cute.Pointer,
        pBias,
        pScaleA,
        pScaleB,
        pScaleD,
        m: Int32,
        n: Int32,
        l: Int32,  # noqa: E741
        ldp: Int32,
        ldd: Int32,
        bsd: Int32,
        bs_bias: Int32,
        alpha: Float32,
        stream: cuda.CUstream,
    ):
        cfg = self.cfg
        slab = m * ldp
        mW = cute.make_tensor(pW, cute.make_layout((m, n, cfg.split_k, l), stride=(ldp, 1, slab, slab * cfg.split_k)))
        mD = cute.make_tensor(pD, cute.make_layout((m, n, l), stride=(ldd, 1, bsd)))
        mBias = None
        if cutlass.const_expr(cfg.bias == "n"):
            mBias = cute.make_tensor(pBias, cute.make_layout((n, l), stride=(1, bs_bias)))
        if cutlass.const_expr(cfg.bias == "m"):
            mBias = cute.make_tensor(pBias, cute.make_layout((m, l), stride=(1, bs_bias)))
        mScaleA = None
        mScaleB = None
        if cutlass.const_expr(cfg.scale_ab):
            mScaleA = cute.make_tensor(pScaleA, cute.make_layout(1))
            mScaleB = cute.make_tensor(pScaleB, cute.make_layout(1))
        mScaleD = None
        if cutlass.const_expr(cfg.scale_d):
            mScaleD = cute.make_tensor(pScaleD, cute.make_layout(1))
        total = m * n * l
        self.kernel(mW, mD, mBias, mScaleA, mScaleB, mScaleD, m, n, total, alpha).launch(
            grid=[(total + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mW: cute.Tensor,
        mD: cute.Tensor,
        mBias: cute.Tensor | None,
        mScaleA: cute.Tensor | None,
        mScaleB: cute.Tensor | None,
        mScaleD: cute.Tensor | None,
        m: Int32,
        n: Int32,
        total: Int32,
        alpha: Float32,
    ):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * THREADS + tidx
        if i < total:
            gn = i % n
            row = i // n
            gm = row % m
            gl = row // m
            acc = Float32(0.0)
            for s in cutlass.range_constexpr(cfg.split_k):
                acc = acc + mW[gm, gn, s, gl]
            alpha_eff = alpha
            if cutlass.const_expr(cfg.scale_ab):
                alpha_eff = alpha * mScaleA[0] * mScaleB[0]
            x = acc * alpha_eff
            if cutlass.const_expr(cfg.bias == "n"):
                x = x + mBias[gn, gl].to(Float32)
            if cutlass.const_expr(cfg.bias == "m"):
                x = x + mBias[gm, gl].to(Float32)
            y = epi_ops.activation(x, cfg.activation)
            if cutlass.const_expr(cfg.scale_d):
                y = y * mScaleD[0]
            mD[gm, gn, gl] = y.to(self.d_dtype)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


def workspace_row_stride(n: int) -> int:
    """Row stride (elements) of the fp32 partials: N rounded up to 4 (16-byte TMA rows)."""
    return (int(n) + 3) // 4 * 4


def workspace_bytes(cfg: GemmSm90Config, m: int, n: int, l: int) -> int:  # noqa: E741
    """Bytes of fp32 partials a split-K plan needs from the caller's workspace."""
    return cfg.split_k * int(l) * int(m) * workspace_row_stride(n) * 4


def fake_args(cfg: GemmSm90Config):
    """Placeholder launch arguments for ``cute.compile`` (no GPU, no storage)."""
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    gmem = cute.AddressSpace.gmem

    def ptr(dt, align):
        return make_ptr(dt, 0, gmem, assumed_align=align)

    d_dt = _DTYPES[cfg.d_dtype]
    bias_dt = _DTYPES[cfg.bias_dtype]
    return (
        ptr(Float32, 16),
        ptr(d_dt, d_dt.width // 8),
        ptr(bias_dt, bias_dt.width // 8) if cfg.bias != "none" else None,
        ptr(Float32, 4) if cfg.scale_ab else None,
        ptr(Float32, 4) if cfg.scale_ab else None,
        ptr(Float32, 4) if cfg.scale_d else None,
        *([Int32(0)] * 7),
        Float32(1.0),
        make_fake_stream(),
    )


def compile_reduce(cfg: GemmSm90Config, options: str | None = None, tvm_ffi: bool = False):
    """``cute.compile`` the split-K reduction of ``cfg`` (callers cache it through cudnn.kernel_cache)."""
    flags = " ".join(x for x in (options, "--enable-tvm-ffi" if tvm_ffi else None) if x)
    if flags:
        return cute.compile(SplitKReduceSm90(cfg), *fake_args(cfg), options=flags)
    return cute.compile(SplitKReduceSm90(cfg), *fake_args(cfg))
