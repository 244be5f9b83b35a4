"""Gated DeltaNet forward: the APIBase adapter :class:`GatedDeltaNetFwdSm90` and the public :func:`gated_delta_net`.

Semantics (state ``S`` [V, K] fp32 per sequence and head; ``a_t = exp(g_t)``, ``g`` the log decay)::

    S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale q_t)

as fla's ``chunk_gated_delta_rule`` (chunk 64), with q/k optionally L2-normalised in the kernel
(``x * rsqrt(sum x^2 + 1e-6)``) and GVA head sharing (q/k with ``Hk`` heads, v/g/beta/o with ``H = m Hk``;
value head ``h`` reads q/k head ``h // m``). Kernel: ``chunk_fwd_kernel.py`` (sm_90a, WGMMA).

Layouts (THD): q, k [T, Hk, K] / v, o [T, H, V] packed with ``cu_seqlens`` int32 [N + 1]; a dense batch
[B, L, H, D] is the equal-length case (``cu_seqlens`` None), and [1, T, H, D] with ``cu_seqlens`` is
packed THD as fla takes it. q/k/v/o bf16 with unit channel stride; q/k/v token and head strides multiples
of 8 elements and 16-byte aligned bases (16-byte loads; a column slice of a fused projection is read
natively); g, beta [T, H] (or [B, L, H]) contiguous, fp32 or bf16;
``initial_state`` / final state fp32 [N, H, V, K] contiguous (fla's ``h`` is [N, H, K, V]: its transpose).
K = V in {64, 128}.

Plan-time (the compile key, Rule 4): K, g / beta dtypes, L2-norm, varlen, initial / final state flags, and
the triangular-solve variant (``blocked_solve``, a tuning / test knob).
Runtime (kernel arguments): T, N, B, L, H, Hk, every stride and ``scale``; one compiled artifact serves every
batch. ``execute`` validates metadata and launches: it never converts, copies, allocates, synchronizes or
reads device memory (Rules 1-3), and launches on ``current_stream`` (torch's current stream when None).

Contract the kernel cannot check without a device read (Rule 3): ``cu_seqlens`` starts at 0, ends at T and
is non-decreasing; ``g`` is a log decay (g <= 0): every exponent the kernel forms (exp(G_i - G_j) for i >= j,
exp(G_i), exp(G_C - G_i) within a chunk) is then <= 1, so nothing overflows.

This module imports neither torch nor cutlass at import time; ``check_support`` is metadata-only.
Not yet exported from ``cudnn.linear_attention`` (pending its first GPU validation): import
``cudnn.linear_attention.gdn.api`` directly.
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc, TupleDict
from cudnn.datatypes import data_type
from cudnn.dsl_gate import require_cutedsl

from .._host.launch import CUTLASS_NAMES as _CNAME
from .._host.launch import fake_gmem_ptr as _fake_ptr
from .._host.launch import gmem_ptr as _ptr
from .._host.launch import launch_stream as _stream
from .._host.launch import torch_dtype as _torch_dtype
from .._host.plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
FAMILY = "linear_attention.gdn"
HEAD_DIMS = (64, 128)
_GATE_DTYPES = (data_type.FLOAT, data_type.BFLOAT16)
_VEC = 8  # bf16 elements per 16-byte load of q / k / v


def _token_dims(rank: int) -> int:
    """Leading dims that are runtime token extents: [T, ...] -> 1, [B, L, ...] -> 2."""
    return 1 if rank in (2, 3) else 2


def _walk_strides(desc: TensorDesc, what: str) -> tuple[int, int]:
    """(token stride, head stride) of a [T, H, D] / [B, L, H, D] tensor walked as [B * L, H, D]; declines otherwise."""
    if desc.shape[-1] > 1 and desc.stride[-1] != 1:
        raise NotImplementedError(f"{what}: {desc.describe()} needs unit channel stride; other layouts are declined, not copied (Rule 2)")
    st, sh = desc.stride[-3], desc.stride[-2]
    if desc.rank == 4:
        b, ln = desc.shape[0], desc.shape[1]
        if b > 1 and ln > 1 and desc.stride[0] != ln * st:
            raise NotImplementedError(
                f"{what}: {desc.describe()} batch stride {desc.stride[0]} != L * token stride ({ln} * {st}); the kernel walks [B * L, H, D] tokens, declined (Rule 2)"
            )
        if ln == 1 and b > 1:
            st = desc.stride[0]
    return st, sh


def _gate_ok(desc: TensorDesc) -> bool:
    """g / beta [T, H] or [B, L, H] walked as a contiguous [B * L, H]."""
    h = desc.shape[-1]
    expected = TensorDesc.contiguous(desc.shape, desc.dtype).stride
    return h == 0 or all(s == e or n == 1 for s, e, n in zip(desc.stride, expected, desc.shape, strict=True))


class GatedDeltaNetFwdSm90(APIBase):
    """Chunked Gated DeltaNet forward on sm_90a. Tensors may be torch tensors or TensorDescs.

    ``GatedDeltaNetFwdSm90(q, k, v, g, beta, o, scale=None, use_qk_l2norm_in_kernel=False,
    initial_state=None, final_state=None, cu_seqlens=None)``; ``execute`` takes the same tensors (token
    extents, sequence count and, for a dense batch, B and L may differ from the plan's).
    """

    def __init__(self, q, k, v, g, beta, o, *, scale=None, use_qk_l2norm_in_kernel=False, initial_state=None, final_state=None, cu_seqlens=None):
        super().__init__()
        set_descs(self, q=q, k=k, v=v, g=g, beta=beta, o=o, initial_state=initial_state, final_state=final_state, cu_seqlens=cu_seqlens)
        self.scale = scale
        self.l2norm = bool(use_qk_l2norm_in_kernel)
        #: Tuning / test knob (part of the compile key): the blocked 16 x 16 triangular solve (True) or the
        #: plain one-thread-per-column solve (False). Set before compile().
        self.blocked_solve = True

    # -- plan ---------------------------------------------------------------------------------------
    def check_support(self) -> bool:
        what = "gated_delta_net"
        require_cutedsl(f"cudnn.linear_attention.{what}", CUTEDSL_FLOOR)
        q, k, v, o, g, beta = self.q, self.k, self.v, self.o, self.g, self.beta
        for t in (q, k, v, o):
            self._value_error_if(t.rank not in (3, 4), f"{what}: {t.describe()} must be [T, H, D] (THD) or [B, L, H, D]")
            self._check_dtype(t, (data_type.BFLOAT16,), what)
        rank = q.rank
        for t in (k, v, o):
            self._value_error_if(t.rank != rank, f"{what}: {t.describe()} must have the rank of {q.describe()}")
        lead = q.shape[: rank - 2]
        for t in (k, v, o):
            self._value_error_if(t.shape[: rank - 2] != lead, f"{what}: {t.describe()} token dims differ from {q.describe()}")
        self._value_error_if(k.shape != q.shape, f"{what}: {k.describe()} must have the shape of {q.describe()}")
        self._value_error_if(o.shape != v.shape, f"{what}: {o.describe()} must have the shape of {v.describe()}")
        hk, kdim = q.shape[-2], q.shape[-1]
        h, vdim = v.shape[-2], v.shape[-1]
        self._decline_if(kdim != vdim or kdim not in HEAD_DIMS, f"{what}: head dims K={kdim}, V={vdim}; accepted K = V in {HEAD_DIMS}")
        self._value_error_if(hk < 1 or h % hk != 0, f"{what}: v heads {h} must be a multiple of q/k heads {hk} (GVA)")
        for t in (q, k, v):  # read with 16-byte vector loads
            st, sh = _walk_strides(t, what)
            self._decline_if(
                st % _VEC or sh % _VEC,
                f"{what}: {t.describe()} token / head strides ({st}, {sh}) must be multiples of {_VEC} elements (16-byte loads); declined, not copied (Rule 2)",
            )
        _walk_strides(o, what)
        for t in (g, beta):
            self._value_error_if(t.shape != (*lead, h), f"{what}: {t.describe()} must have shape {(*lead, h)} (one value per token and v head)")
            self._check_dtype(t, _GATE_DTYPES, what)
            self._decline_if(not _gate_ok(t), f"{what}: {t.describe()} must be contiguous; declined, not copied (Rule 2)")
        varlen = self.cu_seqlens is not None
        if varlen:
            self._check_rank(self.cu_seqlens, 1, what)
            self._decline_if(self.cu_seqlens.dtype != data_type.INT32, f"{what}: {self.cu_seqlens.describe()} must be int32 (int64 is declined, not converted)")
            self._value_error_if(self.cu_seqlens.shape[0] < 2, f"{what}: {self.cu_seqlens.describe()} needs N + 1 >= 2 entries")
            self._decline_if(self.cu_seqlens.stride != (1,), f"{what}: {self.cu_seqlens.describe()} must be contiguous")
            self._value_error_if(rank == 4 and q.shape[0] != 1, f"{what}: with cu_seqlens, {q.describe()} must be [T, H, D] or [1, T, H, D]")
            n = self.cu_seqlens.shape[0] - 1
        else:
            n = q.shape[0] if rank == 4 else 1
            self._value_error_if(n < 1, f"{what}: {q.describe()} has no sequences")
        self._n_seqs = n
        for st in (self.initial_state, self.final_state):
            if st is None:
                continue
            self._check_dtype(st, (data_type.FLOAT,), what)
            self._check_shape(st, (n, h, vdim, kdim), what)
            self._decline_if(
                st.stride != TensorDesc.contiguous(st.shape, st.dtype).stride, f"{what}: {st.describe()} must be contiguous [N, H, V, K]; declined, not copied"
            )
        if self.scale is None:
            self.scale = 1.0 / math.sqrt(kdim)
        self._value_error_if(not math.isfinite(float(self.scale)), f"{what}: scale={self.scale!r} is not finite")
        self._is_supported = True
        return True

    def compile_key(self):
        from .chunk_fwd_kernel import GdnFwdKey

        return GdnFwdKey(
            head_dim=self.q.shape[-1],
            g_dtype=_CNAME[self.g.dtype],
            beta_dtype=_CNAME[self.beta.dtype],
            l2norm=self.l2norm,
            varlen=self.cu_seqlens is not None,
            has_initial=self.initial_state is not None,
            has_final=self.final_state is not None,
            blocked_solve=bool(self.blocked_solve),
        )

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()

        def build():
            import cuda.bindings.driver as cuda
            import cutlass.cute as cute
            from cutlass import Float32, Int32, Int64

            from .chunk_fwd_kernel import GatedDeltaNetChunkFwd

            ptrs = [
                _fake_ptr("BFloat16", 16),
                _fake_ptr("BFloat16", 16),
                _fake_ptr("BFloat16", 16),
                _fake_ptr(key.g_dtype, 2),
                _fake_ptr(key.beta_dtype, 2),
                _fake_ptr("BFloat16", 2),
                _fake_ptr("Int32", 4) if key.varlen else None,
                _fake_ptr("Float32", 4) if key.has_initial else None,
                _fake_ptr("Float32", 4) if key.has_final else None,
            ]
            ints = [Int32(8)] * 5
            strides = [(Int64(8), Int64(8))] * 4
            return cute.compile(GatedDeltaNetChunkFwd(key), *ptrs, *ints, Float32(1.0), *strides, cuda.CUstream(0))

        from cudnn.kernel_cache import kernel_cache

        self._compiled_kernel = kernel_cache.get_or_compile(key, build, family=FAMILY)

    # -- run ----------------------------------------------------------------------------------------
    def _check_runtime(self, t: Any, plan: TensorDesc, what: str, free: int) -> None:
        """Metadata-only execute check of ``t`` against its plan descriptor; ``free`` leading dims may differ."""
        if t is None:
            raise ValueError(f"{what}: {plan.name} was declared at plan time but execute() received None")
        shape = tuple(t.shape)
        if t.dtype != _torch_dtype(plan.dtype) or len(shape) != plan.rank or shape[free:] != plan.shape[free:]:
            raise ValueError(f"{what}: got {TensorDesc.like(t, plan.name).describe()}, but the plan was built for {plan.describe()}")
        if plan.device is not None and str(t.device) != plan.device:
            raise ValueError(f"{what}: {plan.name} is on {t.device}, but the plan was built for {plan.device}")

    def execute(self, q, k, v, g, beta, o, initial_state=None, final_state=None, cu_seqlens=None, *, current_stream=None):
        """Launch on ``current_stream``; returns ``o``. THD token totals / sequence counts (and dense B, L) may differ from the plan."""
        what = "GatedDeltaNetFwdSm90.execute"
        self._ensure_support_checked()
        check_declared(what, self, cu_seqlens=cu_seqlens, initial_state=initial_state, final_state=final_state)
        rank = self.q.rank
        free = 1 if rank == 3 else 2
        if rank == 4 and self.cu_seqlens is not None and q.shape[0] != 1:
            raise ValueError(f"{what}: with cu_seqlens q must be [T, H, D] or [1, T, H, D], got {tuple(q.shape)}")
        for t, plan in ((q, self.q), (k, self.k), (v, self.v), (o, self.o), (g, self.g), (beta, self.beta)):
            self._check_runtime(t, plan, what, free)
        lead = tuple(q.shape[: rank - 2])
        for t, name in ((k, "k"), (v, "v"), (o, "o")):
            if tuple(t.shape[: rank - 2]) != lead:
                raise ValueError(f"{what}: {name} token dims {tuple(t.shape[: rank - 2])} differ from q's {lead}")
        if tuple(g.shape[:-1]) != lead or tuple(beta.shape[:-1]) != lead:
            raise ValueError(f"{what}: g {tuple(g.shape)} / beta {tuple(beta.shape)} token dims differ from q's {lead}")
        strides = []
        for t, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o")):
            if t.stride(-1) != 1 and t.shape[-1] > 1:
                raise ValueError(f"{what}: {name} needs unit channel stride, got strides {tuple(t.stride())}")
            st, sh = int(t.stride(-3)), int(t.stride(-2))
            if rank == 4 and t.shape[0] > 1:
                if t.shape[1] == 1:
                    st = int(t.stride(0))
                elif t.stride(0) != t.shape[1] * t.stride(1):
                    raise ValueError(f"{what}: {name} batch stride {t.stride(0)} != L * token stride; the kernel walks [B * L, H, D]")
            if name != "o" and (st % _VEC or sh % _VEC or t.data_ptr() % 16):
                raise ValueError(f"{what}: {name} needs 16-byte aligned rows (strides {tuple(t.stride())}, address 0x{t.data_ptr():x})")
            strides.append((st, sh))
        for t, name in ((g, "g"), (beta, "beta")):
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
            raise ValueError(f"{what}: no sequences (cu_seqlens needs N + 1 >= 2 entries, a dense batch B >= 1)")
        for t, plan in ((initial_state, self.initial_state), (final_state, self.final_state)):
            if t is not None:
                self._check_runtime(t, plan, what, 1)
                if t.shape[0] != n_seqs or not t.is_contiguous():
                    raise ValueError(f"{what}: {plan.name} {tuple(t.shape)} must be a contiguous [N={n_seqs}, H, V, K]")
        if self._compiled_kernel is None:
            self.compile()
        T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
        self._compiled_kernel(
            _ptr(q, data_type.BFLOAT16, 16),
            _ptr(k, data_type.BFLOAT16, 16),
            _ptr(v, data_type.BFLOAT16, 16),
            _ptr(g, self.g.dtype, 2),
            _ptr(beta, self.beta.dtype, 2),
            _ptr(o, data_type.BFLOAT16, 2),
            _ptr(cu_seqlens, data_type.INT32, 4),
            _ptr(initial_state, data_type.FLOAT, 4),
            _ptr(final_state, data_type.FLOAT, 4),
            T,
            n_seqs,
            seq_len,
            int(v.shape[-2]),
            int(q.shape[-2]),
            float(self.scale),
            *strides,
            _stream(current_stream, q.device),
        )
        return o


_PLANS: dict = {}


def _plan_for(q, k, v, g, beta, o, scale, l2norm, initial_state, final_state, cu_seqlens) -> GatedDeltaNetFwdSm90:
    """One adapter per metadata signature (token extents excluded): the wrapper's per-call cost is a dict lookup."""
    rank = q.dim()
    free = 1 if rank == 3 else 2

    def sig(t):
        return None if t is None else (tuple(t.shape[free:]), t.dtype, str(t.device))

    key = (rank, scale, l2norm, *(sig(t) for t in (q, k, v, g, beta, o, initial_state, final_state, cu_seqlens)))
    plan = _PLANS.get(key)
    if plan is None:
        plan = GatedDeltaNetFwdSm90(
            q, k, v, g, beta, o, scale=scale, use_qk_l2norm_in_kernel=l2norm, initial_state=initial_state, final_state=final_state, cu_seqlens=cu_seqlens
        )
        plan.compile()
        _PLANS[key] = plan
    return plan


def gated_delta_net(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    initial_state=None,
    output_final_state: bool = False,
    cu_seqlens=None,
    out=None,
):
    """Chunked Gated DeltaNet forward (fla ``chunk_gated_delta_rule`` semantics), sm_90a.

    ``q``, ``k`` [T, Hk, K] or [B, L, Hk, K]; ``v`` [.., H, V]; ``g`` (log decay), ``beta`` [.., H] fp32 or
    bf16; ``cu_seqlens`` int32 [N + 1] for packed varlen (then B must be 1); ``initial_state`` fp32
    [N, H, V, K]. Returns ``TupleDict(o=..., final_state=...)`` (unpacks as ``o, final_state``), with
    ``final_state`` fp32 [N, H, V, K] when ``output_final_state`` else None. ``out`` may supply ``o``.
    Forward only (no autograd yet). Launches on torch's current stream.
    """
    import torch

    from cudnn._torch_stream import stream_context

    device = q.device
    rank = q.dim()
    n = (int(cu_seqlens.shape[0]) - 1) if cu_seqlens is not None else (int(q.shape[0]) if rank == 4 else 1)
    h, vdim, kdim = int(v.shape[-2]), int(v.shape[-1]), int(q.shape[-1])
    stream = torch.cuda.current_stream(device)
    with stream_context(stream, device):
        o = torch.empty_like(v) if out is None else out
        final = torch.empty(n, h, vdim, kdim, dtype=torch.float32, device=device) if output_final_state else None
    plan = _plan_for(q, k, v, g, beta, o, scale, use_qk_l2norm_in_kernel, initial_state, final, cu_seqlens)
    plan.execute(q, k, v, g, beta, o, initial_state, final, cu_seqlens, current_stream=stream)
    return TupleDict(o=o, final_state=final)
