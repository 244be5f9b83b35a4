"""The plain GEMM's schedule for fused plans: :data:`~cudnn.gemm.dense.api.FUSED_AUTO2` (on by default since the
session-5 H200 A/B) and the opt-in :data:`~cudnn.gemm.dense.api.AUX_KEEP_STAGES`, and the plan summary used to find out why.

Why (issue #5, session-4 ``gemm_fusions_mlp`` table: 7 of 107 cells below 0.95x our plain GEMM, at M = 2048 down
projections). The default schedule "auto2" (:func:`~cudnn.gemm.dense.schedule.choose_tile_set`) gives a second tile
width only to plans whose tile is "free": K-major A and B, no swiglu, no staged reads. Every fusion wrapper called
with a bias stages it (``FUSION_DEFAULTS``: ``stage_bias``), and dsrelu stages its pre-activation (``stage_aux``), so
their plans fall back to "auto": 128 x 256 tiles at every M, while the plain plan of the same problem takes
128 x 224 where the model predicts it faster. At qwen3-32b down M = 2048 (N = 5120, K = 25600), 128 x 256 is 320
tiles = 2.42 waves of 132 CTAs -> 3 full waves; 128 x 224 is 368 tiles = 2.79 waves -> 3 waves of 7/8 the work:
the model's cost ratio is 1077 / 1206 = 0.89 (srelu 0.88x, amax 0.91x, gelu_tanh 0.97x / 0.89x measured there);
qwen3-32b up M = 2048 (N = 25600): 13 vs 14 waves of 8/7 the work, 0.96 (bias 0.92x measured). dsrelu also runs
its default ``aux_prefetch = 8``: an 8-deep D/pre-activation ring of 64 KB, which leaves 3 mainloop stages instead
of 4 (``ab_stage = (227 KB - 1 KB - ring bytes) // ((tile_m + tile_n) * 64 * 2 bytes)``); at K = 25600 (400 k-tiles per tile) the
mainloop is the whole kernel (dsrelu qwen3-32b down 0.86x). The llama3-8b down cells (N = 4096, K = 14336: 256
tiles, 1.94 waves) run the plain plan's exact tile, cluster, swizzle and stage count: the schedule does not explain
them (:func:`plan_summary` prints both plans; ``benchmarks/gemm.py --tables gemm_fusions_down`` measures them).

The opt-ins:
- ``fused_auto2``: a staged-read plan (stage_bias / stage_aux, K-major A and B, not swiglu: its gate/up pairing needs
  256-wide tiles) takes the auto2 tile set of its (N, K) and this M's pick among it, exactly as the plain plan of the
  same problem; both tiles are compiled with the plan (M-free, Rule 4).
- ``aux_keep_stages``: a stage_aux plan that leaves ``aux_prefetch`` as None prefetches as many pre-activation
  sub-tiles (at most ``AUX_PREFETCH``) as fit the D ring without costing a mainloop stage of its tile
  (:func:`stage_keeping_prefetch`: 4 at 128 x 256, 6 at 128 x 224, 8 at 128 x 192), per tile of the set.

Pure Python on plan-time values; imports neither torch nor cutlass.
"""

from __future__ import annotations

#: ``cutlass.utils.get_smem_capacity_in_bytes("sm_90")``: the kernel's shared-memory budget (227 KB)
SMEM_CAPACITY_SM90 = 232448
#: the kernel's D smem ring depth for 16-bit D (``GemmSm90Kernel.epi_stage``); an aux prefetch deeper than it grows it
EPI_RING = 4
#: the epilogue sub-tile (rows x columns) of a cooperative tile (``GemmSm90Kernel.epi_tile``)
EPI_TILE = (128, 32)


