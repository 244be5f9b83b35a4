"""Torch custom op of the Kimi Delta Attention backward, ``torch.ops.cudnn_linear_attention.kimi_delta_attention_bwd``, and the
autograd hook the forward op will call once GPU-validated (not wired yet: see the patch in the session report)::

    kimi_delta_attention_bwd(q, k, v, g, beta, do, dfinal_state?, scale?, use_qk_l2norm_in_kernel, initial_state?, cu_seqlens?)
        -> (dq, dk, dv, dg fp32, dbeta fp32, dinitial_state fp32 or an empty (0,) placeholder)

- real implementation: :func:`backward` (plan per metadata signature, outputs and the workspace allocated on torch's
  current stream, three launches on that stream through :class:`bwd_api.KimiDeltaAttentionBwdSm90`; g and dg are
  per key channel [.., H, K]);
- fake implementation: the same metadata, so torch.compile traces a training step through it;
- :func:`autograd_backward` is what the forward op's registered backward calls: it maps an absent / placeholder final-state
  gradient to None and casts dg / dbeta to g's / beta's dtype (autograd's contract). It also materialises ``do`` when
  autograd hands it in a layout the kernels cannot read with 16-byte loads (an expanded ``o.sum()`` gradient has
  stride 0): that copy is the autograd layer's, the adapter itself declines such layouts (Rule 2).

Imports torch at module import: reached only from the torch op layer.
"""

from __future__ import annotations

import torch

from .._host.delta_rule_op import NAMESPACE, n_seqs

_PLANS: dict = {}


def _plan_for(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, scale, l2norm, initial_state, dh0, dfinal, cu_seqlens):
    from .bwd_api import KimiDeltaAttentionBwdSm90

    rank = q.dim()
    free = 1 if rank == 3 else 2

    def sig(t):
        return None if t is None else (tuple(t.shape[free:]), t.dtype, str(t.device), tuple(t.stride()[free:]))

    key = (rank, scale, l2norm, *(sig(t) for t in (q, k, v, g, beta, do, initial_state, dfinal, cu_seqlens)))
    plan = _PLANS.get(key)
    if plan is None:
        plan = KimiDeltaAttentionBwdSm90(
            q,
            k,
            v,
            g,
            beta,
            do,
            dq,
            dk,
            dv,
            dg,
            dbeta,
            scale=scale,
            use_qk_l2norm_in_kernel=l2norm,
            initial_state=initial_state,
            dinitial_state=dh0,
            dfinal_state=dfinal,
            cu_seqlens=cu_seqlens,
        )
        plan.compile()
        _PLANS[key] = plan
    return plan


def backward(q, k, v, g, beta, do, dfinal, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens):
    """``(dq, dk, dv, dg, dbeta, dinitial_state or None)``: outputs (dq/dk/dv contiguous in q/k/v's dtype, dg/dbeta fp32)
    and the workspace allocated on torch's current stream, the cached plan, three launches on that stream."""
    from cudnn._torch_stream import stream_context

    from .bwd_api import workspace_bytes

    device = q.device
    rank = q.dim()
    T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
    n = int(n_seqs(q, cu_seqlens))
    stream = torch.cuda.current_stream(device)
    with stream_context(stream, device):
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dg = torch.empty(g.shape, dtype=torch.float32, device=device)
        dbeta = torch.empty(beta.shape, dtype=torch.float32, device=device)
        dh0 = torch.empty_like(initial_state) if initial_state is not None else None
        ws = torch.empty(workspace_bytes(T, n, int(v.shape[-2]), int(q.shape[-1])), dtype=torch.uint8, device=device)
    plan = _plan_for(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, scale, use_qk_l2norm_in_kernel, initial_state, dh0, dfinal, cu_seqlens)
    plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state, dh0, dfinal, cu_seqlens, workspace=ws, current_stream=stream)
    return dq, dk, dv, dg, dbeta, dh0


@torch.library.custom_op(f"{NAMESPACE}::kimi_delta_attention_bwd", mutates_args=())
def kimi_delta_attention_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    do: torch.Tensor,
    dfinal_state: torch.Tensor | None,
    scale: float | None,
    use_qk_l2norm_in_kernel: bool,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv, dg, dbeta, dh0 = backward(q, k, v, g, beta, do, dfinal_state, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens)
    return dq, dk, dv, dg, dbeta, (dh0 if dh0 is not None else q.new_empty((0,), dtype=torch.float32))


@kimi_delta_attention_bwd.register_fake
def _(q, k, v, g, beta, do, dfinal_state, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens):
    dh0 = initial_state.new_empty(initial_state.shape) if initial_state is not None else q.new_empty((0,), dtype=torch.float32)
    return (
        q.new_empty(q.shape),
        k.new_empty(k.shape),
        v.new_empty(v.shape),
        g.new_empty(g.shape, dtype=torch.float32),
        beta.new_empty(beta.shape, dtype=torch.float32),
        dh0,
    )


def _readable(t: torch.Tensor) -> bool:
    """Unit channel stride, token / head strides multiples of 8 elements: what the kernels load natively (strides only:
    this also runs on FakeTensors under torch.compile, which have no data pointer; a misaligned base raises in execute)."""
    if t.stride(-1) != 1 or t.stride(-2) % 8 or t.stride(-3) % 8:
        return False
    return t.dim() != 4 or t.shape[0] == 1 or t.shape[1] == 1 or t.stride(0) == t.shape[1] * t.stride(1)


def autograd_backward(q, k, v, g, beta, do, dfinal, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens):
    """The gradients autograd wants for the forward op's inputs ``(q, k, v, g, beta, initial_state)``, from ``do`` and the
    final state's gradient ``dfinal`` (None or a placeholder when the final state was not an output or not used)."""
    if dfinal is not None and (dfinal.numel() == 0 or dfinal.dim() != 4):
        dfinal = None
    if not _readable(do):
        do = do.contiguous()  # autograd's gradient layout (e.g. an expanded o.sum() gradient); see the module docstring
    if dfinal is not None and not dfinal.is_contiguous():
        dfinal = dfinal.contiguous()
    dq, dk, dv, dg, dbeta, dh0 = kimi_delta_attention_bwd(q, k, v, g, beta, do, dfinal, scale, bool(use_qk_l2norm_in_kernel), initial_state, cu_seqlens)
    return dq, dk, dv, dg.to(g.dtype), dbeta.to(beta.dtype), (dh0 if initial_state is not None else None)
