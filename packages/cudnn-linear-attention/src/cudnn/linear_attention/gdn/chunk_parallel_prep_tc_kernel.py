"""Gated DeltaNet forward, chunk-parallel schedule, kernel 1 of 3 (prep), restructured for instruction count: GDN's
default prep kernel since session 6 (``GdnParallelPrepKey.restructured``, default True, routed by
``GatedDeltaNetParallelPrep.for_key``; at the default three CTAs per SM: 133.3 us vs 369.0 for the one-warpgroup kernel
at T = 8192, H = 16, K = V = 128 on the H200). Same contract and the same workspace arrays as
``chunk_parallel_prep_kernel.py`` -- ``-Wm`` and ``(K exp(G_C - G))^T`` (bf16), ``U`` (fp32), ``Q`` normalised (bf16,
the ``qg`` array) with the row factors ``rf = scale exp(G_i)`` (fp32), ``P`` (bf16), ``exp(G_C)`` over the key channels
(``ge``) -- read by the state pass and output kernel (``row_scaled``). Values equal the one-warpgroup kernel's up to
rounding, not bitwise (tests hold it to the FlashAttention tolerance against the fp32 recurrence, and its workspace
arrays to that kernel's within bf16 rounding). sm_90a, CuTe DSL, WGMMA, 256 threads (two warpgroups), three (or two)
CTAs per SM.

Why. The one-warpgroup GDN prep (the session-5 default; one warpgroup, one CTA per SM: about 118 KB of shared memory) spends its time in scalar
per-element work -- q / k / v scaled and stored element by element into swizzled shared memory (three tiles, two of
them transposed), P, A and the decayed keys element by element -- and in the one-warpgroup SIMT solve's dependent
shared-memory chains, with 4 warps per SM to hide it. GDN's gate is one scalar per token, so every decay of the chunk
is a row or column factor except ``exp(G_i - G_j)`` of A and P; this kernel uses that:

1. gates: g and beta of the chunk into shared memory (64 threads), then each of those threads forms its token's
   in-chunk cumulative log decay ``G_i`` and the chunk total ``G_C`` by the default's sequential sums (the same fp32
   values), and writes the per-token tables ``G log2(e)`` (for the per-element decays: one ``ex2.approx`` each),
   ``beta``, ``beta exp(G)`` and ``exp(G_C - G)``, and to the workspace ``rf = scale exp(G_i)`` and ``exp(G_C)``
   (precise ``exp``, as the default). This runs alongside step 2, which needs none of it.
2. one pass per thread over (row = tid / 4, D / 32 16-byte chunks of 8 channels): q, k loaded by 16-byte vectors
   (issued before step 1), the L2 norm over the row by two shuffles, ``Qn`` and ``Kn`` (bf16) written 16 bytes at a
   time to shared memory (the K-major WGMMA operands) and ``Qn`` to the workspace ``qg`` from registers. V goes to
   shared memory by cp.async, issued at the very start (its tile is its own) and waited for before step 5.
3. warpgroup 0 forms ``Kn Kn^T``, warpgroup 1 ``Qn Kn^T`` (one m64n64 WGMMA group each, K-major from shared memory);
   while they run, every thread writes its row's ``(Kn exp(G_C - G))^T`` to the workspace straight from registers
   (the default's step 6). Then the decay ``exp2(G_i log2e - G_j log2e)`` and the masks on the accumulators:
   A (strictly lower, times ``beta_i``) -> shared fp32; P (lower, times ``scale``) -> the workspace (bf16 pairs).
4. ``T = (I + A)^-1`` in fp32 by all 256 threads: the four diagonal 16 x 16 blocks by forward substitution with the
   column in registers (64 threads), then the off-diagonal blocks band by band,
   ``T[I, J] = -T[I, I] sum_{K=J}^{I-1} A[I, K] T[K, J]`` (every band's blocks at once, six barriers); then the two
   bf16 A operands ``T Diag(beta)`` (for U) and ``T Diag(beta exp(G))`` (for W): beta and the key decay are folded
   into the inverse's columns, so V and K are read as they are.
5. WGMMA with MN-major B operands read straight from the row-major V and Kn tiles: warpgroup 0
   ``U = (T Diag(beta)) V`` (fp32), warpgroup 1 ``-Wm = -(T Diag(beta exp G)) Kn`` (bf16), stored in pairs.

Shared memory (K = 128, about 102 KB): Qn, Kn, V (bf16, swizzled), the two bf16 inverses, A and T (fp32, rows
16-byte aligned), the band scratch and the per-token tables. Grid ``[slots, H]`` (idle slots exit), 256 threads,
``min_blocks_per_mp = 2`` (registers capped at 128; ptxas: 96). ``GdnParallelPrepKey.tc_ctas_per_sm = 3`` (the
default, :func:`_three_cta_storage`): T in the bytes of Qn (dead after step 3) and the bf16 inverses in those
of A (dead after the solve), about 70 KB, three CTAs per SM (registers capped at 80; ptxas: 80, no spill); same
operations, same values. Runtime extents and strides are kernel arguments (Rule 4).

Staged W (session 8, issue #7; ``GdnParallelPrepKey.staged_w``, default ON since the session-8 A/B: H200, T = 32k,
H = 64: prep 1891.3 vs 2065.5 us; T = 8k, H = 16: 120.2 vs 135.5; variant ``gdn-prep7`` turns it off): warpgroup 1 stores ``-Wm`` from its accumulators as bf16 pairs into the bytes of Qn (dead
after step 3; at K = 128 with three CTAs per SM those of T, dead once the bf16 inverses are formed), XOR-swizzled by
row (conflict-free; ``kda/chunk_parallel_prep_staged.py``, shared with KDA's ``staged_w``), one named barrier of its
128 threads, then 16-byte copies to the workspace (4 whole 128-byte row segments per warp store): per thread at K = 128,
32 4-byte global stores (half sectors) -> 32 4-byte shared stores + 8 16-byte loads + 8 16-byte global stores. Bitwise
the kernel without it; no spill at two or three CTAs per SM, K = 64 and 128 (``tests/test_gdn_prep_tc_gpu.py -m
compile_only``). KDA's other staged store, ``kd`` (``staged_kd``), has no GDN form: here kd is written while the
step-3 WGMMAs run, and no 16 KB of shared memory is dead then at three CTAs per SM.

Backward-only ``bwd_tm`` (session 10, issue #7; ``GdnParallelPrepKey.bwd_tm``, default off: the default kernel's PTX
is byte-identical). The GDN backward's opt-in ``fold_prep_tm`` (``gdn/bwd_states_parallel_kernel.py``,
``GdnBwdStatesFold``) runs this kernel and the state pass as its pass 1a and no output kernel, so ``qg`` is never read
there. With ``bwd_tm`` step 2 does not write ``qg`` and step 4 writes ``bf16(T)`` -- the unit lower ``Tm = (I + A)^-1``
before the beta fold, zero above the diagonal blocks: the backward's ``Tm`` -- row-major [64, 64] into the first
64 * 64 elements of the slot's ``qg`` tile (16-byte stores from the same ``sT`` reads as ``T Diag(beta)``; 8 KB per chunk
and head instead of qg's 2 * 64 * K bytes). Every other output is bitwise the default kernel's (the same instructions).
A forward plan must never set it (its output kernel reads ``qg``; ``_host/chunk_parallel.set_parallel_options``
refuses it).

The launch entry (:class:`ChunkParallelPrepLaunch`) and the pieces shared with KDA's prep kernel (the row loads and
chunk order of the element pass, the row L2 norm, the 256-thread solve :func:`solve_inverse_256`, ``transpose_view``)
live in ``_device/chunk_parallel.py``.
Tests: ``tests/test_gdn_prep_tc_gpu.py`` (GPU tier and compile tier: ``-m compile_only``); per-kernel time:
``benchmarks/linear_attention_kernels.py --family gdn`` (``parallel`` vs ``par-gdn-prep-base``).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import (
    ChunkParallelPrepLaunch,
    cp_async_v_row_chunks,
    element_chunk,
    kd_chunk_to_workspace,
    load_qk_row_chunks,
    row_qk_scales,
    slot_chunk,
    solve_inverse_256,
    transpose_view,
)
from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, k_major_smem_layout, make_mma_n64
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from ..kda.chunk_parallel_prep_staged import acc_to_stage, stage_to_gmem

WARPGROUPS = 2
NTHREADS = WARPGROUPS * THREADS
CTAS_PER_SM = (2, 3)  # GdnParallelPrepKey.tc_ctas_per_sm: 2 (about 102 KB, registers <= 128) or 3 (about 70 KB, <= 80)
LOG2E = 1.4426950408889634
W_BARRIER = 1  # staged_w: the named barrier of warpgroup 1 (0 is the CTA barrier)
A_STRIDE = CHUNK + 4  # fp32 rows of A and T: 16-byte aligned (vector reads of T)
NB = CHUNK // SOLVE_BLOCK


def _three_cta_storage(l_ck, l_cc, d):
    """The shared-memory struct of ``tc_ctas_per_sm = 3`` (host side, trace time): no ``T`` (K = 128) and no bf16
    inverses of their own -- ``T`` (fp32, rows of 64) lives in the bytes of Qn (dead after step 3's WGMMA; K = 64: Qn is
    too small, ``T`` keeps its field) and ``T Diag(beta)`` | ``T Diag(beta exp G)`` in those of A (dead after the solve).
    About 70 KB at K = 128 (62 KB at K = 64): three CTAs per SM."""

    def f32(n, align=16):
        return cute.struct.Align[cute.struct.MemRange[Float32, n], align]

    tile = cute.cosize(l_ck)
    assert 2 * cute.cosize(l_cc) * 2 <= 4 * CHUNK * A_STRIDE  # the two bf16 inverses fit A
    fields = {  # evaluated annotations (this module defers annotations)
        "smem_q": cute.struct.Align[cute.struct.MemRange[BFloat16, tile], 1024],
        "smem_k": cute.struct.Align[cute.struct.MemRange[BFloat16, tile], 1024],
        "smem_v": cute.struct.Align[cute.struct.MemRange[BFloat16, tile], 1024],
        "smem_a": f32(CHUNK * A_STRIDE, 1024),
    }
    if d == 64:
        fields["smem_t"] = f32(CHUNK * A_STRIDE)
    else:
        assert 2 * tile >= 4 * CHUNK * CHUNK  # T [64, 64] fp32 fits Qn
    fields["smem_y"] = f32((NB - 1) * SOLVE_BLOCK * SOLVE_BLOCK)
    for name in ("smem_g", "smem_gl", "smem_beta", "smem_ew", "smem_ekd"):
        fields[name] = f32(CHUNK)
    return cute.struct(type("GdnPrepTc3Storage", (), {"__annotations__": fields}))


@cute.jit
def acc_pairs_to_gmem(dst: cute.Tensor, acc: cute.Tensor, thr_mma: cute.ThrMma, negate: cutlass.Constexpr[bool]):
    """A 64 x 64 fp32 accumulator (``-acc`` when ``negate``) -> the global tile ``dst`` [64, 64] (row-major, its element
    type) through the accumulator's own partition: each thread's adjacent column pairs as one 8- (fp32) or 4-byte (bf16)
    store."""
    tCg = thr_mma.partition_C(dst)
    if const_expr(dst.element_type == Float32 and not negate):
        cute.autovec_copy(acc, tCg)
    else:
        frag = cute.make_rmem_tensor_like(acc, dst.element_type)
        vals = acc.load()
        if const_expr(negate):
            vals = -vals
        frag.store(vals.to(dst.element_type))
        cute.autovec_copy(frag, tCg)


@cute.jit
def decayed_keys_from_registers(
    mKD: cute.Tensor, kkeep: cute.Tensor, kdec: Float32, slot: Int32, head: Int32, row: Int32, j4: Int32, nm: cutlass.Constexpr[int]
):
    """``(Kn exp(G_C - G))^T`` of this thread's ``nm`` chunks of 8 channels of token ``row`` (``kkeep`` [1, 8, nm]
    bf16, the element pass's chunk order; rows past the end are zero) times the row's decay ``kdec`` -> the workspace
    ``mKD[slot, head]`` [channel % 64, token, channel / 64], element by element."""
    kdbuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
    for m in cutlass.range_constexpr(nm):
        kdbuf.store((kkeep[None, None, m].load().to(Float32) * kdec).to(BFloat16))
        kd_chunk_to_workspace(mKD, kdbuf, slot, head, row, element_chunk(j4, m))


@cute.jit
def gram_with_kd_in_flight(
    mma: cute.TiledMma,
    acc: cute.Tensor,
    tA: cute.Tensor,
    tB: cute.Tensor,
    mKD: cute.Tensor,
    kkeep: cute.Tensor,
    kdec: Float32,
    slot: Int32,
    head: Int32,
    row: Int32,
    j4: Int32,
    nm: cutlass.Constexpr[int],
):
    """Step 3 of one warpgroup: ``acc = A B^T`` (K-major operands ``tA`` / ``tB``, zero-initialized) as one committed
    WGMMA group, this thread's ``(Kn exp(G_C - G))^T`` written to the workspace while it runs
    (:func:`decayed_keys_from_registers`), then waited for. The caller calls it inside each warpgroup's branch: a
    WGMMA group in flight across the branches' join makes ptxas wait at the join."""
    warpgroup.fence()
    atom = cute.make_mma_atom(mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, False)
    for kb_i in cutlass.range_constexpr(cute.size(tA.shape[2])):
        cute.gemm(atom, acc, tA[None, None, kb_i], tB[None, None, kb_i], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    decayed_keys_from_registers(mKD, kkeep, kdec, slot, head, row, j4, nm)
    warpgroup.wait_group(0)


class GatedDeltaNetParallelPrepTc(ChunkParallelPrepLaunch):
    """Kernel 1 of the chunk-parallel GDN forward, restructured (``GdnParallelPrepKey.restructured``)."""

    def __init__(self, key):
        assert key.head_dim in (64, 128) and key.restructured and key.tc_ctas_per_sm in CTAS_PER_SM
        assert not key.two_per_sm and not key.prefetch, "the restructured GDN prep kernel takes neither two_per_sm nor prefetch"
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def launch(self, views: tuple, extents: tuple, scale: Float32, stream: cuda.CUstream):
        """Shared memory, grid and launch of ``kernel`` (``views``, ``extents``: :class:`ChunkParallelPrepLaunch`)."""
        D = self.D
        gQ, gK, gV, mG, mB, mCu, ws = views
        n_seqs, seq_len, chunks_per_seq, slots, heads, qk_heads = extents

        mma_n64 = make_mma_n64()  # A = Kn Kn^T, P = Qn Kn^T: both operands K-major
        mma_mn = sm90_utils.make_trivial_tiled_mma(  # U, W: B (V, Kn) read MN-major from the row-major tiles
            BFloat16, BFloat16, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(64, 64)
        )
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, K]: Qn, Kn, V
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # T Diag(beta), T Diag(beta exp G)

        @cute.struct
        class SharedStorage:
            smem_q: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_k: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_v: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_tu: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_tw: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_a: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * A_STRIDE], 16]
            smem_t: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * A_STRIDE], 16]
            smem_y: cute.struct.Align[cute.struct.MemRange[Float32, (NB - 1) * SOLVE_BLOCK * SOLVE_BLOCK], 16]
            smem_g: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]  # g (0 past the end)
            smem_gl: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]  # G log2(e)
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]  # beta (0 past the end)
            smem_ew: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]  # beta exp(G)
            smem_ekd: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]  # exp(G_C - G)

        storage_class = SharedStorage
        if const_expr(self.key.tc_ctas_per_sm == 3):
            storage_class = _three_cta_storage(l_ck, l_cc, D)
        self.kernel(gQ, gK, gV, mG, mB, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, qk_heads, scale, mma_n64, mma_mn, l_ck, l_cc, storage_class).launch(
            grid=[slots, heads, 1],
            block=[NTHREADS, 1, 1],
            smem=storage_class.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=self.key.tc_ctas_per_sm,
            preferred_smem_carveout=100,  # the maximum carveout: room for two (three) CTAs (and no device query at compile time)
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,  # [T, H]
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        mma_n64: cute.TiledMma,
        mma_mn: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NM = D // 32  # 16-byte chunks of a row per thread (four threads per row)
        NH = D // BV
        mW, mU, mKD, mQG, mP, mGE, _, _, mRF = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)
        wg = cute.arch.make_warp_uniform(tidx // THREADS)
        lt = tidx % THREADS

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.smem_q.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sK = storage.smem_k.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sV = storage.smem_v.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        plain = cute.make_layout((CHUNK, CHUNK), stride=(A_STRIDE, 1))
        sA = storage.smem_a.get_tensor(plain)
        if const_expr(self.key.tc_ctas_per_sm == 3):  # T over Qn (K = 128), the bf16 inverses over A (_three_cta_storage)
            a_bf16 = cute.recast_ptr(storage.smem_a.data_ptr(), dtype=BFloat16)
            sTu = cute.make_tensor(cute.recast_ptr(a_bf16, l_cc.inner, dtype=BFloat16), l_cc.outer)
            sTw = cute.make_tensor(cute.recast_ptr(a_bf16 + cute.cosize(l_cc), l_cc.inner, dtype=BFloat16), l_cc.outer)
            if const_expr(D == 128):
                sT = cute.make_tensor(cute.recast_ptr(storage.smem_q.data_ptr(), dtype=Float32), cute.make_layout((CHUNK, CHUNK), stride=(CHUNK, 1)))
            else:
                sT = storage.smem_t.get_tensor(plain)
        else:
            sTu = storage.smem_tu.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sTw = storage.smem_tw.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sT = storage.smem_t.get_tensor(plain)
        sY = storage.smem_y.get_tensor(cute.make_layout((NB - 1, SOLVE_BLOCK, SOLVE_BLOCK), stride=(SOLVE_BLOCK * SOLVE_BLOCK, SOLVE_BLOCK, 1)))
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK,)))
        sGl = storage.smem_gl.get_tensor(cute.make_layout((CHUNK,)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))
        sEw = storage.smem_ew.get_tensor(cute.make_layout((CHUNK,)))
        sEkd = storage.smem_ekd.get_tensor(cute.make_layout((CHUNK,)))
        if const_expr(self.key.staged_w):  # -Wm, bf16 [D / 64][64 * 64] over Qn (dead after step 3; T's bytes at K = 128, dead in step 5)
            sWst = cute.make_tensor(cute.recast_ptr(storage.smem_q.data_ptr(), dtype=BFloat16), cute.make_layout((D * CHUNK,)))

        # 16-byte views: [rows, chunks of 8 channels]
        sQv = cute.zipped_divide(sQ, (1, VEC))
        sKv = cute.zipped_divide(sK, (1, VEC))
        sVv = cute.zipped_divide(sV, (1, VEC))
        sTv = cute.zipped_divide(sT, (1, VEC))
        sTuv = cute.zipped_divide(sTu, (1, VEC))
        sTwv = cute.zipped_divide(sTw, (1, VEC))
        sBetav = cute.zipped_divide(sBeta, (VEC,))
        sEwv = cute.zipped_divide(sEw, (VEC,))

        wg64 = mma_n64.get_slice(0)
        k_A = wg64.make_fragment_A(wg64.partition_A(sK))
        q_A = wg64.make_fragment_A(wg64.partition_A(sQ))
        k_B = wg64.make_fragment_B(wg64.partition_B(sK))
        acc = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        thr64 = mma_n64.get_slice(lt)
        c64 = thr64.partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = tidx // 4  # steps 2, 3 (kd) and 4c: four threads per row, lanes 4r..4r+3 of one warp
        j4 = tidx % 4
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            last = t0 + n_valid - 1
            t_row = min(t0 + row, last)
            # V -> shared by cp.async (rows past the end: the last row; beta = 0 there), in flight until step 5
            cp_async_v_row_chunks(gV, sVv, t_row, head, row, j4, NM)
            # this thread's q / k chunks (rows past the end re-read the last row and are zeroed by keep)
            qbuf, kbuf = load_qk_row_chunks(gQ, gK, t_row, hk, j4, NM)

            # ---- 1. g, beta -> shared (0 past the end); per-token tables and rf / exp(G_C) -> workspace ------------
            if tidx < CHUNK:
                g_ld = mG[min(t0 + tidx, last), head].to(Float32)
                b_ld = mB[min(t0 + tidx, last), head].to(Float32)
                gv = Float32(0.0)
                bv = Float32(0.0)
                if tidx < n_valid:
                    gv = g_ld
                    bv = b_ld
                sG[tidx] = gv
                sBeta[tidx] = bv
            cute.arch.sync_threads()
            if tidx < CHUNK:
                cum = Float32(0.0)  # G_i: the default's sequential sum, the same fp32 value
                tot = Float32(0.0)  # G_C (= G_63: rows past the end add g = 0)
                for j in cutlass.range_constexpr(CHUNK):
                    gj = sG[j]
                    tot = tot + gj
                    if j > tidx:
                        gj = Float32(0.0)
                    cum = cum + gj
                e_g = cute.math.exp(cum)
                sGl[tidx] = cum * LOG2E
                sEw[tidx] = sBeta[tidx] * e_g
                sEkd[tidx] = cute.math.exp(tot - cum)
                mRF[slot, head, tidx] = e_g * scale
                e_c = cute.math.exp(tot)
                for c in cutlass.range_constexpr(D // CHUNK):
                    mGE[slot, head, c * CHUNK + tidx] = e_c

            # ---- 2. one pass over this thread's D / 32 chunks of 8 elements: Qn, Kn -> shared, Qn -> workspace -------
            inv_q, inv_k = row_qk_scales(qbuf, kbuf, row, n_valid, NM, self.key.l2norm)
            kkeep = cute.make_rmem_tensor(cute.make_layout((1, VEC, NM)), BFloat16)  # bf16 Kn (normalised, masked)
            obuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            gQGv = cute.zipped_divide(mQG[slot, head, None, None], (1, VEC))
            for m in cutlass.range_constexpr(NM):
                ch = element_chunk(j4, m)
                qb = (qbuf[None, None, None, m].load().reshape((1, VEC)).to(Float32) * inv_q).to(BFloat16)
                kb = (kbuf[None, None, None, m].load().reshape((1, VEC)).to(Float32) * inv_k).to(BFloat16)
                sQv[(None, None), (row, ch)].store(qb)
                sKv[(None, None), (row, ch)].store(kb)
                if const_expr(not self.key.bwd_tm):  # bwd_tm: the qg tile carries Tm (step 4)
                    obuf.store(qb)
                    cute.autovec_copy(obuf, gQGv[(None, None), (row, ch)])
                kkeep[None, None, m].store(kb)
            _smem_ready()

            # ---- 3. warpgroup 0: Kn Kn^T, warpgroup 1: Qn Kn^T, each in flight while its threads write kd -----------
            # (the whole issue / kd / wait sequence inside each branch: a WGMMA group in flight across the branches'
            # join makes ptxas wait at the join)
            kdec = sEkd[row]
            if wg == 0:
                gram_with_kd_in_flight(mma_n64, acc, k_A, k_B, mKD, kkeep, kdec, slot, head, row, j4, NM)
            else:
                gram_with_kd_in_flight(mma_n64, acc, q_A, k_B, mKD, kkeep, kdec, slot, head, row, j4, NM)
            # decay exp(G_i - G_j) and the masks on the accumulators
            if wg == 0:  # A = strictly lower(beta_i (Kn Kn^T)_ij exp(G_i - G_j)) -> shared (fp32)
                for i in cutlass.range_constexpr(cute.size(acc)):
                    rc = c64[i]
                    decay = cute.math.exp2(sGl[rc[0]] - sGl[rc[1]], fastmath=True)
                    a_val = acc[i] * decay * sBeta[rc[0]]
                    if rc[0] <= rc[1]:
                        a_val = Float32(0.0)
                    sA[rc[0], rc[1]] = a_val
            else:  # P = lower_eq(scale (Qn Kn^T)_ij exp(G_i - G_j)) -> workspace (bf16)
                for i in cutlass.range_constexpr(cute.size(acc)):
                    rc = c64[i]
                    decay = cute.math.exp2(sGl[rc[0]] - sGl[rc[1]], fastmath=True)
                    p_val = acc[i] * decay * scale
                    if rc[0] < rc[1]:
                        p_val = Float32(0.0)
                    acc[i] = p_val
                acc_pairs_to_gmem(mP[slot, head, None, None], acc, thr64, False)
            cute.arch.sync_threads()

            # ---- 4. T = (I + A)^-1; T Diag(beta), T Diag(beta exp G) -> bf16 (zero above the diagonal blocks) ---------
            solve_inverse_256(sA, sT, sY, tidx)
            zero8 = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            zero8.fill(0.0)
            tbuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            if const_expr(self.key.bwd_tm):  # Tm [64, 64] row-major over the slot's qg tile (the backward's fold_prep_tm)
                gTmv = cute.zipped_divide(cute.make_tensor(mQG[slot, head, None, None].iterator, cute.make_layout((CHUNK, CHUNK), stride=(CHUNK, 1))), (1, VEC))
            for s in cutlass.range_constexpr(CHUNK * CHUNK // (NTHREADS * VEC)):
                ch = 2 * j4 + s
                if ch // 2 > row // SOLVE_BLOCK:
                    cute.autovec_copy(zero8, sTuv[(None, None), (row, ch)])
                    cute.autovec_copy(zero8, sTwv[(None, None), (row, ch)])
                    if const_expr(self.key.bwd_tm):
                        cute.autovec_copy(zero8, gTmv[(None, None), (row, ch)])
                else:
                    t8 = sTv[(None, None), (row, ch)].load()
                    if const_expr(self.key.bwd_tm):  # bf16(T) (the backward's Tm) -> the qg tile, from the same fp32 read
                        tbuf.store(t8.to(BFloat16))
                        cute.autovec_copy(tbuf, gTmv[(None, None), (row, ch)])
                    tbuf.store((t8 * sBetav[None, ch].load().reshape((1, VEC))).to(BFloat16))
                    cute.autovec_copy(tbuf, sTuv[(None, None), (row, ch)])
                    tbuf.store((t8 * sEwv[None, ch].load().reshape((1, VEC))).to(BFloat16))
                    cute.autovec_copy(tbuf, sTwv[(None, None), (row, ch)])
            cute.arch.cp_async_wait_group(0)
            _smem_ready()

            # ---- 5. warpgroup 0: U = (T Diag(beta)) V (fp32); warpgroup 1: -Wm = -(T Diag(beta exp G)) Kn (bf16) -----
            wgmn = mma_mn.get_slice(0)
            thr_mn = mma_mn.get_slice(lt)
            if wg == 0:
                tu_A = wgmn.make_fragment_A(wgmn.partition_A(sTu))
                sVt = transpose_view(sV)
                for vb in cutlass.range_constexpr(NH):
                    v_B = wgmn.make_fragment_B(wgmn.partition_B(cute.local_tile(sVt, (BV, CHUNK), (vb, 0))))
                    _wgmma(mma_mn, acc, tu_A, v_B, True)
                    acc_pairs_to_gmem(cute.local_tile(mU[slot, head, None, None], (CHUNK, BV), (0, vb)), acc, thr_mn, False)
            else:
                tw_A = wgmn.make_fragment_A(wgmn.partition_A(sTw))
                sKt = transpose_view(sK)
                for h in cutlass.range_constexpr(NH):
                    k_Bt = wgmn.make_fragment_B(wgmn.partition_B(cute.local_tile(sKt, (BV, CHUNK), (h, 0))))
                    _wgmma(mma_mn, acc, tw_A, k_Bt, True)
                    if const_expr(self.key.staged_w):  # Qn's bytes (T's at K = 128), dead since the barrier before step 5
                        acc_to_stage(acc, c64, cute.make_tensor(sWst.iterator + h * CHUNK * BV, cute.make_layout((CHUNK * BV,))), True)
                    else:
                        acc_pairs_to_gmem(cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), acc, thr_mn, True)
                if const_expr(self.key.staged_w):
                    cute.arch.barrier(barrier_id=W_BARRIER, number_of_threads=THREADS)  # warpgroup 1 only
                    for h in cutlass.range_constexpr(NH):
                        stage_to_gmem(
                            cute.make_tensor(sWst.iterator + h * CHUNK * BV, cute.make_layout((CHUNK * BV,))),
                            cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)),
                            lt,
                        )

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
