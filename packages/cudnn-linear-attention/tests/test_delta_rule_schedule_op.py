"""``schedule="parallel"`` through the public ops ``gated_delta_net`` / ``kimi_delta_attention`` (the torch custom ops'
``schedule: str = "serial"`` argument) and the graph engines' ``schedule`` attribute.

CPU: the op schema carries the argument with its default, the fake implementation serves it (meta tensors,
``torch.compile(fullgraph=True)``, ``make_fx`` records it as one op call with the schedule as a constant),
``opcheck`` passes with it, a bad value is a ValueError before any trace; the real implementation
(``_host/delta_rule_api.py::delta_rule_forward``, driven with a recording adapter) caches one plan per schedule,
sizes the workspace from this call's token total / sequence count / dense length, allocates it inside the launch
stream's context (R1 / R2) and hands it to ``execute``; the serial schedule allocates nothing.
GPU (marked gpu): eager ``schedule="parallel"`` against ``"serial"`` (varlen with 1-token, empty and long sequences,
GVA, states; dense batch): GDN bit for bit; KDA (whose parallel prep kernel computes the WY terms in another order) by
the FlashAttention rule against the fp32 recurrence with the serial result as the low-precision reference (at most
twice its error); ``torch.compile(fullgraph=True)`` equals eager, a CUDA-graph capture whose
first call happens inside the capture replays to the eager result, and a warm call never synchronizes.
"""

from __future__ import annotations

import contextlib

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

KINDS = ("gated_delta_net", "kimi_delta_attention")


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule ops")


def _public(kind):
    import cudnn.linear_attention as la

    return getattr(la, kind)


def _op(kind):
    _public(kind)
    from cudnn.linear_attention.gdn.torch_op import gated_delta_net_fwd
    from cudnn.linear_attention.kda.torch_op import kimi_delta_attention_fwd

    return gated_delta_net_fwd if kind == "gated_delta_net" else kimi_delta_attention_fwd


def _inputs(kind, device, lengths=(30, 70), hk=2, h=4, d=64, state=True, dense=None):
    """Varlen THD over ``lengths`` (or a dense [B, L] batch when ``dense=(B, L)``); GVA by default."""
    lead = dense if dense is not None else (sum(lengths),)
    q = torch.randn(*lead, hk, d, device=device).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(*lead, hk, d, device=device), dim=-1).bfloat16()
    v = torch.randn(*lead, h, d, device=device).bfloat16()
    g = torch.nn.functional.logsigmoid(torch.randn(*lead, h, *(() if kind == "gated_delta_net" else (d,)), device=device)) / 8
    beta = torch.rand(*lead, h, device=device)
    if dense is not None:
        cu, n = None, dense[0]
    else:
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
        n = len(lengths)
    s0 = torch.randn(n, h, d, d, device=device) * 0.5 if state else None
    return q, k, v, g, beta, cu, s0


# -- CPU: schema, fake implementation, tracing -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_schema_has_schedule_with_the_default_schedule(kind):
    from cudnn.linear_attention._host.chunk_parallel import DEFAULT_SCHEDULE

    schema = str(_op(kind)._opoverload._schema)
    assert f'str schedule="{DEFAULT_SCHEDULE}"' in schema, schema
    assert DEFAULT_SCHEDULE == "parallel"  # flipped in session 5 (after the GPU numbers): change deliberately
    from cudnn.linear_attention import engines

    assert engines.KdaFwdSm90Engine.schedule == engines.GdnFwdSm90Engine.schedule == DEFAULT_SCHEDULE


