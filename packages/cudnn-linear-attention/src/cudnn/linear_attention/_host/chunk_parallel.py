"""Host side of the chunk-parallel forward schedule (``schedule="parallel"`` on the delta-rule adapters): the
chunk-slot count, the workspace size and carving, the three compiles and the three launches.

The schedule is three kernels on one stream: prep (the family's ``chunk_parallel_prep_kernel.py`` key; GDN's routes to
``gdn/chunk_parallel_prep_tc_kernel.py`` by default, grid [slots, H]), state pass (``kda/chunk_parallel_state_kernel.py``
key, grid [N, H, V / 32]: TMA, four stages) and output (``kda/chunk_parallel_out_kernel.py`` key, routed to
``kda/chunk_parallel_out_persistent_kernel.py``: one CTA per (chunk, head) over the whole V; both family-agnostic),
exchanging per-chunk operands through the caller's workspace (R2; ``_device/chunk_parallel.py`` lists the arrays).
The slot count comes from the token total and the sequence count alone (``T // 64 + N`` varlen, ``N ceil(L / 64)``
dense): no device value is read (Rule 3). Opt-in variants (``PARALLEL_VARIANTS``, ``set_parallel_options``) add
state-pass, output and prep compile-key fields. With the state-pass key's ``fuse_out`` (the ``fso`` variants, session 8)
the schedule is two kernels: prep, then the fused state pass + output (``kda/chunk_parallel_state_out_kernel.py``), which
takes o, T and o's strides and writes neither ``h`` nor ``vnt`` (their workspace regions stay carved, unused); no
output-kernel compile or launch (``compile_parallel`` returns None in its place).
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
#: workspace). "parallel" since session 5: at T = 8k, H = 16 the parallel schedule runs KDA at 452.6 GB/s and GDN at
#: 221.3 where the serial kernels ran 21.7 and 43.4 (docs/benchmarks/linear_attention_{kda,gdn}_quick.md, sessions 4-5).
DEFAULT_SCHEDULE = "parallel"

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


#: The ready flags of the overlapped output (``signal_out`` / ``wait_slices``, the ``ovl`` variant): int32 per (slot,
#: head) and 16 value rows, carved after the arrays (``_device/chunk_parallel.py``, "the ready flags").
READY_FLAG_ROWS = 16


def workspace_offsets(slots: int, heads: int, d: int) -> tuple:
    """Byte offsets of the workspace arrays in carve order and, last, the total (:func:`workspace_bytes`, which includes
    the ready flags after the arrays: :func:`ready_flags_offset`): the one place the carve is computed."""
    offsets = []
    offset = 0
    for _, size, per in _ARRAYS:
        offsets.append(offset)
        offset += ws_align(slots * heads * per(d) * size)
    return (*offsets, offset + ws_align(slots * heads * (d // READY_FLAG_ROWS) * 4))


def ready_flags_offset(slots: int, heads: int, d: int) -> int:
    """Byte offset of the ready flags (after the arrays of :func:`workspace_offsets`, the last region of the carve)."""
    return workspace_offsets(slots, heads, d)[-1] - ws_align(slots * heads * (d // READY_FLAG_ROWS) * 4)


def workspace_bytes(slots: int, heads: int, d: int) -> int:
    """Bytes of workspace the parallel schedule needs for ``slots`` chunk slots, ``heads`` value heads, K = V = ``d``."""
    return workspace_offsets(slots, heads, d)[-1]


def workspace_pointers(workspace, required: int, owner: str, device, slots: int, heads: int, d: int) -> list:
    """Validate the caller's ``workspace`` (Workspace.over: device, dtype, size, alignment) and return cute pointers to
    its arrays in carve order. Address arithmetic only (no view, no allocation)."""
    base = Workspace.over(workspace, required, owner, device=device).data_ptr
    return workspace_pointers_at([base + off for off in workspace_offsets(slots, heads, d)[:-1]])


def workspace_pointers_at(addrs) -> list:
    """Cute pointers (the DSL launch route) to the workspace arrays at integer ``addrs`` (carve order)."""
    import cutlass
    import cutlass.cute as cute

    return [
        cute.runtime.make_ptr(getattr(cutlass, _CNAMES[size]), a, cute.AddressSpace.gmem, assumed_align=128)
        for (_, size, _), a in zip(_ARRAYS, addrs, strict=True)
    ]


def ready_flags_pointer_at(addr: int):
    """The cute pointer (the DSL launch route) to the ready flags at integer ``addr``."""
    import cutlass
    import cutlass.cute as cute

    return cute.runtime.make_ptr(cutlass.Int32, addr, cute.AddressSpace.gmem, assumed_align=128)


def fake_workspace_pointers() -> list:
    """Placeholder workspace pointers for ``cute.compile``."""
    from .launch import fake_gmem_ptr

    return [fake_gmem_ptr(_CNAMES[size], 128) for _, size, _ in _ARRAYS]


#: The session-5 kernels that the session-6 key defaults replaced (H200, T = 8192, H = 16, K = V = 128; per kernel,
#: docs/benchmarks/linear_attention_kernels.md): the cp.async state pass at two stages (144.5 us; the default, TMA four
#: stages deep with TMA stores: 112.6-112.8), the [slots, H, V / 64] output kernel (83.8 us; the default V-wide one:
#: 47.0-47.4) and GDN's one-warpgroup prep kernel (369.0 us; the default restructured one at three CTAs per SM: 133.3).
_STATE_BASE = {"tma": False, "tma_store": False, "stages": 2}
_OUT_BASE = {"v_wide": False}
#: KDA's prep without the session-8 staged stores (``staged_kd`` / ``staged_w``, default on since the session-8 A/B).
_KDA_UNSTAGED = {"staged_kd": False, "staged_w": False}
_GDN_PREP_BASE = {"restructured": False, "tc_ctas_per_sm": 2, "staged_w": False}

#: Named variants of the parallel schedule (``set_parallel_options``): extra fields of the state-pass / output compile
#: keys (``KdaParallelStateKey`` / ``KdaParallelOutKey``: both kernels are family-agnostic, so KDA and GDN take them) and
#: of the family's prep key. Each is its own compile artifact; the default keys (and PTX) are not touched by them.
#:
#: - ``state-base`` / ``out-base``: the session-5 state pass (cp.async, two stages) / output kernel ([slots, H, V / 64]):
#:   the A/B baselines of the benchmark and the bitwise references of the tests (bitwise the defaults).
#: - ``base`` (both families): both of them, i.e. KDA's session-5 default plan.
#: - ``gdn-prep-base`` (GDN only): the one-warpgroup prep kernel (``GdnParallelPrepKey.restructured = False``), with which
#:   the parallel outputs are the serial kernel's bit for bit; ``gdn-base``: GDN's session-5 default plan.
#: - ``kp5`` / ``kn`` (KDA only): the session-5 prep kernel (none of the session-6 prep options: 205.9 us) / with
#:   ``narrow_ap`` only (193.5); rounding-level changes.
#: - ``kp6`` (KDA only): the session-6 first default prep (``narrow_ap`` + ``ref_table``, without ``tiled_solve`` /
#:   ``lean_gates``: 182.8 vs 174.9 us), bitwise the default (``kda/chunk_parallel_prep_kernel.py``); the A/B baseline.
#: - ``fso`` (both families; session 8; H200: wins at H = 64, T = 32k, -7/-8% total, ties / loses at H = 16): the fused state pass + output (``fuse_out`` on the state-pass
#:   key, three stages: qg and p join each stage, ~64 KB at K = 128, v_slice = 32; ``row_scaled`` set from the family by
#:   :func:`compile_parallel`): two kernels, the state pass no longer writes h / vnt and the output kernel (which read
#:   them back with qg and p) is not launched: ~96 KB less workspace traffic per chunk and head at K = 128. Rounding-level
#:   change of o (the same products at WGMMA N = v_slice); the final state is the default's bit for bit (same chain).
#:   ``fso-w2`` (session 8; the plan-time default where :func:`fused_schedule_wins`): the same kernel with two consumer
#:   warpgroups per CTA (``consumer_wgs`` = 2: one stage ring of -Wm / kd / qg / p / exp(G_C) / rf shared by both, U / S0
#:   / o per warpgroup; 2 x v_slice value columns per CTA, so half the CTAs: 128 = one wave at H = 64 on 132 SMs) at two
#:   stages (three do not fit: ~73 KB per stage + 32 KB). H200, T = 32k, H = 64: state+out 930.0 us (KDA) / 947.8 (GDN)
#:   against fso's 1836.2 / 1860.8 and the unfused 1573.7 + 668.9 / 1589.1 + 671.2; at T = 8k, H = 16 it loses (229.0
#:   vs 112.8 + 46.9: 32 CTAs), hence the rule (docs/benchmarks/linear_attention_kernels_s8_*.md). ``fso`` and
#:   ``fso-s2`` (the one-warpgroup kernel at three / two stages) stay as the tests' bitwise references of ``fso-w2``.
#: - ``three``: the three kernels one after the other, whatever the plan-time rules say (no fused pair, no overlap: a
#:   variant is exactly what it names); the A/B baseline of both defaults.
#: - ``ovl`` (both families; session 30): the three kernels with the output kernel beside the state pass
#:   (``signal_out`` on the state-pass key; :func:`compile_parallel` sets the output key's ``wait_slices``): the output
#:   grid is launched with PDL and each of its CTAs waits on the chunk's ready flags. Bitwise ``three``.
#: - ``stsm`` / ``fso-w2-stsm`` (both families; session 30): the narrow state pass's / the fused pair's per-chunk bf16
#:   copies (Vn^T, S0; and o) by ``stmatrix`` (``stmatrix`` on the state-pass key). Bitwise ``three`` / ``fso-w2``.
#:   ``ovl-stsm``: both (the overlap default since session 31, :data:`OVERLAP_VARIANT`). H200, session 31 (CUDA events
#:   around the three kernels, T = 8k, H = 16, docs/benchmarks/la_s31/call1/): KDA 278-281 us (``ovl-stsm``) / 287-291
#:   (``ovl``) / 334-341 (``stsm``: its state pass alone is slower, 130 vs 113 us) / 316-317 (``three``); GDN 248-254 /
#:   258-311 / 300-308 / 284-285; KDA T = 32k: 1016-1023 vs 1190-1191.
#: - ``kp7`` (KDA) / ``gdn-prep7`` (GDN): the prep without the session-8 staged stores (``staged_kd`` / ``staged_w``: kd
#:   and -Wm through shared memory as 16-byte rows, ``kda/chunk_parallel_prep_staged.py``; default on since the session-8
#:   A/B: KDA prep 2270.5 vs 2587.8 us at T = 32k, H = 64 and 153.8 vs 175.0 at T = 8k, H = 16; GDN 1891.3 vs 2065.5 and
#:   120.2 vs 135.5, docs/benchmarks/linear_attention_kernels_s8_*.md, as ``kp8`` / ``gsw``); bitwise the default. The
#:   older KDA baselines (``kp5``, ``kn``, ``kp6``) and ``gdn-prep-base`` turn them off too.
#:
#: Session 8 removed ``ub16`` / ``fso-ub16`` (U stored as bf16: prep +6-7%, the state pass unchanged, the fused kernel
#: slower: docs/benchmarks/linear_attention_kernels_ub16_*.md).
#:
#: Session 6 made the winners the key defaults and removed the other names: ``v32`` (the default width), ``v16`` / ``v64``
#: (no faster: 147.3 / 205.9 vs 147.7 us), ``s3`` / ``s4`` / ``tma`` / ``tma-s3`` / ``tma-st`` / ``tma-st-s3`` (slower
#: than ``tma-st-s4``, now the default), ``ow`` (the default), ``oper`` / ``owp`` / ``gtc3-owp`` (the persistent output
#: kernel: 48.5 / 51.2 vs 47.0 us), ``gtc`` (two CTAs per SM: 142.9 vs 133.3) and ``gtc3`` (the default). Session 5
#: removed KDA's prep variants (``wg2``, ``wg2fx``, ``wg2fx-s3``, ``tc``, ``tc-s3``, ``tc-v32``, ``tc-v16``). After the
#: session-6 prep A/B ``kts`` / ``ktsl`` (now the default) and ``kpr`` / ``kall`` (``pack_round``: no gain, removed) went.
PARALLEL_VARIANTS = {
    "state-base": {"state": dict(_STATE_BASE)},
    "out-base": {"out": dict(_OUT_BASE)},
    "base": {"state": dict(_STATE_BASE), "out": dict(_OUT_BASE)},
    "gdn-prep-base": {"prep": dict(_GDN_PREP_BASE)},
    "gdn-base": {"prep": dict(_GDN_PREP_BASE), "state": dict(_STATE_BASE), "out": dict(_OUT_BASE)},
    "kp5": {"prep": {"narrow_ap": False, "ref_table": False, "tiled_solve": False, "lean_gates": False, **_KDA_UNSTAGED}},
    "kn": {"prep": {"ref_table": False, "tiled_solve": False, "lean_gates": False, **_KDA_UNSTAGED}},
    "kp6": {"prep": {"tiled_solve": False, "lean_gates": False, **_KDA_UNSTAGED}},
    "kp7": {"prep": dict(_KDA_UNSTAGED)},
    "gdn-prep7": {"prep": {"restructured": True, "staged_w": False}},
    "fso": {"state": {"fuse_out": True, "stages": 3}},
    "fso-w2": {"state": {"fuse_out": True, "stages": 2, "consumer_wgs": 2}},
    "fso-s2": {"state": {"fuse_out": True, "stages": 2}},
    "three": {},
    "ovl": {"state": {"signal_out": True}},
    "stsm": {"state": {"stmatrix": True}},
    "ovl-stsm": {"state": {"signal_out": True, "stmatrix": True}},
    "fso-w2-stsm": {"state": {"fuse_out": True, "stages": 2, "consumer_wgs": 2, "stmatrix": True}},
}


#: Plan-time default of the fused schedule (issue #7, session 8): the adapters' parallel plan takes
#: ``PARALLEL_VARIANTS[FUSED_VARIANT]``'s state-pass options when :func:`fused_schedule_wins` -- ON since the session-8
#: A/B (docs/benchmarks/linear_attention_kernels_s8_*.md). The rule and its constants live here only.
FUSED_DEFAULT = True
#: The fused configuration the default takes: ``fso-w2-stsm`` since session 31 (``fso-w2`` with its copies by stmatrix:
#: H200, T = 8k, H = 64, state+out 223-224 vs 227 us for KDA, 226 vs 237-242 for GDN, docs/benchmarks/la_s31/call2/);
#: ``fso-w2`` since session 8 (T = 32k, H = 64: KDA 3500.5 vs 4830.3 us per forward, GDN 3014.4 vs 4325.9; ``fso``
#: 4407.6 / 3926.2).
FUSED_VARIANT = "fso-w2-stsm"
#: Plan-time default of the overlapped output (issue #7, session 31): wherever a plan runs the three kernels, the state
#: pass takes ``PARALLEL_VARIANTS[OVERLAP_VARIANT]``'s options (the adapters' ``parallel_overlap``, default this value).
OVERLAP_DEFAULT = True
#: The overlapped configuration: ``ovl-stsm`` (the output kernel beside the state pass, the state pass's copies by
#: stmatrix; H200, harness kernel-only rows, GDN T = 4k / 8k / 32k, H = 16: 494.3 / 517.8 / 554.3 GB/s against 424.1 /
#: 437.4 / 481.0 for the three kernels one after the other, docs/benchmarks/la_s31/call2/).
OVERLAP_VARIANT = "ovl-stsm"
#: Per-call choice of the schedule (issue #7, session 24): where the rule keeps the three kernels for one sequence, a
#: default plan also compiles the fused pair at plan time and launches it for calls of at least
#: :func:`fused_min_sequences` sequences (a host-side shape: no device read, no compile at call time). The plan's cache
#: key is unchanged, so one plan serves a continuous-batching stream whose sequence count crosses the rule. Session 23,
#: the varlen mix of 64 sequences at T 32k, H 32 (H200): KDA 791.3 GB/s fused against 625.1 for the three kernels, GDN
#: 593.9 against 452.7 (docs/benchmarks/linear_attention_{kda_s23_h32,gdn_s23_varlen}.md).
PER_CALL_DEFAULT = True
#: SM count assumed where no CUDA device is known at plan time (a TensorDesc without a device, no torch / GPU): an H200.
FALLBACK_SMS = 132


def device_sm_count(device) -> int:
    """SMs of ``device`` (``"cuda:N"``; torch's current device for ``"cuda"`` / None), from torch's host-side device
    properties at plan time (no sync; never on execute); :data:`FALLBACK_SMS` where no CUDA device is known."""
    device = None if device is None else str(device)
    if device is None or device.startswith("cuda"):
        try:
            import torch
        except ImportError:
            return FALLBACK_SMS
        if torch.cuda.is_available():
            index = torch.cuda.current_device() if device in (None, "cuda") else int(device.split(":", 1)[1])
            return int(torch.cuda.get_device_properties(index).multi_processor_count)
    return FALLBACK_SMS


def fused_schedule_wins(heads: int, v: int, sm_count: int, v_slice: int = 32, sequences: int = 1) -> bool:
    """The rule, from plan-time values only (Rule 4: never N, T or a sequence length): the fused kernel's per-warpgroup
    chains of one sequence, ``heads * v / v_slice`` (each a latency-bound walk over the sequence's chunks; the
    unfused output kernel instead spreads the output work over every chunk slot), occupy every SM. H200 (132 SMs), V =
    128, v_slice 32: H = 64 -> 256 chains, fused (measured with ``fso-w2``: -28% / -30% per KDA / GDN forward); H = 16 ->
    64, unfused (``fso-w2`` +20% / +25%); H = 32 -> 128, unfused (session 23, KDA T 4k / 8k / 32k: the three kernels
    2% / 5% faster / a tie). Counted in chains, not CTAs, so ``fso-w2`` (two chains per CTA) is judged the same.
    ``sequences`` > 1 counts the chains of that many sequences: the per-call choice (:data:`PER_CALL_DEFAULT`,
    :func:`fused_min_sequences`), never a compile key, which must not depend on a batch's sequence count (the varlen mix
    of 64 sequences at H = 32: ``fso-w2`` 27% / 31% faster for KDA / GDN, session 23)."""
    return sequences * heads * v // v_slice >= sm_count


def fused_min_sequences(heads: int, v: int, device) -> int:
    """The fewest sequences for which :func:`fused_schedule_wins` on ``device`` (SM count read at plan time): a per-call
    plan (:data:`PER_CALL_DEFAULT`) launches the fused kernels for calls with at least this many, the three kernels
    below (both compiled at plan time, so neither side is a compile at call time)."""
    v_slice = PARALLEL_VARIANTS[FUSED_VARIANT]["state"].get("v_slice", 32)
    per_seq = max(1, heads * v // v_slice)
    return max(1, -(-device_sm_count(device) // per_seq))


def per_call_fused_state_options(heads: int, v: int, device) -> dict | None:
    """The fused pair's state-pass options for the per-call side of a default plan whose own schedule is the three
    kernels (:data:`FUSED_DEFAULT` and :data:`PER_CALL_DEFAULT` on), else None (one schedule for every call)."""
    if not (FUSED_DEFAULT and PER_CALL_DEFAULT) or default_fused_state_options(heads, v, device):
        return None
    return dict(PARALLEL_VARIANTS[FUSED_VARIANT]["state"])


def default_fused_state_options(heads: int, v: int, device) -> dict:
    """The state-pass options of the plan-time fused default: ``PARALLEL_VARIANTS[FUSED_VARIANT]["state"]`` when
    :data:`FUSED_DEFAULT` is on and :func:`fused_schedule_wins` for ``device``'s SM count, else {} (the unfused default)."""
    if not FUSED_DEFAULT:
        return {}
    opts = dict(PARALLEL_VARIANTS[FUSED_VARIANT]["state"])
    if not fused_schedule_wins(heads, v, device_sm_count(device), opts.get("v_slice", 32)):
        return {}
    return opts


