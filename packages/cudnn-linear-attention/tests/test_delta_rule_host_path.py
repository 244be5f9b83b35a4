"""Host path of the gated-delta-rule forward (issue #7: the eager ``gated_delta_net`` / ``kimi_delta_attention`` call was
host-bound on the H200, 0.41 vs 0.30 ms CUDA-graphed at T = 8192, H = 16). Three knobs, each a module constant of
``_host/delta_rule_api.py``, default on:

- ``TVM_FFI_DEFAULT`` -> ``plan.tvm_ffi``: the kernels compiled with ``--enable-tvm-ffi`` (separate ``(key, "tvm-ffi")``
  cache entries, the same PTX), launched with integer addresses, ints, floats and the raw stream handle;
- ``FAST_HOST_DEFAULT`` -> ``plan.fast_host``: execute memoizes its validation per tensor metadata;
- ``DIRECT_EAGER``: the public wrapper calls the op body directly where torch's dispatch can change nothing
  (``_host/eager.py``, shared with causal_conv1d).

CPU tier (kernels replaced by recorders, stream lookups by constants): the same call sequence (fresh tensors, other
token totals / sequence counts / batch shapes, a fused-projection column slice, misaligned q / g, a short or wrong-dtype
workspace, a state or token count that disagrees) on a ``fast_host=False`` and a ``fast_host=True`` plan hands the
kernels identical arguments or raises identical errors, on both launch routes, both schedules, dense and varlen, both
families; the memo really serves repeats; detector twins (a planted stride-blind memo key, a planted size-blind
workspace check) make that comparison fail. Route selection and the op's plan key; the direct-eager decision
(requires-grad input, torch.compile, a dispatch mode, ``DIRECT_EAGER = False`` -> the op).
Compile tier (one GDN plan per schedule on the tvm-ffi route): separate cache entries, positional tvm-ffi entries whose
signatures take the ``(Int64, Int64)`` stride tuples.
GPU tier: outputs of the new host path bitwise equal to the old one (knobs off, through the op) for both families,
dense and varlen, with and without states, both schedules; a memoized plan still raises on a short workspace / a
misaligned g; warm executes on the new route neither synchronize nor allocate, and a CUDA-graph capture of the direct
eager call replays to its eager result.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA  # noqa: E402

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90  # noqa: E402

FAMS = {"gdn": GDN, "kda": KDA}
H, HK, D = 4, 2, 64
_HANDLE = 0xABC0


# -- CPU: recorders ------------------------------------------------------------------------------------------------


def _plain(a):
    if hasattr(a, "_pointer") and hasattr(a, "_assumed_align"):  # a cute runtime pointer (DSL route)
        return ("ptr", a.dtype.__name__, int(a._pointer), a._assumed_align)
    return a


class _Kernel:
    """Stands in for one compiled kernel (either route): appends ``(name, plain args)`` to a shared log."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, *args):
        self.log.append((self.name, tuple(_plain(a) for a in args)))


