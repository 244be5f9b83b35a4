"""Gated DeltaNet backward, pass 3, version 2 (``GdnBwdKey.grads_v2``; the default where ``store_tm`` holds): the
contract of ``chunk_bwd_kernel.GdnBwdGrads`` -- the same launch arguments, workspace arrays (S0, dS1, Vn, dVn, Tm of passes 1-2),
outputs, products, bf16 operand roundings and per-element formulas (see that module's docstring for the math) -- on TWO
warpgroups per CTA (256 threads), the design of ``kda/chunk_bwd_v2_kernel.py`` (its docstring has the Nsight
diagnosis of the v1 structure: one warpgroup per CTA and ~1 CTA per SM, straight-line code streamed through the
instruction cache, every WGMMA waited on its own, per-element shared float atomics).

GDN's gate is one scalar per token, so no product needs a decay-split operand (KDA's B1 / B2 row-block loops): the
decay enters the 64 x 64 matrices (``Gamma_ij = exp(G_i - G_j)``) and the accumulators' epilogues only. Phases:

- A (loads; dWm, dV; dTm, X, dA): warpgroup 0 loads dVn (row-major and transposed), V and Tm (both), warpgroup 1 the
  gates (each thread its own 64 loads in flight), ``S0^T`` with ``<dS1, S0>`` per key channel
  (``_device/delta_rule_bwd_v2.state_t_to_smem``, 16-byte loads) and K (both; with the L2 norm normalised as v1's
  loader). Warpgroup w then computes key-channel block w
  of ``dWm = -dVn S0`` and ``dUb = Tm^T dVn`` (``dwm_dv_block``: one WGMMA group; the block index a RUNTIME value, one
  copy of the code for both warpgroups). The serial chain ``dTm -> X -> dA`` (with ``K K^T`` for the dA epilogue) runs
  on warpgroup 0 while warpgroup 1 loads B1 / B2's Q (and Q^T), dO and Vn into registers and stores them as soon as the
  chain's first products have read the tiles they replace (named barrier 3); ``B + B^T`` is written straight from the
  dA accumulator (one of the two terms is zero at every element: v1's fp32 ``sA`` round trip is gone);
- B1 (dP~, dQ): ``dO S0`` (this warpgroup's block), ``dO Vn^T`` and ``Q K^T`` in one WGMMA group on both warpgroups
  (no branch between WGMMAs), warpgroup 0 storing dP~ (and Z1's dG row / column sums); then ``+ dP~ K`` per block;
- B2 (dK): per block ``dP~^T Q + (B + B^T) K``, ``Vn dS1`` and ``Tm^T dWm`` in one WGMMA group (``dS1^T`` over
  ``S0^T``, loaded by all 256 threads), the v1 epilogue;
- dg's and dbeta's shared sums by register partials, warp butterfly shuffles and one shared atomic per row / column
  and warp (``row_sums_add``, ``col_sums_add``; v1: one shared float atomic per element).

Shared memory (K = 128): seven [64, K] tiles, ``S0^T`` / ``dS1^T`` [K, V] and six [64, 64] tiles: ~194 KiB (v1: 223,
its fp32 solve scratch unneeded with ``store_tm``). PTX at K = 128 (compile-only tier): 92 WGMMA instructions (v1: 136,
both channel blocks unrolled) behind 7 wait points (v1: 23); ptxas: no spill, zero stack frame, 241 registers (254 with
the L2 norm or GVA).

L2 norm (``use_qk_l2norm_in_kernel``, the training configuration): q, k normalised at load as v1's ``_load_qk`` (the
same bf16 values) and, without GVA, the chain rule ``dx = r (dxn - xn (xn . dxn))`` here: each warpgroup adds its
block's row dots to shared memory (shuffle row sums), a CTA barrier, then each applies the rule to the block it holds in
registers. With GVA the normalised-space partials go to pass 4, as v1.

Numerics: every product, operand and bf16 rounding is v1's, so dq, dk, dv are expected bitwise equal to v1's (up to
the sign of an exact zero; with the L2-norm chain rule dq, dk up to the reassociated row dots); only fp32 summation
orders differ (``<dS1, S0>``, the dg / dbeta row and column sums), so dg, dbeta equal v1's up to fp32 reassociation (``tests/test_la_bwd_p3_gdn.py`` checks both against v1 on the same
workspace and against the fp32 reference). At K = 64 (one channel block) warpgroup 1 only loads.

``mn_operands`` (key field, session 11; the plan default since session 12, H200: pass 3 890 vs 940 us at T 8k H 16,
dq / dk / dv bitwise equal to v1's): every transposed operand is
read in place. WGMMA reads bf16 operands MN-major from shared memory, and a 128-byte-swizzled row-major [rows, 64]
tile is the canonical MN-major layout of a contraction over its rows, so K^T, Q^T, dVn^T, dWm^T, Tm^T and dP~^T are
``_device.chunk_parallel.transpose_view`` s of K, Q, dVn, dWm, Tm, dP~ (two more tiled MMAs: B MN-major, and A and B
MN-major), S0 / dS1 are stored as they are ([V, K], one 16-byte store per loaded vector instead of eight 2-byte ones:
``state_t_to_smem``'s ``mn`` form) and dTm row-major. Same products, operand values and accumulation order. At K = 128
(no L2 norm): 2-byte shared stores 716 -> 236 in the PTX, 12,125 -> 10,475 instructions, ptxas 224 registers (v2:
241), no spill; shared memory 40 KiB less (no K^T, dWm^T, Tm^T tiles; dP~ moves to the dP~^T tile so Tm lives
through B2).

Declined (``gdn/bwd_api.py`` raises ValueError at ``compile_key`` for a ``grads_v2`` plan): ``store_tm=False`` (v1
recomputes A and the solve there). Supported as v1: K = 64 and 128, varlen and dense, initial state / final-state
gradient, the L2 norm, GVA (fp32 dq / dk partials per value head).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import transpose_view
from .._device.delta_rule import BV, CHUNK, L2NORM_EPS, THREADS, VEC, k_major_smem_layout, make_mma_n64
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.delta_rule_bwd import bwd_cta, grads_chunk, scalar_dg_dbeta, smem_struct
from .._device.delta_rule_bwd_v2 import (
    THREADS2,
    TILE,
    GradsV2Launch,
    col_sums_add,
    commit_wait,
    dwm_dv_block,
    issue,
    load_a0,
    row_sums_add,
    rows_load,
    rows_store,
    state_t_to_smem,
    tile_at,
    wg_ready,
)
from .bwd_states_kernel import GdnBwdKey

BAR_OPERANDS_FREE = 3  # named barrier: warpgroup 0 arrives after the dTm products, warpgroup 1 waits (ids 1, 2: per warpgroup)


@cute.jit
def _gates(mG: cute.Tensor, mB: cute.Tensor, sGc: cute.Tensor, sBeta: cute.Tensor, t0: Int32, n_valid: Int32, head: Int32, ltid: Int32):
    """``_device.delta_rule.chunk_gates`` (scalar gate: v1's additions in v1's order) without its barriers, for one
    warpgroup: thread ``ltid`` < 64 loads the chunk's 64 gates itself (all in flight) and sums those up to its row."""
    if ltid < CHUNK:
        gbuf = cute.make_rmem_tensor(cute.make_layout((CHUNK,)), Float32)
        for j in cutlass.range_constexpr(CHUNK):
            gj = Float32(0.0)
            if j < n_valid:
                gj = mG[t0 + j, head].to(Float32)
            gbuf[j] = gj
        bv = Float32(0.0)
        if ltid < n_valid:
            bv = mB[t0 + ltid, head].to(Float32)
        cum = Float32(0.0)
        for j in cutlass.range_constexpr(CHUNK):
            gj = gbuf[j]
            if j > ltid:
                gj = Float32(0.0)
            cum = cum + gj
        sGc[ltid] = cum
        sBeta[ltid] = bv