def set_parallel_options(plan, variant) -> None:
    """Give the parallel-schedule adapter ``plan`` (before ``compile()``) the extra compile-key fields of ``variant``
    (a name of :data:`PARALLEL_VARIANTS` or a ``{"prep": {...}, "state": {...}, "out": {...}}`` dict) on top of its own knobs: the
    A/B hook of the tests and benchmarks for options the adapter has no attribute for yet; a variant is exactly what it
    names, so it also turns the plan-time fused default off (``plan.parallel_fused = False``). Plan-time only (Rule 4):
    the fields join the compile keys; ValueError for an unknown name, and at compile for a field the family's kernel keys
    do not have (KDA's prep key has none) or a value the kernels do not build."""
    if isinstance(variant, str):
        if variant not in PARALLEL_VARIANTS:
            raise ValueError(f"parallel variant {variant!r}; accepted {tuple(PARALLEL_VARIANTS)}")
        variant = PARALLEL_VARIANTS[variant]
    prep_extra, state_extra, out_extra = (dict(variant.get(k, {})) for k in ("prep", "state", "out"))
    if prep_extra.get("bwd_tm"):  # the backward's fold_prep_tm: Tm written over qg, which the forward's output kernel reads
        raise ValueError("parallel variant: prep option bwd_tm is the KDA backward's (plan.fold_prep_tm), not a forward option")
    cls = type(plan)
    prep_base, state_base = cls._prep_options, cls._state_options

    def check_fields(extra, key_t, what):
        from dataclasses import fields

        unknown = sorted(set(extra) - {f.name for f in fields(key_t)})
        if unknown:
            raise ValueError(f"{cls.__name__}: {what} key options {unknown} are not available for this family ({key_t.__name__})")

    def prep_options():
        check_fields(prep_extra, cls._parallel_kernel_classes()[0][0], "parallel prep")
        return {**prep_base(plan), **prep_extra}

    def state_options():
        check_fields(state_extra, cls._parallel_kernel_classes()[1][0], "parallel state-pass")
        return {**state_base(plan), **state_extra}

    def out_options():
        check_fields(out_extra, cls._parallel_kernel_classes()[2][0], "parallel output")
        return dict(out_extra)

    plan.parallel_fused = False
    plan.parallel_overlap = False
    plan._prep_options = prep_options
    plan._state_options = state_options
    plan._out_options = out_options


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
    out_options: dict | None = None,
    tvm_ffi: bool = False,
):
    """``(prep, state, out)`` compiled through ``kernel_cache`` from the family's ``kernels`` = ((PrepKey, Prep),
    (StateKey, State), (OutKey, Out)); each key holds plan-time values only (Rule 4). ``row_scaled``: the output
    kernel applies per-row factors to ``Q S0^T`` (Gated DeltaNet's scalar decay). With ``fuse_out`` in
    ``state_options`` the state pass is the fused state pass + output (its key takes ``row_scaled``), ``out`` is None
    (no output kernel: :func:`launch_parallel` then launches two kernels) and ``out_options`` must be empty. ``prep_options``: extra fields of
    the prep key (e.g. GDN's ``restructured`` / ``prefetch``), ``state_options`` of the state-pass key (``stages``,
    ``v_slice``, ``tma``, ``tma_store``, ``fuse_out``, ``consumer_wgs``), ``out_options`` of the output key (``v_wide``); absent fields
    take the key dataclasses' defaults (the default kernels); ``g_align``: the byte alignment the prep kernel assumes for ``g`` (2, or 4 for an fp32 ``g`` read by
    32-bit loads: KDA's prep, GDN's with ``prefetch``; execute passes the same and checks the address). ``tvm_ffi``: each kernel
    compiled with ``--enable-tvm-ffi`` (the same device code; launched through :func:`launch_parallel_ffi` with integer
    addresses), cached under ``(key, "tvm-ffi")`` beside the DSL-entry artifact of the same key."""
    from cudnn.kernel_cache import kernel_cache

    opts = {"options": "--enable-tvm-ffi"} if tvm_ffi else {}

    (prep_key_t, prep_t), (state_key_t, state_t), (out_key_t, out_t) = kernels
    prep_key = prep_key_t(head_dim=d, g_dtype=g_dtype, beta_dtype=beta_dtype, l2norm=l2norm, varlen=varlen, **(prep_options or {}))
    fused = bool((state_options or {}).get("fuse_out", False))
    if fused and out_options:
        raise ValueError(f"parallel schedule: the output key options {sorted(out_options)} have no kernel to apply to with the state-pass key's fuse_out=True")
    state_extra = {"row_scaled": row_scaled} if fused else {}  # the default (unfused) state key is unchanged
    state_key = state_key_t(head_dim=d, varlen=varlen, has_initial=has_initial, has_final=has_final, **(state_options or {}), **state_extra)
    signal = bool(getattr(state_key, "signal_out", False))  # the overlapped output: the output key waits on the state pass's slices
    out_extra = {"wait_slices": d // state_key.v_slice} if signal else {}
    out_key = out_key_t(head_dim=d, varlen=varlen, row_scaled=row_scaled, **(out_options or {}), **out_extra)

    def build_prep():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Float32, Int32, Int64

        from .launch import fake_gmem_ptr as fp

        ptrs = [fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 16), fp(g_dtype, g_align), fp(beta_dtype, 2), fp("Int32", 4) if varlen else None]
        kernel_t = prep_t.for_key(prep_key) if hasattr(prep_t, "for_key") else prep_t  # a key option may pick another kernel module (GDN)
        return cute.compile(
            kernel_t(prep_key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0), **opts
        )

    def build_state():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32, Int64

        from .launch import fake_gmem_ptr as fp

        ptrs = [fp("Int32", 4) if varlen else None, fp("Float32", 4) if has_initial else None, fp("Float32", 4) if has_final else None]
        kernel_t = state_t.for_key(state_key) if hasattr(state_t, "for_key") else state_t  # v_slice may pick the narrow-slice kernel
        if fused:  # the fused state pass + output: o after the states, T before the extents, o's strides last
            return cute.compile(
                kernel_t(state_key), *ptrs, fp("BFloat16", 2), *fake_workspace_pointers(), *[Int32(8)] * 6, (Int64(8), Int64(8)), cuda.CUstream(0), **opts
            )
        rdy = [fp("Int32", 128)] if signal else []  # signal_out: the ready flags, after the stream
        return cute.compile(kernel_t(state_key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0), *rdy, **opts)

    def build_out():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32, Int64

        from .launch import fake_gmem_ptr as fp

        kernel_t = out_t.for_key(out_key) if hasattr(out_t, "for_key") else out_t  # v_wide (the default): the V-wide kernel
        return cute.compile(
            kernel_t(out_key),
            fp("BFloat16", 2),
            fp("Int32", 4) if varlen else None,
            *fake_workspace_pointers(),
            *[Int32(8)] * 6,
            (Int64(8), Int64(8)),
            cuda.CUstream(0),
            *([fp("Int32", 128)] if signal else []),  # wait_slices: the ready flags, after the stream
            **opts,
        )

    def cache_key(key):
        return (key, "tvm-ffi") if tvm_ffi else key

    return (
        kernel_cache.get_or_compile(cache_key(prep_key), build_prep, family=family),
        kernel_cache.get_or_compile(cache_key(state_key), build_state, family=family),
        None if fused else kernel_cache.get_or_compile(cache_key(out_key), build_out, family=family),
    )


