"""Kimi Delta Attention backward: the APIBase adapter :class:`KimiDeltaAttentionBwdSm90` (not exported yet: GPU validation pending).

Gradients of ``o`` (and of the final state) of :class:`cudnn.linear_attention.kda.api.KimiDeltaAttentionFwdSm90` with
respect to q, k, v, g (per key channel), beta and the initial state, by the chunked backward (chunk 64) in three launches
on one stream (``bwd_states_kernel.py``: pass 1 chunk states, ``Tm`` and ``P``, pass 2 state gradients;
``chunk_bwd_kernel.py``: pass 3 intra-chunk gradients; the math is
``shared/cudnn_testing/reference_linear_attention.py::kimi_delta_attention_chunked_bwd_ref``).

``KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, *, scale=None, use_qk_l2norm_in_kernel=False,
initial_state=None, dinitial_state=None, dfinal_state=None, cu_seqlens=None)``:

- inputs as the forward (q, k [T, Hk, K]; v, do [T, H, V]; bf16, unit channel stride, token / head strides multiples
  of 8 elements, 16-byte aligned; g [T, H, K] and beta [T, H] contiguous fp32 or bf16; ``cu_seqlens`` int32 [N + 1]; a
  dense [B, L, H, D] batch is the equal-length case); ``dfinal_state`` fp32 [N, H, V, K] (None: zero);
- outputs: dq, dk, dv bf16 of q's / v's shape (unit channel stride, 8-aligned token / head strides), dg fp32 of g's
  shape and dbeta fp32 of beta's shape, contiguous; ``dinitial_state`` fp32 [N, H, V, K] contiguous (required exactly
  when ``initial_state`` is given);
- this first version declines (NotImplementedError, Rule 2) ``use_qk_l2norm_in_kernel=True`` and GVA (Hk != H);
- workspace (recipe R2, from the caller): ``workspace_bytes(T, N, H, D)`` bytes holding the bf16 chunk states and
  state gradients [N + T // 64 + 1, H, V, K], the bf16 new values and their gradients [T, H, V] and the bf16 ``Tm`` and
  ``P`` [N + T // 64 + 1, H, 64, 64] of every chunk; ``scratch_workspace_bytes()`` is that for the plan's own T and N.

Plan-time (compile key ``bwd_states_kernel.KdaBwdKey``, Rule 4): K, g / beta dtypes, varlen, initial-state and
final-state-gradient flags. Runtime: T, N, B, L, H, Hk, strides, scale, the chunk-group count of pass 3 (from T, N, H on
the host). ``execute`` validates metadata, carves the workspace and launches; it never converts, allocates,
synchronizes or reads device memory (Rules 1-3, 8). Imports neither torch nor cutlass at import time.

Contract (Rule 3, unchecked on device): the forward's (``cu_seqlens`` well formed; any 8 consecutive per-channel log
decays sum to more than -80).
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc
from cudnn.datatypes import data_type
from cudnn.dsl_gate import require_cutedsl

from .._host.launch import CUTLASS_NAMES as _CNAME
from .._host.launch import fake_gmem_ptr as _fake_ptr
from .._host.launch import gmem_ptr as _ptr
from .._host.launch import launch_stream as _stream
from .._host.launch import torch_dtype as _torch_dtype
from .._host.plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
FAMILY = "linear_attention.kda_bwd"
CHUNK = 64
_VEC = 8
_TARGET_CTAS = 4 * 132  # pass 3 grid target: four waves of one CTA per SM (222 KiB of shared memory each)


def _align(n: int) -> int:
    return (int(n) + 127) // 128 * 128


def workspace_bytes(T: int, N: int, H: int, D: int) -> int:
    """Workspace of one backward: two bf16 [N + T // 64 + 1, H, D, D] chunk-state arrays, two bf16 [T, H, D] and two
    bf16 [N + T // 64 + 1, H, 64, 64] (Tm, P)."""
    slots = N + T // CHUNK + 1
    return 2 * _align(slots * H * D * D * 2) + 2 * _align(max(T, 1) * H * D * 2) + 2 * _align(slots * H * CHUNK * CHUNK * 2)


def chunk_groups(T: int, N: int, H: int) -> int:
    """Pass 3's grid z: chunk groups per (sequence, head), from host-known extents only."""
    most = max(1, -(-T // CHUNK))
    return max(1, min(most, -(-_TARGET_CTAS // max(1, N * H))))


def _strides(t: Any, rank: int) -> tuple[int, int]:
    """(token, head) strides of a torch [T, H, D] / [B, L, H, D] tensor walked as [B * L, H, D]."""
    st, sh = int(t.stride(-3)), int(t.stride(-2))
    if rank == 4 and t.shape[0] > 1:
        if t.shape[1] == 1:
            st = int(t.stride(0))
        elif t.stride(0) != t.shape[1] * t.stride(1):
            raise ValueError(f"batch stride {t.stride(0)} != L * token stride; the kernels walk [B * L, H, D]")
    return st, sh


class KimiDeltaAttentionBwdSm90(APIBase):
    """Chunked Kimi Delta Attention backward on sm_90a (three launches). Tensors may be torch tensors or TensorDescs."""

    def __init__(
        self,
        q,
        k,
        v,
        g,
        beta,
        do,
        dq,
        dk,
        dv,
        dg,
        dbeta,
        *,
        scale=None,
        use_qk_l2norm_in_kernel=False,
        initial_state=None,
        dinitial_state=None,
        dfinal_state=None,
        cu_seqlens=None,
    ):
        super().__init__()
        set_descs(
            self,
            q=q,
            k=k,
            v=v,
            g=g,
            beta=beta,
            do=do,
            dq=dq,
            dk=dk,
            dv=dv,
            dg=dg,
            dbeta=dbeta,
            initial_state=initial_state,
            dinitial_state=dinitial_state,
            dfinal_state=dfinal_state,
            cu_seqlens=cu_seqlens,
        )
        self.scale = scale
        self.l2norm = bool(use_qk_l2norm_in_kernel)

    # -- plan ---------------------------------------------------------------------------------------
    def check_support(self) -> bool:
        what = "kimi_delta_attention backward"
        require_cutedsl(f"cudnn.linear_attention.{what}", CUTEDSL_FLOOR)
        from .api import KimiDeltaAttentionFwdSm90

        # The forward's own metadata checks for the inputs (do stands where o does; dfinal_state where final_state does).
        fwd = KimiDeltaAttentionFwdSm90(
            self.q,
            self.k,
            self.v,
            self.g,
            self.beta,
            self.do,
            scale=self.scale,
            use_qk_l2norm_in_kernel=self.l2norm,
            initial_state=self.initial_state,
            final_state=self.dfinal_state,
            cu_seqlens=self.cu_seqlens,
        )
        fwd.check_support()
        self.scale = fwd.scale
        q, v, do = self.q, self.v, self.do
        self._decline_if(self.l2norm, f"{what}: use_qk_l2norm_in_kernel=True is not implemented in this version (normalise q, k outside)")
        self._decline_if(q.shape[-2] != v.shape[-2], f"{what}: GVA (q/k heads {q.shape[-2]} != v heads {v.shape[-2]}) is not implemented in this version")
        for t in (do,):
            st, sh = _walk(t)
            self._decline_if(st % _VEC or sh % _VEC, f"{what}: {t.describe()} token / head strides must be multiples of {_VEC} elements (16-byte loads)")
        for grad, like in ((self.dq, q), (self.dk, self.k), (self.dv, v)):
            self._value_error_if(grad is None, f"{what}: dq, dk, dv are required outputs")
            self._check_dtype(grad, (data_type.BFLOAT16,), what)
            self._value_error_if(grad.shape != like.shape, f"{what}: {grad.describe()} must have the shape of {like.describe()}")
            self._decline_if(grad.shape[-1] > 1 and grad.stride[-1] != 1, f"{what}: {grad.describe()} needs unit channel stride; declined, not copied (Rule 2)")
        for t in (do, self.dq, self.dk, self.dv):
            self._decline_if(
                t.rank == 4 and t.shape[0] > 1 and t.shape[1] > 1 and t.stride[0] != t.shape[1] * t.stride[1],
                f"{what}: {t.describe()} batch stride != L * token stride; the kernels walk [B * L, H, D] tokens, declined (Rule 2)",
            )
        for grad, like in ((self.dg, self.g), (self.dbeta, self.beta)):
            self._value_error_if(grad is None, f"{what}: dg and dbeta are required outputs")
            self._check_dtype(grad, (data_type.FLOAT,), what)
            self._value_error_if(grad.shape != like.shape, f"{what}: {grad.describe()} must have the shape of {like.describe()}")
            self._decline_if(
                grad.stride != TensorDesc.contiguous(grad.shape, grad.dtype).stride, f"{what}: {grad.describe()} must be contiguous; declined, not copied"
            )
        self._value_error_if(
            (self.initial_state is None) != (self.dinitial_state is None), f"{what}: dinitial_state is required exactly when initial_state is given"
        )
        if self.dinitial_state is not None:
            self._check_dtype(self.dinitial_state, (data_type.FLOAT,), what)
            self._check_shape(self.dinitial_state, self.initial_state.shape, what)
            self._decline_if(
                self.dinitial_state.stride != TensorDesc.contiguous(self.dinitial_state.shape, self.dinitial_state.dtype).stride,
                f"{what}: {self.dinitial_state.describe()} must be contiguous [N, H, V, K]",
            )
        self._value_error_if(not math.isfinite(float(self.scale)), f"{what}: scale={self.scale!r} is not finite")
        self._is_supported = True
        return True

    def _plan_tokens(self) -> tuple[int, int]:
        q = self.q
        T = q.shape[0] if q.rank == 3 else q.shape[0] * q.shape[1]
        if self.cu_seqlens is not None:
            return T, self.cu_seqlens.shape[0] - 1
        return T, (q.shape[0] if q.rank == 4 else 1)

    def scratch_workspace_bytes(self) -> int:
        """Workspace bytes for the plan's own token total and sequence count (``workspace_bytes(T, N, H, D)``)."""
        self._ensure_support_checked()
        T, N = self._plan_tokens()
        return workspace_bytes(T, N, self.v.shape[-2], self.q.shape[-1])

    def compile_key(self):
        from .bwd_states_kernel import KdaBwdKey

        return KdaBwdKey(
            head_dim=self.q.shape[-1],
            g_dtype=_CNAME[self.g.dtype],
            beta_dtype=_CNAME[self.beta.dtype],
            varlen=self.cu_seqlens is not None,
            has_initial=self.initial_state is not None,
            has_dfinal=self.dfinal_state is not None,
            l2norm=self.l2norm,
            gva=self.q.shape[-2] != self.v.shape[-2],
        )

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()
        from cudnn.kernel_cache import kernel_cache

        self._compiled_kernel = tuple(kernel_cache.get_or_compile((part, key), build_kernel(part, key), family=FAMILY) for part in _parts(key))

    # -- run ----------------------------------------------------------------------------------------
    def _check_runtime(self, t: Any, plan: TensorDesc, what: str, free: int) -> None:
        if t is None:
            raise ValueError(f"{what}: {plan.name} was declared at plan time but execute() received None")
        shape = tuple(t.shape)
        if t.dtype != _torch_dtype(plan.dtype) or len(shape) != plan.rank or shape[free:] != plan.shape[free:]:
            raise ValueError(f"{what}: got {TensorDesc.like(t, plan.name).describe()}, but the plan was built for {plan.describe()}")

    def execute(
        self,
        q,
        k,
        v,
        g,
        beta,
        do,
        dq,
        dk,
        dv,
        dg,
        dbeta,
        initial_state=None,
        dinitial_state=None,
        dfinal_state=None,
        cu_seqlens=None,
        *,
        workspace=None,
        current_stream=None,
    ):
        """Three launches on ``current_stream``; returns ``(dq, dk, dv, dg, dbeta, dinitial_state)``."""
        what = "KimiDeltaAttentionBwdSm90.execute"
        self._ensure_support_checked()
        check_declared(what, self, cu_seqlens=cu_seqlens, initial_state=initial_state, dinitial_state=dinitial_state, dfinal_state=dfinal_state)
        rank = self.q.rank
        free = 1 if rank == 3 else 2
        pairs = ((q, self.q), (k, self.k), (v, self.v), (do, self.do), (dq, self.dq), (dk, self.dk), (dv, self.dv), (g, self.g), (beta, self.beta))
        for t, plan in pairs + ((dg, self.dg), (dbeta, self.dbeta)):
            self._check_runtime(t, plan, what, free)
        lead = tuple(q.shape[: rank - 2])
        for t, name in ((k, "k"), (v, "v"), (do, "do"), (dq, "dq"), (dk, "dk"), (dv, "dv"), (g, "g"), (beta, "beta"), (dg, "dg"), (dbeta, "dbeta")):
            if tuple(t.shape[: rank - 2]) != lead:
                raise ValueError(f"{what}: {name} token dims {tuple(t.shape[: rank - 2])} differ from q's {lead}")
        strides = {}
        for t, name in ((q, "q"), (k, "k"), (v, "v"), (do, "do"), (dq, "dq"), (dk, "dk"), (dv, "dv")):
            if t.stride(-1) != 1 and t.shape[-1] > 1:
                raise ValueError(f"{what}: {name} needs unit channel stride, got strides {tuple(t.stride())}")
            st, sh = _strides(t, rank)
            if name in ("q", "k", "v", "do") and (st % _VEC or sh % _VEC or t.data_ptr() % 16):
                raise ValueError(f"{what}: {name} needs 16-byte aligned rows (strides {tuple(t.stride())}, address 0x{t.data_ptr():x})")
            strides[name] = (st, sh)
        for t, name in ((g, "g"), (beta, "beta"), (dg, "dg"), (dbeta, "dbeta")):
            if not t.is_contiguous():
                raise ValueError(f"{what}: {name} must be contiguous, got strides {tuple(t.stride())}")
        if self.cu_seqlens is not None:
            self._check_runtime(cu_seqlens, self.cu_seqlens, what, 1)
            n_seqs, seq_len = int(cu_seqlens.shape[0]) - 1, 0
        elif rank == 4:
            n_seqs, seq_len = int(q.shape[0]), int(q.shape[1])
        else:
            n_seqs, seq_len = 1, int(q.shape[0])
        if n_seqs < 1:
            raise ValueError(f"{what}: no sequences")
        for t, plan in ((initial_state, self.initial_state), (dinitial_state, self.dinitial_state), (dfinal_state, self.dfinal_state)):
            if t is not None:
                self._check_runtime(t, plan, what, 1)
                if t.shape[0] != n_seqs or not t.is_contiguous():
                    raise ValueError(f"{what}: {plan.name} {tuple(t.shape)} must be a contiguous [N={n_seqs}, H, V, K]")
        if self._compiled_kernel is None:
            self.compile()
        T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
        H, D, Hk = int(v.shape[-2]), int(q.shape[-1]), int(q.shape[-2])
        slots = n_seqs + T // CHUNK + 1
        from cudnn.workspace import Workspace

        ws = Workspace.over(workspace, workspace_bytes(T, n_seqs, H, D), "KimiDeltaAttentionBwdSm90", device=q.device)
        ws_h = ws.take(slots * H * D * D, "bfloat16")
        ws_dh = ws.take(slots * H * D * D, "bfloat16")
        ws_vn = ws.take(max(T, 1) * H * D, "bfloat16")
        ws_dvn = ws.take(max(T, 1) * H * D, "bfloat16")
        ws_tm = ws.take(slots * H * CHUNK * CHUNK, "bfloat16")
        ws_p = ws.take(slots * H * CHUNK * CHUNK, "bfloat16")
        stream = _stream(current_stream, q.device)
        bf, f32, i32 = data_type.BFLOAT16, data_type.FLOAT, data_type.INT32
        cu = _ptr(cu_seqlens, i32, 4)
        gp, bp = _ptr(g, self.g.dtype, 2), _ptr(beta, self.beta.dtype, 2)
        tm, p = _ptr(ws_tm, bf, 16), _ptr(ws_p, bf, 16)
        states, dstates, grads = self._compiled_kernel
        sc = float(self.scale)
        states(
            _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), gp, bp, cu, _ptr(initial_state, f32, 4), _ptr(ws_h, bf, 16), _ptr(ws_vn, bf, 16), tm, p,
            T, n_seqs, seq_len, H, Hk, slots, sc, strides["q"], strides["k"], strides["v"], stream,
        )  # fmt: skip
        dstates(
            _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(do, bf, 16), gp, bp, cu, _ptr(dfinal_state, f32, 4), _ptr(dinitial_state, f32, 4),
            _ptr(ws_dh, bf, 16), _ptr(ws_dvn, bf, 16), tm, p, T, n_seqs, seq_len, H, Hk, slots, sc, strides["q"], strides["k"], strides["do"], stream,
        )  # fmt: skip
        grads(
            _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), _ptr(do, bf, 16), gp, bp, cu,
            _ptr(ws_h, bf, 16), _ptr(ws_dh, bf, 16), _ptr(ws_vn, bf, 16), _ptr(ws_dvn, bf, 16), tm,
            _ptr(dq, bf, 2), _ptr(dk, bf, 2), _ptr(dv, bf, 2), _ptr(dg, f32, 4), _ptr(dbeta, f32, 4),
            T, n_seqs, seq_len, H, Hk, slots, chunk_groups(T, n_seqs, H), sc,
            strides["q"], strides["k"], strides["v"], strides["do"], strides["dq"], strides["dk"], strides["dv"], stream,
        )  # fmt: skip
        return dq, dk, dv, dg, dbeta, dinitial_state


def _walk(desc: TensorDesc) -> tuple[int, int]:
    """(token, head) strides of a [T, H, D] / [B, L, H, D] descriptor walked as [B * L, H, D]."""
    st, sh = desc.stride[-3], desc.stride[-2]
    if desc.rank == 4 and desc.shape[1] == 1 and desc.shape[0] > 1:
        st = desc.stride[0]
    return st, sh


def _parts(key) -> tuple[str, ...]:
    """The launches of a plan: three passes."""
    return ("states", "dstates", "grads")


def build_kernel(part: str, key):
    """The ``cute.compile`` of one backward pass from fake pointers and runtime-extent placeholders (Rule 4)."""

    def build():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Float32, Int32, Int64

        bf = lambda: _fake_ptr("BFloat16", 16)  # noqa: E731
        cu = _fake_ptr("Int32", 4) if key.varlen else None
        gp, bp = _fake_ptr(key.g_dtype, 2), _fake_ptr(key.beta_dtype, 2)
        st = (Int64(8), Int64(8))
        if part == "states":
            from .bwd_states_kernel import KdaBwdStates

            h0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(
                KdaBwdStates(key), bf(), bf(), bf(), gp, bp, cu, h0, bf(), bf(), bf(), bf(), *[Int32(8)] * 6, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        if part == "dstates":
            from .bwd_states_kernel import KdaBwdDStates

            dht = _fake_ptr("Float32", 4) if key.has_dfinal else None
            dh0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(
                KdaBwdDStates(key), bf(), bf(), bf(), gp, bp, cu, dht, dh0, bf(), bf(), bf(), bf(), *[Int32(8)] * 6, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        from .chunk_bwd_kernel import KdaBwdGrads

        outs = [_fake_ptr("BFloat16", 2)] * 3 + [_fake_ptr("Float32", 4)] * 2
        return cute.compile(
            KdaBwdGrads(key),
            bf(),
            bf(),
            bf(),
            bf(),
            gp,
            bp,
            cu,
            bf(),
            bf(),
            bf(),
            bf(),
            bf(),
            *outs,
            *[Int32(8)] * 7,
            Float32(1.0),
            *[st] * 7,
            cuda.CUstream(0),
        )

    return build
