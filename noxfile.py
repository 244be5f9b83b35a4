"""nox sessions: one `tests` lane per CuTe DSL version, plus downstream, lint, build, gpu and demo.

    nox                       # every lane, lint, build, downstream (what CI runs)
    nox -s "tests(dsl='4.8.1')"
    nox -s gpu                # GPU host: the GPU-marked tests in this interpreter, no venv
    nox -s demo               # the benchmark tables (compile-only on a machine without a GPU)

Lanes never share a virtual environment; tests run against the built wheels, never the source tree.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import sys

import nox

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "shared"))
from cudnn_testing.lanes import CPU_TORCH, DOWNSTREAM_PINS, LANES  # noqa: E402

PACKAGES = ["cudnn-core", "cudnn-sdpa", "cudnn-gemm", "cudnn-frost", "cudnn-linear-attention"]
DIST = os.path.join(ROOT, ".nox", "_dist")
LOCAL_TORCH_WHEELS = "/opt/wheels"  # where CPU machines keep torch's CPU build
PYTEST_WORKERS_MAX = 4  # compile-heavy workers take ~2-3 GB each
NO_TESTS_COLLECTED = 5  # pytest's exit code when a lane admits no wheel with host-timing tests
TVM_FFI = next(p for p in DOWNSTREAM_PINS if p.startswith("apache-tvm-ffi"))  # enables the on-disk kernel cache

nox.options.sessions = [f"tests(dsl='{lane}')" for lane in LANES] + ["lint", "build", "downstream"]
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _pip_floor(package: str) -> str:
    """The nvidia-cutlass-dsl floor a wheel declares (its pip floor)."""
    text = open(os.path.join(ROOT, "packages", package, "pyproject.toml")).read()
    m = re.search(r'"nvidia-cutlass-dsl>=([0-9.]+)"', text)
    return m.group(1) if m else "0"


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(ROOT, "packages", "*", "**", "*"), recursive=True)):
        if os.path.isfile(path) and "/tests/" not in path and "__pycache__" not in path:
            h.update(path.encode())
            h.update(open(path, "rb").read())
    return h.hexdigest()[:16]


def _build_wheels(session) -> str:
    """Build the five wheels once per source state into .nox/_dist/<digest>/."""
    out = os.path.join(DIST, _source_digest())
    if len(glob.glob(os.path.join(out, "*.whl"))) == len(PACKAGES):
        return out
    shutil.rmtree(DIST, ignore_errors=True)
    os.makedirs(out)
    session.install("build", "hatchling")
    for package in PACKAGES:
        session.run("python", "-m", "build", "--wheel", "--no-isolation", "--outdir", out, os.path.join(ROOT, "packages", package), silent=True)
    return out


def _install_cpu_torch(session) -> None:
    """CPU machines get torch's CPU build first, so no CUDA build is downloaded."""
    args = ["--find-links", LOCAL_TORCH_WHEELS] if os.path.isdir(LOCAL_TORCH_WHEELS) else ["--index-url", "https://download.pytorch.org/whl/cpu"]
    session.install(*args, CPU_TORCH)


@nox.session
@nox.parametrize("dsl", LANES)
def tests(session, dsl):
    """Fresh venv with DSL ``dsl`` and the wheels whose floor admits it; run every test (GPU tests skip here)."""
    _install_cpu_torch(session)
    session.install(f"nvidia-cutlass-dsl=={dsl}", TVM_FFI, "pytest", "pytest-xdist", "numpy", "filelock", "packaging")
    dist = _build_wheels(session)
    admitted, left_out = [], []
    for package in PACKAGES:
        floor = _pip_floor(package)
        if _vkey(dsl) >= _vkey(floor):
            admitted.append(package)
        else:
            left_out.append(f"{package}: declares nvidia-cutlass-dsl>={floor}, above this lane")
    wheels = [glob.glob(os.path.join(dist, p.replace("-", "_") + "-*.whl"))[0] for p in admitted]
    session.install("--find-links", dist, *wheels)
    session.run(
        "python",
        "-c",
        f"import importlib.metadata as m; v = m.version('nvidia-cutlass-dsl'); assert v == '{dsl}', v; print('lane: nvidia-cutlass-dsl', v)",
    )
    for line in left_out:
        session.log(f"left out {line}")
    test_dirs = [os.path.join(ROOT, "packages", p, "tests") for p in admitted if os.path.isdir(os.path.join(ROOT, "packages", p, "tests"))]
    env = {"CUTE_DSL_ARCH": "sm_90a", "PYTHONPATH": "", "CUDNN_KERNEL_CACHE_DIR": os.path.join(session.create_tmp(), "kcache")}
    session.chdir(session.create_tmp())  # no source tree on sys.path: tests import the installed wheels
    pytest = ["python", "-m", "pytest", "-c", os.path.join(ROOT, "pyproject.toml"), "--rootdir", ROOT, "-q", *test_dirs, *session.posargs]
    # Compiles dominate and are single-threaded: one worker per core (a test file stays on one worker, with its
    # module-level plans). Tests that time host code against a bound run alone afterwards, on an otherwise idle host.
    workers = min(os.cpu_count() or 1, PYTEST_WORKERS_MAX)
    session.run(*pytest, "-n", str(workers), "--dist", "loadfile", "-m", "not host_timing", env=env)
    session.run(*pytest, "-m", "host_timing", env=env, success_codes=[0, NO_TESTS_COLLECTED])
    for line in left_out:
        session.log(f"left out {line}")


