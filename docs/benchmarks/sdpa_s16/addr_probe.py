"""Session-16 diagnostic (not a benchmark table): does our time on the cells under issue #4 / #6's targets depend on
where the tensors live, or on the GPU's clocks at the time? Fresh inputs per trial (a growing spacer allocation before
them), ours and FA4 timed on the same inputs in 3 interleaved do_bench rounds per trial; nvidia-smi samples the SM
clock, power and throttle reasons every 100 ms into ``$PROBE_OUT/smi.csv``. Run from the repository root:
``PROBE_OUT=dir python3 docs/benchmarks/sdpa_s16/addr_probe.py 5`` (5 trials; ``PROBE_FWD_ONLY=1``: the forward cells
only, plus d128 s4k causal, as session 21 ran it)."""

import os
import subprocess
import sys
import time


def main():
    sys.path.insert(0, "benchmarks")
    import sdpa_bwd as bw
    import sdpa_fwd as fw
    import torch
    import triton

    out = os.environ.get("PROBE_OUT", ".")
    query = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-lms", "100", "-f", f"{out}/smi.csv"])
    fcases = {
        c.label: c
        for c in fw._as_cases(
            [
                dict(kind="dense", b=4, h=16, hk=16, s=4096, d=128, causal=False),
                dict(kind="dense", b=8, h=16, hk=16, s=2048, d=128, causal=False),
                dict(kind="varlen", lens=[512, 1024, 3000, 4096, 2048, 777, 4927], h=16, hk=16, d=128, causal=True),
            ]
            + ([dict(kind="dense", b=4, h=16, hk=16, s=4096, d=128, causal=True)] if os.environ.get("PROBE_FWD_ONLY") else [])
        )
    }
    bcases = {c.label: c for c in bw._shapes(False) if c.label in ("d128 s4k b4 causal", "d64 s1k b16 causal")}
    if os.environ.get("PROBE_FWD_ONLY"):  # session 21: the forward cells alone, with d128 s4k causal added
        bcases = {}
    spacers = []
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for trial in range(trials):
        spacers.append(torch.empty((trial * 7 + 3) * (1 << 20) + trial * 4096 * 5, dtype=torch.uint8, device="cuda"))
        for mod, cases, makers in ((fw, fcases, (fw.make_ours, fw.make_fa4)), (bw, bcases, (bw.make_ours, bw.make_fa4))):
            for name, case in cases.items():
                mod._CACHE.clear()
                fns = [mk(case) for mk in makers]
                x = mod._inputs(case.params)
                addrs = " ".join(f"{k}={v.data_ptr() % (1 << 24):#x}" for k, v in x.items() if torch.is_tensor(v) and v.numel() > 1000)
                res = [[], []]
                t0 = time.time()
                for _ in range(3):
                    for i, fn in enumerate(fns):
                        res[i].append(triton.testing.do_bench(fn))
                best = [min(r) for r in res]
                tf = [case.flops / (b * 1e-3) / 1e12 for b in best]
                rounds = [" ".join(f"{case.flops / (m * 1e-3) / 1e12:.0f}" for m in r) for r in res]
                print(
                    f"trial {trial} {name:28s} ours {tf[0]:6.1f} fa4 {tf[1]:6.1f} ratio {best[1] / best[0]:.3f} "
                    f"rounds ours {rounds[0]} fa4 {rounds[1]} t0 {t0:.1f} {addrs}",
                    flush=True,
                )
                del fns, x
                mod._CACHE.clear()
    smi.terminate()


if __name__ == "__main__":
    main()
