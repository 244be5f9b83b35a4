"""Graph nodes, their ports, and the node-kind registry (shape and dtype inference). Pure Python.

Ports (the keys of ``node.inputs`` / ``node.outputs``; engines read these names):

============== ======================================================== ==============================
kind           inputs                                                   outputs
============== ======================================================== ==============================
matmul         A [..., M, K], B [..., K, N]                             C [..., M, N]
pointwise      IN_0, IN_1, IN_2 (upstream order: ``add(a, b)`` -> a, b;  OUT_0
               ``relu_backward(loss, input)`` -> loss, input;
               ``binary_select(input0, input1, mask)``)
reduction      X                                                        Y (dims set by the caller)
sdpa           q, k, v, attn_scale, bias, seq_len_q, seq_len_kv,        o, stats
               paged_attention_k_table, paged_attention_v_table,
               sink_token, block_mask, dropout_seed, dropout_offset
sdpa_backward  q, k, v, o, dO, stats, attn_scale, bias, seq_len_q,      dQ, dK, dV, dBias, dSink_token
               seq_len_kv, sink_token
gdn, kda       q, k, v, g, beta, cu_seqlens, initial_state              O, final_state
               (cudnn.graph.ops_linear_attention)
============== ======================================================== ==============================

Absent optional ports hold None. ``attrs`` hold plan-time values: pointwise ``mode`` (a
``pointwise_mode``) and its scalars (``relu_lower_clip``, ``relu_upper_clip``, ``relu_lower_clip_slope``,
``swish_beta``, ``elu_alpha``, ``axis``); matmul ``padding``; reduction ``mode``; sdpa the normalized mask
(``diagonal_alignment``, ``diagonal_band_left_bound``, ``diagonal_band_right_bound``; causal is
``right_bound = 0``, a sliding window of length W is ``left_bound = W``), ``attn_scale`` (a float, or None
when it is the ``attn_scale`` input tensor or absent), ``generate_stats``, ``use_padding_mask``,
``use_alibi_mask``, ``dropout``, ``paged_attention_max_seq_len_kv`` and the caller's flags as given.

Families add node kinds (grouped matmul, ...) with :func:`register_node_kind` and graph methods
with :func:`register_graph_method`; the reference engine learns them with
``cudnn.graph.reference.register_reference_op``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..datatypes import data_type
from .descriptors import contiguous_stride, stride_like, tensor
from .enums import diagonal_alignment, pointwise_mode
from .errors import GraphValidationError


@dataclass(eq=False)
class Node:
    """One operation of a graph."""

    kind: str
    name: str
    inputs: dict[str, tensor | None]
    outputs: dict[str, tensor | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    compute_data_type: data_type = data_type.NOT_SET

    def describe(self) -> str:
        return f"{self.kind} node {self.name!r}"

    def __repr__(self) -> str:
        ins = {k: v.name for k, v in self.inputs.items() if v is not None}
        outs = {k: v.name for k, v in self.outputs.items() if v is not None}
        return f"Node({self.kind} {self.name!r}, inputs={ins}, outputs={outs})"


@dataclass(frozen=True)
class NodeKind:
    """A node kind: ``infer(graph, node)`` fills unset output dims/strides/dtypes and raises GraphValidationError when malformed."""

    kind: str
    infer: Callable[[Any, Node], None]
    doc: str = ""


_NODE_KINDS: dict[str, NodeKind] = {}


def register_node_kind(kind: str, infer: Callable[[Any, Node], None], doc: str = "", *, replace: bool = False) -> NodeKind:
    """Register a node kind (a family's kda, gdn, grouped matmul...)."""
    if kind in _NODE_KINDS and not replace:
        raise ValueError(f"node kind {kind!r} is already registered")
    nk = NodeKind(kind, infer, doc)
    _NODE_KINDS[kind] = nk
    return nk


def node_kind(kind: str) -> NodeKind:
    try:
        return _NODE_KINDS[kind]
    except KeyError:
        raise GraphValidationError(f"unknown node kind {kind!r}; registered kinds: {sorted(_NODE_KINDS)}") from None


def node_kinds() -> list[str]:
    return sorted(_NODE_KINDS)


def register_graph_method(name: str, method: Callable, *, replace: bool = False) -> None:
    """Add ``cudnn.pygraph.<name>`` (e.g. a family's ``kda``); the method builds its node with ``graph.add_node``."""
    from .builder import pygraph

    if hasattr(pygraph, name) and not replace:
        raise ValueError(f"cudnn.pygraph already has a method {name!r}")
    setattr(pygraph, name, method)


# -- inference helpers ------------------------------------------------------------------------------
def fail(node: Node, message: str) -> None:
    raise GraphValidationError(f"{node.describe()}: {message}")


def default_dtype(graph, t: tensor, fallback: data_type) -> None:
    """An unset output dtype: virtual -> intermediate_data_type (else FLOAT); non-virtual -> io_data_type (else ``fallback``)."""
    if t.data_type is not data_type.NOT_SET:
        return
    if t.is_virtual:
        dt = graph.intermediate_data_type if graph.intermediate_data_type is not data_type.NOT_SET else data_type.FLOAT
    else:
        dt = graph.io_data_type if graph.io_data_type is not data_type.NOT_SET else fallback
    t._infer("dtype", dt)


def set_shape(node: Node, port: str, t: tensor, dim: tuple[int, ...], stride: tuple[int, ...] | None = None) -> None:
    """Set an output's dim (or check a caller-set one) and default its stride (compact, or ``stride``)."""
    dim = tuple(int(d) for d in dim)
    if t.dim and t.dim != dim:
        fail(node, f"output {port} {t.describe()} was set to dim {t.dim} but the node produces {dim}")
    if not t.dim:
        t._infer("dim", dim)
    if not t.stride:
        t._infer("stride", tuple(stride) if stride is not None else contiguous_stride(dim))
    elif len(t.stride) != len(dim):
        fail(node, f"output {port} {t.describe()}: stride rank {len(t.stride)} differs from dim rank {len(dim)}")


def require_rank(node: Node, port: str, t: tensor, rank: int) -> None:
    if t.rank != rank:
        fail(node, f"input {port} {t.describe()} must have rank {rank}")


class _ones:
    """A rank-``rank`` all-ones stand-in for a one-element operand (inference only)."""

    def __init__(self, t: tensor, rank: int):
        self.dim, self.stride, self.rank, self._t = (1,) * rank, (1,) * rank, rank, t

    def describe(self) -> str:
        return self._t.describe()


def broadcast(node: Node, named: list[tuple[str, tensor]]) -> tuple[int, ...]:
    """Broadcast dims of same-rank operands (each extent equal or 1)."""
    rank = max(t.rank for _, t in named)
    # one-element operands (scalars, constants) broadcast at any rank
    named = [(p, t) if t.rank == rank or t.numel() != 1 else (p, _ones(t, rank)) for p, t in named]
    for port, t in named:
        if t.rank != rank:
            fail(
                node,
                f"input {port} {t.describe()} has rank {t.rank} but another operand has rank {rank}; pointwise operands share one rank (one-element operands excepted)",
            )
    out = []
    for i in range(rank):
        extents = {t.dim[i] for _, t in named} - {1}
        if len(extents) > 1:
            shapes = ", ".join(f"{p} {t.describe()}" for p, t in named)
            fail(node, f"dim {i} does not broadcast: {shapes}")
        out.append(extents.pop() if extents else 1)
    return tuple(out)


# -- matmul -------------------------------------------------------------------------------------------
def _infer_matmul(graph, node: Node) -> None:
    a, b, c = node.inputs["A"], node.inputs["B"], node.outputs["C"]
    if a.rank < 2 or a.rank != b.rank:
        fail(node, f"A {a.describe()} and B {b.describe()} must have the same rank >= 2")
    m, k = a.dim[-2], a.dim[-1]
    kb, n = b.dim[-2], b.dim[-1]
    if k != kb:
        fail(node, f"A {a.describe()} has K={k} but B {b.describe()} has K={kb}")
    batch = []
    for i, (da, db) in enumerate(zip(a.dim[:-2], b.dim[:-2], strict=False)):
        if da != db and 1 not in (da, db):
            fail(node, f"batch dim {i} does not broadcast: A {a.describe()}, B {b.describe()}")
        batch.append(max(da, db))
    if a.data_type is not b.data_type:
        fail(node, f"A {a.describe()} and B {b.describe()} have different dtypes")
    set_shape(node, "C", c, (*batch, m, n))
    default_dtype(graph, c, a.data_type)


# -- pointwise ---------------------------------------------------------------------------------------
_BOOL_OUT = {pointwise_mode.CMP_EQ, pointwise_mode.CMP_NEQ, pointwise_mode.CMP_GT, pointwise_mode.CMP_GE, pointwise_mode.CMP_LT, pointwise_mode.CMP_LE}


def _infer_pointwise(graph, node: Node) -> None:
    named = [(p, t) for p, t in node.inputs.items() if t is not None]
    out = node.outputs["OUT_0"]
    mode = node.attrs["mode"]
    dim = broadcast(node, named)
    if mode is pointwise_mode.BINARY_SELECT:
        named = named[:2]
    # strides follow the first full-extent operand's layout
    like = next((t.stride for _, t in named if t.dim == dim and t.stride and t.rank == len(dim)), None)
    set_shape(node, "OUT_0", out, dim, stride_like(dim, like) if like is not None else None)
    if mode is pointwise_mode.GEN_INDEX:
        axis = node.attrs.get("axis")
        if axis is None or not (0 <= int(axis) < len(dim)):
            fail(node, f"gen_index axis {axis!r} is outside rank {len(dim)}")
        if out.data_type is data_type.NOT_SET:
            out._infer("dtype", data_type.INT32)
        return
    fallback = named[0][1].data_type
    default_dtype(graph, out, fallback)


# -- reduction ---------------------------------------------------------------------------------------
def _infer_reduction(graph, node: Node) -> None:
    x, y = node.inputs["X"], node.outputs["Y"]
    if not y.dim:
        fail(node, f"set the output's dim (y.set_dim([...])) to say which axes reduce: an extent of 1 where input {x.describe()} reduces")
    if y.rank != x.rank:
        fail(node, f"output Y {y.describe()} must have the rank of input X {x.describe()}")
    for i, (dx, dy) in enumerate(zip(x.dim, y.dim, strict=False)):
        if dy not in (dx, 1):
            fail(node, f"output Y {y.describe()} dim {i} is {dy}; it must be {dx} (kept) or 1 (reduced)")
    set_shape(node, "Y", y, y.dim)
    default_dtype(graph, y, x.data_type)


# -- sdpa ----------------------------------------------------------------------------------------------
_SDPA_IO_DTYPES = (data_type.HALF, data_type.BFLOAT16, data_type.FLOAT, data_type.FP8_E4M3, data_type.FP8_E5M2)
_INDEX_DTYPES = (data_type.INT32, data_type.INT64)


def _check_aux(node: Node, port: str, t: tensor | None, dim: tuple[int, ...], dtypes: tuple[data_type, ...]) -> None:
    if t is None:
        return
    if t.data_type not in dtypes:
        fail(node, f"{port} {t.describe()} must have dtype in {[d.name for d in dtypes]}")
    if t.dim != dim:
        fail(node, f"{port} {t.describe()} must have dim {dim}")


def _check_ragged(node: Node, port: str, t: tensor, b: int) -> None:
    r = t.ragged_offset
    if r is None:
        return
    _check_aux(node, f"{port}'s ragged offset", r, (b + 1, 1, 1, 1), _INDEX_DTYPES)
    if not node.attrs.get("use_padding_mask"):
        fail(node, f"{port} {t.describe()} has a ragged offset (THD layout); ragged layouts need use_padding_mask=True with seq_len_q and seq_len_kv")


def _check_mask_attrs(node: Node) -> None:
    a = node.attrs
    left, right = a.get("diagonal_band_left_bound"), a.get("diagonal_band_right_bound")
    if left is not None and int(left) < 1:
        fail(node, f"diagonal_band_left_bound / sliding_window_length must be >= 1, got {left}")
    if right is not None and int(right) < 0:
        fail(node, f"diagonal_band_right_bound must be >= 0, got {right}")
    if a.get("use_padding_mask") and (node.inputs.get("seq_len_q") is None or node.inputs.get("seq_len_kv") is None):
        fail(node, "use_padding_mask=True needs both seq_len_q and seq_len_kv tensors")
    if not a.get("use_padding_mask") and (node.inputs.get("seq_len_q") is not None or node.inputs.get("seq_len_kv") is not None):
        fail(node, "seq_len_q / seq_len_kv were given but use_padding_mask is False; set use_padding_mask=True (a given tensor is never silently ignored)")


def _sdpa_geometry(node: Node) -> tuple[int, int, int, int, int, int, int]:
    """(b, h_q, h_k, h_v, s_q, s_kv, d_v) with the paged-KV container resolved."""
    q, k, v = node.inputs["q"], node.inputs["k"], node.inputs["v"]
    for port, t in (("q", q), ("k", k), ("v", v)):
        require_rank(node, port, t, 4)
    b, h_q, s_q, d_qk = q.dim
    kt, vt = node.inputs.get("paged_attention_k_table"), node.inputs.get("paged_attention_v_table")
    if (kt is None) != (vt is None):
        fail(node, "paged attention needs both paged_attention_k_table and paged_attention_v_table")
    if kt is not None:
        if not node.attrs.get("use_padding_mask"):
            fail(node, "paged attention needs use_padding_mask=True with seq_len_kv")
        _, h_k, block_k, dk = k.dim
        _, h_v, block_v, d_v = v.dim
        for port, t in (("paged_attention_k_table", kt), ("paged_attention_v_table", vt)):
            if t.rank != 4 or t.dim[0] != b or t.dim[1] != 1 or t.dim[3] != 1 or t.data_type not in _INDEX_DTYPES:
                fail(node, f"{port} {t.describe()} must be int32 with dim ({b}, 1, max_pages_per_seq, 1)")
        s_kv = node.attrs.get("paged_attention_max_seq_len_kv") or kt.dim[2] * block_k
        if s_kv > kt.dim[2] * block_k or s_kv > vt.dim[2] * block_v:
            fail(node, f"paged_attention_max_seq_len_kv={s_kv} exceeds the pages the tables address")
    else:
        bk, h_k, s_kv, dk = k.dim
        bv, h_v, s_kv_v, d_v = v.dim
        if bk != b or bv != b:
            fail(node, f"batch differs: q {q.describe()}, k {k.describe()}, v {v.describe()}")
        if s_kv_v != s_kv:
            fail(node, f"k {k.describe()} and v {v.describe()} differ in sequence length")
    if dk != d_qk:
        fail(node, f"q {q.describe()} and k {k.describe()} differ in head dim")
    if h_q % h_k or h_q % h_v:
        fail(node, f"q heads ({h_q}) must be a multiple of k heads ({h_k}) and v heads ({h_v})")
    if not (q.data_type is k.data_type is v.data_type) or q.data_type not in _SDPA_IO_DTYPES:
        fail(node, f"q, k, v must share one dtype in {[d.name for d in _SDPA_IO_DTYPES]}: q {q.describe()}, k {k.describe()}, v {v.describe()}")
    return b, h_q, h_k, h_v, s_q, s_kv, d_v


def _check_sdpa_common(node: Node, b: int, h_q: int, s_q: int, s_kv: int) -> None:
    _check_mask_attrs(node)
    _check_aux(node, "seq_len_q", node.inputs.get("seq_len_q"), (b, 1, 1, 1), _INDEX_DTYPES)
    _check_aux(node, "seq_len_kv", node.inputs.get("seq_len_kv"), (b, 1, 1, 1), _INDEX_DTYPES)
    _check_aux(node, "sink_token", node.inputs.get("sink_token"), (1, h_q, 1, 1), (data_type.FLOAT,))
    scale = node.inputs.get("attn_scale")
    if scale is not None and (scale.numel() != 1 or scale.data_type not in (data_type.FLOAT, data_type.HALF, data_type.BFLOAT16)):
        fail(node, f"attn_scale {scale.describe()} must be a one-element float tensor")
    bias = node.inputs.get("bias")
    if bias is not None:
        full = (b, h_q, s_q, s_kv)
        if bias.rank != 4 or any(d not in (f, 1) for d, f in zip(bias.dim, full, strict=False)):
            fail(node, f"bias {bias.describe()} must broadcast to {full}")
    for port in ("q", "k", "v", "o", "dO", "stats", "dQ", "dK", "dV"):
        t = node.inputs.get(port) or node.outputs.get(port)
        if t is not None:
            _check_ragged(node, port, t, b)


def _infer_sdpa(graph, node: Node) -> None:
    b, h_q, h_k, h_v, s_q, s_kv, d_v = _sdpa_geometry(node)
    q = node.inputs["q"]
    _check_sdpa_common(node, b, h_q, s_q, s_kv)
    node.attrs["s_kv"] = s_kv
    o = node.outputs["o"]
    set_shape(node, "o", o, (b, h_q, s_q, d_v), stride_like((b, h_q, s_q, d_v), q.stride))
    default_dtype(graph, o, q.data_type)
    for port in ("stats", "score_max", "score_sum_exp"):  # per-row FLOAT statistics
        t = node.outputs.get(port)
        if t is not None:
            set_shape(node, port, t, (b, h_q, s_q, 1))
            if t.data_type is data_type.NOT_SET:
                t._infer("dtype", data_type.FLOAT)


def _infer_sdpa_backward(graph, node: Node) -> None:
    b, h_q, h_k, h_v, s_q, s_kv, d_v = _sdpa_geometry(node)
    _check_sdpa_common(node, b, h_q, s_q, s_kv)
    node.attrs["s_kv"] = s_kv
    q, k, v, o, d_o, stats = (node.inputs[p] for p in ("q", "k", "v", "o", "dO", "stats"))
    for port, t in (("o", o), ("dO", d_o)):
        if t.dim != (b, h_q, s_q, d_v):
            fail(node, f"{port} {t.describe()} must have dim {(b, h_q, s_q, d_v)}")
    if stats.dim != (b, h_q, s_q, 1) or stats.data_type is not data_type.FLOAT:
        fail(node, f"stats {stats.describe()} must be FLOAT with dim {(b, h_q, s_q, 1)}")
    for port, src in (("dQ", q), ("dK", k), ("dV", v)):
        t = node.outputs[port]
        set_shape(node, port, t, src.dim, src.stride)
        default_dtype(graph, t, src.data_type)
    dbias = node.outputs.get("dBias")
    if dbias is not None:
        bias = node.inputs.get("bias")
        if bias is None or dbias.dim != bias.dim:
            fail(node, f"dBias {dbias.describe()} needs bias with the same dim")
    dsink = node.outputs.get("dSink_token")
    if dsink is not None:
        if node.inputs.get("sink_token") is None:
            fail(node, "dSink_token needs sink_token")
        _check_aux(node, "dSink_token", dsink, (1, h_q, 1, 1), (data_type.FLOAT,))


register_node_kind("matmul", _infer_matmul, "C = A @ B with batch broadcast")
register_node_kind("pointwise", _infer_pointwise, "elementwise op with broadcast")
register_node_kind("reduction", _infer_reduction, "reduce X to the dims of Y")
register_node_kind("sdpa", _infer_sdpa, "scaled dot-product attention forward")
register_node_kind("sdpa_backward", _infer_sdpa_backward, "scaled dot-product attention backward")

__all__ = [
    "Node",
    "NodeKind",
    "register_node_kind",
    "register_graph_method",
    "node_kind",
    "node_kinds",
    "diagonal_alignment",
]
