"""cudnn.linear_attention backward benchmark (issue #7): the Kimi Delta Attention backward against fla's ``chunk_kda``
backward (target: >= 3x fla) and the Gated DeltaNet backward against our own GDN forward (target: backward within 3x
of the forward; fla's GDN backward is refused on Hopper with Triton < 3.7.1, fla issue #640: wrong results).

Shapes (issue #7): B = 1, T in {4k, 8k, 32k}, H in {16, 32, 64}, K = V = 128, plus a varlen mix (64 sequences of
random lengths summing to T = 32k, H = 32; ``linear_attention.py::_lengths``). ``--quick``: T 8k H 16 only.

Inputs (``linear_attention.py::_delta_rule_inputs``, seed 0, the forward benchmark's): q, k, v [1, T, H, 128] bf16, g
fp32 (GDN ``logsigmoid(N(0, 1)) / 8`` [1, T, H]; KDA per channel ``-5 sigmoid(N(0, 1))`` [1, T, H, K], fla's safe-gate
range), beta ~ U(0, 1) fp32 [1, T, H], ``do`` ~ N(0, 1) bf16 (seed 1), no initial state, no final state. L2 norm of q, k:
GDN in the kernel (``use_qk_l2norm_in_kernel=True``, the training configuration; the forward row the same); KDA on the
host before timing (our KDA backward declines the in-kernel L2 norm, Rule 2), the same normalised q, k for fla, whose
in-kernel norm is then off too. Every provider builds its own copy of the same inputs.

Providers (all on the same inputs in one process; the harness's median after warm-up, L2 cleared before each run):

- ``ours``: the backward adapter (``KimiDeltaAttentionBwdSm90`` / ``GatedDeltaNetBwdSm90``) compiled once, outputs and
  the workspace allocated once at build (R2), then ``execute`` per call: the kernel cost (three launches) plus the
  adapter's host validation;
- ``ours+graph``: the same execute replayed from a CUDA graph (no host overhead);
- ``ours-autograd``: ``torch.autograd.grad(o, (q, k, v, g, beta), do, retain_graph=True)`` through the public op
  (``kimi_delta_attention`` / ``gated_delta_net``; its registered backward is ``torch.ops.cudnn_linear_attention.*_bwd``):
  what a training step pays for the backward (autograd engine, the op's output and workspace allocations through the
  caching allocator, the launches); the forward runs once at build, outside the timed call;
- ``ours-autograd+graph``: that backward captured in a CUDA graph (the forward run on the capture stream, so autograd
  issues the backward there) and replayed;
- ``ours-fwd`` / ``ours-fwd+graph``: our forward adapter (the public op's default schedule,
  ``_host/chunk_parallel.py::DEFAULT_SCHEDULE``, its workspace allocated once), eager / graph-replayed: the GDN
  denominator of the 3x target (KDA too, for context);
- ``fla`` / ``fla+graph``: fla's backward through ``torch.autograd.grad`` on fla's forward outputs (``chunk_kda`` /
  ``chunk_gated_delta_rule``, same inputs, same flags), eager / captured like ``ours-autograd+graph``;
- ``fla-safe`` (KDA only, full grid): fla with ``safe_gate=True`` (its M=16 tensor-core path for gates in [-5, 0),
  which these gates are); not in ``--quick`` (a second autotune).

Byte convention (the minimum traffic of a backward, the roofline's numerator): q, k, v, do read and dq, dk, dv written
once in bf16; g, beta read and dg, dbeta written once in fp32: GDN ``T * H * (7 * D * 2 + 16)``, KDA (g, dg per key
channel) ``T * H * (7 * D * 2 + 2 * (4 * K + 4))`` (D = K = V = 128). No workspace traffic is counted: the roofline
fraction is GB/s over the device's HBM bandwidth (``HBM_GBPS``, 4.8 TB/s on an H200). The GB/s of the ``ours-fwd`` rows
uses the backward's bytes too: read those rows in ms. After the table, the md file gets the verdict lines (KDA: fla
time over ours, autograd and graph matched; GDN: backward time over forward time, eager and graph matched) and the
roofline fractions.

Per-kernel profile (``--profile``, like ``linear_attention_kernels.py``): ``ours`` (the three or four backward kernels),
``ours-fwd`` and, KDA, ``fla``, each warmed, then ``--iters`` calls under torch.profiler; every kernel's mean device time
per call, our kernels named by pass (states, dstates, grads, qk_reduce), with each pass's memory floor (``pass_bytes``:
every array a pass is handed read or written once, workspace included, at 4.8 TB/s).

    source ci/gpu_env.sh
    python3 benchmarks/linear_attention_bwd.py kda --quick        # T8k H16: docs/benchmarks/linear_attention_bwd_kda_quick.{md,csv,png}
    python3 benchmarks/linear_attention_bwd.py gdn --quick        # docs/benchmarks/linear_attention_bwd_gdn_quick.{md,csv,png}
    python3 benchmarks/linear_attention_bwd.py                    # full grid: linear_attention_bwd_{kda,gdn}.{md,csv,png}
    python3 benchmarks/linear_attention_bwd.py kda --providers ours,ours-autograd,fla
    python3 benchmarks/linear_attention_bwd.py --profile --t 8192 --h 16   # docs/benchmarks/linear_attention_bwd_kernels.md
    python3 benchmarks/linear_attention_bwd.py --quick --profile-after     # both quick tables, then the kernel table (one compile)

Every (case, provider) prints a progress line once built and warmed (first call: our compile or fla's autotune).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, Result, capture, device_times, run_benchmark  # noqa: E402
from linear_attention import GDN_D, _delta_rule_inputs, _graphed, _select  # noqa: E402

HBM_GBPS = 4800.0  # H200 HBM3e, about 4.8 TB/s
CHUNK = 64
KDA_TARGET = 3.0  # issue #7: KDA backward >= 3x fla's
GDN_TARGET = 3.0  # issue #7: GDN backward within 3x of our GDN forward
OUT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")


@dataclasses.dataclass(frozen=True)
class Family:
    """What differs between the two backwards: names, gate shape, the in-kernel L2 norm used, fla's entry point."""

    name: str
    public: str  # the public op under cudnn.linear_attention.<name>.api
    fwd_adapter: str
    bwd_adapter: str
    per_key_gate: bool
    l2norm: bool  # use_qk_l2norm_in_kernel for every provider of the family
    fla_module: str
    fla_fn: str
    title: str


