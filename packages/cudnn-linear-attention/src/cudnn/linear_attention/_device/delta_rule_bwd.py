"""Device blocks shared by the gated-delta-rule backward kernels (Gated DeltaNet, Kimi Delta Attention): ``@cute.jit``
helpers only (inlined at trace time; each kernel's PTX is what it was with the block written out in place), plus the
host-side workspace views their ``__call__`` builds.

The two families differ only by the decay: Gated DeltaNet's is one scalar per token (``sGc`` [C], the chunk's decay
``exp(G_C)`` one number), Kimi Delta Attention's one per key channel (``sGc`` [C, K]); the blocks below take
``per_key`` (a constexpr) for that difference and otherwise run the same instructions in the same order.

Host side (plain functions of the launchers' ``__call__``, no device code): :func:`state_views`, :func:`cc_views`,
:func:`token_views` (the workspace arrays), :func:`vec_views` (q, k, v / dO as 16-byte vectors), :func:`gate_views`
(g, beta), :func:`states_layouts` (passes 1-2's tiled MMA and shared layouts) and :func:`smem_struct` (a shared-memory
struct from its field list).

Device blocks:

- :func:`bwd_cta`: the CTA's coordinates, sequence bounds, chunk count and first workspace slot (all three passes);
- :func:`state_to_workspace`: the state slice S[v0:v0+64, :] (``nh`` fp32 64 x 64 accumulators) -> bf16
  ``ws[slot0 + ci, head, v0:v0+64, :]`` (pass 1's chunk states, pass 2's state gradients; read back by the later passes);
- :func:`tm_to_workspace`: the chunk's ``Tm`` (bf16, shared) -> ``ws_tm`` (pass 1, the V-slice 0 CTA);
- :func:`wy_values_to_workspace`: pass 1's ``U``, ``-Wm``, ``Vn = U - Wm S0^T`` -> ``sVnT`` and ``ws_vn``;
- :func:`decayed_keys_t`: ``(K exp(G_C - G))^T`` -> ``sKT`` (pass 1's state-update operand);
- :func:`state_update`: pass 1's ``S1 = S0 decay(G_C) + Vn^T (K exp(G_C - G))`` and its bf16 copy;
- :func:`store_keep_v_t`: this thread's dO channels (zero past the sequence's end) transposed to shared;
- :func:`dvalues_to_workspace`: pass 2's ``Wm^T`` and ``dVn = P^T dO + Kd dS1^T`` -> ``-dVn^T`` and ``ws_dvn``;
- :func:`dstate_update`: pass 2's ``dS0 = dS1 decay(G_C) + dO^T (scale exp(G) Q) - dVn^T Wm`` and its bf16 copy;
- :func:`states_fragments`, :func:`dstates_fragments`: the WGMMA operands passes 1 and 2 share;
- :func:`rows_to_smem`: pass 3's row loader (rows past the sequence's end as zero, row-major and / or transposed);
- :func:`dwm_and_dv`: pass 3's ``dWm = -dVn S0`` and ``dV = beta Tm^T dVn`` with the ``dbeta`` row sums;
- :func:`grads_chunk`: pass 3's chunk bounds and workspace slot;
- :func:`tm_row_load`, :func:`tm_row_store`: pass 3's Tm row (workspace -> registers -> shared, with the transpose);
- :func:`scalar_dg_dbeta`: pass 3's (GDN) reverse cumsum of dg over the chunk and the dbeta store.

The chunk-parallel pass 1 (``{kda,gdn}/bwd_states_parallel_kernel.py``, ``parallel_pass1``, the default since session 10): host side
:func:`state_views_aligned`, :func:`forward_state_views`; device :func:`chunk_cta` (the CTA's chunk), :func:`chunk_slot` (its end and backward slot),
:func:`forward_state_to_smem_and_workspace` (the forward's ``S0`` -> shared and ``ws_h``), :func:`vslices_to_workspace`
(the V-slice loop: ``S0``, ``(beta V)^T``, ``U``, ``-Wm``, ``Vn`` -> ``ws_vn``); host :func:`chunk_pass1_views`.
Its ``fold_prep_tm`` pass 1b (both families): host :func:`fold_views`, :func:`fold_cc_vectors`,
:func:`fold_shared_storage`; device :func:`tiles_copy`, :func:`fold_chunk` (the whole kernel body) and
:class:`StatesFoldKernel` (the ``@cute.kernel`` ``{Kda,Gdn}BwdStatesFold`` share; their PTX, symbols included, is
byte-identical to the per-family kernels they replace).

Pass 3's host launch: :class:`GradsLaunch` (``__call__``: the argument list all four pass-3 kernel classes declare, v1 and v2
of both families; the global views and the launch; the per-class CTA size, state / Tm views and shared struct as hooks;
the v1 and v2 PTX byte-identical to the per-class ``__call__`` it replaces, session 10).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .chunk_parallel import slot_chunk
from .delta_rule import (
    BV,
    CHUNK,
    THREADS,
    VEC,
    DeltaRuleKernel,
    gate_views,
    k_major_smem_layout,
    load_v_half_row,
    make_mma_n64,
    make_seq_state_views,
    sequence_bounds,
    smem_ready,
    state_to_smem,
    store_beta_v_t,
    wgmma,
    wy_new_values,
)


def states_layouts(D):
    """``(mma, l_ck, l_kc, l_cc)`` of passes 1 and 2: the tiled MMA and the swizzled shared layouts [C, D], [64, C] x
    D / 64 and [C, C] (host side, in the launchers' ``__call__``)."""
    mma = make_mma_n64()
    l_ck = k_major_smem_layout(CHUNK, D)
    l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)
    l_cc = k_major_smem_layout(CHUNK, CHUNK)
    return mma, l_ck, l_kc, l_cc


