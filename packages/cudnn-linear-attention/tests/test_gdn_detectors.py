"""GPU detectors for the Gated DeltaNet forward (recipe R9): a warm execute neither synchronizes nor allocates
(three executes); the detectors go red against a planted .item() + allocation in the execute path; the first
execute of a fresh plan (kernel build included) runs inside a CUDA-graph capture and its replay equals eager
bit for bit; default-stream handles never reach torch.cuda.ExternalStream; new token totals and sequence
counts through the public function are kernel-cache hits (Rule 4)."""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.planted import assert_detectors_catch_planted_sync

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.detector]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")


def _batch(lengths, H=4, Hk=2, D=128, beta_dtype=torch.float32):
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    T = sum(lengths)
    q = torch.randn(T, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(T, Hk, D, device="cuda").to(torch.bfloat16)
    v = torch.randn(T, H, D, device="cuda").to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(T, H, device="cuda")) / 8
    beta = torch.rand(T, H, device="cuda").to(beta_dtype)
    o = torch.empty_like(v)
    h0 = torch.randn(len(lengths), H, D, D, device="cuda")
    ht = torch.empty_like(h0)
    return q, k, v, g, beta, o, h0, ht, cu_seqlens(lengths, "cuda")


def _plan(args, **kw):
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    q, k, v, g, beta, o, h0, ht, cu = args
    return GatedDeltaNetFwdSm90(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, **kw)


def test_execute_no_sync_no_alloc():
    args = _batch([1, 700, 64, 300])
    plan = _plan(args)
    plan.compile()
    plan.execute(*args)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args), repeats=3)


def test_detectors_fail_on_planted_sync_and_allocation(monkeypatch):
    """Planted violations in the execute path (a host sync, an allocation): each detector must go red."""
    import cudnn.linear_attention.gdn.api as api

    args = _batch([200])
    plan = _plan(args)
    plan.execute(*args)
    torch.cuda.synchronize()
    assert_detectors_catch_planted_sync(monkeypatch, api, "_stream", lambda: plan.execute(*args))


def test_first_execute_under_capture_replays_like_eager():
    from cudnn.kernel_cache import kernel_cache

    # bf16 beta: a configuration no other test builds, so the kernel build itself runs inside the capture.
    args = _batch([1, 513, 64], beta_dtype=torch.bfloat16)
    plan = _plan(args, scale=0.125)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.gdn", plan.compile_key()), None)
    o, ht = args[5], args[7]
    detectors.assert_capture_matches_eager(lambda: plan(*args), [o, ht])


def test_default_stream_handle_never_reaches_external_stream(monkeypatch):
    args = _batch([300, 5])
    plan = _plan(args)
    plan.compile()
    with detectors.external_stream_forbidden(monkeypatch):
        for handle in (0, 1, 2):
            plan.execute(*args, current_stream=handle)
    torch.cuda.synchronize()


def test_new_token_totals_are_cache_hits():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.gdn.api import gated_delta_net

    def call(lengths):
        q, k, v, g, beta, _, h0, _, cu = _batch(lengths)
        return gated_delta_net(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu)

    call([1000])
    misses = kernel_cache.stats.misses
    for lengths in ([1, 2, 3], [5000, 1], [77] * 13):
        call(lengths)
    torch.cuda.synchronize()
    assert kernel_cache.stats.misses == misses
