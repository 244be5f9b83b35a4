"""Recipe R1: default-stream handles map to torch.cuda.default_stream, never ExternalStream."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudnn import _torch_stream  # noqa: E402
from cudnn._torch_stream import as_torch_stream, launch_stream_handle, stream_context, stream_handle  # noqa: E402
from cudnn_testing.detectors import external_stream_forbidden  # noqa: E402


class _FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle

    def __eq__(self, other):
        return isinstance(other, _FakeStream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda stream functions faked so the mapping logic runs on CPU machines too."""
    default, current = _FakeStream(0x0), _FakeStream(0xC0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: default)
    created = []

    def external(handle, device=None):
        created.append(handle)
        return _FakeStream(handle)

    monkeypatch.setattr(torch.cuda, "ExternalStream", external)
    return default, current, created


@pytest.mark.parametrize("handle", [0, 1, 2])
def test_sentinels_map_to_default_stream(fake_cuda, handle):
    default, _, created = fake_cuda
    assert as_torch_stream(handle, "cuda:0") is default
    assert created == []


def test_current_stream_fast_path(fake_cuda):
    _, current, created = fake_cuda
    assert as_torch_stream(0xC0, "cuda:0") is current
    assert as_torch_stream(None, "cuda:0") is current
    assert created == []


def test_side_stream_becomes_external(fake_cuda):
    _, _, created = fake_cuda
    s = as_torch_stream(0xBEEF, "cuda:0")
    assert s.cuda_stream == 0xBEEF and created == [0xBEEF]


def test_stream_handle_forms():
    assert stream_handle(None) is None
    assert stream_handle(7) == 7
    assert stream_handle(_FakeStream(9)) == 9

    with pytest.raises(TypeError, match="cannot read a CUDA stream handle"):
        stream_handle(object())


def test_stream_handle_of_a_cuda_bindings_custream_is_its_value():
    """A ``cuda.bindings.driver.CUstream`` is read by value (``int(s)``); its ``getPtr()`` is the address of the Python
    object's storage, not the stream (the helper read that before session 13)."""
    driver = pytest.importorskip("cuda.bindings.driver")
    s = driver.CUstream(0x1234)
    assert s.getPtr() != 0x1234  # what a getPtr() reader would have launched on
    assert stream_handle(s) == 0x1234
    assert stream_handle(driver.CUstream(0)) == 0


def test_stream_context_none_is_noop():
    with stream_context(None) as s:
        assert s is None


def _planted_as_torch_stream(stream, device=None):
    """A planted violation of R1: hands the raw handle straight to ExternalStream."""
    return torch.cuda.ExternalStream(stream_handle(stream), device=device)


@pytest.mark.detector
def test_detector_catches_planted_external_stream(fake_cuda, monkeypatch):
    """The R1 detector (ExternalStream forbidden, handle 0) fails on the planted violation and passes on ours."""
    with external_stream_forbidden(monkeypatch):
        as_torch_stream(0, "cuda:0")
        with pytest.raises(AssertionError, match="ExternalStream"):
            _planted_as_torch_stream(0, "cuda:0")


@pytest.mark.gpu
@pytest.mark.detector
def test_handle_zero_on_gpu_never_builds_external_stream(monkeypatch):
    with external_stream_forbidden(monkeypatch):
        s = as_torch_stream(0)
        assert s == torch.cuda.default_stream()
        with stream_context(0):
            x = torch.ones(4, device="cuda")
            x.add_(1)
        assert launch_stream_handle(None) == torch.cuda.current_stream().cuda_stream
    assert _torch_stream.DEFAULT_STREAM_SENTINELS == (0, 1, 2)
