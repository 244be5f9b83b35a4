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
from cudnn.workspace import WORKSPACE_ALIGNMENT, Workspace

from ..kda.chunk_parallel_state_kernel import STAGES as _STATE_STAGES
from . import chunk_parallel as _chunk_parallel
from .chunk_parallel import (
    _GDN_PREP_BASE,
    DEFAULT_SCHEDULE,
    SCHEDULES,
    compile_parallel,
    launch_parallel,
    launch_parallel_ffi,
    parallel_extents,
    ready_flags_offset,
    ready_flags_pointer_at,
    workspace_offsets,
    workspace_pointers_at,
)
from .launch import CUTLASS_NAMES as _CNAME
from .launch import fake_gmem_ptr as _fake_ptr
from .launch import gmem_ptr as _ptr
from .launch import launch_stream as _stream
from .launch import stream_handle as _stream_handle
from .launch import torch_dtype as _torch_dtype
from .launch import tvm_ffi_available as _tvm_ffi_available
from .launch import tvm_ffi_entry as _tvm_ffi_entry
from .launch import use_tvm_ffi_default as _use_tvm_ffi_default
from .plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
HEAD_DIMS = (64, 128)
GATE_DTYPES = (data_type.FLOAT, data_type.BFLOAT16)
VEC = 8  # bf16 elements per 16-byte load of q / k / v

#: Default of the adapters' ``fast_host`` (execute memoizes its validation per tensor metadata; see
#: ``DeltaRuleFwdSm90.execute``). On since session 7; False restores the full validation on every call.
FAST_HOST_DEFAULT = True
#: Launch route of the plans the public ops build (``plan.tvm_ffi``: the kernels compiled with ``--enable-tvm-ffi``,
#: launched with integer addresses and a raw stream handle: the same device code), where apache-tvm-ffi is importable;
#: False: the DSL's own entry (cute Pointers, a CUstream). Part of the op's plan key. On since session 7 (as
#: causal_conv1d's ``torch_op.FWD_TVM_FFI``; the adapters' own default stays the DSL entry unless ``CUDNN_LA_TVM_FFI=1``).
TVM_FFI_DEFAULT = True
#: The public wrappers (``gated_delta_net`` / ``kimi_delta_attention``) call the op body (the family's ``forward``)
#: directly where torch's dispatch can change nothing (``_host/eager.py``); False: every call goes through the op.
DIRECT_EAGER = True
_MEMO_MAX = 64  # validation-memo entries per plan (cleared when full)


