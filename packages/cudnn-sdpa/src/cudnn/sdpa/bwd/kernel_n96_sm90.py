"""Flash attention backward for Hopper (sm_90a) at D = 192 / D_v = 128 on FA4's 64 x 96 tile (compile-key variant
``tile_n96``, tuning "n96", with dq_bulk + dq_writer; design: the d192 backward study, section 4).

Same math, scratch, producer warp, writer warp, query-block walk (GQA group loop included) and dK / dV stores as
kernel_sm90.py (this class inherits them); what changes is the consumers' orientation. A CTA owns ``tile_n = 96`` keys
and walks query blocks of ``tile_m = 64`` rows; consumer warpgroup w owns keys ``[48 w, 48 w + 48)``:

- S = Q K^T and dP = dO V^T (SS, M = the 64 queries, N = the warpgroup's 48 keys): each thread holds two query rows,
  so two lse_log2 / dpsum values a block; P = exp2(S scale log2 e - lse), dS = P (dP - dpsum), masked as the forward
  masks (rows = queries, :meth:`MaskInfo.apply`);
- P and dS go to shared memory (queries x keys, keys contiguous; stmatrix), the P buffer per warpgroup (its keys only);
- dV^T += dO^T P and dK^T += Q^T dS (SS, M = the head dim: 2 resp. 3 m64 atoms, N = the warpgroup's 48 keys; 48 and 72
  fp32 registers a thread, the persistent accumulators);
- dQ = dS K (SS, A = dS K-major, B = K^T; the head dim split over the warpgroups, 64 x 96 each: the split-D bulk kernel's
  dQ fragment, so dq_bulk's accumulator order and the postprocess are unchanged), staged for the writer warp;
- epilogue: dK^T / dV^T through the transposed stmatrix into sK / sV (keys x head dim), then the parent's stores.

Per query block and warpgroup 46 HGMMAs (S 12, dP 8, dV^T 8, dK^T 12, dQ 6) and three barriers: the warpgroup's "P
free", the CTA's "dS free" and "dS written". Shared memory (bf16): Q 2 x 24, dO 2 x 16, K 36, V 24, P + dS 24, fp32 dQ
staging 48 KiB: 212 KiB (217,088 B of buffers).

Opt-in follow-ups (key fields, each on its own; the default's PTX is unchanged):

- ``ds_double_buffer`` (ds2): a second dS buffer (+12 KiB: 229,376 B of buffers, 230,400 with stats_tma, under the
  232,448 of an sm90 CTA; ``_shared_storage`` checks it), indexed by the Q stage, so the CTA's "dS free" barrier goes;
  P stays single (a second P does not fit: 237 KiB), and the warpgroup's P is published for its dV^T by a warpgroup
  barrier instead (see :meth:`step` for why the overwrite of a dS buffer is ordered after its last reader);
- ``pack_once`` (pack1): P and dS converted by one inline ``cvt.rn.{bf16,f16}x2.f32`` per register pair (the parent's
  ``pack_pairs``; here both feed only the stmatrix, so it pins where the conversions are, nothing more).

Not served: deterministic (no bulk-path turn counters), a second P buffer (does not fit), the other variants of the
64-wide kernels.

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_variants_compile.py (CPU), test_sdpa_bwd_d192_gpu.py (``n96``).
Benchmark: benchmarks/sdpa_bwd.py ``ours-n96``.
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warp, warpgroup

from .._device.mask_bwd import MaskInfoBwd
from .._device.mma_sm90 import acc_view_mn, transpose_view, wgmma
from .._device.pipeline import consumer_wait
from ..fwd.kernel_key import SMEM_BYTES as SMEM_LIMIT  # the CTA's shared memory on sm90 (227 KiB)
from .kernel_key import SdpaBwdKey
from .kernel_sm90 import NamedBarrierBwd, SdpaBwdKernelSm90

#: named barrier "this warpgroup's P buffer is free" (warpgroup 1; warpgroup 2: + 1), after kernel_sm90's ids (1 .. 7)
#: and split-D bulk's 8
P_FREE_WG1 = 9


class SdpaBwdN96KernelSm90(SdpaBwdKernelSm90):
    """``tile_n96``: the 64 x 96 tile's consumers (``_tiled_mmas`` / ``_ds_layout`` / ``consumer_operands`` / ``step``
    and the epilogue's transposed view). The parent's launch, kernel body, producer, writer warp, ``mma`` walk and
    ``_k_atom_cols`` (D / 2: each warpgroup's dQ reads a 96-column half of K^T) and ``_q_do_atom_cols`` (whole head
    dim: dK^T / dV^T read 64-row M atoms of Q^T / dO^T, which the 128-byte swizzle divides) serve unchanged."""

    def __init__(self, key: SdpaBwdKey):
        super(SdpaBwdKernelSm90, self).__init__(key)  # the plan half only: the parent's tile table has no 96-key row
        if not (key.tile_n96 and key.dq_bulk and key.dq_writer):
            raise ValueError("SdpaBwdN96KernelSm90 is the tile_n96 + dq_bulk + dq_writer schedule (SdpaBwdKey validates the rest)")
        self.tile_m, self.tile_n, self.num_stages = 64, 96, 2

    @property
    def keys_per_wg(self) -> int:
        return self.tile_n // self.num_consumer_wg

    def _ds_layout(self):
        """P (buffer 0) and dS (buffer 1; ds_double_buffer: buffers 1 and 2, indexed by the Q stage), (queries, keys),
        keys contiguous; the swizzle atom divides a warpgroup's 48 keys (dV^T / dK^T read P^T / dS^T MN-major per
        warpgroup): the 32-byte swizzle."""
        buffers = 1 + (self.num_stages if self.key.ds_double_buffer else 1)
        return self._smem_layout(self.tile_m, self.tile_n, buffers, atom_cols=self.keys_per_wg)

    def _shared_storage(self, sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout):
        """The parent's struct, checked against the CTA's shared memory (ds2 leaves about 2 KiB)."""
        storage = super()._shared_storage(sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout)
        if storage.size_in_bytes() > SMEM_LIMIT:
            raise ValueError(f"SdpaBwdN96KernelSm90: {storage.size_in_bytes()} bytes of shared memory, over the {SMEM_LIMIT} of an sm90 CTA")
        return storage

    def _tiled_mmas(self):
        """(S / dP, dK^T, dV^T, dQ) tiled MMAs (host-side construction), all SS."""
        D = self.head_dim
        K_MAJOR, MN_MAJOR = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        nwg, kw = self.num_consumer_wg, self.keys_per_wg
        # S = Q K^T, dP = dO V^T: M = queries, N = the warpgroup's keys.
        tiled_mma_SdP = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, K_MAJOR, K_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(64, kw))
        # dK^T = Q^T dS, dV^T = dO^T P: A = Q^T / dO^T (head dim contiguous), B = dS^T / P^T (keys contiguous); M = head dim.
        tiled_mma_dK = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(64, kw))
        tiled_mma_dV = sm90_utils.make_trivial_tiled_mma(self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(64, kw))
        # dQ = dS K: A = dS (keys contiguous: K-major), B = K^T (head dim contiguous); N = the head dim split over the
        # warpgroups (the C layout of split-D bulk's dQ MMA: dq_bulk's fragment order)
        tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(64, D // nwg)
        )
        return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ

    def _dkv_smem_view(self, s):
        """dK^T / dV^T have M = the head dim: the epilogue's (transposed) stmatrix writes sK / sV through their
        (head dim, keys) view."""
        return transpose_view(s)

    @cute.jit
    def consumer_operands(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sPdS: cute.Tensor,
        sdQ_lin: cute.Tensor | None,
        tidx: Int32,
    ):
        """The consumer's operands of :meth:`step` (``sPdS``: the P and dS buffers, see ``_ds_layout``); its
        ``smem_copy_atom`` is the epilogue's transposed stmatrix (P / dS use ``pds_copy_atom``)."""
        D, Dv = self.head_dim, self.head_dim_v
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        wg_layout = cute.make_layout(self.num_consumer_wg, stride=self.threads_per_wg)
        wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ = (m.get_slice(wg_layout(wg_idx)) for m in (tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ))
        thr_mma_SdP = tiled_mma_SdP.get_slice(tidx)
        sPdSt = transpose_view(sPdS)  # (keys, queries, buffer)
        tSrQ = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sQ))
        tSrK = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sK))
        tdPrdO = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sdO))
        tdPrV = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sV))
        tdVrdOt = wg_mma_dV.make_fragment_A(wg_mma_dV.partition_A(transpose_view(sdO)))
        tdVrPt = wg_mma_dV.make_fragment_B(wg_mma_dV.partition_B(sPdSt))
        tdKrQt = wg_mma_dK.make_fragment_A(wg_mma_dK.partition_A(transpose_view(sQ)))
        tdKrdSt = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(sPdSt))
        tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(sPdS))
        tdQrKt = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(transpose_view(sK)))

        acc_S = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_m, self.tile_n)), Float32)
        acc_dP = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_m, self.tile_n)), Float32)
        acc_dK = cute.make_rmem_tensor(wg_mma_dK.partition_shape_C((D, self.tile_n)), Float32)  # dK^T
        acc_dV = cute.make_rmem_tensor(wg_mma_dV.partition_shape_C((Dv, self.tile_n)), Float32)  # dV^T
        acc_dQ = cute.make_rmem_tensor(wg_mma_dQ.partition_shape_C((self.tile_m, D)), Float32)
        rP = cute.make_rmem_tensor_like(acc_S, self.dtype)
        rdS = cute.make_rmem_tensor_like(acc_dP, self.dtype)
        # (query, key) coordinates of this thread's S elements and thread 0's (MaskInfo.apply's static offsets)
        cS = cute.make_identity_tensor((self.tile_m, self.tile_n))
        tScS_mn = acc_view_mn(thr_mma_SdP.partition_C(cS))
        t0ScS_mn = acc_view_mn(tiled_mma_SdP.get_slice(0).partition_C(cS))
        num_rows = cute.size(tScS_mn, mode=[0])
        rLSE = cute.make_rmem_tensor(num_rows, Float32)
        rDpsum = cute.make_rmem_tensor(num_rows, Float32)

        pds_copy_atom, smem_thr_copy_PdS, tPsP = self.ds_smem_copy(tiled_mma_SdP, sPdS, tidx)
        smem_copy_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=True, num_matrices=4), self.dtype)
        tdQsdQ = self._dq_bulk_copy().get_slice(tidx).partition_D(sdQ_lin)
        return SimpleNamespace(
            wg_idx=wg_idx, acc_S=acc_S, acc_dP=acc_dP, acc_dK=acc_dK, acc_dV=acc_dV, acc_dQ=acc_dQ, rP=rP, rdS=rdS, rLSE=rLSE, rDpsum=rDpsum,
            tSrQ=tSrQ, tSrK=tSrK, tdPrdO=tdPrdO, tdPrV=tdPrV, tdVrdOt=tdVrdOt, tdVrPt=tdVrPt, tdKrQt=tdKrQt, tdKrdSt=tdKrdSt, tdQrdS=tdQrdS,
            tdQrKt=tdQrKt, tScS_mn=tScS_mn, t0ScS_mn=t0ScS_mn, pds_copy_atom=pds_copy_atom, smem_thr_copy_PdS=smem_thr_copy_PdS, tPsP=tPsP,
            smem_copy_atom=smem_copy_atom, tdQsdQ=tdQsdQ,
        )  # fmt: skip

    @cute.jit
    def row_stats(self, rDst: cute.Tensor, mSrc_cur: cute.Tensor, sSrc: cute.Tensor | None, tScS_mn: cute.Tensor, row0: Int32, idx: Int32):
        """This thread's rows' lse_log2 (or dpsum) of the block: from the stats_tma stage ``idx`` or the scratch."""
        for r in cutlass.range_constexpr(cute.size(rDst)):
            if const_expr(self.key.stats_tma):
                rDst[r] = sSrc[tScS_mn[r, 0][0], idx]
            else:
                rDst[r] = mSrc_cur[row0 + tScS_mn[r, 0][0]]

    @cute.jit
    def step(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        ops,
        mLSE2_cur: cute.Tensor,
        mDpsum_cur: cute.Tensor,
        mdQacc_cur: cute.Tensor,
        mSem_cur: cute.Tensor | None,
        mdQacc_tma_cur: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        sdQ: cute.Tensor | None,
        tma_atom_dQ: cute.CopyAtom | None,
        tidx: Int32,
        pipeline_q,
        pipeline_do,
        state,
        scale_log2: Float32,
        mask: MaskInfoBwd,
        m_block: Int32,
        n_block: Int32,
        masked: cutlass.Constexpr[bool],
    ):
        """One query block (FA4's order): S, dP (SS); P to shared memory; dS; dS to shared memory; dV^T, dQ, dK^T (SS),
        dO released when dV^T is done, dQ staged for the writer warp while dK^T runs, Q released last.

        ds_double_buffer (ds2): dS goes to buffer ``1 + idx`` (``idx``: the Q stage, which alternates per query block)
        with no "dS free" barrier before it. Why that is safe: the buffer's previous contents are block k - 2's dS,
        read by block k - 2's dQ GEMM of BOTH warpgroups (every key) and dK^T GEMM of each warpgroup (its keys); block
        k - 1 used the other buffer. Warpgroup w stores its keys' dS of block k only after passing block k - 1's
        CTA-wide "dS written" barrier (NamedBarrierBwd.PDS, all 256 consumer threads), and the other warpgroup arrives
        there only after the end of its block k - 2 step, whose ``warpgroup.wait_group(0)`` completed its dQ and dK^T
        WGMMAs (their shared-memory reads); w's own block k - 2 GEMMs completed at w's own wait_group(0), earlier in
        program order. Both warpgroups walk the same query blocks (the CTA's), so the barrier phases pair up, across
        key blocks too (the stage keeps alternating). The "dS free" barrier also published P for dV^T; P is
        warpgroup-private (its keys only), so a warpgroup barrier does that instead, after one proxy fence that covers
        the P and dS stores (dQ / dK^T read dS after the later "dS written" barrier, which the same fence orders)."""
        o = ops
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, rLSE, rDpsum = o.acc_S, o.acc_dP, o.acc_dK, o.acc_dV, o.acc_dQ, o.rP, o.rdS, o.rLSE, o.rDpsum
        tScS_mn, wg_idx = o.tScS_mn, o.wg_idx
        idx = state.index
        row0 = m_block * self.tile_m
        ds2 = self.key.ds_double_buffer
        bP = 0
        bdS = 1 + idx if ds2 else 1  # plain Python: ds2 is the key's
        consumer_wait(pipeline_q, state, self.key.spin_wait)
        wgmma(tiled_mma_SdP, acc_S, o.tSrQ[None, None, None, idx], o.tSrK, zero_init=True, wg_wait=-1)
        self.row_stats(rLSE, mLSE2_cur, sLSE, tScS_mn, row0, idx)
        consumer_wait(pipeline_do, state, self.key.spin_wait)
        wgmma(tiled_mma_SdP, acc_dP, o.tdPrdO[None, None, None, idx], o.tdPrV, zero_init=True, wg_wait=1)
        if const_expr(masked):
            mask.apply(acc_S, tScS_mn, o.t0ScS_mn, m_block, n_block, mask_seqlen=True, mask_causal_window=True)
        acc_S_mn = acc_view_mn(acc_S)
        for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c] * scale_log2 - rLSE[r], fastmath=True)
        self.row_stats(rDpsum, mDpsum_cur, sDpsum, tScS_mn, row0, idx)
        if const_expr(self.key.pack_once):
            self.pack_pairs(acc_S, rP)
        else:
            rP.store(acc_S.load().to(self.dtype))
        # P to shared memory once this warpgroup's dV^T of the previous block (the only reader of its keys' P) is done
        cute.arch.barrier(barrier_id=P_FREE_WG1 + wg_idx, number_of_threads=self.threads_per_wg)
        cute.copy(o.pds_copy_atom, o.smem_thr_copy_PdS.retile(rP), o.tPsP[None, None, None, bP])
        warpgroup.wait_group(0)
        acc_dP_mn = acc_view_mn(acc_dP)
        for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1])):
                acc_dP_mn[r, c] = acc_S_mn[r, c] * (acc_dP_mn[r, c] - rDpsum[r])
        if const_expr(self.key.pack_once):
            self.pack_pairs(acc_dP, rdS)
        else:
            rdS.store(acc_dP.load().to(self.dtype))
        if const_expr(not ds2):
            # dS to shared memory once both warpgroups' dQ of the previous block (reading every key's dS) is done; the
            # barrier also publishes this warpgroup's P for its dV^T
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
            cute.copy(o.pds_copy_atom, o.smem_thr_copy_PdS.retile(rdS), o.tPsP[None, None, None, bdS])
        else:
            # ds2: buffer 1 + idx is free (see the docstring); this warpgroup's P published for its dV^T by the
            # warpgroup's barrier
            cute.copy(o.pds_copy_atom, o.smem_thr_copy_PdS.retile(rdS), o.tPsP[None, None, None, bdS])
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=P_FREE_WG1 + wg_idx, number_of_threads=self.threads_per_wg)
        wgmma(tiled_mma_dV, acc_dV, o.tdVrdOt[None, None, None, idx], o.tdVrPt[None, None, None, bP], zero_init=False, wg_wait=-1)
        if const_expr(not ds2):
            cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
        wgmma(tiled_mma_dQ, acc_dQ, o.tdQrdS[None, None, None, bdS], o.tdQrKt, zero_init=True, wg_wait=1)
        pipeline_do.consumer_release(state)  # dP and dV^T have read dO
        wgmma(tiled_mma_dK, acc_dK, o.tdKrQt[None, None, None, idx], o.tdKrdSt[None, None, None, bdS], zero_init=False, wg_wait=1)
        # dQ is done (dK^T still runs): dQ_accum[query block] += dS K through the staging buffer, in fragment order
        self.dq_stage_for_writer(cute.make_tensor(acc_dQ.iterator, cute.make_layout(o.tdQsdQ.shape)), o.tdQsdQ, wg_idx)
        warpgroup.wait_group(0)
        pipeline_q.consumer_release(state)  # S and dK^T have read Q
        state.advance()
        return state
