"""``gemm_srelu``: ``D = relu(A @ B + bias) ** 2`` (squared ReLU) in one Hopper GEMM.

With ``store_pre=True`` the pre-activation (A @ B + bias) is also written (the input of ``gemm_dsrelu``).
Returns ``TupleDict(d=..., pre=...)`` (``pre`` only when stored).
"""

from __future__ import annotations

from cudnn.api_base import TupleDict

from ..api import GemmSm90, alloc_rows, run_gemm


class GemmSreluSm90(GemmSm90):
    """GemmSm90 with the squared-ReLU epilogue."""

    def __init__(self, a, b, d, *, aux=None, **kw):
        super().__init__(a, b, d, aux=aux, activation="relu2", store_pre=aux is not None, **kw)


def gemm_srelu(a, b, *, bias=None, store_pre: bool = False, out=None, pre_out=None, stream=None) -> TupleDict:
    """Squared-ReLU GEMM. a: (M, K) / (L, M, K); b: (K, N) / (L, K, N); bias: (N,) optional."""
    from cudnn._torch_stream import stream_context

    aux = pre_out
    if store_pre and aux is None:
        with stream_context(stream, a.device):
            aux = alloc_rows(tuple(a.shape[:-2]), a.shape[-2], b.shape[-1], a.dtype, a.device)
    d = run_gemm(a, b, out=out, stream=stream, bias=bias, aux=aux if store_pre else None, activation="relu2", store_pre=store_pre)
    return TupleDict(d=d, pre=aux) if store_pre else TupleDict(d=d)