@pytest.fixture
def stub(monkeypatch):
    """``delta_rule_api`` with every compile replaced by recorders (``plan._log``), the tvm-ffi entry by the identity and
    the stream lookups by constants."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule forward")
    from cudnn.linear_attention._host import delta_rule_api as dra

    def compile_kernels(self):
        self._log = []
        if self.schedule == "parallel":
            self._parallel_g_align = self._g_align()
            self._compiled_parallel = self._compiled_kernel = tuple(_Kernel(n, self._log) for n in ("prep", "state", "out"))
        else:
            self._compiled_kernel = _Kernel("serial", self._log)

    monkeypatch.setattr(dra.DeltaRuleFwdSm90, "_compile_kernels", compile_kernels)
    monkeypatch.setattr(dra, "_tvm_ffi_entry", lambda f: f)
    monkeypatch.setattr(dra, "_tvm_ffi_available", lambda: True)
    monkeypatch.setattr(dra, "_stream_handle", lambda cs, dev: _HANDLE)
    monkeypatch.setattr(dra, "_stream", lambda cs, dev: ("stream", _HANDLE))
    return dra


def _bf16(*shape):
    return torch.randn(*shape).bfloat16()


def _misaligned(shape, dtype):
    """A contiguous CPU tensor of ``shape`` / ``dtype`` at an address 2 bytes past an aligned one."""
    n = 1
    for s in shape:
        n *= s
    buf = bytearray(n * torch.empty((), dtype=dtype).element_size() + 2)
    return torch.frombuffer(buf, dtype=dtype, offset=2, count=n).view(shape)


def _batch(fam, lead, n, *, state=True, g_dtype=torch.float32):
    """q, k, v, g, beta, o, h0, ht, cu for token dims ``lead`` ((T,) varlen over ``n`` sequences, or (B, L) dense)."""
    q, k, v, o = _bf16(*lead, HK, D), _bf16(*lead, HK, D), _bf16(*lead, H, D), torch.empty(*lead, H, D, dtype=torch.bfloat16)
    g = torch.randn(*fam.gate_shape(lead, H, D)).to(g_dtype)
    beta = torch.rand(*lead, H)
    h0 = torch.randn(n, H, D, D) if state else None
    ht = torch.empty(n, H, D, D) if state else None
    cu = None
    if len(lead) == 1:
        cuts = torch.linspace(0, lead[0], n + 1).round().int()
        cu = cuts.to(torch.int32)
    return dict(q=q, k=k, v=v, g=g, beta=beta, o=o, h0=h0, ht=ht, cu=cu)


def _workspace(nbytes, dtype=torch.uint8):
    raw = torch.empty(nbytes + 256, dtype=torch.uint8)
    ws = raw[(-raw.data_ptr()) % 128 :][:nbytes]
    return ws if dtype == torch.uint8 else ws[: nbytes // 4 * 4].view(dtype)


def _plan(fam, b, schedule, fast, tvm):
    plan = fam.adapter_class()(
        b["q"], b["k"], b["v"], b["g"], b["beta"], b["o"], use_qk_l2norm_in_kernel=True, initial_state=b["h0"], final_state=b["ht"],
        cu_seqlens=b["cu"], schedule=schedule,
    )  # fmt: skip
    plan.fast_host, plan.tvm_ffi = fast, tvm
    plan.compile()
    return plan


def _sequence(fam, varlen, state):
    """The call sequence: ``(label, batch, workspace bytes delta or a workspace factory)``."""
    lead0, n0 = ((300,), 3) if varlen else ((2, 150), 2)
    lead1, n1 = ((517,), 5) if varlen else ((3, 70), 3)
    seq = [("base", _batch(fam, lead0, n0, state=state), 0), ("fresh", _batch(fam, lead0, n0, state=state), 0)]
    seq.append(("other extents", _batch(fam, lead1, n1, state=state), 0))
    seq.append(("fresh again", _batch(fam, lead0, n0, state=state), 0))
    b = _batch(fam, lead0, n0, state=state)
    fused = _bf16(*lead0, HK, 2 * D)
    b["q"] = fused[..., :D]  # a fused projection's column slice: other strides, same shapes
    seq.append(("column slice", b, 0))
    b = _batch(fam, lead0, n0, state=state)
    b["q"] = _misaligned(b["q"].shape, torch.bfloat16)
    seq.append(("misaligned q", b, 0))
    b = _batch(fam, lead0, n0, state=state)
    b["g"] = _misaligned(b["g"].shape, torch.float32)
    seq.append(("misaligned g", b, 0))
    seq.append(("short workspace", _batch(fam, lead0, n0, state=state), -128))
    seq.append(("large workspace", _batch(fam, lead0, n0, state=state), 4096))
    seq.append(("fp32 workspace", _batch(fam, lead0, n0, state=state), "float32"))
    b = _batch(fam, lead0, n0, state=state)
    b["k"] = _bf16(lead0[0] + 1, *b["k"].shape[1:]) if varlen else _bf16(lead0[0], lead0[1] + 1, *b["k"].shape[2:])
    seq.append(("k token mismatch", b, 0))
    if state:
        b = _batch(fam, lead0, n0, state=state)
        b["h0"] = torch.randn(n0 + 1, H, D, D)
        seq.append(("state count mismatch", b, 0))
    b = _batch(fam, lead0, n0, state=state)
    b["beta"] = torch.rand(*lead0, 2 * H)[..., ::2]
    seq.append(("strided beta", b, 0))
    seq.append(("last", _batch(fam, lead0, n0, state=state), 0))
    return seq


def _workspaces(plan, seq):
    """One workspace per call of ``seq`` (shared by the plans compared: the same addresses), None for the serial schedule."""
    out = []
    for _, b, ws in seq:
        if plan.schedule != "parallel":
            out.append(None)
            continue
        lead = b["q"].shape[:-2]
        T = lead[0] if len(lead) == 1 else lead[0] * lead[1]
        n = b["cu"].shape[0] - 1 if b["cu"] is not None else lead[0]
        need = plan.scratch_workspace_bytes(T, n, 0 if b["cu"] is not None else lead[1])
        out.append(_workspace(need, torch.float32) if ws == "float32" else _workspace(need + ws))
    return out


def _outcomes(plan, seq, workspaces):
    out = []
    for (label, b, _), workspace in zip(seq, workspaces, strict=True):
        plan._log.clear()
        try:
            plan.execute(b["q"], b["k"], b["v"], b["g"], b["beta"], b["o"], b["h0"], b["ht"], b["cu"], workspace=workspace)
        except (ValueError, TypeError, NotImplementedError) as exc:
            out.append((label, type(exc).__name__, str(exc)))
        else:
            out.append((label, "ok", list(plan._log)))
    return out


def _compare(fam, schedule, varlen, state, tvm):
    seq = _sequence(fam, varlen, state)
    b0 = seq[0][1]
    full, fast = _plan(fam, b0, schedule, False, tvm), _plan(fam, b0, schedule, True, tvm)
    validations = []
    real = fast._validate
    fast._validate = lambda *a: validations.append(1) or real(*a)
    workspaces = _workspaces(full, seq)
    want, got = _outcomes(full, seq, workspaces), _outcomes(fast, seq, workspaces)
    for w, g in zip(want, got, strict=True):
        assert w == g, f"{w[0]}: full validation {w[1:]} != memoized {g[1:]}"
    return want, len(validations)


@pytest.mark.parametrize("tvm", [True, False], ids=["tvm-ffi", "dsl-entry"])
@pytest.mark.parametrize("layout", ["varlen", "dense"])
@pytest.mark.parametrize("schedule", ["parallel", "serial"])
@pytest.mark.parametrize("fam", ["gdn", "kda"])
def test_fast_host_launches_what_the_full_validation_launches(stub, fam, schedule, layout, tvm):
    want, n_full = _compare(FAMS[fam], schedule, layout == "varlen", True, tvm)
    by = {w[0]: w for w in want}
    assert by["base"][1] == by["other extents"][1] == by["column slice"][1] == by["large workspace"][1] == "ok"
    for label in ("misaligned q", "k token mismatch", "state count mismatch", "strided beta"):
        assert by[label][1] == "ValueError", by[label]
    if schedule == "parallel":
        assert by["short workspace"][1] == by["fp32 workspace"][1] == "ValueError"
        assert by["misaligned g"][1] == ("ValueError" if fam == "kda" else "ok")  # KDA's prep reads an fp32 g by 32-bit loads
        assert [name for name, _ in by["base"][2]] == ["prep", "state", "out"]
    # fresh / fresh again / large workspace / last are memo hits; varlen "other extents" too (T and N are read per call)
    assert n_full <= len(want) - (5 if layout == "varlen" else 4), n_full


def test_fast_host_without_states(stub):
    _compare(GDN, "parallel", True, False, True)
    _compare(KDA, "serial", False, False, True)


def test_launch_arguments_on_the_tvm_ffi_route_are_plain_ints(stub):
    """The tvm-ffi route hands the kernels integers (addresses, extents, strides), a float scale and the raw handle."""
    b = _batch(GDN, (300,), 3)
    plan = _plan(GDN, b, "parallel", True, True)
    ws = _workspace(plan.scratch_workspace_bytes(300, 3, 0))
    plan.execute(b["q"], b["k"], b["v"], b["g"], b["beta"], b["o"], b["h0"], b["ht"], b["cu"], workspace=ws)
    (_, prep), (_, state), (_, out) = plan._log
    assert prep[:6] == (b["q"].data_ptr(), b["k"].data_ptr(), b["v"].data_ptr(), b["g"].data_ptr(), b["beta"].data_ptr(), b["cu"].data_ptr())
    assert prep[6] == ws.data_ptr() and prep[-1] == state[-1] == out[-1] == _HANDLE
    assert prep[-4:-1] == ((HK * D, D), (HK * D, D), (H * D, D)) and out[-2] == (H * D, D)
    assert all(type(a) in (int, float, tuple) or a is None for a in prep + state + out)
    assert state[:3] == (b["cu"].data_ptr(), b["h0"].data_ptr(), b["ht"].data_ptr())


def _planted(monkeypatch, dra, what):
    if what == "stride-blind memo key":
        real = dra.DeltaRuleFwdSm90._exec_meta

        def meta(self, q, k, *rest):
            return real(self, k, k, *rest)  # q's metadata read from k (same shape and dtype here): q's strides unseen

        monkeypatch.setattr(dra.DeltaRuleFwdSm90, "_exec_meta", meta)
    else:

        class Big:
            def __init__(self, ws):
                self.ws = ws

            def data_ptr(self):
                return self.ws.data_ptr()

            def numel(self):
                return 1 << 40

        real = dra.DeltaRuleFwdSm90._fast_call

        def fast_call(self, got, *args):
            *rest, ws = args
            return real(self, got, *rest, None if ws is None else Big(ws))

        monkeypatch.setattr(dra.DeltaRuleFwdSm90, "_fast_call", fast_call)


@pytest.mark.parametrize("what", ["stride-blind memo key", "size-blind workspace check"])
def test_fast_host_detector_sees_a_planted_violation(stub, monkeypatch, what):
    """Detector twin of the comparison: a memo key blind to q's strides (the column slice launches with the dense
    strides) or a fast path blind to the workspace size (the short workspace launches) makes it fail."""
    _planted(monkeypatch, stub, what)
    with pytest.raises(AssertionError, match="column slice" if what.startswith("stride") else "short workspace"):
        _compare(GDN, "parallel", False, True, True)


def test_knob_values_route_selection_and_defaults(stub, monkeypatch):
    dra = stub
    assert dra.FAST_HOST_DEFAULT is True and dra.TVM_FFI_DEFAULT is True and dra.DIRECT_EAGER is True
    from cudnn.linear_attention._host.launch import use_tvm_ffi_default

    b = _batch(KDA, (300,), 3)
    plan = KDA.adapter_class()(b["q"], b["k"], b["v"], b["g"], b["beta"], b["o"], cu_seqlens=b["cu"])
    assert plan.tvm_ffi == use_tvm_ffi_default() and plan.fast_host is True  # the adapter's own route: DSL unless CUDNN_LA_TVM_FFI=1
    plan = _plan(KDA, b, "serial", True, True)
    assert plan._entries is plan._compiled_kernel and plan._memo == {}
    plan = _plan(KDA, b, "parallel", False, True)
    assert plan._entries == plan._compiled_parallel and plan._memo is None
    plan = _plan(KDA, b, "parallel", True, False)
    assert plan._entries is None and plan._memo == {}
    for knob, value in (("tvm_ffi", 2), ("fast_host", "yes")):
        plan = KDA.adapter_class()(b["q"], b["k"], b["v"], b["g"], b["beta"], b["o"], cu_seqlens=b["cu"], initial_state=b["h0"], final_state=b["ht"])
        setattr(plan, knob, value)
        with pytest.raises(ValueError, match=f"{knob}={value!r} must be True or False"):
            plan.compile()
    monkeypatch.setattr(dra, "_tvm_ffi_available", lambda: False)
    assert dra.tvm_ffi_default() is False
    plan.tvm_ffi, plan.fast_host = True, True
    with pytest.raises(ValueError, match="needs apache-tvm-ffi"):
        plan.compile()
    monkeypatch.setattr(dra, "_tvm_ffi_available", lambda: True)
    monkeypatch.setattr(dra, "TVM_FFI_DEFAULT", False)
    assert dra.tvm_ffi_default() is False


def test_op_plan_key_carries_the_host_knobs(stub, monkeypatch):
    """The op body's plan cache keys on TVM_FFI_DEFAULT / FAST_HOST_DEFAULT: flipping them (the benchmark's
    ``ours-slowhost``) builds a plan with the old route and no memo, and flipping back finds the first plan."""
    dra = stub
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    plans: dict = {}
    b = _batch(GDN, (300,), 3)
    args = (
        b["q"],
        b["k"],
        b["v"],
        b["g"],
        b["beta"],
        None,
        True,
        b["h0"],
        True,
        b["cu"],
        None,
        "serial",
    )  # serial: no workspace (CPU memory is not 128-byte aligned)
    dra.delta_rule_forward(GDN.adapter_class(), plans, *args)
    monkeypatch.setattr(dra, "TVM_FFI_DEFAULT", False)
    monkeypatch.setattr(dra, "FAST_HOST_DEFAULT", False)
    dra.delta_rule_forward(GDN.adapter_class(), plans, *args)
    monkeypatch.setattr(dra, "TVM_FFI_DEFAULT", True)
    monkeypatch.setattr(dra, "FAST_HOST_DEFAULT", True)
    dra.delta_rule_forward(GDN.adapter_class(), plans, *args)
    assert len(plans) == 2
    routes = sorted((p.tvm_ffi, p.fast_host) for p in plans.values())
    assert routes == [(False, False), (True, True)]


# -- CPU: the direct eager decision ----------------------------------------------------------------------------------


@pytest.fixture
def direct(monkeypatch):
    """The GDN public wrapper with its op and body replaced by recorders; CPU tensors taken by the direct path."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule forward")
    from cudnn.linear_attention._host import delta_rule_api as dra
    from cudnn.linear_attention._host import eager
    from cudnn.linear_attention.gdn import api

    taken = []

    def body(q, k, v, g, beta, *rest, **kw):
        taken.append("direct")
        return torch.empty_like(v), None

    def op(q, k, v, g, beta, *rest):
        taken.append("op")
        return torch.empty_like(v), torch.empty(0)

    monkeypatch.setattr(api, "_forward", body)
    monkeypatch.setattr(api, "_load_op", lambda: op)
    monkeypatch.setattr(eager, "is_cuda", lambda t: t.device.type == "cpu")
    monkeypatch.setattr(dra, "DIRECT_EAGER", True)
    return api, dra, taken


