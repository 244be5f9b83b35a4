"""Host overhead of a prepared forward execute (issue 4: <= 8 us): the ``fast_guard`` option.

``SdpaFwdSm90(..., fast_guard=True)`` (default ``api.FAST_GUARD_DEFAULT``, on since the session-5 H200 A/B) lets a repeated execute() check its
tensors' metadata with one C++ call (torch's ``TensorGuards``) against the layout that repeated last (one guard per
layout, built on its first repeat), instead of building and comparing the metadata tuple in Python. It changes nothing
the kernel receives: the memo entry it reuses is the one the full validation produced for exactly that metadata.

CPU tier (the compiled kernel replaced by a recorder, as in test_sdpa_fwd_launch.py: ``_compiled``, ``_use_tvm_ffi``,
``_current_stream_handle`` and ``_require_cuda`` stubbed):

- the same call sequence on a default plan and a fast_guard plan hands the kernel identical arguments call by call,
  or raises the same error, across fresh tensors of one layout, other strides / extents / dtypes, in-place metadata
  changes of the same tensor object, misaligned addresses, a per-call scale or stream, THD varlen with LSE and sinks;
  and the guard really serves the repeated calls (the installed guard object survives them);
- detector twin: a guard weakened to ignore strides (planted) makes that comparison fail;
- guards kept per layout (layouts taking turns build one each) and rebuilt at most twice for a layout whose guard fails
  on it (another dispatch state: inference mode);
- a caller's stream (int, CUstream, torch-stream-like, bool) launches on what core's launch_stream_handle returns;
- option values, the default (off), and a torch without TensorGuards (inactive: the memo path alone);
- host time: the guarded Python side is faster than the memo path's (printed; GPU-host numbers come from
  ``python benchmarks/sdpa_fwd.py --overhead``).

GPU tier: outputs of the guarded path bitwise equal to the default path's (dense BSHD, THD varlen causal), and the
R9 detectors: no sync / no allocation over three executes on torch's stream, a torch stream and a raw handle (both
paths), first executes inside CUDA-graph capture then replay == eager (guarded), a side-stream launch ordered after
its producer through a torch stream and through its raw handle, handle 0 never building an ExternalStream (both
paths). Two plan keys in all, shared with ``benchmarks/sdpa_fwd.py --overhead``.
"""

from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing.host_timing import Sink, per_call_us  # noqa: E402
from cudnn_testing.markers import skip_unless_cutedsl  # noqa: E402


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _bshd(b, s, h, d, dtype=torch.bfloat16):
    return torch.randn(b, s, h, d, dtype=dtype).transpose(1, 2)  # (B, H, S, D) view of BSHD storage


def _outcome(rec, fn):
    """What one call hands the kernel (its argument tuple, or None when it launches nothing) or the error it raises."""
    n = len(rec.calls)
    try:
        fn()
    except (ValueError, TypeError, NotImplementedError) as exc:
        return ("raises", type(exc).__name__, str(exc))
    return rec.calls[-1] if len(rec.calls) > n else None


def _run_both(api, make_plan, calls):
    """Run ``calls`` (each ``fn(plan)``) on a default plan and on a fast_guard plan; return both outcome lists and the
    number of calls the fast_guard plan served from one unchanged installed guard object (guard hits)."""
    outcomes = []
    hits = 0
    for fast_guard in (False, True):
        plan = make_plan(fast_guard)
        plan.compile()
        assert plan._fast_guard_active is fast_guard
        got = []
        for call in calls:
            before = plan._guard
            got.append(_outcome(api._test_recorder, lambda call=call, plan=plan: call(plan)))
            if fast_guard and before is not None and plan._guard is before:
                hits += 1
        outcomes.append(got)
    return outcomes[0], outcomes[1], hits


