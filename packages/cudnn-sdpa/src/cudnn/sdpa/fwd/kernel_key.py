"""The forward kernel's compile key and tile table: pure Python (no cutlass), so check_support can build it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SdpaFwdKey:
    """Everything the compiled kernel specializes on (Rule 4: plan-time values only, no extents)."""

    dtype: str  # "bf16" | "fp16"
    head_dim: int
    head_dim_v: int
    qhead_per_kvhead: int
    mask_right: bool  # causal or a finite right window
    mask_left: bool  # a finite left window
    bottom_right: bool  # mask alignment (offset S_kv - S_q)
    has_lse: bool
    lse_log2: bool
    has_sinks: bool
    varlen: bool
    pack_gqa: bool = False  # the G query heads of one kv head share a tile (rows p = s * G + g): decode / short S_q with GQA


def tile_config(head_dim: int, head_dim_v: int) -> tuple[int, int, int, bool]:
    """(tile_m, tile_n, num_stages, pingpong) for a head-dim pair (the shared memory budget is 227 KB)."""
    d = max(head_dim, head_dim_v)
    if d <= 64:
        return 128, 192, 2, True
    if d <= 128:
        return 128, 128, 2, True
    if d <= 192:
        return 128, 112, 2, False
    return 128, 80, 2, False
