"""Flash attention backward for Hopper (sm_90a), the split-head-dim schedule (compile-key variant ``split_d``) for
head dims whose dK and dV accumulators do not fit one warpgroup's registers next to each other (D = 256).

Same math, operands, scratch and producer as kernel_sm90.py (this class inherits its launch body, producer warp and
epilogue); what changes is the consumers' split of the work. One CTA owns ``tile_n = 64`` keys and walks query blocks of
``tile_m = 64`` rows; the two consumer warpgroups share the keys:

- S^T = K Q^T and dP^T = V dO^T: warpgroup w computes the 32 queries of half w (SS WGMMA, 64 x 32);
- P^T and dS^T of both halves go to shared memory (stmatrix), so each warpgroup then owns one half of the head dim:
  dV[:, half w] += P^T dO[:, half w] and dK[:, half w] += dS^T Q[:, half w] (SS WGMMA; 64 x D/2 accumulators);
- dQ = dS K in two column halves (each warpgroup a quarter of the head dim per GEMM, 64 x D/4 accumulator), added with
  fp32 vector atomics into the workspace accumulator.

Per thread: dK + dV 2 x 64 x D/2 / 128 fp32, dQ 64 x D/4 / 128, S^T and dP^T 64 x 32 / 128 each: 224 registers at
D = 256 at the peak of the S phase, under the 240 of a consumer. Not with ``deterministic`` (refused in the key).
With ``ds_double_buffer`` the P^T / dS^T buffers are doubled (indexed by the Q stage; 230,400 bytes of shared memory
at D = 256) and the "buffers free" barrier of every query block goes, as in the parent.

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py. Benchmark: benchmarks/sdpa_bwd.py (``ours-splitd``,
``ours-splitd2``).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warp, warpgroup

from .._device.mask_bwd import MaskInfoBwd
from .._device.mma_sm90 import acc_view_mn, transpose_view, wgmma
from .._device.pipeline import consumer_state
from .._device.seqlen import cu_seqlens_tensors
from .._device.tile_scheduler import SingleTileScheduler
from .kernel_key import PREPOST_ROWS, SdpaBwdKey
from .kernel_sm90 import NamedBarrierBwd, SdpaBwdKernelSm90


class SdpaBwdSplitDKernelSm90(SdpaBwdKernelSm90):
    """The ``split_d`` main kernel: ``__call__`` builds its MMAs and layouts, ``mma`` / ``step`` are its consumers;
    the kernel body, the producer warp and the dK / dV epilogue are the parent's."""

    def __init__(self, key: SdpaBwdKey):
        super(SdpaBwdKernelSm90, self).__init__(key)  # the plan half only: the parent's tile table has no split-D row
        self.tile_m, self.tile_n, self.num_stages = 64, 64, 2

    def _ds_layout(self):
        """P^T and dS^T (keys, queries), queries contiguous: buffer 2 s is P^T, 2 s + 1 dS^T, for s < 2 (indexed by the
        Q stage) with ds_double_buffer, s = 0 without."""
        return self._smem_layout(self.tile_n, self.tile_m, 4 if self.key.ds_double_buffer else 2)

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        lse2_ptr: cute.Pointer,
        dpsum_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        sem_ptr: cute.Pointer | None,
        cu_q_ptr: cute.Pointer | None,
        cu_k_ptr: cute.Pointer | None,
        batch: Int32,
        heads: Int32,
        heads_kv: Int32,
        seqlen_q: Int32,
        seqlen_k: Int32,
        max_seqlen_k: Int32,
        seqlen_pad: Int32,
        group_heads: Int32,
        q_strides: tuple[Int64, Int64, Int64],
        k_strides: tuple[Int64, Int64, Int64],
        v_strides: tuple[Int64, Int64, Int64],
        do_strides: tuple[Int64, Int64, Int64],
        dk_strides: tuple[Int64, Int64, Int64],
        dv_strides: tuple[Int64, Int64, Int64],
        scale_log2: Float32,
        scale: Float32,
        window_left: Int32,
        window_right: Int32,
        stream: cuda.CUstream,
    ):
        D, Dv = self.head_dim, self.head_dim_v
        div = 128 // self.dtype.width

        def strides(s):
            return tuple(cute.assume(x, divby=div) for x in s)

        qs, ks, vs, dos = strides(q_strides), strides(k_strides), strides(v_strides), strides(do_strides)
        dks, dvs = strides(dk_strides), strides(dv_strides)
        sp = cute.assume(seqlen_pad, divby=PREPOST_ROWS)
        bt = batch if const_expr(not self.key.varlen) else Int32(1)
        mQ = cute.make_tensor(q_ptr, cute.make_layout((seqlen_q, D, heads, bt), stride=(qs[2], 1, qs[1], qs[0])))
        mK = cute.make_tensor(k_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(ks[2], 1, ks[1], ks[0])))
        mV = cute.make_tensor(v_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(vs[2], 1, vs[1], vs[0])))
        mdO = cute.make_tensor(do_ptr, cute.make_layout((seqlen_q, Dv, heads, bt), stride=(dos[2], 1, dos[1], dos[0])))
        mdK = cute.make_tensor(dk_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(dks[2], 1, dks[1], dks[0])))
        mdV = cute.make_tensor(dv_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(dvs[2], 1, dvs[1], dvs[0])))
        mLSE2 = cute.make_tensor(lse2_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mDpsum = cute.make_tensor(dpsum_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mdQacc = cute.make_tensor(dqacc_ptr, cute.make_layout((sp, D, heads, bt), stride=(D, 1, sp * D, sp * D * heads)))
        mCuQ, mCuK = cu_seqlens_tensors(cu_q_ptr, cu_k_ptr, batch, self.key.varlen)

        K_MAJOR, MN_MAJOR = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        nwg = self.num_consumer_wg
        # S^T = K Q^T, dP^T = V dO^T: M = the CTA's 64 keys, N = queries split over the warpgroups.
        tiled_mma_SdP = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, K_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(self.tile_n, self.tile_m // nwg)
        )
        # dK += dS^T Q, dV += P^T dO: A = P^T / dS^T from shared memory (queries contiguous), B = Q^T / dO^T; N = head
        # dim split over the warpgroups.
        tiled_mma_dK = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(self.tile_n, D // nwg)
        )
        tiled_mma_dV = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(self.tile_n, Dv // nwg)
        )
        # dQ = dS K over one column half of the head dim per GEMM (a quarter per warpgroup).
        tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(self.tile_m, D // (2 * nwg))
        )
        sQ_layout = self._smem_layout(self.tile_m, D, self.num_stages)
        sdO_layout = self._smem_layout(self.tile_m, Dv, self.num_stages)
        # dQ reads K^T in D / 4 column slices per warpgroup: the swizzle atom must divide D / 4.
        sK_layout = self._smem_layout(self.tile_n, D, atom_cols=D // (2 * nwg))
        sV_layout = self._smem_layout(self.tile_n, Dv)
        sdS_layout = self._ds_layout()
        SharedStorage = self._shared_storage(sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, None)

        g2s, s2g = cpasync.CopyBulkTensorTileG2SOp(), cpasync.CopyBulkTensorTileS2GOp()
        tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(g2s, mQ, cute.select(sQ_layout, mode=[0, 1]), (self.tile_m, D))
        tma_atom_dO, tma_dO = cpasync.make_tiled_tma_atom(g2s, mdO, cute.select(sdO_layout, mode=[0, 1]), (self.tile_m, Dv))
        tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(g2s, mK, sK_layout, (self.tile_n, D))
        tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(g2s, mV, sV_layout, (self.tile_n, Dv))
        tma_atom_dK, tma_dK = cpasync.make_tiled_tma_atom(s2g, mdK, sK_layout, (self.tile_n, D))
        tma_atom_dV, tma_dV = cpasync.make_tiled_tma_atom(s2g, mdV, sV_layout, (self.tile_n, Dv))
        tx_q = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        tx_do = cute.size_in_bytes(self.dtype, cute.select(sdO_layout, mode=[0, 1]))
        tx_kv = cute.size_in_bytes(self.dtype, sK_layout) + cute.size_in_bytes(self.dtype, sV_layout)

        num_n_blocks = (max_seqlen_k + self.tile_n - 1) // self.tile_n
        grid = SingleTileScheduler.grid(num_n_blocks, heads_kv, batch)
        self.kernel(
            tma_Q, tma_K, tma_V, tma_dO, tma_dK, tma_dV, mdK, mdV, mLSE2, mDpsum, mdQacc, None, None, mCuQ, mCuK,
            tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, None,
            seqlen_q, seqlen_k, num_n_blocks, heads_kv, batch, group_heads, scale_log2, scale, window_left, window_right,
            sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, None,
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ,
            tx_q, tx_do, tx_kv, SharedStorage,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)  # fmt: skip

    @cute.jit
    def mma(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        mSem: cute.Tensor | None,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sPdS: cute.Tensor,
        sdQ: cute.Tensor | None,
        sdQ_lin: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        tma_atom_dQ: cute.CopyAtom | None,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        tidx: Int32,
        scale_log2: Float32,
        scale: Float32,
        mask: MaskInfoBwd,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_k: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
    ):
        """Consumer warpgroups of the split-D schedule (``sPdS``: P^T and dS^T buffers, see ``_ds_layout``), then the
        epilogue."""
        D, Dv = self.head_dim, self.head_dim_v
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        wg_layout = cute.make_layout(self.num_consumer_wg, stride=self.threads_per_wg)
        wg_mma_SdP = tiled_mma_SdP.get_slice(wg_layout(wg_idx))
        wg_mma_dK = tiled_mma_dK.get_slice(wg_layout(wg_idx))
        wg_mma_dV = tiled_mma_dV.get_slice(wg_layout(wg_idx))
        wg_mma_dQ = tiled_mma_dQ.get_slice(wg_layout(wg_idx))
        thr_mma_SdP = tiled_mma_SdP.get_slice(tidx)
        thr_mma_dQ = tiled_mma_dQ.get_slice(tidx)

        tSrK = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sK))
        tSrQ = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sQ))
        tdPrV = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sV))
        tdPrdO = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sdO))
        # P^T / dS^T operands and stmatrix destinations keep the buffer mode; step_split picks the block's buffers.
        tdVrPt = wg_mma_dV.make_fragment_A(wg_mma_dV.partition_A(sPdS))
        tdVrdOt = wg_mma_dV.make_fragment_B(wg_mma_dV.partition_B(transpose_view(sdO)))
        tdKrdSt = wg_mma_dK.make_fragment_A(wg_mma_dK.partition_A(sPdS))
        tdKrQt = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(transpose_view(sQ)))
        tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(transpose_view(sPdS)))
        sKt = transpose_view(sK)  # (D, keys)
        tdQrKt0 = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(cute.local_tile(sKt, (D // 2, self.tile_n), (0, 0))))
        tdQrKt1 = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(cute.local_tile(sKt, (D // 2, self.tile_n), (1, 0))))

        acc_S = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_n, self.tile_m)), Float32)
        acc_dP = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_n, self.tile_m)), Float32)
        acc_dK = cute.make_rmem_tensor(wg_mma_dK.partition_shape_C((self.tile_n, D)), Float32)
        acc_dV = cute.make_rmem_tensor(wg_mma_dV.partition_shape_C((self.tile_n, Dv)), Float32)
        acc_dQ = cute.make_rmem_tensor(wg_mma_dQ.partition_shape_C((self.tile_m, D // 2)), Float32)
        rP = cute.make_rmem_tensor_like(acc_S, self.dtype)
        rdS = cute.make_rmem_tensor_like(acc_dP, self.dtype)

        cS = cute.make_identity_tensor((self.tile_n, self.tile_m))
        tScS_mn = acc_view_mn(thr_mma_SdP.partition_C(cS))
        num_cols = cute.size(tScS_mn, mode=[1])
        rLSE = cute.make_rmem_tensor(num_cols, Float32)
        rDpsum = cute.make_rmem_tensor(num_cols, Float32)

        smem_copy_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
        smem_thr_copy_PdS = cute.make_tiled_copy_C(smem_copy_atom, tiled_mma_SdP).get_slice(tidx)
        tPsP = smem_thr_copy_PdS.partition_D(sPdS)
        tdSsdS = tPsP

        acc_dK.fill(0.0)
        acc_dV.fill(0.0)
        kv_state = consumer_state(1)
        pipeline_kv.consumer_wait(kv_state)

        state = consumer_state(self.num_stages)
        m_mid1 = cutlass.min(mask.m_block_min_unmasked(n_block, m_block_min), m_block_max)
        m_mid2 = cutlass.max(cutlass.min(mask.m_block_max_unmasked(n_block, m_block_max), m_block_max), m_mid1)
        if (n_block + 1) * self.tile_n > mask.seqlen_k:
            m_mid1 = m_block_max
            m_mid2 = m_block_max
        G = self.key.qhead_per_kvhead
        for g in cutlass.range(G, unroll=1):
            head = head_kv * G + g
            mLSE2_cur = mLSE2[None, head, batch]
            mDpsum_cur = mDpsum[None, head, batch]
            mdQacc_cur = mdQacc[None, None, head, batch]
            if const_expr(self.key.varlen):
                mLSE2_cur = cute.domain_offset((pad_q,), mLSE2_cur)
                mDpsum_cur = cute.domain_offset((pad_q,), mDpsum_cur)
                mdQacc_cur = cute.domain_offset((pad_q, 0), mdQacc_cur)
            for i in cutlass.range(cutlass.max(m_mid1 - m_block_min, 0), unroll=1):
                state = self.step_split(
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, thr_mma_dQ, acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS,
                    rLSE, rDpsum, tSrK, tSrQ, tdPrV, tdPrdO, tdVrPt, tdVrdOt, tdKrdSt, tdKrQt, tdQrdS, tdQrKt0, tdQrKt1, smem_copy_atom,
                    smem_thr_copy_PdS, tPsP, tdSsdS, tScS_mn, mLSE2_cur, mDpsum_cur, mdQacc_cur, pipeline_q, pipeline_do, state, scale_log2,
                    mask, m_block_min + i, n_block, True,
                )  # fmt: skip
            for i in cutlass.range(cutlass.max(m_mid2 - m_mid1, 0), unroll=1):
                state = self.step_split(
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, thr_mma_dQ, acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS,
                    rLSE, rDpsum, tSrK, tSrQ, tdPrV, tdPrdO, tdVrPt, tdVrdOt, tdKrdSt, tdKrQt, tdQrdS, tdQrKt0, tdQrKt1, smem_copy_atom,
                    smem_thr_copy_PdS, tPsP, tdSsdS, tScS_mn, mLSE2_cur, mDpsum_cur, mdQacc_cur, pipeline_q, pipeline_do, state, scale_log2,
                    mask, m_mid1 + i, n_block, False,
                )  # fmt: skip
            if const_expr(self.key.mask_left):
                for i in cutlass.range(cutlass.max(m_block_max - m_mid2, 0), unroll=1):
                    state = self.step_split(
                        tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, thr_mma_dQ, acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS,
                        rLSE, rDpsum, tSrK, tSrQ, tdPrV, tdPrdO, tdVrPt, tdVrdOt, tdKrdSt, tdKrQt, tdQrdS, tdQrKt0, tdQrKt1, smem_copy_atom,
                        smem_thr_copy_PdS, tPsP, tdSsdS, tScS_mn, mLSE2_cur, mDpsum_cur, mdQacc_cur, pipeline_q, pipeline_do, state, scale_log2,
                        mask, m_mid2 + i, n_block, True,
                    )  # fmt: skip

        self.epilogue_dkv(
            acc_dK, acc_dV, smem_copy_atom, tiled_mma_dK, tiled_mma_dV, sK, sV, mdK, mdV, tma_atom_dK, tma_atom_dV, mask, scale,
            n_block, head_kv, batch, offset_k, tidx,
        )  # fmt: skip

    @cute.jit
    def step_split(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        thr_mma_dQ,
        acc_S: cute.Tensor,
        acc_dP: cute.Tensor,
        acc_dK: cute.Tensor,
        acc_dV: cute.Tensor,
        acc_dQ: cute.Tensor,
        rP: cute.Tensor,
        rdS: cute.Tensor,
        rLSE: cute.Tensor,
        rDpsum: cute.Tensor,
        tSrK: cute.Tensor,
        tSrQ: cute.Tensor,
        tdPrV: cute.Tensor,
        tdPrdO: cute.Tensor,
        tdVrPt: cute.Tensor,
        tdVrdOt: cute.Tensor,
        tdKrdSt: cute.Tensor,
        tdKrQt: cute.Tensor,
        tdQrdS: cute.Tensor,
        tdQrKt0: cute.Tensor,
        tdQrKt1: cute.Tensor,
        smem_copy_atom: cute.CopyAtom,
        smem_thr_copy_PdS,
        tPsP: cute.Tensor,
        tdSsdS: cute.Tensor,
        tScS_mn: cute.Tensor,
        mLSE2_cur: cute.Tensor,
        mDpsum_cur: cute.Tensor,
        mdQacc_cur: cute.Tensor,
        pipeline_q,
        pipeline_do,
        state,
        scale_log2: Float32,
        mask: MaskInfoBwd,
        m_block: Int32,
        n_block: Int32,
        masked: cutlass.Constexpr[bool],
    ):
        """One query block: S^T, dP^T (SS, this warpgroup's queries), P^T, dS^T to shared memory, dV and dK (SS, this
        warpgroup's half of the head dim), dQ in two column halves (SS, atomics)."""
        idx = state.index
        row0 = m_block * self.tile_m
        pipeline_q.consumer_wait(state)
        wgmma(tiled_mma_SdP, acc_S, tSrK, tSrQ[None, None, None, idx], zero_init=True, wg_wait=-1)
        for c in cutlass.range_constexpr(cute.size(rLSE)):
            rLSE[c] = mLSE2_cur[row0 + tScS_mn[0, c][1]]
        pipeline_do.consumer_wait(state)
        wgmma(tiled_mma_SdP, acc_dP, tdPrV, tdPrdO[None, None, None, idx], zero_init=True, wg_wait=1)
        if const_expr(masked):
            mask.apply_transposed(acc_S, tScS_mn, m_block, n_block, mask_seqlen=True)
        acc_S_mn = acc_view_mn(acc_S)
        for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c] * scale_log2 - rLSE[c], fastmath=True)
        for c in cutlass.range_constexpr(cute.size(rDpsum)):
            rDpsum[c] = mDpsum_cur[row0 + tScS_mn[0, c][1]]
        rP.store(acc_S.load().to(self.dtype))
        warpgroup.wait_group(0)
        acc_dP_mn = acc_view_mn(acc_dP)
        for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1])):
                acc_dP_mn[r, c] = acc_S_mn[r, c] * (acc_dP_mn[r, c] - rDpsum[c])
        rdS.store(acc_dP.load().to(self.dtype))

        bP, bdS = 0, 1
        if const_expr(self.key.ds_double_buffer):
            # Buffers (2 idx, 2 idx + 1) were last read by the GEMMs of two blocks ago, which both warpgroups finished
            # before passing the previous block's barrier below: no "free" barrier needed.
            bP, bdS = 2 * idx, 2 * idx + 1
        else:
            # P^T and dS^T to shared memory once both warpgroups finished the previous block's GEMMs reading them.
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
        cute.copy(smem_copy_atom, smem_thr_copy_PdS.retile(rP), tPsP[None, None, None, bP])
        cute.copy(smem_copy_atom, smem_thr_copy_PdS.retile(rdS), tdSsdS[None, None, None, bdS])
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
        wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt0, zero_init=True, wg_wait=-1)
        wgmma(tiled_mma_dV, acc_dV, tdVrPt[None, None, None, bP], tdVrdOt[None, None, None, idx], zero_init=False, wg_wait=-1)
        wgmma(tiled_mma_dK, acc_dK, tdKrdSt[None, None, None, bdS], tdKrQt[None, None, None, idx], zero_init=False, wg_wait=2)
        # dQ_accum[query block, first half] += dS K[:, first half] while dV and dK run (the scratch rows are padded)
        gdQacc0 = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim // 2), (m_block, 0))
        self.add_dq(thr_mma_dQ.partition_C(gdQacc0), acc_dQ)
        warpgroup.wait_group(0)
        pipeline_do.consumer_release(state)
        pipeline_q.consumer_release(state)  # dQ reads dS^T and K only
        wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt1, zero_init=True, wg_wait=0)
        gdQacc1 = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim // 2), (m_block, 1))
        self.add_dq(thr_mma_dQ.partition_C(gdQacc1), acc_dQ)
        state.advance()
        return state

    @cute.jit
    def add_dq(self, tdQgdQ: cute.Tensor, acc_dQ: cute.Tensor):
        """Elements 2i and 2i + 1 of the fragment are adjacent columns of one row: one 8-byte fp32 vector reduction."""
        pair = cute.make_rmem_tensor((2,), Float32)
        for i in cutlass.range_constexpr(cute.size(acc_dQ) // 2):
            pair[0] = acc_dQ[2 * i]
            pair[1] = acc_dQ[2 * i + 1]
            cute.arch.atomic_add(tdQgdQ.iterator + tdQgdQ.layout(2 * i), pair.load())
