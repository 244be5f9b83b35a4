"""Kimi Delta Attention forward, chunk-parallel schedule, kernel 1 of 3 (prep) with TWO warpgroups per CTA: the opt-in
``KdaParallelPrepKey.warpgroups = 2`` variant of ``chunk_parallel_prep_kernel.py`` (same contract, same workspace
outputs, same compile key class). sm_90a, CuTe DSL, WGMMA.

Why: the one-warpgroup prep kernel runs one CTA (4 warps) per SM (about 170 KB of shared memory at K = 128) and is
latency-bound: every step is a chain of global or shared round trips with nothing else resident to hide them. This
variant keeps the shared-memory plan and doubles the warps per SM, splitting each step between the warpgroups
(``wg`` = warpgroup index, ``lt`` = thread in its warpgroup, ``row = lt // 2``, ``half = lt % 2``):

1. gates: all 256 threads load g [64, K] at once (clamped token index, masked after the load; D = 128: 32 tokens per
   thread) into shared memory, then one thread per key channel forms the cumulative sum in place (the same adds in
   the same order as the default) and writes exp(G_C). The q (warpgroup 0) and k, v (warpgroup 1) row loads are
   issued before this step, so they are in flight during it.
2. warpgroup 0: scale Q exp(G) -> workspace and Q'; warpgroup 1: K, K', (beta K exp G)^T and (beta V)^T.
3. per 16-row block: K'_I by all 256 threads, then warpgroup 0 forms A = K' K'_I^T while warpgroup 1 forms
   P = Q' K'_I^T (two WGMMA groups at once).
4. + 6. warpgroup 0 solves Tm = (I + A)^-1 (named barrier 1, 128 threads) while warpgroup 1 writes
   (K exp(G_C - G))^T to the workspace.
5. warpgroup 0: U = Tm (beta V) -> workspace; warpgroup 1: -Wm = -Tm (beta K exp G) -> workspace.

Every workspace value is computed by the same operations in the same order as the default kernel, so the outputs are
bitwise the default's (and so the serial schedule's); with ``fast_exp`` the per-element decays use ``ex2.approx`` as in
the default kernel's ``fast_exp``. ``prefetch`` and ``two_per_sm`` are not combined with this variant (its loads are
already batched; its register and shared-memory budget is one CTA of 256 threads per SM). Grid ``[slots, H]``,
256 threads per CTA. Runtime extents and strides are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device.chunk_parallel import acc_to_gmem, decayed_keys_to_workspace, make_ws_views, slot_chunk, solve_unit_lower_blocked_wg, store_beta_v_block_t
from .._device.delta_rule import (
    BV,
    CHUNK,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    k_major_smem_layout,
    load_half_row,
    make_mma_n64,
    make_qkvo_views,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .chunk_fwd_kernel import REF_OFFSET

WARPGROUPS = 2
SOLVE_BARRIER = 1  # named barrier of warpgroup 0's solve (barrier 0 is the CTA-wide one)


class KimiDeltaAttentionParallelPrepWg2:
    """Kernel 1 of the chunk-parallel KDA forward, two warpgroups per CTA (``KdaParallelPrepKey.warpgroups == 2``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.warpgroups == WARPGROUPS
        assert not key.two_per_sm and not key.prefetch, "warpgroups=2 takes neither two_per_sm nor prefetch"
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        qg_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        vnt_ptr: cute.Pointer,
        h_ptr: cute.Pointer,
        rf_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,  # dense: L; varlen: unused
        chunks_per_seq: Int32,  # dense: ceil(L / 64); varlen: unused
        slots: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV, _ = make_qkvo_views(q_ptr, k_ptr, v_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides, v_strides, D)
        mG = cute.make_tensor(g_ptr, cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1)))
        mB = cute.make_tensor(beta_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
        mCu = None
        if const_expr(self.key.varlen):
            mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, K]: Q', K, K', K'_I
        l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta K exp G)^T [64 K-channels, tokens] x K/64
        l_vc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta V)^T [64 V-channels, tokens] x V/64
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # Tm

        @cute.struct
        class SharedStorage:
            smem_qr: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kr: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_vt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vc)], 1024]
            smem_tm: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_a: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_t: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_m: cute.struct.Align[cute.struct.MemRange[Float32, SOLVE_BLOCK * (CHUNK + 1)], 16]
            smem_gc: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (D + 1)], 16]
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]

        self.kernel(
            gQ, gK, gV, mG, mB, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, qk_heads, scale, mma_n64, l_ck, l_kc, l_vc, l_cc, SharedStorage
        ).launch(
            grid=[slots, heads, 1],
            block=[WARPGROUPS * THREADS, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        mma_n64: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_vc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        QUART = HALF // 2  # step 3: each warpgroup forms a quarter row of K'_I
        NH = D // BV
        NV = HALF // VEC
        NVV = (BV // 2) // VEC
        PARTS = WARPGROUPS * THREADS // D  # step 1: token ranges per key channel
        SPAN = CHUNK // PARTS
        mW, mU, mKD, mQG, mP, mGE, _, _, _ = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)
        wg = cute.arch.make_warp_uniform(tidx // THREADS)
        lt = tidx % THREADS

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sQr = storage.smem_qr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K' (the A operand of K' K'_I^T)
        sKR = storage.smem_kr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sVT = storage.smem_vt.get_tensor(l_vc.outer, swizzle=l_vc.inner)
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sA = storage.smem_a.get_tensor(plain)
        sT = storage.smem_t.get_tensor(plain)
        sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        wg64 = mma_n64.get_slice(0)
        kl_A = wg64.make_fragment_A(wg64.partition_A(sW))
        qr_A = wg64.make_fragment_A(wg64.partition_A(sQr))
        kr_B = wg64.make_fragment_B(wg64.partition_B(sKR))
        kt_B = wg64.make_fragment_B(wg64.partition_B(sKT))
        vt_B = wg64.make_fragment_B(wg64.partition_B(sVT))
        tm_A = wg64.make_fragment_A(wg64.partition_A(sTm))
        acc_a = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma_n64.get_slice(lt).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = lt // 2
        half = lt % 2
        rref = (row // SOLVE_BLOCK) * SOLVE_BLOCK + REF_OFFSET
        FAST = self.key.fast_exp
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            last = t0 + n_valid - 1
            t_row = min(t0 + row, last)
            # this warpgroup's rows, in flight during step 1: q (warpgroup 0), k and every 64-channel block of v (1)
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            vbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NVV, NH)), BFloat16)
            if wg == 0:
                load_half_row(gQ, rbuf, t_row, hk, half, NV)
            else:
                load_half_row(gK, rbuf, t_row, hk, half, NV)
                for vb in cutlass.range_constexpr(NH):
                    for vj in cutlass.range_constexpr(NVV):
                        cute.autovec_copy(gV[(None, None, None), (t_row, head, (vb * BV + half * (BV // 2)) // VEC + vj)], vbuf[None, None, None, vj, vb])

            # ---- 1. g [64, K] -> shared (every load at once), then the per-channel cumulative sum in place ---------------
            gcol = tidx % D
            part = tidx // D
            gbuf = cute.make_rmem_tensor(cute.make_layout((SPAN,)), Float32)
            for j in cutlass.range_constexpr(SPAN):
                gbuf[j] = mG[min(t0 + part * SPAN + j, last), head, gcol].to(Float32)
            for j in cutlass.range_constexpr(SPAN):
                gj = Float32(0.0)
                if part * SPAN + j < n_valid:
                    gj = gbuf[j]
                sGc[part * SPAN + j, gcol] = gj
            if tidx < CHUNK:
                bv = Float32(0.0)
                b_ld = mB[min(t0 + tidx, last), head].to(Float32)
                if tidx < n_valid:
                    bv = b_ld
                sBeta[tidx] = bv
            cute.arch.sync_threads()
            if tidx < D:
                cum = Float32(0.0)
                for j in cutlass.range_constexpr(CHUNK):
                    cum = cum + sGc[j, tidx]
                    sGc[j, tidx] = cum
                mGE[slot, head, tidx] = cute.math.exp(cum)
            cute.arch.sync_threads()

            # ---- 2. warpgroup 0: Qg -> workspace, Q'; warpgroup 1: K, K', (beta K exp G)^T, (beta V)^T ---------------
            keep = Float32(0.0)
            if row < n_valid:
                keep = Float32(1.0)
            b_row = sBeta[row]
            if wg == 0:
                obuf = cute.make_rmem_tensor(cute.make_layout((1, VEC, NV)), BFloat16)
                gQGv = cute.zipped_divide(mQG[slot, head, None, None], (1, VEC))  # ((1, VEC), (64, D / VEC))
                inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
                for vj in cutlass.range_constexpr(NV):
                    for e in cutlass.range_constexpr(VEC):
                        col = half * HALF + vj * VEC + e
                        qn = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16).to(Float32)
                        g_i = sGc[row, col]
                        sQr[row, col] = (qn * cute.math.exp(g_i - sGc[rref, col], fastmath=FAST)).to(BFloat16)
                        obuf[0, e, vj] = (qn * (cute.math.exp(g_i, fastmath=FAST) * scale)).to(BFloat16)
                for vj in cutlass.range_constexpr(NV):
                    cute.autovec_copy(obuf[None, None, vj], gQGv[(None, None), (row, half * NV + vj)])
            else:
                inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
                for vj in cutlass.range_constexpr(NV):
                    for e in cutlass.range_constexpr(VEC):
                        col = half * HALF + vj * VEC + e
                        kn_b = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                        kn = kn_b.to(Float32)
                        g_i = sGc[row, col]
                        sK[row, col] = kn_b
                        sW[row, col] = (kn * cute.math.exp(g_i - sGc[rref, col], fastmath=FAST)).to(BFloat16)
                        sKT[col % BV, row, col // BV] = (kn * (b_row * cute.math.exp(g_i, fastmath=FAST))).to(BFloat16)
                for vb in cutlass.range_constexpr(NH):  # (beta V)^T, every 64-channel block of V
                    store_beta_v_block_t(sVT, vbuf[None, None, None, None, vb], row, half, keep, b_row, vb)

            # ---- 3. by 16-row blocks: K'_I (all threads), then A (warpgroup 0) and P (warpgroup 1) at once -----------
            for bi in cutlass.range_constexpr(CHUNK // SOLVE_BLOCK):
                r_blk = bi * SOLVE_BLOCK + REF_OFFSET
                live = row < (bi + 1) * SOLVE_BLOCK
                for j in cutlass.range_constexpr(QUART):
                    col = half * HALF + wg * QUART + j
                    kr = Float32(0.0)
                    if live:
                        kr = sK[row, col].to(Float32) * cute.math.exp(sGc[r_blk, col] - sGc[row, col], fastmath=FAST)
                    sKR[row, col] = kr.to(BFloat16)
                _smem_ready()
                if wg == 0:
                    _wgmma(mma_n64, acc_a, kl_A, kr_B, True)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            a_val = Float32(0.0)
                            if rc[0] > rc[1]:
                                a_val = acc_a[i] * sBeta[rc[0]]
                            sA[rc[0], rc[1]] = a_val
                else:
                    _wgmma(mma_n64, acc_a, qr_A, kr_B, True)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            p_val = Float32(0.0)
                            if rc[0] >= rc[1]:
                                p_val = acc_a[i] * scale
                            mP[slot, head, rc[0], rc[1]] = p_val.to(BFloat16)
                cute.arch.sync_threads()

            # ---- 4. + 6. warpgroup 0: Tm = (I + A)^-1; warpgroup 1: (K exp(G_C - G))^T -> workspace -------------------
            if wg == 0:
                solve_unit_lower_blocked_wg(sA, sT, sM, sTm, lt, SOLVE_BARRIER)
            else:
                decayed_keys_to_workspace(mKD, sK, sGc, slot, head, row, half, None, HALF, True, FAST)
            _smem_ready()

            # ---- 5. warpgroup 0: U = Tm (beta V) (fp32); warpgroup 1: -Wm = -Tm (beta K exp G) (bf16) -> workspace ------
            if wg == 0:
                for vb in cutlass.range_constexpr(NH):
                    _wgmma(mma_n64, acc_a, tm_A, vt_B[None, None, None, vb], True)
                    acc_to_gmem(cute.local_tile(mU[slot, head, None, None], (CHUNK, BV), (0, vb)), acc_a, c64, False, False)
            else:
                for h in cutlass.range_constexpr(NH):
                    _wgmma(mma_n64, acc_a, tm_A, kt_B[None, None, None, h], True)
                    acc_to_gmem(cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), acc_a, c64, True, False)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
