"""``key.ragged_tail`` for the Hopper forward kernel (fwd/kernel_sm90.py): the first key block a consumer warpgroup
processes (the highest: the sequence's partial last block, or the causal diagonal) at the width its 64 rows can see.

Contract (device code, @cute.jit, inlined into the kernel's consumer path; ``plan`` is the kernel object,
``SdpaFwdKernelSm90``, read for plan-time values only: ``tile_m``, ``tile_n``, ``head_dim``, ``dtype``, ``tail_widths``
(``kernel_key.ragged_tail_widths``), ``num_consumer_wg``, ``threads_per_wg``, ``key`` and ``convert_p``):

- :func:`tail_block`: the first key block's S GEMM at the narrowest compiled width W covering the visible keys (N = 64 /
  128 / the key tile, chosen at runtime, warpgroup-uniform), its mask, first online softmax and P convert on those W
  columns, P landing in the leading W / 16 k-blocks of the full ``tOrP``; returns ``(width index, P views of the
  narrower widths)``;
- :func:`pv_gemm_tail`: a tile of one key block: the PV GEMM at that width (k-loop cut), waited on inside its branch;
- :func:`mask_block`: the causal / window mask of a later key block under a runtime test (the peeled second block's
  step, which may lie in a masked range or not).

The PV GEMM of the first block at its width in the peeled second step is ``SdpaFwdKernelSm90.step``'s ``tail``
argument. Every WGMMA issued here is waited on inside its branch (an asynchronous WGMMA in flight across the merge of
runtime branches makes ptxas serialize all of the kernel's WGMMAs, C7515).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.mask import MaskInfo
from .._device.mma_sm90 import acc_layout_as_a, acc_view_mn, wgmma
from .._device.softmax import OnlineSoftmax


@cute.jit
def tail_block(
    plan,
    tiled_mma_qk: cute.TiledMma,
    tOrP: cute.Tensor,
    tSrQ: cute.Tensor,
    sK: cute.Tensor,
    pipeline_k,
    kv_state,
    softmax: OnlineSoftmax,
    mask: MaskInfo,
    m_block: Int32,
    n_block: Int32,
    wg_idx: Int32,
    tidx: Int32,
):
    """``key.ragged_tail``: the first key block (the highest) at the width this warpgroup's 64 rows can see. The keys
    it may see end at min(seqlen_k, its last row's causal / window right limit + 1) (the sequence's partial last
    block, the causal diagonal); the narrowest of ``plan.tail_widths`` covering them is chosen at runtime (warpgroup-
    uniform) and the S GEMM runs at that N (an m64nWk16 WGMMA) on the first W rows of the K stage; the mask (key
    length, causal, window), the online softmax and the P convert work on those W columns alone, P landing in the
    leading W / 16 k-blocks of ``tOrP`` (its fragment is compact in k-block order). Returns ``(width index, P
    views)``: the P views of the narrower widths, for :func:`pv_gemm_tail`."""
    widths = plan.tail_widths
    col_end = mask.seqlen_k
    if const_expr(plan.key.mask_right):
        row_hi = (m_block * plan.tile_m + (wg_idx + 1) * 64 - 1) // mask.rows_per_query
        col_end = cutlass.min(col_end, row_hi + mask.offset + mask.window_right + 1)
    visible = col_end - n_block * plan.tile_n
    sel = Int32(0)
    for j in cutlass.range_constexpr(len(widths) - 1):
        if visible > widths[j]:
            sel = sel + 1
    wg_layout = cute.make_layout(plan.num_consumer_wg, stride=plan.threads_per_wg)
    views = []
    pipeline_k.consumer_wait(kv_state)
    for j in cutlass.range_constexpr(len(widths)):
        w = widths[j]
        tiled_mma_w = tiled_mma_qk
        if const_expr(w != plan.tile_n):
            tiled_mma_w = sm90_utils.make_trivial_tiled_mma(
                plan.dtype,
                plan.dtype,
                warpgroup.OperandMajorMode.K,
                warpgroup.OperandMajorMode.K,
                Float32,
                atom_layout_mnk=(plan.tile_m // 64, 1, 1),
                tiler_mn=(64, w),
            )
        wg_mma_w = tiled_mma_w.get_slice(wg_layout(wg_idx))
        shape_w = wg_mma_w.partition_shape_C((plan.tile_m, w))
        p_w = cute.make_tensor(tOrP.iterator, cute.make_layout_like(acc_layout_as_a(cute.make_layout(shape_w))))
        # a prefix of tOrP: the same (compact) strides, the k-block mode outermost
        assert p_w.layout.stride == tOrP.layout.stride, f"ragged_tail: P view {p_w.layout} is not a prefix of {tOrP.layout}"
        if const_expr(w != plan.tile_n):
            views.append(p_w)
        if sel == j:
            tail_width(plan, tiled_mma_w, wg_mma_w, shape_w, p_w, tSrQ, sK, kv_state.index, softmax, mask, m_block, n_block, tidx, w)
    pipeline_k.consumer_release(kv_state)
    return sel, tuple(views)


@cute.jit
def tail_width(
    plan,
    tiled_mma_w: cute.TiledMma,
    wg_mma_w,
    shape_w: cutlass.Constexpr,
    p_w: cute.Tensor,
    tSrQ: cute.Tensor,
    sK: cute.Tensor,
    stage: Int32,
    softmax: OnlineSoftmax,
    mask: MaskInfo,
    m_block: Int32,
    n_block: Int32,
    tidx: Int32,
    w: cutlass.Constexpr[int],
):
    """:func:`tail_block` at width ``w``: S = Q K[:w]^T, masked, softmax (first block), P into ``p_w``. S has its own
    accumulator (aliasing the leading registers of the full one makes ptxas serialize every WGMMA of the kernel,
    C7511 'insufficient register resources for the wgmma pipeline'); nothing else is live here."""
    acc_w = cute.make_rmem_tensor(shape_w, Float32)
    sK_w = cute.flat_divide(sK, (w, plan.head_dim))[None, None, 0, 0, None]
    tSrK_w = wg_mma_w.make_fragment_B(wg_mma_w.partition_B(sK_w))
    wgmma(tiled_mma_w, acc_w, tSrQ, tSrK_w[None, None, None, stage], zero_init=True, wg_wait=0)
    cS = cute.make_identity_tensor((plan.tile_m, w))
    tScS_mn = acc_view_mn(tiled_mma_w.get_slice(tidx).partition_C(cS))
    t0ScS_mn = acc_view_mn(tiled_mma_w.get_slice(0).partition_C(cS))
    if const_expr(plan.key.mask_r2p):
        mask.apply_r2p(acc_w, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=True, mask_causal_window=True)
    else:
        mask.apply(acc_w, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=True, mask_causal_window=True)
    softmax.online_softmax(acc_w, is_first=True)
    plan.convert_p(acc_w, p_w)


@cute.jit
def mask_block(
    mask_r2p: cutlass.Constexpr[bool], acc_S: cute.Tensor, mask: MaskInfo, tScS_mn: cute.Tensor, t0ScS_mn: cute.Tensor, m_block: Int32, n_block: Int32
):
    """The causal / window mask of a key block past the first (no key-length mask), as the plan spells it
    (``mask_r2p``: ``key.mask_r2p``)."""
    if const_expr(mask_r2p):
        mask.apply_r2p(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=False, mask_causal_window=True)
    else:
        mask.apply(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=False, mask_causal_window=True)


@cute.jit
def pv_gemm_tail(tiled_mma_pv: cute.TiledMma, acc_O: cute.Tensor, tOrP: cute.Tensor, tOrVt: cute.Tensor, views, sel: Int32):
    """``key.ragged_tail``, a tile of one key block: O += P V for it, its k-loop stopped at the block's width
    ``tail_widths[sel]`` (``views``: the P of the narrower widths; P's later columns are zero), waited on inside the
    branch (no WGMMA in flight across the branches' merge)."""
    for j in cutlass.range_constexpr(len(views)):
        if sel == j:
            wgmma(tiled_mma_pv, acc_O, views[j], tOrVt, zero_init=False, wg_wait=0)
    if sel == len(views):
        wgmma(tiled_mma_pv, acc_O, tOrP, tOrVt, zero_init=False, wg_wait=0)
