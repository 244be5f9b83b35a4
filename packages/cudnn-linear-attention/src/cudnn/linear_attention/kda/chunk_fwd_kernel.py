"""Kimi Delta Attention forward, chunked (chunk C = 64), sm_90a, CuTe DSL: WGMMA for every intra-chunk product.

KDA is Gated DeltaNet with a per-key-channel (diagonal) decay instead of a scalar one. For every sequence
``n`` (tokens ``bos <= t < eos``), value head ``h`` and its q/k head ``hk = h // (H / Hk)`` (GVA), with the
state ``S`` [V, K] fp32 per (sequence, head) and ``g`` [T, H, K] log decays::

    S_t = S_{t-1} Diag(exp(g_t)) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale q_t)

(q and k optionally L2-normalised first), by the chunked WY form of
``shared/cudnn_testing/reference_linear_attention.py::gated_delta_rule_chunked_ref``. Per chunk of C tokens
with in-chunk cumulative log decays ``G`` [C, K] (one column per key channel) and the incoming state ``S0``::

    A   = strictly_lower(beta_i sum_c k_ic k_jc exp(G_ic - G_jc))      Tm = (I + A)^-1
    Wm  = Tm (beta K exp(G))       U = Tm (beta V)       Vn = U - Wm S0^T
    O   = (scale Q exp(G)) S0^T + lower_eq(scale sum_c q_ic k_jc exp(G_ic - G_jc)) Vn
    S1  = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

The decay inside ``A`` and ``Q K^T`` differs per channel, so it cannot be applied to the accumulator as in
GDN; it is split over the two operands around a reference token. fla's chunk_kda does the same with 16-token
sub-chunks; here the chunk's rows are split into four blocks of 16 and block ``I`` uses the reference token
``r = 16 I + 8`` (its middle)::

    A[I rows, :] = beta_i (K_i exp(G_i - G_r)) . (K_j exp(G_r - G_j))       for the rows i of block I

For the columns ``j < 16 I`` (before the block) both factors are <= 1; inside the 16 x 16 diagonal block each
factor spans at most 8 tokens of decay (so nothing overflows while any 8 consecutive per-channel log decays
sum to more than -80: g >= -10 per token, fla's ``safe_gate`` range [-5, 0) included); columns after the
block are zero operands (masked anyway). One WGMMA pair (``K' K'_I^T``, ``Q' K'_I^T``, 64 x 64 x K) per
block; the block's rows are taken from it.

Work decomposition (as the GDN kernel): one CTA = one warpgroup (128 threads) per (V-slice of 64 rows of S,
head, sequence): grid ``[N, H, V / 64]``; the CTA walks its sequence's chunks in order with its slice of
the state ``S[64, K]`` in fp32 WGMMA accumulators (K / 64 tiles of 64 x 64) and a bf16 copy in shared
memory as the next chunk's operand; read from ``initial_state`` once, written to ``final_state`` once.

Per chunk (every product a 64 x 64 warpgroup MMA, m64n64k16, bf16 operands from 128B-swizzled shared memory,
fp32 accumulators, K-major operands):

1. g [C, K] -> registers (one thread per channel, 64 independent loads), prefix sum -> ``G`` fp32 in shared;
   beta -> shared.
2. q, k, v rows -> registers by 16-byte loads (zero past ``eos``), optional L2 norm (two threads per row), then
   to shared: ``Q' = Q exp(G - G_r)``, ``Qg = scale Q exp(G)``, ``K``, ``K' = K exp(G - G_r)``,
   ``(beta K exp(G))^T``, ``(beta V)^T``.
3. For each row block I: ``K'_I = K exp(G_r - G)`` (zero after the block) -> shared; WGMMA ``K' K'_I^T``, then
   ``Q' K'_I^T`` through the same accumulator; block I's rows of ``A`` (fp32) and ``P`` (scaled, masked, bf16) -> shared.
4. ``Tm = (I + A)^-1`` in fp32 by SIMT (the GDN kernel's blocked 16 x 16 solve) -> bf16.
5. WGMMA ``Wm``, ``U``, ``Vn = U + (-Wm) S0^T`` -> ``Vn^T`` bf16; ``(K exp(G_C - G))^T`` -> shared.
6. WGMMA ``O = Qg S0^T + P Vn``; rows of the sequence stored as bf16.
7. ``S = S Diag(exp(G_C)) + Vn^T (K exp(G_C - G))`` (WGMMA on the state accumulators); ``S`` -> bf16 shared.

Layouts: q, k [T, Hk, K] and v, o [T, H, V] with unit channel stride and token / head strides multiples of 8
elements (16-byte loads); g [T, H, K] and beta [T, H] contiguous, fp32 or bf16; ``cu_seqlens`` int32 [N + 1];
states fp32 [N, H, V, K] contiguous. K = V in {64, 128}. Runtime extents (T, N, H, Hk, L, strides, scale) are
kernel arguments, never compile keys (Rule 4).

This is the first, correctness-first version (shared memory about 215 KB for K = 128: one CTA per SM); the
known next steps are a TMA producer warp with a q/k/v pipeline, two consumer warpgroups, and computing only
the needed 16-row strips of the four block products.

Tests: packages/cudnn-linear-attention/tests/test_kda_*.py; benchmark: benchmarks/linear_attention.py kda.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.delta_rule import (  # SOLVE_BLOCK: also the row block of the decay split
    BV,
    CHUNK,
    SOLVE_BLOCK,
    VEC,
    SerialForwardLaunch,
    chunk_gates,
    cta_coords,
    load_half_row,
    load_state,
    load_v_half_row,
    make_accumulators,
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

REF_OFFSET = 8  # reference token of row block I: 16 I + 8 (its middle)


@cute.jit
def a_block_decay_split(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    kl_A: cute.Tensor,
    kr_B: cute.Tensor,
    sK: cute.Tensor,
    sKR: cute.Tensor,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sA: cute.Tensor,
    c64: cute.Tensor,
    bi,
    row: Int32,
    half: Int32,
    HALF: cutlass.Constexpr[int],
):
    """Row block ``bi`` (16 rows) of ``A`` with the decay split around the block's reference token (step 3 of the
    forward and of the backward's pass 1): ``sKR = K exp(G_ref - G)`` (rows past the block are zero operands),
    ``acc_a = (K exp(G - G_ref)) sKR^T`` and the block's strictly lower rows ``beta_i acc_a`` -> ``sA``. ``acc_a`` is
    left holding the product for the caller's next use of ``sKR`` (the ``P`` block); not fenced after the ``sA`` writes.
    ``bi``: a compile-time block (the forward's unrolled loop) or a runtime one (the backward's)."""
    r_blk = bi * SOLVE_BLOCK + REF_OFFSET
    live = row < (bi + 1) * SOLVE_BLOCK  # tokens after the block are zero operands
    for j in cutlass.range_constexpr(HALF):
        col = half * HALF + j
        kr = Float32(0.0)
        if live:
            kr = sK[row, col].to(Float32) * cute.math.exp(sGc[r_blk, col] - sGc[row, col])
        sKR[row, col] = kr.to(BFloat16)
    _smem_ready()
    _wgmma(mma, acc_a, kl_A, kr_B, True)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        if rc[0] // SOLVE_BLOCK == bi:
            a_val = Float32(0.0)
            if rc[0] > rc[1]:
                a_val = acc_a[i] * sBeta[rc[0]]
            sA[rc[0], rc[1]] = a_val


@dataclass(frozen=True)
class KdaFwdKey:
    """Plan-time choices of the kernel: exactly its compile key (Rule 4). Token totals, sequence counts,
    head counts, strides and ``scale`` are runtime arguments."""

    head_dim: int  # K = V, 64 or 128
    g_dtype: str  # "Float32" or "BFloat16"
    beta_dtype: str
    l2norm: bool
    varlen: bool
    has_initial: bool
    has_final: bool


class KimiDeltaAttentionChunkFwd(SerialForwardLaunch):
    """The kernel class: ``__init__`` holds the plan (the compile key), ``__call__`` (``SerialForwardLaunch``) launches."""

    PER_KEY_GATE = True  # g [T, H, K]

    def shared_storage(self, l_ck, l_kc, l_cc):
        """The kernel's shared-memory struct (host side, built in ``__call__``): the bf16 swizzled tiles, then the fp32
        arrays."""
        D = self.D
        return smem_struct(
            dict(
                smem_qr=l_ck,
                smem_qg=l_ck,
                smem_k=l_ck,
                smem_w=l_ck,
                smem_kr=l_ck,
                smem_s=l_ck,
                smem_kt=l_kc,
                smem_tm=l_cc,
                smem_p=l_cc,
                smem_vt=l_cc,
                smem_vnt=l_cc,
            ),
            dict(smem_a=CHUNK * (CHUNK + 1), smem_t=CHUNK * (CHUNK + 1), smem_m=SOLVE_BLOCK * (CHUNK + 1), smem_gc=CHUNK * (D + 1), smem_beta=CHUNK),
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,  # ((1, 1, VEC), (T, Hk, K / VEC)): 16-byte vectors
        gK: cute.Tensor,
        gV: cute.Tensor,  # ((1, 1, VEC), (T, H, V / VEC))
        mO: cute.Tensor,
        mG: cute.Tensor,  # [T, H, K]
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
        sQr = storage.smem_qr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sQg = storage.smem_qg.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K' (step 3), then -Wm (step 5)
        sKR = storage.smem_kr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
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
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))  # padded: row readers spread over banks
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        wg64 = mma_n64.get_slice(0)
        kl_A = wg64.make_fragment_A(wg64.partition_A(sW))
        qr_A = wg64.make_fragment_A(wg64.partition_A(sQr))
        kr_B = wg64.make_fragment_B(wg64.partition_B(sKR))
        qg_A = wg64.make_fragment_A(wg64.partition_A(sQg))
        kt_B = wg64.make_fragment_B(wg64.partition_B(sKT))  # (.., .., .., K / 64): one B operand per 64 K-channels
        u_A, u_B, vn_A, s0_B, pv_A, pv_B, su_A = wy_fragments(wg64, sTm, sVT, sW, sS, sP, sVnT)
        acc_a, acc_b, acc_s, c64 = make_accumulators(mma_n64, wg64, tidx, NH)

        load_state(acc_s, sS, mH0, c64, seq, head, v0, NH, self.key.has_initial)

        row = tidx // 2  # loader mapping: two threads per token row
        half = tidx % 2
        rref = (row // SOLVE_BLOCK) * SOLVE_BLOCK + REF_OFFSET  # reference token of this row's block
        for ci in range(n_chunks):
            t0 = bos + ci * CHUNK
            n_valid = min(eos - t0, CHUNK)
            # ---- 1. per-channel cumulative log decay G [C, K] and beta ----------------------------------
            chunk_gates(mG, mB, None, sGc, sBeta, t0, n_valid, head, tidx, D, True)

            # ---- 2. q, k, v rows to shared (zero past eos), optional L2 norm, decayed copies --------------
            t_row, keep = row_guard(t0, row, n_valid, eos)
            b_row = sBeta[row]
            NV = HALF // VEC
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            load_half_row(gQ, rbuf, t_row, hk, half, NV)
            inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    qn = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16).to(Float32)
                    g_i = sGc[row, col]
                    sQr[row, col] = (qn * cute.math.exp(g_i - sGc[rref, col])).to(BFloat16)
                    sQg[row, col] = (qn * (cute.math.exp(g_i) * scale)).to(BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            vbuf = load_v_half_row(gV, t_row, head, v0, half)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn_b = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    kn = kn_b.to(Float32)
                    g_i = sGc[row, col]
                    sK[row, col] = kn_b
                    sW[row, col] = (kn * cute.math.exp(g_i - sGc[rref, col])).to(BFloat16)
                    sKT[col % BV, row, col // BV] = (kn * (b_row * cute.math.exp(g_i))).to(BFloat16)
            store_beta_v_t(sVT, vbuf, row, half, keep, b_row)

            # ---- 3. A and P, one 16-row block at a time (decay split around the block's reference token) ---
            for bi in cutlass.range_constexpr(CHUNK // SOLVE_BLOCK):
                # One accumulator for both products (A, then P), so only 64 + 32 fp32 accumulators are live here.
                a_block_decay_split(mma_n64, acc_a, kl_A, kr_B, sK, sKR, sGc, sBeta, sA, c64, bi, row, half, HALF)
                _wgmma(mma_n64, acc_a, qr_A, kr_B, True)
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    if rc[0] // SOLVE_BLOCK == bi:
                        p_val = Float32(0.0)
                        if rc[0] >= rc[1]:
                            p_val = acc_a[i] * scale
                        sP[rc[0], rc[1]] = p_val.to(BFloat16)
                cute.arch.sync_threads()  # sKR is rewritten for the next block; sA / sP complete after the last

            # ---- 4. Tm = (I + A)^-1 in fp32: diagonal 16 x 16 blocks, then block-row merges ----------------
            solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
            _smem_ready()

            # ---- 5. Wm = Tm (beta K exp G), U = Tm (beta V), Vn = U - Wm S0^T -------------------------------
            wy_values(mma_n64, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, c64, NH)
            # (K exp(G_C - G))^T for the state update: sKT's last reader (the Wm product) has completed. Rows past
            # eos carry g = 0, so G's last row is G at the chunk's last token.
            for j in cutlass.range_constexpr(HALF):
                col = half * HALF + j
                kdec = cute.math.exp(sGc[CHUNK - 1, col] - sGc[row, col])
                sKT[col % BV, row, col // BV] = (sK[row, col].to(Float32) * kdec).to(BFloat16)
            _smem_ready()

            # ---- 6. O = (scale Q exp(G)) S0^T + P Vn -----------------------------------------------------
            _wgmma(mma_n64, acc_b, qg_A, s0_B, True)
            _wgmma(mma_n64, acc_b, pv_A, pv_B, False)
            store_output_rows(mO, acc_b, c64, t0, n_valid, head, v0)

            # ---- 7. S = S Diag(exp(G_C)) + Vn^T (K exp(G_C - G)) -----------------------------------------
            for h in cutlass.range_constexpr(NH):
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    acc_s[h][i] = acc_s[h][i] * cute.math.exp(sGc[CHUNK - 1, h * BV + rc[1]])
                _wgmma(mma_n64, acc_s[h], su_A, kt_B[None, None, None, h], False)
            cute.arch.sync_threads()  # every reader of S0, G and the loaders' buffers (steps 3-6) has completed
            state_to_smem(sS, acc_s, c64, NH)
            _smem_ready()

        if const_expr(self.key.has_final):
            store_final_state(mHT, acc_s, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