def _dense_calls():
    q, k, v = _bshd(2, 96, 4, 128), _bshd(2, 80, 2, 128), _bshd(2, 80, 2, 128)
    o = torch.empty_like(q)
    q2, k2, v2 = (torch.randn_like(x) for x in (q, k, v))  # fresh tensors, the same layout
    o2 = torch.empty_like(o)
    qc = q.contiguous()  # the same shape, BHSD strides
    vc = v.contiguous()
    qs = _bshd(2, 64, 4, 128)  # other extents
    os_ = torch.empty_like(qs)
    qm = _bshd(2, 96, 4, 128)  # one tensor object whose metadata changes in place below
    bshd = qm.detach()  # its original storage and BSHD strides (restored at the start of every run)
    bhsd = torch.empty(2, 4, 96, 128, dtype=torch.bfloat16)
    misaligned = torch.empty(o.numel() + 1, dtype=o.dtype)[1:].view(o.shape)

    def restride(plan):  # same object, BHSD strides now: the guard must not serve the old strides
        qm.set_(bhsd.untyped_storage(), 0, bhsd.shape, bhsd.stride())
        return plan.execute(qm, k, v, o)

    def reset(plan):
        qm.set_(bshd.untyped_storage(), bshd.storage_offset(), bshd.shape, bshd.stride())
        return plan.execute(q, k, v, o)

    calls = [
        reset,
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q2, k2, v2, o2),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(qc, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(qs, k, v, os_),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o, scale=0.25),
        lambda p: p.execute(q, k, v, o, current_stream=5),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o.float()),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, misaligned),
        lambda p: p.execute(q, k, v, o, torch.empty(2, 4, 96)),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(qm, k, v, o),
        lambda p: p.execute(qm, k, v, o),
        lambda p: p.execute(qm, k, v, o),
        restride,
        lambda p: p.execute(qm, k, v, o),
        lambda p: p.execute(q.detach().requires_grad_(True), k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q[:, :3], k[:, :1], v[:, :1], o[:, :3]),  # a head count the plan's GQA ratio rejects
        lambda p: p.execute(q, k, v, o),
        lambda p: p.execute(q, k, k, o),  # one object as K and V: the guard checks it once and the alias every call
        lambda p: p.execute(q, k, k, o),
        lambda p: p.execute(q, k, k, o),
        lambda p: p.execute(q, k, vc, o),  # V no longer K, other strides
        lambda p: p.execute(q, k, k, o),
        lambda p: p.execute(q, k, k, o),
        lambda p: p.execute(q, k, k, o),
        lambda p: p.execute(q, k, v, o),  # K and V distinct again, V with K's metadata
        lambda p: p.execute(q, k, v, o),
    ]
    return (lambda fg: _api().SdpaFwdSm90(q, k, v, o, is_causal=True, fast_guard=fg)), calls


def _varlen_calls():
    h, hk, d = 4, 2, 64
    q = torch.randn(100, h, d, dtype=torch.float16)
    k = torch.randn(130, hk, d, dtype=torch.float16)
    o = torch.empty_like(q)
    lse = torch.empty(h, 100)
    sinks = torch.randn(h)
    cu_q = torch.tensor([0, 40, 100], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 130], dtype=torch.int32)
    cu_q2 = torch.tensor([0, 10, 100], dtype=torch.int32)  # other lengths, the same metadata: never read on the host
    q3, k3 = torch.randn(70, h, d, dtype=torch.float16), torch.randn(90, hk, d, dtype=torch.float16)  # other token totals
    o3, lse3 = torch.empty_like(q3), torch.empty(h, 70)

    calls = [
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q2, cu_k, 60),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 90),  # another max_seqlen_q: another grid
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 90),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 90),
        lambda p: p.execute(q, k, k, o, lse, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse, sinks, cu_q, cu_k, 60),  # lse of the wrong token total
        lambda p: p.execute(q3, k3, k3, o3, lse3, None, cu_q, cu_k, 60),  # the plan has sinks
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks.double(), cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60, scale=0.5),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 0),  # max_seqlen_q = 0: nothing to launch
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 0),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 0),
        lambda p: p.execute(q3, k3, k3, o3, lse3, sinks, cu_q, cu_k, 60),
    ]

    def make(fg):
        return _api().SdpaFwdSm90(
            q, k, k, o, lse, sinks=sinks, is_causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k, max_seqlen_q=60, max_seqlen_kv=100, fast_guard=fg
        )

    return make, calls


def _api():
    from cudnn.sdpa.fwd import api

    return api


@pytest.mark.parametrize("case", ["dense", "varlen"])
def test_fast_guard_launches_what_the_memo_path_launches(api, case):
    make, calls = _dense_calls() if case == "dense" else _varlen_calls()
    default, guarded, hits = _run_both(api, make, calls)
    print(f"\n{case}: {len(calls)} calls, {hits} served by the guard")
    for i, (a, b) in enumerate(zip(default, guarded, strict=True)):
        assert a == b, f"call {i}: the fast_guard plan handed the kernel {b}, the default plan {a}"
    assert hits >= (10 if case == "dense" else 5), f"the guard served only {hits} calls: the fast path was not exercised"
    raised = sum(1 for a in default if a is not None and a[0] == "raises")
    assert raised >= (4 if case == "dense" else 3)  # the malformed calls above still raise


