"""WGMMA helpers for attention on sm_90a: issue a (possibly accumulating) GEMM over all k-blocks of a
fragment, and re-view an fp32 accumulator as an (M, N) row/column grid or as the A operand of the next GEMM.

Accumulator of one warpgroup MMA atom (64 x N): ``((2, 2, N/8), MMA_M, MMA_N)``; the (M, N) view is
``((2, MMA_M), (2, N/8, MMA_N))`` so row ``r`` of a thread is ``acc_mn[r, None]``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import const_expr
from cutlass.cute.nvgpu import warpgroup


@cute.jit
def wgmma(
    tiled_mma: cute.TiledMma,
    acc: cute.Tensor,
    tCrA: cute.Tensor,
    tCrB: cute.Tensor,
    zero_init: cutlass.Constexpr[bool] = False,
    wg_wait: cutlass.Constexpr[int] = 0,
):
    """acc (+)= A @ B over every k-block; commits one WGMMA group; waits until ``wg_wait`` groups remain (-1: no wait)."""
    warpgroup.fence()
    mma_atom = cute.make_mma_atom(tiled_mma.op)
    mma_atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for k in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(mma_atom, acc, tCrA[None, None, k], tCrB[None, None, k], acc)
        mma_atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    if const_expr(wg_wait >= 0):
        warpgroup.wait_group(wg_wait)


def acc_layout_mn(acc_layout: cute.Layout) -> cute.Layout:
    """((2, 2, V), MMA_M, MMA_N) -> ((2, MMA_M), (2, V, MMA_N)) (layout algebra only: emits no device code)."""
    col = cute.make_layout(acc_layout.shape)
    shape = ((col.shape[0][1], col.shape[1]), (col.shape[0][0], *col.shape[0][2:], col.shape[2]))
    stride = ((col.stride[0][1], col.stride[1]), (col.stride[0][0], *col.stride[0][2:], col.stride[2]))
    return cute.composition(acc_layout, cute.make_layout(shape, stride=stride))


def acc_view_mn(acc: cute.Tensor) -> cute.Tensor:
    """The accumulator as a (rows, cols) grid of this thread's elements."""
    return cute.make_tensor(acc.iterator, acc_layout_mn(acc.layout))


def acc_layout_as_a(acc_layout: cute.Layout) -> cute.Layout:
    """fp32 acc ((2, 2, N/8), MMA_M, MMA_N) -> the 16-bit A-operand layout ((2, 2, 2), MMA_M, (N/16, MMA_N))."""
    div = 2 if const_expr(acc_layout.shape[0][2] % 2 == 0) else 1
    lay = cute.logical_divide(acc_layout, ((None, None, div), None, None))
    return cute.make_layout(
        ((lay.shape[0][0], lay.shape[0][1], lay.shape[0][2][0]), lay.shape[1], (lay.shape[0][2][1], lay.shape[2])),
        stride=((lay.stride[0][0], lay.stride[0][1], lay.stride[0][2][0]), lay.stride[1], (lay.stride[0][2][1], lay.stride[2])),
    )


def acc_view_as_a(acc: cute.Tensor) -> cute.Tensor:
    return cute.make_tensor(acc.iterator, acc_layout_as_a(acc.layout))


def transpose_view(a: cute.Tensor) -> cute.Tensor:
    """Swap the first two modes of a shared-memory tensor (V (n, d, stage) -> V^T (d, n, stage))."""
    shape = (a.shape[1], a.shape[0], *a.shape[2:])
    order = (1, 0, *range(2, cute.rank(a)))
    return cute.composition(a, cute.make_ordered_layout(shape, order=order))
