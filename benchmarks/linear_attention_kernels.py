"""Per-kernel device time of the chunk-parallel delta-rule forward (prep / state pass / output) and of the serial
kernel, from torch.profiler: where the milliseconds of ``ours-parallel`` go. Prints a table; writes nothing.

    source ci/gpu_env.sh; python3 benchmarks/linear_attention_kernels.py              # KDA and GDN, T 8k, H 16
    python3 benchmarks/linear_attention_kernels.py --t 32768 --h 64 --family kda

Same inputs as benchmarks/linear_attention.py (seed 0, K = V = 128, L2 norm in the kernel, no states). Variants:
serial, parallel, parallel-s3 (``parallel_state_stages = 3``), parallel-pf (``parallel_prefetch``, the prep kernel's
``prefetch`` key option), parallel-2cta (``parallel_prep_two_per_sm``), KDA parallel-fx (``parallel_fast_exp``), and
parallel-all (knobs combined), and KDA's named variants of ``_host/chunk_parallel.py::PARALLEL_VARIANTS`` (par-wg2:
the two-warpgroup prep; par-wg2fx: with approximate exps; par-tc: the restructured prep kernel
``kda/chunk_parallel_prep_tc_kernel.py``, par-tc-s3 with the three-stage state pass; GDN has none), and, both
families, par-v32 / par-v16 (the state pass on 32- / 16-row value slices: ``kda/chunk_parallel_state_narrow_kernel.py``,
2x / 4x the CTAs) with KDA's par-tc-v32 / par-tc-v16 (the tc prep as well).
``--variants parallel,par-wg2,par-tc`` keeps a subset.
Each variant is warmed (compile), then ``--iters`` calls are profiled; a kernel's time is its mean CUDA time per call.
First line per family: each kernel's memory floor (``floors``: the workspace bytes it must move, at 4.8 TB/s).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _plan(family, i, schedule, knobs, variant=None):
    import importlib

    import torch

    cls = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), "KimiDeltaAttentionFwdSm90" if family == "kda" else "GatedDeltaNetFwdSm90")
    o = torch.empty_like(i["v"])
    plan = cls(i["q"], i["k"], i["v"], i["g"], i["beta"], o, use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"], schedule=schedule)
    for name, value in knobs.items():
        setattr(plan, name, value)
    if variant:
        from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

        set_parallel_options(plan, variant)
    plan.compile()
    n = plan.scratch_workspace_bytes()
    ws = torch.empty(n, dtype=torch.uint8, device="cuda") if n else None
    return lambda: plan.execute(i["q"], i["k"], i["v"], i["g"], i["beta"], o, None, None, i["cu"], workspace=ws)


HBM_BYTES_PER_US = 4.8e6  # H200 HBM3e, about 4.8 TB/s


def floors(family, t, h, d=128):
    """Per-kernel memory floors (us at 4.8 TB/s) of the chunk-parallel schedule, one sequence of ``t`` tokens, ``h``
    heads (q/k heads = v heads), K = V = ``d``: every workspace byte a kernel must read or write once
    (``_device/chunk_parallel.py`` lists the arrays), per (chunk, head) and, for the state pass and the output kernel,
    per 64-row V block (each reads the full-width operands again). The state pass is also latency-bound (one CTA per
    head and V block walks the chunks in order): its floor here is bytes only."""
    c, nvb, chunks = 64, d // 64, -(-t // 64)
    g_bytes = c * d * 4 if family == "kda" else c * 4
    prep = 3 * c * d * 2 + g_bytes + c * 4 + (c * d * 2 + c * d * 4 + d * c * 2 + c * d * 2 + c * c * 2 + d * 4 + c * 4)
    state = nvb * ((c * d * 2 + d * c * 2 + c * 64 * 4 + d * 4) + (64 * d * 2 + 64 * c * 2))
    out = nvb * (c * d * 2 + 64 * d * 2 + c * c * 2 + 64 * c * 2 + c * 64 * 2)
    return {name: chunks * h * b / HBM_BYTES_PER_US for name, b in (("prep", prep), ("state", state), ("out", out))}


def profile(family, t, h, iters, only=()):
    import torch
    from harness import Case
    from linear_attention import _delta_rule_inputs

    case = Case(f"{family} T{t} H{h}", {"t": t, "h": h, "varlen": False}, bytes=0)
    i = _delta_rule_inputs(case, family == "kda")
    fl = floors(family, t, h)
    print(f"{family} T{t} H{h} memory floors (us, bytes / 4.8 TB/s): " + ", ".join(f"{k} {v:.1f}" for k, v in fl.items()) + f", total {sum(fl.values()):.1f}")
    variants = [("serial", "serial", {}, None), ("parallel", "parallel", {}, None), ("parallel-s3", "parallel", {"parallel_state_stages": 3}, None)]
    variants.append(("parallel-pf", "parallel", {"parallel_prefetch": True}, None))
    variants.append(("parallel-2cta", "parallel", {"parallel_prep_two_per_sm": True}, None))
    if family == "kda":
        variants.append(("parallel-fx", "parallel", {"parallel_fast_exp": True}, None))
        variants.append(("parallel-all", "parallel", {"parallel_prep_two_per_sm": True, "parallel_state_stages": 3, "parallel_fast_exp": True}, None))
    else:
        variants.append(("parallel-all", "parallel", {"parallel_prefetch": True, "parallel_state_stages": 3, "parallel_prep_two_per_sm": True}, None))
    for name in ("wg2", "wg2fx", "tc", "tc-s3") if family == "kda" else ():  # PARALLEL_VARIANTS (KDA only)
        variants.append((f"par-{name}", "parallel", {}, name))
    for name in ("v32", "v16") + (("tc-v32", "tc-v16") if family == "kda" else ()):  # the narrow state pass (both families)
        variants.append((f"par-{name}", "parallel", {}, name))
    if only:
        variants = [v for v in variants if v[0] in only]
    for label, schedule, knobs, variant in variants:
        fn = _plan(family, i, schedule, knobs, variant)
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
    ap.add_argument("--variants", default="", help="comma-separated variant labels to keep (default: all), e.g. parallel,par-wg2,par-tc")
    a = ap.parse_args(argv)
    only = tuple(v for v in a.variants.split(",") if v)
    for fam in ("kda", "gdn") if a.family == "both" else (a.family,):
        profile(fam, a.t, a.h, a.iters, only)


if __name__ == "__main__":
    main()
