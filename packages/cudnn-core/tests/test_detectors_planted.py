"""Each shared detector (cudnn_testing.detectors) is seen failing against a planted violation, and
passing on clean work, before any kernel test trusts it (recipe R9)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing import detectors  # noqa: E402
from cudnn_testing.subproc import check_fresh  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.detector]


def _clean(x, y):
    torch.add(x, 1, out=y)


def test_clean_work_passes_every_detector():
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)
    _clean(x, y)
    detectors.assert_no_sync_no_alloc(lambda: _clean(x, y))
    detectors.assert_capture_matches_eager(lambda: _clean(x, y), [y])


def test_no_sync_catches_device_to_host_read():
    x = torch.randn(16, device="cuda")
    with pytest.raises(RuntimeError):
        with detectors.no_sync():
            float(x[0])  # planted D2H read


def test_no_sync_catches_explicit_synchronize():
    with pytest.raises(RuntimeError, match="no-sync region"):
        with detectors.no_sync():
            torch.cuda.synchronize()  # planted: sync debug mode alone misses this
    torch.cuda.synchronize()  # restored afterwards


def test_no_allocation_catches_fresh_tensor():
    x = torch.randn(1 << 20, device="cuda")
    with pytest.raises(AssertionError, match="allocated device memory"):
        with detectors.no_allocation():
            _ = x * 2  # planted allocation


def test_capture_detector_catches_replay_mismatch():
    x = torch.randn(16, device="cuda")
    y = torch.empty_like(x)
    counter = {"n": 0}

    def planted():
        counter["n"] += 1
        y.copy_(x * counter["n"])  # eager and captured runs differ: a host value baked into the graph

    with pytest.raises(AssertionError, match="replay differs from eager"):
        detectors.assert_capture_matches_eager(planted, [y])


def test_capture_detector_catches_capture_unsafe_work():
    """An aborted capture leaves torch's RNG state broken for the rest of the process ("Offset increment
    outside graph capture"), which failed 67 later GPU tests once: this plant runs in its own interpreter."""
    out = check_fresh(
        """
        import torch
        from cudnn_testing import detectors
        x = torch.randn(16, device="cuda")
        y = torch.empty_like(x)
        def planted():
            y.copy_(x + float(x.sum()))  # a host read: illegal under capture
        try:
            detectors.assert_capture_matches_eager(planted, [y])
        except RuntimeError as exc:  # torch >= 2.10 raises torch.AcceleratorError, a RuntimeError subclass
            print("CAUGHT", isinstance(exc, RuntimeError), type(exc).__name__)
        """
    )
    assert "CAUGHT True" in out, out