def tvm_ffi_default() -> bool:
    """The launch route of the public ops' plans: ``TVM_FFI_DEFAULT`` where apache-tvm-ffi is importable."""
    return bool(TVM_FFI_DEFAULT) and _tvm_ffi_available()


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
        self._compiled_parallel_many = None  # the fused pair of a per-call plan, for calls of >= _fused_min_seqs sequences
        self._fused_min_seqs = 1
        self._entries_many = None
        self._ready_flags = False  # the overlapped output (state-pass key signal_out): launches pass the ready flags
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
        #: Fused state pass + output (set before compile(); part of the state pass's compile key): None (default: the
        #: rule of ``_host/chunk_parallel.py`` -- the fused pair where one sequence's chains fill the GPU
        #: (``default_fused_state_options``: H, V and the device's SM count, behind ``FUSED_DEFAULT``); elsewhere the three
        #: kernels and, behind ``PER_CALL_DEFAULT``, the fused pair compiled beside them at plan time and launched for a
        #: call of at least ``fused_min_sequences`` sequences: a host-side shape, no compile at call time, Rule 4), True
        #: (the ``FUSED_VARIANT`` configuration for every call) or False (the three kernels for every call).
        #: ``set_parallel_options`` sets False (a variant is exactly what it names).
        self.parallel_fused = None
        #: The output kernel beside the state pass (set before compile(); part of the state and output compile keys):
        #: default ``OVERLAP_DEFAULT`` (True since session 31): wherever the schedule is the three kernels, the state pass
        #: takes ``PARALLEL_VARIANTS[OVERLAP_VARIANT]``'s options (``signal_out``: it sets a ready flag per chunk and lets
        #: the output kernel launch early, by PDL, to wait on them; ``stmatrix``: its transposed copies by stmatrix.trans).
        #: Bitwise the non-overlapped kernels. False: the three kernels one after the other. The fused pair has no output
        #: kernel to overlap (nothing to apply). ``set_parallel_options`` sets False (a variant is exactly what it names).
        self.parallel_overlap = _chunk_parallel.OVERLAP_DEFAULT
        #: Tuning / A-B knob (GDN only: ``GdnParallelPrepKey.two_per_sm``, an option of the one-warpgroup prep kernel,
        #: which setting it selects, as ``parallel_prefetch``): that kernel runs two CTAs per SM (KDA's prep kernel always
        #: does; setting it there is a ValueError at compile).
        self.parallel_prep_two_per_sm = False
        #: Removed knob kept as an attribute so that setting it is caught: no family's prep kernel has a ``fast_exp``
        #: option any more (KDA's prep always uses ``ex2.approx`` decays); True is a ValueError at compile.
        self.parallel_fast_exp = False
        #: Launch route (set before compile()): the tvm-ffi entry (True) or the DSL's own (False). Same device code either
        #: way; the tvm-ffi artifacts are separate kernel-cache entries ``(key, "tvm-ffi")``. The adapter's default is the
        #: DSL entry unless ``CUDNN_LA_TVM_FFI=1`` (as causal_conv1d's adapters); the public ops' plans take
        #: ``tvm_ffi_default()`` (``TVM_FFI_DEFAULT``: True where apache-tvm-ffi is importable).
        self.tvm_ffi = _use_tvm_ffi_default()
        #: Memoized execute validation (set before compile(); default ``FAST_HOST_DEFAULT``): see ``execute``.
        self.fast_host = FAST_HOST_DEFAULT
        self._entries = None  # tvm-ffi positional functions (a tuple of three for the parallel schedule)
        self._memo = None  # execute metadata -> _Launch; set by compile() when fast_host
        self._last = [(None, None)]
        self._varlen = self._parallel = False

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
        unchanged); 2 and 3 keep the default TMA data movement at that many stages. The fused state pass + output's
        fields (``parallel_fused``: True, or None and the plan-time rule picks it from H, V and the SM count) when the
        stages knob is at its default; ``parallel_fused=True`` with another stage count is a ValueError (the fused
        configuration sets its own)."""
        stages = self.parallel_state_stages
        fused = self.parallel_fused
        self._value_error_if(stages not in (2, 3, 4), f"{self._public}: parallel_state_stages={stages!r}; accepted 2, 3 or 4")
        self._value_error_if(fused not in (None, True, False), f"{self._public}: parallel_fused={fused!r}; accepted None, True or False")
        self._value_error_if(
            fused is True and stages != _STATE_STAGES,
            f"{self._public}: parallel_fused=True sets the fused kernel's own stages; parallel_state_stages={stages!r} applies to the unfused state pass only",
        )
        if fused is True:
            return dict(_chunk_parallel.PARALLEL_VARIANTS[_chunk_parallel.FUSED_VARIANT]["state"])
        if fused is None and stages == _STATE_STAGES:
            opts = _chunk_parallel.default_fused_state_options(self.v.shape[-2], self.v.shape[-1], getattr(self.v, "device", None))
            if opts:
                return opts
        return {} if stages == _STATE_STAGES else {"stages": int(stages)}

    def _overlap_options(self, state_options: dict) -> dict:
        """The state-pass options ``parallel_overlap`` adds to ``state_options`` (the plan's own, from
        :meth:`_state_options`): ``PARALLEL_VARIANTS[OVERLAP_VARIANT]``'s where it is on and the state pass is the three
        kernels' (no ``fuse_out``), else {}; a value other than True / False is a ValueError."""
        overlap = self.parallel_overlap
        self._value_error_if(overlap not in (True, False), f"{self._public}: parallel_overlap={overlap!r}; accepted True or False")
        if not overlap or state_options.get("fuse_out"):
            return {}
        return dict(_chunk_parallel.PARALLEL_VARIANTS[_chunk_parallel.OVERLAP_VARIANT]["state"])

    def _many_state_options(self):
        """The state-pass options of the per-call side (``parallel_fused`` None): the fused pair's, where the plan's own
        schedule is the three kernels because one sequence's chains do not fill the GPU and ``PER_CALL_DEFAULT`` is on;
        None where the plan launches one schedule for every call (the knob set, a non-default stage count, the fused pair
        already the plan's)."""
        if self.parallel_fused is not None or self.parallel_state_stages != _STATE_STAGES or self._state_options():
            return None
        return _chunk_parallel.per_call_fused_state_options(self.v.shape[-2], self.v.shape[-1], getattr(self.v, "device", None))

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
        return _layout(T, n, seq_len, varlen, self.v.shape[-2], self.q.shape[-1])[1][-1]  # == workspace_bytes(slots, H, D)

    def compile(self) -> None:
        self._ensure_support_checked()
        for knob in ("tvm_ffi", "fast_host"):
            self._value_error_if(getattr(self, knob) not in (True, False), f"{self._public}: {knob}={getattr(self, knob)!r} must be True or False")
        self._value_error_if(self.tvm_ffi and not _tvm_ffi_available(), f"{self._public}: tvm_ffi=True needs apache-tvm-ffi, which is not importable")
        self._entries = None
        self._memo = None
        self._last = [(None, None)]
        self._varlen = self.cu_seqlens is not None
        self._parallel = self.schedule == "parallel"
        self._compile_kernels()
        self._entries_many = None
        if self.tvm_ffi:
            kernels = self._compiled_kernel
            self._entries = tuple(_tvm_ffi_entry(f) for f in kernels) if self._parallel else _tvm_ffi_entry(kernels)
            if self._parallel and self._compiled_parallel_many is not None:
                self._entries_many = tuple(_tvm_ffi_entry(f) for f in self._compiled_parallel_many)
        self._memo = {} if self.fast_host else None

    def _compile_kernels(self) -> None:
        """The compile of ``compile()``: the parallel schedule's three kernels or the serial kernel, on the ``tvm_ffi`` route."""
        tvm_ffi = bool(self.tvm_ffi)
        if self.schedule == "parallel":
            f = self._key_fields()
            self._parallel_g_align = self._g_align()  # what the compiled prep kernel assumes; execute binds g with it

            def build(state_options):  # the (prep, state, out) triple with these state-pass options
                return compile_parallel(
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
                    state_options=state_options,
                    out_options=self._out_options(),
                    tvm_ffi=tvm_ffi,
                )

            state_options = self._state_options()
            state_options = {**state_options, **self._overlap_options(state_options)}
            self._ready_flags = bool(state_options.get("signal_out"))  # the overlapped output: launches take the ready flags
            self._compiled_parallel = build(state_options)
            self._compiled_kernel = self._compiled_parallel
            many = self._many_state_options()
            self._compiled_parallel_many = None if many is None else build(many)  # the same prep: a kernel-cache hit
            if many is not None:
                self._fused_min_seqs = _chunk_parallel.fused_min_sequences(self.v.shape[-2], self.v.shape[-1], getattr(self.v, "device", None))
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
            opts = {"options": "--enable-tvm-ffi"} if tvm_ffi else {}
            return cute.compile(kernel(key), *ptrs, *ints, Float32(1.0), *strides, cuda.CUstream(0), **opts)

        from cudnn.kernel_cache import kernel_cache

        self._compiled_kernel = kernel_cache.get_or_compile((key, "tvm-ffi") if tvm_ffi else key, build, family=self._family)

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
        ``workspace`` (uint8, ``scratch_workspace_bytes(T, N, L)`` bytes) is needed by the parallel schedule only.

        Host path (``fast_host``, on by default): the full validation runs once per distinct tensor metadata
        (:meth:`_exec_meta`: shapes, strides, dtypes, devices, which optionals are None, the workspace's dtype / rank /
        stride / device; for a varlen plan without the token total T and the sequence count N); its result (the launch's
        strides, extents and workspace layout) is memoized on the plan. A repeat call reads T / N, checks that every
        tensor agrees with them, the q / k / v / g addresses' alignment and the workspace's size and alignment, and
        launches; a call that fails any of these takes the full validation (and raises exactly its error). No allocation,
        no sync, no device read either way (Rules 1-3)."""
        memo = self._memo
        meta = None
        if memo is not None:
            try:
                meta = self._exec_meta(q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, workspace)
            except (AttributeError, TypeError):  # not tensors: the full validation names the problem
                meta = None
            if meta is not None:
                pair = self._last[0]  # (metadata, memo entry) of the previous call, replaced as one object
                got = pair[1] if meta == pair[0] else memo.get(meta)
                if got is not None:
                    call = self._fast_call(got, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, workspace)
                    if call is not None:
                        self._last[0] = (meta, got)
                        self._launch(got, call, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, current_stream)
                        return o
        got = self._validate(q, k, v, g, beta, o, initial_state, final_state, cu_seqlens)
        call = self._call_extents(got, q, g, cu_seqlens, workspace)
        if meta is not None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            memo[meta] = got
            self._last[0] = (meta, got)
        self._launch(got, call, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, current_stream)
        return o

    def _exec_meta(self, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, workspace) -> tuple:
        """What the execute-time validation reads of its tensors, everything but their addresses: the key of the
        validation memo. Dense plans: shape, stride, dtype, device of each tensor (None for an absent optional one).
        Varlen plans leave out the token total T (q..beta's token dim; rank 4 also the never-stepped batch stride) and the
        sequence count N (the states' first dim; cu_seqlens' length), keeping whether T > 1 / N > 1 (which decide the
        contiguity checks): the fast path reads them per call and checks that the tensors agree. The parallel schedule
        adds the workspace's dtype, rank, stride and device (its size and address are checked per call)."""
        ws = None
        if self._parallel:
            ws = None if workspace is None else (workspace.dtype, workspace.dim(), workspace.stride(), workspace.device)
        if not self._varlen:
            return (
                q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                v.shape, v.stride(), v.dtype, v.device, o.shape, o.stride(), o.dtype, o.device,
                g.shape, g.stride(), g.dtype, g.device, beta.shape, beta.stride(), beta.dtype, beta.device,
                None if initial_state is None else (initial_state.shape, initial_state.stride(), initial_state.dtype, initial_state.device),
                None if final_state is None else (final_state.shape, final_state.stride(), final_state.dtype, final_state.device),
                None if cu_seqlens is None else (cu_seqlens.shape, cu_seqlens.stride(), cu_seqlens.dtype, cu_seqlens.device),
                ws,
            )  # fmt: skip
        tok = q.dim() - 3  # [T, H, D] -> 0, [1, T, H, D] -> 1 (any other rank: the full validation raises)
        m = [q.shape[tok] > 1, tok]
        for t in (q, k, v, o, g, beta):
            s = t.shape
            m += (s[:tok], s[tok + 1 :], t.stride()[tok:], t.dtype, t.device)
        n = None if cu_seqlens is None else cu_seqlens.shape[0] - 1
        for t in (initial_state, final_state):
            m.append(None if t is None else (n > 1, t.shape[1:], t.stride(), t.dtype, t.device))
        m.append(None if cu_seqlens is None else (n >= 1, cu_seqlens.dim(), cu_seqlens.stride(), cu_seqlens.dtype, cu_seqlens.device))
        m.append(ws)
        return tuple(m)

    def _fast_call(self, got, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, workspace):
        """The per-call checks of a memo hit (see ``execute``): varlen T / N agreement, address alignment, the
        workspace's size and alignment. Returns the call's extents (as :meth:`_call_extents`) or None (then the full
        validation runs and raises)."""
        if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:
            return None
        if got.varlen:
            tok = got.tok
            T = q.shape[tok]
            if k.shape[tok] != T or v.shape[tok] != T or o.shape[tok] != T or g.shape[tok] != T or beta.shape[tok] != T:
                return None
            n = cu_seqlens.shape[0] - 1
            if (initial_state is not None and initial_state.shape[0] != n) or (final_state is not None and final_state.shape[0] != n):
                return None
            layout = _layout(T, n, 0, True, got.heads, got.d) if got.parallel else None
        else:
            T, n, layout = got.T, got.n_seqs, got.layout
        if not got.parallel:
            return T, n, None, None
        if g.data_ptr() % got.g_align:
            return None
        base = workspace.data_ptr()
        if base % WORKSPACE_ALIGNMENT or workspace.numel() < layout[1][-1]:
            return None
        return T, n, layout[0], [base + off for off in layout[1][:-1]]

    def _call_extents(self, got, q, g, cu_seqlens, workspace):
        """The per-call part of the full validation (raising its errors): T and N of this call and, for the parallel
        schedule, its extents and the workspace arrays' addresses (Workspace.over checks the buffer), g's alignment."""
        what = f"{type(self).__name__}.execute"
        if got.varlen:
            T, n = int(q.shape[got.tok]), int(cu_seqlens.shape[0]) - 1
        else:
            T, n = got.T, got.n_seqs
        if not got.parallel:
            return T, n, None, None
        ext, offsets = _layout(T, n, got.seq_len, got.varlen, got.heads, got.d)
        base = Workspace.over(workspace, offsets[-1], what, device=q.device).data_ptr
        if g.data_ptr() % got.g_align:
            raise ValueError(f"{what}: g at 0x{g.data_ptr():x} is not {got.g_align}-byte aligned (the plan's prep kernel reads an fp32 g by 32-bit loads)")
        return T, n, ext, [base + off for off in offsets[:-1]]

    def _validate(self, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens) -> _Launch:
        """The full metadata validation of an execute call (no conversion, no device read); returns its memo entry."""
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
        heads, d = int(v.shape[-2]), int(q.shape[-1])
        varlen, parallel = self.cu_seqlens is not None, self.schedule == "parallel"
        layout = _layout(T, n_seqs, seq_len, varlen, heads, d) if parallel and not varlen else None
        return _Launch(
            varlen=varlen,
            tok=q.dim() - 3,
            parallel=parallel,
            T=T,
            n_seqs=n_seqs,
            seq_len=seq_len,
            heads=heads,
            qk_heads=int(q.shape[-2]),
            d=d,
            scale=float(self.scale),
            strides=tuple(strides),
            g_align=self._parallel_g_align if parallel else 2,
            layout=layout,
            g_dtype=self.g.dtype,
            beta_dtype=self.beta.dtype,
        )

    def _launch(self, got, call, q, k, v, g, beta, o, initial_state, final_state, cu_seqlens, current_stream) -> None:
        """The launches of a validated call: ``call`` = (T, N, parallel extents, workspace array addresses). The tvm-ffi
        route (``tvm_ffi``) passes integer addresses, ints, floats and the raw stream handle; the DSL route builds cute
        pointers and a CUstream (the pre-session-7 path, kept as the A/B baseline and where tvm-ffi is missing)."""
        T, n, ext, ws = call
        entries = self._entries
        # the per-call side (parallel_fused None): the fused pair for a call of at least fused_min_sequences sequences
        many = got.parallel and self._compiled_parallel_many is not None and n >= self._fused_min_seqs
        if many and entries is not None:
            entries = self._entries_many
        if entries is not None:
            stream = _stream_handle(current_stream, q.device)
            addrs = (
                q.data_ptr(), k.data_ptr(), v.data_ptr(), g.data_ptr(), beta.data_ptr(), o.data_ptr(),
                None if cu_seqlens is None else cu_seqlens.data_ptr(),
                None if initial_state is None else initial_state.data_ptr(),
                None if final_state is None else final_state.data_ptr(),
            )  # fmt: skip
            if got.parallel:
                # the overlapped output: the ready flags after the arrays (ws[0], the first array, is the workspace base)
                rdy = ws[0] + ready_flags_offset(ext.slots, got.heads, got.d) if self._ready_flags and not many else None
                launch_parallel_ffi(entries, addrs, ws, ext, T, got.heads, got.qk_heads, got.scale, got.strides, stream, rdy)
            else:
                entries(*addrs, T, n, got.seq_len, got.heads, got.qk_heads, got.scale, *got.strides, stream)
            return
        if got.parallel:
            ptrs = dict(
                q=_ptr(q, data_type.BFLOAT16, 16),
                k=_ptr(k, data_type.BFLOAT16, 16),
                v=_ptr(v, data_type.BFLOAT16, 16),
                g=_ptr(g, got.g_dtype, got.g_align),
                beta=_ptr(beta, got.beta_dtype, 2),
                o=_ptr(o, data_type.BFLOAT16, 2),
                cu=_ptr(cu_seqlens, data_type.INT32, 4),
                h0=_ptr(initial_state, data_type.FLOAT, 4),
                ht=_ptr(final_state, data_type.FLOAT, 4),
            )
            ws_ptrs = workspace_pointers_at(ws)
            rdy = None
            if self._ready_flags and not many:  # the overlapped output: the ready flags after the arrays (ws[0]: the base)
                rdy = ready_flags_pointer_at(ws[0] + ready_flags_offset(ext.slots, got.heads, got.d))
            launch_parallel(
                self._compiled_parallel_many if many else self._compiled_parallel,
                ptrs,
                ws_ptrs,
                ext,
                T,
                got.heads,
                got.qk_heads,
                got.scale,
                list(got.strides),
                _stream(current_stream, q.device),
                rdy,
            )
            return
        self._compiled_kernel(
            _ptr(q, data_type.BFLOAT16, 16),
            _ptr(k, data_type.BFLOAT16, 16),
            _ptr(v, data_type.BFLOAT16, 16),
            _ptr(g, got.g_dtype, 2),
            _ptr(beta, got.beta_dtype, 2),
            _ptr(o, data_type.BFLOAT16, 2),
            _ptr(cu_seqlens, data_type.INT32, 4),
            _ptr(initial_state, data_type.FLOAT, 4),
            _ptr(final_state, data_type.FLOAT, 4),
            T,
            n,
            got.seq_len,
            got.heads,
            got.qk_heads,
            got.scale,
            *got.strides,
            _stream(current_stream, q.device),
        )


class _Launch:
    """A validated call's memo entry (``DeltaRuleFwdSm90._validate``): what the launches need besides addresses and, for
    a varlen plan, T and N. ``layout``: the dense parallel plan's (extents, workspace offsets + total); None otherwise."""

    __slots__ = (
        "varlen",
        "tok",
        "parallel",
        "T",
        "n_seqs",
        "seq_len",
        "heads",
        "qk_heads",
        "d",
        "scale",
        "strides",
        "g_align",
        "layout",
        "g_dtype",
        "beta_dtype",
    )

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, value)


