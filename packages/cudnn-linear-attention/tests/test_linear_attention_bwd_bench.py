"""CPU checks of ``benchmarks/linear_attention_bwd.py`` (the KDA / GDN backward benchmark of issue #7), no GPU needed:

- the case grid (issue #7's T x H plus the varlen mix) and ``--quick`` (T 8k H 16, one case per family);
- the byte convention against an independent count of the tensors a backward must read and write once;
- the per-pass floors: what passes 1 and 2 write is exactly the package's workspace (``bwd_api.workspace_bytes``, up to
  the 128-byte alignment of its arrays), and pass 3 writes every gradient once;
- the benchmark's plan construction (``bwd_plan``) on descriptors of the layouts it times (dense [1, T, H, D], varlen
  with ``cu_seqlens``): ``check_support`` accepts them with the family's L2-norm flag and the workspace it allocates is
  the package's ``workspace_bytes`` (skips below the DSL floor);
- providers per family, ``--quick`` / ``--providers`` selection, fla's GDN refusal reason (fla and triton stubbed);
- the verdict lines (ratios, meets / misses, roofline fractions) on synthetic results, and the profile mode's kernel
  labels on the real kernel symbols (copied from the sm_90a PTX of the three passes).
"""

from __future__ import annotations

import os
import sys
import types

import pytest

_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(_BENCH))

import linear_attention_bwd as bench  # noqa: E402
from harness import Result  # noqa: E402

D = 128


def test_cases_grid_and_quick():
    for fam in ("kda", "gdn"):
        full = bench.cases(fam)
        assert len(full) == 10
        grid = {(c.params["t"], c.params["h"]) for c in full if not c.params["varlen"]}
        assert grid == {(t, h) for t in (4096, 8192, 32768) for h in (16, 32, 64)}
        (var,) = [c for c in full if c.params["varlen"]]
        assert (var.params["t"], var.params["h"]) == (32768, 32) and "varlen64" in var.label
        assert len({c.label for c in full}) == 10
        (quick,) = bench.cases(fam, quick=True)
        assert quick.params == {"t": 8192, "h": 16, "varlen": False} and quick.label == f"{fam} bwd T8k H16"


def _independent_bytes(fam, t, h):
    """Read once: q, k, v, do (bf16 [T, H, D]), g (fp32 [T, H, K] KDA, [T, H] GDN), beta (fp32 [T, H]); written once:
    dq, dk, dv (bf16), dg, dbeta (fp32, g's / beta's shapes)."""
    gate = t * h * (D if fam == "kda" else 1)
    tensors = {"q": (t * h * D, 2), "k": (t * h * D, 2), "v": (t * h * D, 2), "do": (t * h * D, 2), "g": (gate, 4), "beta": (t * h, 4)}
    tensors.update({"dq": (t * h * D, 2), "dk": (t * h * D, 2), "dv": (t * h * D, 2), "dg": (gate, 4), "dbeta": (t * h, 4)})
    return sum(n * size for n, size in tensors.values())


@pytest.mark.parametrize("fam", ["kda", "gdn"])
def test_byte_convention_counts_every_tensor_once(fam):
    for c in bench.cases(fam):
        t, h = c.params["t"], c.params["h"]
        assert c.bytes == bench.bwd_bytes(fam, t, h) == _independent_bytes(fam, t, h), c.label
    # the numbers the convention line states: GDN 14 D + 16, KDA 22 D + 8 bytes per token and head
    assert bench.bwd_bytes("gdn", 8192, 16) == 8192 * 16 * (14 * D + 16)
    assert bench.bwd_bytes("kda", 8192, 16) == 8192 * 16 * (22 * D + 8)
    assert "7*D*2" in bench.convention(fam)
    # roofline: 4.8 GB moved in 1 ms is the whole 4.8 TB/s
    assert bench.roofline_fraction(4.8e9, 1.0) == pytest.approx(1.0)
    assert bench.roofline_fraction(2.4e9, 1.0) == pytest.approx(0.5)


