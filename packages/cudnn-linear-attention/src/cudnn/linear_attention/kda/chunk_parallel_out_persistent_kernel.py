"""Chunk-parallel delta-rule forward, kernel 3 of 3 (output), the default since session 6 (``KdaParallelOutKey.v_wide``,
routed by ``chunk_parallel_out_kernel.py``; 47.0-47.4 us vs 83.8 for that module's kernel at T = 8192, H = 16,
K = V = 128 on the H200), sm_90a, CuTe DSL, WGMMA. Same product, same operands, same operations per output element in
the same order as ``chunk_parallel_out_kernel.py``'s kernel (so the output is that kernel's bit for bit)::

    O = (scale Q exp(G)) S0^T + P Vn            (KDA)      O = Diag(rf) (Q S0^T) + P Vn      (GDN: ``row_scaled``)

Work item: one (chunk slot, head) over the whole V (qg and p staged once, K / 64 accumulators), one CTA per item,
grid ``[slots * H]`` (idle slots exit), one shared-memory stage filled by cp.async, as many CTAs per SM as the shared
memory holds (``ctas_per_sm``). (The module name is historical: session 5's ``persistent`` option -- one CTA per SM
walking the items through a multi-stage cp.async ring -- lost on the H200, 48.5 / 51.2 us vs 47.0, and was removed in
session 6; the item loop below is its one-stage form.)

The output rows go out through shared memory (the stage's qg tile, free once the MMAs completed) as 16-byte vectors
when ``o``'s address and strides allow it (checked in-kernel per launch), else as the 2-byte stores of
``chunk_parallel_out_kernel.py``; rows past the sequence's end are not stored. One warpgroup (128 threads) per CTA.
Tests: ``tests/test_out_kernel_gpu.py`` (GPU: bitwise against the session-5 kernel on its own workspace, tolerance
against the fp32 recurrence; compile-only: no spills, the PTX's WGMMAs and stores).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import ChunkParallelOutLaunch, ChunkParallelOutLaunchWait, g2s, g2s_vector, make_g2s_copy, slot_chunk, wait_ready
from .._device.delta_rule import BV, CHUNK, THREADS, k_major_smem_layout, make_mma_n64, store_output_rows
from .._device.delta_rule import smem_ready as _smem_ready
from .chunk_parallel_out_kernel import KdaParallelOutKey

#: Shared-memory budget of the CTAs of one SM (bytes; the sm_90 limit is 227 KB per SM, alignment pads come on top).
SMEM_BUDGET = 220 * 1024


def stage_bytes(key: KdaParallelOutKey) -> int:
    """Shared-memory bytes of one stage: qg, the item's h and Vn^T blocks, p (and rf)."""
    nb = key.head_dim // BV if key.v_wide else 1
    return 2 * (CHUNK * key.head_dim + nb * BV * key.head_dim + CHUNK * CHUNK + nb * BV * CHUNK) + 4 * CHUNK


