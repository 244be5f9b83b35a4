"""Run pytest node ids (or files) split over N parallel pytest processes, on the GPU host.

    python3 ci/gpu_shard_tests.py N TIMEOUT_S LOGDIR NODEID [NODEID ...]

Kernel compiles are CPU-bound and single-threaded, so a few parametrized tests that each compile their own kernels
finish sooner spread over processes. The node ids are collected first (``pytest --collect-only -q``), dealt round-robin
into N shards and each shard runs as one pytest process under TIMEOUT_S; every shard's log is ``LOGDIR/shard<i>.log``.
Prints each shard's summary line; exits non-zero when a shard failed or timed out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def collect(targets: list[str]) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *targets], capture_output=True, text=True)
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        sys.exit(f"gpu_shard_tests: nothing collected from {targets}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return ids


def main() -> int:
    n, timeout, logdir, targets = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
    logdir.mkdir(parents=True, exist_ok=True)
    ids = collect(targets)
    shards = [ids[i::n] for i in range(n) if ids[i::n]]
    procs = []
    for i, shard in enumerate(shards):
        log = open(logdir / f"shard{i}.log", "w")
        cmd = ["timeout", str(int(timeout)), sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf", *shard]
        procs.append((i, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    status = 0
    for i, proc, log in procs:
        rc = proc.wait()
        log.close()
        lines = [ln for ln in (logdir / f"shard{i}.log").read_text().splitlines() if any(w in ln for w in ("passed", "failed", "error", "skipped"))]
        print(f"shard{i} ({len(shards[i])} tests) rc={rc} | {lines[-1] if lines else '(no summary)'}")
        status |= rc not in (0, 5)
    print(f"collected {len(ids)} in {len(shards)} shards")
    return status


if __name__ == "__main__":
    sys.exit(main())
