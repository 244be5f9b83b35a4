"""Flash attention backward for Hopper (sm_90a) at head dim 256: the bulk-dQ split-D kernel in clusters of two CTAs
with Q / dO TMA multicast (compile-key variant ``kv_cluster``, tuning name ``cluster2``, on ``split_d`` + ``dq_bulk``).

The consumers, the dQ path and the epilogue are kernel_splitd_bulk_sm90.py's; what changes is who loads Q and dO.
The two CTAs of a cluster own the adjacent key blocks ``2 p`` and ``2 p + 1`` of one (batch, kv head) and walk the
SAME query blocks (the union of their two ranges; a block outside a CTA's own range takes the masked path, where the
mask zeroes it): each CTA's producer loads one half of every Q / dO tile (32 of its 64 rows) and multicasts it into
both CTAs' shared memory, completing on both CTAs' full barriers (each expects the whole tile); each consumer warp
releases a stage on both CTAs' empty barriers (16 arrivals: 8 warps x 2 CTAs), since both producers write into it.
K / V, the statistics, the dQ bulk reduce-adds and the dK / dV stores stay per CTA.

Why: at d256 a 64-key tile reads 64 KiB of Q / dO from L2 and adds 64 KiB of fp32 dQ per query block, twice d128's
bytes per FLOP; the pair reads each Q / dO tile from L2 once for 128 keys, a quarter less L2 traffic per FLOP.

With ``dq_pair`` the pair also sums its dQ partials before the global reduce-add: CTA r owns the columns of half r;
its warpgroup 1 - r stages its partial as usual and the writer warp bulk-copies it into the PEER's staging buffer of
those columns (``cp.async.bulk.shared::cluster``, completing on the peer's "partial arrived" mbarrier); its warpgroup
r waits for the peer's partial of half r in its own buffer, adds its registers to it (16-byte shared loads and
stores) and the writer reduce-adds the sum (32 KiB per CTA and block instead of 64 KiB), then re-arms the barrier and
tells the peer (remote arrive on its "buffer free" mbarrier) that the next partial may come. The two mbarriers sit
after the staging buffer (4 floats more of it). Half the fp32 reduce traffic to L2 for 32 KiB over the cluster's
shared-memory network and 64 KiB more shared-memory traffic per CTA and block.

Edges: the grid has ``2 * ceil(key blocks / 2)`` CTAs per (batch, kv head), so a last CTA past S_kv (or past a THD
sequence's keys) still runs the walk (its half of the loads) with every key masked, and stores nothing (TMA clips the
dense store; the varlen store is row-predicated). The causal diagonal costs the second CTA one fully masked block per
pair. Both CTAs meet at a cluster barrier before exiting (no CTA leaves while its peer may still signal its barriers).

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py (``SPLITC``, ``SPLITWC``, ``SPLITCP``) and
test_sdpa_bwd_variants_compile.py. Benchmark: benchmarks/sdpa_bwd.py (``ours-splitdc``, ``ours-splitdwc``,
``ours-splitdcp``, ``ours-splitdwcp``).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as cpipeline
from cutlass import Float32, Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync
from cutlass.cutlass_dsl import dsl_user_op

from .._device.mask_bwd import MaskInfoBwd
from .._device.pipeline import make_tma_pipeline, prefetch_tma_descriptors, producer_state
from .._device.seqlen import cu_seqlens_tensors, sequence_extents
from .kernel_key import PREPOST_ROWS, SdpaBwdKey
from .kernel_sm90 import NamedBarrierBwd, reduce_add_bulk_f32
from .kernel_splitd_bulk_sm90 import SdpaBwdSplitDBulkKernelSm90

#: CTAs per cluster (adjacent key blocks sharing every Q / dO tile).
CLUSTER = 2


@cute.jit
def cluster_pair_tile(num_pairs: Int32, num_heads: Int32, num_batch: Int32, group_heads: Int32):
    """``(pair, head, batch)`` of this CTA's cluster: SingleTileScheduler's order (L2 groups of ``group_heads`` (head,
    batch) pairs, the key-block pair slowest inside a group) over cluster ids ``block_idx // 2``."""
    bidx, _, _ = cute.arch.block_idx()
    lin = Int32(bidx) // CLUSTER
    num_hb = num_heads * num_batch
    per_group = group_heads * num_pairs
    group = lin // per_group
    rem = lin - group * per_group
    first_hb = group * group_heads
    heads_here = cutlass.min(group_heads, num_hb - first_hb)
    pair = rem // heads_here
    hb = first_hb + rem - pair * heads_here
    batch = hb // num_heads
    head = hb - batch * num_heads
    return pair, head, batch


