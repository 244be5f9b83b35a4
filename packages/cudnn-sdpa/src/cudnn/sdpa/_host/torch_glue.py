"""Conventions shared by the ``torch.ops.cudnn.sdpa_fwd`` / ``sdpa_bwd`` custom ops (fwd/torch_op.py, bwd/autograd.py).
Imports torch only when called (``_host`` stays importable without torch)."""

from __future__ import annotations

#: The torch.library namespace of this family's custom ops.
OP_NAMESPACE = "cudnn"


def absent_output(like):
    """The value a custom op returns for an optional output it does not produce (custom ops cannot return None): an
    empty float32 ``(0,)`` tensor on ``like``'s device, by both the real and the fake implementation."""
    import torch

    return like.new_empty((0,), dtype=torch.float32)
