"""cudnn: GPU kernels for LLM training and serving, written in CuTe DSL, Hopper first.

This package (from the ``cudnn-core`` wheel) imports neither torch nor cutlass. Family kernels live in
their own wheels (``cudnn-sdpa``, ``cudnn-gemm``, ``cudnn-frost``, ``cudnn-linear-attention``) and are
reachable lazily from here through one table (PEP 562); a name whose wheel is missing raises an
ImportError naming the wheel.
"""

from __future__ import annotations

import pkgutil as _pkgutil

# Merge ``cudnn`` directories from every wheel's src/ tree when they sit on PYTHONPATH side by side
# (an installed site-packages already holds them in one directory).
__path__ = _pkgutil.extend_path(__path__, __name__)

from ._lazy import resolve as _resolve  # noqa: E402
from .datatypes import data_type  # noqa: E402
from .dsl_gate import CuteDslVersionError, cutedsl_requirement_error, cutedsl_state, cutedsl_too_old  # noqa: E402

__version__ = "0.1.0"

#: exported name -> (module, attribute or "" for the module itself), and the wheel that ships it.
_LAZY_OPTIONAL_IMPORTS: dict[str, tuple[str, str, str]] = {
    # families (subpackages)
    "sdpa": ("cudnn.sdpa", "", "cudnn-sdpa"),
    "gemm": ("cudnn.gemm", "", "cudnn-gemm"),
    "frost": ("cudnn.frost", "", "cudnn-frost"),
    "linear_attention": ("cudnn.linear_attention", "", "cudnn-linear-attention"),
    # attention
    "sdpa_fwd": ("cudnn.sdpa", "sdpa_fwd", "cudnn-sdpa"),
    "sdpa_bwd": ("cudnn.sdpa", "sdpa_bwd", "cudnn-sdpa"),
    "scaled_dot_product_attention": ("cudnn.sdpa", "scaled_dot_product_attention", "cudnn-sdpa"),
    "SdpaFwdSm90": ("cudnn.sdpa", "SdpaFwdSm90", "cudnn-sdpa"),
    "SdpaBwdSm90": ("cudnn.sdpa", "SdpaBwdSm90", "cudnn-sdpa"),
    # gemm
    "GemmSm90": ("cudnn.gemm", "GemmSm90", "cudnn-gemm"),
    "gemm_swiglu": ("cudnn.gemm", "gemm_swiglu", "cudnn-gemm"),
    "gemm_srelu": ("cudnn.gemm", "gemm_srelu", "cudnn-gemm"),
    "gemm_dsrelu": ("cudnn.gemm", "gemm_dsrelu", "cudnn-gemm"),
    "gemm_gelu": ("cudnn.gemm", "gemm_gelu", "cudnn-gemm"),
    "gemm_amax": ("cudnn.gemm", "gemm_amax", "cudnn-gemm"),
    # linear attention
    "causal_conv1d": ("cudnn.linear_attention", "causal_conv1d", "cudnn-linear-attention"),
    "causal_conv1d_update": ("cudnn.linear_attention", "causal_conv1d_update", "cudnn-linear-attention"),
    "gated_delta_net": ("cudnn.linear_attention", "gated_delta_net", "cudnn-linear-attention"),
    "kimi_delta_attention": ("cudnn.linear_attention", "kimi_delta_attention", "cudnn-linear-attention"),
    # core utilities that need torch at call time (the modules themselves import it lazily)
    "as_torch_stream": ("cudnn._torch_stream", "as_torch_stream", "cudnn-core"),
    "stream_context": ("cudnn._torch_stream", "stream_context", "cudnn-core"),
    "Workspace": ("cudnn.workspace", "Workspace", "cudnn-core"),
    "APIBase": ("cudnn.api_base", "APIBase", "cudnn-core"),
    "TensorDesc": ("cudnn.api_base", "TensorDesc", "cudnn-core"),
    "TupleDict": ("cudnn.api_base", "TupleDict", "cudnn-core"),
}


def _register_graph_exports() -> None:
    """Graph-API names (pure Python, cudnn-core) join the same table."""
    for name in (
        "pygraph",
        "Graph",
        "heur_mode",
        "create_handle",
        "destroy_handle",
        "set_stream",
        "get_stream",
        "build_plan_policy",
        "norm_forward_phase",
        "reduction_mode",
        "pointwise_mode",
        "tensor",
        "diagonal_alignment",
        "attention_implementation",
        "cudnnGraphNotSupportedError",
    ):
        _LAZY_OPTIONAL_IMPORTS.setdefault(name, ("cudnn.graph", name, "cudnn-core"))


_register_graph_exports()


def __getattr__(name: str):
    entry = _LAZY_OPTIONAL_IMPORTS.get(name)
    if entry is None:
        raise AttributeError(f"module 'cudnn' has no attribute {name!r}")
    module, attr, wheel = entry
    return _resolve("cudnn", name, {name: (module, attr)}, wheel)


def __dir__():
    return sorted(set(globals()) | set(_LAZY_OPTIONAL_IMPORTS))


__all__ = ["data_type", "CuteDslVersionError", "cutedsl_state", "cutedsl_too_old", "cutedsl_requirement_error", *_LAZY_OPTIONAL_IMPORTS]
