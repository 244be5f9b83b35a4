"""The chunk-parallel reverse state pass of both delta-rule backwards (``plan.parallel_pass2``, the default since session 10; sm_90a, CuTe DSL,
WGMMA, TMA): the operand arrays its two kernels exchange, the precompute's shared ``@cute.jit`` blocks, and the
narrow reverse state kernel :class:`DeltaRuleBwdDStatesChain` (one class for Gated DeltaNet and Kimi Delta Attention:
its per-chunk chain reads the decay as per-key-channel ``exp(G_C)`` [K], which the GDN precompute broadcasts).

Pass 2 of the serial backwards (``{kda,gdn}/bwd_states_kernel.py::*BwdDStates``) walks every chunk in reverse, one CTA
per (sequence, head, 64-row V slice), computing per chunk (dS1: the gradient of the state leaving the chunk)::

    dVn = P^T dO + Kd dS1^T                                     Kd = K exp(G_C - G)     [tokens, K]
    dS0 = dS1 Diag(exp G_C) + dO^T Qs - dVn^T Wm                 Qs = scale exp(G) Q,  Wm = Tm (beta exp(G) K)

Only the ``Kd dS1^T`` and ``dS1 decay - dVn^T Wm`` products depend on the previous (later) chunk. With
``parallel_pass2`` the backward splits it in two launches (after the chunk-parallel pass 1, which writes ``ws_tm`` and,
for KDA, ``ws_p``):

1. precompute, one CTA per (chunk, head), in parallel (``kda/`` / ``gdn/bwd_dstates_parallel_kernel.py``): the serial
   pass 2's per-chunk operands with the same arithmetic and bf16 roundings, into the arrays below (per backward slot
   ``n + bos // 64 + ci``, per head):

       kdn  [64, K]  bf16   Kd = K exp(G_C - G)                 (token rows, key channels contiguous)
       dvl  [64, V]  fp32   P^T dO                              (dVn_local; rows past the sequence's end: 0)
       wmt  [K, 64]  bf16   Wm^T = (Tm (beta exp(G) K))^T        (key-channel rows, tokens contiguous)
       qst  [K, 64]  bf16   Qs^T = (scale exp(G) Q)^T
       dot  [V, 64]  bf16   dO^T (tokens past the sequence's end: 0)
       ge   [K]      fp32   exp(G_C) (GDN: the chunk's scalar decay in every channel)

2. the chain, :class:`DeltaRuleBwdDStatesChain`: grid [N, H, V / 32] like the forward's narrow state pass
   (``kda/chunk_parallel_state_narrow_kernel.py``, whose TMA stage ring and transposed-state helpers in
   ``_device/chunk_parallel.py`` it reuses). The CTA holds ``dS^T`` [K, 32] in K / 64 fp32 accumulators (M = 64 key
   channels, N = 32 value rows) and per chunk, newest first, with the six operands TMA-fed through a 3-stage ring::

       ws_dh[slot] rows v0:v0+32 = bf16(dS1)                    (pass 3's operand; the serial pass's layout)
       dVn   = dvl[:, v0:v0+32] + kdn dS1^T                     [64 tokens, 32]: A = kdn [tokens, K], B = dS1 [32, K]
       ws_dvn[t0 + i, head, v0:v0+32] = bf16(dVn) (rows inside the sequence)
       dS0^T = Diag(ge) dS1^T + qst dO[:, v0:v0+32] + wmt (-dVn)   A = qst / wmt [64 K-ch, tokens] x K / 64,
                                                                     B = dot rows [32, tokens], bf16(-dVn)^T [32, tokens]

   and ``d initial_state = dS0`` of the first chunk (fp32), ``d final_state`` as the starting ``dS`` (or 0).

Every product has the serial pass's bf16 operands (the same expressions, rounded once); the values differ from the
serial pass 2's only in the fp32 accumulation order inside the WGMMAs (``dVn`` is ``P^T dO`` rounded to fp32 once
more before ``Kd dS1^T`` is added: no difference in fp32 but the order). Runtime extents are kernel arguments (Rule 4).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync

from .chunk_parallel import (
    init_stage_ring,
    load_state_t,
    state_operand_tma_atoms,
    state_operand_tma_partitions,
    state_pass_fragments,
    state_pass_layouts,
    state_pass_smem,
    state_t_to_smem,
    state_to_workspace,
    store_final_state_t,
    tma_box_partition,
    tma_u_atom,
    wgmma_each_a_into_each,
)
from .delta_rule import BV, CHUNK, THREADS, VEC, k_major_smem_layout, load_v_half_row, make_seq_state_views, sequence_bounds, smem_ready, wgmma
from .delta_rule_bwd import cc_views, gate_views, states_layouts, token_views, vec_views

CHAIN_VW = 32  # value rows of the state per chain CTA
CHAIN_STAGES = 3  # TMA stage ring depth (K = 128: ~190 KB of shared memory)

# The arrays' workspace order and sizes: ``_host/delta_rule_bwd_api.py::P2_ARRAYS``.


def dstates_operand_views(kdn_ptr, dvl_ptr, wmt_ptr, qst_ptr, dot_ptr, ge_ptr, slots, heads, D):
    """The precompute's arrays as tensors ``(mKdn, mDvl, mWmt, mQst, mDot, mGe)`` [slots, heads, ...] (host side of the
    precompute kernels' ``__call__``)."""
    tile = cute.assume(Int64(heads) * (CHUNK * D), divby=CHUNK * D)
    rows_k = cute.make_layout((slots, heads, CHUNK, D), stride=(tile, CHUNK * D, D, 1))
    cols_t = cute.make_layout((slots, heads, D, CHUNK), stride=(tile, CHUNK * D, CHUNK, 1))
    mKdn = cute.make_tensor(kdn_ptr, rows_k)
    mDvl = cute.make_tensor(dvl_ptr, rows_k)
    mWmt = cute.make_tensor(wmt_ptr, cols_t)
    mQst = cute.make_tensor(qst_ptr, cols_t)
    mDot = cute.make_tensor(dot_ptr, cols_t)
    mGe = cute.make_tensor(ge_ptr, cute.make_layout((slots, heads, D), stride=(cute.assume(Int64(heads) * D, divby=D), D, 1)))
    return mKdn, mDvl, mWmt, mQst, mDot, mGe