def ctas_per_sm(key: KdaParallelOutKey) -> int:
    """The CTAs per SM the launch asks ptxas to fit (``.minnctapersm``: registers capped to 64K / (128 n)): as many
    one-stage CTAs as the shared memory holds (at most 4)."""
    return max(1, min(4, SMEM_BUDGET // stage_bytes(key)))


@cute.jit
def load_item(
    cp: cute.TiledCopy,
    ws: tuple,
    sQG: cute.Tensor,
    sS: cute.Tensor,
    sP: cute.Tensor,
    sVnT: cute.Tensor,
    sRF: cute.Tensor,
    slot: Int32,
    head: Int32,
    vblk: Int32,
    st: cutlass.Constexpr[int],
    tidx: Int32,
    nh: cutlass.Constexpr[int],
    nb: cutlass.Constexpr[int],
    row_scaled: cutlass.Constexpr[bool],
):
    """Issue the cp.async copies of one item's operands into stage ``st``: qg [64, K], the ``nb`` 64-row blocks of h
    from V block ``vblk * nb``, p [64, 64], the matching Vn^T blocks (and rf [64] when ``row_scaled``). The caller
    commits."""
    _, _, _, mQG, mP, _, mVNT, mH, mRF = ws
    for h in cutlass.range_constexpr(nh):
        g2s(cp, cute.local_tile(mQG[slot, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sQG[None, None, st], (CHUNK, BV), (0, h)), tidx)
        for vb in cutlass.range_constexpr(nb):
            g2s(
                cp,
                cute.local_tile(mH[slot, head, None, None], (BV, BV), (vblk * nb + vb, h)),
                cute.local_tile(sS[None, None, st * nb + vb], (BV, BV), (0, h)),
                tidx,
            )
    g2s(cp, mP[slot, head, None, None], sP[None, None, st], tidx)
    for vb in cutlass.range_constexpr(nb):
        g2s(cp, cute.local_tile(mVNT[slot, head, None, None], (BV, CHUNK), (vblk * nb + vb, 0)), sVnT[None, None, st * nb + vb], tidx)
    if const_expr(row_scaled):
        g2s_vector(mRF[slot, head, None], sRF[None, st], tidx, CHUNK)


@cute.jit
def wgmma_each(mma: cute.TiledMma, accs: list, tA: cute.Tensor, tB: cute.Tensor, b_first: cutlass.Constexpr[int], zero_init: cutlass.Constexpr[bool]):
    """``accs[j] (+)= A @ B_j`` (``B_j`` = ``tB[.., .., .., b_first + j]``) as ONE committed WGMMA group, waited for
    once; per accumulator the instructions of ``delta_rule.wgmma`` in its order (so the same sums, bit for bit)."""
    warpgroup.fence()
    atom = cute.make_mma_atom(mma.op)
    for j in cutlass.range_constexpr(len(accs)):
        atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
        for kb in cutlass.range_constexpr(cute.size(tA.shape[2])):
            cute.gemm(atom, accs[j], tA[None, None, kb], tB[None, None, kb, b_first + j], accs[j])
            atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    warpgroup.wait_group(0)


@cute.jit
def item_coords(item: Int32, heads: Int32, nvi: cutlass.Constexpr[int]):
    """``(slot, head, vblk)`` of work item ``item`` (the ``nvi`` V blocks of a (slot, head) adjacent)."""
    pair = item // nvi
    vblk = item - pair * nvi
    slot = pair // heads
    head = pair - slot * heads
    return slot, head, vblk


@cute.jit
def rows_to_gmem_v16(sO: cute.Tensor, o_base: Int64, o_s0: Int64, o_s1: Int64, t0: Int32, n_valid: Int32, head: Int32, c0: Int32, tidx: Int32):
    """The bf16 shared tile ``sO`` [64 tokens, W] (published) -> ``o[t0 + r, head, c0 : c0 + W]`` for ``r < n_valid``
    by 16-byte vectors (the caller checked that ``o``'s address and strides are 16-byte multiples). 128 threads,
    W / 8 threads per row."""
    W = cute.size(sO.shape[1])
    tpr = W // 8
    rows_per_pass = THREADS // tpr
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), BFloat16, num_bits_per_copy=128)
    row = tidx // tpr
    col = (tidx - row * tpr) * 8
    for ps in cutlass.range_constexpr(CHUNK // rows_per_pass):
        r = ps * rows_per_pass + row
        if r < n_valid:
            src = cute.make_rmem_tensor(cute.make_layout((8,)), BFloat16)
            cute.autovec_copy(cute.local_tile(sO, (1, 8), (r, col // 8))[0, None], src)  # one 16-byte unit of the 128B swizzle
            off = Int64(t0 + r) * o_s0 + Int64(head) * o_s1 + Int64(c0 + col)
            ptr = cute.make_ptr(BFloat16, o_base + off * 2, cute.AddressSpace.gmem, assumed_align=16)
            cute.copy(atom, src, cute.make_tensor(ptr, cute.make_layout((8,))))


@cute.jit
def accs_to_smem(sO: cute.Tensor, accs: list, c64: cute.Tensor, nb: cutlass.Constexpr[int]):
    """The ``nb`` fp32 accumulators [64 tokens, 64 channels] -> the bf16 shared tile ``sO`` [64, nb * 64] (the default
    kernel's rounding: one ``.to(BFloat16)`` per element); the caller publishes it."""
    for vb in cutlass.range_constexpr(nb):
        for e in cutlass.range_constexpr(cute.size(accs[vb])):
            rc = c64[e]
            sO[rc[0], vb * BV + rc[1]] = accs[vb][e].to(BFloat16)


class KimiDeltaAttentionParallelOutPersistent(ChunkParallelOutLaunch):
    """The V-wide output kernel (``KdaParallelOutKey.v_wide``, the default; module docstring); launched exactly as
    ``KimiDeltaAttentionParallelOut`` (the same :class:`ChunkParallelOutLaunch` entry)."""

    def __init__(self, key: KdaParallelOutKey):
        assert key.head_dim in (64, 128) and key.v_wide
        self.key = key
        self.D = key.head_dim
        self.NB = key.head_dim // BV  # 64-column V blocks per item: the whole V
        self.NVI = (key.head_dim // BV) // self.NB  # items per (slot, head): 1
        self.STAGES = 1

    @cute.jit
    def launch(self, views: tuple, extents: tuple, o_strides: tuple[Int64, Int64], stream: cuda.CUstream, mRdy: cute.Tensor | None = None):
        """Shared memory, grid and launch of ``kernel`` (``views``, ``extents``: :class:`ChunkParallelOutLaunch`)."""
        D = self.D
        mO, mCu, ws = views
        n_seqs, seq_len, chunks_per_seq, slots, heads = extents
        S = self.STAGES

        mma_n64 = make_mma_n64()
        l_qg = k_major_smem_layout(CHUNK, D, S)  # Qg [tokens, K] x stages (the output tile after the MMAs)
        l_s = k_major_smem_layout(BV, D, self.NB * S)  # S0 [64 V rows, K] x V blocks x stages
        l_p = k_major_smem_layout(CHUNK, CHUNK, S)  # P [tokens, tokens] x stages
        l_vn = k_major_smem_layout(BV, CHUNK, self.NB * S)  # Vn^T [64 V rows, tokens] x V blocks x stages

        @cute.struct
        class SharedStorage:
            smem_qg: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_qg)], 1024]
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_s)], 1024]
            smem_p: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_p)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_vn)], 1024]
            smem_rf: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * S], 16]

        items = slots * heads * self.NVI
        grid_x = items
        extra = {} if self.key.wait_slices == 0 else {"use_pdl": True}  # wait_slices: may launch while the state pass runs
        self.kernel(mO, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, items, o_strides, mma_n64, l_qg, l_s, l_p, l_vn, SharedStorage, mRdy).launch(
            grid=[grid_x, 1, 1],
            block=[THREADS, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=ctas_per_sm(self.key),
            preferred_smem_carveout=100,  # the maximum carveout (and no device query at compile time)
            **extra,
        )

    @cute.kernel
    def kernel(
        self,
        mO: cute.Tensor,
        mCu: cute.Tensor | None,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        items: Int32,
        o_strides: tuple[Int64, Int64],
        mma_n64: cute.TiledMma,
        l_qg: cute.ComposedLayout,
        l_s: cute.ComposedLayout,
        l_p: cute.ComposedLayout,
        l_vn: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
        mRdy: cute.Tensor | None = None,
    ):
        D = self.D
        NH = D // BV
        NB = self.NB
        NVI = self.NVI
        S = self.STAGES
        varlen = self.key.varlen
        tidx, _, _ = cute.arch.thread_idx()
        bid, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQG = storage.smem_qg.get_tensor(l_qg.outer, swizzle=l_qg.inner)
        sS = storage.smem_s.get_tensor(l_s.outer, swizzle=l_s.inner)
        sP = storage.smem_p.get_tensor(l_p.outer, swizzle=l_p.inner)
        sVnT = storage.smem_vnt.get_tensor(l_vn.outer, swizzle=l_vn.inner)
        sRF = storage.smem_rf.get_tensor(cute.make_layout((CHUNK, S)))

        wg64 = mma_n64.get_slice(0)
        qg_A = wg64.make_fragment_A(wg64.partition_A(sQG))  # (.., .., .., stages)
        s0_B = wg64.make_fragment_B(wg64.partition_B(sS))  # (.., .., .., V blocks x stages)
        p_A = wg64.make_fragment_A(wg64.partition_A(sP))
        vn_B = wg64.make_fragment_B(wg64.partition_B(sVnT))
        accs = [cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, BV)), Float32) for _ in range(NB)]
        c64 = mma_n64.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))
        cp_bf16 = make_g2s_copy(BFloat16, CHUNK)

        o_base = mO.iterator.toint()
        vec_ok = Int32(0)  # 16-byte output stores: o's address and its token / head strides are 16-byte multiples
        if o_base % 16 == 0:
            if o_strides[0] % 8 == 0:
                if o_strides[1] % 8 == 0:
                    vec_ok = Int32(1)

        n_mine = Int32(0)  # this CTA's items: bid, bid + grid, ...
        if bid < items:
            n_mine = (items - 1 - bid) // grid + 1

        for rd in range((n_mine + (S - 1)) // S):
            for st in cutlass.range_constexpr(S):
                i = rd * S + st
                if i < n_mine:
                    slot, head, vblk = item_coords(bid + i * grid, heads, NVI)
                    _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, varlen)
                    if const_expr(self.key.wait_slices > 0):  # the state pass's slices have written this chunk's h / Vn^T
                        if n_valid > 0:
                            wait_ready(mRdy, slot, head, self.key.wait_slices, tidx)
                    if n_valid > 0:
                        load_item(cp_bf16, ws, sQG, sS, sP, sVnT, sRF, slot, head, vblk, 0, tidx, NH, NB, self.key.row_scaled)
                    cute.arch.cp_async_commit_group()
                    cute.arch.cp_async_wait_group(0)
                    _smem_ready()  # the item visible to WGMMA
                    if n_valid > 0:
                        wgmma_each(mma_n64, accs, qg_A[None, None, None, st], s0_B, st * NB, True)
                        if const_expr(self.key.row_scaled):  # the GDN serial kernel's step 6: rows of Q S0^T scaled in fp32
                            for vb in cutlass.range_constexpr(NB):
                                for e in cutlass.range_constexpr(cute.size(accs[vb])):
                                    rc = c64[e]
                                    accs[vb][e] = accs[vb][e] * sRF[rc[0], st]
                        wgmma_each(mma_n64, accs, p_A[None, None, None, st], vn_B, st * NB, False)
                        v0 = vblk * (NB * BV)
                        if vec_ok != 0:
                            cute.arch.sync_threads()  # every warp's MMAs have read this stage's qg: it becomes the output tile
                            accs_to_smem(sQG[None, None, st], accs, c64, NB)
                            cute.arch.sync_threads()
                            rows_to_gmem_v16(
                                cute.local_tile(sQG[None, None, st], (CHUNK, NB * BV), (0, 0)), o_base, o_strides[0], o_strides[1], t0, n_valid, head, v0, tidx
                            )
                        else:
                            for vb in cutlass.range_constexpr(NB):
                                store_output_rows(mO, accs[vb], c64, t0, n_valid, head, v0 + vb * BV)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


class KimiDeltaAttentionParallelOutPersistentWait(ChunkParallelOutLaunchWait, KimiDeltaAttentionParallelOutPersistent):
    """The V-wide output kernel of a ``wait_slices`` key: the same kernel, whose entry also takes the workspace's ready
    flags (after the stream), so the default entry's signature (and its tvm-ffi entry) stays as it was."""
