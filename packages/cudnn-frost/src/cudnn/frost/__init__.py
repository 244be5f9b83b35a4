"""cudnn.frost: JIT fusion of graph-API matmul chains with pointwise epilogues into one kernel.

Nothing heavy is imported here: kernels, torch ops and adapters load on first attribute access, after
the CuTe DSL gate (Rule 7) has checked the runtime floor.
"""

from __future__ import annotations

from cudnn._lazy import install_family

#: Lowest nvidia-cutlass-dsl this family's kernels run on (the wheel installs from 4.6.2 up).
CUTEDSL_MIN_VERSION = "4.8.0"
WHEEL = "cudnn-frost"

#: Nothing is exported yet: FROST (JIT fusion of graph matmul chains) builds on cudnn-gemm and has no kernels so far.
_LAZY: dict[str, tuple[str, str]] = {}
#: Names whose modules need the DSL at import time; the rest (metadata-only checks) import without it.
_NEEDS_DSL: frozenset = frozenset()


install_family(globals(), _LAZY, WHEEL, CUTEDSL_MIN_VERSION, _NEEDS_DSL)
