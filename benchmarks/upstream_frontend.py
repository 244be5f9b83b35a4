"""NVIDIA's cudnn frontend (``nvidia-cudnn-frontend`` 1.32.0, "upstream") as a column of our linear-attention tables,
timed in its own process.

Why a separate process: upstream installs a top-level ``cudnn`` package, the import name of this project, so the two
can never share a ``sys.path``. The **runner** (this file run as a script) imports only upstream's ``cudnn`` (it
refuses to run if the ``cudnn`` it imports is not the one the ``nvidia-cudnn-frontend`` wheel installed), builds the
inputs with the benchmark files' own helpers (``linear_attention.py::_delta_rule_inputs`` for the forward,
``linear_attention_bwd.py::inputs`` for the backward: neither file imports ``cudnn``), times upstream with
``harness.time_ms`` and writes a JSON. The **provider** (``upstream_provider``) runs the runner once per table in a
subprocess whose ``PYTHONPATH`` holds upstream's bundle and none of our ``src`` trees, and hands each cell back to
``harness.run_benchmark`` as a ``harness.Measured``.

Convention (stated in every table this column appears in, via each cell's note): upstream's time is measured in its
own process on the same GPU, with the same inputs (the same helpers, the same seeds), the same flags as the other
providers of the table and the same timing method (``harness.time_ms``: triton ``do_bench`` median after warm-up, L2
cleared before each run); ``--graph`` replays the call from a CUDA graph, as the tables' ``+graph`` columns do.

What is timed (upstream's public torch ops, ``cudnn.linear_attention.kimi_delta_attention`` /
``gated_delta_net``, THD: the benchmark's [1, T, H, D] tensors viewed as [T, H, D], ``cu_seqlens`` int32, [0, T] for
a dense case):

- ``fwd``: one forward call, ``use_qk_l2norm_in_kernel=True`` (the forward tables' flag), no states. Upstream
  allocates ``o`` and its workspace per call through torch's caching allocator (as our public op does).
- ``bwd``: ``torch.autograd.grad(o, (q, k, v, g, beta), do, retain_graph=True)`` on one forward's output (the
  forward runs once at build), exactly like the backward table's ``fla`` and ``ours-autograd`` columns
  (``linear_attention_bwd.py::_autograd`` / ``_autograd_graphed``). KDA: q, k L2-normalised on the host, in-kernel
  norm off (the backward table's KDA convention; upstream's sm90 KDA backward also declines the in-kernel norm).

Upstream on sm_90 (read from the 1.32.0 wheel): KDA is served by two Hopper engines, ranked ``kda_hopper_cuda``
(NVRTC-compiled CUDA C++, forward and backward; needs ``cuda-bindings`` NVRTC and ``cuda_bf16.h``) then
``kda_hopper`` (CuTe DSL, forward only, no in-kernel L2 norm); ``kda_cutile`` needs the ``cuda.tile`` runtime. GDN has
no Hopper engine (FROST is sm100-only, cuTile needs ``cuda.tile``): upstream declines it and the cell says why. Each
cell's note names the engine that served it (``graph.selected_engine``).

Runner (by hand; the provider does this for you):

    mkdir -p /tmp/upstream_site && tar xJf .gpu-host/upstream/*.tar.xz -C /tmp/upstream_site
    PYTHONPATH=/tmp/upstream_site:benchmarks:shared:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages \\
        python3 benchmarks/upstream_frontend.py kda --direction fwd --cases 8192x16,32768x64,32768x32v --json /tmp/up.json

``--cases``: comma-separated ``TxH`` (dense, B = 1) or ``TxHv`` (the varlen mix of 64 sequences summing to T);
``--graph``: CUDA-graph replay; ``--plan-name``: pin one upstream engine (e.g. ``kda_hopper``); ``--dry-run``: import
and JSON plumbing only, no GPU (the CPU test's). JSON: ``{"ms": {label: ms}, "failed": {label: reason},
"served_by": {label: engine}, "upstream": version, "cudnn_file": path, ...}``.

Provider (in a benchmark file, next to the table's other providers):

    from upstream_frontend import upstream_provider
    providers.append(upstream_provider("kda", "fwd", cases))             # column "upstream"
    providers.append(upstream_provider("kda", "fwd", cases, graph=True)) # column "upstream+graph"

The bundle: ``CUDNN_UPSTREAM_SITE`` names an unpacked upstream folder; unset, ``/tmp/upstream_site``, unpacked on first
use from ``.gpu-host/upstream/*.tar.xz`` (``../shared/gpu-host/pack --upstream``). Missing bundle, an upstream decline,
a runner failure or timeout (``CUDNN_UPSTREAM_TIMEOUT`` seconds, default 300): the cell is ``Unsupported`` with the
reason, and the table still prints.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

_BENCH = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH)
sys.path.insert(0, _BENCH)

from harness import Case, Measured, Provider, Unsupported  # noqa: E402

UPSTREAM_VERSION = "1.32.0"
ENV_SITE = "CUDNN_UPSTREAM_SITE"
ENV_TIMEOUT = "CUDNN_UPSTREAM_TIMEOUT"
DEFAULT_SITE = "/tmp/upstream_site"
BUNDLE_DIR = os.path.join(_ROOT, ".gpu-host", "upstream")
FAMILIES = {"kda": "kimi_delta_attention", "gdn": "gated_delta_net"}  # upstream's public op per family
DIRECTIONS = ("fwd", "bwd")
_SPEC = re.compile(r"^(\d+)x(\d+)(v?)$")


# -- cases: one spelling shared by the runner and the provider -------------------------------------------------------
def parse_spec(spec: str) -> dict:
    """``"8192x16"`` -> ``{"t": 8192, "h": 16, "varlen": False}``; ``"32768x32v"``: the varlen mix. ValueError otherwise."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"case spec {spec!r}: expected TxH (dense, B=1) or TxHv (varlen mix of 64 sequences), e.g. 8192x16")
    return {"t": int(m.group(1)), "h": int(m.group(2)), "varlen": bool(m.group(3))}