FAMILIES = {
    "kda": Family(
        "kda",
        "kimi_delta_attention",
        "KimiDeltaAttentionFwdSm90",
        "KimiDeltaAttentionBwdSm90",
        True,
        False,
        "fla.ops.kda",
        "chunk_kda",
        "Kimi Delta Attention backward (bf16, K=V=128)",
    ),
    "gdn": Family(
        "gdn",
        "gated_delta_net",
        "GatedDeltaNetFwdSm90",
        "GatedDeltaNetBwdSm90",
        False,
        True,
        "fla.ops.gated_delta_rule",
        "chunk_gated_delta_rule",
        "Gated DeltaNet backward (bf16, K=V=128)",
    ),
}

SHAPES = [(t, h) for t in (4096, 8192, 32768) for h in (16, 32, 64)]
VARLEN = (32768, 32)  # 64 sequences (linear_attention.py::_lengths)
QUICK = (8192, 16)


# -- byte convention -------------------------------------------------------------------------------------------------
def bwd_bytes(family: str, t: int, h: int, d: int = GDN_D) -> int:
    """Minimum traffic of one backward: q, k, v, do read and dq, dk, dv written in bf16 (7 D 2 per token and head);
    g, beta read and dg, dbeta written in fp32 (GDN 16; KDA, gates per key channel, 2 (4 K + 4))."""
    gates = 2 * (4 * d + 4) if FAMILIES[family].per_key_gate else 16
    return t * h * (7 * d * 2 + gates)