_LAYOUTS: dict = {}


def _layout(T: int, n: int, seq_len: int, varlen: bool, heads: int, d: int) -> tuple:
    """``(ParallelExtents, workspace offsets + total bytes)`` of a parallel call, memoized per extents (bounded):
    metadata arithmetic only."""
    key = (T, n, seq_len, varlen, heads, d)
    hit = _LAYOUTS.get(key)
    if hit is None:
        if len(_LAYOUTS) >= 4 * _MEMO_MAX:
            _LAYOUTS.clear()
        ext = parallel_extents(T, n, seq_len, varlen)
        hit = _LAYOUTS[key] = (ext, workspace_offsets(ext.slots, heads, d))
    return hit


def _plan_for(adapter, plans: dict, q, k, v, g, beta, o, scale, l2norm, initial_state, final_state, cu_seqlens, schedule=DEFAULT_SCHEDULE):
    """One ``adapter`` per metadata signature (token extents excluded), schedule and host-path knobs (``TVM_FFI_DEFAULT``,
    ``FAST_HOST_DEFAULT``: a plan's route and memo are fixed at construction), cached in the family's ``plans``: the
    wrapper's per-call cost is a dict lookup."""
    rank = q.dim()
    free = 1 if rank == 3 else 2
    key = (
        rank, scale, l2norm, schedule, TVM_FFI_DEFAULT, FAST_HOST_DEFAULT, q.device,
        q.shape[free:], q.dtype, k.shape[free:], k.dtype, v.shape[free:], v.dtype, o.shape[free:], o.dtype,
        g.shape[free:], g.dtype, beta.shape[free:], beta.dtype,
        None if initial_state is None else (initial_state.shape[1:], initial_state.dtype),
        None if final_state is None else final_state.shape[1:],
        None if cu_seqlens is None else cu_seqlens.dtype,
    )  # fmt: skip
    plan = plans.get(key)  # keyed on q's device: another tensor on another device is the plan's execute ValueError
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
        plan.tvm_ffi = tvm_ffi_default()
        plan.compile()
        plans[key] = plan
    return plan


