"""Host overhead of a prepared backward execute (issue 6): the memo of validated launch arguments and ``fast_guard``.

``SdpaBwdSm90.execute`` runs the full validation once per distinct call metadata and memoizes the three launches'
scalar arguments (never an address); a repeated call reads the metadata (or, with ``fast_guard``, passes one C++
TensorGuards check of all its tensors), checks the alignment of every address it passes and launches.

CPU tier (the three compiled kernels replaced by recorders; conftest's ``api`` fixture stubs the forward's tvm-ffi
switch and current-stream accessor, which the backward shares; ``_cuda_on`` compares devices only):

- the same call sequence on a reference plan (``_fast.memo_on = False``: the full validation on every call, as before
  the memo), a memo-only plan and a fast_guard plan hands the kernels identical arguments call by call, or raises the
  same error: dense causal GQA (BSHD / BHSD, fresh tensors, other extents, in-place restrides, aliases, misaligned
  addresses of every kind, a small workspace, a per-call scale and stream), THD varlen with sinks, a deterministic
  sliding-window plan and the non-causal d128 plan (m80 rows); the guard serves the repeated calls;
- detector twins (planted): a stride-blind guard, a stride-blind memo key and a skipped alignment check each make
  that comparison fail;
- the DSL's generic entry (no apache-tvm-ffi) gets the same addresses as cute pointers with the kernels' alignments;
- ``sdpa_bwd``: outputs in the inputs' memory order, launches equal to the plan's, the capability read once per device;
- host time per call, launches stubbed: full validation vs memo vs fast_guard (printed; the GPU host's numbers come
  from the GPU run).
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing.host_timing import Rounds  # noqa: E402
from cudnn_testing.markers import skip_unless_cutedsl  # noqa: E402


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


class _Launches:
    """The three kernels' stand-ins: one list of (kernel, arguments) in launch order."""

    def __init__(self):
        self.calls = []

    def entries(self):
        return tuple(lambda *a, name=name: self.calls.append((name, a)) for name in ("pre", "main", "post"))


@pytest.fixture
def bwd(api, monkeypatch):
    """cudnn.sdpa.bwd.api with recorded launches (``bwd._test_launches``), no CUDA check and an empty plan cache."""
    from cudnn.sdpa.bwd import api as mod

    rec = _Launches()
    monkeypatch.setattr(mod, "_compiled", lambda key, tvm_ffi=False: rec.entries())
    monkeypatch.setattr(mod, "_cuda_on", lambda x, device: x.device == device)
    monkeypatch.setattr(mod, "_PLANS", {})
    mod._test_launches = rec
    yield mod
    del mod._test_launches


def _bshd(b, s, h, d, dtype=torch.bfloat16):
    return torch.randn(b, s, h, d, dtype=dtype).transpose(1, 2)  # (B, H, S, D) view of BSHD storage


def _workspace(nbytes, offset=0):
    """A 128-byte aligned uint8 buffer (plus ``offset`` bytes)."""
    big = torch.empty(nbytes + 256, dtype=torch.uint8)
    start = (-big.data_ptr()) % 128 + offset
    return big[start : start + nbytes]


def _misaligned(x, nbytes=2):
    """A tensor with ``x``'s dtype, shape and strides at an address ``nbytes`` past a 16-byte boundary."""
    buf = bytearray((x.numel() + 16) * x.element_size() + 32)
    start = (-torch.frombuffer(buf, dtype=torch.uint8).data_ptr()) % 16 + nbytes
    return torch.frombuffer(buf, dtype=x.dtype, offset=start, count=x.numel() + 8).as_strided(x.shape, x.stride())


def _outcome(rec, fn):
    """What one call launches (a tuple of (kernel, arguments)) or the error it raises."""
    n = len(rec.calls)
    try:
        fn()
    except (ValueError, TypeError, NotImplementedError, AttributeError) as exc:
        return ("raises", type(exc).__name__, str(exc))
    return tuple(rec.calls[n:])


MODES = ("reference", "memo", "guard")