def pass_bytes(family: str, t: int, h: int, n: int = 1, d: int = GDN_D) -> dict[str, int]:
    """Per-pass floor of our backward: every array a pass is handed (``bwd_api.py::_launch``), inputs and workspace,
    read or written once. ``S`` a bf16 [N + T // 64 + 1, H, V, K] chunk-state array (ws_h / ws_dh), ``X`` a bf16
    [T, H, D] array (q, k, v, do, dq, dk, dv, ws_vn, ws_dvn), ``tile`` a bf16 [N + T // 64 + 1, H, 64, 64] per-chunk
    tile (Tm; KDA also P), ``gb`` g and beta (or dg and dbeta) in fp32. A lower bound of each pass's traffic: the
    states passes re-read k, g, beta per 64-row V slice (two CTAs per head at V = 128); GDN ``store_tm`` (default), no GVA."""
    slots = n + t // CHUNK + 1
    kda = FAMILIES[family].per_key_gate
    S, X, tile = slots * h * d * d * 2, t * h * d * 2, slots * h * CHUNK * CHUNK * 2
    gb = t * h * ((4 * d if kda else 4) + 4)
    tiles = 2 if kda else 1
    states = (3 if kda else 2) * X + gb + S + X + tiles * tile  # (q,) k, v, g, beta -> ws_h, ws_vn, Tm (, P)
    dstates = 3 * X + gb + tiles * tile + S + X  # q, k, do, g, beta, Tm (, P) -> ws_dh, ws_dvn
    grads = 4 * X + gb + 2 * S + 2 * X + tile + 3 * X + gb  # q, k, v, do, g, beta, S0, dS1, Vn, dVn, Tm -> dq, dk, dv, dg, dbeta
    return {"states": states, "dstates": dstates, "grads": grads}


def cases(family: str, quick: bool = False) -> list[Case]:
    """The issue's grid (T x H) and the varlen mix; ``quick``: T 8k H 16 only."""
    out = [Case(f"{family} bwd T{t // 1024}k H{h}", {"t": t, "h": h, "varlen": False}, bytes=bwd_bytes(family, t, h)) for t, h in SHAPES]
    t, h = VARLEN
    out.append(Case(f"{family} bwd varlen64 T{t // 1024}k H{h}", {"t": t, "h": h, "varlen": True}, bytes=bwd_bytes(family, t, h)))
    if quick:
        out = [c for c in out if (c.params["t"], c.params["h"]) == QUICK and not c.params["varlen"]]
    return out


def convention(family: str) -> str:
    f = FAMILIES[family]
    gate = "per-channel g = -5 sigmoid(N(0,1)) [T,H,K]" if f.per_key_gate else "g = logsigmoid(N(0,1))/8 [T,H]"
    norm = "q/k L2 norm in the kernel" if f.l2norm else "q/k L2-normalised on the host (in-kernel norm off for every provider)"
    traffic = "T*H*(7*D*2 + 2*(4*K + 4))" if f.per_key_gate else "T*H*(7*D*2 + 16)"
    return (
        f"{f.name.upper()} backward, B=1, K=V=128, bf16 q/k/v/do, fp32 {gate} and beta, {norm}, no states; "
        f"effective bytes {traffic} (q, k, v, do read, dq, dk, dv written, bf16; g, beta read, dg, dbeta written, fp32); "
        f"roofline fraction = GB/s / {HBM_GBPS:.0f}; ours-fwd rows: our forward, read in ms (its GB/s uses the backward's bytes)"
    )


# -- inputs ----------------------------------------------------------------------------------------------------------
def inputs(case: Case, family: str) -> dict:
    """The forward benchmark's inputs (seed 0) plus ``do`` (seed 1); KDA's q, k L2-normalised on the host."""
    import torch
    import torch.nn.functional as F

    f = FAMILIES[family]
    i = _delta_rule_inputs(case, f.per_key_gate)
    if not f.l2norm:
        i["q"] = F.normalize(i["q"].float(), dim=-1).to(torch.bfloat16)
        i["k"] = F.normalize(i["k"].float(), dim=-1).to(torch.bfloat16)
    gen = torch.Generator(device="cuda").manual_seed(1)
    i["do"] = torch.randn(i["v"].shape, generator=gen, device="cuda", dtype=torch.bfloat16)
    return i


def bwd_plan(family: str, t: dict):
    """The backward adapter over ``t`` (torch tensors or TensorDescs: q, k, v, g, beta, do, dq, dk, dv, dg, dbeta and
    ``cu`` or None), with the family's L2-norm flag, no states."""
    import importlib

    f = FAMILIES[family]
    cls = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api"), f.bwd_adapter)
    args = [t[n] for n in ("q", "k", "v", "g", "beta", "do", "dq", "dk", "dv", "dg", "dbeta")]
    return cls(*args, use_qk_l2norm_in_kernel=f.l2norm, cu_seqlens=t["cu"])


