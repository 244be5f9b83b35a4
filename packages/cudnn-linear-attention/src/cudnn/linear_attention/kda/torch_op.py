"""Torch custom op of the Kimi Delta Attention forward: ``torch.ops.cudnn_linear_attention.kimi_delta_attention_fwd``.

Thin: the op, its fake implementation and its autograd come from ``_host/delta_rule_op.py``; the real implementation
is ``api._forward`` (plan lookup, outputs on torch's current stream, one launch); its backward is
``bwd_torch_op.BACKWARD`` (``torch.ops.cudnn_linear_attention.kimi_delta_attention_bwd``: three launches). What the
backward declines (``use_qk_l2norm_in_kernel=True``, GVA) raises its NotImplementedError at the forward call when an
input requires grad.
"""

from __future__ import annotations

from .._host.delta_rule_op import define_forward_op
from .api import _forward
from .bwd_torch_op import BACKWARD

kimi_delta_attention_fwd = define_forward_op("kimi_delta_attention", _forward, BACKWARD)