def prep_views(
    D, q_ptr, k_ptr, do_ptr, g_ptr, beta_ptr, cu_ptr, wstm_ptr, kdn_ptr, dvl_ptr, wmt_ptr, qst_ptr, dot_ptr, ge_ptr,
    T, n_seqs, heads, qk_heads, slots, q_strides, k_strides, do_strides, per_key, varlen,
):  # fmt: skip
    """Host side of both precompute kernels' ``__call__`` (``{kda,gdn}/bwd_dstates_parallel_kernel.py``): q, k, dO as
    16-byte vectors, the gates (``per_key``: KDA's [T, H, K]), ``cu_seqlens``, pass 1's ``ws_tm`` as 16-byte vectors,
    the precompute's arrays (:func:`dstates_operand_views`) and passes 1-2's tiled MMA and shared layouts. Returns
    ``(gQ, gK, gDo, mG, mB, mCu, gWsTm, ops, mma, l_ck, l_kc, l_cc)``."""
    gQ, gK, gDo = vec_views(D, q_ptr, k_ptr, do_ptr, T, heads, qk_heads, q_strides, k_strides, do_strides)
    mG, mB = gate_views(g_ptr, beta_ptr, T, heads, D, per_key)
    mCu, _, _ = make_seq_state_views(cu_ptr, None, None, n_seqs, heads, D, varlen, False, False)
    gWsTm = cute.zipped_divide(cc_views(wstm_ptr, slots, heads), (1, 1, 1, VEC))
    ops = dstates_operand_views(kdn_ptr, dvl_ptr, wmt_ptr, qst_ptr, dot_ptr, ge_ptr, slots, heads, D)
    return (gQ, gK, gDo, mG, mB, mCu, gWsTm, ops, *states_layouts(D))


