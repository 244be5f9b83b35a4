"""Flash attention backward for Hopper (sm_90a), the split-head-dim schedule (compile-key variant ``split_d``) for
head dims whose dK and dV accumulators do not fit one warpgroup's registers next to each other (D = 256).

Same math, operands, scratch and producer as kernel_sm90.py (this class inherits its launch, kernel body, producer
warp and epilogue); what changes is the consumers' split of the work. One CTA owns ``tile_n = 64`` keys and walks
query blocks of ``tile_m = 64`` rows; the two consumer warpgroups share the keys:

- S^T = K Q^T and dP^T = V dO^T: warpgroup w computes the 32 queries of half w (SS WGMMA, 64 x 32);
- P^T and dS^T of both halves go to shared memory (stmatrix), so each warpgroup then owns one half of the head dim:
  dV[:, half w] += P^T dO[:, half w] and dK[:, half w] += dS^T Q[:, half w] (SS WGMMA; 64 x D/2 accumulators);
- dQ = dS K in two column halves (each warpgroup a quarter of the head dim per GEMM, 64 x D/4 accumulator), added with
  fp32 vector atomics into the workspace accumulator.

Per thread: dK + dV 2 x 64 x D/2 / 128 fp32, dQ 64 x D/4 / 128, S^T and dP^T 64 x 32 / 128 each: 224 registers at
D = 256 at the peak of the S phase, under the 240 of a consumer. ``deterministic``: both dQ halves of a query block are
added inside this key block's turn (the parent's turn counters, ``dq_turn_wait`` / ``dq_turn_done``). D = 192 with
D_v = 128: dK 96 and dV 64 columns a warpgroup, dQ 48 (sQ's swizzle atom divides 96, sK's 48: ``_q_do_atom_cols``,
``_k_atom_cols``).
With ``ds_double_buffer`` the P^T / dS^T buffers are doubled (indexed by the Q stage; 230,400 bytes of shared memory
at D = 256) and the "buffers free" barrier of every query block goes, as in the parent.

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py. Benchmark: benchmarks/sdpa_bwd.py (``ours-splitd``,
``ours-splitd2``).
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.mask_bwd import MaskInfoBwd
from .._device.mma_sm90 import acc_view_mn, transpose_view, wgmma
from .._device.pipeline import consumer_wait
from .kernel_key import SdpaBwdKey
from .kernel_sm90 import NamedBarrierBwd, SdpaBwdKernelSm90


class SdpaBwdSplitDKernelSm90(SdpaBwdKernelSm90):
    """The ``split_d`` main kernel: ``_tiled_mmas`` / ``_k_atom_cols`` / ``_ds_layout`` are its plan,
    ``consumer_operands`` / ``step`` its consumers' schedule. Everything else is the parent's: the launch (``__call__``
    builds the plan through those hooks and compiles the variants' buffers out: split_d has no dq_tma or stats_tma),
    the kernel body, the producer warp, the consumers' walk over query blocks (``mma``) and the dK / dV epilogue."""

    def __init__(self, key: SdpaBwdKey):
        super(SdpaBwdKernelSm90, self).__init__(key)  # the plan half only: the parent's tile table has no split-D row
        self.tile_m, self.tile_n, self.num_stages = 64, 64, 2

    def _ds_layout(self):
        """P^T and dS^T (keys, queries), queries contiguous: buffer 2 s is P^T, 2 s + 1 dS^T, for s < 2 (indexed by the
        Q stage) with ds_double_buffer, s = 0 without."""
        return self._smem_layout(self.tile_n, self.tile_m, 4 if self.key.ds_double_buffer else 2)

    def _tiled_mmas(self):
        """The (S^T / dP^T, dK, dV, dQ) tiled MMAs of the split-D consumers (host-side construction)."""
        D, Dv = self.head_dim, self.head_dim_v
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
        return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ

    def _k_atom_cols(self) -> int:
        """dQ reads K^T in D / 4 column slices per warpgroup: the swizzle atom of sK must divide D / 4."""
        return self.head_dim // (2 * self.num_consumer_wg)

    def _q_do_atom_cols(self) -> tuple[int, int]:
        """dK / dV read Q^T / dO^T split over the warpgroups along the head dim: the swizzle atoms must divide D / 2 and
        D_v / 2 (D = 192: 96 columns, the 64-byte swizzle)."""
        return self.head_dim // self.num_consumer_wg, self.head_dim_v // self.num_consumer_wg

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
        """The split-D consumer's operands of :meth:`step` (``sPdS``: the P^T and dS^T buffers, see ``_ds_layout``):
        P^T and dS^T are A operands from shared memory, dQ runs in two column halves (K^T halves 0 and 1)."""
        D = self.head_dim
        _, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, thr_mma_dQ, wg_mma_SdP, tSrK, tSrQ, tdPrV, tdPrdO = self.consumer_slices(
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, sQ, sK, sV, sdO, tidx
        )
        # P^T / dS^T operands and stmatrix destinations keep the buffer mode; step picks the block's buffers.
        tdVrPt = wg_mma_dV.make_fragment_A(wg_mma_dV.partition_A(sPdS))
        tdVrdOt = wg_mma_dV.make_fragment_B(wg_mma_dV.partition_B(transpose_view(sdO)))
        tdKrdSt = wg_mma_dK.make_fragment_A(wg_mma_dK.partition_A(sPdS))
        tdKrQt = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(transpose_view(sQ)))
        tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(transpose_view(sPdS)))
        sKt = transpose_view(sK)  # (D, keys)
        tdQrKt0 = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(cute.local_tile(sKt, (D // 2, self.tile_n), (0, 0))))
        tdQrKt1 = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(cute.local_tile(sKt, (D // 2, self.tile_n), (1, 0))))
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, tScS_mn, rLSE, rDpsum = self.consumer_accumulators(
            wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, D // 2
        )
        smem_copy_atom, smem_thr_copy_PdS, tPsP = self.ds_smem_copy(tiled_mma_SdP, sPdS, tidx)
        return SimpleNamespace(
            thr_mma_dQ=thr_mma_dQ, acc_S=acc_S, acc_dP=acc_dP, acc_dK=acc_dK, acc_dV=acc_dV, acc_dQ=acc_dQ, rP=rP, rdS=rdS, rLSE=rLSE,
            rDpsum=rDpsum, tSrK=tSrK, tSrQ=tSrQ, tdPrV=tdPrV, tdPrdO=tdPrdO, tdVrPt=tdVrPt, tdVrdOt=tdVrdOt, tdKrdSt=tdKrdSt, tdKrQt=tdKrQt,
            tdQrdS=tdQrdS, tdQrKt0=tdQrKt0, tdQrKt1=tdQrKt1, smem_copy_atom=smem_copy_atom, smem_thr_copy_PdS=smem_thr_copy_PdS, tPsP=tPsP,
            tdSsdS=tPsP, tScS_mn=tScS_mn,
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
        """One query block: S^T, dP^T (SS, this warpgroup's queries), P^T, dS^T to shared memory, dV and dK (SS, this
        warpgroup's half of the head dim), dQ in two column halves (SS, atomics); ``ops``: the record of
        :meth:`consumer_operands` (the parent's signature; the operands of its variants are None here)."""
        o = ops
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, rLSE, rDpsum = o.acc_S, o.acc_dP, o.acc_dK, o.acc_dV, o.acc_dQ, o.rP, o.rdS, o.rLSE, o.rDpsum
        tSrK, tSrQ, tdPrV, tdPrdO, tdVrPt, tdVrdOt, tdKrdSt, tdKrQt = o.tSrK, o.tSrQ, o.tdPrV, o.tdPrdO, o.tdVrPt, o.tdVrdOt, o.tdKrdSt, o.tdKrQt
        tdQrdS, tdQrKt0, tdQrKt1, thr_mma_dQ, tScS_mn = o.tdQrdS, o.tdQrKt0, o.tdQrKt1, o.thr_mma_dQ, o.tScS_mn
        smem_copy_atom, smem_thr_copy_PdS, tPsP, tdSsdS = o.smem_copy_atom, o.smem_thr_copy_PdS, o.tPsP, o.tdSsdS
        idx = state.index
        row0 = m_block * self.tile_m
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
        sem_ptr = None
        if const_expr(self.key.deterministic):
            # fixed order: this key block adds both halves in its turn (the second dQ GEMM runs inside it)
            sem_ptr = self.dq_turn_wait(mSem_cur, mask, tidx, m_block, n_block)
        self.add_dq(thr_mma_dQ.partition_C(gdQacc0), acc_dQ)
        warpgroup.wait_group(0)
        pipeline_do.consumer_release(state)
        pipeline_q.consumer_release(state)  # dQ reads dS^T and K only
        wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, bdS], tdQrKt1, zero_init=True, wg_wait=0)
        gdQacc1 = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim // 2), (m_block, 1))
        self.add_dq(thr_mma_dQ.partition_C(gdQacc1), acc_dQ)
        if const_expr(self.key.deterministic):
            self.dq_turn_done(sem_ptr, tidx)
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


def split_d_kernel_class(key: SdpaBwdKey) -> type:
    """The class of the key's split-D schedule: :class:`SdpaBwdSplitDKernelSm90`, or with ``dq_bulk`` the bulk-dQ subclass
    (kernel_splitd_bulk_sm90.py). Used by both construction sites (kernel_sm90.compile_sdpa_bwd_main and the
    postprocess's plan)."""
    if key.dq_bulk:
        from .kernel_splitd_bulk_sm90 import SdpaBwdSplitDBulkKernelSm90

        return SdpaBwdSplitDBulkKernelSm90
    return SdpaBwdSplitDKernelSm90