def delta_rule_forward(
    adapter, plans: dict, q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out=None, schedule=DEFAULT_SCHEDULE
):
    """``(o, final_state or None)``: outputs allocated on torch's current stream (``o`` contiguous with v's shape and dtype
    unless ``out`` supplies it), the cached ``adapter`` plan of this metadata signature and ``schedule`` (in ``plans``),
    its launches on that stream. The real implementation of a family's torch op, of its ``out=`` form and of the public
    wrapper's direct eager call (``DIRECT_EAGER``).

    ``schedule="parallel"``: the plan's ``scratch_workspace_bytes(T, N, L)`` are allocated here as a uint8 tensor on the
    launch stream (R1: the caching allocator orders the block's reuse against that stream; R2: the adapter carves it),
    so the call stays capturable in a CUDA graph (the block comes from the graph's pool) and reads no device value."""
    import torch

    from cudnn._torch_stream import stream_context

    device = q.device
    rank = q.dim()
    varlen = cu_seqlens is not None
    n = (int(cu_seqlens.shape[0]) - 1) if varlen else (int(q.shape[0]) if rank == 4 else 1)
    stream = torch.cuda.current_stream(device)
    workspace = None
    with stream_context(stream, device):  # every allocation of the call in one context (a no-op on the current stream)
        o = torch.empty(v.shape, dtype=v.dtype, device=device) if out is None else out
        final = torch.empty(n, v.shape[-2], v.shape[-1], q.shape[-1], dtype=torch.float32, device=device) if output_final_state else None
        plan = _plan_for(adapter, plans, q, k, v, g, beta, o, scale, use_qk_l2norm_in_kernel, initial_state, final, cu_seqlens, schedule)
        if schedule == "parallel":
            T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
            seq_len = 0 if varlen else (int(q.shape[1]) if rank == 4 else T)
            workspace = torch.empty(plan.scratch_workspace_bytes(T, n, seq_len), dtype=torch.uint8, device=device)
    plan.execute(q, k, v, g, beta, o, initial_state, final, cu_seqlens, current_stream=stream, workspace=workspace)
    return o, final


