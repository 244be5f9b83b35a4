"""Session 30: the state pass with its chain in registers (``reg_chain``, the ``rs`` variant) and the split accumulator
chains (``vn_split`` / ``update_split``) against the default narrow state pass, per kernel (torch.profiler through
``benchmarks/harness.device_times``), both families, one sequence. Those options were tried and removed: the script ran
(calls 1-2) with ``state_chain_trial.patch`` applied, and ``ovl`` (calls 4-6) with ``overlap_out_trial.patch``;
without them only ``default`` and ``three`` build.

    python3 docs/benchmarks/la_s30/state_probe.py --t 8192 --heads 16 [--iters 10] [--variants default,rs3,rs2] [--ncu]

``--ncu``: each variant's plan is built and run twice (the first call compiles; ncu's kernel filter picks the state
pass), no timing."""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

VARIANTS = {
    "default": None,
    "rs3": {"state": {"reg_chain": True, "v_slice": 64, "stages": 3}},
    "rs2": {"state": {"reg_chain": True, "v_slice": 64, "stages": 2}},
    "split2": "split2",
    "split4": "split4",
    "split44": {"state": {"vn_split": 4, "update_split": 4}},
    "three": "three",
    "ovl": "ovl",
    "stsm": "stsm",
    "ovl-stsm": {"state": {"signal_out": True, "stmatrix": True}},
    "fso-w2": "fso-w2",
    "fso-w2-stsm": "fso-w2-stsm",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)  # not --h: an imported module's parser takes it for --help
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--families", default="kda,gdn")
    ap.add_argument("--variants", default="default,rs3,rs2")
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--wall", action="store_true", help="also the call's time by CUDA events (overlapping kernels: the sum of kernel times is not it)")
    a = ap.parse_args()
    import torch
    from harness import Case, device_times
    from linear_attention import _delta_rule_inputs
    from linear_attention_kernels import _plan, kernel_label

    for fam in a.families.split(","):
        case = Case(f"{fam} T{a.t} H{a.heads}", {"t": a.t, "h": a.heads, "varlen": False}, bytes=0)
        i = _delta_rule_inputs(case, fam == "kda")
        for name in a.variants.split(","):
            run = _plan(fam, i, "parallel", {}, VARIANTS[name])
            if a.ncu:
                run()
                run()
                torch.cuda.synchronize()
                continue
            wall = ""
            if a.wall:
                for _ in range(3):
                    run()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                best = None
                for _ in range(5):  # the fastest of 5 rounds of 20 back-to-back calls (no L2 flush: kernel-to-kernel overlap)
                    start.record()
                    for _ in range(20):
                        run()
                    end.record()
                    end.synchronize()
                    us = start.elapsed_time(end) * 1000 / 20
                    best = us if best is None else min(best, us)
                wall = f"wall {best:8.1f} us  "
            times = device_times(run, a.iters)
            per = {}
            for key, us, _n in times:
                if "cudnn" in key:
                    per[kernel_label(key)] = per.get(kernel_label(key), 0.0) + us
            total = sum(per.values())
            print(f"{fam} T{a.t} H{a.heads} {name:8s} {wall}total {total:8.1f} us  " + "  ".join(f"{k} {v:.1f}" for k, v in sorted(per.items())), flush=True)


if __name__ == "__main__":
    main()
