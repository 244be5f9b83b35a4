"""``cudnn.tensor``: a graph tensor's metadata (no storage). Pure Python.

Upstream's accessors are all here (``get_/set_`` name, dim, stride, data_type, is_virtual,
is_pass_by_value, uid, ragged_offset, reordering_type; ``set_output``), setters return the tensor so
calls chain (``z.set_output(True).set_data_type(cudnn.data_type.BFLOAT16)``), and the same values are
readable as properties (``t.dim``, ``t.uid``...) for engines. Changing a tensor of a graph after
``validate`` invalidates the graph's plans: validate and build again.
"""

from __future__ import annotations

from typing import Any

from ..datatypes import data_type, to_data_type
from .enums import tensor_reordering


def _ints(values: Any, what: str, name: str) -> tuple[int, ...]:
    if values is None:
        return ()
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"tensor {name!r}: {what} must be a sequence of ints, got {values!r}") from None


def contiguous_stride(dim: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major (last dim fastest) strides of ``dim``."""
    stride, acc = [], 1
    for d in reversed(dim):
        stride.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(stride))


def stride_order(stride: tuple[int, ...]) -> list[int]:
    """Dims from the fastest-moving to the slowest (ties: the later dim is faster)."""
    return sorted(range(len(stride)), key=lambda i: (stride[i], -i))


def stride_like(dim: tuple[int, ...], like_stride: tuple[int, ...]) -> tuple[int, ...]:
    """Compact strides of ``dim`` with the dim ordering of ``like_stride`` (e.g. sdpa O follows Q's layout)."""
    stride = [0] * len(dim)
    acc = 1
    for i in stride_order(like_stride):
        stride[i] = acc
        acc *= max(int(dim[i]), 1)
    return tuple(stride)


class tensor:  # noqa: N801 - upstream's spelling
    """Metadata of one graph tensor. Identity-hashed, so it keys a variant pack."""

    def __init__(
        self,
        name: str = "",
        dim: Any = None,
        stride: Any = None,
        data_type: Any = data_type.NOT_SET,
        is_virtual: bool = False,
        is_pass_by_value: bool = False,
        ragged_offset: tensor | None = None,
        reordering_type: tensor_reordering = tensor_reordering.NONE,
        uid: int = -1,
    ):
        self._name = str(name or "")
        self._dim = _ints(dim, "dim", self._name)
        self._stride = _ints(stride, "stride", self._name)
        self._data_type = to_data_type(data_type)
        self._is_virtual = bool(is_virtual)
        self._is_pass_by_value = bool(is_pass_by_value)
        self._ragged_offset = ragged_offset
        self._reordering_type = reordering_type
        self._uid = int(uid) if uid is not None else -1
        self._uid_assigned = self._uid >= 0  # set by the user (or set_uid): validate keeps it
        #: device string of the tensor this descriptor was made from (``tensor_like``), else None.
        self.device: str | None = None
        #: a compile-time constant (a Python number) for by-value tensors made from a number, else None.
        self.value: Any = None
        #: the node that produces this tensor (None for graph inputs).
        self.producer = None
        self._graph = None
        #: fields ("dim", "stride", "dtype") filled by validate's inference (cleared and re-inferred on re-validate)
        self._inferred: set[str] = set()

    # -- internal ---------------------------------------------------------------------------------
    def _touch(self) -> None:
        if self._graph is not None:
            self._graph._invalidate(f"tensor {self._name!r} changed")

    def _infer(self, field: str, value) -> None:
        """Set a field by inference (not by the caller): validate re-infers it after the graph changes."""
        setattr(self, {"dim": "_dim", "stride": "_stride", "dtype": "_data_type"}[field], value)
        self._inferred.add(field)

    def _clear_inferred(self) -> None:
        if "dim" in self._inferred:
            self._dim = ()
        if "stride" in self._inferred:
            self._stride = ()
        if "dtype" in self._inferred:
            self._data_type = data_type.NOT_SET
        self._inferred.clear()

    # -- upstream accessors -----------------------------------------------------------------------
    def get_name(self) -> str:
        return self._name

    def set_name(self, name: str) -> tensor:
        self._name = str(name)
        self._touch()
        return self

    def get_dim(self) -> list[int]:
        return list(self._dim)

    def set_dim(self, dim) -> tensor:
        self._dim = _ints(dim, "dim", self._name)
        self._inferred.discard("dim")
        self._touch()
        return self

    def get_stride(self) -> list[int]:
        return list(self._stride)

    def set_stride(self, stride) -> tensor:
        self._stride = _ints(stride, "stride", self._name)
        self._inferred.discard("stride")
        self._touch()
        return self

    def get_data_type(self) -> data_type:
        return self._data_type

    def set_data_type(self, data_type: Any = data_type.NOT_SET) -> tensor:
        self._data_type = to_data_type(data_type)
        self._inferred.discard("dtype")
        self._touch()
        return self

    def get_is_virtual(self) -> bool:
        return self._is_virtual

    def set_is_virtual(self, is_virtual: bool) -> tensor:
        self._is_virtual = bool(is_virtual)
        self._touch()
        return self

    def set_output(self, is_output: bool) -> tensor:
        """Upstream's other name for ``set_is_virtual(not is_output)``."""
        return self.set_is_virtual(not is_output)

    def get_is_pass_by_value(self) -> bool:
        return self._is_pass_by_value

    def set_is_pass_by_value(self, is_pass_by_value: bool) -> tensor:
        self._is_pass_by_value = bool(is_pass_by_value)
        self._touch()
        return self

    def get_uid(self) -> int:
        return self._uid

    def set_uid(self, uid: int) -> tensor:
        self._uid = int(uid)
        self._uid_assigned = True
        self._touch()
        return self

    def get_ragged_offset(self) -> tensor | None:
        return self._ragged_offset

    def set_ragged_offset(self, ragged_offset: tensor | None) -> tensor:
        self._ragged_offset = ragged_offset
        self._touch()
        return self

    def get_reordering_type(self) -> tensor_reordering:
        return self._reordering_type

    def set_reordering_type(self, reordering_type: tensor_reordering) -> tensor:
        self._reordering_type = reordering_type
        self._touch()
        return self

    # -- properties (read by engines) -------------------------------------------------------------
    name = property(get_name)
    dim = property(lambda self: self._dim)
    stride = property(lambda self: self._stride)
    data_type = property(get_data_type)
    is_virtual = property(get_is_virtual)
    is_pass_by_value = property(get_is_pass_by_value)
    ragged_offset = property(get_ragged_offset)

    @property
    def uid(self) -> int:
        return self._uid

    @uid.setter
    def uid(self, value: int) -> None:
        self.set_uid(value)

    @property
    def rank(self) -> int:
        return len(self._dim)

    def numel(self) -> int:
        n = 1
        for d in self._dim:
            n *= d
        return n

    def describe(self) -> str:
        """``'x' (uid 1, dim=(1, 64, 32), stride=(2048, 32, 1), dtype=bf16)`` for error messages."""
        extra = ", by value" if self._is_pass_by_value else ""
        extra += ", ragged" if self._ragged_offset is not None else ""
        return f"{self._name!r} (uid {self._uid}, dim={self._dim}, stride={self._stride}, dtype={self._data_type.short}{extra})"

    def __repr__(self) -> str:
        kind = "virtual" if self._is_virtual else "io"
        return f"cudnn.tensor({self.describe()}, {kind})"
