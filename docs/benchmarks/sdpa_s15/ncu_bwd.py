"""Session-15 diagnostic (not a benchmark table): one call of ours / FA4 at short backward rows under ncu, bracketed by
cudaProfilerStart / Stop (run with ``ncu --profile-from-start off``) from the repository root, benchmarks/ on sys.path:
``ncu --clock-control none --profile-from-start off --section ... --csv --page details python3 ncu_bwd.py "d128 s1k b16"``."""

import sys


def main():
    sys.path.insert(0, "benchmarks")
    import sdpa_bwd as sb
    from harness import profiled_call

    want = sys.argv[1:] or ["d128 s1k b16", "d64 s1k b16 causal"]
    for case in (c for c in sb._shapes(False) if c.label in want):
        for name, make in (("ours", sb.make_ours), ("fa4", sb.make_fa4)):
            profiled_call(f"{case.label} {name}", make(case))


if __name__ == "__main__":
    main()
