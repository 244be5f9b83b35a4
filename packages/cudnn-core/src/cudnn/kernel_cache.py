"""Compiled-kernel cache (Rule 4): keys are plan-time only, compiled artifacts are reused.

    key = GemmKey(dtype="bf16", tile=(128, 256, 64), stages=4, epilogue="swiglu")   # frozen dataclass
    compiled = kernel_cache.get_or_compile(key, lambda: cute.compile(kernel, *fake_args), family="gemm")

Two layers:

- **In-process** (always on): a dict keyed by ``(family, key)``. This is what makes the execute path a
  guaranteed hit once ``compile()`` ran.
- **On disk** (optional): an artifact compiled with ``cute.compile(..., options="--enable-tvm-ffi")`` is
  exported with the DSL's tvm-ffi ``export_to_c`` to an object file and loaded back in a later process
  with ``cute.runtime.load_module(path, enable_tvm_ffi=True)``, skipping both the Python trace and the
  backend compile. Loading needs no GPU (checked on a CPU-only machine); calling does. A loaded
  artifact is a ``tvm_ffi.Function``: call it positionally, exactly as the in-memory tvm-ffi function.
  Results that are not tvm-ffi compiled functions are kept in-process only (``stats.disk_skipped``).
  The layer is off, with the reason in :meth:`KernelCache.disk_status`, when ``CUDNN_KERNEL_CACHE=0``,
  when ``apache-tvm-ffi`` or ``filelock`` is absent, or when the DSL lacks the tvm-ffi export.

Entries live under ``$CUDNN_KERNEL_CACHE_DIR`` (default ``$XDG_CACHE_HOME/cudnn/kernels``, else
``~/.cache/cudnn/kernels``) in a directory named by a fingerprint of the DSL version, the tvm-ffi
version, the Python version, the source digest of the package owning the kernel, the target arch
(``CUTE_DSL_ARCH`` or the current device's) and this file's format version: any change misses.
Each entry is written under a per-entry file lock (a second process waits, then loads instead of
compiling again), atomically (temp file + rename, metadata last), and checked by SHA-256 before it is
loaded; a corrupt or unloadable entry is dropped and rebuilt.

Keys (Rule 4): a frozen dataclass or a tuple of plain values (str, int, float, bool, None, bytes, enums,
types, dtypes, nested tuples / frozen dataclasses). Runtime values (tensors), unhashable values and
mutable dataclasses raise :class:`KernelCacheKeyError`. A key whose repr is not stable across processes
(an object printed with its address) still caches in-process but is never written to disk.

Cache-miss regression test (Rule 4): a second plan that differs only in runtime extents must not compile::

    first.compile()
    with kernel_cache.watch() as w:
        second.compile()                       # same plan, different runtime extent
    assert w.builds == 0, w.report()
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

#: Bumped when the on-disk layout or the entry format changes (part of the fingerprint).
FORMAT_VERSION = 1

ENV_DISABLE = "CUDNN_KERNEL_CACHE"
ENV_DIR = "CUDNN_KERNEL_CACHE_DIR"

#: Seconds a process waits for another one compiling the same entry before compiling without the disk.
LOCK_TIMEOUT_S = 900.0

#: Family sub-packages of ``cudnn`` (they are left out of the core source digest).
FAMILY_PACKAGES = ("sdpa", "gemm", "frost", "linear_attention")


class KernelCacheKeyError(TypeError):
    """A compile key that is not plan-time-only / hashable / stable (Rule 4)."""


@dataclasses.dataclass
class CacheStats:
    hits: int = 0  # in-process hits
    misses: int = 0  # in-process misses (then served from disk or built)
    disk_hits: int = 0  # misses served by loading a disk entry
    disk_writes: int = 0  # entries written to disk
    disk_dropped: int = 0  # corrupt / unloadable entries removed (then rebuilt)
    builds: int = 0  # calls of build(): a real compile
    disk_skipped: int = 0  # built artifacts not written (layer off, not exportable, unstable key ...)


@dataclasses.dataclass(frozen=True)
class DiskStatus:
    """Whether the on-disk layer is on, why not, and where it writes."""

    enabled: bool
    reason: str
    directory: str


# --------------------------------------------------------------------------------------------------
# keys


_RUNTIME_VALUE_TYPES = {("torch", "Tensor"), ("numpy", "ndarray")}


def _is_runtime_value(obj: Any) -> bool:
    """A tensor / array (torch, numpy, CuTe) anywhere in the type's MRO."""
    for klass in type(obj).__mro__:
        mod = klass.__module__ or ""
        if (mod, klass.__name__) in _RUNTIME_VALUE_TYPES:
            return True
        if mod.startswith("cutlass") and klass.__name__ in ("Tensor", "_Tensor", "_FakeTensor"):
            return True
    return False