@pytest.mark.parametrize("fam", ["kda", "gdn"])
@pytest.mark.parametrize("t,h,n", [(8192, 16, 1), (32768, 32, 64), (1000, 4, 3)])
def test_pass_floors_write_exactly_the_workspace(fam, t, h, n):
    import importlib

    ws = importlib.import_module(f"cudnn.linear_attention.{fam}.bwd_api").workspace_bytes(t, n, h, D)
    slots = n + t // 64 + 1
    S, X, tile = slots * h * D * D * 2, t * h * D * 2, slots * h * 64 * 64 * 2
    tiles = 2 if fam == "kda" else 1
    written_1_2 = (S + X + tiles * tile) + (S + X)  # pass 1: ws_h, ws_vn, Tm (, P); pass 2: ws_dh, ws_dvn
    assert 0 <= ws - written_1_2 < 128 * (4 + tiles), (ws, written_1_2)  # the package aligns each array to 128 bytes
    floors = bench.pass_bytes(fam, t, h, n)
    gate = t * h * ((4 * D if fam == "kda" else 4) + 4)
    reads_1 = (3 if fam == "kda" else 2) * X + gate
    assert floors["states"] == reads_1 + S + X + tiles * tile
    assert floors["dstates"] == 3 * X + gate + tiles * tile + S + X
    # pass 3 reads q, k, v, do, g, beta, the whole workspace but P, and writes every gradient once
    assert floors["grads"] == 4 * X + gate + (written_1_2 - (tiles - 1) * tile) + 3 * X + gate
    assert floors["grads"] - (4 * X + gate + 3 * X + gate) > 0
    # every byte of the IO convention is in some pass's floor
    assert sum(floors.values()) > bench.bwd_bytes(fam, t, h)


@pytest.mark.parametrize("fam", ["kda", "gdn"])
@pytest.mark.parametrize("varlen", [False, True])
def test_bwd_plan_accepts_the_benchmark_layouts(fam, varlen):
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", f"cudnn.linear_attention.{fam} backward")
    import importlib

    from cudnn.api_base import TensorDesc

    t, h = (32768, 32) if varlen else (8192, 16)
    x = TensorDesc.contiguous((1, t, h, D), "bfloat16", "x")
    g = TensorDesc.contiguous((1, t, h, D) if fam == "kda" else (1, t, h), "float32", "g")
    beta = TensorDesc.contiguous((1, t, h), "float32", "beta")
    cu = TensorDesc.contiguous((65,), "int32", "cu_seqlens") if varlen else None
    descs = dict(q=x, k=x, v=x, g=g, beta=beta, do=x, dq=x, dk=x, dv=x, dg=g, dbeta=beta, cu=cu)
    plan = bench.bwd_plan(fam, descs)
    assert plan.check_support()
    assert plan.l2norm == bench.FAMILIES[fam].l2norm == (fam == "gdn")
    key = plan.compile_key()
    assert key.varlen == varlen and key.l2norm == (fam == "gdn") and not key.has_initial and not key.gva
    api = importlib.import_module(f"cudnn.linear_attention.{fam}.bwd_api")
    n = 64 if varlen else 1
    ws = api.workspace_bytes(t, n, h, D) + api.forward_workspace_bytes(t, n, h, D) + api.dstates_workspace_bytes(t, n, h, D)  # + the default tails
    assert plan.scratch_workspace_bytes() == ws


def test_kda_with_in_kernel_l2norm_is_declined():
    """Why the KDA rows normalise q, k on the host: the backward declines the in-kernel norm (if this starts passing,
    the benchmark should switch KDA to the in-kernel norm like GDN)."""
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kda backward")
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    x = TensorDesc.contiguous((1, 4096, 16, D), "bfloat16", "x")
    g = TensorDesc.contiguous((1, 4096, 16, D), "float32", "g")
    beta = TensorDesc.contiguous((1, 4096, 16), "float32", "beta")
    plan = KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta, use_qk_l2norm_in_kernel=True)
    with pytest.raises(NotImplementedError, match="use_qk_l2norm_in_kernel"):
        plan.check_support()


