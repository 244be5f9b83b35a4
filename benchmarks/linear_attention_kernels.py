"""Per-kernel device time of the chunk-parallel delta-rule forward (prep / state pass / output) and of the serial
kernel, from torch.profiler: where the microseconds of ``ours-parallel`` go. Prints a table and writes it to
``docs/benchmarks/linear_attention_kernels.md`` (``--out``; ``--out ''`` writes nothing).

    source ci/gpu_env.sh; python3 benchmarks/linear_attention_kernels.py              # KDA and GDN, T 8k, H 16
    python3 benchmarks/linear_attention_kernels.py --t 32768 --h 64 --family kda --out /tmp/kda_32k.md

Same inputs as benchmarks/linear_attention.py (seed 0, K = V = 128, L2 norm in the kernel, no states). Variants:
serial, parallel (the default parallel plan: since session 6 the TMA state pass at four stages, the V-wide output
kernel and, for GDN, the restructured prep at three CTAs per SM; since session 8 the prep's staged stores and, where
the plan-time rule picks it, the fused state pass + output), and every named variant of
``_host/chunk_parallel.py::PARALLEL_VARIANTS`` whose prep fields the family's prep key has, as par-<name>: the A/B
baselines par-state-base / par-out-base / par-base (the session-5 state pass and output kernel), GDN's
par-gdn-prep-base / par-gdn-base (its session-5 prep / whole plan) and par-gdn-prep7 (its prep without the session-8
staged -Wm stores), KDA's prep baselines (par-kp5: its session-5 prep, par-kn: narrow_ap alone, par-kp6: its session-6
first default, without tiled_solve / lean_gates, par-kp7: without the session-8 staged kd / -Wm stores; all four
without the staged stores), par-three (both families: the three-kernel schedule whatever the plan-time rule says) and
the fused schedule par-fso / par-fso-w2 / par-fso-s2 (session 8: two kernels, prep and the fused state pass + output;
fso-w2: two consumer warpgroups per CTA over one stage ring, half the CTAs; fso-s2: fso at two stages, the stage-count
control; the fused kernel is the ``state+out`` column, there is no ``state`` or ``out`` entry in its row). The
``parallel`` row is the adapters' default plan: ``_host/chunk_parallel.py::FUSED_DEFAULT`` is on since the session-8
A/B, so it is ``fso-w2``'s two kernels where the plan-time rule (``fused_schedule_wins``: H * V / 32 >= the SM count,
e.g. H = 64 on an H200) picks the fused schedule and the three kernels (as par-three) below it, e.g. the default
T 8k, H 16.
``--variants parallel,par-base`` keeps a subset.
Each variant is warmed (compile), then ``--iters`` calls are profiled; a kernel's time is its mean CUDA time per call.
First line per family: each kernel's memory floor (``floors``: the workspace bytes it must move, at 4.8 TB/s), the
three-kernel total and the fused schedule's (prep + state+out).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import device_times  # noqa: E402


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
    head and V block walks the chunks in order): its floor here is bytes only. ``state+out``: the fused state pass +
    output (the ``fso`` variants): per V block the state pass's reads plus qg, p and rf, and o's columns written, no h /
    vnt."""
    c, nvb, chunks = 64, d // 64, -(-t // 64)
    g_bytes = c * d * 4 if family == "kda" else c * 4
    prep = 3 * c * d * 2 + g_bytes + c * 4 + (c * d * 2 + c * d * 4 + d * c * 2 + c * d * 2 + c * c * 2 + d * 4 + c * 4)
    state = nvb * ((c * d * 2 + d * c * 2 + c * 64 * 4 + d * 4) + (64 * d * 2 + 64 * c * 2))
    out = nvb * (c * d * 2 + 64 * d * 2 + c * c * 2 + 64 * c * 2 + c * 64 * 2)
    fused = nvb * ((c * d * 2 + d * c * 2 + c * 64 * 4 + d * 4) + (c * d * 2 + c * c * 2 + c * 4) + c * 64 * 2)
    parts = (("prep", prep), ("state", state), ("out", out), ("state+out", fused))
    return {name: chunks * h * b / HBM_BYTES_PER_US for name, b in parts}


def floors_line(fl) -> str:
    """The floors as one line: each kernel, the three-kernel total and the fused schedule's (prep + state+out)."""
    three, two = fl["prep"] + fl["state"] + fl["out"], fl["prep"] + fl["state+out"]
    return ", ".join(f"{k} {v:.1f}" for k, v in fl.items()) + f"; total {three:.1f} (three kernels), {two:.1f} (fused: prep + state+out)"


#: (table column, kernel symbol part). The fused state pass + output (``chunk_parallel_state_out_kernel``, the ``fso``
#: variants) is its own column: its row has no ``state`` / ``out`` entries (one kernel does both).
KERNELS = (
    ("prep", "chunk_parallel_prep"),
    ("state", "chunk_parallel_state"),
    ("out", "chunk_parallel_out"),
    ("state+out", "chunk_parallel_state_out"),
    ("serial", "chunk_fwd"),
)


