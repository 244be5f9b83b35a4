"""Device blocks shared by the chunked gated-delta-rule kernels (gdn/ and kda/: the serial forwards, the chunk-parallel
prep kernels and the backwards' passes): ``@cute.jit`` helpers only, traced inline into the calling kernel (the PTX of
each kernel is the same as with the blocks written in place), and the serial forwards' shared host launch
(:class:`SerialForwardLaunch`, and :class:`DeltaRuleKernel` the base of every serial kernel class: host code, no
device code). Where Gated DeltaNet (one scalar decay per token) and
Kimi Delta Attention (one per key channel) differ, a block takes ``per_key`` (constexpr), e.g. :func:`chunk_gates`.

Conventions of both kernels: one warpgroup (``THREADS`` = 128) per CTA; chunk ``CHUNK`` = 64 tokens; the CTA's
state slice ``S[64, K]`` lives in ``K / 64`` fp32 WGMMA accumulators ``acc_s`` (64 x 64 each) and as a bf16
copy ``sS`` [64, K] in shared memory; ``c64`` maps an accumulator element to its (row, col); the loaders use two
threads per token row (``row = tidx // 2``, ``half = tidx % 2``).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import warpgroup

from cudnn import _compat

CHUNK = 64  # tokens per chunk
BV = 64  # rows of S (value channels) per CTA
THREADS = 128  # one warpgroup
L2NORM_EPS = 1e-6
VEC = 8  # bf16 elements per 16-byte load
SOLVE_BLOCK = 16  # diagonal block of the blocked triangular solve


@cute.jit
def make_mma_n64(a_mn: bool = False, b_mn: bool = False):
    """The one tiled MMA of every product: 64 x 64 outputs, bf16 K-major A and B, fp32 accumulators (one warpgroup);
    ``a_mn`` / ``b_mn``: A / B read MN-major (a row-major tile as the transposed operand: the contraction runs over its
    rows). Every variant has the same accumulator layout."""
    major = (warpgroup.OperandMajorMode.MN if a_mn else warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN if b_mn else warpgroup.OperandMajorMode.K)
    return sm90_utils.make_trivial_tiled_mma(BFloat16, BFloat16, *major, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(64, 64))


@cute.jit
def k_major_smem_layout(rows: cutlass.Constexpr[int], cols: cutlass.Constexpr[int], stages: cutlass.Constexpr[int] = 0):
    """K-major (row-major, reduction dim contiguous) 128B-swizzled bf16 tile [rows, cols], as WGMMA reads it; ``stages``
    of them ([rows, cols, stages]) when ``stages`` > 0."""
    layout_enum = _compat.layout_enum()
    atom = warpgroup.make_smem_layout_atom(sm90_utils.get_smem_layout_atom(layout_enum.ROW_MAJOR, BFloat16, cols), BFloat16)
    shape = (rows, cols)
    order = (0, 1)
    if const_expr(stages > 0):
        shape = (rows, cols, stages)
        order = (0, 1, 2)
    return cute.tile_to_shape(atom, shape, order=order)


@cute.jit
def wy_fragments(wg: cute.ThrMma, sTm: cute.Tensor, sVT: cute.Tensor, sW: cute.Tensor, sS: cute.Tensor, sP: cute.Tensor, sVnT: cute.Tensor):
    """WGMMA operands (shared-memory descriptors) of steps 5-7 of both kernels, from the warpgroup slice ``wg``:
    ``(u_A, u_B, vn_A, s0_B, pv_A, pv_B, su_A)`` = Tm, (beta V)^T, -Wm, S0, P, Vn^T (as B), Vn^T (as A)."""
    u_A = wg.make_fragment_A(wg.partition_A(sTm))
    u_B = wg.make_fragment_B(wg.partition_B(sVT))
    vn_A = wg.make_fragment_A(wg.partition_A(sW))
    s0_B = wg.make_fragment_B(wg.partition_B(sS))
    pv_A = wg.make_fragment_A(wg.partition_A(sP))
    pv_B = wg.make_fragment_B(wg.partition_B(sVnT))
    su_A = wg.make_fragment_A(wg.partition_A(sVnT))
    return u_A, u_B, vn_A, s0_B, pv_A, pv_B, su_A


@cute.jit
def make_accumulators(mma: cute.TiledMma, wg: cute.ThrMma, tidx: Int32, nh: cutlass.Constexpr[int]):
    """``(acc_a, acc_b, acc_s, c64)``: two 64 x 64 fp32 accumulators, the state slice S[64, K] as ``nh`` = K / 64
    accumulators of 64 x 64 (every product is m64n64: 128 accumulator registers live in all), and the (row, col) of
    each accumulator element of thread ``tidx``."""
    acc_a = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
    acc_b = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
    acc_s = [cute.make_rmem_tensor(wg.partition_shape_C((BV, BV)), Float32) for _ in range(nh)]
    c64 = mma.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))
    return acc_a, acc_b, acc_s, c64


@cute.jit
def wgmma(tiled_mma: cute.TiledMma, acc: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor, zero_init: cutlass.Constexpr[bool]):
    """acc (+)= A @ B over every k-block of the fragments; one committed WGMMA group, waited for."""
    warpgroup.fence()
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for kb in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(atom, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    warpgroup.wait_group(0)


@cute.jit
def row_scale(rbuf: cute.Tensor, keep: Float32, l2norm: cutlass.Constexpr[bool], nv: cutlass.Constexpr[int], vec: cutlass.Constexpr[int]) -> Float32:
    """The factor a staged bf16 half row ``rbuf`` [1, 1, vec, nv] is multiplied by: ``keep`` (1 inside the
    sequence, 0 past its end), times ``rsqrt(sum x^2 + eps)`` over the whole row (this lane's half and its
    ``shuffle_sync_bfly(1)`` partner's) when ``l2norm``."""
    inv = keep
    if const_expr(l2norm):
        ss = Float32(0.0)
        for vj in cutlass.range_constexpr(nv):
            for e in cutlass.range_constexpr(vec):
                x = rbuf[0, 0, e, vj].to(Float32)
                ss = ss + x * x
        ss = ss + cute.arch.shuffle_sync_bfly(ss, offset=1)
        inv = keep * cute.math.rsqrt(ss + Float32(L2NORM_EPS))
    return inv


@cute.jit
def smem_ready():
    """Generic-proxy shared-memory writes of every thread become visible to the next WGMMA (async proxy)."""
    cute.arch.fence_view_async_shared()
    cute.arch.sync_threads()


@cute.jit
def make_qkvo_views(
    q_ptr: cute.Pointer,
    k_ptr: cute.Pointer,
    v_ptr: cute.Pointer,
    o_ptr: cute.Pointer,
    T: Int32,
    heads: Int32,
    qk_heads: Int32,
    q_strides: tuple[Int64, Int64],
    k_strides: tuple[Int64, Int64],
    v_strides: tuple[Int64, Int64],
    o_strides: tuple[Int64, Int64],
    d: cutlass.Constexpr[int],
):
    """``(gQ, gK, gV, mO)``: q, k [T, Hk, d] and v [T, H, d] as 16-byte vectors ((1, 1, VEC), (T, heads, d / VEC)),
    and o [T, H, d]. q, k, v token / head strides are multiples of VEC elements and the bases 16-byte aligned
    (checked by the adapter), so each thread reads its part of a row with 16-byte vector loads."""
    mQ = cute.make_tensor(q_ptr, cute.make_layout((T, qk_heads, d), stride=(cute.assume(q_strides[0], divby=VEC), cute.assume(q_strides[1], divby=VEC), 1)))
    mK = cute.make_tensor(k_ptr, cute.make_layout((T, qk_heads, d), stride=(cute.assume(k_strides[0], divby=VEC), cute.assume(k_strides[1], divby=VEC), 1)))
    mV = cute.make_tensor(v_ptr, cute.make_layout((T, heads, d), stride=(cute.assume(v_strides[0], divby=VEC), cute.assume(v_strides[1], divby=VEC), 1)))
    gQ = cute.zipped_divide(mQ, (1, 1, VEC))
    gK = cute.zipped_divide(mK, (1, 1, VEC))
    gV = cute.zipped_divide(mV, (1, 1, VEC))
    mO = cute.make_tensor(o_ptr, cute.make_layout((T, heads, d), stride=(o_strides[0], o_strides[1], 1)))
    return gQ, gK, gV, mO


@cute.jit
def gate_views(g_ptr, beta_ptr, T, heads, D, per_key: bool):
    """``(mG, mB)``: the log decays ``g`` [T, H, K] (``per_key``, KDA) or [T, H] (GDN) and ``beta`` [T, H], contiguous."""
    if const_expr(per_key):
        mG = cute.make_tensor(g_ptr, cute.make_layout((T, heads, D), stride=(Int64(heads) * D, D, 1)))
    else:
        mG = cute.make_tensor(g_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
    mB = cute.make_tensor(beta_ptr, cute.make_layout((T, heads), stride=(heads, 1)))
    return mG, mB


def make_seq_state_views(
    cu_ptr: cute.Pointer | None,
    h0_ptr: cute.Pointer | None,
    ht_ptr: cute.Pointer | None,
    n_seqs: Int32,
    heads: Int32,
    d: cutlass.Constexpr[int],
    varlen: cutlass.Constexpr[bool],
    has_initial: cutlass.Constexpr[bool],
    has_final: cutlass.Constexpr[bool],
):
    """``(mCu, mH0, mHT)``: ``cu_seqlens`` [N + 1] and the initial / final states fp32 [N, H, d, d] contiguous,
    each None when the plan does not have it."""
    mCu = None
    if const_expr(varlen):
        mCu = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))
    state_layout = cute.make_layout((n_seqs, heads, d, d), stride=(Int64(heads) * (d * d), d * d, d, 1))
    mH0 = None
    if const_expr(has_initial):
        mH0 = cute.make_tensor(h0_ptr, state_layout)
    mHT = None
    if const_expr(has_final):
        mHT = cute.make_tensor(ht_ptr, state_layout)
    return mCu, mH0, mHT


