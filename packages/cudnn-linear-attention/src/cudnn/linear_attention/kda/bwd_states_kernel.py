"""Kimi Delta Attention backward, passes 1 and 2 (chunk C = 64, sm_90a, CuTe DSL, WGMMA): the chunk states and their
gradients, with the per-key-channel decay ``G`` [C, K] of KDA.

The backward (``chunk_bwd_kernel.py`` has the spec and pass 3; the math and its CPU check are
``shared/cudnn_testing/reference_linear_attention.py::kimi_delta_attention_chunked_bwd_ref``) needs, per chunk, the state
entering it ``S0`` and the gradient of the state leaving it ``dS1``. Both recurrences run here as in the Gated DeltaNet
backward (``gdn/bwd_states_kernel.py``), one CTA per (sequence, head, 64-row V-slice of the state), the slice in fp32
WGMMA accumulators for the whole sequence:

- :class:`KdaBwdStates` (pass 1, forward over chunks): the KDA forward (``chunk_fwd_kernel.py``) without its output:
  ``A`` and ``P`` by the 16-row-block decay split around reference token ``16 I + 8``, ``Tm = (I + A)^-1``, ``Wm``,
  ``U``, ``Vn = U - Wm S0^T``, ``S1 = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))``. Writes ``S0`` (bf16) of every chunk to
  ``ws_h``, ``Vn`` (bf16) of every token to ``ws_vn`` and, from the V-slice 0 CTA, ``Tm`` and ``P`` (bf16
  [slots, H, 64, 64]) to ``ws_tm`` / ``ws_p``: passes 2 and 3 never redo the decay-split products or the solve.
- :class:`KdaBwdDStates` (pass 2, reverse over chunks), ``dS`` starting at ``d final_state`` (or 0)::

      dVn = P^T dO + (K exp(G_C - G)) dS1^T
      dS0 = dS1 Diag(exp(G_C)) + dO^T (scale exp(G) Q) - dVn^T Wm          Wm = Tm (beta exp(G) K)

  writing ``dS1`` (bf16) of every chunk to ``ws_dh``, ``dVn`` (bf16) of every token to ``ws_dvn`` and, with an initial
  state, ``d initial_state = dS0`` of the first chunk (fp32).

Workspace (bf16, contiguous, carved by ``bwd_api.py``): ``ws_h``, ``ws_dh`` [slots, H, V, K] with chunk ``ci`` of
sequence ``n`` (tokens from ``bos``) in slot ``n + bos // 64 + ci`` (unique and below ``slots = N + T // 64 + 1``);
``ws_vn``, ``ws_dvn`` [T, H, V]; ``ws_tm``, ``ws_p`` [slots, H, 64, 64].

Layouts as the forward: q, k [T, Hk, K], v, do [T, H, V] bf16, unit channel stride, token / head strides multiples of 8
elements; g [T, H, K] and beta [T, H] contiguous fp32 or bf16; ``cu_seqlens`` int32 [N + 1]; states fp32 [N, H, V, K].
K = V in {64, 128}. Runtime extents are kernel arguments (Rule 4). The decay-split contract of the forward holds
(any 8 consecutive per-channel log decays sum to more than -80).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device import delta_rule_bwd as bwd
from .._device.delta_rule import (
    BV,
    CHUNK,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    DeltaRuleKernel,
    chunk_gates,
    load_half_row,
    load_state,
    load_v_half_row,
    make_accumulators,
    make_seq_state_views,
    row_guard,
    solve_unit_lower_blocked,
    store_beta_v_t,
    store_final_state,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .chunk_fwd_kernel import a_block_decay_split

REF_OFFSET = 8  # reference token of row block I: 16 I + 8 (the forward's)


@dataclass(frozen=True)
class KdaBwdKey:
    """Plan-time choices of the KDA backward kernels: exactly their compile key (Rule 4)."""

    head_dim: int  # K = V, 64 or 128
    g_dtype: str  # "Float32" or "BFloat16"
    beta_dtype: str
    varlen: bool
    has_initial: bool  # pass 1 reads the initial state, pass 2 writes its gradient
    has_dfinal: bool  # a gradient of the final state enters pass 2
    l2norm: bool = False  # q, k L2-normalised in the kernels; pass 3 applies the chain rule
    gva: bool = False  # q/k heads Hk < v heads H: pass 3 writes fp32 per-value-head dq / dk, pass 4 sums them
    # the default since session 10 (kda/bwd_api.py ``plan.parallel_pass1``): pass 1
    # as the forward's chunk-parallel prep + state pass and ``bwd_states_parallel_kernel.KdaBwdStatesChunk``; False: the
    # serial :class:`KdaBwdStates`. No kernel of this module reads it (their PTX is unchanged)
    parallel_pass1: bool = False
    # pass 3 (``chunk_bwd_kernel.py``) only: the decay-split B operands of the two dP~ products (rows(dP~, K) and
    # cols(dP~, Q)) as bf16 hi + lo pairs, two WGMMAs into one accumulator (issue #7: one bf16 rounding of the split
    # operands breaks the chunk-sum cancellation of Q rows(dP~, K) - K cols(dP~, Q) in dG). The default since session 9
    # (GPU tests passed, session 9 call 1); False: the original single bf16 operand (session 6's kernel). No kernel of
    # this module reads it (their PTX is unchanged).
    dp_split_hilo: bool = True
    # the default since session 10 (kda/bwd_api.py ``plan.parallel_pass2``, requires ``parallel_pass1``): pass 2 as a chunk-parallel precompute
    # (``bwd_dstates_parallel_kernel.KdaBwdDStatesPrep``) + the narrow reverse state chain
    # (``_device/dstates_parallel.DeltaRuleBwdDStatesChain``); no kernel of this module reads it (their PTX is unchanged)
    parallel_pass2: bool = False
    # ---- fold_prep_tm (issue #7; the default since session 10, requires ``parallel_pass1``): pass 1b as layout copies
    # (``bwd_states_parallel_kernel.KdaBwdStatesFold``) of what the forward prep (``KdaParallelPrepKey.bwd_tm``: Tm into
    # its qg tile) and state pass (h, vnt) already wrote; no kernel of this module reads it (their PTX is unchanged)
    fold_prep_tm: bool = False
    # ---- grads_v2 (session 9, issue #7; the default since session 10, kda/bwd_api.py ``plan.grads_v2``): pass 3 as
    # ``chunk_bwd_v2_kernel.KdaBwdGradsV2`` (two warpgroups per CTA; the arguments, workspace arrays, outputs and roundings
    # of ``chunk_bwd_kernel.KdaBwdGrads``); no kernel of this module reads it (their PTX is unchanged)
    grads_v2: bool = False
    # ---- mn_operands (the plan default since session 29, kda/bwd_api.py ``plan.mn_operands``, ``MN_OPERANDS_DEFAULT``; requires ``grads_v2``): pass 3
    # v2 reads its transposed operands (dVn^T, S0^T, dS1^T, Tm^T, dTm^T, dWm^T, (beta dA)^T, dP~^T and the decay-split
    # operands) as MN-major WGMMA operands of row-major tiles instead of writing transposed copies (GDN's session-11
    # option); read by pass 3 v2 only
    mn_operands: bool = False


@cute.jit
def cc_to_smem(mX: cute.Tensor, sX: cute.Tensor, slot: Int32, head: Int32, tidx: Int32, transpose: cutlass.Constexpr[bool]):
    """A [64, 64] bf16 workspace tile (Tm or P of one chunk) -> shared ``sX`` (``transpose``: ``sX[c, r] = X[r, c]``),
    row ``tidx // 2``, half ``tidx % 2`` per thread by 16-byte loads; not fenced."""
    nv = CHUNK // 2 // VEC
    row = tidx // 2
    half = tidx % 2
    buf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, nv)), BFloat16)
    for vj in cutlass.range_constexpr(nv):
        cute.autovec_copy(mX[(None, None, None, None), (slot, head, row, half * nv + vj)], buf[None, None, None, None, vj])
    for vj in cutlass.range_constexpr(nv):
        for e in cutlass.range_constexpr(VEC):
            c = half * (CHUNK // 2) + vj * VEC + e
            if const_expr(transpose):
                sX[c, row] = buf[0, 0, 0, e, vj]
            else:
                sX[row, c] = buf[0, 0, 0, e, vj]


def states_shared_storage(l_ck, l_kc, l_cc, D: int):
    """The shared-memory struct of pass 1 (serial :class:`KdaBwdStates` and chunk-parallel
    ``bwd_states_parallel_kernel.KdaBwdStatesChunk``): host side, built once per ``__call__``."""
    return bwd.smem_struct(
        dict(smem_qr=l_ck, smem_k=l_ck, smem_w=l_ck, smem_kr=l_ck, smem_s=l_ck, smem_kt=l_kc, smem_tm=l_cc, smem_vt=l_cc, smem_vnt=l_cc),
        dict(smem_a=CHUNK * (CHUNK + 1), smem_t=CHUNK * (CHUNK + 1), smem_m=SOLVE_BLOCK * (CHUNK + 1), smem_gc=CHUNK * (D + 1), smem_beta=CHUNK),
    )


@cute.jit
def states_smem(SharedStorage: cutlass.Constexpr, l_ck: cute.ComposedLayout, l_kc: cute.ComposedLayout, l_cc: cute.ComposedLayout, D: cutlass.Constexpr[int]):
    """Pass 1's shared tensors (:func:`states_shared_storage`): ``(sQr, sK, sW, sKR, sS, sKT, sTm, sVT, sVnT, sA, sT,
    sM, sGc, sBeta)``."""
    smem = cutlass.utils.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    sQr = storage.smem_qr.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # Q exp(G - G_r)
    sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
    sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K exp(G - G_r), then -Wm
    sKR = storage.smem_kr.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K exp(G_r - G), zero after block I
    sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # S0 [V slice, K] bf16
    sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (beta K exp G)^T, then (K exp(G_C - G))^T
    sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    sVT = storage.smem_vt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
    sA = storage.smem_a.get_tensor(plain)
    sT = storage.smem_t.get_tensor(plain)
    sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
    sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))
    sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))
    return sQr, sK, sW, sKR, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sGc, sBeta


