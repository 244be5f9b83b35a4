"""Host-time measurement for the ``host_timing`` tests (Python-side cost of a launch path, the kernel stubbed).

CI's host is a shared 2-core machine: a load spike during one measurement skews a comparison of two best-of-run times
taken seconds apart. :class:`Rounds` times its callables round-robin and compares them round by round (the smallest
same-round ratio), so a spike slows one round of both sides, not the comparison.
"""

from __future__ import annotations

import time


class Sink(list):
    """A recorder's call list that keeps nothing while timing."""

    def append(self, x):
        pass


def per_call_us(fn, n: int = 2000, reps: int = 5, warmup: int = 200) -> float:
    """Best of ``reps`` runs of ``n`` calls of ``fn`` (after ``warmup`` calls), in microseconds per call."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


class Rounds:
    """Per-call times of named callables, measured in ``rounds`` round-robin rounds (each :func:`per_call_us` with
    ``reps`` runs of ``n[name]`` calls, ``n`` an int or a dict by name); ``setup[name]`` (optional) runs before each of
    that callable's measurements. ``best[name]``: its best time; :meth:`ratio`: the smallest same-round ratio."""

    def __init__(self, fns: dict, rounds: int = 5, n=2000, reps: int = 3, setup: dict | None = None):
        self.times = {name: [] for name in fns}
        for _ in range(rounds):
            for name, fn in fns.items():
                if setup and name in setup:
                    setup[name]()
                self.times[name].append(per_call_us(fn, n[name] if isinstance(n, dict) else n, reps))
        self.best = {name: min(t) for name, t in self.times.items()}

    def ratio(self, a: str, b: str) -> float:
        """min over rounds of time(a) / time(b) in the same round."""
        return min(x / y for x, y in zip(self.times[a], self.times[b], strict=True))