@nox.session
def lint(session):
    session.install("ruff")
    session.run("ruff", "check", ROOT)
    session.run("ruff", "format", "--check", ROOT)


@nox.session
def build(session):
    """Build all wheels and check their metadata, their contents and the install boundaries."""
    dist = _build_wheels(session)
    session.install("packaging")
    session.run("python", os.path.join(ROOT, "ci", "check_wheels.py"), dist)
    # `import cudnn` in a venv that holds only cudnn-core (no torch, cutlass, cuda-python).
    core = glob.glob(os.path.join(dist, "cudnn_core-*.whl"))[0]
    session.install(core)
    session.chdir(session.create_tmp())
    session.run(
        "python",
        "-c",
        "import importlib.util, sys, cudnn; "
        "assert all(importlib.util.find_spec(m) is None for m in ('torch', 'cutlass')), 'venv is not core-only'; "
        "assert not any(m in sys.modules for m in ('torch', 'cutlass', 'cuda')); "
        "print('import cudnn OK with only cudnn-core:', cudnn.__version__, cudnn.__file__)",
    )
    # `pip install cudnn-sdpa` pulls cudnn-core and no other family.
    report = os.path.join(session.create_tmp(), "report.json")
    for family in PACKAGES[1:]:
        session.run(
            "python", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, "--find-links", dist,
            *(["--find-links", LOCAL_TORCH_WHEELS] if os.path.isdir(LOCAL_TORCH_WHEELS) else []), family,
        )  # fmt: skip
        names = sorted(i["metadata"]["name"] for i in json.load(open(report))["install"] if i["metadata"]["name"].startswith("cudnn"))
        expected = sorted({"cudnn-core", family} | ({"cudnn-gemm"} if family == "cudnn-frost" else set()))
        if names != expected:
            session.error(f"pip install {family} would install {names}; expected {expected}")
        session.log(f"pip install {family} -> {names} (+ third-party deps)")


@nox.session
def downstream(session):
    """Resolve all five wheels with vLLM 0.33.0's and SGLang 0.5.23's pins (pip dry run; vLLM is not installed)."""
    dist = _build_wheels(session)
    wheels = sorted(glob.glob(os.path.join(dist, "*.whl")))
    report = os.path.join(session.create_tmp(), "report.json")
    links = ["--find-links", LOCAL_TORCH_WHEELS] if os.path.isdir(LOCAL_TORCH_WHEELS) else []
    session.run("python", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report, *links, *wheels, *DOWNSTREAM_PINS)
    resolved = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(report))["install"]}
    for pin in DOWNSTREAM_PINS:
        name, version = pin.split("==")
        if resolved.get(name) != version:
            session.error(f"{name} resolved to {resolved.get(name)}, not the downstream pin {version}")
    session.log(
        "resolved together: "
        + ", ".join(f"{n}=={resolved[n]}" for n in sorted(resolved) if n.startswith(("cudnn", "nvidia-cutlass", "apache-tvm", "quack", "torch")))
    )


@nox.session(venv_backend="none")
def gpu(session):
    """GPU host: the GPU-marked tests (or the given pytest args) in the current interpreter, no venv, no package index."""
    session.run("bash", os.path.join(ROOT, "ci", "gpu_tests.sh"), *(session.posargs or ["-m", "gpu"]), external=True)


@nox.session
def demo(session):
    """The main job: our kernels against the peers (on a machine without a GPU: compile for sm_90a and say so)."""
    _install_cpu_torch(session)
    session.install(f"nvidia-cutlass-dsl=={LANES[-1]}", "matplotlib")
    dist = _build_wheels(session)
    session.install("--find-links", dist, *glob.glob(os.path.join(dist, "*.whl")))
    session.chdir(ROOT)
    session.run("python", os.path.join(ROOT, "benchmarks", "run_all.py"), *session.posargs, env={"CUTE_DSL_ARCH": "sm_90a", "PYTHONPATH": ""})
