"""Session-16 diagnostic (not a benchmark table): one call of ours / FA4 at forward rows under ncu, bracketed by
cudaProfilerStart / Stop (run with ``ncu --profile-from-start off``) from the repository root, benchmarks/ on sys.path:
``ncu --clock-control none --profile-from-start off --section ... --csv --page details python3 ncu_fwd.py "d128 s4k b4"``."""

import sys


def main():
    sys.path.insert(0, "benchmarks")
    import sdpa_fwd as sf
    import torch

    want = sys.argv[1:] or ["d128 s4k b4"]
    for case in (c for c in sf._shapes(False) if c.label in want):
        for name, make in (("ours", sf.make_ours), ("fa4", sf.make_fa4)):
            fn = make(case)
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            print(f"== {case.label} {name}", flush=True)
            torch.cuda.profiler.start()
            fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
