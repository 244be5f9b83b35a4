"""Kimi Delta Attention backward, pass 3 (chunk C = 64, sm_90a, CuTe DSL, WGMMA): the intra-chunk gradients dq, dk, dv,
dg (per key channel) and dbeta.

The whole backward is three launches (adapter ``bwd_api.py``; math and its CPU check:
``shared/cudnn_testing/reference_linear_attention.py::kimi_delta_attention_chunked_bwd_ref``):

1. ``bwd_states_kernel.KdaBwdStates``: forward over chunks: ``S0`` of every chunk, ``Vn``, ``Tm`` and ``P`` (bf16, workspace);
2. ``bwd_states_kernel.KdaBwdDStates``: reverse over chunks: ``dS1`` of every chunk, ``dVn`` and ``d initial_state``;
3. this kernel: every chunk on its own, from q, k, v, dO, g, beta and the workspace's S0, dS1, Vn, dVn, Tm.

Per chunk (G [C, K] the per-channel cumulative log decay, D_ijc = exp(G_ic - G_jc) for i >= j; "rows(X, Y)" is
``sum_j X_ij Y_jc D_ijc`` and "cols(X, Y)" is ``sum_i X_ij Y_ic D_ijc``)::

    dWm = -dVn S0        dUb = Tm^T dVn        dV = beta dUb        dKb = Tm^T dWm
    dTm = (dVn V^T) beta_j + dWm (beta exp(G) K)^T        dA = -strictly_lower((Tm^T dTm) Tm^T)
    dP~ = scale lower_eq(dO Vn^T)                         dQ = scale exp(G) (dO S0) + rows(dP~, K)
    R   = rows(dA, K)         Y = R + exp(G) dKb          dkd = Vn dS1
    dK  = cols(dP~, Q) + cols(beta dA, K) + beta Y + exp(G_C - G) dkd
    dbeta = rowsum(dUb V) + rowsum(K Y)
    dG  = Q dQ - K dK + 2 beta K Y;  dG_C += exp(G_C) colsum(dS1 S0) + colsum(dkd K exp(G_C - G));  dg = reverse cumsum

The per-channel decay cannot be applied to an accumulator; as in the forward it is split over the operands around a
reference token ``r = 16 I + 8`` of 16-row block ``I``: for the rows of block I,
``rows(X, Y) = exp(G_i - G_r) (X (Y exp(G_r - G))_{j < 16 (I + 1)})`` and for the columns j of block J,
``cols(X, Y) = exp(G_r - G_j) (X^T (Y exp(G - G_r))_{i >= 16 J})``: one 64 x 64 x 64 WGMMA per block and 64 channels,
of which the block's 16 rows are kept (factors stay finite under the forward's decay contract).

Work decomposition: one CTA = one warpgroup (128 threads) per (sequence, head, chunk group): grid ``[N, H, Z]``, the CTA
with ``blockIdx.z = z`` takes chunks ``z, z + Z, ...`` (``Z`` a runtime argument from host-known T, N, H). Every product
is a 64 x 64 WGMMA (m64n64k16, bf16 K-major operands, fp32 accumulators). Phase A: dWm, dV, dTm, dA; phase B1: dP~, dQ;
phase B2: dK, dg, dbeta. dg [T, H, K] (fp32, the output) holds the per-element dG between B1 and B2 (each element
read-modify-written by the thread that owns it), then one thread per channel turns its column into the reverse cumsum.
Shared memory about 217 KiB at K = 128 (one CTA per SM).

Plan limits of this first version: no in-kernel L2 norm and no GVA (the adapter declines both, Rule 2).
Outputs: dq, dk [T, H, K], dv [T, H, V] bf16 (8-aligned token / head strides); dg fp32 [T, H, K], dbeta fp32 [T, H]
contiguous.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, chunk_gates, row_guard
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.delta_rule_bwd import GradsLaunch, bwd_cta, dwm_and_dv, grads_chunk, rows_to_smem, smem_struct, state_views, tm_row_load, tm_row_store
from .bwd_states_kernel import REF_OFFSET, KdaBwdKey


@cute.jit
def _split_operand(
    sX: cute.Tensor,
    sGc: cute.Tensor,
    sOut: cute.Tensor,
    h: cutlass.Constexpr[int],
    bi: Int32,
    tidx: Int32,
    after: cutlass.Constexpr[bool],
    sLo: cute.Tensor | None = None,
):
    """One decay-split B operand [64 channels, 64 tokens] of channel block ``h`` and row block ``bi`` (reference token
    ``r = 16 bi + 8``) into ``sOut``: ``after=False``: ``X_j exp(G_r - G_j)`` for tokens ``j < 16 (bi + 1)``, else 0 (the
    "rows" products); ``after=True``: ``X_i exp(G_i - G_r)`` for tokens ``i >= 16 bi``, else 0 (the "cols" products).
    With ``sLo``: the operand as a bf16 pair, ``sOut`` = bf16(x) and ``sLo`` = bf16(x - bf16(x)) (``_wgmma_hilo``).
    Thread ``tidx``: token ``tidx // 2``, 32 channels. Not fenced."""
    tok = tidx // 2
    c0 = (tidx % 2) * (BV // 2)
    r = bi * SOLVE_BLOCK + REF_OFFSET
    live = tok < (bi + 1) * SOLVE_BLOCK
    if const_expr(after):
        live = tok >= bi * SOLVE_BLOCK
    for j in cutlass.range_constexpr(BV // 2):
        ch = h * BV + c0 + j
        val = Float32(0.0)
        if live:
            d = sGc[r, ch] - sGc[tok, ch]
            if const_expr(after):
                d = -d
            val = sX[tok, ch].to(Float32) * cute.math.exp(d)
        hi = val.to(BFloat16)
        sOut[c0 + j, tok] = hi
        if const_expr(sLo is not None):
            sLo[c0 + j, tok] = (val - hi.to(Float32)).to(BFloat16)


@cute.jit
def _wgmma_hilo(tiled_mma: cute.TiledMma, acc: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor, tCrBlo: cute.Tensor):
    """``acc = A @ B_lo + A @ B`` (``B``, ``B_lo``: the bf16 hi / lo pair of one decay-split operand, ``_split_operand``
    with ``sLo``) over every k-block: one committed WGMMA group, waited for (as ``_device.delta_rule.wgmma``)."""
    warpgroup.fence()
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, False)
    for kb in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(atom, acc, tCrA[None, None, kb], tCrBlo[None, None, kb], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    for kb in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(atom, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
    warpgroup.commit_group()
    warpgroup.wait_group(0)


class KdaBwdGrads(GradsLaunch):
    """Pass 3: dq, dk, dv, dg, dbeta of every chunk (chunks in parallel)."""

    def __init__(self, key: KdaBwdKey):
        super().__init__(key)
        assert not key.l2norm and not key.gva, "KDA backward v1: no in-kernel L2 norm, no GVA (declined by the adapter)"

    PER_KEY_GATE = True

    def ws_state(self, ptr, slots, heads):
        """S0 / dS1 as plain [slots, H, D, D] views (this kernel's scalar loads; host side)."""
        return state_views(ptr, slots, heads, self.D)

    def shared_storage(self, l_ck, l_kc, l_kv, l_cc):
        """The shared-memory struct (host side, built in ``GradsLaunch.__call__``; see the kernel for the tiles' use):
        x0-x4 [C, D], x5 [D % 64, C, D // 64], y0 [K, V], c0-c6 [C, C], then the fp32 arrays."""
        D = self.D
        tiles = dict(x0=l_ck, x1=l_ck, x2=l_ck, x3=l_ck, x4=l_ck, x5=l_kc, y0=l_kv, c0=l_cc, c1=l_cc, c2=l_cc, c3=l_cc, c4=l_cc, c5=l_cc, c6=l_cc)
        return smem_struct(tiles, dict(gc=CHUNK * (D + 1), beta=CHUNK, dbr=CHUNK, extra=D, kdsum=D))

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        gDo: cute.Tensor,
        gVn: cute.Tensor,
        gDvn: cute.Tensor,
        mWsH: cute.Tensor,
        mWsDh: cute.Tensor,
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
        NBLK = CHUNK // SOLVE_BLOCK
        tidx, seq, head, zc, hk, _, bos, eos, n_chunks, slot0 = bwd_cta(mCu, seq_len, group, self.key.varlen)  # zc: this CTA's chunk group

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(SharedStorage)
        # x0: dVn (A) | K (B)      x1: dVn^T (A) | Q (B)      x2: V (A) | dO (B)      x3: beta exp(G) K (A) | Vn (B)
        # x4: dWm (A)              x5: dWm^T (A, B2)          y0: S0^T (A, B1) | dS1^T (B2)
        sDvn = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDvnT = st.x1.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sQ = st.x1.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sV = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDo = st.x2.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKbg = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sVn = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDwm = st.x4.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sDwmT = st.x5.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sS0T = st.y0.get_tensor(l_kv.outer, swizzle=l_kv.inner)
        sDS1T = st.y0.get_tensor(l_kv.outer, swizzle=l_kv.inner)
        # c0: Tm (A) | rows operand (B)   c1: Tm^T   c2: dTm^T (A) | cols-Q operand (B2)   c3: X (A) | dP~ (B1) | cols-K operand (B2)
        # c4: dA   c5: (beta dA)^T   c6: dP~^T
        sTm = st.c0.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sRowB = st.c0.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sTmT = st.c1.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDTmT = st.c2.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sColQ = st.c2.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sX = st.c3.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDP = st.c3.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sColK = st.c3.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDA = st.c4.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sBT = st.c5.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sDPT = st.c6.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        # dp_split_hilo: x4 (dWm, free after phase A) holds the lo half of the dP~ products' split operand (B1: rows, B2: cols-Q)
        sLo = None
        lo_B = None
        if const_expr(self.key.dp_split_hilo):
            sLo = st.x4.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sGc = st.gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))
        sBeta = st.beta.get_tensor(cute.make_layout((CHUNK,)))
        sDBr = st.dbr.get_tensor(cute.make_layout((CHUNK,)))
        sExtra = st.extra.get_tensor(cute.make_layout((D,)))  # <dS1, S0> per key channel
        sKdSum = st.kdsum.get_tensor(cute.make_layout((D,)))  # sum_j dkd_j k_j exp(G_C - G_j) per key channel

        wg = mma.get_slice(0)
        dvn_A = wg.make_fragment_A(wg.partition_A(sDvn))
        s0t_B = wg.make_fragment_B(wg.partition_B(sS0T))  # (.., .., .., K / 64)
        ds1t_B = wg.make_fragment_B(wg.partition_B(sDS1T))
        dvnt_B = wg.make_fragment_B(wg.partition_B(sDvnT))
        tmt_A = wg.make_fragment_A(wg.partition_A(sTmT))
        tm_B = wg.make_fragment_B(wg.partition_B(sTm))
        v_B = wg.make_fragment_B(wg.partition_B(sV))
        dwm_A = wg.make_fragment_A(wg.partition_A(sDwm))
        kbg_B = wg.make_fragment_B(wg.partition_B(sKbg))
        dtmt_B = wg.make_fragment_B(wg.partition_B(sDTmT))
        x_A = wg.make_fragment_A(wg.partition_A(sX))
        do_A = wg.make_fragment_A(wg.partition_A(sDo))
        vn_B = wg.make_fragment_B(wg.partition_B(sVn))
        vn_A = wg.make_fragment_A(wg.partition_A(sVn))
        dp_A = wg.make_fragment_A(wg.partition_A(sDP))
        dpt_A = wg.make_fragment_A(wg.partition_A(sDPT))
        da_A = wg.make_fragment_A(wg.partition_A(sDA))
        bt_A = wg.make_fragment_A(wg.partition_A(sBT))
        rowb_B = wg.make_fragment_B(wg.partition_B(sRowB))
        colq_B = wg.make_fragment_B(wg.partition_B(sColQ))
        colk_B = wg.make_fragment_B(wg.partition_B(sColK))
        dwmt_B = wg.make_fragment_B(wg.partition_B(sDwmT))
        if const_expr(self.key.dp_split_hilo):
            lo_B = wg.make_fragment_B(wg.partition_B(sLo))
        acc_a = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_b = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_c = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = tidx // 2
        half = tidx % 2
        cpt = THREADS // D  # threads per channel in the state loaders (1 at K = 128, 2 at K = 64)
        for ci in range(zc, n_chunks, z_split):
            t0, n_valid, slot = grads_chunk(bos, eos, slot0, ci)
            if tidx < CHUNK:
                sDBr[tidx] = Float32(0.0)
            if tidx < D:
                sExtra[tidx] = Float32(0.0)
                sKdSum[tidx] = Float32(0.0)
            chunk_gates(mG, mB, None, sGc, sBeta, t0, n_valid, head, tidx, D, True)

            # ================= phase A: loads; dWm, dV, dTm, dA =================================================
            rows_to_smem(gDvn, sDvn, sDvnT, t0, eos, head, tidx, D, 2)
            rows_to_smem(gV, sV, sV, t0, eos, head, tidx, D, 0)
            NV = D // 2 // VEC
            kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            t_row, keep = row_guard(t0, row, n_valid, eos)
            for vj in cutlass.range_constexpr(NV):
                cute.autovec_copy(gK[(None, None, None), (t_row, hk, half * NV + vj)], kbuf[None, None, None, vj])
            kb_row = keep * sBeta[row]
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * (D // 2) + vj * VEC + e
                    kn = kbuf[0, 0, e, vj].to(Float32)
                    sKbg[row, col] = (kn * (kb_row * cute.math.exp(sGc[row, col]))).to(BFloat16)
            # Tm and Tm^T (pass 1's, bf16)
            tm_row_store(tm_row_load(gWsTm, slot, head, row, half), sTm, sTmT, row, half)
            # S0^T; <dS1, S0> per key channel (thread: channel tidx % D, rows v = tidx // D, + cpt, ...)
            kc = tidx % D
            dot = Float32(0.0)
            for vv in cutlass.range(D // cpt, unroll=8):
                v = vv * cpt + tidx // D
                s_val = mWsH[slot, head, v, kc]
                dot = dot + s_val.to(Float32) * mWsDh[slot, head, v, kc].to(Float32)
                sS0T[kc % BV, v, kc // BV] = s_val
            cute.arch.atomic_add(sExtra.iterator + kc, dot)
            _smem_ready()

            dwm_and_dv(mma, acc_a, dvn_A, s0t_B, tmt_A, dvnt_B, sDwm, sDwmT, sDBr, sV, sBeta, mDv, c64, t0, n_valid, head, NH)
            # dTm = (dVn V^T) beta_j + dWm (beta exp(G) K)^T -> dTm^T
            _wgmma(mma, acc_a, dvn_A, v_B, True)
            _wgmma(mma, acc_b, dwm_A, kbg_B, True)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                sDTmT[rc[1], rc[0]] = (acc_a[i] * sBeta[rc[1]] + acc_b[i]).to(BFloat16)
            _smem_ready()
            _wgmma(mma, acc_a, tmt_A, dtmt_B, True)  # X = Tm^T dTm
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                sX[rc[0], rc[1]] = acc_a[i].to(BFloat16)
            _smem_ready()
            _wgmma(mma, acc_a, x_A, tm_B, True)  # X Tm^T; dA = -strictly_lower(.)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                da = Float32(0.0)
                if rc[0] > rc[1]:
                    da = -acc_a[i]
                sDA[rc[0], rc[1]] = da.to(BFloat16)
                sBT[rc[1], rc[0]] = (da * sBeta[rc[0]]).to(BFloat16)
            cute.arch.sync_threads()  # every phase-A reader of x0..x3, c0, c2, c3 has completed

            # ================= phase B1: dP~, dQ (and dG = Q dQ to dg) ===========================================
            rows_to_smem(gK, sK, sK, t0, eos, hk, tidx, D, 0)
            rows_to_smem(gQ, sQ, sQ, t0, eos, hk, tidx, D, 0)
            rows_to_smem(gDo, sDo, sDo, t0, eos, head, tidx, D, 0)
            rows_to_smem(gVn, sVn, sVn, t0, eos, head, tidx, D, 0)
            _smem_ready()
            _wgmma(mma, acc_a, do_A, vn_B, True)  # dP~ = scale lower_eq(dO Vn^T)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                dp = Float32(0.0)
                if rc[0] >= rc[1]:
                    dp = acc_a[i] * scale
                dpb = dp.to(BFloat16)
                sDP[rc[0], rc[1]] = dpb
                sDPT[rc[1], rc[0]] = dpb
            _smem_ready()
            for h in cutlass.range_constexpr(NH):
                _wgmma(mma, acc_b, do_A, s0t_B[None, None, None, h], True)  # dO S0
                for i in cutlass.range_constexpr(cute.size(acc_b)):
                    rc = c64[i]
                    acc_b[i] = acc_b[i] * (scale * cute.math.exp(sGc[rc[0], h * BV + rc[1]]))
                for bi in cutlass.range(NBLK, unroll=1):  # a runtime loop: a quarter of the code  # + rows(dP~, K), block bi's rows
                    _split_operand(sK, sGc, sRowB, h, bi, tidx, False, sLo)
                    _smem_ready()
                    if const_expr(self.key.dp_split_hilo):
                        _wgmma_hilo(mma, acc_a, dp_A, rowb_B, lo_B)
                    else:
                        _wgmma(mma, acc_a, dp_A, rowb_B, True)
                    r_blk = bi * SOLVE_BLOCK + REF_OFFSET
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            ch = h * BV + rc[1]
                            acc_b[i] = acc_b[i] + acc_a[i] * cute.math.exp(sGc[rc[0], ch] - sGc[r_blk, ch])
                    cute.arch.sync_threads()  # sRowB is rewritten next
                for i in cutlass.range_constexpr(cute.size(acc_b)):
                    rc = c64[i]
                    if rc[0] < n_valid:
                        ch = h * BV + rc[1]
                        mDq[t0 + rc[0], head, ch] = acc_b[i].to(mDq.element_type)
                        mDg[t0 + rc[0], head, ch] = acc_b[i] * sQ[rc[0], ch].to(Float32)

            # ================= phase B2: dK, dg, dbeta =========================================================
            for vv in cutlass.range(D // cpt, unroll=8):  # dS1^T over S0^T (every reader of S0^T has completed)
                v = vv * cpt + tidx // D
                sDS1T[kc % BV, v, kc // BV] = mWsDh[slot, head, v, kc]
            _smem_ready()
            for h in cutlass.range_constexpr(NH):
                # acc_b: dK, acc_c: Y = R + exp(G) dKb
                for i in cutlass.range_constexpr(cute.size(acc_b)):
                    acc_b[i] = Float32(0.0)
                    acc_c[i] = Float32(0.0)
                for bi in cutlass.range(NBLK, unroll=1):  # a runtime loop: a quarter of the code
                    _split_operand(sK, sGc, sRowB, h, bi, tidx, False)
                    _split_operand(sQ, sGc, sColQ, h, bi, tidx, True, sLo)
                    _split_operand(sK, sGc, sColK, h, bi, tidx, True)
                    _smem_ready()
                    r_blk = bi * SOLVE_BLOCK + REF_OFFSET
                    _wgmma(mma, acc_a, da_A, rowb_B, True)  # R = rows(dA, K)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            ch = h * BV + rc[1]
                            rv = acc_a[i] * cute.math.exp(sGc[rc[0], ch] - sGc[r_blk, ch])
                            acc_c[i] = acc_c[i] + rv
                            acc_b[i] = acc_b[i] + rv * sBeta[rc[0]]
                    if const_expr(self.key.dp_split_hilo):
                        _wgmma_hilo(mma, acc_a, dpt_A, colq_B, lo_B)  # cols(dP~, Q)
                    else:
                        _wgmma(mma, acc_a, dpt_A, colq_B, True)  # cols(dP~, Q)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            ch = h * BV + rc[1]
                            acc_b[i] = acc_b[i] + acc_a[i] * cute.math.exp(sGc[r_blk, ch] - sGc[rc[0], ch])
                    _wgmma(mma, acc_a, bt_A, colk_B, True)  # cols(beta dA, K)
                    for i in cutlass.range_constexpr(cute.size(acc_a)):
                        rc = c64[i]
                        if rc[0] // SOLVE_BLOCK == bi:
                            ch = h * BV + rc[1]
                            acc_b[i] = acc_b[i] + acc_a[i] * cute.math.exp(sGc[r_blk, ch] - sGc[rc[0], ch])
                    cute.arch.sync_threads()  # the three operands are rewritten next
                _wgmma(mma, acc_a, vn_A, ds1t_B[None, None, None, h], True)  # dkd = Vn dS1
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    ch = h * BV + rc[1]
                    kdec = cute.math.exp(sGc[CHUNK - 1, ch] - sGc[rc[0], ch])
                    acc_b[i] = acc_b[i] + acc_a[i] * kdec
                    cute.arch.atomic_add(sKdSum.iterator + ch, acc_a[i] * kdec * sK[rc[0], ch].to(Float32))
                _wgmma(mma, acc_a, tmt_A, dwmt_B[None, None, None, h], True)  # dKb = Tm^T dWm
                for i in cutlass.range_constexpr(cute.size(acc_a)):
                    rc = c64[i]
                    r = rc[0]
                    ch = h * BV + rc[1]
                    eg = cute.math.exp(sGc[r, ch])
                    y = acc_c[i] + acc_a[i] * eg
                    kv = sK[r, ch].to(Float32)
                    dk = acc_b[i] + acc_a[i] * (sBeta[r] * eg)
                    cute.arch.atomic_add(sDBr.iterator + r, kv * y)
                    if r < n_valid:
                        mDk[t0 + r, head, ch] = dk.to(mDk.element_type)
                        mDg[t0 + r, head, ch] = mDg[t0 + r, head, ch] - kv * dk + Float32(2.0) * sBeta[r] * kv * y
            cute.arch.sync_threads()  # dg's per-element values (this CTA's global writes) and sExtra, sDBr complete

            # ---- dg = reverse cumsum over the chunk per key channel, with the dG_C terms; dbeta -------------------
            if tidx < D:
                gl = sGc[CHUNK - 1, tidx]
                run = cute.math.exp(gl) * sExtra[tidx] + sKdSum[tidx]  # exp(G_C) <dS1, S0> + sum_j dkd K exp(G_C - G)
                for rr in range(n_valid):
                    r = n_valid - 1 - rr
                    run = run + mDg[t0 + r, head, tidx]
                    mDg[t0 + r, head, tidx] = run
            if tidx < n_valid:
                mDb[t0 + tidx, head] = sDBr[tidx]
            cute.arch.sync_threads()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
