"""The shared execute path (Rule 9): variant pack, overrides and workspace checks every engine gets.

Validation only: tensors are read for metadata (``shape``, ``stride()``, ``dtype``, ``device``), never
converted, copied or synced (Rules 1-3). torch is imported only by ``Workspace.over`` when a workspace
tensor is passed (R2's one workspace checker). Errors are ``ValueError``
naming the tensor (name and uid) with what was bound and what the graph declares.
"""

from __future__ import annotations

from typing import Any

from ..datatypes import data_type, to_data_type
from .descriptors import tensor

_DTYPE_CACHE: dict[Any, data_type] = {}


def dtype_of(value: Any) -> data_type:
    dt = value.dtype
    try:
        return _DTYPE_CACHE[dt]
    except KeyError:
        _DTYPE_CACHE[dt] = out = to_data_type(dt)
        return out
    except TypeError:  # unhashable dtype object
        return to_data_type(dt)


def _same_device(a: str, b: str) -> bool:
    if a == b:
        return True
    ta, _, ia = a.partition(":")
    tb, _, ib = b.partition(":")
    return ta == tb and (not ia or not ib)


def _strides_match(dim: tuple[int, ...], want: tuple[int, ...], got: tuple[int, ...]) -> bool:
    return all(d == 1 or w == g for d, w, g in zip(dim, want, got, strict=False))


def parse_overrides(graph, override_uids, override_shapes, override_strides) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """Execute-time overrides as ``{uid: (dim, stride)}``; the triple is validated as a set (Rule 1)."""
    given = [x is not None for x in (override_uids, override_shapes, override_strides)]
    if not any(given):
        return None
    if not all(given):
        raise ValueError("execute-time overrides need override_uids, override_shapes and override_strides together")
    if not graph.is_override_shape_enabled:
        raise ValueError("execute-time shape/stride overrides need a graph created with cudnn.pygraph(..., is_override_shape_enabled=True)")
    uids, shapes, strides = list(override_uids), list(override_shapes), list(override_strides)
    if not (len(uids) == len(shapes) == len(strides)):
        raise ValueError(f"override_uids ({len(uids)}), override_shapes ({len(shapes)}) and override_strides ({len(strides)}) differ in length")
    out = {}
    for uid, shape, stride in zip(uids, shapes, strides, strict=False):
        uid = uid.uid if isinstance(uid, tensor) else int(uid)
        t = graph._by_uid.get(uid)
        if t is None:
            raise ValueError(f"override names unknown uid {uid}; the graph's uids are {sorted(graph._by_uid)}")
        if t.is_virtual:
            raise ValueError(f"override names virtual tensor {t.describe()}; only tensors the caller binds can be overridden")
        shape, stride = tuple(int(s) for s in shape), tuple(int(s) for s in stride)
        if len(shape) != t.rank or len(stride) != t.rank:
            raise ValueError(f"override for {t.describe()}: shape {shape} / stride {stride} must keep rank {t.rank}")
        if uid in out:
            raise ValueError(f"override for {t.describe()} is given twice")
        out[uid] = (shape, stride)
    return out