@cute.jit
def _rows_l2norm(rbuf: cute.Tensor, sR: cute.Tensor, t0: Int32, eos: Int32, tidx: Int32, D: cutlass.Constexpr[int], l2norm: cutlass.Constexpr[bool]):
    """With ``l2norm``: :func:`rows_load`'s half row (q or k) replaced in place by v1's normalised bf16 row
    (``chunk_bwd_kernel._load_qk``: ``x * rsqrt(sum x^2 + 1e-6)``, the sum over both halves by one butterfly shuffle,
    v1's order of additions) and the row's factor (0 past ``eos``) -> ``sR``; without, nothing."""
    if const_expr(l2norm):
        NV = D // 2 // VEC
        row = tidx // 2
        keep = Float32(0.0)
        if t0 + row < eos:
            keep = Float32(1.0)
        ss = Float32(0.0)
        for vj in cutlass.range_constexpr(NV):
            for e in cutlass.range_constexpr(VEC):
                x = rbuf[e, vj].to(Float32)
                ss = ss + x * x
        ss = ss + cute.arch.shuffle_sync_bfly(ss, offset=1)
        inv = keep * cute.math.rsqrt(ss + Float32(L2NORM_EPS))
        if tidx % 2 == 0:
            sR[row] = inv
        for vj in cutlass.range_constexpr(NV):
            for e in cutlass.range_constexpr(VEC):
                rbuf[e, vj] = (rbuf[e, vj].to(Float32) * inv).to(BFloat16)


