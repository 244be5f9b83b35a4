"""gemm_amax: see api.py."""
