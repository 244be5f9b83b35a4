"""The shared kernel-adapter contracts: :class:`TensorDesc`, :class:`TupleDict` and :class:`APIBase`.

Imports neither torch nor cutlass, so ``check_support`` on metadata-only descriptors runs anywhere.
An adapter's ``__init__`` takes TensorDescs (or tensors) and plan-time flags; ``check_support`` declines
with ``NotImplementedError`` (unsupported) or raises ``ValueError`` (malformed), naming the tensor;
``compile`` builds the kernel once from that plan; ``execute`` validates, never converts, allocates or
syncs (Rules 1-3), and launches on the given stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .datatypes import data_type, to_data_type


@dataclass(frozen=True)
class TensorDesc:
    """Metadata of one tensor: no storage. ``device`` is e.g. ``"cuda:0"`` or None when unknown."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: data_type
    name: str = "tensor"
    device: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "stride", tuple(int(s) for s in self.stride))
        object.__setattr__(self, "dtype", to_data_type(self.dtype))
        if len(self.shape) != len(self.stride):
            raise ValueError(f"{self.name}: shape {self.shape} and stride {self.stride} differ in rank")

    @classmethod
    def like(cls, t: Any, name: str = "tensor") -> TensorDesc:
        """Descriptor of a torch tensor (or of another TensorDesc, renamed)."""
        if isinstance(t, TensorDesc):
            return TensorDesc(t.shape, t.stride, t.dtype, name, t.device)
        return cls(tuple(t.shape), tuple(t.stride()), to_data_type(t.dtype), name, str(t.device))

    @classmethod
    def contiguous(cls, shape: Sequence[int], dtype: Any, name: str = "tensor", device: str | None = None) -> TensorDesc:
        stride, acc = [], 1
        for s in reversed(shape):
            stride.append(acc)
            acc *= max(int(s), 1)
        return cls(tuple(shape), tuple(reversed(stride)), dtype, name, device)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def span_elements(self) -> int:
        """Elements between the first and one past the last addressed element."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((s - 1) * abs(st) for s, st in zip(self.shape, self.stride, strict=False))

    def describe(self) -> str:
        return f"{self.name} (shape={self.shape}, stride={self.stride}, dtype={self.dtype.short})"


def as_desc(x: Any, name: str) -> TensorDesc | None:
    """None stays None; tensors and descriptors become a TensorDesc named ``name``."""
    if x is None:
        return None
    return TensorDesc.like(x, name)


class TupleDict(dict):
    """A dict with a documented key order that also unpacks (and indexes by position) as a tuple."""

    def __iter__(self):
        return iter(self.values())

    def __getitem__(self, key):
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)

    def keys_in_order(self) -> tuple[str, ...]:
        return tuple(super().__iter__())

    def __repr__(self):
        return "TupleDict(" + ", ".join(f"{k}={type(v).__name__}" for k, v in self.items()) + ")"


class APIBase:
    """Base of every kernel adapter: check_support -> compile -> execute, ``__call__`` = compile-if-needed + execute."""

    def __init__(self):
        self._is_supported: bool | None = None
        self._support_error: Exception | None = None
        self._compiled_kernel: Any = None

    # -- contract -----------------------------------------------------------------------------
    def check_support(self) -> bool:
        """Validate the plan; raise NotImplementedError (unsupported) or ValueError (malformed). Sets ``_is_supported``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement check_support")

    def compile(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement compile")

    def execute(self, *args, current_stream=None, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not implement execute")

    def scratch_workspace_bytes(self) -> int:
        """Bytes of workspace ``execute`` carves (0 when it needs none)."""
        return 0

    def __call__(self, *args, current_stream=None, **kwargs):
        if self._compiled_kernel is None:
            self.compile()
        return self.execute(*args, current_stream=current_stream, **kwargs)

    # -- helpers ------------------------------------------------------------------------------
    def _ensure_support_checked(self) -> None:
        if self._is_supported is None:
            try:
                self._is_supported = bool(self.check_support())
            except Exception as exc:
                self._is_supported = False
                self._support_error = exc
                raise
        if not self._is_supported:
            if self._support_error is not None:
                raise self._support_error
            raise NotImplementedError(f"{type(self).__name__}: configuration is not supported")

    @staticmethod
    def _value_error_if(condition: bool, message: str) -> None:
        if condition:
            raise ValueError(message)

    @staticmethod
    def _decline_if(condition: bool, message: str) -> None:
        if condition:
            raise NotImplementedError(message)

    @staticmethod
    def _check_dtype(desc: TensorDesc, allowed: Iterable[data_type], what: str = "") -> None:
        allowed = tuple(allowed)
        if desc.dtype not in allowed:
            raise NotImplementedError(
                f"{what or 'kernel'}: {desc.describe()} has unsupported dtype {desc.dtype.short}; accepted: {', '.join(a.short for a in allowed)}"
            )

    @staticmethod
    def _check_rank(desc: TensorDesc, rank: int, what: str = "") -> None:
        if desc.rank != rank:
            raise ValueError(f"{what or 'kernel'}: {desc.describe()} must have rank {rank}")

    @staticmethod
    def _check_shape(desc: TensorDesc, shape: Sequence[int], what: str = "") -> None:
        if tuple(desc.shape) != tuple(shape):
            raise ValueError(f"{what or 'kernel'}: {desc.describe()} must have shape {tuple(shape)}")

    @staticmethod
    def _check_unit_stride(desc: TensorDesc, dim: int, what: str = "") -> None:
        if desc.shape[dim] > 1 and desc.stride[dim] != 1:
            raise NotImplementedError(
                f"{what or 'kernel'}: {desc.describe()} needs unit stride in dim {dim} for TMA/vector loads; other layouts are declined, not copied (Rule 2)"
            )

    @staticmethod
    def _check_tensor_matches(t: Any, desc: TensorDesc, what: str = "") -> None:
        """Execute-time check that a runtime tensor matches its plan-time descriptor (no conversion)."""
        if t is None:
            raise ValueError(f"{what or 'execute'}: {desc.name} was declared at plan time but execute() received None")
        got = TensorDesc.like(t, desc.name)
        if got.shape != desc.shape or got.stride != desc.stride or got.dtype != desc.dtype:
            raise ValueError(f"{what or 'execute'}: got {got.describe()}, but the plan was built for {desc.describe()}")
        if desc.device is not None and str(t.device) != desc.device:
            raise ValueError(f"{what or 'execute'}: {desc.name} is on {t.device}, but the plan was built for {desc.device}")