def _prepared(make, mode):
    """A compiled plan: ``reference`` validates every call in full (the memo off), ``memo`` without fast_guard, ``guard``."""
    plan = make()
    plan.fast_guard = mode == "guard"
    plan.compile()
    if mode == "reference":
        plan._fast.memo_on = False
    assert plan._fast.guard_on is (mode == "guard")
    return plan


def _run_modes(mod, make, calls, modes=MODES):
    """Each mode's outcomes of ``calls`` (each ``fn(plan)``) on a fresh plan, and the guard mode's guard hits (calls
    served by one unchanged installed guard)."""
    out, hits = {}, 0
    for mode in modes:
        plan = _prepared(make, mode)
        got = []
        for call in calls:
            before = plan._fast.guard
            got.append(_outcome(mod._test_launches, lambda call=call, plan=plan: call(plan)))
            if mode == "guard" and before is not None and plan._fast.guard is before:
                hits += 1
        out[mode] = got
    return out, hits


def _dense_case():
    q, do = _bshd(2, 96, 4, 128), _bshd(2, 96, 4, 128)
    k, v = _bshd(2, 80, 2, 128), _bshd(2, 80, 2, 128)
    o, lse = torch.empty_like(q), torch.randn(2, 4, 96)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def make():
        from cudnn.sdpa.bwd.api import SdpaBwdSm90

        return SdpaBwdSm90(q, k, v, o, do, lse, dq, dk, dv, is_causal=True)

    ws = _workspace(make().scratch_workspace_bytes())
    q2, k2, v2, do2, dq2 = (torch.randn_like(x) for x in (q, k, v, do, dq))  # fresh tensors, the same layout
    ws2 = _workspace(ws.numel(), 128)
    qc, dqc = q.contiguous(), dq.contiguous()  # BHSD strides
    q_s, o_s, do_s, dq_s = _bshd(2, 64, 4, 128), _bshd(2, 64, 4, 128), _bshd(2, 64, 4, 128), _bshd(2, 64, 4, 128)  # other S_q
    lse_s = torch.randn(2, 4, 64)
    lse_t = torch.randn(2, 96, 4).transpose(1, 2)  # other lse strides
    qm = _bshd(2, 96, 4, 128)  # one tensor object whose metadata changes in place below
    bshd, bhsd = qm.detach(), torch.empty(2, 4, 96, 128, dtype=torch.bfloat16)
    args = (k, v, o, do, lse, dq, dk, dv)

    def run(qq=q, kk=k, vv=v, oo=o, dd=do, ll=lse, gq=dq, gk=dk, gv=dv, w=ws, **kw):
        return lambda p: p.execute(qq, kk, vv, oo, dd, ll, gq, gk, gv, w, **kw)

    def restride(p):  # the same object, BHSD strides now: neither the memo nor the guard may serve the old strides
        qm.set_(bhsd.untyped_storage(), 0, bhsd.shape, bhsd.stride())
        return p.execute(qm, *args, ws)

    def reset(p):
        qm.set_(bshd.untyped_storage(), bshd.storage_offset(), bshd.shape, bshd.stride())
        return p.execute(q, *args, ws)

    base = run()
    calls = [
        reset, base, base, base,
        run(q2, k2, v2, dd=do2, gq=dq2, w=ws2),
        base, run(qc), base, base, run(gq=dqc), base, base,
        run(q_s, oo=o_s, dd=do_s, ll=lse_s, gq=dq_s), run(q_s, oo=o_s, dd=do_s, ll=lse_s, gq=dq_s), run(q_s, oo=o_s, dd=do_s, ll=lse_s, gq=dq_s),
        base, base, run(ll=lse_t), run(ll=lse_t), base,
        run(scale=0.25), run(current_stream=5), run(current_stream=types.SimpleNamespace(cuda_stream=0x6660)), run(current_stream="side"), base,
        run(oo=o.float()), base, base,
        run(gq=_misaligned(dq)), run(qq=_misaligned(q, 8)), run(gv=_misaligned(dv, 4)), base,
        run(w=_workspace(ws.numel(), 16)), run(w=_workspace(ws.numel(), 64)), base,
        run(ll=_misaligned(lse, 2)), base,
        run(w=ws[:100]), run(w=None), run(w=ws.view(torch.int8)), base,
        run(qm), run(qm), run(qm), restride, run(qm), run(qm), reset,
        run(q.detach().requires_grad_(True)), base, base,
        run(q[:, :3], oo=o[:, :3], dd=do[:, :3], ll=lse[:, :3], gq=dq[:, :3]),  # a head count the GQA ratio rejects
        run(kk=k[:1], vv=v[:1], gk=dk[:1], gv=dv[:1]),  # batch mismatch
        base, base,
        run(vv=k), run(vv=k), run(vv=k), run(vv=v), run(vv=k), run(vv=k),  # one object as K and V: an alias the guard must repeat
        run(sinks=torch.zeros(4), dsinks=torch.zeros(4)), run(cu_seqlens_q=torch.zeros(3, dtype=torch.int32)),
        run(max_seqlen_q=96), base, base,
        run(q[:0], oo=o[:0], dd=do[:0], ll=lse[:0], gq=dq[:0], kk=k[:0], vv=v[:0], gk=dk[:0], gv=dv[:0]),  # B = 0: nothing to launch
        run(q[:0], oo=o[:0], dd=do[:0], ll=lse[:0], gq=dq[:0], kk=k[:0], vv=v[:0], gk=dk[:0], gv=dv[:0]),
        run(q[:0], oo=o[:0], dd=do[:0], ll=lse[:0], gq=dq[:0], kk=k[:0], vv=v[:0], gk=dk[:0], gv=dv[:0]),
        base,
        lambda p: p.execute("q", *args, ws),
        base,
    ]  # fmt: skip
    return make, calls


