"""gemm_srelu: see api.py."""
