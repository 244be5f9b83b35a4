"""Gated DeltaNet forward, chunked (chunk C = 64), sm_90a, CuTe DSL: WGMMA for every intra-chunk product.

Computes, for every sequence ``n`` (tokens ``bos <= t < eos``), value head ``h`` and its q/k head
``hk = h // (H / Hk)`` (GVA head sharing), with the state ``S`` [V, K] fp32 per (sequence, head)::

    S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale q_t)

(q and k optionally L2-normalised first: ``x * rsqrt(sum x^2 + 1e-6)``), by the chunked WY form of
``shared/cudnn_testing/reference_linear_attention.py::gated_delta_rule_chunked_ref``. Per chunk of C
tokens with in-chunk cumulative log decays ``G`` and the incoming state ``S0``::

    A   = strictly_lower(beta_i (k_i . k_j) exp(G_i - G_j))      Tm = (I + A)^-1      (unit lower triangular)
    Wm  = Tm (beta K exp(G))       U = Tm (beta V)       Vn = U - Wm S0^T
    O   = scale (exp(G) row-scaled Q S0^T + lower_eq(Q K^T exp(G_i - G_j)) Vn)
    S1  = exp(G_C) S0 + Vn^T (K exp(G_C - G))

Work decomposition: one CTA = one warpgroup (128 threads) per (V-slice of 64 rows of S, head, sequence):
grid ``[N, H, V / 64]``. The CTA walks its sequence's chunks in order; its slice of the state
``S[64, K]`` stays in fp32 WGMMA accumulators (registers, K / 64 tiles of 64 x 64) for the whole sequence,
with a bf16 copy in shared memory as the B operand of the next chunk's products; it is read from
``initial_state`` once and written to ``final_state`` once.

Per chunk (every product is a 64 x 64 warpgroup MMA, m64n64k16, bf16 operands from 128B-swizzled shared
memory, fp32 accumulators; every operand is K-major, transposed tiles are written transposed by the loaders;
products with a K-wide output run as K / 64 of them, so only 128 accumulator registers are live and nothing
spills):

1. g, beta -> shared; in-chunk cumulative sum G (fp32).
2. q, k, v rows -> registers by 16-byte loads (tokens past ``eos`` read as zero), optional L2 norm (pairs of
   threads own a row), then to shared: Q, K, (beta K exp(G))^T, (beta V)^T.
3. WGMMA ``K K^T`` and ``Q K^T`` (64 x 64 x K); decay / beta / masks applied on the accumulators:
   ``A`` to shared fp32, ``P = scale lower_eq(Q K^T exp(G_i - G_j))`` to shared bf16.
4. ``Tm = (I + A)^-1`` in fp32 by SIMT: the four diagonal 16 x 16 blocks by forward substitution (one thread
   per column), then block rows I = 1..3: ``M = A[I, :16I] T[:16I, :16I]``, ``T[I, :16I] = -T_II M`` (all 128
   threads); Tm -> bf16. (``blocked_solve=False``: one thread per column over all 64 rows, the plainest form.)
5. WGMMA ``Wm = Tm (beta K exp G)`` (64 x K x 64) and ``U = Tm (beta V)`` (64 x 64 x 64); ``-Wm`` -> bf16;
   WGMMA ``Vn = U + (-Wm) S0^T`` (64 x 64 x K, accumulating on U); ``Vn^T`` -> bf16.
6. WGMMA ``O = Q S0^T`` (64 x 64 x K), rows scaled by ``scale exp(G_i)``, then ``O += P Vn`` (64 x 64 x 64);
   rows of the sequence stored as bf16.
7. ``S *= exp(G_C)``; ``(K exp(G_C - G))^T`` -> shared; WGMMA ``S += Vn^T (K exp(G_C - G))`` (64 x K x 64);
   ``S`` -> bf16 shared for the next chunk.

The bf16 rounding points (Tm, Wm, U-side operands, Vn, P, S0 as an operand) are fla's; the token-by-
token fp32 recurrence is the test reference, with a bf16-emulating run of the chunked reference as the
FlashAttention-rule baseline (tests/test_gdn_gpu.py).

Layouts: q, k [T, Hk, K] and v, o [T, H, V] with unit channel stride and any token / head strides (a dense
[B, L, H, D] batch is the equal-length case, walked as [B * L, H, D] with ``seq_len = L``); g, beta [T, H]
contiguous, fp32 or bf16; ``cu_seqlens`` int32 [N + 1]; states fp32 [N, H, V, K] contiguous. K = V in
{64, 128}. Runtime extents (T, N, H, Hk, L, strides, scale) are kernel arguments, never compile keys
(Rule 4): one artifact serves every batch.

Loads are SIMT (16-byte vectors; q/k/v token and head strides must be multiples of 8 elements and the bases
16-byte aligned): the loaders transpose and scale on the way to shared memory, which a TMA tile copy cannot;
a TMA producer warp with an mbarrier pipeline for q/k/v (and the transposes done from shared memory) is the
next step.

Tests: packages/cudnn-linear-attention/tests/test_gdn_*.py; benchmark: benchmarks/linear_attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.delta_rule import (  # noqa: F401  (L2NORM_EPS: re-exported, the kernel's constant)
    BV,
    CHUNK,
    L2NORM_EPS,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    SerialForwardLaunch,
    chunk_gates,
    cta_coords,
    k_major_smem_layout,
    load_half_row,
    load_state,
    load_v_half_row,
    make_accumulators,
    make_mma_n64,
    make_qkvo_views,
    make_seq_state_views,
    row_guard,
    sequence_bounds,
    solve_unit_lower_blocked,
    state_to_smem,
    store_beta_v_t,
    store_final_state,
    store_output_rows,
    wy_fragments,
    wy_values,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.delta_rule_bwd import smem_struct


@cute.jit
def a_and_p(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    acc_b: cute.Tensor,
    kk_A: cute.Tensor,
    qk_A: cute.Tensor,
    kk_B: cute.Tensor,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sA: cute.Tensor,
    sP: cute.Tensor,
    c64: cute.Tensor,
    scale: Float32,
    transpose_p: cutlass.Constexpr[bool],
):
    """Gated DeltaNet's ``A = beta K K^T * exp(G_r - G_c)`` (strictly lower, fp32 -> ``sA``) and ``P = scale Q K^T *
    exp(G_r - G_c)`` (lower with the diagonal, bf16 -> ``sP``, or ``sP[c, r]`` with ``transpose_p``: the backward's
    ``P^T``) from ``acc_a = K K^T`` and ``acc_b = Q K^T`` (step 3 of the forward, pass 2 of the backward without a
    stored Tm); CTA barrier after the writes."""
    _wgmma(mma, acc_a, kk_A, kk_B, True)
    _wgmma(mma, acc_b, qk_A, kk_B, True)
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
        if const_expr(transpose_p):
            sP[rc[1], rc[0]] = p_val.to(BFloat16)
        else:
            sP[rc[0], rc[1]] = p_val.to(BFloat16)
    cute.arch.sync_threads()


@dataclass(frozen=True)
class GdnFwdKey:
    """Plan-time choices of the kernel: exactly its compile key (Rule 4). Token totals, sequence counts,
    head counts, strides and ``scale`` are runtime arguments."""

    head_dim: int  # K = V, 64 or 128
    g_dtype: str  # "Float32" or "BFloat16"
    beta_dtype: str
    l2norm: bool
    varlen: bool
    has_initial: bool
    has_final: bool
    blocked_solve: bool = True  # Tm by 16 x 16 diagonal blocks + block-row merges (False: one thread per column)


class GatedDeltaNetChunkFwd(SerialForwardLaunch):
    """The kernel class: ``__init__`` holds the plan (the compile key), ``__call__`` (``SerialForwardLaunch``) launches."""

    def __init__(self, key: GdnFwdKey):
        super().__init__(key)
        self.g_dtype = getattr(cutlass, key.g_dtype)
        self.beta_dtype = getattr(cutlass, key.beta_dtype)

    def shared_storage(self, l_ck, l_kc, l_cc):
        """The kernel's shared-memory struct (host side, built in ``__call__``): the bf16 swizzled tiles, then the fp32
        arrays."""
        return smem_struct(
            dict(smem_q=l_ck, smem_k=l_ck, smem_w=l_ck, smem_s=l_ck, smem_kt=l_kc, smem_tm=l_cc, smem_p=l_cc, smem_vt=l_cc, smem_vnt=l_cc),
            dict(smem_a=CHUNK * (CHUNK + 1), smem_t=CHUNK * (CHUNK + 1), smem_m=SOLVE_BLOCK * (CHUNK + 1), smem_g=CHUNK, smem_gc=CHUNK, smem_beta=CHUNK),
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,  # ((1, 1, VEC), (T, Hk, K / VEC)): 16-byte vectors
        gK: cute.Tensor,
        gV: cute.Tensor,  # ((1, 1, VEC), (T, H, V / VEC))
        mO: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        mH0: cute.Tensor | None,
        mHT: cute.Tensor | None,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        mma_n64: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2  # channels of a q / k row owned by one thread (two threads per row)
        NH = D // BV  # 64-channel blocks of K
        tidx, seq, head, hk, v0 = cta_coords(heads, qk_heads)

        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.smem_q.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sP = storage.smem_p.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sVT = storage.smem_vt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sA = storage.smem_a.get_tensor(plain)
        sT = storage.smem_t.get_tensor(plain)
        sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        # WGMMA fragments (descriptors over shared memory) and accumulators.
        wg64 = mma_n64.get_slice(0)
        kk_A = wg64.make_fragment_A(wg64.partition_A(sK))
        kk_B = wg64.make_fragment_B(wg64.partition_B(sK))
        qk_A = wg64.make_fragment_A(wg64.partition_A(sQ))
        kt_B = wg64.make_fragment_B(wg64.partition_B(sKT))  # (.., .., .., K / 64): one B operand per 64 K-channels
        u_A, u_B, vn_A, s0_B, pv_A, pv_B, su_A = wy_fragments(wg64, sTm, sVT, sW, sS, sP, sVnT)
        acc_a, acc_b, acc_s, c64 = make_accumulators(mma_n64, wg64, tidx, NH)

        load_state(acc_s, sS, mH0, c64, seq, head, v0, NH, self.key.has_initial)

        row = tidx // 2  # loader mapping: two threads per token row
        half = tidx % 2
        for ci in range(n_chunks):
            t0 = bos + ci * CHUNK
            n_valid = min(eos - t0, CHUNK)
            # ---- 1. g, beta and the in-chunk cumulative log decay --------------------------------------
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            # ---- 2. q, k, v rows to shared (zero past eos), optional L2 norm -------------------------------
            t_row, keep = row_guard(t0, row, n_valid, eos)  # a valid token to read; rows past eos are zeroed by `keep`
            g_row = sGc[row]
            b_row = sBeta[row]
            # q, then k, through one bf16 register row: all 16-byte loads of a row are issued before any is used;
            # the sum of squares and the normalised values are both formed from the staged bf16 values.
            NV = HALF // VEC
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            load_half_row(gQ, rbuf, t_row, hk, half, NV)
            inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    sQ[row, half * HALF + vj * VEC + e] = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            vbuf = load_v_half_row(gV, t_row, head, v0, half)
            kscale = b_row * cute.math.exp(g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    sK[row, col] = kn
                    sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
            store_beta_v_t(sVT, vbuf, row, half, keep, b_row)
            _smem_ready()

            # ---- 3. K K^T and Q K^T; decay, beta and masks on the accumulators ------------------------------
            a_and_p(mma_n64, acc_a, acc_b, kk_A, qk_A, kk_B, sGc, sBeta, sA, sP, c64, scale, False)

            # ---- 4. Tm = (I + A)^-1 in fp32 ------------------------------------------------------------------
            if const_expr(self.key.blocked_solve):
                solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
            else:
                # One thread per column of Tm, all 64 rows (the simplest form; about 2,000 dependent FMAs for column 0).
                if tidx < CHUNK:
                    cc = tidx
                    for i in range(cc + 1, CHUNK):
                        acc_t = -sA[i, cc]
                        for j in cutlass.range(cc + 1, i, unroll=4):
                            acc_t = acc_t - sA[i, j] * sT[j, cc]
                        sT[i, cc] = acc_t
                    for i in range(CHUNK):
                        t_val = Float32(0.0)
                        if i == cc:
                            t_val = Float32(1.0)
                        if i > cc:
                            t_val = sT[i, cc]
                        sTm[i, cc] = t_val.to(BFloat16)
            _smem_ready()

            # ---- 5. Wm = Tm (beta K exp G), U = Tm (beta V), Vn = U - Wm S0^T -------------------------------
            wy_values(mma_n64, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, c64, NH)
            # (K exp(G_C - G))^T for the state update: sKT's last reader (the Wm product) has completed.
            g_last = sGc[CHUNK - 1]  # rows past eos carry g = 0, so this is G at the chunk's last token
            kdec = cute.math.exp(g_last - g_row)
            for j in cutlass.range_constexpr(HALF):
                col = half * HALF + j
                sKT[col % BV, row, col // BV] = (sK[row, col].to(Float32) * kdec).to(BFloat16)
            _smem_ready()

            # ---- 6. O = scale (exp(G) Q S0^T + P Vn) ---------------------------------------------------
            _wgmma(mma_n64, acc_b, qk_A, s0_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_b)):
                rc = c64[i]
                acc_b[i] = acc_b[i] * (cute.math.exp(sGc[rc[0]]) * scale)
            _wgmma(mma_n64, acc_b, pv_A, pv_B, False)
            store_output_rows(mO, acc_b, c64, t0, n_valid, head, v0)

            # ---- 7. S = exp(G_C) S + Vn^T (K exp(G_C - G)) -----------------------------------------------
            decay_c = cute.math.exp(g_last)
            for h in cutlass.range_constexpr(NH):
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    acc_s[h][i] = acc_s[h][i] * decay_c
                _wgmma(mma_n64, acc_s[h], su_A, kt_B[None, None, None, h], False)
            cute.arch.sync_threads()  # every reader of S0 in shared memory (steps 5, 6) has completed
            state_to_smem(sS, acc_s, c64, NH)
            _smem_ready()

        if const_expr(self.key.has_final):
            store_final_state(mHT, acc_s, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