@cute.jit
def make_multicast_pipeline(barrier_ptr, num_stages: cutlass.Constexpr[int], num_consumer_warps: cutlass.Constexpr[int], tx_bytes: cutlass.Constexpr[int]):
    """A PipelineTmaAsync over the cluster: one producer thread per CTA; each consumer warp arrives on the empty barrier
    of both CTAs (lanes 0 and 1 signal ranks 0 and 1), so a stage is free once all 2 x ``num_consumer_warps`` warps
    released it; the full barrier expects the whole tile's ``tx_bytes`` (both halves land in every CTA)."""
    producer = cpipeline.CooperativeGroup(cpipeline.Agent.Thread, 1)
    consumer = cpipeline.CooperativeGroup(cpipeline.Agent.Thread, num_consumer_warps * CLUSTER)
    return cpipeline.PipelineTmaAsync.create(
        barrier_storage=barrier_ptr,
        num_stages=num_stages,
        producer_group=producer,
        consumer_group=consumer,
        tx_count=tx_bytes,
        cta_layout_vmnk=cute.make_layout((1, CLUSTER, 1, 1)),
        defer_sync=True,
    )


@dsl_user_op
def copy_bulk_to_peer(dst_dsmem: cute.Pointer, src_smem: cute.Pointer, num_bytes: int, mbar_dsmem: cute.Pointer, *, loc=None, ip=None):
    """``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes``: copy ``num_bytes`` (a multiple of 16;
    16-byte aligned) from this CTA's shared memory into a peer CTA's (``dst_dsmem``, a ``map_dsmem_ptr`` address),
    completing on the peer's mbarrier ``mbar_dsmem``; in the issuing thread's bulk group (its reads of ``src_smem``
    are done after ``cp_async_bulk_wait_group(.., read=True)``). One thread issues it (the DSL has no atom for it)."""
    llvm.inline_asm(
        None,
        [
            dst_dsmem.toint(loc=loc, ip=ip).ir_value(),
            src_smem.toint(loc=loc, ip=ip).ir_value(),
            Int32(num_bytes).ir_value(loc=loc, ip=ip),
            mbar_dsmem.toint(loc=loc, ip=ip).ir_value(),
        ],
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
        "r,r,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


class SdpaBwdSplitDClusterKernelSm90(SdpaBwdSplitDBulkKernelSm90):
    """``kv_cluster``: the bulk-dQ split-D kernel launched in clusters of two key blocks with Q / dO multicast
    (``__call__``, ``kernel`` and ``load`` are this class's; consumers, writer warp and epilogue are inherited)."""

    def __init__(self, key: SdpaBwdKey):
        super().__init__(key)
        if not key.kv_cluster:
            raise ValueError("SdpaBwdSplitDClusterKernelSm90 is the kv_cluster schedule (set kv_cluster)")

    # ------------------------------------------------------------------------------------------------
    # host side
    # ------------------------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        lse2_ptr: cute.Pointer,
        dpsum_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        sem_ptr: cute.Pointer | None,  # unused: no deterministic mode (refused in the key)
        cu_q_ptr: cute.Pointer | None,
        cu_k_ptr: cute.Pointer | None,
        batch: Int32,
        heads: Int32,
        heads_kv: Int32,
        seqlen_q: Int32,
        seqlen_k: Int32,
        max_seqlen_k: Int32,
        seqlen_pad: Int32,
        group_heads: Int32,
        q_strides: tuple[Int64, Int64, Int64],
        k_strides: tuple[Int64, Int64, Int64],
        v_strides: tuple[Int64, Int64, Int64],
        do_strides: tuple[Int64, Int64, Int64],
        dk_strides: tuple[Int64, Int64, Int64],
        dv_strides: tuple[Int64, Int64, Int64],
        scale_log2: Float32,
        scale: Float32,
        window_left: Int32,
        window_right: Int32,
        stream: cuda.CUstream,
    ):
        """The parent's launch arguments; Q / dO TMA atoms multicast to the two CTAs of a cluster, a grid of
        ``2 * ceil(key blocks / 2) * kv heads * batch`` CTAs in clusters of two."""
        D, Dv = self.head_dim, self.head_dim_v
        div = 128 // self.dtype.width

        def strides(s):
            return tuple(cute.assume(x, divby=div) for x in s)

        qs, ks, vs, dos = strides(q_strides), strides(k_strides), strides(v_strides), strides(do_strides)
        dks, dvs = strides(dk_strides), strides(dv_strides)
        sp = cute.assume(seqlen_pad, divby=PREPOST_ROWS)
        bt = batch if const_expr(not self.key.varlen) else Int32(1)
        mQ = cute.make_tensor(q_ptr, cute.make_layout((seqlen_q, D, heads, bt), stride=(qs[2], 1, qs[1], qs[0])))
        mK = cute.make_tensor(k_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(ks[2], 1, ks[1], ks[0])))
        mV = cute.make_tensor(v_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(vs[2], 1, vs[1], vs[0])))
        mdO = cute.make_tensor(do_ptr, cute.make_layout((seqlen_q, Dv, heads, bt), stride=(dos[2], 1, dos[1], dos[0])))
        mdK = cute.make_tensor(dk_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(dks[2], 1, dks[1], dks[0])))
        mdV = cute.make_tensor(dv_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(dvs[2], 1, dvs[1], dvs[0])))
        mLSE2 = cute.make_tensor(lse2_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mDpsum = cute.make_tensor(dpsum_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mdQacc = cute.make_tensor(dqacc_ptr, cute.make_layout((sp, D, heads, bt), stride=(D, 1, sp * D, sp * D * heads)))
        mCuQ, mCuK = cu_seqlens_tensors(cu_q_ptr, cu_k_ptr, batch, self.key.varlen)

        tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ = self._tiled_mmas()
        sQ_layout = self._smem_layout(self.tile_m, D, self.num_stages)
        sdO_layout = self._smem_layout(self.tile_m, Dv, self.num_stages)
        sK_layout = self._smem_layout(self.tile_n, D, atom_cols=self._k_atom_cols())
        sV_layout = self._smem_layout(self.tile_n, Dv)
        sdS_layout = self._ds_layout()
        sdQ_layout = self._dq_bulk_layout()
        # dq_pair: the staging buffer's tail holds the pair's two mbarriers (4 floats = 2 x 8 bytes; see consumer_operands)
        sdQ_alloc = cute.make_layout(cute.cosize(sdQ_layout) + 4) if const_expr(self.key.dq_pair) else sdQ_layout
        SharedStorage = self._shared_storage(sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_alloc)

        g2s, s2g = cpasync.CopyBulkTensorTileG2SOp(), cpasync.CopyBulkTensorTileS2GOp()
        mcast = cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(mcast, mQ, cute.select(sQ_layout, mode=[0, 1]), (self.tile_m, D), num_multicast=CLUSTER)
        tma_atom_dO, tma_dO = cpasync.make_tiled_tma_atom(mcast, mdO, cute.select(sdO_layout, mode=[0, 1]), (self.tile_m, Dv), num_multicast=CLUSTER)
        tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(g2s, mK, sK_layout, (self.tile_n, D))
        tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(g2s, mV, sV_layout, (self.tile_n, Dv))
        tma_atom_dK, tma_dK = cpasync.make_tiled_tma_atom(s2g, mdK, sK_layout, (self.tile_n, D))
        tma_atom_dV, tma_dV = cpasync.make_tiled_tma_atom(s2g, mdV, sV_layout, (self.tile_n, Dv))
        # every CTA's full barrier receives the whole tile: its own half and the peer's
        tx_q = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        tx_do = cute.size_in_bytes(self.dtype, cute.select(sdO_layout, mode=[0, 1]))
        tx_kv = cute.size_in_bytes(self.dtype, sK_layout) + cute.size_in_bytes(self.dtype, sV_layout)

        num_n_blocks = (max_seqlen_k + self.tile_n - 1) // self.tile_n
        num_pairs = (num_n_blocks + CLUSTER - 1) // CLUSTER
        grid = (num_pairs * CLUSTER * heads_kv * batch, 1, 1)
        self.kernel(
            tma_Q, tma_K, tma_V, tma_dO, tma_dK, tma_dV, mdK, mdV, mLSE2, mDpsum, mdQacc, mCuQ, mCuK,
            tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV,
            seqlen_q, seqlen_k, num_pairs, heads_kv, batch, group_heads, scale_log2, scale, window_left, window_right,
            sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout,
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ,
            tx_q, tx_do, tx_kv, SharedStorage,
        ).launch(
            grid=grid, block=[self.num_threads, 1, 1], cluster=[CLUSTER, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream,
            min_blocks_per_mp=1,
        )  # fmt: skip

    # ------------------------------------------------------------------------------------------------
    # device side
    # ------------------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mdK_tma: cute.Tensor,
        mdV_tma: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mCuQ: cute.Tensor | None,
        mCuK: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        seqlen_q_static: Int32,
        seqlen_k_static: Int32,
        num_pairs: Int32,
        num_heads_kv: Int32,
        num_batch: Int32,
        group_heads: Int32,
        scale_log2: Float32,
        scale: Float32,
        window_left: Int32,
        window_right: Int32,
        sQ_layout: cute.ComposedLayout,
        sdO_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        sdS_layout: cute.ComposedLayout,
        sdQ_layout: cute.Layout,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        tx_q: cutlass.Constexpr[int],
        tx_do: cutlass.Constexpr[int],
        tx_kv: cutlass.Constexpr[int],
        SharedStorage: cutlass.Constexpr,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        prefetch_tma_descriptors(warp_idx, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        num_consumer_warps = self.num_mma_threads // 32
        pipeline_q = make_multicast_pipeline(storage.mbar_q.data_ptr(), self.num_stages, num_consumer_warps, tx_q)
        pipeline_do = make_multicast_pipeline(storage.mbar_do.data_ptr(), self.num_stages, num_consumer_warps, tx_do)
        pipeline_kv = make_tma_pipeline(storage.mbar_kv.data_ptr(), 1, num_consumer_warps, tx_kv)
        sdQ = storage.smem_dq.get_tensor(sdQ_layout)  # fragment order, no swizzle
        if const_expr(self.key.dq_pair):
            # the pair's barriers after the staging buffer: [0] the peer's partial landed (one arrive + its bytes),
            # [1] the peer's buffer is free again (one remote arrive from the peer's writer)
            pair_bar = cute.recast_ptr(sdQ.iterator + cute.cosize(sdQ_layout), dtype=cutlass.Int64)
            if warp_idx == 1:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_init(pair_bar, 1)
                    cute.arch.mbarrier_init(pair_bar + 1, 1)
        # barrier inits visible cluster-wide before any peer multicasts into them or arrives on them
        cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()

        sQ = storage.smem_q.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sdO = storage.smem_do.get_tensor(sdO_layout.outer, swizzle=sdO_layout.inner)
        sK = storage.smem_k.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.smem_v.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        sPdS = storage.smem_ds.get_tensor(sdS_layout.outer, swizzle=sdS_layout.inner)

        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        pair, head_kv, batch = cluster_pair_tile(num_pairs, num_heads_kv, num_batch, group_heads)
        n_block = pair * CLUSTER + rank
        seqlen_q, seqlen_k, offset_q, offset_k = sequence_extents(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, self.key.varlen)
        pad_q = Int32(0)
        batch_t = batch
        if const_expr(self.key.varlen):
            pad_q = (offset_q + batch * PREPOST_ROWS) // PREPOST_ROWS * PREPOST_ROWS
            batch_t = Int32(0)
        mask_offset = Int32(0)
        if const_expr(self.key.bottom_right):
            mask_offset = seqlen_k - seqlen_q
        mask = MaskInfoBwd(self.tile_m, self.tile_n, self.key.mask_right, self.key.mask_left, seqlen_q, seqlen_k, mask_offset, window_left, window_right)
        # Both CTAs walk the union of the pair's query-block ranges (the same loads, in the same order).
        lo0, hi0 = mask.m_block_range(pair * CLUSTER)
        lo1, hi1 = mask.m_block_range(pair * CLUSTER + 1)
        m_block_min = cutlass.min(lo0, lo1)
        m_block_max = cutlass.max(hi0, hi1)

        cute.arch.cluster_wait()  # every barrier of the cluster initialized

        if const_expr(not self.key.varlen):
            self.roles(
                mQ, mK, mV, mdO, mdK_tma, mdV_tma, mLSE2, mDpsum, mdQacc, None, None, sQ, sK, sV, sdO, sPdS, sdQ, sdQ, None, None,
                tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, None, pipeline_q, pipeline_do, pipeline_kv,
                tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, scale_log2, scale, mask, n_block, head_kv, batch_t,
                offset_q, offset_k, pad_q, m_block_min, m_block_max,
            )  # fmt: skip
        else:
            if pair * CLUSTER * self.tile_n < seqlen_k:  # a pair past this sequence's keys does nothing (both CTAs)
                self.roles(
                    mQ, mK, mV, mdO, mdK, mdV, mLSE2, mDpsum, mdQacc, None, None, sQ, sK, sV, sdO, sPdS, sdQ, sdQ, None, None,
                    tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, None, pipeline_q, pipeline_do, pipeline_kv,
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, scale_log2, scale, mask, n_block, head_kv, batch_t,
                    offset_q, offset_k, pad_q, m_block_min, m_block_max,
                )  # fmt: skip
        # No CTA exits while its peer may still multicast into it or arrive on its barriers.
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def load(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_q: Int32,
        offset_k: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
    ):
        """Producer warp: this CTA's K and V once, then for every query block of every query head of the group this
        CTA's half of the Q and dO tiles, multicast to both CTAs of the cluster (on each one's full barrier)."""
        D, Dv = self.head_dim, self.head_dim_v
        mK_cur = mK[None, None, head_kv, batch]
        mV_cur = mV[None, None, head_kv, batch]
        if const_expr(self.key.varlen):
            mK_cur = cute.domain_offset((offset_k, 0), mK_cur)
            mV_cur = cute.domain_offset((offset_k, 0), mV_cur)
        gK = cute.local_tile(mK_cur, (self.tile_n, D), (n_block, 0))
        gV = cute.local_tile(mV_cur, (self.tile_n, Dv), (n_block, 0))
        tKsK, tKgK = cpasync.tma_partition(tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2))
        kv_state = producer_state(1)
        pipeline_kv.producer_acquire(kv_state)
        cute.copy(tma_atom_K, tKgK, tKsK, tma_bar_ptr=pipeline_kv.producer_get_barrier(kv_state))
        cute.copy(tma_atom_V, tVgV, tVsV, tma_bar_ptr=pipeline_kv.producer_get_barrier(kv_state))

        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cta_layout = cute.make_layout(CLUSTER)
        mcast_mask = cutlass.Int16((1 << CLUSTER) - 1)  # both CTAs of the cluster
        state = producer_state(self.num_stages)
        num_m = cutlass.max(m_block_max - m_block_min, 0)
        G = self.key.qhead_per_kvhead
        for g in cutlass.range(G, unroll=1):
            head = head_kv * G + g
            mQ_cur = mQ[None, None, head, batch]
            mdO_cur = mdO[None, None, head, batch]
            if const_expr(self.key.varlen):
                mQ_cur = cute.domain_offset((offset_q, 0), mQ_cur)
                mdO_cur = cute.domain_offset((offset_q, 0), mdO_cur)
            gQ = cute.local_tile(mQ_cur, (self.tile_m, D), (None, 0))
            gdO = cute.local_tile(mdO_cur, (self.tile_m, Dv), (None, 0))
            tQsQ, tQgQ = cpasync.tma_partition(tma_atom_Q, rank, cta_layout, cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2))
            tdOsdO, tdOgdO = cpasync.tma_partition(tma_atom_dO, rank, cta_layout, cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2))
            for i in cutlass.range(num_m, unroll=1):
                m_block = m_block_min + i
                pipeline_q.producer_acquire(state)
                cute.copy(tma_atom_Q, tQgQ[None, m_block], tQsQ[None, state.index], tma_bar_ptr=pipeline_q.producer_get_barrier(state), mcast_mask=mcast_mask)
                pipeline_do.producer_acquire(state)
                cute.copy(
                    tma_atom_dO, tdOgdO[None, m_block], tdOsdO[None, state.index], tma_bar_ptr=pipeline_do.producer_get_barrier(state),
                    mcast_mask=mcast_mask,
                )  # fmt: skip
                state.advance()

    @cute.jit
    def dq_writer_loop(
        self,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        sdQ: cute.Tensor,
        tma_atom_dQ: cute.CopyAtom | None,
        head_kv: Int32,
        batch: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
    ):
        """The writer warp (warp 1). Without dq_pair: the parent's (one bulk reduce-add per consumer warpgroup). With
        dq_pair, per query block, in CTA r (peer 1 - r; warpgroup 1 - r sends, warpgroup r owns the columns of half r):
        free the sender's buffer (its last bulk copy has read it), wait for its partial, wait until the peer's owner
        buffer is free (the peer's ``pair_bar[1]`` arrive, parity-started like a producer) and bulk-copy the partial
        into it, completing on the peer's ``pair_bar[0]``; then wait for the owner's sum, reduce-add it into the
        accumulator, and once that has read the buffer re-arm ``pair_bar[0]`` (32 KiB expected) and tell the peer
        its next partial may come (a remote arrive on its ``pair_bar[1]``)."""
        if const_expr(not self.key.dq_pair):
            # the parent's, named explicitly (a zero-argument super() in a traced method resolves from the instance's class)
            SdpaBwdSplitDBulkKernelSm90.dq_writer_loop(
                self, mLSE2, mDpsum, mdQacc, mdQacc_tma, sdQ, tma_atom_dQ, head_kv, batch, pad_q, m_block_min, m_block_max
            )
        else:
            nthr = self.threads_per_wg + 32
            half = self.tile_m * self.head_dim // self.num_consumer_wg
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
            peer = 1 - rank
            snd = 1 - rank  # this CTA's sending warpgroup (the peer owns its columns)
            pair_bar = cute.recast_ptr(sdQ.iterator + cute.cosize(sdQ.layout), dtype=cutlass.Int64)
            recv_full, send_ok = pair_bar, pair_bar + 1
            peer_buf = cute.arch.map_dsmem_ptr(sdQ[None, snd].iterator, peer)  # the peer's owner buffer: the same offset
            peer_full = cute.arch.map_dsmem_ptr(recv_full, peer)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(recv_full, half * 4)  # arm the first block's receive
            num_m = cutlass.max(m_block_max - m_block_min, 0)
            G = self.key.qhead_per_kvhead
            blk = Int32(0)
            for g in cutlass.range(G, unroll=1):
                _, _, mdQacc_cur = self.head_scratch(mLSE2, mDpsum, mdQacc, head_kv * G + g, batch, pad_q)
                for i in cutlass.range(num_m, unroll=1):
                    gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block_min + i, 0))
                    # the sending warpgroup: its buffer is free (the last bulk copy read it), its partial goes to the peer
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
                    cute.arch.barrier_arrive(barrier_id=int(NamedBarrierBwd.DQ_EMPTY_WG1) + snd, number_of_threads=nthr)
                    cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + snd, number_of_threads=nthr)
                    cute.arch.mbarrier_wait(send_ok, (blk + 1) % 2)
                    with cute.arch.elect_one():
                        copy_bulk_to_peer(peer_buf, sdQ[None, snd].iterator, half * 4, peer_full)
                    cute.arch.cp_async_bulk_commit_group()
                    # the owning warpgroup: the pair's sum of this CTA's columns into the accumulator
                    cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + rank, number_of_threads=nthr)
                    with cute.arch.elect_one():
                        reduce_add_bulk_f32(gdQ.iterator + rank * half, sdQ[None, rank].iterator, half * 4)
                    cute.arch.cp_async_bulk_commit_group()
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
                    with cute.arch.elect_one():
                        cute.arch.mbarrier_arrive_and_expect_tx(recv_full, half * 4)  # arm the next block's receive
                        cute.arch.mbarrier_arrive(send_ok, peer_cta_rank_in_cluster=peer)
                    blk += 1
            cute.arch.cp_async_bulk_wait_group(0, read=True)
