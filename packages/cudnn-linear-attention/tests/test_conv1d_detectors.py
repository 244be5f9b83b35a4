"""GPU detectors for causal_conv1d (recipe R9): warm execute neither synchronizes nor allocates (forward,
backward with workspace, decode update); the first execute of a fresh plan runs inside a CUDA-graph
capture and replays like eager; a launch on a side stream is ordered after that stream's producers;
a default-stream handle never reaches torch.cuda.ExternalStream; a new token total is a cache hit.
The no-sync / no-alloc detectors are also run against a planted violation and must fail there."""

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
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")


def _fwd(T=4096, D=1024, lengths=(1, 1000, 1, 3094), width=4):
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing.data import cu_seqlens

    x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, width, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    cu = cu_seqlens(list(lengths), "cuda")
    st = torch.randn(len(lengths), D, width - 1, device="cuda", dtype=torch.bfloat16)
    fin = torch.empty_like(st)
    plan = CausalConv1d(x, w, y, b, cu, st, fin, "silu")
    plan.compile()
    args = (x, w, y, b, cu, st, fin)
    return plan, args


def test_forward_execute_no_sync_no_alloc():
    plan, args = _fwd()
    plan.execute(*args)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args), repeats=3)


def test_backward_execute_no_sync_no_alloc():
    from cudnn.linear_attention.conv1d.api import CausalConv1dBackward
    from cudnn_testing.data import cu_seqlens

    T, D = 4096, 1024
    x, dy, dx = (torch.randn(T, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    w, dw = torch.randn(D, 4, device="cuda"), torch.empty(D, 4, device="cuda")
    b, db = torch.randn(D, device="cuda"), torch.empty(D, device="cuda")
    cu = cu_seqlens([1, 4094, 1], "cuda")
    st, dst = torch.randn(3, D, 3, device="cuda"), torch.empty(3, D, 3, device="cuda")
    plan = CausalConv1dBackward(x, w, dy, dx, dw, b, db, cu, st, dst, "silu")
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    run = lambda: plan.execute(x, w, dy, dx, dw, b, db, cu, st, dst, workspace=ws)  # noqa: E731
    run()
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(run, repeats=3)
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(x, w, dy, dx, dw, b, db, cu, st, dst, workspace=None)


def test_update_execute_no_sync_no_alloc():
    from cudnn.linear_attention.conv1d.api import CausalConv1dUpdate

    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    state = torch.randn(128, 2048, 3, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 4, device="cuda", dtype=torch.bfloat16)
    idx = torch.randperm(128, device="cuda")[:64].to(torch.int32)
    out = torch.empty_like(x)
    plan = CausalConv1dUpdate(x, state, w, out, None, idx, "silu")
    plan.compile()
    plan.execute(x, state, w, out, None, idx)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, state, w, out, None, idx), repeats=3)


def test_detectors_fail_on_planted_sync_and_allocation(monkeypatch):
    """Planted violations in the execute path (a host sync, an allocation): each detector must go red."""
    import cudnn.linear_attention.conv1d.api as api

    plan, args = _fwd(T=512, lengths=(512,))
    plan.execute(*args)
    torch.cuda.synchronize()
    assert_detectors_catch_planted_sync(monkeypatch, api, "_stream", lambda: plan.execute(*args))


def test_tvm_ffi_route_no_sync_no_alloc_and_detectors_fire_on_a_planted_violation(monkeypatch):
    """The tvm-ffi launch route of the decode update (``plan.tvm_ffi = True``): warm executes neither sync nor
    allocate, and the same detectors go red against a planted .item() + allocation in that route's stream lookup."""
    pytest.importorskip("tvm_ffi")
    import cudnn.linear_attention.conv1d.api as api

    x = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)
    state = torch.randn(128, 2048, 3, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 4, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    plan = api.CausalConv1dUpdate(x, state, w, out, None, None, "silu")
    plan.tvm_ffi = True
    plan.compile()
    assert plan._entry is not None
    plan.execute(x, state, w, out)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(x, state, w, out), repeats=3)
    assert_detectors_catch_planted_sync(monkeypatch, api, "_stream_handle", lambda: plan.execute(x, state, w, out))


def test_first_execute_under_capture_replays_like_eager():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d
    from cudnn_testing.data import cu_seqlens

    # fp16 x, width 3, no bias, no SiLU, no states: a configuration no other test builds, so the kernel
    # build itself runs inside the capture.
    x = torch.randn(3000, 512, device="cuda", dtype=torch.float16)
    w = torch.randn(512, 3, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    cu = cu_seqlens([1, 2998, 1], "cuda")
    plan = CausalConv1d(x, w, y, cu_seqlens=cu)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
    detectors.assert_capture_matches_eager(lambda: plan(x, w, y, cu_seqlens=cu), [y])


def test_side_stream_launch_is_ordered_after_its_producers():
    plan, (x, w, y, b, cu, st, fin) = _fwd()
    src = torch.randn_like(x)
    ref_plan_out = torch.empty_like(y)

    def produce():
        x.copy_(src)

    result = detectors.run_on_side_stream_with_sentinel(lambda s: plan.execute(x, w, y, b, cu, st, fin, current_stream=s), produce)
    assert result is y
    plan.execute(src, w, ref_plan_out, b, cu, st, fin)
    torch.cuda.synchronize()
    assert torch.equal(y, ref_plan_out)


def test_default_stream_handle_never_reaches_external_stream(monkeypatch):
    plan, args = _fwd(T=512, lengths=(512,))
    with detectors.external_stream_forbidden(monkeypatch):
        for handle in (0, 1, 2):
            plan.execute(*args, current_stream=handle)
    torch.cuda.synchronize()


def test_new_token_total_is_a_cache_hit():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention import causal_conv1d

    w = torch.randn(1024, 4, device="cuda", dtype=torch.bfloat16)
    from cudnn_testing.data import cu_seqlens

    causal_conv1d(torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16), w, None, "silu", cu_seqlens=cu_seqlens([1000], "cuda"))
    misses = kernel_cache.stats.misses
    for lengths in ([1, 2, 3], [5000, 1], [77] * 13):
        x = torch.randn(sum(lengths), 1024, device="cuda", dtype=torch.bfloat16)
        causal_conv1d(x, w, None, "silu", cu_seqlens=cu_seqlens(lengths, "cuda"))
    assert kernel_cache.stats.misses == misses
