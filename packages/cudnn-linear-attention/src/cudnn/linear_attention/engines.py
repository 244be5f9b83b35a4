"""Graph-API engines of cudnn.linear_attention, announced to the core Router through the ``cudnn.engines`` entry point."""

from __future__ import annotations


def register(registry) -> None:
    """Register this family's engines with ``registry`` (cudnn.graph's engine registry)."""
    return None
