"""``@cute.jit`` blocks of the chunk-parallel prep kernels' opt-in staged stores (session 8, issue #7): workspace
arrays that the default kernels write by scattered 2- or 4-byte stores from registers (half sectors) staged in shared
memory under an XOR swizzle (conflict-free) and written by coalesced 16-byte stores instead.

- :func:`kd_chunk_to_stage` / :func:`kd_stage_to_workspace`: ``(K exp(G_C - G))^T`` (``kd``), KDA's
  ``KdaParallelPrepKey.staged_kd`` (``kda/chunk_parallel_prep_kernel.py``, module docstring "Staged kd and W");
- :func:`acc_to_stage` / :func:`stage_to_gmem`: a 64 x 64 WGMMA accumulator tile (``-Wm``), KDA's ``staged_w`` and
  GDN's restructured prep's ``GdnParallelPrepKey.staged_w`` (``gdn/chunk_parallel_prep_tc_kernel.py``).

The staged values are the default's (the same products, rounded once): the outputs are bitwise the default kernels'.
Layouts, all flat 1-D shared tensors: kd element (channel c, token t) at ``64 c + 8 ((t / 8) ^ ((c / 16) % 8)) + t % 8``;
an accumulator tile's element (r, c) at ``64 r + per ((c / per) ^ (r % 8)) + c % per`` (``per`` elements per 16 bytes).
"""

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Int32, const_expr

from .._device.delta_rule import BV, CHUNK, THREADS, VEC

NTHREADS = 2 * THREADS  # the prep kernels' 256 threads (two warpgroups)


@cute.jit
def acc_to_stage(acc: cute.Tensor, c64: cute.Tensor, sS: cute.Tensor, negate: cutlass.Constexpr[bool]):
    """staged_w: a 64 x 64 WGMMA accumulator (``-acc`` when ``negate``) -> the staged tile ``sS`` (flat [64 * 64] of its
    element type, 16-byte elements per chunk ``per``): element (r, c) at ``64 r + per ((c / per) ^ (r % 8)) + c % per``,
    two adjacent columns per store. A warp's store covers 8 rows at one column pair offset: the XOR by the row puts them
    in 8 different bank groups (conflict-free for bf16)."""
    per = 128 // sS.element_type.width
    sP = cute.zipped_divide(sS, (2,))
    pair = cute.make_rmem_tensor(cute.make_layout((2,)), sS.element_type)
    for i in cutlass.range_constexpr(cute.size(acc) // 2):
        rc = c64[2 * i]  # (r, c) and (r, c + 1): the fragment's adjacent column pair
        v0 = acc[2 * i]
        v1 = acc[2 * i + 1]
        if const_expr(negate):
            v0 = -v0
            v1 = -v1
        pair[0] = v0.to(sS.element_type)
        pair[1] = v1.to(sS.element_type)
        r = rc[0]
        c = rc[1]
        cute.autovec_copy(pair, sP[None, (r * CHUNK + ((c // per) ^ (r % 8)) * per + c % per) // 2])


@cute.jit
def stage_to_gmem(sS: cute.Tensor, dst: cute.Tensor, lt: Int32):
    """staged_w: the staged tile (:func:`acc_to_stage`; published to the 128 threads of the warpgroup) -> the global tile
    ``dst`` [64, 64] (rows 16-byte aligned) by 16-byte loads and stores, thread ``lt`` of 128: a warp writes 4 whole
    128-byte rows per store (bf16)."""
    per = 128 // sS.element_type.width
    nch = CHUNK // per
    sv = cute.zipped_divide(sS, (per,))
    buf = cute.make_rmem_tensor(cute.make_layout((per,)), sS.element_type)
    for i in cutlass.range_constexpr(CHUNK * nch // THREADS):
        idx = lt + i * THREADS
        r = idx // nch
        ch = idx % nch
        cute.autovec_copy(sv[None, r * nch + (ch ^ (r % 8))], buf)
        cute.autovec_copy(buf, cute.zipped_divide(dst[r, None], (per,))[None, ch])


@cute.jit
def kd_chunk_to_stage(sKD: cute.Tensor, kdbuf: cute.Tensor, row: Int32, ch: Int32):
    """staged_kd: one 16-byte chunk ``ch`` (channels ``8 ch .. 8 ch + 7``) of ``(K exp(G_C - G))`` of token ``row``
    (``kdbuf`` [1, 8] bf16) into the staged tile ``sKD`` (flat bf16 [d * 64]): element (channel c, token t) at
    ``64 c + 8 ((t / 8) ^ ((c / 16) % 8)) + t % 8``. The XOR spreads the four channel rows a warp instruction writes
    (the element order puts lanes' chunks 16 channels apart: rows 2 KB apart, one bank group without it) over four bank
    groups: conflict-free; the 8 tokens of one channel (8 lanes) share 16 bytes."""
    swz = (ch >> 1) & 7  # (c / 16) % 8 for every c = 8 ch + e, e < 8
    off = (((row >> 3) ^ swz) << 3) | (row & 7)
    for e in cutlass.range_constexpr(VEC):
        sKD[(ch * VEC + e) * CHUNK + off] = kdbuf[0, e]


@cute.jit
def kd_stage_to_workspace(sKD: cute.Tensor, mKD: cute.Tensor, slot: Int32, head: Int32, tidx: Int32, d: cutlass.Constexpr[int]):
    """staged_kd: the staged tile (:func:`kd_chunk_to_stage`; the caller has published it) -> the workspace
    ``mKD[slot, head]`` [channel % 64, token, channel / 64] by 16-byte loads and stores: thread ``tidx`` copies token
    chunk ``tidx % 8`` of channels ``tidx / 8 + 32 i``; a warp writes four whole 128-byte channel rows per store
    (coalesced: full sectors), its shared reads one row's 8 chunks x 4 rows (the minimum 4 wavefronts)."""
    sKDv = cute.zipped_divide(sKD, (VEC,))
    buf = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    tc = tidx % VEC
    for i in cutlass.range_constexpr(d * VEC // NTHREADS):
        c = tidx // VEC + i * (NTHREADS // VEC)
        cute.autovec_copy(sKDv[None, c * VEC + (tc ^ ((c >> 4) & 7))], buf)
        dst = cute.zipped_divide(mKD[slot, head, c % BV, None, c // BV], (VEC,))
        cute.autovec_copy(buf, dst[None, tc])