_EAGER: list = []


def _direct_ok(tensors) -> bool:
    """Whether the public wrapper may call the op body directly (``DIRECT_EAGER``; ``_host/eager.py``: not compiling, a
    plain dispatch state, plain CUDA tensors none of which needs an autograd record). Imports torch on first use."""
    if not DIRECT_EAGER:
        return False
    if not _EAGER:
        import torch

        from . import eager

        _EAGER.append((torch.compiler.is_compiling, eager))
    is_compiling, eager = _EAGER[0]
    return not is_compiling() and eager.plain_tensors(tensors, eager.is_cuda)


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
    requires grad); else, where torch's dispatch can change nothing (:func:`_direct_ok`), ``forward`` called directly
    (the op's body: the same plan, outputs and errors, without the custom-op dispatch); else the torch custom op
    ``load_op()`` (imported lazily). ``schedule`` ("parallel" default, or "serial") is checked here (ValueError) before
    any tracing or launch. Returns ``TupleDict(o, final_state)``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"cudnn.linear_attention.{public}: schedule={schedule!r}; accepted {SCHEDULES}")
    if out is not None:
        from .delta_rule_op import forward_only_guard

        forward_only_guard(public, q, k, v, g, beta, initial_state)
        o, final = forward(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out, schedule=schedule)
        return TupleDict(o=o, final_state=final)
    if _direct_ok((q, k, v, g, beta, initial_state, cu_seqlens)):
        o, final = forward(q, k, v, g, beta, scale, bool(use_qk_l2norm_in_kernel), initial_state, bool(output_final_state), cu_seqlens, schedule=schedule)
        return TupleDict(o=o, final_state=final)
    op = load_op()
    o, final = op(q, k, v, g, beta, scale, bool(use_qk_l2norm_in_kernel), initial_state, bool(output_final_state), cu_seqlens, schedule)
    return TupleDict(o=o, final_state=final if output_final_state else None)