def kernel_label(symbol: str) -> str:
    """The table column of a kernel symbol: prep / state / out (the parallel schedule), state+out (the fused state pass
    + output), serial, or other; the longest matching symbol part wins (``chunk_parallel_state_out`` over
    ``chunk_parallel_state``)."""
    hits = [(len(part), label) for label, part in KERNELS if part in symbol]
    return max(hits)[1] if hits else "other"


def prep_key_fields(family) -> set:
    """The field names of the family's parallel prep key (a named variant with other prep fields is not the family's)."""
    import importlib
    from dataclasses import fields

    mod = importlib.import_module(f"cudnn.linear_attention.{family}.chunk_parallel_prep_kernel")
    return {f.name for f in fields(mod.KdaParallelPrepKey if family == "kda" else mod.GdnParallelPrepKey)}


def variants_of(family):
    """``(label, schedule, adapter knobs, PARALLEL_VARIANTS name)`` of every variant the family runs."""
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS

    variants = [("serial", "serial", {}, None), ("parallel", "parallel", {}, None)]
    for name, fields in PARALLEL_VARIANTS.items():  # every named variant whose prep fields the family's prep key has
        if set(fields.get("prep", {})) <= prep_key_fields(family):
            variants.append((f"par-{name}", "parallel", {}, name))
    return variants


def profile(family, t, h, iters, only=()):
    """Profile ``family``'s variants; print each one's kernels. Returns ``(floors, rows)`` with rows
    ``(label, {kernel column: us per call}, total us)``."""
    from harness import Case
    from linear_attention import _delta_rule_inputs

    case = Case(f"{family} T{t} H{h}", {"t": t, "h": h, "varlen": False}, bytes=0)
    i = _delta_rule_inputs(case, family == "kda")
    fl = floors(family, t, h)
    print(f"{family} T{t} H{h} memory floors (us, bytes / 4.8 TB/s): " + floors_line(fl))
    variants = variants_of(family)
    if only:
        variants = [v for v in variants if v[0] in only]
    table = []
    for label, schedule, knobs, variant in variants:
        try:  # one variant failing to build or run must not hide the others' rows
            times = device_times(_plan(family, i, schedule, knobs, variant), iters)
        except Exception as exc:
            print(f"{family} T{t} H{h} {label}: FAILED ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
            continue
        rows = [(us, int(n), key) for key, us, n in times if "cudnn" in key]
        total = sum(r[0] for r in rows)
        print(f"{family} T{t} H{h} {label}: {total:8.1f} us per call")
        per = {}
        for us, n, name in sorted(rows, reverse=True):
            print(f"    {us:8.1f} us  x{n}  {name[:110]}")
            col = kernel_label(name)
            per[col] = per.get(col, 0.0) + us
        table.append((label, per, total))
    return fl, table


def markdown(results, t, h, iters) -> str:
    """The md table of ``results`` = [(family, floors, rows)] (``profile``'s output), with the device and versions."""
    from harness import _device_line, _versions

    cols = [label for label, _ in KERNELS] + ["other"]
    lines = [
        "# linear_attention_kernels",
        "",
        f"Per-kernel device time (us per call, torch.profiler mean over {iters} calls) of the delta-rule forward, T={t}, H={h},",
        "K = V = 128, one sequence, L2 norm in the kernel, no states. Written by `benchmarks/linear_attention_kernels.py`.",
        "Column state+out: the fused state pass + output kernel of the fso variants (two kernels per call: prep, state+out).",
        "",
        f"Device: {_device_line()}. Versions: {_versions(())}.",
    ]
    for family, fl, rows in results:
        used = [c for c in cols if any(c in per for _, per, _ in rows)]
        lines += [
            "",
            f"## {family}",
            "",
            "floors (us, workspace bytes / 4.8 TB/s): " + floors_line(fl),
            "",
        ]
        lines.append("| variant | " + " | ".join(used) + " | total |")
        lines.append("|---|" + "---:|" * (len(used) + 1))
        for label, per, total in rows:
            lines.append(f"| {label} | " + " | ".join(f"{per[c]:.1f}" if c in per else "" for c in used) + f" | {total:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=("kda", "gdn", "both"), default="both")
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--variants", default="", help="comma-separated variant labels to keep (default: all), e.g. parallel,par-base")
    ap.add_argument("--out", default="docs/benchmarks/linear_attention_kernels.md", help="md file the table is written to ('' : none)")
    a = ap.parse_args(argv)
    # A library parser reading sys.argv later (the DSL's ``-diagnostic`` one, on first compile) would take ``--h`` for an
    # abbreviation of its ``--help`` and exit: leave it only the program name.
    sys.argv[1:] = []
    only = tuple(v for v in a.variants.split(",") if v)
    results = []
    for fam in ("kda", "gdn") if a.family == "both" else (a.family,):
        fl, rows = profile(fam, a.t, a.h, a.iters, only)
        results.append((fam, fl, rows))
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as f:
            f.write(markdown(results, a.t, a.h, a.iters))
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
