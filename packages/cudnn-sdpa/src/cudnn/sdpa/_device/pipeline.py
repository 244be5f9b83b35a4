"""Named barriers and TMA pipelines of the sm_90a attention kernels.

Warp roles: warpgroup 0 is the producer (its warp 0 issues every TMA load), warpgroups 1.. are MMA consumers.
Named barrier 0 is __syncthreads; the ids below are ours.

The pipeline builders are ``@cute.jit`` helpers like every other piece of device code (a nested ``@cute.jit`` call
runs inline in the caller's trace and returns whatever Python object its body returns, here the
``PipelineTmaAsync`` / ``PipelineState``), so kernel bodies never call an undecorated helper.
"""

from __future__ import annotations

import enum

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr, pipeline
from cutlass.cute.nvgpu import cpasync


class NamedBarrier(enum.IntEnum):
    EPILOGUE = 1  # consumers (+ the storing warp): smem O written / read
    WG_SCHED_1 = 2  # ping-pong: warpgroup 1 may issue its GEMMs
    WG_SCHED_2 = 3  # ping-pong: warpgroup 2 may issue its GEMMs
    WG_SCHED_3 = 4
    Q_GATHER = 5  # consumers: Q gathered into smem without TMA (pack-GQA)
    EPILOGUE_WG1 = 6  # wg_epilogue: consumer warpgroup 1 (+ its storing warp): its half of smem O written / read
    EPILOGUE_WG2 = 7  # the same for consumer warpgroup 2
    EPILOGUE_WG3 = 8  # the same for consumer warpgroup 3 (tile_m = 192)


@cute.jit
def make_tma_pipeline(
    barrier_ptr,
    num_stages: cutlass.Constexpr[int],
    num_consumer_warps: cutlass.Constexpr[int],
    tx_bytes: cutlass.Constexpr[int],
    cluster_m: cutlass.Constexpr[int] = 1,
):
    """A PipelineTmaAsync: one producer thread (the TMA warp's elected lane), one arrive per consumer warp. With
    ``cluster_m`` > 1 (a cluster of CTAs along the query blocks whose stages are filled by TMA multicast) each consumer
    warp arrives on the empty barrier of every CTA of the cluster (lane r signals CTA r), so a producer refills a stage
    only once every CTA it writes into has released it; the full barrier still expects the whole stage's bytes."""
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
    consumer = pipeline.CooperativeGroup(pipeline.Agent.Thread, num_consumer_warps * cluster_m)
    return pipeline.PipelineTmaAsync.create(
        barrier_storage=barrier_ptr,
        num_stages=num_stages,
        producer_group=producer,
        consumer_group=consumer,
        tx_count=tx_bytes,
        cta_layout_vmnk=cute.make_layout((1, cluster_m, 1, 1)) if const_expr(cluster_m > 1) else None,
        defer_sync=True,
    )


@cute.jit
def prefetch_tma_descriptors(warp_idx: Int32, *atoms):
    """Warp 0 (the TMA producer) prefetches the descriptors of the TMA ``atoms``, in order; a None entry is an
    operand the plan compiles out and is skipped."""
    if warp_idx == 0:
        for i in cutlass.range_constexpr(len(atoms)):
            if const_expr(atoms[i] is not None):
                cpasync.prefetch_descriptor(atoms[i])


@cute.jit
def producer_state(num_stages: cutlass.Constexpr[int]):
    """The producer's PipelineState of a ``num_stages`` ring (starts at stage 0, phase 1: every slot free)."""
    return pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, num_stages)


@cute.jit
def consumer_state(num_stages: cutlass.Constexpr[int]):
    """The consumers' PipelineState of a ``num_stages`` ring (starts at stage 0, phase 0: waits for the first fill)."""
    return pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, num_stages)


@cute.jit
def mbarrier_spin_wait(mbar_ptr, phase):
    """Wait until the mbarrier at ``mbar_ptr`` completes phase ``phase`` by spinning on ``mbarrier.try_wait.parity``
    with no suspend-time hint. The DSL's ``cute.arch.mbarrier_wait`` (under ``PipelineTmaAsync.consumer_wait`` /
    ``producer_acquire``) emits the hinted form ``mbarrier.try_wait.parity.shared.b64 P, [bar], phase, 10000000``, which
    ptxas lowers to ``SYNCS.PHASECHK.TRANS64.TRYWAIT`` and, while the phase is incomplete, ``NANOSLEEP.SYNCS 0x989680``
    + ``SYNCS.PHASECHK.TRANS64`` in a loop; this loop's try_wait carries no hint, and ptxas emits the TRYWAIT alone (its
    own bounded hardware wait, then a retry), the inline form of FA4's ``consumer_try_wait`` token."""
    done = cute.arch.mbarrier_try_wait(mbar_ptr, phase)
    while not done:
        done = cute.arch.mbarrier_try_wait(mbar_ptr, phase)


@cute.jit
def consumer_wait(pipe, state, spin: cutlass.Constexpr[bool]):
    """``pipe.consumer_wait(state)`` (the full barrier of ``state``'s stage), or with ``spin`` the same wait as
    :func:`mbarrier_spin_wait` (no NANOSLEEP: ``SdpaFwdKey.spin_wait``). Same barrier, same phase, same ordering: a
    completed try_wait has the acquire semantics of the wait."""
    if const_expr(spin):
        mbarrier_spin_wait(pipe.sync_object_full.get_barrier(state.index), state.phase)
    else:
        pipe.consumer_wait(state)


@cute.jit
def consumer_release(pipe, state, elect: cutlass.Constexpr[bool]):
    """``pipe.consumer_release(state)`` (one arrive per consumer warp on the stage's empty barrier, from the lane whose
    ``thread_idx % 32`` is 0), or with ``elect`` the same arrive from the lane ``elect.sync`` picks: no thread-index
    test, which ptxas otherwise re-reads with S2R inside loops (``SdpaBwdKey.elect_release``). The warp is converged."""
    if const_expr(elect):
        with cute.arch.elect_one():
            pipe.sync_object_empty.arrive(state.index, pipe.consumer_mask)
    else:
        pipe.consumer_release(state)


@cute.jit
def producer_acquire(pipe, state, spin: cutlass.Constexpr[bool]):
    """``pipe.producer_acquire(state)`` of a ``PipelineTmaAsync`` (wait for the slot's empty barrier, then the elected
    thread arms the full barrier with the stage's transaction bytes), or with ``spin`` the empty wait as
    :func:`mbarrier_spin_wait` followed by the same arm (``SdpaFwdKey.spin_wait_producer``)."""
    if const_expr(spin):
        mbarrier_spin_wait(pipe.sync_object_empty.get_barrier(state.index), state.phase)
        pipe.sync_object_full.arrive(state.index, pipe.producer_mask)
    else:
        pipe.producer_acquire(state)


__all__ = [
    "NamedBarrier",
    "make_tma_pipeline",
    "prefetch_tma_descriptors",
    "producer_state",
    "consumer_state",
    "mbarrier_spin_wait",
    "consumer_wait",
    "consumer_release",
    "producer_acquire",
    "cute",
]
