"""Chunk-parallel delta-rule forward (Kimi Delta Attention and Gated DeltaNet), kernel 2 of 3 (state pass): the compile
key and the routing to the kernel that builds it.

The state pass runs only the inter-chunk recurrence, per (sequence, head, ``v_slice`` value rows of the state), in
chunk order, from the prep kernel's workspace arrays (``_device/chunk_parallel.py``)::

    h[slot]   = bf16(S0)                                   (the state entering the chunk, for the output kernel)
    Vn        = U + (-Wm) S0^T                             (fp32 accumulator; bf16 Vn^T -> vnt[slot])
    S1        = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

One kernel builds every key: ``chunk_parallel_state_narrow_kernel.py`` (the state slice held transposed, ``S^T`` [K,
v_slice], V on the WGMMA's N side; grid [N, H, V / v_slice]). ``v_slice`` = 32 is the default (H200, T = 8192, H = 16,
K = V = 128: 147.5 us vs 217.9 for the former 64-row kernel, which was removed: this one serves K = 64 and 128, varlen
and dense batches, initial / final states, both families); 16 and 64 are opt-in widths of the same kernel.
Runtime extents are kernel arguments (Rule 4).
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES = 2
V_SLICE = 32


@dataclass(frozen=True)
class KdaParallelStateKey:
    """Compile key of the state pass (Rule 4)."""

    head_dim: int
    varlen: bool
    has_initial: bool
    has_final: bool
    #: Shared-memory stages of the per-chunk operands (-Wm, (K exp(G_C - G))^T, U, exp(G_C)): 2 (default: chunk ci + 1
    #: is fetched while chunk ci computes), 3 or 4 (opt-in: chunk ci + 2 / ci + 3 is fetched, two / three chunks of
    #: compute hide each fetch; about 42 KB of shared memory per stage for K = 128, v_slice = 32). Same arithmetic:
    #: bitwise the same states.
    stages: int = STAGES
    #: Value rows of the state per CTA: 32 (default), 16 or 64 (opt-in), grid [N, H, V / v_slice]. The widths differ
    #: only in the fp32 accumulation order inside the MMAs (tolerance, not bitwise).
    v_slice: int = V_SLICE
    #: Opt-in: the per-chunk operands are fetched by TMA (one elected thread, one transaction mbarrier per stage)
    #: instead of 128 threads' 16-byte cp.async, and each chunk waits on its stage's mbarrier instead of
    #: ``cp.async.wait_group`` + a proxy fence; one CTA barrier fewer per chunk. Same arithmetic: bitwise the default.
    tma: bool = False
    #: Opt-in, with ``tma``: the bf16 state entering each chunk (``h``) and ``Vn^T`` (``vnt``) leave shared memory by TMA
    #: stores from one elected thread (``cp.async.bulk`` groups, waited for reading before the tiles are rewritten)
    #: instead of 128 threads' shared loads and 16-byte global stores. Bitwise the default.
    tma_store: bool = False


class KimiDeltaAttentionParallelState:
    """Kernel 2 of the chunk-parallel forward (both families): the router from a :class:`KdaParallelStateKey` to the
    kernel class that builds it (the schedule's host code calls ``for_key(key)(key)``)."""

    @classmethod
    def for_key(cls, key: KdaParallelStateKey):
        """The kernel class that builds ``key``: the narrow-slice state pass, for every accepted ``v_slice``."""
        from .chunk_parallel_state_narrow_kernel import V_SLICES, KimiDeltaAttentionParallelStateNarrow

        if key.v_slice not in V_SLICES:
            raise ValueError(f"KdaParallelStateKey.v_slice={key.v_slice}; accepted {V_SLICES}")
        if key.stages not in (2, 3, 4):
            raise ValueError(f"KdaParallelStateKey.stages={key.stages}; accepted 2, 3 or 4")
        if key.tma_store and not key.tma:
            raise ValueError("KdaParallelStateKey.tma_store=True needs tma=True (the TMA descriptors and mbarrier stages)")
        return KimiDeltaAttentionParallelStateNarrow
