"""Dense (non-grouped) Hopper GEMMs: the plain kernel (api.py, kernel_sm90.py) and one folder per fusion."""