def case_spec(case: Case) -> str:
    """The runner's spelling of a benchmark case (its ``t``, ``h`` and ``varlen`` params)."""
    p = case.params
    return f"{p['t']}x{p['h']}{'v' if p['varlen'] else ''}"


def case_label(family: str, direction: str, spec: str) -> str:
    """The label the forward / backward benchmark files give this case (``kda fwd T8k H16``, ``kda bwd varlen64 T32k H32``)."""
    p = parse_spec(spec)
    return f"{family} {direction} {'varlen64 ' if p['varlen'] else ''}T{p['t'] // 1024}k H{p['h']}"


def make_case(family: str, direction: str, spec: str) -> Case:
    return Case(case_label(family, direction, spec), parse_spec(spec))


# -- the runner (its own process, upstream's cudnn only) -------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="time NVIDIA's cudnn frontend (its own process) on our benchmark's linear-attention cases")
    ap.add_argument("family", choices=sorted(FAMILIES))
    ap.add_argument("--direction", choices=DIRECTIONS, default="fwd")
    ap.add_argument("--cases", required=True, help="comma-separated TxH (dense) or TxHv (varlen mix), e.g. 8192x16,32768x32v")
    ap.add_argument("--json", required=True, help="where the results go")
    ap.add_argument("--graph", action="store_true", help="time a CUDA-graph replay of the call")
    ap.add_argument("--plan-name", default=None, help="pin one upstream engine by name (e.g. kda_hopper_cuda)")
    ap.add_argument("--dry-run", action="store_true", help="import and JSON plumbing only: no GPU, nothing timed")
    args = ap.parse_args(argv)
    try:
        args.specs = [s.strip() for s in args.cases.split(",") if s.strip()]
        for s in args.specs:
            parse_spec(s)
    except ValueError as exc:
        ap.error(str(exc))
    if not args.specs:
        ap.error("--cases is empty")
    return args


def import_upstream():
    """Upstream's ``cudnn``, refusing any other: the module must sit next to the ``nvidia_cudnn_frontend`` dist-info
    (and, with ``CUDNN_UPSTREAM_SITE`` set, inside that folder). Raises RuntimeError otherwise."""
    import cudnn

    where = os.path.dirname(os.path.dirname(os.path.abspath(cudnn.__file__)))
    if not glob.glob(os.path.join(where, "nvidia_cudnn_frontend-*.dist-info")):
        raise RuntimeError(f"the cudnn imported from {cudnn.__file__} is not NVIDIA's nvidia-cudnn-frontend: this runner must not see this project's cudnn")
    site = os.environ.get(ENV_SITE)
    if site and os.path.realpath(where) != os.path.realpath(site):
        raise RuntimeError(f"upstream cudnn came from {where}, not {ENV_SITE}={site}")
    return cudnn


