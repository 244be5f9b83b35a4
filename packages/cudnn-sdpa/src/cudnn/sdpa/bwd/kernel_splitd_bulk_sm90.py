"""Flash attention backward for Hopper (sm_90a) at head dim 256 (and D = 192 with D_v = 128): the split-D kernel with FA3 /
FA4's dQ path (compile-key variant ``split_d`` + ``dq_bulk``, optionally ``dq_writer``, ``sdp_wg``, ``dkv_rs`` (with those:
the d256 default, api.D256_TUNING) and ``dkv_early``; dkv_rs / dkv_early need D = D_v. D = 192 / 128: api.D192_TUNING,
split_d + dq_bulk + dq_writer, two Q / dO stages).

Same math, operands, scratch, producer, masks and dK / dV epilogue as kernel_splitd_sm90.py (this class inherits them);
what changes is how dQ leaves the CTA. A CTA owns ``tile_n = 64`` keys and walks query blocks of ``tile_m = 64`` rows:

- S^T = K Q^T and dP^T = V dO^T: warpgroup w computes the 32 queries of half w (SS WGMMA, 64 x 32), as split_d; with
  ``sdp_wg`` warpgroup 1 computes all of S^T and warpgroup 2 all of dP^T (64 x 64 WGMMAs: per k-step 4 KiB of shared
  memory operands for 64 x 64 outputs instead of 2 x 3 KiB), warpgroup 2 reading P^T back (bf16, ldmatrix, after a
  named-barrier handshake) to form dS^T, so dS^T carries P's bf16 rounding (dV always multiplies the bf16 P^T);
- P^T and dS^T go to shared memory (stmatrix); dV[:, half w] += P^T dO[:, half w] and dK[:, half w] += dS^T Q[:, half w]
  (SS WGMMA, 64 x 128 accumulators), as split_d; with ``dkv_rs`` (on sdp_wg) warpgroup 1 runs dV and warpgroup 2 dK,
  each whole (64 x 256) as RS WGMMAs from the P^T / dS^T registers it holds, after the P^T / dS^T barrier;
- ``dkv_early`` (on dkv_rs): each warpgroup issues its RS GEMM as soon as its registers are formed, before that
  barrier (only dQ, which reads dS^T from shared memory, needs it), so warpgroup 1's dV runs while warpgroup 2 forms
  dS^T; Q / dO are released per warpgroup right after its last read (warpgroup 1: Q after S^T, dO after dV; warpgroup
  2: dO after dP^T, Q after dK) and the producer loads dO first (it is freed first). Both warpgroups' RS GEMMs come
  from ONE call site (A: the registers of dS^T, which warpgroup 1 fills with P^T; B: sQ's fragment shifted to sdO for
  warpgroup 1): issued from the two sides of a branch, as dkv_rs issues them, they make ptxas serialize every WGMMA
  of the kernel ("C7512 ... insufficient register resources": a wait after each of the 88 HGMMAs in the SASS of the
  dkv_rs kernel, 8 waits for 80 HGMMAs with dkv_early);
- dQ = dS K in ONE GEMM per warpgroup (its half of the head dim: 64 x 128, 64 fp32 registers a thread; split_d runs
  two 64 x 64 GEMMs per warpgroup and adds each with register atomics), issued between dK and dV: dK first (Q is then
  free, so the next block's Q load overlaps dQ and dV: there is one Q stage), dQ's staging overlaps dV. The fragment
  is stored to shared memory in its own order (16-byte stores) and added into the fragment-ordered accumulator
  (kernel_key.DQ_BULK_ROWS) by ONE contiguous ``cp.reduce.async.bulk .add.f32`` per warpgroup, issued by a thread of
  the warpgroup (or, with ``dq_writer``, by warp 1 of the producer warpgroup, as FA4 does); the postprocess reads the
  accumulator back in that order;
- one Q / dO stage (shared memory: Q, dO, K, V 32 KiB each, P^T / dS^T 16 KiB (32 KiB with ds2, the buffer pair
  chosen by the pipeline phase), the fp32 dQ staging 64 KiB: 230,400 bytes with ds2), FA4's d256 stage counts.

Why: at d256 a 64 x 64 tile moves 64 KiB of Q / dO into the CTA and 64 KiB of fp32 dQ out of it per query block, so
the L2 traffic per FLOP is twice d128's; register atomics (8 bytes a lane, 8K vector reductions per block) are the
costlier way to send half of it. (Session 4's two-CTA cluster variants, Q / dO multicast ``cluster2`` and the pair's
dQ summed in shared memory ``dqpair``, cut those two halves and lost on the H200, 301 / 289 TFLOP/s vs 314 for this
class without them, 336 vs 409 with dkv_rs: removed in session 5, see docs/benchmarks/sdpa_bwd_d256.md.)

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py (``SPLITB``, ``SPLITB1``, ``SPLITW``, ``SPLITR``,
``SPLITR2``) and test_sdpa_bwd_variants_compile.py. Benchmark: benchmarks/sdpa_bwd.py (``ours-splitdb``,
``ours-splitdw``, ``ours-splitdr``, ``ours-splitdr2``).
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import cpasync, warp, warpgroup

from .._device.mask_bwd import MaskInfoBwd
from .._device.mma_sm90 import acc_view_as_a, acc_view_mn, transpose_view, wgmma
from .._device.pipeline import consumer_wait
from .kernel_key import SdpaBwdKey
from .kernel_sm90 import NamedBarrierBwd, reduce_add_bulk_f32
from .kernel_splitd_sm90 import SdpaBwdSplitDKernelSm90

#: sdp_wg: named barrier "P^T of this block is in shared memory" (warpgroup 1 arrives, warpgroup 2 waits); after
#: kernel_sm90.NamedBarrierBwd's ids (1 .. 7)
P_READY_BARRIER = 8


class SdpaBwdSplitDBulkKernelSm90(SdpaBwdSplitDKernelSm90):
    """``split_d`` + ``dq_bulk``: the split-D consumers with one dQ GEMM per warpgroup and the bulk reduce-add (the
    parent classes' launch, kernel body, producer, writer warp and epilogue; ``_tiled_mmas`` / ``consumer_operands``
    / ``step`` are this class's)."""

    def __init__(self, key: SdpaBwdKey):
        super().__init__(key)
        if not key.dq_bulk:
            raise ValueError("SdpaBwdSplitDBulkKernelSm90 is the split_d + dq_bulk schedule (set dq_bulk)")
        # FA4's d256 stage count: the 64 KiB fp32 dQ staging takes the second Q / dO stage's room; D = 192 / 128 keeps
        # two (about 200 KiB with ds2: Q 2 x 24, dO 2 x 16, K 24, V 16, P^T / dS^T 32, dQ staging 48)
        self.num_stages = 1 if key.head_dim == 256 else 2

    def _tiled_mmas(self):
        """Split-D's S^T / dP^T, dK, dV MMAs and the full-width dQ MMA: dQ = dS K with M = the 64 queries and N = the
        head dim split over the warpgroups (the parent kernel's dQ MMA, whose fragment order the postprocess reads)."""
        tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, _ = super()._tiled_mmas()
        K_MAJOR, MN_MAJOR = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        nwg = self.num_consumer_wg
        if self.key.sdp_wg:
            # sdp_wg: one warpgroup's 64 x 64 tile (warpgroup 1 runs it for S^T = K Q^T, warpgroup 2 for dP^T = V dO^T)
            tiled_mma_SdP = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, K_MAJOR, K_MAJOR, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(self.tile_n, self.tile_m)
            )
        if self.key.dkv_rs:
            # dkv_rs: one warpgroup's whole 64 x D accumulator, A (P^T / dS^T) from its registers, B = dO^T / Q^T
            tiled_mma_dK, tiled_mma_dV = [
                sm90_utils.make_trivial_tiled_mma(
                    self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(self.tile_n, d),
                    a_source=warpgroup.OperandSource.RMEM,
                )
                for d in (self.head_dim, self.head_dim_v)
            ]  # fmt: skip
        tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, nwg, 1), tiler_mn=(64, self.head_dim // nwg)
        )
        return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ

    def _k_atom_cols(self) -> int:
        """dQ reads K^T in D / 2 column slices per warpgroup: the swizzle atom of sK must divide D / 2."""
        return self.head_dim // self.num_consumer_wg

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
        """Split-D's operands (P^T and dS^T A operands from shared memory) with the full-width dQ GEMM (A = dS, the MN-major
        view of the dS^T buffers; B = this warpgroup's half of K^T) and this thread's 16-byte groups of the
        fragment-ordered dQ staging buffer."""
        wg_idx, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, thr_mma_dQ, wg_mma_SdP, tSrK, tSrQ, tdPrV, tdPrdO = self.consumer_slices(
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, sQ, sK, sV, sdO, tidx
        )
        tdVrPt, tdKrdSt = None, None
        if const_expr(self.key.dkv_rs):
            # one-warpgroup dK / dV MMAs (A from registers): every warpgroup takes slice 0
            wg_mma_dK, wg_mma_dV = tiled_mma_dK.get_slice(0), tiled_mma_dV.get_slice(0)
        else:
            tdVrPt = wg_mma_dV.make_fragment_A(wg_mma_dV.partition_A(sPdS))
            tdKrdSt = wg_mma_dK.make_fragment_A(wg_mma_dK.partition_A(sPdS))
        tdVrdOt = wg_mma_dV.make_fragment_B(wg_mma_dV.partition_B(transpose_view(sdO)))
        tdKrQt = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(transpose_view(sQ)))
        tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(transpose_view(sPdS)))
        tdQrKt = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(transpose_view(sK)))
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, tScS_mn, rLSE, rDpsum = self.consumer_accumulators(
            wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, self.head_dim
        )
        smem_copy_atom, smem_thr_copy_PdS, tPsP = self.ds_smem_copy(tiled_mma_SdP, sPdS, tidx)
        if const_expr(self.key.dkv_rs):
            # the warpgroup's one accumulator: dV on warpgroup 1, dK on warpgroup 2 (the epilogue picks by warpgroup)
            acc_dK = cute.make_rmem_tensor(wg_mma_dK.partition_shape_C((self.tile_n, self.head_dim)), Float32)
            acc_dV = acc_dK
        tdQsdQ = self._dq_bulk_copy().get_slice(tidx).partition_D(sdQ_lin)
        tdKVrB = None
        if const_expr(self.key.dkv_early):
            # dkv_early's one RS GEMM call site: B = dO^T for warpgroup 1 (dV), Q^T for warpgroup 2 (dK). sQ and sdO have
            # one layout (D = D_v) and 1024-byte-aligned bases 32 KiB apart, so the B fragment is sQ's shifted by the
            # warpgroup (its descriptors carry dkv_rs's layout bits: test_sdpa_bwd_variants_compile.py).
            qdo = (sdO.iterator.toint() - sQ.iterator.toint()) // (self.dtype.width // 8)
            sB = cute.make_tensor(sQ.iterator + (1 - wg_idx) * qdo, sQ.layout)
            tdKVrB = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(transpose_view(sB)))
        ld_atom, ld_thr_copy_P, tPsP_ld = None, None, None
        if const_expr(self.key.sdp_wg):
            # each warpgroup runs the whole 64 x 64 S^T (warpgroup 1) or dP^T (warpgroup 2): slice the one-warpgroup
            # MMA by the thread's index in its warpgroup; warpgroup 2 reads P^T back in the same accumulator layout
            wtid = tidx % self.threads_per_wg
            wg_mma_SdP = tiled_mma_SdP.get_slice(0)
            thr_mma_SdP = tiled_mma_SdP.get_slice(wtid)
            tSrK = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sK))
            tSrQ = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sQ))
            tdPrV = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sV))
            tdPrdO = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sdO))
            acc_S, acc_dP, _, _, _, rP, rdS, tScS_mn, rLSE, rDpsum = self.consumer_accumulators(
                wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, self.head_dim
            )
            smem_copy_atom, smem_thr_copy_PdS, tPsP = self.ds_smem_copy(tiled_mma_SdP, sPdS, wtid)
            ld_atom = cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
            ld_thr_copy_P = cute.make_tiled_copy_C(ld_atom, tiled_mma_SdP).get_slice(wtid)
            tPsP_ld = ld_thr_copy_P.partition_S(sPdS)
        return SimpleNamespace(
            wg_idx=wg_idx, thr_mma_dQ=thr_mma_dQ, acc_S=acc_S, acc_dP=acc_dP, acc_dK=acc_dK, acc_dV=acc_dV, acc_dQ=acc_dQ, rP=rP, rdS=rdS,
            rLSE=rLSE, rDpsum=rDpsum, tSrK=tSrK, tSrQ=tSrQ, tdPrV=tdPrV, tdPrdO=tdPrdO, tdVrPt=tdVrPt, tdVrdOt=tdVrdOt, tdKrdSt=tdKrdSt,
            tdKrQt=tdKrQt, tdQrdS=tdQrdS, tdQrKt=tdQrKt, smem_copy_atom=smem_copy_atom, smem_thr_copy_PdS=smem_thr_copy_PdS, tPsP=tPsP,
            tScS_mn=tScS_mn, tdQsdQ=tdQsdQ, ld_atom=ld_atom, ld_thr_copy_P=ld_thr_copy_P, tPsP_ld=tPsP_ld, tdKVrB=tdKVrB,
        )  # fmt: skip

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
        """One query block: S^T, dP^T (SS, this warpgroup's queries), P^T and dS^T to shared memory, then dK, dQ and dV
        (SS, this warpgroup's half of the head dim) in flight together: Q is released when dK is done, dQ goes to the
        staging buffer and out through one bulk reduce-add per warpgroup while dV runs, dO is released last."""
        o = ops
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, rLSE, rDpsum = o.acc_S, o.acc_dP, o.acc_dK, o.acc_dV, o.acc_dQ, o.rP, o.rdS, o.rLSE, o.rDpsum
        tSrK, tSrQ, tdPrV, tdPrdO, tdVrPt, tdVrdOt, tdKrdSt, tdKrQt = o.tSrK, o.tSrQ, o.tdPrV, o.tdPrdO, o.tdVrPt, o.tdVrdOt, o.tdKrdSt, o.tdKrQt
        tdQrdS, tdQrKt, tScS_mn, tdQsdQ, wg_idx = o.tdQrdS, o.tdQrKt, o.tScS_mn, o.tdQsdQ, o.wg_idx
        smem_copy_atom, smem_thr_copy_PdS, tPsP = o.smem_copy_atom, o.smem_thr_copy_PdS, o.tPsP
        idx = state.index
        row0 = m_block * self.tile_m
        if const_expr(self.key.sdp_wg):
            bP, bdS = 2 * state.phase, 2 * state.phase + 1  # ds2's buffer pair (required by the key)
            if const_expr(self.key.dkv_early):
                # dkv_early: each warpgroup releases Q / dO as soon as it has read them (warpgroup 1: Q in S^T, dO in
                # dV; warpgroup 2: dO in dP^T, Q in dK) and issues its RS GEMM (dV / dK) as soon as its A registers are
                # formed, before the P^T / dS^T barrier below (which only dQ, reading dS^T from shared memory, needs):
                # warpgroup 1's dV runs while warpgroup 2 forms dS^T. ONE call site for both warpgroups' RS GEMM (A:
                # rdS, which warpgroup 1 fills with its P^T; B: o.tdKVrB, dO^T or Q^T by warpgroup): ptxas serializes
                # every WGMMA of the kernel (C7512) when the two are issued from the two sides of a branch, as dkv_rs does.
                if wg_idx == 0:
                    consumer_wait(pipeline_q, state, self.key.spin_wait)
                    self.sdp_wg_p(o, mLSE2_cur, tiled_mma_SdP, idx, bP, row0, scale_log2, mask, m_block, n_block, masked)
                    pipeline_q.consumer_release(state)  # S^T (waited for in sdp_wg_p) was this warpgroup's read of Q
                    consumer_wait(pipeline_do, state, self.key.spin_wait)
                    rdS.store(rP.load())  # dV's A operand, in the registers of warpgroup 2's dS^T (the compiler renames them)
                else:
                    consumer_wait(pipeline_do, state, self.key.spin_wait)
                    self.sdp_wg_ds(o, mDpsum_cur, tiled_mma_SdP, idx, bP, bdS, row0)
                    pipeline_do.consumer_release(state)  # dP^T (waited for in sdp_wg_ds) was this warpgroup's read of dO
                    consumer_wait(pipeline_q, state, self.key.spin_wait)
                self.dkv_rs_gemm(tiled_mma_dK, acc_dK, rdS, o.tdKVrB[None, None, None, idx])  # dV (warpgroup 1) or dK (2)
            else:
                if wg_idx == 0:
                    consumer_wait(pipeline_q, state, self.key.spin_wait)
                    self.sdp_wg_p(o, mLSE2_cur, tiled_mma_SdP, idx, bP, row0, scale_log2, mask, m_block, n_block, masked)
                else:
                    consumer_wait(pipeline_do, state, self.key.spin_wait)
                    self.sdp_wg_ds(o, mDpsum_cur, tiled_mma_SdP, idx, bP, bdS, row0)
                # phase 2 reads both (dK: Q, dV: dO): the wait each warpgroup skipped above (a completed phase passes at once)
                consumer_wait(pipeline_q, state, self.key.spin_wait)
                consumer_wait(pipeline_do, state, self.key.spin_wait)
        else:
            consumer_wait(pipeline_q, state, self.key.spin_wait)
            wgmma(tiled_mma_SdP, acc_S, tSrK, tSrQ[None, None, None, idx], zero_init=True, wg_wait=-1)
            for c in cutlass.range_constexpr(cute.size(rLSE)):
                rLSE[c] = mLSE2_cur[row0 + tScS_mn[0, c][1]]
            consumer_wait(pipeline_do, state, self.key.spin_wait)
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
                # One Q stage: the pipeline phase alternates per block, so it picks the buffer pair. Pair (2 ph, 2 ph + 1)
                # was last read by the GEMMs of two blocks ago, which both warpgroups finished before passing the
                # previous block's barrier below: no "free" barrier needed.
                ph = state.phase
                bP, bdS = 2 * ph, 2 * ph + 1
            else:
                cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
            cute.copy(smem_copy_atom, smem_thr_copy_PdS.retile(rP), tPsP[None, None, None, bP])
            cute.copy(smem_copy_atom, smem_thr_copy_PdS.retile(rdS), tPsP[None, None, None, bdS])
        cute.arch.fence_view_async_shared()
        if const_expr(not self.key.dq_writer):
            # The previous block's reduce-add has read this warpgroup's dQ buffer before anyone passes this barrier.
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
        if const_expr(self.key.dkv_early):
            # dV (warpgroup 1) / dK (warpgroup 2) have been in flight since before the barrier: dQ (SS), then, once the
            # RS GEMM's group (the older one) is done, the release of the buffer it read
            wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt, zero_init=True, wg_wait=1)
            if wg_idx == 0:
                pipeline_do.consumer_release(state)  # dV has read dO
            else:
                pipeline_q.consumer_release(state)  # dK has read Q
            warpgroup.wait_group(0)
        elif const_expr(self.key.dkv_rs):
            # warpgroup 1: dV += P^T dO (all of D, P^T from its registers); warpgroup 2: dK += dS^T Q; then dQ (SS)
            if wg_idx == 0:
                self.dkv_rs_gemm(tiled_mma_dV, acc_dV, rP, tdVrdOt[None, None, None, idx])
            else:
                self.dkv_rs_gemm(tiled_mma_dK, acc_dK, rdS, tdKrQt[None, None, None, idx])
            wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt, zero_init=True, wg_wait=1)
            pipeline_q.consumer_release(state)  # dV / dK have read dO / Q: both are free
            pipeline_do.consumer_release(state)
            warpgroup.wait_group(0)
        else:
            # dK first: Q is free once it is done, so the next block's Q load (one stage) overlaps dQ and dV; dQ's
            # staging overlaps dV; dO (needed after the next block's S^T is issued) is released last.
            wgmma(tiled_mma_dK, acc_dK, tdKrdSt[None, None, None, bdS], tdKrQt[None, None, None, idx], zero_init=False, wg_wait=-1)
            wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt, zero_init=True, wg_wait=-1)
            wgmma(tiled_mma_dV, acc_dV, tdVrPt[None, None, None, bP], tdVrdOt[None, None, None, idx], zero_init=False, wg_wait=2)
            pipeline_q.consumer_release(state)  # dK has read Q
            warpgroup.wait_group(1)
        # dQ is done (dV still runs): dQ_accum[query block] += dS K through the staging buffer, in fragment order
        acc_flat = cute.make_tensor(acc_dQ.iterator, cute.make_layout(tdQsdQ.shape))
        if const_expr(self.key.dq_writer):
            self.dq_stage_for_writer(acc_flat, tdQsdQ, wg_idx)
        else:
            cute.autovec_copy(acc_flat, tdQsdQ)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + wg_idx, number_of_threads=self.threads_per_wg)
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                half = self.tile_m * self.head_dim // self.num_consumer_wg
                gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block, 0))
                with cute.arch.elect_one():
                    reduce_add_bulk_f32(gdQ.iterator + wg_idx * half, sdQ[None, wg_idx].iterator, half * 4)
                cute.arch.cp_async_bulk_commit_group()
        if const_expr(not self.key.dkv_rs):
            warpgroup.wait_group(0)
            pipeline_do.consumer_release(state)  # dV has read dO
        state.advance()
        return state

    @cute.jit
    def sdp_wg_p(
        self,
        o,
        mLSE2_cur: cute.Tensor,
        tiled_mma_SdP: cute.TiledMma,
        idx: Int32,
        bP: Int32,
        row0: Int32,
        scale_log2: Float32,
        mask: MaskInfoBwd,
        m_block: Int32,
        n_block: Int32,
        masked: cutlass.Constexpr[bool],
    ):
        """sdp_wg, warpgroup 1: S^T (64 keys x 64 queries), P^T = exp2(S^T * scale - lse) to P^T buffer ``bP``, then
        "P^T ready" for warpgroup 2."""
        acc_S, rP, rLSE, tScS_mn = o.acc_S, o.rP, o.rLSE, o.tScS_mn
        wgmma(tiled_mma_SdP, acc_S, o.tSrK, o.tSrQ[None, None, None, idx], zero_init=True, wg_wait=-1)
        for c in cutlass.range_constexpr(cute.size(rLSE)):
            rLSE[c] = mLSE2_cur[row0 + tScS_mn[0, c][1]]
        warpgroup.wait_group(0)
        if const_expr(masked):
            mask.apply_transposed(acc_S, tScS_mn, m_block, n_block, mask_seqlen=True)
        acc_S_mn = acc_view_mn(acc_S)
        for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c] * scale_log2 - rLSE[c], fastmath=True)
        rP.store(acc_S.load().to(self.dtype))
        cute.copy(o.smem_copy_atom, o.smem_thr_copy_PdS.retile(rP), o.tPsP[None, None, None, bP])
        cute.arch.fence_view_async_shared()  # P^T for the dV WGMMA (warpgroup 2's ldmatrix is ordered by the barrier)
        cute.arch.barrier_arrive(barrier_id=P_READY_BARRIER, number_of_threads=self.num_mma_threads)

    @cute.jit
    def sdp_wg_ds(self, o, mDpsum_cur: cute.Tensor, tiled_mma_SdP: cute.TiledMma, idx: Int32, bP: Int32, bdS: Int32, row0: Int32):
        """sdp_wg, warpgroup 2: dP^T (64 keys x 64 queries), then dS^T = P^T * (dP^T - dpsum) with P^T read back from
        buffer ``bP`` (ldmatrix, the accumulator layout warpgroup 1 stored it in) to dS^T buffer ``bdS``."""
        acc_dP, rP, rdS, rDpsum, tScS_mn = o.acc_dP, o.rP, o.rdS, o.rDpsum, o.tScS_mn
        wgmma(tiled_mma_SdP, acc_dP, o.tdPrV, o.tdPrdO[None, None, None, idx], zero_init=True, wg_wait=-1)
        for c in cutlass.range_constexpr(cute.size(rDpsum)):
            rDpsum[c] = mDpsum_cur[row0 + tScS_mn[0, c][1]]
        warpgroup.wait_group(0)
        cute.arch.barrier(barrier_id=P_READY_BARRIER, number_of_threads=self.num_mma_threads)
        cute.copy(o.ld_atom, o.tPsP_ld[None, None, None, bP], o.ld_thr_copy_P.retile(rP))
        acc_dP_mn = acc_view_mn(acc_dP)
        for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1])):
                acc_dP_mn[r, c] = acc_dP_mn[r, c] - rDpsum[c]
        # P^T in the element type (what dV multiplies too): one more rounding than split_d's fp32 P
        rdS.store((rP.load().to(Float32) * acc_dP.load()).to(self.dtype))
        cute.copy(o.smem_copy_atom, o.smem_thr_copy_PdS.retile(rdS), o.tPsP[None, None, None, bdS])

    @cute.jit
    def dkv_rs_gemm(self, tiled_mma: cute.TiledMma, acc: cute.Tensor, rA: cute.Tensor, tCrB: cute.Tensor):
        """dkv_rs: acc += A B with A from this warpgroup's registers (P^T for dV, dS^T for dK, in the S^T / dP^T
        accumulator layout viewed as the A operand) and B from shared memory; commits one group, no wait."""
        wgmma(tiled_mma, acc, acc_view_as_a(rA), tCrB, zero_init=False, wg_wait=-1)

    @cute.jit
    def epilogue_dkv(
        self,
        acc_dK: cute.Tensor,
        acc_dV: cute.Tensor,
        smem_copy_atom: cute.CopyAtom,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        sK: cute.Tensor,
        sV: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        mask: MaskInfoBwd,
        scale: Float32,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_k: Int32,
        tidx: Int32,
        staging=None,
    ):
        """The parent's epilogue; with dkv_rs each warpgroup holds one whole accumulator (``acc_dK`` is ``acc_dV``):
        warpgroup 1 writes dV over V's buffer, warpgroup 2 dK (scaled) over K's, then the parent's stores. ``staging``
        is always None (the key keeps persistent plans off split-D); it is passed on to keep the parent's signature."""
        if const_expr(not self.key.dkv_rs):
            # the parent's, named explicitly (a zero-argument super() inside a traced method resolves from the
            # instance's class: a subclass instance would recurse into this method)
            SdpaBwdSplitDKernelSm90.epilogue_dkv(
                self,
                acc_dK, acc_dV, smem_copy_atom, tiled_mma_dK, tiled_mma_dV, sK, sV, mdK, mdV, tma_atom_dK, tma_atom_dV, mask, scale,
                n_block, head_kv, batch, offset_k, tidx, staging,
            )  # fmt: skip
        else:
            D, Dv = self.head_dim, self.head_dim_v
            wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
            sc = Float32(1.0)
            if wg_idx == 1:
                sc = scale
            acc_dK.store(acc_dK.load() * sc)
            rKV = cute.make_rmem_tensor_like(acc_dK, self.dtype)
            rKV.store(acc_dK.load().to(self.dtype))
            # Every consumer is past its last GEMM reading sK / sV: reuse them for dK / dV.
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
            thr_copy = cute.make_tiled_copy_C(smem_copy_atom, tiled_mma_dK).get_slice(tidx % self.threads_per_wg)
            if wg_idx == 0:
                cute.copy(smem_copy_atom, thr_copy.retile(rKV), thr_copy.partition_D(sV))
            else:
                cute.copy(smem_copy_atom, thr_copy.retile(rKV), thr_copy.partition_D(sK))
            if const_expr(not self.key.varlen):
                cute.arch.fence_view_async_shared()
                cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
                if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 4:
                    gdK = cute.local_tile(mdK[None, None, head_kv, batch], (self.tile_n, D), (n_block, 0))
                    gdV = cute.local_tile(mdV[None, None, head_kv, batch], (self.tile_n, Dv), (n_block, 0))
                    tdKsdK, tdKgdK = cpasync.tma_partition(tma_atom_dK, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gdK, 0, 2))
                    tdVsdV, tdVgdV = cpasync.tma_partition(tma_atom_dV, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gdV, 0, 2))
                    cute.copy(tma_atom_dK, tdKsdK, tdKgdK)
                    cute.copy(tma_atom_dV, tdVsdV, tdVgdV)
                    cute.arch.cp_async_bulk_commit_group()
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
            else:
                # varlen: predicated 16-byte stores, so no row of the next sequence is touched
                cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
                rows_left = mask.seqlen_k - n_block * self.tile_n
                self.store_rows(cute.domain_offset((offset_k, 0), mdK[None, None, head_kv, batch]), sK, rows_left, n_block, tidx, D)
                self.store_rows(cute.domain_offset((offset_k, 0), mdV[None, None, head_kv, batch]), sV, rows_left, n_block, tidx, Dv)