def smem_struct(bf16_tiles: dict, f32_sizes: dict):
    """A shared-memory ``cute.struct`` built on the host: the bf16 swizzled tiles first (name -> layout, 1024-byte
    aligned, in order), then the fp32 arrays (name -> element count, 16-byte aligned, in order)."""
    fields = {name: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(layout)], 1024] for name, layout in bf16_tiles.items()}
    fields.update({name: cute.struct.Align[cute.struct.MemRange[Float32, n], 16] for name, n in f32_sizes.items()})
    return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))


def grads_views(dq_ptr, dk_ptr, dv_ptr, g_ptr, beta_ptr, dg_ptr, dbeta_ptr, cu_ptr, T, n_seqs, heads, D, dq_strides, dk_strides, dv_strides, per_key, varlen):
    """Pass 3's global views (host side, both families): ``(mDq, mDk, mDv, mG, mB, mDg, mDb, mCu)``, dq / dk / dv
    [T, H, D] with (token, head) strides, the gates (:func:`gate_views`) and their gradients (``dg`` shaped as ``g``),
    ``cu_seqlens`` (None unless ``varlen``)."""
    mDq = cute.make_tensor(dq_ptr, cute.make_layout((T, heads, D), stride=(dq_strides[0], dq_strides[1], 1)))
    mDk = cute.make_tensor(dk_ptr, cute.make_layout((T, heads, D), stride=(dk_strides[0], dk_strides[1], 1)))
    mDv = cute.make_tensor(dv_ptr, cute.make_layout((T, heads, D), stride=(dv_strides[0], dv_strides[1], 1)))
    mG, mB = gate_views(g_ptr, beta_ptr, T, heads, D, per_key)
    if per_key:
        mDg = cute.make_tensor(dg_ptr, cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1)))
    else:
        mDg = cute.make_tensor(dg_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
    mDb = cute.make_tensor(dbeta_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
    mCu = None
    if varlen:
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
    return mDq, mDk, mDv, mG, mB, mDg, mDb, mCu


def grads_layouts(D):
    """Pass 3's tiled MMA and shared-memory layouts (host side, both families): ``(mma, l_ck, l_kc, l_kv, l_cc)``."""
    mma = make_mma_n64()
    l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, D]
    l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # [64 channels, tokens] x D / 64
    l_kv = k_major_smem_layout(CHUNK, D, D // BV)  # [64 K-channels, V] x K / 64: S0^T, dS1^T
    l_cc = k_major_smem_layout(CHUNK, CHUNK)
    return mma, l_ck, l_kc, l_kv, l_cc


def state_views(ptr, slots, heads, D):
    """A workspace array [slots, H, D, D] (bf16, contiguous)."""
    return cute.make_tensor(ptr, cute.make_layout((slots, heads, D, D), stride=(Int64(heads) * (D * D), D * D, D, 1)))


def cc_views(ptr, slots, heads):
    """A workspace array [slots, H, 64, 64] (Tm or P, bf16, contiguous)."""
    return cute.make_tensor(ptr, cute.make_layout((slots, heads, CHUNK, CHUNK), stride=(Int64(heads) * (CHUNK * CHUNK), CHUNK * CHUNK, CHUNK, 1)))


def token_views(ptr, T, heads, D):
    """A workspace array [T, H, D] (bf16, contiguous)."""
    return cute.make_tensor(ptr, cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1)))


def vec_views(D, q_ptr, k_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides):
    """q, k [T, Hk, D] and v (or dO) [T, H, D] as 16-byte vectors ((1, 1, VEC), (T, heads, D / VEC))."""
    mQ = cute.make_tensor(q_ptr, cute.make_layout((T, qk_heads, D), stride=(cute.assume(q_strides[0], divby=VEC), cute.assume(q_strides[1], divby=VEC), 1)))
    mK = cute.make_tensor(k_ptr, cute.make_layout((T, qk_heads, D), stride=(cute.assume(k_strides[0], divby=VEC), cute.assume(k_strides[1], divby=VEC), 1)))
    mV = cute.make_tensor(v_ptr, cute.make_layout((T, heads, D), stride=(cute.assume(v_strides[0], divby=VEC), cute.assume(v_strides[1], divby=VEC), 1)))
    return cute.zipped_divide(mQ, (1, 1, VEC)), cute.zipped_divide(mK, (1, 1, VEC)), cute.zipped_divide(mV, (1, 1, VEC))


@cute.jit
def bwd_cta(mCu: cute.Tensor | None, seq_len: Int32, group: Int32, varlen: cutlass.Constexpr[bool]):
    """``(tidx, seq, head, vblk, hk, v0, bos, eos, n_chunks, slot0)`` of this thread and CTA (grid ``[N, H, V / 64]``):
    the q/k head it reads (``head // group``, ``group`` = H / Hk), its first value channel, the sequence's token range,
    its chunk count and the workspace slot of its first chunk (``seq + bos // 64``)."""
    tidx, _, _ = cute.arch.thread_idx()
    seq, head, vblk = cute.arch.block_idx()
    hk = head // group
    v0 = vblk * BV
    bos, eos = sequence_bounds(mCu, seq, seq_len, varlen)
    n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
    slot0 = seq + bos // CHUNK
    return tidx, seq, head, vblk, hk, v0, bos, eos, n_chunks, slot0