def _thd(x):
    """The benchmark's [1, T, ...] tensor as upstream's THD [T, ...]: a view of the same storage, a fresh autograd leaf."""
    return x[0].detach()


def upstream_forward(family: str, direction: str, plan_name=None):
    """``forward(case) -> (run, leaves, do)`` on upstream's public op, with the benchmark file's inputs of ``direction``
    (the shape ``linear_attention_bwd.py::_autograd`` takes)."""

    def forward(case):
        import torch

        import cudnn.linear_attention as la

        if direction == "fwd":
            from linear_attention import _delta_rule_inputs

            i, l2norm = _delta_rule_inputs(case, family == "kda"), True
            do = None
        else:
            from linear_attention_bwd import FAMILIES as BWD
            from linear_attention_bwd import inputs

            i, l2norm = inputs(case, family), BWD[family].l2norm
            do = _thd(i["do"])
        leaves = tuple(_thd(i[n]) for n in ("q", "k", "v", "g", "beta"))
        if direction == "bwd":
            for x in leaves:
                x.requires_grad_()
        t = leaves[0].shape[0]
        cu = i["cu"] if i["cu"] is not None else torch.tensor([0, t], dtype=torch.int32, device=leaves[0].device)
        fn = getattr(la, FAMILIES[family])
        kw = {"plan_name": plan_name} if plan_name else {}
        return (lambda: fn(*leaves, cu, use_qk_l2norm_in_kernel=l2norm, **kw)[0]), leaves, do

    return forward


def _make(family: str, direction: str, graph: bool, plan_name=None):
    """``make(case) -> callable`` for the runner, built from the benchmark files' own wrappers: forward ``_graphed``,
    backward ``_autograd`` / ``_autograd_graphed`` (what the ``fla`` and ``ours-autograd`` columns use)."""
    from linear_attention import _graphed
    from linear_attention_bwd import _autograd, _autograd_graphed

    forward = upstream_forward(family, direction, plan_name)
    if direction == "bwd":
        return (_autograd_graphed if graph else _autograd)(forward)

    def make(case):
        run, _, _ = forward(case)
        return run

    return _graphed(make) if graph else make


def _plan_keys(cudnn, family):
    import importlib

    mod = importlib.import_module(f"cudnn.linear_attention.ops.{family}")
    return {name: set(getattr(mod, name, {})) for name in ("fprop_cache", "bprop_cache")}, mod


def _served_by(cudnn, family, before) -> str:
    """The engines of the upstream graphs this case added to the op's plan caches (``graph.selected_engine.name``;
    None is the cuDNN backend), e.g. ``fwd kda_hopper_cuda, bwd kda_hopper_cuda``."""
    try:
        _, mod = _plan_keys(cudnn, family)
        out = []
        for name, tag in (("fprop_cache", "fwd"), ("bprop_cache", "bwd")):
            cache = getattr(mod, name, {})
            for key in set(cache) - before.get(name, set()):
                eng = cache[key][0].selected_engine
                out.append(f"{tag} {eng.name if eng is not None else 'cudnn backend'}")
        return ", ".join(sorted(set(out)))
    except Exception as exc:  # noqa: BLE001 - a label, never a reason to lose the timing
        return f"engine unknown ({type(exc).__name__})"