def test_providers_and_selection():
    common = ["ours", "ours+graph", "ours-autograd", "ours-autograd+graph", "ours-fwd", "ours-fwd+graph", "fla", "fla+graph"]
    up = ["upstream", "upstream+graph"]  # NVIDIA's cudnn frontend, its own process (upstream_frontend.py)
    assert [p.name for p in bench.providers("gdn")] == common + up
    assert [p.name for p in bench.providers("kda")] == common + ["fla-safe"] + up
    assert [p.name for p in bench.selected("kda", "", quick=True)] == common + up  # fla-safe: full grid only
    assert [p.name for p in bench.selected("kda", "", quick=False)] == common + ["fla-safe"] + up
    assert [p.name for p in bench.selected("kda", "fla-safe,ours", quick=True)] == ["ours", "fla-safe"]
    with pytest.raises(SystemExit, match="unknown providers"):
        bench.selected("gdn", "ours,fla-safe", quick=False)
    # every ratio and roofline column names a real provider
    for fam in ("kda", "gdn"):
        names = {p.name for p in bench.providers(fam)}
        assert all(a in names and b in names for a, b, _ in bench.RATIOS[fam])
        assert set(bench.ROOFLINE) <= names


def test_fla_gdn_refusal(monkeypatch):
    fu = types.ModuleType("fla.utils")
    fu.IS_NVIDIA_HOPPER, fu.TRITON_ABOVE_3_4_0, fu.TRITON_ABOVE_3_7_1 = True, True, False
    fla = types.ModuleType("fla")
    fla.utils = fu
    monkeypatch.setitem(sys.modules, "fla", fla)
    monkeypatch.setitem(sys.modules, "fla.utils", fu)
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__="3.6.0"))
    reason = bench.fla_gdn_refusal()
    assert reason and "3.6.0" in reason and "#640" in reason
    fu.TRITON_ABOVE_3_7_1 = True
    assert bench.fla_gdn_refusal() is None
    fu.TRITON_ABOVE_3_7_1, fu.IS_NVIDIA_HOPPER = False, False
    assert bench.fla_gdn_refusal() is None


