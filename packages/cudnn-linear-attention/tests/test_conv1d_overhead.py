"""Host path of the causal_conv1d forward (issue #7: the eager public call lost ~30 us per call to the host at 67M
elements). CPU tier: the compiled kernel is replaced by a recorder (``api._compile_cached``), the stream lookups by
constants, so every test runs on CPU tensors and compares what the kernel would be handed, call by call.

- ``CausalConv1d.fast_host`` (execute memoizes its validation per tensor metadata, :func:`api._fwd_meta`): the same call
  sequence on a ``fast_host=False`` plan and a ``fast_host=True`` plan hands the kernel identical arguments or raises
  identical errors (type and message), on both launch routes (tvm-ffi integers, DSL cute pointers), across fresh
  tensors of one layout, other token totals and sequence counts, strided views, in-place metadata changes of one
  tensor object, misaligned addresses, dtype / stride / declaration errors, and a caller's stream; and the memo really
  serves the repeated calls (full validations counted).
- Detector twin: a planted stride-blind memo key makes that comparison fail.
- ``torch_op.DIRECT_EAGER`` (the public ``causal_conv1d`` calls the op body without torch's custom-op dispatch where
  that dispatch can change nothing): the same public calls with and without it hand the kernel identical arguments,
  return outputs of identical metadata and raise identical errors; the direct path is really taken for plain eager
  calls and never under autograd, FakeTensorMode, a torch function mode, torch.compile, a meta tensor or a
  non-string activation.
- Fixes that came with the memo (each checked on both paths): a varlen plan re-binds another sequence count with
  initial / final states (it raised before), and a weight / bias / cu_seqlens view with other strides is rejected (it
  was read as if dense before).
- Host time (printed): the memoized execute and the direct public call against the full paths; loose bounds so a fast
  path that stopped skipping its work goes red. GPU-host numbers come from ``benchmarks/linear_attention.py conv1d``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing.host_timing import Rounds, Sink  # noqa: E402
from cudnn_testing.markers import skip_unless_cutedsl  # noqa: E402

D, W = 256, 4
_HANDLE = 0xABC0


class _Recorder:
    """Stands in for the compiled kernel: records each call's arguments, cute pointers and streams as plain tuples."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(tuple(_plain(a) for a in args))


def _plain(a):
    if hasattr(a, "_pointer") and hasattr(a, "_assumed_align"):  # a cute runtime pointer (DSL route)
        return ("ptr", a.dtype.__name__, int(a._pointer), a._assumed_align)
    if type(a).__name__ == "CUstream":
        return ("stream", int(a))
    return a


@pytest.fixture
def stub(monkeypatch):
    """``(api, torch_op, recorder)`` with the kernel recorded, constant stream handles, CPU tensors taken by the direct
    path, empty op plan cache and the defaults of the host options."""
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")
    import cudnn.linear_attention.conv1d.api as api
    from cudnn.linear_attention.conv1d import torch_op

    rec = _Recorder()
    monkeypatch.setattr(api, "_compile_cached", lambda *a, **k: rec)
    monkeypatch.setattr(api, "_stream_handle", lambda cs, dev: _HANDLE if cs is None else cs)
    monkeypatch.setattr(api, "_stream", lambda cs, dev: ("stream", _HANDLE if cs is None else cs))
    monkeypatch.setattr(torch_op, "_PLANS", {})
    monkeypatch.setattr(torch_op, "_served", lambda t: t.device.type == "cpu")  # CPU tensors stand in for CUDA ones
    monkeypatch.setattr(torch_op, "DIRECT_EAGER", True)
    monkeypatch.setattr(torch_op, "FWD_TVM_FFI", None)
    monkeypatch.setattr(api, "FAST_HOST_DEFAULT", True)
    return api, torch_op, rec


def _outcome(rec, fn):
    """What one call hands the kernel (its argument tuple) or the error it raises."""
    n = len(rec.calls)
    try:
        fn()
    except (ValueError, TypeError, NotImplementedError, RuntimeError, AttributeError) as exc:
        return ("raises", type(exc).__name__, str(exc))
    assert len(rec.calls) == n + 1, "a call that did not raise launched nothing (or more than once)"
    return rec.calls[-1]


def _aligned(shape, dtype=torch.bfloat16, stride=None):
    t = torch.randn(shape, dtype=torch.float32).to(dtype)
    if stride is not None:
        t = torch.empty_strided(shape, stride, dtype=dtype).copy_(t)
    assert t.data_ptr() % 16 == 0
    return t


def _misaligned(shape, dtype=torch.bfloat16):
    n = 1
    for s in shape:
        n *= s
    return torch.empty(n + 8, dtype=dtype)[1 : n + 1].view(shape)


