"""cudnn.linear_attention: linear-attention building blocks for Hopper, in CuTe DSL.

Served today: causal_conv1d (forward, backward, decode update), the Gated DeltaNet forward
(``gated_delta_net``, adapter ``GatedDeltaNetFwdSm90``) and the Kimi Delta Attention forward
(``kimi_delta_attention``, adapter ``KimiDeltaAttentionFwdSm90``), chunked on sm_90a, both torch custom ops
(``torch.ops.cudnn_linear_attention.*_fwd``) and graph-API engines (``engines.py``: ``gdn_fwd_sm90``,
``kda_fwd_sm90``). Both ops are differentiable: their autograd runs the chunked backward kernels
(``torch.ops.cudnn_linear_attention.*_bwd``); a configuration the KDA backward declines (in-kernel L2 norm, GVA)
raises NotImplementedError at the forward call when an input requires grad (docs/linear-attention.md).

Nothing heavy is imported here: kernels, torch ops and adapters load on first attribute access, after
the CuTe DSL gate (Rule 7) has checked the runtime floor.
"""

from __future__ import annotations

from cudnn._lazy import install_family

#: Lowest nvidia-cutlass-dsl this family's kernels run on (the wheel installs from 4.6.2 up).
CUTEDSL_MIN_VERSION = "4.8.0"
WHEEL = "cudnn-linear-attention"

_LAZY: dict[str, tuple[str, str]] = {
    "causal_conv1d": (".conv1d.api", "causal_conv1d"),
    "causal_conv1d_update": (".conv1d.api", "causal_conv1d_update"),
    "gated_delta_net": (".gdn.api", "gated_delta_net"),
    "GatedDeltaNetFwdSm90": (".gdn.api", "GatedDeltaNetFwdSm90"),
    "kimi_delta_attention": (".kda.api", "kimi_delta_attention"),
    "KimiDeltaAttentionFwdSm90": (".kda.api", "KimiDeltaAttentionFwdSm90"),
}
#: Names whose modules need the DSL at import time; the rest (metadata-only checks) import without it.
_NEEDS_DSL: frozenset = frozenset()


install_family(globals(), _LAZY, WHEEL, CUTEDSL_MIN_VERSION, _NEEDS_DSL)
