"""Gated DeltaNet (chunked, sm_90a). Forward: ``api.GatedDeltaNetFwdSm90`` and ``api.gated_delta_net``, exported
as ``cudnn.linear_attention.gated_delta_net`` / ``GatedDeltaNetFwdSm90`` (and ``cudnn.gated_delta_net``)."""
