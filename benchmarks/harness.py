"""The one benchmark harness for every family.

Each provider (ours, cuDNN through torch, FA4, quack, fla, cuBLAS) registers with an availability check;
every case runs every available provider on the same inputs in the same process; time is the median of
many timed runs after warm-up (``triton.testing.do_bench``, which clears L2 before each run, or CUDA
events); the FLOP/byte convention is printed with the table, and a CSV and a PNG plot are written.

    providers = [Provider("ours", make=lambda case: ..., available=lambda: None), ...]
    cases = [Case("4096^3", {"m": 4096, ...}, flops=2 * m * n * k), ...]
    run_benchmark("gemm", cases, providers, convention="2*M*N*K FLOPs", out_dir="docs/benchmarks")

``make(case)`` builds inputs and returns a zero-argument callable that launches the work (or raises
``Unsupported`` with a reason to leave that cell empty), or a ``Measured`` time taken elsewhere: a provider that must
run in its own process (``benchmarks/upstream_frontend.py``: NVIDIA's cudnn frontend, whose top-level ``cudnn`` would
shadow ours) times the same inputs (same seeds) on the same GPU with the same ``time_ms`` there and hands the number
back; ``run_benchmark`` records it as is.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any


class Unsupported(Exception):
    """A provider does not run this case (the reason goes in the table's notes)."""


@dataclasses.dataclass
class Provider:
    name: str
    make: Callable[[Case], Callable[[], Any]]
    available: Callable[[], str | None] = lambda: None  # None when available, else the reason


@dataclasses.dataclass(frozen=True)
class Measured:
    """A time measured outside this process: ``make(case)`` may return one instead of a callable, and
    ``run_benchmark`` records ``ms`` as is (and ``note`` in the cell's notes) instead of timing. The convention is the
    harness's own: ``time_ms`` (median after warm-up, L2 cleared) on the same GPU and the same inputs, in another
    process. Calling it does nothing, so a wrapper that warms a provider up by calling what ``make`` returned still works."""

    ms: float
    note: str = ""

    def __call__(self) -> None:
        return None


class GraphReplay:
    """A CUDA graph's replay that holds what the captured kernels read and write: ``keep``, the captured callable, whose
    closure owns the inputs, outputs and workspace. A bare ``graph.replay`` would let those tensors die when ``make``
    returns; the caching allocator then hands their memory to the next provider's buffers, and every replay writes over
    them (or, after ``empty_cache``, over unmapped memory)."""

    def __init__(self, graph, keep: Callable[[], Any]):
        self.graph = graph
        self.keep = keep

    def __call__(self) -> None:
        self.graph.replay()


def capture(fn: Callable[[], Any], stream=None) -> GraphReplay:
    """``fn`` (already warmed up, e.g. run once on a side stream) captured in a CUDA graph on ``stream`` (None: the
    capture's own side stream); the replay keeps ``fn`` alive (:class:`GraphReplay`)."""
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        fn()
    return GraphReplay(graph, fn)


def _time(fn) -> float:
    """``fn``'s median milliseconds: a ``Measured`` is taken as is, anything else timed here by ``time_ms``."""
    return fn.ms if isinstance(fn, Measured) else time_ms(fn)


#: Milliseconds of GPU load (``settle``) before a case's timed runs (``BENCH_SETTLE_MS`` overrides). An idle H200 runs
#: at 1980 MHz; within ~0.1 s of a heavy load its 700 W power cap pulls the SM clock to ~1710-1785 MHz (nvidia-smi,
#: session-16 probe: docs/benchmarks/sdpa_s16/). Without this, the first provider timed after the builds (compiles and
#: autotuning leave the GPU idle) ran part of its runs at the idle boost clock: d128 s4k forward 705 TFLOP/s in that
#: round against 630-642 in the next ones, the outliers of earlier tables.
SETTLE_MS = float(os.environ.get("BENCH_SETTLE_MS", "500"))


def settle(ms: float = SETTLE_MS) -> None:
    """Load the GPU with bf16 matmuls for ``ms`` milliseconds so the timed runs that follow start at the power-capped
    clock every provider then sees; a no-op without CUDA or with ``ms`` <= 0."""
    try:
        import torch
    except ImportError:
        return
    if ms <= 0 or not torch.cuda.is_available():
        return
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(4):
            torch.mm(a, a)
        torch.cuda.synchronize()
    del a


@dataclasses.dataclass
class Case:
    label: str
    params: dict
    flops: float | None = None
    bytes: float | None = None


@dataclasses.dataclass
class Result:
    case: str
    provider: str
    ms: float | None
    tflops: float | None
    gbps: float | None
    note: str = ""


def time_ms(fn: Callable[[], Any], warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median milliseconds of ``fn`` (device events; L2 cleared before each run by do_bench)."""
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except ImportError:
        import torch

        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        return times[len(times) // 2]


def device_times(fn, iters: int) -> list:
    """Warm ``fn`` up (3 calls), then profile ``iters`` calls: ``[(event key, us per call, launches per call)]`` of every
    event with device time (torch.profiler, CUDA activity)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.key_averages():
        dev = getattr(ev, "device_time_total", None)
        if dev is None:
            dev = ev.cuda_time_total
        if dev > 0:
            out.append((ev.key, dev / iters, ev.count / iters))
    return out


def profiled_call(label: str, fn) -> None:
    """One call of ``fn`` inside cudaProfilerStart / Stop, after 3 warm-up calls, announced as ``== label`` (for ncu
    ``--profile-from-start off`` diagnostics: the bracketed launches are the ones profiled)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    print(f"== {label}", flush=True)
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _device_line() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name()} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    except ImportError:
        pass
    return "no GPU"


def _versions(providers) -> str:
    from importlib import metadata

    out = []
    for dist in ("nvidia-cutlass-dsl", "torch", "triton", "flash-attn-4", "quack-kernels", "fla-core"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(out)


def run_benchmark(
    name: str,
    cases: list[Case],
    providers: list[Provider],
    *,
    convention: str,
    metric: str = "tflops",
    out_dir: str = "docs/benchmarks",
    title: str | None = None,
    rounds: int = 1,
    settle_ms: float = SETTLE_MS,
) -> list[Result]:
    """Run every case on every available provider; print a table; write ``<name>.csv``, ``<name>.md`` and ``<name>.png``.

    ``rounds`` > 1: each case builds all its providers first, then times them in ``rounds`` interleaved rounds (p1, p2,
    ..., p1, p2, ...) and keeps each provider's fastest round, so a clock or thermal drift during the case reaches
    every provider alike (for tables whose verdict is a ratio of two providers of ours). Before a case's timed runs
    (each provider's with one round, the rounds' with several) the GPU is loaded for ``settle_ms`` (:func:`settle`), so
    no provider is timed at the idle boost clock its build left behind."""
    results: list[Result] = []
    unavailable = {}
    for p in providers:
        reason = p.available()
        if reason is not None:
            unavailable[p.name] = reason
    live = [p for p in providers if p.name not in unavailable]

    def result(case, p, ms, fn=None):
        note = fn.note if isinstance(fn, Measured) else ""
        return Result(case.label, p.name, ms, case.flops / ms / 1e9 if case.flops else None, case.bytes / ms / 1e6 if case.bytes else None, note)

    def failed(case, p, exc):
        if isinstance(exc, Unsupported):
            return Result(case.label, p.name, None, None, None, f"unsupported: {exc}")
        return Result(case.label, p.name, None, None, None, f"error: {type(exc).__name__}: {str(exc)[:200]}")  # never hides the others

    def keep(r: Result) -> None:
        results.append(r)
        print(f"  {r.case} / {r.provider}: " + (f"{r.ms:.4f} ms" if r.ms is not None else r.note), flush=True)  # survives a kill

    stopped = _stop_on_sigterm()
    try:
        for case in cases:
            if rounds <= 1:
                for p in live:
                    try:
                        fn = p.make(case)
                        if not isinstance(fn, Measured):
                            settle(settle_ms)
                        keep(result(case, p, _time(fn), fn))
                    except Exception as exc:
                        keep(failed(case, p, exc))
                    finally:
                        _free()
                continue
            fns, best, done = {}, {}, {}
            for p in live:
                try:
                    fns[p.name] = p.make(case)
                except Exception as exc:
                    done[p.name] = failed(case, p, exc)
            if any(not isinstance(fn, Measured) for fn in fns.values()):
                settle(settle_ms)
            for _ in range(rounds):
                for p in live:
                    if p.name in fns and p.name not in done:
                        try:
                            best[p.name] = min(best.get(p.name, float("inf")), _time(fns[p.name]))
                        except Exception as exc:
                            done[p.name] = failed(case, p, exc)
            for p in live:
                keep(done.get(p.name) or result(case, p, best[p.name], fns[p.name]))
            fns.clear()
            _free()
    except _Stopped:  # a time limit's SIGTERM: write what was measured, marked partial
        done_cases = {r.case for r in results}
        cases = [c for c in cases if c.label in done_cases]
        convention = (convention + "; " if convention else "") + f"PARTIAL: stopped by SIGTERM after {len(cases)} case(s)"
    finally:
        stopped()
    table = _format_table(name, cases, live, results, metric, convention, unavailable, title, rounds, settle_ms)
    print(table)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(out_dir, f"{name}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "provider", "ms", "tflops", "gbps", "note"])
        for r in results:
            w.writerow([r.case, r.provider, _fmt(r.ms, 4), _fmt(r.tflops, 1), _fmt(r.gbps, 1), r.note])
    _plot(os.path.join(out_dir, f"{name}.png"), name, cases, live, results, metric, title)
    return results


class _Stopped(BaseException):
    """Raised by the SIGTERM handler of run_benchmark (a BaseException: the per-provider ``except Exception`` passes it)."""


def _stop_on_sigterm():
    """Turn SIGTERM (``timeout``'s signal) into _Stopped while a benchmark runs; returns the undo."""
    import signal

    def handler(signum, frame):
        raise _Stopped()

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave the default
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, old)


def _free():
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:
        pass


def _fmt(v, digits):
    return "" if v is None else f"{v:.{digits}f}"


def _value(r: Result, metric: str):
    return {"tflops": r.tflops, "gbps": r.gbps, "ms": r.ms}[metric]


def _format_table(name, cases, providers, results, metric, convention, unavailable, title, rounds=1, settle_ms=0.0) -> str:
    unit = {"tflops": "TFLOP/s", "gbps": "GB/s", "ms": "ms"}[metric]
    by = {(r.case, r.provider): r for r in results}
    head = ["case"] + [p.name for p in providers]
    ratio_cols = [p.name for p in providers if p.name != "ours"] if any(p.name == "ours" for p in providers) else []
    head += [f"ours/{n}" for n in ratio_cols]
    lines = [
        f"## {title or name} ({unit}, higher is better)" if metric != "ms" else f"## {title or name} (ms, lower is better)",
        "",
        f"- device: {_device_line()}",
        f"- versions: {_versions(providers)}; python {platform.python_version()}",
        f"- convention: {convention}; median of timed runs after warm-up (triton do_bench, L2 cleared per run)"
        + (f"; the fastest of {rounds} interleaved rounds per cell" if rounds > 1 else "")
        + (f"; timed after {settle_ms:.0f} ms of GPU load (power-capped clocks, not the idle boost)" if settle_ms > 0 else ""),
        f"- written by benchmarks/{os.path.basename(sys.argv[0]) or name} on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    notes = []
    for case in cases:
        row = [case.label]
        for p in providers:
            r = by.get((case.label, p.name))
            v = _value(r, metric) if r else None
            row.append(_fmt(v, 1 if metric != "ms" else 4) if v is not None else "-")
            if r and r.note:
                notes.append(f"{case.label} / {p.name}: {r.note}")
        ours = by.get((case.label, "ours"))
        for n in ratio_cols:
            other = by.get((case.label, n))
            if ours and other and ours.ms and other.ms:
                row.append(f"{other.ms / ours.ms:.2f}x")
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    if ratio_cols:
        lines.append("")
        lines.append("ours/X is X's time over ours: above 1.00x we are faster.")
    for pname, reason in unavailable.items():
        notes.append(f"{pname} not run: {reason}")
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


def _plot(path, name, cases, providers, results, metric, title):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    by = {(r.case, r.provider): r for r in results}
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(cases) * max(1, len(providers)) / 2), 4.5))
    width = 0.8 / max(1, len(providers))
    for i, p in enumerate(providers):
        ys = [(_value(by[(c.label, p.name)], metric) or 0.0) if (c.label, p.name) in by else 0.0 for c in cases]
        ax.bar([j + i * width for j in range(len(cases))], ys, width, label=p.name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
    ax.set_xticklabels([c.label for c in cases], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel({"tflops": "TFLOP/s", "gbps": "GB/s", "ms": "ms"}[metric])
    ax.set_title(title or name)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