def mainloop_stages(tile_mn: tuple, epi_ring: int = EPI_RING, *, ab_bytes: int = 2, d_bytes: int = 2, tile_k: int = 64) -> int:
    """``GemmSm90Kernel._setup``'s A/B stage count of a cooperative tile whose D ring is ``epi_ring`` sub-tiles deep."""
    tm, tn = tile_mn
    stage_bytes = (tm + tn) * tile_k * ab_bytes
    ring_bytes = min(EPI_TILE[0], tm) * EPI_TILE[1] * d_bytes * epi_ring
    return (SMEM_CAPACITY_SM90 - 1024 - ring_bytes) // stage_bytes


def stage_keeping_prefetch(tile_mn: tuple, want: int) -> int:
    """The deepest aux prefetch <= ``want`` whose D ring (``max(EPI_RING, prefetch)``) leaves the tile's mainloop the
    stage count it has with the plain ring; at least 1."""
    base = mainloop_stages(tile_mn, EPI_RING)
    best = 1
    for p in range(1, max(1, want) + 1):
        if mainloop_stages(tile_mn, max(EPI_RING, p)) == base:
            best = p
    return best


def smem_bytes(tile_mn: tuple, epi_ring: int, *, stage_bias_or_aux: bool) -> int:
    """Upper bound of the kernel's shared storage (barriers, A/B stages, D ring, staged bias), 1 KB-aligned buffers."""
    stages = mainloop_stages(tile_mn, epi_ring)
    tm, tn = tile_mn
    ring = min(EPI_TILE[0], tm) * EPI_TILE[1] * 2 * epi_ring
    return 1024 + stages * (tm + tn) * 64 * 2 + ring + (max(tm, tn) * 4 if stage_bias_or_aux else 0)


def plan_summary(plan) -> dict:
    """What a checked :class:`~cudnn.gemm.dense.api.GemmSm90` (16-bit operands) will run: tile, cluster, swizzle,
    mainloop stages, D ring depth and bytes, persistent grid, tiles and waves at the plan's M, whether auto2 chose the
    tile, and the other tiles compiled with it. For the issue #5 analysis and the gemm_fusions_down table's notes."""
    from math import ceil

    if not plan._is_supported:
        plan.check_support()
    cfg = plan._make_config()
    ring = max(EPI_RING, cfg.aux_prefetch) * (2 if cfg.pingpong else 1)
    tm, tn = cfg.tile_mn
    cm, cn = cfg.cluster_mn
    mt = ceil(ceil(plan._m / tm) / cm) * cm  # the scheduler walks whole clusters
    nt = ceil(ceil(plan._n / tn) / cn) * cn
    ctas = cfg.max_active_clusters * cm * cn
    tiles = mt * nt * plan._l
    return {
        "tile": cfg.tile_mn,
        "cluster": cfg.cluster_mn,
        "swizzle": cfg.swizzle,
        "stages": mainloop_stages(cfg.tile_mn, ring),
        "epi_ring": ring,
        "epi_smem": min(EPI_TILE[0], tm) * EPI_TILE[1] * 2 * ring,
        "aux_prefetch": cfg.aux_prefetch,
        "stage_bias": cfg.stage_bias,
        "stage_aux": cfg.stage_aux,
        "ctas": ctas,
        "tiles": tiles,
        "waves": ceil(tiles / ctas),
        "fill": tiles / (ceil(tiles / ctas) * ctas),
        "auto2": plan._auto2,
        "tile_set": tuple(t for t, _ in plan._tile_set),
    }


def format_summary(s: dict) -> str:
    """One line of :func:`plan_summary`."""
    return (
        f"{s['tile'][0]}x{s['tile'][1]} cl {s['cluster'][0]}x{s['cluster'][1]} swz {s['swizzle']} stages {s['stages']} ring {s['epi_ring']} "
        f"({s['epi_smem'] // 1024} KB) {s['tiles']} tiles / {s['ctas']} CTAs = {s['waves']} waves ({s['fill']:.0%} full)"
        f"{' auto2' if s['auto2'] else ''}"
    )


__all__ = ["EPI_RING", "SMEM_CAPACITY_SM90", "format_summary", "mainloop_stages", "plan_summary", "smem_bytes", "stage_keeping_prefetch"]