def _varlen_sequence():
    """(make_plan(fast_host, tvm_ffi), calls) of a varlen plan with bias, initial and final states, SiLU."""
    cu3 = torch.tensor([0, 1, 40, 100], dtype=torch.int32)
    cu5 = torch.tensor([0, 1, 2, 3, 90, 130], dtype=torch.int32)  # another token total and sequence count
    x, y = _aligned((100, D)), torch.empty(100, D, dtype=torch.bfloat16)
    x2, y2 = _aligned((100, D)), torch.empty(100, D, dtype=torch.bfloat16)  # fresh tensors, the same layout
    x5, y5 = _aligned((130, D)), torch.empty(130, D, dtype=torch.bfloat16)
    w, b = _aligned((D, W)), _aligned((D,))
    i3, f3 = _aligned((3, D, W - 1)), torch.empty(3, D, W - 1, dtype=torch.bfloat16)
    i5, f5 = _aligned((5, D, W - 1)), torch.empty(5, D, W - 1, dtype=torch.bfloat16)
    i5t = _aligned((5, W - 1, D)).transpose(1, 2)  # states of any strides: other strides, another memo entry
    qkv = _aligned((100, 3 * D))
    xs = qkv[:, D : 2 * D]  # token stride 3D: a slice of a fused projection
    w_t = _aligned((W, D)).t()  # [D, W] with strides (1, D): the kernel reads weight densely, so it must raise
    b_s = _aligned((2 * D,))[::2]
    cu_s = torch.tensor([0, 0, 1, 0, 40, 0, 100, 0], dtype=torch.int32)[::2]  # cu_seqlens values, stride 2
    cu64 = cu3.long()
    xm = _misaligned((100, D))
    ym = _misaligned((100, D))
    obj = _aligned((100, D))  # one tensor object whose metadata changes in place (set_) below
    obj_data = obj.detach()
    obj_strided = _aligned((100, 3 * D))[:, :D]
    x1, y1, cu1 = _aligned((1, D)), torch.empty(1, D, dtype=torch.bfloat16), torch.tensor([0, 1], dtype=torch.int32)
    i1, f1 = _aligned((1, D, W - 1)), torch.empty(1, D, W - 1, dtype=torch.bfloat16)
    x1s = qkv[:1, D : 2 * D]  # one token of the fused projection: its token stride is never stepped
    x0, y0, cu0 = torch.empty(0, D, dtype=torch.bfloat16), torch.empty(0, D, dtype=torch.bfloat16), torch.tensor([0], dtype=torch.int32)
    i0, f0 = torch.empty(0, D, W - 1, dtype=torch.bfloat16), torch.empty(0, D, W - 1, dtype=torch.bfloat16)

    def restride(p):  # same object, token stride 3D now: the memo must not serve the old strides
        obj.set_(obj_strided.untyped_storage(), obj_strided.storage_offset(), obj_strided.shape, obj_strided.stride())
        return p.execute(obj, w, y, b, cu3, i3, f3)

    def reset(p):
        obj.set_(obj_data.untyped_storage(), 0, obj_data.shape, obj_data.stride())
        return p.execute(x, w, y, b, cu3, i3, f3)

    calls = [
        reset,
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x2, w, y2, b, cu3, i3, f3),
        lambda p: p.execute(x5, w, y5, b, cu5, i5, f5),  # N = 5 on an N = 3 plan
        lambda p: p.execute(x5, w, y5, b, cu5, i5, f5),
        lambda p: p.execute(x5, w, y5, b, cu5, i5t, f5),
        lambda p: p.execute(x5, w, y, b, cu5, i5, f5),  # out of another token total (x's layout otherwise)
        lambda p: p.execute(x5, w, y5, b, cu5, i3, f5),  # 3 state rows for 5 sequences
        lambda p: p.execute(x5, w, y5, b, cu5, i5, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x1, w, y1, b, cu1, i1, f1),  # one token, one sequence
        lambda p: p.execute(x1, w, y1, b, cu1, i1, f1),
        lambda p: p.execute(x1s, w, y1, b, cu1, i1, f1),
        lambda p: p.execute(x1s, w, y1, b, cu1, i1, f1),
        lambda p: p.execute(x0, w, y0, b, cu0, i0, f0),  # no tokens, no sequences
        lambda p: p.execute(x0, w, y0, b, cu0, i0, f0),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(xs, w, y, b, cu3, i3, f3),
        lambda p: p.execute(xs, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3, current_stream=0x5550),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(xm, w, y, b, cu3, i3, f3),  # a misaligned x with the metadata of a validated call
        lambda p: p.execute(x, w, ym, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w_t, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b_s, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu_s, i3, f3),
        lambda p: p.execute(x, w, y, b, cu64, i3, f3),
        lambda p: p.execute(x, w, y, None, cu3, i3, f3),  # declared bias missing
        lambda p: p.execute(x, w, y, b, cu3, i5, f3),  # 5 state rows for 3 sequences
        lambda p: p.execute(x, w, y.float(), b, cu3, i3, f3),
        lambda p: p.execute(x, w, y[:50], b, cu3, i3, f3),
        lambda p: p.execute(x.float(), w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute(obj, w, y, b, cu3, i3, f3),
        lambda p: p.execute(obj, w, y, b, cu3, i3, f3),
        restride,
        lambda p: p.execute(obj, w, y, b, cu3, i3, f3),
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
        lambda p: p.execute("x", w, y, b, cu3, i3, f3),  # not a tensor: the full validation names the problem
        lambda p: p.execute(x, w, y, b, cu3, i3, f3),
    ]

    def make(api, fast_host, tvm_ffi):
        plan = api.CausalConv1d(x, w, y, b, cu3, i3, f3, "silu")
        plan.fast_host, plan.tvm_ffi = fast_host, tvm_ffi
        plan.compile()
        return plan

    return make, calls


def _dense_sequence():
    x, y = _aligned((2, 64, D)), torch.empty(2, 64, D, dtype=torch.bfloat16)
    x2, y2 = _aligned((2, 64, D)), torch.empty(2, 64, D, dtype=torch.bfloat16)
    xb, yb = _aligned((3, 64, D)), torch.empty(3, 64, D, dtype=torch.bfloat16)  # another batch: the plan's shape is fixed
    w = _aligned((D, W))
    xt = _aligned((64, 2, D)).transpose(0, 1)  # [B, L, D] not walkable as [B * L, D]
    calls = [
        lambda p: p.execute(x, w, y),
        lambda p: p.execute(x, w, y),
        lambda p: p.execute(x2, w, y2),
        lambda p: p.execute(xb, w, yb),
        lambda p: p.execute(x, w, y),
        lambda p: p.execute(xt, w, y),
        lambda p: p.execute(x, w, y, current_stream=7),
        lambda p: p.execute(x, w, y),
        lambda p: p.execute(x, w, y, x[0, 0]),  # undeclared bias
    ]

    def make(api, fast_host, tvm_ffi):
        plan = api.CausalConv1d(x, w, y)
        plan.fast_host, plan.tvm_ffi = fast_host, tvm_ffi
        plan.compile()
        return plan

    return make, calls


@pytest.mark.parametrize("tvm_ffi", [True, False], ids=["tvm-ffi", "dsl-entry"])
@pytest.mark.parametrize("case", ["varlen", "dense"])
def test_fast_host_launches_what_the_full_validation_launches(stub, monkeypatch, case, tvm_ffi):
    api, _, rec = stub
    make, calls = _varlen_sequence() if case == "varlen" else _dense_sequence()
    validations = []
    real = api.CausalConv1d._validate
    monkeypatch.setattr(api.CausalConv1d, "_validate", lambda self, *a: validations.append(1) or real(self, *a))
    runs = {}
    for fast_host in (False, True):
        plan = make(api, fast_host, tvm_ffi)
        validations.clear()
        runs[fast_host] = [_outcome(rec, lambda c=c, plan=plan: c(plan)) for c in calls]
        runs[(fast_host, "validations")] = len(validations)
    for i, (a, b) in enumerate(zip(runs[False], runs[True], strict=True)):
        assert a == b, f"call {i}: the fast_host plan gave {b}, the full validation {a}"
    raised = [o for o in runs[False] if o[0] == "raises"]
    assert len(raised) >= (12 if case == "varlen" else 2), raised  # the malformed calls above still raise
    assert runs[(False, "validations")] == len(calls)
    served = len(calls) - runs[(True, "validations")]
    print(f"\n{case} / {'tvm-ffi' if tvm_ffi else 'DSL entry'}: {len(calls)} calls, {served} served by the memo")
    assert served >= (8 if case == "varlen" else 3), f"the memo served only {served} calls: the fast path was not exercised"