@cute.jit
def decayed_qk_rows(
    gQ: cute.Tensor,
    gK: cute.Tensor,
    gV: cute.Tensor | None,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sQr: cute.Tensor,
    sK: cute.Tensor,
    sW: cute.Tensor,
    sKT: cute.Tensor,
    t0: Int32,
    eos: Int32,
    n_valid: Int32,
    row: Int32,
    half: Int32,
    rref: Int32,
    hk: Int32,
    head: Int32,
    v0: Int32,
    l2norm: cutlass.Constexpr[bool],
    D: cutlass.Constexpr[int],
):
    """Pass 1's row block (the forward's step 2): this thread's half of token row ``row`` of q and k (zero past the
    sequence's end, optionally L2-normalised) -> ``sQr = Q exp(G - G_r)``, ``sK``, ``sW = K exp(G - G_r)``, ``sKT =
    (beta K exp G)^T``. With ``gV``, the thread's value half row (V slice ``v0``) is loaded between the k load and its
    use (the serial pass's order). Returns ``(t_row, keep, b_row, vbuf)`` (``vbuf`` None without ``gV``). Not fenced."""
    HALF = D // 2
    t_row, keep = row_guard(t0, row, n_valid, eos)
    b_row = sBeta[row]
    NV = HALF // VEC
    rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
    load_half_row(gQ, rbuf, t_row, hk, half, NV)
    inv_q = _row_scale(rbuf, keep, l2norm, NV, VEC)
    for vj in cutlass.range_constexpr(NV):
        for e in cutlass.range_constexpr(VEC):
            col = half * HALF + vj * VEC + e
            qn = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16).to(Float32)
            sQr[row, col] = (qn * cute.math.exp(sGc[row, col] - sGc[rref, col])).to(BFloat16)
    load_half_row(gK, rbuf, t_row, hk, half, NV)
    inv_k = _row_scale(rbuf, keep, l2norm, NV, VEC)
    vbuf = None
    if const_expr(gV is not None):
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
    return t_row, keep, b_row, vbuf