# -- providers -------------------------------------------------------------------------------------------------------
def workspace(nbytes: int, device):
    """The caller's workspace (R2): allocated once at build, outside the timed call."""
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def _make_ours(family):
    def make(case):
        import torch

        i = inputs(case, family)
        i.update(dq=torch.empty_like(i["q"]), dk=torch.empty_like(i["k"]), dv=torch.empty_like(i["v"]))
        i.update(dg=torch.empty_like(i["g"]), dbeta=torch.empty_like(i["beta"]))
        plan = bwd_plan(family, i)
        plan.compile()
        ws = workspace(plan.scratch_workspace_bytes(), i["q"].device)
        args = [i[n] for n in ("q", "k", "v", "g", "beta", "do", "dq", "dk", "dv", "dg", "dbeta")]
        return lambda: plan.execute(*args, None, None, None, i["cu"], workspace=ws)

    return make


def _make_ours_p1(family, pass2: bool = False, pass1: bool = True, hilo: bool = True, fold: bool = False, grads_v2: bool = False, mn: bool = False):
    """An A/B plan with every schedule knob set explicitly (``ours`` is the defaults: ``parallel_pass1``,
    ``parallel_pass2``, ``fold_prep_tm`` and ``grads_v2`` on: KDA since session 10, GDN's ``grads_v2`` since 11). ``pass1`` False
    (``ours-serial``): the serial pass 1 (and so no pass 2 / fold). ``pass2``: ``plan.parallel_pass2`` (pass 2 as the
    per-chunk precompute ``{kda,gdn}/bwd_dstates_parallel_kernel.py`` + the reverse state chain
    ``_device/dstates_parallel.py``). ``fold``: ``plan.fold_prep_tm`` (pass 1b as copies of the forward prep's / state
    pass's arrays, the prep writing Tm too). ``grads_v2``: pass 3 version 2 (``{kda,gdn}/chunk_bwd_v2_kernel.py``, the
    default of both). ``mn`` (with ``grads_v2``): ``plan.mn_operands`` (pass 3 v2 with MN-major operands in place
    of transposed copies; GDN's default since session 12, KDA's since session 29). KDA: ``hilo`` (``plan.dp_split_hilo``; False is session 6's pass 3 operands)."""

    def make(case):
        import torch

        i = inputs(case, family)
        i.update(dq=torch.empty_like(i["q"]), dk=torch.empty_like(i["k"]), dv=torch.empty_like(i["v"]))
        i.update(dg=torch.empty_like(i["g"]), dbeta=torch.empty_like(i["beta"]))
        plan = bwd_plan(family, i)
        plan.parallel_pass1 = pass1
        plan.parallel_pass2 = pass2 and pass1
        plan.fold_prep_tm = fold and pass1
        plan.grads_v2 = grads_v2
        if FAMILIES[family].per_key_gate:
            plan.dp_split_hilo = hilo
        plan.mn_operands = mn and grads_v2
        plan.compile()
        ws = workspace(plan.scratch_workspace_bytes(), i["q"].device)
        args = [i[n] for n in ("q", "k", "v", "g", "beta", "do", "dq", "dk", "dv", "dg", "dbeta")]
        return lambda: plan.execute(*args, None, None, None, i["cu"], workspace=ws)

    return make


def _make_fwd(family):
    def make(case):
        import importlib

        import torch

        from cudnn.linear_attention._host.chunk_parallel import DEFAULT_SCHEDULE

        f = FAMILIES[family]
        i = inputs(case, family)
        cls = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), f.fwd_adapter)
        o = torch.empty_like(i["v"])
        plan = cls(i["q"], i["k"], i["v"], i["g"], i["beta"], o, use_qk_l2norm_in_kernel=f.l2norm, cu_seqlens=i["cu"], schedule=DEFAULT_SCHEDULE)
        plan.compile()
        n = plan.scratch_workspace_bytes()
        ws = workspace(n, i["q"].device) if n else None
        return lambda: plan.execute(i["q"], i["k"], i["v"], i["g"], i["beta"], o, None, None, i["cu"], workspace=ws)

    return make


def _ours_forward(family):
    """``(run forward -> o, leaves, do)`` through the public op (what ``ours-autograd`` differentiates)."""

    def forward(case):
        import importlib

        f = FAMILIES[family]
        fn = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), f.public)
        i = inputs(case, family)
        leaves = tuple(i[n].requires_grad_() for n in ("q", "k", "v", "g", "beta"))
        return (lambda: fn(*leaves, use_qk_l2norm_in_kernel=f.l2norm, cu_seqlens=i["cu"])[0]), leaves, i["do"]

    return forward


