"""Gated DeltaNet backward, passes 1 and 2 (chunk C = 64, sm_90a, CuTe DSL, WGMMA): the chunk states and their gradients.

The backward (``chunk_bwd_kernel.py`` has the spec and pass 3) needs, per chunk, the state entering it ``S0`` and the
gradient of the state leaving it ``dS1``; both recurrences run here, one CTA per (sequence, head, 64-row V-slice of
the state), the slice held in fp32 WGMMA accumulators for the whole sequence, exactly as the forward
(``chunk_fwd_kernel.py``) does:

- :class:`GdnBwdStates` (pass 1, forward over chunks): recomputes ``A``, ``Tm``, ``Wm``, ``U``, ``Vn = U - Wm S0^T``
  and ``S1 = exp(G_C) S0 + Vn^T (K exp(G_C - G))`` as the forward, writing ``S0`` (bf16) of every chunk to the
  workspace ``ws_h``, ``Vn`` (bf16) of every token to ``ws_vn`` and, with ``store_tm``, ``Tm`` (bf16 [slots, H, 64, 64],
  from the V-slice 0 CTA) to ``ws_tm`` for passes 2 and 3, which then skip ``K K^T`` and the triangular solve.
- :class:`GdnBwdDStates` (pass 2, reverse over chunks), with ``dS`` starting at ``d final_state`` (or 0)::

      dVn = P^T dO + (K exp(G_C - G)) dS1^T          P = scale lower_eq(Q K^T Gamma)
      dS0 = exp(G_C) dS1 + dO^T (scale exp(G) Q) - dVn^T Wm

  writing ``dS1`` (bf16) of every chunk to ``ws_dh``, ``dVn`` (bf16) of every token to ``ws_dvn`` and, when the
  forward had an initial state, ``d initial_state = dS0`` of the first chunk (fp32).

Workspace layout (bf16, contiguous, carved by the adapter): ``ws_h``, ``ws_dh`` [slots, H, V, K] with the chunk
``ci`` of sequence ``n`` (tokens from ``bos``) in slot ``n + bos // 64 + ci`` (unique, and below
``slots = N + T // 64 + 1`` for any packing); ``ws_vn``, ``ws_dvn`` [T, H, V].

Layouts as the forward: q, k [T, Hk, K] (value head h reads q/k head h // (H / Hk)), v, do [T, H, V]
with unit channel stride and token / head strides multiples of 8 elements (16-byte loads); g, beta [T, H]
contiguous; ``cu_seqlens`` int32 [N + 1]; states fp32 [N, H, V, K]. K = V in {64, 128}. Runtime extents are kernel
arguments (Rule 4). With ``l2norm`` the loaders normalise q and k exactly as the forward's do (bf16 ``x * rsqrt(sum x^2
+ 1e-6)``); the chain rule back to the raw q, k is pass 3's.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device import delta_rule_bwd as bwd
from .._device.delta_rule import (  # noqa: F401  (L2NORM_EPS: re-exported, the kernels' q / k L2-norm epsilon)
    BV,
    CHUNK,
    L2NORM_EPS,
    SOLVE_BLOCK,
    THREADS,
    VEC,
    DeltaRuleKernel,
    chunk_gates,
    k_major_smem_layout,
    load_half_row,
    load_state,
    load_v_half_row,
    make_accumulators,
    make_mma_n64,
    make_seq_state_views,
    row_guard,
    solve_unit_lower_blocked,
    store_beta_v_t,
    store_final_state,
)
from .._device.delta_rule import row_scale as _row_scale
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .chunk_fwd_kernel import a_and_p


@dataclass(frozen=True)
class GdnBwdKey:
    """Plan-time choices of the three backward kernels: exactly their compile key (Rule 4)."""

    head_dim: int  # K = V, 64 or 128
    g_dtype: str  # "Float32" or "BFloat16"
    beta_dtype: str
    varlen: bool
    has_initial: bool  # the forward took an initial state: pass 1 reads it, pass 2 writes its gradient
    has_dfinal: bool  # a gradient of the final state enters pass 2
    l2norm: bool = False  # q, k L2-normalised in the kernels (the forward's use_qk_l2norm_in_kernel); pass 3 applies its chain rule
    gva: bool = False  # q/k heads Hk < v heads H (value head h reads q/k head h // (H / Hk)): pass 3 writes per-value-head
    # dq / dk (fp32, workspace) and pass 4 (bwd_qk_reduce_kernel.py) sums them per q/k head
    store_tm: bool = True  # pass 1 writes Tm (bf16) to the workspace, passes 2 and 3 read it (False: each recomputes K K^T and the solve)
    # the default since session 10 (gdn/bwd_api.py ``plan.parallel_pass1``): pass 1
    # as the forward's chunk-parallel prep + state pass and ``bwd_states_parallel_kernel.GdnBwdStatesChunk``; False: the
    # serial :class:`GdnBwdStates`. No kernel of this module reads it (their PTX is unchanged)
    parallel_pass1: bool = False
    # the default since session 10 (gdn/bwd_api.py ``plan.parallel_pass2``, requires ``parallel_pass1``, ``store_tm``): pass 2 as a
    # chunk-parallel precompute (``bwd_dstates_parallel_kernel.GdnBwdDStatesPrep``) + the narrow reverse state chain
    # (``_device/dstates_parallel.DeltaRuleBwdDStatesChain``); no kernel of this module reads it (their PTX is unchanged)
    parallel_pass2: bool = False
    # ---- fold_prep_tm (issue #7; the default since session 10, requires ``parallel_pass1``, ``store_tm``): pass 1b as layout
    # copies (``bwd_states_parallel_kernel.GdnBwdStatesFold``) of what the forward prep (``GdnParallelPrepKey.bwd_tm``: Tm
    # into its qg tile) and state pass (h, vnt) already wrote; no kernel of this module reads it (their PTX is unchanged)
    fold_prep_tm: bool = False
    # ---- grads_v2 (session 10, issue #7; gdn/bwd_api.py ``plan.grads_v2``, the default with ``store_tm``): pass 3 as
    # ``chunk_bwd_v2_kernel.GdnBwdGradsV2`` (two warpgroups per CTA; the arguments, workspace arrays, outputs and roundings
    # of ``chunk_bwd_kernel.GdnBwdGrads``); no kernel of this module reads it (their PTX is unchanged)
    grads_v2: bool = False
    # ---- mn_operands (session 11, issue #7; plan default since 12, gdn/bwd_api.py ``plan.mn_operands``; requires ``grads_v2``): pass 3 v2
    # reads its transposed operands (K^T, Q^T, dVn^T, dWm^T, S0^T, dS1^T, Tm^T, dP~^T) as MN-major WGMMA operands of
    # the row-major tiles instead of writing transposed copies; read by pass 3 v2 only
    mn_operands: bool = False


def states_shared_storage(l_ck, l_kc, l_cc):
    """The shared-memory struct of pass 1 (serial :class:`GdnBwdStates` and chunk-parallel
    ``bwd_states_parallel_kernel.GdnBwdStatesChunk``): host side, built once per ``__call__``."""
    return bwd.smem_struct(
        dict(smem_k=l_ck, smem_w=l_ck, smem_s=l_ck, smem_kt=l_kc, smem_tm=l_cc, smem_vt=l_cc, smem_vnt=l_cc),
        dict(smem_a=CHUNK * (CHUNK + 1), smem_t=CHUNK * (CHUNK + 1), smem_m=SOLVE_BLOCK * (CHUNK + 1), smem_g=CHUNK, smem_gc=CHUNK, smem_beta=CHUNK),
    )


@cute.jit
def states_smem(SharedStorage: cutlass.Constexpr, l_ck: cute.ComposedLayout, l_kc: cute.ComposedLayout, l_cc: cute.ComposedLayout):
    """Pass 1's shared tensors (:func:`states_shared_storage`): ``(sK, sW, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sG, sGc,
    sBeta)``."""
    smem = cutlass.utils.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
    sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)
    sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)
    sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)
    sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    sVT = storage.smem_vt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)
    plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
    sA = storage.smem_a.get_tensor(plain)
    sT = storage.smem_t.get_tensor(plain)
    sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
    sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
    sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
    sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))
    return sK, sW, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sG, sGc, sBeta


@cute.jit
def scaled_k_rows(
    gK: cute.Tensor,
    gV: cute.Tensor | None,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sK: cute.Tensor,
    sKT: cute.Tensor,
    sVT: cute.Tensor,
    t0: Int32,
    eos: Int32,
    n_valid: Int32,
    row: Int32,
    half: Int32,
    hk: Int32,
    head: Int32,
    v0: Int32,
    l2norm: cutlass.Constexpr[bool],
    D: cutlass.Constexpr[int],
):
    """Pass 1's row block: this thread's half of key row ``row`` (zero past the sequence's end, optionally
    L2-normalised) -> ``sK`` and ``sKT = (beta exp(G) K)^T``; with ``gV`` also the value half row of V slice ``v0`` ->
    ``sVT = (beta V)^T`` (loaded between the k load and its use: the serial pass's order). Published. Returns
    ``(t_row, keep, g_row, b_row)``."""
    HALF = D // 2
    t_row, keep = row_guard(t0, row, n_valid, eos)
    g_row = sGc[row]
    b_row = sBeta[row]
    NV = HALF // VEC
    rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
    load_half_row(gK, rbuf, t_row, hk, half, NV)
    vbuf = None
    if const_expr(gV is not None):
        vbuf = load_v_half_row(gV, t_row, head, v0, half)
    inv_k = _row_scale(rbuf, keep, l2norm, NV, VEC)
    kscale = b_row * cute.math.exp(g_row)
    for vj in cutlass.range_constexpr(NV):
        for e in cutlass.range_constexpr(VEC):
            col = half * HALF + vj * VEC + e
            kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
            sK[row, col] = kn
            sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
    if const_expr(gV is not None):
        store_beta_v_t(sVT, vbuf, row, half, keep, b_row)
    _smem_ready()
    return t_row, keep, g_row, b_row


@cute.jit
def a_tm_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    kk_A: cute.Tensor,
    kk_B: cute.Tensor,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    sA: cute.Tensor,
    sT: cute.Tensor,
    sM: cute.Tensor,
    sTm: cute.Tensor,
    mWsTm: cute.Tensor | None,
    c64: cute.Tensor,
    slot0: Int32,
    ci: Int32,
    head: Int32,
    tidx: Int32,
    vblk: Int32 | None,
    store_tm: cutlass.Constexpr[bool],
):
    """Pass 1's ``A = beta K K^T * exp(G_r - G_c)`` (strictly lower), ``Tm = (I + A)^-1`` (``sTm``, published) and,
    with ``store_tm``, ``Tm`` -> ``mWsTm[slot0 + ci, head]`` from the CTA with ``vblk == 0`` (serial pass; the same in
    every V slice) or from every CTA (``vblk`` None: one CTA per chunk)."""
    _wgmma(mma, acc_a, kk_A, kk_B, True)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        a_val = Float32(0.0)
        if rc[0] > rc[1]:
            a_val = acc_a[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * sBeta[rc[0]]
        sA[rc[0], rc[1]] = a_val
    cute.arch.sync_threads()
    solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
    _smem_ready()
    if const_expr(store_tm):
        if const_expr(vblk is None):
            bwd.tm_to_workspace(mWsTm, sTm, slot0, ci, head, tidx)
        else:
            if vblk == 0:  # Tm of the chunk (the same in every V-slice) for passes 2 and 3
                bwd.tm_to_workspace(mWsTm, sTm, slot0, ci, head, tidx)


class GdnBwdStates(DeltaRuleKernel):
    """Pass 1: the chunk states ``S0`` -> ``ws_h`` and the new values ``Vn`` -> ``ws_vn`` (forward over chunks)."""

    @cute.jit
    def __call__(
        self,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        h0_ptr: cute.Pointer | None,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer | None,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,  # Hk (q, k); H % Hk == 0
        slots: Int32,
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        _, gK, gV = bwd.vec_views(D, k_ptr, k_ptr, v_ptr, T, heads, qk_heads, k_strides, k_strides, v_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, False)
        mCu, mH0, _ = make_seq_state_views(cu_ptr, h0_ptr, None, n_seqs, heads, D, self.key.varlen, self.key.has_initial, False)
        mWsH = bwd.state_views(wsh_ptr, slots, heads, D)
        mWsVn = bwd.token_views(wsvn_ptr, T, heads, D)
        mWsTm = None
        if const_expr(self.key.store_tm):
            mWsTm = bwd.cc_views(wstm_ptr, slots, heads)
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        SharedStorage = states_shared_storage(l_ck, l_kc, l_cc)

        self.kernel(gK, gV, mG, mB, mCu, mH0, mWsH, mWsVn, mWsTm, seq_len, heads // qk_heads, mma, l_ck, l_kc, l_cc, SharedStorage).launch(
            grid=[n_seqs, heads, D // BV], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1
        )

    @cute.kernel
    def kernel(
        self,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        mH0: cute.Tensor | None,
        mWsH: cute.Tensor,
        mWsVn: cute.Tensor,
        mWsTm: cute.Tensor | None,
        seq_len: Int32,
        group: Int32,  # v heads per q/k head
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

        sK, sW, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sG, sGc, sBeta = states_smem(SharedStorage, l_ck, l_kc, l_cc)

        wg = mma.get_slice(0)
        kk_A = wg.make_fragment_A(wg.partition_A(sK))
        kk_B = wg.make_fragment_B(wg.partition_B(sK))
        kt_B, u_A, u_B, vn_A, s0_B, su_A = bwd.states_fragments(wg, sKT, sTm, sVT, sW, sS, sVnT)
        acc_a, acc_b, acc_s, c64 = make_accumulators(mma, wg, tidx, NH)
        load_state(acc_s, sS, mH0, c64, seq, head, v0, NH, self.key.has_initial)

        row = tidx // 2
        half = tidx % 2
        for ci in range(n_chunks):
            t0 = bos + ci * CHUNK
            n_valid = min(eos - t0, CHUNK)
            # S0 of this chunk (bf16, as the operand the forward and pass 3 use) -> ws_h
            bwd.state_to_workspace(mWsH, acc_s, c64, slot0, ci, head, v0, NH)
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            t_row, keep, g_row, b_row = scaled_k_rows(gK, gV, sGc, sBeta, sK, sKT, sVT, t0, eos, n_valid, row, half, hk, head, v0, self.key.l2norm, D)
            a_tm_to_workspace(mma, acc_a, kk_A, kk_B, sGc, sBeta, sA, sT, sM, sTm, mWsTm, c64, slot0, ci, head, tidx, vblk, self.key.store_tm)

            bwd.wy_values_to_workspace(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, mWsVn, c64, t0, n_valid, head, v0, NH)
            g_last = sGc[CHUNK - 1]
            kdec = cute.math.exp(g_last - g_row)
            bwd.decayed_keys_t(sKT, sK, sGc, row, half, kdec, HALF, False)
            _smem_ready()

            decay_c = cute.math.exp(g_last)
            bwd.state_update(mma, acc_s, su_A, kt_B, sS, sGc, c64, decay_c, NH, False)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


class GdnBwdDStates(DeltaRuleKernel):
    """Pass 2: the state gradients ``dS1`` -> ``ws_dh``, ``dVn`` -> ``ws_dvn`` and ``d initial_state`` (reverse over chunks)."""

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
        wstm_ptr: cute.Pointer | None,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,  # Hk (q, k); H % Hk == 0
        slots: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        do_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gDo = bwd.vec_views(D, q_ptr, k_ptr, do_ptr, T, heads, qk_heads, q_strides, k_strides, do_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, False)
        mCu, mDH0, mDHT = make_seq_state_views(cu_ptr, dh0_ptr, dht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_dfinal)
        mWsDh = bwd.state_views(wsdh_ptr, slots, heads, D)
        mWsDvn = bwd.token_views(wsdvn_ptr, T, heads, D)
        mWsTm = None
        if const_expr(self.key.store_tm):
            mWsTm = cute.zipped_divide(bwd.cc_views(wstm_ptr, slots, heads), (1, 1, 1, VEC))  # 16-byte vectors
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        @cute.struct
        class SharedStorage:
            smem_q: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_ds: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_kt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_qst: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_wmt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_tm: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_pt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_dot: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_dvnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_a: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_t: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (CHUNK + 1)], 16]
            smem_m: cute.struct.Align[cute.struct.MemRange[Float32, SOLVE_BLOCK * (CHUNK + 1)], 16]
            smem_g: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
            smem_gc: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]

        self.kernel(gQ, gK, gDo, mG, mB, mCu, mDHT, mDH0, mWsDh, mWsDvn, mWsTm, seq_len, heads // qk_heads, scale, mma, l_ck, l_kc, l_cc, SharedStorage).launch(
            grid=[n_seqs, heads, D // BV], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1
        )

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
        mWsTm: cute.Tensor | None,
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
        sQ = storage.smem_q.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKd = storage.smem_kd.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # K exp(G_C - G) [C, K]
        sDS = storage.smem_ds.get_tensor(l_ck.outer, swizzle=l_ck.inner)  # dS1 [V-slice, K] bf16
        sKT = storage.smem_kt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (beta exp(G) K)^T
        sQsT = storage.smem_qst.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # (scale exp(G) Q)^T
        sWmT = storage.smem_wmt.get_tensor(l_kc.outer, swizzle=l_kc.inner)  # Wm^T
        sTm = storage.smem_tm.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sPT = storage.smem_pt.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # P^T [j, i]
        sDoT = storage.smem_dot.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # dO^T [V-slice, C]
        sDvnT = storage.smem_dvnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # -dVn^T [V-slice, C]
        plain = cute.make_layout((CHUNK, CHUNK), stride=(CHUNK + 1, 1))
        sA = storage.smem_a.get_tensor(plain)
        sT = storage.smem_t.get_tensor(plain)
        sM = storage.smem_m.get_tensor(cute.make_layout((SOLVE_BLOCK, CHUNK), stride=(CHUNK + 1, 1)))
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGc = storage.smem_gc.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))

        wg = mma.get_slice(0)
        kk_A = wg.make_fragment_A(wg.partition_A(sK))
        kk_B = wg.make_fragment_B(wg.partition_B(sK))
        qk_A = wg.make_fragment_A(wg.partition_A(sQ))
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
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            # ---- q, k, dO rows to shared (zero past eos) ---------------------------------------------------
            t_row, keep = row_guard(t0, row, n_valid, eos)
            g_row = sGc[row]
            b_row = sBeta[row]
            g_last = sGc[CHUNK - 1]
            NV = HALF // VEC
            rbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NV)), BFloat16)
            load_half_row(gQ, rbuf, t_row, hk, half, NV)
            inv_q = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            qscale = scale * cute.math.exp(g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    qn = (rbuf[0, 0, e, vj].to(Float32) * inv_q).to(BFloat16)
                    sQ[row, col] = qn
                    sQsT[col % BV, row, col // BV] = (qn.to(Float32) * qscale).to(BFloat16)
            load_half_row(gK, rbuf, t_row, hk, half, NV)
            vbuf = load_v_half_row(gDo, t_row, head, v0, half)
            inv_k = _row_scale(rbuf, keep, self.key.l2norm, NV, VEC)
            kscale = b_row * cute.math.exp(g_row)
            kdec = cute.math.exp(g_last - g_row)
            for vj in cutlass.range_constexpr(NV):
                for e in cutlass.range_constexpr(VEC):
                    col = half * HALF + vj * VEC + e
                    kn = (rbuf[0, 0, e, vj].to(Float32) * inv_k).to(BFloat16)
                    sK[row, col] = kn
                    sKT[col % BV, row, col // BV] = (kn.to(Float32) * kscale).to(BFloat16)
                    sKd[row, col] = (kn.to(Float32) * kdec).to(BFloat16)
            bwd.store_keep_v_t(sDoT, vbuf, row, half, keep)
            _smem_ready()

            # ---- A (strictly lower), P^T; Tm (pass 1's, or recomputed) -------------------------------------
            if const_expr(self.key.store_tm):
                _wgmma(mma, acc_b, qk_A, kk_B, True)
                for i in cutlass.range_constexpr(cute.size(acc_b)):
                    rc = c64[i]
                    p_val = Float32(0.0)
                    if rc[0] >= rc[1]:
                        p_val = acc_b[i] * cute.math.exp(sGc[rc[0]] - sGc[rc[1]]) * scale
                    sPT[rc[1], rc[0]] = p_val.to(BFloat16)
                tbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, CHUNK // 2 // VEC)), BFloat16)
                for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):  # row tidx // 2, half tidx % 2 of Tm: 16-byte loads
                    cute.autovec_copy(
                        mWsTm[(None, None, None, None), (slot0 + ci, head, row, half * (CHUNK // 2 // VEC) + vj)], tbuf[None, None, None, None, vj]
                    )
                for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):
                    for e in cutlass.range_constexpr(VEC):
                        sTm[row, half * (CHUNK // 2) + vj * VEC + e] = tbuf[0, 0, 0, e, vj]
                _smem_ready()
            else:
                a_and_p(mma, acc_a, acc_b, kk_A, qk_A, kk_B, sGc, sBeta, sA, sPT, c64, scale, True)
                solve_unit_lower_blocked(sA, sT, sM, sTm, tidx)
                _smem_ready()

            # ---- Wm^T; dVn = P^T dO + Kd dS1^T ------------------------------------------------------------
            bwd.dvalues_to_workspace(mma, acc_a, acc_b, tm_A, kt_B, pt_A, dot_B, kd_A, ds_B, sWmT, sDvnT, mWsDvn, c64, t0, n_valid, head, v0, NH)

            # ---- dS0 = exp(G_C) dS1 + dO^T (scale exp(G) Q) - dVn^T Wm ------------------------------------
            decay_c = cute.math.exp(g_last)
            bwd.dstate_update(mma, acc_ds, dot_A, qst_B, dvnt_A, wmt_B, sDS, sGc, c64, decay_c, NH, False)

        if const_expr(self.key.has_initial):
            store_final_state(mDH0, acc_ds, c64, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
