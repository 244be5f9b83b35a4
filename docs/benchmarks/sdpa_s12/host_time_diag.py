"""Session-12 diagnostic (not a benchmark table): why d64 s1k causal timed slower than its per-kernel profile.

Run on the GPU host from the repository root (``python3 docs/benchmarks/sdpa_s12/host_time_diag.py``). Per case and
provider: do_bench (L2 cleared) three times, 20 back-to-back calls between two events, the host time of one call
while the GPU is busy (launches only queue), and one call after a 256 MiB L2 flush, timed by events, five times."""

import sys
import time

sys.path.insert(0, "benchmarks")

import sdpa_bwd as sb  # noqa: E402
import torch  # noqa: E402
from harness import time_ms  # noqa: E402

LABELS = ("d64 s1k b16 causal", "d128 s1k b16 causal")


def fmt(xs) -> str:
    return "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"


def measure(fn) -> tuple:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    dob = [time_ms(fn) for _ in range(3)]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        fn()
    end.record()
    end.synchronize()
    b2b = start.elapsed_time(end) / 20
    torch.cuda._sleep(200_000_000)
    t0 = time.perf_counter()
    for _ in range(50):
        fn()
    host_us = (time.perf_counter() - t0) / 50 * 1e6
    torch.cuda.synchronize()
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    flushed = []
    for _ in range(5):
        cache.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        flushed.append(start.elapsed_time(end))
    return dob, b2b, host_us, sorted(flushed)


for case in (c for c in sb._shapes(False) if c.label in LABELS):
    for name, make in (("ours", sb.make_ours), ("fa4", sb.make_fa4)):
        dob, b2b, host_us, flushed = measure(make(case))
        print(
            f"{case.label:22s} {name:5s} do_bench {fmt(dob)} ms | back-to-back {b2b:.3f} ms | host {host_us:.1f} us/call | after-flush events {fmt(flushed)}",
            flush=True,
        )
        torch.cuda.empty_cache()
