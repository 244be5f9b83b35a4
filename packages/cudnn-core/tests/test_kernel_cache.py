"""cudnn.kernel_cache: in-process hits, Rule 4 keys, the cache-miss regression detector, and the disk layer
(round trip, corrupt entries, environment variables, fingerprint invalidation, cross-process locking).

The disk machinery is tested twice: with a small pickle codec (no DSL, no tvm-ffi: runs everywhere) and
with a real tiny kernel compiled for sm_90a and exported through tvm-ffi (compile-only: exporting and
loading need no GPU; only calling the loaded function does, see the gpu test at the end).
"""

import dataclasses
import enum
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from cudnn import kernel_cache as kc
from cudnn.kernel_cache import KernelCache, KernelCacheKeyError, canonical_key

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


@dataclasses.dataclass(frozen=True)
class TinyKey:
    dtype: str
    tile: tuple
    flag: bool = False


@dataclasses.dataclass
class MutableKey:
    dtype: str


class Mode(enum.Enum):
    A = 1


class PickleCodec:
    """A stand-in disk codec (no DSL needed): exercises locking, corruption and fingerprints."""

    name = "pickle-test"
    suffix = ".pkl"

    def __init__(self):
        self.loads = 0

    def unavailable_reason(self):
        return None

    def accepts(self, obj):
        return isinstance(obj, dict)

    def save(self, obj, path, symbol):
        with open(path, "wb") as f:
            pickle.dump(obj, f)

    def load(self, path, symbol):
        self.loads += 1
        with open(path, "rb") as f:
            return pickle.load(f)


@pytest.fixture(autouse=True)
def _isolated_cache_dir(tmp_path, monkeypatch):
    """No test here reads or writes the user's cache directory."""
    monkeypatch.setenv(kc.ENV_DIR, str(tmp_path / "isolated-kcache"))


@pytest.fixture
def disk_dir(tmp_path, monkeypatch):
    d = tmp_path / "kcache"
    monkeypatch.setenv(kc.ENV_DIR, str(d))
    monkeypatch.delenv(kc.ENV_DISABLE, raising=False)
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    return d


def _entries(root):
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".pkl", ".o", ".json"))


# ---------------------------------------------------------------------------------------------- in-process


def test_in_process_hit_and_miss(monkeypatch):
    monkeypatch.setenv(kc.ENV_DISABLE, "0")  # in-process layer only
    cache = KernelCache(codec=PickleCodec())
    calls = []

    def build():
        calls.append(1)
        return {"artifact": len(calls)}

    key = TinyKey("bf16", (128, 256, 64))
    first = cache.get_or_compile(key, build, family="gemm")
    again = cache.get_or_compile(TinyKey("bf16", (128, 256, 64)), build, family="gemm")
    other_family = cache.get_or_compile(key, build, family="sdpa")
    assert first is again and other_family is not first
    assert len(calls) == 2 and len(cache) == 2 and ("gemm", key) in cache
    assert (cache.stats.hits, cache.stats.misses, cache.stats.builds) == (1, 2, 2)
    cache.clear()
    assert len(cache) == 0 and cache.stats.hits == 0


@pytest.mark.parametrize(
    "bad, match",
    [
        (["bf16", 128], "not hashable"),
        ((1, {"a": 1}), "not hashable"),
        (MutableKey("bf16"), "not hashable|mutable dataclass"),
        (("bf16", float("nan")), "NaN"),
    ],
)
def test_keys_that_break_rule4_raise(bad, match):
    cache = KernelCache(codec=PickleCodec())
    with pytest.raises(KernelCacheKeyError, match=match):
        cache.get_or_compile(bad, lambda: {"x": 1})
    assert len(cache) == 0


def test_runtime_tensor_in_key_raises():
    torch = pytest.importorskip("torch")
    with pytest.raises(KernelCacheKeyError, match="runtime value.*Rule 4"):
        canonical_key(("bf16", torch.zeros(2)))


