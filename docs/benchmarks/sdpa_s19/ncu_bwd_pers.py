"""Session-19 diagnostic (not a benchmark table): one call each of ours (the defaults, ``pers`` where
api.PERSISTENT_SCOPE has it), ours-nopers and FA4 at the given backward rows under ncu, bracketed by
cudaProfilerStart / Stop (``ncu --profile-from-start off``), from the repository root:
``ncu --clock-control none --profile-from-start off ... python3 docs/benchmarks/sdpa_s19/ncu_bwd_pers.py "d128 s1k b16 causal"``."""

import sys


def main():
    sys.path.insert(0, "benchmarks")
    import sdpa_bwd as sb
    from harness import profiled_call

    want = sys.argv[1:] or ["d128 s1k b16 causal"]
    providers = (("ours", sb.make_ours), ("ours-nopers", sb._make_default_plus(sb.DEFAULT_PLUS["ours-nopers"])), ("fa4", sb.make_fa4))
    for case in (c for c in sb._shapes(False) if c.label in want):
        for name, make in providers:
            profiled_call(f"{case.label} {name}", make(case))


if __name__ == "__main__":
    main()
