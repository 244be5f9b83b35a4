"""Host side of the chunk-parallel forward schedule (``schedule="parallel"`` on the delta-rule adapters): the
chunk-slot count, the workspace size and carving, the three compiles and the three launches.

The schedule is three kernels on one stream: prep (the family's ``chunk_parallel_prep_kernel.py``, grid [slots, H]),
state pass (``kda/chunk_parallel_state_kernel.py``, grid [N, H, V / 64], or [N, H, V / v_slice] for the narrow-slice
variants) and output (``kda/chunk_parallel_out_kernel.py``,
grid [slots, H, V / 64]; both family-agnostic), exchanging per-chunk operands through the caller's
workspace (R2; ``_device/chunk_parallel.py`` lists the arrays). The slot count comes from the token total and the
sequence count alone (``T // 64 + N`` varlen, ``N ceil(L / 64)`` dense): no device value is read (Rule 3).
Opt-in variants (``PARALLEL_VARIANTS``, ``set_parallel_options``) pick other KDA prep kernel modules (two warpgroups,
the restructured prep) and the three-stage state pass through extra compile-key fields.
Everything here is metadata arithmetic; nothing converts, copies, allocates or synchronizes (Rules 1-3). Imports
neither torch nor cutlass at module import time.
"""

from __future__ import annotations

from dataclasses import dataclass

from cudnn.workspace import Workspace, ws_align

CHUNK = 64
SCHEDULES = ("serial", "parallel")
#: The schedule of the public ops (``gated_delta_net`` / ``kimi_delta_attention``, their torch custom ops' ``schedule``
#: default) and of the graph engines; the adapters keep "serial" as theirs (the parallel schedule needs the caller's
#: workspace). Flipping the default is this line.
DEFAULT_SCHEDULE = "serial"

#: (name, bytes per element, elements per slot and head as a function of D) of every workspace array, in carve order.
_ARRAYS = (
    ("w", 2, lambda d: CHUNK * d),
    ("u", 4, lambda d: CHUNK * d),
    ("kd", 2, lambda d: CHUNK * d),
    ("qg", 2, lambda d: CHUNK * d),
    ("p", 2, lambda d: CHUNK * CHUNK),
    ("ge", 4, lambda d: d),
    ("vnt", 2, lambda d: CHUNK * d),
    ("h", 2, lambda d: d * d),
    ("rf", 4, lambda d: CHUNK),
)
_CNAMES = {2: "BFloat16", 4: "Float32"}


@dataclass(frozen=True)
class ParallelExtents:
    """Runtime extents of one parallel launch: sequences, dense length (0 varlen), chunks per dense sequence (1
    varlen: unused) and chunk slots."""

    n_seqs: int
    seq_len: int
    chunks_per_seq: int
    slots: int