def _varlen_case():
    h, hk, d = 4, 2, 64
    q, do = torch.randn(100, h, d, dtype=torch.float16), torch.randn(100, h, d, dtype=torch.float16)
    k, v = torch.randn(130, hk, d, dtype=torch.float16), torch.randn(130, hk, d, dtype=torch.float16)
    o, lse = torch.empty_like(q), torch.randn(h, 100)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    sinks, dsinks = torch.randn(h), torch.empty(h)
    cu_q, cu_k = torch.tensor([0, 40, 100], dtype=torch.int32), torch.tensor([0, 30, 130], dtype=torch.int32)
    cu_q2 = torch.tensor([0, 10, 100], dtype=torch.int32)  # other lengths, the same metadata: never read on the host
    q3, o3, do3, dq3 = (torch.randn(70, h, d, dtype=torch.float16) for _ in range(4))  # other token totals
    k3, v3, dk3, dv3 = (torch.randn(90, hk, d, dtype=torch.float16) for _ in range(4))
    lse3 = torch.randn(h, 70)

    def make():
        from cudnn.sdpa.bwd.api import SdpaBwdSm90

        return SdpaBwdSm90(
            q, k, v, o, do, lse, dq, dk, dv, sinks=sinks, is_causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k, max_seqlen_q=60, max_seqlen_kv=100
        )

    from cudnn.sdpa.bwd.api import workspace_bytes_for

    ws = _workspace(workspace_bytes_for(make(), q, cu_q))
    ws3 = _workspace(workspace_bytes_for(make(), q3, cu_q))

    def run(tq=(q, k, v, o, do, lse, dq, dk, dv), w=ws, s=sinks, ds=dsinks, cq=cu_q, ck=cu_k, mq=60, mk=100, **kw):
        return lambda p: p.execute(*tq, w, s, ds, cq, ck, mq, mk, **kw)

    t3 = (q3, k3, v3, o3, do3, lse3, dq3, dk3, dv3)
    base = run()
    calls = [
        base, base, base, run(cq=cu_q2), run(mq=90), run(mq=90), run(mq=90), run(mk=130), base,
        run(t3, ws3), run(t3, ws3), run(t3, ws3), run(t3, ws),  # a workspace of another T_q (large enough)
        run((q3, k3, v3, o3, do3, lse, dq3, dk3, dv3), ws3),  # lse of the wrong token total
        run(s=None), run(ds=None), run(s=sinks.double()), run(ds=torch.empty(h + 1)), run(s=_misaligned(sinks, 2)), base,
        run(cq=cu_q.long()), run(ck=torch.tensor([0, 130], dtype=torch.int32)), run(cq=_misaligned(cu_q, 2)), run(mq=None), run(cq=None), base,
        run(scale=0.5), run(scale=0.5), run(current_stream=7), base,
        run(mq=0), run(mq=0), run(mq=0, mk=0), run(mq=0, mk=0), run(mq=0, mk=0), base, base,
        run(w=ws[: ws.numel() // 2]), base,
    ]  # fmt: skip
    return make, calls


def _dense_det_case():
    """Deterministic (dQ turn counters in the workspace) sliding window, bottom-right, fp16 d64, BHSD."""
    q, do = torch.randn(1, 2, 70, 64, dtype=torch.float16), torch.randn(1, 2, 70, 64, dtype=torch.float16)
    k, v = torch.randn(1, 1, 90, 64, dtype=torch.float16), torch.randn(1, 1, 90, 64, dtype=torch.float16)
    o, lse = torch.empty_like(q), torch.randn(1, 2, 70)
    grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))

    def make():
        from cudnn.sdpa.bwd.api import SdpaBwdSm90

        return SdpaBwdSm90(q, k, v, o, do, lse, *grads, window_size=(16, 3), causal_bottom_right=True, deterministic=True, lse_log2=True, scale=0.3)

    ws = _workspace(make().scratch_workspace_bytes())
    call = lambda p: p.execute(q, k, v, o, do, lse, *grads, ws)  # noqa: E731
    return make, [call, call, call, lambda p: p.execute(q, k, v, o, do, lse, *grads, ws, scale=0.7), call]


