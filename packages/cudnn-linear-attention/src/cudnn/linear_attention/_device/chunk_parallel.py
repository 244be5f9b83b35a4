"""``@cute.jit`` blocks of the chunk-parallel delta-rule forward (``kda/chunk_parallel_{prep,state,out}_kernel.py``,
``gdn/chunk_parallel_prep{,_tc}_kernel.py``): the chunk-slot table, the workspace views the three kernels exchange, the
shared launch entries (:class:`ChunkParallelPrepLaunch`, :class:`ChunkParallelOutLaunch`: one ``__call__`` signature
per kernel kind, the views built once; each kernel class keeps its own ``@cute.kernel`` and so its own cudnn-prefixed
symbol), the 128-thread tile copies between global and shared memory, a multi-accumulator WGMMA group, the pieces the
256-thread prep kernels (KDA's and GDN's restructured one) share -- the element pass's row loads and chunk order, the
row L2 norm, the 256-thread solve, ``kd`` from registers -- and the state pass's per-chunk fetches and updates (and,
for the opt-in fused state pass + output, ``kda/chunk_parallel_state_out_kernel.py``, their non-waiting forms and the
output operands' TMA fetch).

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

and after them the ready flags, int32 [D / 16] per slot and head, used by the opt-in overlapped output only (the ``ovl``
variant; "the ready flags" below).

(Session 7's opt-in bf16 U, the ``ub16`` variant, lost on the H200 and was removed in session 8:
``docs/benchmarks/linear_attention_kernels_ub16_*.md``.)
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.cute.nvgpu import warp as nvwarp

from cudnn import _compat

from .._host.chunk_parallel import READY_FLAG_ROWS
from .delta_rule import BV, CHUNK, L2NORM_EPS, SOLVE_BLOCK, THREADS, VEC, gate_views, k_major_smem_layout, make_qkvo_views, sequence_bounds, wgmma

U_PAD = 4  # fp32 row padding of the staged U tile: rows 16 bytes apart in the banks (conflict-free accumulator reads)
WS_ARRAYS = ("w", "u", "kd", "qg", "p", "ge", "vnt", "h", "rf")
NB = CHUNK // SOLVE_BLOCK  # 16-row blocks of a chunk (the blocked solve)


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
def make_cu_view(cu_ptr: cute.Pointer | None, n_seqs: Int32, varlen: cutlass.Constexpr[bool]):
    """``cu_seqlens`` [N + 1] (int32), or None for a dense batch."""
    mCu = None
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
    return mCu


class ChunkParallelPrepLaunch:
    """The launch entry of the prep kernels (KDA's ``kda/chunk_parallel_prep_kernel.py``, GDN's
    ``gdn/chunk_parallel_prep{,_tc}_kernel.py``): ``__call__`` takes the pointers, extents and strides the host passes
    (``_host/chunk_parallel.py::launch_parallel``; runtime extents are arguments, Rule 4), builds the views -- q, k, v
    as 16-byte vectors, ``g`` [T, H, K] (``GATE_PER_KEY``, KDA) or [T, H] (GDN), ``beta`` [T, H], ``cu_seqlens`` and
    the workspace arrays -- and hands them to the subclass's ``@cute.jit launch(views, extents, scale, stream)``
    (shared memory, grid, its own ``@cute.kernel``): ``views`` = (gQ, gK, gV, mG, mB, mCu, ws), ``extents`` = (n_seqs,
    seq_len, chunks_per_seq, slots, heads, qk_heads). A subclass sets ``key`` (``varlen``), ``D`` and ``GATE_PER_KEY``."""

    GATE_PER_KEY = False

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        qg_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        vnt_ptr: cute.Pointer,
        h_ptr: cute.Pointer,
        rf_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,  # dense: L; varlen: unused
        chunks_per_seq: Int32,  # dense: ceil(L / 64); varlen: unused
        slots: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV, _ = make_qkvo_views(q_ptr, k_ptr, v_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides, v_strides, D)
        mG, mB = gate_views(g_ptr, beta_ptr, T, heads, D, self.GATE_PER_KEY)
        mCu = make_cu_view(cu_ptr, n_seqs, self.key.varlen)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)
        self.launch((gQ, gK, gV, mG, mB, mCu, ws), (n_seqs, seq_len, chunks_per_seq, slots, heads, qk_heads), scale, stream)


class ChunkParallelOutLaunch:
    """The launch entry of the output kernels (``kda/chunk_parallel_out_kernel.py`` and the default ``v_wide`` kernel in
    ``kda/chunk_parallel_out_persistent_kernel.py``: launched with the same arguments): builds ``o`` [T, H,
    V], ``cu_seqlens`` and the workspace views and hands them to the subclass's ``@cute.jit launch(views, extents,
    o_strides, stream)``: ``views`` = (mO, mCu, ws), ``extents`` = (n_seqs, seq_len, chunks_per_seq, slots, heads). A
    subclass sets ``key`` (``varlen``) and ``D``."""

    @cute.jit
    def __call__(
        self,
        o_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        qg_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        vnt_ptr: cute.Pointer,
        h_ptr: cute.Pointer,
        rf_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        slots: Int32,
        heads: Int32,
        o_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        mO = cute.make_tensor(o_ptr, cute.make_layout((T, heads, D), stride=(o_strides[0], o_strides[1], 1)))
        mCu = make_cu_view(cu_ptr, n_seqs, self.key.varlen)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)
        self.launch((mO, mCu, ws), (n_seqs, seq_len, chunks_per_seq, slots, heads), o_strides, stream)


class ChunkParallelOutLaunchWait:
    """The launch entry of an output kernel that waits on the ready flags (``KdaParallelOutKey.wait_slices``): the
    :class:`ChunkParallelOutLaunch` arguments, then the flags' pointer; ``launch`` gets their view last. A subclass sets
    ``key`` and ``D``."""

    @cute.jit
    def __call__(
        self,
        o_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        w_ptr: cute.Pointer,
        u_ptr: cute.Pointer,
        kd_ptr: cute.Pointer,
        qg_ptr: cute.Pointer,
        p_ptr: cute.Pointer,
        ge_ptr: cute.Pointer,
        vnt_ptr: cute.Pointer,
        h_ptr: cute.Pointer,
        rf_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        slots: Int32,
        heads: Int32,
        o_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
        rdy_ptr: cute.Pointer,
    ):
        D = self.D
        mO = cute.make_tensor(o_ptr, cute.make_layout((T, heads, D), stride=(o_strides[0], o_strides[1], 1)))
        mCu = make_cu_view(cu_ptr, n_seqs, self.key.varlen)
        ws = make_ws_views(w_ptr, u_ptr, kd_ptr, qg_ptr, p_ptr, ge_ptr, vnt_ptr, h_ptr, rf_ptr, slots, heads, D)
        self.launch((mO, mCu, ws), (n_seqs, seq_len, chunks_per_seq, slots, heads), o_strides, stream, make_ready_view(rdy_ptr, slots, heads, D))


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
def state_t_to_smem(sS: cute.Tensor, acc_t: list, ct: cute.Tensor, nh: cutlass.Constexpr[int], st_t: cute.ThrCopy | None = None):
    """The transposed state accumulators -> bf16 ``sS`` [vw, K] (the next chunk's operand); the caller publishes it.
    ``st_t``: by ``stmatrix.trans`` (:func:`acc_to_smem_trans`, one [vw, 64] block per accumulator), else element by
    element."""
    for h in cutlass.range_constexpr(nh):
        if const_expr(st_t is None):
            for i in cutlass.range_constexpr(cute.size(acc_t[h])):
                kr = ct[i]
                sS[kr[1], h * BV + kr[0]] = acc_t[h][i].to(BFloat16)
        else:
            acc_to_smem_trans(st_t, acc_t[h], cute.local_tile(sS, (cute.size(sS.shape[0]), BV), (0, h)))


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


# ---- the ready flags of the overlapped output (opt-in ``KdaParallelStateKey.signal_out`` / ``KdaParallelOutKey.wait_slices``) --
# int32 [slots, H, D / 16] after the workspace arrays (``_host/chunk_parallel.py::ready_flags_offset``): flag (slot, head,
# j) is 1 once value slice j's state pass has written that chunk's h and Vn^T rows. Each state-pass CTA zeroes its own
# flags before it lets the output grid launch (``griddepcontrol.launch_dependents``); the output CTAs of (slot, head)
# wait for the slices' flags instead of for the whole state pass.


@cute.jit
def make_ready_view(rdy_ptr: cute.Pointer | None, slots: Int32, heads: Int32, d: cutlass.Constexpr[int]):
    """The ready flags [slots, heads, d / 16] (int32) at ``rdy_ptr``; None without one."""
    if const_expr(rdy_ptr is None):
        return None
    nf = d // READY_FLAG_ROWS  # one flag per 16 value rows: room for every accepted v_slice
    return cute.make_tensor(rdy_ptr, cute.make_layout((slots, heads, nf), stride=(heads * nf, nf, 1)))


@cute.jit
def ready_flag_ptr(mRdy: cute.Tensor, slot: Int32, head: Int32, j: Int32):
    """The address of flag (slot, head, j)."""
    return mRdy.iterator + cute.crd2idx((slot, head, j), mRdy.layout)


@cute.jit
def signal_ready(mRdy: cute.Tensor, slot: Int32, head: Int32, j: Int32):
    """Flag (slot, head, j) <- 1: a relaxed GPU-scope store (no fence) by the thread that committed the chunk's bulk (TMA)
    stores, after ``cp.async.bulk.wait_group`` saw them complete (written, not only read): the flag is issued after the
    data is in global memory. Session 30 measured the fenced forms in the state pass's chain: a release store behind a
    ``fence.proxy.async.global`` in this lane +56 us at T 8k H 16 (the fence waits for the lane's TMA loads in flight), a
    release store from warp 1 +100 us."""
    cute.arch.store(ready_flag_ptr(mRdy, slot, head, j), Int32(1), sem="relaxed", scope="gpu")


@cute.jit
def wait_ready(mRdy: cute.Tensor, slot: Int32, head: Int32, n: cutlass.Constexpr[int], tidx: Int32):
    """Thread 0 spins (relaxed GPU-scope loads: L2, never a stale L1 line) until flags (slot, head, 0 .. n - 1) are all
    set, then one GPU-scope fence; a CTA barrier orders every thread's later loads (cp.async through L2) after them."""
    if tidx == 0:
        ready = Int32(0)
        while ready == 0:
            ready = Int32(1)
            for j in cutlass.range_constexpr(n):
                if cute.arch.load(ready_flag_ptr(mRdy, slot, head, j), Int32, sem="relaxed", scope="gpu") == 0:
                    ready = Int32(0)
        cute.arch.fence_acq_rel_gpu()
    cute.arch.sync_threads()


# ---- the per-chunk steps of the narrow state pass, shared by its cp.async and TMA chunk loops -----------------------------


@cute.jit
def fetch_chunk_cp_async(
    cp_bf16: cute.TiledCopy,
    cp_f32: cute.TiledCopy,
    mW: cute.Tensor,
    mKD: cute.Tensor,
    mU: cute.Tensor,
    mGE: cute.Tensor,
    sW: cute.Tensor,
    sKD: cute.Tensor,
    sU: cute.Tensor,
    sGE: cute.Tensor,
    slot: Int32,
    head: Int32,
    vblk: Int32,
    st: cutlass.Constexpr[int],
    tidx: Int32,
    nh: cutlass.Constexpr[int],
    vw: cutlass.Constexpr[int],
    d: cutlass.Constexpr[int],
):
    """Issue the cp.async copies of chunk slot ``slot``'s state-pass operands into stage ``st``: -Wm [64, K] (``nh``
    64-column tiles), (K exp(G_C - G))^T (``nh`` [64, 64] tiles), the U columns of value block ``vblk`` ([64, vw] fp32)
    and exp(G_C) [d]. The caller commits."""
    for h in cutlass.range_constexpr(nh):
        g2s(cp_bf16, cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sW[None, None, st], (CHUNK, BV), (0, h)), tidx)
        g2s(cp_bf16, mKD[slot, head, None, None, h], sKD[None, None, st * nh + h], tidx)
    g2s(cp_f32, cute.local_tile(mU[slot, head, None, None], (CHUNK, vw), (0, vblk)), sU[None, None, st], tidx)
    g2s_vector(mGE[slot, head, None], sGE[None, st], tidx, d)


@cute.jit
def fetch_chunk_tma(
    tma_parts: tuple,
    row: Int32,
    vblk: Int32,
    st: cutlass.Constexpr[int],
    mbar: cute.Pointer,
    tx_bytes: cutlass.Constexpr[int],
    nh: cutlass.Constexpr[int],
    wgs: cutlass.Constexpr[int] = 1,
):
    """The same operands by TMA (warp 0 calls it): one elected lane arms stage ``st``'s transaction mbarrier for
    ``tx_bytes``, then the copies of workspace row ``row`` (slot x heads + head) into the stage. ``tma_parts``: the
    (atom, global partition, shared partition) triples of -Wm, kd, U and exp(G_C). ``wgs`` > 1 (the two-warpgroup
    fused kernel, ``consumer_wgs``): -Wm, kd and exp(G_C) once, the U columns of value blocks ``vblk * wgs + w`` into
    warpgroup ``w``'s U tile of stage ``st`` (``tUs[.., st, w]``)."""
    atom_w, tWg, tWs, atom_kd, tKg, tKs, atom_u, tUg, tUs, atom_ge, tGg, tGs = tma_parts
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(mbar + st, tx_bytes)
    for h in cutlass.range_constexpr(nh):
        cute.copy(atom_w, tWg[None, row, h], tWs[None, 0, h, st], tma_bar_ptr=mbar + st)
        cute.copy(atom_kd, tKg[None, row * nh + h, 0], tKs[None, st * nh + h], tma_bar_ptr=mbar + st)
    if const_expr(wgs > 1):
        for w in cutlass.range_constexpr(wgs):
            cute.copy(atom_u, tUg[None, row, vblk * wgs + w], tUs[None, st, w], tma_bar_ptr=mbar + st)
    else:
        cute.copy(atom_u, tUg[None, row, vblk], tUs[None, st], tma_bar_ptr=mbar + st)
    cute.copy(atom_ge, tGg[None, row, 0], tGs[None, st], tma_bar_ptr=mbar + st)


@cute.jit
def state_to_workspace(
    sS: cute.Tensor, mH: cute.Tensor, slot: Int32, head: Int32, vblk: Int32, tidx: Int32, vw: cutlass.Constexpr[int], nh: cutlass.Constexpr[int]
):
    """The state entering the chunk (bf16 ``sS`` [vw, K], published) -> ``h[slot]`` rows of value block ``vblk``, for the
    output kernel, by 16-byte vectors."""
    for h in cutlass.range_constexpr(nh):
        s2g_tile(cute.local_tile(sS, (vw, BV), (0, h)), cute.local_tile(mH[slot, head, None, None], (vw, BV), (vblk, h)), tidx)


@cute.jit
def vn_to_smem(
    mma: cute.TiledMma,
    acc_v: cute.Tensor,
    w_A: cute.Tensor,
    s0_B: cute.Tensor,
    sU: cute.Tensor,
    sVnT: cute.Tensor,
    ct: cute.Tensor,
    st: cutlass.Constexpr[int],
    st_t: cute.ThrCopy | None = None,
):
    """``Vn = U + (-Wm) S0^T`` [tokens, vw] (fp32 ``acc_v``, U and -Wm from stage ``st``) -> bf16 ``Vn^T`` in ``sVnT``
    [vw, tokens] (the state update's B operand); the caller publishes it. ``st_t`` (the key's ``stmatrix``: the thread's
    slice of :func:`stmatrix_t_copy`): the transposed store by ``stmatrix.trans``, else element by element."""
    for i in cutlass.range_constexpr(cute.size(acc_v)):
        rc = ct[i]
        acc_v[i] = sU[rc[0], rc[1], st]
    wgmma(mma, acc_v, w_A[None, None, None, st], s0_B, False)
    if const_expr(st_t is None):
        for i in cutlass.range_constexpr(cute.size(acc_v)):
            rc = ct[i]
            sVnT[rc[1], rc[0]] = acc_v[i].to(BFloat16)
    else:
        acc_to_smem_trans(st_t, acc_v, sVnT)


def stmatrix_t_copy(mma: cute.TiledMma, tidx: Int32, transpose: bool = True):
    """Thread ``tidx``'s (its warpgroup's thread index) slice of the ``stmatrix`` (four 8 x 8 bf16 matrices; ``.trans``
    by default) tiled copy of ``mma``'s accumulator (the state passes' ``stmatrix`` option): a thread's two adjacent
    accumulator columns of a row are one 32-bit register of an 8 x 8 matrix (stored transposed with ``.trans``); the
    matrices' 16-byte rows stay contiguous under the tiles' 128-byte swizzle."""
    return cute.make_tiled_copy_C(cute.make_copy_atom(nvwarp.StMatrix8x8x16bOp(transpose, 4), BFloat16), mma).get_slice(tidx)


@cute.jit
def acc_to_smem_trans(st_t: cute.ThrCopy, acc: cute.Tensor, sT: cute.Tensor):
    """An fp32 accumulator [M, N] -> the swizzled bf16 tile ``sT`` [N, M] transposed, by ``stmatrix.trans``
    (:func:`acc_to_smem_stsm` through the tile's transposed view): what ``sT[c, r] = acc[r, c]`` stores element by
    element, at the same addresses. Not fenced."""
    acc_to_smem_stsm(st_t, acc, transpose_view(sT))


@cute.jit
def acc_to_smem_stsm(st: cute.ThrCopy, acc: cute.Tensor, sDst: cute.Tensor):
    """An fp32 accumulator rounded to bf16 (``cvt.rn.bf16x2.f32``, two at a time: each the rounding of one
    ``.to(BFloat16)``) -> ``sDst`` (the accumulator's [M, N] view of a swizzled bf16 tile) by ``st`` (a slice of
    :func:`stmatrix_t_copy`). Not fenced."""
    frag = cute.make_rmem_tensor(acc.layout, BFloat16)
    frag.store(acc.load().to(BFloat16))
    cute.copy(st, st.retile(frag), st.partition_D(sDst))


@cute.jit
def update_state_t(mma: cute.TiledMma, acc_t: list, sGE: cute.Tensor, kd_A: cute.Tensor, vn_B: cute.Tensor, ct: cute.Tensor, st: cutlass.Constexpr[int]):
    """``S^T = Diag(exp(G_C)) S^T + kd Vn``: the transposed state accumulators decayed by stage ``st``'s exp(G_C), then
    the K / 64 tiles of the update in one WGMMA group (waited for)."""
    nh = len(acc_t)
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
            kr = ct[i]
            acc_t[h][i] = acc_t[h][i] * sGE[h * BV + kr[0], st]
    wgmma_each_a_into_each(mma, acc_t, kd_A, vn_B, st * nh)


# ---- the fused state pass + output (kda/chunk_parallel_state_out_kernel.py, the opt-in ``fuse_out`` state-pass key) ------
# The same transposed state slice and per-chunk chain as the narrow state pass; the WGMMA groups are issued without
# waiting (``wgmma_issue``) so the output products run beside the chain, and the caller orders them by
# ``warpgroup.wait_group`` (groups complete in issue order).


@cute.jit
def wgmma_issue(mma: cute.TiledMma, acc: cute.Tensor, tA: cute.Tensor, tB: cute.Tensor, zero_init: cutlass.Constexpr[bool]):
    """``acc (+)= A @ B`` over every k-block as ONE committed WGMMA group, NOT waited for: the caller touches ``acc``
    only after a ``warpgroup.wait_group`` that covers this group (the k-order of ``delta_rule.wgmma``)."""
    warpgroup.fence()
    atom = cute.make_mma_atom(mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for kb in cutlass.range_constexpr(cute.size(tA.shape[2])):
        cute.gemm(atom, acc, tA[None, None, kb], tB[None, None, kb], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()


@cute.jit
def u_to_acc(acc_v: cute.Tensor, sU: cute.Tensor, ct: cute.Tensor, st: cutlass.Constexpr[int]):
    """Stage ``st``'s U columns [tokens, vw] (fp32) -> the Vn accumulator (the first step of :func:`vn_to_smem`)."""
    for i in cutlass.range_constexpr(cute.size(acc_v)):
        rc = ct[i]
        acc_v[i] = sU[rc[0], rc[1], st]


@cute.jit
def acc_to_smem_t(acc: cute.Tensor, sT: cute.Tensor, ct: cute.Tensor, st_t: cute.ThrCopy | None = None):
    """A [tokens, vw] fp32 accumulator -> bf16 ``sT`` [vw, tokens] (transposed: ``Vn^T``, the last step of
    :func:`vn_to_smem`); the caller publishes it. ``st_t``: by ``stmatrix.trans`` (:func:`acc_to_smem_trans`)."""
    if const_expr(st_t is None):
        for i in cutlass.range_constexpr(cute.size(acc)):
            rc = ct[i]
            sT[rc[1], rc[0]] = acc[i].to(BFloat16)
    else:
        acc_to_smem_trans(st_t, acc, sT)


@cute.jit
def acc_to_smem(acc: cute.Tensor, sO: cute.Tensor, ct: cute.Tensor, st_n: cute.ThrCopy | None = None):
    """A [tokens, vw] fp32 accumulator -> bf16 ``sO`` [tokens, vw] (one ``.to(BFloat16)`` per element, the output
    kernels' rounding); the caller publishes it. ``st_n``: by ``stmatrix`` (:func:`stmatrix_t_copy` without ``.trans``: two values per
    ``cvt.rn.bf16x2.f32``, the same rounding, the same addresses)."""
    if const_expr(st_n is None):
        for i in cutlass.range_constexpr(cute.size(acc)):
            rc = ct[i]
            sO[rc[0], rc[1]] = acc[i].to(BFloat16)
    else:
        acc_to_smem_stsm(st_n, acc, sO)


@cute.jit
def scale_acc_rows(acc: cute.Tensor, sRF: cute.Tensor, ct: cute.Tensor, st: cutlass.Constexpr[int]):
    """``acc[r, :] *= rf[r]`` (GDN's row factors ``scale exp(G_r)`` of stage ``st``, fp32): the output kernels' step
    between ``Q S0^T`` and ``+= P Vn``."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        rc = ct[i]
        acc[i] = acc[i] * sRF[rc[0], st]


@cute.jit
def issue_state_update_t(mma: cute.TiledMma, acc_t: list, sGE: cute.Tensor, kd_A: cute.Tensor, vn_B: cute.Tensor, ct: cute.Tensor, st: cutlass.Constexpr[int]):
    """:func:`update_state_t` without its wait: the transposed state accumulators decayed by stage ``st``'s exp(G_C),
    then the K / 64 tiles of ``kd Vn`` issued as ONE committed WGMMA group (the caller waits)."""
    nh = len(acc_t)
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_t[h])):
            kr = ct[i]
            acc_t[h][i] = acc_t[h][i] * sGE[h * BV + kr[0], st]
    warpgroup.fence()
    atom = cute.make_mma_atom(mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, True)
    for h in cutlass.range_constexpr(nh):
        for kb in cutlass.range_constexpr(cute.size(vn_B.shape[2])):
            cute.gemm(atom, acc_t[h], kd_A[None, None, kb, st * nh + h], vn_B[None, None, kb], acc_t[h])
    warpgroup.commit_group()


@cute.jit
def wg_smem_ready(wgi: Int32):
    """:func:`.delta_rule.smem_ready` for one warpgroup of a multi-warpgroup CTA: its threads' generic-proxy shared
    writes visible to its next WGMMA, through named barrier ``1 + wgi`` (128 threads; barrier 0 stays the CTA's), so
    one warpgroup never waits on another's chain."""
    cute.arch.fence_view_async_shared()
    cute.arch.barrier(barrier_id=wgi + 1, number_of_threads=THREADS)


@cute.jit
def fetch_out_operands_tma(parts: tuple, row: Int32, st: cutlass.Constexpr[int], mbar: cute.Pointer, nh: cutlass.Constexpr[int]):
    """The output operands of workspace row ``row`` (slot x heads + head) into stage ``st`` by TMA (warp 0, after
    :func:`fetch_chunk_tma` armed the stage's mbarrier for them too): qg [64 tokens, K] (``nh`` 64-column boxes), p [64,
    64] and, when ``parts`` has them (GDN's ``row_scaled``), the row factors rf [64]. ``parts``: the (atom, global
    partition, shared partition) triples of qg, p (and rf)."""
    atom_q, tQg, tQs, atom_p, tPg, tPs = parts[:6]
    for h in cutlass.range_constexpr(nh):
        cute.copy(atom_q, tQg[None, row, h], tQs[None, 0, h, st], tma_bar_ptr=mbar + st)
    cute.copy(atom_p, tPg[None, row, 0], tPs[None, st], tma_bar_ptr=mbar + st)
    if const_expr(len(parts) > 6):
        atom_r, tRg, tRs = parts[6:]
        cute.copy(atom_r, tRg[None, row, 0], tRs[None, st], tma_bar_ptr=mbar + st)


# ---- the 256-thread prep kernels (kda/chunk_parallel_prep_kernel.py, gdn/chunk_parallel_prep_tc_kernel.py) ----------------
# Element pass: four threads per token row (row = tid / 4, j4 = tid % 4), each holding D / 32 16-byte chunks of 8
# channels in the order of :func:`element_chunk` (alternating parity with the row against the 128-byte swizzle: the
# 16-byte shared stores are conflict-free).


@cute.jit
def element_chunk(j4: Int32, m: cutlass.Constexpr[int]):
    """The 16-byte chunk (8 channels) of a row that thread ``j4`` of the row handles as its ``m``-th."""
    return 2 * j4 + (m % 2) + 8 * (m // 2)


@cute.jit
def transpose_view(a: cute.Tensor):
    """Layout algebra only: (rows, cols) -> (cols, rows) of a shared-memory tile (a row-major tile as the MN-major B
    operand of a WGMMA, as the attention kernels read V)."""
    return cute.composition(a, cute.make_ordered_layout((a.shape[1], a.shape[0]), order=(1, 0)))


@cute.jit
def load_qk_row_chunks(gQ: cute.Tensor, gK: cute.Tensor, t_row: Int32, hk: Int32, j4: Int32, nm: cutlass.Constexpr[int]):
    """``(qbuf, kbuf)`` [1, 1, 8, nm] bf16: this thread's ``nm`` 16-byte chunks of q and k of token ``t_row``, q/k head
    ``hk`` (``gQ`` / ``gK``: the 16-byte vector views of ``delta_rule.make_qkvo_views``)."""
    qbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, nm)), BFloat16)
    kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, nm)), BFloat16)
    for m in cutlass.range_constexpr(nm):
        ch = 2 * j4 + (m % 2) + 8 * (m // 2)
        cute.autovec_copy(gQ[(None, None, None), (t_row, hk, ch)], qbuf[None, None, None, m])
        cute.autovec_copy(gK[(None, None, None), (t_row, hk, ch)], kbuf[None, None, None, m])
    return qbuf, kbuf


@cute.jit
def cp_async_v_row_chunks(gV: cute.Tensor, sVv: cute.Tensor, t_row: Int32, head: Int32, row: Int32, j4: Int32, nm: cutlass.Constexpr[int]):
    """cp.async of this thread's ``nm`` 16-byte chunks of v (token ``t_row``, head ``head``) into row ``row`` of the
    shared tile (``sVv``: its [rows, chunks of 8] view), committed as one group."""
    cp_atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), BFloat16, num_bits_per_copy=128)
    for m in cutlass.range_constexpr(nm):
        ch = 2 * j4 + (m % 2) + 8 * (m // 2)
        src = gV[(None, None, None), (t_row, head, ch)]
        dst = sVv[(None, None), (row, ch)]
        cute.copy(cp_atom, cute.make_tensor(src.iterator, cute.make_layout(VEC)), cute.make_tensor(dst.iterator, cute.make_layout(VEC)))
    cute.arch.cp_async_commit_group()


@cute.jit
def row_qk_scales(qbuf: cute.Tensor, kbuf: cute.Tensor, row: Int32, n_valid: Int32, nm: cutlass.Constexpr[int], l2norm: cutlass.Constexpr[bool]):
    """``(inv_q, inv_k)``: the factors of this row's q and k -- 0 past the chunk's ``n_valid`` tokens, else 1 or (with
    ``l2norm``) ``rsqrt(|x|^2 + eps)`` over the row, reduced over its four threads (lanes 4r..4r+3) by two shuffles."""
    keep = Float32(0.0)
    if row < n_valid:
        keep = Float32(1.0)
    inv_q = keep
    inv_k = keep
    if const_expr(l2norm):
        sq = Float32(0.0)
        sk = Float32(0.0)
        for m in cutlass.range_constexpr(nm):
            for e in cutlass.range_constexpr(VEC):
                xq = qbuf[0, 0, e, m].to(Float32)
                xk = kbuf[0, 0, e, m].to(Float32)
                sq = sq + xq * xq
                sk = sk + xk * xk
        sq = sq + cute.arch.shuffle_sync_bfly(sq, offset=1)
        sk = sk + cute.arch.shuffle_sync_bfly(sk, offset=1)
        sq = sq + cute.arch.shuffle_sync_bfly(sq, offset=2)
        sk = sk + cute.arch.shuffle_sync_bfly(sk, offset=2)
        inv_q = keep * cute.math.rsqrt(sq + Float32(L2NORM_EPS))
        inv_k = keep * cute.math.rsqrt(sk + Float32(L2NORM_EPS))
    return inv_q, inv_k


@cute.jit
def kd_chunk_to_workspace(mKD: cute.Tensor, kdbuf: cute.Tensor, slot: Int32, head: Int32, row: Int32, ch: Int32):
    """One 16-byte chunk ``ch`` of ``(K exp(G_C - G))`` of token ``row`` (``kdbuf`` [1, 8] bf16) -> the workspace
    ``mKD[slot, head]`` [channel % 64, token, channel / 64], element by element (transposed)."""
    for e in cutlass.range_constexpr(VEC):
        col = ch * VEC + e
        mKD[slot, head, col % BV, row, col // BV] = kdbuf[0, e]


@cute.jit
def solve_diagonal_blocks(sA: cute.Tensor, sT: cute.Tensor, tidx: Int32):
    """The diagonal 16 x 16 blocks of ``T = (I + A)^-1`` (``A`` strictly lower in ``sA``) into ``sT`` by forward
    substitution: threads 0..63 one column each, in registers (zeros above the diagonal, ones on it); then a CTA barrier.
    The first step of :func:`solve_inverse_256` and of the KDA prep's tiled solve."""
    if tidx < CHUNK:
        b0 = (tidx // SOLVE_BLOCK) * SOLVE_BLOCK
        cc = tidx % SOLVE_BLOCK
        xcol = cute.make_rmem_tensor(cute.make_layout((SOLVE_BLOCK,)), Float32)
        for i in cutlass.range_constexpr(SOLVE_BLOCK):
            acc_t = Float32(0.0)
            for j in cutlass.range_constexpr(i):
                acc_t = acc_t - sA[b0 + i, b0 + j] * xcol[j]
            if cc == i:
                acc_t = Float32(1.0)
            xcol[i] = acc_t
        for i in cutlass.range_constexpr(SOLVE_BLOCK):
            sT[b0 + i, b0 + cc] = xcol[i]
    cute.arch.sync_threads()


@cute.jit
def solve_inverse_256(sA: cute.Tensor, sT: cute.Tensor, sY: cute.Tensor, tidx: Int32):
    """``T = (I + A)^-1`` in fp32 (``A`` strictly lower [64, 64] in ``sA``) into ``sT`` by a CTA of 256 threads: the
    diagonal 16 x 16 blocks by forward substitution (threads 0..63, one column each, in registers; zeros above the
    diagonal, ones on it), then band by band ``T[I, J] = -T[I, I] sum_{K=J}^{I-1} A[I, K] T[K, J]`` (one element per
    thread and block, the sums through ``sY`` [NB - 1, 16, 16]). Blocks above the diagonal blocks are not written.
    Starts after the caller's barrier publishing ``sA``; ends with a barrier."""
    solve_diagonal_blocks(sA, sT, tidx)
    ri = tidx // SOLVE_BLOCK
    ci = tidx % SOLVE_BLOCK
    for band in cutlass.range_constexpr(1, NB):
        for bI in cutlass.range_constexpr(band, NB):
            bJ = bI - band
            y = Float32(0.0)
            for kk in cutlass.range_constexpr(bJ * SOLVE_BLOCK, bI * SOLVE_BLOCK):
                y = y + sA[bI * SOLVE_BLOCK + ri, kk] * sT[kk, bJ * SOLVE_BLOCK + ci]
            sY[bI - band, ri, ci] = y
        cute.arch.sync_threads()
        for bI in cutlass.range_constexpr(band, NB):
            bJ = bI - band
            t_v = Float32(0.0)
            for mm in cutlass.range_constexpr(SOLVE_BLOCK):
                t_v = t_v + sT[bI * SOLVE_BLOCK + ri, bI * SOLVE_BLOCK + mm] * sY[bI - band, mm, ci]
            sT[bI * SOLVE_BLOCK + ri, bJ * SOLVE_BLOCK + ci] = -t_v
        cute.arch.sync_threads()


@cute.jit
def state_operand_tma_partitions(
    atom_w: cute.CopyAtom,
    tma_w: cute.Tensor,
    sW: cute.Tensor,
    atom_kd: cute.CopyAtom,
    tma_kd: cute.Tensor,
    sKD: cute.Tensor,
    atom_u: cute.CopyAtom,
    tma_u: cute.Tensor,
    sU: cute.Tensor,
    atom_ge: cute.CopyAtom,
    tma_ge: cute.Tensor,
    sGE: cute.Tensor,
    D: cutlass.Constexpr[int],
    VW: cutlass.Constexpr[int],
    STAGES: cutlass.Constexpr[int],
):
    """The state pass's TMA views of its four per-chunk operands (narrow and fused state passes): -Wm / U as [slot x
    head x token rows, channels] (U ``VW`` columns wide), kd as [slot x head x channel rows, tokens], exp(G_C) as
    [slot x head, channels]; the shared tiles (``STAGES`` deep) grouped per TMA box. Returns ``(tWs, tWg, tKs, tKg, tUs,
    tUg, tGs, tGg)``."""
    sGE3 = cute.make_tensor(sGE.iterator, cute.make_layout((1, D, STAGES), stride=(D, 1, D)))
    tWs, tWg = tma_box_partition(atom_w, cute.flat_divide(sW, (CHUNK, BV)), tma_w, (CHUNK, BV))
    tKs, tKg = tma_box_partition(atom_kd, sKD, tma_kd, (CHUNK, CHUNK))
    tUs, tUg = tma_box_partition(atom_u, sU, tma_u, (CHUNK, VW))
    tGs, tGg = tma_box_partition(atom_ge, sGE3, tma_ge, (1, D))
    return tWs, tWg, tKs, tKg, tUs, tUg, tGs, tGg


@cute.jit
def tma_box_partition(atom: cute.CopyAtom, s_boxes: cute.Tensor, g: cute.Tensor, box: cutlass.Constexpr):
    """One TMA atom's (shared, global) partition, one CTA: ``s_boxes`` is the shared tile as [box rows, box cols, ...]
    (``cute.flat_divide`` it first when a box is narrower than the tile), ``g`` the global view divided into ``box``
    tiles. Returns ``(shared, global)`` as ``cpasync.tma_partition``."""
    return cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(s_boxes, 0, 2), cute.group_modes(cute.flat_divide(g, box), 0, 2))


@cute.jit
def state_pass_layouts(D: cutlass.Constexpr[int], VW: cutlass.Constexpr[int], STAGES: cutlass.Constexpr[int]):
    """Host side of both state passes (narrow, fused): the WGMMA (M = 64, N = ``VW``) and the shared layouts of S0
    [VW V rows, K], -Wm [tokens, K] x stages, (K exp(G_C - G))^T [64 K-ch, tokens] x K/64 x stages and Vn^T [VW,
    tokens]. Returns ``(mma, l_s, l_w, l_kc, l_vt)``."""
    mma = make_mma_nv(VW)
    l_s = k_major_smem_layout(VW, D)
    l_w = k_major_smem_layout(CHUNK, D, STAGES)
    l_kc = k_major_smem_layout(CHUNK, CHUNK, (D // BV) * STAGES)
    l_vt = k_major_smem_layout(VW, CHUNK)
    return mma, l_s, l_w, l_kc, l_vt


@cute.jit
def tma_u_atom(VW: cutlass.Constexpr[int]):
    """Host side: the 128-byte-swizzled fp32 atom of the U tile [tokens, VW] that TMA fills (no padded rows; the
    swizzle keeps the accumulator-pattern reads conflict-free); ``cute.tile_to_shape`` it over the stages."""
    return warpgroup.make_smem_layout_atom(sm90_utils.get_smem_layout_atom(_compat.layout_enum().ROW_MAJOR, Float32, VW), Float32)


@cute.jit
def state_operand_tma_atoms(
    w_ptr: cute.Pointer,
    u_ptr: cute.Pointer,
    kd_ptr: cute.Pointer,
    ge_ptr: cute.Pointer,
    rows: Int32,
    D: cutlass.Constexpr[int],
    VW: cutlass.Constexpr[int],
    u_box: cute.ComposedLayout,
):
    """Host side of both state passes: the TMA load atoms of the four per-chunk operands over 2-D views of the workspace
    arrays (``rows`` = slots x heads): -Wm / U [rows x tokens, K] (U in ``VW``-column boxes of the shared ``u_box``), kd
    [rows x K, tokens], exp(G_C) [rows, K]. Returns ``(atom_w, tma_w, atom_kd, tma_kd, atom_u, tma_u, atom_ge,
    tma_ge)``, the order :func:`state_operand_tma_partitions` takes them in."""
    g2s_op = cpasync.CopyBulkTensorTileG2SOp()
    mW2 = cute.make_tensor(w_ptr, cute.make_layout((rows * CHUNK, D), stride=(D, 1)))
    mKD2 = cute.make_tensor(kd_ptr, cute.make_layout((rows * D, CHUNK), stride=(CHUNK, 1)))
    mU2 = cute.make_tensor(u_ptr, cute.make_layout((rows * CHUNK, D), stride=(D, 1)))
    mGE2 = cute.make_tensor(ge_ptr, cute.make_layout((rows, D), stride=(D, 1)))
    atom_w, tma_w = cpasync.make_tiled_tma_atom(g2s_op, mW2, k_major_smem_layout(CHUNK, BV), (CHUNK, BV))
    atom_kd, tma_kd = cpasync.make_tiled_tma_atom(g2s_op, mKD2, k_major_smem_layout(CHUNK, CHUNK), (CHUNK, CHUNK))
    atom_u, tma_u = cpasync.make_tiled_tma_atom(g2s_op, mU2, u_box, (CHUNK, VW))
    atom_ge, tma_ge = cpasync.make_tiled_tma_atom(g2s_op, mGE2, cute.make_layout((1, D), stride=(D, 1)), (1, D))
    return atom_w, tma_w, atom_kd, tma_kd, atom_u, tma_u, atom_ge, tma_ge


@cute.jit
def chunk_walk(mCu: cute.Tensor | None, seq: Int32, seq_len: Int32, chunks_per_seq: Int32, varlen: cutlass.Constexpr[bool]):
    """Sequence ``seq``'s token range, chunk count and first workspace slot: ``(bos, eos, n_chunks, base)``."""
    bos, eos = sequence_bounds(mCu, seq, seq_len, varlen)
    n_chunks = (eos - bos + (CHUNK - 1)) // CHUNK
    base = slot_base(mCu, seq, seq_len, chunks_per_seq, varlen)
    return bos, eos, n_chunks, base


@cute.jit
def state_pass_smem(storage, l_s: cute.ComposedLayout, l_w: cute.ComposedLayout, l_kc: cute.ComposedLayout, l_vt: cute.ComposedLayout):
    """Both state passes: the shared tensors S0, -Wm, kd and Vn^T of ``storage`` (fields ``smem_s``, ``smem_w``,
    ``smem_kd``, ``smem_vnt``) in the layouts of :func:`state_pass_layouts`. Returns ``(sS, sW, sKD, sVnT)``."""
    sS = storage.smem_s.get_tensor(l_s.outer, swizzle=l_s.inner)
    sW = storage.smem_w.get_tensor(l_w.outer, swizzle=l_w.inner)
    sKD = storage.smem_kd.get_tensor(l_kc.outer, swizzle=l_kc.inner)
    sVnT = storage.smem_vnt.get_tensor(l_vt.outer, swizzle=l_vt.inner)
    return sS, sW, sKD, sVnT


@cute.jit
def state_pass_fragments(mma: cute.TiledMma, sW: cute.Tensor, sS: cute.Tensor, sKD: cute.Tensor, sVnT: cute.Tensor):
    """Both state passes: the WGMMA operand fragments -Wm (A, per stage), S0 [VW, K] (B), the kd tiles (A, K/64 x
    stages) and Vn^T [VW, tokens] (B). Returns ``(w_A, s0_B, kd_A, vn_B)``."""
    wg = mma.get_slice(0)
    w_A = wg.make_fragment_A(wg.partition_A(sW))
    s0_B = wg.make_fragment_B(wg.partition_B(sS))
    kd_A = wg.make_fragment_A(wg.partition_A(sKD))
    vn_B = wg.make_fragment_B(wg.partition_B(sVnT))
    return w_A, s0_B, kd_A, vn_B


@cute.jit
def init_stage_ring(atoms: tuple, mbar: cute.Pointer, warp: Int32, STAGES: cutlass.Constexpr[int], empty_arrivals: cutlass.Constexpr[int]):
    """Both TMA state passes: warp 0 prefetches the TMA descriptors of ``atoms`` and one lane initializes the ``STAGES``
    full (transaction) mbarriers, arrive count 1, and with ``empty_arrivals`` > 0 the ``STAGES`` empty mbarriers after
    them (that arrive count); then the init fence. The caller publishes them (a CTA barrier) before any thread waits."""
    if warp == 0:
        for i in cutlass.range_constexpr(len(atoms)):
            cpasync.prefetch_descriptor(atoms[i])
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(mbar + s, 1)
            if const_expr(empty_arrivals > 0):
                for s in cutlass.range_constexpr(STAGES):
                    cute.arch.mbarrier_init(mbar + STAGES + s, empty_arrivals)
    cute.arch.mbarrier_init_fence()
