"""cudnn.linear_attention: linear-attention building blocks for Hopper, in CuTe DSL.

Served today: causal_conv1d (forward, backward, decode update). Kimi Delta Attention and Gated
DeltaNet are designed in docs/linear-attention.md and not yet exported.

Nothing heavy is imported here: kernels, torch ops and adapters load on first attribute access, after
the CuTe DSL gate (Rule 7) has checked the runtime floor.
"""

from __future__ import annotations

from cudnn._lazy import install_family

#: Lowest nvidia-cutlass-dsl this family's kernels run on (the wheel installs from 4.6.2 up).
CUTEDSL_MIN_VERSION = "4.8.0"
WHEEL = "cudnn-linear-attention"

_LAZY: dict[str, tuple[str, str]] = {
    "causal_conv1d": (".conv1d.api", "causal_conv1d"),
    "causal_conv1d_update": (".conv1d.api", "causal_conv1d_update"),
}
#: Names whose modules need the DSL at import time; the rest (metadata-only checks) import without it.
_NEEDS_DSL: frozenset = frozenset()


install_family(globals(), _LAZY, WHEEL, CUTEDSL_MIN_VERSION, _NEEDS_DSL)