@cute.jit
def cta_coords(heads: Int32, qk_heads: Int32):
    """``(tidx, seq, head, hk, v0)`` of this thread and CTA (grid ``[N, H, V / 64]``): its sequence, value head, the
    q/k head it reads (GVA: ``head // (H / Hk)``) and the first of its 64 value channels."""
    tidx, _, _ = cute.arch.thread_idx()
    seq, head, vblk = cute.arch.block_idx()
    hk = head // (heads // qk_heads)
    v0 = vblk * BV
    return tidx, seq, head, hk, v0


@cute.jit
def sequence_bounds(mCu: cute.Tensor | None, seq: Int32, seq_len: Int32, varlen: cutlass.Constexpr[bool]):
    """``(bos, eos)`` of sequence ``seq``: ``cu_seqlens[seq], cu_seqlens[seq + 1]`` (varlen), else ``seq L, seq L + L``."""
    bos = seq * seq_len
    eos = bos + seq_len
    if const_expr(varlen):
        bos = mCu[seq]
        eos = mCu[seq + 1]
    return bos, eos


@cute.jit
def row_guard(t0: Int32, row: Int32, n_valid: Int32, eos: Int32):
    """``(t_row, keep)`` of the loader's token row ``row`` of the chunk at token ``t0``: a valid token to read
    (``min(t0 + row, eos - 1)``) and 1.0 for a row inside the chunk's ``n_valid`` tokens, else 0.0 (rows past ``eos``
    are zeroed by ``keep``)."""
    t_row = min(t0 + row, eos - 1)
    keep = Float32(0.0)
    if row < n_valid:
        keep = Float32(1.0)
    return t_row, keep


