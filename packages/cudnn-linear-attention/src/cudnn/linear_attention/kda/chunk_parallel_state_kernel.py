"""Kimi Delta Attention forward, chunk-parallel schedule, kernel 2 of 3 (state pass): the inter-chunk recurrence
only, sm_90a, CuTe DSL, WGMMA.

Per (sequence, head, 64-row V slice of the state), in chunk order, from the prep kernel's workspace arrays
(``_device/chunk_parallel.py``)::

    h[slot]   = bf16(S0)                                   (the state entering the chunk, for the output kernel)
    Vn        = U + (-Wm) S0^T                             (fp32 accumulator; bf16 Vn^T -> vnt[slot])
    S1        = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

with ``S`` in fp32 WGMMA accumulators (K / 64 tiles of 64 x 64) and a bf16 copy in shared memory as the next
operand, exactly as the serial kernel (``chunk_fwd_kernel.py`` steps 5 and 7), so the chunk states and the final
state are the serial kernel's bit for bit. The next chunk's ``-Wm``, ``(K exp(G_C - G))^T``, ``U`` and ``exp(G_C)``
are fetched by cp.async into the other of two shared-memory stages while the current chunk computes: the serial
path per chunk is two WGMMA groups (64 x 64 x K, then K / 64 of 64 x 64 x 64) and three barriers.

Grid ``[N, H, V / 64]``; initial state read once, final state written once (fp32 [N, H, V, K]). About 120 KB of
shared memory for K = 128. Runtime extents are kernel arguments (Rule 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.chunk_parallel import U_PAD, g2s, g2s_vector, make_g2s_copy, make_ws_views, s2g_tile, slot_base, wgmma_into_each
from .._device.delta_rule import (
    BV,
    CHUNK,
    THREADS,
    cta_coords,
    k_major_smem_layout,
    load_state,
    make_mma_n64,
    make_seq_state_views,
    sequence_bounds,
    state_to_smem,
    store_final_state,
)
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma

STAGES = 2


@dataclass(frozen=True)
class KdaParallelStateKey:
    """Compile key of the state pass (Rule 4)."""

    head_dim: int
    varlen: bool
    has_initial: bool
    has_final: bool
    #: Shared-memory stages of the per-chunk operands (-Wm, (K exp(G_C - G))^T, U, exp(G_C)): 2 (default, the verified
    #: kernel: chunk ci + 1 is fetched while chunk ci computes) or 3 (opt-in: chunk ci + 2 is fetched, two chunks of
    #: compute hide each fetch; about 170 KB of shared memory for K = 128). Same arithmetic: bitwise the same states.
    stages: int = STAGES
    #: Value rows of the state per CTA: 64 (default, this module's kernel: grid [N, H, V / 64]) or 32 / 16 (opt-in: the
    #: transposed narrow-slice kernel of ``chunk_parallel_state_narrow_kernel.py``, grid [N, H, V / v_slice], 2x / 4x the
    #: CTAs). Same operands; the states match the default to fp32 accumulation order (tolerance, not bitwise).
    v_slice: int = BV


class KimiDeltaAttentionParallelState:
    """Kernel 2 of the chunk-parallel KDA forward: ``__init__`` holds the compile key, ``__call__`` launches."""

    @classmethod
    def for_key(cls, key: KdaParallelStateKey):
        """The kernel class that builds ``key``: this one for ``v_slice`` = 64, the narrow-slice kernel otherwise."""
        if key.v_slice == BV:
            return cls
        from .chunk_parallel_state_narrow_kernel import V_SLICES, KimiDeltaAttentionParallelStateNarrow

        if key.v_slice not in V_SLICES:
            raise ValueError(f"KdaParallelStateKey.v_slice={key.v_slice}; accepted {(BV, *V_SLICES)}")
        return KimiDeltaAttentionParallelStateNarrow

    def __init__(self, key: KdaParallelStateKey):
        assert key.head_dim in (64, 128) and key.stages in (2, 3) and key.v_slice == BV
        self.key = key
        self.D = key.head_dim

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
        STAGES = self.key.stages
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # S0 [64 V rows, K]
        l_w = k_major_smem_layout(CHUNK, D, STAGES)  # -Wm [tokens, K] x stages
        l_kc = k_major_smem_layout(CHUNK, CHUNK, (D // BV) * STAGES)  # (K exp(G_C - G))^T [64 K-ch, tokens] x K/64 x stages
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # Vn^T
        l_u = cute.make_layout((CHUNK, BV, STAGES), stride=(BV + U_PAD, 1, CHUNK * (BV + U_PAD)))

        @cute.struct
        class SharedStorage:
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 16]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 16]

        self.kernel(mCu, mH0, mHT, ws, n_seqs, seq_len, chunks_per_seq, heads, mma_n64, l_ck, l_w, l_kc, l_cc, l_u, SharedStorage).launch(
            grid=[n_seqs, heads, D // BV],
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
        mma_n64: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        l_u: cute.Layout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        STAGES = self.key.stages
        mW, mU, mKD, _, _, mGE, mVNT, mH, _ = ws
        tidx, seq, head, _, v0 = cta_coords(heads, heads)
        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
        base = slot_base(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_w.outer, swizzle=l_w.inner)
        sKD = storage.smem_kd.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sU = storage.smem_u.get_tensor(l_u)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))

        wg64 = mma_n64.get_slice(0)
        w_A = wg64.make_fragment_A(wg64.partition_A(sW))  # (.., .., .., stages)
        kd_B = wg64.make_fragment_B(wg64.partition_B(sKD))  # (.., .., .., K/64 * stages)
        s0_B = wg64.make_fragment_B(wg64.partition_B(sS))
        su_A = wg64.make_fragment_A(wg64.partition_A(sVnT))
        acc_a = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_s = [cute.make_rmem_tensor(wg64.partition_shape_C((BV, BV)), Float32) for _ in range(NH)]
        c64 = mma_n64.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        cp_bf16 = make_g2s_copy(BFloat16, CHUNK)  # 64-element bf16 rows: [64, 64] tiles
        cp_f32 = make_g2s_copy(Float32, BV)  # 64-element fp32 rows

        load_state(acc_s, sS, mH0, c64, seq, head, v0, NH, self.key.has_initial)

        # Stage 0 <- chunk 0. Chunk ci + 1 is fetched into the other stage while chunk ci computes and waited for at the end
        # of chunk ci, so one barrier publishes both it and the new state.
        if n_chunks > 0:
            for h in cutlass.range_constexpr(NH):
                g2s(cp_bf16, cute.local_tile(mW[base, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sW[None, None, 0], (CHUNK, BV), (0, h)), tidx)
                g2s(cp_bf16, mKD[base, head, None, None, h], sKD[None, None, h], tidx)
            g2s(cp_f32, cute.local_tile(mU[base, head, None, None], (CHUNK, BV), (0, v0 // BV)), sU[None, None, 0], tidx)
            g2s_vector(mGE[base, head, None], sGE[None, 0], tidx, D)
            cute.arch.cp_async_commit_group()
            if const_expr(STAGES == 3):  # chunk 1 -> stage 1 as well (its own group, possibly empty), only chunk 0 waited for
                if n_chunks > 1:
                    for h in cutlass.range_constexpr(NH):
                        g2s(
                            cp_bf16,
                            cute.local_tile(mW[base + 1, head, None, None], (CHUNK, BV), (0, h)),
                            cute.local_tile(sW[None, None, 1], (CHUNK, BV), (0, h)),
                            tidx,
                        )
                        g2s(cp_bf16, mKD[base + 1, head, None, None, h], sKD[None, None, NH + h], tidx)
                    g2s(cp_f32, cute.local_tile(mU[base + 1, head, None, None], (CHUNK, BV), (0, v0 // BV)), sU[None, None, 1], tidx)
                    g2s_vector(mGE[base + 1, head, None], sGE[None, 1], tidx, D)
                cute.arch.cp_async_commit_group()
                cute.arch.cp_async_wait_group(1)
            else:
                cute.arch.cp_async_wait_group(0)
        _smem_ready()  # S0 (load_state) and chunk 0 published

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
                        g2s(cp_f32, cute.local_tile(mU[slot + ahead, head, None, None], (CHUNK, BV), (0, v0 // BV)), sU[None, None, nxt], tidx)
                        g2s_vector(mGE[slot + ahead, head, None], sGE[None, nxt], tidx, D)
                        if const_expr(STAGES == 2):
                            cute.arch.cp_async_commit_group()
                    if const_expr(STAGES == 3):  # one group per chunk, empty past the end: wait_group(1) then always means "chunk ci + 1 landed"
                        cute.arch.cp_async_commit_group()
                    # the state entering this chunk (bf16 sS: the serial kernel's S0 operand) -> h[slot], for the output kernel
                    for h in cutlass.range_constexpr(NH):
                        s2g_tile(cute.local_tile(sS, (BV, BV), (0, h)), cute.local_tile(mH[slot, head, None, None], (BV, BV), (v0 // BV, h)), tidx)

                    # ---- Vn = U + (-Wm) S0^T -> Vn^T (shared, and the workspace for the output kernel) ----------
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        acc_a[i] = sU[rc[0], rc[1], st]
                    _wgmma(mma_n64, acc_a, w_A[None, None, None, st], s0_B, False)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        sVnT[rc[1], rc[0]] = acc_a[i].to(BFloat16)
                    _smem_ready()
                    s2g_tile(sVnT, cute.local_tile(mVNT[slot, head, None, None], (BV, CHUNK), (v0 // BV, 0)), tidx)  # Vn^T -> vnt[slot]

                    # ---- S = S Diag(exp(G_C)) + Vn^T (K exp(G_C - G)): the K / 64 tiles in one WGMMA group -----------
                    for h in cutlass.range_constexpr(NH):
                        for i in cutlass.range_constexpr(cute.size(acc_a)):
                            rc = c64[i]
                            acc_s[h][i] = acc_s[h][i] * sGE[h * BV + rc[1], st]
                    wgmma_into_each(mma_n64, acc_s, su_A, kd_B, st * NH)
                    cute.arch.sync_threads()  # every reader of S0 and of this stage has completed
                    state_to_smem(sS, acc_s, c64, NH)
                    if const_expr(STAGES == 3):
                        cute.arch.cp_async_wait_group(1)  # chunk ci + 1 has landed (chunk ci + 2 may still be in flight)
                    else:
                        cute.arch.cp_async_wait_group(0)  # the next chunk's stage has landed (this thread's copies)
                    _smem_ready()  # ... and with the new S0, is visible to every thread and to WGMMA

        if const_expr(self.key.has_final):
            store_final_state(mHT, acc_s, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
