"""``@cute.jit`` blocks of the chunk-parallel delta-rule forward (``kda/chunk_parallel_{prep,state,out}_kernel.py``,
``gdn/chunk_parallel_prep_kernel.py``): the chunk-slot table, the workspace views the three kernels exchange, the
128-thread tile copies between global and shared memory, and a multi-accumulator WGMMA group.

Chunk slots. The chunk-parallel kernels run one CTA per (chunk slot, head). Sequence ``n`` (tokens ``[bos, eos)``,
``ceil((eos - bos) / 64)`` chunks) owns the slots ``[base_n, base_n + chunks_n)`` with::

    varlen: base_n = bos_n // 64 + n          dense (every sequence L tokens): base_n = n * ceil(L / 64)

Varlen slots never overlap (``floor((b + l) / 64) + 1 >= floor(b / 64) + ceil(l / 64)``), ``base`` is strictly
increasing in ``n``, and every slot is below ``T // 64 + N``: the host sizes grids and the workspace from the token
total and the sequence count alone, never reading ``cu_seqlens`` (Rule 3). A slot past its sequence's last chunk
(at most N of them) is idle. A CTA finds its chunk by a binary search over ``cu_seqlens``.

Workspace (per slot and head, written by the prep kernel or the state pass, read by the next kernel; D = K = V)::

    w    [64, D]  bf16   -Wm = -Tm (beta K exp G)            (token rows, key channels contiguous)
    u    [64, D]  fp32   U = Tm (beta V)
    kd   [D, 64]  bf16   (K exp(G_C - G))^T                    (key channels rows, tokens contiguous)
    qg   [64, D]  bf16   scale Q exp(G)
    p    [64, 64] bf16   lower_eq(scale Q K^T decayed)
    ge   [D]      fp32   exp(G_C): the chunk's total per-channel decay
    vnt  [D, 64]  bf16   Vn^T = (U - Wm S0^T)^T                (state pass)
    h    [D, D]   bf16   S0: the state entering the chunk [V, K] (state pass)
    rf   [64]     fp32   scale exp(G_i): the output's row factors (GDN: its output kernel scales Q S0^T rows; unused by KDA)
"""

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup

from .delta_rule import BV, CHUNK, THREADS, VEC, wgmma

U_PAD = 4  # fp32 row padding of the staged U tile: rows 16 bytes apart in the banks (conflict-free accumulator reads)
WS_ARRAYS = ("w", "u", "kd", "qg", "p", "ge", "vnt", "h", "rf")


@cute.jit
def slot_base(mCu: cute.Tensor | None, seq: Int32, seq_len: Int32, chunks_per_seq: Int32, varlen: cutlass.Constexpr[bool]):
    """The first chunk slot of sequence ``seq``."""
    base = seq * chunks_per_seq
    if const_expr(varlen):
        base = mCu[seq] // CHUNK + seq
    return base


