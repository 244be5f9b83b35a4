"""Launch glue shared by the linear-attention adapters (causal_conv1d, Gated DeltaNet).

Imports neither torch nor cutlass at module import time: each helper imports what it needs when called, so
a metadata-only ``check_support`` pulls in neither. Nothing here converts, copies, allocates or reads device
memory (Rules 1-3).
"""

from __future__ import annotations

from typing import Any

from cudnn.datatypes import data_type

#: cutlass element type names of the dtypes these kernels take.
CUTLASS_NAMES = {data_type.BFLOAT16: "BFloat16", data_type.HALF: "Float16", data_type.FLOAT: "Float32", data_type.INT32: "Int32"}

_TORCH_DTYPES: dict = {}


def torch_dtype(dt: data_type):
    """The torch dtype of ``dt`` (memoized: an execute-path lookup)."""
    hit = _TORCH_DTYPES.get(dt)
    if hit is None:
        from cudnn.datatypes import to_torch_dtype

        hit = _TORCH_DTYPES[dt] = to_torch_dtype(dt)
    return hit


def gmem_ptr(t: Any, dt: data_type, align: int):
    """A cute global-memory pointer to torch tensor ``t``'s data as ``dt`` assumed ``align``-byte aligned; None for None."""
    import cutlass
    import cutlass.cute as cute

    if t is None:
        return None
    return cute.runtime.make_ptr(getattr(cutlass, CUTLASS_NAMES[dt]), t.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)


def fake_gmem_ptr(cname: str, align: int):
    """A placeholder global-memory pointer of cutlass type ``cname`` for ``cute.compile`` (address 0)."""
    import cutlass
    import cutlass.cute as cute

    return cute.runtime.make_ptr(getattr(cutlass, cname), 0, cute.AddressSpace.gmem, assumed_align=align)


def launch_stream(current_stream, device):
    """The ``CUstream`` to launch on: ``current_stream`` (torch stream, raw handle, or None for torch's current)."""
    import cuda.bindings.driver as cuda

    from cudnn._torch_stream import launch_stream_handle

    return cuda.CUstream(launch_stream_handle(current_stream, device))
