"""Chunk-parallel delta-rule forward (Kimi Delta Attention and Gated DeltaNet), kernel 2 of 3 (state pass): the compile
key and the routing to the kernel that builds it.

The state pass runs only the inter-chunk recurrence, per (sequence, head, ``v_slice`` value rows of the state), in
chunk order, from the prep kernel's workspace arrays (``_device/chunk_parallel.py``)::

    h[slot]   = bf16(S0)                                   (the state entering the chunk, for the output kernel)
    Vn        = U + (-Wm) S0^T                             (fp32 accumulator; bf16 Vn^T -> vnt[slot])
    S1        = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

One kernel builds every key: ``chunk_parallel_state_narrow_kernel.py`` (the state slice held transposed, ``S^T`` [K,
v_slice], V on the WGMMA's N side; grid [N, H, V / v_slice]). The defaults of :class:`KdaParallelStateKey` are the
session-6 ones: 32-row slices, the operands fetched by TMA four stages deep and h / vnt stored by TMA (H200, T = 8192,
H = 16, K = V = 128: 112.6-112.8 us vs 144.5 for the session-5 default, cp.async at two stages, which stays reachable
as ``tma=False, tma_store=False, stages=2``: the ``state-base`` variant). Every combination is bitwise the others at the
same ``v_slice`` (same operations on the same operands); K = 64 and 128, varlen and dense batches, initial / final
states, both families. Runtime extents are kernel arguments (Rule 4).

Opt-in ``fuse_out`` (session 8, the ``fso`` variants): ``for_key`` routes to ``chunk_parallel_state_out_kernel.py``, the
same state pass that also computes the output (``o = rf (Qg S0^T) + P Vn`` per chunk, ``row_scaled`` for GDN's row
factors) and writes neither h nor vnt; the schedule is then two kernels. It takes o, T and o's strides besides the state
pass's arguments (``_host/chunk_parallel.py::launch_parallel``). ``consumer_wgs`` = 2 (the ``fso-w2`` variant): two
consumer warpgroups per CTA over one stage ring, half the CTAs (one wave at H = 64 on 132 SMs).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The defaults of the state-pass key (session 6, after the H200 A/B; the adapters' ``parallel_state_stages`` defaults to
#: ``STAGES``).
STAGES = 4
V_SLICE = 32
TMA = True
TMA_STORE = True


@dataclass(frozen=True)
class KdaParallelStateKey:
    """Compile key of the state pass (Rule 4)."""

    head_dim: int
    varlen: bool
    has_initial: bool
    has_final: bool
    #: Shared-memory stages of the per-chunk operands (-Wm, (K exp(G_C - G))^T, U, exp(G_C)): 4 (default: chunk ci + 3 is
    #: fetched while chunk ci computes, three chunks of compute hide each fetch; about 42 KB of shared memory per stage
    #: for K = 128, v_slice = 32), 3 or 2 (the adapters' ``parallel_state_stages``). Same arithmetic: bitwise the same
    #: states.
    stages: int = STAGES
    #: Value rows of the state per CTA: 32 (default), 16 or 64 (no faster on the H200: 147.3 / 205.9 us vs 147.7 for
    #: 32 at the session-5 settings; kept as key values for the tests), grid [N, H, V / v_slice]. The widths differ only
    #: in the fp32 accumulation order inside the MMAs (tolerance, not bitwise).
    v_slice: int = V_SLICE
    #: Default True: the per-chunk operands are fetched by TMA (one elected thread, one transaction mbarrier per stage)
    #: instead of 128 threads' 16-byte cp.async (False: the session-5 kernel), and each chunk waits on its stage's
    #: mbarrier instead of ``cp.async.wait_group`` + a proxy fence; one CTA barrier fewer per chunk. Bitwise cp.async.
    tma: bool = TMA
    #: Default True, needs ``tma``: the bf16 state entering each chunk (``h``) and ``Vn^T`` (``vnt``) leave shared memory
    #: by TMA stores from one elected thread (``cp.async.bulk`` groups, waited for reading before the tiles are
    #: rewritten) instead of 128 threads' shared loads and 16-byte global stores. Bitwise the cp.async stores.
    tma_store: bool = TMA_STORE
    #: Opt-in (default False: the default kernel, PTX unchanged; session 8, the ``fso`` variants), needs ``tma``: the
    #: state pass also computes the output, ``o[:, v0:v0+v_slice] = rf (Qg S0^T) + P Vn`` per chunk from the prep
    #: kernel's qg / p (/ rf), and writes neither h nor vnt (``chunk_parallel_state_out_kernel.py``); the schedule is then
    #: two kernels (no output-kernel launch). Its stages hold qg and p too (K = 128, v_slice = 32: ~64 KB per stage with
    #: fp32 U), so it needs ``stages`` = 3 or 2 there (``for_key`` checks the shared memory; the ``fso`` variants set 3).
    fuse_out: bool = False
    #: With ``fuse_out`` only (the host sets it from the plan's family): GDN's output, the rows of ``Q S0^T`` scaled by
    #: the workspace's ``rf`` before ``+ P Vn`` (the output key's ``row_scaled``). KDA: False.
    row_scaled: bool = False
    #: With ``fuse_out`` only (session 8, the ``fso-w2`` variant; default 1: the one-warpgroup fused kernel, PTX
    #: unchanged): consumer warpgroups per CTA, 1 or 2. With 2, one CTA owns 2 x ``v_slice`` value columns, each
    #: warpgroup walking its own ``v_slice`` columns' chain through ONE shared stage ring (-Wm, kd, exp(G_C), qg, p, rf
    #: fetched once per CTA and chunk, U / S0 / Vn^T / o per warpgroup): grid [N, H, V / (2 v_slice)], half the CTAs,
    #: ~half the shared memory per value column (K = 128, v_slice 32: ~73 KB per stage + 32 KB, so two stages fit,
    #: three do not). Same operations per column: bitwise the one-warpgroup kernel's o and final state.
    consumer_wgs: int = 1
    #: Key default False (session 30, the ``ovl`` variant; the adapters' plan-time default since session 31, their
    #: ``parallel_overlap`` with ``_host/chunk_parallel.py::OVERLAP_VARIANT``), narrow kernel with ``tma`` and
    #: ``tma_store`` only: the output kernel runs beside the state pass instead of after it. The kernel takes
    #: the workspace's ready flags (a trailing pointer), zeroes its own, lets the next grid launch early
    #: (``griddepcontrol.launch_dependents``; the output kernel is launched with PDL and ``KdaParallelOutKey.wait_slices``)
    #: and sets a chunk's flag once its h and Vn^T TMA stores completed (two chunks behind; the last ones after the final
    #: state). The state pass takes one CTA per (sequence, head, value slice): at N = 1, H = 16 64 of 132 SMs, so the
    #: output CTAs fill the others. Same arithmetic: bitwise the default.
    signal_out: bool = False
    #: Key default False (session 30, the ``stsm`` / ``fso-w2-stsm`` variants; since session 31 the adapters' plans take
    #: it in both defaults, ``OVERLAP_VARIANT`` = ``ovl-stsm`` and ``FUSED_VARIANT`` = ``fso-w2-stsm``; alone, without the
    #: overlap, the narrow state pass is slower: 130 vs 113 us at T 8k, H 16), both state passes: the per-chunk bf16
    #: copies from the accumulators -- Vn -> ``Vn^T`` and the state -> S0 transposed by ``stmatrix.trans``, the fused
    #: kernel's output tile by ``stmatrix`` -- instead of element by element. The chain is issue-latency bound (session 30: ~340 SASS instructions per chunk at
    #: ~4.7 cycles each in the narrow kernel); this removes ~66 of them there. Same values at the same addresses: bitwise.
    stmatrix: bool = False


class KimiDeltaAttentionParallelState:
    """Kernel 2 of the chunk-parallel forward (both families): the router from a :class:`KdaParallelStateKey` to the
    kernel class that builds it (the schedule's host code calls ``for_key(key)(key)``)."""

    @classmethod
    def for_key(cls, key: KdaParallelStateKey):
        """The kernel class that builds ``key``: the narrow-slice state pass, for every accepted ``v_slice``; with
        ``fuse_out`` the fused state pass + output (``chunk_parallel_state_out_kernel.py``)."""
        from .chunk_parallel_state_narrow_kernel import V_SLICES, KimiDeltaAttentionParallelStateNarrow

        if key.v_slice not in V_SLICES:
            raise ValueError(f"KdaParallelStateKey.v_slice={key.v_slice}; accepted {V_SLICES}")
        if key.stages not in (2, 3, 4):
            raise ValueError(f"KdaParallelStateKey.stages={key.stages}; accepted 2, 3 or 4")
        if key.tma_store and not key.tma:
            raise ValueError("KdaParallelStateKey.tma_store=True needs tma=True (the TMA descriptors and mbarrier stages)")
        if key.consumer_wgs not in (1, 2):
            raise ValueError(f"KdaParallelStateKey.consumer_wgs={key.consumer_wgs}; accepted 1 or 2")
        if key.consumer_wgs != 1 and not key.fuse_out:
            raise ValueError("KdaParallelStateKey.consumer_wgs=2 needs fuse_out=True (only the fused kernel has the two-warpgroup form)")
        if key.consumer_wgs * key.v_slice > key.head_dim:
            raise ValueError(f"KdaParallelStateKey.consumer_wgs={key.consumer_wgs} x v_slice={key.v_slice} exceeds head_dim={key.head_dim}")
        if key.signal_out and (key.fuse_out or not key.tma or not key.tma_store):
            raise ValueError(
                "KdaParallelStateKey.signal_out=True needs tma=True, tma_store=True and fuse_out=False (the narrow TMA state pass signals the output kernel)"
            )
        if key.row_scaled and not key.fuse_out:
            raise ValueError("KdaParallelStateKey.row_scaled=True needs fuse_out=True (only the fused kernel computes the output)")
        if key.fuse_out:
            from .chunk_parallel_state_out_kernel import SMEM_LIMIT, KimiDeltaAttentionParallelStateOut, smem_bytes

            if not key.tma:
                raise ValueError("KdaParallelStateKey.fuse_out=True needs tma=True (the fused kernel fetches by TMA only)")
            if smem_bytes(key) > SMEM_LIMIT:
                raise ValueError(
                    f"KdaParallelStateKey.fuse_out=True at head_dim={key.head_dim}, v_slice={key.v_slice}, stages={key.stages}, "
                    f"consumer_wgs={key.consumer_wgs} needs ~{smem_bytes(key)} bytes of shared memory (limit {SMEM_LIMIT}); use fewer stages "
                    "(3 at head_dim 128 and v_slice 32 or 16; 2 at v_slice 64 or with consumer_wgs=2)"
                )
            return KimiDeltaAttentionParallelStateOut
        if key.signal_out:
            from .chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrowSignal

            return KimiDeltaAttentionParallelStateNarrowSignal
        return KimiDeltaAttentionParallelStateNarrow
