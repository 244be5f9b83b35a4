"""causal_conv1d (forward, backward, decode update) in CuTe DSL. Public names are reached through
``cudnn.linear_attention``'s lazy table; this package imports nothing heavy."""