@pytest.mark.parametrize("kind", KINDS)
def test_fake_metadata_and_compile_fullgraph_with_parallel_schedule(kind):
    """Both schedules trace; the non-default one given explicitly reaches the op call as an argument (the default is
    left out of the traced call)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from cudnn.linear_attention._host.chunk_parallel import DEFAULT_SCHEDULE

    fn = _public(kind)
    other = "serial" if DEFAULT_SCHEDULE == "parallel" else "parallel"

    def f(q, k, v, g, beta, cu, s0):
        o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, schedule=other)
        return o.float() * 2, fs

    x = _inputs(kind, "meta")
    o, fs = f(*x)
    assert o.shape == x[2].shape and fs.shape == (2, 4, 64, 64)
    o, fs = torch.compile(f, backend="eager", fullgraph=True)(*x)
    assert o.shape == x[2].shape and fs.shape == (2, 4, 64, 64)
    gm = make_fx(f, tracing_mode="fake")(*_inputs(kind, "cpu"))
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target) == f"cudnn_linear_attention.{kind}_fwd.default"]
    assert len(calls) == 1
    assert other in list(calls[0].args) + list(calls[0].kwargs.values()), calls[0].args


@pytest.mark.parametrize("kind", KINDS)
def test_opcheck_with_parallel_schedule(kind):
    q, k, v, g, beta, cu, s0 = _inputs(kind, "meta")
    torch.library.opcheck(
        _op(kind),
        (q, k, v, g, beta, 0.125, True, s0, True, cu, "parallel"),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"),
    )


@pytest.mark.parametrize("kind", KINDS)
def test_bad_schedule_is_a_value_error_before_tracing(kind):
    x = _inputs(kind, "meta")
    with pytest.raises(ValueError, match=r"schedule='chunked'; accepted \('serial', 'parallel'\)"):
        _public(kind)(*x[:5], cu_seqlens=x[5], schedule="chunked")
    with pytest.raises(ValueError, match="schedule='Parallel'"):
        _public(kind)(*x[:5], cu_seqlens=x[5], out=torch.empty_like(x[2]), schedule="Parallel")


# -- CPU: the real implementation's workspace handling, with a recording adapter ------------------------------------


class _Recorder:
    """Stands in for the family adapter: records the plan-time schedule, the workspace request and what execute got."""

    made: list = []

    def __init__(self, q, k, v, g, beta, o, *, schedule="serial", **kw):
        self.schedule = schedule
        self.requests = []
        self.workspaces = []
        _Recorder.made.append(self)

    def compile(self):
        pass

    def scratch_workspace_bytes(self, total_tokens=None, n_seqs=None, seq_len=None):
        self.requests.append((total_tokens, n_seqs, seq_len))
        return 1000 + total_tokens + 7 * n_seqs + 3 * seq_len

    def execute(self, q, k, v, g, beta, o, h0, ht, cu, *, current_stream=None, workspace=None):
        self.workspaces.append((workspace, _STREAM_LOG[-1] if _STREAM_LOG else None))


_STREAM_LOG: list = []


@pytest.fixture
def _recording(monkeypatch):
    """torch.cuda.current_stream -> a sentinel; cudnn._torch_stream.stream_context logs which stream each allocation
    ran under (the workspace must be allocated inside the launch stream's context: R1 / R2)."""
    import cudnn._torch_stream as ts

    sentinel = object()
    _STREAM_LOG.clear()
    _Recorder.made.clear()
    log = []

    @contextlib.contextmanager
    def ctx(stream, device):
        log.append(stream)
        _STREAM_LOG.append(("inside", stream))
        try:
            yield
        finally:
            _STREAM_LOG.append(("outside", stream))

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: sentinel)
    monkeypatch.setattr(ts, "stream_context", ctx)
    return sentinel, log


@pytest.mark.parametrize("dense", [None, (3, 100)], ids=["varlen", "dense"])
def test_parallel_workspace_is_sized_per_call_and_allocated_on_the_launch_stream(_recording, dense):
    from cudnn.linear_attention._host.delta_rule_api import delta_rule_forward

    sentinel, log = _recording
    plans: dict = {}
    x = _inputs("kimi_delta_attention", "cpu", lengths=(30, 70, 1), dense=dense)
    q, k, v, g, beta, cu, s0 = x
    allocated = []
    real_empty = torch.empty

    def empty(*shape, dtype=None, device=None, **kw):
        t = real_empty(*shape, dtype=dtype, device=device, **kw)
        allocated.append((t, _STREAM_LOG[-1]))
        return t

    torch.empty, saved = empty, torch.empty
    try:
        delta_rule_forward(_Recorder, plans, q, k, v, g, beta, None, True, s0, True, cu, None, "parallel")
        delta_rule_forward(_Recorder, plans, q, k, v, g, beta, None, True, s0, True, cu, None, "serial")
        delta_rule_forward(_Recorder, plans, q, k, v, g, beta, None, True, s0, True, cu, None, "parallel")
    finally:
        torch.empty = saved
    assert [p.schedule for p in _Recorder.made] == ["parallel", "serial"]  # one plan per schedule, reused
    par, ser = _Recorder.made
    T, n, L = (101, 3, 0) if dense is None else (300, 3, 100)
    assert par.requests == [(T, n, L)] * 2 and ser.requests == []
    ws = [w for w, _ in par.workspaces]
    assert all(w is not None and w.dtype == torch.uint8 and w.numel() == 1000 + T + 7 * n + 3 * L for w in ws)
    assert ser.workspaces[0][0] is None  # the serial schedule takes no workspace
    by_id = {id(t): where for t, where in allocated}
    assert all(by_id[id(w)] == ("inside", sentinel) for w in ws)  # allocated inside stream_context(launch stream)
    assert set(map(id, log)) == {id(sentinel)}


# -- CPU: graph engines ----------------------------------------------------------------------------------------------