@cute.jit
def load_state(
    acc_s: list,
    sS: cute.Tensor,
    mH0: cute.Tensor | None,
    c64: cute.Tensor,
    seq: Int32,
    head: Int32,
    v0: Int32,
    nh: cutlass.Constexpr[int],
    has_initial: cutlass.Constexpr[bool],
):
    """The state slice S[v0:v0+64, :] enters the accumulators ``acc_s`` (fp32) and shared memory ``sS`` (bf16);
    zero without an initial state."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
            rc = c64[i]
            s_in = Float32(0.0)
            if const_expr(has_initial):
                s_in = mH0[seq, head, v0 + rc[0], h * BV + rc[1]]
            acc_s[h][i] = s_in
            sS[rc[0], h * BV + rc[1]] = s_in.to(BFloat16)


@cute.jit
def load_half_row(gX: cute.Tensor, rbuf: cute.Tensor, t_row: Int32, hx: Int32, half: Int32, nv: cutlass.Constexpr[int]):
    """This thread's half of q / k row ``t_row`` (head ``hx``) into ``rbuf`` [1, 1, VEC, nv]: ``nv`` 16-byte loads,
    all issued before any is used."""
    for vj in cutlass.range_constexpr(nv):
        cute.autovec_copy(gX[(None, None, None), (t_row, hx, half * nv + vj)], rbuf[None, None, None, vj])


@cute.jit
def load_v_half_row(gV: cute.Tensor, t_row: Int32, head: Int32, v0: Int32, half: Int32):
    """This thread's 32 value channels of v row ``t_row`` (the CTA's slice ``v0:v0+64``) by 16-byte loads, as a bf16
    register buffer [1, 1, VEC, 32 / VEC]."""
    nvv = (BV // 2) // VEC
    vbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, nvv)), BFloat16)
    for vj in cutlass.range_constexpr(nvv):
        cute.autovec_copy(gV[(None, None, None), (t_row, head, (v0 + half * (BV // 2)) // VEC + vj)], vbuf[None, None, None, vj])
    return vbuf


@cute.jit
def store_beta_v_t(sVT: cute.Tensor, vbuf: cute.Tensor, row: Int32, half: Int32, keep: Float32, b_row: Float32):
    """``(beta V)^T``: this thread's value channels of token ``row`` times ``keep * beta`` into ``sVT`` [64 channels, tokens]."""
    vq = BV // 2
    for vj in cutlass.range_constexpr(vq // VEC):
        for e in cutlass.range_constexpr(VEC):
            col = half * vq + vj * VEC + e
            sVT[col, row] = (vbuf[0, 0, e, vj].to(Float32) * keep * b_row).to(BFloat16)


@cute.jit
def solve_unit_lower_blocked(sA: cute.Tensor, sT: cute.Tensor, sM: cute.Tensor, sTm: cute.Tensor, tidx: Int32):
    """``Tm = (I + A)^-1`` in fp32 (``A`` strictly lower [64, 64] in ``sA``) -> bf16 ``sTm``, by blocks: (a) the four
    diagonal 16 x 16 blocks by forward substitution, one thread per column; (b) block rows I = 1..3:
    ``M = A[I rows, :W] T[:W, :W]`` (W = 16 I) in ``sM``, then ``T[I rows, :W] = -T_II M``. ``sT`` holds the strictly
    lower part; the caller publishes ``sTm`` to WGMMA."""
    if tidx < CHUNK:
        cc = tidx
        for i in range(cc + 1, (cc // SOLVE_BLOCK + 1) * SOLVE_BLOCK):
            acc_t = -sA[i, cc]
            for j in cutlass.range(cc + 1, i, unroll=4):
                acc_t = acc_t - sA[i, j] * sT[j, cc]
            sT[i, cc] = acc_t
    cute.arch.sync_threads()
    for bi in cutlass.range_constexpr(1, CHUNK // SOLVE_BLOCK):
        W = SOLVE_BLOCK * bi
        for s in cutlass.range_constexpr(2 * bi):  # 16 W outputs over 128 threads
            idx = tidx + THREADS * s
            r = idx // W
            c = idx % W
            acc_m = sA[W + r, c]
            for j in cutlass.range(c + 1, W, unroll=4):
                acc_m = acc_m + sA[W + r, j] * sT[j, c]
            sM[r, c] = acc_m
        cute.arch.sync_threads()
        for s in cutlass.range_constexpr(2 * bi):
            idx = tidx + THREADS * s
            r = idx // W
            c = idx % W
            acc_m = sM[r, c]
            for rr in cutlass.range(r, unroll=4):
                acc_m = acc_m + sT[W + r, W + rr] * sM[rr, c]
            sT[W + r, c] = -acc_m
        cute.arch.sync_threads()
    for s in cutlass.range_constexpr(CHUNK * CHUNK // THREADS):
        idx = tidx + THREADS * s
        i = idx // CHUNK
        c = idx % CHUNK
        t_val = Float32(0.0)
        if i == c:
            t_val = Float32(1.0)
        if i > c:
            t_val = sT[i, c]
        sTm[i, c] = t_val.to(BFloat16)


@cute.jit
def wy_new_values(
    mma: cute.TiledMma,
    acc_a: cute.Tensor,
    acc_b: cute.Tensor,
    u_A: cute.Tensor,
    u_B: cute.Tensor,
    kt_B: cute.Tensor,
    vn_A: cute.Tensor,
    s0_B: cute.Tensor,
    sW: cute.Tensor,
    c64: cute.Tensor,
    nh: cutlass.Constexpr[int],
):
    """The WY new values of a chunk (the forwards' step 5, the backwards' pass 1): ``U = Tm (beta V)`` in ``acc_a``;
    ``-Wm = -Tm (beta K exp G)`` 64 K-channels at a time through ``acc_b`` -> bf16 ``sW`` (published);
    ``Vn = U + (-Wm) S0^T`` left in ``acc_a`` for the caller to store."""
    wgmma(mma, acc_a, u_A, u_B, True)
    for h in cutlass.range_constexpr(nh):
        wgmma(mma, acc_b, u_A, kt_B[None, None, None, h], True)
        for i in cutlass.range_constexpr(cute.size(acc_b)):
            rc = c64[i]
            sW[rc[0], h * BV + rc[1]] = (-acc_b[i]).to(BFloat16)
    smem_ready()
    wgmma(mma, acc_a, vn_A, s0_B, False)


@cute.jit
def wy_values(
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
    c64: cute.Tensor,
    nh: cutlass.Constexpr[int],
):
    """Step 5 of both kernels: :func:`wy_new_values`, then ``Vn`` -> bf16 ``sVnT`` (transposed)."""
    wy_new_values(mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, sW, c64, nh)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        sVnT[rc[1], rc[0]] = acc_a[i].to(BFloat16)


@cute.jit
def store_output_rows(mO: cute.Tensor, acc: cute.Tensor, c64: cute.Tensor, t0: Int32, n_valid: Int32, head: Int32, v0: Int32):
    """The chunk's output rows (those inside the sequence, ``row < n_valid``) from ``acc`` [64 tokens, 64 channels]."""
    for i in cutlass.range_constexpr(cute.size(acc)):
        rc = c64[i]
        if rc[0] < n_valid:
            mO[t0 + rc[0], head, v0 + rc[1]] = acc[i].to(mO.element_type)


@cute.jit
def state_to_smem(sS: cute.Tensor, acc_s: list, c64: cute.Tensor, nh: cutlass.Constexpr[int]):
    """The state accumulators -> bf16 ``sS`` (the next chunk's operand); the caller publishes it."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
            rc = c64[i]
            sS[rc[0], h * BV + rc[1]] = acc_s[h][i].to(BFloat16)


@cute.jit
def store_final_state(mHT: cute.Tensor, acc_s: list, c64: cute.Tensor, seq: Int32, head: Int32, v0: Int32, nh: cutlass.Constexpr[int]):
    """The state slice S[v0:v0+64, :] (fp32 accumulators) -> ``final_state[seq, head]``."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
            rc = c64[i]
            mHT[seq, head, v0 + rc[0], h * BV + rc[1]] = acc_s[h][i]


@cute.jit
def chunk_gates(
    mG: cute.Tensor,
    mB: cute.Tensor,
    sG: cute.Tensor | None,
    sGc: cute.Tensor,
    sBeta: cute.Tensor,
    t0: Int32,
    n_valid: Int32,
    head: Int32,
    tidx: Int32,
    d: cutlass.Constexpr[int],
    per_key: cutlass.Constexpr[bool],
):
    """Step 1 of every chunk: beta of the chunk's rows -> ``sBeta`` (0 past the sequence's end) and the in-chunk
    cumulative log decay ``G`` -> ``sGc``; ends with a barrier.

    - scalar gate (g [T, H]): g -> ``sG`` (0 past the end), then ``sGc[i] = sum_{j <= i} sG[j]`` (one thread per row,
      unrolled and predicated: the loads issue back to back);
    - ``per_key`` (g [T, H, K]): one thread per key channel sums down the chunk (16 loads in flight at a time; full
      unrolling spills) into ``sGc`` [C, K]; rows past the end carry g = 0, so they repeat the last cumulative decay
      (``sG`` unused)."""
    if const_expr(per_key):
        if tidx < d:
            cum = Float32(0.0)
            for j in cutlass.range(CHUNK, unroll=16):
                gj = Float32(0.0)
                if j < n_valid:
                    gj = mG[t0 + j, head, tidx].to(Float32)
                cum = cum + gj
                sGc[j, tidx] = cum
        if tidx < CHUNK:
            bv = Float32(0.0)
            if tidx < n_valid:
                bv = mB[t0 + tidx, head].to(Float32)
            sBeta[tidx] = bv
        cute.arch.sync_threads()
    else:
        if tidx < CHUNK:
            gv = Float32(0.0)
            bv = Float32(0.0)
            if tidx < n_valid:
                gv = mG[t0 + tidx, head].to(Float32)
                bv = mB[t0 + tidx, head].to(Float32)
            sG[tidx] = gv
            sBeta[tidx] = bv
        cute.arch.sync_threads()
        if tidx < CHUNK:
            cum = Float32(0.0)
            for j in cutlass.range_constexpr(CHUNK):
                gj = sG[j]
                if j > tidx:
                    gj = Float32(0.0)
                cum = cum + gj
            sGc[tidx] = cum
        cute.arch.sync_threads()


class DeltaRuleKernel:
    """Base of the serial forward and backward kernel classes (host side): ``__init__`` holds the plan, its compile key
    ``key`` (K = V = ``key.head_dim``, 64 or 128, as ``self.D``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128)
        self.key = key
        self.D = key.head_dim


class SerialForwardLaunch(DeltaRuleKernel):
    """Host side of the serial forward kernel classes (``gdn/chunk_fwd_kernel.py``, ``kda/chunk_fwd_kernel.py``):
    ``__init__`` holds the plan (the compile key), ``__call__`` builds the global views and launches ``self.kernel``
    on a grid [sequences, H, V / 64] of one warpgroup each. A family sets ``PER_KEY_GATE`` (``g`` [T, H, K], KDA, or
    [T, H], GDN) and defines ``shared_storage(l_ck, l_kc, l_cc)`` (its ``cute.struct``) and the ``@cute.kernel``
    ``kernel``."""

    PER_KEY_GATE = False

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        h0_ptr: cute.Pointer | None,
        ht_ptr: cute.Pointer | None,
        T: Int32,  # packed token total (dense: B * L)
        n_seqs: Int32,
        seq_len: Int32,  # dense: L (sequence n is tokens [n L, n L + L)); varlen: unused
        heads: Int32,  # H (v, g, beta, o, states)
        qk_heads: Int32,  # Hk (q, k); H % Hk == 0
        scale: Float32,
        q_strides: tuple[Int64, Int64],  # (token, head) in elements; channel stride 1
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        o_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV, mO = make_qkvo_views(q_ptr, k_ptr, v_ptr, o_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides, o_strides, D)
        mG, mB = gate_views(g_ptr, beta_ptr, T, heads, D, self.PER_KEY_GATE)
        mCu, mH0, mHT = make_seq_state_views(cu_ptr, h0_ptr, ht_ptr, n_seqs, heads, D, self.key.varlen, self.key.has_initial, self.key.has_final)

        # One tiled MMA for every product: 64 x 64 outputs, K-major A and B.
        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens or V-rows, K]
        l_kc = k_major_smem_layout(CHUNK, CHUNK, D // BV)  # [64 K-channels, tokens] x K/64: (beta K exp G)^T, then (K exp(G_C - G))^T
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # [64, 64]: Tm, P, (beta V)^T, Vn^T
        SharedStorage = self.shared_storage(l_ck, l_kc, l_cc)

        self.kernel(gQ, gK, gV, mO, mG, mB, mCu, mH0, mHT, n_seqs, seq_len, heads, qk_heads, scale, mma_n64, l_ck, l_kc, l_cc, SharedStorage).launch(
            grid=[n_seqs, heads, D // BV],  # sequences on x: no 65535 limit on their count
            block=[THREADS, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )
