"""Attention forward: api.py (SdpaFwdSm90, sdpa_fwd), torch_op.py (custom op, scaled_dot_product_attention),
kernel_sm90.py (the CuTe DSL kernel), kernel_key.py (its compile key)."""