@cute.jit
def state_to_workspace(mWs: cute.Tensor, acc_s: list, c64: cute.Tensor, slot0: Int32, ci: Int32, head: Int32, v0: Int32, nh: cutlass.Constexpr[int]):
    """``mWs[slot0 + ci, head, v0 + r, h * 64 + c] = bf16(acc_s[h][(r, c)])`` for this thread's accumulator elements
    (chunk ``ci`` of the sequence whose slots start at ``slot0``; the slot is formed per element, as the kernels did
    inline, so the PTX keeps its instruction order)."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
            rc = c64[i]
            mWs[slot0 + ci, head, v0 + rc[0], h * BV + rc[1]] = acc_s[h][i].to(BFloat16)


@cute.jit
def tm_to_workspace(mWsTm: cute.Tensor, sTm: cute.Tensor, slot0: Int32, ci: Int32, head: Int32, tidx: Int32):
    """The chunk's bf16 ``Tm`` [64, 64] (shared) -> ``mWsTm[slot0 + ci, head]`` (the caller picks the one CTA that writes)."""
    for s in cutlass.range_constexpr(CHUNK * CHUNK // THREADS):
        idx = tidx + THREADS * s
        mWsTm[slot0 + ci, head, idx // CHUNK, idx % CHUNK] = sTm[idx // CHUNK, idx % CHUNK]


@cute.jit
def wy_values_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    acc_b: cute.Tensor,
    u_A: cute.Tensor,
    u_B: cute.Tensor,
    kt_B: cute.Tensor,
    vn_A: cute.Tensor,
    s0_B: cute.Tensor,
    sW: cute.Tensor,
    sVnT: cute.Tensor,
    mWsVn: cute.Tensor,
    c64: cute.Tensor,
    t0: Int32,
    n_valid: Int32,
    head: Int32,
    v0: Int32,
    nh: cutlass.Constexpr[int],
):
    """Pass 1: :func:`.delta_rule.wy_new_values`, then ``Vn`` -> bf16 ``sVnT`` (transposed) and, rows inside the
    sequence, ``ws_vn``."""
    wy_new_values(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, c64, nh)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        vn = acc_a[i].to(BFloat16)
        sVnT[rc[1], rc[0]] = vn
        if rc[0] < n_valid:
            mWsVn[t0 + rc[0], head, v0 + rc[1]] = vn


@cute.jit
def decayed_keys_t(
    sKT: cute.Tensor,
    sK: cute.Tensor,
    sGc: cute.Tensor,
    row: Int32,
    half: Int32,
    kdec: Float32 | None,
    half_d: cutlass.Constexpr[int],
    per_key: cutlass.Constexpr[bool],
):
    """``sKT[col % 64, row, col // 64] = bf16(K[row, col] exp(G_C - G[row]))`` over this thread's half row: the decay
    ``kdec`` of the row (scalar gate), or per key channel from ``sGc`` [C, K] (``per_key``, ``kdec`` unused)."""
    for j in cutlass.range_constexpr(half_d):
        col = half * half_d + j
        d = kdec
        if const_expr(per_key):
            d = cute.math.exp(sGc[CHUNK - 1, col] - sGc[row, col])
        sKT[col % BV, row, col // BV] = (sK[row, col].to(Float32) * d).to(BFloat16)


@cute.jit
def decay_accumulator(
    acc: cute.Tensor, sGc: cute.Tensor, c64: cute.Tensor, h: cutlass.Constexpr[int], decay_c: Float32 | None, per_key: cutlass.Constexpr[bool]
):
    """``acc *= exp(G_C)`` for the state block of key channels ``64 h .. 64 h + 63``: ``decay_c`` (scalar gate), or per
    key channel from ``sGc`` [C, K] (``per_key``)."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        if const_expr(per_key):
            rc = c64[i]
            acc[i] = acc[i] * cute.math.exp(sGc[CHUNK - 1, h * BV + rc[1]])
        else:
            acc[i] = acc[i] * decay_c


@cute.jit
def state_update(
    mma: cute.TiledMma,
    acc_s: list,
    su_A: cute.Tensor,
    kt_B: cute.Tensor,
    sS: cute.Tensor,
    sGc: cute.Tensor,
    c64: cute.Tensor,
    decay_c: Float32 | None,
    nh: cutlass.Constexpr[int],
    per_key: cutlass.Constexpr[bool],
):
    """Pass 1: ``S1 = S0 decay(G_C) + Vn^T (K exp(G_C - G))`` in the accumulators, then bf16 -> ``sS`` (published)."""
    for h in cutlass.range_constexpr(nh):
        decay_accumulator(acc_s[h], sGc, c64, h, decay_c, per_key)
        wgmma(mma, acc_s[h], su_A, kt_B[None, None, None, h], False)
    cute.arch.sync_threads()
    state_to_smem(sS, acc_s, c64, nh)
    smem_ready()


@cute.jit
def store_keep_v_t(sXT: cute.Tensor, vbuf: cute.Tensor, row: Int32, half: Int32, keep: Float32):
    """This thread's 32 value channels of token ``row`` (``vbuf``, as :func:`.delta_rule.load_v_half_row` loads them)
    times ``keep`` (0 past the sequence's end) into ``sXT`` [64 channels, tokens]."""
    vq = BV // 2
    for vj in cutlass.range_constexpr(vq // VEC):
        for e in cutlass.range_constexpr(VEC):
            col = half * vq + vj * VEC + e
            sXT[col, row] = (vbuf[0, 0, e, vj].to(Float32) * keep).to(BFloat16)


@cute.jit
def dvalues_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    acc_b: cute.Tensor,
    tm_A: cute.Tensor,
    kt_B: cute.Tensor,
    pt_A: cute.Tensor,
    dot_B: cute.Tensor,
    kd_A: cute.Tensor,
    ds_B: cute.Tensor,
    sWmT: cute.Tensor,
    sDvnT: cute.Tensor,
    mWsDvn: cute.Tensor,
    c64: cute.Tensor,
    t0: Int32,
    n_valid: Int32,
    head: Int32,
    v0: Int32,
    nh: cutlass.Constexpr[int],
):
    """Pass 2: ``Wm^T = (Tm (beta exp(G) K))^T`` -> bf16 ``sWmT``; ``dVn = P^T dO + Kd dS1^T`` -> ``-dVn^T`` (bf16
    ``sDvnT``) and, rows inside the sequence, ``ws_dvn``; published."""
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_b, tm_A, kt_B[None, None, None, h], True)
        for i in cutlass.range_constexpr(cute.size(acc_b)):
            rc = c64[i]
            sWmT[rc[1], rc[0], h] = acc_b[i].to(BFloat16)
    wgmma(mma, acc_a, pt_A, dot_B, True)
    wgmma(mma, acc_a, kd_A, ds_B, False)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        dvn = acc_a[i].to(BFloat16)
        sDvnT[rc[1], rc[0]] = (-(dvn.to(Float32))).to(BFloat16)
        if rc[0] < n_valid:
            mWsDvn[t0 + rc[0], head, v0 + rc[1]] = dvn
    smem_ready()


@cute.jit
def dstate_update(
    mma: cute.TiledMma,
    acc_ds: list,
    dot_A: cute.Tensor,
    qst_B: cute.Tensor,
    dvnt_A: cute.Tensor,
    wmt_B: cute.Tensor,
    sDS: cute.Tensor,
    sGc: cute.Tensor,
    c64: cute.Tensor,
    decay_c: Float32 | None,
    nh: cutlass.Constexpr[int],
    per_key: cutlass.Constexpr[bool],
):
    """Pass 2: ``dS0 = dS1 decay(G_C) + dO^T (scale exp(G) Q) - dVn^T Wm`` in the accumulators, then bf16 -> ``sDS``
    once every reader of ``dS1`` there has completed (published)."""
    for h in cutlass.range_constexpr(nh):
        decay_accumulator(acc_ds[h], sGc, c64, h, decay_c, per_key)
        wgmma(mma, acc_ds[h], dot_A, qst_B[None, None, None, h], False)
        wgmma(mma, acc_ds[h], dvnt_A, wmt_B[None, None, None, h], False)
    cute.arch.sync_threads()
    state_to_smem(sDS, acc_ds, c64, nh)
    smem_ready()


@cute.jit
def states_fragments(wg: cute.ThrMma, sKT: cute.Tensor, sTm: cute.Tensor, sVT: cute.Tensor, sW: cute.Tensor, sS: cute.Tensor, sVnT: cute.Tensor):
    """Pass 1's WGMMA operands from the warpgroup slice ``wg``: ``(kt_B, u_A, u_B, vn_A, s0_B, su_A)`` = (beta K exp G)^T
    (later (K exp(G_C - G))^T), Tm, (beta V)^T, -Wm, S0, Vn^T."""
    kt_B = wg.make_fragment_B(wg.partition_B(sKT))
    u_A = wg.make_fragment_A(wg.partition_A(sTm))
    u_B = wg.make_fragment_B(wg.partition_B(sVT))
    vn_A = wg.make_fragment_A(wg.partition_A(sW))
    s0_B = wg.make_fragment_B(wg.partition_B(sS))
    su_A = wg.make_fragment_A(wg.partition_A(sVnT))
    return kt_B, u_A, u_B, vn_A, s0_B, su_A


@cute.jit
def dstates_fragments(
    wg: cute.ThrMma,
    sTm: cute.Tensor,
    sKT: cute.Tensor,
    sPT: cute.Tensor,
    sDoT: cute.Tensor,
    sKd: cute.Tensor,
    sDS: cute.Tensor,
    sQsT: cute.Tensor,
    sDvnT: cute.Tensor,
    sWmT: cute.Tensor,
):
    """Pass 2's WGMMA operands from the warpgroup slice ``wg``: ``(tm_A, kt_B, pt_A, dot_B, dot_A, kd_A, ds_B, qst_B,
    dvnt_A, wmt_B)`` = Tm, (beta exp(G) K)^T, P^T, dO^T (as B and as A), K exp(G_C - G), dS1, (scale exp(G) Q)^T, -dVn^T,
    Wm^T."""
    tm_A = wg.make_fragment_A(wg.partition_A(sTm))
    kt_B = wg.make_fragment_B(wg.partition_B(sKT))
    pt_A = wg.make_fragment_A(wg.partition_A(sPT))
    dot_B = wg.make_fragment_B(wg.partition_B(sDoT))
    dot_A = wg.make_fragment_A(wg.partition_A(sDoT))
    kd_A = wg.make_fragment_A(wg.partition_A(sKd))
    ds_B = wg.make_fragment_B(wg.partition_B(sDS))
    qst_B = wg.make_fragment_B(wg.partition_B(sQsT))
    dvnt_A = wg.make_fragment_A(wg.partition_A(sDvnT))
    wmt_B = wg.make_fragment_B(wg.partition_B(sWmT))
    return tm_A, kt_B, pt_A, dot_B, dot_A, kd_A, ds_B, qst_B, dvnt_A, wmt_B


@cute.jit
def rows_to_smem(
    gX: cute.Tensor, sX: cute.Tensor, sXT: cute.Tensor, t0: Int32, eos: Int32, head: Int32, tidx: Int32, D: cutlass.Constexpr[int], mode: cutlass.Constexpr[int]
):
    """Rows ``t0 .. t0 + 63`` of ``gX`` (bf16 16-byte vectors, rows past ``eos`` as zero): ``mode`` 0 to ``sX``
    [token, d], 1 to ``sXT`` [d % 64, token, d // 64], 2 to both. Not fenced."""
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
    for vj in cutlass.range_constexpr(NV):
        for e in cutlass.range_constexpr(VEC):
            col = half * HALF + vj * VEC + e
            x = (rbuf[0, 0, e, vj].to(Float32) * keep).to(BFloat16)
            if const_expr(mode != 1):
                sX[row, col] = x
            if const_expr(mode != 0):
                sXT[col % BV, row, col // BV] = x


@cute.jit
def dwm_and_dv(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    dvn_A: cute.Tensor,
    s0t_B: cute.Tensor,
    tmt_A: cute.Tensor,
    dvnt_B: cute.Tensor,
    sDwm: cute.Tensor,
    sDwmT: cute.Tensor,
    sDBr: cute.Tensor,
    sV: cute.Tensor,
    sBeta: cute.Tensor,
    mDv: cute.Tensor,
    c64: cute.Tensor,
    t0: Int32,
    n_valid: Int32,
    head: Int32,
    nh: cutlass.Constexpr[int],
):
    """Pass 3: ``dWm = -dVn S0`` -> bf16 ``sDwm`` and ``sDwmT``; ``dUb = Tm^T dVn``: ``dV = beta dUb`` (rows inside the
    sequence) -> ``mDv``, ``dbeta += rowsum(dUb V)`` -> ``sDBr`` (shared atomics); published."""
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_a, dvn_A, s0t_B[None, None, None, h], True)
        for i in cutlass.range_constexpr(cute.size(acc_a)):
            rc = c64[i]
            w = (-acc_a[i]).to(BFloat16)
            sDwm[rc[0], h * BV + rc[1]] = w
            sDwmT[rc[1], rc[0], h] = w
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_a, tmt_A, dvnt_B[None, None, None, h], True)
        for i in cutlass.range_constexpr(cute.size(acc_a)):
            rc = c64[i]
            cute.arch.atomic_add(sDBr.iterator + rc[0], acc_a[i] * sV[rc[0], h * BV + rc[1]].to(Float32))
            if rc[0] < n_valid:
                mDv[t0 + rc[0], head, h * BV + rc[1]] = (acc_a[i] * sBeta[rc[0]]).to(mDv.element_type)
    smem_ready()


@cute.jit
def grads_chunk(bos: Int32, eos: Int32, slot0: Int32, ci: Int32):
    """Pass 3's chunk ``ci`` of the sequence [bos, eos): ``(t0, n_valid, slot)``, its first token, its valid rows (at
    most C) and its workspace slot."""
    t0 = bos + ci * CHUNK
    n_valid = min(eos - t0, CHUNK)
    slot = slot0 + ci
    return t0, n_valid, slot


@cute.jit
def tm_row_load(gWsTm: cute.Tensor, slot: Int32, head: Int32, row: Int32, half: Int32):
    """Half ``half`` of row ``row`` of the chunk's ``Tm`` [64, 64] (pass 1's, bf16 workspace as 16-byte vectors) ->
    registers (returned; pass 3, both versions: two threads a row)."""
    tbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, CHUNK // 2 // VEC)), BFloat16)
    for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):
        cute.autovec_copy(gWsTm[(None, None, None, None), (slot, head, row, half * (CHUNK // 2 // VEC) + vj)], tbuf[None, None, None, None, vj])
    return tbuf


@cute.jit
def tm_row_store(tbuf: cute.Tensor, sTm: cute.Tensor, sTmT: cute.Tensor | None, row: Int32, half: Int32):
    """:func:`tm_row_load`'s registers -> ``sTm`` and (unless None) its transpose ``sTmT`` (shared). Not fenced."""
    for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):
        for e in cutlass.range_constexpr(VEC):
            c = half * (CHUNK // 2) + vj * VEC + e
            t_val = tbuf[0, 0, 0, e, vj]
            sTm[row, c] = t_val
            if const_expr(sTmT is not None):
                sTmT[c, row] = t_val


@cute.jit
def scalar_dg_dbeta(mDg: cute.Tensor, mDb: cute.Tensor, sG: cute.Tensor, sDBr: cute.Tensor, t0: Int32, n_valid: Int32, head: Int32, tidx: Int32):
    """Pass 3's last step with a per-token decay (GDN v1 and v2): thread ``tidx < C`` writes ``dg = reverse cumsum``
    of the chunk's per-row ``sG`` and ``dbeta = sDBr`` at its token (``t0 + tidx``, inside the sequence). Not fenced."""
    if tidx < CHUNK:
        acc_g = Float32(0.0)
        for j in cutlass.range_constexpr(CHUNK):
            x = sG[j]
            if j < tidx:
                x = Float32(0.0)
            acc_g = acc_g + x
        if tidx < n_valid:
            mDg[t0 + tidx, head] = acc_g
            mDb[t0 + tidx, head] = sDBr[tidx]


def state_views_aligned(ptr, slots, heads, D):
    """A [slots, H, D, D] bf16 state array (:func:`state_views`) with its slot stride declared a multiple of
    D * D, so that the (1, 1, 1, 8) vectors of :func:`forward_state_to_smem_and_workspace` are 16-byte accesses."""
    return cute.make_tensor(ptr, cute.make_layout((slots, heads, D, D), stride=(cute.assume(Int64(heads) * (D * D), divby=D * D), D * D, D, 1)))


def forward_state_views(fh_ptr, wsh_ptr, fslots, slots, heads, D):
    """``(gFH, gWsH)``: the forward's ``h`` [fslots, H, V, K] and the backward's ``ws_h`` [slots, H, V, K] (bf16) as
    (1, 1, 1, 8) vectors, for :func:`forward_state_to_smem_and_workspace`."""
    gFH = cute.zipped_divide(state_views_aligned(fh_ptr, fslots, heads, D), (1, 1, 1, VEC))
    gWsH = cute.zipped_divide(state_views_aligned(wsh_ptr, slots, heads, D), (1, 1, 1, VEC))
    return gFH, gWsH


def chunk_pass1_views(cu_ptr, fh_ptr, wsh_ptr, n_seqs, fslots, slots, heads, D, varlen):
    """``(mCu, gFH, gWsH)``: ``cu_seqlens`` (None for dense batches) and :func:`forward_state_views` -- the views every
    chunk-parallel pass-1 kernel's ``__call__`` builds (``{Kda,Gdn}BwdStatesChunk``, ``{Kda,Gdn}BwdStatesFold``)."""
    mCu, _, _ = make_seq_state_views(cu_ptr, None, None, n_seqs, heads, D, varlen, False, False)
    return (mCu, *forward_state_views(fh_ptr, wsh_ptr, fslots, slots, heads, D))


@cute.jit
def chunk_cta(mCu: cute.Tensor | None, n_seqs: Int32, seq_len: Int32, chunks_per_seq: Int32, group: Int32, varlen: cutlass.Constexpr[bool]):
    """``(tidx, fslot, head, hk, seq, t0, n_valid)`` of this thread and CTA of a chunk-parallel pass 1 (grid
    [forward chunk slots, H]): the q/k head it reads (``head // group``) and its chunk (``_device.chunk_parallel.slot_chunk``:
    ``n_valid`` 0 for an idle slot)."""
    tidx, _, _ = cute.arch.thread_idx()
    fslot, head, _ = cute.arch.block_idx()
    hk = head // group
    seq, t0, n_valid = slot_chunk(mCu, fslot, n_seqs, seq_len, chunks_per_seq, varlen)
    return tidx, fslot, head, hk, seq, t0, n_valid


@cute.jit
def chunk_slot(mCu: cute.Tensor | None, seq: Int32, seq_len: Int32, t0: Int32, n_valid: Int32, varlen: cutlass.Constexpr[bool]):
    """``(eos, slot)`` of a live chunk (tokens ``t0 .. t0 + n_valid - 1`` of sequence ``seq``): its end and the
    backward's workspace slot ``seq + bos // 64 + (t0 - bos) // 64`` (passes 2-3 read it)."""
    bos = seq * seq_len
    if const_expr(varlen):
        bos = mCu[seq]
    eos = t0 + n_valid
    slot = seq + bos // CHUNK + (t0 - bos) // CHUNK
    return eos, slot


@cute.jit
def forward_state_to_smem_and_workspace(
    gFH: cute.Tensor, gWsH: cute.Tensor, sS: cute.Tensor, fslot: Int32, slot: Int32, head: Int32, v0: Int32, tidx: Int32, D: cutlass.Constexpr[int]
):
    """``S0[v0:v0+64, :]`` of one chunk, bf16 from the forward's ``h[fslot, head]`` -> ``sS`` (the ``Vn`` product's
    operand, as the serial pass's ``state_to_smem``) and -> the backward's ``ws_h[slot, head]`` (passes 2-3 read it), by
    16-byte vectors (``gFH`` / ``gWsH``: the [slots, H, V, K] arrays divided by (1, 1, 1, 8)). Not fenced."""
    nv = D // VEC
    buf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC)), BFloat16)
    for s in cutlass.range_constexpr(BV * nv // THREADS):
        idx = tidx + THREADS * s
        r = idx // nv
        cv = idx % nv
        cute.autovec_copy(gFH[(None, None, None, None), (fslot, head, v0 + r, cv)], buf)
        cute.autovec_copy(buf, gWsH[(None, None, None, None), (slot, head, v0 + r, cv)])
        for e in cutlass.range_constexpr(VEC):
            sS[r, cv * VEC + e] = buf[0, 0, 0, e]


@cute.jit
def vslices_to_workspace(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    acc_b: cute.Tensor,
    u_A: cute.Tensor,
    u_B: cute.Tensor,
    kt_B: cute.Tensor,
    vn_A: cute.Tensor,
    s0_B: cute.Tensor,
    gFH: cute.Tensor,
    gWsH: cute.Tensor,
    gV: cute.Tensor,
    sS: cute.Tensor,
    sVT: cute.Tensor,
    sW: cute.Tensor,
    sVnT: cute.Tensor,
    mWsVn: cute.Tensor,
    c64: cute.Tensor,
    fslot: Int32,
    slot: Int32,
    t0: Int32,
    n_valid: Int32,
    t_row: Int32,
    row: Int32,
    half: Int32,
    keep: Float32,
    b_row: Float32,
    head: Int32,
    tidx: Int32,
    D: cutlass.Constexpr[int],
):
    """The chunk-parallel pass 1's state-dependent part, per 64-row V slice (a runtime loop: one copy of the code;
    unrolled, ptxas keeps a stack frame): ``S0`` slice (the forward's ``h``) -> ``sS`` and ``ws_h``, ``(beta V)^T``
    slice, then :func:`wy_values_to_workspace` (``U``, ``-Wm``, ``Vn = U - Wm S0^T`` -> ``ws_vn``). Expects ``sTm``,
    ``sKT`` and ``sW`` (the decayed keys) published."""
    nh = D // BV
    for vb in cutlass.range(nh, unroll=1):
        cute.arch.sync_threads()  # every reader of the previous slice's sS / sVT / sW / sVnT is done
        forward_state_to_smem_and_workspace(gFH, gWsH, sS, fslot, slot, head, vb * BV, tidx, D)
        vbuf = load_v_half_row(gV, t_row, head, vb * BV, half)
        store_beta_v_t(sVT, vbuf, row, half, keep, b_row)
        smem_ready()
        wy_values_to_workspace(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, sVnT, mWsVn, c64, t0, n_valid, head, vb * BV, nh)


# ---- fold_prep_tm (the default since session 10): pass 1b as layout copies of the forward prep's / state pass's arrays ----
VNT_PAD = VEC  # bf16 row padding of the staged Vn^T tile (rows 16-byte aligned)


def fold_views(ftm_ptr, fvnt_ptr, wstm_ptr, wsvn_ptr, T, fslots, slots, heads, D):
    """``fold_prep_tm``'s arrays both families copy, as 16-byte vectors (host side of ``{Kda,Gdn}BwdStatesFold``): the
    forward's ``Tm`` (over its ``qg`` tiles: [fslots, H, 64, 64] with the ``qg`` slot / head strides) and ``vnt``
    [fslots, H, D, 64]; the backward's ``ws_tm`` [slots, H, 64, 64] and ``ws_vn`` [T, H, D]. Returns (gFTm, gFVnt,
    gWsTm, gWsVn)."""
    ftile = cute.assume(Int64(heads) * (CHUNK * D), divby=CHUNK * D)  # the forward's [64, D] tiles (qg, vnt)
    gFTm = cute.make_tensor(ftm_ptr, cute.make_layout((fslots, heads, CHUNK, CHUNK), stride=(ftile, CHUNK * D, CHUNK, 1)))
    gFVnt = cute.make_tensor(fvnt_ptr, cute.make_layout((fslots, heads, D, CHUNK), stride=(ftile, CHUNK * D, CHUNK, 1)))
    gWsVn = cute.make_tensor(wsvn_ptr, cute.make_layout((T, heads, D), stride=(cute.assume(Int64(heads) * D, divby=D), D, 1)))
    v4 = (1, 1, 1, VEC)
    return cute.zipped_divide(gFTm, v4), cute.zipped_divide(gFVnt, v4), fold_cc_vectors(wstm_ptr, slots, heads), cute.zipped_divide(gWsVn, (1, 1, VEC))


def fold_cc_vectors(ptr, slots, heads):
    """A [slots, H, 64, 64] bf16 array (``ws_tm``, the forward's ``p`` / the backward's ``ws_p``) as 16-byte vectors, its
    slot stride known a multiple of 64 x 64 (the fold's vector copies)."""
    cc = CHUNK * CHUNK
    ctile = cute.assume(Int64(heads) * cc, divby=cc)
    return cute.zipped_divide(cute.make_tensor(ptr, cute.make_layout((slots, heads, CHUNK, CHUNK), stride=(ctile, cc, CHUNK, 1))), (1, 1, 1, VEC))


def fold_shared_storage(D):
    """The fold's shared memory: the staged ``Vn^T`` [D, 64] tile (rows padded by :data:`VNT_PAD`)."""
    fields = {"smem_vnt": cute.struct.Align[cute.struct.MemRange[BFloat16, D * (CHUNK + VNT_PAD)], 128]}
    return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))


