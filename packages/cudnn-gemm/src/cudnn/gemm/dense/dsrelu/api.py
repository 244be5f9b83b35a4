"""``gemm_dsrelu``: the backward of squared ReLU fused into the GEMM that produces its incoming gradient:
``D = (A @ B) * 2 * relu(pre)``, with ``pre`` the forward pre-activation (M, N), read in the epilogue.

Returns ``TupleDict(d=...)``.
"""

from __future__ import annotations

from cudnn.api_base import TupleDict

from ..api import GemmSm90, run_gemm


class GemmDsreluSm90(GemmSm90):
    """GemmSm90 with the dSReLU epilogue (``aux`` is the forward pre-activation, read)."""

    def __init__(self, a, b, d, *, aux, **kw):
        super().__init__(a, b, d, aux=aux, dsrelu=True, **kw)


def gemm_dsrelu(a, b, pre, *, out=None, stage_aux: bool | None = None, stream=None) -> TupleDict:
    """dSReLU GEMM. a: (M, K) / (L, M, K); b: (K, N) / (L, K, N); pre: (M, N) / (L, M, N) row-major.

    ``stage_aux=True`` (plan-time): ``pre`` is loaded by TMA into shared memory one sub-tile ahead instead of
    read per element (needs ``pre`` in d's dtype, 16-byte-aligned rows); None: the dsrelu default of
    ``cudnn.gemm.dense.api.FUSION_DEFAULTS``."""
    kw = {} if stage_aux is None else {"stage_aux": bool(stage_aux)}
    d = run_gemm(a, b, out=out, stream=stream, aux=pre, dsrelu=True, **kw)
    return TupleDict(d=d)
