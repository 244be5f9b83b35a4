"""Gated DeltaNet (chunked, sm_90a). Forward: ``api.GatedDeltaNetFwdSm90`` and ``api.gated_delta_net``.

Not yet in the family's lazy export table: exported once its GPU tests have passed on an H200
(see docs/linear-attention.md). Import ``cudnn.linear_attention.gdn.api`` directly until then.
"""