def _m80_case():
    """The non-causal dense d128 plan (D128_NONCAUSAL_TUNING: 80-row query blocks, its own scratch padding)."""
    q, do = _bshd(1, 200, 2, 128), _bshd(1, 200, 2, 128)
    k, v = _bshd(1, 150, 2, 128), _bshd(1, 150, 2, 128)
    o, lse = torch.empty_like(q), torch.randn(1, 2, 200)
    grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))

    def make():
        from cudnn.sdpa.bwd.api import SdpaBwdSm90

        return SdpaBwdSm90(q, k, v, o, do, lse, *grads)

    ws = _workspace(make().scratch_workspace_bytes())
    call = lambda p: p.execute(q, k, v, o, do, lse, *grads, ws)  # noqa: E731
    return make, [call, call, call]


CASES = {"dense": _dense_case, "varlen": _varlen_case, "det": _dense_det_case, "m80": _m80_case}


@pytest.mark.parametrize("case", sorted(CASES))
def test_memo_and_guard_launch_what_the_full_validation_launches(bwd, case):
    make, calls = CASES[case]()
    out, hits = _run_modes(bwd, make, calls)
    for mode in ("memo", "guard"):
        for i, (a, b) in enumerate(zip(out["reference"], out[mode], strict=True)):
            assert a == b, f"call {i}: the {mode} plan's outcome {b} differs from the full validation's {a}"
    launched = [x for x in out["reference"] if x and x[0] != "raises"]
    assert len(launched[0]) == 3
    if case in ("dense", "varlen"):
        print(f"\n{case}: {len(calls)} calls, {hits} served by the guard")
        assert hits >= (15 if case == "dense" else 8), f"the guard served only {hits} calls: the fast path was not exercised"
        raised = [x for x in out["reference"] if x and x[0] == "raises"]
        assert len(raised) >= (15 if case == "dense" else 12)
        assert any(x == () for x in out["reference"])  # an empty problem launches nothing


