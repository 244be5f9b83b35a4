"""``gdn`` and ``kda`` builders of ``cudnn.pygraph`` (gated delta rule), with upstream's argument names. Pure Python.

Semantics (state ``S`` [V, K] per sequence and v head, log decays ``g``)::

    S_t = S_{t-1} Diag(exp(g_t)) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        O_t = S_t (scale q_t)

``gdn`` (Gated DeltaNet): one decay per token and v head, ``g [.., H]``; ``kda`` (Kimi Delta Attention): one
per key channel, ``g [.., H, K]``. As flash-linear-attention's ``chunk_gated_delta_rule`` / ``chunk_kda`` with a
precomputed log decay, and as upstream cudnn frontend's ``graph.gdn`` / ``graph.kda`` nodes.

Layout (THD): q, k ``[T, Hk, K]``, v ``[T, H, V]`` (``H`` a multiple of ``Hk``: v head ``h`` reads q/k head
``h // (H // Hk)``), g ``[T, H]`` (gdn) or ``[T, H, K]`` (kda), beta ``[T, H]``, ``cu_seqlens`` ``[N + 1]`` int32
(packed sequences; absent: one sequence of T tokens); a dense batch is ``[B, L, ...]`` with no ``cu_seqlens``
(``[1, T, ...]`` with ``cu_seqlens`` is packed). ``initial_state`` ``[N, H, V, K]``; outputs ``O`` ``[.., H, V]``
(dtype: the graph's io type once ``set_output(True)``) and, with ``output_final_state``, ``final_state``
``[N, H, V, K]`` FLOAT. ``scale`` defaults to ``1 / sqrt(K)``; ``use_qk_l2norm`` normalises q and k per token
and head (``x * rsqrt(sum x^2 + 1e-6)``) before anything else.

Upstream's builders return ``[O, final_state, state_checkpoints]``; so do these, with ``final_state`` None
unless ``output_final_state`` and ``state_checkpoints`` always None (``checkpoint_every_n_tokens`` must stay
unset: state checkpoints are not produced yet). Upstream's in-kernel gate / beta transforms (``a_log``,
``dt_bias``, ``use_beta_sigmoid``, ``safe_gate``, ``gate_lower_bound``, ``allow_neg_eigval``) are not accepted:
pass the log decay and beta themselves.

Node ports: inputs ``q, k, v, g, beta, cu_seqlens, initial_state``; outputs ``O, final_state``; attrs ``scale``
(as given), ``scale_value`` (resolved at validate), ``use_qk_l2norm``, ``output_final_state``, ``n_seqs``.
"""

from __future__ import annotations

import math

from ..datatypes import data_type
from .errors import GraphValidationError
from .nodes import Node, default_dtype, fail, register_node_kind, set_shape

NOT_SET = data_type.NOT_SET
_IO_DTYPES = (data_type.HALF, data_type.BFLOAT16, data_type.FLOAT)
_INDEX_DTYPES = (data_type.INT32, data_type.INT64)


def _names(dts) -> list[str]:
    return [d.name for d in dts]