def test_verdict_arithmetic():
    kda = bench.cases("kda", quick=True)
    label = kda[0].label
    res = [
        Result(label, "ours", 0.5, None, None),
        Result(label, "ours-autograd", 1.0, None, None),
        Result(label, "fla", 3.3, None, None),
        Result(label, "fla+graph", 2.0, None, None),
        Result(label, "ours-autograd+graph", 1.0, None, None),
    ]
    text = bench.verdict("kda", kda, res)
    row = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3.30x meets"  # fla / ours-autograd, target >= 3
    assert cells[2] == "2.00x" and cells[3] == "6.60x"
    frac = bench.bwd_bytes("kda", 8192, 16) / 0.5 / 1e6 / bench.HBM_GBPS
    assert cells[4] == "-" and cells[5] == "-"  # upstream / ours-autograd, upstream+graph / ...: upstream not run
    assert cells[6] == f"{frac:.1%}"  # roofline of ours
    assert cells[7] == "-"  # ours+graph not run
    res[2] = Result(label, "fla", 2.9, None, None)
    assert "2.90x misses" in bench.verdict("kda", kda, res)

    gdn = bench.cases("gdn", quick=True)
    label = gdn[0].label
    res = [Result(label, "ours", 2.0, None, None), Result(label, "ours-fwd", 0.5, None, None), Result(label, "ours-autograd", None, None, None, "error: x")]
    row = next(line for line in bench.verdict("gdn", gdn, res).splitlines() if line.startswith(f"| {label}"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "4.00x misses" and cells[2] == "-" and cells[3] == "-"  # bwd / fwd, target <= 3
    res[0] = Result(label, "ours", 1.5, None, None)
    assert "3.00x meets" in bench.verdict("gdn", gdn, res)


#: Kernel symbols of the three passes (sm_90a PTX of KimiDeltaAttentionBwdSm90 / GatedDeltaNetBwdSm90, K = 128), cut.
_SYMBOLS = {
    "states": "cudnn_kernel_kernel_cudnnlinear_attentionkdabwd_states_kernelKdaBwdStates_object_at__tensorptrbf16gmemalign16o1_0",
    "dstates": "cudnn_kernel_kernel_cudnnlinear_attentionkdabwd_states_kernelKdaBwdDStates_object_at__tensorptrbf16gmemalign16_0",
    "grads": "cudnn_kernel_kernel_cudnnlinear_attentionkdachunk_bwd_kernelKdaBwdGrads_object_at__tensorptrbf16gmemalign16o11_0",
}


def test_kernel_labels():
    for label, sym in _SYMBOLS.items():
        assert bench.kernel_label(sym) == label
        assert bench.kernel_label(sym.replace("kda", "gdn").replace("Kda", "Gdn")) == label
    assert bench.kernel_label("cudnn_kernel_kernel_cudnnlinear_attentiongdnbwd_qk_reduce_kernelGdnBwdQkReduce_object_at_x") == "qk_reduce"
    assert bench.kernel_label("cudnn_kernel_kernel_cudnnlinear_attentionkdachunk_parallel_prep_kernelKdaParallelPrep_0") == "fwd-prep"
    assert bench.kernel_label("chunk_kda_bwd_kernel_intra") == "chunk_kda_bwd_kernel_intra"  # fla's: its own name


def test_arguments_and_output_names(tmp_path):
    a = bench.parse_args(["kda", "--quick", "--providers", "ours,fla"])
    assert a.which == "kda" and a.quick and a.providers == "ours,fla" and not a.profile and a.rounds == 0
    assert bench.families_of("all") == ("kda", "gdn") and bench.families_of("gdn") == ("gdn",)
    assert bench.output_name("kda", True) == "linear_attention_bwd_kda_quick"
    assert bench.output_name("gdn", False) == "linear_attention_bwd_gdn"
    p = bench.parse_args(["--profile", "--t", "32768", "--h", "64"])
    assert p.profile and (p.t, p.h) == (32768, 64) and p.which == "all"
    assert bench.OUT_DIR.endswith(os.path.join("docs", "benchmarks"))


@pytest.mark.parametrize("fam", ["kda", "gdn"])
@pytest.mark.parametrize("varlen", [False, True])
def test_ours_provider_launches_every_pass_once_over_its_workspace(monkeypatch, fam, varlen):
    """The ``ours`` provider's timed call, on CPU tensors with the compiled passes replaced by recorders: one launch per
    pass, on the launch stream, every workspace pointer inside the workspace the provider allocated at build, the
    provider's tensors (not copies) bound, and the second call allocating no new workspace."""
    torch = pytest.importorskip("torch")
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", f"cudnn.linear_attention.{fam} backward")
    from cudnn.linear_attention._host import delta_rule_bwd_api

    t, h = 256, 2
    gen = torch.Generator().manual_seed(0)

    def cpu_inputs(case, family):
        bf = dict(dtype=torch.bfloat16)
        i = {n: torch.randn(1, t, h, D, generator=gen).to(**bf) for n in ("q", "k", "v", "do")}
        i["g"] = -torch.rand((1, t, h, D) if family == "kda" else (1, t, h), generator=gen)
        i["beta"] = torch.rand(1, t, h, generator=gen)
        i["cu"] = torch.tensor([0, 100, 256], dtype=torch.int32) if case.params["varlen"] else None
        return i

    made = []

    def aligned(nbytes, device):  # CPU memory: 128-byte aligned by hand, as the CUDA allocator does
        raw = torch.empty(nbytes + 128, dtype=torch.uint8)
        ws = raw[(-raw.data_ptr()) % 128 :][:nbytes]
        made.append(ws)
        return ws

    class Recorder:
        def __init__(self):
            self.calls = []

        def __call__(self, *args):
            self.calls.append(args)

    def fake_compile(plan):  # the shared compile(): recorders for the backward's passes
        plan._ensure_support_checked()
        plan._compiled_kernel = tuple(Recorder() for _ in plan._parts(plan.compile_key()))
        plan._compiled_parallel_pass2 = bool(plan.parallel_pass2)

    def fake_forward(plan):  # the default chunk-parallel pass 1a: recorders for the forward's prep and state pass
        plan._compiled_forward = (Recorder(), Recorder()) if plan.parallel_pass1 else None

    monkeypatch.setattr(bench, "inputs", cpu_inputs)
    monkeypatch.setattr(bench, "workspace", aligned)
    monkeypatch.setattr(delta_rule_bwd_api.DeltaRuleBwdSm90, "compile", fake_compile)
    monkeypatch.setattr(delta_rule_bwd_api.DeltaRuleBwdSm90, "_compile_forward_pass1", fake_forward)
    monkeypatch.setattr(delta_rule_bwd_api, "_stream", lambda s, d: "stream")
    case = bench.Case("smoke", {"t": t, "h": h, "varlen": varlen})
    fn = bench._make_ours(fam)(case)
    out = fn()
    fn()
    assert len(made) == 1  # the workspace is the build's, not the call's
    ws = made[0]
    dq, dk, dv, dg, dbeta, dh0 = out
    assert dh0 is None and dq.shape == (1, t, h, D) and dg.dtype == torch.float32 and dbeta.shape == (1, t, h)
    plan_kernels = [c for c in fn.__closure__ if hasattr(c.cell_contents, "_compiled_kernel")][0].cell_contents._compiled_kernel
    assert len(plan_kernels) == 4  # the default schedule: pass 1b (fold), pass 2 (prep, chain), pass 3
    ws_lo, ws_hi = ws.data_ptr(), ws.data_ptr() + ws.numel()
    bound = {dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), dg.data_ptr(), dbeta.data_ptr()}
    pointers = set()
    for rec in plan_kernels:
        assert len(rec.calls) == 2 and rec.calls[0][-1] == "stream"
        ptrs = [int(a._pointer) for a in rec.calls[0] if hasattr(a, "_pointer")]
        assert all(p for p in ptrs)
        pointers.update(ptrs)
        assert t in rec.calls[0]  # the token total is a runtime argument
    assert bound <= pointers  # pass 3 writes the provider's own output tensors
    assert sum(ws_lo <= p < ws_hi for p in pointers) >= 4  # ws_h, ws_dh, ws_vn, ws_dvn (and Tm / P) from the workspace


def test_profile_markdown_and_mode_flags():
    rows = [("ours", [("grads", 812.25, 1.0), ("states", 101.0, 1.0)], 913.25), ("fla", [("chunk_kda_bwd_kernel_intra", 50.0, 2.0)], 50.0)]
    text = bench.profile_markdown([("kda", "kda T8192 H16: floors ...", rows)], 8192, 16, 10)
    assert "| ours | grads | 812.2 | 1 |" in text and "| ours | **total** | **913.2** | |" in text
    assert "| fla | chunk_kda_bwd_kernel_intra | 50.0 | 2 |" in text and "## kda" in text and "T=8192, H=16" in text
    a = bench.parse_args(["--quick", "--profile-after"])
    assert a.profile_after and not a.profile and (a.t, a.h) == bench.QUICK
    floors = bench.pass_bytes("kda", 8192, 16)
    assert min(floors.values()) > 0 and floors["grads"] == max(floors.values())


class _FakeGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` on the CPU: records the capture and counts replays."""

    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


def test_graphed_providers_keep_their_tensors_alive(monkeypatch):
    """The ``+graph`` providers' replay holds the eager callable (whose closure owns the inputs, outputs and workspace
    the captured kernels use) and, for the autograd rows, ``o`` / the leaves / ``do``: with a bare ``graph.replay``
    (sessions <= 10) those died when ``make`` returned, and each replay wrote over memory the caching allocator had
    handed to the next provider (a candidate cause of the GDN benchmark's illegal address)."""
    import contextlib
    import gc
    import weakref

    import harness
    import linear_attention
    import torch

    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda g, stream=None: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Stream", lambda: types.SimpleNamespace(wait_stream=lambda s: None))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: types.SimpleNamespace(wait_stream=lambda s: None))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())

    class Buffer:  # a tensor the eager callable's closure owns
        pass

    refs, calls = [], []

    def make(case):
        buf = Buffer()
        refs.append(weakref.ref(buf))
        return lambda: calls.append(type(buf))  # the closure holds buf; calls does not

    replay = linear_attention._graphed(make)(None)
    gc.collect()
    assert refs[0]() is not None, "the replay let the captured callable's tensors die"
    assert isinstance(replay, harness.GraphReplay) and len(calls) == 2  # the side-stream warm-up and the capture
    replay()
    assert replay.graph.replays == 1
    del replay, calls[:]
    gc.collect()
    assert refs[0]() is None  # held by the replay only

    held = []

    def forward(case):  # (run forward -> o, leaves, do), each object known to the test by a weak reference only
        o, do, leaves = Buffer(), Buffer(), (Buffer(), Buffer())
        held.extend(weakref.ref(x) for x in (o, do, *leaves))
        return (lambda: o), leaves, do

    monkeypatch.setattr(torch.autograd, "grad", lambda *a, **k: None)
    replay = bench._autograd_graphed(forward)(None)
    gc.collect()
    assert all(r() is not None for r in held), "the autograd replay let o / do / the leaves die"
    del replay
    gc.collect()
    assert all(r() is None for r in held)