def test_alignment_errors_name_the_operand(bwd):
    """A hit checks every address it passes: the TMA operands (16 bytes, the first by execute's argument order), the
    workspace (128, Workspace.over's message) and the fp32 / int32 operands (4)."""
    make, _ = _varlen_case()
    plan = _prepared(make, "guard")
    p = plan.execute
    q, k, v, o, do, lse, dq, dk, dv = plan_args = (
        torch.randn(100, 4, 64, dtype=torch.float16),
        *(torch.randn(130, 2, 64, dtype=torch.float16) for _ in range(2)),
        *(torch.randn(100, 4, 64, dtype=torch.float16) for _ in range(2)),
        torch.randn(4, 100),
        torch.empty(100, 4, 64, dtype=torch.float16),
        *(torch.empty(130, 2, 64, dtype=torch.float16) for _ in range(2)),
    )
    from cudnn.sdpa.bwd.api import workspace_bytes_for

    cu_q, cu_k, sinks, dsinks = torch.tensor([0, 40, 100], dtype=torch.int32), torch.tensor([0, 30, 130], dtype=torch.int32), torch.randn(4), torch.empty(4)
    ws = _workspace(workspace_bytes_for(plan, q, cu_q))
    for _ in range(3):
        p(*plan_args, ws, sinks, dsinks, cu_q, cu_k, 60, 100)
    assert plan._fast.guard is not None
    with pytest.raises(ValueError, match=r"\.execute: dk address 0x[0-9a-f]+ is not 16-byte aligned"):
        p(q, k, v, o, do, lse, dq, _misaligned(dk), _misaligned(dv), ws, sinks, dsinks, cu_q, cu_k, 60, 100)
    with pytest.raises(ValueError, match="workspace address .* not 128-byte aligned"):
        p(*plan_args, _workspace(ws.numel(), 32), sinks, dsinks, cu_q, cu_k, 60, 100)
    for name, bad in (("lse", (_misaligned(lse), sinks, dsinks, cu_q)), ("dsinks", (lse, sinks, _misaligned(dsinks), cu_q))):
        with pytest.raises(ValueError, match=f"execute: {name} address .* not 4-byte aligned"):
            p(q, k, v, o, do, bad[0], dq, dk, dv, ws, bad[1], bad[2], bad[3], cu_k, 60, 100)
    with pytest.raises(ValueError, match="cu_seqlens_q address .* not 4-byte aligned"):
        p(*plan_args, ws, sinks, dsinks, _misaligned(cu_q, 1), cu_k, 60, 100)
    assert plan._fast.guard is not None


# ---------------------------------------------------------------------------------------------- planted violations
def _differs(bwd, mode, case="dense"):
    make, calls = CASES[case]()
    out, _ = _run_modes(bwd, make, calls, ("reference", mode))
    return out["reference"] != out[mode]


def test_detector_sees_planted_stride_blind_guard(bwd, monkeypatch):
    """A TensorGuards that ignores strides: the restrided / BHSD calls after BSHD ones would launch stale strides."""
    from cudnn.sdpa.fwd import api as fwd

    real = fwd._tensor_guards()
    assert real is not None and not _differs(bwd, "guard")

    def stride_blind(*tensors, dynamic_dims_sizes, dynamic_dims_strides):
        return real(*tensors, dynamic_dims_sizes=dynamic_dims_sizes, dynamic_dims_strides=[[None] * t.dim() for t in tensors])

    monkeypatch.setattr(fwd, "_TENSOR_GUARDS", [stride_blind])
    assert _differs(bwd, "guard"), "the planted stride-blind guard went unnoticed"


def test_detector_sees_planted_stride_blind_memo(bwd, monkeypatch):
    """A memo key without the strides: a BHSD call after BSHD ones would reuse the BSHD launch scalars."""
    real = bwd._call_meta

    def no_strides(*args):
        return tuple(m for m in real(*args) if not (isinstance(m, tuple) and not isinstance(m, torch.Size)))

    monkeypatch.setattr(bwd, "_call_meta", no_strides)
    assert _differs(bwd, "memo"), "the planted stride-blind memo key went unnoticed"


def test_detector_sees_planted_skipped_alignment_check(bwd, monkeypatch):
    """A hit that no longer checks addresses would launch on the misaligned dq / workspace / lse."""
    monkeypatch.setattr(bwd, "_raise_misaligned", lambda *a: None)
    assert _differs(bwd, "guard"), "the planted skipped alignment check went unnoticed"