def _fla_forward(family, **kw):
    """``(run forward -> o, leaves, do)`` through fla's ``chunk_kda`` / ``chunk_gated_delta_rule`` (cu_seqlens int64)."""

    def forward(case):
        import importlib

        f = FAMILIES[family]
        fn = getattr(importlib.import_module(f.fla_module), f.fla_fn)
        i = inputs(case, family)
        cu = i["cu"].long() if i["cu"] is not None else None
        leaves = tuple(i[n].requires_grad_() for n in ("q", "k", "v", "g", "beta"))
        return (lambda: fn(*leaves, use_qk_l2norm_in_kernel=f.l2norm, cu_seqlens=cu, **kw)[0]), leaves, i["do"]

    return forward


def _autograd(forward):
    """The backward alone: the forward runs once at build; each call is ``torch.autograd.grad`` of ``o`` (graph retained,
    gradients returned, not accumulated into ``.grad``)."""

    def make(case):
        import torch

        run, leaves, do = forward(case)
        o = run()
        return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)

    return make


def _autograd_graphed(forward):
    """The backward captured in a CUDA graph: autograd runs each backward op on its forward op's stream, so the forward
    runs on the capture stream (as ``torch.cuda.make_graphed_callables`` does); two warm-up backwards (our compile,
    fla's autotune) before the capture."""

    def make(case):
        import torch

        run, leaves, do = forward(case)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            o = run()

            def step():
                return torch.autograd.grad(o, leaves, do, retain_graph=True)

            step()
            step()
        torch.cuda.current_stream().wait_stream(stream)
        return capture(step, stream=stream)  # the replay holds step and so o (its autograd graph), the leaves and do

    return make


def _fla_available(family):
    def available():
        import importlib

        f = FAMILIES[family]
        try:
            getattr(importlib.import_module(f.fla_module), f.fla_fn)
        except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
            return f"fla not importable: {type(exc).__name__}: {exc}"[:200]
        if family == "gdn":
            reason = fla_gdn_refusal()
            if reason:
                return reason
        return None

    return available


def fla_gdn_refusal() -> str | None:
    """fla's own refusal of the gated GDN backward (``fla/ops/common/chunk_o.py::chunk_bwd_dqkwg``: Hopper, Triton in
    [3.4.0, 3.7.1), fla issue #640, wrong results) as a reason string, or None where fla would run it."""
    try:
        import fla.utils as fu
    except Exception:  # noqa: BLE001
        return None
    hopper, above_340, above_371 = (getattr(fu, n, None) for n in ("IS_NVIDIA_HOPPER", "TRITON_ABOVE_3_4_0", "TRITON_ABOVE_3_7_1"))
    if hopper and above_340 and above_371 is False:
        import triton

        return f"fla refuses the gated GDN backward on Hopper with Triton {triton.__version__} < 3.7.1 (fla #640: wrong results)"
    return None


def providers(family: str, quick: bool = False) -> list[Provider]:
    """Every provider of ``family`` (see the module docstring), in table order; ``upstream`` / ``upstream+graph``:
    NVIDIA's cudnn frontend 1.32 timed in its own process over the table's cases (``upstream_frontend.py``)."""
    from upstream_frontend import upstream_provider

    ours_fwd = _ours_forward(family)
    fla_ok = _fla_available(family)
    out = [
        Provider("ours", _make_ours(family)),
        Provider("ours+graph", _graphed(_make_ours(family))),
        Provider("ours-autograd", _autograd(ours_fwd)),
        Provider("ours-autograd+graph", _autograd_graphed(ours_fwd)),
        Provider("ours-fwd", _make_fwd(family)),
        Provider("ours-fwd+graph", _graphed(_make_fwd(family))),
        Provider("fla", _autograd(_fla_forward(family)), fla_ok),
        Provider("fla+graph", _autograd_graphed(_fla_forward(family)), fla_ok),
    ]
    if FAMILIES[family].per_key_gate:
        out.append(Provider("fla-safe", _autograd(_fla_forward(family, safe_gate=True)), fla_ok))
    table = cases(family, quick)
    out += [upstream_provider(family, "bwd", table), upstream_provider(family, "bwd", table, graph=True)]
    return out


#: Left out of ``--quick`` unless named in ``--providers``: a second fla autotune.
QUICK_SKIP = ("fla-safe",)