def _reason(exc: BaseException) -> str:
    kind = "declined" if isinstance(exc, NotImplementedError) or "NotSupported" in type(exc).__name__ else "error"
    return f"{kind}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def _write(out: dict, path: str) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _environment(cudnn) -> dict:
    env = {"upstream": getattr(cudnn, "__version__", "?"), "cudnn_file": os.path.abspath(cudnn.__file__)}
    try:
        import torch

        env["torch"] = torch.__version__
        env["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except Exception as exc:  # noqa: BLE001
        env["device"] = f"torch unavailable: {type(exc).__name__}"
    return env


def run(args) -> dict:
    """Time every case of ``args`` (``parse_args``) and write the JSON after each one (a killed runner leaves the cases
    it finished). Returns the JSON's dict."""
    out = {"family": args.family, "direction": args.direction, "graph": bool(args.graph), "plan_name": args.plan_name, "ms": {}, "failed": {}, "served_by": {}}
    cases = [make_case(args.family, args.direction, s) for s in args.specs]
    try:
        cudnn = import_upstream()
    except Exception as exc:  # noqa: BLE001 - every cell gets the reason; the guard's RuntimeError exits non-zero
        out["failed"] = {c.label: f"upstream import failed: {type(exc).__name__}: {exc}"[:400] for c in cases}
        _write(out, args.json)
        raise RuntimeError(out["failed"][cases[0].label]) from exc
    out.update(_environment(cudnn))
    if args.dry_run:
        out["failed"] = {c.label: "dry run: nothing timed" for c in cases}
        _write(out, args.json)
        return out
    import time

    import torch
    from harness import time_ms

    make = _make(args.family, args.direction, args.graph, args.plan_name)
    _write(out, args.json)
    for case in cases:
        start = time.perf_counter()
        fn = None
        try:
            before, _ = _plan_keys(cudnn, args.family)
            fn = make(case)
            fn()
            torch.cuda.synchronize()
            out["ms"][case.label] = time_ms(fn)
            out["served_by"][case.label] = _served_by(cudnn, args.family, before)
            print(f"upstream {case.label}: {out['ms'][case.label]:.4f} ms ({out['served_by'][case.label]}; {time.perf_counter() - start:.1f} s)", flush=True)
        except Exception as exc:  # noqa: BLE001 - one case's failure is that cell's reason, never the table's
            out["failed"][case.label] = _reason(exc)
            print(f"upstream {case.label}: {out['failed'][case.label]}", flush=True)
        finally:
            del fn
            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - a poisoned context shows in the next case's reason
                pass
        _write(out, args.json)
    return out


# -- the provider (our benchmark's process) --------------------------------------------------------------------------
def upstream_site() -> str:
    return os.environ.get(ENV_SITE) or DEFAULT_SITE


def _site_ok(site: str) -> bool:
    return os.path.isfile(os.path.join(site, "cudnn", "__init__.py")) and bool(glob.glob(os.path.join(site, "nvidia_cudnn_frontend-*.dist-info")))


def bundle_reason(site: str | None = None) -> str | None:
    """None when ``site`` (default ``upstream_site()``) holds upstream's package; otherwise why not. The default site
    is unpacked here on first use from ``.gpu-host/upstream/*.tar.xz``."""
    site = site or upstream_site()
    if _site_ok(site):
        return None
    if os.environ.get(ENV_SITE):
        return f"no nvidia-cudnn-frontend in {ENV_SITE}={site}"
    bundles = sorted(glob.glob(os.path.join(BUNDLE_DIR, "*.tar.xz")))
    if not bundles:
        return f"upstream bundle missing: neither {site} nor {BUNDLE_DIR}/*.tar.xz (../shared/gpu-host/pack --upstream)"
    os.makedirs(site, exist_ok=True)
    for b in bundles:
        done = subprocess.run(["tar", "xJf", b, "-C", site], capture_output=True, text=True)
        if done.returncode:
            return f"unpacking {b} into {site} failed: {done.stderr.strip()[-200:]}"
    return None if _site_ok(site) else f"{bundles} unpacked into {site} holds no nvidia-cudnn-frontend"


def _holds_cudnn(path: str) -> bool:
    """A folder with a ``cudnn`` directory: our core's package or a family's ``__init__``-less part of it."""
    return os.path.isdir(os.path.join(path, "cudnn"))


def child_env(site: str, base: dict | None = None) -> dict:
    """The runner's environment: ``PYTHONPATH`` = upstream's site, benchmarks/, shared/ (``cudnn_testing``), then the
    caller's entries minus every folder holding a ``cudnn`` package (our ``packages/*/src`` trees); DSL and peers stay."""
    env = dict(os.environ if base is None else base)
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not _holds_cudnn(p)]
    head = [site, _BENCH, os.path.join(_ROOT, "shared")]
    env["PYTHONPATH"] = os.pathsep.join(head + [p for p in keep if p not in head])
    env[ENV_SITE] = site
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_runner(
    family: str,
    direction: str,
    specs: list[str],
    *,
    graph: bool = False,
    site: str | None = None,
    timeout: float | None = None,
    dry_run: bool = False,
    out_path: str | None = None,
) -> dict:
    """Run the runner in a subprocess over ``specs`` and return its JSON. A failed, timed-out or silent runner still
    returns a dict: the cases it did not finish carry the reason in ``failed``."""
    site = site or upstream_site()
    timeout = float(os.environ.get(ENV_TIMEOUT, "300")) if timeout is None else timeout
    tag = f"{family}_{direction}{'_graph' if graph else ''}"
    out_path = out_path or os.path.join(tempfile.gettempdir(), f"cudnn_upstream_{tag}.json")
    log_path = out_path[: -len(".json")] + ".log" if out_path.endswith(".json") else out_path + ".log"
    if os.path.exists(out_path):
        os.remove(out_path)
    cmd = [sys.executable, os.path.abspath(__file__), family, "--direction", direction, "--cases", ",".join(specs), "--json", out_path]
    cmd += ["--graph"] if graph else []
    cmd += ["--dry-run"] if dry_run else []
    print(f"upstream: {len(specs)} {family} {direction} case(s) in a separate process (log {log_path})", flush=True)
    why = None
    with open(log_path, "w") as log:
        try:
            done = subprocess.run(cmd, env=child_env(site), stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=_ROOT)
            if done.returncode:
                why = f"runner exited with {done.returncode}"
        except subprocess.TimeoutExpired:
            why = f"runner timed out after {timeout:g} s"
    data = {"ms": {}, "failed": {}, "served_by": {}}
    try:
        with open(out_path) as f:
            data.update(json.load(f))
    except (OSError, ValueError) as exc:
        why = why or f"runner wrote no JSON ({type(exc).__name__})"
    if why:
        with open(log_path) as f:
            tail = " | ".join(line.strip() for line in f.read().strip().splitlines()[-3:])
        for s in specs:
            label = case_label(family, direction, s)
            if label not in data["ms"]:
                data["failed"].setdefault(label, f"{why}: {tail}"[:400])
    return data


