"""``@cute.jit`` blocks of the chunk-parallel prep kernels' opt-in TMA loads (session 9, issue #7; KDA's
``KdaParallelPrepKey.tma_loads``, ``kda/chunk_parallel_prep_kernel.py`` module docstring "TMA loads", and GDN's
``GdnParallelPrepKey.tma_loads``, ``gdn/chunk_parallel_prep_tc_kernel.py``): the chunk's q and k tiles [64 tokens, K]
(bf16) fetched by ``cp.async.bulk.tensor`` into shared tiles that the element pass overwrites afterwards, on one
transaction mbarrier, instead of 2 x K / 32 16-byte vector loads per thread (each warp load: 8 rows x 64 bytes, half
of every sector it touches).

Views. q and k are [T, Hk, K] with runtime token / head strides (multiples of 8 elements, bases 16-byte aligned: the
adapter's contract, ``delta_rule.make_qkvo_views``); the TMA tensors view them as [T, K, Hk] (tokens, channels, heads),
boxes of 64 tokens x 64 channels of one head (K / 64 boxes per tile), landing row-major and unswizzled (128-byte rows;
the tiles are read back by the threads, not by WGMMA). The box starts at the chunk's first token ``t0`` (a coordinate
offset, ``cute.domain_offset``: any token, not a multiple of 64), so its rows past the chunk's ``n_valid`` tokens are
the next sequence's tokens (or zeros past ``T``: TMA fills out-of-bounds rows with zeros). They are never used:
:func:`qk_rows_from_smem` reads row ``min(row, n_valid - 1)``, exactly the row the default's clamped global load reads
(``t_row = min(t0 + row, last)``), so the element pass sees the same bits as the default's.
"""

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Int32
from cutlass.cute.nvgpu import cpasync

from .chunk_parallel import element_chunk, tma_box_partition
from .delta_rule import BV, CHUNK, VEC


@cute.jit
def plain_box_layout():
    """One TMA box in shared memory: [64 tokens, 64 channels] bf16, row-major, no swizzle (128-byte rows)."""
    return cute.make_layout((CHUNK, BV), stride=(BV, 1))


@cute.jit
def plain_tile(base: cute.Pointer, D: cutlass.Constexpr[int]):
    """The q or k tile at ``base`` (bf16): [64, 64, D / 64] -- D / 64 row-major boxes one after another."""
    return cute.make_tensor(cute.recast_ptr(base, dtype=BFloat16), cute.make_layout((CHUNK, BV, D // BV), stride=(BV, 1, CHUNK * BV)))


@cute.jit
def qk_tma_atoms(gQ: cute.Tensor, gK: cute.Tensor, D: cutlass.Constexpr[int]):
    """Host side: the TMA load atoms of q and k over [T, K, Hk] views of ``gQ`` / ``gK`` (the 16-byte vector views of
    ``make_qkvo_views``: ((1, 1, VEC), (T, Hk, K / VEC)), the token / head strides read back from them), boxes [64, 64]
    into :func:`plain_box_layout`. Returns ``(atom_q, tma_q, atom_k, tma_k)``."""
    g2s_op = cpasync.CopyBulkTensorTileG2SOp()
    box = plain_box_layout()
    out = []
    for g in (gQ, gK):
        T, Hk, _ = g.shape[1]
        ts, hs, _ = g.layout.stride[1]
        m3 = cute.make_tensor(g.iterator, cute.make_layout((T, D, Hk), stride=(ts, 1, hs)))
        atom, tma = cpasync.make_tiled_tma_atom(g2s_op, m3, box, (CHUNK, BV))
        out.append(atom)
        out.append(tma)
    return tuple(out)


@cute.jit
def issue_qk_tma(tma: tuple, q_base: cute.Pointer, k_base: cute.Pointer, t0: Int32, hk: Int32, mbar: cute.Pointer, warp: Int32, D: cutlass.Constexpr[int]):
    """Warp 0: prefetch both descriptors, one elected lane initializes the transaction mbarrier ``mbar`` (arrive count 1)
    and arms it for the two [64, D] bf16 tiles, then the D / 64 box copies of q and k (head ``hk``, tokens ``t0`` ..
    ``t0 + 63``) into the :func:`plain_tile` tiles at ``q_base`` / ``k_base`` (1024-byte aligned, 16 KB each at D =
    128). Every thread of the CTA waits in :func:`qk_rows_from_smem`, after a CTA barrier that follows this call (it
    publishes the initialized mbarrier)."""
    atom_q, tma_q, atom_k, tma_k = tma
    NH = D // BV
    if warp == 0:
        cpasync.prefetch_descriptor(atom_q)
        cpasync.prefetch_descriptor(atom_k)
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(mbar, 1)
        cute.arch.mbarrier_init_fence()
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(mbar, 2 * CHUNK * D * 2)
        for atom, tma_g, base in ((atom_q, tma_q, q_base), (atom_k, tma_k, k_base)):
            g_cur = cute.domain_offset((t0, 0), tma_g[None, None, hk])  # [tokens from t0, channels]
            tS, tG = tma_box_partition(atom, plain_tile(base, D), g_cur, (CHUNK, BV))
            for h in cutlass.range_constexpr(NH):
                cute.copy(atom, tG[None, 0, h], tS[None, h], tma_bar_ptr=mbar)


@cute.jit
def qk_rows_from_smem(q_base: cute.Pointer, k_base: cute.Pointer, mbar: cute.Pointer, row: Int32, n_valid: Int32, j4: Int32, nm: cutlass.Constexpr[int]):
    """Wait for the q / k tiles (phase 0 of ``mbar``), then ``(qbuf, kbuf)`` [1, 1, 8, nm] bf16 as
    ``chunk_parallel.load_qk_row_chunks`` returns them: this thread's ``nm`` 16-byte chunks (:func:`element_chunk`
    order) of tile row ``min(row, n_valid - 1)`` of the :func:`plain_tile` tiles at ``q_base`` / ``k_base`` (16-byte
    loads; a quarter warp reads two 128-byte rows: two wavefronts). The caller puts a CTA barrier between this and any
    later write to the tiles."""
    cute.arch.mbarrier_wait(mbar, 0)
    r = min(row, n_valid - 1)
    sq = cute.recast_ptr(q_base, dtype=BFloat16)
    sk = cute.recast_ptr(k_base, dtype=BFloat16)
    qbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, nm)), BFloat16)
    kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, nm)), BFloat16)
    for m in cutlass.range_constexpr(nm):
        ch = element_chunk(j4, m)
        off = (ch // 8) * (CHUNK * BV) + r * BV + (ch % 8) * VEC
        cute.autovec_copy(cute.make_tensor(sq + off, cute.make_layout((1, 1, VEC))), qbuf[None, None, None, m])
        cute.autovec_copy(cute.make_tensor(sk + off, cute.make_layout((1, 1, VEC))), kbuf[None, None, None, m])
    return qbuf, kbuf
