"""Contract detectors on the GPU (recipe R9): no sync and no allocation around three executes, first execute
inside CUDA-graph capture then replay == eager, stream ordering with a side stream and with handle 0 (never
torch.cuda.ExternalStream for a default-stream sentinel).

Each detector has a planted-violation twin below (``test_*_sees_planted_*``): the same detector driven against
an execute path with the violation injected must fail. They stay in the suite so a detector that stops detecting
shows up red.
"""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.detector]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _inputs(b=2, h=4, hk=2, s=384, d=128, dtype=torch.bfloat16):
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
    o = torch.empty(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    lse = torch.empty(b, h, s, device="cuda")
    return q, k, v, o, lse


def _prepared(q, k, v, o, lse, **kw):
    from cudnn.sdpa import SdpaFwdSm90

    plan = SdpaFwdSm90(q, k, v, o, lse, **kw)
    plan.check_support()
    plan.compile()
    plan.execute(q, k, v, o, lse)  # warm
    torch.cuda.synchronize()
    return plan


def test_execute_never_syncs_or_allocates():
    q, k, v, o, lse = _inputs()
    plan = _prepared(q, k, v, o, lse, is_causal=True)
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, lse))


def test_no_sync_detector_sees_planted_sync(monkeypatch):
    q, k, v, o, lse = _inputs()
    plan = _prepared(q, k, v, o, lse, is_causal=True)
    real = plan.execute
    monkeypatch.setattr(plan, "execute", lambda *a, **kw: (real(*a, **kw), q.sum().item()))  # planted D2H read
    with pytest.raises(RuntimeError):
        detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, lse))


def test_no_alloc_detector_sees_planted_allocation(monkeypatch):
    q, k, v, o, lse = _inputs()
    plan = _prepared(q, k, v, o, lse)
    real = plan.execute
    monkeypatch.setattr(plan, "execute", lambda *a, **kw: (real(*a, **kw), torch.empty(1 << 20, device="cuda")))  # planted allocation
    with pytest.raises(AssertionError, match="allocat"):
        detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, lse))


def test_first_execute_inside_graph_capture_replays_like_eager():
    from cudnn.sdpa import sdpa_fwd

    # A configuration no other test builds, so the plan is built and compiled inside the capture.
    q, k, v, o, lse = _inputs(h=6, hk=3, s=333, d=64, dtype=torch.float16)
    detectors.assert_capture_matches_eager(lambda: sdpa_fwd(q, k, v, window_size=(40, 7), out=o, lse=lse), [o, lse])
    ref, _ = attention_ref(q, k, v, window=(40, 7))
    assert (o.float() - ref).abs().max().item() < 2e-2


_PLANTED_CAPTURE = """
import torch
from cudnn_testing import detectors
from cudnn.sdpa import SdpaFwdSm90
q, k, v = (torch.randn(1, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = torch.empty_like(q)
plan = SdpaFwdSm90(q, k, v, o)
plan.compile()
plan.execute(q, k, v, o)
try:
    detectors.assert_capture_matches_eager(lambda: (plan.execute(q, k, v, o), int(o[0, 0, 0, 0])), [o])  # planted D2H read
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


def test_side_stream_launch_is_ordered_and_handle_zero_never_builds_external_stream(monkeypatch):
    from cudnn.sdpa import sdpa_fwd

    q, k, v, o, lse = _inputs()
    q2, k2, v2 = (torch.randn_like(x) for x in (q, k, v))
    sdpa_fwd(q, k, v, out=o)  # warm the plan

    def produce():
        q.copy_(q2), k.copy_(k2), v.copy_(v2)

    detectors.run_on_side_stream_with_sentinel(lambda s: sdpa_fwd(q, k, v, out=o, stream=s), produce)
    ref, _ = attention_ref(q2, k2, v2)
    assert (o.float() - ref).abs().max().item() < 2e-2
    with detectors.external_stream_forbidden(monkeypatch):
        res = sdpa_fwd(q, k, v, stream=0)
    torch.cuda.synchronize()
    assert (res["o"].float() - ref).abs().max().item() < 2e-2


def test_stream_detector_sees_planted_wrong_stream():
    from cudnn.sdpa import sdpa_fwd

    q, k, v, o, lse = _inputs()
    q2, k2, v2 = (torch.randn_like(x) for x in (q, k, v))
    sdpa_fwd(q, k, v, out=o)
    o.fill_(float("nan"))

    def produce():
        q.copy_(q2), k.copy_(k2), v.copy_(v2)

    # planted: launch on a different stream than the one that produced the inputs
    other = torch.cuda.Stream()
    detectors.run_on_side_stream_with_sentinel(lambda s: sdpa_fwd(q, k, v, out=o, stream=other), produce)
    torch.cuda.synchronize()
    ref, _ = attention_ref(q2, k2, v2)
    assert not ((o.float() - ref).abs().max().item() < 2e-2), "a launch on an unordered stream read the final inputs: the stream detector cannot tell"
