"""Handles: ``create_handle`` / ``destroy_handle`` / ``set_stream`` / ``get_stream``. Pure Python.

A handle carries a device and a stream, nothing else: no cuDNN library is loaded, no CUDA call is made.
``graph.execute(..., handle=h)`` launches on ``h``'s stream (None: torch's current stream at execute);
a graph made with ``cudnn.pygraph(handle=h)`` takes ``h``'s device as its device, which is how the
Router knows a graph is meant for the CPU (the reference engine) or for a GPU (kernel engines).
"""

from __future__ import annotations

import itertools
from typing import Any

_ids = itertools.count(1)


class Handle:
    """A device and a stream. ``stream`` is a raw handle (int), a torch stream, a CUstream, or None."""

    __slots__ = ("device", "stream", "id", "destroyed")

    def __init__(self, device: str | None = None, stream: Any = None):
        self.device = _device_string(device)
        self.stream = stream
        self.id = next(_ids)
        self.destroyed = False

    def __repr__(self) -> str:
        state = " destroyed" if self.destroyed else ""
        return f"<cudnn handle {self.id} device={self.device} stream={self.stream!r}{state}>"


def _device_string(device: Any) -> str | None:
    if device is None:
        return None
    if isinstance(device, int):
        return f"cuda:{device}"
    text = str(device)
    if not (text == "cpu" or text.startswith("cuda") or text in ("meta",)):
        raise ValueError(f"handle device must be 'cpu', 'cuda', 'cuda:N' or an ordinal; got {device!r}")
    return text


def create_handle(device: Any = None, stream: Any = None) -> Handle:
    """A new handle (upstream takes no arguments; ``device`` and ``stream`` are optional here)."""
    return Handle(device, stream)


def destroy_handle(handle: Handle) -> None:
    """Mark ``handle`` destroyed; executing with it afterwards raises."""
    _check(handle)
    handle.destroyed = True


def set_stream(handle: Handle, stream: Any) -> None:
    """Launch later executes with ``handle`` on ``stream``."""
    _check(handle)
    handle.stream = stream


def get_stream(handle: Handle) -> Any:
    """The stream set on ``handle`` (None: torch's current stream at execute)."""
    _check(handle)
    return handle.stream


def _check(handle: Any) -> Handle:
    if not isinstance(handle, Handle):
        raise TypeError(f"expected a handle from cudnn.create_handle(), got {type(handle).__name__}")
    if handle.destroyed:
        raise ValueError(f"{handle!r} was destroyed; create a new one with cudnn.create_handle()")
    return handle


def check_handle(handle: Any) -> Handle | None:
    """None, or a live handle (execute uses it)."""
    return None if handle is None else _check(handle)
