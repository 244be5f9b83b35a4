"""gemm_gelu: see api.py."""
