"""``gemm_gelu``: ``D = gelu(A @ B + bias)`` in one Hopper GEMM, tanh approximation or exact erf.

``approximate="tanh"`` (default) or ``"none"`` (erf), as torch.nn.functional.gelu. With ``store_pre=True``
the pre-activation is also written. Returns ``TupleDict(d=..., pre=...)`` (``pre`` only when stored).
"""

from __future__ import annotations

from cudnn.api_base import TupleDict

from ..api import GemmSm90, alloc_rows, run_gemm

_ACT = {"tanh": "gelu_tanh", "none": "gelu_erf"}


class GemmGeluSm90(GemmSm90):
    """GemmSm90 with the GELU epilogue."""

    def __init__(self, a, b, d, *, approximate: str = "tanh", aux=None, **kw):
        if approximate not in _ACT:
            raise ValueError(f"GemmGeluSm90: approximate must be 'tanh' or 'none', got {approximate!r}")
        super().__init__(a, b, d, aux=aux, activation=_ACT[approximate], store_pre=aux is not None, **kw)


def gemm_gelu(a, b, *, approximate: str = "tanh", bias=None, store_pre: bool = False, out=None, pre_out=None, stream=None) -> TupleDict:
    """GELU GEMM. a: (M, K) / (L, M, K); b: (K, N) / (L, K, N); bias: (N,) optional."""
    from cudnn._torch_stream import stream_context

    if approximate not in _ACT:
        raise ValueError(f"gemm_gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    aux = pre_out
    if store_pre and aux is None:
        with stream_context(stream, a.device):
            aux = alloc_rows(tuple(a.shape[:-2]), a.shape[-2], b.shape[-1], a.dtype, a.device)
    d = run_gemm(a, b, out=out, stream=stream, bias=bias, aux=aux if store_pre else None, activation=_ACT[approximate], store_pre=store_pre)
    return TupleDict(d=d, pre=aux) if store_pre else TupleDict(d=d)
