"""Carve execute-time scratch from the caller's workspace (Rule 8, recipe R2). Never allocates.

def get_workspace_size(self) -> int:
    return ws_align(meta_bytes) + ws_align(acc_bytes)

def execute(self, ..., workspace):
    ws = Workspace.over(workspace, self.get_workspace_size(), type(self).__name__, device=q.device)
    meta = ws.take(b + 1, "int32")
    acc = ws.take(m * n, "float32")
"""

from __future__ import annotations

from typing import Any

WORKSPACE_ALIGNMENT = 128

_ITEMSIZE = {"uint8": 1, "int8": 1, "int16": 2, "float16": 2, "bfloat16": 2, "int32": 4, "float32": 4, "int64": 8, "float64": 8}


def ws_align(nbytes: int, alignment: int = WORKSPACE_ALIGNMENT) -> int:
    """``nbytes`` rounded up to the workspace alignment."""
    return (int(nbytes) + alignment - 1) // alignment * alignment


def _torch_dtype(dtype: Any):
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, str(dtype))


class Workspace:
    """A bump allocator over a caller-owned uint8 buffer; every piece is 128-byte aligned."""

    def __init__(self, buffer: Any, required_bytes: int, owner: str):
        self.buffer = buffer
        self.required_bytes = int(required_bytes)
        self.owner = owner
        self.offset = 0

    @classmethod
    def over(cls, buffer: Any, required_bytes: int, owner: str, device: Any = None) -> Workspace:
        """Validate ``buffer`` (device, dtype, size, alignment) and wrap it. ``buffer`` may be None only when nothing is required."""
        required_bytes = int(required_bytes)
        if buffer is None:
            if required_bytes > 0:
                raise ValueError(
                    f"{owner} requires a {required_bytes}-byte workspace but execute() received none; "
                    "allocate graph.get_workspace_size() bytes and pass the buffer to execute()"
                )
            return cls(None, 0, owner)
        import torch

        if not isinstance(buffer, torch.Tensor):
            raise TypeError(f"{owner}: workspace must be a torch.Tensor, got {type(buffer).__name__}")
        if buffer.dtype != torch.uint8 or buffer.dim() != 1 or (buffer.numel() > 1 and buffer.stride(0) != 1):
            raise ValueError(
                f"{owner}: workspace must be a contiguous 1-D torch.uint8 tensor; got shape={tuple(buffer.shape)} "
                f"stride={tuple(buffer.stride())} dtype={buffer.dtype}"
            )
        if required_bytes > 0:
            if device is not None:
                want = torch.device(device)
                if buffer.device.type != want.type or (want.index is not None and buffer.device.index != want.index):
                    raise ValueError(f"{owner}: workspace is on {buffer.device} but the operands are on {want}; allocate it on {want}")
            elif buffer.device.type != "cuda" and torch.cuda.is_available():
                raise ValueError(f"{owner}: workspace is on {buffer.device}; it must be a CUDA tensor on the operands' device")
            if buffer.numel() < required_bytes:
                raise ValueError(
                    f"{owner}: workspace holds {buffer.numel()} bytes but {required_bytes} are required; allocate graph.get_workspace_size() bytes"
                )
            if buffer.data_ptr() % WORKSPACE_ALIGNMENT:
                raise ValueError(f"{owner}: workspace address 0x{buffer.data_ptr():x} is not {WORKSPACE_ALIGNMENT}-byte aligned")
        return cls(buffer, required_bytes, owner)

    def _claim(self, nbytes: int) -> int:
        start = self.offset
        end = start + ws_align(nbytes)
        if end > self.required_bytes:
            raise ValueError(f"{self.owner}: carving {nbytes} bytes at offset {start} overruns the declared {self.required_bytes}-byte workspace")
        self.offset = end
        return start

    def take(self, numel: int, dtype: Any, shape: tuple[int, ...] | None = None):
        """The next aligned piece of ``numel`` elements of ``dtype`` as a tensor view (no allocation)."""
        tdtype = _torch_dtype(dtype)
        itemsize = tdtype.itemsize
        start = self._claim(numel * itemsize)
        return self.buffer[start : start + numel * itemsize].view(tdtype).view(shape if shape is not None else (numel,))

    def view(self, offset: int, dtype: Any, shape: tuple[int, ...]):
        """A view of ``shape`` at byte ``offset`` (must be aligned and inside the declared size)."""
        tdtype = _torch_dtype(dtype)
        numel = 1
        for s in shape:
            numel *= int(s)
        nbytes = numel * tdtype.itemsize
        if offset % WORKSPACE_ALIGNMENT or offset + nbytes > self.required_bytes:
            raise ValueError(f"{self.owner}: view of {nbytes} bytes at offset {offset} is misaligned or outside the {self.required_bytes}-byte workspace")
        return self.buffer[offset : offset + nbytes].view(tdtype).view(shape)

    @property
    def data_ptr(self) -> int:
        return 0 if self.buffer is None else self.buffer.data_ptr()