def test_varlen_memo_serves_every_token_total_and_sequence_count(stub, monkeypatch):
    """Continuous batching: a varlen plan validates a layout once; later calls with other T and N (and states of N rows)
    are memo hits that launch with their own T and N (the full validation's arguments, checked call by call)."""
    api, _, rec = stub
    validations = []
    real = api.CausalConv1d._validate
    monkeypatch.setattr(api.CausalConv1d, "_validate", lambda self, *a: validations.append(1) or real(self, *a))
    w, b = _aligned((D, W)), _aligned((D,))
    plans = {}
    for fast_host in (False, True):
        plans[fast_host] = api.CausalConv1d(
            _aligned((10, D)), w, torch.empty(10, D, dtype=torch.bfloat16), b, torch.tensor([0, 10], dtype=torch.int32), _aligned((1, D, W - 1)), None, "silu"
        )
        plans[fast_host].fast_host, plans[fast_host].tvm_ffi = fast_host, True
        plans[fast_host].compile()
    validations.clear()
    for lengths in ([5, 100, 1], [1, 2, 300, 7, 64], [9], [4, 4, 4, 4, 4, 4, 4, 4], [5, 100, 1]):
        cu = torch.tensor([0] + [sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32)
        x, y = _aligned((sum(lengths), D)), torch.empty(sum(lengths), D, dtype=torch.bfloat16)
        init = _aligned((len(lengths), D, W - 1))
        got = []
        for fast_host in (False, True):
            plans[fast_host].execute(x, w, y, b, cu, init)
            got.append(rec.calls[-1])
        assert got[0] == got[1] and got[1][7] == sum(lengths) and got[1][12] == len(lengths), got
    assert len(validations) == 5 + 1  # every call of the fast_host=False plan, one of the fast_host plan


def test_fast_host_detector_sees_a_planted_stride_blind_memo(stub, monkeypatch):
    """Planted violation: a memo key without strides. The comparison above must then fail (the strided x, the restrided
    object, the transposed states would launch with stale strides, the strided weight / bias / cu_seqlens would pass)."""
    api, _, rec = stub
    real = api._fwd_meta

    def stride_blind(x, weight, out, bias, cu, init, fin, varlen):
        full = real(x, weight, out, bias, cu, init, fin, varlen)
        return tuple(m for i, m in enumerate(full[:12]) if i not in (1, 3, 5)) + tuple(None if m is None else (m[0], m[2], m[3]) for m in full[12:])

    monkeypatch.setattr(api, "_fwd_meta", stride_blind)
    make, calls = _varlen_sequence()
    runs = []
    for fast_host in (False, True):
        plan = make(api, fast_host, True)
        runs.append([_outcome(rec, lambda c=c, plan=plan: c(plan)) for c in calls])
    assert runs[0] != runs[1], "the planted stride-blind memo went unnoticed"


def test_shipped_defaults_turn_the_fast_paths_on():
    """On since session 6, after the H200 run of the GPU tests and the ``ours-fast`` column (3358 GB/s eager at T16k x
    D4096 vs 1602 with them off): the memoized validation, the direct eager call and the op's tvm-ffi route."""
    pytest.importorskip("torch")
    from cudnn.linear_attention.conv1d import api, torch_op

    assert api.FAST_HOST_DEFAULT is True and torch_op.DIRECT_EAGER is True and torch_op.FWD_TVM_FFI is True
    assert not hasattr(api, "FWD_PREFETCH_DEFAULT") and not hasattr(torch_op, "FWD_PREFETCH")  # the prefetch ring is gone


def test_fast_host_option_values_and_default(stub):
    api, _, rec = stub
    x, w = _aligned((64, D)), _aligned((D, W))
    y = torch.empty_like(x)
    plan = api.CausalConv1d(x, w, y)
    assert plan.fast_host is api.FAST_HOST_DEFAULT is True
    plan.fast_host = True
    plan.compile()
    assert plan._memo == {}
    plan.fast_host = "yes"
    with pytest.raises(ValueError, match="fast_host"):
        plan.compile()
    plan.fast_host = False
    plan.compile()
    assert plan._memo is None
    plan.execute(x, w, y)
    plan.execute(x, w, y)
    assert rec.calls[-1] == rec.calls[-2]


def test_forward_grid_default_values_and_op_plan_key(stub, monkeypatch):
    """The forward's grid (``plan.grid_ctas``, ``Conv1dFwdKey.grid_ctas``): the default None resolves at plan time to 4 x
    the SMs of the plan's device (528 for these CPU tensors: the H200 fallback), 0 keeps the 64-token CTAs, N > 0 is taken
    as is, malformed values raise ValueError at compile(); ``streaming`` is gone. The public op keys its plans on the
    adapter default, so a changed default builds a new plan, and the SM count is read once, at plan build, never per call."""
    import dataclasses

    api, torch_op, rec = stub
    from cudnn.linear_attention.conv1d.fwd_kernel import Conv1dFwdKey

    assert api.FWD_GRID_CTAS_DEFAULT is None and not hasattr(api, "FWD_STREAMING_DEFAULT")
    assert "streaming" not in {f.name for f in dataclasses.fields(Conv1dFwdKey)}
    x, w = _aligned((64, D)), _aligned((D, W))
    plan = api.CausalConv1d(x, w, torch.empty_like(x), activation="silu")
    assert plan.grid_ctas is None and not hasattr(plan, "streaming")
    plan.check_support()
    assert plan.compile_key().grid_ctas == 528
    for grid in (0, 3, 1056):
        plan.grid_ctas = grid
        assert plan.compile_key().grid_ctas == grid
        plan.compile()
    for grid in (-1, 1.5, "528", True):
        plan.grid_ctas = grid
        with pytest.raises(ValueError, match="grid_ctas"):
            plan.compile()

    reads = []
    real = api._default_grid_ctas
    monkeypatch.setattr(api, "_default_grid_ctas", lambda device: reads.append(device) or real(device))
    for _ in range(3):
        torch_op.causal_conv1d(x, w, None, "silu")
    plans = dict(torch_op._PLANS)
    assert len(plans) == 1 and next(iter(plans.values())).grid_ctas is None
    assert reads == ["cpu"], reads  # once, when the op built its plan: never per call
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "FWD_GRID_CTAS_DEFAULT", 0)
        torch_op.causal_conv1d(x, w, None, "silu")
    new = [p for k, p in torch_op._PLANS.items() if k not in plans]
    assert len(new) == 1 and new[0].grid_ctas == 0 and new[0].compile_key().grid_ctas == 0


def test_default_grid_reads_the_plans_device(monkeypatch):
    """``api._default_grid_ctas``: 4 x the SM count of the plan's CUDA device (its index; torch's current device for a plan
    that names none), 4 x 132 (an H200) where no CUDA device is known. torch.cuda faked: two GPUs of 132 and 114 SMs."""
    from types import SimpleNamespace

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.conv1d import api

    sms = {0: 132, 1: 114}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(multi_processor_count=sms[i]))
    assert api._default_grid_ctas("cuda:0") == 528 and api._default_grid_ctas("cuda:1") == 456
    assert api._default_grid_ctas(None) == 456 and api._default_grid_ctas("cuda") == 456
    assert api._default_grid_ctas("cpu") == 528
    x = TensorDesc.contiguous((64, D), "bfloat16", "x", "cuda:1")
    plan = api.CausalConv1d(x, TensorDesc.contiguous((D, W), "bfloat16", "weight", "cuda:1"), x)
    plan.check_support()
    assert plan.compile_key().grid_ctas == 456
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert api._default_grid_ctas(None) == 528