def test_fast_guard_detector_sees_planted_stride_blind_guard(api, monkeypatch):
    """Planted violation: a guard that ignores strides. The comparison above must then fail (the restrided call and
    the BHSD call after a BSHD one would launch stale strides)."""
    real = api._tensor_guards()
    assert real is not None

    def stride_blind(*tensors, dynamic_dims_sizes, dynamic_dims_strides):
        return real(*tensors, dynamic_dims_sizes=dynamic_dims_sizes, dynamic_dims_strides=[[None] * t.dim() for t in tensors])

    monkeypatch.setattr(api, "_TENSOR_GUARDS", [stride_blind])
    make, calls = _dense_calls()
    default, guarded, _ = _run_both(api, make, calls)
    assert default != guarded, "the planted stride-blind guard went unnoticed"


def test_fast_guard_option_default_and_fallback(api, monkeypatch):
    q = _bshd(1, 64, 4, 64)
    o = torch.empty_like(q)
    assert api.FAST_GUARD_DEFAULT is True  # on since the H200 A/B (sdpa_fwd_overhead.md)
    plan = api.SdpaFwdSm90(q, q, q, o)
    plan.compile()
    for _ in range(3):
        plan.execute(q, q, q, o)
    assert plan._fast_guard_active is True and plan._guard is not None
    with pytest.raises(ValueError, match="fast_guard"):
        api.SdpaFwdSm90(q, q, q, o, fast_guard="yes").compile()
    monkeypatch.setattr(api, "FAST_GUARD_DEFAULT", False)
    plan = api.SdpaFwdSm90(q, q, q, o)
    plan.compile()
    for _ in range(3):
        plan.execute(q, q, q, o)
    assert plan._fast_guard_active is False and plan._guard is None
    monkeypatch.setattr(api, "_TENSOR_GUARDS", [None])  # a torch without dynamo: inactive, the memo path serves
    plan = api.SdpaFwdSm90(q, q, q, o, fast_guard=True)
    plan.compile()
    rec = api._test_recorder.calls
    n = len(rec)
    for _ in range(3):
        plan.execute(q, q, q, o)
    assert plan._fast_guard_active is False and plan._guard is None and len(rec) == n + 3 and rec[-1] == rec[-2]


def test_fast_guard_builds_once_per_layout_and_gives_up_on_failing_layouts(api, monkeypatch):
    """Guards are kept per layout: layouts taking turns reinstall their guard instead of building one per switch; a
    guard that fails on its own layout (built outside inference mode, called inside it: other dispatch keys) is rebuilt
    at most _GUARD_BUILDS_MAX times, and every call still hands the kernel what the default plan does."""
    q, k, v = _bshd(1, 64, 4, 64), _bshd(1, 64, 4, 64), _bshd(1, 64, 4, 64)
    qc = q.contiguous()
    o = torch.empty_like(q)
    built = []
    real = api._make_guard
    monkeypatch.setattr(api, "_make_guard", lambda *a: built.append(1) or real(*a))
    seq = [q] * 3 + [qc] * 3 + [q] * 3 + [qc] * 3 + [q] * 3
    rec = api._test_recorder.calls
    runs = {}
    for fg in (False, True):
        plan = api.SdpaFwdSm90(q, k, v, o, fast_guard=fg)
        plan.compile()
        n = len(rec)
        for x in seq:
            plan.execute(x, k, v, o)
        with torch.inference_mode():
            for _ in range(8):
                plan.execute(q, k, v, o)
        runs[fg] = rec[n:]
    assert runs[False] == runs[True]
    assert len(built) == 2 + api._GUARD_BUILDS_MAX - 1, f"{len(built)} guards built"  # q, qc, then the inference-mode rebuild


def test_caller_stream_handles_are_core_launch_stream_handle(api):
    """execute() reads a caller's stream without building q.device or importing per call (an int as is, else core's
    stream_handle): the handle it launches on equals core's launch_stream_handle(stream, device) for every stream kind."""
    import types

    import cuda.bindings.driver as cuda

    from cudnn._torch_stream import launch_stream_handle

    q, k, v = _bshd(1, 64, 4, 64), _bshd(1, 64, 4, 64), _bshd(1, 64, 4, 64)
    o = torch.empty_like(q)
    streams = [0, 1, 2, 0x7F00_1234_5670, cuda.CUstream(0x5550), types.SimpleNamespace(cuda_stream=0x6660), True]
    rec = api._test_recorder.calls
    for fg in (False, True):
        plan = api.SdpaFwdSm90(q, k, v, o, fast_guard=fg)
        plan.compile()
        for _ in range(3):  # fast_guard: the calls below run on the installed guard
            plan.execute(q, k, v, o)
        for st in streams:
            plan.execute(q, k, v, o, current_stream=st)
            assert rec[-1][-1] == launch_stream_handle(st, q.device), st
        with pytest.raises(TypeError, match="stream handle"):
            plan.execute(q, k, v, o, current_stream="side")


