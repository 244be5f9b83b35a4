"""``gemm_swiglu``: ``D = silu(A @ B_gate) * (A @ B_up)`` in one Hopper GEMM (epilogue in registers).

B's N columns hold the gate and up projections (N = 2 * N_out), in one of two layouts:
- ``"interleaved"``: blocks of 128 columns alternate gate, up, gate, up, ... (the kernel's tile order);
- ``"halves"``: ``[gate (N/2) | up (N/2)]``, served by a hierarchical TMA view of B (no copy).
N must be a multiple of 256. With ``store_pre=True`` the pre-activation (A @ B + bias, N columns in B's
own column order) is also written, for the backward pass.

Returns ``TupleDict(d=..., pre=...)`` (``pre`` only when stored).
"""

from __future__ import annotations

from cudnn.api_base import TupleDict

from ..api import GemmSm90, alloc_rows, run_gemm


class GemmSwigluSm90(GemmSm90):
    """GemmSm90 with the SwiGLU epilogue (``layout`` = "interleaved" | "halves")."""

    def __init__(self, a, b, d, *, layout: str = "interleaved", aux=None, bias=None, **kw):
        super().__init__(a, b, d, aux=aux, bias=bias, swiglu=layout, store_pre=aux is not None, **kw)


def gemm_swiglu(a, b, *, layout: str = "interleaved", bias=None, store_pre: bool = False, out=None, pre_out=None, stream=None) -> TupleDict:
    """SwiGLU GEMM. a: (M, K) / (L, M, K); b: (K, N) / (L, K, N) with N = 2 * N_out; bias: (N,) optional."""
    from cudnn._torch_stream import stream_context

    if layout not in ("interleaved", "halves"):
        raise ValueError(f"gemm_swiglu: layout must be 'interleaved' or 'halves', got {layout!r}")
    n = b.shape[-1]
    aux = pre_out
    if store_pre and aux is None:
        with stream_context(stream, a.device):
            aux = alloc_rows(tuple(a.shape[:-2]), a.shape[-2], n, a.dtype, a.device)
    d = run_gemm(a, b, n_out=n // 2, out=out, stream=stream, bias=bias, aux=aux if store_pre else None, swiglu=layout, store_pre=store_pre)
    return TupleDict(d=d, pre=aux) if store_pre else TupleDict(d=d)