def _public_calls(api):
    """Calls of the public ``causal_conv1d`` (with their arguments kept alive by the closures)."""
    cu = torch.tensor([0, 1, 40, 100], dtype=torch.int32)
    cu2 = torch.tensor([0, 60, 61, 100], dtype=torch.int32)
    x = _aligned((100, D))
    x3 = _aligned((2, 50, D))
    w, b = _aligned((D, W)), _aligned((D,))
    init = _aligned((3, D, W - 1))
    xs = _aligned((100, 3 * D))[:, :D]
    xf = x.float()
    cu64 = cu.long()
    f = api.causal_conv1d
    return [
        lambda: f(x, w, b, "silu", cu_seqlens=cu),
        lambda: f(x, w, b, "silu", cu_seqlens=cu),
        lambda: f(x, w, b, "silu", cu_seqlens=cu2),
        lambda: f(x, w, b, "silu", cu_seqlens=cu, initial_states=init, output_final_states=True),
        lambda: f(x, w, b, "silu", cu_seqlens=cu, output_final_states=True),
        lambda: f(xs, w, None, None, cu_seqlens=cu),
        lambda: f(x3, w, b, "swish"),
        lambda: f(x3, w, b, "swish"),
        lambda: f(x3, w, None, None, output_final_states=True),
        lambda: f(x, w, b, "relu", cu_seqlens=cu),  # a malformed activation: our ValueError, both ways
        lambda: f(x, w, b, 7, cu_seqlens=cu),  # not a string: the op's schema check (the direct path declines it)
        lambda: f(x, w.t(), b, "silu", cu_seqlens=cu),
        lambda: f(xf, w, b, "silu", cu_seqlens=cu),
        lambda: f(x, w, b, "silu", cu_seqlens=cu64),
        lambda: f(x, w, b, "silu", cu_seqlens=cu, initial_states=init[:2]),
        lambda: f(x[:, :8], w, b, "silu", cu_seqlens=cu),
        lambda: f(x, w, b, "silu", cu_seqlens=cu),
    ]


def _public_outcome(rec, fn):
    n = len(rec.calls)
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - the op's schema errors are RuntimeErrors; compared, not swallowed
        return ("raises", type(exc).__name__, str(exc))
    outs = out if isinstance(out, tuple) else (out,)
    return (rec.calls[n:], [(tuple(o.shape), o.dtype, tuple(o.stride())) for o in outs])


def _addresses_free(outcome):
    """An outcome with the output addresses masked (fresh allocations differ run to run): the kernel arguments minus
    the y / final_states pointers."""
    if outcome[0] == "raises":
        return outcome
    calls, outs = outcome
    return ([c[:3] + c[4:6] + c[7:] for c in calls], outs)


def test_direct_eager_path_matches_the_custom_op(stub, monkeypatch):
    api, torch_op, rec = stub
    monkeypatch.setattr(torch_op, "FWD_TVM_FFI", True)
    taken = []
    real = torch_op._fwd_body
    monkeypatch.setattr(torch_op, "_fwd_body", lambda *a: taken.append(len(a)) or real(*a))
    calls = _public_calls(api)
    runs = {}
    for direct in (False, True):
        monkeypatch.setattr(torch_op, "DIRECT_EAGER", direct)
        monkeypatch.setattr(torch_op, "_PLANS", {})
        taken.clear()
        runs[direct] = [_addresses_free(_public_outcome(rec, c)) for c in calls]
        runs[(direct, "direct")] = sum(1 for n in taken if n == 8)  # the fast path passes placeholder=False
    for i, (a, b) in enumerate(zip(runs[False], runs[True], strict=True)):
        assert a == b, f"call {i}: direct {b}, custom op {a}"
    assert runs[(False, "direct")] == 0
    assert runs[(True, "direct")] >= 10, runs[(True, "direct")]
    assert sum(1 for o in runs[True] if o[0] == "raises") >= 6