@cute.jit
def slot_chunk(mCu: cute.Tensor | None, slot: Int32, n_seqs: Int32, seq_len: Int32, chunks_per_seq: Int32, varlen: cutlass.Constexpr[bool]):
    """``(seq, t0, n_valid)`` of chunk slot ``slot``: its sequence, first token and token count (``n_valid <= 0``: idle slot)."""
    seq = Int32(0)
    t0 = Int32(0)
    n_valid = Int32(0)
    if const_expr(varlen):
        lo = Int32(0)  # the last sequence whose base is <= slot (base is strictly increasing)
        hi = n_seqs - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if mCu[mid] // CHUNK + mid <= slot:
                lo = mid
            else:
                hi = mid - 1
        seq = lo
        bos = mCu[seq]
        eos = mCu[seq + 1]
        t0 = bos + (slot - (bos // CHUNK + seq)) * CHUNK
        n_valid = min(eos - t0, CHUNK)
    else:
        seq = slot // chunks_per_seq
        t0 = seq * seq_len + (slot - seq * chunks_per_seq) * CHUNK
        n_valid = min(seq * seq_len + seq_len - t0, CHUNK)
    return seq, t0, n_valid


@cute.jit
def make_ws_views(
    w_ptr: cute.Pointer,
    u_ptr: cute.Pointer,
    kd_ptr: cute.Pointer,
    qg_ptr: cute.Pointer,
    p_ptr: cute.Pointer,
    ge_ptr: cute.Pointer,
    vnt_ptr: cute.Pointer,
    h_ptr: cute.Pointer,
    rf_ptr: cute.Pointer,
    slots: Int32,
    heads: Int32,
    d: cutlass.Constexpr[int],
):
    """The workspace arrays as tensors ``(mW, mU, mKD, mQG, mP, mGE, mVNT, mH, mRF)``, each [slots, heads, ...] (module
    docstring). ``kd`` is viewed [slots, heads, 64 channels, 64 tokens, d / 64] (the K-major B-operand tiling)."""
    tile = cute.assume(Int64(heads) * (CHUNK * d), divby=CHUNK * d)  # slot strides: whole tiles, so every row stays 16-byte aligned
    mW = cute.make_tensor(w_ptr, cute.make_layout((slots, heads, CHUNK, d), stride=(tile, CHUNK * d, d, 1)))
    mU = cute.make_tensor(u_ptr, cute.make_layout((slots, heads, CHUNK, d), stride=(tile, CHUNK * d, d, 1)))
    mKD = cute.make_tensor(kd_ptr, cute.make_layout((slots, heads, CHUNK, CHUNK, d // CHUNK), stride=(tile, CHUNK * d, CHUNK, 1, CHUNK * CHUNK)))
    mQG = cute.make_tensor(qg_ptr, cute.make_layout((slots, heads, CHUNK, d), stride=(tile, CHUNK * d, d, 1)))
    mP = cute.make_tensor(
        p_ptr,
        cute.make_layout((slots, heads, CHUNK, CHUNK), stride=(cute.assume(Int64(heads) * (CHUNK * CHUNK), divby=CHUNK * CHUNK), CHUNK * CHUNK, CHUNK, 1)),
    )
    mGE = cute.make_tensor(ge_ptr, cute.make_layout((slots, heads, d), stride=(cute.assume(Int64(heads) * d, divby=d), d, 1)))
    mVNT = cute.make_tensor(vnt_ptr, cute.make_layout((slots, heads, d, CHUNK), stride=(tile, CHUNK * d, CHUNK, 1)))
    mH = cute.make_tensor(h_ptr, cute.make_layout((slots, heads, d, d), stride=(cute.assume(Int64(heads) * (d * d), divby=d * d), d * d, d, 1)))
    mRF = cute.make_tensor(rf_ptr, cute.make_layout((slots, heads, CHUNK), stride=(cute.assume(Int64(heads) * CHUNK, divby=CHUNK), CHUNK, 1)))
    return mW, mU, mKD, mQG, mP, mGE, mVNT, mH, mRF


@cute.jit
def make_g2s_copy(dtype: cutlass.Constexpr, cols: cutlass.Constexpr[int], threads: cutlass.Constexpr[int] = THREADS):
    """A ``threads``-thread cp.async tiled copy of [rows, cols] tiles of ``dtype`` by 16-byte vectors (rows of ``cols``
    elements spread over ``cols / vec`` threads)."""
    vec = 128 // dtype.width
    tpr = cols // vec
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), dtype, num_bits_per_copy=128)
    thr = cute.make_ordered_layout((threads // tpr, tpr), order=(1, 0))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, vec)))


@cute.jit
def g2s(tiled: cute.TiledCopy, src: cute.Tensor, dst: cute.Tensor, tidx: Int32):
    """Issue the cp.async copies of the global tile ``src`` into the shared tile ``dst`` (same logical shape); the
    caller commits, waits and publishes."""
    thr = tiled.get_slice(tidx)
    cute.copy(tiled, thr.partition_S(src), thr.partition_D(dst))


@cute.jit
def g2s_vector(src: cute.Tensor, dst: cute.Tensor, tidx: Int32, n: cutlass.Constexpr[int]):
    """cp.async of ``n`` fp32 (a multiple of 4) from ``src`` to ``dst`` (both [n], 16-byte aligned): one 16-byte
    copy by each of the first ``n / 4`` threads."""
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), Float32, num_bits_per_copy=128)
    if tidx < n // 4:
        gs = cute.zipped_divide(src, (4,))
        sd = cute.zipped_divide(dst, (4,))
        cute.copy(atom, gs[None, tidx], sd[None, tidx])


@cute.jit
def acc_to_gmem(dst: cute.Tensor, acc: cute.Tensor, c64: cute.Tensor, negate: cutlass.Constexpr[bool], transpose: cutlass.Constexpr[bool]):
    """A 64 x 64 accumulator -> the global tile ``dst`` [64, 64] (its element type; ``-acc`` when ``negate``;
    ``dst[col, row]`` when ``transpose``)."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        rc = c64[i]
        val = acc[i]
        if const_expr(negate):
            val = -val
        if const_expr(transpose):
            dst[rc[1], rc[0]] = val.to(dst.element_type)
        else:
            dst[rc[0], rc[1]] = val.to(dst.element_type)


@cute.jit
def s2g_tile(src: cute.Tensor, dst: cute.Tensor, tidx: Int32):
    """The bf16 shared tile ``src`` [rows, 64] (any swizzle) -> the global tile ``dst`` (same shape, rows 16-byte
    aligned) by 16-byte vectors: 128 threads, 16 rows per pass. The caller has published ``src``."""
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), BFloat16, num_bits_per_copy=128)
    tiled = cute.make_tiled_copy_tv(atom, cute.make_ordered_layout((THREADS // 8, 8), order=(1, 0)), cute.make_layout((1, 8)))
    thr = tiled.get_slice(tidx)
    tS = thr.partition_S(src)
    tR = cute.make_rmem_tensor_like(tS, BFloat16)
    cute.autovec_copy(tS, tR)
    cute.copy(tiled, tR, thr.partition_D(dst))


@cute.jit
def store_beta_v_block_t(sVT: cute.Tensor, vbuf: cute.Tensor, row: Int32, half: Int32, keep: Float32, b_row: Float32, vb: cutlass.Constexpr[int]):
    """``(beta V)^T`` of value-channel block ``vb``: this thread's 32 channels of token ``row`` (``vbuf``, as
    :func:`.delta_rule.load_v_half_row` loads them) times ``keep * beta`` into ``sVT[:, row, vb]`` [64 channels, tokens, V / 64]."""
    for vj in cutlass.range_constexpr((BV // 2) // VEC):
        for e in cutlass.range_constexpr(VEC):
            vc = half * (BV // 2) + vj * VEC + e
            sVT[vc, row, vb] = (vbuf[0, 0, e, vj].to(Float32) * keep * b_row).to(BFloat16)


@cute.jit
def wy_to_workspace(
    mma: cute.TiledMma,
    acc_u: cute.Tensor,
    acc_w: cute.Tensor,
    tm_A: cute.Tensor,
    vt_B: cute.Tensor,
    kt_B: cute.Tensor,
    mU: cute.Tensor,
    mW: cute.Tensor,
    slot: Int32,
    head: Int32,
    c64: cute.Tensor,
    nh: cutlass.Constexpr[int],
):
    """Prep step 5: ``U = Tm (beta V)`` (fp32, through ``acc_u``) and ``-Wm = -Tm (beta K exp G)`` (bf16, through
    ``acc_w``) -> the slot's workspace tiles, 64 channels at a time."""
    for vb in cutlass.range_constexpr(nh):
        wgmma(mma, acc_u, tm_A, vt_B[None, None, None, vb], True)
        acc_to_gmem(cute.local_tile(mU[slot, head, None, None], (CHUNK, BV), (0, vb)), acc_u, c64, False, False)
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_w, tm_A, kt_B[None, None, None, h], True)
        acc_to_gmem(cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), acc_w, c64, True, False)


