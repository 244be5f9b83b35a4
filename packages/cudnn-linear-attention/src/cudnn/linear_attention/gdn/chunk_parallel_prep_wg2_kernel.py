"""Gated DeltaNet forward, chunk-parallel schedule, kernel 1 of 3 (prep) with TWO warpgroups per CTA: the opt-in
``GdnParallelPrepKey.warpgroups = 2`` variant of ``chunk_parallel_prep_kernel.py`` (same contract, same workspace
outputs, same compile key class). sm_90a, CuTe DSL, WGMMA.

The default prep kernel is one warpgroup (4 warps) per SM (about 118 KB of shared memory at K = 128), latency-bound.
This variant keeps the shared-memory plan, doubles the warps per SM and splits each step between the warpgroups
(``wg``, ``lt`` = thread in its warpgroup, ``row = lt // 2``, ``half = lt % 2``), as KDA's
``kda/chunk_parallel_prep_wg2_kernel.py``:

0. the q half rows (warpgroup 0) and the k and v half rows (warpgroup 1) are loaded first, in flight during step 1;
1. g, beta, the in-chunk cumulative log decay, exp(G_C) and the row factors (as the default);
2. warpgroup 0: Q (normalised) -> shared; warpgroup 1: K, (beta K exp G)^T, (beta V)^T; then Q -> workspace, one
   64-column tile per warpgroup;
3. warpgroup 0: A = K K^T with its decay, beta and mask; warpgroup 1: P = Q K^T with its decay and mask (each forms
   the decay factor itself: the same operations, the same value); P -> workspace by warpgroup 1;
4. + 6. warpgroup 0 solves Tm = (I + A)^-1 (named barrier 1, 128 threads) while warpgroup 1 writes
   (K exp(G_C - G))^T to the workspace;
5. warpgroup 0: U = Tm (beta V); warpgroup 1: -Wm = -Tm (beta K exp G) -> workspace.

Every workspace value is computed by the default's operations in the default's order: bitwise the default's outputs.
``prefetch`` and ``two_per_sm`` are not combined with it. Grid ``[slots, H]``, 256 threads per CTA. Runtime extents and
strides are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device.chunk_parallel import (
    acc_to_gmem,
    decayed_keys_to_workspace,
    make_ws_views,
    s2g_tile,
    slot_chunk,
    solve_unit_lower_blocked_wg,
    store_beta_v_block_t,
)
from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, k_major_smem_layout, load_half_row, make_mma_n64, make_qkvo_views
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma

WARPGROUPS = 2
SOLVE_BARRIER = 1  # named barrier of warpgroup 0's solve (barrier 0 is the CTA-wide one)


class GatedDeltaNetParallelPrepWg2:
    """Kernel 1 of the chunk-parallel GDN forward, two warpgroups per CTA (``GdnParallelPrepKey.warpgroups == 2``)."""

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
        mG = cute.make_tensor(g_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
        mB = cute.make_tensor(beta_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
        mCu = None
        if const_expr(self.key.varlen):
            mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, K]: Q, K
        l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta K exp G)^T [64 K-channels, tokens] x K/64
        l_vc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta V)^T [64 V-channels, tokens] x V/64
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # Tm, P

        @cute.struct
        class SharedStorage:
            smem_q: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_vt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vc)], 1024]
            smem_tm: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_p: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_a: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_t: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_m: cute.struct.Align[cute.struct.MemRange[Float32, SOLVE_BLOCK * (CHUNK + 1)], 16]
            smem_g: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
            smem_gc: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
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
        mG: cute.Tensor,  # [T, H]
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
        NH = D // BV
        NV = HALF // VEC
        NVV = (BV // 2) // VEC
        mW, mU, mKD, mQG, mP, mGE, _, _, mRF = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)
        wg = cute.arch.make_warp_uniform(tidx // THREADS)
        lt = tidx % THREADS

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.smem_q.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sVT = storage.smem_vt.get_tensor(l_vc.outer, swizzle=l_vc.inner)
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sP = storage.smem_p.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sA = storage.smem_a.get_tensor(plain)
        sT = storage.smem_t.get_tensor(plain)
        sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        wg64 = mma_n64.get_slice(0)
        kk_A = wg64.make_fragment_A(wg64.partition_A(sK))
        kk_B = wg64.make_fragment_B(wg64.partition_B(sK))
        qk_A = wg64.make_fragment_A(wg64.partition_A(sQ))
        kt_B = wg64.make_fragment_B(wg64.partition_B(sKT))
        vt_B = wg64.make_fragment_B(wg64.partition_B(sVT))
        tm_A = wg64.make_fragment_A(wg64.partition_A(sTm))
        acc = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma_n64.get_slice(lt).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = lt // 2
        half = lt % 2
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            t_row = min(t0 + row, t0 + n_valid - 1)
            # ---- 0. this warpgroup's rows, in flight during step 1: q (warpgroup 0), k and v (warpgroup 1) -------------
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            vbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NVV, NH)), BFloat16)
            if wg == 0:
                load_half_row(gQ, rbuf, t_row, hk, half, NV)
            else:
                load_half_row(gK, rbuf, t_row, hk, half, NV)
                for vb in cutlass.range_constexpr(NH):
                    for vj in cutlass.range_constexpr(NVV):
                        cute.autovec_copy(gV[(None, None, None), (t_row, head, (vb * BV + half * (BV // 2)) // VEC + vj)], vbuf[None, None, None, vj, vb])

            # ---- 1. g, beta, the in-chunk cumulative log decay; exp(G_C) and the row factors -> workspace ----------
            if tidx < CHUNK:
                gv = Float32(0.0)
                bv = Float32(0.0)
                if tidx < n_valid:
                    gv = mG[t0 + tidx, head].to(Float32)
                    bv = mB[t0 + tidx, head].to(Float32)
                sG[tidx] = gv
                sBeta[tidx] = bv
            cute.arch.sync_threads()
            if tidx < CHUNK:
                cum = Float32(0.0)
                for j in cutlass.range_constexpr(CHUNK):
                    gj = sG[j]
                    if j > tidx:
                        gj = Float32(0.0)
                    cum = cum + gj
                sGc[tidx] = cum
                mRF[slot, head, tidx] = cute.math.exp(cum) * scale
            cute.arch.sync_threads()
            if tidx < D:
                mGE[slot, head, tidx] = cute.math.exp(sGc[CHUNK - 1])

            # ---- 2. warpgroup 0: Q; warpgroup 1: K, (beta K exp G)^T, (beta V)^T (zero past eos, optional L2 norm) -------
            keep = Float32(0.0)
            if row < n_valid:
                keep = Float32(1.0)
            g_row = sGc[row]
            b_row = sBeta[row]
            if wg == 0:
                inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
                for vj in cutlass.range_constexpr(NV):
                    for e in cutlass.range_constexpr(VEC):
                        sQ[row, half * HALF + vj * VEC + e] = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16)
            else:
                inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
                kscale = b_row * cute.math.exp(g_row)
                for vj in cutlass.range_constexpr(NV):
                    for e in cutlass.range_constexpr(VEC):
                        col = half * HALF + vj * VEC + e
                        kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                        sK[row, col] = kn
                        sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
                for vb in cutlass.range_constexpr(NH):  # (beta V)^T, every 64-channel block of V
                    store_beta_v_block_t(sVT, vbuf[None, None, None, None, vb], row, half, keep, b_row, vb)
            _smem_ready()
            for h in cutlass.range_constexpr(NH):  # Q -> workspace by 16-byte vectors, one 64-column tile per warpgroup
                if wg == h % WARPGROUPS:
                    s2g_tile(cute.local_tile(sQ, (CHUNK, BV), (0, h)), cute.local_tile(mQG[slot, head, None, None], (CHUNK, BV), (0, h)), lt)

            # ---- 3. warpgroup 0: A = K K^T (decay, beta, strict mask); warpgroup 1: P = Q K^T (decay, scale, mask) --------
            if wg == 0:
                _wgmma(mma_n64, acc, kk_A, kk_B, True)
                for i in cutlass.range_constexpr(cute.size(acc)):
                    rc = c64[i]
                    a_val = Float32(0.0)
                    if rc[0] >= rc[1]:
                        decay = cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
                        if rc[0] > rc[1]:
                            a_val = acc[i] * decay * sBeta[rc[0]]
                    sA[rc[0], rc[1]] = a_val
            else:
                _wgmma(mma_n64, acc, qk_A, kk_B, True)
                for i in cutlass.range_constexpr(cute.size(acc)):
                    rc = c64[i]
                    p_val = Float32(0.0)
                    if rc[0] >= rc[1]:
                        decay = cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
                        p_val = acc[i] * decay * scale
                    sP[rc[0], rc[1]] = p_val.to(BFloat16)
            cute.arch.sync_threads()

            # ---- 4. + 6. warpgroup 0: Tm = (I + A)^-1; warpgroup 1: P and (K exp(G_C - G))^T -> workspace --------------
            if wg == 0:
                solve_unit_lower_blocked_wg(sA, sT, sM, sTm, lt, SOLVE_BARRIER)
            else:
                s2g_tile(sP, mP[slot, head, None, None], lt)  # by 16-byte vectors
                kdec = cute.math.exp(sGc[CHUNK - 1] - g_row)
                decayed_keys_to_workspace(mKD, sK, sGc, slot, head, row, half, kdec, HALF, False, False)
            _smem_ready()

            # ---- 5. warpgroup 0: U = Tm (beta V) (fp32); warpgroup 1: -Wm = -Tm (beta K exp G) (bf16) -> workspace ------
            if wg == 0:
                for vb in cutlass.range_constexpr(NH):
                    _wgmma(mma_n64, acc, tm_A, vt_B[None, None, None, vb], True)
                    acc_to_gmem(cute.local_tile(mU[slot, head, None, None], (CHUNK, BV), (0, vb)), acc, c64, False, False)
            else:
                for h in cutlass.range_constexpr(NH):
                    _wgmma(mma_n64, acc, tm_A, kt_B[None, None, None, h], True)
                    acc_to_gmem(cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), acc, c64, True, False)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