def launch_prep(prep, ptrs: dict, ws_ptrs: list, ext: ParallelExtents, T: int, heads: int, qk_heads: int, scale: float, strides: list, stream) -> None:
    """The prep launch on ``stream`` (the first of :func:`launch_parallel`); arguments as :func:`launch_prep_state`."""
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


def launch_prep_state(
    prep, state, ptrs: dict, ws_ptrs: list, ext: ParallelExtents, T: int, heads: int, qk_heads: int, scale: float, strides: list, stream, rdy=None
) -> None:
    """The prep and state-pass launches on ``stream`` (every chunk's entering state into the workspace's ``h``): the
    first two of :func:`launch_parallel`, also the backward's ``parallel_pass1``. ``ptrs`` as there (``o`` unused);
    ``strides``: (token, head) of q, k, v; ``rdy``: the ready flags' pointer of a ``signal_out`` state pass (None
    otherwise)."""
    launch_prep(prep, ptrs, ws_ptrs, ext, T, heads, qk_heads, scale, strides, stream)
    p = ptrs
    state(p["cu"], p["h0"], p["ht"], *ws_ptrs, ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots, heads, stream, *([] if rdy is None else [rdy]))


def launch_parallel(
    compiled, ptrs: dict, ws_ptrs: list, ext: ParallelExtents, T: int, heads: int, qk_heads: int, scale: float, strides: list, stream, rdy=None
) -> None:
    """The three launches on ``stream`` (two when the state pass fuses the output: ``out`` is None). ``ptrs``: cute
    pointers q, k, v, g, beta, o, cu, h0, ht (None where the plan has none); ``strides``: (token, head) of q, k, v, o;
    ``rdy``: the ready flags' pointer of the overlapped output (``signal_out`` / ``wait_slices``; None otherwise)."""
    prep, state, out = compiled
    if out is None:  # the fused state pass + output: o, T and o's strides go to the state pass
        p = ptrs
        launch_prep(prep, ptrs, ws_ptrs, ext, T, heads, qk_heads, scale, strides, stream)
        state(p["cu"], p["h0"], p["ht"], p["o"], *ws_ptrs, T, ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots, heads, strides[3], stream)
        return
    launch_prep_state(prep, state, ptrs, ws_ptrs, ext, T, heads, qk_heads, scale, strides, stream, rdy)
    extra = [] if rdy is None else [rdy]
    out(ptrs["o"], ptrs["cu"], *ws_ptrs, T, ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots, heads, strides[3], stream, *extra)