@cute.jit
def tiles_copy(
    gSrc: cute.Tensor, gDst: cute.Tensor, fslot: Int32, slot: Int32, head: Int32, tidx: Int32, rows: cutlass.Constexpr[int], cols: cutlass.Constexpr[int]
):
    """One [rows, cols] bf16 tile ``gSrc[fslot, head]`` -> ``gDst[slot, head]`` by 16-byte vectors (both divided by (1, 1,
    1, 8)), every load of the thread issued before its first store."""
    nv = cols // VEC
    n = rows * nv // THREADS
    buf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, n)), BFloat16)
    for s in cutlass.range_constexpr(n):
        idx = tidx + THREADS * s
        cute.autovec_copy(gSrc[(None, None, None, None), (fslot, head, idx // nv, idx % nv)], buf[None, None, None, None, s])
    for s in cutlass.range_constexpr(n):
        idx = tidx + THREADS * s
        cute.autovec_copy(buf[None, None, None, None, s], gDst[(None, None, None, None), (slot, head, idx // nv, idx % nv)])


@cute.jit
def fold_chunk(
    mCu: cute.Tensor | None,
    gFH: cute.Tensor,
    gWsH: cute.Tensor,
    gFTm: cute.Tensor,
    gWsTm: cute.Tensor,
    gFP: cute.Tensor | None,
    gWsP: cute.Tensor | None,
    gFVnt: cute.Tensor,
    gWsVn: cute.Tensor,
    n_seqs: Int32,
    seq_len: Int32,
    chunks_per_seq: Int32,
    varlen: cutlass.Constexpr[bool],
    D: cutlass.Constexpr[int],
    SharedStorage: cutlass.Constexpr,
):
    """The whole fold kernel body (both families): one CTA per (forward chunk slot, head), no arithmetic -- ``h`` ->
    ``ws_h``, ``Tm`` -> ``ws_tm``, ``p`` -> ``ws_p`` (KDA; ``gFP`` None for GDN, which has no ``P``) by 16-byte
    vectors (slot remap only), ``Vn^T`` [D, 64] -> shared -> ``ws_vn`` rows ``t0 .. t0 + n_valid - 1``. An idle slot
    exits."""
    tidx, fslot, head, _, seq, t0, n_valid = chunk_cta(mCu, n_seqs, seq_len, chunks_per_seq, 1, varlen)
    smem = cutlass.utils.SmemAllocator()
    storage = smem.allocate(SharedStorage)
    sVnt = storage.smem_vnt.get_tensor(cute.make_layout((D, CHUNK), stride=(CHUNK + VNT_PAD, 1)))
    sVntv = cute.zipped_divide(sVnt, (1, VEC))

    if n_valid > 0:  # an idle slot (past its sequence's last chunk) exits; uniform per CTA
        _, slot = chunk_slot(mCu, seq, seq_len, t0, n_valid, varlen)  # the backward's slot (passes 2-3)
        # Vn^T [D, 64] -> shared (loads first), then the tile copies while they land
        nv = CHUNK // VEC
        n = D * nv // THREADS
        vbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, n)), BFloat16)
        for s in cutlass.range_constexpr(n):
            idx = tidx + THREADS * s
            cute.autovec_copy(gFVnt[(None, None, None, None), (fslot, head, idx // nv, idx % nv)], vbuf[None, None, None, None, s])
        for s in cutlass.range_constexpr(n):
            idx = tidx + THREADS * s
            cute.autovec_copy(vbuf[None, None, None, None, s], sVntv[(None, None), (idx // nv, idx % nv)])
        tiles_copy(gFH, gWsH, fslot, slot, head, tidx, D, D)
        tiles_copy(gFTm, gWsTm, fslot, slot, head, tidx, CHUNK, CHUNK)
        if const_expr(gFP is not None):
            tiles_copy(gFP, gWsP, fslot, slot, head, tidx, CHUNK, CHUNK)
        cute.arch.sync_threads()
        # token row tidx // 2, channel half tidx % 2: Vn[t0 + row, head, :] (rows inside the sequence only)
        row = tidx // 2
        half = tidx % 2
        if row < n_valid:
            obuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC)), BFloat16)
            for vj in cutlass.range_constexpr(D // 2 // VEC):
                c0 = half * (D // 2) + vj * VEC
                for e in cutlass.range_constexpr(VEC):
                    obuf[0, 0, e] = sVnt[c0 + e, row]
                cute.autovec_copy(obuf, gWsVn[(None, None, None), (t0 + row, head, c0 // VEC)])


class StatesFoldKernel(DeltaRuleKernel):
    """Device side of both families' ``fold_prep_tm`` pass 1b (``{Kda,Gdn}BwdStatesFold``, each with its own ``__call__``
    building :func:`fold_views` and launching ``self.kernel``): the ``@cute.kernel`` both share. ``views`` is the fold's
    vector views, ``(gFTm, gFP, gFVnt, gWsTm, gWsP, gWsVn)`` (KDA) or ``(gFTm, gFVnt, gWsTm, gWsVn)`` (GDN: no ``P``);
    the body is :func:`fold_chunk`."""

    @cute.kernel
    def kernel(
        self,
        mCu: cute.Tensor | None,
        gFH: cute.Tensor,
        gWsH: cute.Tensor,
        views: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        SharedStorage: cutlass.Constexpr,
    ):
        gFP = None
        gWsP = None
        if const_expr(len(views) == 6):  # KDA: with the P pair
            gFTm, gFP, gFVnt, gWsTm, gWsP, gWsVn = views
        else:
            gFTm, gFVnt, gWsTm, gWsVn = views
        fold_chunk(mCu, gFH, gWsH, gFTm, gWsTm, gFP, gWsP, gFVnt, gWsVn, n_seqs, seq_len, chunks_per_seq, self.key.varlen, self.D, SharedStorage)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


class GradsLaunch(DeltaRuleKernel):
    """Host side of every pass-3 kernel class (v1: ``kda/chunk_bwd_kernel.KdaBwdGrads``,
    ``gdn/chunk_bwd_kernel.GdnBwdGrads``; v2 through ``delta_rule_bwd_v2.GradsV2Launch``): ``__call__`` takes the
    argument list of ``{kda,gdn}/bwd_api.py``'s ``_launch``, builds the global views and launches ``self.kernel`` on a
    grid [N, H, chunk groups] of ``CTA_THREADS`` threads with the family's shared-memory struct. A class sets
    ``CTA_THREADS``, ``PER_KEY_GATE`` (g [T, H, K], KDA, or [T, H], GDN), overrides :meth:`ws_state` / :meth:`ws_tm`
    where its kernel reads the workspace states / Tm differently, and defines ``shared_storage(l_ck, l_kc, l_kv, l_cc)``
    (its ``cute.struct``) and the ``@cute.kernel`` ``kernel`` (whose arguments are the views below, in this order)."""

    CTA_THREADS = THREADS
    PER_KEY_GATE = False

    def ws_state(self, ptr, slots, heads):
        """The kernel's view of a bf16 workspace state array [slots, H, D, D] (S0, dS1; host side): 16-byte vectors
        along the last mode, the slot stride declared a multiple of D * D (v2's loads); v1 classes override."""
        return cute.zipped_divide(state_views_aligned(ptr, slots, heads, self.D), (1, 1, 1, VEC))

    def ws_tm(self, ptr, slots, heads):
        """The kernel's view of the workspace Tm [slots, H, 64, 64] (bf16; host side): 16-byte vectors."""
        return cute.zipped_divide(cc_views(ptr, slots, heads), (1, 1, 1, VEC))

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        wsh_ptr: cute.Pointer,
        wsdh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wsdvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer | None,
        dq_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        dg_ptr: cute.Pointer,
        dbeta_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        heads: Int32,
        qk_heads: Int32,
        slots: Int32,
        z_split: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        do_strides: tuple[Int64, Int64],
        dq_strides: tuple[Int64, Int64],
        dk_strides: tuple[Int64, Int64],
        dv_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV = vec_views(D, q_ptr, k_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides)
        _, _, gDo = vec_views(D, q_ptr, k_ptr, do_ptr, T, heads, qk_heads, q_strides, k_strides, do_strides)
        ws_tok = cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1))
        gVn = cute.zipped_divide(cute.make_tensor(wsvn_ptr, ws_tok), (1, 1, VEC))
        gDvn = cute.zipped_divide(cute.make_tensor(wsdvn_ptr, ws_tok), (1, 1, VEC))
        mWsH = self.ws_state(wsh_ptr, slots, heads)
        mWsDh = self.ws_state(wsdh_ptr, slots, heads)
        mWsTm = self.ws_tm(wstm_ptr, slots, heads)
        # dq, dk: the bf16 outputs [T, H, K] (H = Hk), or with GVA (GDN) the fp32 per-value-head partials in the workspace
        mDq, mDk, mDv, mG, mB, mDg, mDb, mCu = grads_views(
            dq_ptr,
            dk_ptr,
            dv_ptr,
            g_ptr,
            beta_ptr,
            dg_ptr,
            dbeta_ptr,
            cu_ptr,
            T,
            n_seqs,
            heads,
            D,
            dq_strides,
            dk_strides,
            dv_strides,
            self.PER_KEY_GATE,
            self.key.varlen,
        )
        mma, l_ck, l_kc, l_kv, l_cc = grads_layouts(D)
        SharedStorage = self.shared_storage(l_ck, l_kc, l_kv, l_cc)
        self.kernel(
            gQ,
            gK,
            gV,
            gDo,
            gVn,
            gDvn,
            mWsH,
            mWsDh,
            mWsTm,
            mDq,
            mDk,
            mDv,
            mG,
            mB,
            mDg,
            mDb,
            mCu,
            seq_len,
            heads // qk_heads,
            z_split,
            scale,
            mma,
            l_ck,
            l_kc,
            l_kv,
            l_cc,
            SharedStorage,
        ).launch(grid=[n_seqs, heads, z_split], block=[self.CTA_THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)
