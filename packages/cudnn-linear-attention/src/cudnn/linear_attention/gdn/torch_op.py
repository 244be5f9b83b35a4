"""Torch custom op of the Gated DeltaNet forward: ``torch.ops.cudnn_linear_attention.gated_delta_net_fwd``.

Thin: the op, its fake implementation and its autograd come from ``_host/delta_rule_op.py``; the real implementation
is ``api._forward`` (plan lookup, outputs on torch's current stream, one launch); its backward is
``bwd_torch_op.BACKWARD`` (``torch.ops.cudnn_linear_attention.gated_delta_net_bwd``: three launches, four with GVA).
"""

from __future__ import annotations

from .._host.delta_rule_op import define_forward_op
from .api import _forward
from .bwd_torch_op import BACKWARD

gated_delta_net_fwd = define_forward_op("gated_delta_net", _forward, BACKWARD)
