"""Torch custom ops over the cudnn.gemm wrappers, with fake (meta) implementations for torch.compile.

    torch.ops.cudnn.gemm(a, b, bias=None, c=None, alpha=1.0, beta=1.0, scale_a=None, scale_b=None, scale_d=None,
                         out_dtype=None, split_k=1, fast_accum=False) -> d
        (fp8 a/b with one-element fp32 scale tensors; out_dtype defaults to a's dtype, bf16 for fp8 a;
         split_k > 1 allocates its fp32 partials workspace per call; fast_accum: fp8 without promotion)
    torch.ops.cudnn.gemm_swiglu(a, b, bias=None, layout="interleaved") -> d            (N_out = N / 2)
    torch.ops.cudnn.gemm_srelu(a, b, bias=None) -> d
    torch.ops.cudnn.gemm_dsrelu(a, b, pre) -> d
    torch.ops.cudnn.gemm_gelu(a, b, bias=None, approximate="tanh") -> d
    torch.ops.cudnn.gemm_amax(a, b, bias=None) -> (d, amax)

Each op launches on torch's current stream (the wrapper's ``stream=None``). Outputs are fresh tensors
(functional ops: nothing is mutated), so the ops compose with torch.compile and CUDA graphs.
"""

from __future__ import annotations

import torch

_NS = "cudnn"


def _out_like(a, n_out):
    return a.new_empty((*a.shape[:-1], n_out))


def _gemm_out_dtype(a, out_dtype):
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else a.dtype


@torch.library.custom_op(f"{_NS}::gemm", mutates_args=())
def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    c: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    scale_d: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    split_k: int = 1,
    fast_accum: bool = False,
) -> torch.Tensor:
    from ..dense.api import gemm as _gemm

    return _gemm(
        a,
        b,
        bias=bias,
        c=c,
        alpha=alpha,
        beta=beta,
        scale_a=scale_a,
        scale_b=scale_b,
        scale_d=scale_d,
        out_dtype=out_dtype,
        split_k=split_k,
        fast_accum=fast_accum,
    )["d"]


@gemm.register_fake
def _(a, b, bias=None, c=None, alpha=1.0, beta=1.0, scale_a=None, scale_b=None, scale_d=None, out_dtype=None, split_k=1, fast_accum=False):
    return a.new_empty((*a.shape[:-1], b.shape[-1]), dtype=_gemm_out_dtype(a, out_dtype))


@torch.library.custom_op(f"{_NS}::gemm_swiglu", mutates_args=())
def gemm_swiglu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, layout: str = "interleaved") -> torch.Tensor:
    from ..dense.swiglu.api import gemm_swiglu as _f

    return _f(a, b, bias=bias, layout=layout)["d"]


@gemm_swiglu.register_fake
def _(a, b, bias=None, layout="interleaved"):
    return _out_like(a, b.shape[-1] // 2)


@torch.library.custom_op(f"{_NS}::gemm_srelu", mutates_args=())
def gemm_srelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    from ..dense.srelu.api import gemm_srelu as _f

    return _f(a, b, bias=bias)["d"]


@gemm_srelu.register_fake
def _(a, b, bias=None):
    return _out_like(a, b.shape[-1])


@torch.library.custom_op(f"{_NS}::gemm_dsrelu", mutates_args=())
def gemm_dsrelu(a: torch.Tensor, b: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    from ..dense.dsrelu.api import gemm_dsrelu as _f

    return _f(a, b, pre)["d"]


@gemm_dsrelu.register_fake
def _(a, b, pre):
    return _out_like(a, b.shape[-1])


@torch.library.custom_op(f"{_NS}::gemm_gelu", mutates_args=())
def gemm_gelu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, approximate: str = "tanh") -> torch.Tensor:
    from ..dense.gelu.api import gemm_gelu as _f

    return _f(a, b, bias=bias, approximate=approximate)["d"]


@gemm_gelu.register_fake
def _(a, b, bias=None, approximate="tanh"):
    return _out_like(a, b.shape[-1])


@torch.library.custom_op(f"{_NS}::gemm_amax", mutates_args=())
def gemm_amax(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    from ..dense.amax.api import gemm_amax as _f

    r = _f(a, b, bias=bias)
    return r["d"], r["amax"]


@gemm_amax.register_fake
def _(a, b, bias=None):
    return _out_like(a, b.shape[-1]), a.new_empty((1,), dtype=torch.float32)


OPS = {"gemm": gemm, "gemm_swiglu": gemm_swiglu, "gemm_srelu": gemm_srelu, "gemm_dsrelu": gemm_dsrelu, "gemm_gelu": gemm_gelu, "gemm_amax": gemm_amax}
