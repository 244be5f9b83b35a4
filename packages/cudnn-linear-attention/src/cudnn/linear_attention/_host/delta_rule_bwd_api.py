"""The host side shared by the gated-delta-rule backward adapters (Gated DeltaNet, Kimi Delta Attention).

:class:`DeltaRuleBwdSm90` is the APIBase adapter both backwards subclass: the constructor, plan-time validation
(``check_support``: the forward's own input checks, then the gradients'), the workspace size, the compile step over
the family's launches, and the metadata-only ``execute`` (Rules 1-3, 8) up to the launches. A subclass sets what
differs:

- ``_public`` (the public name, prefix of ``check_support``'s messages), ``_name`` (the class name in ``execute``'s
  messages and the workspace's), ``_gate_per_key`` (g / dg are [.., H, K]: KDA; else [.., H]: GDN);
- ``_forward_class()`` (the family's forward adapter, whose checks the inputs pass), ``_declines(what)`` (what this
  version of the family does not implement), ``compile_key()``, ``_parts(key)`` and ``_build_kernel(part, key)`` (the
  launches and their ``cute.compile``), ``_workspace_bytes(T, N, H, D)`` and ``_launch(...)`` (the workspace past the
  four shared arrays, and the kernels' argument order).

The workspace (recipe R2, from the caller) starts with the four arrays every backward has, in this order: bf16 chunk
states and state gradients [N + T // 64 + 1, H, V, K], bf16 new values and their gradients [T, H, V]; each array is
128-byte aligned (:func:`workspace_bytes`). Imports neither torch nor cutlass.
"""

from __future__ import annotations

import math
from typing import Any

from cudnn.api_base import APIBase, TensorDesc
from cudnn.datatypes import data_type
from cudnn.dsl_gate import require_cutedsl

from .launch import CUTLASS_NAMES as _CNAME
from .launch import gmem_ptr as _gmem_ptr
from .launch import launch_stream as _stream
from .launch import torch_dtype as _torch_dtype
from .plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
CHUNK = 64
VEC = 8
_TARGET_CTAS = 4 * 132  # pass 3 grid target: four waves of one CTA per SM (222 KiB of shared memory each)


def align(n: int) -> int:
    """``n`` rounded up to 128 bytes."""
    return (int(n) + 127) // 128 * 128


def workspace_bytes(T: int, N: int, H: int, D: int, tiles: int = 0, gva: bool = False) -> int:
    """Two bf16 [N + T // 64 + 1, H, D, D] chunk-state arrays, two bf16 [T, H, D], ``tiles`` bf16
    [N + T // 64 + 1, H, 64, 64] per-chunk tiles (Tm, P) and, with ``gva``, two fp32 [T, H, D] dq / dk partials."""
    slots = N + T // CHUNK + 1
    partials = 2 * align(max(T, 1) * H * D * 4) if gva else 0
    return 2 * align(slots * H * D * D * 2) + 2 * align(max(T, 1) * H * D * 2) + tiles * align(slots * H * CHUNK * CHUNK * 2) + partials


#: Index of the forward's ``h`` (every chunk's entering state, bf16 [slots, H, V, K]) among the chunk-parallel
#: forward's workspace arrays (``_device/chunk_parallel.py::WS_ARRAYS``).
FWD_H = 7


#: ``parallel_pass2``'s precompute arrays (``_device/dstates_parallel.py``), in workspace order: (name, torch dtype,
#: elements per (slot, head) in units of D -- 64 for the [64, D] / [D, 64] tiles, 1 for exp(G_C) [D]).
P2_ARRAYS = (
    ("kdn", "bfloat16", CHUNK),
    ("dvl", "float32", CHUNK),
    ("wmt", "bfloat16", CHUNK),
    ("qst", "bfloat16", CHUNK),
    ("dot", "bfloat16", CHUNK),
    ("ge", "float32", 1),
)
_P2_BYTES = {"bfloat16": 2, "float32": 4}


