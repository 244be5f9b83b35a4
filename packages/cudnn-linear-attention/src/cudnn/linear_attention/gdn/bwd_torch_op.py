"""Torch custom op of the Gated DeltaNet backward, ``torch.ops.cudnn_linear_attention.gated_delta_net_bwd``, and the
autograd hooks the forward op (``torch_op.py``) calls::

    gated_delta_net_bwd(q, k, v, g, beta, do, dfinal_state?, scale?, use_qk_l2norm_in_kernel, initial_state?, cu_seqlens?)
        -> (dq, dk, dv, dg fp32, dbeta fp32, dinitial_state fp32 or an empty (0,) placeholder)

Thin: the op, its fake implementation, :func:`backward` (plan per metadata signature, outputs and the workspace on
torch's current stream, the launches of :class:`bwd_api.GatedDeltaNetBwdSm90` on that stream) and
:func:`autograd_backward` (absent final-state gradient to None, dg / dbeta cast to g's / beta's dtype, an unreadable
``do`` layout materialised by the autograd layer) and :func:`check` (the backward plan's ``check_support`` at forward
time) come from ``_host/delta_rule_bwd_op.py``.

Imports torch at module import: reached only from the torch op layer.
"""

from __future__ import annotations

from .._host.delta_rule_bwd_op import define_backward_op

_OP = define_backward_op("gated_delta_net", "cudnn.linear_attention.gdn.bwd_api", "GatedDeltaNetBwdSm90")
gated_delta_net_bwd = _OP.op
backward = _OP.backward
autograd_backward = _OP.autograd_backward
check = _OP.check
BACKWARD = _OP  # what torch_op.py wires into the forward op's autograd
_PLANS = _OP.plans