def test_engines_pass_their_schedule_and_size_the_workspace():
    """The engines' ``schedule`` attribute (default "serial") reaches the adapter; a plan's workspace is the adapter's
    ``scratch_workspace_bytes()`` (0 serial) and ``execute`` hands the graph's workspace buffer to the adapter."""
    from cudnn.linear_attention import engines
    from cudnn.linear_attention._host.chunk_parallel import DEFAULT_SCHEDULE

    assert engines.GdnFwdSm90Engine.schedule == DEFAULT_SCHEDULE and engines.KdaFwdSm90Engine.schedule == DEFAULT_SCHEDULE

    class Adapter:
        def __init__(self, n):
            self.n = n
            self.got = None

        def scratch_workspace_bytes(self):
            return self.n

        def execute(self, *args, current_stream=None, workspace=None):
            self.got = (args, current_stream, workspace)

    uids = {p: i for i, p in enumerate(("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "O", "final_state"))}
    pack = {i: f"t{i}" for i in uids.values()}
    for n in (0, 4096):
        a = Adapter(n)
        plan = engines.DeltaRulePlan("kda_fwd_sm90", a, uids)
        assert plan.get_workspace_size() == n
        plan.execute(pack, "WS", "STREAM")
        assert a.got == (("t0", "t1", "t2", "t3", "t4", "t7", "t6", "t8", "t5"), "STREAM", "WS")


# -- GPU ---------------------------------------------------------------------------------------------------------------


def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule ops")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", ["varlen", "dense"])
def test_parallel_equals_serial_eager(kind, layout):
    _gpu()
    torch.manual_seed(0)
    fn = _public(kind)
    if layout == "varlen":
        x = _inputs(kind, "cuda", lengths=(1, 64, 65, 0, 700, 3, 1500), d=128)
    else:
        x = _inputs(kind, "cuda", hk=4, d=128, dense=(2, 300))
    q, k, v, g, beta, cu, s0 = x
    ser = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    par = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=True, schedule="parallel")
    torch.cuda.synchronize()
    assert torch.isfinite(ser["o"].float()).all()
    # rounding-level differences in both families' default prep kernels (KDA: ex2.approx decays, another solve order;
    # GDN since session 6: the restructured prep, beta and exp(G) folded into the inverse): the FlashAttention rule
    # against the fp32 recurrence, at most twice the serial kernel's error (GDN's bitwise check with the one-warpgroup
    # prep: test_gdn_parallel_gpu.py)
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
    import _parallel_cases as cases
    from _delta_rule_cases import GDN, KDA

    from cudnn_testing.tolerance import assert_close_fa

    ref_o, ref_s, _, _ = cases.refs(KDA if kind == "kimi_delta_attention" else GDN, q, k, v, g, beta, s0, True, cu, layout == "dense")
    noise_o, noise_s = 1e-3 * ref_o.abs().max().item(), 1e-3 * ref_s.abs().max().item()
    assert_close_fa(par["o"], ref_o, ser["o"], name="o parallel vs serial", factor=2.0, noise=noise_o)
    assert_close_fa(par["final_state"], ref_s, ser["final_state"], name="final_state parallel vs serial", factor=2.0, noise=noise_s)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_parallel_compiled_fullgraph_equals_eager(kind):
    _gpu()
    torch.manual_seed(1)
    fn = _public(kind)
    x = _inputs(kind, "cuda", lengths=(300, 1, 129), d=128)

    def f(q, k, v, g, beta, cu, s0):
        o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, schedule="parallel")
        return o.float() * 2 + 1, fs

    eager = f(*x)
    compiled = torch.compile(f, fullgraph=True)(*x)
    torch.cuda.synchronize()
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("kind", KINDS)
def test_parallel_first_call_under_capture_replays_to_eager_and_never_syncs(kind):
    """The first call of this batch (token total, sequence count) happens inside ``torch.cuda.graph``: the op sizes and
    allocates the workspace under capture (from the graph's pool) and launches the three kernels; replay on new inputs
    copied into the static ones equals eager bit for bit. The plan is warmed first on another batch (the kernels are
    compiled and loaded outside the capture). A warm eager call never synchronizes."""
    from cudnn_testing import detectors

    _gpu()
    torch.manual_seed(2)
    fn = _public(kind)
    warm = _inputs(kind, "cuda", lengths=(7, 100), h=6, hk=3, d=128)
    fn(*warm[:5], initial_state=warm[6], output_final_state=True, cu_seqlens=warm[5], schedule="parallel")
    torch.cuda.synchronize()
    static = _inputs(kind, "cuda", lengths=(5, 200, 64), h=6, hk=3, d=128)

    def call():
        return fn(*static[:5], initial_state=static[6], output_final_state=True, cu_seqlens=static[5], schedule="parallel")

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out = call()
    torch.cuda.current_stream().wait_stream(stream)
    fresh = _inputs(kind, "cuda", lengths=(5, 200, 64), h=6, hk=3, d=128)
    for s, f in zip(static, fresh, strict=True):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    eager = call()
    torch.cuda.synchronize()
    assert torch.equal(out["o"], eager["o"]) and torch.equal(out["final_state"], eager["final_state"])
    with detectors.no_sync():
        for _ in range(3):
            call()
    torch.cuda.synchronize()