def dstates_workspace_bytes(T: int, N: int, H: int, D: int) -> int:
    """The ``parallel_pass2`` workspace tail: the precompute's arrays (:data:`P2_ARRAYS`) for the backward's
    ``N + T // 64 + 1`` slots."""
    slots = N + T // CHUNK + 1
    return sum(align(slots * H * per * D * _P2_BYTES[dt]) for _, dt, per in P2_ARRAYS)


def build_dstates_chain(key):
    """``parallel_pass2``'s reverse state chain (``_device/dstates_parallel.py``, both families): its ``cute.compile``
    from fake pointers and runtime-extent placeholders (Rule 4; the key fields it reads: ``head_dim``, ``varlen``,
    ``has_initial``, ``has_dfinal``). Called inside a family's ``build_kernel`` closure."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32

    from .._device.dstates_parallel import DeltaRuleBwdDStatesChain
    from .launch import fake_gmem_ptr

    b128, f128 = fake_gmem_ptr("BFloat16", 128), fake_gmem_ptr("Float32", 128)  # the precompute's arrays: workspace pieces
    cu = fake_gmem_ptr("Int32", 4) if key.varlen else None
    dht = fake_gmem_ptr("Float32", 4) if key.has_dfinal else None
    dh0 = fake_gmem_ptr("Float32", 4) if key.has_initial else None
    bf = fake_gmem_ptr("BFloat16", 16)
    return cute.compile(DeltaRuleBwdDStatesChain(key), cu, dht, dh0, b128, f128, b128, b128, b128, f128, bf, bf, *[Int32(8)] * 5, cuda.CUstream(0))


def forward_workspace_bytes(T: int, N: int, H: int, D: int) -> int:
    """The ``parallel_pass1`` workspace tail: the chunk-parallel forward's arrays for ``T // 64 + N`` slots (its varlen
    count, an upper bound of the dense ``N ceil(L / 64)``)."""
    from .chunk_parallel import workspace_bytes as fwd_bytes

    return fwd_bytes(T // CHUNK + N, H, D)


def chunk_groups(T: int, N: int, H: int) -> int:
    """Pass 3's grid z: chunk groups per (sequence, head), from host-known extents only."""
    most = max(1, -(-T // CHUNK))
    return max(1, min(most, -(-_TARGET_CTAS // max(1, N * H))))


def torch_strides(t: Any, rank: int) -> tuple[int, int]:
    """(token, head) strides of a torch [T, H, D] / [B, L, H, D] tensor walked as [B * L, H, D]."""
    st, sh = int(t.stride(-3)), int(t.stride(-2))
    if rank == 4 and t.shape[0] > 1:
        if t.shape[1] == 1:
            st = int(t.stride(0))
        elif t.stride(0) != t.shape[1] * t.stride(1):
            raise ValueError(f"batch stride {t.stride(0)} != L * token stride; the kernels walk [B * L, H, D]")
    return st, sh


def walk(desc: TensorDesc) -> tuple[int, int]:
    """(token, head) strides of a [T, H, D] / [B, L, H, D] descriptor walked as [B * L, H, D]."""
    st, sh = desc.stride[-3], desc.stride[-2]
    if desc.rank == 4 and desc.shape[1] == 1 and desc.shape[0] > 1:
        st = desc.stride[0]
    return st, sh


#: Default of ``plan.parallel_pass1`` (both families; see DeltaRuleBwdSm90.__init__).
PARALLEL_PASS1_DEFAULT = True
#: Default of ``plan.parallel_pass2`` where its requirements hold (``parallel_pass1``; GDN: ``store_tm``).
PARALLEL_PASS2_DEFAULT = True
#: Default of ``plan.fold_prep_tm`` where its requirements hold (``parallel_pass1``; GDN: ``store_tm``).
FOLD_PREP_TM_DEFAULT = True


class ScheduleKnob:
    """A backward schedule knob that follows its requirements: unset (or set to None), ``default()`` where the plan's
    readiness method ``ready`` (default ``_schedule_ready``) returns True, else False; set, the value given (a missing
    requirement is then a ValueError at ``compile_key()``). Read at access time, so the module default can be changed
    after import."""

    def __init__(self, default, ready: str = "_schedule_ready"):
        self.default = default
        self.ready = ready

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, plan, owner=None):
        if plan is None:
            return self
        value = getattr(plan, self.slot, None)
        return bool(self.default()) and getattr(plan, self.ready)() if value is None else bool(value)

    def __set__(self, plan, value):
        setattr(plan, self.slot, value)


class DeltaRuleBwdSm90(APIBase):
    """Chunked gated-delta-rule backward on sm_90a (base of the GDN and KDA backward adapters). Tensors may be torch
    tensors or TensorDescs.

    ``Adapter(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, *, scale=None, use_qk_l2norm_in_kernel=False,
    initial_state=None, dinitial_state=None, dfinal_state=None, cu_seqlens=None)``; ``execute`` takes the same tensors
    positionally (token extents, sequence count and, for a dense batch, B and L may differ from the plan's) and returns
    ``(dq, dk, dv, dg, dbeta, dinitial_state)``.
    """

    _public: str = ""
    _name: str = ""
    _family: str = ""
    _gate_per_key: bool = False
    _compiled_forward = None  # parallel_pass1: the forward's (prep, state pass) artifacts (``_compile_forward_pass1``)

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
        #: Set before compile(); a compile-key field, Rule 4. True (PARALLEL_PASS1_DEFAULT, the default since session 10:
        #: GPU suites and detectors green with it): pass 1 chunk-parallel -- the forward's chunk-parallel prep + state
        #: pass write every chunk's entering state, then one CTA per (chunk, head) writes Tm (KDA: P), Vn
        #: (``kda/`` / ``gdn/bwd_states_parallel_kernel.py``; with ``fold_prep_tm``: copies of the prep's arrays); the
        #: workspace includes the forward's arrays (``forward_workspace_bytes``). It serves every configuration the
        #: serial pass 1 does (its one extra condition, a 4-byte-aligned fp32 ``g``, holds for every fp32 torch tensor).
        #: False: the serial pass 1 (and, unless set explicitly, no ``parallel_pass2`` / ``fold_prep_tm``).
        self.parallel_pass1 = PARALLEL_PASS1_DEFAULT
        self._compiled_parallel_pass2 = None

    #: Pass 2 chunk-parallel (set before compile(); a compile-key field; requires ``parallel_pass1``, GDN also
    #: ``store_tm``): a per-(chunk, head) precompute of the reverse chain's operands
    #: (``{kda,gdn}/bwd_dstates_parallel_kernel.py``), then the narrow reverse state chain (``_device/dstates_parallel.py``);
    #: ``dstates_workspace_bytes`` more workspace (``scratch_workspace_bytes()`` includes it).
    parallel_pass2 = ScheduleKnob(lambda: PARALLEL_PASS2_DEFAULT)
    #: Pass 1b as copies (set before compile(); a compile-key field; requires ``parallel_pass1``, GDN also ``store_tm``):
    #: the forward prep of pass 1a is compiled with its key's ``bwd_tm`` (it also writes bf16 Tm into its ``qg`` tiles)
    #: and pass 1b copies ``h``, Tm (KDA: and ``p``, ``vnt``) into the backward's arrays instead of recomputing them.
    fold_prep_tm = ScheduleKnob(lambda: FOLD_PREP_TM_DEFAULT)

    def _schedule_ready(self) -> bool:
        """Whether the requirements of ``parallel_pass2`` and ``fold_prep_tm`` hold (``parallel_pass1``; GDN adds
        ``store_tm``): unset, those knobs are their defaults only then."""
        return bool(self.parallel_pass1)

    # -- family hooks -------------------------------------------------------------------------------
    def _forward_class(self):
        raise NotImplementedError

    def _declines(self, what: str) -> None:
        """NotImplementedError for what this version of the family does not implement (nothing by default)."""

    def compile_key(self):
        raise NotImplementedError

    def _key_fields(self) -> dict:
        """The compile-key fields both families' keys have (plan-time values only, Rule 4). ValueError for
        ``parallel_pass2`` without ``parallel_pass1`` (its precompute reads the chunk-parallel pass 1's arrays)."""
        if self.parallel_pass2 and not self.parallel_pass1:
            raise ValueError(f"{self._name}: parallel_pass2 requires parallel_pass1 (set plan.parallel_pass1 = True as well)")
        return dict(
            head_dim=self.q.shape[-1],
            g_dtype=_CNAME[self.g.dtype],
            beta_dtype=_CNAME[self.beta.dtype],
            varlen=self.cu_seqlens is not None,
            has_initial=self.initial_state is not None,
            has_dfinal=self.dfinal_state is not None,
            l2norm=self.l2norm,
            gva=self.q.shape[-2] != self.v.shape[-2],
        )

    def _parts(self, key) -> tuple[str, ...]:
        raise NotImplementedError

    def _cache_key(self, part: str, key):
        """The compile key ``part`` is cached under (``key`` by default; a family drops the key fields a part's kernel
        does not read, so an opt-in plan reuses the default artifacts of its unchanged passes)."""
        return key

    def _build_kernel(self, part: str, key):
        raise NotImplementedError

    def _workspace_bytes(self, T: int, N: int, H: int, D: int) -> int:
        raise NotImplementedError

    def _pass1_prep_options(self) -> dict:
        """Extra fields of the family forward prep's compile key for ``parallel_pass1`` (none by default; KDA's
        ``fold_prep_tm``: ``{"bwd_tm": True}``)."""
        return {}

    def _pass1_g_align(self) -> int:
        """Byte alignment the family's chunk-parallel forward prep assumes for ``g`` (``parallel_pass1``)."""
        return 2

    def _compile_forward_pass1(self) -> None:
        """``parallel_pass1``: the family forward's chunk-parallel prep and state pass, compiled through its own keys and
        cache family (one artifact for both directions), into ``self._compiled_forward``; None otherwise."""
        self._compiled_forward = None
        if not self.parallel_pass1:
            return
        from .chunk_parallel import compile_parallel

        fwd = self._forward_class()
        f = self._key_fields()
        self._compiled_forward = compile_parallel(
            fwd._parallel_kernel_classes(),
            fwd._family,
            f["head_dim"],
            f["g_dtype"],
            f["beta_dtype"],
            f["l2norm"],
            f["varlen"],
            f["has_initial"],
            False,
            row_scaled=not self._gate_per_key,
            prep_options=self._pass1_prep_options(),  # fold_prep_tm (KDA): the backward-only prep option
            g_align=self._pass1_g_align(),
            state_options={},
            out_options={},
        )[:2]

    def _carve_forward_pass1(self, ws, t: dict, ext: tuple):
        """``parallel_pass1``: ``(extents, workspace pointers, g alignment)`` of the forward's arrays in the workspace
        tail, validated before any launch (``g``'s alignment: ValueError)."""
        from .chunk_parallel import parallel_extents, workspace_pointers
        from .chunk_parallel import workspace_bytes as fwd_bytes

        T, n_seqs, seq_len, H, _, _ = ext
        q = t["q"]
        D = int(q.shape[-1])
        fwd_ws = ws.take(forward_workspace_bytes(T, n_seqs, H, D), "uint8")
        fext = parallel_extents(T, n_seqs, seq_len, t["cu_seqlens"] is not None)
        fwd_ptrs = workspace_pointers(fwd_ws, fwd_bytes(fext.slots, H, D), f"{self._name}.execute", q.device, fext.slots, H, D)
        g_align = self._pass1_g_align()
        if t["g"].data_ptr() % g_align:
            raise ValueError(f"{self._name}.execute: parallel_pass1 needs g {g_align}-byte aligned (the forward prep's loads), got 0x{t['g'].data_ptr():x}")
        return fext, fwd_ptrs, g_align

    def _launch_forward_pass1(self, fext, fwd_ptrs, g_align: int, t: dict, strides: dict, ext: tuple, stream) -> None:
        """``parallel_pass1``: the forward's prep and state pass (``_host/chunk_parallel.py::launch_parallel``'s first
        two launches, argument for argument): every chunk's entering state -> the forward's ``h``."""
        from .chunk_parallel import launch_prep_state

        T, _, _, H, Hk, _ = ext
        bf, f32, i32 = data_type.BFLOAT16, data_type.FLOAT, data_type.INT32
        ptrs = {
            "q": _gmem_ptr(t["q"], bf, 16),
            "k": _gmem_ptr(t["k"], bf, 16),
            "v": _gmem_ptr(t["v"], bf, 16),
            "g": _gmem_ptr(t["g"], self.g.dtype, g_align),
            "beta": _gmem_ptr(t["beta"], self.beta.dtype, 2),
            "cu": _gmem_ptr(t["cu_seqlens"], i32, 4),
            "h0": _gmem_ptr(t["initial_state"], f32, 4),
            "ht": None,
        }
        prep, fstate = self._compiled_forward
        launch_prep_state(prep, fstate, ptrs, fwd_ptrs, fext, T, H, Hk, float(self.scale), [strides["q"], strides["k"], strides["v"]], stream)

    def _carve_dstates_pass2(self, ws, ext: tuple) -> list:
        """``parallel_pass2``: the precompute's arrays (:data:`P2_ARRAYS`, after every other array) carved from ``ws``;
        torch views in that order."""
        T, _, _, H, _, slots = ext
        D = int(self.q.shape[-1])
        return [ws.take(slots * H * per * D, dt) for _, dt, per in P2_ARRAYS]

    def _launch_dstates_chain(self, chain, p2, t: dict, ext: tuple, stream) -> None:
        """``parallel_pass2``'s launch 2: the reverse state chain (``_device/dstates_parallel.py``), both families."""
        T, n_seqs, seq_len, H, _, slots = ext
        bf, f32, i32 = data_type.BFLOAT16, data_type.FLOAT, data_type.INT32
        kdn, dvl, wmt, qst, dot, ge = (_gmem_ptr(a, f32 if a.dtype.itemsize == 4 else bf, 128) for a in p2)
        chain(
            _gmem_ptr(t["cu_seqlens"], i32, 4), _gmem_ptr(t["dfinal_state"], f32, 4), _gmem_ptr(t["dinitial_state"], f32, 4),
            kdn, dvl, wmt, qst, dot, ge, _gmem_ptr(t["ws_dh"], bf, 16), _gmem_ptr(t["ws_dvn"], bf, 16), T, n_seqs, seq_len, H, slots, stream,
        )  # fmt: skip

    def _launch(self, kernels, ws, t: dict, strides: dict, ext: tuple, stream_of) -> None:
        """Carve the family's workspace past the shared arrays from ``ws``, then ``stream_of()`` and the launches.
        ``t``: the execute tensors by name plus ``ws_h``, ``ws_dh``, ``ws_vn``, ``ws_dvn`` (torch views of the workspace);
        ``strides``: (token, head) strides of q, k, v, do, dq, dk, dv; ``ext``: (T, N, seq_len, H, Hk, slots)."""
        raise NotImplementedError

    # -- plan ---------------------------------------------------------------------------------------
    def check_support(self) -> bool:
        what = f"{self._public} backward"
        require_cutedsl(f"cudnn.linear_attention.{what}", CUTEDSL_FLOOR)
        # The forward's own metadata checks for the inputs (do stands where o does; dfinal_state where final_state does).
        fwd = self._forward_class()(
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
        self._declines(what)
        for t in (do,):
            st, sh = walk(t)
            self._decline_if(st % VEC or sh % VEC, f"{what}: {t.describe()} token / head strides must be multiples of {VEC} elements (16-byte loads)")
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
        lead = (*q.shape[: q.rank - 2], v.shape[-2])
        for grad, like in ((self.dg, self.g), (self.dbeta, self.beta)):
            self._value_error_if(grad is None, f"{what}: dg and dbeta are required outputs")
            self._check_dtype(grad, (data_type.FLOAT,), what)
            if self._gate_per_key:
                self._value_error_if(grad.shape != like.shape, f"{what}: {grad.describe()} must have the shape of {like.describe()}")
            else:
                self._value_error_if(grad.shape != lead, f"{what}: {grad.describe()} must have shape {lead}")
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

    def workspace_bytes_for(self, T: int, N: int) -> int:
        """Workspace bytes of one ``execute`` over T tokens in N sequences with this plan's heads and head dim."""
        return self._workspace_bytes(int(T), int(N), int(self.v.shape[-2]), int(self.q.shape[-1]))

    def scratch_workspace_bytes(self) -> int:
        """Workspace bytes for the plan's own token total and sequence count (``workspace_bytes(T, N, H, D)``)."""
        self._ensure_support_checked()
        return self.workspace_bytes_for(*self._plan_tokens())

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()
        from cudnn.kernel_cache import kernel_cache

        self._compiled_kernel = tuple(
            kernel_cache.get_or_compile((part, self._cache_key(part, key)), self._build_kernel(part, key), family=self._family) for part in self._parts(key)
        )
        self._compiled_parallel_pass2 = bool(self.parallel_pass2)

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
        """The plan's launches on ``current_stream``; returns ``(dq, dk, dv, dg, dbeta, dinitial_state)``."""
        what = f"{self._name}.execute"
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
            st, sh = torch_strides(t, rank)
            if name in ("q", "k", "v", "do") and (st % VEC or sh % VEC or t.data_ptr() % 16):
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
        if bool(self.parallel_pass1) != (self._compiled_forward is not None):
            raise ValueError(f"{what}: parallel_pass1 was changed after compile(); call compile() again")
        if bool(self.parallel_pass2) != bool(self._compiled_parallel_pass2):
            raise ValueError(f"{what}: parallel_pass2 was changed after compile(); call compile() again")
        T = int(q.shape[0]) if rank == 3 else int(q.shape[0]) * int(q.shape[1])
        H, D, Hk = int(v.shape[-2]), int(q.shape[-1]), int(q.shape[-2])
        slots = n_seqs + T // CHUNK + 1
        from cudnn.workspace import Workspace

        ws = Workspace.over(workspace, self.workspace_bytes_for(T, n_seqs), self._name, device=q.device)
        tensors = dict(q=q, k=k, v=v, g=g, beta=beta, do=do, dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta)
        tensors.update(initial_state=initial_state, dinitial_state=dinitial_state, dfinal_state=dfinal_state, cu_seqlens=cu_seqlens)
        # the four arrays every backward has, in this order; the family takes the rest
        tensors.update(ws_h=ws.take(slots * H * D * D, "bfloat16"), ws_dh=ws.take(slots * H * D * D, "bfloat16"))
        tensors.update(ws_vn=ws.take(max(T, 1) * H * D, "bfloat16"), ws_dvn=ws.take(max(T, 1) * H * D, "bfloat16"))
        # ``_launch`` carves the rest of the workspace before it asks for the stream (the order the detectors plant in)
        self._launch(self._compiled_kernel, ws, tensors, strides, (T, n_seqs, seq_len, H, Hk, slots), lambda: _stream(current_stream, q.device))
        return dq, dk, dv, dg, dbeta, dinitial_state
