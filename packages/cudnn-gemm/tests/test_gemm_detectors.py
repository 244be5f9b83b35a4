"""GPU detectors for the execute path (recipe R9): no sync, no allocation, CUDA-graph capture of the first
execute, default-stream handles never reach torch.cuda.ExternalStream, and a compile-cache hit when only
M changes (Rule 4). Each was seen failing against a planted violation (see the package CHANGELOG)."""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm")


def _plan(m=512, n=768, k=256, **kw):
    from cudnn.gemm import GemmSm90

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    extra = {}
    if kw.pop("with_amax", False):
        extra["amax"] = torch.empty(1, device="cuda", dtype=torch.float32)
    if kw.pop("with_bias", False):
        extra["bias"] = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    plan = GemmSm90(a, b, d, **extra, **kw)
    plan.compile()
    return plan, a, b, d, extra


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("amax", [False, True])
def test_execute_no_sync_no_alloc(amax):
    plan, a, b, d, extra = _plan(with_amax=amax, with_bias=True)
    plan.execute(a, b, d, **extra)  # warm
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(a, b, d, **extra), repeats=3)


@pytest.mark.gpu
@pytest.mark.detector
def test_first_execute_under_capture_then_replay_matches_eager():
    from cudnn.gemm.dense.api import _PLANS

    _PLANS.clear()
    # fp16 + erf GELU + row-major b: a configuration no other test compiles, so the kernel build
    # itself (not only the plan) runs inside the capture
    a = torch.randn(384, 200, device="cuda", dtype=torch.float16)
    b = torch.randn(200, 520, device="cuda", dtype=torch.float16)
    bias = torch.randn(520, device="cuda", dtype=torch.float16)
    out = torch.empty(384, 520, device="cuda", dtype=torch.float16)
    from cudnn.gemm import gemm_gelu

    detectors.assert_capture_matches_eager(lambda: gemm_gelu(a, b, bias=bias, approximate="none", out=out), [out])


@pytest.mark.gpu
@pytest.mark.detector
def test_default_stream_handle_never_reaches_external_stream(monkeypatch):
    plan, a, b, d, extra = _plan(with_amax=True)
    ref = None
    with detectors.external_stream_forbidden(monkeypatch):
        for handle in (0, 1, 2, torch.cuda.default_stream().cuda_stream):
            d.fill_(float("nan"))
            plan.execute(a, b, d, current_stream=handle, **extra)
            torch.cuda.synchronize()
            got = d.clone()
            assert torch.isfinite(got).all()
            ref = got if ref is None else ref
            assert torch.equal(got, ref)


@pytest.mark.gpu
@pytest.mark.detector
def test_side_stream_launch_is_ordered_after_producer():
    plan, a, b, d, extra = _plan()
    src = torch.randn_like(a)
    expected = (src.float() @ b.float()).to(torch.bfloat16)
    a.zero_()
    torch.cuda.synchronize()

    def launch(stream):
        plan.execute(a, b, d, current_stream=stream)

    detectors.run_on_side_stream_with_sentinel(launch, lambda: a.copy_(src))
    torch.testing.assert_close(d.float(), expected.float(), atol=0.25, rtol=0.02)


@pytest.mark.gpu
@pytest.mark.detector
def test_compile_cache_hit_when_m_changes():
    from cudnn.kernel_cache import kernel_cache

    _plan(m=512)
    before = kernel_cache.stats.misses
    for m in (1, 77, 4096):
        _plan(m=m)
    assert kernel_cache.stats.misses == before, "a new M recompiled the kernel (M must be a runtime extent, Rule 4)"
