"""Session-15 diagnostic: one call of ours / FA4 at the short backward rows under ncu (cudaProfilerStart/Stop brackets)."""
import sys
sys.path.insert(0, "benchmarks")
import torch
import sdpa_bwd as sb

want = sys.argv[1:] or ["d128 s1k b16", "d64 s1k b16 causal"]
cases = [c for c in sb._shapes(False) if c.label in want]
for c in cases:
    for name, mk in (("ours", sb.make_ours), ("fa4", sb.make_fa4)):
        fn = mk(c)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        print(f"== {c.label} {name}", flush=True)
        torch.cuda.profiler.start()
        fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