@cute.jit
def decayed_keys_to_workspace(
    mKD: cute.Tensor,
    sK: cute.Tensor,
    sGc: cute.Tensor,
    slot: Int32,
    head: Int32,
    row: Int32,
    half: Int32,
    kdec: Float32 | None,
    half_d: cutlass.Constexpr[int],
    per_key: cutlass.Constexpr[bool],
    fast_exp: cutlass.Constexpr[bool],
):
    """Prep step 6: ``(K exp(G_C - G))^T`` -> ``mKD[slot, head]`` over this thread's half row (rows past the sequence's
    end have g = 0, so G's last row is G_C): the row's decay ``kdec`` (scalar gate), or per key channel from ``sGc``
    [C, K] (``per_key``; ``fast_exp``: ``exp`` without the precise range reduction)."""
    for j in cutlass.range_constexpr(half_d):
        col = half * half_d + j
        d = kdec
        if const_expr(per_key):
            d = cute.math.exp(sGc[CHUNK - 1, col] - sGc[row, col], fastmath=fast_exp)
        mKD[slot, head, col % BV, row, col // BV] = (sK[row, col].to(Float32) * d).to(BFloat16)


# ---- the transposed state slice of the narrow state pass (kda/chunk_parallel_state_narrow_kernel.py) -----------------
# The CTA owns S[v0:v0+vw, :] (vw = 16, 32 or 64 value rows) held TRANSPOSED: K / 64 fp32 accumulators of [64 key channels,
# vw value rows] (WGMMA M = 64 on the key side, N = vw), ``ct`` maps an accumulator element to (key channel, value row).
# The bf16 copy ``sS`` stays [vw, K] K-major (the B operand of Vn = U - Wm S0^T, N = vw).


@cute.jit
def make_mma_nv(vw: cutlass.Constexpr[int]):
    """The tiled MMA of the narrow state pass: 64 x ``vw`` outputs, bf16 K-major A and B, fp32 accumulators (one warpgroup)."""
    return sm90_utils.make_trivial_tiled_mma(
        BFloat16, BFloat16, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(64, vw)
    )


@cute.jit
def load_state_t(
    acc_t: list,
    sS: cute.Tensor,
    mH0: cute.Tensor | None,
    ct: cute.Tensor,
    seq: Int32,
    head: Int32,
    v0: Int32,
    nh: cutlass.Constexpr[int],
    has_initial: cutlass.Constexpr[bool],
):
    """S[v0:v0+vw, :] enters the transposed accumulators ``acc_t`` (fp32) and ``sS`` [vw, K] (bf16); zero without an
    initial state."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
            kr = ct[i]
            s_in = Float32(0.0)
            if const_expr(has_initial):
                s_in = mH0[seq, head, v0 + kr[1], h * BV + kr[0]]
            acc_t[h][i] = s_in
            sS[kr[1], h * BV + kr[0]] = s_in.to(BFloat16)


@cute.jit
def state_t_to_smem(sS: cute.Tensor, acc_t: list, ct: cute.Tensor, nh: cutlass.Constexpr[int]):
    """The transposed state accumulators -> bf16 ``sS`` [vw, K] (the next chunk's operand); the caller publishes it."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
            kr = ct[i]
            sS[kr[1], h * BV + kr[0]] = acc_t[h][i].to(BFloat16)


@cute.jit
def store_final_state_t(mHT: cute.Tensor, acc_t: list, ct: cute.Tensor, seq: Int32, head: Int32, v0: Int32, nh: cutlass.Constexpr[int]):
    """The transposed state slice (fp32 accumulators) -> ``final_state[seq, head, v0:v0+vw, :]``."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
            kr = ct[i]
            mHT[seq, head, v0 + kr[1], h * BV + kr[0]] = acc_t[h][i]


@cute.jit
def wgmma_each_a_into_each(mma: cute.TiledMma, accs: list, tA: cute.Tensor, tB: cute.Tensor, a_first: cutlass.Constexpr[int]):
    """``accs[h] += A_h @ B`` for every accumulator ``h`` (``A_h`` = ``tA[.., .., .., a_first + h]``, one shared ``B``)
    as ONE committed WGMMA group, waited for once."""
    warpgroup.fence()
    atom = cute.make_mma_atom(mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, True)
    for h in cutlass.range_constexpr(len(accs)):
        for kb in cutlass.range_constexpr(cute.size(tB.shape[2])):
            cute.gemm(atom, accs[h], tA[None, None, kb, a_first + h], tB[None, None, kb], accs[h])
    warpgroup.commit_group()
    warpgroup.wait_group(0)
