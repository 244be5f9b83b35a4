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


def stream_handle(current_stream, device) -> int:
    """The raw handle to launch on (the tvm-ffi route): core's ``launch_stream_handle(current_stream, device)``; for None
    on a CUDA device with an index, torch's current stream read directly by index (no torch.device / Stream built)."""
    from cudnn._torch_stream import current_stream_handle, launch_stream_handle

    if current_stream is None and device.type == "cuda" and device.index is not None:
        return current_stream_handle(device.index)
    return launch_stream_handle(current_stream, device)


_TVM_FFI: list = []


def tvm_ffi_available() -> bool:
    """Whether apache-tvm-ffi is importable (probed once per process, without importing it)."""
    if not _TVM_FFI:
        from cudnn._compat import tvm_ffi_available as probe

        _TVM_FFI.append(probe())
    return _TVM_FFI[0]


def use_tvm_ffi_default() -> bool:
    """The default launch route of the causal_conv1d adapters: the tvm-ffi entry when ``CUDNN_LA_TVM_FFI=1`` and
    apache-tvm-ffi is importable, else the DSL's own entry (the default until the GPU A/B flips it)."""
    import os

    from cudnn._compat import tvm_ffi_available

    return os.environ.get("CUDNN_LA_TVM_FFI", "0") == "1" and tvm_ffi_available()


def tvm_ffi_entry(fn):
    """The positional ``tvm_ffi.Function`` under a DSL tvm-ffi compiled function (``--enable-tvm-ffi``).

    The launch then takes pointers as Python ints (``tensor.data_ptr()``) or None for a compiled-out operand,
    extents and strides as ints and the stream as a raw handle: a few microseconds per call instead of building
    cute Pointer objects and a CUstream and the DSL's generic argument conversion. The DSL's own wrapper walks
    every argument in Python; the raw function underneath skips that identity work. Anything else is returned
    unchanged (the pattern of cudnn.sdpa.fwd.api._raw_tvm_ffi_entry)."""
    get = getattr(fn, "__tvm_ffi_object__", None)
    raw = get() if get is not None else None
    if raw is not None:
        return raw
    try:
        import tvm_ffi
    except ImportError:
        return fn
    if isinstance(fn, tvm_ffi.Function) and type(fn) is not tvm_ffi.Function:
        import functools

        return functools.partial(tvm_ffi.Function.__call__, fn)
    return fn