def test_direct_eager_path_declines_whenever_dispatch_matters(stub, monkeypatch):
    """Autograd, FakeTensorMode, a torch function mode, a meta tensor, a non-string activation and torch.compile go
    through the custom op (its autograd, fake implementation and tracing), never the direct call."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode

    api, torch_op, rec = stub
    monkeypatch.setattr(torch_op, "FWD_TVM_FFI", True)
    direct = []
    real = torch_op._fwd_body
    monkeypatch.setattr(torch_op, "_fwd_body", lambda *a: direct.append(len(a) == 8) or real(*a))
    cu = torch.tensor([0, 30, 64], dtype=torch.int32)
    x, w = _aligned((64, D)), _aligned((D, W))

    api.causal_conv1d(x, w, None, "silu", cu_seqlens=cu)
    assert direct == [True]  # the plain eager call takes it
    direct.clear()

    wg = w.clone().requires_grad_()
    with torch.no_grad():
        api.causal_conv1d(x, wg, None, "silu", cu_seqlens=cu)  # requires_grad but no grad mode: nothing to record
    assert direct == [True]
    direct.clear()
    api.causal_conv1d(x, torch.nn.Parameter(w.clone(), requires_grad=False), None, "silu", cu_seqlens=cu)
    assert direct == [True]
    direct.clear()

    try:
        api.causal_conv1d(x, wg, None, "silu", cu_seqlens=cu)  # autograd: the op (its autograd formula)
    except Exception:  # noqa: BLE001 - the recorder returns nothing to differentiate; only the route matters here
        pass
    assert direct == [False]
    direct.clear()

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        api.causal_conv1d(x, w, None, "silu", cu_seqlens=cu)
    assert direct == [False]
    direct.clear()

    n = len(rec.calls)
    with FakeTensorMode() as mode:
        fx, fw, fcu = mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(cu)
        fy = api.causal_conv1d(fx, fw, None, "silu", cu_seqlens=fcu)
    assert tuple(fy.shape) == tuple(x.shape) and direct == [] and len(rec.calls) == n  # the fake implementation ran

    y = api.causal_conv1d(x.to("meta"), w.to("meta"), None, "silu", cu_seqlens=cu.to("meta"))
    assert y.device.type == "meta" and direct == [] and len(rec.calls) == n

    with pytest.raises(Exception):  # noqa: B017 - the op's schema check, whatever its type in this torch
        api.causal_conv1d(x, w, None, 3, cu_seqlens=cu)
    assert direct == []

    compiled = torch.compile(lambda x, w: api.causal_conv1d(x, w, None, "silu", cu_seqlens=cu), backend="eager", fullgraph=True)
    compiled(x, w)  # fullgraph: dynamo traced the op route (the direct check is not traceable)
    assert direct == [False] and len(rec.calls) == n + 1


def test_varlen_states_rebind_another_sequence_count(stub):
    """Before: an N = 3 plan raised for N = 5 initial / final states (the public op keys its plans without N)."""
    api, _, rec = stub
    w = _aligned((D, W))
    for n in (3, 5, 2):
        x = _aligned((120, D))
        cu = torch.tensor([0] + [120 * (i + 1) // n for i in range(n)], dtype=torch.int32)
        init = _aligned((n, D, W - 1))
        y, final = api.causal_conv1d(x, w, None, "silu", cu_seqlens=cu, initial_states=init, output_final_states=True)
        assert tuple(final.shape) == (n, D, W - 1)
        assert rec.calls[-1][12] == n  # n_seqs
    with pytest.raises(ValueError, match="rows but cu_seqlens describes"):
        api.causal_conv1d(x, w, None, "silu", cu_seqlens=cu, initial_states=_aligned((n + 1, D, W - 1)), output_final_states=True)


@pytest.mark.host_timing
def test_host_time_of_the_fast_paths(stub, monkeypatch):
    """Python side only (the kernel is the recorder; on the GPU host add the launch itself). Round-robin rounds, bounds
    on the smallest same-round ratio (cudnn_testing.host_timing), loose (a shared 2-core CPU): they catch a fast path
    that stopped skipping its work."""
    api, torch_op, rec = stub
    rec.calls = Sink()
    cu = torch.tensor([0, 30, 64], dtype=torch.int32)
    x, w, b = _aligned((64, 4096)), _aligned((4096, W)), _aligned((4096,))
    y = torch.empty_like(x)
    plans = {}
    for fast_host in (False, True):
        plans[fast_host] = api.CausalConv1d(x, w, y, b, cu, activation="silu")
        plans[fast_host].fast_host, plans[fast_host].tvm_ffi = fast_host, True
        plans[fast_host].compile()
    monkeypatch.setattr(torch_op, "FWD_TVM_FFI", True)
    public = lambda: api.causal_conv1d(x, w, b, "silu", cu_seqlens=cu)  # noqa: E731
    timed = Rounds(
        {"full": lambda: plans[False].execute(x, w, y, b, cu), "memo": lambda: plans[True].execute(x, w, y, b, cu), "op": public, "direct": public},
        setup={"op": lambda: monkeypatch.setattr(torch_op, "DIRECT_EAGER", False), "direct": lambda: monkeypatch.setattr(torch_op, "DIRECT_EAGER", True)},
    )
    best = timed.best
    print(
        f"\nhost (CPU, kernel stubbed, tvm-ffi route): execute {best['full']:.2f} us full validation, {best['memo']:.2f} us memo; "
        f"public causal_conv1d {best['op']:.2f} us through the custom op, {best['direct']:.2f} us direct"
    )
    assert timed.ratio("memo", "full") < 0.6
    assert timed.ratio("direct", "op") < 0.8


# --- the decode update's host path (session 9): memoized validation, the direct eager call, the op's tvm-ffi route ---

UB, UD = 8, 256  # batch rows and channels of the update cases


def _update_sequence():
    """(make_plan(fast_host, tvm_ffi, indices), calls) of an update plan with bias and SiLU: fresh tensors of one layout,
    misaligned addresses, wrong dtypes / shapes / strides, declaration errors, a caller's stream, an in-place restride."""
    x, y = _aligned((UB, UD)), torch.empty(UB, UD, dtype=torch.bfloat16)
    x2, y2 = _aligned((UB, UD)), torch.empty(UB, UD, dtype=torch.bfloat16)
    st, st2 = _aligned((16, UD, W - 1)), _aligned((16, UD, W - 1))
    w, b = _aligned((UD, W)), _aligned((UD,))
    idx = torch.tensor([3, -1, 0, 7, 15, 2, 9, 1], dtype=torch.int32)
    idx2 = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7], dtype=torch.int32)
    idx_s = torch.zeros(2 * UB, dtype=torch.int32)[::2]
    st_t = _aligned((16, W - 1, UD)).transpose(1, 2)  # another stride: the plan is built for the contiguous state
    xs = _aligned((UB, 3 * UD))[:, UD : 2 * UD]  # row stride 3D: a slice of a fused projection
    xm, ym = _misaligned((UB, UD)), _misaligned((UB, UD))
    stm = _misaligned((16, UD, W - 1))
    w_t = _aligned((W, UD)).t()
    b_s = _aligned((2 * UD,))[::2]
    obj = _aligned((UB, UD))
    obj_data = obj.detach()
    obj_strided = _aligned((UB, 3 * UD))[:, :UD]

    def restride(p, i):  # same object, row stride 3D now: the memo must not serve the old stride
        obj.set_(obj_strided.untyped_storage(), obj_strided.storage_offset(), obj_strided.shape, obj_strided.stride())
        return p.execute(obj, st, w, y, b, i)

    def reset(p, i):
        obj.set_(obj_data.untyped_storage(), 0, obj_data.shape, obj_data.stride())
        return p.execute(x, st, w, y, b, i)

    calls = [
        reset,
        lambda p, i: p.execute(x, st, w, y, b, i),
        lambda p, i: p.execute(x, st, w, y, b, i),
        lambda p, i: p.execute(x2, st2, w, y2, b, i if i is None else idx2),
        lambda p, i: p.execute(x2, st2, w, y2, b, i if i is None else idx2),
        lambda p, i: p.execute(xs, st, w, y, b, i),
        lambda p, i: p.execute(xs, st, w, y, b, i),
        lambda p, i: p.execute(x, st, w, y, b, i, current_stream=0x5550),
        lambda p, i: p.execute(xm, st, w, y, b, i),  # misaligned x with the metadata of a validated call
        lambda p, i: p.execute(x, st, w, ym, b, i),
        lambda p, i: p.execute(x, stm, w, y, b, i),
        lambda p, i: p.execute(x, st, w, y, b, i),
        lambda p, i: p.execute(x, st_t, w, y, b, i),
        lambda p, i: p.execute(x, st, w_t, y, b, i),
        lambda p, i: p.execute(x, st, w, y, b_s, i),
        lambda p, i: p.execute(x, st, w, y, b, i if i is None else idx_s),
        lambda p, i: p.execute(x, st, w, y, b, i if i is None else idx2.long()),
        lambda p, i: p.execute(x, st, w, y, b, idx if i is None else None),  # undeclared / missing indices
        lambda p, i: p.execute(x, st, w, y, None, i),  # declared bias missing
        lambda p, i: p.execute(x.float(), st, w, y, b, i),
        lambda p, i: p.execute(x, st.float(), w, y, b, i),
        lambda p, i: p.execute(x[:4], st, w, y[:4], b, i if i is None else i[:4]),
        lambda p, i: p.execute(x, st[:4], w, y, b, i),
        lambda p, i: p.execute(x, st, w, y, b, i),
        lambda p, i: p.execute(obj, st, w, y, b, i),
        lambda p, i: p.execute(obj, st, w, y, b, i),
        restride,
        lambda p, i: p.execute(obj, st, w, y, b, i),
        lambda p, i: p.execute("x", st, w, y, b, i),  # not a tensor: the full validation names the problem
        lambda p, i: p.execute(x, st, w, y, b, i),
    ]

    def make(api, fast_host, tvm_ffi, indices):
        plan = api.CausalConv1dUpdate(x, st, w, y, b, idx if indices else None, "silu")
        plan.fast_host, plan.tvm_ffi = fast_host, tvm_ffi
        plan.compile()
        return plan, (idx if indices else None)

    return make, calls