def canonical_key(key: Any) -> tuple[str, bool]:
    """A canonical string for ``key`` and whether it is stable across processes.

    Raises :class:`KernelCacheKeyError` for what can never be a compile key (Rule 4)."""
    try:
        hash(key)
    except TypeError as exc:
        raise KernelCacheKeyError(f"kernel cache key {key!r} is not hashable ({exc}); use a frozen dataclass or a tuple of plan-time values (Rule 4)") from None
    stable = [True]

    def canon(obj: Any, depth: int) -> str:
        if depth > 32:
            raise KernelCacheKeyError("kernel cache key is nested more than 32 levels deep")
        if obj is None or isinstance(obj, (bool, int, str, bytes)):
            return repr(obj)
        if isinstance(obj, float):
            if math.isnan(obj):
                raise KernelCacheKeyError("kernel cache key holds a NaN float: it never compares equal, every lookup would miss")
            return repr(obj)
        if isinstance(obj, enum.Enum):
            return f"{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}"
        if isinstance(obj, type):
            return f"<type {obj.__module__}.{obj.__qualname__}>"
        if _is_runtime_value(obj):
            raise KernelCacheKeyError(
                f"kernel cache key holds a runtime value of type {type(obj).__module__}.{type(obj).__qualname__}; "
                "keys are plan-time only (dtypes, declared strides, flags): Rule 4"
            )
        if dataclasses.is_dataclass(obj):
            params = getattr(type(obj), "__dataclass_params__", None)
            if params is None or not params.frozen:
                raise KernelCacheKeyError(f"kernel cache key {type(obj).__qualname__} is a mutable dataclass; declare it @dataclass(frozen=True)")
            fields = ",".join(f"{f.name}={canon(getattr(obj, f.name), depth + 1)}" for f in dataclasses.fields(obj) if f.compare)
            return f"{type(obj).__module__}.{type(obj).__qualname__}({fields})"
        if isinstance(obj, tuple):
            return "(" + ",".join(canon(x, depth + 1) for x in obj) + ",)"
        if isinstance(obj, frozenset):
            return "frozenset{" + ",".join(sorted(canon(x, depth + 1) for x in obj)) + "}"
        if isinstance(obj, (list, dict, set)):
            raise KernelCacheKeyError(f"kernel cache key holds a mutable {type(obj).__name__}; use a tuple")
        text = repr(obj)
        if " at 0x" in text or " object at " in text:
            stable[0] = False
        return f"{type(obj).__module__}.{type(obj).__qualname__}:{text}"

    return canon(key, 0), stable[0]


