"""Online softmax for attention, fp32, base 2 with the softmax scale folded into one FFMA per element.

State per thread: ``row_max`` (unscaled running max of the raw scores) and ``row_sum`` (this thread's partial
sum of ``exp2(s * scale_log2 - max * scale_log2)``; the four threads of a row are reduced once, in
:meth:`OnlineSoftmax.finalize`). Fully masked rows (max = -inf) produce P = 0, O = 0 and LSE = -inf (or the
sink logit when sinks are given). Sinks are per-head fp32 logits in natural-log units, unscaled: one extra
softmax column with no value vector.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .mma_sm90 import acc_view_mn

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
#: 2^f on [-0.5, 0.5] by c0 + c1 f + c2 f^2 + c3 f^3 (relative-error minimax fit, max relative error 7.5e-5): the FMA-pipe
#: exp2 of :func:`exp2_fma`.
EXP2_POLY = (0.9999280571937561, 0.6932609677314758, 0.2426111102104187, 0.05517160892486572)
#: 1.5 * 2^23: adding it rounds a float of magnitude < 2^22 to the nearest integer, held in the low mantissa bits.
_ROUND_MAGIC = 12582912.0


@cute.jit
def exp2_fma(x: Float32) -> Float32:
    """2^x for finite x <= 0 on the FMA pipe (no MUFU): n = round(x) by the 1.5 * 2^23 trick, 2^(x - n) by
    :data:`EXP2_POLY`, n added to the exponent field. x is clamped to -126 first (2^-126 stands for anything smaller:
    callers use it only where no score is masked, so no -inf reaches it). 8 FMA-pipe instructions."""
    xc = cute.arch.fmax(x, Float32(-126.0))
    xr = xc + Float32(_ROUND_MAGIC)  # the low mantissa bits of xr hold n in two's complement
    f = xc - (xr - Float32(_ROUND_MAGIC))
    p = ((Float32(EXP2_POLY[3]) * f + Float32(EXP2_POLY[2])) * f + Float32(EXP2_POLY[1])) * f + Float32(EXP2_POLY[0])
    buf = cute.make_rmem_tensor(cute.make_layout((2,), stride=(1,)), Float32)
    buf[0] = p
    buf[1] = xr
    bits = cute.recast_tensor(buf, Int32)
    bits[0] = bits[0] + (bits[1] << 23)  # (0x4B400000 + n) << 23 == n << 23 (mod 2^32)
    return buf[0]


class OnlineSoftmax:
    """Running (max, sum) of ``num_rows`` rows held by this thread. Methods emit device code (``@cute.jit``)."""

    def __init__(self, scale_log2: Float32, num_rows: int):
        self.scale_log2 = scale_log2
        self.num_rows = num_rows
        self.row_max = cute.make_rmem_tensor(num_rows, Float32)
        self.row_sum = cute.make_rmem_tensor(num_rows, Float32)

    @cute.jit
    def reset(self):
        self.row_max.fill(-Float32.inf)
        self.row_sum.fill(0.0)

    @cute.jit
    def online_softmax(self, acc_S: cute.Tensor, is_first: cutlass.Constexpr[bool] = False, exp2_emu: cutlass.Constexpr[int] = 0) -> cute.Tensor:
        """Turn scores ``acc_S`` into unnormalized probabilities in place; return the per-row rescale of O.

        ``exp2_emu`` = N > 0: one score in N of each row (columns N - 1, 2N - 1, ...) takes :func:`exp2_fma` instead of
        MUFU.EX2 (4 MUFU lanes per SM partition: at d = 64 the exponentials, not the tensor cores, bound a key block).
        Only for blocks with no masked score (no -inf)."""
        acc_S_mn = acc_view_mn(acc_S)
        row_scale = cute.make_rmem_tensor_like(self.row_max, Float32)
        scale_log2 = self.scale_log2
        for r in cutlass.range_constexpr(self.num_rows):
            row = acc_S_mn[r, None].load()
            cur_max = row.reduce(cute.ReductionOp.MAX, -Float32.inf, 0)
            if const_expr(not is_first):
                cur_max = cute.arch.fmax(cur_max, self.row_max[r])
            cur_max = cute.arch.warp_reduction_max(cur_max, threads_in_group=4)
            prev_max = self.row_max[r]
            self.row_max[r] = cur_max
            safe_max = cur_max
            if cur_max == -Float32.inf:
                safe_max = Float32(0.0)
            max_scaled = safe_max * scale_log2
            p = None
            if const_expr(exp2_emu > 0):
                acc_S_mn[r, None].store(row * scale_log2 - max_scaled)
                for c in cutlass.range_constexpr(cute.size(acc_S_mn.shape[1])):
                    if const_expr(c % exp2_emu == exp2_emu - 1):
                        acc_S_mn[r, c] = exp2_fma(acc_S_mn[r, c])
                    else:
                        acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c], fastmath=True)
                p = acc_S_mn[r, None].load()
            else:
                p = cute.math.exp2(row * scale_log2 - max_scaled, fastmath=True)
                acc_S_mn[r, None].store(p)
            if const_expr(is_first):
                row_scale[r] = Float32(1.0)
                self.row_sum[r] = p.reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
            else:
                row_scale[r] = cute.math.exp2(prev_max * scale_log2 - max_scaled, fastmath=True)
                self.row_sum[r] = p.reduce(cute.ReductionOp.ADD, self.row_sum[r] * row_scale[r], 0)
        return row_scale

    @cute.jit
    def finalize(self, sink_val: Float32 | cute.Tensor | None = None, lse_log2: cutlass.Constexpr[bool] = False) -> cute.Tensor:
        """``sink_val``: one logit for every row, or a per-row tensor (pack-GQA rows of different heads). Reduce the row sums across the row's 4 threads, fold in the sink, turn ``row_sum`` into the LSE
        (natural log, or base 2 when ``lse_log2``) and return the per-row 1/sum that normalizes O."""
        row_scale = cute.make_rmem_tensor_like(self.row_max, Float32)
        scale_log2 = self.scale_log2
        for r in cutlass.range_constexpr(self.num_rows):
            total = cute.arch.warp_reduction_sum(self.row_sum[r], threads_in_group=4)
            max_scaled = self.row_max[r] * scale_log2
            if const_expr(sink_val is not None):
                sink = sink_val[r] if const_expr(isinstance(sink_val, cute.Tensor)) else sink_val
                if self.row_max[r] == -Float32.inf:
                    max_scaled = sink * LOG2_E
                total = total + cute.math.exp2(sink * LOG2_E - max_scaled, fastmath=True)
            empty = total == 0.0 or total != total
            row_scale[r] = cute.arch.rcp_approx(total if not empty else Float32(1.0))
            lse2 = max_scaled + cute.math.log2(total if not empty else Float32(1.0), fastmath=True)
            if const_expr(not lse_log2):
                lse2 = lse2 * LN_2
            self.row_sum[r] = lse2 if not empty else -Float32.inf
        return row_scale

    @cute.jit
    def rescale(self, acc_O: cute.Tensor, row_scale: cute.Tensor):
        """Multiply each of this thread's rows of ``acc_O`` by ``row_scale``."""
        acc_O_mn = acc_view_mn(acc_O)
        for r in cutlass.range_constexpr(self.num_rows):
            acc_O_mn[r, None].store(acc_O_mn[r, None].load() * row_scale[r])
