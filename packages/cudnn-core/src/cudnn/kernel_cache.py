"""Compiled-kernel cache (Rule 4): keys are plan-time only, compiled artifacts are reused.

    key = GemmKey(dtype="bf16", tile=(128, 256, 64), stages=4, epilogue="swiglu")   # frozen dataclass
    compiled = kernel_cache.get_or_compile(key, lambda: cute.compile(kernel, *fake_args), family="gemm")

In-process: a dict per process. The ``stats`` counters let tests assert that an execute path is a
guaranteed hit (the cache-miss regression test of Rule 4).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Any


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    disk_writes: int = 0
    disk_dropped: int = 0


class KernelCache:
    """Process-wide cache of compiled kernels keyed by a hashable, plan-time-only key."""

    def __init__(self):
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.RLock()
        self.stats = CacheStats()

    def get_or_compile(self, key: Hashable, build: Callable[[], Any], *, family: str = "core") -> Any:
        full_key = (family, key)
        with self._lock:
            hit = self._entries.get(full_key)
            if hit is not None:
                self.stats.hits += 1
                return hit
            self.stats.misses += 1
            compiled = build()
            self._entries[full_key] = compiled
            return compiled

    def __contains__(self, item) -> bool:
        return item in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.stats = CacheStats()


kernel_cache = KernelCache()
