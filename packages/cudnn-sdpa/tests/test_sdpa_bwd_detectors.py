"""Contract detectors of the attention backward on the GPU (recipe R9): no sync and no allocation around three
executes of a prepared plan, first execute inside CUDA-graph capture then replay == eager, stream ordering with a
side stream and with handle 0 (never torch.cuda.ExternalStream for a default-stream sentinel).

Each detector has a planted-violation twin (``test_*_sees_planted_*``) that must fail the same detector; they stay
in the suite so a detector that stops detecting shows up red.
"""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref
from cudnn_testing.reference_attention_bwd import attention_grads_ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.detector]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def _inputs(b=2, h=4, hk=2, s=384, d=128, dtype=torch.bfloat16, causal=True):
    def bshd(hh):
        return torch.randn(b, s, hh, d, device="cuda", dtype=dtype).transpose(1, 2)

    q, k, v, do = bshd(h), bshd(hk), bshd(hk), bshd(h)
    o, lse = attention_ref(q, k, v, is_causal=causal)
    grads = [torch.empty(b, s, x.shape[1], d, device="cuda", dtype=dtype).transpose(1, 2) for x in (q, k, v)]
    return q, k, v, o.to(dtype), do, lse.float(), grads


def _prepared(q, k, v, o, do, lse, grads, **kw):
    from cudnn.sdpa import SdpaBwdSm90

    plan = SdpaBwdSm90(q, k, v, o, do, lse, *grads, **kw)
    plan.check_support()
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, o, do, lse, *grads, ws)  # warm
    torch.cuda.synchronize()
    return plan, ws


def test_execute_never_syncs_or_allocates():
    q, k, v, o, do, lse, grads = _inputs()
    plan, ws = _prepared(q, k, v, o, do, lse, grads, is_causal=True)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, do, lse, *grads, ws))


def test_no_sync_detector_sees_planted_sync(monkeypatch):
    q, k, v, o, do, lse, grads = _inputs()
    plan, ws = _prepared(q, k, v, o, do, lse, grads, is_causal=True)
    real = plan.execute
    monkeypatch.setattr(plan, "execute", lambda *a, **kw: (real(*a, **kw), grads[0].sum().item()))  # planted D2H read
    with pytest.raises(RuntimeError):
        detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, do, lse, *grads, ws))


def test_no_alloc_detector_sees_planted_allocation(monkeypatch):
    q, k, v, o, do, lse, grads = _inputs()
    plan, ws = _prepared(q, k, v, o, do, lse, grads, is_causal=True)
    real = plan.execute
    monkeypatch.setattr(plan, "execute", lambda *a, **kw: (real(*a, **kw), torch.empty(1 << 20, device="cuda")))  # planted allocation
    with pytest.raises(AssertionError, match="allocat"):
        detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, do, lse, *grads, ws))


def test_execute_without_workspace_raises_before_launch():
    q, k, v, o, do, lse, grads = _inputs()
    plan, ws = _prepared(q, k, v, o, do, lse, grads, is_causal=True)
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(q, k, v, o, do, lse, *grads, None)
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(q, k, v, o, do, lse, *grads, ws[:100])


def test_first_execute_inside_graph_capture_replays_like_eager():
    from cudnn.sdpa import sdpa_bwd

    # A configuration no other test builds (fp16, d=64, window), so plan build + compile run under capture.
    # dQ is reduced with fp32 atomics: replay and eager may differ in the last bit of the fp16 result.
    q, k, v, o, do, lse, grads = _inputs(h=6, hk=3, s=333, d=64, dtype=torch.float16, causal=False)
    o, lse = attention_ref(q, k, v, window=(40, 7))
    o = o.to(q.dtype)
    dq, dk, dv = grads
    detectors.assert_capture_matches_eager(lambda: sdpa_bwd(q, k, v, o, do, lse, window_size=(40, 7), dq=dq, dk=dk, dv=dv), [dq, dk, dv], atol=1e-2)
    ref = attention_grads_ref(q, k, v, do, window=(40, 7))
    for g, r in zip((dq, dk, dv), ref, strict=False):
        assert (g.float() - r).abs().max().item() < 5e-2


_PLANTED_CAPTURE = """
import torch
from cudnn_testing import detectors
from cudnn.sdpa import sdpa_bwd
q, k, v, o, do = (torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(5))
lse = torch.randn(1, 4, 256, device="cuda")
dq, dk, dv = (torch.empty_like(q) for _ in range(3))
sdpa_bwd(q, k, v, o, do, lse, dq=dq, dk=dk, dv=dv)
try:
    detectors.assert_capture_matches_eager(lambda: (sdpa_bwd(q, k, v, o, do, lse, dq=dq, dk=dk, dv=dv), int(dq[0, 0, 0, 0])), [dq], atol=1.0)
except Exception as exc:
    print("DETECTED", type(exc).__name__)
"""


def test_capture_detector_sees_planted_host_read():
    # In a subprocess: a capture aborted by the planted read leaves torch's CUDA RNG in capture state for the process.
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", _PLANTED_CAPTURE], env=env, capture_output=True, text=True, timeout=300)
    assert "DETECTED" in res.stdout, res.stdout + res.stderr


def _stream_case():
    q, k, v, o, do, lse, grads = _inputs()
    do2 = torch.randn_like(do)
    return q, k, v, o, do, lse, grads, do2


def test_side_stream_launch_is_ordered_and_handle_zero_never_builds_external_stream(monkeypatch):
    from cudnn.sdpa import sdpa_bwd

    q, k, v, o, do, lse, (dq, dk, dv), do2 = _stream_case()
    sdpa_bwd(q, k, v, o, do, lse, is_causal=True, dq=dq, dk=dk, dv=dv)  # warm the plan
    ref = attention_grads_ref(q, k, v, do2, is_causal=True)

    def produce():
        do.copy_(do2)

    detectors.run_on_side_stream_with_sentinel(lambda s: sdpa_bwd(q, k, v, o, do, lse, is_causal=True, dq=dq, dk=dk, dv=dv, stream=s), produce)
    assert (dv.float() - ref[2]).abs().max().item() < 5e-2
    dv.fill_(float("nan"))
    with detectors.external_stream_forbidden(monkeypatch):
        res = sdpa_bwd(q, k, v, o, do, lse, is_causal=True, stream=0)
    torch.cuda.synchronize()
    assert (res["dv"].float() - ref[2]).abs().max().item() < 5e-2


def test_stream_detector_sees_planted_wrong_stream():
    from cudnn.sdpa import sdpa_bwd

    q, k, v, o, do, lse, (dq, dk, dv), do2 = _stream_case()
    sdpa_bwd(q, k, v, o, do, lse, is_causal=True, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    ref = attention_grads_ref(q, k, v, do2, is_causal=True)

    def produce():
        do.copy_(do2)

    other = torch.cuda.Stream()  # planted: launch on a stream the producer is not ordered with
    detectors.run_on_side_stream_with_sentinel(lambda s: sdpa_bwd(q, k, v, o, do, lse, is_causal=True, dq=dq, dk=dk, dv=dv, stream=other), produce)
    torch.cuda.synchronize()
    assert not ((dv.float() - ref[2]).abs().max().item() < 5e-2), "an unordered launch read the final inputs: the stream detector cannot tell"
