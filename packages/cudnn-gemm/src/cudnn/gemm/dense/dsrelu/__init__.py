"""gemm_dsrelu: see api.py."""