def _c_calls(fn):
    """The names of the C functions ``fn`` calls from Python (sys.setprofile's c_call events), in order."""
    names = []

    def prof(frame, event, arg):
        if event == "c_call":
            names.append(getattr(arg, "__name__", repr(arg)))

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


def test_fast_guard_skips_the_metadata_tuple(api):
    """Python side only (the kernel call is the recorder). A guarded call skips building the 16-entry metadata tuple: it
    reads no stride and no device of any tensor (one TensorGuards check stands in for them), where the memo path reads
    four strides and five devices. Counted, not timed: a shared 2-core CI host times the two paths within noise of each
    other (the printed best-of-rounds times are for the reader)."""
    q, k, v = _bshd(1, 128, 4, 128), _bshd(1, 128, 4, 128), _bshd(1, 128, 4, 128)
    o = torch.empty_like(q)
    plans = {}
    for fg in (False, True):
        plans[fg] = api.SdpaFwdSm90(q, k, v, o, fast_guard=fg)
        plans[fg].compile()
        for _ in range(3):  # fast_guard: the second call with one layout installs its guard
            plans[fg].execute(q, k, v, o)
    assert plans[True]._guard is not None and plans[False]._guard is None
    api._test_recorder.calls = Sink()
    calls = {fg: _c_calls(lambda plan=plan: plan.execute(q, k, v, o)) for fg, plan in plans.items()}
    assert calls[False].count("stride") == 4 and calls[False].count("get_device") >= 4, calls[False]
    assert "stride" not in calls[True] and "get_device" not in calls[True], calls[True]
    assert len(calls[True]) < len(calls[False]), (calls[True], calls[False])
    best = {fg: per_call_us(lambda plan=plan: plan.execute(q, k, v, o)) for fg, plan in plans.items()}
    print(f"\nhost (CPU, kernel stubbed): execute {best[False]:.2f} us (memo path), {best[True]:.2f} us (fast_guard)")


# ---------------------------------------------------------------------------------------------- GPU tier
def _gpu_floor():
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()


#: The GPU tests use two plan keys only, the ones benchmarks/sdpa_fwd.py --overhead times (bf16, d = 128, H = H_kv:
#: dense non-causal, THD causal without LSE), so a GPU run compiles each once (the kernel cache's disk layer serves the
#: benchmark run after the tests). Extents are runtime values: these shapes differ from the benchmark's.
def _gpu_dense(b=2, h=4, hk=4, s=384, d=128, dtype=torch.bfloat16):
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
    return q, k, v


def _prepared(q, k, v, o, *rest, fast_guard, **kw):
    from cudnn.sdpa import SdpaFwdSm90

    plan = SdpaFwdSm90(q, k, v, o, *rest, fast_guard=fast_guard, **kw)
    plan.check_support()
    plan.compile()
    return plan


@pytest.mark.gpu
def test_fast_guard_outputs_bitwise_equal_default_dense():
    _gpu_floor()
    from cudnn_testing.reference_attention import attention_ref
    from cudnn_testing.tolerance import assert_close_fa

    q, k, v = _gpu_dense()
    outs = {}
    for fg in (False, True):
        o = torch.full_like(q, float("nan"))
        plan = _prepared(q, k, v, o, fast_guard=fg)
        for _ in range(4):  # validate, repeat (installs the guard), then guard hits
            o.fill_(float("nan"))
            plan.execute(q, k, v, o)
        assert plan._guard is not None if fg else plan._guard is None
        outs[fg] = o
    torch.cuda.synchronize()
    assert torch.equal(outs[False], outs[True])
    ref, _ = attention_ref(q, k, v)
    lowp, _ = attention_ref(q, k, v, upcast=False)
    assert_close_fa(outs[True], ref, lowp)


