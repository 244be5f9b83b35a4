"""Session-22 diagnostic (not a benchmark table): each d128 non-causal variant run back to back for a few seconds at the
700 W cap while nvidia-smi samples the SM clock and the board power every 50 ms: the clock each kernel settles at, its
TFLOP/s, and cycles per call (clock x time). Whether one kernel costs more energy per unit of work than another shows as a
lower settled clock at the same power. From the repository root: ``python3 clock_probe.py OUT_DIR [case ...]``."""

import os
import subprocess
import sys
import time

sys.path.insert(0, "docs/benchmarks/sdpa_s22")
from ncu_blocks import VARIANTS as ALL_VARIANTS  # noqa: E402

VARIANTS = {k: ALL_VARIANTS[k] for k in os.environ.get("PROBE_VARIANTS", "ours,one128,one192").split(",")}

SECONDS = 3.0
SKIP = 1.0  # the first second of a window is the clock settling


def main():
    import torch

    sys.path.insert(0, "benchmarks")
    import sdpa_fwd as sf

    out = sys.argv[1]
    want = sys.argv[2:] or ["d128 s4k b4", "d128 s8k b2"]
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=open(f"{out}/smi_probe.csv", "w"),
    )
    windows = []
    try:
        for case in (c for c in sf._shapes(False) if c.label in want):
            fns = {name: sf._make_ours_prefill_plan(case, **kw) for name, kw in VARIANTS.items()}
            fns["fa4"] = sf.make_fa4(case)
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            for rnd in range(2):
                for name, fn in fns.items():
                    t0 = time.time()
                    n, ts = 0, None
                    while time.time() - t0 < SECONDS:
                        for _ in range(10):
                            fn()
                        torch.cuda.synchronize()
                        n += 10
                        if ts is None and time.time() - t0 >= SKIP:
                            ts, n = time.time(), 0
                    t1 = time.time()
                    windows.append((case.label, name, rnd, ts, t1, n, case.flops))
    finally:
        time.sleep(0.2)
        smi.terminate()
    samples = []
    for ln in open(f"{out}/smi_probe.csv"):
        parts = [p.strip() for p in ln.split(",")]
        try:
            t = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
            samples.append((t, float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    print("| case | variant | round | us per call | TFLOP/s | MHz | W | Mcycles per call |")
    print("|---|---|---|---|---|---|---|---|")
    for label, name, rnd, ts, t1, n, flops in windows:
        inside = [s for s in samples if ts <= s[0] <= t1]
        mhz = sum(s[1] for s in inside) / max(len(inside), 1)
        watts = sum(s[2] for s in inside) / max(len(inside), 1)
        us = (t1 - ts) / max(n, 1) * 1e6
        print(f"| {label} | {name} | {rnd} | {us:.1f} | {flops / us / 1e6:.1f} | {mhz:.0f} | {watts:.0f} | {us * mhz / 1e6:.3f} |", flush=True)


if __name__ == "__main__":
    main()