def test_direct_eager_decision(direct, monkeypatch):
    api, dra, taken = direct
    b = _batch(GDN, (300,), 3)
    x = (b["q"], b["k"], b["v"], b["g"], b["beta"])

    def call(*xs, **kw):
        taken.clear()
        api.gated_delta_net(*xs, cu_seqlens=b["cu"], **kw)
        return taken[-1]

    assert call(*x) == "direct"
    assert call(*x, initial_state=b["h0"], output_final_state=True) == "direct"
    rq = b["q"].clone().requires_grad_(True)
    assert call(rq, *x[1:]) == "op"  # autograd must record the op
    with torch.no_grad():
        assert call(rq, *x[1:]) == "direct"
    assert call(*x, initial_state=b["h0"].clone().requires_grad_(True)) == "op"
    assert call(*x[:4], torch.nn.Parameter(b["beta"])) == "op"  # a Parameter requires grad

    class Passthrough(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        assert call(*x) == "op"
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        assert dra._direct_ok(x) is False
    with torch.device("meta"):  # a torch function mode
        assert dra._direct_ok(x) is False
    monkeypatch.setattr(dra, "DIRECT_EAGER", False)
    assert call(*x) == "op"


def test_direct_eager_declines_under_torch_compile(direct):
    _, dra, _ = direct
    b = _batch(GDN, (300,), 3)
    assert dra._direct_ok((b["q"],)) is True

    @torch.compile(backend="eager", fullgraph=True)
    def f(q):
        return q + (1 if dra._direct_ok((q,)) else 2)

    assert torch.equal(f(b["q"]), b["q"] + 2)


# -- compile tier ----------------------------------------------------------------------------------------------------


@pytest.mark.compile_only
def test_tvm_ffi_plans_compile_separate_positional_entries():
    """GDN, one plan per schedule on the tvm-ffi route: separate kernel-cache entries from the DSL route's, positional
    ``tvm_ffi.Function``s; the parallel prep entry's signature takes the strides as (Int64, Int64) tuples (what
    ``launch_parallel_ffi`` passes): a wrong argument count names them."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule forward")
    from _delta_rule_cases import support_plan

    from cudnn.kernel_cache import kernel_cache

    for schedule in ("serial", "parallel"):
        plan = support_plan(GDN, D=64, schedule=schedule)
        plan.tvm_ffi = True
        misses = kernel_cache.stats.misses
        plan.compile()
        entries = plan._entries if schedule == "parallel" else (plan._entries,)
        assert all(isinstance(e, tvm_ffi.Function) for e in entries)
        many = () if schedule == "serial" or plan._entries_many is None else plan._entries_many[1:2]  # the per-call fused state pass
        assert all(isinstance(e, tvm_ffi.Function) for e in many)
        assert kernel_cache.stats.misses - misses <= len(entries) + len(many)
        again = support_plan(GDN, D=64, schedule=schedule)
        again.tvm_ffi = True
        again.compile()
        assert kernel_cache.stats.misses - misses <= len(entries) + len(many)  # the second plan is a cache hit
        if schedule == "parallel":
            with pytest.raises(TypeError, match=r"q_strides: Tuple\[int64, int64\]"):
                entries[0](0)
        if not torch.cuda.is_available():  # (on a GPU host these null-ish launches would really run)
            _execute_reaches_the_launch(plan)


class _ReachesLaunch:
    """Wraps a tvm-ffi entry: a call whose arguments pass the entry's checks fails at the CUDA launch on a GPU-less host
    (a RuntimeError from the CUDA runtime, recorded); an argument the entry rejects raises TypeError / ValueError."""

    def __init__(self, entry, log):
        self.entry, self.log = entry, log

    def __call__(self, *args):
        try:
            self.entry(*args)
        except RuntimeError as exc:
            assert "cuda" in str(exc).lower(), exc
            self.log.append(len(args))


def _execute_reaches_the_launch(plan):
    """``execute`` on CPU tensors of the plan's metadata: every launch's argument list (addresses, extents, the scale,
    the stride tuples, the raw stream handle) passes the compiled tvm-ffi entry's checks."""
    log = []
    entries = plan._entries
    plan._entries = tuple(_ReachesLaunch(e, log) for e in entries) if isinstance(entries, tuple) else _ReachesLaunch(entries, log)
    T, n = 300, 3
    q, k = _bf16(T, 2, 64), _bf16(T, 2, 64)
    v, o = _bf16(T, 4, 64), torch.empty(T, 4, 64, dtype=torch.bfloat16)
    g, beta = torch.randn(T, 4), torch.rand(T, 4)
    h0, ht = torch.randn(n, 4, 64, 64), torch.empty(n, 4, 64, 64)
    cu = torch.tensor([0, 100, 250, 300], dtype=torch.int32)
    ws = _workspace(plan.scratch_workspace_bytes(T, n, 0)) if plan.schedule == "parallel" else None
    for _ in range(2):  # the full validation, then the memo
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws, current_stream=0)
    f = int(plan._ready_flags)  # the overlapped output (the default since session 31): state and output take the ready flags
    assert log == ([27, 18 + f, 19 + f] * 2 if plan.schedule == "parallel" else [20] * 2), log