def parallel_extents(total_tokens: int, n_seqs: int, seq_len: int, varlen: bool) -> ParallelExtents:
    """The chunk-slot extents of a batch from its token total ``T``, sequence count ``N`` and (dense) length ``L``."""
    if varlen:
        return ParallelExtents(n_seqs, 0, 1, total_tokens // CHUNK + n_seqs)
    cps = max(1, -(-seq_len // CHUNK))
    return ParallelExtents(n_seqs, seq_len, cps, n_seqs * cps)


def workspace_bytes(slots: int, heads: int, d: int) -> int:
    """Bytes of workspace the parallel schedule needs for ``slots`` chunk slots, ``heads`` value heads, K = V = ``d``."""
    return sum(ws_align(slots * heads * per(d) * size) for _, size, per in _ARRAYS)


def workspace_pointers(workspace, required: int, owner: str, device, slots: int, heads: int, d: int) -> list:
    """Validate the caller's ``workspace`` (Workspace.over: device, dtype, size, alignment) and return cute pointers to
    its arrays in carve order. Address arithmetic only (no view, no allocation)."""
    import cutlass
    import cutlass.cute as cute

    ws = Workspace.over(workspace, required, owner, device=device)
    base = ws.data_ptr
    ptrs = []
    offset = 0
    for _, size, per in _ARRAYS:
        ptrs.append(cute.runtime.make_ptr(getattr(cutlass, _CNAMES[size]), base + offset, cute.AddressSpace.gmem, assumed_align=128))
        offset += ws_align(slots * heads * per(d) * size)
    return ptrs


def fake_workspace_pointers() -> list:
    """Placeholder workspace pointers for ``cute.compile``."""
    from .launch import fake_gmem_ptr

    return [fake_gmem_ptr(_CNAMES[size], 128) for _, size, _ in _ARRAYS]


#: Named opt-in variants of the parallel schedule (A/B knobs for the GPU run; the default plan uses none): extra fields
#: of the prep / state-pass compile keys. Each is its own compile artifact; the default keys (and PTX) are unchanged.
#:
#: All of them are KDA's (``KdaParallelPrepKey`` fields); GDN's prep key has none of them (a ValueError at compile).
#:
#: - ``wg2``: the prep kernel with two warpgroups per CTA (``KdaParallelPrepKey.warpgroups = 2``): bitwise the default.
#: - ``wg2fx``: ``wg2`` with the approximate per-element exps (``fast_exp``): rounding-level changes only.
#: - ``wg2fx-s3``: ``wg2fx`` plus the three-stage state pass.
#: - ``tc`` (KDA): the restructured two-warpgroup prep kernel (``kda/chunk_parallel_prep_tc_kernel.py``, selected by
#:   ``KdaParallelPrepKey.restructured``, with ``warpgroups = 2`` and ``fast_exp``): gates as log2, one vectorized element pass, K'_I for the live rows
#:   only, the solve by all 256 threads, beta folded into the inverse and MN-major B operands for U and W. Rounding-level
#:   changes only (tested against the fp32 recurrence); ``tc-s3`` adds the three-stage state pass.
#: - ``v32`` / ``v16`` (KDA and GDN: a state-pass field only): the state pass on 32- / 16-row value slices
#:   (``KdaParallelStateKey.v_slice``, ``kda/chunk_parallel_state_narrow_kernel.py``), grid [N, H, V / 32] or
#:   [N, H, V / 16] instead of [N, H, V / 64]; fp32-accumulation-order changes only. ``tc-v32`` / ``tc-v16`` (KDA) add the ``tc`` prep.
PARALLEL_VARIANTS = {
    "wg2": {"prep": {"warpgroups": 2}},
    "wg2fx": {"prep": {"warpgroups": 2, "fast_exp": True}},
    "wg2fx-s3": {"prep": {"warpgroups": 2, "fast_exp": True}, "state": {"stages": 3}},
    "tc": {"prep": {"warpgroups": 2, "fast_exp": True, "restructured": True}},
    "tc-s3": {"prep": {"warpgroups": 2, "fast_exp": True, "restructured": True}, "state": {"stages": 3}},
    "v32": {"state": {"v_slice": 32}},
    "v16": {"state": {"v_slice": 16}},
    "tc-v32": {"prep": {"warpgroups": 2, "fast_exp": True, "restructured": True}, "state": {"v_slice": 32}},
    "tc-v16": {"prep": {"warpgroups": 2, "fast_exp": True, "restructured": True}, "state": {"v_slice": 16}},
}


def set_parallel_options(plan, variant) -> None:
    """Give the parallel-schedule adapter ``plan`` (before ``compile()``) the extra compile-key fields of ``variant``
    (a name of :data:`PARALLEL_VARIANTS` or a ``{"prep": {...}, "state": {...}}`` dict) on top of its own knobs: the
    A/B hook of the tests and benchmarks for options the adapter has no attribute for yet. Plan-time only (Rule 4):
    the fields join the compile keys; ValueError for an unknown name, and at compile for a field the family's kernel keys
    do not have (GDN takes none of the named variants) or a combination the kernels do not build. With two prep
    warpgroups an fp32 ``g`` is bound 4-byte aligned (one 32-bit load per element; execute checks the address)."""
    if isinstance(variant, str):
        if variant not in PARALLEL_VARIANTS:
            raise ValueError(f"parallel variant {variant!r}; accepted {tuple(PARALLEL_VARIANTS)}")
        variant = PARALLEL_VARIANTS[variant]
    prep_extra, state_extra = dict(variant.get("prep", {})), dict(variant.get("state", {}))
    cls = type(plan)
    prep_base, state_base = cls._prep_options, cls._state_options

    def check_fields(extra, key_t, what):
        from dataclasses import fields

        unknown = sorted(set(extra) - {f.name for f in fields(key_t)})
        if unknown:
            raise ValueError(f"{cls.__name__}: {what} key options {unknown} are not available for this family ({key_t.__name__})")

    def prep_options():
        check_fields(prep_extra, cls._parallel_kernel_classes()[0][0], "parallel prep")
        opts = {**prep_base(plan), **prep_extra}
        if opts.get("warpgroups", 1) != 1 and (opts.get("prefetch") or opts.get("two_per_sm")):
            raise ValueError(f"{cls.__name__}: prep warpgroups={opts['warpgroups']} takes neither parallel_prefetch nor parallel_prep_two_per_sm")
        return opts

    def state_options():
        check_fields(state_extra, cls._parallel_kernel_classes()[1][0], "parallel state-pass")
        return {**state_base(plan), **state_extra}

    def g_align():
        from cudnn.datatypes import data_type

        if prep_options().get("warpgroups", 1) != 1 and plan.g.dtype == data_type.FLOAT:
            return 4  # the two-warpgroup prep kernels read an fp32 g by 32-bit loads (execute checks the address)
        return cls._g_align(plan)

    plan._prep_options = prep_options
    plan._state_options = state_options
    plan._g_align = g_align


def compile_parallel(
    kernels,
    family: str,
    d: int,
    g_dtype: str,
    beta_dtype: str,
    l2norm: bool,
    varlen: bool,
    has_initial: bool,
    has_final: bool,
    row_scaled: bool = False,
    prep_options: dict | None = None,
    g_align: int = 2,
    state_options: dict | None = None,
):
    """``(prep, state, out)`` compiled through ``kernel_cache`` from the family's ``kernels`` = ((PrepKey, Prep),
    (StateKey, State), (OutKey, Out)); each key holds plan-time values only (Rule 4). ``row_scaled``: the output
    kernel applies per-row factors to ``Q S0^T`` (Gated DeltaNet's scalar decay). ``prep_options``: extra fields of
    the prep key (opt-in tuning, e.g. KDA's ``prefetch``), ``state_options`` of the state-pass key (``stages``); ``g_align``: the byte alignment the prep kernel assumes
    for ``g`` (2, or 4 for an fp32 ``g`` read by 32-bit loads; execute passes the same and checks the address)."""
    from cudnn.kernel_cache import kernel_cache

    (prep_key_t, prep_t), (state_key_t, state_t), (out_key_t, out_t) = kernels
    prep_key = prep_key_t(head_dim=d, g_dtype=g_dtype, beta_dtype=beta_dtype, l2norm=l2norm, varlen=varlen, **(prep_options or {}))
    state_key = state_key_t(head_dim=d, varlen=varlen, has_initial=has_initial, has_final=has_final, **(state_options or {}))
    out_key = out_key_t(head_dim=d, varlen=varlen, row_scaled=row_scaled)

    def build_prep():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Float32, Int32, Int64

        from .launch import fake_gmem_ptr as fp

        ptrs = [fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 16), fp(g_dtype, g_align), fp(beta_dtype, 2), fp("Int32", 4) if varlen else None]
        kernel_t = prep_t.for_key(prep_key) if hasattr(prep_t, "for_key") else prep_t  # a key option may pick another kernel module
        return cute.compile(kernel_t(prep_key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0))

    def build_state():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32

        from .launch import fake_gmem_ptr as fp

        ptrs = [fp("Int32", 4) if varlen else None, fp("Float32", 4) if has_initial else None, fp("Float32", 4) if has_final else None]
        kernel_t = state_t.for_key(state_key) if hasattr(state_t, "for_key") else state_t  # v_slice may pick the narrow-slice kernel
        return cute.compile(kernel_t(state_key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0))

    def build_out():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32, Int64

        from .launch import fake_gmem_ptr as fp

        return cute.compile(
            out_t(out_key),
            fp("BFloat16", 2),
            fp("Int32", 4) if varlen else None,
            *fake_workspace_pointers(),
            *[Int32(8)] * 6,
            (Int64(8), Int64(8)),
            cuda.CUstream(0),
        )

    return (
        kernel_cache.get_or_compile(prep_key, build_prep, family=family),
        kernel_cache.get_or_compile(state_key, build_state, family=family),
        kernel_cache.get_or_compile(out_key, build_out, family=family),
    )


def launch_parallel(compiled, ptrs: dict, ws_ptrs: list, ext: ParallelExtents, T: int, heads: int, qk_heads: int, scale: float, strides: list, stream) -> None:
    """The three launches on ``stream``. ``ptrs``: cute pointers q, k, v, g, beta, o, cu, h0, ht (None where the plan
    has none); ``strides``: (token, head) of q, k, v, o."""
    prep, state, out = compiled
    p = ptrs
    prep(
        p["q"],
        p["k"],
        p["v"],
        p["g"],
        p["beta"],
        p["cu"],
        *ws_ptrs,
        T,
        ext.n_seqs,
        ext.seq_len,
        ext.chunks_per_seq,
        ext.slots,
        heads,
        qk_heads,
        scale,
        *strides[:3],
        stream,
    )
    state(p["cu"], p["h0"], p["ht"], *ws_ptrs, ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots, heads, stream)
    out(p["o"], p["cu"], *ws_ptrs, T, ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots, heads, strides[3], stream)
