"""Session-16 diagnostic (not a benchmark table): one call of ours / FA4 at forward rows under ncu (calls 2 and 4):
``ncu_fwd_variants.py`` with ``NCU_VARIANTS=ours,fa4`` (ours as the prepared default plan: the kernel ``sdpa_fwd``
launches). From the repository root: ``ncu --clock-control none --profile-from-start off --section ... --csv --page
details python3 docs/benchmarks/sdpa_s16/ncu_fwd.py "d128 s4k b4"``."""

import os
import sys


def main():
    os.environ.setdefault("NCU_VARIANTS", "ours,fa4")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ncu_fwd_variants

    ncu_fwd_variants.main()


if __name__ == "__main__":
    main()
