"""Plan-time tile / cluster choice for the cooperative sm90 GEMM: a wave-quantization cost model.

Pure Python on plan-time values (M, N, K, L of the plan's concrete tensors, operand width, SM count): the
chosen ``(tile_mn, cluster_mn, swizzle)`` goes into the compile key; the extents never do. The default schedule
("auto") chooses from N alone (:func:`choose_swizzle` with ``m=None``): M is the token count, a runtime extent
under continuous batching, and a choice derived from it would be a compile key derived from a runtime value
(Rule 4: a new M must never compile). :func:`choose_tile` (schedules "waves" / "waves+l2") also models M's wave
quantization: an opt-in for plans whose M is fixed for their lifetime (training), one compiled kernel per
distinct choice.

Model. The persistent kernel runs ``P`` CTAs (the SM count, rounded down to whole clusters) over
``T = round_up(ceil(M / tm), cm) * round_up(ceil(N / tn), cn) * L`` tiles, round-robin, so it takes
``ceil(T / P)`` waves of one tile each, every wave as long as one tile::

    time ~ ceil(T / P) * (tm * tn) / (128 * 256) * (ceil(K / tk) / EFFICIENCY[tn] + EPILOGUE_KTILES) / cluster_factor

in units of one 128 x 256 x tk k-tile of the default tile. ``EFFICIENCY`` is the mainloop throughput of a
(128, tn) tile relative to (128, 256) (narrower tiles re-read A from shared memory more often per FLOP and
issue smaller WGMMAs); ``EPILOGUE_KTILES`` is the (not overlapped) epilogue of the cooperative kernel, in
k-tiles of the same area. The figures are first estimates, to be calibrated on the H200 with benchmarks/gemm.py
(table ``gemm``: "ours" = this choice, "ours_fixed" = the fixed (128, 256) tile).

The default (128, 256) with a 2x1 cluster is kept unless another candidate is predicted faster by more than
``MIN_GAIN`` (hysteresis: the model is coarse; a noise-level win is not worth a different kernel). On the MLP
shapes this changes only the ones whose 128 x 256 tiles fill the last wave badly (e.g. M = 2048, N = 5120:
320 tiles = 2.42 waves of 132 -> 128 x 224 tiles, 368 = 2.79 waves of 7/8 the work each).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

#: the tile every plan used before this model, and still the default: cooperative (128, 256), 2x1 cluster
DEFAULT_TILE = (128, 256)
DEFAULT_CLUSTER = (2, 1)
#: candidate N widths of a cooperative (128, tn) tile for 16-bit operands (each compiled and PTX-checked without spills)
CANDIDATE_TILE_N = (256, 224, 192, 128)
#: mainloop throughput of a (128, tn) tile relative to (128, 256): first estimates, calibrate on the GPU
EFFICIENCY = {256: 1.0, 224: 0.98, 192: 0.96, 128: 0.90}
#: epilogue cost of a tile (not overlapped with its mainloop in the cooperative kernel), in k-tiles of its own area
EPILOGUE_KTILES = 2.0
#: a cluster without multicast (1x1) reads every B tile from L2 once per CTA instead of once per pair
NO_MULTICAST_FACTOR = 0.97
#: a candidate must beat the default by this fraction of the default's predicted time to be chosen
MIN_GAIN = 0.03
#: bytes of A (M x K) past which it does not stay in the H200's 50 MB L2 from one wave to the next (half of it:
#: B's slabs and D's stores share the cache)
L2_BUDGET = 25 * 2**20
#: a swizzle is chosen only if it cuts a wave's distinct A rows + B columns by at least this factor
MIN_TRAFFIC_GAIN = 1.5
#: below this min(M, N) the problem is memory- or latency-bound (decode: split-K territory): the model does not apply
MIN_EXTENT = 512


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TileChoice(NamedTuple):
    tile_mn: tuple
    cluster_mn: tuple
    cost: float  # predicted time in 128 x 256 k-tile units
    waves: int
    swizzle: int = 1  # the scheduler's swizzle (1: none); set only by choose_tile(..., l2=True)


def _cost(m: int, n: int, k: int, l: int, tile_mn: tuple, cluster_mn: tuple, tile_k: int, sm_count: int) -> TileChoice:  # noqa: E741
    tm, tn = tile_mn
    cm, cn = cluster_mn
    ctas = (sm_count // (cm * cn)) * cm * cn
    mt = _cdiv(_cdiv(m, tm), cm) * cm  # M tiles rounded up to whole clusters (the scheduler walks clusters)
    nt = _cdiv(_cdiv(n, tn), cn) * cn
    waves = math.ceil(mt * nt * l / ctas)
    k_tiles = -(-k // tile_k)
    per_tile = (tm * tn) / (128 * 256) * (k_tiles / EFFICIENCY[tn] + EPILOGUE_KTILES)
    if cm * cn == 1:
        per_tile /= NO_MULTICAST_FACTOR
    return TileChoice(tuple(tile_mn), tuple(cluster_mn), waves * per_tile, waves)


def wave_traffic(m: int, n: int, tile_mn: tuple, cluster_mn: tuple, swizzle: int, sm_count: int) -> int:
    """Distinct A rows + B columns one wave of the persistent schedule touches (rasterized along M).

    The CTAs of a wave walk K in near lockstep, so a k-slab of A (B) read by several of them comes from HBM once
    and from L2 after: the wave's HBM traffic per k-tile is proportional to this count."""
    tm, tn = tile_mn
    cm, cn = cluster_mn
    mc = _cdiv(_cdiv(m, tm), cm)  # clusters along M, N
    nc = _cdiv(_cdiv(n, tn), cn)
    clusters = sm_count // (cm * cn)
    if swizzle == 1:  # column-major over (mc, nc): the wave spans min(mc, clusters) M clusters, ceil(clusters / mc) N columns
        wm, wn = min(mc, clusters), min(nc, -(-clusters // mc))
    elif clusters <= mc * swizzle:  # bands of `swizzle` N columns, walked M-first inside the band: the wave is in one band
        wm, wn = -(-clusters // swizzle), swizzle
    else:  # the wave spans several whole bands
        wm, wn = mc, min(nc, swizzle * -(-clusters // (mc * swizzle)))
    return wm * cm * tm + wn * cn * tn


def choose_swizzle(m: int | None, n: int, k: int, tile_mn: tuple, cluster_mn: tuple, *, elem_bytes: int = 2, sm_count: int = 132) -> int:
    """The scheduler swizzle (1, 2, 4 or 8) for a plan whose A does not stay in L2 between waves.

    Without swizzle the wave walks M first: when M spans a whole wave of clusters, each wave reads its own rows
    of A in full, every N column again (A of M = 16384, K = 4096 bf16 is 128 MB, past the 50 MB L2). Swizzle s
    makes the wave a band of s N columns by clusters / s M clusters. Chosen only where A exceeds
    :data:`L2_BUDGET`, only among widths that divide the N cluster count (the scheduler rounds N up to the band:
    a non-dividing width would run empty tiles), and only for at least :data:`MIN_TRAFFIC_GAIN` less traffic.

    ``m=None`` (schedule "auto": M is a runtime extent and must not reach the compile key, Rule 4): the choice
    from N alone, for an M that spans a wave of clusters (A past L2). Where M turns out smaller, a wave covers
    whole bands, so it walks about the tiles it would walk without swizzle (the swizzle only reorders tiles)."""
    if m is None:
        m = sm_count * tile_mn[0] * cluster_mn[0]  # M clusters >= the clusters of a wave
    elif m * k * elem_bytes <= L2_BUDGET:
        return 1
    nc = _cdiv(_cdiv(n, tile_mn[1]), cluster_mn[1])
    base = wave_traffic(m, n, tile_mn, cluster_mn, 1, sm_count)
    best, best_t = 1, base
    for s in (2, 4, 8):
        if nc % s == 0:
            t = wave_traffic(m, n, tile_mn, cluster_mn, s, sm_count)
            if t < best_t:
                best, best_t = s, t
    return best if best_t * MIN_TRAFFIC_GAIN <= base else 1


def choose_tile(
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    *,
    tile_k: int = 64,
    sm_count: int = 132,
    l2: bool = False,
    clusters: tuple | None = None,  # noqa: E741
) -> TileChoice:
    """The (tile_mn, cluster_mn) of a cooperative 16-bit GEMM plan with the lowest predicted time (see module doc).

    Candidates: (128, tn) for tn in :data:`CANDIDATE_TILE_N`, with the 2x1 multicast cluster or a 1x1 cluster
    (which does not round an odd number of M tiles up to pairs); ``clusters``: the candidate clusters instead (a
    caller's explicit cluster). ``l2``: also choose the scheduler swizzle (:func:`choose_swizzle`) for the chosen
    tile. Deterministic in its arguments."""
    clusters = (DEFAULT_CLUSTER, (1, 1)) if clusters is None else tuple(tuple(c) for c in clusters)
    best = default = _cost(m, n, k, batch, DEFAULT_TILE, clusters[0], tile_k, sm_count)
    if min(m, n) >= MIN_EXTENT:
        for tn in CANDIDATE_TILE_N:
            for cluster in clusters:
                c = _cost(m, n, k, batch, (128, tn), cluster, tile_k, sm_count)
                if c.cost < best.cost:
                    best = c
        if best.cost >= default.cost * (1.0 - MIN_GAIN):
            best = default
    if l2 and min(m, n) >= MIN_EXTENT:
        best = best._replace(swizzle=choose_swizzle(m, n, k, best.tile_mn, best.cluster_mn, elem_bytes=tile_k // 32, sm_count=sm_count))
    return best


#: "auto2": the M grid over which :func:`choose_tile_set` scores a second tile width (multiples of 128 from
#: MIN_EXTENT to 16384: the token counts of prefill and training batches; decode M is split-K territory)
AUTO2_M_GRID = tuple(range(MIN_EXTENT, 16384 + 1, 128))


@functools.lru_cache(maxsize=256)
def choose_tile_set(n: int, k: int, *, tile_k: int = 64, sm_count: int = 132, cluster_mn: tuple = DEFAULT_CLUSTER) -> tuple:
    """The tiles an "auto2" plan compiles, from N and K only (Rule 4: never from M): ``((128, 256), (128, tn))`` or
    ``((128, 256),)``.

    The second width ``tn`` (224, 192 or 128) is the one whose per-M choice (:func:`choose_in_set`: the default
    unless the model predicts ``tn`` faster by more than MIN_GAIN) saves the most predicted time, averaged over the
    M of :data:`AUTO2_M_GRID` (relative to the default's time at each M); none when no M of the grid gains. Both
    tiles are compiled with the plan, so the per-M choice between them at plan time never compiles (a new M picks
    one of two kernels of the cache). Same cluster for both: the multicast pair of the default."""
    best, best_gain = None, 0.0
    for tn in CANDIDATE_TILE_N:
        if tn == DEFAULT_TILE[1]:
            continue
        gain = 0.0
        for m in AUTO2_M_GRID:
            d = _cost(m, n, k, 1, DEFAULT_TILE, cluster_mn, tile_k, sm_count).cost
            c = _cost(m, n, k, 1, (128, tn), cluster_mn, tile_k, sm_count).cost
            if c < d * (1.0 - MIN_GAIN):
                gain += (d - c) / d
        if gain > best_gain:
            best, best_gain = tn, gain
    return (DEFAULT_TILE,) if best is None else (DEFAULT_TILE, (128, best))


def choose_in_set(
    m: int, n: int, k: int, batch: int, tiles: tuple, *, tile_k: int = 64, sm_count: int = 132, cluster_mn: tuple = DEFAULT_CLUSTER
) -> TileChoice:
    """The tile of ``tiles`` (:func:`choose_tile_set`) for this M: the first (the default) unless another is predicted
    faster by more than MIN_GAIN; the default below MIN_EXTENT. The scheduler swizzle is N's (:func:`choose_swizzle`
    with ``m=None``, as "auto"), per tile."""
    best = default = _cost(m, n, k, batch, tiles[0], cluster_mn, tile_k, sm_count)
    if min(m, n) >= MIN_EXTENT:
        for t in tiles[1:]:
            c = _cost(m, n, k, batch, t, cluster_mn, tile_k, sm_count)
            if c.cost < default.cost * (1.0 - MIN_GAIN) and c.cost < best.cost:
                best = c
    return best


__all__ = [
    "AUTO2_M_GRID",
    "choose_in_set",
    "choose_tile_set",
    "CANDIDATE_TILE_N",
    "DEFAULT_CLUSTER",
    "DEFAULT_TILE",
    "EFFICIENCY",
    "TileChoice",
    "choose_swizzle",
    "choose_tile",
    "wave_traffic",
]
