"""Gated DeltaNet backward, pass 3 (chunk C = 64, sm_90a, CuTe DSL, WGMMA): the intra-chunk gradients dq, dk, dv, dg, dbeta.

The whole backward is three launches (adapter: ``bwd_api.py``; math and its CPU check:
``shared/cudnn_testing/reference_linear_attention.py::gated_delta_net_chunked_bwd_ref``):

1. ``bwd_states_kernel.GdnBwdStates``: forward over chunks, the state ``S0`` entering every chunk, the new values
   ``Vn`` and (``store_tm``, the default) ``Tm = (I + A)^-1`` (bf16, workspace);
2. ``bwd_states_kernel.GdnBwdDStates``: reverse over chunks, the gradient ``dS1`` of the state leaving every chunk and
   ``dVn = P^T dO + (K exp(G_C - G)) dS1^T`` (bf16, workspace), and ``d initial_state``;
3. this kernel: every chunk on its own (no recurrence), from q, k, v, dO, g, beta and the workspace's S0, dS1, Vn,
   dVn (and Tm; with ``store_tm=False`` it recomputes A and the triangular solve). Per chunk (Gamma_ij = exp(G_i - G_j),
   i >= j)::

       dP~  = scale lower_eq(Gamma * (dO Vn^T))              dQ = scale exp(G) (dO S0) + dP~ K
       dWm  = -dVn S0     dKb = Tm^T dWm     dUb = Tm^T dVn     dV = beta dUb
       dTm  = (dVn V^T) beta_j + (dWm K^T) beta_j exp(G_j)     dA = -strictly_lower((Tm^T dTm) Tm^T)
       B    = dA beta_i Gamma                                   dK = dP~^T Q + (B + B^T) K + exp(G_C - G) (Vn dS1) + beta exp(G) dKb
       dbeta = rowsum(dUb V) + rowsum(dKb exp(G) K) + rowsum(dA K K^T Gamma)
       dG   = rowsum(Q scale exp(G) (dO S0)) + rowsum(Z) - colsum(Z) + rowsum(dKb beta exp(G) K) - rowsum((Vn dS1) exp(G_C - G) K)
              with Z = dP~ Q K^T + dA A;  dG_C += exp(G_C) <dS1, S0> + sum((Vn dS1) exp(G_C - G) K);  dg = reverse cumsum of dG

Work decomposition: one CTA = one warpgroup (128 threads) per (sequence, head, chunk group): grid ``[N, H, Z]``, the CTA
with ``blockIdx.z = z`` takes chunks ``z, z + Z, ...`` of its sequence (``Z`` is a runtime argument: the adapter picks it
from T, N and H, never from device data). Every product is a 64 x 64 WGMMA (m64n64k16, bf16 operands, fp32
accumulators, K-major operands; transposed operands are written transposed by the loaders or from accumulators);
products with a K-wide output run as K / 64 of them. Row / column sums for dg and dbeta go to shared memory by
shared-memory atomics. Shared memory is reused across the three phases of a chunk (phase 1: Tm, dP~, dQ; phase 2:
dWm, dV, dTm, dA; phase 3: dK, dg, dbeta): about 223 KiB at K = 128 (of 227). ptxas stack frame at K = 128: 640 bytes
with ``store_tm`` (the default), 24 without (measured on the compile-only tier; an A/B for the GPU run).

Outputs: dq, dk [T, H, K] and dv [T, H, V] bf16 with any 8-aligned token / head strides; dg, dbeta fp32 [T, H]
contiguous. With the q/k L2 norm (plan flag) the kernels work on the normalised bf16 q, k as the forward does and
this pass ends with the chain rule ``dx = r (dxn - xn (xn . dxn))`` (r = rsqrt(|x|^2 + 1e-6) per row; the row dots by
shared-memory atomics; both 64-channel halves of dq / dk stay in registers). With GVA (q/k heads Hk < v heads H) dq, dk
go to fp32 per-value-head partials in the workspace instead, and ``bwd_qk_reduce_kernel.py`` (pass 4) sums the H / Hk
partials of every q/k head (and applies the L2-norm chain rule there).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, chunk_gates, solve_unit_lower_blocked
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.delta_rule_bwd import (
    GradsLaunch,
    bwd_cta,
    dwm_and_dv,
    grads_chunk,
    rows_to_smem,
    scalar_dg_dbeta,
    smem_struct,
    state_views,
    tm_row_load,
    tm_row_store,
)
from .bwd_states_kernel import GdnBwdKey


@cute.jit
def _load_qk(
    gX: cute.Tensor,
    sX: cute.Tensor,
    sXT: cute.Tensor,
    sR: cute.Tensor,
    t0: Int32,
    eos: Int32,
    head: Int32,
    tidx: Int32,
    D: cutlass.Constexpr[int],
    l2norm: cutlass.Constexpr[bool],
    rows: cutlass.Constexpr[bool],
    cols: cutlass.Constexpr[bool],
    write_r: cutlass.Constexpr[bool],
):
    """q or k rows ``t0 .. t0 + 63`` normalised as the forward's loaders do (bf16 ``x * rsqrt(sum x^2 + 1e-6)`` with
    ``l2norm``, else ``x``; rows past ``eos`` zero) to ``sX`` [token, d] (``rows``) and / or transposed to ``sXT``
    [d % 64, token, d // 64] (``cols``); the row's factor to ``sR`` (``write_r``)."""
    HALF = D // 2
    NV = HALF // VEC
    row = tidx // 2
    half = tidx % 2
    t_row = min(t0 + row, eos - 1)
    keep = Float32(0.0)
    if t0 + row < eos:
        keep = Float32(1.0)
    rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
    for vj in cutlass.range_constexpr(NV):
        cute.autovec_copy(gX[(None, None, None), (t_row, head, half * NV + vj)], rbuf[None, None, None, vj])
    inv = _row_scale(rbuf, keep, l2norm, NV, VEC)
    if const_expr(write_r):
        if half == 0:
            sR[row] = inv
    for vj in cutlass.range_constexpr(NV):
        for e in cutlass.range_constexpr(VEC):
            col = half * HALF + vj * VEC + e
            x = (rbuf[0, 0, e, vj].to(Float32) * inv).to(BFloat16)
            if const_expr(rows):
                sX[row, col] = x
            if const_expr(cols):
                sXT[col % BV, row, col // BV] = x


class GdnBwdGrads(GradsLaunch):
    """Pass 3: dq, dk, dv, dg, dbeta of every chunk (chunks in parallel)."""

    def __init__(self, key: GdnBwdKey):
        super().__init__(key)
        #: the L2-norm chain rule runs here unless GVA defers it to pass 4 (after the sum over the sharing value heads)
        self.chain = key.l2norm and not key.gva
        self.l2 = 1 if self.chain else 0  # index step of the per-half dq / dk accumulators (one reused without the chain)

    def ws_state(self, ptr, slots, heads):
        """S0 / dS1 as 16-byte vectors of a plain [slots, H, D, D] view (host side)."""
        return cute.zipped_divide(state_views(ptr, slots, heads, self.D), (1, 1, 1, VEC))

    def ws_tm(self, ptr, slots, heads):
        """Tm as 16-byte vectors, or None without ``store_tm`` (the kernel recomputes it; host side)."""
        return super().ws_tm(ptr, slots, heads) if self.key.store_tm else None

    def shared_storage(self, l_ck, l_kc, l_kv, l_cc):
        """The shared-memory struct (host side, built in ``GradsLaunch.__call__``; see the kernel for the tiles' use):
        six [C, D] slots, reused across the phases, one [K, V], seven [C, C], then the fp32 arrays."""
        tiles = dict(x0=l_ck, x1=l_ck, x2=l_ck, x3=l_ck, x4=l_ck, x5=l_ck, y0=l_kv, tm=l_cc, tmt=l_cc, dpt=l_cc, dptt=l_cc, bs=l_cc, dtmt=l_cc, xx=l_cc)
        f32 = dict(a=CHUNK * (CHUNK + 1), tz=CHUNK * (CHUNK + 1), m=SOLVE_BLOCK * (CHUNK + 1), g=CHUNK, gc=CHUNK, beta=CHUNK, dgr=CHUNK, dbr=CHUNK, scal=4)
        f32.update(rq=CHUNK, rk=CHUNK, dotq=CHUNK, dotk=CHUNK)
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
        mWsTm: cute.Tensor | None,
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
        NVD = D // VEC  # 16-byte vectors per state row
        tidx, seq, head, zc, hk, _, bos, eos, n_chunks, slot0 = bwd_cta(mCu, seq_len, group, self.key.varlen)  # zc: this CTA's chunk group

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(SharedStorage)
        # slot x0: K [C, D] (all phases)
        sK = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        # slot x1: K^T (phase 1), dWm [C, D] (phase 2), K^T again (phase 3)
        sKT = st.x1.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sDwm = st.x1.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        # slot x2: Q (phase 1), V (phase 2), Q^T (phase 3)
        sQ = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sV = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sQT = st.x2.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        # slot x3: dO (phase 1), dVn (phase 2), Vn (phase 3)
        sDo = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDvn = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sVn3 = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        # slot x4: Vn (phase 1), dVn^T (phase 2)
        sVn = st.x4.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDvnT = st.x4.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        # slot x5: dWm^T (phases 2, 3)
        sDwmT = st.x5.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        # slot y0: S0^T (phases 1, 2), dS1^T (phase 3)
        sS0T = st.y0.get_tensor(l_kv.outer, swizzle=l_kv.inner)
        sDS1T = st.y0.get_tensor(l_kv.outer, swizzle=l_kv.inner)
        sTm = st.tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sTmT = st.tmt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDpt = st.dpt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDptT = st.dptt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sBs = st.bs.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDTmT = st.dtmt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sX = st.xx.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sA = st.a.get_tensor(plain)
        sT = st.tz.get_tensor(plain)
        sM = st.m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sG = st.g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = st.gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = st.beta.get_tensor(cute.make_layout((CHUNK,)))
        sDGr = st.dgr.get_tensor(cute.make_layout((CHUNK,)))
        sDBr = st.dbr.get_tensor(cute.make_layout((CHUNK,)))
        sScal = st.scal.get_tensor(cute.make_layout((4,)))
        sRq = st.rq.get_tensor(cute.make_layout((CHUNK,)))
        sRk = st.rk.get_tensor(cute.make_layout((CHUNK,)))
        sDotQ = st.dotq.get_tensor(cute.make_layout((CHUNK,)))
        sDotK = st.dotk.get_tensor(cute.make_layout((CHUNK,)))

        wg = mma.get_slice(0)
        k_A = wg.make_fragment_A(wg.partition_A(sK))
        k_B = wg.make_fragment_B(wg.partition_B(sK))
        q_A = wg.make_fragment_A(wg.partition_A(sQ))
        do_A = wg.make_fragment_A(wg.partition_A(sDo))
        vn_B = wg.make_fragment_B(wg.partition_B(sVn))
        s0t_B = wg.make_fragment_B(wg.partition_B(sS0T))  # (.., .., .., K / 64)
        ds1t_B = wg.make_fragment_B(wg.partition_B(sDS1T))
        kt_B = wg.make_fragment_B(wg.partition_B(sKT))
        qt_B = wg.make_fragment_B(wg.partition_B(sQT))
        dpt_A = wg.make_fragment_A(wg.partition_A(sDpt))
        dptt_A = wg.make_fragment_A(wg.partition_A(sDptT))
        dvn_A = wg.make_fragment_A(wg.partition_A(sDvn))
        dvnt_B = wg.make_fragment_B(wg.partition_B(sDvnT))
        v_B = wg.make_fragment_B(wg.partition_B(sV))
        dwm_A = wg.make_fragment_A(wg.partition_A(sDwm))
        dwmt_B = wg.make_fragment_B(wg.partition_B(sDwmT))
        tmt_A = wg.make_fragment_A(wg.partition_A(sTmT))
        tm_B = wg.make_fragment_B(wg.partition_B(sTm))
        dtmt_B = wg.make_fragment_B(wg.partition_B(sDTmT))
        x_A = wg.make_fragment_A(wg.partition_A(sX))
        bs_A = wg.make_fragment_A(wg.partition_A(sBs))
        vn3_A = wg.make_fragment_A(wg.partition_A(sVn3))
        acc_a = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_b = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_c = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_d = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)  # dK of the second 64 channels (L2-norm chain rule)
        L2 = self.l2
        c64 = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        for ci in range(zc, n_chunks, z_split):
            t0, n_valid, slot = grads_chunk(bos, eos, slot0, ci)
            if tidx < CHUNK:
                sDGr[tidx] = Float32(0.0)
                sDBr[tidx] = Float32(0.0)
                sDotQ[tidx] = Float32(0.0)
                sDotK[tidx] = Float32(0.0)
            if tidx < 4:
                sScal[tidx] = Float32(0.0)
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)
            g_last = sGc[CHUNK - 1]

            # ================= phase 1: loads; A, Tm; dP~; dQ =================================================
            _load_qk(gK, sK, sKT, sRk, t0, eos, hk, tidx, D, self.key.l2norm, True, True, True)
            _load_qk(gQ, sQ, sQ, sRq, t0, eos, hk, tidx, D, self.key.l2norm, True, False, True)
            rows_to_smem(gDo, sDo, sDo, t0, eos, head, tidx, D, 0)
            rows_to_smem(gVn, sVn, sVn, t0, eos, head, tidx, D, 0)
            # S0 of the chunk, transposed: thread v (< V) moves row v of S0 [V, K]; <dS1, S0> on the way.
            if tidx < D:
                sbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, NVD)), BFloat16)
                dbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, NVD)), BFloat16)
                for vj in cutlass.range_constexpr(NVD):
                    cute.autovec_copy(gWsH[(None, None, None, None), (slot, head, tidx, vj)], sbuf[None, None, None, None, vj])
                    cute.autovec_copy(gWsDh[(None, None, None, None), (slot, head, tidx, vj)], dbuf[None, None, None, None, vj])
                dot = Float32(0.0)
                for vj in cutlass.range_constexpr(NVD):
                    for e in cutlass.range_constexpr(VEC):
                        kc = vj * VEC + e
                        x = sbuf[0, 0, 0, e, vj]
                        sS0T[kc % BV, tidx, kc // BV] = x
                        dot = dot + x.to(Float32) * dbuf[0, 0, 0, e, vj].to(Float32)
                cute.arch.atomic_add(sScal.iterator, dot)
            _smem_ready()

            if const_expr(self.key.store_tm):  # pass 1's Tm (bf16) and its transpose
                trow = tidx // 2
                thalf = tidx % 2
                tm_row_store(tm_row_load(mWsTm, slot, head, trow, thalf), sTm, sTmT, trow, thalf)  # row tidx // 2, half tidx % 2
            else:  # A, Tm = (I + A)^-1 recomputed
                _wgmma(mma, acc_a, k_A, k_B, True)
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    a_val = Float32(0.0)
                    if rc[0] > rc[1]:
                        a_val = acc_a[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * sBeta[rc[0]]
                    sA[rc[0], rc[1]] = a_val
                cute.arch.sync_threads()
                solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
                for s in cutlass.range_constexpr(CHUNK * CHUNK // THREADS):  # Tm^T
                    idx = tidx + THREADS * s
                    i = idx // CHUNK
                    c = idx % CHUNK
                    t_val = Float32(0.0)
                    if i == c:
                        t_val = Float32(1.0)
                    if i > c:
                        t_val = sT[i, c]
                    sTmT[c, i] = t_val.to(BFloat16)
                cute.arch.sync_threads()
            # dP~ = scale lower_eq(Gamma dO Vn^T); Z1 = dP~ Q K^T -> row / column sums of dG
            _wgmma(mma, acc_b, q_A, k_B, True)
            _wgmma(mma, acc_a, do_A, vn_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                dpt = Float32(0.0)
                if rc[0] >= rc[1]:
                    dpt = acc_a[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * scale
                    z = dpt * acc_b[i]
                    cute.arch.atomic_add(sDGr.iterator + rc[0], z)
                    cute.arch.atomic_add(sDGr.iterator + rc[1], -z)
                dpt_b = dpt.to(BFloat16)
                sDpt[rc[0], rc[1]] = dpt_b
                sDptT[rc[1], rc[0]] = dpt_b
            _smem_ready()
            # dQ = scale exp(G) (dO S0) + dP~ K, 64 K-channels at a time
            dq_accs = [acc_a, acc_c]  # with the L2 norm both 64-channel halves stay live for the row dot
            for h in cutlass.range_constexpr(NH):
                acc_q = dq_accs[h * L2]
                _wgmma(mma, acc_q, do_A, s0t_B[None, None, None, h], True)
                for i in cutlass.range_constexpr(cute.size(acc_q)):
                    rc = c64[i]
                    dqs = acc_q[i] * (scale * cute.math.exp(sGc[rc[0]]))
                    cute.arch.atomic_add(sDGr.iterator + rc[0], dqs * sQ[rc[0], h * BV + rc[1]].to(Float32))
                    acc_q[i] = dqs
                _wgmma(mma, acc_q, dpt_A, kt_B[None, None, None, h], False)
                if const_expr(self.chain):  # row dot qn . dqn for the chain rule
                    for i in cutlass.range_constexpr(cute.size(acc_q)):
                        rc = c64[i]
                        cute.arch.atomic_add(sDotQ.iterator + rc[0], acc_q[i] * sQ[rc[0], h * BV + rc[1]].to(Float32))
                else:
                    for i in cutlass.range_constexpr(cute.size(acc_q)):
                        rc = c64[i]
                        if rc[0] < n_valid:
                            mDq[t0 + rc[0], head, h * BV + rc[1]] = acc_q[i].to(mDq.element_type)
            if const_expr(self.chain):  # dq = r (dqn - qn (qn . dqn))
                cute.arch.sync_threads()
                for h in cutlass.range_constexpr(NH):
                    acc_q = dq_accs[h]
                    for i in cutlass.range_constexpr(cute.size(acc_q)):
                        rc = c64[i]
                        r = rc[0]
                        if r < n_valid:
                            dq = sRq[r] * (acc_q[i] - sQ[r, h * BV + rc[1]].to(Float32) * sDotQ[r])
                            mDq[t0 + r, head, h * BV + rc[1]] = dq.to(mDq.element_type)
            cute.arch.sync_threads()  # every reader of Q, dO, Vn, K^T in shared memory has completed

            # ================= phase 2: dWm, dV, dTm, dA ======================================================
            rows_to_smem(gDvn, sDvn, sDvnT, t0, eos, head, tidx, D, 2)
            rows_to_smem(gV, sV, sV, t0, eos, head, tidx, D, 0)
            _smem_ready()
            dwm_and_dv(mma, acc_a, dvn_A, s0t_B, tmt_A, dvnt_B, sDwm, sDwmT, sDBr, sV, sBeta, mDv, c64, t0, n_valid, head, NH)
            # dTm = (dVn V^T) beta_j + (dWm K^T) beta_j exp(G_j) -> (dTm)^T
            _wgmma(mma, acc_a, dvn_A, v_B, True)
            _wgmma(mma, acc_b, dwm_A, k_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                bj = sBeta[rc[1]]
                dtm = acc_a[i] * bj + acc_b[i] * (bj * cute.math.exp(sGc[rc[1]]))
                sDTmT[rc[1], rc[0]] = dtm.to(BFloat16)
            _smem_ready()
            _wgmma(mma, acc_a, tmt_A, dtmt_B, True)  # X = Tm^T dTm
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                sX[rc[0], rc[1]] = acc_a[i].to(BFloat16)
            _smem_ready()
            _wgmma(mma, acc_a, x_A, tm_B, True)  # X Tm^T
            _wgmma(mma, acc_b, k_A, k_B, True)  # K K^T again
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                b_val = Float32(0.0)
                if rc[0] > rc[1]:
                    da = -acc_a[i]
                    kkg = acc_b[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
                    bi = sBeta[rc[0]]
                    b_val = da * bi * cute.math.exp(sGc[rc[0]] - sGc[rc[1]])
                    cute.arch.atomic_add(sDBr.iterator + rc[0], da * kkg)
                    z = da * bi * kkg
                    cute.arch.atomic_add(sDGr.iterator + rc[0], z)
                    cute.arch.atomic_add(sDGr.iterator + rc[1], -z)
                sA[rc[0], rc[1]] = b_val
            cute.arch.sync_threads()
            for s in cutlass.range_constexpr(CHUNK * CHUNK // THREADS):  # B + B^T
                idx = tidx + THREADS * s
                i = idx // CHUNK
                c = idx % CHUNK
                sBs[i, c] = (sA[i, c] + sA[c, i]).to(BFloat16)

            # ================= phase 3: dK, dg, dbeta =========================================================
            cute.arch.sync_threads()  # every reader of dWm, V, dVn in shared memory has completed
            _load_qk(gK, sK, sKT, sRk, t0, eos, hk, tidx, D, self.key.l2norm, False, True, False)
            _load_qk(gQ, sQT, sQT, sRq, t0, eos, hk, tidx, D, self.key.l2norm, False, True, False)
            rows_to_smem(gVn, sVn3, sVn3, t0, eos, head, tidx, D, 0)
            if tidx < D:
                dbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, NVD)), BFloat16)
                for vj in cutlass.range_constexpr(NVD):
                    cute.autovec_copy(gWsDh[(None, None, None, None), (slot, head, tidx, vj)], dbuf[None, None, None, None, vj])
                for vj in cutlass.range_constexpr(NVD):
                    for e in cutlass.range_constexpr(VEC):
                        kc = vj * VEC + e
                        sDS1T[kc % BV, tidx, kc // BV] = dbuf[0, 0, 0, e, vj]
            _smem_ready()
            dk_accs = [acc_a, acc_d]
            for h in cutlass.range_constexpr(NH):
                acc_k = dk_accs[h * L2]
                _wgmma(mma, acc_k, dptt_A, qt_B[None, None, None, h], True)  # dP~^T Q
                _wgmma(mma, acc_k, bs_A, kt_B[None, None, None, h], False)  # + (B + B^T) K
                _wgmma(mma, acc_b, vn3_A, ds1t_B[None, None, None, h], True)  # dKd = Vn dS1
                _wgmma(mma, acc_c, tmt_A, dwmt_B[None, None, None, h], True)  # dKb = Tm^T dWm
                kd_sum = Float32(0.0)
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    r = rc[0]
                    kv = sK[r, h * BV + rc[1]].to(Float32)
                    eg = cute.math.exp(sGc[r])
                    kdec = cute.math.exp(g_last - sGc[r])
                    bg = sBeta[r] * eg
                    kd_term = acc_b[i] * kdec * kv
                    kb_term = acc_c[i] * kv
                    cute.arch.atomic_add(sDGr.iterator + r, kb_term * bg - kd_term)
                    cute.arch.atomic_add(sDBr.iterator + r, kb_term * eg)
                    kd_sum = kd_sum + kd_term
                    dk = acc_k[i] + acc_b[i] * kdec + acc_c[i] * bg
                    if const_expr(self.chain):
                        acc_k[i] = dk
                        cute.arch.atomic_add(sDotK.iterator + r, dk * kv)
                    else:
                        if r < n_valid:
                            mDk[t0 + r, head, h * BV + rc[1]] = dk.to(mDk.element_type)
                cute.arch.atomic_add(sScal.iterator + 1, kd_sum)
            cute.arch.sync_threads()
            if const_expr(self.chain):  # dk = r (dkn - kn (kn . dkn))
                for h in cutlass.range_constexpr(NH):
                    acc_k = dk_accs[h]
                    for i in cutlass.range_constexpr(cute.size(acc_k)):
                        rc = c64[i]
                        r = rc[0]
                        if r < n_valid:
                            dk = sRk[r] * (acc_k[i] - sK[r, h * BV + rc[1]].to(Float32) * sDotK[r])
                            mDk[t0 + r, head, h * BV + rc[1]] = dk.to(mDk.element_type)
            # dG_C terms, then dg = reverse cumsum of dG over the chunk; dbeta
            if tidx < CHUNK:
                dgv = sDGr[tidx]
                if tidx == CHUNK - 1:
                    dgv = dgv + cute.math.exp(g_last) * sScal[0] + sScal[1]
                sG[tidx] = dgv
            cute.arch.sync_threads()
            scalar_dg_dbeta(mDg, mDb, sG, sDBr, t0, n_valid, head, tidx)
            cute.arch.sync_threads()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
