"""The compile-key fields the attention forward and backward share: pure Python (no cutlass), so check_support and
the kernel cache can build and compare keys anywhere."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionKey:
    """Element type, head dims, head ratio and mask flags (Rule 4: plan-time values only, no extents). Each
    direction's key (fwd/kernel_key.SdpaFwdKey, bwd/kernel_key.SdpaBwdKey) appends its own fields after these."""

    dtype: str  # "bf16" | "fp16"
    head_dim: int
    head_dim_v: int
    qhead_per_kvhead: int
    mask_right: bool  # causal or a finite right window
    mask_left: bool  # a finite left window
    bottom_right: bool  # mask alignment (offset S_kv - S_q)
