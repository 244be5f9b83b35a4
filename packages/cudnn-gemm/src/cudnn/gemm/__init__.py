"""cudnn.gemm: Hopper GEMMs with fused epilogues (SwiGLU, squared ReLU, GELU, amax) in CuTe DSL.

Nothing heavy is imported here: kernels, torch ops and adapters load on first attribute access, after
the CuTe DSL gate (Rule 7) has checked the runtime floor.
"""

from __future__ import annotations

from cudnn._lazy import install_family

#: Lowest nvidia-cutlass-dsl this family's kernels run on (the wheel installs from 4.6.2 up).
CUTEDSL_MIN_VERSION = "4.8.0"
WHEEL = "cudnn-gemm"

_LAZY: dict[str, tuple[str, str]] = {
    "GemmSm90": (".dense.api", "GemmSm90"),
    "gemm": (".dense.api", "gemm"),
    "gemm_swiglu": (".dense.swiglu.api", "gemm_swiglu"),
    "gemm_srelu": (".dense.srelu.api", "gemm_srelu"),
    "gemm_dsrelu": (".dense.dsrelu.api", "gemm_dsrelu"),
    "gemm_gelu": (".dense.gelu.api", "gemm_gelu"),
    "gemm_amax": (".dense.amax.api", "gemm_amax"),
    "GemmSwigluSm90": (".dense.swiglu.api", "GemmSwigluSm90"),
    "GemmSreluSm90": (".dense.srelu.api", "GemmSreluSm90"),
    "GemmDsreluSm90": (".dense.dsrelu.api", "GemmDsreluSm90"),
    "GemmGeluSm90": (".dense.gelu.api", "GemmGeluSm90"),
    "GemmAmaxSm90": (".dense.amax.api", "GemmAmaxSm90"),
    "ops": (".ops", ""),
}
#: Names whose modules need the DSL at import time; the rest (metadata-only checks) import without it.
_NEEDS_DSL: frozenset = frozenset()


install_family(globals(), _LAZY, WHEEL, CUTEDSL_MIN_VERSION, _NEEDS_DSL)
