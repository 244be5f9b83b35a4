"""Kimi Delta Attention / Gated DeltaNet forward, chunk-parallel schedule, kernel 2 of 3 (state pass) with REGISTER
operands: the opt-in ``KdaParallelStateKey.reg_operands`` variant of ``chunk_parallel_state_kernel.py`` (same contract,
same workspace reads and writes). sm_90a, CuTe DSL, WGMMA with the A operand in registers.

Why: the state pass is the schedule's serial part (one CTA per sequence, head and 64-row V slice walks every chunk:
T = 8k, H = 16 is 128 chunks on 32 CTAs), so its cost is the latency of one chunk times the chunk count. The default
kernel per chunk stores the bf16 state to shared memory, publishes it, computes ``Vn = U + (-Wm) S0^T`` ([tokens, V]),
stores ``Vn^T`` to shared memory, publishes it, and only then updates the state: three CTA barriers and two
shared-memory round trips on the critical path. Here both products take their A operand from registers:

    Vn^T = U^T + S0 (-Wm)^T      A = bf16(S0) (the state accumulators, converted in registers), B = -Wm [tokens, K]
    S1   = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))      A = bf16(Vn^T) (the accumulator above), B = (K exp(G_C - G))^T

so a chunk is two dependent WGMMA groups and one barrier (the next stage's cp.async data). The Diag(exp(G_C)) scaling
runs while the first group is in flight. ``h[slot]`` (bf16 S0) and ``vnt[slot]`` (bf16 Vn^T) for the output kernel are
stored from registers. The state is updated by the same products as the default (same bf16 operands, same k order);
``Vn^T`` is the transpose of the default's ``Vn`` product (same products per element and k block), so the outputs are
expected bitwise the default's (the GPU test checks this separately from the tolerance check).

Grid ``[N, H, V / 64]``; two shared-memory stages (chunk ci + 1 fetched by cp.async while chunk ci computes), about
86 KB of shared memory for K = 128. Runtime extents are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import U_PAD, acc_layout_as_a, acc_to_a_operand, g2s, g2s_vector, make_g2s_copy, make_ws_views, slot_base
from .._device.delta_rule import BV, CHUNK, THREADS, cta_coords, k_major_smem_layout, make_seq_state_views, sequence_bounds, store_final_state
from .._device.delta_rule import smem_ready as _smem_ready

STAGES = 2


class KimiDeltaAttentionParallelStateRs:
    """Kernel 2 of the chunk-parallel forward with register A operands (``KdaParallelStateKey.reg_operands``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.reg_operands and not key.fuse_out and key.stages == STAGES
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
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

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
        l_w = k_major_smem_layout(CHUNK, D, STAGES)  # -Wm [tokens, K] x stages (the B operand of Vn^T)
        l_kc = k_major_smem_layout(CHUNK, CHUNK, (D // BV) * STAGES)  # (K exp(G_C - G))^T [64 K-ch, tokens] x K/64 x stages
        l_u = cute.make_layout((CHUNK, BV, STAGES), stride=(BV + U_PAD, 1, CHUNK * (BV + U_PAD)))

        @cute.struct
        class SharedStorage:
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 16]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 16]

        self.kernel(mCu, mH0, mHT, ws, n_seqs, seq_len, chunks_per_seq, heads, mma_rs, l_w, l_kc, l_u, SharedStorage).launch(
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
        mma_rs: cute.TiledMma,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_u: cute.Layout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        KB = BV // 16  # 16-deep k blocks of one 64-wide accumulator used as an A operand
        mW, mU, mKD, _, _, mGE, mVNT, mH, _ = ws
        tidx, seq, head, _, v0 = cta_coords(heads, heads)
        vblk = v0 // BV
        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
        base = slot_base(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sW = storage.smem_w.get_tensor(l_w.outer, swizzle=l_w.inner)
        sKD = storage.smem_kd.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sU = storage.smem_u.get_tensor(l_u)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))

        wg = mma_rs.get_slice(0)
        w_B = wg.make_fragment_B(wg.partition_B(sW))  # (.., .., K / 16, stages)
        kd_B = wg.make_fragment_B(wg.partition_B(sKD))  # (.., .., 4, K/64 * stages)
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((BV, CHUNK)), Float32)  # Vn^T [64 V rows, tokens]
        acc_s = [cute.make_rmem_tensor(wg.partition_shape_C((BV, BV)), Float32) for _ in range(NH)]
        r_s = [cute.make_rmem_tensor(acc_layout_as_a(acc_s[h].layout), BFloat16) for h in range(NH)]  # bf16(S0), A operand
        r_v = cute.make_rmem_tensor(acc_layout_as_a(acc_v.layout), BFloat16)  # bf16(Vn^T), A operand
        c64 = mma_rs.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))
        atom = cute.make_mma_atom(mma_rs.op)
        atom.set(warpgroup.Field.ACCUMULATE, True)

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
            g2s(cp_f32, cute.local_tile(mU[base, head, None, None], (CHUNK, BV), (0, vblk)), sU[None, None, 0], tidx)
            g2s_vector(mGE[base, head, None], sGE[None, 0], tidx, D)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
        _smem_ready()

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                ci = cp * STAGES + st
                if ci < n_chunks:
                    slot = base + ci
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
                        g2s(cp_f32, cute.local_tile(mU[slot + 1, head, None, None], (CHUNK, BV), (0, vblk)), sU[None, None, nxt], tidx)
                        g2s_vector(mGE[slot + 1, head, None], sGE[None, nxt], tidx, D)
                        cute.arch.cp_async_commit_group()

                    # ---- Vn^T = U^T + bf16(S0) (-Wm)^T: A from registers, one WGMMA group (not waited yet) ------------
                    for h in cutlass.range_constexpr(NH):
                        acc_to_a_operand(acc_s[h], r_s[h])
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = c64[i]
                        acc_v[i] = sU[rc[1], rc[0], st]
                    warpgroup.fence()
                    for h in cutlass.range_constexpr(NH):
                        for kb in cutlass.range_constexpr(KB):
                            cute.gemm(atom, acc_v, r_s[h][None, None, kb], w_B[None, None, h * KB + kb, st], acc_v)
                    warpgroup.commit_group()
                    # meanwhile: h[slot] = bf16(S0) for the output kernel, and S0 Diag(exp(G_C))
                    for h in cutlass.range_constexpr(NH):
                        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
                            rc = c64[i]
                            mH[slot, head, v0 + rc[0], h * BV + rc[1]] = acc_s[h][i].to(BFloat16)
                            acc_s[h][i] = acc_s[h][i] * sGE[h * BV + rc[1], st]
                    warpgroup.wait_group(0)

                    # ---- S = S Diag(exp(G_C)) + bf16(Vn^T) (K exp(G_C - G)): A from registers ----------------------
                    acc_to_a_operand(acc_v, r_v)
                    warpgroup.fence()
                    for h in cutlass.range_constexpr(NH):
                        for kb in cutlass.range_constexpr(KB):
                            cute.gemm(atom, acc_s[h], r_v[None, None, kb], kd_B[None, None, kb, st * NH + h], acc_s[h])
                    warpgroup.commit_group()
                    for i in cutlass.range_constexpr(cute.size(acc_v)):  # Vn^T -> vnt[slot] while the update runs
                        rc = c64[i]
                        mVNT[slot, head, v0 + rc[0], rc[1]] = acc_v[i].to(BFloat16)
                    warpgroup.wait_group(0)
                    cute.arch.cp_async_wait_group(0)  # the next chunk's stage has landed (this thread's copies)
                    _smem_ready()  # ... visible to every thread and to WGMMA; every reader of this stage is done

        if const_expr(self.key.has_final):
            store_final_state(mHT, acc_s, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
