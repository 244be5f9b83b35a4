"""The one raw-stream-to-torch-stream implementation (Rule 5, recipe R1).

Every engine and adapter calls :func:`as_torch_stream` / :func:`stream_context`; none writes its own.
Default-stream sentinels (0, cudaStreamLegacy = 1, cudaStreamPerThread = 2) and torch's own default
stream map to ``torch.cuda.default_stream(device)``, never to ``torch.cuda.ExternalStream`` (which, before
torch 2.13, returns a fresh non-blocking pool stream for handle 0). Torch is imported on first call.
"""

from __future__ import annotations

import contextlib
from typing import Any

DEFAULT_STREAM_SENTINELS = (0, 1, 2)


def stream_handle(stream: Any) -> int | None:
    """The raw CUDA stream handle of ``stream`` (torch stream, CUstream, int or None)."""
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream / ExternalStream
    if handle is not None:
        return int(handle)
    try:
        return int(stream)  # cuda.bindings.driver.CUstream: its value (its getPtr() is the object's storage address)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read a CUDA stream handle from {type(stream).__name__}; pass a torch.cuda.Stream, a CUstream or an int") from exc


def _device(device: Any):
    import torch

    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"stream handles live on CUDA devices; got device {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def as_torch_stream(stream: Any, device: Any = None):
    """The torch stream that orders work with a kernel launched on ``stream`` (None: torch's current stream)."""
    import torch

    if isinstance(stream, torch.cuda.Stream):
        return stream
    dev = _device(device)
    handle = stream_handle(stream)
    if handle is None:
        return torch.cuda.current_stream(dev)
    current = torch.cuda.current_stream(dev)
    if handle == current.cuda_stream:  # raw-handle fast path
        return current
    default = torch.cuda.default_stream(dev)
    if handle in DEFAULT_STREAM_SENTINELS or handle == default.cuda_stream:
        return default
    return torch.cuda.ExternalStream(handle, device=dev)


@contextlib.contextmanager
def stream_context(stream: Any, device: Any = None):
    """Run torch work inside on the launch stream (and device). ``stream=None`` is a no-op."""
    if stream is None:
        yield None
        return
    import torch

    dev = _device(device)
    torch_stream = as_torch_stream(stream, dev)
    if torch_stream == torch.cuda.current_stream(dev) and dev.index == torch.cuda.current_device():
        yield torch_stream
        return
    with torch.cuda.device(dev), torch.cuda.stream(torch_stream):
        yield torch_stream


_RAW_CURRENT: list = []


def current_stream_handle(device_index: int) -> int:
    """Raw handle of torch's current stream on ``device_index``, read through torch's C accessor when it has
    one (no torch.device / torch.cuda.Stream built per call: the hot path of a cached execute)."""
    if not _RAW_CURRENT:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _RAW_CURRENT.append(raw if raw is not None else (lambda idx: torch.cuda.current_stream(idx).cuda_stream))
    return _RAW_CURRENT[0](device_index)


def launch_stream_handle(stream: Any, device: Any = None) -> int:
    """The raw handle a kernel launches on: ``stream``'s, or torch's current stream for None."""
    handle = stream_handle(stream)
    if handle is not None:
        return handle
    return current_stream_handle(_device(device).index)
