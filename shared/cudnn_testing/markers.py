"""Test tiers and skip helpers. Tiers are pytest markers registered in the root conftest:

- ``compile_only``: compiles kernels for sm_90a from fake tensors; runs on CPU machines (CI).
- ``gpu``: needs a CUDA GPU (skips with a reason elsewhere).
- ``detector``: asserts a contract property (no sync, no allocation, capture, stream order, cache hit).
- ``benchmark``: never collected by the normal run; benchmarks live in benchmarks/.
"""

from __future__ import annotations

import functools
import importlib.util

import pytest


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


@functools.lru_cache(maxsize=1)
def sm90_available() -> bool:
    if not cuda_available():
        return False
    import torch

    return torch.cuda.get_device_capability() == (9, 0)


def skip_unless_gpu():
    if not cuda_available():
        pytest.skip("needs a CUDA GPU (none on this machine); runs on the GPU host through ci/gpu_tests.sh")


def skip_unless_sm90():
    skip_unless_gpu()
    if not sm90_available():
        pytest.skip("needs a Hopper GPU (sm_90)")


def skip_unless_cutedsl(floor: str, what: str = "this kernel"):
    """Skip (never fail) on a lane whose DSL is below the kernel's runtime floor, naming both versions."""
    from cudnn.dsl_gate import cutedsl_requirement_error, cutedsl_too_old

    if cutedsl_too_old(floor):
        pytest.skip(str(cutedsl_requirement_error(what, floor)))


requires_gpu = pytest.mark.gpu
compile_only = pytest.mark.compile_only
detector = pytest.mark.detector