@pytest.mark.parametrize("indices", [False, True], ids=["rows", "indices"])
@pytest.mark.parametrize("tvm_ffi", [True, False], ids=["tvm-ffi", "dsl-entry"])
def test_update_fast_host_launches_what_the_full_validation_launches(stub, monkeypatch, tvm_ffi, indices):
    """``CausalConv1dUpdate.fast_host`` (default on since session 9): the same call sequence on a ``fast_host=False`` plan
    and a ``fast_host=True`` plan hands the kernel identical arguments or raises identical errors, on both launch routes,
    with and without ``conv_state_indices``; the memo really serves the repeated calls."""
    api, _, rec = stub
    make, calls = _update_sequence()
    validations = []
    real = api.CausalConv1dUpdate._validate
    monkeypatch.setattr(api.CausalConv1dUpdate, "_validate", lambda self, *a: validations.append(1) or real(self, *a))
    runs = {}
    for fast_host in (False, True):
        plan, idx = make(api, fast_host, tvm_ffi, indices)
        validations.clear()
        runs[fast_host] = [_outcome(rec, lambda c=c, plan=plan, idx=idx: c(plan, idx)) for c in calls]
        runs[(fast_host, "validations")] = len(validations)
    for i, (a, b) in enumerate(zip(runs[False], runs[True], strict=True)):
        assert a == b, f"call {i}: the fast_host plan gave {b}, the full validation {a}"
    raised = [o for o in runs[False] if o[0] == "raises"]
    assert len(raised) >= (14 if indices else 12), raised
    assert runs[(False, "validations")] == len(calls)
    served = len(calls) - runs[(True, "validations")]
    assert served >= 6, f"the memo served only {served} calls: the fast path was not exercised"


def test_update_fast_host_detector_sees_a_planted_stride_blind_memo(stub, monkeypatch):
    """Planted violation: an update memo key without strides. The comparison above must then fail (the strided x, the
    transposed state, the strided weight / bias / indices, the restrided object would pass or launch with stale strides)."""
    api, _, rec = stub
    real = api._update_meta

    def stride_blind(*args):
        return tuple(m for i, m in enumerate(real(*args)[:16]) if i not in (1, 5, 9, 13))

    monkeypatch.setattr(api, "_update_meta", stride_blind)
    make, calls = _update_sequence()
    runs = []
    for fast_host in (False, True):
        plan, idx = make(api, fast_host, True, True)
        runs.append([_outcome(rec, lambda c=c, plan=plan, idx=idx: c(plan, idx)) for c in calls])
    assert runs[0] != runs[1], "the planted stride-blind memo went unnoticed"


def test_update_fast_host_option_values(stub):
    api, _, rec = stub
    x, st, w = _aligned((UB, UD)), _aligned((UB, UD, W - 1)), _aligned((UD, W))
    plan = api.CausalConv1dUpdate(x, st, w, torch.empty_like(x))
    assert plan.fast_host is api.UPDATE_FAST_HOST_DEFAULT is True
    plan.compile()
    assert plan._memo == {}
    plan.fast_host = 1
    with pytest.raises(ValueError, match="fast_host"):
        plan.compile()
    plan.fast_host = False
    plan.compile()
    assert plan._memo is None
    plan.execute(x, st, w, torch.empty_like(x))
    plan.execute(x, st, w, torch.empty_like(x))
    assert rec.calls[-1][:3] == rec.calls[-2][:3]


def _public_update_calls(api):
    """Calls of the public ``causal_conv1d_update`` (arguments kept alive by the closures) with their conv_state."""
    x, w, b = _aligned((UB, UD)), _aligned((UD, W)), _aligned((UD,))
    st, st_big = _aligned((UB, UD, W - 1)), _aligned((16, UD, W - 1))
    idx = torch.tensor([3, -1, 0, 7, 15, 2, 9, 1], dtype=torch.int32)
    x4 = _aligned((4, UD))
    xf, wt, idx64 = x.float(), w.t(), idx.long()
    f = api.causal_conv1d_update
    return [
        (st, lambda: f(x, st, w, b, "silu")),
        (st, lambda: f(x, st, w, b, "silu")),
        (st_big, lambda: f(x, st_big, w, None, None, conv_state_indices=idx)),
        (st_big, lambda: f(x, st_big, w, None, None, conv_state_indices=idx)),
        (st, lambda: f(x4, st, w, b, "swish")),
        (st, lambda: f(x, st, w, b, "relu")),  # malformed activation: our ValueError, both ways
        (st, lambda: f(x, st, w, b, 7)),  # not a string: the op's schema check (the direct path declines it)
        (st, lambda: f(xf, st, w, b, "silu")),  # fp32 x with bf16 state and weight: served (a plan of its own)
        (st, lambda: f(x, st, wt, b, "silu")),
        (st, lambda: f(x, st, w, b, "silu", conv_state_indices=idx64)),
        (st, lambda: f(x, st[:4], w, b, "silu")),
        (st, lambda: f(x, st, w, b, "silu")),
    ]


def test_update_direct_eager_path_matches_the_custom_op(stub, monkeypatch):
    """``torch_op.UPDATE_DIRECT_EAGER``: the same public update calls with and without it hand the kernel identical
    arguments (out's address masked), return outputs of identical metadata, raise identical errors and bump conv_state's
    version counter alike (the mutating custom op's contract, which autograd relies on); the direct path is taken."""
    api, torch_op, rec = stub
    monkeypatch.setattr(torch_op, "UPDATE_TVM_FFI", True)
    taken = []
    real = torch_op._update_body
    monkeypatch.setattr(torch_op, "_update_body", lambda *a: taken.append(1) or real(*a))
    direct_calls = []
    real_ok = torch_op._direct_ok
    monkeypatch.setattr(torch_op, "_direct_ok", lambda *a: direct_calls.append(r := real_ok(*a)) or r)
    calls = _public_update_calls(api)
    runs = {}
    for direct in (False, True):
        monkeypatch.setattr(torch_op, "UPDATE_DIRECT_EAGER", direct)
        monkeypatch.setattr(torch_op, "_PLANS", {})
        direct_calls.clear()
        out = []
        for st, c in calls:
            v0 = st._version
            o = _public_outcome(rec, c)
            if o[0] != "raises":
                o = ([a[:5] + a[6:] for a in o[0]], o[1])  # out's address (argument 5) is a fresh allocation
            out.append((o, st._version - v0))
        runs[direct] = out
        runs[(direct, "direct")] = sum(direct_calls)
    for i, (a, b) in enumerate(zip(runs[False], runs[True], strict=True)):
        assert a == b, f"call {i}: direct {b}, custom op {a}"
    assert runs[(False, "direct")] == 0 and runs[(True, "direct")] >= 9, runs
    assert sum(1 for o, _ in runs[True] if o[0] == "raises") >= 5
    assert all(bump == 1 for o, bump in runs[True] if o[0] != "raises"), runs[True]


