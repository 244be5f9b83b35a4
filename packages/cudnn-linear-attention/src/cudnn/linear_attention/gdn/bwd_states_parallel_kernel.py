"""Gated DeltaNet backward, pass 1 chunk-parallel (opt-in ``plan.parallel_pass1 = True``; sm_90a, CuTe DSL, WGMMA).

:class:`GdnBwdStatesChunk` is pass 1 of the GDN backward (``bwd_states_kernel.py::GdnBwdStates``) with the serial state
chain taken out, as ``kda/bwd_states_parallel_kernel.py`` (the design note and the analysis of both backwards) does for
KDA: the forward's chunk-parallel prep (``gdn/chunk_parallel_prep_tc_kernel.py``) and narrow state pass, launched by
``gdn/bwd_api.py`` into a tail of the backward's workspace, write every chunk's entering state ``S0`` (bf16 [V, K],
the forward's ``h``); then one CTA per (forward chunk slot, head), looping the 64-row V slices, does the serial pass 1's
per-chunk work without the state update:

- ``A = beta K K^T * exp(G_r - G_c)`` (strictly lower), ``Tm = (I + A)^-1`` once per chunk -> ``ws_tm`` (``store_tm``);
- per V slice: ``S0`` (forward ``h``) -> shared and -> the backward's ``ws_h[slot]``, ``(beta V)^T``, ``U``, ``-Wm``,
  ``Vn = U - Wm S0^T`` -> ``ws_vn``: the serial pass 1's arrays, layouts and bf16 roundings, so passes 2-4 run
  unchanged (GVA and the in-kernel L2 norm included: the forward prep serves both).

Grid [T // 64 + N (varlen) or N ceil(L / 64) (dense), H]; an idle slot exits. The backward's slot of a chunk is
``n + bos // 64 + ci`` (the forward's for varlen batches, not for dense ones). Layouts as ``bwd_states_kernel.py``; the
compile key is ``bwd_states_kernel.GdnBwdKey`` (``parallel_pass1`` selects this kernel in ``gdn/bwd_api.py``).
Tests: ``tests/test_la_bwd_parallel_gpu.py``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device import delta_rule_bwd as bwd
from .._device.chunk_parallel import slot_chunk
from .._device.delta_rule import (
    BV,
    CHUNK,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    chunk_gates,
    k_major_smem_layout,
    load_half_row,
    load_v_half_row,
    make_accumulators,
    make_mma_n64,
    make_seq_state_views,
    solve_unit_lower_blocked,
    store_beta_v_t,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from ..kda.bwd_states_parallel_kernel import forward_state_to_smem_and_workspace, state_views_aligned
from .bwd_states_kernel import GdnBwdKey

__all__ = ["GdnBwdStatesChunk"]


class GdnBwdStatesChunk:
    """Pass 1, chunk-parallel: ``S0`` (from the forward's ``h``) -> ``ws_h``, ``Vn`` -> ``ws_vn``, ``Tm`` -> ``ws_tm``
    (``store_tm``); one CTA per (forward chunk slot, head), looping the V slices."""

    def __init__(self, key: GdnBwdKey):
        assert key.head_dim in (64, 128)
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def __call__(
        self,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        fh_ptr: cute.Pointer,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer | None,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        fslots: Int32,
        heads: Int32,
        qk_heads: Int32,  # Hk (q, k); H % Hk == 0
        slots: Int32,
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        _, gK, gV = bwd.vec_views(D, k_ptr, k_ptr, v_ptr, T, heads, qk_heads, k_strides, k_strides, v_strides)
        mG = cute.make_tensor(g_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
        mB = cute.make_tensor(beta_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
        mCu, _, _ = make_seq_state_views(cu_ptr, None, None, n_seqs, heads, D, self.key.varlen, False, False)
        gFH = cute.zipped_divide(state_views_aligned(fh_ptr, fslots, heads, D), (1, 1, 1, VEC))
        gWsH = cute.zipped_divide(state_views_aligned(wsh_ptr, slots, heads, D), (1, 1, 1, VEC))
        mWsVn = bwd.token_views(wsvn_ptr, T, heads, D)
        mWsTm = None
        if const_expr(self.key.store_tm):
            mWsTm = bwd.cc_views(wstm_ptr, slots, heads)
        mma = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)
        l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)
        l_cc = k_major_smem_layout(CHUNK, CHUNK)

        @cute.struct
        class SharedStorage:
            smem_k: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_tm: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_vt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_a: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_t: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_m: cute.struct.Align[cute.struct.MemRange[Float32, SOLVE_BLOCK * (CHUNK + 1)], 16]
            smem_g: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
            smem_gc: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]

        self.kernel(
            gK, gV, mG, mB, mCu, gFH, gWsH, mWsVn, mWsTm, n_seqs, seq_len, chunks_per_seq, heads // qk_heads, mma, l_ck, l_kc, l_cc, SharedStorage
        ).launch(grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(
        self,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        gFH: cute.Tensor,
        gWsH: cute.Tensor,
        mWsVn: cute.Tensor,
        mWsTm: cute.Tensor | None,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        group: Int32,  # v heads per q/k head
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        NH = D // BV
        tidx, _, _ = cute.arch.thread_idx()
        fslot, head, _ = cute.arch.block_idx()
        hk = head // group
        seq, t0, n_valid = slot_chunk(mCu, fslot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sVT = storage.smem_vt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sA = storage.smem_a.get_tensor(plain)
        sT = storage.smem_t.get_tensor(plain)
        sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        if n_valid > 0:  # an idle slot (past its sequence's last chunk) exits; uniform per CTA
            bos = seq * seq_len
            if const_expr(self.key.varlen):
                bos = mCu[seq]
            eos = t0 + n_valid
            slot = seq + bos // CHUNK + (t0 - bos) // CHUNK  # the backward's slot of this chunk (passes 2-3 read it)

            wg = mma.get_slice(0)
            kk_A = wg.make_fragment_A(wg.partition_A(sK))
            kk_B = wg.make_fragment_B(wg.partition_B(sK))
            kt_B, u_A, u_B, vn_A, s0_B, su_A = bwd.states_fragments(wg, sKT, sTm, sVT, sW, sS, sVnT)
            acc_a, acc_b, acc_s, c64 = make_accumulators(mma, wg, tidx, NH)
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            # ---- k rows to shared (zero past eos), optional L2 norm, (beta exp(G) K)^T (the serial pass 1's block) -----
            row = tidx // 2
            half = tidx % 2
            t_row = min(t0 + row, eos - 1)
            keep = Float32(0.0)
            if row < n_valid:
                keep = Float32(1.0)
            g_row = sGc[row]
            b_row = sBeta[row]
            NV = HALF // VEC
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            kscale = b_row * cute.math.exp(g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    sK[row, col] = kn
                    sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
            _smem_ready()

            # ---- A, Tm = (I + A)^-1 -> ws_tm ---------------------------------------------------------------------------
            _wgmma(mma, acc_a, kk_A, kk_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                a_val = Float32(0.0)
                if rc[0] > rc[1]:
                    a_val = acc_a[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * sBeta[rc[0]]
                sA[rc[0], rc[1]] = a_val
            cute.arch.sync_threads()
            solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
            _smem_ready()
            if const_expr(self.key.store_tm):
                bwd.tm_to_workspace(mWsTm, sTm, slot, 0, head, tidx)

            # ---- per 64-row V slice (the state-dependent part): S0, (beta V)^T, U, -Wm, Vn = U - Wm S0^T -> ws_vn -------
            for vb in cutlass.range(NH, unroll=1):  # a runtime loop: one copy of the code
                cute.arch.sync_threads()  # every reader of the previous slice's sS / sVT / sW / sVnT is done
                forward_state_to_smem_and_workspace(gFH, gWsH, sS, fslot, slot, head, vb * BV, tidx, D)
                vbuf = load_v_half_row(gV, t_row, head, vb * BV, half)
                store_beta_v_t(sVT, vbuf, row, half, keep, b_row)
                _smem_ready()
                bwd.wy_values_to_workspace(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, mWsVn, c64, t0, n_valid, head, vb * BV, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