def bind_variant_pack(graph, variant_pack: dict, overrides: dict | None) -> tuple[dict[int, Any], str | None]:
    """``(uid -> bound value, operands' device)``. Keys are tensors or uids; values torch tensors (by-value: numbers too)."""
    if not isinstance(variant_pack, dict):
        raise TypeError(f"variant_pack must be a dict of tensor (or uid) -> buffer, got {type(variant_pack).__name__}")
    by_uid = graph._by_uid
    pack: dict[int, Any] = {}
    for key, value in variant_pack.items():
        if key is None:
            continue
        if isinstance(key, tensor):
            uid = key.uid
            if by_uid.get(uid) is not key:
                raise ValueError(f"variant pack key {key.describe()} is not a tensor of this graph")
        elif isinstance(key, int) and not isinstance(key, bool):
            uid = key
            if uid not in by_uid:
                raise ValueError(f"variant pack names unknown uid {uid}; the graph's uids are {sorted(by_uid)}")
        else:
            raise TypeError(f"variant pack keys are cudnn.tensor or int uids, got {type(key).__name__}")
        t = by_uid[uid]
        if t.is_virtual:
            raise ValueError(f"variant pack binds {t.describe()}, a virtual (intermediate) tensor; mark it set_output(True) to read it")
        if t.value is not None:
            raise ValueError(f"variant pack binds {t.describe()}, a compile-time constant; it takes no buffer")
        if value is None:
            raise ValueError(f"variant pack binds None to {t.describe()}")
        pack[uid] = value
    missing = [t for t in graph._io_tensors if t.uid not in pack]
    if missing:
        raise ValueError("variant pack is missing " + ", ".join(f"{'output' if t.producer is not None else 'input'} {t.describe()}" for t in missing))
    device = None
    for uid, value in pack.items():
        t = by_uid[uid]
        if t.is_pass_by_value:
            _check_by_value(t, value)
            continue
        if not hasattr(value, "dtype") or not hasattr(value, "device"):
            raise TypeError(f"{t.describe()}: bound a {type(value).__name__}; bind a torch tensor")
        got_dt = dtype_of(value)
        if got_dt is not t.data_type:
            raise ValueError(f"{t.describe()}: bound tensor has dtype {got_dt.short} but the graph declares {t.data_type.short}")
        dev = str(value.device)
        if device is None:
            device = dev
        elif not _same_device(dev, device):
            raise ValueError(f"{t.describe()}: bound tensor is on {dev} but other operands are on {device}; all operands share one device")
        if t.ragged_offset is not None:
            continue  # packed (THD) storage: its extent is runtime; the ragged offsets describe it
        want_dim, want_stride = overrides[uid] if overrides and uid in overrides else (t.dim, t.stride)
        got_dim = tuple(value.shape)
        if got_dim != want_dim:
            what = "the execute-time override" if overrides and uid in overrides else "the graph"
            raise ValueError(f"{t.describe()}: bound tensor has shape {got_dim} but {what} declares {want_dim}")
        got_stride = tuple(value.stride())
        if not _strides_match(want_dim, want_stride, got_stride):
            what = "the execute-time override" if overrides and uid in overrides else "the graph"
            raise ValueError(f"{t.describe()}: bound tensor has stride {got_stride} but {what} declares {want_stride}")
    if device is not None and graph.device is not None and not _same_device(device, graph.device):
        raise ValueError(f"operands are on {device} but graph {graph.name!r} was built for {graph.device}")
    return pack, device


def _check_by_value(t: tensor, value: Any) -> None:
    if isinstance(value, (int, float, bool)):
        return
    dev = getattr(value, "device", None)
    if dev is None or str(dev) != "cpu":
        raise ValueError(f"{t.describe()} is passed by value: bind a Python number or a host (CPU) tensor, got {type(value).__name__} on {dev}")
    if value.numel() != 1:
        raise ValueError(f"{t.describe()} is passed by value: bind one element, got shape {tuple(value.shape)}")


def check_workspace(workspace: Any, required: int, device: str | None, owner: str) -> Any:
    """The caller's workspace: on the operands' device even when nothing is required, then ``Workspace.over``'s
    checks (R2: dtype, rank, size, alignment; its message when none was passed but bytes are required)."""
    if workspace is not None:
        if isinstance(workspace, int):
            raise TypeError(f"{owner}: pass the workspace as a torch.uint8 tensor, not a raw pointer (its device and size are checked)")
        wdev = getattr(workspace, "device", None)
        if device is not None and wdev is not None and not _same_device(str(wdev), device):
            raise ValueError(f"{owner}: workspace is on {wdev} but the operands are on {device}; allocate it on {device}")
    from ..workspace import Workspace

    Workspace.over(workspace, required, owner, device=device)
    return workspace