def opt_in_providers(family: str) -> list[Provider]:
    """A/B rows of the schedule knobs, selectable only by name (``--providers``; never in the default tables), each the
    default (``ours``) with parts turned off: ``ours-serial`` the serial passes 1-2 (session 8's default);
    ``ours-p1`` / ``ours-p1+graph`` the chunk-parallel pass 1 only; ``ours-p2`` / ``ours-p2+graph`` passes 1 and 2
    chunk-parallel; ``ours-fold`` ``ours-p2`` with ``fold_prep_tm``; ``ours-v1`` the default with pass 3 version 1
    (``ours-fold`` by another name: the row the ``grads_v2`` default is measured against); KDA: ``ours-p3``
    ``ours-p2`` with ``grads_v2``, ``ours-nohilo`` ``ours-v1`` with ``dp_split_hilo = False``; both: ``ours-nomn`` the
    default without ``mn_operands`` (pass 3 v2 with transposed copies)."""
    extra = [Provider("ours-v1", _make_ours_p1(family, pass2=True, fold=True))]
    if FAMILIES[family].per_key_gate:
        extra += [
            Provider("ours-nohilo", _make_ours_p1(family, pass2=True, fold=True, hilo=False)),
            Provider("ours-p3", _make_ours_p1(family, pass2=True, grads_v2=True)),
        ]
    extra += [Provider("ours-nomn", _make_ours_p1(family, pass2=True, fold=True, grads_v2=True))]
    return extra + [
        Provider("ours-fold", _make_ours_p1(family, pass2=True, fold=True)),
        Provider("ours-serial", _make_ours_p1(family, pass1=False)),
        Provider("ours-p1", _make_ours_p1(family)),
        Provider("ours-p1+graph", _graphed(_make_ours_p1(family))),
        Provider("ours-p2", _make_ours_p1(family, pass2=True)),
        Provider("ours-p2+graph", _graphed(_make_ours_p1(family, pass2=True))),
    ]


def selected(family: str, names: str, quick: bool) -> list[Provider]:
    """``providers(family)`` kept by ``--providers`` (comma-separated; empty: all, less ``QUICK_SKIP`` with ``--quick``)."""
    keep = [n for n in names.split(",") if n]
    known = providers(family, quick)
    known = known + (opt_in_providers(family) if keep else [])  # opt-in A/B rows only when named
    unknown = set(keep) - {p.name for p in known}
    if unknown:
        raise SystemExit(f"{family}: unknown providers {sorted(unknown)}; known {[p.name for p in known]}")
    out = [p for p in known if (p.name in keep if keep else not (quick and p.name in QUICK_SKIP))]
    return out


# -- verdict ---------------------------------------------------------------------------------------------------------
#: (numerator, denominator, label) per family: the issue's ratio, then the matched (autograd, graph) variants.
RATIOS = {
    "kda": (
        ("fla", "ours-autograd", "fla / ours-autograd"),
        ("fla+graph", "ours-autograd+graph", "fla+graph / ours-autograd+graph"),
        ("fla", "ours", "fla / ours"),
        ("upstream", "ours-autograd", "upstream / ours-autograd"),
        ("upstream+graph", "ours-autograd+graph", "upstream+graph / ours-autograd+graph"),
    ),
    "gdn": (
        ("ours", "ours-fwd", "bwd / fwd (ours / ours-fwd)"),
        ("ours+graph", "ours-fwd+graph", "bwd / fwd graphed"),
        ("ours-autograd", "ours-fwd", "ours-autograd / ours-fwd"),
    ),
}
ROOFLINE = ("ours", "ours+graph", "ours-autograd", "ours-autograd+graph", "fla", "fla+graph")