# ---------------------------------------------------------------------------------------------- entries, wrapper
def test_generic_entry_gets_the_same_addresses_as_cute_pointers(bwd, monkeypatch):
    """Without apache-tvm-ffi the DSL's compiled functions take cute pointers (the kernels' element types and assumed
    alignments) and a CUstream: the same addresses, scalars and stream as the tvm-ffi entries."""
    from cudnn.sdpa.fwd import api as fwd

    t = bwd._torch_bits()
    monkeypatch.setitem(t, "make_ptr", lambda dtype, addr, space, assumed_align: ("ptr", dtype.__name__, addr, assumed_align))
    make, calls = _varlen_case()
    got = {}
    for tvm in (True, False):
        monkeypatch.setattr(fwd, "_use_tvm_ffi", lambda tvm=tvm: tvm)
        plan = _prepared(make, "guard")
        got[tvm] = [_outcome(bwd._test_launches, lambda c=c, plan=plan: c(plan)) for c in calls[:4]]
    typed = got[False][0]
    names = [a[1] for _, args in typed for a in args if isinstance(a, tuple) and a[:1] == ("ptr",)]
    # Int32: cu_seqlens (pre 1, main 2, post 1) and dqfs's flags slot (pre, main and post: a causal default since session 20)
    assert (names.count("Float16"), names.count("Float32"), names.count("Int32")) == (2 + 6 + 1, 6 + 3 + 3, 1 + 2 + 1 + 3)
    aligns = {(kernel, i): a[3] for kernel, args in typed for i, a in enumerate(args) if isinstance(a, tuple) and a[:1] == ("ptr",)}
    assert aligns[("pre", 2)] == 4 and aligns[("pre", 0)] == 16 and aligns[("main", 11)] == 4 and aligns[("post", 3)] == 4

    def untyped(outcome):
        return tuple((k, tuple(a[2] if isinstance(a, tuple) and a[:1] == ("ptr",) else a for a in args[:-1]) + (int(args[-1]),)) for k, args in outcome)

    assert [untyped(o) for o in got[False]] == got[True]


