"""Flash attention forward for Hopper (sm_90a), warp-specialized, in CuTe DSL.

Computes, per (batch b, query head h, query row i)::

    O[b, h, i, :]  = softmax(scale * Q[b, h, i, :] @ K[b, h // G, :, :]^T  (+ mask) [, sink]) @ V[b, h // G, :, :]
    LSE[b, h, i]   = logsumexp of the same row (natural log; base 2 with ``lse_log2``)

with G = H_q / H_kv (GQA / MQA). fp16 or bf16 in and out, fp32 accumulation and softmax.

Layouts (every tensor's head dim has unit stride; other strides are arbitrary multiples of 16 bytes and are
encoded in the TMA descriptors, so BSHD and BHSD buffers are both read natively, no copy):

- dense: Q (B, H, S_q, D), K (B, H_kv, S_kv, D), V (B, H_kv, S_kv, D_v), O (B, H, S_q, D_v), LSE (B, H, S_q) fp32;
- THD varlen: Q (T_q, H, D), K/V (T_kv, H_kv, D), O (T_q, H, D_v), LSE (H, T_q), int32 ``cu_seqlens`` (B + 1);
- paged KV (``key.page_size``): dense Q, K/V page pools (pages, page_size, H_kv, D) seen as one batch of pool rows,
  int32 page table (B, max_pages), per-sequence KV lengths from ``cu_seqlens_kv``; pages of a key tile or more (one TMA
  per block) or shorter (one TMA per page into the stage's rows: ``load_small_pages``).

Plan options (compile-key fields): ``page_prefetch`` (page ids from a window of 32 page-table entries held in the
producer warp's lanes), ``tile_m64`` (64-row query tile, one consumer warpgroup), ``kv_stages`` (K/V ring depth),
``tile_n`` (key tile rows), ``packed_cvt`` (P converted in bf16x2 / f16x2 pairs, see ``convert_p``), ``persistent``
(dense: a grid of at most the SM count walking the tiles, see ``persistent_tiles``), ``varlen_lpt`` (THD: the tile
order's L2 groups made of whole heads, see ``_device/tile_scheduler.py``), ``varlen_compact`` (THD: one CTA per real
tile, the batch from a warp prefix sum, per-sequence L2 sections longest-first: ``varlen_schedule.py``),
``varlen_tma_o`` (THD: O stored by TMA through a ragged view, see ``RAGGED_ROWS``), ``tile_m`` (192: three consumer
warpgroups, GEMM issue round-robin through the WG_SCHED barriers), ``o_rescale_early`` (O rescaled under the next S
GEMM, see ``step``), ``mask_r2p`` (masks as per-row 32-bit keep masks, one select per score: ``MaskInfo.apply_r2p``),
``persistent_pairs`` (persistent work unit = query blocks M - 1 - j and j of one head: ``tile_pair`` in
``_device/tile_scheduler.py``), ``exp2_emu`` (one exponential in N of the unmasked blocks on the FMA pipe:
``_device/softmax.exp2_fma``), ``ragged_tail`` (each warpgroup's first key block, the partial last block or the causal
diagonal, at the width its rows see: S GEMM N = 64 / 128, softmax on that slice, PV k-loop cut: ``ragged_tail.py``),
``spin_wait`` / ``spin_wait_producer`` (the consumers' full-barrier / the producer's empty-barrier waits as a try_wait
spin without the 10 ms suspend-time hint, so no NANOSLEEP: ``_device/pipeline.consumer_wait`` / ``producer_acquire``),
``q_stages`` (2: two Q buffers on a persistent plan with O in its own shared-memory tile, ``kernel_key.separate_o``),
``wg_epilogue`` (each consumer warpgroup stores its own 64 rows of O: ``epilogue_wg``), ``pinned_desc`` (the key-block
loop's GEMMs from descriptors pinned once per tile: ``_device/wgmma_desc.py``) and ``kv_multicast`` (clusters of two
CTAs on consecutive query blocks of one head, each loading half of every K / V tile by TMA multicast into both:
``load``, ``persistent_tiles``).

Split-KV (``key.split_kv``): each tile's key blocks are shared by ``num_splits`` CTAs writing fp32 partial O / LSE to
the caller's workspace; the same launch then runs ``combine`` (one warp per output row) to merge them.

Every extent (B, H, S, T) is a runtime argument: one compiled artifact serves every shape and token total.

Structure (one CTA = one 128-row query tile of one (batch, head)):

- warpgroup 0, warp 0: producer. TMA loads Q once, then K and V tiles into an ``num_stages`` ring
  (``PipelineTmaAsync`` on mbarriers), key blocks in descending order;
- warpgroups 1 and 2: consumers, 64 query rows each. S = Q K^T (SS WGMMA), masks, online softmax in fp32
  (exp2 with the scale folded into one FFMA), P converted in registers and fed to O += P V (RS WGMMA).
  Intra-warpgroup overlap: the S GEMM of block n is issued together with the PV GEMM of block n + 1 and the
  softmax of block n runs while the PV GEMM drains; with ``pingpong`` a pair of named barriers orders the two
  warpgroups' GEMM issue so one warpgroup's softmax overlaps the other's GEMMs;
- epilogue: O normalized, written to shared memory (stmatrix, reusing Q's buffer) and stored with one TMA
  store (dense) or predicated 16-byte stores (varlen, so no row of a neighbouring sequence is touched).

Tests: packages/cudnn-sdpa/tests (compile-only on CPU; GPU correctness and detectors on the GPU host).
Benchmark: benchmarks/sdpa_fwd.py.
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warp, warpgroup

from .._device.kernel_plan import DTYPES, WarpSpecializedPlanSm90, fake_gmem_ptr
from .._device.mask import MaskInfo
from .._device.mma_sm90 import acc_view_as_a, acc_view_mn, transpose_view, wgmma
from .._device.pipeline import (
    NamedBarrier,
    consumer_state,
    consumer_wait,
    make_tma_pipeline,
    prefetch_tma_descriptors,
    producer_acquire,
    producer_state,
)
from .._device.seqlen import cu_seqlens_tensors, sequence_extents
from .._device.softmax import OnlineSoftmax
from .._device.tile_scheduler import SingleTileScheduler, StaticPersistentTileScheduler
from .._device.wgmma_desc import desc, k_offsets, pin, wgmma_rs_pinned, wgmma_ss_pinned
from . import ragged_tail
from .kernel_key import COMBINE_ROWS_PER_CTA, SdpaFwdKey, ragged_tail_widths, separate_o, tile_config
from .varlen_schedule import grid_blocks, l2_blocks, varlen_tile

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
#: varlen_tma_o: rows of the ragged O view (a sequence's rows end at this row index) and the extent of its token mode.
RAGGED_ROWS = 1 << 30
RAGGED_END = (1 << 31) - 1


class SdpaFwdKernelSm90(WarpSpecializedPlanSm90):
    """The kernel class: ``__init__`` holds the plan (the compile key), ``__call__`` prepares the launch."""

    def __init__(self, key: SdpaFwdKey):
        super().__init__(key)
        self.tile_m, self.tile_n, self.num_stages, self.pingpong = tile_config(key.head_dim, key.head_dim_v)
        if key.kv_stages:
            self.num_stages = key.kv_stages
        if key.tile_n:
            self.tile_n = key.tile_n
        if key.tile_m == 192:  # three consumer warpgroups of 64 rows, GEMM issue round-robin (see step)
            self.tile_m = 192
            self.num_consumer_wg = 3
            self.num_mma_threads = self.num_consumer_wg * self.threads_per_wg
            self.num_threads = self.num_mma_threads + self.threads_per_wg
            self.num_mma_regs, self.num_producer_regs = 160, 32  # 3 * 128 * 160 + 128 * 32 = 64K registers
        # persistent: O gets its own shared-memory tile when the budget allows, so Q is released after the last S GEMM
        # and the next tile's Q loads under the last PV GEMM and the epilogue (else O reuses Q's buffer, as by default).
        self.separate_o = separate_o(key)
        # Pages shorter than the key tile: each stage is filled by one TMA per page (see load_small_pages).
        self.small_pages = key.paged and key.page_size < self.tile_n
        if key.tile_m64:  # one consumer warpgroup on a 64-row query tile (nothing to ping-pong with)
            self.tile_m, self.pingpong = 64, False
            self.num_consumer_wg = 1
            self.num_mma_threads = self.num_consumer_wg * self.threads_per_wg
            self.num_threads = self.num_mma_threads + self.threads_per_wg
        self.q_stages = max(key.q_stages, 1)  # Q buffers (2: persistent with O in its own tile, see SdpaFwdKey.q_stages)
        assert (self.q_stages == 1 and not key.wg_epilogue) or self.separate_o, "q_stages = 2 and wg_epilogue need O in its own smem tile"
        # ragged_tail: the S GEMM widths of the first key block (see ragged_tail.tail_block)
        self.tail_widths = ragged_tail_widths(self.tile_n) if key.ragged_tail else ()
        # kv_multicast: clusters of two CTAs along the query blocks share every K / V tile (see load)
        self.cluster_m = 2 if key.kv_multicast else 1
        assert self.cluster_m == 1 or (key.persistent and not (key.varlen or key.paged or key.split_kv or key.pack_gqa or key.persistent_pairs))

    # ------------------------------------------------------------------------------------------------
    # host side
    # ------------------------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        lse_ptr: cute.Pointer | None,
        sinks_ptr: cute.Pointer | None,
        cu_q_ptr: cute.Pointer | None,
        cu_k_ptr: cute.Pointer | None,
        opart_ptr: cute.Pointer | None,  # split-KV: fp32 partial O [splits, B, H, S_q, D_v] (workspace)
        lsepart_ptr: cute.Pointer | None,  # split-KV: fp32 partial LSE [splits, B, H, S_q], log2 units (workspace)
        page_table_ptr: cute.Pointer | None,  # paged KV: int32 [B, max_pages] (row stride page_table_stride)
        batch: Int32,
        heads: Int32,
        heads_kv: Int32,
        seqlen_q: Int32,  # S_q (dense) or T_q (varlen: total query tokens)
        seqlen_k: Int32,  # S_kv or T_kv
        max_seqlen_q: Int32,  # grid extent along queries (= S_q for dense)
        group_heads: Int32,  # (head, batch) pairs per L2 group of the tile order (see _device/tile_scheduler.py)
        num_splits: Int32,  # split-KV: key splits per tile; persistent: the most CTAs of the grid (the SM count); else ignored
        page_table_stride: Int32,  # paged KV: elements between page-table rows (ignored when not paged)
        # (batch, head, seq) strides in elements of Q, K, V, O, LSE, as flat scalars (cheap to pass through tvm-ffi);
        # the batch stride is a placeholder span for varlen (see api._tma_strides)
        q_sb: Int64,
        q_sh: Int64,
        q_ss: Int64,
        k_sb: Int64,
        k_sh: Int64,
        k_ss: Int64,
        v_sb: Int64,
        v_sh: Int64,
        v_ss: Int64,
        o_sb: Int64,
        o_sh: Int64,
        o_ss: Int64,
        lse_sb: Int64,
        lse_sh: Int64,
        lse_ss: Int64,
        scale_log2: Float32,
        window_left: Int32,
        window_right: Int32,
        stream: cuda.CUstream,
    ):
        D, Dv = self.head_dim, self.head_dim_v
        q_strides, k_strides, v_strides = (q_sb, q_sh, q_ss), (k_sb, k_sh, k_ss), (v_sb, v_sh, v_ss)
        o_strides, lse_strides = (o_sb, o_sh, o_ss), (lse_sb, lse_sh, lse_ss)
        div = 128 // self.dtype.width  # 16-byte strides, checked by the adapter

        def strides(s):
            return tuple(cute.assume(x, divby=div) for x in s)

        qs, ks, vs, os_ = strides(q_strides), strides(k_strides), strides(v_strides), strides(o_strides)
        batch_kv = batch if const_expr(not self.key.varlen and not self.key.paged) else Int32(1)  # THD / page pool: one batch
        batch_q = batch if const_expr(not self.key.varlen) else Int32(1)
        # (S, D, H, B) views: the two tiled modes first, for local_tile and the TMA box.
        mQ = cute.make_tensor(q_ptr, cute.make_layout((seqlen_q, D, heads, batch_q), stride=(qs[2], 1, qs[1], qs[0])))
        mK = cute.make_tensor(k_ptr, cute.make_layout((seqlen_k, D, heads_kv, batch_kv), stride=(ks[2], 1, ks[1], ks[0])))
        mV = cute.make_tensor(v_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, batch_kv), stride=(vs[2], 1, vs[1], vs[0])))
        mO = cute.make_tensor(o_ptr, cute.make_layout((seqlen_q, Dv, heads, batch_q), stride=(os_[2], 1, os_[1], os_[0])))
        mLSE = None
        if const_expr(lse_ptr is not None):
            mLSE = cute.make_tensor(lse_ptr, cute.make_layout((seqlen_q, heads, batch_q), stride=(lse_strides[2], lse_strides[1], lse_strides[0])))
        mO_rows, mLSE_rows = mO, mLSE  # (S, D_v, H, B) / (S, H, B) views for the split-KV combine
        grid_heads = heads
        rows_per_query = 1
        if const_expr(self.key.pack_gqa):
            # The G query heads of a kv head become rows p = s * G + g of one tile: ((G, S), ...) row modes.
            G = self.key.qhead_per_kvhead
            rows_per_query = G
            grid_heads = heads_kv
            mQ = cute.make_tensor(q_ptr, cute.make_layout(((G, seqlen_q), D, heads_kv, batch_q), stride=((qs[1], qs[2]), 1, qs[1] * G, qs[0])))
            mO = cute.make_tensor(o_ptr, cute.make_layout(((G, seqlen_q), Dv, heads_kv, batch_q), stride=((os_[1], os_[2]), 1, os_[1] * G, os_[0])))
            if const_expr(lse_ptr is not None):
                mLSE = cute.make_tensor(
                    lse_ptr,
                    cute.make_layout(((G, seqlen_q), heads_kv, batch_q), stride=((lse_strides[1], lse_strides[2]), lse_strides[1] * G, lse_strides[0])),
                )
        mSinks = None
        if const_expr(sinks_ptr is not None):
            mSinks = cute.make_tensor(sinks_ptr, cute.make_layout((heads,)))
        mOpart, mLSEpart, splits_arg = None, None, None
        if const_expr(self.key.split_kv):
            # [splits, B, H, S_q, D_v] fp32; the kernel addresses split s of batch b as batch index s * B + b.
            s_row = Int64(Dv)
            s_head = Int64(seqlen_q) * Dv
            s_batch = s_head * heads
            mOpart = cute.make_tensor(opart_ptr, cute.make_layout((seqlen_q, Dv, heads, batch * num_splits), stride=(s_row, 1, s_head, s_batch)))
            l_head = Int64(seqlen_q)
            l_batch = l_head * heads
            mLSEpart = cute.make_tensor(lsepart_ptr, cute.make_layout((seqlen_q, heads, batch * num_splits), stride=(1, l_head, l_batch)))
            if const_expr(self.key.pack_gqa):
                G = self.key.qhead_per_kvhead
                mOpart = cute.make_tensor(
                    opart_ptr, cute.make_layout(((G, seqlen_q), Dv, heads_kv, batch * num_splits), stride=((s_head, s_row), 1, s_head * G, s_batch))
                )
                mLSEpart = cute.make_tensor(
                    lsepart_ptr, cute.make_layout(((G, seqlen_q), heads_kv, batch * num_splits), stride=((l_head, 1), l_head * G, l_batch))
                )
            splits_arg = num_splits
        mCuQ, mCuK = cu_seqlens_tensors(cu_q_ptr, cu_k_ptr, batch, self.key.varlen)
        mPageTable = None
        if const_expr(self.key.paged):
            # K/V rows are pool tokens (page * page_size + slot); a batch's KV length is cu_seqlens_kv[b + 1] - cu_seqlens_kv[b].
            mCuK = cute.make_tensor(cu_k_ptr, cute.make_layout((batch + 1,)))
            mPageTable = cute.make_tensor(page_table_ptr, cute.make_layout((batch, page_table_stride), stride=(page_table_stride, 1)))

        tiled_mma_qk = sm90_utils.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            warpgroup.OperandMajorMode.K,
            warpgroup.OperandMajorMode.K,
            Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1),
            tiler_mn=(64, self.tile_n),
        )
        tiled_mma_pv = sm90_utils.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            warpgroup.OperandMajorMode.K,
            warpgroup.OperandMajorMode.MN,
            Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1),
            tiler_mn=(64, Dv),
            a_source=warpgroup.OperandSource.RMEM,
        )
        sQ_layout = self._smem_layout(self.tile_m, D)
        if const_expr(self.q_stages > 1):
            sQ_layout = self._smem_layout(self.tile_m, D, self.q_stages)
        sK_layout = self._smem_layout(self.tile_n, D, self.num_stages)
        sV_layout = self._smem_layout(self.tile_n, Dv, self.num_stages)
        sO_layout = self._smem_layout(self.tile_m, Dv)
        if const_expr(self.key.wg_epilogue):  # one (64, D_v) half per consumer warpgroup, each stored by its own TMA
            sO_layout = self._smem_layout(64, Dv, self.num_consumer_wg)

        @cute.struct
        class SharedStorage:
            mbar_q: cute.struct.MemRange[cutlass.Int64, 2]
            mbar_k: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            mbar_v: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            smem_q: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sK_layout)], 1024]
            smem_v: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sV_layout)], 1024]

        @cute.struct
        class SharedStorageSeparateO:
            mbar_q: cute.struct.MemRange[cutlass.Int64, self.q_stages * 2]
            mbar_k: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            mbar_v: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            smem_q: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sK_layout)], 1024]
            smem_v: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sV_layout)], 1024]
            smem_o: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sO_layout)], 1024]

        if const_expr(self.separate_o):
            SharedStorage = SharedStorageSeparateO
        tma_atom_Q, tma_Q = None, mQ
        if const_expr(not self.key.pack_gqa):
            tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mQ, cute.select(sQ_layout, mode=[0, 1]), (self.tile_m, D))
        if const_expr(not self.small_pages):
            # kv_multicast: each CTA of a cluster loads 1 / cluster_m of a tile's rows and multicasts them to the cluster
            kv_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if const_expr(self.cluster_m > 1) else cpasync.CopyBulkTensorTileG2SOp()
            tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(kv_op, mK, cute.select(sK_layout, mode=[0, 1]), (self.tile_n, D), self.cluster_m)
            tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(kv_op, mV, cute.select(sV_layout, mode=[0, 1]), (self.tile_n, Dv), self.cluster_m)
        else:
            # One page = the first page_size rows of a stage (the stage layout restricted to them: same swizzle phase,
            # same column-chunk stride), so a page's box lands in rows [j * page_size, (j + 1) * page_size) of the stage.
            ps = self.key.page_size
            sK_page = cute.composition(cute.select(sK_layout, mode=[0, 1]), cute.make_layout((ps, D), stride=(1, self.tile_n)))
            sV_page = cute.composition(cute.select(sV_layout, mode=[0, 1]), cute.make_layout((ps, Dv), stride=(1, self.tile_n)))
            tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mK, sK_page, (ps, D), 1)
            tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mV, sV_page, (ps, Dv), 1)
        tma_atom_O, tma_O = None, None
        if const_expr(not self.key.varlen and not self.key.pack_gqa and not self.key.split_kv):
            if const_expr(self.key.wg_epilogue):
                tma_atom_O, tma_O = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mO, cute.select(sO_layout, mode=[0, 1]), (64, Dv))
            else:
                tma_atom_O, tma_O = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mO, sO_layout, (self.tile_m, Dv))
        if const_expr(self.key.varlen_tma_o):
            # A ragged view of the THD O for one TMA store per tile (rows past the sequence's end clipped by the TMA
            # bounds): rows (RAGGED_ROWS, D_v, H, RAGGED_END) with the last mode stepping tokens like the first, over a
            # base RAGGED_ROWS tokens before O. Sequence b's tile stores at row RAGGED_ROWS - seqlen + m * tile_m and
            # last-mode index offset + seqlen: address O + (offset + m * tile_m + r) tokens, r < seqlen - m * tile_m.
            mO_shifted = cute.domain_offset((-RAGGED_ROWS, None, None, None), mO)
            mO_ragged = cute.make_tensor(mO_shifted.iterator, cute.make_layout((RAGGED_ROWS, Dv, heads, RAGGED_END), stride=(os_[2], 1, os_[1], os_[2])))
            tma_atom_O, tma_O = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mO_ragged, sO_layout, (self.tile_m, Dv))
        tx_q = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        tx_k = cute.size_in_bytes(self.dtype, cute.select(sK_layout, mode=[0, 1]))
        tx_v = cute.size_in_bytes(self.dtype, cute.select(sV_layout, mode=[0, 1]))

        num_m_blocks = (max_seqlen_q * rows_per_query + self.tile_m - 1) // self.tile_m
        if const_expr(self.key.split_kv):
            num_m_blocks = num_m_blocks * num_splits  # (split, m_block) pairs, decoded in the kernel
        grid = SingleTileScheduler.grid(num_m_blocks, grid_heads, batch)
        if const_expr(not (self.key.mask_right or self.key.mask_left or self.key.varlen_lpt)):  # 3-D when group_heads = 1
            grid = SingleTileScheduler.grid(num_m_blocks, grid_heads, batch, group_heads)
        if const_expr(self.key.varlen_compact):  # one CTA per real tile (plus < B per head at the end)
            grid = (grid_blocks(seqlen_q, batch, self.tile_m) * grid_heads, 1, 1)
        if const_expr(self.key.persistent):
            grid = StaticPersistentTileScheduler.grid(num_m_blocks, grid_heads, batch, num_splits)
            if const_expr(self.key.persistent_pairs):
                grid = StaticPersistentTileScheduler.grid_pairs(num_m_blocks, grid_heads, batch, num_splits)
            if const_expr(self.cluster_m > 1):
                grid = StaticPersistentTileScheduler.grid_clusters(num_m_blocks, grid_heads, batch, num_splits, self.cluster_m)
        self.kernel(
            tma_Q,
            tma_K,
            tma_V,
            tma_O,
            mO,
            mLSE,
            mSinks,
            mCuQ,
            mCuK,
            mOpart,
            mLSEpart,
            splits_arg,
            mPageTable,
            tma_atom_Q,
            tma_atom_K,
            tma_atom_V,
            tma_atom_O,
            seqlen_q,
            seqlen_k,
            num_m_blocks,
            grid_heads,
            batch,
            group_heads,
            scale_log2,
            window_left,
            window_right,
            sQ_layout,
            sK_layout,
            sV_layout,
            sO_layout,
            tiled_mma_qk,
            tiled_mma_pv,
            tx_q,
            tx_k,
            tx_v,
            SharedStorage,
        ).launch(
            grid=grid,
            block=[self.num_threads, 1, 1],
            cluster=(self.cluster_m, 1, 1) if const_expr(self.cluster_m > 1) else None,
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )
        if const_expr(self.key.split_kv):
            # Merge the splits: same stream, right after; O and LSE in the caller's layout.
            cs_row = Int64(Dv)
            cs_head = Int64(seqlen_q) * Dv
            cs_batch = cs_head * heads
            mOp = cute.make_tensor(
                opart_ptr, cute.make_layout((Dv, seqlen_q, heads, batch, num_splits), stride=(1, cs_row, cs_head, cs_batch, cs_batch * batch))
            )
            cl_head = Int64(seqlen_q)
            cl_batch = cl_head * heads
            mLp = cute.make_tensor(lsepart_ptr, cute.make_layout((seqlen_q, heads, batch, num_splits), stride=(1, cl_head, cl_batch, cl_batch * batch)))
            num_rows = batch * heads * seqlen_q
            rows_per_cta = COMBINE_ROWS_PER_CTA
            self.combine(mOp, mLp, mO_rows, mLSE_rows, mSinks, num_splits, heads, seqlen_q, num_rows).launch(
                grid=((num_rows + rows_per_cta - 1) // rows_per_cta, 1, 1), block=[32 * rows_per_cta, 1, 1], stream=stream
            )

    # ------------------------------------------------------------------------------------------------
    # device side
    # ------------------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO_tma: cute.Tensor | None,
        mO: cute.Tensor,
        mLSE: cute.Tensor | None,
        mSinks: cute.Tensor | None,
        mCuQ: cute.Tensor | None,
        mCuK: cute.Tensor | None,
        mOpart: cute.Tensor | None,
        mLSEpart: cute.Tensor | None,
        num_splits: Int32 | None,
        mPageTable: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom | None,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_O: cute.CopyAtom | None,
        seqlen_q_static: Int32,
        seqlen_k_static: Int32,
        num_m_blocks: Int32,
        num_heads: Int32,
        num_batch: Int32,
        group_heads: Int32,
        scale_log2: Float32,
        window_left: Int32,
        window_right: Int32,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        tx_q: cutlass.Constexpr[int],
        tx_k: cutlass.Constexpr[int],
        tx_v: cutlass.Constexpr[int],
        SharedStorage: cutlass.Constexpr,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        prefetch_tma_descriptors(warp_idx, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_O)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        num_consumer_warps = self.num_mma_threads // 32
        pipeline_q = make_tma_pipeline(storage.mbar_q.data_ptr(), self.q_stages, num_consumer_warps, tx_q)
        pipeline_k = make_tma_pipeline(storage.mbar_k.data_ptr(), self.num_stages, num_consumer_warps, tx_k, self.cluster_m)
        pipeline_v = make_tma_pipeline(storage.mbar_v.data_ptr(), self.num_stages, num_consumer_warps, tx_v, self.cluster_m)
        cute.arch.mbarrier_init_fence()

        sQ = storage.smem_q.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.smem_k.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.smem_v.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        sO = storage.smem_q.get_tensor(sO_layout.outer, swizzle=sO_layout.inner, dtype=self.dtype)
        if const_expr(self.separate_o):
            sO = storage.smem_o.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        sVt = transpose_view(sV)

        if const_expr(self.key.persistent):
            self.persistent_tiles(
                mQ, mK, mV, mO_tma, mO, mLSE, mSinks, mCuQ, mCuK, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_O, sQ, sK, sV, sVt, sO,
                pipeline_q, pipeline_k, pipeline_v, seqlen_q_static, seqlen_k_static, num_m_blocks, num_heads, num_batch, group_heads,
                scale_log2, window_left, window_right, tiled_mma_qk, tiled_mma_pv, warp_idx,
            )  # fmt: skip
        else:
            if const_expr(self.key.varlen_compact):
                m_block, head, batch = varlen_tile(
                    mCuQ, num_heads, num_batch, self.tile_m, self.tile_n, l2_blocks(self.tile_n, self.head_dim, self.head_dim_v),
                    self.key.mask_right or self.key.mask_left,
                )  # fmt: skip
            else:
                m_block, head, batch = SingleTileScheduler(
                    num_m_blocks, num_heads, num_batch, group_heads, self.key.mask_right or self.key.mask_left, self.key.varlen_lpt
                ).tile()
            split = None
            if const_expr(self.key.split_kv):
                m_per_split = num_m_blocks // num_splits
                split = m_block // m_per_split
                m_block = m_block - split * m_per_split
            rows_per_query = self.key.qhead_per_kvhead if const_expr(self.key.pack_gqa) else 1
            head_kv = head if const_expr(self.key.pack_gqa) else head // self.key.qhead_per_kvhead
            # Per-sequence extents and token offsets (varlen reads them from cu_seqlens on the device).
            seqlen_q, seqlen_k, offset_q, offset_k = sequence_extents(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, self.key.varlen)
            batch_tensor = batch
            if const_expr(self.key.varlen):
                batch_tensor = Int32(0)
            if const_expr(self.key.paged):
                seqlen_k = mCuK[batch + 1] - mCuK[batch]
            mask_offset = Int32(0)
            if const_expr(self.key.bottom_right):
                mask_offset = seqlen_k - seqlen_q
            mask = MaskInfo(
                self.tile_m, self.tile_n, self.key.mask_right, self.key.mask_left, seqlen_q, seqlen_k, mask_offset, window_left, window_right, rows_per_query
            )
            n_block_min, n_block_max = mask.n_block_range(m_block)
            split_empty = None
            if const_expr(self.key.split_kv):
                # This split's share of the key blocks. An empty share recomputes the last block and reports LSE = -inf
                # (weight 0 in the combine), so every CTA runs the same pipeline protocol.
                per_split = (n_block_max - n_block_min + num_splits - 1) // num_splits
                split_lo = n_block_min + split * per_split
                split_hi = cutlass.min(split_lo + per_split, n_block_max)
                split_empty = split_lo >= split_hi
                n_block_min = cutlass.min(split_lo, n_block_max - 1)
                n_block_max = cutlass.max(split_hi, n_block_min + 1)

            cute.arch.sync_threads()  # mbarrier init visible to every warp

            if m_block * self.tile_m < seqlen_q * rows_per_query:  # varlen: tiles past this sequence's end do nothing
                if warp_idx < 4:
                    cute.arch.setmaxregister_decrease(self.num_producer_regs)
                    if const_expr(self.small_pages):
                        if warp_idx == 0:
                            self.load_small_pages(
                                mQ, mK, mV, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipeline_q, pipeline_k, pipeline_v,
                                m_block, head, head_kv, batch_tensor, n_block_min, n_block_max, mPageTable, batch, seqlen_k,
                            )  # fmt: skip
                    else:
                        if warp_idx == 0:
                            self.load(
                                mQ,
                                mK,
                                mV,
                                sQ,
                                sK,
                                sV,
                                tma_atom_Q,
                                tma_atom_K,
                                tma_atom_V,
                                pipeline_q,
                                pipeline_k,
                                pipeline_v,
                                m_block,
                                head,
                                head_kv,
                                batch_tensor,
                                offset_q,
                                offset_k,
                                n_block_min,
                                n_block_max,
                                mPageTable,
                                batch,
                            )
                else:
                    cute.arch.setmaxregister_increase(self.num_mma_regs)
                    tidx = cute.arch.thread_idx()[0] - self.threads_per_wg
                    self.mma(
                        tiled_mma_qk,
                        tiled_mma_pv,
                        mQ if const_expr(self.key.pack_gqa) else None,
                        mO_tma,
                        mO,
                        mLSE,
                        mSinks,
                        sQ,
                        sK,
                        sVt,
                        sO,
                        tma_atom_O,
                        pipeline_q,
                        pipeline_k,
                        pipeline_v,
                        tidx,
                        scale_log2,
                        mask,
                        m_block,
                        head,
                        batch_tensor,
                        offset_q,
                        n_block_min,
                        n_block_max,
                        mOpart,
                        mLSEpart,
                        split,
                        split_empty,
                        num_batch,
                    )

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def persistent_tiles(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO_tma: cute.Tensor,
        mO: cute.Tensor,
        mLSE: cute.Tensor | None,
        mSinks: cute.Tensor | None,
        mCuQ: cute.Tensor | None,
        mCuK: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_O: cute.CopyAtom | None,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sVt: cute.Tensor,
        sO: cute.Tensor,
        pipeline_q,
        pipeline_k,
        pipeline_v,
        seqlen_q_static: Int32,
        seqlen_k_static: Int32,
        num_m_blocks: Int32,
        num_heads: Int32,
        num_batch: Int32,
        group_heads: Int32,
        scale_log2: Float32,
        window_left: Int32,
        window_right: Int32,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        warp_idx: Int32,
    ):
        """``key.persistent`` (dense or THD, one query tile per (m_block, head, batch)): each CTA runs its tiles of
        :class:`StaticPersistentTileScheduler` in turn. The producer and the consumers keep their pipeline states across
        tiles, so the producer issues the next tile's K/V loads while the consumers finish a tile. Q is released after the
        tile's last S GEMM when O has its own shared-memory tile (``separate_o``), else (O in Q's buffer) once the O
        store has read it; only then is it refilled.
        The ping-pong barrier's opening arrive is made once: each tile leaves exactly one arrive pending. THD varlen: a
        tile past its sequence's end is skipped by the producer and the consumers alike (no CTA launched for it)."""
        longest_first = self.key.mask_right or self.key.mask_left
        pairs = self.key.persistent_pairs
        if const_expr(self.cluster_m > 1):  # every CTA's mbarrier init visible to the cluster before a multicast or remote arrive
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()  # mbarrier init visible to every warp
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.num_producer_regs)
            if warp_idx == 0:
                q_state = producer_state(self.q_stages)
                kv_state = producer_state(self.num_stages)
                for t in cutlass.range(StaticPersistentTileScheduler.num_tiles_here(num_m_blocks, num_heads, num_batch, pairs, self.cluster_m), unroll=1):
                    m_block, head, batch = None, None, None
                    if const_expr(pairs):
                        m_block, head, batch = StaticPersistentTileScheduler.tile_pair(t, num_m_blocks, num_heads, num_batch, self.key.varlen_lpt)
                    else:
                        m_block, head, batch = StaticPersistentTileScheduler.tile(
                            t, num_m_blocks, num_heads, num_batch, group_heads, longest_first, self.key.varlen_lpt, self.cluster_m
                        )
                    mask, offset_q, offset_k = self.persistent_tile_mask(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, window_left, window_right)
                    n_block_min, n_block_max = mask.n_block_range(m_block)
                    if const_expr(self.cluster_m > 1) or m_block * self.tile_m < mask.seqlen_q:  # kv_multicast: the peer needs this half
                        q_state, kv_state = self.load(
                            mQ, mK, mV, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipeline_q, pipeline_k, pipeline_v,
                            m_block, head, head // self.key.qhead_per_kvhead, batch if const_expr(not self.key.varlen) else Int32(0),
                            offset_q, offset_k, n_block_min, n_block_max, None, batch, (q_state, kv_state),
                        )  # fmt: skip
        else:
            cute.arch.setmaxregister_increase(self.num_mma_regs)
            tidx = cute.arch.thread_idx()[0] - self.threads_per_wg
            if const_expr(self.pingpong):
                if cute.arch.make_warp_uniform(tidx // self.threads_per_wg) == 0:
                    cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.WG_SCHED_1), number_of_threads=2 * self.threads_per_wg)
            q_state = consumer_state(self.q_stages)
            kv_state = consumer_state(self.num_stages)
            for t in cutlass.range(StaticPersistentTileScheduler.num_tiles_here(num_m_blocks, num_heads, num_batch, pairs, self.cluster_m), unroll=1):
                m_block, head, batch = None, None, None
                if const_expr(pairs):
                    m_block, head, batch = StaticPersistentTileScheduler.tile_pair(t, num_m_blocks, num_heads, num_batch, self.key.varlen_lpt)
                else:
                    m_block, head, batch = StaticPersistentTileScheduler.tile(
                        t, num_m_blocks, num_heads, num_batch, group_heads, longest_first, self.key.varlen_lpt, self.cluster_m
                    )
                mask, offset_q, offset_k = self.persistent_tile_mask(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, window_left, window_right)
                n_block_min, n_block_max = mask.n_block_range(m_block)
                if const_expr(self.cluster_m > 1) or m_block * self.tile_m < mask.seqlen_q:  # kv_multicast: releases for the peer
                    q_state, kv_state = self.mma(
                        tiled_mma_qk, tiled_mma_pv, None, mO_tma, mO, mLSE, mSinks, sQ, sK, sVt, sO, tma_atom_O,
                        pipeline_q, pipeline_k, pipeline_v, tidx, scale_log2, mask, m_block, head,
                        batch if const_expr(not self.key.varlen) else Int32(0), offset_q,
                        n_block_min, n_block_max, None, None, None, None, num_batch, (q_state, kv_state),
                    )  # fmt: skip
            if const_expr(self.key.wg_epilogue):  # each warpgroup's last O store has read shared memory before the CTA exits
                if cute.arch.make_warp_uniform((tidx % self.threads_per_wg) // 32) == 0:
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
        if const_expr(self.cluster_m > 1):  # no CTA exits while its peer may still arrive on its barriers or multicast into it
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()

    @cute.jit
    def persistent_tile_mask(
        self,
        mCuQ: cute.Tensor | None,
        mCuK: cute.Tensor | None,
        batch: Int32,
        seqlen_q_static: Int32,
        seqlen_k_static: Int32,
        window_left: Int32,
        window_right: Int32,
    ):
        """``(mask, offset_q, offset_k)`` of sequence ``batch`` for a persistent tile: its extents (THD varlen: from
        cu_seqlens) and first tokens."""
        seqlen_q, seqlen_k, offset_q, offset_k = sequence_extents(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, self.key.varlen)
        mask_offset = Int32(0)
        if const_expr(self.key.bottom_right):
            mask_offset = seqlen_k - seqlen_q
        mask = MaskInfo(self.tile_m, self.tile_n, self.key.mask_right, self.key.mask_left, seqlen_q, seqlen_k, mask_offset, window_left, window_right, 1)
        return mask, offset_q, offset_k

    @cute.jit
    def load(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        pipeline_q,
        pipeline_k,
        pipeline_v,
        m_block: Int32,
        head: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_q: Int32,
        offset_k: Int32,
        n_block_min: Int32,
        n_block_max: Int32,
        mPageTable: cute.Tensor | None,
        batch_pt: Int32,
        states=None,
    ):
        """Producer warp: Q once, then K[n_max-1], (K[n-1], V[n]) pairs, V[n_min] (the consumers' order). Paged KV: key
        block n of the sequence is pool block page_table[b, n // (page_size / tile_n)] * (page_size / tile_n) + n % (...).
        ``states`` (persistent): the ``(q_state, kv_state)`` carried across tiles, returned advanced past this tile."""
        kv_batch = batch
        if const_expr(self.key.paged):
            kv_batch = Int32(0)
        mK_cur = mK[None, None, head_kv, kv_batch]
        mV_cur = mV[None, None, head_kv, kv_batch]
        if const_expr(self.key.varlen):
            mK_cur = cute.domain_offset((offset_k, 0), mK_cur)
            mV_cur = cute.domain_offset((offset_k, 0), mV_cur)
        gK = cute.local_tile(mK_cur, (self.tile_n, self.head_dim), (None, 0))
        gV = cute.local_tile(mV_cur, (self.tile_n, self.head_dim_v), (None, 0))
        # kv_multicast: this CTA's slice (rank r of cluster_m) of every K / V tile, written into every CTA of the cluster
        kv_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster()) if const_expr(self.cluster_m > 1) else 0
        mcast = {"mcast_mask": cutlass.Int16((1 << self.cluster_m) - 1)} if const_expr(self.cluster_m > 1) else {}
        kv_layout = cute.make_layout(self.cluster_m)
        tKsK, tKgK = cpasync.tma_partition(tma_atom_K, kv_rank, kv_layout, cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_atom_V, kv_rank, kv_layout, cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2))

        q_state, kv_state = states if const_expr(states is not None) else (producer_state(1), producer_state(self.num_stages))
        n_block = n_block_max - 1
        # page_prefetch: lanes hold a window of 32 page-table entries (see page_window); None otherwise.
        p_last, pt_base, pt_reg = None, None, None
        blk = None
        if const_expr(self.key.page_prefetch):
            p_last = n_block // (self.key.page_size // self.tile_n)
            pt_base, pt_reg = self.page_window(mPageTable, batch_pt, p_last, p_last)
            blk, pt_base, pt_reg = self.kv_block_window(mPageTable, batch_pt, n_block, p_last, pt_base, pt_reg)
        producer_acquire(pipeline_k, kv_state, self.key.spin_wait_producer)
        cute.copy(
            tma_atom_K,
            tKgK[None, self.kv_block(mPageTable, batch_pt, n_block) if const_expr(not self.key.page_prefetch) else blk],
            tKsK[None, kv_state.index],
            tma_bar_ptr=pipeline_k.producer_get_barrier(kv_state),
            **mcast,
        )
        if const_expr(not self.key.pack_gqa):  # pack-GQA: the consumers gather Q themselves
            mQ_cur = mQ[None, None, head, batch]
            if const_expr(self.key.varlen):
                mQ_cur = cute.domain_offset((offset_q, 0), mQ_cur)
            gQ = cute.local_tile(mQ_cur, (self.tile_m, self.head_dim), (m_block, 0))
            tQsQ, tQgQ = cpasync.tma_partition(tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2))
            if const_expr(self.q_stages > 1):
                tQsQ = tQsQ[None, q_state.index]
            producer_acquire(pipeline_q, q_state, self.key.spin_wait_producer)
            cute.copy(tma_atom_Q, tQgQ, tQsQ, tma_bar_ptr=pipeline_q.producer_get_barrier(q_state))
        for i in cutlass.range(n_block_max - 1 - n_block_min, unroll=1):
            n_prev = n_block_max - 1 - i
            prev_state = kv_state.clone()
            kv_state.advance()
            if const_expr(self.key.page_prefetch):
                blk_k, pt_base, pt_reg = self.kv_block_window(mPageTable, batch_pt, n_prev - 1, p_last, pt_base, pt_reg)
                blk_v, pt_base, pt_reg = self.kv_block_window(mPageTable, batch_pt, n_prev, p_last, pt_base, pt_reg)
            producer_acquire(pipeline_k, kv_state, self.key.spin_wait_producer)
            cute.copy(
                tma_atom_K,
                tKgK[None, self.kv_block(mPageTable, batch_pt, n_prev - 1) if const_expr(not self.key.page_prefetch) else blk_k],
                tKsK[None, kv_state.index],
                tma_bar_ptr=pipeline_k.producer_get_barrier(kv_state),
                **mcast,
            )
            producer_acquire(pipeline_v, prev_state, self.key.spin_wait_producer)
            cute.copy(
                tma_atom_V,
                tVgV[None, self.kv_block(mPageTable, batch_pt, n_prev) if const_expr(not self.key.page_prefetch) else blk_v],
                tVsV[None, prev_state.index],
                tma_bar_ptr=pipeline_v.producer_get_barrier(prev_state),
                **mcast,
            )
        if const_expr(self.key.page_prefetch):
            blk, pt_base, pt_reg = self.kv_block_window(mPageTable, batch_pt, n_block_min, p_last, pt_base, pt_reg)
        producer_acquire(pipeline_v, kv_state, self.key.spin_wait_producer)
        cute.copy(
            tma_atom_V,
            tVgV[None, self.kv_block(mPageTable, batch_pt, n_block_min) if const_expr(not self.key.page_prefetch) else blk],
            tVsV[None, kv_state.index],
            tma_bar_ptr=pipeline_v.producer_get_barrier(kv_state),
            **mcast,
        )
        if const_expr(states is not None):
            q_state.advance()
            kv_state.advance()
        return q_state, kv_state

    @cute.jit
    def kv_block(self, mPageTable: cute.Tensor | None, batch: Int32, n_block: Int32) -> Int32:
        """The K/V tile index of key block ``n_block``: itself, or (paged) its page's block in the pool."""
        res = n_block
        if const_expr(self.key.paged):
            per_page = self.key.page_size // self.tile_n
            page = mPageTable[batch, n_block // per_page]
            res = page * per_page + n_block % per_page
        return res

    @cute.jit
    def load_small_pages(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        tma_atom_Q: cute.CopyAtom | None,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        pipeline_q,
        pipeline_k,
        pipeline_v,
        m_block: Int32,
        head: Int32,
        head_kv: Int32,
        batch: Int32,
        n_block_min: Int32,
        n_block_max: Int32,
        mPageTable: cute.Tensor,
        batch_pt: Int32,
        seqlen_k: Int32,
    ):
        """Producer warp for pages shorter than the key tile (page_size divides tile_n, P = tile_n / page_size <= 16
        pages per key block): the order of :meth:`load`, each K/V stage filled by P page-sized TMA boxes on the stage's
        one barrier. Page ids come from a window of 32 page-table entries in the warp's lanes (one coalesced load), taken
        by shuffle; the window is placed to cover the pages of blocks n - 1 and n together and reloaded when the
        descending walk leaves it. Page slots past the sequence's last page repeat that page (its keys are masked)."""
        P = self.tile_n // self.key.page_size
        mK_cur = mK[None, None, head_kv, Int32(0)]
        mV_cur = mV[None, None, head_kv, Int32(0)]
        gK = cute.local_tile(mK_cur, (self.key.page_size, self.head_dim), (None, 0))  # (page rows, D, pool page)
        gV = cute.local_tile(mV_cur, (self.key.page_size, self.head_dim_v), (None, 0))
        sKp = cute.flat_divide(sK, (self.key.page_size, self.head_dim))  # (page rows, D, P, 1, stage)
        sVp = cute.flat_divide(sV, (self.key.page_size, self.head_dim_v))
        tKsK, tKgK = cpasync.tma_partition(tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sKp, 0, 2), cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sVp, 0, 2), cute.group_modes(gV, 0, 2))
        # The last page this tile may read: the sequence's (an empty sequence reads page 0, as the tile loads block 0).
        last_page = cutlass.max((seqlen_k + self.key.page_size - 1) // self.key.page_size - 1, Int32(0))
        p_last = cutlass.min(last_page, n_block_max * P - 1)

        q_state = producer_state(1)
        kv_state = producer_state(self.num_stages)
        n_block = n_block_max - 1
        base, entry = self.page_window(mPageTable, batch_pt, n_block * P + 2 * P - 2, p_last)  # covers blocks n_max - 1, n_max
        producer_acquire(pipeline_k, kv_state, self.key.spin_wait_producer)
        for j in cutlass.range_constexpr(P):
            page = cute.arch.shuffle_sync(entry, cutlass.min(n_block * P + j, p_last) - base)
            cute.copy(tma_atom_K, tKgK[None, page], tKsK[None, j, 0, kv_state.index], tma_bar_ptr=pipeline_k.producer_get_barrier(kv_state))
        if const_expr(not self.key.pack_gqa):  # pack-GQA: the consumers gather Q themselves
            gQ = cute.local_tile(mQ[None, None, head, batch], (self.tile_m, self.head_dim), (m_block, 0))
            tQsQ, tQgQ = cpasync.tma_partition(tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2))
            producer_acquire(pipeline_q, q_state, self.key.spin_wait_producer)
            cute.copy(tma_atom_Q, tQgQ, tQsQ, tma_bar_ptr=pipeline_q.producer_get_barrier(q_state))
        for i in cutlass.range(n_block_max - 1 - n_block_min, unroll=1):
            n_prev = n_block_max - 1 - i
            prev_state = kv_state.clone()
            kv_state.advance()
            base, entry = self.page_window_small(mPageTable, batch_pt, n_prev - 1, p_last, base, entry)
            producer_acquire(pipeline_k, kv_state, self.key.spin_wait_producer)
            for j in cutlass.range_constexpr(P):
                page = cute.arch.shuffle_sync(entry, cutlass.min((n_prev - 1) * P + j, p_last) - base)
                cute.copy(tma_atom_K, tKgK[None, page], tKsK[None, j, 0, kv_state.index], tma_bar_ptr=pipeline_k.producer_get_barrier(kv_state))
            producer_acquire(pipeline_v, prev_state, self.key.spin_wait_producer)
            for j in cutlass.range_constexpr(P):
                page = cute.arch.shuffle_sync(entry, cutlass.min(n_prev * P + j, p_last) - base)
                cute.copy(tma_atom_V, tVgV[None, page], tVsV[None, j, 0, prev_state.index], tma_bar_ptr=pipeline_v.producer_get_barrier(prev_state))
        producer_acquire(pipeline_v, kv_state, self.key.spin_wait_producer)
        for j in cutlass.range_constexpr(P):
            page = cute.arch.shuffle_sync(entry, cutlass.min(n_block_min * P + j, p_last) - base)
            cute.copy(tma_atom_V, tVgV[None, page], tVsV[None, j, 0, kv_state.index], tma_bar_ptr=pipeline_v.producer_get_barrier(kv_state))

    @cute.jit
    def page_window_small(self, mPageTable: cute.Tensor, batch: Int32, n_block: Int32, p_last: Int32, base: Int32, entry: Int32):
        """Small pages: keep the window covering the pages of key blocks ``n_block`` and ``n_block + 1``
        ([n_block * P, n_block * P + 2P - 1], 2P <= 32), reloading it (warp-uniform) when block ``n_block`` starts below."""
        P = self.tile_n // self.key.page_size
        lo = n_block * P
        if lo < base:
            base, entry = self.page_window(mPageTable, batch, lo + 2 * P - 2, p_last)
        return base, entry

    @cute.jit
    def page_window(self, mPageTable: cute.Tensor, batch: Int32, page: Int32, p_last: Int32):
        """page_prefetch (the whole producer warp): ``(base, entry)`` with base = max(page - 30, 0) and lane i holding
        page_table[batch, base + i] for base + i <= p_last (the last page this tile reads; 0 past it), one coalesced
        load. The window [base, base + 31] covers ``page`` and ``page + 1``: the producer walks key blocks downwards
        and the V block it loads after K[n - 1] is at most one page above it."""
        base = cutlass.max(page - 30, Int32(0))
        idx = base + cute.arch.lane_idx()
        entry = Int32(0)
        if idx <= p_last:
            entry = Int32(mPageTable[batch, idx])
        return base, entry

    @cute.jit
    def kv_block_window(self, mPageTable: cute.Tensor, batch: Int32, n_block: Int32, p_last: Int32, base: Int32, entry: Int32):
        """page_prefetch: :meth:`kv_block` from the lanes' window (a shuffle), reloading the window (warp-uniform
        branch, once per 31 pages) when the block's page lies below it. Returns ``(tile index, base, entry)``."""
        per_page = self.key.page_size // self.tile_n
        page_idx = n_block // per_page
        if page_idx < base:
            base, entry = self.page_window(mPageTable, batch, page_idx, p_last)
        page = cute.arch.shuffle_sync(entry, page_idx - base)
        return page * per_page + n_block % per_page, base, entry

    @cute.jit
    def mma(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        mQ_gmem: cute.Tensor | None,
        mO_tma: cute.Tensor | None,
        mO: cute.Tensor,
        mLSE: cute.Tensor | None,
        mSinks: cute.Tensor | None,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sVt: cute.Tensor,
        sO: cute.Tensor,
        tma_atom_O: cute.CopyAtom | None,
        pipeline_q,
        pipeline_k,
        pipeline_v,
        tidx: Int32,
        scale_log2: Float32,
        mask: MaskInfo,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        offset_q: Int32,
        n_block_min: Int32,
        n_block_max: Int32,
        mOpart: cute.Tensor | None,
        mLSEpart: cute.Tensor | None,
        split: Int32 | None,
        split_empty: cutlass.Boolean | None,
        num_batch: Int32,
        states=None,
    ):
        """Consumer warpgroups: the attention main loop and the epilogue. ``states`` (persistent): the ``(q_state,
        kv_state)`` carried across tiles, returned advanced past this tile (Q released after the O store read it)."""
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        wg_layout = cute.make_layout(self.num_consumer_wg, stride=self.threads_per_wg)
        wg_mma_qk = tiled_mma_qk.get_slice(wg_layout(wg_idx))
        wg_mma_pv = tiled_mma_pv.get_slice(wg_layout(wg_idx))
        thr_mma_qk = tiled_mma_qk.get_slice(tidx)
        tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))  # q_stages = 2: indexed by the tile's Q stage below
        tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
        tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
        acc_S = cute.make_rmem_tensor(wg_mma_qk.partition_shape_C((self.tile_m, self.tile_n)), Float32)
        acc_O = cute.make_rmem_tensor(wg_mma_pv.partition_shape_C((self.tile_m, self.head_dim_v)), Float32)
        tOrP = cute.make_rmem_tensor_like(acc_view_as_a(acc_S), self.dtype)

        cS = cute.make_identity_tensor((self.tile_m, self.tile_n))
        tScS_mn = acc_view_mn(thr_mma_qk.partition_C(cS))
        t0ScS_mn = acc_view_mn(tiled_mma_qk.get_slice(0).partition_C(cS))

        softmax = OnlineSoftmax(scale_log2, cute.size(acc_view_mn(acc_O), mode=[0]))
        softmax.reset()
        if const_expr(self.pingpong and states is None):  # persistent: made once, before the first tile
            if wg_idx == 0:
                cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.WG_SCHED_1), number_of_threads=2 * self.threads_per_wg)

        q_state, kv_state = states if const_expr(states is not None) else (consumer_state(1), consumer_state(self.num_stages))
        if const_expr(self.q_stages > 1):
            tSrQ = tSrQ[None, None, None, q_state.index]
        # key.pinned_desc: Q's descriptor per k-block (loop-invariant: kept, as the one-tile kernel keeps them), K's and
        # V's for stage 0 with the static offsets of their k-blocks, and the K / V stage strides (16-byte units); all pinned
        pinned = None
        if const_expr(self.key.pinned_desc):
            pQ = wg_mma_qk.partition_A(sQ)
            if const_expr(self.q_stages > 1):
                pQ = pQ[None, None, None, q_state.index]
            d_q = desc(pQ)
            pK = wg_mma_qk.partition_B(sK)[None, None, None, 0]
            pV = wg_mma_pv.partition_B(sVt)[None, None, None, 0]  # MN-major: its 64-column blocks lie tile_n rows of 128 B apart
            stages = (cute.crd2idx((0, 0, 0, 1), tSrK.layout), cute.crd2idx((0, 0, 0, 1), tOrVt.layout))
            q_descs = [pin(d_q + o) for o in k_offsets(tSrQ)]
            pinned = (q_descs, pin(desc(pK)), k_offsets(tSrK), pin(desc(pV, self.tile_n * 8)), k_offsets(tOrVt), stages)
        rows_per_query = 1
        if const_expr(self.key.pack_gqa):
            rows_per_query = self.key.qhead_per_kvhead
            # Gather the tile's packed rows (s, g) with 16-byte loads; rows past the end are zero-filled.
            vec = 128 // self.dtype.width
            q_cols = self.head_dim // vec
            q_rows_per_pass = 1 << int(math.log2(self.num_mma_threads // q_cols))
            q_copy = cute.make_tiled_copy_tv(
                cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128),
                cute.make_ordered_layout((q_rows_per_pass, q_cols), order=(1, 0)),
                cute.make_layout((1, vec)),
            )
            if tidx < q_rows_per_pass * q_cols:
                thr_q_copy = q_copy.get_slice(tidx)
                gQ = cute.local_tile(mQ_gmem[None, None, head, batch], (self.tile_m, self.head_dim), (m_block, 0))
                tQgQ = thr_q_copy.partition_S(gQ)
                tQsQ = thr_q_copy.partition_D(sQ)
                tQcQ = thr_q_copy.partition_S(cute.make_identity_tensor((self.tile_m, self.head_dim)))
                tQrQ = cute.make_rmem_tensor_like(tQsQ, self.dtype)
                tQrQ.fill(0.0)
                q_rows_left = mask.seqlen_q * rows_per_query - m_block * self.tile_m
                for rm in cutlass.range_constexpr(cute.size(tQrQ.shape[1])):
                    if tQcQ[0, rm, 0][0] < q_rows_left:
                        cute.copy(q_copy, tQgQ[None, rm, None], tQrQ[None, rm, None])
                cute.autovec_copy(tQrQ, tQsQ)
            cute.arch.fence_view_async_shared()  # generic-proxy smem writes -> visible to WGMMA
            cute.arch.barrier(barrier_id=int(NamedBarrier.Q_GATHER), number_of_threads=self.num_mma_threads)
        else:
            consumer_wait(pipeline_q, q_state, self.key.spin_wait)

        # First key block (the highest): full masking (sequence length, causal, window).
        n_block = n_block_max - 1
        tail = None  # ragged_tail: (this warpgroup's width index, the P views of the narrower widths), see ragged_tail.tail_block
        if const_expr(self.key.ragged_tail):
            if const_expr(self.key.spin_wait):  # spun here: tail_block's own (hinted) wait then finds the phase complete
                consumer_wait(pipeline_k, kv_state, True)
            tail = ragged_tail.tail_block(self, tiled_mma_qk, tOrP, tSrQ, sK, pipeline_k, kv_state, softmax, mask, m_block, n_block, wg_idx, tidx)
        else:
            consumer_wait(pipeline_k, kv_state, self.key.spin_wait)
            wgmma(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], zero_init=True, wg_wait=0)
            pipeline_k.consumer_release(kv_state)
            if const_expr(self.key.mask_r2p):
                mask.apply_r2p(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=True, mask_causal_window=True)
            else:
                mask.apply(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=True, mask_causal_window=True)
            softmax.online_softmax(acc_S, is_first=True)
            self.convert_p(acc_S, tOrP)
        acc_O.fill(0.0)
        # o_rescale_early: the rescale of O owed to the last softmax, applied under the next S GEMM (see step)
        o_scale = None
        if const_expr(self.key.o_rescale_early):
            o_scale = cute.make_rmem_tensor(softmax.num_rows, Float32)
            o_scale.fill(1.0)

        if const_expr(self.key.ragged_tail):
            # The second block (if any) is peeled: its step issues the first block's PV GEMM at that block's width, and
            # masks under a runtime test (it may lie in either masked range or between them).
            n_rm = n_block_max
            if const_expr(self.key.mask_right):
                n_rm = mask.n_block_min_right_masked(m_block, n_block_min)
            n_lm = n_block_min
            if const_expr(self.key.mask_left):
                n_lm = mask.n_block_max_left_masked(m_block, n_block_min)
            peel = cutlass.min(n_block_max - 1 - n_block_min, 1)
            n_pe = n_block_max - 2
            mask_pe = cutlass.Boolean(n_pe >= n_rm) | cutlass.Boolean(n_pe < n_lm)
            # One copy of the step per width, each whole inside its branch: an asynchronous WGMMA left in flight across
            # the branches' merge makes ptxas serialize the kernel's WGMMAs (C7515).
            for j in cutlass.range_constexpr(len(self.tail_widths)):
                if cutlass.Boolean(peel > 0) & cutlass.Boolean(tail[0] == j):
                    self.step(
                        tiled_mma_qk, tiled_mma_pv, acc_S, acc_O, tOrP, tSrQ, tSrK, tOrVt, pipeline_k, pipeline_v, kv_state.clone(), softmax,
                        mask, tScS_mn, t0ScS_mn, m_block, n_pe, wg_idx, False, o_scale, tail[1][j] if j < len(tail[1]) else tOrP, mask_pe, pinned,
                    )  # fmt: skip
            if peel > 0:
                kv_state.advance()
            n_block_max = n_block_max - peel  # the loops below start under the peeled block
        # Blocks that need the right (causal / window) mask.
        n_right = n_block_max
        if const_expr(self.key.mask_right):
            n_right = mask.n_block_min_right_masked(m_block, n_block_min)
        for i in cutlass.range(cutlass.max(n_block_max - 1 - n_right, 0), unroll=1):
            kv_state = self.step(
                tiled_mma_qk, tiled_mma_pv, acc_S, acc_O, tOrP, tSrQ, tSrK, tOrVt, pipeline_k, pipeline_v, kv_state, softmax, mask,
                tScS_mn, t0ScS_mn, m_block, n_block_max - 2 - i, wg_idx, True, o_scale, pinned=pinned,
            )  # fmt: skip
        n_hi = cutlass.min(n_block_max - 1, n_right)
        # Interior blocks: no mask.
        n_left = n_block_min
        if const_expr(self.key.mask_left):
            n_left = mask.n_block_max_left_masked(m_block, n_block_min)
        for i in cutlass.range(cutlass.max(n_hi - n_left, 0), unroll=1):
            kv_state = self.step(
                tiled_mma_qk, tiled_mma_pv, acc_S, acc_O, tOrP, tSrQ, tSrK, tOrVt, pipeline_k, pipeline_v, kv_state, softmax, mask,
                tScS_mn, t0ScS_mn, m_block, n_hi - 1 - i, wg_idx, False, o_scale, pinned=pinned,
            )  # fmt: skip
        # Blocks that need the left (window) mask.
        if const_expr(self.key.mask_left):
            n_hi2 = cutlass.min(n_hi, n_left)
            for i in cutlass.range(cutlass.max(n_hi2 - n_block_min, 0), unroll=1):
                kv_state = self.step(
                    tiled_mma_qk, tiled_mma_pv, acc_S, acc_O, tOrP, tSrQ, tSrK, tOrVt, pipeline_k, pipeline_v, kv_state, softmax, mask,
                    tScS_mn, t0ScS_mn, m_block, n_hi2 - 1 - i, wg_idx, True, o_scale, pinned=pinned,
                )  # fmt: skip
        if const_expr(states is not None and self.separate_o):  # every S GEMM of the tile is complete: Q may be refilled
            pipeline_q.consumer_release(q_state)
        # Last PV GEMM.
        if const_expr(self.key.o_rescale_early):
            softmax.rescale(acc_O, o_scale)
        consumer_wait(pipeline_v, kv_state, self.key.spin_wait)
        if const_expr(self.key.ragged_tail):
            # A tile of one key block (no peeled step): this is the first block's PV GEMM, at its width.
            last = Int32(len(self.tail_widths) - 1)
            if peel == 0:
                last = tail[0]
            ragged_tail.pv_gemm_tail(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], tail[1], last)
        else:
            wgmma(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], zero_init=False, wg_wait=0)
        pipeline_v.consumer_release(kv_state)

        if const_expr(self.key.split_kv):
            self.epilogue_partial(tiled_mma_pv, acc_O, softmax, mOpart, mLSEpart, tidx, mask, m_block, head, batch, split, split_empty, num_batch)
        else:
            q_release = None
            if const_expr(states is not None and not self.separate_o):
                q_release = (pipeline_q, q_state)
            self.epilogue(
                tiled_mma_pv, thr_mma_qk, acc_O, softmax, mO_tma, mO, mLSE, mSinks, sO, tma_atom_O, tidx, mask, m_block, head, batch, offset_q, q_release
            )
        if const_expr(states is not None):
            q_state.advance()
            kv_state.advance()
        return q_state, kv_state

    @cute.jit
    def epilogue(
        self,
        tiled_mma_pv: cute.TiledMma,
        thr_mma_qk,
        acc_O: cute.Tensor,
        softmax: OnlineSoftmax,
        mO_tma: cute.Tensor | None,
        mO: cute.Tensor,
        mLSE: cute.Tensor | None,
        mSinks: cute.Tensor | None,
        sO: cute.Tensor,
        tma_atom_O: cute.CopyAtom | None,
        tidx: Int32,
        mask: MaskInfo,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        offset_q: Int32,
        q_release=None,
    ):
        """Normalize O, write LSE, store O (TMA for dense tiles, predicated 16-byte stores for varlen / pack-GQA).
        ``q_release`` (persistent, O in Q's buffer): ``(pipeline_q, q_state)``, released once sO has been read."""
        rows_per_query = self.key.qhead_per_kvhead if const_expr(self.key.pack_gqa) else 1
        # Normalize; LSE.
        sink_val = None
        if const_expr(mSinks is not None):
            if const_expr(self.key.pack_gqa):  # rows of one tile belong to G different query heads
                G = self.key.qhead_per_kvhead
                sink_val = cute.make_rmem_tensor(softmax.num_rows, Float32)
                tScS_rows = acc_view_mn(thr_mma_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
                for r in cutlass.range_constexpr(softmax.num_rows):
                    p = m_block * self.tile_m + tScS_rows[r, 0][0]
                    sink_val[r] = Float32(mSinks[head * G + p % G])
            else:
                sink_val = Float32(mSinks[head])
        row_scale = softmax.finalize(sink_val, lse_log2=self.key.lse_log2)
        softmax.rescale(acc_O, row_scale)

        # ---------------------------------------------------------------------------------- epilogue
        rO = cute.make_rmem_tensor_like(acc_O, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        if const_expr(self.key.wg_epilogue):
            self.epilogue_wg(rO, softmax, mO_tma, mLSE, sO, tma_atom_O, tidx, mask, m_block, head, batch)
            return
        # Every consumer has finished its last QK GEMM (sQ is reused as sO).
        cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE), number_of_threads=self.num_mma_threads)
        smem_copy_atom_O = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
        smem_thr_copy_O = cute.make_tiled_copy_C(smem_copy_atom_O, tiled_mma_pv).get_slice(tidx)
        cute.copy(smem_copy_atom_O, smem_thr_copy_O.retile(rO), smem_thr_copy_O.partition_D(sO))

        thr_mma_pv = tiled_mma_pv.get_slice(tidx)
        cO = cute.make_identity_tensor((self.tile_m, self.head_dim_v))
        tOcO_mn = acc_view_mn(thr_mma_pv.partition_C(cO))
        if const_expr(mLSE is not None):
            mLSE_cur = mLSE[None, head, batch]
            if const_expr(self.key.varlen):
                mLSE_cur = cute.domain_offset((offset_q,), mLSE_cur)
            if tOcO_mn[0, 0][1] == 0:
                for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                    row = m_block * self.tile_m + tOcO_mn[r, 0][0]
                    if row < mask.seqlen_q * rows_per_query:
                        mLSE_cur[row] = softmax.row_sum[r]

        if const_expr((not self.key.varlen or self.key.varlen_tma_o) and not self.key.pack_gqa):
            cute.arch.fence_view_async_shared()
            cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.EPILOGUE), number_of_threads=self.num_mma_threads + 32)
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 4:
                cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE), number_of_threads=self.num_mma_threads + 32)
                mO_cur = None
                if const_expr(self.key.varlen_tma_o):  # the ragged view (see __call__): the sequence ends at row RAGGED_ROWS
                    mO_cur = cute.domain_offset((RAGGED_ROWS - mask.seqlen_q, 0), mO_tma[None, None, head, offset_q + mask.seqlen_q])
                else:
                    mO_cur = mO_tma[None, None, head, batch]
                gO = cute.local_tile(mO_cur, (self.tile_m, self.head_dim_v), (m_block, 0))
                tOsO, tOgO = cpasync.tma_partition(tma_atom_O, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2), cute.group_modes(gO, 0, 2))
                cute.copy(tma_atom_O, tOsO, tOgO)
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(0, read=True)
            if const_expr(q_release is not None):  # the storing warp after its read, the others after their writes
                q_release[0].consumer_release(q_release[1])
        else:
            cute.arch.barrier(barrier_id=int(NamedBarrier.EPILOGUE), number_of_threads=self.num_mma_threads)
            vec = 128 // self.dtype.width
            cols = self.head_dim_v // vec
            rows_per_pass = 1 << int(math.log2(self.num_mma_threads // cols))
            copy_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)
            thr_layout = cute.make_ordered_layout((rows_per_pass, cols), order=(1, 0))
            gmem_tiled_copy_O = cute.make_tiled_copy_tv(copy_atom, thr_layout, cute.make_layout((1, vec)))
            if tidx < rows_per_pass * cols:
                gmem_thr_copy_O = gmem_tiled_copy_O.get_slice(tidx)
                mO_cur = mO[None, None, head, batch]
                if const_expr(self.key.varlen):
                    mO_cur = cute.domain_offset((offset_q, 0), mO_cur)
                gO = cute.local_tile(mO_cur, (self.tile_m, self.head_dim_v), (m_block, 0))
                tOsO = gmem_thr_copy_O.partition_S(sO)
                tOgO = gmem_thr_copy_O.partition_D(gO)
                tOcO = gmem_thr_copy_O.partition_S(cO)
                tOrO = cute.make_rmem_tensor_like(tOsO, self.dtype)
                cute.autovec_copy(tOsO, tOrO)
                rows_left = mask.seqlen_q * rows_per_query - m_block * self.tile_m
                for rm in cutlass.range_constexpr(cute.size(tOrO.shape[1])):
                    if tOcO[0, rm, 0][0] < rows_left:
                        cute.copy(gmem_tiled_copy_O, tOrO[None, rm, None], tOgO[None, rm, None])
            if const_expr(q_release is not None):  # every thread's reads of sO are done (program order)
                q_release[0].consumer_release(q_release[1])

    @cute.jit
    def epilogue_wg(
        self,
        rO: cute.Tensor,
        softmax: OnlineSoftmax,
        mO_tma: cute.Tensor,
        mLSE: cute.Tensor | None,
        sO: cute.Tensor,
        tma_atom_O: cute.CopyAtom,
        tidx: Int32,
        mask: MaskInfo,
        m_block: Int32,
        head: Int32,
        batch: Int32,
    ):
        """``key.wg_epilogue`` (persistent, dense, O in its own shared-memory tile): this warpgroup's 64 rows of the
        normalized O (``rO``) and LSE, with no barrier shared with the other warpgroup. Its first warp waits until its
        previous TMA store has read the warpgroup's half of sO (the wait deferred from the last tile, so the warp joins
        the next tile's GEMMs at once); a 128-thread named barrier then lets the warpgroup overwrite the half, and the
        first warp issues one (64, D_v) TMA store after a 160-thread one. :meth:`persistent_tiles` waits for the last
        store before the CTA exits."""
        wg = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        tid = tidx - wg * self.threads_per_wg
        storing = cute.arch.make_warp_uniform(tid // 32) == 0
        bar = int(NamedBarrier.EPILOGUE_WG1) + wg
        if storing:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=bar, number_of_threads=self.threads_per_wg)
        # The fragment of one warpgroup's (64, D_v) tile is the one of the CTA-wide PV GEMM for that warpgroup's threads.
        mma_wg = sm90_utils.make_trivial_tiled_mma(
            self.dtype,
            self.dtype,
            warpgroup.OperandMajorMode.K,
            warpgroup.OperandMajorMode.MN,
            Float32,
            atom_layout_mnk=(1, 1, 1),
            tiler_mn=(64, self.head_dim_v),
            a_source=warpgroup.OperandSource.RMEM,
        )
        sO_wg = sO[None, None, wg]
        smem_copy_atom_O = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
        smem_thr_copy_O = cute.make_tiled_copy_C(smem_copy_atom_O, mma_wg).get_slice(tid)
        cute.copy(smem_copy_atom_O, smem_thr_copy_O.retile(rO), smem_thr_copy_O.partition_D(sO_wg))
        if const_expr(mLSE is not None):
            cO = cute.make_identity_tensor((64, self.head_dim_v))
            tOcO_mn = acc_view_mn(mma_wg.get_slice(tid).partition_C(cO))
            mLSE_cur = mLSE[None, head, batch]
            if tOcO_mn[0, 0][1] == 0:
                for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                    row = m_block * self.tile_m + wg * 64 + tOcO_mn[r, 0][0]
                    if row < mask.seqlen_q:
                        mLSE_cur[row] = softmax.row_sum[r]
        cute.arch.fence_view_async_shared()
        cute.arch.barrier_arrive(barrier_id=bar, number_of_threads=self.threads_per_wg + 32)
        if storing:
            cute.arch.barrier(barrier_id=bar, number_of_threads=self.threads_per_wg + 32)
            gO = cute.local_tile(mO_tma[None, None, head, batch], (64, self.head_dim_v), (m_block * self.num_consumer_wg + wg, 0))
            tOsO, tOgO = cpasync.tma_partition(tma_atom_O, 0, cute.make_layout(1), cute.group_modes(sO_wg, 0, 2), cute.group_modes(gO, 0, 2))
            cute.copy(tma_atom_O, tOsO, tOgO)
            cute.arch.cp_async_bulk_commit_group()

    @cute.jit
    def epilogue_partial(
        self,
        tiled_mma_pv: cute.TiledMma,
        acc_O: cute.Tensor,
        softmax: OnlineSoftmax,
        mOpart: cute.Tensor,
        mLSEpart: cute.Tensor,
        tidx: Int32,
        mask: MaskInfo,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        split: Int32,
        split_empty: cutlass.Boolean,
        num_batch: Int32,
    ):
        """Split-KV: this split's O normalized by its own row sums, and its LSE in log2 units without the sink (the
        combine folds the sink in once), stored in fp32 straight from the accumulator registers (predicated rows)."""
        rows_per_query = self.key.qhead_per_kvhead if const_expr(self.key.pack_gqa) else 1
        row_scale = softmax.finalize(None, lse_log2=True)
        softmax.rescale(acc_O, row_scale)
        thr_mma_pv = tiled_mma_pv.get_slice(tidx)
        tOcO_mn = acc_view_mn(thr_mma_pv.partition_C(cute.make_identity_tensor((self.tile_m, self.head_dim_v))))
        part = split * num_batch + batch
        gO = cute.local_tile(mOpart[None, None, head, part], (self.tile_m, self.head_dim_v), (m_block, 0))
        tOgO_mn = acc_view_mn(thr_mma_pv.partition_C(gO))
        acc_O_mn = acc_view_mn(acc_O)
        rows_left = mask.seqlen_q * rows_per_query - m_block * self.tile_m
        for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
            if tOcO_mn[r, 0][0] < rows_left:
                for c in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[1])):
                    tOgO_mn[r, c] = acc_O_mn[r, c]
        mL = mLSEpart[None, head, part]
        if tOcO_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                row = m_block * self.tile_m + tOcO_mn[r, 0][0]
                if row < mask.seqlen_q * rows_per_query:
                    mL[row] = softmax.row_sum[r] if not split_empty else -Float32.inf

    @cute.kernel
    def combine(
        self,
        mOp: cute.Tensor,
        mLp: cute.Tensor,
        mO: cute.Tensor,
        mLSE: cute.Tensor | None,
        mSinks: cute.Tensor | None,
        num_splits: Int32,
        num_heads: Int32,
        seqlen_q: Int32,
        num_rows: Int32,
    ):
        """Split-KV merge, one warp per output row (b, h, s): LSE = log2(sum_s 2^lse_s [+ 2^(sink log2 e)]),
        O = sum_s 2^(lse_s - LSE) O_s (each O_s is normalized by its own sum), cast to the output dtype; the LSE is
        written in natural-log units unless ``lse_log2``. A row no split saw (every key masked) gets O = 0, LSE = -inf."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        warp = tidx // 32
        lane = tidx - warp * 32
        row = bidx * COMBINE_ROWS_PER_CTA + warp
        if row < num_rows:
            s = row % seqlen_q
            bh = row // seqlen_q
            h = bh % num_heads
            b = bh // num_heads
            lse_max = -Float32.inf
            for sp in cutlass.range(num_splits, unroll=1):
                lse_max = cute.arch.fmax(lse_max, mLp[s, h, b, sp])
            sink2 = Float32(0.0)
            if const_expr(mSinks is not None):
                sink2 = Float32(mSinks[h]) * LOG2_E
                lse_max = cute.arch.fmax(lse_max, sink2)
            empty = lse_max == -Float32.inf
            lse_max_safe = lse_max if not empty else Float32(0.0)
            total = Float32(0.0)
            for sp in cutlass.range(num_splits, unroll=1):
                total = total + cute.math.exp2(mLp[s, h, b, sp] - lse_max_safe, fastmath=True)
            if const_expr(mSinks is not None):
                total = total + cute.math.exp2(sink2 - lse_max_safe, fastmath=True)
            lse = lse_max_safe + cute.math.log2(total if not empty else Float32(1.0), fastmath=True)
            cols = self.head_dim_v // 32
            acc = cute.make_rmem_tensor(cols, Float32)
            acc.fill(0.0)
            for sp in cutlass.range(num_splits, unroll=1):
                w = cute.math.exp2(mLp[s, h, b, sp] - lse, fastmath=True)
                if empty:
                    w = Float32(0.0)
                for j in cutlass.range_constexpr(cols):
                    acc[j] = acc[j] + w * mOp[lane + 32 * j, s, h, b, sp]
            for j in cutlass.range_constexpr(cols):
                mO[s, lane + 32 * j, h, b] = acc[j].to(self.dtype)
            if const_expr(mLSE is not None):
                if lane == 0:
                    out = lse if const_expr(self.key.lse_log2) else lse * LN_2
                    mLSE[s, h, b] = out if not empty else -Float32.inf

    combine.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def convert_p(self, acc_S: cute.Tensor, tOrP: cute.Tensor):
        """P = S (fp32 accumulator) converted to the input dtype in the PV GEMM's A-operand layout. With
        ``key.packed_cvt`` one 8-element k-block at a time, so every pair becomes one ``cvt.rn.bf16x2.f32``: converted
        whole, a fragment whose length is not a power of two (key tiles of 80, 112, 144, 176, 192 rows) is lowered to
        one scalar convert per element and 16-bit registers that ptxas must re-pack (spills, injected warpgroup.arrive)."""
        src = acc_view_as_a(acc_S)
        if const_expr(self.key.packed_cvt):
            for k in cutlass.range_constexpr(cute.size(src, mode=[2])):
                tOrP[None, None, k].store(src[None, None, k].load().to(self.dtype))
        else:
            tOrP.store(src.load().to(self.dtype))

    @cute.jit
    def step(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        acc_S: cute.Tensor,
        acc_O: cute.Tensor,
        tOrP: cute.Tensor,
        tSrQ: cute.Tensor,
        tSrK: cute.Tensor,
        tOrVt: cute.Tensor,
        pipeline_k,
        pipeline_v,
        kv_state,
        softmax: OnlineSoftmax,
        mask: MaskInfo,
        tScS_mn: cute.Tensor,
        t0ScS_mn: cute.Tensor,
        m_block: Int32,
        n_block: Int32,
        wg_idx: Int32,
        masked: cutlass.Constexpr[bool],
        o_scale: cute.Tensor | None = None,
        tail=None,
        mask_if: cutlass.Boolean | None = None,
        pinned=None,
    ):
        """One key block with intra-warpgroup overlap: S_n = Q K_n^T and O += P_{n+1} V_{n+1} in flight together,
        then the softmax of S_n while the PV GEMM drains. ``o_scale`` (``key.o_rescale_early``): O is multiplied by the
        previous block's row scale while the S GEMM runs, just before the PV GEMM is issued, and this block's scale is
        kept for the next step, instead of rescaling O after the PV GEMM has drained (the same products in the same
        order; off the critical path when O is wide, FA4's choice for d_v > 128). ``tail`` (``key.ragged_tail``, the step
        after the first block): the P of the PV GEMM, the first block's at its width (leading k-blocks of ``tOrP``, see
        :func:`ragged_tail.tail_block`), and ``mask_if`` a runtime flag: apply the causal / window mask (this block may lie in a
        masked range or not). ``pinned`` (``key.pinned_desc``): the tile's pinned descriptors (see ``mma``), both GEMMs
        issued through ``_device/wgmma_desc.py``."""
        v_state = kv_state.clone()
        kv_state.advance()
        consumer_wait(pipeline_k, kv_state, self.key.spin_wait)
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=int(NamedBarrier.WG_SCHED_1) + wg_idx, number_of_threads=2 * self.threads_per_wg)
        ab = "bf16" if const_expr(self.dtype == cutlass.BFloat16) else "f16"
        if const_expr(pinned is not None):  # key.pinned_desc: both GEMMs from the tile's pinned descriptors
            q_descs, d_k, offs_k, _, _, stages = pinned
            wgmma_ss_pinned(acc_S, q_descs, d_k + Int64(kv_state.index * stages[0]), offs_k, self.tile_n, ab, zero_init=True, wg_wait=-1)
        else:
            wgmma(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], zero_init=True, wg_wait=-1)
        if const_expr(o_scale is not None):
            softmax.rescale(acc_O, o_scale)
        consumer_wait(pipeline_v, v_state, self.key.spin_wait)
        if const_expr(pinned is not None):
            _, _, _, d_v, offs_v, stages = pinned
            wgmma_rs_pinned(acc_O, tOrP if const_expr(tail is None) else tail, d_v + Int64(v_state.index * stages[1]), offs_v, self.head_dim_v, ab, wg_wait=-1)
        else:
            wgmma(tiled_mma_pv, acc_O, tOrP if const_expr(tail is None) else tail, tOrVt[None, None, None, v_state.index], zero_init=False, wg_wait=-1)
        if const_expr(self.pingpong):
            if const_expr(self.num_consumer_wg == 3):  # round-robin: warpgroup w lets w + 1 (mod 3) issue next
                nxt = wg_idx + 1
                if nxt == 3:
                    nxt = Int32(0)
                cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.WG_SCHED_1) + nxt, number_of_threads=2 * self.threads_per_wg)
            else:
                cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.WG_SCHED_1) + 1 - wg_idx, number_of_threads=2 * self.threads_per_wg)
        warpgroup.wait_group(1)
        pipeline_k.consumer_release(kv_state)
        if const_expr(masked and self.key.mask_r2p):
            mask.apply_r2p(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=False, mask_causal_window=True)
        elif const_expr(masked):
            mask.apply(acc_S, tScS_mn, t0ScS_mn, m_block, n_block, mask_seqlen=False, mask_causal_window=True)
        elif const_expr(mask_if is not None and (self.key.mask_right or self.key.mask_left)):
            if mask_if:
                ragged_tail.mask_block(self.key.mask_r2p, acc_S, mask, tScS_mn, t0ScS_mn, m_block, n_block)
        row_scale = softmax.online_softmax(acc_S, is_first=False, exp2_emu=0 if const_expr(masked or mask_if is not None) else self.key.exp2_emu)
        warpgroup.wait_group(0)
        pipeline_v.consumer_release(v_state)
        self.convert_p(acc_S, tOrP)
        if const_expr(o_scale is not None):
            o_scale.store(row_scale.load())
        else:
            softmax.rescale(acc_O, row_scale)
        return kv_state


def softmax_scale_log2(scale: float) -> float:
    return scale * math.log2(math.e)


#: The launch arguments after the pointers, in order (what api.py passes, and what fake_args builds).
LAUNCH_SCALARS = ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k", "max_seqlen_q", "group_heads", "num_splits", "page_table_stride") + tuple(
    f"{t}_s{m}" for t in ("q", "k", "v", "o", "lse") for m in "bhs"
)


def fake_args(key: SdpaFwdKey):
    """Placeholder launch arguments for ``cute.compile`` (no GPU): pointers at a dummy address (never dereferenced at
    compile time) or None for the operands the plan compiles out; every extent and stride a runtime scalar."""
    dtype = DTYPES[key.dtype]
    ptr = fake_gmem_ptr
    zero = Int32(0)
    return (
        ptr(dtype),
        ptr(dtype),
        ptr(dtype),
        ptr(dtype),
        ptr(Float32, 4) if key.has_lse else None,
        ptr(Float32, 4) if key.has_sinks else None,
        ptr(Int32, 4) if key.varlen else None,
        ptr(Int32, 4) if key.varlen or key.paged else None,
        ptr(Float32, 16) if key.split_kv else None,
        ptr(Float32, 16) if key.split_kv else None,
        ptr(Int32, 4) if key.paged else None,
        zero,
        zero,
        zero,
        zero,
        zero,
        zero,
        Int32(1),
        Int32(1),
        Int32(1),
        *([Int64(0)] * 15),
        Float32(1.0),
        zero,
        zero,
        cuda.CUstream(0),
    )


def compile_sdpa_fwd(key: SdpaFwdKey, tvm_ffi: bool = False, options: str | None = None):
    """cute.compile the kernel for ``key`` from placeholder pointers and runtime extents (no GPU needed).

    ``tvm_ffi``: compile the tvm-ffi entry (``--enable-tvm-ffi``): the launch then takes pointers as Python ints
    (``tensor.data_ptr()``), extents and strides as ints, the scale as a float and the stream as a raw handle, a few
    microseconds per call instead of the DSL's generic argument conversion. The device code is the same either way.
    ``options``: extra DSL flags (e.g. ``"--keep-ptx --dump-dir=DIR"``)."""
    flags = " ".join(x for x in (options, "--enable-tvm-ffi" if tvm_ffi else None) if x)
    kernel = SdpaFwdKernelSm90(key)
    if flags:
        return cute.compile(kernel, *fake_args(key), options=flags)
    return cute.compile(kernel, *fake_args(key))