def verdict(family: str, case_list: list[Case], results: list[Result]) -> str:
    """Markdown appended under the table: per case the issue's ratios (KDA: fla time over ours, target >= 3; GDN: our
    backward's time over our forward's, target <= 3) and the roofline fractions (bytes / ms over ``HBM_GBPS``)."""
    by = {(r.case, r.provider): r.ms for r in results if r.ms}
    ratios = RATIOS[family]
    target = f">= {KDA_TARGET:g}x" if family == "kda" else f"<= {GDN_TARGET:g}x"
    head = ["case"] + [lab for _, _, lab in ratios] + [f"roofline {p}" for p in ROOFLINE]
    lines = [
        "",
        f"### issue #7 verdict ({family.upper()}: {ratios[0][2]} {target}) and roofline fractions",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for c in case_list:
        row = [c.label]
        for num, den, _ in ratios:
            a, b = by.get((c.label, num)), by.get((c.label, den))
            if a and b:
                x = a / b
                ok = x >= KDA_TARGET if family == "kda" else x <= GDN_TARGET
                row.append(f"{x:.2f}x {'meets' if ok else 'misses'}" if (num, den) == ratios[0][:2] else f"{x:.2f}x")
            else:
                row.append("-")
        for p in ROOFLINE:
            ms = by.get((c.label, p))
            row.append(f"{roofline_fraction(c.bytes, ms):.1%}" if ms and c.bytes else "-")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(f"roofline = effective bytes / ms over {HBM_GBPS:.0f} GB/s; the first ratio column is the issue's target.")
    return "\n".join(lines)


def roofline_fraction(nbytes: float, ms: float) -> float:
    """Achieved fraction of the HBM roofline: ``nbytes`` moved in ``ms`` milliseconds over ``HBM_GBPS``."""
    return nbytes / ms / 1e6 / HBM_GBPS


def output_name(family: str, quick: bool) -> str:
    return f"linear_attention_bwd_{family}" + ("_quick" if quick else "")


def run_family(family: str, args) -> list[Result]:
    case_list = cases(family, args.quick)
    name = output_name(family, args.quick)
    rounds = args.rounds if args.rounds else (3 if family == "gdn" else 1)
    print(f"{name}: {len(case_list)} cases, rounds {rounds}", flush=True)
    results = run_benchmark(
        name,
        case_list,
        _select(selected(family, args.providers, args.quick), ""),
        convention=convention(family),
        metric="ms",
        out_dir=args.out_dir,
        title=FAMILIES[family].title,
        rounds=rounds,
    )
    text = verdict(family, case_list, results)
    print(text)
    with open(os.path.join(args.out_dir, f"{name}.md"), "a") as fh:
        fh.write(text + "\n")
    return results


# -- per-kernel profile ----------------------------------------------------------------------------------------------
KERNELS = (
    ("dstates-prep", "BwdDStatesPrep_"),  # parallel_pass2: the precompute and the reverse chain
    ("dstates-chain", "BwdDStatesChain_"),
    ("states-par", "BwdStatesChunk_"),  # parallel_pass1's pass 1
    ("states-fold", "BwdStatesFold_"),  # fold_prep_tm's pass 1b (copies)
    ("dstates", "BwdDStates_"),
    ("states", "BwdStates_"),
    ("grads-v2", "BwdGradsV2_"),  # grads_v2's pass 3 (KDA, GDN)
    ("grads", "BwdGrads_"),
    ("qk_reduce", "BwdQkReduce_"),
    ("fwd-prep", "chunk_parallel_prep"),
    ("fwd-state", "chunk_parallel_state"),
    ("fwd-out", "chunk_parallel_out"),
    ("fwd-serial", "chunk_fwd"),
)


def kernel_label(symbol: str) -> str:
    """A profiled kernel's row label: our kernels (``cudnn``-prefixed, Rule 6) by pass; anything else by its own name
    (fla's Triton kernels, torch's), cut to 60 characters."""
    if "cudnn" in symbol:
        return next((label for label, part in KERNELS if part in symbol), "cudnn-other")
    return symbol[:60]


def profile(family: str, t: int, h: int, iters: int, names: str = "") -> tuple[str, list]:
    """Profile ``ours``, ``ours-fwd`` and (KDA) ``fla`` at (t, h) -- or the eager providers named in ``names``
    (``--providers``, opt-in rows included; ``+graph`` rows skipped); print and return ``(floors line, rows)``, rows
    ``(provider, [(label, us per call, launches per call)], total us)``."""
    import torch

    case = Case(f"{family} bwd T{t} H{h}", {"t": t, "h": h, "varlen": False}, bytes=bwd_bytes(family, t, h))
    fl = {k: b / HBM_GBPS / 1e3 for k, b in pass_bytes(family, t, h).items()}
    line = (
        f"{family} T{t} H{h}: floors (us at {HBM_GBPS:.0f} GB/s): "
        + ", ".join(f"{k} {v:.1f}" for k, v in fl.items())
        + f", passes total {sum(fl.values()):.1f}; IO-only backward {bwd_bytes(family, t, h) / HBM_GBPS / 1e3:.1f}"
    )
    print(line, flush=True)
    wanted = ["ours", "ours-fwd"] + (["fla"] if family == "kda" else [])
    named = [n for n in names.split(",") if n and not n.endswith("+graph")]
    wanted = named or wanted
    rows = []
    for p in providers(family) + opt_in_providers(family):
        if p.name not in wanted:
            continue
        reason = p.available()
        if reason:
            print(f"  {p.name}: not run ({reason})", flush=True)
            continue
        try:  # one provider failing must not hide the others' rows
            fn = p.make(case)
            times = device_times(fn, iters)
        except Exception as exc:
            print(f"  {p.name}: FAILED ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
            continue
        kernels = [(kernel_label(key), us, n) for key, us, n in times]
        kernels.sort(key=lambda r: -r[1])
        total = sum(r[1] for r in kernels)
        print(f"  {p.name}: {total:8.1f} us per call", flush=True)
        for label, us, n in kernels:
            print(f"      {us:8.1f} us  x{n:g}  {label}", flush=True)
        rows.append((p.name, kernels, total))
        del fn
        torch.cuda.empty_cache()
    return line, rows


def profile_markdown(results: list, t: int, h: int, iters: int) -> str:
    """The md of ``[(family, floors line, rows)]`` (``profile``'s output), with the device and versions."""
    from harness import _device_line, _versions

    lines = [
        "# linear_attention_bwd_kernels",
        "",
        f"Per-kernel device time (us per call, torch.profiler mean over {iters} calls) of the delta-rule backward, T={t}, H={h},",
        "K = V = 128, one sequence, no states (GDN: L2 norm in the kernel; KDA: q, k normalised on the host).",
        "Written by `benchmarks/linear_attention_bwd.py --profile`.",
        "",
        f"Device: {_device_line()}. Versions: {_versions(())}.",
    ]
    for family, line, rows in results:
        lines += ["", f"## {family}", "", line, "", "| provider | kernel | us per call | launches per call |", "|---|---|---:|---:|"]
        for name, kernels, total in rows:
            for label, us, n in kernels:
                lines.append(f"| {name} | {label} | {us:.1f} | {n:g} |")
            lines.append(f"| {name} | **total** | **{total:.1f}** | |")
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="cudnn.linear_attention KDA / GDN backward benchmark (issue #7)")
    ap.add_argument("which", nargs="?", default="all", choices=["all", "kda", "gdn"])
    ap.add_argument("--quick", action="store_true", help="T 8k H 16 only, fla-safe left out: writes <name>_quick.{md,csv,png}")
    ap.add_argument("--providers", default="", help="comma-separated provider names to keep (default: all)")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved timing rounds per case (default: GDN 3, KDA 1)")
    ap.add_argument("--out-dir", default=OUT_DIR, help="where the md / csv / png go (default docs/benchmarks)")
    ap.add_argument("--profile", action="store_true", help="per-kernel torch.profiler table instead of the benchmark")
    ap.add_argument("--profile-after", action="store_true", help="the benchmark, then the per-kernel table in the same process (compiles reused)")
    ap.add_argument("--t", type=int, default=QUICK[0], help="--profile: tokens")
    ap.add_argument("--h", type=int, default=QUICK[1], help="--profile: heads")
    ap.add_argument("--iters", type=int, default=10, help="--profile: profiled calls per provider")
    ap.add_argument("--out", default=None, help="--profile: md file (default <out-dir>/linear_attention_bwd_kernels.md; '' : none)")
    return ap.parse_args(argv)


def families_of(which: str) -> tuple[str, ...]:
    return ("kda", "gdn") if which == "all" else (which,)


def main(argv=None):
    args = parse_args(argv)
    sys.argv[1:] = []  # a library parser reading sys.argv later (the DSL's on first compile) would take --h for its --help
    if not args.profile:
        for fam in families_of(args.which):
            run_family(fam, args)
    if args.profile or args.profile_after:
        out = [(fam, *profile(fam, args.t, args.h, args.iters, args.providers)) for fam in families_of(args.which)]
        path = os.path.join(args.out_dir, "linear_attention_bwd_kernels.md") if args.out is None else args.out
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as fh:
                fh.write(profile_markdown(out, args.t, args.h, args.iters))
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