@cute.jit
def p_block_to_workspace(mWsP: cute.Tensor, acc_a: cute.Tensor, c64: cute.Tensor, bi: Int32, slot0: Int32, ci: Int32, head: Int32, scale: Float32):
    """Row block ``bi`` of ``P = scale lower_eq(...)`` (``acc_a``) -> bf16 ``mWsP[slot0 + ci, head]``."""
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        if rc[0] // SOLVE_BLOCK == bi:
            p_val = Float32(0.0)
            if rc[0] >= rc[1]:
                p_val = acc_a[i] * scale
            mWsP[slot0 + ci, head, rc[0], rc[1]] = p_val.to(BFloat16)


@cute.jit
def a_p_tm_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    kl_A: cute.Tensor,
    qr_A: cute.Tensor,
    kr_B: cute.Tensor,
    sK: cute.Tensor,
    sKR: cute.Tensor,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sA: cute.Tensor,
    sT: cute.Tensor,
    sM: cute.Tensor,
    sTm: cute.Tensor,
    mWsP: cute.Tensor,
    mWsTm: cute.Tensor,
    c64: cute.Tensor,
    slot0: Int32,
    ci: Int32,
    head: Int32,
    row: Int32,
    half: Int32,
    tidx: Int32,
    scale: Float32,
    vblk: Int32 | None,
    HALF: cutlass.Constexpr[int],
):
    """Pass 1's A and P by 16-row decay-split blocks (the forward's step 3; ``P`` -> ``ws_p``), then ``Tm = (I +
    A)^-1`` (``sTm``, published) -> ``ws_tm``, both at slot ``slot0 + ci``. The workspace writes come from the CTA with
    ``vblk == 0`` (serial pass), or from every CTA (``vblk`` None: one CTA per chunk)."""
    for bi in cutlass.range(CHUNK // SOLVE_BLOCK, unroll=1):  # a runtime loop: a quarter of the code
        a_block_decay_split(mma, acc_a, kl_A, kr_B, sK, sKR, sGc, sBeta, sA, c64, bi, row, half, HALF)
        _wgmma(mma, acc_a, qr_A, kr_B, True)
        if const_expr(vblk is None):
            p_block_to_workspace(mWsP, acc_a, c64, bi, slot0, ci, head, scale)
        else:
            if vblk == 0:
                p_block_to_workspace(mWsP, acc_a, c64, bi, slot0, ci, head, scale)
        cute.arch.sync_threads()
    solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
    _smem_ready()
    if const_expr(vblk is None):
        bwd.tm_to_workspace(mWsTm, sTm, slot0, ci, head, tidx)
    else:
        if vblk == 0:
            bwd.tm_to_workspace(mWsTm, sTm, slot0, ci, head, tidx)


class KdaBwdStates(DeltaRuleKernel):
    """Pass 1: ``S0`` -> ``ws_h``, ``Vn`` -> ``ws_vn``, ``Tm`` -> ``ws_tm``, ``P`` -> ``ws_p`` (forward over chunks)."""

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        h0_ptr: cute.Pointer | None,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer,
        wsp_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,
        slots: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV = bwd.vec_views(D, q_ptr, k_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, True)
        mCu, mH0, _ = make_seq_state_views(cu_ptr, h0_ptr, None, n_seqs, heads, D, self.key.varlen, self.key.has_initial, False)
        mWsH = bwd.state_views(wsh_ptr, slots, heads, D)
        mWsVn = bwd.token_views(wsvn_ptr, T, heads, D)
        mWsTm = bwd.cc_views(wstm_ptr, slots, heads)
        mWsP = bwd.cc_views(wsp_ptr, slots, heads)
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        SharedStorage = states_shared_storage(l_ck, l_kc, l_cc, D)

        self.kernel(gQ, gK, gV, mG, mB, mCu, mH0, mWsH, mWsVn, mWsTm, mWsP, seq_len, heads // qk_heads, scale, mma, l_ck, l_kc, l_cc, SharedStorage).launch(
            grid=[n_seqs, heads, D // BV], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        mH0: cute.Tensor | None,
        mWsH: cute.Tensor,
        mWsVn: cute.Tensor,
        mWsTm: cute.Tensor,
        mWsP: cute.Tensor,
        seq_len: Int32,
        group: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        NH = D // BV
        tidx, seq, head, vblk, hk, v0, bos, eos, n_chunks, slot0 = bwd.bwd_cta(mCu, seq_len, group, self.key.varlen)

        sQr, sK, sW, sKR, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sGc, sBeta = states_smem(SharedStorage, l_ck, l_kc, l_cc, D)

        wg = mma.get_slice(0)
        kl_A = wg.make_fragment_A(wg.partition_A(sW))
        qr_A = wg.make_fragment_A(wg.partition_A(sQr))
        kr_B = wg.make_fragment_B(wg.partition_B(sKR))
        kt_B, u_A, u_B, vn_A, s0_B, su_A = bwd.states_fragments(wg, sKT, sTm, sVT, sW, sS, sVnT)
        acc_a, acc_b, acc_s, c64 = make_accumulators(mma, wg, tidx, NH)
        load_state(acc_s, sS, mH0, c64, seq, head, v0, NH, self.key.has_initial)

        row = tidx // 2
        half = tidx % 2
        rref = (row // SOLVE_BLOCK) * SOLVE_BLOCK + REF_OFFSET
        for ci in range(n_chunks):
            t0 = bos + ci * CHUNK
            n_valid = min(eos - t0, CHUNK)
            bwd.state_to_workspace(mWsH, acc_s, c64, slot0, ci, head, v0, NH)  # S0 (bf16, the operand every pass uses) -> ws_h
            chunk_gates(mG, mB, None, sGc, sBeta, t0, n_valid, head, tidx, D, True)

            # ---- q, k, v rows to shared (zero past eos), optional L2 norm, decayed copies (the forward's step 2) ----
            t_row, keep, b_row, vbuf = decayed_qk_rows(
                gQ, gK, gV, sGc, sBeta, sQr, sK, sW, sKT, t0, eos, n_valid, row, half, rref, hk, head, v0, self.key.l2norm, D
            )
            store_beta_v_t(sVT, vbuf, row, half, keep, b_row)

            # ---- A and P by 16-row blocks (the forward's step 3), Tm = (I + A)^-1; P, Tm -> ws_p, ws_tm (V-slice 0) ----
            a_p_tm_to_workspace(
                mma, acc_a, kl_A, qr_A, kr_B, sK, sKR, sGc, sBeta, sA, sT, sM, sTm, mWsP, mWsTm, c64, slot0, ci, head, row, half, tidx, scale, vblk, HALF
            )

            # ---- U, -Wm, Vn = U - Wm S0^T -> ws_vn -----------------------------------------------------------
            bwd.wy_values_to_workspace(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, mWsVn, c64, t0, n_valid, head, v0, NH)
            bwd.decayed_keys_t(sKT, sK, sGc, row, half, None, HALF, True)  # sKT's last reader (the Wm product) is done
            _smem_ready()

            # ---- S = S Diag(exp(G_C)) + Vn^T (K exp(G_C - G)) --------------------------------------------------
            bwd.state_update(mma, acc_s, su_A, kt_B, sS, sGc, c64, None, NH, True)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


class KdaBwdDStates(DeltaRuleKernel):
    """Pass 2: ``dS1`` -> ``ws_dh``, ``dVn`` -> ``ws_dvn`` and ``d initial_state`` (reverse over chunks)."""

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        dht_ptr: cute.Pointer | None,
        dh0_ptr: cute.Pointer | None,
        wsdh_ptr: cute.Pointer,
        wsdvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer,
        wsp_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,
        slots: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        do_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gDo = bwd.vec_views(D, q_ptr, k_ptr, do_ptr, T, heads, qk_heads, q_strides, k_strides, do_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, True)
        mCu, mDH0, mDHT = make_seq_state_views(cu_ptr, dh0_ptr, dht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_dfinal)
        mWsDh = bwd.state_views(wsdh_ptr, slots, heads, D)
        mWsDvn = bwd.token_views(wsdvn_ptr, T, heads, D)
        gWsTm = cute.zipped_divide(bwd.cc_views(wstm_ptr, slots, heads), (1, 1, 1, VEC))
        gWsP = cute.zipped_divide(bwd.cc_views(wsp_ptr, slots, heads), (1, 1, 1, VEC))
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        @cute.struct
        class SharedStorage:
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_ds: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_qst: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_wmt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_tm: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_pt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_dot: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_dvnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_gc: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (D + 1)], 16]
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]

        self.kernel(
            gQ, gK, gDo, mG, mB, mCu, mDHT, mDH0, mWsDh, mWsDvn, gWsTm, gWsP, seq_len, heads // qk_heads, scale, mma, l_ck, l_kc, l_cc, SharedStorage
        ).launch(grid=[n_seqs, heads, D // BV], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gDo: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        mDHT: cute.Tensor | None,
        mDH0: cute.Tensor | None,
        mWsDh: cute.Tensor,
        mWsDvn: cute.Tensor,
        gWsTm: cute.Tensor,
        gWsP: cute.Tensor,
        seq_len: Int32,
        group: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        NH = D // BV
        tidx, seq, head, vblk, hk, v0, bos, eos, n_chunks, slot0 = bwd.bwd_cta(mCu, seq_len, group, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sKd = storage.smem_kd.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K exp(G_C - G) [C, K]
        sDS = storage.smem_ds.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # dS1 [V-slice, K] bf16
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (beta exp(G) K)^T
        sQsT = storage.smem_qst.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (scale exp(G) Q)^T
        sWmT = storage.smem_wmt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # Wm^T
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sPT = storage.smem_pt.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # P^T [j, i]
        sDoT = storage.smem_dot.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # dO^T [V-slice, C]
        sDvnT = storage.smem_dvnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # -dVn^T [V-slice, C]
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        wg = mma.get_slice(0)
        tm_A, kt_B, pt_A, dot_B, dot_A, kd_A, ds_B, qst_B, dvnt_A, wmt_B = bwd.dstates_fragments(wg, sTm, sKT, sPT, sDoT, sKd, sDS, sQsT, sDvnT, sWmT)
        acc_a, acc_b, acc_ds, c64 = make_accumulators(mma, wg, tidx, NH)
        load_state(acc_ds, sDS, mDHT, c64, seq, head, v0, NH, self.key.has_dfinal)

        row = tidx // 2
        half = tidx % 2
        for cr in range(n_chunks):
            ci = n_chunks - 1 - cr
            t0 = bos + ci * CHUNK
            n_valid = min(eos - t0, CHUNK)
            bwd.state_to_workspace(mWsDh, acc_ds, c64, slot0, ci, head, v0, NH)  # dS1 of this chunk -> ws_dh
            chunk_gates(mG, mB, None, sGc, sBeta, t0, n_valid, head, tidx, D, True)

            # ---- q, k, dO rows; Tm and P^T from pass 1 ---------------------------------------------------------
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
                    sQsT[col % BV, row, col // BV] = (qn * (scale * cute.math.exp(sGc[row, col]))).to(BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            vbuf = load_v_half_row(gDo, t_row, head, v0, half)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16).to(Float32)
                    g_i = sGc[row, col]
                    sKT[col % BV, row, col // BV] = (kn * (b_row * cute.math.exp(g_i))).to(BFloat16)
                    sKd[row, col] = (kn * cute.math.exp(sGc[CHUNK - 1, col] - g_i)).to(BFloat16)
            bwd.store_keep_v_t(sDoT, vbuf, row, half, keep)
            cc_to_smem(gWsTm, sTm, slot0 + ci, head, tidx, False)
            cc_to_smem(gWsP, sPT, slot0 + ci, head, tidx, True)
            _smem_ready()

            # ---- Wm^T; dVn = P^T dO + Kd dS1^T -> ws_dvn ---------------------------------------------------------
            bwd.dvalues_to_workspace(mma, acc_a, acc_b, tm_A, kt_B, pt_A, dot_B, kd_A, ds_B, sWmT, sDvnT, mWsDvn, c64, t0, n_valid, head, v0, NH)

            # ---- dS0 = dS1 Diag(exp(G_C)) + dO^T (scale exp(G) Q) - dVn^T Wm -------------------------------------
            bwd.dstate_update(mma, acc_ds, dot_A, qst_B, dvnt_A, wmt_B, sDS, sGc, c64, None, NH, True)

        if const_expr(self.key.has_initial):
            store_final_state(mDH0, acc_ds, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