@pytest.mark.gpu
def test_fast_guard_outputs_bitwise_equal_default_varlen():
    _gpu_floor()
    from cudnn_testing.reference_attention import attention_ref_varlen
    from cudnn_testing.tolerance import assert_close_fa

    lens_q, lens_k = [1, 200, 77], [5, 200, 300]
    cq, ck = [0], [0]
    for a, b in zip(lens_q, lens_k, strict=True):
        cq.append(cq[-1] + a)
        ck.append(ck[-1] + b)
    h, hk, d = 4, 4, 128
    q = torch.randn(cq[-1], h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(ck[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(ck[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    cu_q = torch.tensor(cq, dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(ck, dtype=torch.int32, device="cuda")
    res = {}
    for fg in (False, True):
        o = torch.full_like(q, float("nan"))
        plan = _prepared(q, k, v, o, fast_guard=fg, is_causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k, max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_k))
        for _ in range(4):  # validate, repeat (installs the guard: cu_seqlens make it the non-plain guard), then hits
            o.fill_(float("nan"))
            plan.execute(q, k, v, o, None, None, cu_q, cu_k, max(lens_q))
        assert plan._guard is not None if fg else plan._guard is None
        res[fg] = o
    torch.cuda.synchronize()
    assert torch.equal(res[False], res[True])
    ref, _ = attention_ref_varlen(q, k, v, cq, ck, is_causal=True)
    lowp, _ = attention_ref_varlen(q, k, v, cq, ck, is_causal=True, upcast=False)
    assert_close_fa(res[True], ref, lowp)


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("fast_guard", [False, True])
def test_execute_never_syncs_or_allocates(fast_guard):
    """Both execute paths (the default memo path, whose stream handling changed with this option, and the guard)."""
    _gpu_floor()
    from cudnn_testing import detectors

    q, k, v = _gpu_dense()
    o = torch.empty_like(q)
    plan = _prepared(q, k, v, o, fast_guard=fast_guard)
    plan.execute(q, k, v, o)
    plan.execute(q, k, v, o)  # fast_guard: installs the guard, so the executes below are guard hits
    torch.cuda.synchronize()
    guard = plan._guard
    assert (guard is not None) is fast_guard
    side = torch.cuda.Stream()
    for stream in (None, side, side.cuda_stream):
        detectors.assert_no_sync_no_alloc(lambda stream=stream: plan.execute(q, k, v, o, current_stream=stream))
    assert plan._guard is guard


@pytest.mark.gpu
@pytest.mark.detector
def test_fast_guard_first_executes_inside_graph_capture_replay_like_eager():
    _gpu_floor()
    from cudnn_testing import detectors

    q, k, v = _gpu_dense(s=333)
    o = torch.empty_like(q)
    plan = _prepared(q, k, v, o, fast_guard=True)

    def run():  # validation, guard installation and a guard hit, all inside the capture on the first run()
        for _ in range(3):
            plan.execute(q, k, v, o)

    detectors.assert_capture_matches_eager(run, [o])
    assert plan._guard is not None


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("fast_guard", [False, True])
def test_side_stream_and_handle_zero(monkeypatch, fast_guard):
    _gpu_floor()
    from cudnn_testing import detectors
    from cudnn_testing.reference_attention import attention_ref

    q, k, v = _gpu_dense()
    o = torch.empty_like(q)
    plan = _prepared(q, k, v, o, fast_guard=fast_guard)
    for _ in range(2):
        plan.execute(q, k, v, o)
    torch.cuda.synchronize()
    assert (plan._guard is not None) is fast_guard
    q2, k2, v2 = (torch.randn_like(x) for x in (q, k, v))

    def produce():
        q.copy_(q2), k.copy_(k2), v.copy_(v2)

    for as_int in (False, True):  # a torch stream, and its raw handle (the int fast path)
        o.fill_(float("nan"))
        torch.cuda.synchronize()  # the poison lands before the side stream's launch
        detectors.run_on_side_stream_with_sentinel(lambda s, as_int=as_int: plan.execute(q, k, v, o, current_stream=s.cuda_stream if as_int else s), produce)
        ref, _ = attention_ref(q2, k2, v2)
        assert (o.float() - ref).abs().max().item() < 2e-2
    o.fill_(float("nan"))
    with detectors.external_stream_forbidden(monkeypatch):
        plan.execute(q, k, v, o, current_stream=0)
    torch.cuda.synchronize()
    assert (o.float() - attention_ref(q, k, v)[0]).abs().max().item() < 2e-2


def test_scale_constant_matches_kernel_convention(api):
    """The prebuilt arguments the guard reuses carry the plan's default scale in log2 units (as the memo path's)."""
    q = _bshd(1, 32, 2, 64)
    o = torch.empty_like(q)
    plan = api.SdpaFwdSm90(q, q, q, o, fast_guard=True)
    plan.compile()
    for _ in range(3):
        plan.execute(q, q, q, o)
    assert plan._guard is not None
    assert api._test_recorder.calls[-1][-4] == pytest.approx(1 / math.sqrt(64) * math.log2(math.e))
