"""Torch integration of the attention backward: the ``torch.ops.cudnn.sdpa_bwd`` custom op (with a fake
implementation, so ``torch.compile(fullgraph=True)`` traces through it) and :func:`register`, which installs the
autograd formula of ``torch.ops.cudnn.sdpa_fwd`` so ``cudnn.sdpa.scaled_dot_product_attention`` trains.

Both call :func:`cudnn.sdpa.bwd.api.sdpa_bwd` (one implementation). The formula:

- saves q, k, v, o and the LSE of the forward; when the forward ran without ``return_lse`` (its output LSE is
  empty), the backward recomputes the forward once with ``return_lse=True`` to obtain it (call the forward with
  ``return_lse=True`` under autograd to avoid that);
- the LSE output is marked non-differentiable (like torch's flash and cuDNN backends): a loss through it gets no
  gradient from this formula;
- ``grad_out`` arrives in whatever layout autograd produced (an expanded scalar, a transposed view); one the TMA
  descriptors cannot address (non-unit head-dim stride, zero or odd strides) is made contiguous here, in the
  autograd glue, never inside the adapter (whose execute() only validates, Rule 2).
"""

from __future__ import annotations

import torch

from .._host.torch_glue import OP_NAMESPACE as _LIB
from .._host.torch_glue import absent_output
from .api import sdpa_bwd


@torch.library.custom_op(f"{_LIB}::sdpa_bwd", mutates_args=(), device_types="cuda")
def _sdpa_bwd_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool = False,
    causal_bottom_right: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    scale: float | None = None,
    sinks: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_kv: torch.Tensor | None = None,
    max_seqlen_q: int | None = None,
    max_seqlen_kv: int | None = None,
    lse_log2: bool = False,
    deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    res = sdpa_bwd(
        q,
        k,
        v,
        o,
        do,
        lse,
        is_causal=is_causal,
        causal_bottom_right=causal_bottom_right,
        window_size=(window_left, window_right),
        scale=scale,
        sinks=sinks,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_kv=cu_seqlens_kv,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_kv=max_seqlen_kv,
        lse_log2=lse_log2,
        deterministic=deterministic,
    )
    dsinks = res["dsinks"] if "dsinks" in res else absent_output(q)
    return res["dq"], res["dk"], res["dv"], dsinks


@_sdpa_bwd_op.register_fake
def _(q, k, v, o, do, lse, is_causal=False, causal_bottom_right=False, window_left=-1, window_right=-1, scale=None, sinks=None,
      cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None, max_seqlen_kv=None, lse_log2=False, deterministic=False):  # fmt: skip
    from ..fwd.api import _alloc_like_layout

    dq = _alloc_like_layout(torch, q, q.shape[-1], q.dtype, q.device)
    dk = _alloc_like_layout(torch, k, k.shape[-1], k.dtype, k.device)
    dv = _alloc_like_layout(torch, v, v.shape[-1], v.dtype, v.device)
    dsinks = q.new_empty(tuple(sinks.shape), dtype=torch.float32) if sinks is not None else absent_output(q)
    return dq, dk, dv, dsinks


# ---------------------------------------------------------------------------------------------- autograd formula
_FWD_ARGS = (
    "q",
    "k",
    "v",
    "is_causal",
    "causal_bottom_right",
    "window_left",
    "window_right",
    "scale",
    "sinks",
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "max_seqlen_q",
    "max_seqlen_kv",
    "return_lse",
)


def _tma_ok(x: torch.Tensor) -> bool:
    if x.stride(-1) != 1:
        return False
    return all(x.shape[i] <= 1 or (x.stride(i) > 0 and x.stride(i) % 8 == 0) for i in range(x.dim() - 1))


def _setup_context(ctx, inputs, output):
    args = dict(zip(_FWD_ARGS, inputs, strict=False))
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.flags = {k: args[k] for k in ("is_causal", "causal_bottom_right", "window_left", "window_right", "scale", "max_seqlen_q", "max_seqlen_kv")}
    ctx.has_lse = bool(args["return_lse"])
    ctx.has_sinks = args["sinks"] is not None
    ctx.save_for_backward(args["q"], args["k"], args["v"], o, lse, args["sinks"], args["cu_seqlens_q"], args["cu_seqlens_kv"])


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, sinks, cu_q, cu_k = ctx.saved_tensors
    f = ctx.flags
    if not ctx.has_lse:
        _, lse = torch.ops.cudnn.sdpa_fwd(
            q, k, v, f["is_causal"], f["causal_bottom_right"], f["window_left"], f["window_right"], f["scale"], sinks, cu_q, cu_k,
            f["max_seqlen_q"], f["max_seqlen_kv"], True,
        )  # fmt: skip
    if not _tma_ok(grad_o):
        grad_o = grad_o.contiguous()
    dq, dk, dv, dsinks = torch.ops.cudnn.sdpa_bwd(
        q, k, v, o, grad_o, lse, f["is_causal"], f["causal_bottom_right"], f["window_left"], f["window_right"], f["scale"], sinks, cu_q, cu_k,
        f["max_seqlen_q"], f["max_seqlen_kv"],
    )  # fmt: skip
    return dq, dk, dv, None, None, None, None, None, (dsinks if ctx.has_sinks else None), None, None, None, None, None


_REGISTERED = []


def register() -> None:
    """Install the autograd formula of ``torch.ops.cudnn.sdpa_fwd`` (idempotent). The forward's torch_op module
    calls this once at import; tests call it directly."""
    if _REGISTERED:
        return
    from ..fwd import torch_op  # noqa: F401  (defines torch.ops.cudnn.sdpa_fwd; a partial module during its own import is fine)

    torch.library.register_autograd(f"{_LIB}::sdpa_fwd", _backward, setup_context=_setup_context)
    _REGISTERED.append(True)
