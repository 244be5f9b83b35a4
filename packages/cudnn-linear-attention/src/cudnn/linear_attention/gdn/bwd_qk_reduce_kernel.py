"""Gated DeltaNet backward, pass 4 (GVA only; sm_90a, CuTe DSL): dq, dk of every q/k head from the value heads sharing it.

With GVA (q/k with Hk heads, v with H = m Hk; value head ``h`` reads q/k head ``h // m``) pass 3 (``chunk_bwd_kernel.py``)
writes the gradient of every value head's (normalised) q and k as fp32 partials ``Wq``, ``Wk`` [T, H, K] in the
workspace. This pass sums them and, with the L2 norm, applies its chain rule::

    dxn = sum_{j < m} W[t, hk m + j, :]          dx = dxn                                  (no L2 norm)
                                                 dx = r (dxn - xn (xn . dxn)),  xn = bf16(x r),  r = rsqrt(|x|^2 + 1e-6)

(x the raw q or k row, normalised exactly as the forward's loaders do). One warp per (token, q/k head) row, K / 32
channels per lane, the row sums by butterfly shuffles; grid ``[ceil(T Hk / 4)]`` of 128 threads. Memory-bound: it
reads 2 m fp32 rows and 2 bf16 rows and writes 2 bf16 rows per (token, q/k head).

Layouts: q, k, dq, dk [T, Hk, K] bf16 with unit channel stride and any token / head strides; the partials fp32
[T, H, K] contiguous. Runtime extents are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from .bwd_states_kernel import L2NORM_EPS, GdnBwdKey

THREADS = 128
ROWS_PER_CTA = THREADS // 32


@cute.jit
def _warp_sum(x: Float32) -> Float32:
    """Sum of ``x`` over the 32 lanes of the warp (every lane gets it)."""
    for o in cutlass.range_constexpr(5):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=16 >> o)
    return x


@cute.jit
def _reduce_row(
    mW: cute.Tensor,
    mX: cute.Tensor,
    mOut: cute.Tensor,
    t: Int32,
    hk: Int32,
    group: Int32,
    lane: Int32,
    D: cutlass.Constexpr[int],
    l2norm: cutlass.Constexpr[bool],
):
    """``mOut[t, hk, :]`` = the (chain-ruled) sum of ``mW[t, hk * group + j, :]`` over ``j < group``."""
    NJ = D // 32
    acc = cute.make_rmem_tensor(cute.make_layout((NJ,)), Float32)
    for j in cutlass.range_constexpr(NJ):
        acc[j] = Float32(0.0)
    for m in range(group):
        for j in cutlass.range_constexpr(NJ):
            acc[j] = acc[j] + mW[t, hk * group + m, lane + 32 * j]
    if const_expr(l2norm):
        xs = cute.make_rmem_tensor(cute.make_layout((NJ,)), Float32)
        ss = Float32(0.0)
        for j in cutlass.range_constexpr(NJ):
            x = mX[t, hk, lane + 32 * j].to(Float32)
            xs[j] = x
            ss = ss + x * x
        r = cute.math.rsqrt(_warp_sum(ss) + Float32(L2NORM_EPS))
        dot = Float32(0.0)
        for j in cutlass.range_constexpr(NJ):
            xn = (xs[j] * r).to(mX.element_type).to(Float32)
            xs[j] = xn
            dot = dot + xn * acc[j]
        dot = _warp_sum(dot)
        for j in cutlass.range_constexpr(NJ):
            mOut[t, hk, lane + 32 * j] = (r * (acc[j] - xs[j] * dot)).to(mOut.element_type)
    else:
        for j in cutlass.range_constexpr(NJ):
            mOut[t, hk, lane + 32 * j] = acc[j].to(mOut.element_type)


class GdnBwdQkReduce:
    """Pass 4 (GVA): dq, dk per q/k head from the fp32 per-value-head partials."""

    def __init__(self, key: GdnBwdKey):
        assert key.head_dim in (64, 128) and key.gva
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        wsdq_ptr: cute.Pointer,
        wsdk_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        T: Int32,
        heads: Int32,
        qk_heads: Int32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        dq_strides: tuple[Int64, Int64],
        dk_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        mQ = cute.make_tensor(q_ptr, cute.make_layout((T, qk_heads, D), stride=(q_strides[0], q_strides[1], 1)))
        mK = cute.make_tensor(k_ptr, cute.make_layout((T, qk_heads, D), stride=(k_strides[0], k_strides[1], 1)))
        mDq = cute.make_tensor(dq_ptr, cute.make_layout((T, qk_heads, D), stride=(dq_strides[0], dq_strides[1], 1)))
        mDk = cute.make_tensor(dk_ptr, cute.make_layout((T, qk_heads, D), stride=(dk_strides[0], dk_strides[1], 1)))
        part = cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1))
        mWq = cute.make_tensor(wsdq_ptr, part)
        mWk = cute.make_tensor(wsdk_ptr, part)
        rows = T * qk_heads
        self.kernel(mQ, mK, mWq, mWk, mDq, mDk, rows, qk_heads, heads // qk_heads).launch(
            grid=[(rows + ROWS_PER_CTA - 1) // ROWS_PER_CTA, 1, 1], block=[THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mWq: cute.Tensor,
        mWk: cute.Tensor,
        mDq: cute.Tensor,
        mDk: cute.Tensor,
        rows: Int32,
        qk_heads: Int32,
        group: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        r = bidx * ROWS_PER_CTA + tidx // 32
        lane = tidx % 32
        if r < rows:
            t = r // qk_heads
            hk = r % qk_heads
            _reduce_row(mWq, mQ, mDq, t, hk, group, lane, self.D, self.key.l2norm)
            _reduce_row(mWk, mK, mDk, t, hk, group, lane, self.D, self.key.l2norm)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
