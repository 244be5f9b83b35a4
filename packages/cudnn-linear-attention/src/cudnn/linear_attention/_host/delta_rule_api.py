"""The host side shared by the gated-delta-rule forward adapters (Gated DeltaNet, Kimi Delta Attention).

:class:`DeltaRuleFwdSm90` is the APIBase adapter both families subclass: plan-time validation
(``check_support``), the compile step over the family's kernel class, and the metadata-only ``execute``
(Rules 1-3) with the kernel's argument order. A subclass sets what differs:

- ``_public`` (the public callable's name, the prefix of ``check_support``'s messages), ``_family`` (the
  kernel-cache family);
- ``_gate_per_key``: ``g`` is [.., H] (one log decay per token and head: GDN) or [.., H, K] (one per key
  channel: KDA);
- ``compile_key()`` (the family's frozen key dataclass) and ``_kernel_class()`` (imports the kernel module:
  called only inside the build, so this module and the adapters import neither torch nor cutlass).

:func:`delta_rule_forward` (plan cache per metadata signature, outputs on torch's current stream, one launch)
and :func:`delta_rule_public` (the public wrapper's dispatch: the torch op, or the eager ``out=`` path) are the
families' shared module-level paths.
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc, TupleDict
from cudnn.datatypes import data_type
from cudnn.dsl_gate import require_cutedsl

from ..kda.chunk_parallel_state_kernel import STAGES as _STATE_STAGES
from .chunk_parallel import (
    _GDN_PREP_BASE,
    DEFAULT_SCHEDULE,
    SCHEDULES,
    compile_parallel,
    launch_parallel,
    parallel_extents,
    workspace_bytes,
    workspace_pointers,
)
from .launch import CUTLASS_NAMES as _CNAME
from .launch import fake_gmem_ptr as _fake_ptr
from .launch import gmem_ptr as _ptr
from .launch import launch_stream as _stream
from .launch import torch_dtype as _torch_dtype
from .plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
HEAD_DIMS = (64, 128)
GATE_DTYPES = (data_type.FLOAT, data_type.BFLOAT16)
VEC = 8  # bf16 elements per 16-byte load of q / k / v


def walk_strides(desc: TensorDesc, what: str) -> tuple[int, int]:
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


def gate_ok(desc: TensorDesc) -> bool:
    """g / beta ([T, H], [B, L, H], or with a trailing K) walked as a contiguous [B * L, H(, K)]."""
    h = desc.shape[-1]
    expected = TensorDesc.contiguous(desc.shape, desc.dtype).stride
    return h == 0 or all(s == e or n == 1 for s, e, n in zip(desc.stride, expected, desc.shape, strict=True))


class DeltaRuleFwdSm90(APIBase):
    """Chunked gated-delta-rule forward on sm_90a (base of the GDN and KDA adapters). Tensors may be torch
    tensors or TensorDescs.

    ``Adapter(q, k, v, g, beta, o, scale=None, use_qk_l2norm_in_kernel=False, initial_state=None,
    final_state=None, cu_seqlens=None, schedule="serial")``; ``execute`` takes the same tensors (token extents,
    sequence count and, for a dense batch, B and L may differ from the plan's).

    ``schedule``: ``"serial"`` (default) is one kernel, one CTA per (sequence, head, 64-wide V slice) walking the
    chunks in order. ``"parallel"`` (opt-in, families with ``_parallel_schedule``) is three kernels
    (``_host/chunk_parallel.py``): the state-independent chunk work for all chunks at once, a short state pass, the
    outputs for all chunks at once; it needs ``scratch_workspace_bytes(T, N)`` of caller workspace, passed to
    ``execute(..., workspace=buffer)`` (R2).
    """

    _public: str = ""
    _family: str = ""
    _gate_per_key: bool = False
    _parallel_schedule: bool = False  # the family has the chunk-parallel kernels (``_parallel_kernel_classes``)
    _prep_prefetch: bool = False  # its parallel prep kernel has the ``prefetch`` key option (parallel_prefetch)
    _prep_two_per_sm: bool = False  # its parallel prep kernel has the ``two_per_sm`` key option (parallel_prep_two_per_sm)

    def __init__(
        self, q, k, v, g, beta, o, *, scale=None, use_qk_l2norm_in_kernel=False, initial_state=None, final_state=None, cu_seqlens=None, schedule="serial"
    ):
        super().__init__()
        set_descs(self, q=q, k=k, v=v, g=g, beta=beta, o=o, initial_state=initial_state, final_state=final_state, cu_seqlens=cu_seqlens)
        self.scale = scale
        self.l2norm = bool(use_qk_l2norm_in_kernel)
        self.schedule = schedule
        self._compiled_parallel = None
        self._parallel_g_align = 2
        #: Tuning / A-B knob of the parallel schedule (set before compile(); part of the prep kernel's compile key):
        #: the prep kernel issues all of a chunk's global reads at once (GDN only: ``GdnParallelPrepKey.prefetch``, an
        #: option of the one-warpgroup prep kernel, so setting it selects that kernel instead of the default
        #: restructured one; KDA's prep kernel has no such option, a ValueError at compile). Default False. Ignored by
        #: the serial schedule.
        self.parallel_prefetch = False
        #: Tuning / A-B knob of the parallel schedule's state pass (set before compile(); part of its compile key): the
        #: shared-memory stages of the per-chunk operands (TMA-fed, one mbarrier per stage), 4 (default since session 6:
        #: fetch three chunks ahead), 3 or 2. Every value builds its own kernel with exactly that many stages (2 is not
        #: the session-5 cp.async kernel: that is the ``state-base`` variant of ``set_parallel_options``); bitwise the
        #: same outputs. ValueError at compile for any other value.
        self.parallel_state_stages = _STATE_STAGES
        #: Tuning / A-B knob (GDN only: ``GdnParallelPrepKey.two_per_sm``, an option of the one-warpgroup prep kernel,
        #: which setting it selects, as ``parallel_prefetch``): that kernel runs two CTAs per SM (KDA's prep kernel always
        #: does; setting it there is a ValueError at compile).
        self.parallel_prep_two_per_sm = False
        #: Removed knob kept as an attribute so that setting it is caught: no family's prep kernel has a ``fast_exp``
        #: option any more (KDA's prep always uses ``ex2.approx`` decays); True is a ValueError at compile.
        self.parallel_fast_exp = False

    # -- family hooks -------------------------------------------------------------------------------
    def compile_key(self):  # pragma: no cover - every family overrides
        raise NotImplementedError

    @classmethod
    def _kernel_class(cls):  # pragma: no cover - every family overrides
        raise NotImplementedError

    @classmethod
    def _parallel_kernel_classes(cls):  # pragma: no cover - families with _parallel_schedule override
        """((PrepKey, Prep), (StateKey, State), (OutKey, Out)) of the chunk-parallel schedule."""
        raise NotImplementedError

    def _prep_options(self) -> dict:
        """Extra prep-key fields of the parallel schedule, each only when set (the default key is unchanged): ``prefetch``
        / ``two_per_sm`` for families whose prep kernel has them (``_prep_prefetch`` / ``_prep_two_per_sm``: GDN's
        one-warpgroup prep kernel, which they select: ``restructured = False, tc_ctas_per_sm = 2``); a knob set on a
        family whose prep kernel has no such option (KDA: none; ``parallel_fast_exp``: no family) is a ValueError naming
        the knob, never silently ignored."""
        opts = {}
        for knob, field, available in (
            ("parallel_prefetch", "prefetch", self._prep_prefetch),
            ("parallel_prep_two_per_sm", "two_per_sm", self._prep_two_per_sm),
            ("parallel_fast_exp", "fast_exp", False),
        ):
            if getattr(self, knob):
                self._value_error_if(
                    not available, f"{self._public}: {knob} is not available for this family: its parallel prep kernel has no such option ({field})"
                )
                opts[field] = True
        if opts:  # options of GDN's one-warpgroup prep kernel (the restructured default takes neither)
            opts.update(_GDN_PREP_BASE)
        return opts

    def _state_options(self) -> dict:
        """Extra state-pass key fields: ``stages`` only when not the key's default (``STAGES`` = 4: the default key is
        unchanged); 2 and 3 keep the default TMA data movement at that many stages."""
        stages = self.parallel_state_stages
        self._value_error_if(stages not in (2, 3, 4), f"{self._public}: parallel_state_stages={stages!r}; accepted 2, 3 or 4")
        return {} if stages == _STATE_STAGES else {"stages": int(stages)}

    def _out_options(self) -> dict:
        """Extra output-key fields: none from the adapter (``set_parallel_options`` adds the opt-in ones)."""
        return {}

    def _g_align(self) -> int:
        """Byte alignment the parallel prep kernel assumes for ``g`` (4: fp32 ``g`` read by 32-bit loads, GDN with
        prefetch; KDA overrides: its prep kernel always reads an fp32 ``g`` so)."""
        return 4 if self._prep_options().get("prefetch") and self.g.dtype == data_type.FLOAT else 2

    # -- plan ---------------------------------------------------------------------------------------
    def check_support(self) -> bool:
        what = self._public
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
            st, sh = walk_strides(t, what)
            self._decline_if(
                st % VEC or sh % VEC,
                f"{what}: {t.describe()} token / head strides ({st}, {sh}) must be multiples of {VEC} elements (16-byte loads); declined, not copied (Rule 2)",
            )
        walk_strides(o, what)
        if self._gate_per_key:
            self._value_error_if(
                g.shape != (*lead, h, kdim), f"{what}: {g.describe()} must have shape {(*lead, h, kdim)} (one log decay per token, v head and key channel)"
            )
            self._value_error_if(beta.shape != (*lead, h), f"{what}: {beta.describe()} must have shape {(*lead, h)} (one value per token and v head)")
        for t in (g, beta):
            if not self._gate_per_key:
                self._value_error_if(t.shape != (*lead, h), f"{what}: {t.describe()} must have shape {(*lead, h)} (one value per token and v head)")
            self._check_dtype(t, GATE_DTYPES, what)
            self._decline_if(not gate_ok(t), f"{what}: {t.describe()} must be contiguous; declined, not copied (Rule 2)")
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
        self._value_error_if(self.schedule not in SCHEDULES, f"{what}: schedule={self.schedule!r}; accepted {SCHEDULES}")
        self._decline_if(
            self.schedule == "parallel" and not self._parallel_schedule, f"{what}: schedule='parallel' is not implemented for this family; use 'serial'"
        )
        self._is_supported = True
        return True

    def _key_fields(self) -> dict:
        """The compile-key fields every family shares (plan-time values only, Rule 4)."""
        return dict(
            head_dim=self.q.shape[-1],
            g_dtype=_CNAME[self.g.dtype],
            beta_dtype=_CNAME[self.beta.dtype],
            l2norm=self.l2norm,
            varlen=self.cu_seqlens is not None,
            has_initial=self.initial_state is not None,
            has_final=self.final_state is not None,
        )

    def scratch_workspace_bytes(self, total_tokens: int | None = None, n_seqs: int | None = None, seq_len: int | None = None) -> int:
        """Workspace bytes ``execute`` carves: 0 for the serial schedule; for the parallel one, for a batch of
        ``total_tokens`` tokens and ``n_seqs`` sequences (dense: ``seq_len`` tokens each), the plan's by default."""
        self._ensure_support_checked()
        if self.schedule != "parallel":
            return 0
        varlen = self.cu_seqlens is not None
        rank = self.q.rank
        T = total_tokens if total_tokens is not None else (self.q.shape[0] if rank == 3 else self.q.shape[0] * self.q.shape[1])
        n = n_seqs if n_seqs is not None else self._n_seqs
        if seq_len is None:
            seq_len = 0 if varlen else (T if rank == 3 else T // max(1, n))
        ext = parallel_extents(T, n, seq_len, varlen)
        return workspace_bytes(ext.slots, self.v.shape[-2], self.q.shape[-1])

    def compile(self) -> None:
        self._ensure_support_checked()
        if self.schedule == "parallel":
            f = self._key_fields()
            self._parallel_g_align = self._g_align()  # what the compiled prep kernel assumes; execute binds g with it
            self._compiled_parallel = compile_parallel(
                self._parallel_kernel_classes(),
                self._family,
                f["head_dim"],
                f["g_dtype"],
                f["beta_dtype"],
                f["l2norm"],
                f["varlen"],
                f["has_initial"],
                f["has_final"],
                row_scaled=not self._gate_per_key,
                prep_options=self._prep_options(),
                g_align=self._parallel_g_align,
                state_options=self._state_options(),
                out_options=self._out_options(),
            )
            self._compiled_kernel = self._compiled_parallel
            return
        key = self.compile_key()
        kernel_class = self._kernel_class

        def build():
            import cuda.bindings.driver as cuda
            import cutlass.cute as cute
            from cutlass import Float32, Int32, Int64

            kernel = kernel_class()

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
            return cute.compile(kernel(key), *ptrs, *ints, Float32(1.0), *strides, cuda.CUstream(0))

        from cudnn.kernel_cache import kernel_cache

        self._compiled_kernel = kernel_cache.get_or_compile(key, build, family=self._family)

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

    def execute(self, q, k, v, g, beta, o, initial_state=None, final_state=None, cu_seqlens=None, *, current_stream=None, workspace=None):
        """Launch on ``current_stream``; returns ``o``. THD token totals / sequence counts (and dense B, L) may differ from the plan.
        ``workspace`` (uint8, ``scratch_workspace_bytes(T, N, L)`` bytes) is needed by the parallel schedule only."""
        what = f"{type(self).__name__}.execute"
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
        g_lead = tuple(g.shape[:-2]) if self._gate_per_key else tuple(g.shape[:-1])
        if g_lead != lead or tuple(beta.shape[:-1]) != lead:
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
            if name != "o" and (st % VEC or sh % VEC or t.data_ptr() % 16):
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
        if self.schedule == "parallel":
            self._execute_parallel(q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, T, n_seqs, seq_len, strides, current_stream, workspace)
            return o
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

    def _execute_parallel(self, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, T, n_seqs, seq_len, strides, current_stream, workspace):
        """The parallel schedule's three launches (metadata already validated by ``execute``)."""
        heads, d = int(v.shape[-2]), int(q.shape[-1])
        ext = parallel_extents(T, n_seqs, seq_len, cu_seqlens is not None)
        required = workspace_bytes(ext.slots, heads, d)
        ws_ptrs = workspace_pointers(workspace, required, f"{type(self).__name__}.execute", q.device, ext.slots, heads, d)
        g_align = self._parallel_g_align
        if g.data_ptr() % g_align:
            raise ValueError(
                f"{type(self).__name__}.execute: g at 0x{g.data_ptr():x} is not {g_align}-byte aligned (the plan's prep kernel reads an fp32 g by 32-bit loads)"
            )
        ptrs = dict(
            q=_ptr(q, data_type.BFLOAT16, 16),
            k=_ptr(k, data_type.BFLOAT16, 16),
            v=_ptr(v, data_type.BFLOAT16, 16),
            g=_ptr(g, self.g.dtype, g_align),
            beta=_ptr(beta, self.beta.dtype, 2),
            o=_ptr(o, data_type.BFLOAT16, 2),
            cu=_ptr(cu_seqlens, data_type.INT32, 4),
            h0=_ptr(initial_state, data_type.FLOAT, 4),
            ht=_ptr(final_state, data_type.FLOAT, 4),
        )
        launch_parallel(self._compiled_parallel, ptrs, ws_ptrs, ext, T, heads, int(q.shape[-2]), float(self.scale), strides, _stream(current_stream, q.device))


def _plan_for(adapter, plans: dict, q, k, v, g, beta, o, scale, l2norm, initial_state, final_state, cu_seqlens, schedule=DEFAULT_SCHEDULE):
    """One ``adapter`` per metadata signature (token extents excluded) and schedule, cached in the family's ``plans``:
    the wrapper's per-call cost is a dict lookup."""
    rank = q.dim()
    free = 1 if rank == 3 else 2

    def sig(t):
        return None if t is None else (tuple(t.shape[free:]), t.dtype, str(t.device))

    key = (rank, scale, l2norm, schedule, *(sig(t) for t in (q, k, v, g, beta, o, initial_state, final_state, cu_seqlens)))
    plan = plans.get(key)
    if plan is None:
        plan = adapter(
            q,
            k,
            v,
            g,
            beta,
            o,
            scale=scale,
            use_qk_l2norm_in_kernel=l2norm,
            initial_state=initial_state,
            final_state=final_state,
            cu_seqlens=cu_seqlens,
            schedule=schedule,
        )
        plan.compile()
        plans[key] = plan
    return plan


def delta_rule_forward(
    adapter, plans: dict, q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out=None, schedule=DEFAULT_SCHEDULE
):
    """``(o, final_state or None)``: outputs allocated on torch's current stream (``o`` contiguous with v's shape and dtype
    unless ``out`` supplies it), the cached ``adapter`` plan of this metadata signature and ``schedule`` (in ``plans``),
    its launches on that stream. The real implementation of a family's torch op and of its ``out=`` form.

    ``schedule="parallel"``: the plan's ``scratch_workspace_bytes(T, N, L)`` are allocated here as a uint8 tensor on the
    launch stream (R1: the caching allocator orders the block's reuse against that stream; R2: the adapter carves it),
    so the call stays capturable in a CUDA graph (the block comes from the graph's pool) and reads no device value."""
    import torch

    from cudnn._torch_stream import stream_context

    device = q.device
    rank = q.dim()
    varlen = cu_seqlens is not None
    n = (int(cu_seqlens.shape[0]) - 1) if varlen else (int(q.shape[0]) if rank == 4 else 1)
    h, vdim, kdim = int(v.shape[-2]), int(v.shape[-1]), int(q.shape[-1])
    stream = torch.cuda.current_stream(device)
    with stream_context(stream, device):
        o = torch.empty(v.shape, dtype=v.dtype, device=device) if out is None else out
        final = torch.empty(n, h, vdim, kdim, dtype=torch.float32, device=device) if output_final_state else None
    plan = _plan_for(adapter, plans, q, k, v, g, beta, o, scale, use_qk_l2norm_in_kernel, initial_state, final, cu_seqlens, schedule)
    workspace = None
    if schedule == "parallel":
        T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
        seq_len = 0 if varlen else (int(q.shape[1]) if rank == 4 else T)
        with stream_context(stream, device):
            workspace = torch.empty(plan.scratch_workspace_bytes(T, n, seq_len), dtype=torch.uint8, device=device)
    plan.execute(q, k, v, g, beta, o, initial_state, final, cu_seqlens, current_stream=stream, workspace=workspace)
    return o, final


def delta_rule_public(
    public: str,
    forward,
    load_op,
    q,
    k,
    v,
    g,
    beta,
    scale,
    use_qk_l2norm_in_kernel,
    initial_state,
    output_final_state,
    cu_seqlens,
    out,
    schedule=DEFAULT_SCHEDULE,
):
    """The public wrapper's body: with ``out``, the eager forward-only path through ``forward`` (refused when an input
    requires grad); else the torch custom op ``load_op()`` (imported lazily). ``schedule`` ("serial" default, or the
    opt-in "parallel") is checked here (ValueError) before any tracing or launch. Returns ``TupleDict(o, final_state)``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"cudnn.linear_attention.{public}: schedule={schedule!r}; accepted {SCHEDULES}")
    if out is not None:
        from .delta_rule_op import forward_only_guard

        forward_only_guard(public, q, k, v, g, beta, initial_state)
        o, final = forward(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out, schedule=schedule)
        return TupleDict(o=o, final_state=final)
    op = load_op()
    o, final = op(q, k, v, g, beta, scale, bool(use_qk_l2norm_in_kernel), initial_state, bool(output_final_state), cu_seqlens, schedule)
    return TupleDict(o=o, final_state=final if output_final_state else None)