def launch_parallel_ffi(
    entries, addrs: tuple, ws_addrs: list, ext: ParallelExtents, T: int, heads: int, qk_heads: int, scale: float, strides, stream: int, rdy=None
) -> None:
    """:func:`launch_parallel` on the tvm-ffi route: ``entries`` the three positional ``tvm_ffi.Function``s of a
    ``compile_parallel(..., tvm_ffi=True)`` (``launch.tvm_ffi_entry``), ``addrs`` the integer addresses (None where the
    plan has no such tensor) of q, k, v, g, beta, o, cu, h0, ht, ``ws_addrs`` the workspace arrays' (carve order),
    ``strides`` (token, head) int pairs of q, k, v, o, ``stream`` a raw handle. No per-call conversion. ``out`` None:
    the fused state pass + output (two launches, as :func:`launch_parallel`)."""
    prep, state, out = entries
    q, k, v, g, beta, o, cu, h0, ht = addrs
    n, ln, cps, slots = ext.n_seqs, ext.seq_len, ext.chunks_per_seq, ext.slots
    prep(q, k, v, g, beta, cu, *ws_addrs, T, n, ln, cps, slots, heads, qk_heads, scale, strides[0], strides[1], strides[2], stream)
    if out is None:
        state(cu, h0, ht, o, *ws_addrs, T, n, ln, cps, slots, heads, strides[3], stream)
        return
    extra = () if rdy is None else (rdy,)  # the overlapped output: the ready flags' address
    state(cu, h0, ht, *ws_addrs, n, ln, cps, slots, heads, stream, *extra)
    out(o, cu, *ws_addrs, T, n, ln, cps, slots, heads, strides[3], stream, *extra)
