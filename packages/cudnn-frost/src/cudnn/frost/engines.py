"""Graph-API engines of cudnn.frost, announced to the core Router through the ``cudnn.engines`` entry point.

FROST has no engine yet; matmul + pointwise graphs are served today by cudnn-gemm's ``gemm_sm90`` engine.
"""

from __future__ import annotations


def register(registry) -> None:
    """Register this family's engines with ``registry`` (none so far)."""
