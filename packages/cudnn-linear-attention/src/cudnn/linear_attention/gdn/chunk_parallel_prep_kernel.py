"""Gated DeltaNet forward, chunk-parallel schedule, kernel 1 of 3 (prep): everything of a chunk that does not depend
on the state, for every chunk of every sequence at once. sm_90a, CuTe DSL, WGMMA.

The algorithm and notation are ``chunk_fwd_kernel.py``'s (the serial schedule; scalar log decay ``g`` [T, H], in-chunk
cumulative ``G``); this kernel is its steps 1-5 without the state, writing to the caller's workspace
(``_device/chunk_parallel.py``): ``-Wm`` and ``(K exp(G_C - G))^T`` (bf16), ``U`` (fp32), ``Q`` (normalised, bf16,
in the ``qg`` array) with the row factors ``rf = scale exp(G_i)`` (fp32), ``P`` (bf16) and ``exp(G_C)`` broadcast
over the key channels (``ge``). The state pass and the output kernel are the family-agnostic
``kda/chunk_parallel_state_kernel.py`` and ``kda/chunk_parallel_out_kernel.py`` (``row_scaled=True``), so with the
blocked triangular solve the three kernels give the serial kernel's outputs bit for bit (every operand formed by
the same operations in the same order).

Grid ``[slots, H]`` (idle slots exit), one warpgroup per CTA. Runtime extents are kernel arguments (Rule 4).

Not the default since session 6: :class:`GdnParallelPrepKey`'s defaults (``restructured``, ``tc_ctas_per_sm = 3``) route
to ``chunk_parallel_prep_tc_kernel.py`` (prep 133.3 us vs this kernel's 369.0 at T = 8192, H = 16, K = V = 128 on the
H200), whose values equal this kernel's up to rounding. This kernel stays as ``restructured = False, tc_ctas_per_sm =
2`` (the ``gdn-prep-base`` variant, and what the adapters' ``parallel_prefetch`` / ``parallel_prep_two_per_sm`` select):
with it the parallel schedule's outputs are the serial kernel's bit for bit, the tests' reference for the state pass and
the output kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.chunk_parallel import (
    ChunkParallelPrepLaunch,
    decayed_keys_to_workspace,
    s2g_tile,
    slot_chunk,
    store_beta_v_block_t,
    wy_to_workspace,
)
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
    solve_unit_lower_blocked,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma


@dataclass(frozen=True)
class GdnParallelPrepKey:
    """Compile key of the prep kernel (Rule 4): plan-time choices only."""

    head_dim: int
    g_dtype: str
    beta_dtype: str
    l2norm: bool
    varlen: bool
    #: Opt-in (default False: the verified kernel, PTX unchanged): every global read of the chunk (g, beta, this thread's
    #: q / k half rows and v half rows) issued at once before any is used, instead of a round trip per step; an fp32
    #: g is addressed as 4-byte aligned. Same values, same arithmetic: bitwise the default's outputs.
    prefetch: bool = False
    #: Opt-in (default False): two CTAs per SM instead of one. The solve's fp32 scratch (``T`` and ``M``, 20.8 KB) lives
    #: in the bytes of ``Q`` and ``P`` (dead once P is in the workspace: one extra barrier), which cuts shared memory from
    #: about 118 KB to about 97 KB for K = 128; launched with ``min_blocks_per_mp=2`` and the maximum shared-memory
    #: carveout (255 registers x 128 threads: two CTAs fit the register file exactly). One CTA's load latency and
    #: barriers then overlap the other's work. Same arithmetic: bitwise the default's outputs.
    two_per_sm: bool = False
    #: Default True (session 6): the restructured prep kernel (``chunk_parallel_prep_tc_kernel.py``): 256 threads, one
    #: vectorized element pass, A and P by one WGMMA each (one per warpgroup), the solve by all 256 threads, beta (and,
    #: for W, exp(G)) folded into the inverse's columns, MN-major B operands for U and W. Same workspace arrays; values
    #: equal this module's kernel's up to rounding (tests: the FlashAttention rule against the fp32 recurrence). Takes
    #: neither ``prefetch`` nor ``two_per_sm``. False (with ``tc_ctas_per_sm = 2``): this module's kernel.
    restructured: bool = True
    #: The restructured kernel's CTAs per SM: 3 (default): the fp32 inverse lives in the bytes of Qn and the bf16
    #: inverses in those of A (each dead by then), about 70 KB, registers capped at 80 (ptxas: no spill); 2: about 102
    #: KB of shared memory at K = 128, registers capped at 128 (142.9 vs 133.3 us). Same values. Must be 2 without
    #: ``restructured``.
    tc_ctas_per_sm: int = 3
    #: Default on since session 8 (issue #7; H200 T = 32k, H = 64: prep 1891.3 vs 2065.5 us), ``restructured`` only
    #: (``chunk_parallel_prep_tc_kernel.py``, "Staged W"): ``-Wm`` (bf16) staged from warpgroup 1's accumulators in the
    #: dead bytes of Qn (swizzled, conflict-free) and written by 16-byte stores instead of 4-byte fragment stores (half
    #: sectors); bitwise the kernel without it. ``restructured=False`` needs ``staged_w=False`` (variant ``gdn-prep-base``)
    staged_w: bool = True
    #: Backward-only, default off (``chunk_parallel_prep_tc_kernel.py``, "Backward-only bwd_tm"; ``restructured`` only):
    #: no ``qg``; bf16 ``Tm = (I + A)^-1`` [64, 64] (before the beta fold) in the first 64 * 64 elements of the slot's
    #: ``qg`` tile instead (the GDN backward's ``fold_prep_tm``). Never for a forward plan (its output kernel reads ``qg``)
    bwd_tm: bool = False


def _aliased_storage(l_ck, l_kc, l_vc, l_cc):
    """The shared-memory struct of the ``two_per_sm`` variant: no ``T`` / ``M`` fields; ``Q`` is padded (to whole KB)
    so that ``Q`` and ``P``, adjacent, hold the solve's fp32 ``T`` [64, 65] and ``M`` [16, 65]. Host-side (trace time)."""
    scratch_bytes = 4 * (CHUNK + SOLVE_BLOCK) * (CHUNK + 1)
    p_bytes = 2 * cute.cosize(l_cc)
    q_elems = max(cute.cosize(l_ck), -(-(scratch_bytes - p_bytes) // 1024) * 512)

    def bf16(n):
        return cute.struct.Align[cute.struct.MemRange[BFloat16, n], 1024]

    def f32(n):
        return cute.struct.Align[cute.struct.MemRange[Float32, n], 16]

    fields = {  # evaluated annotations (this module defers annotations; q_elems is a local)
        "smem_q": bf16(q_elems),
        "smem_p": bf16(cute.cosize(l_cc)),  # right after Q: [Q | P] hosts T, M
        "smem_k": bf16(cute.cosize(l_ck)),
        "smem_kt": bf16(cute.cosize(l_kc)),
        "smem_vt": bf16(cute.cosize(l_vc)),
        "smem_tm": bf16(cute.cosize(l_cc)),
        "smem_a": f32(CHUNK * (CHUNK + 1)),
        "smem_g": f32(CHUNK),
        "smem_gc": f32(CHUNK),
        "smem_beta": f32(CHUNK),
    }
    AliasedStorage = cute.struct(type("AliasedStorage", (), {"__annotations__": fields}))
    assert q_elems * 2 + p_bytes >= scratch_bytes
    return AliasedStorage


class GatedDeltaNetParallelPrep(ChunkParallelPrepLaunch):
    """Kernel 1 of the chunk-parallel GDN forward: ``__init__`` holds the compile key, ``__call__`` launches."""

    def __init__(self, key: GdnParallelPrepKey):
        assert key.head_dim in (64, 128) and not key.restructured
        self.key = key
        self.D = key.head_dim

    @staticmethod
    def for_key(key: GdnParallelPrepKey):
        """The kernel class that implements ``key`` (``restructured``, the default: ``chunk_parallel_prep_tc_kernel.py``;
        else this module's kernel); a ValueError for a combination no kernel builds."""
        if key.tc_ctas_per_sm not in (2, 3) or (key.tc_ctas_per_sm != 2 and not key.restructured):
            raise ValueError(f"GdnParallelPrepKey: tc_ctas_per_sm={key.tc_ctas_per_sm}; accepted 2, or 3 with restructured")
        if key.staged_w and not key.restructured:
            raise ValueError("GdnParallelPrepKey: staged_w=True needs restructured=True (only the restructured prep kernel stages -Wm)")
        if key.bwd_tm and not key.restructured:  # the backward's fold_prep_tm: only the restructured kernel writes Tm
            raise ValueError("GdnParallelPrepKey: bwd_tm=True needs restructured=True (only the restructured prep kernel writes Tm over qg)")
        if key.restructured:
            if key.prefetch or key.two_per_sm:
                raise ValueError("GdnParallelPrepKey: restructured takes neither prefetch (parallel_prefetch) nor two_per_sm (parallel_prep_two_per_sm)")
            from .chunk_parallel_prep_tc_kernel import GatedDeltaNetParallelPrepTc

            return GatedDeltaNetParallelPrepTc
        return GatedDeltaNetParallelPrep

    @cute.jit
    def launch(self, views: tuple, extents: tuple, scale: Float32, stream: cuda.CUstream):
        """Shared memory, grid and launch of ``kernel`` (``views``, ``extents``: :class:`ChunkParallelPrepLaunch`)."""
        D = self.D
        gQ, gK, gV, mG, mB, mCu, ws = views
        n_seqs, seq_len, chunks_per_seq, slots, heads, qk_heads = extents

        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, K]: Q, K
        l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta K exp G)^T [64 K-channels, tokens] x K/64
        l_vc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # (beta V)^T [64 V-channels, tokens] x V/64
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # Tm

        if const_expr(self.key.two_per_sm):
            storage_class = _aliased_storage(l_ck, l_kc, l_vc, l_cc)
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
        mW, mU, mKD, mQG, mP, mGE, _, _, mRF = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)

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
        if const_expr(self.key.two_per_sm):  # T and M in the bytes of Q and P (contiguous, sized by _aliased_storage)
            scratch = cute.recast_ptr(storage.smem_q.data_ptr(), dtype=Float32)
            sT = cute.make_tensor(scratch, plain)
            sM = cute.make_tensor(scratch + CHUNK * (CHUNK + 1), cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        else:
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
        acc_a = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_b = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma_n64.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = tidx // 2
        half = tidx % 2
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            if const_expr(self.key.prefetch):  # every global read of the chunk in flight at once (GdnParallelPrepKey.prefetch)
                last = t0 + n_valid - 1
                pf_row = min(t0 + row, last)
                pf_tok = min(t0 + tidx % CHUNK, last)
                g_pf = mG[pf_tok, head].to(Float32)
                b_pf = mB[pf_tok, head].to(Float32)
                qbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
                kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
                load_half_row(gQ, qbuf, pf_row, hk, half, NV)
                load_half_row(gK, kbuf, pf_row, hk, half, NV)
                vbufs = [load_v_half_row(gV, pf_row, head, vb * BV, half) for vb in range(NH)]
            # ---- 1. g, beta, the in-chunk cumulative log decay; exp(G_C) and the row factors -> workspace ------
            if tidx < CHUNK:
                gv = Float32(0.0)
                bv = Float32(0.0)
                if tidx < n_valid:
                    if const_expr(self.key.prefetch):
                        gv = g_pf
                        bv = b_pf
                    else:
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

            # ---- 2. q, k, v rows (zero past eos), optional L2 norm ---------------------------------------------
            t_row = min(t0 + row, t0 + n_valid - 1)
            keep = Float32(0.0)
            if row < n_valid:
                keep = Float32(1.0)
            g_row = sGc[row]
            b_row = sBeta[row]
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            if const_expr(self.key.prefetch):
                rbuf = qbuf
            else:
                load_half_row(gQ, rbuf, t_row, hk, half, NV)
            inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    sQ[row, half * HALF + vj * VEC + e] = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16)
            if const_expr(self.key.prefetch):
                rbuf = kbuf
            else:
                load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            kscale = b_row * cute.math.exp(g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    sK[row, col] = kn
                    sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
            for vb in cutlass.range_constexpr(NH):  # (beta V)^T, every 64-channel block of V
                if const_expr(self.key.prefetch):
                    vbuf = vbufs[vb]
                else:
                    vbuf = load_v_half_row(gV, t_row, head, vb * BV, half)
                store_beta_v_block_t(sVT, vbuf, row, half, keep, b_row, vb)
            _smem_ready()
            for h in cutlass.range_constexpr(NH):  # Q -> workspace, by 16-byte vectors
                s2g_tile(cute.local_tile(sQ, (CHUNK, BV), (0, h)), cute.local_tile(mQG[slot, head, None, None], (CHUNK, BV), (0, h)), tidx)

            # ---- 3. K K^T and Q K^T; decay, beta and masks on the accumulators; P -> workspace ------------------
            _wgmma(mma_n64, acc_a, kk_A, kk_B, True)
            _wgmma(mma_n64, acc_b, qk_A, kk_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                a_val = Float32(0.0)
                p_val = Float32(0.0)
                if rc[0] >= rc[1]:
                    decay = cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
                    p_val = acc_b[i] * decay * scale
                    if rc[0] > rc[1]:
                        a_val = acc_a[i] * decay * sBeta[rc[0]]
                sA[rc[0], rc[1]] = a_val
                sP[rc[0], rc[1]] = p_val.to(BFloat16)
            cute.arch.sync_threads()
            s2g_tile(sP, mP[slot, head, None, None], tidx)  # by 16-byte vectors
            if const_expr(self.key.two_per_sm):
                cute.arch.sync_threads()  # every thread's reads of P (and Q) are done before the solve writes T / M over them

            # ---- 4. Tm = (I + A)^-1 (fp32, blocked) -> bf16 -------------------------------------------------
            solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
            _smem_ready()

            # ---- 5. U = Tm (beta V) (fp32) and -Wm = -Tm (beta K exp G) (bf16) -> workspace ---------------------
            wy_to_workspace(mma_n64, acc_a, acc_b, tm_A, vt_B, kt_B, mU, mW, slot, head, c64, NH)

            # ---- 6. (K exp(G_C - G))^T -> workspace (rows past eos have g = 0: G's last row is G_C) -------------
            kdec = cute.math.exp(sGc[CHUNK - 1] - g_row)
            decayed_keys_to_workspace(mKD, sK, sGc, slot, head, row, half, kdec, HALF, False, False)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
