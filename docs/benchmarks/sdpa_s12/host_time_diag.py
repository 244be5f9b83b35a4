"""Session-12 diagnostic (not a benchmark table): why d64 s1k causal times slower than its profile."""
import sys, time, os
sys.path.insert(0, "benchmarks")
import torch
import sdpa_bwd as sb
from harness import time_ms

cases = [c for c in sb._shapes(False) if c.label in ("d64 s1k b16 causal", "d128 s1k b16 causal")]
provs = {"ours": sb.make_ours, "fa4": sb.make_fa4}
for c in cases:
    for name, mk in provs.items():
        fn = mk(c)
        for _ in range(3): fn()
        torch.cuda.synchronize()
        dob = [time_ms(fn) for _ in range(3)]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20): fn()
        e.record(); e.synchronize()
        b2b = s.elapsed_time(e) / 20
        torch.cuda._sleep(200_000_000); t0 = time.perf_counter()
        for _ in range(50): fn()
        host = (time.perf_counter() - t0) / 50 * 1e3
        torch.cuda.synchronize()
        # one call after an L2 flush, timed with events, 5 times
        cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
        fl = []
        for _ in range(5):
            cache.zero_(); s.record(); fn(); e.record(); e.synchronize(); fl.append(s.elapsed_time(e))
        fl.sort()
        print(f"{c.label:22s} {name:5s} do_bench {['%.3f' % x for x in dob]} ms | back-to-back {b2b:.3f} ms | host {host*1e3:.1f} us/call | after-flush events {['%.3f' % x for x in fl]}", flush=True)
        del fn, cache
        torch.cuda.empty_cache()