# ---- precompute blocks (both families' ``bwd_dstates_parallel_kernel.py``) ---------------------------------------------


@cute.jit
def wmt_to_workspace(
    mma: cute.TiledMma,
    acc_b: cute.Tensor,
    tm_A: cute.Tensor,
    kt_B: cute.Tensor,
    mWmt: cute.Tensor,
    c64: cute.Tensor,
    slot: Int32,
    head: Int32,
    nh: cutlass.Constexpr[int],
):
    """``Wm^T = (Tm (beta exp(G) K))^T`` (the serial pass 2's product, bf16) -> ``wmt[slot, head]`` [K, tokens].
    Expects ``sTm`` and ``sKT`` published."""
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_b, tm_A, kt_B[None, None, None, h], True)
        for i in cutlass.range_constexpr(cute.size(acc_b)):
            rc = c64[i]
            mWmt[slot, head, h * BV + rc[1], rc[0]] = acc_b[i].to(BFloat16)


@cute.jit
def decays_to_workspace(mGe: cute.Tensor, sGc: cute.Tensor, slot: Int32, head: Int32, tidx: Int32, D: cutlass.Constexpr[int], per_key: cutlass.Constexpr[bool]):
    """``exp(G_C)`` -> ``ge[slot, head]`` [K]: per key channel from ``sGc`` [C, K] (``per_key``), else the chunk's
    scalar decay ``exp(sGc[C - 1])`` in every channel (the serial passes' ``cute.math.exp`` of the same value)."""
    if tidx < D:
        if const_expr(per_key):
            mGe[slot, head, tidx] = cute.math.exp(sGc[CHUNK - 1, tidx])
        else:
            mGe[slot, head, tidx] = cute.math.exp(sGc[CHUNK - 1])


