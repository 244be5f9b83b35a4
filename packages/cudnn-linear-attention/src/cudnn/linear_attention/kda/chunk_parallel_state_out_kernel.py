"""Kimi Delta Attention / Gated DeltaNet forward, chunk-parallel schedule: the state pass WITH THE OUTPUT FUSED in (kernels
2 and 3 of 3 in one), register A operands. The opt-in ``KdaParallelStateKey.fuse_out`` variant of
``chunk_parallel_state_rs_kernel.py`` (which it extends); the output kernel is not launched. sm_90a, CuTe DSL, WGMMA.

Why: the output kernel reads per chunk and 64-row V block the state entering the chunk ``h`` (bf16 [64, K]) and
``Vn^T`` that the state pass wrote for it, plus ``qg`` and ``P`` -- at T = 8k, H = 16, K = V = 128 about 235 MB of
traffic (a 49 us floor at 4.8 TB/s) on top of the state pass's 67 MB of ``h`` and 34 MB of ``Vn^T`` writes. Here the state
pass already holds bf16(S0) and bf16(Vn^T) in registers as WGMMA A operands, so it stages ``qg`` and ``P`` (and GDN's
row factors ``rf``) with its other per-chunk operands and forms the output transposed, ``O^T`` [64 V rows, tokens]::

    O^T = bf16(S0) Qg^T  (Diag(rf) on the token columns: GDN)  + bf16(Vn^T) P^T

(``Qg`` = scale Q exp(G) (KDA) or Q (GDN) [tokens, K]; ``P`` [tokens, tokens]), in the same WGMMA groups as ``Vn^T`` and
the state update respectively (both products are off the chunk-to-chunk critical path). Rows of ``O`` past the
sequence's end are not stored. No ``h`` / ``vnt`` is written. Every product has the output kernel's operands and k order
(transposed), so the outputs are expected bitwise the default's (the GPU test checks it apart from the tolerance check).

Grid ``[N, H, V / 64]``; two shared-memory stages, about 150 KB of shared memory for K = 128. Runtime extents and the
output strides are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import U_PAD, acc_layout_as_a, acc_to_a_operand, g2s, g2s_vector, make_g2s_copy, make_ws_views, slot_base
from .._device.delta_rule import BV, CHUNK, THREADS, cta_coords, k_major_smem_layout, make_seq_state_views, sequence_bounds, store_final_state
from .._device.delta_rule import smem_ready as _smem_ready

STAGES = 2


class KimiDeltaAttentionParallelStateOut:
    """Kernels 2 + 3 of the chunk-parallel forward: the state pass with the output fused (``KdaParallelStateKey.fuse_out``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.reg_operands and key.fuse_out and key.stages == STAGES
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
        o_ptr: cute.Pointer,
        T: Int32,
        o_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)
        mO = cute.make_tensor(o_ptr, cute.make_layout((T, heads, D), stride=(o_strides[0], o_strides[1], 1)))

        mma_rs = sm90_utils.make_trivial_tiled_mma(
            BFloat16,
            BFloat16,
            warpgroup.OperandMajorMode.K,
            warpgroup.OperandMajorMode.K,
            Float32,
            atom_layout_mnk=(1, 1, 1),
            tiler_mn=(64, 64),
            a_source=warpgroup.OperandSource.RMEM,
        )
        l_w = k_major_smem_layout(CHUNK, D, STAGES)  # -Wm [tokens, K] x stages; Qg [tokens, K] x stages
        l_kc = k_major_smem_layout(CHUNK, CHUNK, (D // BV) * STAGES)  # (K exp(G_C - G))^T [64 K-ch, tokens] x K/64 x stages
        l_cc = k_major_smem_layout(CHUNK, CHUNK, STAGES)  # P [tokens, tokens] x stages
        l_u = cute.make_layout((CHUNK, BV, STAGES), stride=(BV + U_PAD, 1, CHUNK * (BV + U_PAD)))

        @cute.struct
        class SharedStorage:
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_qg: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_p: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 16]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 16]
            smem_rf: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * STAGES], 16]

        self.kernel(mCu, mH0, mHT, mO, ws, n_seqs, seq_len, chunks_per_seq, heads, mma_rs, l_w, l_kc, l_cc, l_u, SharedStorage).launch(
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
        mO: cute.Tensor,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        mma_rs: cute.TiledMma,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        l_u: cute.Layout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        KB = BV // 16  # 16-deep k blocks of one 64-wide accumulator used as an A operand
        ROW_SCALED = self.key.out_row_scaled  # GDN: the rows of Q S0^T (columns of its transpose) scaled by rf
        mW, mU, mKD, mQG, mP, mGE, _, _, mRF = ws
        tidx, seq, head, _, v0 = cta_coords(heads, heads)
        vblk = v0 // BV
        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
        base = slot_base(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sW = storage.smem_w.get_tensor(l_w.outer, swizzle=l_w.inner)
        sKD = storage.smem_kd.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sQG = storage.smem_qg.get_tensor(l_w.outer, swizzle=l_w.inner)
        sP = storage.smem_p.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sU = storage.smem_u.get_tensor(l_u)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))
        sRF = storage.smem_rf.get_tensor(cute.make_layout((CHUNK, STAGES)))

        wg = mma_rs.get_slice(0)
        w_B = wg.make_fragment_B(wg.partition_B(sW))  # (.., .., K / 16, stages)
        kd_B = wg.make_fragment_B(wg.partition_B(sKD))  # (.., .., 4, K/64 * stages)
        qg_B = wg.make_fragment_B(wg.partition_B(sQG))  # (.., .., K / 16, stages)
        p_B = wg.make_fragment_B(wg.partition_B(sP))  # (.., .., 4, stages)
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((BV, CHUNK)), Float32)  # Vn^T [64 V rows, tokens]
        acc_o = cute.make_rmem_tensor(wg.partition_shape_C((BV, CHUNK)), Float32)  # O^T [64 V rows, tokens]
        acc_s = [cute.make_rmem_tensor(wg.partition_shape_C((BV, BV)), Float32) for _ in range(NH)]
        r_s = [cute.make_rmem_tensor(acc_layout_as_a(acc_s[h].layout), BFloat16) for h in range(NH)]  # bf16(S0), A operand
        r_v = cute.make_rmem_tensor(acc_layout_as_a(acc_v.layout), BFloat16)  # bf16(Vn^T), A operand
        c64 = mma_rs.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))
        atom = cute.make_mma_atom(mma_rs.op)
        atom.set(warpgroup.Field.ACCUMULATE, True)
        atom_o = cute.make_mma_atom(mma_rs.op)  # O^T's first product starts from zero

        cp_bf16 = make_g2s_copy(BFloat16, CHUNK)
        cp_f32 = make_g2s_copy(Float32, BV)

        for h in cutlass.range_constexpr(NH):  # S0 (fp32 accumulators; zero without an initial state)
            for i in cutlass.range_constexpr(cute.size(acc_s[h])):
                rc = c64[i]
                s_in = Float32(0.0)
                if const_expr(self.key.has_initial):
                    s_in = mH0[seq, head, v0 + rc[0], h * BV + rc[1]]
                acc_s[h][i] = s_in

        if n_chunks > 0:  # stage 0 <- chunk 0
            for h in cutlass.range_constexpr(NH):
                g2s(cp_bf16, cute.local_tile(mW[base, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sW[None, None, 0], (CHUNK, BV), (0, h)), tidx)
                g2s(cp_bf16, mKD[base, head, None, None, h], sKD[None, None, h], tidx)
                g2s(cp_bf16, cute.local_tile(mQG[base, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sQG[None, None, 0], (CHUNK, BV), (0, h)), tidx)
            g2s(cp_bf16, mP[base, head, None, None], sP[None, None, 0], tidx)
            g2s(cp_f32, cute.local_tile(mU[base, head, None, None], (CHUNK, BV), (0, vblk)), sU[None, None, 0], tidx)
            g2s_vector(mGE[base, head, None], sGE[None, 0], tidx, D)
            if const_expr(ROW_SCALED):
                g2s_vector(mRF[base, head, None], sRF[None, 0], tidx, CHUNK)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
        _smem_ready()

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                ci = cp * STAGES + st
                if ci < n_chunks:
                    slot = base + ci
                    t0 = bos + ci * CHUNK
                    n_valid = min(eos - t0, CHUNK)
                    nxt = (st + 1) % STAGES  # chunk ci - 1's stage: every reader passed the barrier ending chunk ci - 1
                    if ci + 1 < n_chunks:
                        for h in cutlass.range_constexpr(NH):
                            g2s(
                                cp_bf16,
                                cute.local_tile(mW[slot + 1, head, None, None], (CHUNK, BV), (0, h)),
                                cute.local_tile(sW[None, None, nxt], (CHUNK, BV), (0, h)),
                                tidx,
                            )
                            g2s(cp_bf16, mKD[slot + 1, head, None, None, h], sKD[None, None, nxt * NH + h], tidx)
                            g2s(
                                cp_bf16,
                                cute.local_tile(mQG[slot + 1, head, None, None], (CHUNK, BV), (0, h)),
                                cute.local_tile(sQG[None, None, nxt], (CHUNK, BV), (0, h)),
                                tidx,
                            )
                        g2s(cp_bf16, mP[slot + 1, head, None, None], sP[None, None, nxt], tidx)
                        g2s(cp_f32, cute.local_tile(mU[slot + 1, head, None, None], (CHUNK, BV), (0, vblk)), sU[None, None, nxt], tidx)
                        g2s_vector(mGE[slot + 1, head, None], sGE[None, nxt], tidx, D)
                        if const_expr(ROW_SCALED):
                            g2s_vector(mRF[slot + 1, head, None], sRF[None, nxt], tidx, CHUNK)
                        cute.arch.cp_async_commit_group()

                    # ---- Vn^T = U^T + bf16(S0) (-Wm)^T and O^T = bf16(S0) Qg^T: one WGMMA group (not waited yet) -------
                    for h in cutlass.range_constexpr(NH):
                        acc_to_a_operand(acc_s[h], r_s[h])
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = c64[i]
                        acc_v[i] = sU[rc[1], rc[0], st]
                    warpgroup.fence()
                    for h in cutlass.range_constexpr(NH):
                        for kb in cutlass.range_constexpr(KB):
                            cute.gemm(atom, acc_v, r_s[h][None, None, kb], w_B[None, None, h * KB + kb, st], acc_v)
                    atom_o.set(warpgroup.Field.ACCUMULATE, False)
                    for h in cutlass.range_constexpr(NH):
                        for kb in cutlass.range_constexpr(KB):
                            cute.gemm(atom_o, acc_o, r_s[h][None, None, kb], qg_B[None, None, h * KB + kb, st], acc_o)
                            atom_o.set(warpgroup.Field.ACCUMULATE, True)
                    warpgroup.commit_group()
                    for h in cutlass.range_constexpr(NH):  # meanwhile: S0 Diag(exp(G_C))
                        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
                            rc = c64[i]
                            acc_s[h][i] = acc_s[h][i] * sGE[h * BV + rc[1], st]
                    warpgroup.wait_group(0)
                    if const_expr(ROW_SCALED):  # GDN: rows of Q S0^T (token columns here) scaled by rf = scale exp(G_i)
                        for i in cutlass.range_constexpr(cute.size(acc_o)):
                            rc = c64[i]
                            acc_o[i] = acc_o[i] * sRF[rc[1], st]

                    # ---- S = S Diag(exp(G_C)) + bf16(Vn^T) (K exp(G_C - G)) and O^T += bf16(Vn^T) P^T ---------------
                    acc_to_a_operand(acc_v, r_v)
                    warpgroup.fence()
                    for h in cutlass.range_constexpr(NH):
                        for kb in cutlass.range_constexpr(KB):
                            cute.gemm(atom, acc_s[h], r_v[None, None, kb], kd_B[None, None, kb, st * NH + h], acc_s[h])
                    for kb in cutlass.range_constexpr(KB):
                        cute.gemm(atom, acc_o, r_v[None, None, kb], p_B[None, None, kb, st], acc_o)
                    warpgroup.commit_group()
                    warpgroup.wait_group(0)
                    for i in cutlass.range_constexpr(cute.size(acc_o)):  # O rows inside the sequence
                        rc = c64[i]
                        if rc[1] < n_valid:
                            mO[t0 + rc[1], head, v0 + rc[0]] = acc_o[i].to(mO.element_type)
                    cute.arch.cp_async_wait_group(0)  # the next chunk's stage has landed (this thread's copies)
                    _smem_ready()  # ... visible to every thread and to WGMMA; every reader of this stage is done

        if const_expr(self.key.has_final):
            store_final_state(mHT, acc_s, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
