"""Host pieces shared by the sdpa forward and backward adapters (pure Python: no torch, no cutlass at import).

- :mod:`.attention_key`: the compile-key fields both directions share (the base of SdpaFwdKey and SdpaBwdKey).
- :mod:`.plan_args`: plan-time argument normalization (window sizes, dtype tables) and TMA stride encoding.
- :mod:`.graph_engine`: the glue of the graph-API engines (TensorDesc from graph tensors, mask / scale attributes,
  the built plan's scale lookup, the engine's check_support / build_plan).
- :mod:`.torch_glue`: the custom ops' namespace and their value for an optional output they do not produce.
"""
