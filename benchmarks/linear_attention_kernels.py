"""Per-kernel device time of the chunk-parallel delta-rule forward (prep / state pass / output) and of the serial
kernel, from torch.profiler: where the milliseconds of ``ours-parallel`` go. Prints a table; writes nothing.

    source ci/gpu_env.sh; python3 benchmarks/linear_attention_kernels.py              # KDA and GDN, T 8k, H 16
    python3 benchmarks/linear_attention_kernels.py --t 32768 --h 64 --family kda

Same inputs as benchmarks/linear_attention.py (seed 0, K = V = 128, L2 norm in the kernel, no states). Variants:
serial, parallel, parallel-s3 (``parallel_state_stages = 3``), parallel-pf (``parallel_prefetch``, the prep kernel's
``prefetch`` key option), parallel-2cta (``parallel_prep_two_per_sm``), KDA parallel-fx (``parallel_fast_exp``), and
parallel-all (knobs combined).
Each variant is warmed (compile), then ``--iters`` calls are profiled; a kernel's time is its mean CUDA time per call.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _plan(family, i, schedule, knobs):
    import importlib

    import torch

    cls = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), "KimiDeltaAttentionFwdSm90" if family == "kda" else "GatedDeltaNetFwdSm90")
    o = torch.empty_like(i["v"])
    plan = cls(i["q"], i["k"], i["v"], i["g"], i["beta"], o, use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"], schedule=schedule)
    for name, value in knobs.items():
        setattr(plan, name, value)
    plan.compile()
    n = plan.scratch_workspace_bytes()
    ws = torch.empty(n, dtype=torch.uint8, device="cuda") if n else None
    return lambda: plan.execute(i["q"], i["k"], i["v"], i["g"], i["beta"], o, None, None, i["cu"], workspace=ws)


def profile(family, t, h, iters):
    import torch
    from harness import Case
    from linear_attention import _delta_rule_inputs

    case = Case(f"{family} T{t} H{h}", {"t": t, "h": h, "varlen": False}, bytes=0)
    i = _delta_rule_inputs(case, family == "kda")
    variants = [("serial", "serial", {}), ("parallel", "parallel", {}), ("parallel-s3", "parallel", {"parallel_state_stages": 3})]
    variants.append(("parallel-pf", "parallel", {"parallel_prefetch": True}))
    variants.append(("parallel-2cta", "parallel", {"parallel_prep_two_per_sm": True}))
    if family == "kda":
        variants.append(("parallel-fx", "parallel", {"parallel_fast_exp": True}))
        variants.append(("parallel-all", "parallel", {"parallel_prep_two_per_sm": True, "parallel_state_stages": 3, "parallel_fast_exp": True}))
    else:
        variants.append(("parallel-all", "parallel", {"parallel_prefetch": True, "parallel_state_stages": 3, "parallel_prep_two_per_sm": True}))
    for label, schedule, knobs in variants:
        fn = _plan(family, i, schedule, knobs)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
        rows = []
        for ev in prof.key_averages():
            dev = getattr(ev, "device_time_total", None)
            if dev is None:
                dev = ev.cuda_time_total
            if dev > 0 and "cudnn" in ev.key:
                rows.append((dev / iters, ev.count // iters, ev.key))
        total = sum(r[0] for r in rows)
        print(f"{family} T{t} H{h} {label}: {total:8.1f} us per call")
        for us, n, name in sorted(rows, reverse=True):
            print(f"    {us:8.1f} us  x{n}  {name[:110]}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=("kda", "gdn", "both"), default="both")
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args(argv)
    for fam in ("kda", "gdn") if a.family == "both" else (a.family,):
        profile(fam, a.t, a.h, a.iters)


if __name__ == "__main__":
    main()