# --------------------------------------------------------------------------------------------------
# fingerprint


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _digest_files(paths: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for rel, full in sorted(paths):
        h.update(rel.encode() + b"\0")
        try:
            with open(full, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError:
            h.update(b"<unreadable>")
    return h.hexdigest()[:16]


def _walk_sources(root: str, exclude_top: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not (rel_dir == "." and d in exclude_top))
        for name in filenames:
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                found.append((os.path.normpath(os.path.join(rel_dir, name)), full))
    return found


@functools.lru_cache(maxsize=64)
def source_digest(package: str) -> str | None:
    """SHA-256 (16 hex) of the ``.py`` sources of ``package`` (a module name), without importing it.

    ``"cudnn"`` means cudnn-core: the core directory, family sub-packages left out. A plain module hashes
    its one file. None when the package cannot be found."""
    if package == "cudnn":
        core_dir = os.path.dirname(os.path.abspath(__file__))
        return _digest_files(_walk_sources(core_dir, exclude_top=FAMILY_PACKAGES))
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        files: list[tuple[str, str]] = []
        for i, loc in enumerate(sorted(spec.submodule_search_locations)):
            files += [(f"{i}/{rel}", full) for rel, full in _walk_sources(loc)]
        return _digest_files(files)
    if spec.origin and os.path.isfile(spec.origin):
        return _digest_files([(os.path.basename(spec.origin), spec.origin)])
    return None


def owning_package(family: str, build: Callable[[], Any] | None = None) -> str | None:
    """The package whose source digest fingerprints a kernel of ``family``: ``cudnn.<family>`` when it
    exists, ``cudnn`` for ``"core"``, else the module that defined ``build`` (its ``cudnn.<x>`` package)."""
    if family == "core":
        return "cudnn"
    if family.isidentifier():
        try:
            if importlib.util.find_spec(f"cudnn.{family}") is not None:
                return f"cudnn.{family}"
        except (ImportError, ValueError):
            pass
    module = getattr(build, "__module__", None)
    if not module or module == "__main__":
        return None
    parts = module.split(".")
    if parts[0] == "cudnn" and len(parts) > 1:
        return "cudnn" if parts[1] not in FAMILY_PACKAGES else f"cudnn.{parts[1]}"
    return module


def target_arch() -> str | None:
    """``CUTE_DSL_ARCH`` if set, else the current CUDA device's ``sm_XY[a]`` via torch when it is loaded."""
    arch = os.environ.get("CUTE_DSL_ARCH")
    if arch:
        return arch
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
    except Exception:
        return None
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def fingerprint(package: str | None) -> dict[str, Any]:
    """What an on-disk entry depends on besides its key (an unknown package, source or arch: no disk entry)."""
    return {
        "format": FORMAT_VERSION,
        "dsl": _dist_version("nvidia-cutlass-dsl"),
        "tvm_ffi": _dist_version("apache-tvm-ffi"),
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
        "package": package,
        "source": source_digest(package) if package else None,
        "arch": target_arch(),
    }


# --------------------------------------------------------------------------------------------------
# disk codec: tvm-ffi export


class TvmFfiCodec:
    """Export / load a tvm-ffi compiled function (``cute.compile(..., options="--enable-tvm-ffi")``)."""

    name = "tvm-ffi"
    suffix = ".o"

    def unavailable_reason(self) -> str | None:
        """None when the DSL and apache-tvm-ffi are installed and the DSL has the export, else why not."""
        from . import _compat

        return _compat.tvm_ffi_export_reason()

    def accepts(self, obj: Any) -> bool:
        """A DSL tvm-ffi compiled function (``TVMFFIJitCompiledFunction[WithKwargs]``, every lane)."""
        if "tvm_ffi" not in sys.modules or "cutlass" not in sys.modules:
            return False
        from . import _compat

        try:
            base = _compat._resolve("cutlass.cutlass_dsl.tvm_ffi_provider.TVMFFIJitCompiledFunctionBase")
        except (ImportError, AttributeError):
            return False
        return isinstance(obj, base)

    def save(self, obj: Any, path: str, symbol: str) -> None:
        obj.export_to_c(path, symbol)

    def load(self, path: str, symbol: str) -> Any:
        import cutlass.cute as cute

        module = cute.runtime.load_module(path, enable_tvm_ffi=True)
        return getattr(module, symbol)


# --------------------------------------------------------------------------------------------------
# the cache


def _env_disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "1").strip().lower() in ("0", "false", "off", "no", "")


def cache_directory() -> str:
    """Where entries live: ``$CUDNN_KERNEL_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudnn/kernels``, else ``~/.cache/cudnn/kernels``."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudnn", "kernels")


class CacheWatch:
    """Events seen while a :meth:`KernelCache.watch` block ran."""

    def __init__(self):
        self.events: list[tuple[str, str, Any]] = []

    def _count(self, kind: str) -> int:
        return sum(1 for e in self.events if e[0] == kind)

    hits = property(lambda self: self._count("hit"))
    misses = property(lambda self: self._count("miss"))
    builds = property(lambda self: self._count("build"))
    disk_hits = property(lambda self: self._count("disk_hit"))

    def report(self) -> str:
        built = [f"{fam}:{key!r}" for kind, fam, key in self.events if kind == "build"]
        return f"{self.builds} compile(s) where a cache hit was due (Rule 4: is a runtime value in the key?): " + "; ".join(built)


class KernelCache:
    """Process-wide cache of compiled kernels keyed by a hashable, plan-time-only key, with a disk layer."""

    def __init__(self, codec: Any = None):
        self._entries: dict[Hashable, Any] = {}
        self._lock = threading.RLock()
        self._watches: list[CacheWatch] = []
        self.codec = codec if codec is not None else TvmFfiCodec()
        self.stats = CacheStats()
        self.last_disk_skip: str | None = None

    # -- public ------------------------------------------------------------------------------------

    def get_or_compile(self, key: Hashable, build: Callable[[], Any], *, family: str = "core", package: str | None = None) -> Any:
        """The compiled artifact for ``(family, key)``: from this process, else from disk, else ``build()``.

        ``package`` names the module whose sources fingerprint the disk entry when it is not
        ``cudnn.<family>`` (see :func:`owning_package`)."""
        full_key = (family, key)
        with self._lock:
            try:
                hit = self._entries.get(full_key)
            except TypeError:  # unhashable: say why in Rule 4 terms
                canonical_key(key)
                raise
            if hit is not None:
                self.stats.hits += 1
                self._event("hit", family, key)
                return hit
            canon, stable = canonical_key(key)  # validated on a miss only: a hit was validated when stored
            self.stats.misses += 1
            self._event("miss", family, key)
            compiled = self._from_disk_or_build(family, key, canon, stable, build, package)
            self._entries[full_key] = compiled
            return compiled

    def disk_status(self) -> DiskStatus:
        """Whether the on-disk layer is on, and if not why (recorded, never silent)."""
        directory = cache_directory()
        if _env_disabled():
            return DiskStatus(False, f"disabled by {ENV_DISABLE}={os.environ.get(ENV_DISABLE)!r}", directory)
        if importlib.util.find_spec("filelock") is None:
            return DiskStatus(False, "filelock is not installed", directory)
        reason = self.codec.unavailable_reason()
        if reason:
            return DiskStatus(False, reason, directory)
        return DiskStatus(True, f"{self.codec.name} export", directory)

    def entry_paths(self, key: Hashable, *, family: str = "core", package: str | None = None, build: Callable | None = None) -> tuple[str, str] | None:
        """(artifact path, metadata path) of the disk entry ``key`` would use, or None when it has none."""
        canon, stable = canonical_key(key)
        plan = self._disk_plan(family, canon, stable, build, package)
        return None if isinstance(plan, str) else (plan["artifact"], plan["meta"])

    @contextlib.contextmanager
    def watch(self) -> Iterator[CacheWatch]:
        """Record hits / misses / builds inside the block (the Rule 4 cache-miss regression detector)."""
        w = CacheWatch()
        with self._lock:
            self._watches.append(w)
        try:
            yield w
        finally:
            with self._lock:
                self._watches.remove(w)

    def __contains__(self, item) -> bool:
        return item in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget the in-process entries and reset the counters (disk entries stay)."""
        with self._lock:
            self._entries.clear()
            self.stats = CacheStats()
            self.last_disk_skip = None

    # -- internals ---------------------------------------------------------------------------------

    def _event(self, kind: str, family: str, key: Any) -> None:
        for w in self._watches:
            w.events.append((kind, family, key))

    def _build(self, family: str, key: Any, build: Callable[[], Any]) -> Any:
        self.stats.builds += 1
        self._event("build", family, key)
        return build()

    def _skip(self, reason: str) -> None:
        self.stats.disk_skipped += 1
        self.last_disk_skip = reason

    def _disk_plan(self, family: str, canon: str, stable: bool, build: Callable | None, package: str | None) -> dict | str:
        """Paths and metadata of the disk entry, or the reason there is none."""
        status = self.disk_status()
        if not status.enabled:
            return f"disk layer off: {status.reason}"
        if not stable:
            return f"key {canon[:120]} has no stable repr (an object printed with its address): in-process only"
        package = package or owning_package(family, build)
        fp = fingerprint(package)
        missing = [k for k in ("package", "source", "arch") if fp[k] is None]
        if missing:
            return f"fingerprint incomplete ({', '.join(missing)} unknown): in-process only"
        fp_text = json.dumps(fp, sort_keys=True)
        fp_hash = hashlib.sha256(fp_text.encode()).hexdigest()[:20]
        key_hash = hashlib.sha256(f"{family}\0{canon}".encode()).hexdigest()[:32]
        safe_family = "".join(c if c.isalnum() or c in "_-" else "_" for c in family) or "_"
        base = os.path.join(status.directory, fp_hash, safe_family, key_hash)
        return {
            "artifact": base + self.codec.suffix,
            "meta": base + ".json",
            "lock": base + ".lock",
            "symbol": f"cudnn_cached_{key_hash[:24]}",
            "fingerprint": fp,
            "canon": canon,
            "family": family,
        }

    def _from_disk_or_build(self, family, key, canon, stable, build, package) -> Any:
        plan = self._disk_plan(family, canon, stable, build, package)
        if isinstance(plan, str):
            self._skip(plan)
            return self._build(family, key, build)
        import filelock

        os.makedirs(os.path.dirname(plan["artifact"]), exist_ok=True)
        try:
            lock = filelock.FileLock(plan["lock"], timeout=LOCK_TIMEOUT_S)
            lock.acquire()
        except (filelock.Timeout, OSError) as exc:
            self._skip(f"could not lock {plan['lock']}: {exc}")
            return self._build(family, key, build)
        try:
            loaded = self._load_entry(plan)
            if loaded is not None:
                self.stats.disk_hits += 1
                self._event("disk_hit", family, key)
                return loaded
            compiled = self._build(family, key, build)
            self._write_entry(plan, compiled)
            return compiled
        finally:
            lock.release()

    def _drop(self, plan: dict) -> None:
        for p in (plan["meta"], plan["artifact"]):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
        self.stats.disk_dropped += 1

    def _load_entry(self, plan: dict) -> Any:
        """The loaded artifact, or None (absent; or corrupt, which is dropped)."""
        if not os.path.exists(plan["meta"]):
            if os.path.exists(plan["artifact"]):  # an artifact without metadata: an interrupted write
                self._drop(plan)
            return None
        try:
            with open(plan["meta"]) as f:
                meta = json.load(f)
            with open(plan["artifact"], "rb") as f:
                blob = f.read()
            ok = (
                meta.get("key") == plan["canon"]
                and meta.get("codec") == self.codec.name
                and meta.get("symbol") == plan["symbol"]
                and meta.get("sha256") == hashlib.sha256(blob).hexdigest()
            )
        except (OSError, ValueError):
            ok = False
        if not ok:
            self._drop(plan)
            return None
        try:
            return self.codec.load(plan["artifact"], plan["symbol"])
        except Exception:
            self._drop(plan)
            return None

    def _write_entry(self, plan: dict, compiled: Any) -> None:
        if not self.codec.accepts(compiled):
            self._skip(
                f"{type(compiled).__module__}.{type(compiled).__qualname__} is not exportable by {self.codec.name} "
                "(compile with options='--enable-tvm-ffi' to cache on disk): in-process only"
            )
            return
        tmp = f"{plan['artifact']}.tmp{os.getpid()}"
        try:
            self.codec.save(compiled, tmp, plan["symbol"])
            with open(tmp, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            os.replace(tmp, plan["artifact"])
            meta = {
                "key": plan["canon"],
                "family": plan["family"],
                "codec": self.codec.name,
                "symbol": plan["symbol"],
                "sha256": digest,
                "fingerprint": plan["fingerprint"],
                "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            tmp_meta = f"{plan['meta']}.tmp{os.getpid()}"
            with open(tmp_meta, "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
            os.replace(tmp_meta, plan["meta"])
            self.stats.disk_writes += 1
        except Exception as exc:  # a cache write never fails the compile
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            self._skip(f"writing {plan['artifact']} failed: {type(exc).__name__}: {exc}")


kernel_cache = KernelCache()
