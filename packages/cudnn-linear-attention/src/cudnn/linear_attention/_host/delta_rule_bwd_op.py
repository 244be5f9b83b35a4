"""The torch custom op of a gated-delta-rule backward (Gated DeltaNet, Kimi Delta Attention) and the autograd hooks the
forward op (``_host/delta_rule_op.py::define_forward_op``) calls, built once per family.

``define_backward_op("gated_delta_net", "cudnn.linear_attention.gdn.bwd_api", "GatedDeltaNetBwdSm90")`` registers
``torch.ops.cudnn_linear_attention.gated_delta_net_bwd``::

    (q, k, v, g, beta, do, dfinal_state?, scale?, use_qk_l2norm_in_kernel, initial_state?, cu_seqlens?)
        -> (dq, dk, dv, dg fp32, dbeta fp32, dinitial_state fp32 or an empty (0,) placeholder)

and returns :class:`BackwardOp` (``op``, ``backward``, ``autograd_backward``, ``check``, ``plans``):

- real implementation: ``backward`` (plan per metadata signature, outputs and the workspace (``adapter.workspace_bytes_for``)
  allocated on torch's current stream, the plan's launches on that stream) over the family's ``DeltaRuleBwdSm90``
  subclass;
- fake implementation: the same metadata (dq / dk / dv of q / k / v, dg / dbeta fp32 of g / beta), so torch.compile
  traces a training step through it;
- ``autograd_backward`` is what the forward op's registered backward calls: it maps an absent / placeholder final-state
  gradient to None and casts dg / dbeta to g's / beta's dtype (autograd's contract). It also materialises ``do`` when
  autograd hands it in a layout the kernels cannot read with 16-byte loads (an expanded ``o.sum()`` gradient has
  stride 0): that copy is the autograd layer's, the adapter itself declines such layouts (Rule 2);
- ``check`` is what the forward op's ``setup_context`` calls when an input requires grad: the backward plan's own
  ``check_support`` on the forward's metadata (descriptors only: nothing allocated, no cutlass imported), so a
  configuration the backward declines (KDA: in-kernel L2 norm, GVA) raises the plan's NotImplementedError at the
  forward call, not after the forward has run and the loss is built. Cached per metadata signature; skipped while
  shapes are symbolic (torch.compile with dynamic shapes: the backward's plan raises the same error at backward).

Imports torch at module import: reached only from the torch op layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cudnn.api_base import TensorDesc

from .delta_rule_op import NAMESPACE, n_seqs


def readable(t: torch.Tensor) -> bool:
    """Unit channel stride, token / head strides multiples of 8 elements: what the kernels load natively (strides only:
    this also runs on FakeTensors under torch.compile, which have no data pointer; a misaligned base raises in execute)."""
    if t.stride(-1) != 1 or t.stride(-2) % 8 or t.stride(-3) % 8:
        return False
    return t.dim() != 4 or t.shape[0] == 1 or t.shape[1] == 1 or t.stride(0) == t.shape[1] * t.stride(1)


@dataclass
class BackwardOp:
    """One family's backward op and its host paths (see the module docstring)."""

    op: Any
    backward: Callable
    autograd_backward: Callable
    check: Callable
    plans: dict = field(default_factory=dict)