# -- GPU -------------------------------------------------------------------------------------------------------------


def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule forward")


def _gpu_inputs(fam, varlen, state, seed=0):
    import torch.nn.functional as F

    torch.manual_seed(seed)
    lead = (1000,) if varlen else (2, 300)
    q = torch.randn(*lead, 2, 128, device="cuda").bfloat16()
    k = F.normalize(torch.randn(*lead, 2, 128, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(*lead, 4, 128, device="cuda").bfloat16()
    g = F.logsigmoid(torch.randn(*fam.gate_shape(lead, 4, 128), device="cuda")) / 8
    beta = torch.rand(*lead, 4, device="cuda")
    cu = torch.tensor([0, 1, 65, 65, 700, 1000], dtype=torch.int32, device="cuda") if varlen else None
    n = 5 if varlen else 2
    h0 = torch.randn(n, 4, 128, 128, device="cuda") * 0.5 if state else None
    return q, k, v, g, beta, cu, h0


def _old_host_path(monkeypatch, dra, on):
    for name in ("DIRECT_EAGER", "FAST_HOST_DEFAULT", "TVM_FFI_DEFAULT"):
        monkeypatch.setattr(dra, name, on)


#: (schedule, layout, states) of the bitwise A/B: both schedules, dense and varlen, with and without initial / final
#: states, in as few compiles as cover them (each case compiles its kernels twice: DSL entry and tvm-ffi).
_AB_CASES = [("parallel", "varlen", True), ("parallel", "dense", False), ("serial", "varlen", True), ("serial", "dense", False)]


@pytest.mark.gpu
@pytest.mark.parametrize("schedule,layout,state", _AB_CASES, ids=["-".join(map(str, c)) for c in _AB_CASES])
@pytest.mark.parametrize("fam", ["gdn", "kda"])
def test_new_host_path_is_bitwise_the_old_one(monkeypatch, fam, layout, state, schedule):
    """Public call, new host path (direct eager, memo, tvm-ffi; called twice: the second is a memo hit) against the old
    one (through the op, full validation, DSL entry): the same o and final state bit for bit."""
    _gpu()
    from cudnn.linear_attention._host import delta_rule_api as dra

    fam = FAMS[fam]
    fn = fam.function()
    q, k, v, g, beta, cu, h0 = _gpu_inputs(fam, layout == "varlen", state)
    kw = dict(use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=state, cu_seqlens=cu, schedule=schedule)
    _old_host_path(monkeypatch, dra, False)
    old_o, old_s = fn(q, k, v, g, beta, **kw)
    _old_host_path(monkeypatch, dra, True)
    for _ in range(2):
        o, s = fn(q, k, v, g, beta, **kw)
        torch.cuda.synchronize()
        assert torch.equal(o, old_o)
        assert (s is None and old_s is None) or torch.equal(s, old_s)
    assert torch.isfinite(o.float()).all()


def _adapter_plan(fam, q, k, v, g, beta, cu, h0, o, ht, schedule="parallel"):
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule=schedule)
    assert plan.fast_host
    from cudnn.linear_attention._host.delta_rule_api import tvm_ffi_default

    plan.tvm_ffi = tvm_ffi_default()  # the public ops' route (the adapter's own default is the DSL entry unless CUDNN_LA_TVM_FFI=1)
    plan.compile()
    return plan


def _cuda_misaligned_like(t, offset=2):
    """An fp32 CUDA tensor with ``t``'s shape at an address ``offset`` bytes past an aligned one (through the CUDA array
    interface: torch builds no such tensor itself; its contents are never touched); the returned owner keeps its
    storage alive."""
    raw = torch.empty(t.numel() * t.element_size() + 256, dtype=torch.uint8, device="cuda")

    class Iface:
        __cuda_array_interface__ = {
            "data": (raw.data_ptr() + 128 + offset, False),
            "shape": tuple(t.shape),
            "typestr": "<f4",
            "version": 2,
            "strides": None,
        }

    out = torch.as_tensor(Iface(), device="cuda")
    assert out.dtype == t.dtype == torch.float32 and out.shape == t.shape and out.data_ptr() % 4 == offset
    return out, raw  # never read or written: a misaligned fp32 access would fault the context


@pytest.mark.gpu
@pytest.mark.parametrize("fam", ["gdn", "kda"])
def test_warm_direct_call_never_syncs_or_allocates_beyond_its_outputs_and_replays_under_capture(fam):
    """R9 on the new path: a warm direct eager call synchronizes nothing (sync debug mode "error"); a warm adapter
    execute on the tvm-ffi route with the memo allocates nothing; a CUDA-graph capture of the public call replays to
    its eager result."""
    _gpu()
    fam = FAMS[fam]
    fn = fam.function()
    q, k, v, g, beta, cu, h0 = _gpu_inputs(fam, True, True)
    kw = dict(use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    want_o, want_s = fn(q, k, v, g, beta, **kw)
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn(q, k, v, g, beta, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    o, ht = torch.empty_like(v), torch.empty_like(h0)
    plan = _adapter_plan(fam, q, k, v, g, beta, cu, h0, o, ht)
    ws = torch.empty(plan.scratch_workspace_bytes(q.shape[0], cu.shape[0] - 1, 0), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert torch.equal(o, want_o) and torch.equal(ht, want_s)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(q, k, v, g, beta, **kw)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        go, gs = fn(q, k, v, g, beta, **kw)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(go, want_o) and torch.equal(gs, want_s)


@pytest.mark.gpu
def test_memoized_plan_still_raises_on_short_workspace_and_misaligned_g():
    """Last in the file: a regression here (a launch with the misaligned g) would fault the CUDA context."""
    _gpu()
    q, k, v, g, beta, cu, h0 = _gpu_inputs(KDA, True, True)
    o, ht = torch.empty_like(v), torch.empty_like(h0)
    plan = _adapter_plan(KDA, q, k, v, g, beta, cu, h0, o, ht)
    need = plan.scratch_workspace_bytes(q.shape[0], cu.shape[0] - 1, 0)
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    for _ in range(2):  # the second is a memo hit
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    assert len(plan._memo) == 1
    with pytest.raises(ValueError, match="workspace holds"):
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws[: need - 128])
    bad_g, _owner = _cuda_misaligned_like(g)
    with pytest.raises(ValueError, match="g at 0x.* is not 4-byte aligned"):
        plan.execute(q, k, v, bad_g, beta, o, h0, ht, cu, workspace=ws)
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
