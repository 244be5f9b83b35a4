"""Kimi Delta Attention (chunked, sm_90a). Forward: ``api.KimiDeltaAttentionFwdSm90`` and ``api.kimi_delta_attention``,
exported as ``cudnn.linear_attention.kimi_delta_attention`` / ``KimiDeltaAttentionFwdSm90`` (and ``cudnn.kimi_delta_attention``)."""