@cute.jit
def value_slices_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    pt_A: cute.Tensor,
    dot_B: cute.Tensor,
    gDo: cute.Tensor,
    sDoT: cute.Tensor,
    mDot: cute.Tensor,
    mDvl: cute.Tensor,
    c64: cute.Tensor,
    slot: Int32,
    head: Int32,
    t_row: Int32,
    row: Int32,
    half: Int32,
    keep: Float32,
    D: cutlass.Constexpr[int],
):
    """Per 64-channel V slice (a runtime loop): this thread's dO channels of token ``row`` (zero past the sequence's
    end, the serial pass's ``store_keep_v_t``) -> ``sDoT`` and ``dot[slot, head]``; then ``dVn_local = P^T dO`` ->
    fp32 ``dvl[slot, head]`` (all 64 rows). Expects ``sPT`` published."""
    vq = BV // 2
    for vb in cutlass.range(D // BV, unroll=1):
        vbuf = load_v_half_row(gDo, t_row, head, vb * BV, half)
        cute.arch.sync_threads()  # the previous slice's product has read sDoT
        for vj in cutlass.range_constexpr(vq // VEC):
            for e in cutlass.range_constexpr(VEC):
                col = half * vq + vj * VEC + e
                x = (vbuf[0, 0, e, vj].to(Float32) * keep).to(BFloat16)
                sDoT[col, row] = x
                mDot[slot, head, vb * BV + col, row] = x
        smem_ready()
        wgmma(mma, acc_a, pt_A, dot_B, True)
        for i in cutlass.range_constexpr(cute.size(acc_a)):
            rc = c64[i]
            mDvl[slot, head, rc[0], vb * BV + rc[1]] = acc_a[i]


# ---- the chain ---------------------------------------------------------------------------------------------------------


class DeltaRuleBwdDStatesChain:
    """The reverse state chain of ``parallel_pass2`` (module docstring), both families: ``__init__`` holds the compile
    key (``KdaBwdKey`` / ``GdnBwdKey``: ``head_dim``, ``varlen``, ``has_initial``, ``has_dfinal`` are read),
    ``__call__`` builds the TMA atoms and launches grid [N, H, V / 32], ``kernel`` walks the chunks."""

    def __init__(self, key):
        assert key.head_dim in (64, 128)
        self.key = key
        self.D = key.head_dim
        self.VW = CHAIN_VW
        self.STAGES = CHAIN_STAGES

    @cute.jit
    def __call__(
        self,
        cu_ptr: cute.Pointer | None,
        dht_ptr: cute.Pointer | None,
        dh0_ptr: cute.Pointer | None,
        kdn_ptr: cute.Pointer,
        dvl_ptr: cute.Pointer,
        wmt_ptr: cute.Pointer,
        qst_ptr: cute.Pointer,
        dot_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        wsdh_ptr: cute.Pointer,
        wsdvn_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        slots: Int32,
        stream: cuda.CUstream,
    ):
        D = self.D
        VW = self.VW
        STAGES = self.STAGES
        mCu, mDH0, mDHT = make_seq_state_views(cu_ptr, dh0_ptr, dht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_dfinal)
        mDH = cute.make_tensor(wsdh_ptr, cute.make_layout((slots, heads, D, D), stride=(cute.assume(Int64(heads) * (D * D), divby=D * D), D * D, D, 1)))
        mDvn = token_views(wsdvn_ptr, T, heads, D)

        # dS1 [vw, K], kdn [tokens, K] x stages, wmt / qst [64 K-ch, tokens] x K/64 x stages, -dVn^T [vw, tokens]
        mma, l_s, l_w, l_kc, l_vt = state_pass_layouts(D, VW, STAGES)
        l_u = cute.tile_to_shape(tma_u_atom(VW), (CHUNK, VW, STAGES), order=(0, 1, 2))  # dvl columns [tokens, vw] fp32
        l_do = k_major_smem_layout(VW, CHUNK, STAGES)  # dO^T rows [vw, tokens]
        rows = slots * heads
        # kdn, dvl, wmt, ge through the forward state pass's atoms (its -Wm, U, kd, exp(G_C): the same shapes)
        atoms = state_operand_tma_atoms(kdn_ptr, dvl_ptr, wmt_ptr, ge_ptr, rows, D, VW, cute.slice_(l_u, (None, None, 0)))
        g2s_op = cpasync.CopyBulkTensorTileG2SOp()
        mQ2 = cute.make_tensor(qst_ptr, cute.make_layout((rows * D, CHUNK), stride=(CHUNK, 1)))
        mO2 = cute.make_tensor(dot_ptr, cute.make_layout((rows * D, CHUNK), stride=(CHUNK, 1)))
        atom_q, tma_q = cpasync.make_tiled_tma_atom(g2s_op, mQ2, k_major_smem_layout(CHUNK, CHUNK), (CHUNK, CHUNK))
        atom_o, tma_o = cpasync.make_tiled_tma_atom(g2s_op, mO2, k_major_smem_layout(VW, CHUNK), (VW, CHUNK))
        tma = (*atoms, atom_q, tma_q, atom_o, tma_o)

        @cute.struct
        class SharedStorage:
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_w)], 1024]
            smem_kd: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_qs: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_kc)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vt)], 1024]
            smem_do: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_do)], 1024]
            smem_u: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(l_u)], 1024]
            smem_ge: cute.struct.Align[cute.struct.MemRange[Float32, D * STAGES], 128]
            mbar: cute.struct.MemRange[Int64, STAGES]

        self.kernel(mCu, mDH0, mDHT, mDH, mDvn, tma, seq_len, heads, mma, l_s, l_w, l_kc, l_vt, l_u, l_do, SharedStorage).launch(
            grid=[n_seqs, heads, D // VW], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1
        )

    @cute.kernel
    def kernel(
        self,
        mCu: cute.Tensor | None,
        mDH0: cute.Tensor | None,
        mDHT: cute.Tensor | None,
        mDH: cute.Tensor,
        mDvn: cute.Tensor,
        tma: tuple,
        seq_len: Int32,
        heads: Int32,
        mma: cute.TiledMma,
        l_s: cute.ComposedLayout,
        l_w: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_vt: cute.ComposedLayout,
        l_u: cute.ComposedLayout,
        l_do: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        VW = self.VW
        NH = D // BV
        STAGES = self.STAGES
        tidx, _, _ = cute.arch.thread_idx()
        seq, head, vblk = cute.arch.block_idx()
        v0 = vblk * VW
        bos, eos = sequence_bounds(mCu, seq, seq_len, self.key.varlen)
        n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
        base = seq + bos // CHUNK  # the backward's slot of the sequence's first chunk

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sS, sW, sKD, sVnT = state_pass_smem(storage, l_s, l_w, l_kc, l_vt)  # dS1, kdn, wmt, -dVn^T
        sQS = storage.smem_qs.get_tensor(l_kc.outer, swizzle=l_kc.inner)
        sDO = storage.smem_do.get_tensor(l_do.outer, swizzle=l_do.inner)
        sU = storage.smem_u.get_tensor(l_u.outer, swizzle=l_u.inner)
        sGE = storage.smem_ge.get_tensor(cute.make_layout((D, STAGES)))

        w_A, s0_B, kd_A, vn_B = state_pass_fragments(mma, sW, sS, sKD, sVnT)  # kdn (x stages), dS1, wmt (x K/64 x stages), -dVn^T
        wg = mma.get_slice(0)
        qs_A = wg.make_fragment_A(wg.partition_A(sQS))
        do_B = wg.make_fragment_B(wg.partition_B(sDO))
        acc_v = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, VW)), Float32)  # dVn [tokens, vw]
        acc_t = [cute.make_rmem_tensor(wg.partition_shape_C((BV, VW)), Float32) for _ in range(NH)]  # dS^T [64 K-ch, vw] x K/64
        ct = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, VW)))

        atom_w, tma_w, atom_kd, tma_kd, atom_u, tma_u, atom_ge, tma_ge, atom_q, tma_q, atom_o, tma_o = tma
        # kdn, wmt, dvl columns, ge, qst, dO^T rows
        tx_bytes = CHUNK * D * 2 + D * CHUNK * 2 + CHUNK * VW * 4 + D * 4 + D * CHUNK * 2 + VW * CHUNK * 2
        mbar = storage.mbar.data_ptr()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        init_stage_ring((atom_w, atom_kd, atom_u, atom_ge, atom_q, atom_o), mbar, warp, STAGES, 0)
        tWs, tWg, tKs, tKg, tUs, tUg, tGs, tGg = state_operand_tma_partitions(
            atom_w, tma_w, sW, atom_kd, tma_kd, sKD, atom_u, tma_u, sU, atom_ge, tma_ge, sGE, D, VW, STAGES
        )
        tQs, tQg = tma_box_partition(atom_q, sQS, tma_q, (CHUNK, CHUNK))
        tOs, tOg = tma_box_partition(atom_o, sDO, tma_o, (VW, CHUNK))
        parts = (atom_w, tWg, tWs, atom_kd, tKg, tKs, atom_u, tUg, tUs, atom_ge, tGg, tGs, atom_q, tQg, tQs, atom_o, tOg, tOs)

        load_state_t(acc_t, sS, mDHT, ct, seq, head, v0, NH, self.key.has_dfinal)  # dS = d final_state (or 0)
        smem_ready()  # dS1 and the initialized mbarriers published before any thread uses them

        # stages 0 .. STAGES - 2 <- the last STAGES - 1 chunks (those that exist), newest first
        if warp == 0:
            for j in cutlass.range_constexpr(STAGES - 1):
                if j < n_chunks:
                    self.fetch(parts, (base + n_chunks - 1 - j) * heads + head, vblk, j, mbar, tx_bytes)

        for cp in range((n_chunks + (STAGES - 1)) // STAGES):
            for st in cutlass.range_constexpr(STAGES):
                cr = cp * STAGES + st  # walk position: chunk n_chunks - 1 - cr
                if cr < n_chunks:
                    ci = n_chunks - 1 - cr
                    slot = base + ci
                    t0 = bos + ci * CHUNK
                    n_valid = min(eos - t0, CHUNK)
                    nxt = (st + STAGES - 1) % STAGES  # the stage the previous walk chunk used: its readers are done
                    if warp == 0:
                        if cr + STAGES - 1 < n_chunks:
                            self.fetch(parts, (slot - (STAGES - 1)) * heads + head, vblk, nxt, mbar, tx_bytes)
                    state_to_workspace(sS, mDH, slot, head, vblk, tidx, VW, NH)  # dS1 (bf16) -> ws_dh rows v0:v0+vw
                    cute.arch.mbarrier_wait(mbar + st, cp % 2)  # this chunk's operands have landed in stage st

                    # ---- dVn = P^T dO + Kd dS1^T [tokens, vw] -> ws_dvn, and bf16(-dVn)^T -> sVnT ----------------------
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = ct[i]
                        acc_v[i] = sU[rc[0], rc[1], st]
                    wgmma(mma, acc_v, w_A[None, None, None, st], s0_B, False)
                    for i in cutlass.range_constexpr(cute.size(acc_v)):
                        rc = ct[i]
                        dvn = acc_v[i].to(BFloat16)
                        sVnT[rc[1], rc[0]] = (-(dvn.to(Float32))).to(BFloat16)
                        if rc[0] < n_valid:
                            mDvn[t0 + rc[0], head, v0 + rc[1]] = dvn
                    smem_ready()

                    # ---- dS0^T = Diag(exp G_C) dS1^T + Qs^T dO + Wm^T (-dVn): K / 64 tiles, two WGMMA groups ---------
                    for h in cutlass.range_constexpr(NH):
                        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
                            kr = ct[i]
                            acc_t[h][i] = acc_t[h][i] * sGE[h * BV + kr[0], st]
                    wgmma_each_a_into_each(mma, acc_t, qs_A, do_B[None, None, None, st], st * NH)
                    wgmma_each_a_into_each(mma, acc_t, kd_A, vn_B, st * NH)
                    state_t_to_smem(sS, acc_t, ct, NH)
                    smem_ready()  # the new dS1 is visible to every thread and to WGMMA; this stage's readers are done

        if const_expr(self.key.has_initial):
            store_final_state_t(mDH0, acc_t, ct, seq, head, v0, NH)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def fetch(self, parts: tuple, row: Int32, vblk: Int32, st: cutlass.Constexpr[int], mbar: cute.Pointer, tx_bytes: cutlass.Constexpr[int]):
        """Warp 0: arm stage ``st``'s transaction mbarrier for ``tx_bytes`` (one elected lane), then the TMA copies of
        workspace row ``row`` (slot x heads + head): kdn, wmt, qst (K / 64 boxes each), the dvl columns and dO^T rows of
        value block ``vblk``, ge."""
        NH = self.D // BV
        atom_w, tWg, tWs, atom_kd, tKg, tKs, atom_u, tUg, tUs, atom_ge, tGg, tGs, atom_q, tQg, tQs, atom_o, tOg, tOs = parts
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(mbar + st, tx_bytes)
        for h in cutlass.range_constexpr(NH):
            cute.copy(atom_w, tWg[None, row, h], tWs[None, 0, h, st], tma_bar_ptr=mbar + st)
            cute.copy(atom_kd, tKg[None, row * NH + h, 0], tKs[None, st * NH + h], tma_bar_ptr=mbar + st)
            cute.copy(atom_q, tQg[None, row * NH + h, 0], tQs[None, st * NH + h], tma_bar_ptr=mbar + st)
        cute.copy(atom_u, tUg[None, row, vblk], tUs[None, st], tma_bar_ptr=mbar + st)
        cute.copy(atom_o, tOg[None, row * (self.D // self.VW) + vblk, 0], tOs[None, st], tma_bar_ptr=mbar + st)
        cute.copy(atom_ge, tGg[None, row, 0], tGs[None, st], tma_bar_ptr=mbar + st)