def lookup(data: dict, family: str, direction: str, spec: str) -> Measured:
    """One cell from the runner's JSON: ``Measured(ms, note)``, or ``Unsupported`` with upstream's reason."""
    label = case_label(family, direction, spec)
    version = data.get("upstream", UPSTREAM_VERSION)
    if label in data.get("ms", {}):
        served = data.get("served_by", {}).get(label)
        note = f"upstream {version} timed in its own process (same GPU, inputs, timing)" + (f"; served by {served}" if served else "")
        return Measured(float(data["ms"][label]), note)
    reason = data.get("failed", {}).get(label, "the runner did not report this case")
    raise Unsupported(f"upstream {version}: {reason}")


def upstream_provider(
    family: str, direction: str, cases: list[Case] | None = None, *, graph: bool = False, name: str | None = None, timeout: float | None = None
) -> Provider:
    """``Provider("upstream")`` (``"upstream+graph"`` with ``graph``) for a table of ``family`` / ``direction`` cases:
    the first ``make(case)`` runs the runner once over ``cases`` (the table's list; without it, over that case alone)
    and caches the JSON; every ``make`` returns a ``harness.Measured`` or raises ``Unsupported`` (bundle missing,
    upstream declines, runner failed)."""
    if family not in FAMILIES or direction not in DIRECTIONS:
        raise ValueError(f"upstream_provider: family in {sorted(FAMILIES)}, direction in {DIRECTIONS}; got {family!r}, {direction!r}")
    state: dict = {"data": {"ms": {}, "failed": {}, "served_by": {}}, "ran": set()}

    def make(case):
        reason = bundle_reason()
        if reason:
            raise Unsupported(reason)
        spec = case_spec(case)
        if spec not in state["ran"]:
            specs = [spec] + [s for s in dict.fromkeys(case_spec(c) for c in cases or []) if s != spec and s not in state["ran"]]
            data = run_runner(family, direction, specs, graph=graph, timeout=timeout)
            for key in ("ms", "failed", "served_by"):
                state["data"][key].update(data.get(key, {}))
            state["data"].update({k: v for k, v in data.items() if k not in ("ms", "failed", "served_by")})
            state["ran"].update(specs)
        return lookup(state["data"], family, direction, spec)

    return Provider(name or ("upstream+graph" if graph else "upstream"), make)


if __name__ == "__main__":
    try:
        run(parse_args())
    except RuntimeError as exc:
        sys.exit(f"upstream_frontend: {exc}")
