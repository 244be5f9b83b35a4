"""Chunk-parallel delta-rule forward (KDA and GDN), the fused state pass + output (opt-in: ``KdaParallelStateKey.fuse_out``,
the ``fso`` / ``fso-w2`` variants of ``_host/chunk_parallel.py``; session 8, issue #7), sm_90a, CuTe DSL, WGMMA.

What. The narrow state pass (``chunk_parallel_state_narrow_kernel.py``: grid [N, H, V / vw], the state slice held
transposed, ``S^T`` [K, vw] in K / 64 fp32 accumulators, operands by TMA) that also computes its slice's output columns,
so the schedule is two kernels (prep, this) instead of three, and the state pass writes neither ``h`` (bf16 S0 per chunk,
32 KB per chunk and head at K = 128) nor ``vnt`` (16 KB), which the output kernel no longer reads back. Per chunk, from the
prep kernel's workspace arrays (``_device/chunk_parallel.py``)::

    Vn        = U + (-Wm) S0^T                            [64 tokens, vw]: A = -Wm [64, K], B = S0 [vw, K]      (the chain)
    o         = rf (Qg S0^T) + P Vn                       [64 tokens, vw]: A = Qg [64, K], B = S0;  A = P [64, 64], B = Vn^T
    S1^T      = Diag(exp(G_C)) S0^T + (K exp(G_C - G))^T Vn                                                      (the chain)

``rf`` (the output key's ``row_scaled``, GDN: ``scale exp(G_i)`` per token, Qg = Q) scales the rows of ``Qg S0^T`` in fp32
before ``P Vn`` accumulates onto it, as in the output kernels; KDA (``qg`` = ``scale Q exp(G)``) has none. ``o`` is the
output kernels' product with the same operands (S0 and Vn^T as bf16 from shared memory instead of the workspace), at WGMMA
N = vw instead of 64: rounding-level equal to the default plan, not bitwise.

Order per chunk (one warpgroup; WGMMA groups complete in issue order, ``warpgroup.wait_group(n)``: at most n pending):

    1. warp 0: TMA of chunk ci + stages - 1 into the stage chunk ci - 1 used (-Wm, kd, U, exp(G_C), qg, p (, rf)),
       one transaction mbarrier per stage; every thread waits on chunk ci's
    2. U -> the Vn accumulator; issue [Vn = U - Wm S0^T]; issue [acc_o = Qg S0^T] (off the chain); wait_group(1): Vn done
    3. bf16 Vn^T -> sVnT; proxy fence + CTA barrier
    4. issue [S^T = decay S^T + kd Vn] (the chain); GDN: wait_group(1) (Qg S0^T done), acc_o *= rf; issue [acc_o += P Vn]
    5. wait_group(1): the state done -> bf16 S0 -> sS; wait_group(0): o done -> bf16 -> sO; proxy fence + CTA barrier
    6. the chunk's rows of o (``row < n_valid``: never a row of another sequence, varlen or dense) from sO by 16-byte
       stores when ``o``'s address and strides allow it (checked in-kernel per launch), else the 2-byte stores of the
       output kernels from the accumulator

Shared memory (K = 128, vw = 32): per stage -Wm 16 KB + kd 16 KB + U 8 KB (fp32) + exp(G_C) 0.5 KB + qg 16 KB + p 8 KB
(+ rf 0.25 KB) = 64.5 KB, once sS 8 KB + sVnT 4 KB + sO 4 KB: three stages ~210 KB (of 227), four do not fit -- so three
stages (chunk ci + 2 fetched while ci computes; the ``fso`` variant's ``stages``), one CTA per SM (as the default
four-stage state pass at ~166 KB). A shallower qg / p ring would free one stage of them (24 KB) but needs a second
mbarrier ring; not done (:func:`smem_bytes`, checked by ``for_key``). Traffic per (chunk, head) at K = 128: reads w, u,
kd, ge, qg, p (, rf) ~89 KB (every V slice reads w, kd, qg, p again: 4 slices), writes o 16 KB, where the three-kernel
schedule's state pass + output move ~201 KB (``notes/la_fwd_next.md``, step 2).

Two consumer warpgroups (``consumer_wgs`` = 2, the ``fso-w2`` variant; default 1: the kernel above, PTX unchanged).
H200, fso at T = 32k, H = 64: its 256 CTAs (one per SM: the shared memory) run in two waves of 132 (1916 us = 2 x ~950);
at H = 16 its 64 CTAs leave half the GPU idle. With two warpgroups one CTA (256 threads) owns 2 x vw value columns,
warpgroup ``w`` the columns ``(vblk * 2 + w) * vw ..``; both walk their chains through ONE stage ring: -Wm, kd,
exp(G_C), qg, p (, rf) are fetched once per CTA and chunk, the U columns of both (two boxes) with them, and S0 / Vn^T /
the o tile are per warpgroup. So per stage 56.75 + 2 x 8 KB and once 2 x 16 KB: two stages ~188 KB (three do not fit);
grid [N, H, V / (2 vw)]: 128 CTAs at H = 64 (one wave), each warpgroup's chain as before. Synchronization:

- full: the stage's transaction mbarrier (as above), waited by all 256 threads;
- empty (one mbarrier per stage, arrive count 2): thread 0 of each warpgroup arrives once its warpgroup is done with
  the stage (after the end-of-chunk barrier below, which follows every thread's ``wait_group(0)``); warp 0 waits on it
  before it refills the stage (the one-warpgroup kernel's CTA barrier did that);
- the warpgroup-local handoffs (Vn^T before the state update and P Vn; the new S0 and the o tile at the chunk's end)
  through named barrier ``1 + w`` of 128 threads (:func:`.._device.chunk_parallel.wg_smem_ready`), never a CTA barrier
  in the loop, so one warpgroup does not wait on the other's chain (only the refill couples them: warp 0 waits for both
  to release a stage, so warpgroup 0 runs at most one chunk ahead).

Every column gets the same operations on the same operands as with one warpgroup: bitwise the ``fso`` kernel. Four
warpgroups (the whole V = 128 per CTA) do not fit: per stage 56.75 + 4 x 8 KB and once 4 x 16 KB, ~241 KB at two stages.

Grid ``[N, H, V / vw]`` (``[N, H, V / (2 vw)]`` with two warpgroups); initial state read once, final state written once
(fp32 [N, H, V, K]), as the narrow state pass.
Runtime extents (T, N, L, chunks per sequence, slots, H, o's strides) are kernel arguments (Rule 4); the TMA descriptors
are encoded on the host at each launch. Tests: ``tests/test_parallel_state_out.py`` (compile-only: both families, one and
two warpgroups, no spill, WGMMA + TMA in PTX, the barriers, the cudnn symbol; GPU: dense / varlen, states, o rows outside
the sequences untouched, ``fso-w2`` bitwise ``fso``). Benchmark: ``benchmarks/linear_attention_kernels.py --variants
parallel,par-fso,par-fso-w2`` (the "state+out" column is the fused kernel, state pass and output together).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup

from .._device.chunk_parallel import (
    acc_to_smem,
    acc_to_smem_t,
    chunk_walk,
    fetch_chunk_tma,
    fetch_out_operands_tma,
    init_stage_ring,
    issue_state_update_t,
    load_state_t,
    scale_acc_rows,
    state_operand_tma_atoms,
    state_operand_tma_partitions,
    state_pass_fragments,
    state_pass_layouts,
    state_pass_smem,
    state_t_to_smem,
    stmatrix_t_copy,
    store_final_state_t,
    tma_box_partition,
    tma_u_atom,
    u_to_acc,
    wg_smem_ready,
    wgmma_issue,
)
from .._device.delta_rule import BV, CHUNK, THREADS, k_major_smem_layout, make_seq_state_views, store_output_rows
from .._device.delta_rule import smem_ready as _smem_ready
from .chunk_parallel_out_persistent_kernel import rows_to_gmem_v16
from .chunk_parallel_state_narrow_kernel import V_SLICES

#: Shared memory one CTA may use on sm_90 (227 KB).
SMEM_LIMIT = 227 * 1024
_ALIGN_PAD = 10 * 1024  # the 1024-byte alignment of the ten shared arrays, at most


def smem_bytes(key) -> int:
    """Shared-memory bytes of the fused kernel for ``key`` (upper bound, alignment pads included): per stage -Wm, kd, U
    (fp32, one tile per consumer warpgroup), exp(G_C), qg, p, rf and an mbarrier (two: full and empty, with two
    warpgroups); once per warpgroup S0, Vn^T and the output tile."""
    d, vw, s = key.head_dim, key.v_slice, key.stages
    wgs = key.consumer_wgs
    per_stage = CHUNK * d * 2 + d * CHUNK * 2 + CHUNK * vw * 4 * wgs + d * 4 + CHUNK * d * 2 + CHUNK * CHUNK * 2 + CHUNK * 4 + 8 * (2 if wgs > 1 else 1)
    return s * per_stage + wgs * (vw * d * 2 + vw * CHUNK * 2 + CHUNK * vw * 2) + _ALIGN_PAD


class KimiDeltaAttentionParallelStateOut:
    """The fused state pass + output (``KdaParallelStateKey.fuse_out``; routed to by
    ``KimiDeltaAttentionParallelState.for_key``): ``__init__`` holds the compile key, ``__call__`` launches (the state
    pass's arguments plus ``o``, T and o's (token, head) strides), ``kernel`` runs the chunk loop."""

    def __init__(self, key):
        assert key.fuse_out and key.tma and key.head_dim in (64, 128) and key.stages in (2, 3, 4) and key.v_slice in V_SLICES
        self.key = key
        self.D = key.head_dim
        self.VW = key.v_slice
        self.WGS = key.consumer_wgs

    @cute.jit
    def __call__(
        self,
        cu_ptr: cute.Pointer | None,
        h0_ptr: cute.Pointer | None,
        ht_ptr: cute.Pointer | None,
        o_ptr: cute.Pointer,
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
        seq_len: Int32,
        chunks_per_seq: Int32,
        slots: Int32,
        heads: Int32,
        o_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        VW = self.VW
        STAGES = self.key.stages
        RS = self.key.row_scaled
        WGS = self.WGS
        MBARS = 2 if WGS > 1 else 1
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)
        mO = cute.make_tensor(o_ptr, cute.make_layout((T, heads, D), stride=(o_strides[0], o_strides[1], 1)))

        mma, l_s, l_w, l_kc, l_vt = state_pass_layouts(D, VW, STAGES)  # S0 [vw, K], -Wm x stages (qg: the same), kd, Vn^T [vw, tokens]
        l_p = k_major_smem_layout(CHUNK, CHUNK, STAGES)  # P [tokens, tokens] x stages
        l_o = k_major_smem_layout(CHUNK, VW)  # the output tile [tokens, vw]
        u_atom = tma_u_atom(VW)
        l_u = cute.tile_to_shape(u_atom, (CHUNK, VW, STAGES), order=(0, 1, 2))
        u_atom_box = cute.slice_(l_u, (None, None, 0))
        if const_expr(WGS > 1):  # per warpgroup: S0, Vn^T, the output tile and (per stage) the U columns
            l_s = k_major_smem_layout(VW, D, WGS)
            l_vt = k_major_smem_layout(VW, CHUNK, WGS)
            l_o = k_major_smem_layout(CHUNK, VW, WGS)
            l_u = cute.tile_to_shape(u_atom, (CHUNK, VW, STAGES, WGS), order=(0, 1, 2, 3))

        # TMA atoms over 2-D views of the workspace arrays (rows = slot x heads + head), as the narrow state pass, plus qg
        # [rows x tokens, K], p [rows x tokens, tokens] and (GDN) rf [rows, tokens]
        rows = slots * heads
        g2s_op = cpasync.CopyBulkTensorTileG2SOp()
        mQG2 = cute.make_tensor(qg_ptr, cute.make_layout((rows * CHUNK, D), stride=(D, 1)))
        mP2 = cute.make_tensor(p_ptr, cute.make_layout((rows * CHUNK, CHUNK), stride=(CHUNK, 1)))
        atom_qg, tma_qg = cpasync.make_tiled_tma_atom(g2s_op, mQG2, k_major_smem_layout(CHUNK, BV), (CHUNK, BV))
        atom_p, tma_p = cpasync.make_tiled_tma_atom(g2s_op, mP2, k_major_smem_layout(CHUNK, CHUNK), (CHUNK, CHUNK))
        tma = (*state_operand_tma_atoms(w_ptr, u_ptr, kd_ptr, ge_ptr, rows, D, VW, u_atom_box), atom_qg, tma_qg, atom_p, tma_p)
        if const_expr(RS):
            mRF2 = cute.make_tensor(rf_ptr, cute.make_layout((rows, CHUNK), stride=(CHUNK, 1)))
            atom_rf, tma_rf = cpasync.make_tiled_tma_atom(g2s_op, mRF2, cute.make_layout((1, CHUNK), stride=(CHUNK, 1)), (1, CHUNK))
            tma = (*tma, atom_rf, tma_rf)

        @cute.struct
        class SharedStorage:
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_qg: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_p: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_p)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vt)], 1024]
            smem_o: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_o)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 1024]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 128]
            smem_rf: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * STAGES], 128]
            mbar: cute.struct.MemRange[Int64, STAGES * MBARS]  # full (, empty: two warpgroups) per stage

        self.kernel(mCu, mH0, mHT, mO, tma, n_seqs, seq_len, chunks_per_seq, heads, o_strides, mma, l_s, l_w, l_kc, l_vt, l_p, l_o, l_u, SharedStorage).launch(
            grid=[n_seqs, heads, D // (VW * WGS)],
            block=[THREADS * WGS, 1, 1],
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
        tma: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        o_strides: tuple[Int64, Int64],
        mma: cute.TiledMma,
        l_s: cute.ComposedLayout,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_vt: cute.ComposedLayout,
        l_p: cute.ComposedLayout,
        l_o: cute.ComposedLayout,
        l_u: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        VW = self.VW
        NH = D // BV
        STAGES = self.key.stages
        RS = self.key.row_scaled
        WGS = self.WGS
        tidx, _, _ = cute.arch.thread_idx()
        seq, head, vblk = cute.arch.block_idx()
        ltid = tidx  # the thread within its warpgroup
        wgi = Int32(0)  # the consumer warpgroup (two-warpgroup form)
        v0 = vblk * VW
        if const_expr(WGS > 1):
            wgi = cute.arch.make_warp_uniform(tidx // THREADS)
            ltid = tidx % THREADS
            v0 = (vblk * WGS + wgi) * VW
        bos, eos, n_chunks, base = chunk_walk(mCu, seq, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sS, sW, sKD, sVnT = state_pass_smem(storage, l_s, l_w, l_kc, l_vt)
        sQG = storage.smem_qg.get_tensor(l_w.outer, swizzle=l_w.inner)
        sP = storage.smem_p.get_tensor(l_p.outer, swizzle=l_p.inner)
        sO = storage.smem_o.get_tensor(l_o.outer, swizzle=l_o.inner)
        sU = storage.smem_u.get_tensor(l_u.outer, swizzle=l_u.inner)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))
        sRF = storage.smem_rf.get_tensor(cute.make_layout((CHUNK, STAGES)))
        sUall = sU  # the TMA destination: [tokens, vw, stages] (, warpgroups)
        if const_expr(WGS > 1):  # this warpgroup's S0, Vn^T, output tile and U columns
            sS = sS[None, None, wgi]
            sVnT = sVnT[None, None, wgi]
            sO = sO[None, None, wgi]
            sU = sU[None, None, None, wgi]

        w_A, s0_B, kd_A, vn_B = state_pass_fragments(mma, sW, sS, sKD, sVnT)  # -Wm (x stages), S0, kd (x K/64 x stages), Vn^T
        wg = mma.get_slice(0)
        qg_A = wg.make_fragment_A(wg.partition_A(sQG))  # Qg: (.., .., .., stages)
        p_A = wg.make_fragment_A(wg.partition_A(sP))  # P: (.., .., .., stages)
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, VW)), Float32)  # Vn [tokens, vw]
        acc_o = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, VW)), Float32)  # o [tokens, vw]
        acc_t = [cute.make_rmem_tensor(wg.partition_shape_C((BV, VW)), Float32) for _ in range(NH)]  # S^T [64 K-ch, vw] x K/64
        ct = mma.get_slice(ltid).partition_C(cute.make_identity_tensor((CHUNK, VW)))  # (row, col) of an accumulator element
        st_t, st_n = None, None  # stmatrix: the per-chunk bf16 copies by stmatrix (.trans for Vn^T and S0)
        if const_expr(self.key.stmatrix):
            st_t, st_n = stmatrix_t_copy(mma, ltid), stmatrix_t_copy(mma, ltid, False)

        atom_w, tma_w, atom_kd, tma_kd, atom_u, tma_u, atom_ge, tma_ge, atom_qg, tma_qg, atom_p, tma_p = tma[:12]
        # -Wm, kd, U columns (of every warpgroup), exp(G_C), qg, p (, rf)
        tx_bytes = CHUNK * D * 2 + D * CHUNK * 2 + CHUNK * VW * 4 * WGS + D * 4 + CHUNK * D * 2 + CHUNK * CHUNK * 2
        if const_expr(RS):
            tx_bytes = tx_bytes + CHUNK * 4
        mbar = storage.mbar.data_ptr()  # [0, STAGES): full (TMA landed); [STAGES, 2 STAGES): empty (both warpgroups done)
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        # full mbarriers (, empty: one arrive per consumer warpgroup)
        init_stage_ring((atom_w, atom_kd, atom_u, atom_ge, atom_qg, atom_p), mbar, warp, STAGES, WGS if WGS > 1 else 0)

        # TMA views: -Wm / U / qg / p as [slot x head x token rows, columns], kd as [slot x head x channel rows, tokens],
        # exp(G_C) / rf as [slot x head, columns]; the shared tiles grouped per TMA box
        tWs, tWg, tKs, tKg, tUs, tUg, tGs, tGg = state_operand_tma_partitions(
            atom_w, tma_w, sW, atom_kd, tma_kd, sKD, atom_u, tma_u, sUall, atom_ge, tma_ge, sGE, D, VW, STAGES
        )
        tQs, tQg = tma_box_partition(atom_qg, cute.flat_divide(sQG, (CHUNK, BV)), tma_qg, (CHUNK, BV))
        tPs, tPg = tma_box_partition(atom_p, sP, tma_p, (CHUNK, CHUNK))
        parts = (atom_w, tWg, tWs, atom_kd, tKg, tKs, atom_u, tUg, tUs, atom_ge, tGg, tGs)
        oparts = (atom_qg, tQg, tQs, atom_p, tPg, tPs)
        if const_expr(RS):
            atom_rf, tma_rf = tma[12:]
            if warp == 0:
                cpasync.prefetch_descriptor(atom_rf)
            sRF3 = cute.make_tensor(sRF.iterator, cute.make_layout((1, CHUNK, STAGES), stride=(CHUNK, 1, CHUNK)))
            tRs, tRg = tma_box_partition(atom_rf, sRF3, tma_rf, (1, CHUNK))
            oparts = (*oparts, atom_rf, tRg, tRs)

        o_base = mO.iterator.toint()
        vec_ok = Int32(0)  # 16-byte output stores: o's address and its token / head strides are 16-byte multiples
        if o_base % 16 == 0:
            if o_strides[0] % 8 == 0:
                if o_strides[1] % 8 == 0:
                    vec_ok = Int32(1)

        load_state_t(acc_t, sS, mH0, ct, seq, head, v0, NH, self.key.has_initial)
        _smem_ready()  # S0 (load_state_t) and the initialized mbarriers published before any thread uses them

        # stages 0 .. STAGES - 2 <- chunks 0 .. STAGES - 2 (those that exist)
        if warp == 0:
            for j in cutlass.range_constexpr(STAGES - 1):
                if j < n_chunks:
                    fetch_chunk_tma(parts, (base + j) * heads + head, vblk, j, mbar, tx_bytes, NH, WGS)
                    fetch_out_operands_tma(oparts, (base + j) * heads + head, j, mbar, NH)

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                ci = cp * STAGES + st
                if ci < n_chunks:
                    slot = base + ci
                    nxt = (st + STAGES - 1) % STAGES  # the stage chunk ci - 1 used: its readers finished last chunk
                    ahead = STAGES - 1  # fetch chunk ci + ahead into it
                    if warp == 0:
                        if ci + ahead < n_chunks:
                            if const_expr(WGS > 1):
                                # both warpgroups released chunk ci - 1's stage (its (ci - 1) // STAGES-th use)
                                if const_expr(st == 0):
                                    if cp > 0:
                                        cute.arch.mbarrier_wait(mbar + STAGES + nxt, (cp + 1) % 2)
                                else:
                                    cute.arch.mbarrier_wait(mbar + STAGES + nxt, cp % 2)
                            fetch_chunk_tma(parts, (slot + ahead) * heads + head, vblk, nxt, mbar, tx_bytes, NH, WGS)
                            fetch_out_operands_tma(oparts, (slot + ahead) * heads + head, nxt, mbar, NH)
                    cute.arch.mbarrier_wait(mbar + st, cp % 2)  # chunk ci has landed in stage st (its cp-th fill)

                    # ---- Vn = U + (-Wm) S0^T (the chain) and Qg S0^T (the output's first product, off the chain) -----
                    u_to_acc(acc_v, sU, ct, st)
                    wgmma_issue(mma, acc_v, w_A[None, None, None, st], s0_B, False)
                    wgmma_issue(mma, acc_o, qg_A[None, None, None, st], s0_B, True)
                    warpgroup.wait_group(1)  # Vn done (Qg S0^T may be in flight)
                    acc_to_smem_t(acc_v, sVnT, ct, st_t)
                    if const_expr(WGS > 1):
                        wg_smem_ready(wgi)  # Vn^T visible to this warpgroup's WGMMA
                    else:
                        _smem_ready()  # Vn^T visible to WGMMA

                    # ---- S^T = Diag(exp(G_C)) S^T + kd Vn (the chain), then o (+)= P Vn ------------------------------
                    issue_state_update_t(mma, acc_t, sGE, kd_A, vn_B, ct, st)
                    if const_expr(RS):  # GDN: the rows of Q S0^T scaled in fp32 before P Vn accumulates (the output kernels' order)
                        warpgroup.wait_group(1)  # Qg S0^T done (the state update may be in flight)
                        scale_acc_rows(acc_o, sRF, ct, st)
                    wgmma_issue(mma, acc_o, p_A[None, None, None, st], vn_B, False)
                    warpgroup.wait_group(1)  # the state update done (P Vn may be in flight)
                    state_t_to_smem(sS, acc_t, ct, NH, st_t)
                    warpgroup.wait_group(0)  # o done: every reader of this stage, of S0 and of Vn^T has completed
                    if vec_ok != 0:
                        acc_to_smem(acc_o, sO, ct, st_n)
                    if const_expr(WGS > 1):
                        wg_smem_ready(wgi)  # the new S0 and the output tile published in the warpgroup
                        if ltid == 0:
                            cute.arch.mbarrier_arrive(mbar + STAGES + st)  # this warpgroup is done with stage st
                    else:
                        _smem_ready()  # the new S0 visible to WGMMA, the output tile to every thread; the stage is free

                    # ---- the chunk's output rows (inside the sequence only) -------------------------------------------
                    t0 = bos + ci * CHUNK
                    n_valid = min(eos - t0, CHUNK)
                    if vec_ok != 0:
                        rows_to_gmem_v16(sO, o_base, o_strides[0], o_strides[1], t0, n_valid, head, v0, ltid)
                    else:
                        store_output_rows(mO, acc_o, ct, t0, n_valid, head, v0)

        if const_expr(self.key.has_final):
            store_final_state_t(mHT, acc_t, ct, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
