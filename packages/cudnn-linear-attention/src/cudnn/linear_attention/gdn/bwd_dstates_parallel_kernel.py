"""Gated DeltaNet backward, pass 2 chunk-parallel, launch 1 of 2 (``plan.parallel_pass2``, the default since session 10; sm_90a, CuTe DSL,
WGMMA): the precompute of the reverse state chain's operands, one CTA per (chunk, head) -- the twin of
``kda/bwd_dstates_parallel_kernel.py`` with the scalar decay.

Design and the operand arrays: ``_device/dstates_parallel.py`` (launch 2, the chain, is its
:class:`DeltaRuleBwdDStatesChain`, shared with KDA). Per chunk this kernel does the serial pass 2's
(``bwd_states_kernel.py::GdnBwdDStates``) state-independent work, with the same expressions and bf16 roundings:

- gates: ``g``, its in-chunk cumulative sum ``G`` and ``beta`` (``chunk_gates``);
- q, k rows (zero past the sequence's end, optional L2 norm; GVA: value head h reads q/k head h // (H / Hk)):
  ``Qs^T = (scale exp(G) Q)^T`` -> ``qst``, ``(beta exp(G) K)^T`` (shared), ``Kd = K exp(G_C - G)`` -> ``kdn``, the
  chunk's decay ``exp(G_C)`` in every channel -> ``ge``;
- ``P^T = (scale lower_eq(Q K^T exp(G_i - G_j)))^T`` (one WGMMA), ``Tm`` from pass 1's ``ws_tm``;
  ``Wm^T = (Tm (beta exp(G) K))^T`` -> ``wmt``;
- per 64-channel V slice: dO^T -> ``dot``, ``dVn_local = P^T dO`` -> ``dvl`` (fp32).

Grid [forward chunk slots, H] (the chunk-parallel pass 1's; an idle slot exits); it writes the backward's slot
``n + bos // 64 + ci``. Needs ``store_tm`` (pass 1 writes ``ws_tm``). Runtime extents are kernel arguments (Rule 4).

``kdn`` stores (session 10, issue #7): each thread's 8 consecutive key channels of a token row are formed in registers
(the same expression, rounded once to bf16, as before) and written as one 16-byte vector store (``KDN_STORE_VEC``,
True) instead of 8 2-byte stores (32 sectors per warp store; at K = 128, 64 2-byte stores per thread -> 8 16-byte
ones). Same addresses, same bits: ``KDN_STORE_VEC = False`` (never set by a plan) is the session-9 element stores, kept
as the bitwise baseline of ``tests/test_la_bwd_p2.py`` (its PTX is byte-identical to the kernel before the change).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device import delta_rule_bwd as bwd
from .._device.delta_rule import BV, CHUNK, THREADS, VEC, DeltaRuleKernel, chunk_gates, load_half_row, make_accumulators, row_guard
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.dstates_parallel import decays_to_workspace, prep_views, value_slices_to_workspace, wmt_to_workspace

__all__ = ["GdnBwdDStatesPrep"]


class GdnBwdDStatesPrep(DeltaRuleKernel):
    """``parallel_pass2`` launch 1 (GDN): the chain's operands of every chunk (module docstring); one CTA per (forward
    chunk slot, head)."""

    #: ``kdn`` by 16-byte vector stores (module docstring, "kdn stores"); False: the session-9 2-byte element stores
    #: (the tests' bitwise baseline; never set by a plan)
    KDN_STORE_VEC = True

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        wstm_ptr: cute.Pointer,
        kdn_ptr: cute.Pointer,
        dvl_ptr: cute.Pointer,
        wmt_ptr: cute.Pointer,
        qst_ptr: cute.Pointer,
        dot_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        fslots: Int32,
        heads: Int32,
        qk_heads: Int32,
        slots: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        do_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gDo, mG, mB, mCu, gWsTm, ops, mma, l_ck, l_kc, l_cc = prep_views(
            D, q_ptr, k_ptr, do_ptr, g_ptr, beta_ptr, cu_ptr, wstm_ptr, kdn_ptr, dvl_ptr, wmt_ptr, qst_ptr, dot_ptr, ge_ptr,
            T, n_seqs, heads, qk_heads, slots, q_strides, k_strides, do_strides, False, self.key.varlen,
        )  # fmt: skip
        SharedStorage = bwd.smem_struct(
            dict(smem_q=l_ck, smem_k=l_ck, smem_kt=l_kc, smem_tm=l_cc, smem_pt=l_cc, smem_dot=l_cc), dict(smem_g=CHUNK, smem_gc=CHUNK, smem_beta=CHUNK)
        )

        self.kernel(
            gQ, gK, gDo, mG, mB, mCu, gWsTm, ops, n_seqs, seq_len, chunks_per_seq, heads // qk_heads, scale, mma, l_ck, l_kc, l_cc, SharedStorage
        ).launch(grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gDo: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        gWsTm: cute.Tensor,
        ops: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        group: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        NH = D // BV
        mKdn, mDvl, mWmt, mQst, mDot, mGe = ops
        tidx, fslot, head, hk, seq, t0, n_valid = bwd.chunk_cta(mCu, n_seqs, seq_len, chunks_per_seq, group, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.smem_q.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (beta exp(G) K)^T
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sPT = storage.smem_pt.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # P^T [j, i]
        sDoT = storage.smem_dot.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # dO^T [V-slice, C]
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        if n_valid > 0:  # an idle slot (past its sequence's last chunk) exits; uniform per CTA
            eos, slot = bwd.chunk_slot(mCu, seq, seq_len, t0, n_valid, self.key.varlen)
            wg = mma.get_slice(0)
            kk_B = wg.make_fragment_B(wg.partition_B(sK))
            qk_A = wg.make_fragment_A(wg.partition_A(sQ))
            tm_A = wg.make_fragment_A(wg.partition_A(sTm))
            kt_B = wg.make_fragment_B(wg.partition_B(sKT))
            pt_A = wg.make_fragment_A(wg.partition_A(sPT))
            dot_B = wg.make_fragment_B(wg.partition_B(sDoT))
            acc_a, acc_b, _, c64 = make_accumulators(mma, wg, tidx, 0)
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            # ---- q, k rows (the serial pass 2's block): Qs^T -> qst, (beta exp(G) K)^T -> shared, Kd -> kdn ----------
            row = tidx // 2
            half = tidx % 2
            t_row, keep = row_guard(t0, row, n_valid, eos)
            g_row = sGc[row]
            b_row = sBeta[row]
            g_last = sGc[CHUNK - 1]
            NV = HALF // VEC
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            load_half_row(gQ, rbuf, t_row, hk, half, NV)
            inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            qscale = scale * cute.math.exp(g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    qn = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16)
                    sQ[row, col] = qn
                    mQst[slot, head, col, row] = (qn.to(Float32) * qscale).to(BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            kscale = b_row * cute.math.exp(g_row)
            kdec = cute.math.exp(g_last - g_row)
            if const_expr(self.KDN_STORE_VEC):  # this thread's 8 channels of row ``row`` -> one 16-byte store per vj
                gKdnv = cute.zipped_divide(mKdn, (1, 1, 1, VEC))
                kdbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC)), BFloat16)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    sK[row, col] = kn
                    sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
                    if const_expr(self.KDN_STORE_VEC):
                        kdbuf[0, 0, 0, e] = (kn.to(Float32) * kdec).to(BFloat16)
                    else:
                        mKdn[slot, head, row, col] = (kn.to(Float32) * kdec).to(BFloat16)
                if const_expr(self.KDN_STORE_VEC):
                    cute.autovec_copy(kdbuf, gKdnv[(None, None, None, None), (slot, head, row, half * (HALF // VEC) + vj)])
            decays_to_workspace(mGe, sGc, slot, head, tidx, D, False)
            _smem_ready()

            # ---- P^T (the serial pass 2's ``store_tm`` branch), Tm from pass 1 ------------------------------------------
            _wgmma(mma, acc_b, qk_A, kk_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_b)):
                rc = c64[i]
                p_val = Float32(0.0)
                if rc[0] >= rc[1]:
                    p_val = acc_b[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * scale
                sPT[rc[1], rc[0]] = p_val.to(BFloat16)
            tbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, CHUNK // 2 // VEC)), BFloat16)
            for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):  # row tidx // 2, half tidx % 2 of Tm: 16-byte loads
                cute.autovec_copy(gWsTm[(None, None, None, None), (slot, head, row, half * (CHUNK // 2 // VEC) + vj)], tbuf[None, None, None, None, vj])
            for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):
                for e in cutlass.range_constexpr(VEC):
                    sTm[row, half * (CHUNK // 2) + vj * VEC + e] = tbuf[0, 0, 0, e, vj]
            _smem_ready()

            # ---- Wm^T -> wmt; per V slice dO^T -> dot, P^T dO -> dvl ---------------------------------------------------
            wmt_to_workspace(mma, acc_b, tm_A, kt_B, mWmt, c64, slot, head, NH)
            value_slices_to_workspace(mma, acc_a, pt_A, dot_B, gDo, sDoT, mDot, mDvl, c64, slot, head, t_row, row, half, keep, D)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
