"""cudnn.sdpa: Flash attention forward and backward for Hopper (sm_90a), in CuTe DSL.

Nothing heavy is imported here: kernels, torch ops and adapters load on first attribute access, after
the CuTe DSL gate (Rule 7) has checked the runtime floor.
"""

from __future__ import annotations

from cudnn._lazy import install_family

#: Lowest nvidia-cutlass-dsl this family's kernels run on (the wheel installs from 4.6.2 up).
CUTEDSL_MIN_VERSION = "4.8.0"
WHEEL = "cudnn-sdpa"

_LAZY: dict[str, tuple[str, str]] = {
    "sdpa_fwd": (".fwd.api", "sdpa_fwd"),
    "SdpaFwdSm90": (".fwd.api", "SdpaFwdSm90"),
    "scaled_dot_product_attention": (".fwd.torch_op", "scaled_dot_product_attention"),
    "sdpa_fwd_op": (".fwd.torch_op", "_sdpa_fwd_op"),
    "sdpa_bwd": (".bwd.api", "sdpa_bwd"),
    "SdpaBwdSm90": (".bwd.api", "SdpaBwdSm90"),
}
#: Names whose modules need the DSL at import time; the rest (metadata-only checks) import without it.
_NEEDS_DSL: frozenset = frozenset({"scaled_dot_product_attention", "sdpa_fwd_op"})


install_family(globals(), _LAZY, WHEEL, CUTEDSL_MIN_VERSION, _NEEDS_DSL)
