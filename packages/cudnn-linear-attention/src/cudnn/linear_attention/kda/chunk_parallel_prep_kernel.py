"""Kimi Delta Attention forward, chunk-parallel schedule, kernel 1 of 3 (prep): everything of a chunk that does not
depend on the state, for every chunk of every sequence at once. sm_90a, CuTe DSL, WGMMA.

The chunked algorithm and its notation are those of ``chunk_fwd_kernel.py`` (the serial schedule): per chunk of
C = 64 tokens with in-chunk cumulative per-channel log decays ``G`` and incoming state ``S0``::

    Tm = (I + A)^-1        Wm = Tm (beta K exp(G))        U = Tm (beta V)        Vn = U - Wm S0^T
    O  = (scale Q exp(G)) S0^T + P Vn        S1 = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

This kernel computes, per (chunk slot, head), the state-independent operands and writes them to the caller's
workspace (``_device/chunk_parallel.py`` documents the slots and the arrays): ``-Wm`` and ``(K exp(G_C - G))^T``
(bf16, as the serial kernel rounds them), ``U`` (fp32: the serial kernel keeps it in accumulators), ``scale Q exp(G)``
and ``P`` (bf16), ``exp(G_C)`` (fp32). Kernel 2 (``chunk_parallel_state_kernel.py``) runs the recurrence, kernel 3
(``chunk_parallel_out_kernel.py``) the outputs. Every value is computed by the same operations in the same order as
in the serial kernel (same decay split, same blocked solve, same WGMMA products), so the three kernels together give
the serial kernel's outputs bit for bit.

Grid ``[slots, H]`` (slots = ``T // 64 + N`` varlen, ``N ceil(L / 64)`` dense; idle slots exit), one warpgroup
per CTA, about 170 KB of shared memory for K = 128. Runtime extents and strides are kernel arguments (Rule 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device.chunk_parallel import decayed_keys_to_workspace, make_ws_views, slot_chunk, store_beta_v_block_t, wy_to_workspace
from .._device.delta_rule import (
    BV,
    CHUNK,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    k_major_smem_layout,
    load_half_row,
    load_v_half_row,
    make_mma_n64,
    make_qkvo_views,
    solve_unit_lower_blocked,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .chunk_fwd_kernel import REF_OFFSET


@dataclass(frozen=True)
class KdaParallelPrepKey:
    """Compile key of the prep kernel (Rule 4): plan-time choices only."""

    head_dim: int
    g_dtype: str
    beta_dtype: str
    l2norm: bool
    varlen: bool
    #: Opt-in (default False: the verified kernel, PTX unchanged): issue every global read of the chunk at once before
    #: any is used -- g [64, K] into 64 registers per thread (by clamped token index, masked after the load), beta,
    #: this thread's q / k half rows and v half rows -- all before the first barrier (SASS: one batch). The default
    #: reads g under one predicate per token, which ptxas batches at most 7 deep (its predicate registers), about ten
    #: dependent round trips per chunk, then q, k and each v block one round trip each; an fp32 g is also addressed as
    #: 4-byte aligned here (one 32-bit load per element, not two 16-bit ones). Same values, same adds in the same order:
    #: bitwise the default's outputs.
    prefetch: bool = False
    #: Opt-in (default False): the per-element decay factors of steps 2, 3 and 6 (exp(G_i - G_ref), exp(G_i),
    #: exp(G_r - G_i), exp(G_C - G_i): six per element and block) by ``ex2.approx`` after a multiply by log2(e)
    #: (2 instructions) instead of the precise expf (about 10: the SASS of the default is dominated by them). The factors
    #: are rounded to bf16 with their products, so outputs move by rounding only: NOT bitwise the serial kernel (tests
    #: use the FlashAttention tolerance against the fp32 recurrence). exp(G_C) for the state pass stays precise.
    fast_exp: bool = False
    #: Opt-in (default False): two CTAs per SM instead of one (4 warps per SM is what limits this latency-bound kernel).
    #: K = 128: shared memory from about 174 KB to 113 KB (``_aliased_storage``) by reusing dead tiles -- the solve's fp32 T / M over Q' and
    #: K'_I (dead after step 3) with Tm in K'_I's upper half, (beta K exp G)^T over A (dead after the solve) and
    #: (beta V)^T over K' (dead after step 3): both are then formed after the solve (v re-read, an L2 hit) instead of in
    #: step 2. K = 64 fits two CTAs as is. Launched with ``min_blocks_per_mp=2`` and the maximum carveout. Same values
    #: by the same operations: bitwise the default's outputs.
    two_per_sm: bool = False
    #: Opt-in (default 1: the verified kernel): 2 = the two-warpgroup variant (``chunk_parallel_prep_wg2_kernel.py``: 256
    #: threads, each step split between the warpgroups, the solve overlapped with step 6, every g / q / k / v load of
    #: the chunk in flight at once). Same values by the same operations: bitwise the default's outputs (with
    #: ``fast_exp``: the default's ``fast_exp`` outputs). Not combined with ``prefetch`` or ``two_per_sm``.
    warpgroups: int = 1
    #: Opt-in (default False): the restructured two-warpgroup prep kernel (``chunk_parallel_prep_tc_kernel.py``, the
    #: ``tc`` variant; needs ``warpgroups = 2`` and ``fast_exp``): gates as log2, one vectorized element pass, the solve
    #: by all 256 threads, beta folded into the inverse. Rounding-level changes only (FA-rule tests).
    restructured: bool = False


def _aliased_storage(l_ck, l_kc, l_cc, d):
    """The shared-memory struct of ``two_per_sm`` at K = 128 (host side, trace time): [Q' | K'_I lo | K'_I hi] hold
    M, T (fp32, from Q' on) and Tm (K'_I hi) during the solve; A is 1024-aligned to host (beta K exp G)^T after it;
    K' hosts (beta V)^T. 115,712 bytes with the struct's 1024-byte alignment: 2 x (113 KB + 1 KB reserved) = 228 KB,
    exactly two CTAs per SM at the maximum carveout (no margin: anything added here drops it back to one)."""

    def bf16(n):
        return cute.struct.Align[cute.struct.MemRange[BFloat16, n], 1024]

    tile = cute.cosize(l_ck)
    assert 4 * (SOLVE_BLOCK + CHUNK) * (CHUNK + 1) <= 2 * (tile + tile // 2)  # M and T end before K'_I hi (Tm)
    assert 2 * cute.cosize(l_kc) <= 4 * CHUNK * (CHUNK + 1) and 2 * cute.cosize(l_cc) <= tile  # KT fits A, Tm fits K'_I hi
    fields = {  # evaluated annotations (this module defers annotations)
        "smem_qr": bf16(tile),
        "smem_kr_lo": bf16(tile // 2),  # K'_I spans lo and hi
        "smem_kr_hi": bf16(tile // 2),
        "smem_k": bf16(tile),
        "smem_w": bf16(tile),
        "smem_a": cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 1024],
        "smem_gc": cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (d + 1)], 16],
        "smem_beta": cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16],
    }
    return cute.struct(type("KdaPrepAliasedStorage", (), {"__annotations__": fields}))


class KimiDeltaAttentionParallelPrep:
    """Kernel 1 of the chunk-parallel KDA forward: ``__init__`` holds the compile key, ``__call__`` launches."""

    def __init__(self, key: KdaParallelPrepKey):
        assert key.head_dim in (64, 128) and key.warpgroups == 1
        self.key = key
        self.D = key.head_dim

    @staticmethod
    def for_key(key: KdaParallelPrepKey):
        """The kernel class that implements ``key`` (``warpgroups = 2``: the two-warpgroup variant's module)."""
        if key.restructured:
            from .chunk_parallel_prep_tc_kernel import KimiDeltaAttentionParallelPrepTc

            return KimiDeltaAttentionParallelPrepTc
        if key.warpgroups == 2:
            from .chunk_parallel_prep_wg2_kernel import KimiDeltaAttentionParallelPrepWg2

            return KimiDeltaAttentionParallelPrepWg2
        return KimiDeltaAttentionParallelPrep

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

        if const_expr(self.key.two_per_sm):
            storage_class = SharedStorage
            if const_expr(D == 128):
                storage_class = _aliased_storage(l_ck, l_kc, l_cc, D)
            self.kernel(
                gQ, gK, gV, mG, mB, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, qk_heads, scale, mma_n64, l_ck, l_kc, l_vc, l_cc, storage_class
            ).launch(
                grid=[slots, heads, 1],
                block=[THREADS, 1, 1],
                smem=storage_class.size_in_bytes(),
                stream=stream,
                min_blocks_per_mp=2,
                preferred_smem_carveout=100,  # the maximum carveout: room for two CTAs (and no device query at compile time)
            )
        else:
            self.kernel(
                gQ, gK, gV, mG, mB, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, qk_heads, scale, mma_n64, l_ck, l_kc, l_vc, l_cc, SharedStorage
            ).launch(
                grid=[slots, heads, 1],
                block=[THREADS, 1, 1],
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
        NH = D // BV
        NV = HALF // VEC
        mW, mU, mKD, mQG, mP, mGE, _, _, _ = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)

        ALIAS = self.key.two_per_sm and D == 128  # the reused-tile layout of _aliased_storage (plan-time)
        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        if const_expr(ALIAS):
            sQr = storage.smem_qr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sKR = storage.smem_kr_lo.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # lo and hi
            sKT = storage.smem_a.get_tensor(l_kc.outer, swizzle=l_kc.inner, dtype=BFloat16)  # over A, after the solve
            sVT = storage.smem_w.get_tensor(l_vc.outer, swizzle=l_vc.inner)  # over K', after step 3
            sTm = storage.smem_kr_hi.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # over K'_I's upper half
            sA = storage.smem_a.get_tensor(plain)
            scratch = cute.recast_ptr(storage.smem_qr.data_ptr(), dtype=Float32)  # M, then T, over Q' (and K'_I lo)
            sM = cute.make_tensor(scratch, cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
            sT = cute.make_tensor(scratch + SOLVE_BLOCK * (CHUNK + 1), plain)
        else:
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
        c64 = mma_n64.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = tidx // 2
        half = tidx % 2
        rref = (row // SOLVE_BLOCK) * SOLVE_BLOCK + REF_OFFSET
        FAST = self.key.fast_exp  # plan-time: the per-element decays by ex2.approx (KdaParallelPrepKey.fast_exp)
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            if const_expr(self.key.prefetch):  # every global read of the chunk in flight at once (KdaParallelPrepKey.prefetch)
                last = t0 + n_valid - 1
                pf_row = min(t0 + row, last)
                gbuf = cute.make_rmem_tensor(cute.make_layout((CHUNK,)), Float32)
                if tidx < D:
                    for j in cutlass.range_constexpr(CHUNK):
                        gbuf[j] = mG[min(t0 + j, last), head, tidx].to(Float32)
                b_pf = mB[min(t0 + tidx % CHUNK, last), head].to(Float32)
                qbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
                kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
                load_half_row(gQ, qbuf, pf_row, hk, half, NV)
                load_half_row(gK, kbuf, pf_row, hk, half, NV)
                if const_expr(not ALIAS):  # (beta V)^T is formed after the solve there: v is read then
                    vbufs = [load_v_half_row(gV, pf_row, head, vb * BV, half) for vb in range(NH)]
                # ---- 1. per-channel cumulative log decay G [C, K], exp(G_C) -> workspace, beta ---------------
                if tidx < D:
                    cum = Float32(0.0)
                    for j in cutlass.range_constexpr(CHUNK):
                        gj = Float32(0.0)
                        if j < n_valid:
                            gj = gbuf[j]
                        cum = cum + gj
                        sGc[j, tidx] = cum
                    mGE[slot, head, tidx] = cute.math.exp(cum)
                if tidx < CHUNK:
                    bv = Float32(0.0)
                    if tidx < n_valid:
                        bv = b_pf
                    sBeta[tidx] = bv
                cute.arch.sync_threads()
            else:
                # ---- 1. per-channel cumulative log decay G [C, K], exp(G_C) -> workspace, beta ------------------
                if tidx < D:
                    cum = Float32(0.0)
                    for j in cutlass.range(CHUNK, unroll=16):
                        gj = Float32(0.0)
                        if j < n_valid:
                            gj = mG[t0 + j, head, tidx].to(Float32)
                        cum = cum + gj
                        sGc[j, tidx] = cum
                    mGE[slot, head, tidx] = cute.math.exp(cum)
                if tidx < CHUNK:
                    bv = Float32(0.0)
                    if tidx < n_valid:
                        bv = mB[t0 + tidx, head].to(Float32)
                    sBeta[tidx] = bv
                cute.arch.sync_threads()

            # ---- 2. q, k, v rows (zero past eos), optional L2 norm, decayed copies; Qg -> workspace ------------
            t_row = min(t0 + row, t0 + n_valid - 1)
            keep = Float32(0.0)
            if row < n_valid:
                keep = Float32(1.0)
            b_row = sBeta[row]
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            obuf = cute.make_rmem_tensor(cute.make_layout((1, VEC, NV)), BFloat16)
            gQGv = cute.zipped_divide(mQG[slot, head, None, None], (1, VEC))  # ((1, VEC), (64, D / VEC))
            if const_expr(self.key.prefetch):
                rbuf = qbuf
            else:
                load_half_row(gQ, rbuf, t_row, hk, half, NV)
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
            if const_expr(self.key.prefetch):
                rbuf = kbuf
            else:
                load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn_b = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    kn = kn_b.to(Float32)
                    g_i = sGc[row, col]
                    sK[row, col] = kn_b
                    sW[row, col] = (kn * cute.math.exp(g_i - sGc[rref, col], fastmath=FAST)).to(BFloat16)
                    if const_expr(not ALIAS):  # ALIAS: formed after the solve, over A
                        sKT[col % BV, row, col // BV] = (kn * (b_row * cute.math.exp(g_i, fastmath=FAST))).to(BFloat16)
            if const_expr(not ALIAS):  # ALIAS: formed after the solve, over K'
                for vb in cutlass.range_constexpr(NH):  # (beta V)^T, every 64-channel block of V
                    if const_expr(self.key.prefetch):
                        vbuf = vbufs[vb]
                    else:
                        vbuf = load_v_half_row(gV, t_row, head, vb * BV, half)
                    store_beta_v_block_t(sVT, vbuf, row, half, keep, b_row, vb)

            # ---- 3. A and P by 16-row blocks (the serial kernel's decay split); P -> workspace ---------------
            for bi in cutlass.range_constexpr(CHUNK // SOLVE_BLOCK):
                r_blk = bi * SOLVE_BLOCK + REF_OFFSET
                live = row < (bi + 1) * SOLVE_BLOCK
                for j in cutlass.range_constexpr(HALF):
                    col = half * HALF + j
                    kr = Float32(0.0)
                    if live:
                        kr = sK[row, col].to(Float32) * cute.math.exp(sGc[r_blk, col] - sGc[row, col], fastmath=FAST)
                    sKR[row, col] = kr.to(BFloat16)
                _smem_ready()
                _wgmma(mma_n64, acc_a, kl_A, kr_B, True)
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    if rc[0] // SOLVE_BLOCK == bi:
                        a_val = Float32(0.0)
                        if rc[0] > rc[1]:
                            a_val = acc_a[i] * sBeta[rc[0]]
                        sA[rc[0], rc[1]] = a_val
                _wgmma(mma_n64, acc_a, qr_A, kr_B, True)
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    if rc[0] // SOLVE_BLOCK == bi:
                        p_val = Float32(0.0)
                        if rc[0] >= rc[1]:
                            p_val = acc_a[i] * scale
                        mP[slot, head, rc[0], rc[1]] = p_val.to(BFloat16)
                cute.arch.sync_threads()

            # ---- 4. Tm = (I + A)^-1 (fp32, blocked) -> bf16 -------------------------------------------------
            solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
            _smem_ready()
            if const_expr(ALIAS):  # step 2's (beta K exp G)^T (over A, now dead) and (beta V)^T (over K'), same operations
                for j in cutlass.range_constexpr(HALF):
                    col = half * HALF + j
                    kn = sK[row, col].to(Float32)
                    sKT[col % BV, row, col // BV] = (kn * (b_row * cute.math.exp(sGc[row, col], fastmath=FAST))).to(BFloat16)
                for vb in cutlass.range_constexpr(NH):
                    vbuf = load_v_half_row(gV, t_row, head, vb * BV, half)
                    store_beta_v_block_t(sVT, vbuf, row, half, keep, b_row, vb)
                _smem_ready()

            # ---- 5. U = Tm (beta V) (fp32) and -Wm = -Tm (beta K exp G) (bf16) -> workspace ---------------------
            wy_to_workspace(mma_n64, acc_a, acc_a, tm_A, vt_B, kt_B, mU, mW, slot, head, c64, NH)

            # ---- 6. (K exp(G_C - G))^T -> workspace (rows past eos have g = 0: G's last row is G_C) -------------
            decayed_keys_to_workspace(mKD, sK, sGc, slot, head, row, half, None, HALF, True, FAST)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
