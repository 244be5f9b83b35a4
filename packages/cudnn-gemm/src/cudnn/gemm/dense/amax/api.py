"""``gemm_amax``: a GEMM (optionally with bias and an activation) that also returns the per-tensor
``amax = max |D|`` in fp32, reduced in the epilogue (per-thread running max over the valid outputs before
the cast, a warp shuffle reduction, one ``atomicMax`` per warp). For fp8 scaling recipes.

The 4-byte amax output is reset on the launch stream right before the GEMM (the plan's one memset).
Returns ``TupleDict(d=..., amax=...)``; ``amax`` has shape (1,).
"""

from __future__ import annotations

from cudnn.api_base import TupleDict

from ..api import GemmSm90, run_gemm


class GemmAmaxSm90(GemmSm90):
    """GemmSm90 that also reduces max |D| into ``amax`` (one float32)."""

    def __init__(self, a, b, d, *, amax, **kw):
        super().__init__(a, b, d, amax=amax, **kw)


def gemm_amax(a, b, *, bias=None, activation: str = "none", out=None, amax_out=None, stream=None) -> TupleDict:
    """GEMM + amax. a: (M, K) / (L, M, K); b: (K, N) / (L, K, N); activation as GemmSm90's."""
    import torch

    from cudnn._torch_stream import stream_context

    amax = amax_out
    if amax is None:
        with stream_context(stream, a.device):
            amax = torch.empty((1,), dtype=torch.float32, device=a.device)
    d = run_gemm(a, b, out=out, stream=stream, bias=bias, amax=amax, activation=activation)
    return TupleDict(d=d, amax=amax)
