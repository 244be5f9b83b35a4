"""The torch custom op of a gated-delta-rule forward (Gated DeltaNet, Kimi Delta Attention) and its autograd, built once per family.

``define_forward_op("gated_delta_net", forward, backward)`` registers ``torch.ops.cudnn_linear_attention.gated_delta_net_fwd``::

    (q, k, v, g, beta, scale: float?, use_qk_l2norm_in_kernel: bool, initial_state: Tensor?, output_final_state: bool,
     cu_seqlens: Tensor?, schedule: str = DEFAULT_SCHEDULE) -> (o, final_state)

- the real implementation is the family's ``forward`` (api.py: plan lookup, outputs allocated on torch's current
  stream, one launch; ``schedule="parallel"``: the three chunk-parallel launches over a workspace the op allocates on
  that stream through the caching allocator, R1 / R2); ``o`` is a contiguous tensor of v's shape and dtype, ``final_state`` fp32 ``[N, H, V, K]`` or,
  without ``output_final_state``, an empty ``(0,)`` placeholder (custom-op outputs cannot be None);
- the fake implementation gives torch.compile / FakeTensor / meta tracing the same metadata (N from
  ``cu_seqlens.shape[0] - 1``, a dense batch's B, else 1: symbolic extents stay symbolic);
- autograd: ``backward`` is the family's :class:`~.delta_rule_bwd_op.BackwardOp` (``{gdn,kda}/bwd_torch_op.py``).
  When an input requires grad, ``setup_context`` first runs ``backward.check`` (the backward plan's ``check_support``
  on this call's metadata: a configuration the backward declines raises its NotImplementedError at the forward call),
  then saves q, k, v, g, beta, initial_state, cu_seqlens; the registered backward calls ``backward.autograd_backward``
  (the ``<public>_bwd`` custom op: the backward kernels, never a torch fallback) and returns dq, dk, dv, dg, dbeta and
  d initial_state. Forward-only use (``torch.no_grad()``, inputs not requiring grad) neither checks nor saves anything.

Imports torch at module import: reached only from the public wrappers at call time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .chunk_parallel import DEFAULT_SCHEDULE

if TYPE_CHECKING:
    from .delta_rule_bwd_op import BackwardOp

NAMESPACE = "cudnn_linear_attention"


def n_seqs(q, cu_seqlens):
    """The sequence count: ``cu_seqlens`` rows - 1, a dense batch's B, else 1 (symbolic under tracing)."""
    if cu_seqlens is not None:
        return cu_seqlens.shape[0] - 1
    return q.shape[0] if q.dim() == 4 else 1


def define_forward_op(public: str, forward, backward: BackwardOp):
    """Register ``torch.ops.cudnn_linear_attention.<public>_fwd`` over ``forward(q, k, v, g, beta, scale, l2norm, initial_state,
    output_final_state, cu_seqlens, schedule=...) -> (o, final_state or None)``, its autograd through ``backward`` (the family's
    ``BackwardOp``: ``check`` at forward time, ``autograd_backward`` at backward time), and return the op."""

    @torch.library.custom_op(f"{NAMESPACE}::{public}_fwd", mutates_args=())
    def op(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        scale: float | None,
        use_qk_l2norm_in_kernel: bool,
        initial_state: torch.Tensor | None,
        output_final_state: bool,
        cu_seqlens: torch.Tensor | None,
        schedule: str = DEFAULT_SCHEDULE,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        o, final = forward(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, schedule=schedule)
        return o, (final if final is not None else q.new_empty((0,), dtype=torch.float32))

    @op.register_fake
    def _(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, schedule=DEFAULT_SCHEDULE):
        o = v.new_empty(v.shape)
        if output_final_state:
            final = q.new_empty((n_seqs(q, cu_seqlens), v.shape[-2], v.shape[-1], q.shape[-1]), dtype=torch.float32)
        else:
            final = q.new_empty((0,), dtype=torch.float32)
        return o, final

    def setup_context(ctx, inputs, output):
        q, k, v, g, beta, scale, l2norm, initial_state, output_final_state, cu_seqlens = inputs[:10]  # schedule: forward only
        backward.check(q, k, v, g, beta, scale, l2norm, initial_state, output_final_state, cu_seqlens)  # declines raise here
        ctx.save_for_backward(q, k, v, g, beta, initial_state, cu_seqlens)
        ctx.scale, ctx.l2norm = scale, l2norm

    def grads(ctx, do, dfinal):
        q, k, v, g, beta, initial_state, cu_seqlens = ctx.saved_tensors
        dq, dk, dv, dg, dbeta, dh0 = backward.autograd_backward(q, k, v, g, beta, do, dfinal, ctx.scale, ctx.l2norm, initial_state, cu_seqlens)
        return dq, dk, dv, dg, dbeta, None, None, dh0, None, None, None

    op.register_autograd(grads, setup_context=setup_context)
    return op


def forward_only_guard(public: str, *tensors) -> None:
    """The ``out=`` form writes the caller's buffer outside the custom op, so autograd cannot see it: refuse it when a
    gradient could be asked for (NotImplementedError), instead of returning an output detached from its inputs."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise NotImplementedError(
            f"cudnn.linear_attention.{public}(out=...): an input requires grad, but the out= form is forward-only (it writes the "
            f"caller's buffer outside the torch custom op, so autograd cannot record it). Call {public}(...) without out= to get "
            f"gradients, or run under torch.no_grad() / on detached inputs."
        )
