"""Chunk-parallel delta-rule forward (KDA and GDN), kernel 2 of 3 (state pass): the inter-chunk recurrence with ``vw``
value rows of the state per CTA (``KdaParallelStateKey.v_slice``: 32 by default, 16 or 64 opt-in), sm_90a, CuTe DSL,
WGMMA. The one state-pass kernel (``chunk_parallel_state_kernel.py`` holds its key and routes to it).

Why narrow. The rows of ``S`` [V, K] evolve independently, so ``vw``-row slices give ``N x H x V / vw`` CTAs (64 at
N = 1, H = 16, V = 128, vw = 32), each walking its sequence's chunks in order. H200, T = 8192, H = 16, K = V = 128:
147.5 us (vw 32) and 147.1 (vw 16) vs 217.9 for the former 64-row kernel (removed).

How. WGMMA needs M = 64, so the state slice is held TRANSPOSED, ``S^T`` [K, vw] in ``K / 64`` fp32 accumulators of
64 key channels x ``vw`` value rows (M on the key side, N = ``vw``). Per chunk, from the prep kernel's workspace
arrays (``_device/chunk_parallel.py``)::

    h[slot]   = bf16(S0)                                     (rows v0:v0+vw, for the output kernel)
    Vn        = U + (-Wm) S0^T                               [64 tokens, vw]: A = -Wm [64, K], B = S0 [vw, K]
    S1^T      = Diag(exp(G_C)) S0^T + (K exp(G_C - G))^T Vn  [K, vw]: A = kd [64 channels, 64 tokens] x K / 64, B = Vn^T [vw, 64]

(``Vn^T`` goes to shared memory once as bf16 [vw, 64 tokens] K-major: the B operand of the state update and the
``vnt[slot]`` rows for the output kernel.) Slice widths differ only in the fp32 accumulation order inside the MMAs.

The per-chunk dependency chain (default: ``stages`` = 2, cp.async; SASS of K = 128, vw = 32, cycles estimated):

    1. issue chunk ci + 1's fetch (-Wm, kd: 32 KB, the same for every slice of a head; U columns 8 KB; exp(G_C)):
       20 cp.async of 16 bytes + ~45 address instructions per thread (~100)
    2. h[slot] <- sS: 4 shared 16-byte loads + 4 global stores per thread (~30)
    3. U -> the Vn accumulators: 8 shared 8-byte loads (~30)
    4. Vn WGMMA group: 8 x m64n32k16, committed and waited (~230)
    5. Vn -> bf16 Vn^T in shared memory: 16 scalar transposed 2-byte stores (~40)
    6. proxy fence (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC) + CTA barrier (~60-100)
    7. vnt[slot] <- sVnT (2 + 2), exp(G_C) loads and the 32-FMUL decay (~50)
    8. state WGMMA group: 2 x 4 x m64n32k16, waited (~230)
    9. CTA barrier (~30), then bf16 S0 -> sS: 32 scalar 2-byte stores (~70)
    10. cp.async.wait_group 0: chunk ci + 1's fetch, issued in step 1, must have landed; proxy fence + barrier (~60-100)

   Compute (1-9 + the fences) is ~900-1000 cycles (~0.5 us); measured 147.5 us / 128 chunks = 1.15 us (~2270 cycles):
   the rest is step 10, the fetch latency of ~41 KB issued one chunk ahead (an HBM miss plus 2560 16-byte requests
   through the LSU), or the fences waiting on the in-flight loads / global stores.

Opt-ins that cut it (each bitwise the default: same operations on the same operands):

- ``stages`` = 3 / 4: chunk ci + 2 / ci + 3 fetched; two / three chunks of compute hide each fetch (~42 KB of shared
  memory per stage at vw = 32, K = 128; 4 stages ~180 KB). Estimated 0.55-0.6 / 0.45-0.5 us per chunk if step 10 is
  fetch latency (~75 / ~60 us), no gain if the fences serialize the loads.
- ``tma``: the four operands by TMA (``cp.async.bulk.tensor``, one elected lane of warp 0, one transaction mbarrier per
  stage; U in a 128-byte-swizzled fp32 tile): step 1 shrinks to ~10 instructions of one lane, step 10 to an mbarrier
  wait at the top of the chunk, the barrier of step 9 goes (every reader of S0 passed step 6), and the loads are no
  longer the thread's own memory operations for the fences to wait on. Estimated ~0.45 us per chunk compute; with 3 / 4
  stages (the fetch hidden) ~55-65 us.
- ``tma_store`` (with ``tma``): h and vnt leave shared memory by TMA stores of one elected lane (each waited for
  reading before its tile is rewritten), removing steps 2 and 7's global stores and address math (~60 cycles) and any
  store drain the fences might wait for.

Opt-in ``signal_out`` (session 30, the ``ovl`` variant; :class:`KimiDeltaAttentionParallelStateNarrowSignal`, the entry
that takes the ready flags): the TMA loop zeroes its flags, lets the output grid launch early and, once a chunk's h /
vnt stores completed (checked two chunks later), sets its flag by a relaxed store (``_device/chunk_parallel.py``,
"the ready flags").

(Session 7's opt-in ``u_bf16`` -- U read as bf16 -- lost on the H200 and was removed in session 8:
``docs/benchmarks/linear_attention_kernels_ub16_*.md``.)

Grid ``[N, H, V / vw]``; initial state read once, final state written once (fp32 [N, H, V, K]). About 95 KB of shared
memory for K = 128, vw = 32, two stages. Runtime extents are kernel arguments (Rule 4); the TMA descriptors are
encoded on the host at each launch from the workspace pointer and the runtime slot count. Tests:
``tests/test_state_pass_gpu.py`` (options, both families), ``tests/test_kda_parallel_gpu.py``,
``tests/test_gdn_parallel_gpu.py``, compile-only in ``tests/test_parallel_variants_compile.py`` and
``tests/test_state_pass_gpu.py::test_state_pass_compile_only``; benchmark ``benchmarks/linear_attention_kernels.py``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync

from .._device.chunk_parallel import (
    U_PAD,
    chunk_walk,
    fetch_chunk_cp_async,
    fetch_chunk_tma,
    init_stage_ring,
    load_state_t,
    make_g2s_copy,
    make_ready_view,
    make_ws_views,
    ready_flag_ptr,
    s2g_tile,
    signal_ready,
    state_operand_tma_atoms,
    state_operand_tma_partitions,
    state_pass_fragments,
    state_pass_layouts,
    state_pass_smem,
    state_t_to_smem,
    state_to_workspace,
    stmatrix_t_copy,
    store_final_state_t,
    tma_box_partition,
    tma_u_atom,
    update_state_t,
    vn_to_smem,
)
from .._device.delta_rule import BV, CHUNK, THREADS, k_major_smem_layout, make_seq_state_views
from .._device.delta_rule import smem_ready as _smem_ready

V_SLICES = (32, 16, 64)  # the value-slice widths this kernel builds (32: the default)
READY_LAG = 2  # signal_out: a chunk's flag is set at the end of the chunk two later (its stores have completed by then)


class KimiDeltaAttentionParallelStateNarrow:
    """The state pass on ``key.v_slice``-row value slices (``KdaParallelStateKey``; routed to by
    ``KimiDeltaAttentionParallelState.for_key``): ``__init__`` holds the compile key, ``__call__`` launches,
    ``kernel`` runs the cp.async loop, ``tma_body`` the TMA loop (``key.tma``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.stages in (2, 3, 4) and key.v_slice in V_SLICES
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
        self.launch(
            cu_ptr,
            h0_ptr,
            ht_ptr,
            w_ptr,
            u_ptr,
            kd_ptr,
            qg_ptr,
            p_ptr,
            ge_ptr,
            vnt_ptr,
            h_ptr,
            rf_ptr,
            n_seqs,
            seq_len,
            chunks_per_seq,
            slots,
            heads,
            stream,
            None,
        )

    @cute.jit
    def launch(
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
        rdy_ptr: cute.Pointer | None,
    ):
        """Views, layouts, TMA atoms and the launch of ``kernel``; ``rdy_ptr``: the ready flags (``signal_out``, the
        :class:`KimiDeltaAttentionParallelStateNarrowSignal` entry), None otherwise."""
        D = self.D
        VW = self.VW
        STAGES = self.key.stages
        mRdy = make_ready_view(rdy_ptr, slots, heads, D)  # signal_out: the ready flags (None otherwise)
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)

        mma, l_s, l_w, l_kc, l_vt = state_pass_layouts(D, VW, STAGES)  # S0 [vw, K], -Wm x stages, kd x K/64 x stages, Vn^T [vw, tokens]
        tma = None
        if const_expr(self.key.tma):
            # U [tokens, vw] fp32 in a swizzled tile (TMA writes no padded rows; the swizzle keeps the accumulator-pattern
            # reads conflict-free), and the four operands' TMA atoms over 2-D views of the workspace arrays
            l_u = cute.tile_to_shape(tma_u_atom(VW), (CHUNK, VW, STAGES), order=(0, 1, 2))
            rows = slots * heads
            tma = state_operand_tma_atoms(w_ptr, u_ptr, kd_ptr, ge_ptr, rows, D, VW, cute.slice_(l_u, (None, None, 0)))
            if const_expr(self.key.tma_store):  # h [slot x head x V rows, K] and vnt [slot x head x V rows, tokens] written by TMA
                s2g_op = cpasync.CopyBulkTensorTileS2GOp()
                mH2 = cute.make_tensor(h_ptr, cute.make_layout((rows * D, D), stride=(D, 1)))
                mVNT2 = cute.make_tensor(vnt_ptr, cute.make_layout((rows * D, CHUNK), stride=(CHUNK, 1)))
                atom_hs, tma_hs = cpasync.make_tiled_tma_atom(s2g_op, mH2, k_major_smem_layout(VW, BV), (VW, BV))
                atom_vs, tma_vs = cpasync.make_tiled_tma_atom(s2g_op, mVNT2, k_major_smem_layout(VW, CHUNK), (VW, CHUNK))
                tma = (*tma, atom_hs, tma_hs, atom_vs, tma_vs)

            @cute.struct
            class SharedStorage:
                smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
                smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
                smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
                smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vt)], 1024]
                smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 1024]
                smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 128]
                mbar: cute.struct.MemRange[Int64, STAGES]

        else:
            l_u = cute.make_layout((CHUNK, VW, STAGES), stride=(VW + U_PAD, 1, CHUNK * (VW + U_PAD)))

            @cute.struct
            class SharedStorage:
                smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
                smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
                smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
                smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vt)], 1024]
                smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 16]
                smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 16]

        self.kernel(mCu, mH0, mHT, ws, tma, n_seqs, seq_len, chunks_per_seq, heads, mma, l_s, l_w, l_kc, l_vt, l_u, SharedStorage, mRdy).launch(
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
        tma: tuple | None,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        mma: cute.TiledMma,
        l_s: cute.ComposedLayout,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_vt: cute.ComposedLayout,
        l_u: cute.Layout | cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
        mRdy: cute.Tensor | None = None,
    ):
        D = self.D
        VW = self.VW
        NH = D // BV
        STAGES = self.key.stages
        mW, mU, mKD, _, _, mGE, mVNT, mH, _ = ws
        tidx, _, _ = cute.arch.thread_idx()
        seq, head, vblk = cute.arch.block_idx()
        v0 = vblk * VW
        bos, eos, n_chunks, base = chunk_walk(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sS, sW, sKD, sVnT = state_pass_smem(storage, l_s, l_w, l_kc, l_vt)
        if const_expr(self.key.tma):
            sU = storage.smem_u.get_tensor(l_u.outer, swizzle=l_u.inner)
        else:
            sU = storage.smem_u.get_tensor(l_u)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))

        w_A, s0_B, kd_A, vn_B = state_pass_fragments(mma, sW, sS, sKD, sVnT)  # -Wm (x stages), S0, kd (x K/64 x stages), Vn^T
        wg = mma.get_slice(0)
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, VW)), Float32)  # Vn [tokens, vw]
        acc_t = [cute.make_rmem_tensor(wg.partition_shape_C((BV, VW)), Float32) for _ in range(NH)]  # S^T [64 K-ch, vw] x K/64
        ct = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, VW)))  # (row, col) of an accumulator element
        st_t = stmatrix_t_copy(mma, tidx) if const_expr(self.key.stmatrix) else None  # stmatrix: the transposed copies

        if const_expr(self.key.tma):
            self.tma_body(
                tma,
                mma,
                storage,
                sS,
                sW,
                sKD,
                sVnT,
                sU,
                sGE,
                w_A,
                s0_B,
                kd_A,
                vn_B,
                acc_v,
                acc_t,
                ct,
                mH0,
                mHT,
                mH,
                mVNT,
                tidx,
                seq,
                head,
                vblk,
                n_chunks,
                base,
                heads,
                mRdy,
                st_t,
            )
        else:
            cp_bf16 = make_g2s_copy(BFloat16, CHUNK)  # 64-element bf16 rows: [64, 64] tiles
            cp_f32 = make_g2s_copy(Float32, VW)  # vw-element fp32 rows: the U columns v0:v0+vw

            load_state_t(acc_t, sS, mH0, ct, seq, head, v0, NH, self.key.has_initial)

            # Stage 0 <- chunk 0 (and stage 1 <- chunk 1 with three stages), as the default kernel.
            if n_chunks > 0:
                fetch_chunk_cp_async(cp_bf16, cp_f32, mW, mKD, mU, mGE, sW, sKD, sU, sGE, base, head, vblk, 0, tidx, NH, VW, D)
                cute.arch.cp_async_commit_group()
                if const_expr(STAGES >= 3):  # chunks 1 .. STAGES - 2 -> their stages, one group each (possibly empty)
                    for j in cutlass.range_constexpr(1, STAGES - 1):
                        if n_chunks > j:
                            fetch_chunk_cp_async(cp_bf16, cp_f32, mW, mKD, mU, mGE, sW, sKD, sU, sGE, base + j, head, vblk, j, tidx, NH, VW, D)
                        cute.arch.cp_async_commit_group()
                    cute.arch.cp_async_wait_group(STAGES - 2)  # chunk 0 has landed
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
                            fetch_chunk_cp_async(cp_bf16, cp_f32, mW, mKD, mU, mGE, sW, sKD, sU, sGE, slot + ahead, head, vblk, nxt, tidx, NH, VW, D)
                            if const_expr(STAGES == 2):
                                cute.arch.cp_async_commit_group()
                        if const_expr(STAGES >= 3):  # one group per chunk, empty past the end
                            cute.arch.cp_async_commit_group()
                        # the state entering this chunk (bf16 sS) -> h[slot] rows v0:v0+vw, for the output kernel
                        state_to_workspace(sS, mH, slot, head, vblk, tidx, VW, NH)

                        # ---- Vn = U + (-Wm) S0^T [tokens, vw] -> Vn^T (shared, and the workspace for the output kernel) ---
                        vn_to_smem(mma, acc_v, w_A, s0_B, sU, sVnT, ct, st, st_t)
                        _smem_ready()
                        s2g_tile(sVnT, cute.local_tile(mVNT[slot, head, None, None], (VW, CHUNK), (vblk, 0)), tidx)  # Vn^T -> vnt[slot]

                        # ---- S^T = Diag(exp(G_C)) S^T + kd Vn: the K / 64 tiles in one WGMMA group ----------------------
                        update_state_t(mma, acc_t, sGE, kd_A, vn_B, ct, st)
                        cute.arch.sync_threads()  # every reader of S0 and of this stage has completed
                        state_t_to_smem(sS, acc_t, ct, NH, st_t)
                        if const_expr(STAGES >= 3):
                            cute.arch.cp_async_wait_group(STAGES - 2)  # chunk ci + 1 has landed (later ones may be in flight)
                        else:
                            cute.arch.cp_async_wait_group(0)  # the next chunk's stage has landed (this thread's copies)
                        _smem_ready()  # ... and with the new S0, is visible to every thread and to WGMMA

            if const_expr(self.key.has_final):
                store_final_state_t(mHT, acc_t, ct, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def tma_body(
        self,
        tma: tuple,
        mma: cute.TiledMma,
        storage,
        sS: cute.Tensor,
        sW: cute.Tensor,
        sKD: cute.Tensor,
        sVnT: cute.Tensor,
        sU: cute.Tensor,
        sGE: cute.Tensor,
        w_A: cute.Tensor,
        s0_B: cute.Tensor,
        kd_A: cute.Tensor,
        vn_B: cute.Tensor,
        acc_v: cute.Tensor,
        acc_t: list,
        ct: cute.Tensor,
        mH0: cute.Tensor | None,
        mHT: cute.Tensor | None,
        mH: cute.Tensor,
        mVNT: cute.Tensor,
        tidx: Int32,
        seq: Int32,
        head: Int32,
        vblk: Int32,
        n_chunks: Int32,
        base: Int32,
        heads: Int32,
        mRdy: cute.Tensor | None,
        st_t: cute.ThrCopy | None,
    ):
        """The chunk loop of ``KdaParallelStateKey.tma``: warp 0 fetches chunk ci + stages - 1 by TMA into the stage
        chunk ci - 1 used (its readers passed chunk ci - 1's last barrier), one transaction mbarrier per stage; every
        thread waits on chunk ci's mbarrier (parity: the stage's fill count) before reading it. TMA writes through the
        async proxy, so only the threads' own shared stores (Vn^T, the bf16 state) need a proxy fence; the barrier
        before the state's shared store is dropped (every reader of S0 -- the Vn WGMMA, waited for, and the h store --
        passed the Vn^T barrier). Same operations on the same operands as the cp.async loop: bitwise its states."""
        D = self.D
        VW = self.VW
        NH = D // BV
        STAGES = self.key.stages
        atom_w, tma_w, atom_kd, tma_kd, atom_u, tma_u, atom_ge, tma_ge = tma[:8]
        STORE = self.key.tma_store
        v0 = vblk * VW
        tx_bytes = CHUNK * D * 2 + D * CHUNK * 2 + CHUNK * VW * 4 + D * 4  # -Wm, kd, U columns, exp(G_C)
        mbar = storage.mbar.data_ptr()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        init_stage_ring((atom_w, atom_kd, atom_u, atom_ge), mbar, warp, STAGES, 0)

        # TMA views: -Wm / U as [slot x head x token rows, channels], kd as [slot x head x channel rows, tokens], exp(G_C)
        # as [slot x head, channels]; the shared tiles grouped per TMA box
        tWs, tWg, tKs, tKg, tUs, tUg, tGs, tGg = state_operand_tma_partitions(
            atom_w, tma_w, sW, atom_kd, tma_kd, sKD, atom_u, tma_u, sU, atom_ge, tma_ge, sGE, D, VW, STAGES
        )
        tHs, tHg, tVs, tVg = None, None, None, None
        if const_expr(STORE):  # h / vnt as [slot x head x V rows, ...] in vw-row boxes: box row (slot heads + head) D / vw + vblk
            atom_hs, tma_hs, atom_vs, tma_vs = tma[8:]
            tHs, tHg = tma_box_partition(atom_hs, cute.flat_divide(sS, (VW, BV)), tma_hs, (VW, BV))
            tVs, tVg = tma_box_partition(atom_vs, sVnT, tma_vs, (VW, CHUNK))

        SIGNAL = self.key.signal_out
        if const_expr(SIGNAL):  # this CTA's ready flags <- 0 (the output grid launches once every CTA passed the barrier below)
            for c in cutlass.range(tidx, n_chunks, THREADS):
                cute.arch.store(ready_flag_ptr(mRdy, base + c, head, vblk), Int32(0))
            cute.arch.fence_acq_rel_gpu()
        load_state_t(acc_t, sS, mH0, ct, seq, head, v0, NH, self.key.has_initial)
        _smem_ready()  # S0 (load_state_t) and the initialized mbarriers published before any thread uses them
        if const_expr(SIGNAL):
            cute.arch.griddepcontrol_launch_dependents()

        # stages 0 .. STAGES - 2 <- chunks 0 .. STAGES - 2 (those that exist)
        parts = (atom_w, tWg, tWs, atom_kd, tKg, tKs, atom_u, tUg, tUs, atom_ge, tGg, tGs)
        if warp == 0:
            for j in cutlass.range_constexpr(STAGES - 1):
                if j < n_chunks:
                    fetch_chunk_tma(parts, (base + j) * heads + head, vblk, j, mbar, tx_bytes, NH)

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                ci = cp * STAGES + st
                if ci < n_chunks:
                    slot = base + ci
                    nxt = (st + STAGES - 1) % STAGES  # the stage chunk ci - 1 used: its readers finished last chunk
                    ahead = STAGES - 1  # fetch chunk ci + ahead into it
                    if warp == 0:
                        if ci + ahead < n_chunks:
                            fetch_chunk_tma(parts, (slot + ahead) * heads + head, vblk, nxt, mbar, tx_bytes, NH)
                    # the state entering this chunk (bf16 sS) -> h[slot] rows v0:v0+vw, for the output kernel
                    if const_expr(STORE):  # by TMA from warp 0 (sS was fenced for the async proxy at the last barrier)
                        if warp == 0:
                            with cute.arch.elect_one():  # this DSL emits the S2G copy unpredicated: one lane issues (and commits)
                                for h in cutlass.range_constexpr(NH):
                                    cute.copy(atom_hs, tHs[None, 0, h], tHg[None, (slot * heads + head) * (D // VW) + vblk, h])
                                cute.arch.cp_async_bulk_commit_group()
                    else:
                        state_to_workspace(sS, mH, slot, head, vblk, tidx, VW, NH)
                    cute.arch.mbarrier_wait(mbar + st, cp % 2)  # chunk ci has landed in stage st (its cp-th fill)

                    # ---- Vn = U + (-Wm) S0^T [tokens, vw] -> Vn^T (shared, and the workspace for the output kernel) ---
                    vn_to_smem(mma, acc_v, w_A, s0_B, sU, sVnT, ct, st, st_t)
                    if const_expr(STORE):
                        if warp == 0:
                            cute.arch.cp_async_bulk_wait_group(0, read=True)  # the h store has read sS (rewritten after this barrier)
                    _smem_ready()
                    if const_expr(STORE):  # Vn^T -> vnt[slot] by TMA from warp 0
                        if warp == 0:
                            with cute.arch.elect_one():
                                cute.copy(atom_vs, tVs, tVg[None, (slot * heads + head) * (D // VW) + vblk, 0])
                                cute.arch.cp_async_bulk_commit_group()
                    else:
                        s2g_tile(sVnT, cute.local_tile(mVNT[slot, head, None, None], (VW, CHUNK), (vblk, 0)), tidx)  # Vn^T -> vnt[slot]

                    # ---- S^T = Diag(exp(G_C)) S^T + kd Vn: the K / 64 tiles in one WGMMA group ----------------------
                    update_state_t(mma, acc_t, sGE, kd_A, vn_B, ct, st)
                    state_t_to_smem(sS, acc_t, ct, NH, st_t)
                    if const_expr(STORE):
                        if warp == 0:
                            cute.arch.cp_async_bulk_wait_group(0, read=True)  # the vnt store has read sVnT (rewritten next chunk)
                            if const_expr(SIGNAL):  # chunk ci - LAG's h / vnt stores complete (two groups per chunk): its flag
                                if ci >= READY_LAG:
                                    cute.arch.cp_async_bulk_wait_group(2 * READY_LAG)
                                    with cute.arch.elect_one():  # the lane that committed them
                                        signal_ready(mRdy, slot - READY_LAG, head, vblk)
                    _smem_ready()  # the new S0 is visible to every thread and to WGMMA; this stage's readers are done

        if const_expr(self.key.has_final):
            store_final_state_t(mHT, acc_t, ct, seq, head, v0, NH)
        if const_expr(SIGNAL):  # the last chunks' flags, after the final state (the output grid then ends after it)
            cute.arch.fence_acq_rel_gpu()
            cute.arch.sync_threads()
        if const_expr(STORE):
            if warp == 0:
                cute.arch.cp_async_bulk_wait_group(0)  # every TMA store complete before the CTA (and its shared memory) retires
                if const_expr(SIGNAL):  # the last chunks' flags, after every store and (the fence above) the final state
                    with cute.arch.elect_one():
                        for j in cutlass.range_constexpr(READY_LAG):
                            c = n_chunks - READY_LAG + j
                            if c >= 0:
                                signal_ready(mRdy, base + c, head, vblk)


class KimiDeltaAttentionParallelStateNarrowSignal(KimiDeltaAttentionParallelStateNarrow):
    """The narrow state pass of a ``signal_out`` key: the same kernel, whose entry also takes the workspace's ready flags
    (after the stream), so the default entry's signature (and its tvm-ffi entry) stays as it was."""

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
        rdy_ptr: cute.Pointer,
    ):
        self.launch(
            cu_ptr,
            h0_ptr,
            ht_ptr,
            w_ptr,
            u_ptr,
            kd_ptr,
            qg_ptr,
            p_ptr,
            ge_ptr,
            vnt_ptr,
            h_ptr,
            rf_ptr,
            n_seqs,
            seq_len,
            chunks_per_seq,
            slots,
            heads,
            stream,
            rdy_ptr,
        )
