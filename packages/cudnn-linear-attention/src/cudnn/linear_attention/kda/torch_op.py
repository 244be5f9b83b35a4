"""Torch custom op of the Kimi Delta Attention forward: ``torch.ops.cudnn_linear_attention.kimi_delta_attention_fwd``.

Thin: the op, its fake implementation and its refusing backward come from ``_host/delta_rule_op.py``; the real
implementation is ``api._forward`` (plan lookup, outputs on torch's current stream, one launch).
"""

from __future__ import annotations

from .._host.delta_rule_op import define_forward_op
from .api import _forward

kimi_delta_attention_fwd = define_forward_op("kimi_delta_attention", _forward)
