"""Chunk-parallel delta-rule forward, kernel 2 of 3 (state pass) on NARROW value slices: the inter-chunk recurrence
with ``vw`` = 32 or 16 value rows of the state per CTA (``KdaParallelStateKey.v_slice``), sm_90a, CuTe DSL, WGMMA.

Why. The default state pass (``chunk_parallel_state_kernel.py``) gives each CTA 64 value rows: a grid of
``N x H x V / 64`` CTAs (32 at N = 1, H = 16, V = 128) on 132 SMs, each walking its sequence's chunks serially. The
rows of ``S`` [V, K] evolve independently, so ``vw``-row slices give ``N x H x V / vw`` CTAs (64 or 128 at H = 16),
each with half or a quarter of the per-chunk work and the per-chunk traffic that scales with ``vw``.

How. WGMMA needs M = 64, so the state slice is held TRANSPOSED, ``S^T`` [K, vw] in ``K / 64`` fp32 accumulators of
64 key channels x ``vw`` value rows (M on the key side, N = ``vw``). Per chunk, from the prep kernel's workspace
arrays (``_device/chunk_parallel.py``)::

    h[slot]   = bf16(S0)                                     (rows v0:v0+vw, for the output kernel)
    Vn        = U + (-Wm) S0^T                               [64 tokens, vw]: A = -Wm [64, K], B = S0 [vw, K]
    S1^T      = Diag(exp(G_C)) S0^T + (K exp(G_C - G))^T Vn  [K, vw]: A = kd [64 channels, 64 tokens] x K / 64, B = Vn^T [vw, 64]

(``Vn^T`` goes to shared memory once as bf16 [vw, 64 tokens] K-major: the B operand of the state update and the
``vnt[slot]`` rows for the output kernel.) The operands are the default kernel's (bf16 S0 and Vn^T, the same -Wm, kd,
U, exp(G_C)); only the fp32 accumulation order inside the MMAs may differ, so the states match the default pass to
fp32 rounding (tested by tolerance, not bitwise). The next chunk's -Wm, kd (full: they do not depend on the value
rows), the U columns ``v0:v0+vw`` and exp(G_C) are fetched by cp.async into the other of ``stages`` shared-memory
stages while the current chunk computes: two WGMMA groups (64 x vw x K, then K / 64 of 64 x vw x 64) and three
barriers per chunk, as the default.

Grid ``[N, H, V / vw]``; initial state read once, final state written once (fp32 [N, H, V, K]). About 95 KB of shared
memory for K = 128, vw = 32, two stages. Runtime extents are kernel arguments (Rule 4). Tests:
``tests/test_kda_parallel_gpu.py``, ``tests/test_gdn_parallel_gpu.py`` (``v32`` / ``v16``), compile-only in
``tests/test_parallel_variants_compile.py``; benchmark ``benchmarks/linear_attention_kernels.py --variants v32``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.chunk_parallel import (
    U_PAD,
    g2s,
    g2s_vector,
    load_state_t,
    make_g2s_copy,
    make_mma_nv,
    make_ws_views,
    s2g_tile,
    slot_base,
    state_t_to_smem,
    store_final_state_t,
    wgmma_each_a_into_each,
)
from .._device.delta_rule import BV, CHUNK, THREADS, k_major_smem_layout, make_seq_state_views, sequence_bounds
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma

V_SLICES = (32, 16)  # the narrow slice widths this kernel builds (64 is the default kernel)


class KimiDeltaAttentionParallelStateNarrow:
    """The state pass on ``key.v_slice``-row value slices (``KdaParallelStateKey``; routed to by
    ``KimiDeltaAttentionParallelState.for_key``): ``__init__`` holds the compile key, ``__call__`` launches."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.stages in (2, 3) and key.v_slice in V_SLICES
        self.key = key
        self.D = key.head_dim
        self.VW = key.v_slice

    @cute.jit
    def __call__(
        self,
        cu_ptr: cute.Pointer | None,
        h0_ptr: cute.Pointer | None,
        ht_ptr: cute.Pointer | None,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        qg_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        vnt_ptr: cute.Pointer,
        h_ptr: cute.Pointer,
        rf_ptr: cute.Pointer,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        slots: Int32,
        heads: Int32,
        stream: cuda.CUstream,
    ):
        D = self.D
        VW = self.VW
        STAGES = self.key.stages
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

        mma = make_mma_nv(VW)
        l_s = k_major_smem_layout(VW, D)  # S0 [vw V rows, K]
        l_w = k_major_smem_layout(CHUNK, D, STAGES)  # -Wm [tokens, K] x stages
        l_kc = k_major_smem_layout(CHUNK, CHUNK, (D // BV) * STAGES)  # (K exp(G_C - G))^T [64 K-ch, tokens] x K/64 x stages
        l_vt = k_major_smem_layout(VW, CHUNK)  # Vn^T [vw, tokens]
        l_u = cute.make_layout((CHUNK, VW, STAGES), stride=(VW + U_PAD, 1, CHUNK * (VW + U_PAD)))

        @cute.struct
        class SharedStorage:
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vt)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 16]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 16]

        self.kernel(mCu, mH0, mHT, ws, n_seqs, seq_len, chunks_per_seq, heads, mma, l_s, l_w, l_kc, l_vt, l_u, SharedStorage).launch(
            grid=[n_seqs, heads, D // VW],
            block=[THREADS, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )

    @cute.kernel
    def kernel(
        self,
        mCu: cute.Tensor | None,
        mH0: cute.Tensor | None,
        mHT: cute.Tensor | None,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        mma: cute.TiledMma,
        l_s: cute.ComposedLayout,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_vt: cute.ComposedLayout,
        l_u: cute.Layout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        VW = self.VW
        NH = D // BV
        STAGES = self.key.stages
        mW, mU, mKD, _, _, mGE, mVNT, mH, _ = ws
        tidx, _, _ = cute.arch.thread_idx()
        seq, head, vblk = cute.arch.block_idx()
        v0 = vblk * VW
        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
        base = slot_base(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sS = storage.smem_s.get_tensor(l_s.outer, swizzle=l_s.inner)
        sW = storage.smem_w.get_tensor(l_w.outer, swizzle=l_w.inner)
        sKD = storage.smem_kd.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sVnT = storage.smem_vnt.get_tensor(l_vt.outer, swizzle=l_vt.inner)
        sU = storage.smem_u.get_tensor(l_u)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))

        wg = mma.get_slice(0)
        w_A = wg.make_fragment_A(wg.partition_A(sW))  # -Wm: (.., .., .., stages)
        s0_B = wg.make_fragment_B(wg.partition_B(sS))  # S0 [vw, K]
        kd_A = wg.make_fragment_A(wg.partition_A(sKD))  # kd tiles as A: (.., .., .., K/64 * stages)
        vn_B = wg.make_fragment_B(wg.partition_B(sVnT))  # Vn^T [vw, tokens] as B
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, VW)), Float32)  # Vn [tokens, vw]
        acc_t = [cute.make_rmem_tensor(wg.partition_shape_C((BV, VW)), Float32) for _ in range(NH)]  # S^T [64 K-ch, vw] x K/64
        ct = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, VW)))  # (row, col) of an accumulator element

        cp_bf16 = make_g2s_copy(BFloat16, CHUNK)  # 64-element bf16 rows: [64, 64] tiles
        cp_f32 = make_g2s_copy(Float32, VW)  # vw-element fp32 rows: the U columns v0:v0+vw

        load_state_t(acc_t, sS, mH0, ct, seq, head, v0, NH, self.key.has_initial)

        # Stage 0 <- chunk 0 (and stage 1 <- chunk 1 with three stages), as the default kernel.
        if n_chunks > 0:
            for h in cutlass.range_constexpr(NH):
                g2s(cp_bf16, cute.local_tile(mW[base, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sW[None, None, 0], (CHUNK, BV), (0, h)), tidx)
                g2s(cp_bf16, mKD[base, head, None, None, h], sKD[None, None, h], tidx)
            g2s(cp_f32, cute.local_tile(mU[base, head, None, None], (CHUNK, VW), (0, vblk)), sU[None, None, 0], tidx)
            g2s_vector(mGE[base, head, None], sGE[None, 0], tidx, D)
            cute.arch.cp_async_commit_group()
            if const_expr(STAGES == 3):
                if n_chunks > 1:
                    for h in cutlass.range_constexpr(NH):
                        g2s(
                            cp_bf16,
                            cute.local_tile(mW[base + 1, head, None, None], (CHUNK, BV), (0, h)),
                            cute.local_tile(sW[None, None, 1], (CHUNK, BV), (0, h)),
                            tidx,
                        )
                        g2s(cp_bf16, mKD[base + 1, head, None, None, h], sKD[None, None, NH + h], tidx)
                    g2s(cp_f32, cute.local_tile(mU[base + 1, head, None, None], (CHUNK, VW), (0, vblk)), sU[None, None, 1], tidx)
                    g2s_vector(mGE[base + 1, head, None], sGE[None, 1], tidx, D)
                cute.arch.cp_async_commit_group()
                cute.arch.cp_async_wait_group(1)
            else:
                cute.arch.cp_async_wait_group(0)
        _smem_ready()  # S0 (load_state_t) and chunk 0 published

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                ci = cp * STAGES + st
                if ci < n_chunks:
                    slot = base + ci
                    nxt = (st + STAGES - 1) % STAGES  # the stage chunk ci - 1 used: its readers finished last chunk
                    ahead = STAGES - 1  # prefetch chunk ci + ahead into it
                    if ci + ahead < n_chunks:
                        for h in cutlass.range_constexpr(NH):
                            g2s(
                                cp_bf16,
                                cute.local_tile(mW[slot + ahead, head, None, None], (CHUNK, BV), (0, h)),
                                cute.local_tile(sW[None, None, nxt], (CHUNK, BV), (0, h)),
                                tidx,
                            )
                            g2s(cp_bf16, mKD[slot + ahead, head, None, None, h], sKD[None, None, nxt * NH + h], tidx)
                        g2s(cp_f32, cute.local_tile(mU[slot + ahead, head, None, None], (CHUNK, VW), (0, vblk)), sU[None, None, nxt], tidx)
                        g2s_vector(mGE[slot + ahead, head, None], sGE[None, nxt], tidx, D)
                        if const_expr(STAGES == 2):
                            cute.arch.cp_async_commit_group()
                    if const_expr(STAGES == 3):  # one group per chunk, empty past the end
                        cute.arch.cp_async_commit_group()
                    # the state entering this chunk (bf16 sS) -> h[slot] rows v0:v0+vw, for the output kernel
                    for h in cutlass.range_constexpr(NH):
                        s2g_tile(cute.local_tile(sS, (VW, BV), (0, h)), cute.local_tile(mH[slot, head, None, None], (VW, BV), (vblk, h)), tidx)

                    # ---- Vn = U + (-Wm) S0^T [tokens, vw] -> Vn^T (shared, and the workspace for the output kernel) ---
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = ct[i]
                        acc_v[i] = sU[rc[0], rc[1], st]
                    _wgmma(mma, acc_v, w_A[None, None, None, st], s0_B, False)
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = ct[i]
                        sVnT[rc[1], rc[0]] = acc_v[i].to(BFloat16)
                    _smem_ready()
                    s2g_tile(sVnT, cute.local_tile(mVNT[slot, head, None, None], (VW, CHUNK), (vblk, 0)), tidx)  # Vn^T -> vnt[slot]

                    # ---- S^T = Diag(exp(G_C)) S^T + kd Vn: the K / 64 tiles in one WGMMA group ----------------------
                    for h in cutlass.range_constexpr(NH):
                        for i in cutlass.range_constexpr(cute.size(acc_v)):
                            kr = ct[i]
                            acc_t[h][i] = acc_t[h][i] * sGE[h * BV + kr[0], st]
                    wgmma_each_a_into_each(mma, acc_t, kd_A, vn_B, st * NH)
                    cute.arch.sync_threads()  # every reader of S0 and of this stage has completed
                    state_t_to_smem(sS, acc_t, ct, NH)
                    if const_expr(STAGES == 3):
                        cute.arch.cp_async_wait_group(1)  # chunk ci + 1 has landed
                    else:
                        cute.arch.cp_async_wait_group(0)  # the next chunk's stage has landed (this thread's copies)
                    _smem_ready()  # ... and with the new S0, is visible to every thread and to WGMMA

        if const_expr(self.key.has_final):
            store_final_state_t(mHT, acc_t, ct, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