def test_canonical_key_is_stable_across_processes():
    key = TinyKey("bf16", (128, 256, 64), True)
    here, stable = canonical_key((key, Mode.A, int, None, 1.5, b"x", frozenset({"b", "a"})))
    assert stable
    code = textwrap.dedent(
        f"""
        import sys, enum, dataclasses
        sys.path.insert(0, {HERE!r})
        from test_kernel_cache import TinyKey, Mode
        from cudnn.kernel_cache import canonical_key
        print(canonical_key((TinyKey("bf16", (128, 256, 64), True), Mode.A, int, None, 1.5, b"x", frozenset({{"a", "b"}})))[0])
        """
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip()
    # the parent may import this file under a package-qualified name (pytest rootdir): compare modulo that
    assert out.replace("test_kernel_cache.", TinyKey.__module__ + ".") == here


def test_unstable_repr_key_caches_in_process_but_never_on_disk(disk_dir):
    cache = KernelCache(codec=PickleCodec())
    key = ("plan", object())  # prints with its address
    assert canonical_key(key)[1] is False
    cache.get_or_compile(key, lambda: {"x": 1}, package="cudnn")
    cache.get_or_compile(key, lambda: {"x": 2}, package="cudnn")
    assert cache.stats.builds == 1 and cache.stats.hits == 1
    assert cache.stats.disk_writes == 0 and "stable repr" in cache.last_disk_skip
    assert _entries(disk_dir) == []


# ------------------------------------------------------------------------- Rule 4 cache-miss regression


class Plan:
    """A miniature APIBase: ``n`` is a runtime extent (sym_int in a real kernel), the rest is plan-time."""

    def __init__(self, cache, dtype, n, key_includes_runtime_extent=False):
        self.cache, self.dtype, self.n, self.bad = cache, dtype, n, key_includes_runtime_extent

    def compile_key(self):
        return TinyKey(self.dtype, (self.n,) if self.bad else (), False)

    def compile(self):
        self.compiled = self.cache.get_or_compile(self.compile_key(), lambda: {"dtype": self.dtype}, family="test", package="cudnn")


@pytest.mark.detector
def test_same_plan_different_runtime_extent_is_a_hit():
    cache = KernelCache(codec=PickleCodec())
    Plan(cache, "bf16", n=1000).compile()
    with cache.watch() as w:
        Plan(cache, "bf16", n=4096).compile()
    assert w.builds == 0, w.report()
    assert w.hits == 1


@pytest.mark.detector
def test_watch_catches_a_runtime_extent_in_the_key():
    """The planted violation: a key holding the runtime extent compiles again, and the watch says so."""
    cache = KernelCache(codec=PickleCodec())
    Plan(cache, "bf16", n=1000, key_includes_runtime_extent=True).compile()
    with cache.watch() as w:
        Plan(cache, "bf16", n=4096, key_includes_runtime_extent=True).compile()
    assert w.builds == 1 and "4096" in w.report()
    with pytest.raises(AssertionError):
        assert w.builds == 0, w.report()


@pytest.mark.compile_only
@pytest.mark.detector
def test_real_kernel_recompiles_nothing_for_a_new_runtime_extent():
    """Rule 4 with a real kernel: the extent is a cute.sym_int, the key holds only the dtype."""
    from cudnn_testing.compile_only import tiny_kernel
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    cache = KernelCache(codec=PickleCodec())
    compile_tiny = tiny_kernel()
    seen = []

    def plan_compile(n):  # n never reaches the key nor the compile: it is bound at launch
        seen.append(n)
        return cache.get_or_compile(TinyKey("f32", ()), compile_tiny, family="test", package="cudnn")

    first = plan_compile(1000)
    with cache.watch() as w:
        second = plan_compile(4096)
    assert w.builds == 0, w.report()
    assert first is second and cache.stats.builds == 1


# ------------------------------------------------------------------------------------------- disk layer


def test_disk_round_trip_between_processes(disk_dir):
    writer = KernelCache(codec=PickleCodec())
    key = TinyKey("bf16", (64,))
    built = writer.get_or_compile(key, lambda: {"v": 7}, family="test", package="cudnn")
    assert writer.stats.disk_writes == 1, writer.last_disk_skip
    files = _entries(disk_dir)
    assert [p.suffix for p in files] == [".json", ".pkl"]
    meta = json.loads(files[0].read_text())
    assert meta["fingerprint"]["arch"] == "sm_90a" and meta["fingerprint"]["package"] == "cudnn"
    assert meta["key"] == canonical_key(key)[0]

    reader = KernelCache(codec=PickleCodec())  # a fresh process, as far as the cache can tell
    loaded = reader.get_or_compile(key, lambda: pytest.fail("built although a disk entry exists"), family="test", package="cudnn")
    assert loaded == built
    assert (reader.stats.disk_hits, reader.stats.builds) == (1, 0)


def _corrupt_artifact(path):
    path.write_bytes(path.read_bytes()[:5])


def _corrupt_meta(path):
    path.write_text("{not json")


def _drop_meta(path):
    path.unlink()


@pytest.mark.parametrize("corrupt", ["artifact", "meta", "missing_meta", "unloadable"])
def test_corrupt_entry_is_dropped_and_rebuilt(disk_dir, corrupt):
    key = TinyKey("bf16", (32,))
    KernelCache(codec=PickleCodec()).get_or_compile(key, lambda: {"v": 1}, family="test", package="cudnn")
    meta, art = _entries(disk_dir)
    if corrupt == "artifact":
        _corrupt_artifact(art)
    elif corrupt == "meta":
        _corrupt_meta(meta)
    elif corrupt == "missing_meta":
        _drop_meta(meta)

    codec = PickleCodec()
    if corrupt == "unloadable":  # checksum fine, but the loader fails (e.g. an incompatible object file)

        def bad_load(path, symbol):
            raise RuntimeError("cannot load")

        codec.load = bad_load
    cache = KernelCache(codec=codec)
    out = cache.get_or_compile(key, lambda: {"v": 2}, family="test", package="cudnn")
    assert out == {"v": 2}
    assert (cache.stats.disk_dropped, cache.stats.builds, cache.stats.disk_writes) == (1, 1, 1)

    fresh = KernelCache(codec=PickleCodec())  # the rebuilt entry is sound
    assert fresh.get_or_compile(key, lambda: {"v": 3}, family="test", package="cudnn") == {"v": 2}
    assert fresh.stats.disk_hits == 1


def test_env_disables_the_disk_layer(disk_dir, monkeypatch):
    monkeypatch.setenv(kc.ENV_DISABLE, "0")
    cache = KernelCache(codec=PickleCodec())
    status = cache.disk_status()
    assert not status.enabled and kc.ENV_DISABLE in status.reason
    cache.get_or_compile(TinyKey("bf16", ()), lambda: {"v": 1}, family="test", package="cudnn")
    assert cache.stats.builds == 1 and cache.stats.disk_writes == 0 and cache.stats.disk_skipped == 1
    assert "disk layer off" in cache.last_disk_skip
    assert not disk_dir.exists()


def test_env_moves_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    monkeypatch.delenv(kc.ENV_DISABLE, raising=False)
    for where in ("one", "two"):
        monkeypatch.setenv(kc.ENV_DIR, str(tmp_path / where))
        cache = KernelCache(codec=PickleCodec())
        assert cache.disk_status().directory == str(tmp_path / where)
        cache.get_or_compile(TinyKey("bf16", ()), lambda: {"v": 1}, family="test", package="cudnn")
        assert cache.stats.disk_writes == 1
        assert len(_entries(tmp_path / where)) == 2


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(kc.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kc.cache_directory() == os.path.join(str(tmp_path), "cudnn", "kernels")


def test_fingerprint_change_invalidates(disk_dir, monkeypatch, tmp_path):
    pkg = tmp_path / "src" / "cudnn_kc_probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    kc.source_digest.cache_clear()
    key = TinyKey("bf16", (16,))

    def get(expect_build):
        cache = KernelCache(codec=PickleCodec())
        cache.get_or_compile(key, lambda: {"v": 1}, family="test", package="cudnn_kc_probe_pkg")
        assert cache.stats.builds == (1 if expect_build else 0), cache.last_disk_skip
        return cache

    get(True)
    get(False)  # unchanged fingerprint: a disk hit
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_100a")  # target arch
    get(True)
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    get(False)
    (pkg / "kernel.py").write_text("Y = 2\n")  # package source
    kc.source_digest.cache_clear()
    get(True)
    real = kc._dist_version
    monkeypatch.setattr(kc, "_dist_version", lambda name: "9.9.9" if name == "nvidia-cutlass-dsl" else real(name))  # DSL version
    get(True)
    monkeypatch.setattr(kc, "_dist_version", lambda name: "0.0.1" if name == "apache-tvm-ffi" else real(name))  # tvm-ffi version
    get(True)
    monkeypatch.setattr(kc.sys, "version_info", (3, 99, 0))  # Python version
    get(True)
    kc.source_digest.cache_clear()


def test_unknown_arch_keeps_the_entry_in_process(disk_dir, monkeypatch):
    monkeypatch.delenv("CUTE_DSL_ARCH", raising=False)
    monkeypatch.setattr(kc, "target_arch", lambda: None)
    cache = KernelCache(codec=PickleCodec())
    cache.get_or_compile(TinyKey("bf16", ()), lambda: {"v": 1}, family="test", package="cudnn")
    assert cache.stats.disk_writes == 0 and "arch" in cache.last_disk_skip


def test_owning_package():
    assert kc.owning_package("core") == "cudnn"

    def build():
        pass

    build.__module__ = "cudnn.gemm.dense.api"
    assert kc.owning_package("no_such_family", build) == "cudnn.gemm"
    build.__module__ = "cudnn.workspace"
    assert kc.owning_package("no_such_family", build) == "cudnn"
    build.__module__ = "__main__"
    assert kc.owning_package("no_such_family", build) is None
    assert kc.source_digest("cudnn") and kc.source_digest("cudnn") == kc.source_digest("cudnn")
    assert kc.source_digest("no_such_package_anywhere") is None


def test_two_processes_compile_once(disk_dir, tmp_path):
    """The per-entry file lock: two processes racing for one key build it once; the other loads it."""
    marker = tmp_path / "builds.txt"
    code = textwrap.dedent(
        f"""
        import os, pickle, sys, time
        sys.path.insert(0, {HERE!r})
        from test_kernel_cache import PickleCodec, TinyKey
        from cudnn.kernel_cache import KernelCache

        def build():
            with open({str(marker)!r}, "a") as f:
                f.write(str(os.getpid()) + "\\n")
            time.sleep(1.5)
            return {{"v": 1}}

        cache = KernelCache(codec=PickleCodec())
        cache.get_or_compile(TinyKey("bf16", (8,)), build, family="test", package="cudnn")
        print(cache.stats.builds, cache.stats.disk_hits)
        """
    )
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(marker.read_text().split()) == 1
    assert sorted(o[0].strip() for o in outs) == ["0 1", "1 0"]


# --------------------------------------------------------------------------- real kernel through tvm-ffi


#: The tiny kernel's own module fingerprints its entries (stable while other core files are edited).
TINY = "cudnn_testing.compile_only"


def _skip_unless_tvm_ffi_export():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    from cudnn import _compat

    reason = _compat.tvm_ffi_export_reason()
    if reason:
        pytest.skip(f"disk layer off on this lane: {reason}")


@pytest.mark.compile_only
def test_tvm_ffi_disk_round_trip_real_kernel(disk_dir):
    """Compile for sm_90a with tvm-ffi, export, then load in a fresh process: no GPU needed for either."""
    _skip_unless_tvm_ffi_export()
    from cudnn_testing.compile_only import tiny_kernel

    cache = KernelCache()
    compile_tiny = tiny_kernel()
    key = ("tiny", "f32", "tvm-ffi")  # plain values: this file's module name differs between pytest and the child
    first = cache.get_or_compile(key, lambda: compile_tiny(options="--enable-tvm-ffi"), family="test", package=TINY)
    assert cache.stats.disk_writes == 1, cache.last_disk_skip
    assert type(first).__name__.startswith("TVMFFIJitCompiledFunction")
    art = [p for p in _entries(disk_dir) if p.suffix == ".o"]
    assert len(art) == 1 and art[0].stat().st_size > 1000

    code = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{HERE!r}, {os.path.join(ROOT, "shared")!r}]
        from cudnn.kernel_cache import KernelCache
        cache = KernelCache()
        fn = cache.get_or_compile(("tiny", "f32", "tvm-ffi"), lambda: sys.exit("compiled instead of loading"), family="test", package="cudnn_testing.compile_only")
        import tvm_ffi
        assert isinstance(fn, tvm_ffi.Function), type(fn)
        print(cache.stats.disk_hits, cache.stats.builds, "cutlass.cute" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1", "0", "True"]


@pytest.mark.compile_only
def test_non_tvm_ffi_artifact_stays_in_process(disk_dir):
    _skip_unless_tvm_ffi_export()
    from cudnn_testing.compile_only import tiny_kernel

    cache = KernelCache()
    cache.get_or_compile(TinyKey("f32", ()), tiny_kernel(), family="test", package=TINY)
    assert cache.stats.disk_writes == 0 and "--enable-tvm-ffi" in cache.last_disk_skip
    assert [p for p in _entries(disk_dir) if p.suffix == ".o"] == []


def test_disk_layer_reports_why_it_is_off_without_tvm_ffi(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tvm_ffi" else real(name, *a))
    monkeypatch.delenv(kc.ENV_DISABLE, raising=False)
    status = KernelCache().disk_status()
    assert not status.enabled
    assert "apache-tvm-ffi" in status.reason or "nvidia-cutlass-dsl" in status.reason


@pytest.mark.gpu
def test_disk_loaded_kernel_runs(disk_dir):
    """On a GPU: the artifact loaded from disk computes what the freshly compiled one does."""
    _skip_unless_tvm_ffi_export()
    torch = pytest.importorskip("torch")
    from cudnn_testing.compile_only import tiny_kernel

    key = TinyKey("f32", (), True)
    KernelCache().get_or_compile(key, lambda: tiny_kernel()(options="--enable-tvm-ffi"), family="test", package=TINY)
    loaded_cache = KernelCache()
    fn = loaded_cache.get_or_compile(key, lambda: pytest.fail("compiled instead of loading"), family="test", package=TINY)
    assert loaded_cache.stats.disk_hits == 1
    a = torch.randn(3000, device="cuda")
    b = torch.full_like(a, float("nan"))
    fn(a, b, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, 2 * a)
