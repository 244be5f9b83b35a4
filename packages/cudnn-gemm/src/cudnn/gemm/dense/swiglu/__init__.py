"""gemm_swiglu: see api.py."""