class _AlignedTorch:
    """torch whose uint8 ``empty`` is 128-byte aligned (the CUDA caching allocator's is; the CPU allocator's 64)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *shape, dtype=None, device=None):
        return _workspace(shape[0]) if dtype is torch.uint8 else torch.empty(*shape, dtype=dtype, device=device)


def test_sdpa_bwd_allocates_in_input_order_and_launches_like_the_plan(bwd, monkeypatch):
    monkeypatch.setitem(bwd._torch_bits(), "torch", _AlignedTorch())
    q, do = _bshd(2, 96, 4, 128), _bshd(2, 96, 4, 128)
    k, v = _bshd(2, 80, 2, 128), torch.randn(2, 2, 80, 128, dtype=torch.bfloat16)  # v BHSD
    o, lse = torch.empty_like(q), torch.randn(2, 4, 96)
    res = [bwd.sdpa_bwd(q, k, v, o, do, lse, is_causal=True) for _ in range(3)]
    for r in res:
        assert r["dq"].shape == q.shape and r["dq"].stride() == q.stride() and r["dk"].stride() == k.stride() and r["dv"].stride() == v.stride()
    assert len(bwd._PLANS) == 1
    plan = next(iter(bwd._PLANS.values()))
    rec = bwd._test_launches.calls
    wrapper = rec[-3:]
    ws = _workspace(plan.scratch_workspace_bytes())
    r = res[-1]
    plan.execute(q, k, v, o, do, lse, r["dq"], r["dk"], r["dv"], ws)
    direct = rec[-3:]
    # workspace addresses (each call has its own buffer): LSE2, dpsum, dQ accumulator and the semaphore slot (a causal
    # d128 plan is persistent: its tile counter; and dqfs: its first-store flags, which the postprocess reads too)
    scratch = {"pre": (3, 4, 5, 8), "main": (6, 7, 8, 9), "post": (0, 4)}
    assert plan.key.persistent and plan.key.dq_first_store and all(calls[i] is not None for kernel, calls in wrapper for i in scratch[kernel])

    def strip(calls):
        return [(kernel, tuple(a for i, a in enumerate(args) if i not in scratch[kernel])) for kernel, args in calls]

    assert [k for k, _ in wrapper] == ["pre", "main", "post"] and strip(wrapper) == strip(direct)


def test_capability_is_read_once_per_device(bwd, monkeypatch):
    monkeypatch.setattr(bwd, "_SM90_DEVICES", {})  # the fake verdicts below must not outlive the test
    reads = []

    def capability(dev):
        reads.append(dev)
        return (9, 0) if dev == 0 else (8, 0)

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=capability, get_device_name=lambda dev: f"GPU{dev}"))
    q0, q1 = types.SimpleNamespace(get_device=lambda: 0), types.SimpleNamespace(get_device=lambda: 1)
    for _ in range(5):
        bwd._require_sm90(fake, q0)
    assert reads == [0]
    for _ in range(2):
        with pytest.raises(NotImplementedError, match=r"GPU1 \(sm_80\) is not served; sm_90 only"):
            bwd._require_sm90(fake, q1)
    assert reads.count(1) == 3  # the cached verdict, then the capability again for the message


def test_fast_guard_option_and_fallback(bwd, monkeypatch):
    make, calls = _m80_case()
    plan = make()
    plan.fast_guard = "yes"
    with pytest.raises(ValueError, match="fast_guard"):
        plan.compile()
    plan = make()
    plan.compile()  # no attribute: FAST_GUARD_DEFAULT
    assert bwd.FAST_GUARD_DEFAULT is True and plan._fast.guard_on
    for c in calls:
        c(plan)
    assert plan._fast.guard is not None
    from cudnn.sdpa.fwd import api as fwd

    monkeypatch.setattr(fwd, "_TENSOR_GUARDS", [None])  # a torch without dynamo: inactive, the memo path serves
    plan = make()
    plan.compile()
    assert not plan._fast.guard_on
    n = len(bwd._test_launches.calls)
    for c in calls:
        c(plan)
    assert plan._fast.guard is None and len(bwd._test_launches.calls) == n + 9


def test_reassigned_plan_scale_is_honoured(bwd):
    make, calls = _m80_case()
    plan = _prepared(make, "guard")
    for c in calls:
        c(plan)
    rec = bwd._test_launches.calls
    assert rec[-1][1][-2] == pytest.approx(128**-0.5)
    plan.scale = 0.125
    calls[0](plan)
    assert rec[-1][1][-2] == 0.125 and rec[-2][1][-4] == 0.125


# ---------------------------------------------------------------------------------------------- host time
@pytest.mark.host_timing
@pytest.mark.parametrize("case", ["dense", "varlen"])
def test_host_time_per_call(bwd, case):
    """Python side only (the three launches are recorders). Full validation on every call (as before the memo) vs the
    memo path vs fast_guard; the bound (fast_guard < 0.25 x full validation, the smallest same-round ratio) catches a fast
    path that stopped skipping the validation."""
    make, calls = CASES[case]()
    call = calls[1]
    plans = {mode: _prepared(make, mode) for mode in MODES}
    bwd._test_launches.calls = types.SimpleNamespace(append=lambda call: None)  # keep no references while timing
    timed = Rounds({mode: (lambda plan=plan: call(plan)) for mode, plan in plans.items()}, n={mode: 300 if mode == "reference" else 2000 for mode in MODES})
    best = timed.best
    assert plans["guard"]._fast.guard is not None and plans["memo"]._fast.guard is None
    print(
        f"\nhost (CPU, launches stubbed), {case}: execute {best['reference']:.1f} us (full validation), {best['memo']:.1f} us (memo), {best['guard']:.1f} us (fast_guard)"
    )
    assert timed.ratio("guard", "reference") < 0.25 and timed.ratio("memo", "reference") < 0.5
