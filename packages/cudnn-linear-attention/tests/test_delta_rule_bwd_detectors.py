"""GPU detectors of the Gated DeltaNet and Kimi Delta Attention backward adapters (recipe R9), each test run for both
families on the shared detector bodies (shared/cudnn_testing/detectors.py, planted.py):

- a warm ``execute`` (three launches, workspace carved) neither synchronizes nor allocates, three times;
- those two detectors go red against a planted ``.item()`` + allocation in the execute path (``_host/delta_rule_bwd_api._stream``, the
  launch-stream lookup every execute makes): green here means they fired;
- the first execute of a fresh plan (the three kernel builds included) runs inside a CUDA-graph capture, and its replay
  equals eager (bit for bit except dg / dbeta, whose sums are shared-memory float atomics: equal up to summation order);
- default-stream handles (0, 1, 2) never reach torch.cuda.ExternalStream (R1);
- new token totals and sequence counts are kernel-cache hits (Rule 4)."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.detector]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: family -> (its GPU test module with make_inputs / run_backward, its bwd_api module, the adapter, the public name)
FAMILIES = {
    "gdn": ("test_gdn_bwd_gpu", "cudnn.linear_attention.gdn.bwd_api", "GatedDeltaNetBwdSm90", "gated_delta_net"),
    "kda": ("test_kda_bwd_gpu", "cudnn.linear_attention.kda.bwd_api", "KimiDeltaAttentionBwdSm90", "kimi_delta_attention"),
}


@pytest.fixture(params=sorted(FAMILIES))
def fam(request):
    skip_unless_sm90()
    tests, _, _, public = FAMILIES[request.param]
    skip_unless_cutedsl("4.8.0", f"cudnn.linear_attention.{public} backward")
    return request.param, importlib.import_module(tests)


def _case(fam, lengths=(1, 130, 64), D=128):
    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(list(lengths), "cuda")
    return (*fam[1].make_inputs((sum(lengths),), 2, D, len(lengths), True, True), cu)


def _warm(fam, case):
    """(plan, execute args, workspace) after one warm execute."""
    q, k, v, g, beta, do, h0, dht, cu = case
    plan, got, ws = fam[1].run_backward(q, k, v, g, beta, do, h0, dht, cu)
    args = (q, k, v, g, beta, do, got["dq"], got["dk"], got["dv"], got["dg"], got["dbeta"], h0, got["dh0"], dht, cu)
    torch.cuda.synchronize()
    return plan, args, ws


def test_execute_no_sync_no_alloc(fam):
    from cudnn_testing import detectors

    plan, args, ws = _warm(fam, _case(fam))
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args, workspace=ws))


def test_detectors_fail_on_planted_sync_and_allocation(fam, monkeypatch):
    from cudnn.linear_attention._host import delta_rule_bwd_api
    from cudnn_testing.planted import assert_detectors_catch_planted_sync

    plan, args, ws = _warm(fam, _case(fam))
    assert_detectors_catch_planted_sync(monkeypatch, delta_rule_bwd_api, "_stream", lambda: plan.execute(*args, workspace=ws))


def test_first_execute_under_capture_replays_like_eager(fam):
    from cudnn.kernel_cache import kernel_cache

    _, api_module, adapter, _ = FAMILIES[fam[0]]
    api = importlib.import_module(api_module)
    q, k, v, g, beta, do, h0, dht, cu = _case(fam, lengths=(1, 513, 64), D=64)
    g = g.to(torch.bfloat16)  # bf16 g: a configuration no other backward test builds, so the builds run inside the capture
    outs = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    outs += [torch.full(g.shape, float("nan"), device="cuda"), torch.full(beta.shape, float("nan"), device="cuda")]
    dh0 = torch.full_like(h0, float("nan"))
    plan = getattr(api, adapter)(q, k, v, g, beta, do, *outs, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.check_support()
    for part in api._parts(plan.compile_key()):
        kernel_cache._entries.pop((api.FAMILY, (part, plan.compile_key())), None)
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    args = (q, k, v, g, beta, do, *outs, h0, dh0, dht, cu)

    def run():
        plan(*args, workspace=ws)

    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            run()
    graph.replay()
    torch.cuda.synchronize()
    captured = [o.clone() for o in (*outs, dh0)]
    for o in (*outs, dh0):
        o.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    for name, c, e in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), captured, (*outs, dh0), strict=True):
        assert torch.isfinite(c.float()).all(), name
        if name in ("dg", "dbeta"):  # shared-memory float atomics: equal up to summation order
            torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-4 * e.abs().max().item())
        else:
            assert torch.equal(c, e), name


def test_default_stream_handle_never_reaches_external_stream(fam, monkeypatch):
    from cudnn_testing import detectors

    plan, args, ws = _warm(fam, _case(fam))
    with detectors.external_stream_forbidden(monkeypatch):
        for handle in (0, 1, 2):
            plan.execute(*args, workspace=ws, current_stream=handle)
    torch.cuda.synchronize()


def test_new_token_totals_are_cache_hits(fam):
    from cudnn.kernel_cache import kernel_cache

    _warm(fam, _case(fam))
    misses = kernel_cache.stats.misses
    _warm(fam, _case(fam, lengths=(7, 300, 1, 0, 64)))  # another token total and sequence count: the same artifacts
    assert kernel_cache.stats.misses == misses