def _infer_delta_rule(graph, node: Node) -> None:
    """Shape / dtype checks of a ``gdn`` or ``kda`` node and inference of ``O`` / ``final_state``."""
    ins = node.inputs
    q, k, v, g, beta = (ins[p] for p in ("q", "k", "v", "g", "beta"))
    cu, s0 = ins.get("cu_seqlens"), ins.get("initial_state")
    if q.rank not in (3, 4):
        fail(node, f"q {q.describe()} must be [T, Hk, K] (THD) or [B, L, Hk, K]")
    if k.dim != q.dim:
        fail(node, f"k {k.describe()} must have the dim of q {q.describe()}")
    if v.rank != q.rank or v.dim[:-2] != q.dim[:-2]:
        fail(node, f"v {v.describe()} must have q's token dims {q.dim[:-2]} ({q.describe()})")
    if not (q.data_type is k.data_type is v.data_type) or q.data_type not in _IO_DTYPES:
        fail(node, f"q, k, v must share one dtype in {_names(_IO_DTYPES)}: q {q.describe()}, k {k.describe()}, v {v.describe()}")
    lead = q.dim[:-2]
    hk, kdim = q.dim[-2:]
    h, vdim = v.dim[-2:]
    if hk < 1 or h % hk:
        fail(node, f"v heads ({h}, {v.describe()}) must be a multiple of q/k heads ({hk}, {q.describe()})")
    g_dim = (*lead, h) if node.kind == "gdn" else (*lead, h, kdim)
    what = "one log decay per token and v head" if node.kind == "gdn" else "one log decay per token, v head and key channel"
    for port, t, dim in (("g", g, g_dim), ("beta", beta, (*lead, h))):
        if t.dim != dim:
            fail(node, f"{port} {t.describe()} must have dim {dim}" + (f" ({what})" if port == "g" else " (one value per token and v head)"))
        if t.data_type not in _IO_DTYPES:
            fail(node, f"{port} {t.describe()} must have dtype in {_names(_IO_DTYPES)}")
    if cu is not None:
        if cu.rank != 1 or cu.dim[0] < 2 or cu.data_type not in _INDEX_DTYPES:
            fail(node, f"cu_seqlens {cu.describe()} must be [N + 1] (N >= 1) with dtype in {_names(_INDEX_DTYPES)}")
        if q.rank == 4 and lead[0] != 1:
            fail(node, f"with cu_seqlens (packed sequences) q {q.describe()} must be [T, Hk, K] or [1, T, Hk, K]")
        n = cu.dim[0] - 1
    else:
        n = lead[0] if q.rank == 4 else 1
    if s0 is not None:
        if s0.dim != (n, h, vdim, kdim):
            fail(node, f"initial_state {s0.describe()} must have dim {(n, h, vdim, kdim)} ([N, H, V, K])")
        if s0.data_type not in _IO_DTYPES:
            fail(node, f"initial_state {s0.describe()} must have dtype in {_names(_IO_DTYPES)}")
    scale = node.attrs.get("scale")
    node.attrs["scale_value"] = 1.0 / math.sqrt(kdim) if scale is None else float(scale)
    node.attrs["n_seqs"] = n
    o = node.outputs["O"]
    set_shape(node, "O", o, v.dim)
    default_dtype(graph, o, v.data_type)
    fs = node.outputs.get("final_state")
    if fs is not None:
        set_shape(node, "final_state", fs, (n, h, vdim, kdim))
        if fs.data_type is NOT_SET:
            fs._infer("dtype", data_type.FLOAT)


register_node_kind("gdn", _infer_delta_rule, "Gated DeltaNet forward (scalar decay per token and head)")
register_node_kind("kda", _infer_delta_rule, "Kimi Delta Attention forward (per-key-channel decay)")


def _flag(op: str, what: str, value) -> bool:
    if not isinstance(value, bool):
        raise GraphValidationError(f"{op}: {what} must be a bool, got {value!r}")
    return value


class LinearAttentionOps:
    """Mixin of ``cudnn.pygraph``: the gated-delta-rule builders (``add_node`` lives in the builder)."""

    def _delta_rule(
        self, kind, q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state, use_qk_l2norm, checkpoint_every_n_tokens, compute_data_type, name
    ):
        op = f"{kind} node {name!r}"
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(float(scale))):
            raise GraphValidationError(f"{op}: scale must be a finite float (or None for 1/sqrt(K)), got {scale!r}")
        if checkpoint_every_n_tokens:
            raise GraphValidationError(
                f"{op}: checkpoint_every_n_tokens={checkpoint_every_n_tokens!r}: state checkpoints are not produced by this graph API yet (leave it unset)"
            )
        attrs = {
            "scale": None if scale is None else float(scale),
            "output_final_state": _flag(op, "output_final_state", output_final_state),
            "use_qk_l2norm": _flag(op, "use_qk_l2norm", use_qk_l2norm),
        }
        inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": cu_seqlens, "initial_state": initial_state}
        outputs = ["O", "final_state"] if output_final_state else ["O"]
        node = self.add_node(kind, name, inputs, outputs=outputs, attrs=attrs, compute_data_type=compute_data_type)
        return [node.outputs["O"], node.outputs.get("final_state"), None]

    def gdn(
        self,
        q,
        k,
        v,
        g,
        beta,
        cu_seqlens=None,
        initial_state=None,
        scale=None,
        output_final_state=False,
        use_qk_l2norm=False,
        checkpoint_every_n_tokens=None,
        compute_data_type=NOT_SET,
        name="",
    ):
        """Gated DeltaNet forward (``g [.., H]``); returns ``[O, final_state, state_checkpoints]`` (see the module docstring)."""
        return self._delta_rule(
            "gdn", q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state, use_qk_l2norm, checkpoint_every_n_tokens, compute_data_type, name
        )

    def kda(
        self,
        q,
        k,
        v,
        g,
        beta,
        cu_seqlens=None,
        initial_state=None,
        scale=None,
        output_final_state=False,
        use_qk_l2norm=False,
        checkpoint_every_n_tokens=None,
        compute_data_type=NOT_SET,
        name="",
    ):
        """Kimi Delta Attention forward (``g [.., H, K]``); returns ``[O, final_state, state_checkpoints]`` (see the module docstring)."""
        return self._delta_rule(
            "kda", q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state, use_qk_l2norm, checkpoint_every_n_tokens, compute_data_type, name
        )
