"""Root conftest: shared test helpers on sys.path, sm_90a as the compile target, GPU tests skip without a GPU."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

_ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_ROOT, "shared"))

# Compile-only tests build Hopper kernels on machines with no GPU.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
# Test runs never write into the user's kernel cache.
os.environ.setdefault("CUDNN_KERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="cudnn-kcache-"))


def pytest_collection_modifyitems(config, items):
    from cudnn_testing.markers import cuda_available

    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here); run ci/gpu_tests.sh on the GPU host")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
