"""The reference engine: pure PyTorch, fp32 compute, every node kind, any device. The oracle.

Every other engine's tests compare against it. It is ranked after every kernel engine and, for a CUDA
graph (or one whose device is unknown), offered only when asked for by name::

    graph.create_execution_plans([cudnn.heur_mode.A], engines=["reference"])   # or graph.select_engines(["reference"]) first

It is an oracle, not a fast path: it allocates fp32 temporaries per execute (on the launch stream) and
owns nothing. It never reads device values to the host (ragged and paged layouts are gathered on
device), so it also runs inside a CUDA-graph capture. Intermediates (virtual tensors) are rounded to
their declared dtype; outputs are written with ``copy_`` into the caller's buffers.

Families teach it their node kinds with :func:`register_reference_op` (``fn(ctx)``, see :class:`OpContext`).
Not implemented (declined in ``check_support``): sdpa dropout, block masks, score_mod callbacks,
matmul padding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ..datatypes import data_type
from .engine import Engine, Plan

_REFERENCE_OPS: dict[str, Callable[[OpContext], None]] = {}
_REFERENCE_CHECKS: dict[str, Callable[[Any], None]] = {}


def register_reference_op(kind: str, fn: Callable[[OpContext], None], check: Callable[[Any], None] | None = None, *, replace: bool = False) -> None:
    """Teach the reference engine a node kind: ``fn(ctx)`` computes it; ``check(node)`` may decline (NotImplementedError)."""
    if kind in _REFERENCE_OPS and not replace:
        raise ValueError(f"the reference engine already implements {kind!r}")
    _REFERENCE_OPS[kind] = fn
    if check is not None:
        _REFERENCE_CHECKS[kind] = check


class OpContext:
    """What a reference op sees: its node, fp32 inputs, the bound buffers, and where to put outputs."""

    def __init__(self, node, values: dict, pack: dict, device):
        self.node = node
        self.attrs = node.attrs
        self._values = values
        self._pack = pack
        self.device = device

    def has(self, port: str) -> bool:
        return self.node.inputs.get(port) is not None

    def raw(self, port: str):
        """The bound value of an input port as given (a torch tensor, number, or an fp32 intermediate)."""
        t = self.node.inputs.get(port)
        if t is None:
            return None
        if t in self._values:
            return self._values[t]
        if t.value is not None:
            return t.value
        return self._pack[t.uid]

    def input(self, port: str):
        """An input as fp32 (numbers and by-value tensors as Python floats)."""
        import torch

        v = self.raw(port)
        if v is None or isinstance(v, (int, float)):
            return None if v is None else float(v)
        if self.node.inputs[port].is_pass_by_value:
            return float(v.reshape(-1)[0])  # a host tensor: no device read
        if v.dtype == torch.float64:
            return v
        return v.float()

    def raw_output(self, port: str):
        """The caller's buffer of a non-virtual output (None if virtual or absent), for ops that write themselves (ragged)."""
        t = self.node.outputs.get(port)
        if t is None or t.is_virtual:
            return None
        return self._pack[t.uid]

    def output(self, port: str, value) -> None:
        """Store an output: kept (rounded to its dtype) for later nodes, and copied into the caller's buffer."""
        import torch

        from ..datatypes import to_torch_dtype

        t = self.node.outputs.get(port)
        if t is None:
            return
        dtype = to_torch_dtype(t.data_type)
        if not isinstance(value, torch.Tensor):
            value = torch.full((), float(value), dtype=torch.float32, device=self.device)
        rounded = value.to(dtype)
        self._values[t] = rounded.float() if rounded.is_floating_point() and dtype != torch.float64 else rounded
        if not t.is_virtual:
            out = self._pack[t.uid]
            out.copy_(rounded)  # broadcasts a smaller result (e.g. of constants) over the buffer

    def written(self, port: str, value) -> None:
        """Record an output the op already wrote itself (ragged), so later nodes can read it."""
        t = self.node.outputs.get(port)
        if t is not None:
            self._values[t] = value


class ReferencePlan(Plan):
    name = "reference"
    supports_overrides = True

    def __init__(self, graph):
        self.nodes = graph.nodes

    def get_workspace_size(self) -> int:
        return 0

    def execute(self, variant_pack, workspace, stream, overrides=None) -> None:
        device = _device_of(variant_pack)
        with _launch_stream(stream, device):
            values: dict = {}
            for node in self.nodes:
                _REFERENCE_OPS[node.kind](OpContext(node, values, variant_pack, device))


def _device_of(pack: dict):
    for v in pack.values():
        dev = getattr(v, "device", None)
        if dev is not None and str(dev) != "cpu":
            return dev
    for v in pack.values():
        dev = getattr(v, "device", None)
        if dev is not None:
            return dev
    return "cpu"


def _launch_stream(stream, device):
    if getattr(device, "type", str(device)) != "cuda":
        return contextlib.nullcontext()
    from .._torch_stream import stream_context

    return stream_context(stream, device)


class ReferenceEngine(Engine):
    """Pure-PyTorch oracle for every node kind (see the module docstring)."""

    name = "reference"
    priority = -(10**9)
    is_reference = True

    def check_support(self, graph) -> None:
        for node in graph.nodes:
            if node.kind not in _REFERENCE_OPS:
                raise NotImplementedError(
                    f"reference: no reference implementation for {node.describe()}; families add one with cudnn.graph.reference.register_reference_op"
                )
            check = _REFERENCE_CHECKS.get(node.kind)
            if check is not None:
                check(node)
        for t in graph.tensors:
            if t.data_type in (data_type.NOT_SET,) and not t.is_virtual:
                raise NotImplementedError(f"reference: tensor {t.describe()} has no dtype")

    def build_plan(self, graph) -> ReferencePlan:
        import torch  # noqa: F401 - the graph API's first heavy import happens here, not in check_support

        return ReferencePlan(graph)


def register(registry) -> None:
    """``cudnn.engines`` entry point of cudnn-core."""
    registry.add(ReferenceEngine())


from . import reference_linear_attention as _reference_linear_attention  # noqa: E402,F401 - gdn / kda
from . import reference_ops as _reference_ops  # noqa: E402,F401 - the built-in ops (torch imported inside them)
