"""Kimi Delta Attention forward, chunk-parallel schedule, kernel 3 of 3 (output): for every chunk of every sequence
at once, sm_90a, CuTe DSL, WGMMA::

    O = (scale Q exp(G)) S0^T + P Vn

(KDA: ``qg`` holds ``scale Q exp(G)``, the decay per key channel), or with ``row_scaled`` (Gated DeltaNet, one decay
per token: ``chunk_parallel_prep_kernel.py`` of gdn/) ``O = Diag(rf) (Q S0^T) + P Vn`` with ``rf = scale exp(G_i)``,
from the workspace (``_device/chunk_parallel.py``): ``qg`` and ``p`` of the prep kernel, ``h`` (S0, bf16) and
``vnt`` (Vn^T, bf16) of the state pass, staged by cp.async into 128B-swizzled shared memory; two WGMMA groups into
one fp32 accumulator in the serial kernel's order (``chunk_fwd_kernel.py`` step 6), so the rows match it bit for
bit. Rows past the sequence's end are not stored.

Grid ``[slots, H, V / 64]`` (idle slots exit), one warpgroup per CTA, 48 KB of shared memory for K = 128.

This module holds the key (:class:`KdaParallelOutKey`) and the session-5 kernel, which is no longer the default: the key's
default ``v_wide = True`` (session 6: 47.0-47.4 us vs 83.8 at T = 8192, H = 16, K = V = 128 on the H200) routes to
``chunk_parallel_out_persistent_kernel.py`` (``for_key``: one CTA per (chunk, head) over the whole V), bitwise this
kernel. This kernel is ``v_wide = False`` (the ``out-base`` variant: the A/B baseline and the tests' bitwise reference).
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr

from .._device.chunk_parallel import ChunkParallelOutLaunch, g2s, make_g2s_copy, slot_chunk
from .._device.delta_rule import BV, CHUNK, THREADS, k_major_smem_layout, make_mma_n64, store_output_rows
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma


@dataclass(frozen=True)
class KdaParallelOutKey:
    """Compile key of the output kernel (Rule 4)."""

    head_dim: int
    varlen: bool
    row_scaled: bool = False  # GDN: qg holds Q and rf the row factors scale exp(G_i), applied to the Q S0^T accumulator
    #: Default True (session 6): one CTA covers the whole V of its (chunk, head), so qg and p are staged once instead of
    #: once per 64-column V block (K = 128: 21% fewer bytes), and o leaves by 16-byte stores through shared memory.
    #: Built by ``chunk_parallel_out_persistent_kernel.py``. False: this module's kernel, grid [slots, H, V / 64] (the
    #: session-5 default). Same operations per output element: bitwise each other.
    v_wide: bool = True
    #: Opt-in (default 0: the default kernel, PTX unchanged; session 30, the ``ovl`` variant, set by the host from the
    #: state pass's ``signal_out`` as ``head_dim / v_slice``), ``v_wide`` only: the kernel takes the workspace's ready
    #: flags (a trailing pointer), is launched with PDL (it may start while the state pass runs) and, before an item's
    #: loads, waits until the state pass's ``wait_slices`` value slices have set that chunk's flags. Bitwise the default.
    wait_slices: int = 0


class KimiDeltaAttentionParallelOut(ChunkParallelOutLaunch):
    """Kernel 3 of the chunk-parallel KDA forward: ``__init__`` holds the compile key, ``__call__``
    (:class:`ChunkParallelOutLaunch`) builds the views, ``launch`` launches."""

    @classmethod
    def for_key(cls, key: KdaParallelOutKey):
        """The kernel class that builds ``key``: the V-wide kernel (the default ``v_wide``), this one for ``v_wide = False``."""
        if not key.v_wide:
            if key.wait_slices:
                raise ValueError("KdaParallelOutKey.wait_slices needs v_wide=True (the V-wide output kernel waits on the ready flags)")
            return cls
        from .chunk_parallel_out_persistent_kernel import KimiDeltaAttentionParallelOutPersistent, KimiDeltaAttentionParallelOutPersistentWait

        return KimiDeltaAttentionParallelOutPersistentWait if key.wait_slices else KimiDeltaAttentionParallelOutPersistent

    def __init__(self, key: KdaParallelOutKey):
        assert key.head_dim in (64, 128) and not key.v_wide
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def launch(self, views: tuple, extents: tuple, o_strides: tuple[Int64, Int64], stream: cuda.CUstream):
        """Shared memory, grid and launch of ``kernel`` (``views``, ``extents``: :class:`ChunkParallelOutLaunch`)."""
        D = self.D
        mO, mCu, ws = views
        n_seqs, seq_len, chunks_per_seq, slots, heads = extents

        mma_n64 = make_mma_n64()
        l_ck = k_major_smem_layout(CHUNK, D)  # Qg [tokens, K], S0 [64 V rows, K]
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # P [tokens, tokens], Vn^T [64 V, tokens]

        @cute.struct
        class SharedStorage:
            smem_qg: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_s: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]
            smem_p: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]
            smem_vnt: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_cc)], 1024]

        self.kernel(mO, mCu, ws, n_seqs, seq_len, chunks_per_seq, mma_n64, l_ck, l_cc, SharedStorage).launch(
            grid=[slots, heads, D // BV],
            block=[THREADS, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
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
        mma_n64: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        _, _, _, mQG, mP, _, mVNT, mH, mRF = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, vblk = cute.arch.block_idx()
        v0 = vblk * BV
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQG = storage.smem_qg.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sS = storage.smem_s.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sP = storage.smem_p.get_tensor(l_cc.outer, swizzle=l_cc.inner)
        sVnT = storage.smem_vnt.get_tensor(l_cc.outer, swizzle=l_cc.inner)

        wg64 = mma_n64.get_slice(0)
        qg_A = wg64.make_fragment_A(wg64.partition_A(sQG))
        s0_B = wg64.make_fragment_B(wg64.partition_B(sS))
        p_A = wg64.make_fragment_A(wg64.partition_A(sP))
        vn_B = wg64.make_fragment_B(wg64.partition_B(sVnT))
        acc = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma_n64.get_slice(tidx).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))
        cp_bf16 = make_g2s_copy(BFloat16, CHUNK)

        if n_valid > 0:
            for h in cutlass.range_constexpr(NH):
                g2s(cp_bf16, cute.local_tile(mQG[slot, head, None, None], (CHUNK, BV), (0, h)), cute.local_tile(sQG, (CHUNK, BV), (0, h)), tidx)
                g2s(cp_bf16, cute.local_tile(mH[slot, head, None, None], (BV, BV), (vblk, h)), cute.local_tile(sS, (BV, BV), (0, h)), tidx)
            g2s(cp_bf16, mP[slot, head, None, None], sP, tidx)
            g2s(cp_bf16, cute.local_tile(mVNT[slot, head, None, None], (BV, CHUNK), (vblk, 0)), sVnT, tidx)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
            _smem_ready()
            _wgmma(mma_n64, acc, qg_A, s0_B, True)
            if const_expr(self.key.row_scaled):  # the GDN serial kernel's step 6: rows of Q S0^T scaled in fp32
                for i in cutlass.range_constexpr(cute.size(acc)):
                    rc = c64[i]
                    acc[i] = acc[i] * mRF[slot, head, rc[0]]
            _wgmma(mma_n64, acc, p_A, vn_B, False)
            store_output_rows(mO, acc, c64, t0, n_valid, head, v0)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
