"""Persistent tile scheduling for the sm90 GEMMs.

The kernels walk output tiles with the DSL's static persistent scheduler (one CTA cluster per SM slot,
tiles handed out round-robin). What this module adds is the plan-time policy: the raster order (walk
along M so consecutive clusters share a B (weight) tile, or along N so they share an A tile) and the
swizzle width that groups neighbouring clusters into L2-friendly bands. Both are compile-key values.
"""

from __future__ import annotations

import cutlass.utils as utils


def make_scheduler(num_ctas_mnl, cluster_shape_mn, swizzle: int, raster_along_m: bool, max_active_clusters: int):
    """(scheduler params, launch grid) for a persistent launch over ``num_ctas_mnl`` tiles (host side, inside @cute.jit)."""
    params = utils.PersistentTileSchedulerParams(num_ctas_mnl, (*cluster_shape_mn, 1), swizzle, raster_along_m)
    grid = utils.StaticPersistentTileScheduler.get_grid_shape(params, max_active_clusters)
    return params, grid