def test_update_direct_eager_path_declines_whenever_dispatch_matters(stub, monkeypatch):
    """A torch function mode, FakeTensorMode, a meta tensor, a conv_state requiring grad under grad mode, a non-string
    activation and torch.compile go through the update custom op, never the direct call."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.overrides import TorchFunctionMode

    api, torch_op, rec = stub
    body = []
    real = torch_op._update_body
    ops = []
    real_op = torch_op.causal_conv1d_update_op
    monkeypatch.setattr(torch_op, "causal_conv1d_update_op", lambda *a: ops.append(1) or real_op(*a))
    monkeypatch.setattr(torch_op, "_update_body", lambda *a: body.append(1) or real(*a))
    x, st, w = _aligned((UB, UD)), _aligned((UB, UD, W - 1)), _aligned((UD, W))
    api.causal_conv1d_update(x, st, w, None, "silu")
    assert ops == [] and body == [1]  # the plain eager call: direct

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        api.causal_conv1d_update(x, st, w, None, "silu")
    assert ops == [1]
    with FakeTensorMode() as mode:
        api.causal_conv1d_update(mode.from_tensor(x), mode.from_tensor(st), mode.from_tensor(w), None, "silu")
    assert ops == [1, 1]
    api.causal_conv1d_update(x.to("meta"), st.to("meta"), w.to("meta"), None, "silu")
    assert ops == [1, 1, 1]
    try:
        api.causal_conv1d_update(x, st.clone().requires_grad_(), w, None, "silu")
    except Exception:  # noqa: BLE001 - whatever autograd makes of mutating a leaf that requires grad; only the route matters
        pass
    assert len(ops) == 4
    with pytest.raises(Exception):  # noqa: B017 - the op's schema check
        api.causal_conv1d_update(x, st, w, None, 3)
    assert len(ops) == 5
    compiled = torch.compile(lambda x, st, w: api.causal_conv1d_update(x, st, w, None, "silu"), backend="eager", fullgraph=True)
    compiled(x, st, w)
    assert len(ops) == 6


@pytest.mark.host_timing
def test_update_host_time_of_the_fast_paths(stub, monkeypatch):
    """Python side of one decode step (the kernel is the recorder): the public ``causal_conv1d_update`` with session 9's
    host path (direct eager call, tvm-ffi route, memoized validation) against session 8's (custom-op dispatch, DSL
    entry, full validation), and the adapter's execute with and without the memo. Loose bounds on the smallest same-round
    ratio (cudnn_testing.host_timing; a shared 2-core CPU)."""
    api, torch_op, rec = stub
    rec.calls = Sink()
    x, st, w, b = _aligned((64, 4096)), _aligned((64, 4096, W - 1)), _aligned((4096, W)), _aligned((4096,))
    y = torch.empty_like(x)
    plans = {}
    for fast_host in (False, True):
        plans[fast_host] = api.CausalConv1dUpdate(x, st, w, y, b, activation="silu")
        plans[fast_host].fast_host, plans[fast_host].tvm_ffi = fast_host, True
        plans[fast_host].compile()

    def path(new):
        monkeypatch.setattr(torch_op, "UPDATE_DIRECT_EAGER", new)
        monkeypatch.setattr(torch_op, "UPDATE_TVM_FFI", new)
        monkeypatch.setattr(api, "UPDATE_FAST_HOST_DEFAULT", new)

    public = lambda: api.causal_conv1d_update(x, st, w, b, "silu")  # noqa: E731
    timed = Rounds(
        {"full": lambda: plans[False].execute(x, st, w, y, b), "memo": lambda: plans[True].execute(x, st, w, y, b), "old": public, "new": public},
        setup={"old": lambda: path(False), "new": lambda: path(True)},
    )
    best = timed.best
    print(
        f"\nupdate host (CPU, kernel stubbed): execute {best['full']:.2f} us full validation, {best['memo']:.2f} us memo (tvm-ffi route); "
        f"public causal_conv1d_update {best['old']:.2f} us (custom op, DSL entry, full validation) -> {best['new']:.2f} us (direct, tvm-ffi, memo)"
    )
    assert timed.ratio("memo", "full") < 0.7
    assert timed.ratio("new", "old") < 0.5


def test_update_direct_eager_path_in_inference_mode_matches_the_custom_op(stub, monkeypatch):
    """Serving stacks decode under ``torch.inference_mode()``: there the custom op still bumps a normal conv_state's
    version counter once per call, and so does the direct call; a conv_state created in inference mode (no version
    counter) is served by both without error."""
    api, torch_op, rec = stub
    x, w = _aligned((UB, UD)), _aligned((UD, W))
    got = {}
    bodies = []
    real = torch_op._update_body
    monkeypatch.setattr(torch_op, "_update_body", lambda *a: bodies.append(1) or real(*a))
    for direct in (False, True):
        monkeypatch.setattr(torch_op, "UPDATE_DIRECT_EAGER", direct)
        bodies.clear()
        st = _aligned((UB, UD, W - 1))
        deltas = []
        with torch.inference_mode():
            inf_st = torch.randn(UB, UD, W - 1).to(torch.bfloat16)
            v0 = st._version
            api.causal_conv1d_update(x, st, w, None, "silu")
            api.causal_conv1d_update(x, inf_st, w, None, "silu")
            deltas.append(st._version - v0)
        v0 = st._version
        api.causal_conv1d_update(x, st, w, None, "silu")
        deltas.append(st._version - v0)
        got[direct] = (deltas, len(bodies))
    assert got[False][0] == got[True][0] == [1, 1], got
    assert got[True][1] == 3, got  # the direct path served all three calls


@pytest.mark.parametrize("tvm_ffi", [True, False], ids=["tvm-ffi", "dsl-entry"])
@pytest.mark.parametrize("fast_host", [True, False], ids=["memo", "full"])
def test_overlapping_states_take_the_separate_final_states_kernels(stub, monkeypatch, fast_host, tvm_ffi):
    """``final_fused`` (the default with final states): a plan with initial and final states compiles the fused kernel and
    the separate pair (the ``final_fused = False`` key); execute launches the pair for a call whose final states overlap
    its initial states (the same tensor: the rolling-state update; a view sharing bytes) and the fused kernel otherwise
    (disjoint buffers, also adjacent ones), on both launch routes and both host paths, with the same arguments either
    way (``final_contiguous = False``: the element-wise final states take the strided views; a plan writing contiguous
    final states, the default for the contiguous declared layout, refuses them naming the layout). A plan without initial
    states, or with ``final_fused = False``, compiles one kernel. Host metadata only."""
    api, _, _ = stub
    recs = {}
    monkeypatch.setattr(api, "_compile_cached", lambda key, *a, **k: recs.setdefault(key.final_fused, _Recorder()))
    cu = torch.tensor([0, 1, 40, 100], dtype=torch.int32)
    x, y = _aligned((100, D)), torch.empty(100, D, dtype=torch.bfloat16)
    w, b = _aligned((D, W)), _aligned((D,))
    init, fin = _aligned((3, D, W - 1)), _aligned((3, D, W - 1))
    both = _aligned((6, D, W - 1))  # adjacent halves: disjoint
    wide = _aligned((3, D, W))  # two [3, D, W - 1] views sharing bytes
    strict = api.CausalConv1d(x, w, y, b, cu, init, fin, "silu")
    strict.fast_host, strict.tvm_ffi, strict.final_fused = fast_host, tvm_ffi, True
    strict.compile()
    assert strict.compile_key().final_contiguous is True
    strict.execute(x, w, y, b, cu, init, init)  # the in-place update: contiguous final states, the separate pair
    with pytest.raises(ValueError, match=r"final_states \(shape=\(3, 256, 3\), stride=\(1024, 4, 1\).*final_contiguous = False"):
        strict.execute(x, w, y, b, cu, wide[:, :, : W - 1], wide[:, :, 1:])
    recs.clear()
    plan = api.CausalConv1d(x, w, y, b, cu, init, fin, "silu")
    plan.fast_host, plan.tvm_ffi, plan.final_contiguous, plan.final_fused = fast_host, tvm_ffi, False, True
    plan.compile()
    assert plan.compile_key().final_fused and set(recs) == {True, False} and plan._sep[0] is recs[False]
    cases = [
        (init, fin, True),
        (init, init, False),  # final is init: the in-place rolling update
        (both[:3], both[3:], True),
        (wide[:, :, : W - 1], wide[:, :, 1:], False),
        (init, fin, True),
    ]
    for i_s, f_s, fused in cases * 2:  # twice: the memo serves the second round
        n = {k: len(r.calls) for k, r in recs.items()}
        plan.execute(x, w, y, b, cu, i_s, f_s)
        assert {k: len(r.calls) - n[k] for k, r in recs.items()} == {fused: 1, not fused: 0}
    sep_call = recs[False].calls[0]  # (init, init): both state pointers are init's address
    if tvm_ffi:
        assert sep_call[5] == sep_call[6] == init.data_ptr()
    else:  # cute pointers compiled and passed at the states' dtype alignment (2 bytes for bf16)
        assert sep_call[5] == sep_call[6] == ("ptr", "BFloat16", init.data_ptr(), 2)
    assert recs[True].calls[0][7:] == sep_call[7:]  # the same integers after the pointers

    recs.clear()
    alone = api.CausalConv1d(x, w, y, b, cu, None, fin, "silu")
    alone.final_fused = True  # the varlen default is the separate kernel (session 28)
    alone.compile()
    assert set(recs) == {True} and alone._sep is None
    recs.clear()
    plan.final_fused = False
    plan.compile()
    assert set(recs) == {False} and plan._sep is None
    plan.execute(x, w, y, b, cu, init, init)
    assert len(recs[False].calls) == 1


@pytest.mark.parametrize("tvm_ffi", [True, False], ids=["tvm-ffi", "dsl-entry"])
@pytest.mark.parametrize("fast_host", [True, False], ids=["memo", "full"])
def test_varlen_plan_launches_chunks_for_long_sequences_per_call(stub, monkeypatch, fast_host, tvm_ffi):
    """A varlen plan left at ``chunk = None`` (session 27) compiles the contiguous runs and the per-call chunk key
    (``per_call_chunk_key``: ``FWD_VARLEN_CHUNK_PER_CALL`` tokens, no density guess) at compile(), and each execute
    launches the chunks when its sequences average at least ``FWD_VARLEN_CHUNK_MIN_LEN`` tokens (T >= that x N), the runs
    below, with the same arguments, on both launch routes and both host paths, the memo's repeat calls included; with
    both state tensors each side also holds its separate final-states pair, which an in-place call takes. A plan with
    ``chunk`` set (0 or 8), or a dense plan, compiles one key. Host metadata only."""
    api, _, _ = stub
    recs = {}
    monkeypatch.setattr(api, "_compile_cached", lambda key, *a, **k: recs.setdefault((key.chunk, key.final_fused), _Recorder()))
    L = api.FWD_VARLEN_CHUNK_MIN_LEN
    w, b = _aligned((D, W)), _aligned((D,))
    x0 = _aligned((4 * L, D))
    cu0 = torch.tensor([0, L, 2 * L, 3 * L, 4 * L], dtype=torch.int32)
    init, fin = _aligned((4, D, W - 1)), _aligned((4, D, W - 1))
    plan = api.CausalConv1d(x0, w, torch.empty_like(x0), b, cu0, init, fin, "silu")
    plan.fast_host, plan.tvm_ffi, plan.final_fused = fast_host, tvm_ffi, True  # fused: both keys hold a separate pair too
    plan.compile()
    key = plan.compile_key()
    assert key.chunk == 0 and key.locate_guess and plan.per_call_chunk_key(key) == api.dataclasses.replace(key, chunk=8, locate_guess=False)
    assert set(recs) == {(0, True), (0, False), (8, True), (8, False)}, set(recs)
    cases = [  # (lengths, in place, the key launched)
        ([L, L, L, L], False, (8, True)),  # exactly the rule's length
        ([L, L, L, L - 1], False, (0, True)),  # one token short
        ([1] * 4, False, (0, True)),
        ([0, 0, 0, 64 * L], False, (8, True)),  # empty sequences count
        ([L, L, L, L], True, (8, False)),  # in place: the chunks' separate pair
        ([1] * 4, True, (0, False)),
    ]
    for lengths, in_place, want in cases * 2:  # twice: the memo serves the second round
        T = sum(lengths)
        x, y = _aligned((T, D)), torch.empty(T, D, dtype=torch.bfloat16)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        n = {k: len(r.calls) for k, r in recs.items()}
        plan.execute(x, w, y, b, cu, init, init if in_place else fin)
        got = {k: len(r.calls) - n[k] for k, r in recs.items()}
        assert got == {k: int(k == want) for k in recs}, (lengths, in_place, got)
    runs, chunks = recs[(0, True)].calls, recs[(8, True)].calls
    assert runs[0][7:] != chunks[0][7:] and len({c[7:] for c in chunks}) == 2  # T / N per call, the same positions
    for chunk in (0, 8):
        recs.clear()
        fixed = api.CausalConv1d(x0, w, torch.empty_like(x0), b, cu0, None, None, "silu")
        fixed.chunk = chunk
        fixed.compile()
        assert set(recs) == {(chunk, False)} and fixed._alt is None
    recs.clear()
    dense = api.CausalConv1d(_aligned((2, 8, D)), w, torch.empty(2, 8, D, dtype=torch.bfloat16), b, None, None, None, "silu")
    dense.compile()
    assert len(recs) == 1 and dense._alt is None