@cute.jit
def _chain_rows(acc: cute.Tensor, sX: cute.Tensor, sDot: cute.Tensor, c64: cute.Tensor, h: Int32):
    """The L2-norm chain rule's row dots ``xn . dxn`` of channel block ``h`` (``acc`` dxn, ``sX`` the normalised rows)
    -> ``sDot`` (shuffle row sums; both blocks' warpgroups add to it)."""
    rs = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs.fill(0.0)
    for i in cutlass.range_constexpr(cute.size(acc)):
        rc = c64[i]
        rs[(i // 2) % 2] = rs[(i // 2) % 2] + acc[i] * sX[rc[0], h * BV + rc[1]].to(Float32)
    row_sums_add(sDot, rs, c64)


@cute.jit
def _chain_store(
    acc: cute.Tensor, sX: cute.Tensor, sR: cute.Tensor, sDot: cute.Tensor, mDx: cute.Tensor, c64: cute.Tensor, t0: Int32, n_valid: Int32, head: Int32, h: Int32
):
    """``dx = r (dxn - xn (xn . dxn))`` (v1's expression) of channel block ``h`` -> ``mDx`` (rows inside the sequence)."""
    mDx0 = cute.domain_offset((t0, head, 0), mDx)  # the chunk's first token and this head
    for i in cutlass.range_constexpr(cute.size(acc)):
        rc = c64[i]
        r = rc[0]
        if r < n_valid:
            dx = sR[r] * (acc[i] - sX[r, h * BV + rc[1]].to(Float32) * sDot[r])
            mDx0[r, 0, h * BV + rc[1]] = dx.to(mDx.element_type)


@cute.jit
def _da_chain(
    mma, mma_tt, acc_a, acc_b, dvn_A, v_B, dwm_A, k_A, k_B, tmt_A, dtmt_B, x_A, tm_B, sDTmT, sX, sBs, sGc, sBeta, sDGr, sDBr, c64, wgi: Int32,
    mn: cutlass.Constexpr[bool],
):  # fmt: skip
    """Warpgroup 0: ``dTm = (dVn V^T) beta_j + (dWm K^T) beta_j exp(G_j)`` (one WGMMA group; v1's expression) ->
    ``sDTmT``; ``X = Tm^T dTm`` -> ``sX``; ``dA = -strictly_lower(X Tm^T)`` with ``K K^T`` (one group): ``B + B^T`` ->
    ``sBs`` (``B = dA beta_i Gamma``), dbeta's ``rowsum(dA K K^T Gamma)`` -> ``sDBr`` and dG's ``rowsum(Z) - colsum(Z)``
    (``Z = dA A``) -> ``sDGr``. Arrives on ``BAR_OPERANDS_FREE`` once the dTm products have read their operands. Not
    fenced at the end. With ``mn`` (``mn_operands``) dTm is stored as it is (``sDTmT`` then holds dTm) and ``X`` is
    ``mma_tt``'s (``tmt_A``, ``dtmt_B``: MN-major views of Tm and dTm)."""
    warpgroup.fence()
    issue(mma, acc_a, dvn_A, v_B, True)
    issue(mma, acc_b, dwm_A, k_B, True)
    commit_wait()
    # dVn, V, dWm have been read: warpgroup 1 may overwrite their tiles (Q, Vn, Q^T)
    cute.arch.barrier_arrive(barrier_id=BAR_OPERANDS_FREE, number_of_threads=THREADS2, aligned=False)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        bj = sBeta[rc[1]]
        dtm = acc_a[i] * bj + acc_b[i] * (bj * cute.math.exp(sGc[rc[1]]))
        if const_expr(mn):
            sDTmT[rc[0], rc[1]] = dtm.to(BFloat16)
        else:
            sDTmT[rc[1], rc[0]] = dtm.to(BFloat16)
    wg_ready(wgi)
    _wgmma(mma_tt, acc_a, tmt_A, dtmt_B, True)  # X = Tm^T dTm
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        sX[rc[0], rc[1]] = acc_a[i].to(BFloat16)
    wg_ready(wgi)
    warpgroup.fence()
    issue(mma, acc_a, x_A, tm_B, True)  # X Tm^T
    issue(mma, acc_b, k_A, k_B, True)  # K K^T
    commit_wait()
    rs_b = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs_g = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    cs_g = cute.make_rmem_tensor(cute.make_layout((16,)), Float32)
    rs_b.fill(0.0)
    rs_g.fill(0.0)
    cs_g.fill(0.0)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        if rc[0] > rc[1]:
            da = -acc_a[i]
            kkg = acc_b[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
            bi = sBeta[rc[0]]
            b_val = (da * bi * cute.math.exp(sGc[rc[0]] - sGc[rc[1]])).to(BFloat16)
            sBs[rc[0], rc[1]] = b_val  # B + B^T: the other term is zero at both elements
            sBs[rc[1], rc[0]] = b_val
            rs_b[(i // 2) % 2] = rs_b[(i // 2) % 2] + da * kkg
            z = da * bi * kkg
            rs_g[(i // 2) % 2] = rs_g[(i // 2) % 2] + z
            m = i % 2 + 2 * (i // 4)
            cs_g[m] = cs_g[m] - z
        if rc[0] == rc[1]:
            sBs[rc[0], rc[1]] = BFloat16(0.0)
    row_sums_add(sDBr, rs_b, c64)
    row_sums_add(sDGr, rs_g, c64)
    col_sums_add(sDGr, cs_g, c64, Int32(0))


@cute.jit
def _b1(mma, mma_t, acc_a, acc_b, acc_c, do_A, s0t_Bh, vn_B, q_A, k_B, sDP, sDPT, sQ, sGc, sDGr, c64, scale: Float32, wgi: Int32, h: Int32):
    """Channel block ``h`` of ``dQ = scale exp(G) (dO S0) + dP~ K`` (-> ``mDq``) with dG's ``rowsum(Q scale exp(G)
    (dO S0))``; ``dO S0``, ``dO Vn^T`` and ``Q K^T`` are one WGMMA group on both warpgroups (no branch between
    WGMMAs), warpgroup 0 storing ``dP~ = scale lower_eq(Gamma dO Vn^T)`` (bf16 ``sDP``, ``sDPT``) and Z1's dG row /
    column sums. The caller's barrier separates the dP~ stores from the ``dP~ K`` product: this block ends there.
    ``mma_t``: the tiled MMA of the ``dO S0`` product (``s0t_Bh`` an S0^T tile, or with ``mn_operands`` an MN-major view
    of S0)."""
    warpgroup.fence()
    issue(mma_t, acc_c, do_A, s0t_Bh, True)
    issue(mma, acc_a, do_A, vn_B, True)
    issue(mma, acc_b, q_A, k_B, True)
    commit_wait()
    if wgi == 0:
        rs = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
        cs = cute.make_rmem_tensor(cute.make_layout((16,)), Float32)
        rs.fill(0.0)
        cs.fill(0.0)
        for i in cutlass.range_constexpr(cute.size(acc_a)):
            rc = c64[i]
            dpt = Float32(0.0)
            if rc[0] >= rc[1]:
                dpt = acc_a[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * scale
                z = dpt * acc_b[i]
                rs[(i // 2) % 2] = rs[(i // 2) % 2] + z
                m = i % 2 + 2 * (i // 4)
                cs[m] = cs[m] - z
            dpt_b = dpt.to(BFloat16)
            sDP[rc[0], rc[1]] = dpt_b
            if const_expr(sDPT is not None):  # mn_operands: dP~^T read in place (an MN-major view of sDP)
                sDPT[rc[1], rc[0]] = dpt_b
        row_sums_add(sDGr, rs, c64)
        col_sums_add(sDGr, cs, c64, Int32(0))
    rq = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rq.fill(0.0)
    for i in cutlass.range_constexpr(cute.size(acc_c)):
        rc = c64[i]
        dqs = acc_c[i] * (scale * cute.math.exp(sGc[rc[0]]))
        rq[(i // 2) % 2] = rq[(i // 2) % 2] + dqs * sQ[rc[0], h * BV + rc[1]].to(Float32)
        acc_c[i] = dqs
    row_sums_add(sDGr, rq, c64)


@cute.jit
def _dq_store(mma, acc_c, dp_A, kt_Bh, sQ, sDotQ, mDq, c64, t0: Int32, n_valid: Int32, head: Int32, h: Int32, chain: cutlass.Constexpr[bool]):
    """``dQ += dP~ K`` (channel block ``h``; ``mma`` the tiled MMA of ``kt_Bh``, a K^T tile or with ``mn_operands`` an
    MN-major view of K) -> ``mDq`` (rows inside the sequence), or with ``chain`` (the L2-norm chain rule here) its row
    dots -> ``sDotQ``, ``acc_c`` kept for :func:`_chain_store`."""
    _wgmma(mma, acc_c, dp_A, kt_Bh, False)
    if const_expr(chain):
        _chain_rows(acc_c, sQ, sDotQ, c64, h)
    else:
        mDq0 = cute.domain_offset((t0, head, 0), mDq)  # the chunk's first token and this head
        for i in cutlass.range_constexpr(cute.size(acc_c)):
            rc = c64[i]
            if rc[0] < n_valid:
                mDq0[rc[0], 0, h * BV + rc[1]] = acc_c[i].to(mDq.element_type)


@cute.jit
def _warp_sum_add(dst: cute.Pointer, v: Float32):
    """``*dst += sum of v over the warp`` (butterfly shuffles, one shared atomic from lane 0)."""
    for s in cutlass.range_constexpr(5):
        v = v + cute.arch.shuffle_sync_bfly(v, offset=1 << s)
    if cute.arch.lane_idx() == 0:
        cute.arch.atomic_add(dst, v)


@cute.jit
def _b2(mma, mma_tt, acc_a, acc_b, acc_c, dpt_A, qt_Bh, bs_A, kt_Bh, vn_A, ds1t_Bh, tmt_A, dwmt_Bh, sK, sGc, sBeta, sDGr, sDBr, sDotK, pKdSum, mDk, c64,
        t0: Int32, n_valid: Int32, head: Int32, h: Int32, chain: cutlass.Constexpr[bool]):  # fmt: skip
    """Channel block ``h`` of ``dK = dP~^T Q + (B + B^T) K + exp(G_C - G) (Vn dS1) + beta exp(G) (Tm^T dWm)`` (-> ``mDk``;
    one WGMMA group, v1's epilogue) with dG's ``rowsum(dKb beta exp(G) K) - rowsum((Vn dS1) exp(G_C - G) K)``, dbeta's
    ``rowsum(dKb exp(G) K)`` and the chunk total of ``(Vn dS1) exp(G_C - G) K`` (-> ``pKdSum``). With ``chain`` dK stays
    in ``acc_a`` and its L2-norm row dots go to ``sDotK`` (:func:`_chain_store` after the caller's barrier). ``mma``: the
    tiled MMA of B operands Q^T, K^T, dS1^T, dWm^T (with ``mn_operands`` MN-major views of Q, K, dS1, dWm); ``mma_tt``:
    of the products whose A is dP~^T or Tm^T as well (with ``mn_operands`` MN-major views of dP~, Tm)."""
    warpgroup.fence()
    issue(mma_tt, acc_a, dpt_A, qt_Bh, True)  # dP~^T Q
    issue(mma, acc_a, bs_A, kt_Bh, False)  # + (B + B^T) K
    issue(mma, acc_b, vn_A, ds1t_Bh, True)  # dKd = Vn dS1
    issue(mma_tt, acc_c, tmt_A, dwmt_Bh, True)  # dKb = Tm^T dWm
    commit_wait()
    g_last = sGc[CHUNK - 1]
    rs_g = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs_b = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs_g.fill(0.0)
    rs_b.fill(0.0)
    kd_sum = Float32(0.0)
    mDk0 = cute.domain_offset((t0, head, 0), mDk)  # the chunk's first token and this head
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        r = rc[0]
        kv = sK[r, h * BV + rc[1]].to(Float32)
        eg = cute.math.exp(sGc[r])
        kdec = cute.math.exp(g_last - sGc[r])
        bg = sBeta[r] * eg
        kd_term = acc_b[i] * kdec * kv
        kb_term = acc_c[i] * kv
        rs_g[(i // 2) % 2] = rs_g[(i // 2) % 2] + (kb_term * bg - kd_term)
        rs_b[(i // 2) % 2] = rs_b[(i // 2) % 2] + kb_term * eg
        kd_sum = kd_sum + kd_term
        dk = acc_a[i] + acc_b[i] * kdec + acc_c[i] * bg
        if const_expr(chain):
            acc_a[i] = dk
        else:
            if r < n_valid:
                mDk0[r, 0, h * BV + rc[1]] = dk.to(mDk.element_type)
    row_sums_add(sDGr, rs_g, c64)
    row_sums_add(sDBr, rs_b, c64)
    _warp_sum_add(pKdSum, kd_sum)
    if const_expr(chain):
        _chain_rows(acc_a, sK, sDotK, c64, h)


class GdnBwdGradsV2(GradsV2Launch):
    """Pass 3 v2: dq, dk, dv, dg, dbeta of every chunk on two warpgroups per CTA (same launch arguments as v1)."""

    def __init__(self, key: GdnBwdKey):
        super().__init__(key)
        assert key.store_tm, "GDN pass 3 v2: store_tm only (declined by the adapter)"
        #: the L2-norm chain rule runs here unless GVA defers it to pass 4 (after the sum over the sharing value heads)
        self.chain = key.l2norm and not key.gva

    def shared_storage(self, l_ck, l_kc, l_kv, l_cc):
        """The shared-memory struct (host side, built in ``GradsLaunch.__call__``; see the kernel for the tiles' use per
        phase): seven [C, D] tiles (x1, x5 as [D % 64, C, D // 64]), S0^T / dS1^T [K, V], six [C, C], then the fp32
        arrays (with the L2 norm: the rows' factors and the chain rule's row dots)."""
        tiles = dict(x0=l_ck, x1=l_kc, x2=l_ck, x3=l_ck, x4=l_ck, x5=l_kc, x6=l_ck, y0=l_kv, tm=l_cc, tmt=l_cc, dtmt=l_cc, xx=l_cc, bs=l_cc, dpt=l_cc)
        if self.key.mn_operands:  # K^T, dWm^T, Tm^T, dP~^T are read in place (MN-major views of K, dWm, Tm, dP~; dP~ in dpt)
            del tiles["x1"], tiles["x5"], tiles["tmt"]
        f32 = dict(gc=CHUNK, g=CHUNK, beta=CHUNK, dgr=CHUNK, dbr=CHUNK, extra=self.D, scal=4, rq=CHUNK, rk=CHUNK, dotq=CHUNK, dotk=CHUNK)
        return smem_struct(tiles, f32)

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        gDo: cute.Tensor,
        gVn: cute.Tensor,
        gDvn: cute.Tensor,
        gWsH: cute.Tensor,
        gWsDh: cute.Tensor,
        gWsTm: cute.Tensor,
        mDq: cute.Tensor,
        mDk: cute.Tensor,
        mDv: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mDg: cute.Tensor,
        mDb: cute.Tensor,
        mCu: cute.Tensor | None,
        seq_len: Int32,
        group: Int32,
        z_split: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_kv: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        MN = self.key.mn_operands  # K^T, Q^T, dVn^T, dWm^T as MN-major views of the row-major tiles (no transposed copies)
        tidx, seq, head, zc, hk, _, bos, eos, n_chunks, slot0 = bwd_cta(mCu, seq_len, group, self.key.varlen)  # zc: this CTA's chunk group
        # this thread's warpgroup, marked warp-uniform (the `if wgi ...` branches are warpgroup-uniform; WGMMA groups stay
        # branch-free inside, see kda/chunk_bwd_v2_kernel.py on ptxas C7520)
        wgi = cute.arch.make_warp_uniform(tidx // THREADS)
        ltid = tidx % THREADS  # its thread in the warpgroup
        # this warpgroup's key-channel block (K = 64: warpgroup 1 only loads); NOT from the uniform `wgi` (KDA v2: tile
        # addresses derived from a uniform value cost ptxas spilled registers)
        hw = (tidx // THREADS) % NH

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(SharedStorage)
        # x0: K (all)   x1: K^T (all)   x2: dVn (A) | Q (B1)   x3: dVn^T (A) | dO (B1)   x4: V (A) | Vn (B1, B2)
        # x5: dWm^T (A -> B2)   x6: dWm (A) | Q^T (B2)   y0: S0^T (A, B1) | dS1^T (B2)
        # tm: Tm (A) | dP~ (B1)   tmt: Tm^T (all)   dtmt: dTm^T (A)   xx: X (A)   bs: B + B^T (A -> B2)   dpt: dP~^T (B1 -> B2)
        # MN (mn_operands): no x1, x5, tmt; x3 dO only; x6 dWm (A -> B2); y0 S0 | dS1 as stored; tm Tm (all); dtmt dTm;
        # dpt dP~ (B1 -> B2); the transposed operands are MN-major views of these
        sK = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDvn = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sQ = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDo = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sV = st.x4.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sVn = st.x4.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDwmT = None if const_expr(MN) else st.x5.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sDwm = st.x6.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sTm = st.tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        # dP~ over Tm; with MN in the dpt tile (Tm, read in place as Tm^T, lives through B2)
        sDP = st.dpt.get_tensor(l_cc.outer, swizzle=l_cc.inner) if const_expr(MN) else st.tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sTmT = None if const_expr(MN) else st.tmt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDTmT = st.dtmt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sX = st.xx.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sBs = st.bs.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDPT = None if const_expr(MN) else st.dpt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sGc = st.gc.get_tensor(cute.make_layout((CHUNK,)))
        sG = st.g.get_tensor(cute.make_layout((CHUNK,)))  # dg's per-row values before the reverse cumsum
        sBeta = st.beta.get_tensor(cute.make_layout((CHUNK,)))
        sDGr = st.dgr.get_tensor(cute.make_layout((CHUNK,)))
        sDBr = st.dbr.get_tensor(cute.make_layout((CHUNK,)))
        sExtra = st.extra.get_tensor(cute.make_layout((D,)))  # <dS1, S0> per key channel
        sScal = st.scal.get_tensor(cute.make_layout((4,)))  # [1]: the chunk total of (Vn dS1) exp(G_C - G) K
        sRq = st.rq.get_tensor(cute.make_layout((CHUNK,)))
        sRk = st.rk.get_tensor(cute.make_layout((CHUNK,)))
        sDotQ = st.dotq.get_tensor(cute.make_layout((CHUNK,)))
        sDotK = st.dotk.get_tensor(cute.make_layout((CHUNK,)))
        L2 = self.key.l2norm
        CHAIN = self.chain

        wg = mma.get_slice(0)
        k_A = wg.make_fragment_A(wg.partition_A(sK))
        k_B = wg.make_fragment_B(wg.partition_B(sK))
        dvn_A = wg.make_fragment_A(wg.partition_A(sDvn))
        q_A = wg.make_fragment_A(wg.partition_A(sQ))
        do_A = wg.make_fragment_A(wg.partition_A(sDo))
        v_B = wg.make_fragment_B(wg.partition_B(sV))
        vn_A = wg.make_fragment_A(wg.partition_A(sVn))
        vn_B = wg.make_fragment_B(wg.partition_B(sVn))
        dwm_A = wg.make_fragment_A(wg.partition_A(sDwm))
        tm_B = wg.make_fragment_B(wg.partition_B(sTm))
        dp_A = wg.make_fragment_A(wg.partition_A(sDP))
        x_A = wg.make_fragment_A(wg.partition_A(sX))
        bs_A = wg.make_fragment_A(wg.partition_A(sBs))
        pK = st.x0.data_ptr()  # raw (unswizzled) tile addresses for the hand-swizzled loaders
        pX2, pX3, pX4, pX6 = st.x2.data_ptr(), st.x3.data_ptr(), st.x4.data_ptr(), st.x6.data_ptr()
        pY0 = st.y0.data_ptr()
        pKT, pDvnT, pQT = None, None, None  # the transposed copies' tiles (none with MN)
        mma_t = mma  # the tiled MMA of the products whose B is K^T, Q^T, dVn^T, dWm^T, S0^T or dS1^T
        mma_tt = mma  # ... and whose A is Tm^T or dP~^T as well
        if const_expr(MN):  # those B operands: this warpgroup's channel block of K, Q / dVn (x2), dWm, S0 / dS1, read MN-major
            mma_t = make_mma_n64(b_mn=True)
            mma_tt = make_mma_n64(a_mn=True, b_mn=True)
            wgt = mma_t.get_slice(0)
            wgtt = mma_tt.get_slice(0)
            tmt_A = wgtt.make_fragment_A(wgtt.partition_A(transpose_view(sTm)))  # Tm^T, dP~^T: MN-major views of Tm, dP~
            dpt_A = wgtt.make_fragment_A(wgtt.partition_A(transpose_view(sDP)))
            dtmt_B = wgtt.make_fragment_B(wgtt.partition_B(transpose_view(sDTmT)))  # the dtmt tile holds dTm (row-major)
            ktw_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(tile_at(pK, hw * TILE, l_cc))))
            qtw_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(tile_at(pX2, hw * TILE, l_cc))))
            dvntw_B = qtw_B  # x2: dVn in phase A, Q in B1 / B2
            dwmtw_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(tile_at(pX6, hw * TILE, l_cc))))
            # S0 / dS1 stored [V, K] (state_t_to_smem's mn form): this warpgroup's 64 key channels, all V rows
            s0tw_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(tile_at(pY0, hw * (BV * D), k_major_smem_layout(D, BV)))))
        else:
            tmt_A = wg.make_fragment_A(wg.partition_A(sTmT))
            dpt_A = wg.make_fragment_A(wg.partition_A(sDPT))
            dtmt_B = wg.make_fragment_B(wg.partition_B(sDTmT))
            s0tw_B = wg.make_fragment_B(wg.partition_B(tile_at(pY0, hw * (CHUNK * D), l_ck)))  # S0^T / dS1^T of its key channels
            pKT, pDvnT, pQT = st.x1.data_ptr(), pX3, pX6
            dvntw_B = wg.make_fragment_B(wg.partition_B(tile_at(pX3, hw * TILE, l_cc)))  # dVn^T of this warpgroup's value channels
            ktw_B = wg.make_fragment_B(wg.partition_B(tile_at(pKT, hw * TILE, l_cc)))  # K^T, Q^T, dWm^T of its key channels
            qtw_B = wg.make_fragment_B(wg.partition_B(tile_at(pX6, hw * TILE, l_cc)))
            dwmtw_B = wg.make_fragment_B(wg.partition_B(tile_at(st.x5.data_ptr(), hw * TILE, l_cc)))
        acc_a = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_b = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_c = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_d = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma.get_slice(ltid).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        if tidx < D:
            sExtra[tidx] = Float32(0.0)  # later chunks: zeroed after the dg step reads it
        cute.arch.sync_threads()
        for ci in range(zc, n_chunks, z_split):
            t0, n_valid, slot = grads_chunk(bos, eos, slot0, ci)
            if tidx < CHUNK:
                sDGr[tidx] = Float32(0.0)
                sDBr[tidx] = Float32(0.0)
                if const_expr(CHAIN):
                    sDotQ[tidx] = Float32(0.0)
                    sDotK[tidx] = Float32(0.0)
            if tidx < 4:
                sScal[tidx] = Float32(0.0)

            # ================= phase A: loads; dWm, dV; dTm, X, dA ===========================================
            if wgi == 0:
                load_a0(gDvn, gV, gWsTm, pX2, pDvnT, pX4, sTm, sTmT, t0, eos, head, slot, ltid, D)
            else:
                _gates(mG, mB, sGc, sBeta, t0, n_valid, head, ltid)
                state_t_to_smem(gWsH, gWsDh, pY0, sExtra, slot, head, ltid, THREADS, D, MN)  # S0^T (MN: S0), <dS1, S0> per key channel
                kk = rows_load(gK, t0, eos, hk, ltid, D)
                _rows_l2norm(kk, sRk, t0, eos, ltid, D, L2)
                rows_store(kk, pK, pKT, t0, eos, ltid, D)  # K and K^T
            _smem_ready()
            if wgi < NH:  # dWm, dV: channel block hw on warpgroup hw
                dwm_dv_block(mma, acc_a, acc_d, dvn_A, s0tw_B, tmt_A, dvntw_B, sDwm, sDwmT, sDBr, sV, sBeta, mDv, c64, t0, n_valid, head, hw, mma_t, mma_tt)
            _smem_ready()  # sDwm, sDwmT of every block; every reader of dVn^T has completed
            if wgi == 0:
                _da_chain(
                    mma, mma_tt, acc_a, acc_b, dvn_A, v_B, dwm_A, k_A, k_B, tmt_A, dtmt_B, x_A, tm_B, sDTmT, sX, sBs, sGc, sBeta, sDGr, sDBr, c64, wgi, MN
                )
            else:  # B1 / B2's loads under warpgroup 0's chain
                rows_store(rows_load(gDo, t0, eos, head, ltid, D), pX3, None, t0, eos, ltid, D)  # x3: dVn^T's readers finished above
                qq = rows_load(gQ, t0, eos, hk, ltid, D)
                vn = rows_load(gVn, t0, eos, head, ltid, D)
                _rows_l2norm(qq, sRq, t0, eos, ltid, D, L2)
                cute.arch.barrier(barrier_id=BAR_OPERANDS_FREE, number_of_threads=THREADS2)  # the dTm products' operands are read
                rows_store(qq, pX2, pQT, t0, eos, ltid, D)  # Q over dVn (and without MN Q^T over dWm)
                rows_store(vn, pX4, None, t0, eos, ltid, D)  # Vn over V
            _smem_ready()  # B + B^T and B1's Q, Q^T, dO, Vn published

            # ================= phase B1: dP~, dQ ===============================================================
            if wgi < NH:
                _b1(mma, mma_t, acc_a, acc_b, acc_c, do_A, s0tw_B, vn_B, q_A, k_B, sDP, sDPT, sQ, sGc, sDGr, c64, scale, wgi, hw)
            _smem_ready()  # sDP, sDPT
            if wgi < NH:
                _dq_store(mma_t, acc_c, dp_A, ktw_B, sQ, sDotQ, mDq, c64, t0, n_valid, head, hw, CHAIN)
            cute.arch.sync_threads()  # every reader of S0^T has completed (and the chain rule's row dots are complete)
            if const_expr(CHAIN):  # dq = r (dqn - qn (qn . dqn))
                if wgi < NH:
                    _chain_store(acc_c, sQ, sRq, sDotQ, mDq, c64, t0, n_valid, head, hw)

            # ================= phase B2: dK ====================================================================
            state_t_to_smem(gWsDh, None, pY0, None, slot, head, tidx, THREADS2, D, MN)  # dS1^T over S0^T (MN: dS1 over S0)
            _smem_ready()
            if wgi < NH:
                _b2(mma_t, mma_tt, acc_a, acc_b, acc_c, dpt_A, qtw_B, bs_A, ktw_B, vn_A, s0tw_B, tmt_A, dwmtw_B, sK, sGc, sBeta, sDGr, sDBr, sDotK, sScal.iterator + 1, mDk, c64,
                    t0, n_valid, head, hw, CHAIN)  # fmt: skip
            cute.arch.sync_threads()
            if const_expr(CHAIN):  # dk = r (dkn - kn (kn . dkn))
                if wgi < NH:
                    _chain_store(acc_a, sK, sRk, sDotK, mDk, c64, t0, n_valid, head, hw)

            # ---- dG_C terms, then dg = reverse cumsum of dG over the chunk (v1's order); dbeta -------------------
            if tidx < CHUNK:
                dgv = sDGr[tidx]
                extra = Float32(0.0)  # <dS1, S0>: the per-key-channel partials summed by each of warps 0, 1
                for c in cutlass.range_constexpr(D // 32):
                    extra = extra + sExtra[c * 32 + tidx % 32]
                for s in cutlass.range_constexpr(5):
                    extra = extra + cute.arch.shuffle_sync_bfly(extra, offset=1 << s)
                if tidx == CHUNK - 1:
                    dgv = dgv + cute.math.exp(sGc[CHUNK - 1]) * extra + sScal[1]
                sG[tidx] = dgv
            cute.arch.sync_threads()
            if tidx < D:
                sExtra[tidx] = Float32(0.0)  # for the next chunk (ordered before its atomics by the barrier below)
            scalar_dg_dbeta(mDg, mDb, sG, sDBr, t0, n_valid, head, tidx)
            cute.arch.sync_threads()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


def build_grads_v2(key: GdnBwdKey):
    """The ``cute.compile`` of :class:`GdnBwdGradsV2` from fake pointers (``GradsV2Launch.compile_fake``; with GVA dq
    and dk are the fp32 per-value-head partials in the workspace)."""
    return GdnBwdGradsV2(key).compile_fake(gva_partials=key.gva)