def define_backward_op(public: str, module: str, adapter_name: str) -> BackwardOp:
    """Register ``torch.ops.cudnn_linear_attention.<public>_bwd`` over the backward adapter class ``adapter_name`` of
    ``module`` (imported at the first real call: the op's registration imports no cutlass)."""
    plans: dict = {}

    def adapter():
        return getattr(importlib.import_module(module), adapter_name)

    def plan_for(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, scale, l2norm, initial_state, dh0, dfinal, cu_seqlens):
        rank = q.dim()
        free = 1 if rank == 3 else 2
        key = (rank, scale, l2norm, *(_signature(t, free) for t in (q, k, v, g, beta, do, initial_state, dfinal, cu_seqlens)))
        plan = plans.get(key)
        if plan is None:
            kw = dict(initial_state=initial_state, dinitial_state=dh0, dfinal_state=dfinal, cu_seqlens=cu_seqlens)
            plan = adapter()(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, scale=scale, use_qk_l2norm_in_kernel=l2norm, **kw)
            plan.compile()
            plans[key] = plan
        return plan

    def backward(q, k, v, g, beta, do, dfinal, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens):
        """``(dq, dk, dv, dg, dbeta, dinitial_state or None)``: outputs (dq/dk/dv contiguous in q/k/v's dtype, dg/dbeta
        fp32) and the workspace allocated on torch's current stream, the cached plan, its launches on that stream."""
        from cudnn._torch_stream import stream_context

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
            plan = plan_for(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, scale, use_qk_l2norm_in_kernel, initial_state, dh0, dfinal, cu_seqlens)
            ws = torch.empty(plan.workspace_bytes_for(T, n), dtype=torch.uint8, device=device)
        plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state, dh0, dfinal, cu_seqlens, workspace=ws, current_stream=stream)
        return dq, dk, dv, dg, dbeta, dh0

    @torch.library.custom_op(f"{NAMESPACE}::{public}_bwd", mutates_args=())
    def op(
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

    @op.register_fake
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

    def autograd_backward(q, k, v, g, beta, do, dfinal, scale, use_qk_l2norm_in_kernel, initial_state, cu_seqlens):
        """The gradients autograd wants for the forward op's inputs ``(q, k, v, g, beta, initial_state)``, from ``do`` and
        the final state's gradient ``dfinal`` (None or a placeholder when the final state was not an output or not used)."""
        if dfinal is not None and (dfinal.numel() == 0 or dfinal.dim() != 4):
            dfinal = None
        if not readable(do):
            do = do.contiguous()  # autograd's gradient layout (e.g. an expanded o.sum() gradient); see the module docstring
        if dfinal is not None and not dfinal.is_contiguous():
            dfinal = dfinal.contiguous()
        dq, dk, dv, dg, dbeta, dh0 = op(q, k, v, g, beta, do, dfinal, scale, bool(use_qk_l2norm_in_kernel), initial_state, cu_seqlens)
        return dq, dk, dv, dg.to(g.dtype), dbeta.to(beta.dtype), (dh0 if initial_state is not None else None)

    checked: set = set()

    def check(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens):
        """NotImplementedError / ValueError from the backward plan's ``check_support`` if it would decline this forward's
        inputs (``do`` as the forward's contiguous ``o``, ``dfinal_state`` as its final state); None if it accepts them.
        Descriptors only (symbolic extents read through their hints: no guard is added under torch.compile)."""
        named = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, cu_seqlens=cu_seqlens)
        d = {name: _desc(t, name) for name, t in named.items() if t is not None}
        if any(x is None for x in d.values()):
            return  # an extent without a hint (data-dependent): the backward's plan checks at backward time
        l2norm, free = bool(use_qk_l2norm_in_kernel), 1 if q.dim() == 3 else 2
        key = (q.dim(), scale, l2norm, bool(output_final_state), *(None if t is None else _desc_key(t, free) for t in (d.get(n) for n in named)))
        if key in checked:
            return
        qd, vd, dev = d["q"], d["v"], d["q"].device
        n = d["cu_seqlens"].shape[0] - 1 if cu_seqlens is not None else (qd.shape[0] if qd.rank == 4 else 1)
        f32 = torch.float32

        def like(t, name, dtype=None, shape=None):
            return TensorDesc.contiguous(t.shape if shape is None else shape, t.dtype if dtype is None else dtype, name, dev)

        h0 = d.get("initial_state")
        plan = adapter()(
            qd, d["k"], vd, d["g"], d["beta"], like(vd, "do"), like(qd, "dq"), like(d["k"], "dk"), like(vd, "dv"), like(d["g"], "dg", f32),
            like(d["beta"], "dbeta", f32), scale=scale, use_qk_l2norm_in_kernel=l2norm, initial_state=h0,
            dinitial_state=None if h0 is None else like(h0, "dinitial_state", f32),
            dfinal_state=like(qd, "dfinal_state", f32, (n, vd.shape[-2], vd.shape[-1], qd.shape[-1])) if output_final_state else None,
            cu_seqlens=d.get("cu_seqlens"),
        )  # fmt: skip
        plan.check_support()
        checked.add(key)

    return BackwardOp(op, backward, autograd_backward, check, plans)


def _hint(s) -> int | None:
    """An extent as an int: itself, or a symbolic extent's hint (``SymNode.hint``: reading it adds no guard); None when it
    has none (an unbacked, data-dependent extent)."""
    if isinstance(s, int):
        return s
    hint = getattr(getattr(s, "node", None), "hint", None)
    return hint if isinstance(hint, int) else None


def _desc(t: torch.Tensor, name: str) -> TensorDesc | None:
    """``t``'s descriptor with every extent and stride as an int (hints of symbolic ones), or None if one has no hint."""
    shape, stride = [_hint(s) for s in t.shape], [_hint(s) for s in t.stride()]
    if None in shape or None in stride:
        return None
    return TensorDesc(tuple(shape), tuple(stride), t.dtype, name, str(t.device))


def _desc_key(d: TensorDesc, free: int) -> tuple:
    return (d.shape[free:], d.stride[free:], d.dtype)


def _signature(t, free: int):
    """A plan cache's key part for ``t``: its metadata past the ``free`` leading token dims (runtime extents, Rule 4)."""
    return None if t is None else (tuple(t.shape[free:]), t.dtype, str(t.device), tuple(t.stride()[free:]))
