"""causal_conv1d adapters (APIBase) and the public torch functions.

Three adapters, one per kernel family member, each ``check_support -> compile -> execute``:

- :class:`CausalConv1d`: forward over THD tokens [T, D] with ``cu_seqlens`` int32 [N + 1], or a dense
  [B, L, D] batch (equal-length sequences), optional bias, SiLU, initial states [N, D, W - 1] and final
  states [N, D, W - 1].
- :class:`CausalConv1dBackward`: dx [T, D], dweight [D, W], dbias [D] and d(initial_states).
  Needs ``scratch_workspace_bytes()`` of workspace (deterministic per-CTA partial sums, no atomics).
- :class:`CausalConv1dUpdate`: one decode step over a rolling state [S, D, W - 1], in place, with
  optional ``conv_state_indices`` int32 [B] (negative rows are padding and are skipped).

Launch route (forward and update): the DSL's own entry (cute Pointers, a CUstream) or, with ``plan.tvm_ffi = True``
before ``compile()`` (default when ``CUDNN_LA_TVM_FFI=1``), the tvm-ffi entry (integer addresses, a raw stream
handle; the host cost of a decode-step launch drops by tens of microseconds). Same device code either way.

Plan-time (the compile key, Rule 4): dtypes, kernel width W, bias / SiLU / varlen / state flags. Runtime
(kernel arguments, never keys): the token total T, D, N, every stride. ``execute`` validates and launches;
it never converts, copies, allocates or reads device memory (Rules 1-3), and launches on
``current_stream`` (torch's current stream when None).

Forward host path (``plan.fast_host``, default on): execute() memoizes its validation per tensor metadata (shapes, strides,
dtypes, devices of every tensor) and re-checks only the addresses' alignment on a repeated layout, launching with the
memoized scalar arguments (on the tvm-ffi route a warm execute is about 3 us of Python on the CPU host). On by default since
session 6 (H200: eager T16k x D4096 3358 GB/s with it and the op's tvm-ffi route vs 1602 without).

Forward grid (``plan.grid_ctas``, set before ``compile()``, the compile-key field ``Conv1dFwdKey.grid_ctas``; see
fwd_kernel.py): None (default, ``FWD_GRID_CTAS_DEFAULT``) = the run grid with 4 x the SM count of the plan's device, read
at plan time from torch's host-side device properties (528 on an H200: one wave; 4 x 132 where no CUDA device is known);
an int N > 0 = the run grid with about N CTAs, each walking one contiguous token run; 0 = the 64-token CTAs (the default
until session 6; bitwise the same outputs). H200 eager: 3366 GB/s at T16k x D4096, 3589 on 64 varlen sequences of
T32k x D4096 (3469 with the 64-token CTAs).

Update host path (``plan.fast_host``, default on since session 9): as the forward's, execute() memoizes its validation
per tensor metadata and re-checks only the addresses' alignment on a repeated layout (the public update op also takes the
tvm-ffi route and the direct eager call: torch_op.py).

Forward kernel options (set before ``compile()``; compile-key fields; fwd_kernel.py, ``Conv1dFwdKey``), all bitwise the
default's outputs: ``plan.steady`` (on by default on the run grid), ``plan.l2_prefetch`` (opt-in) and ``plan.chunk``
(chunk-interleaved runs: None = ``FWD_CHUNK_DEFAULT`` = 8 for dense plans on the run grid without l2_prefetch since the
session-15 H200 A/B, ``FWD_CHUNK_VARLEN_DEFAULT`` = 0 (opt-in) for varlen ones, 0 elsewhere) and ``plan.final_fused``
(the forward kernel writes the final states, no second launch: None = ``FWD_FINAL_FUSED_DEFAULT`` = True for dense plans
with final states since the session-16 H200 A/B, ``FWD_FINAL_FUSED_VARLEN_DEFAULT`` = True for varlen ones, written after the
token loop (``plan.final_tail``: None = ``FWD_FINAL_TAIL_VARLEN_DEFAULT`` = True for varlen, ``FWD_FINAL_TAIL_DEFAULT`` =
False for dense, session 28); a plan with both state tensors also compiles the separate pair, which execute() launches
for a call whose final states overlap its initial states, the in-place rolling update) and ``plan.warp_walk`` (varlen run
grid: the warp walks ``cu_seqlens`` together, a window of entries in its lanes, instead of one dependent load per sequence
crossed per token; None = ``FWD_WARP_WALK_DEFAULT`` = False after the session-16 H200 A/B, except a varlen plan without
states left at ``chunk = None`` too: the walk on chunks of ``FWD_VARLEN_STATELESS_WALK_CHUNK`` = 8 tokens for every call,
session 29) and ``plan.shift_always``
(run grid: the per-token path shifts the register window for every token of a group, only the walk and the store
guarded; None = ``FWD_SHIFT_ALWAYS_DEFAULT`` = True, session 25) and ``plan.locate_guess`` (varlen contiguous runs
without the warp walk: a run's first sequence from the density guess before any binary search; None =
``FWD_LOCATE_GUESS_DEFAULT``) and ``plan.final_contiguous`` (final states declared as a contiguous [N, D, W - 1]: each
thread's slice written with vector stores; None = from the declared layout, session 26) and ``plan.seeded_starts`` (dense
chunks with initial states: a chunk that starts a sequence takes that sequence's initial state as its halo, fetched one
group ahead; None = ``FWD_SEEDED_STARTS_DEFAULT``, session 27).

Contract the kernel cannot check without a device read (Rule 3): ``cu_seqlens`` is non-decreasing,
starts at 0 and ends at T.

This module imports neither torch nor cutlass at import time; ``check_support`` is metadata-only.
The public ``causal_conv1d`` / ``causal_conv1d_update`` are torch custom ops (torch_op.py) with fake
implementations and autograd through :class:`CausalConv1dBackward`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cudnn._torch_stream import current_stream_handle as _current_stream_handle
from cudnn._torch_stream import launch_stream_handle as _launch_stream_handle
from cudnn.api_base import APIBase, TensorDesc
from cudnn.datatypes import data_type
from cudnn.dsl_gate import require_cutedsl

from .._host.launch import CUTLASS_NAMES as _CNAME
from .._host.launch import fake_gmem_ptr as _fake_ptr
from .._host.launch import gmem_ptr as _ptr
from .._host.launch import launch_stream as _stream
from .._host.launch import torch_dtype as _torch_dtype
from .._host.launch import tvm_ffi_entry as _tvm_ffi_entry
from .._host.launch import use_tvm_ffi_default as _use_tvm_ffi_default
from .._host.plan import check_declared, set_descs

CUTEDSL_FLOOR = "4.8.0"
FAMILY = "linear_attention.conv1d"
_FLOATS = (data_type.BFLOAT16, data_type.HALF, data_type.FLOAT)
_ACTIVATIONS = {None: False, "silu": True, "swish": True}
#: CTAs the backward keeps in flight (about 8 per SM of a 132-SM H200); sizes its workspace.
_BWD_RESIDENT_CTAS = 1056
_THREADS = 128
#: Default of ``CausalConv1d.fast_host`` (execute memoizes its validation per tensor metadata): on since session 6, after
#: its GPU tests passed on the H200 and the ``ours-fast`` column of benchmarks/linear_attention.py conv1d measured 3358 GB/s
#: eager at T16k x D4096 (1602 with the full per-call validation and the DSL entry).
FAST_HOST_DEFAULT = True
#: Default of ``CausalConv1d.grid_ctas`` (``Conv1dFwdKey.grid_ctas``): None = the run grid with
#: ``_RUN_GRID_CTAS_PER_SM`` x the SM count of the plan's device (:func:`_default_grid_ctas`); 0 = the 64-token CTAs; N > 0
#: = about N CTAs. The run grid since session 6 (H200, the quick table's ``ours-k4`` column: 3366-3599 GB/s eager, bitwise
#: the 64-token kernel's outputs, up to 3.4% faster on varlen).
FWD_GRID_CTAS_DEFAULT = None
#: Default of ``CausalConv1dUpdate.fast_host`` (execute memoizes its validation per tensor metadata, as the forward's
#: ``fast_host``; session 9): the decode step's host path. The CPU tier proves it hands the kernel the full validation's
#: arguments and raises its errors (tests/test_conv1d_overhead.py).
UPDATE_FAST_HOST_DEFAULT = True
#: Default of ``CausalConv1d.l2_prefetch`` (``Conv1dFwdKey.l2_prefetch``): 0 = off (the verified kernel, PTX unchanged); P > 0
#: = the run grid's CTAs ask L2 for the token group P groups beyond the one their registers are loading
#: (``cp.async.bulk.prefetch.L2``; bitwise the same outputs). Opt-in until the H200 A/B (session 9: ``ours-pf<P>+graph``).
FWD_L2_PREFETCH_DEFAULT = 0
#: Default of ``CausalConv1d.steady = None`` on the run grid (``Conv1dFwdKey.steady``; the 64-token grid has none): False = off; True = the
#: run grid's groups of 4 tokens wholly inside one sequence, 3+ tokens past its start, skip the sequence walk and the
#: history branches (the same fp32 operations: bitwise the same outputs; ~91 instead of ~150 SASS instructions per token
#: in the dense bf16 SiLU kernel). On since the session-9 H200 A/B (docs/benchmarks/linear_attention_conv1d_s9.md,
#: ``ours-steady+graph`` vs ``ours+graph``: 3423.9 vs 3364.9 GB/s at T16k x 4096, 3432.3 vs 3386.6 at T8k x 8192, 3623.6
#: vs 3582.6 at T32k x 4096; its GPU test: bitwise the default on 5 cases).
FWD_STEADY_DEFAULT = True
#: Default of ``CausalConv1d.chunk = None`` (``Conv1dFwdKey.chunk``) for dense plans on the run grid without ``l2_prefetch``
#: (elsewhere None resolves to 0): 0 = each run-grid CTA row walks one contiguous token run; C > 0 (a multiple of 8, the
#: double-buffered pair of token groups) = CTA row ``j`` walks the chunks of C tokens ``j, j + n_runs, ...``
#: (chunk-interleaved: the CTAs of a wave sweep T together; bitwise the same outputs). 8 since the session-15 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s15_chunk.md, kernel-only GB/s at T16k x D4096 / T32k x D4096 / T8k x D8192:
#: ``ours-chunk8+graph`` 3629.9 / 3809.5 / 3617.3 vs ``ours+graph`` (contiguous runs) 3384.6 / 3628.3 / 3378.4, chunk 16
#: 3506.9 / 3777.0 / 3489.4, chunk 32 3358.1 / 3582.6 / 3363.5; copy 3839 / 4113 / 3871).
FWD_CHUNK_DEFAULT = 8
#: Default of ``CausalConv1d.chunk = None`` for varlen plans on the run grid without ``l2_prefetch`` (per chunk a binary
#: search over ``cu_seqlens`` from the previous chunk's sequence): 0 = contiguous runs. The session-15 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s15_chunk_varlen.md, kernel-only GB/s, runs / chunk 8 / chunk 16): 64
#: sequences over T32k x D4096 3601.0 / 3692.2 / 3697.9, every token its own sequence (T16k x D4096) 3249.5 / 2234.0 /
#: 2476.0: the per-chunk search over 16k offsets loses, so chunks stay opt-in for varlen.
FWD_CHUNK_VARLEN_DEFAULT = 0
#: Default of ``CausalConv1d.final_fused = None`` for plans with final states (``Conv1dFwdKey.final_fused``): True = the
#: forward kernel writes them (the thread that computed the group pair holding a sequence's last token, after the pair;
#: empty sequences too), one launch; False = the separate ``final_kernel`` after the forward kernel, a second launch (the
#: session-15 probe, docs/benchmarks/conv1d_s15/conv_states_probe.log, H200 dense 16 x 1024 x 4096 bf16 W 4 SiLU chunk 8,
#: graph replay: 79.5 us with final states vs 73.2 without). The same values bitwise. True since the session-16 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s16_final.md, "fwd states B16 T16k D4096", kernel-only, 3 rounds: 3207.9 GB/s
#: fused vs 3090.9 separate; its GPU tests passed in the same call). A call whose final states overlap its initial states
#: launches the separate kernel whatever this says (``final_fused``).
FWD_FINAL_FUSED_DEFAULT = True
#: The same default for varlen plans: True, written as the run grid's tail (``FWD_FINAL_TAIL_VARLEN_DEFAULT``). Fused
#: inside the token loop (``final_tail = False``) they walk ``cu_seqlens`` again for every sequence that ends in a group
#: pair and load its last tokens again inside the loop, which on varlen batches cost more than the separate
#: ``final_kernel`` at every length measured (session-28 H200 A/B, docs/benchmarks/linear_attention_conv1d_s28.md,
#: kernel-only, 3 rounds, GB/s, state bytes counted, random lengths over T16k x D4096, loop vs separate: 16 sequences
#: 3322.7 vs 3332.0, 64 3182.2 vs 3288.2, 256 2955.4 vs 3115.2, 1024 2545.7 vs 2823.5); as the tail they beat both
#: (docs/benchmarks/linear_attention_conv1d_s28_tail.md, tail / loop / separate: 16 3472.2 / 3271.1 / 3309.7, 64 3431.8
#: / 3157.3 / 3287.0, 256 3209.7 / 2947.9 / 3090.0, 1024 2925.5 / 2509.2 / 2808.4). Session 28.
FWD_FINAL_FUSED_VARLEN_DEFAULT = True
#: Default of ``CausalConv1d.final_tail = None`` (``Conv1dFwdKey.final_tail``; fused final states on the run grid, else
#: False) for dense plans: False = the forward kernel writes the final states inside the token loop, after the group pair
#: holding each sequence's end; True = after its token loop, CTA row j those of sequences j, j + n_runs, ... The same
#: values. Dense plans keep the loop: as the tail they lost on every dense states batch in the session-28 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s28_tail.md, kernel-only, tail vs loop: 16 x 1024 3354.5 vs 3558.9, 512 x 32
#: 3386.9 vs 3449.3, 128 x 128 3280.6 vs 3408.2, 256 x 64 3357.0 vs 3411.7).
FWD_FINAL_TAIL_DEFAULT = False
#: The same default for varlen plans: True (see ``FWD_FINAL_FUSED_VARLEN_DEFAULT``). Session 28.
FWD_FINAL_TAIL_VARLEN_DEFAULT = True
#: Default of ``CausalConv1d.warp_walk = None`` for varlen plans on the run grid (``Conv1dFwdKey.warp_walk``; dense plans and
#: the 64-token grid have no walk to change: None resolves to False there): False = each token walks ``cu_seqlens`` one
#: entry at a time (a dependent load per sequence crossed) and a chunk binary-searches it; True = the warp walks it
#: together (its lanes hold a window of entries: a token's sequence is a ballot and two shuffles, a chunk's a 33-ary
#: search; bitwise the same outputs). False after the session-16 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s16_warpwalk.md, kernel-only, 3 rounds: 1-token sequences 3237.6 -> 3315.7 GB/s
#: on contiguous runs, 2202.3 -> 2801.8 on chunk 8; 64 sequences 3604.1 -> 3591.8 on runs, 3661.5 -> 3699.9 on chunk 8):
#: no clear win, and chunk 8 stays opt-in for varlen (``FWD_CHUNK_VARLEN_DEFAULT``) since it loses the 1-token row.
FWD_WARP_WALK_DEFAULT = False
#: Default of a varlen plan WITHOUT states (no initial_states, no final_states) left at ``chunk = None`` and ``warp_walk =
#: None`` on the run grid without l2_prefetch: the warp walk on chunks of this many tokens for every call (0: the varlen
#: defaults above, contiguous runs with the per-call chunk key). Bitwise the same outputs. 8 since the session-29 H200 A/B
#: (docs/benchmarks/la_s29/call1/linear_attention_conv1d_s29_walk.md, kernel-only, 3 rounds, GB/s, walk on chunk 8 vs the
#: defaults before): 64 random sequences over T32k 3787.2 vs 3691.4, 256 over T16k 3550.0 vs 3493.8, 1024 3428.1 vs
#: 3348.7, 4096 3311.7 vs 3335.4, 16384 1-token sequences 3430.9 vs 3386.6 (session 28's call 8 the same way). Plans with
#: states keep the walk off: it lost every states row by 7-8% with the final-states tail (session 28).
FWD_VARLEN_STATELESS_WALK_CHUNK = 8
#: Default of ``CausalConv1d.shift_always = None`` on the run grid (``Conv1dFwdKey.shift_always``; the 64-token grid has
#: no such path: None resolves to False there): True = a group on the per-token path shifts the register window and
#: computes every token of the group, with only the sequence walk and the store guarded by "inside the run"; False =
#: the shift and the math too, which makes ptxas merge two windows after every token (varlen runs kernel, bf16 W = 4 SiLU
#: bias: 2200 -> 2000 SASS instructions, 227 -> 11 MOVs; ~27 fewer per token on the per-token path). Bitwise the same
#: outputs. The per-token path is every token of a batch of 1-token sequences, the first W - 1 tokens of a sequence and
#: a run's or chunk's last group. True since the session-25 H200 A/B (docs/benchmarks/linear_attention_conv1d_s25_shift.md,
#: kernel-only, 3 rounds, GB/s, True vs False): the dense states batch 3467.8 vs 3236.3 (+7.2%; eager 3496.7), 1-token
#: sequences 3265.3 vs 3264.0 (warp walk 3368.9 vs 3328.8, chunk 8 2504.8 vs 2231.0), dense and varlen64 within 1%.
FWD_SHIFT_ALWAYS_DEFAULT = True
#: Default of ``CausalConv1d.locate_guess = None`` (``Conv1dFwdKey.locate_guess``; varlen contiguous runs without the
#: warp walk, else False): True = a run's first token is located from the density guess ``t0 N / T`` (two independent
#: loads for even lengths) before any binary search; False = the binary search (~14 dependent loads over 16k sequences,
#: at every CTA's start). Bitwise the same outputs. True since the session-25 H200 A/B
#: (docs/benchmarks/linear_attention_conv1d_s25_guess.md, kernel-only, 3 rounds, GB/s): 1-token sequences 3375.7 vs
#: 3257.7 (+3.6%; the warp walk, which locates by the same guess, 3356.8), 64 sequences 3606.5 vs 3584.9.
FWD_LOCATE_GUESS_DEFAULT = True
#: Default of ``CausalConv1d.seeded_starts = None`` (``Conv1dFwdKey.seeded_starts``; dense chunks with initial states of
#: x's dtype and the steady path, else False): True = a chunk that starts a sequence receives the sequence's initial-state
#: entries as its halo, fetched one group ahead (16-byte loads of each thread's slice where the initial states are a
#: contiguous [N, D, W - 1]: ``initial_contiguous``), so its first group takes the steady path instead of reading them
#: inside the token math; False = the x halo and the per-token path. Bitwise the same outputs. True since session 27's
#: H200 A/B (docs/benchmarks/linear_attention_conv1d_s27.md, kernel-only, GB/s, state bytes counted) for dense
#: sequences of at most ``FWD_SEEDED_MAX_LEN`` tokens (the plan's declared length): 512 sequences of 32 tokens 2869.0 ->
#: 3441.5 (3329.1 by element loads; the rule's own run: 2888.9 -> 3478.0); 16 sequences of 1024 tokens lost with it in
#: that A/B (3545.4 -> 3363.9: its per-chunk work outweighs 16 sequence starts), so longer sequences keep the x halo.
FWD_SEEDED_STARTS_DEFAULT = True
FWD_SEEDED_MAX_LEN = 64
#: The chunk a varlen plan left at ``chunk = None`` also compiles (0: none), and the average sequence length (tokens)
#: from which a call launches it instead of the contiguous runs (``CausalConv1d.per_call_chunk_key``): chunks win where
#: sequences are long and lose on many short ones, where every 8-token chunk pays a sequence search (H200, session 27
#: A/B, docs/benchmarks/linear_attention_conv1d_s27.md, kernel-only, GB/s, chunk 8 vs contiguous runs over T16k x D4096
#: unless named: 64 random sequences over T32k 3669.6 vs 3597.6, 256 3454.9 vs 3324.9, 1024 (16 tokens on average) 3248.9
#: vs 3301.3, 4096 2895.6 vs 3306.5, 16384 1-token sequences 2485.5 vs 3389.3). Session 27.
FWD_VARLEN_CHUNK_PER_CALL = 8
FWD_VARLEN_CHUNK_MIN_LEN = 32
#: CTAs per SM of the default run grid: one wave at the forward kernel's ``Conv1dFwdKey.min_ctas_per_sm`` = 4.
_RUN_GRID_CTAS_PER_SM = 4
#: SM count assumed where no CUDA device is known (a descriptor-only plan compiled on a host without a GPU): an H200's.
_FALLBACK_SMS = 132
#: Distinct tensor metadata a forward plan memoizes validated launch arguments for (cleared when full).
_LAUNCH_MEMO_MAX = 64


def _default_grid_ctas(device: str | None) -> int:
    """The run grid's default CTA count: ``_RUN_GRID_CTAS_PER_SM`` x the SM count of ``device`` (``"cuda:N"``; torch's current
    CUDA device for a plan that names none), read from torch's host-side device properties at plan time (no device sync;
    never called by execute). ``_FALLBACK_SMS`` (an H200) where no CUDA device is known: a CPU tensor, or no torch / no GPU."""
    sms = _FALLBACK_SMS
    if device is None or device.startswith("cuda"):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            index = torch.cuda.current_device() if device in (None, "cuda") else int(device.split(":", 1)[1])
            sms = torch.cuda.get_device_properties(index).multi_processor_count
    return _RUN_GRID_CTAS_PER_SM * sms


def _silu_flag(activation) -> bool:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"causal_conv1d: activation={activation!r} is not one of None, 'silu', 'swish'")
    return _ACTIVATIONS[activation]


def _vec(dt: data_type) -> int:
    return 16 // dt.itemsize


def _tokens_view(desc: TensorDesc, what: str, vec: int, varlen: bool) -> tuple[int, int]:
    """(token stride, rows per sequence or 0) of a [T, D] / [1, T, D] / [B, L, D] tensor; declines what it cannot address."""
    if desc.rank not in (2, 3):
        raise ValueError(f"{what}: {desc.describe()} must be [T, D] (THD) or [B, L, D] (dense)")
    if desc.shape[-1] > 1 and desc.stride[-1] != 1:
        raise NotImplementedError(
            f"{what}: {desc.describe()} needs unit channel stride (16-byte vector loads); other layouts are declined, not copied (Rule 2)"
        )
    st = desc.stride[-2]
    if desc.shape[-2] > 1 and st % vec:
        raise NotImplementedError(f"{what}: {desc.describe()} token stride {st} is not a multiple of {vec} elements (16 bytes); declined (Rule 2)")
    if desc.rank == 3:
        b, ln = desc.shape[0], desc.shape[1]
        if varlen and b != 1:
            raise ValueError(f"{what}: {desc.describe()} with cu_seqlens must be [T, D] or [1, T, D]")
        if b > 1 and ln == 1:
            if desc.stride[0] % vec:
                raise NotImplementedError(f"{what}: {desc.describe()} row stride {desc.stride[0]} is not a multiple of {vec} elements; declined (Rule 2)")
            return desc.stride[0], (0 if varlen else 1)
        if b > 1 and desc.stride[0] != ln * st:
            raise NotImplementedError(
                f"{what}: {desc.describe()} batch stride {desc.stride[0]} != L * token stride ({ln} * {st}); the kernel walks [B * L, D] tokens, declined (Rule 2)"
            )
        return st, (0 if varlen else ln)
    return st, (0 if varlen else desc.shape[0])


def _rows(desc: TensorDesc) -> int:
    return desc.shape[0] * desc.shape[1] if desc.rank == 3 else desc.shape[0]


def _check_runtime(t: Any, plan: TensorDesc, vec: int, what: str, token_dims_free: bool, align: int = 16, lead_free: bool = False) -> None:
    """Execute-time checks of a tensor against its plan descriptor: no conversion, no device read.

    ``token_dims_free``: the token dims of a [T, D] / [1, T, D] tensor may differ from the plan's; ``lead_free``: the
    leading dim may (the sequence count N of varlen state tensors [N, D, W - 1], checked against cu_seqlens by the caller).
    Reads only torch metadata (a few microseconds); builds a TensorDesc only to word an error."""
    if t is None:
        raise ValueError(f"{what}: {plan.name} was declared at plan time but execute() received None")
    shape = tuple(t.shape)
    rank = len(shape)
    fixed = 1 if lead_free else 0
    if token_dims_free:
        fixed = 1 if rank != 3 else (2 if plan.shape[0] == 1 and shape[0] == 1 else 0)
    if t.dtype != _torch_dtype(plan.dtype) or rank != plan.rank or shape[fixed:] != plan.shape[fixed:]:
        raise ValueError(f"{what}: got {TensorDesc.like(t, plan.name).describe()}, but the plan was built for {plan.describe()}")
    if plan.device is not None and str(t.device) != plan.device:
        raise ValueError(f"{what}: {plan.name} is on {t.device}, but the plan was built for {plan.device}")
    if vec:
        stride = t.stride()
        if shape[-1] > 1 and stride[-1] != 1:
            raise ValueError(f"{what}: {TensorDesc.like(t, plan.name).describe()} needs unit channel stride")
        if rank >= 2 and shape[-2] > 1 and stride[-2] % vec:
            raise ValueError(f"{what}: {TensorDesc.like(t, plan.name).describe()} token stride is not a multiple of {vec} elements")
    if t.data_ptr() % align:
        raise ValueError(f"{what}: {plan.name} address 0x{t.data_ptr():x} is not {align}-byte aligned")


def _check_dense(t: Any, plan: TensorDesc, what: str) -> None:
    """Execute-time check that ``t`` has the plan's strides where the kernel assumes them (weight [D, W] and bias [D]
    contiguous, cu_seqlens [N + 1] unit stride); extents of one are free. Metadata only."""
    stride = tuple(t.stride())
    if any(n > 1 and a != b for n, a, b in zip(t.shape, stride, plan.stride, strict=False)):
        raise ValueError(f"{what}: {TensorDesc.like(t, plan.name).describe()} must have the plan's strides {plan.stride} (the kernel reads it densely)")


def _fwd_meta(x, weight, out, bias, cu_seqlens, initial_states, final_states, varlen: bool) -> tuple:
    """What the forward's execute-time validation reads of its tensors (everything but their addresses): the key of the
    validation memo. Shapes, strides, dtypes and devices of every tensor; None for an absent optional one.

    ``varlen``: the token total T and the sequence count N are left out (continuous batching changes them every call;
    execute reads them per call): x / out keep their rank, channels and whether T > 1 (which decides the token-stride
    checks), cu_seqlens whether N + 1 > 1 (which decides its stride check), the states their [D, W - 1] part."""
    if varlen:
        xs, ys = _token_free_shape(x), _token_free_shape(out)
        cs = None if cu_seqlens is None else (cu_seqlens.dim(), cu_seqlens.shape[0] > 1)
        i_s = None if initial_states is None else initial_states.shape[1:]
        f_s = None if final_states is None else final_states.shape[1:]
    else:
        xs, ys = x.shape, out.shape
        cs = None if cu_seqlens is None else cu_seqlens.shape
        i_s = None if initial_states is None else initial_states.shape
        f_s = None if final_states is None else final_states.shape
    return (
        xs, x.stride(), ys, out.stride(), weight.shape, weight.stride(), x.dtype, out.dtype, weight.dtype, x.device, out.device, weight.device,
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
        None if cu_seqlens is None else (cs, cu_seqlens.stride(), cu_seqlens.dtype, cu_seqlens.device),
        None if initial_states is None else (i_s, initial_states.stride(), initial_states.dtype, initial_states.device),
        None if final_states is None else (f_s, final_states.stride(), final_states.dtype, final_states.device),
    )  # fmt: skip


def _update_meta(x, conv_state, weight, out, bias, conv_state_indices) -> tuple:
    """What the decode update's execute-time validation reads of its tensors (everything but their addresses): the key of
    its validation memo. Shapes, strides, dtypes and devices of every tensor; None for an absent optional one."""
    return (
        x.shape, x.stride(), x.dtype, x.device, conv_state.shape, conv_state.stride(), conv_state.dtype, conv_state.device,
        weight.shape, weight.stride(), weight.dtype, weight.device, out.shape, out.stride(), out.dtype, out.device,
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.device),
        None if conv_state_indices is None else (conv_state_indices.shape, conv_state_indices.stride(), conv_state_indices.dtype, conv_state_indices.device),
    )  # fmt: skip


def _token_free_shape(t) -> tuple:
    """A varlen [T, D] / [1, T, D] tensor's shape without T (its rank, D and whether T > 1); any other shape as it is
    (the validation then fixes T to the plan's)."""
    s = t.shape
    if len(s) == 2:
        return ("tokens", 2, s[1], s[0] > 1)
    if len(s) == 3 and s[0] == 1:
        return ("tokens", 3, s[2], s[1] > 1)
    return s


def _token_count(t) -> int:
    """Tokens of a [T, D] / [B, L, D] tensor walked as [rows, D]."""
    return int(t.shape[0] * t.shape[1]) if t.dim() == 3 else int(t.shape[0])


def _token_stride(t) -> int:
    """Elements between consecutive tokens of a [T, D] / [B, L, D] tensor walked as [rows, D]."""
    rows = t.shape[0] * t.shape[1] if t.dim() == 3 else t.shape[0]
    if rows <= 1:
        return int(t.shape[-1])
    if t.dim() == 3 and t.shape[1] == 1:
        return int(t.stride(0))
    return int(t.stride(-2))


def _contiguous_states(shape, stride) -> bool:
    """A [N, D, W - 1] state layout with strides (D (W - 1), W - 1, 1) (N <= 1: any row stride)."""
    n, d, ws = shape
    return tuple(stride[1:]) == (ws, 1) and (n <= 1 or stride[0] == d * ws)


def _state_strides(t) -> tuple[int, int, int]:
    return (0, 0, 0) if t is None else tuple(int(s) for s in t.stride())


def _compile_cached(key, kernel_module: str, kernel_class: str, fake_ptrs, n_ints: int, tvm_ffi: bool = False):
    """The compiled kernel of ``key`` from the kernel cache (family ``FAMILY``), built on a miss as
    ``cute.compile(<kernel_module>.<kernel_class>(key), *pointers, *[Int32] * n_ints, stream)``.

    ``fake_ptrs``: ``(cutlass type name, alignment)`` per pointer argument, or None for an absent one.
    ``tvm_ffi``: compile the tvm-ffi entry (``--enable-tvm-ffi``; same device code), cached under ``(key, "tvm-ffi")``.
    The kernel module is imported only when building (this module stays free of cutlass at import)."""

    def build():
        import importlib

        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32

        kernel = getattr(importlib.import_module(kernel_module, __package__), kernel_class)
        ptrs = [None if p is None else _fake_ptr(*p) for p in fake_ptrs]
        if tvm_ffi:
            return cute.compile(kernel(key), *ptrs, *[Int32(8)] * n_ints, cuda.CUstream(0), options="--enable-tvm-ffi")
        return cute.compile(kernel(key), *ptrs, *[Int32(8)] * n_ints, cuda.CUstream(0))

    from cudnn.kernel_cache import kernel_cache

    return kernel_cache.get_or_compile((key, "tvm-ffi") if tvm_ffi else key, build, family=FAMILY)


def _data_ptr(t):
    return None if t is None else t.data_ptr()


def _span_bytes(t) -> int:
    """Bytes from ``t``'s first element to one past its last (0 when it has none): torch metadata only."""
    n = 1
    for size, st in zip(t.shape, t.stride(), strict=True):
        if size == 0:
            return 0
        n += (size - 1) * st
    return n * t.element_size()


def _overlap(a, ap: int, b, bp: int) -> bool:
    """Whether tensors ``a`` and ``b`` (addresses ``ap``, ``bp``) share any byte of their address ranges (a conservative
    test: interleaved views count as overlapping). Metadata only, no device read."""
    sa, sb = _span_bytes(a), _span_bytes(b)
    return sa > 0 and sb > 0 and ap < bp + sb and bp < ap + sa


def _stream_handle(current_stream, device) -> int:
    """The raw handle to launch on: core's ``launch_stream_handle(current_stream, device)``; for None on a CUDA tensor's
    device, torch's current stream read directly by index (what it returns, without rebuilding the device)."""
    if current_stream is None and device.type == "cuda" and device.index is not None:
        return _current_stream_handle(device.index)
    return _launch_stream_handle(current_stream, device)


def _check_one_device(plan: APIBase, what: str) -> None:
    """ValueError unless every tensor the plan declares with a known device is on one device (the kernels dereference
    every pointer on the launch device: a host cu_seqlens or a tensor of another GPU would fault or read garbage)."""
    descs = [v for v in vars(plan).values() if isinstance(v, TensorDesc) and v.device is not None]
    if len({d.device for d in descs}) > 1:
        raise ValueError(f"{what}: every tensor must be on one device; got " + ", ".join(f"{d.name} on {d.device}" for d in descs))


class _Conv1dCommon(APIBase):
    """Shared plan checks of the forward and backward adapters."""

    def _check_common(self, what: str) -> None:
        """Plan checks of x, weight, bias, cu_seqlens and the states; sets ``silu``, ``_vec`` and the token walk."""
        self.silu = _silu_flag(self.activation)
        require_cutedsl(f"cudnn.linear_attention.{what}", CUTEDSL_FLOOR)
        x, w = self.x, self.weight
        _check_one_device(self, what)
        self._check_dtype(x, _FLOATS, what)
        self._check_dtype(w, _FLOATS, what)
        self._check_rank(w, 2, what)
        d, width = w.shape
        self._decline_if(not 2 <= width <= 4, f"{what}: {w.describe()} kernel width {width} is outside 2..4")
        self._decline_if(w.stride != (width, 1), f"{what}: {w.describe()} must be contiguous [D, W]; declined, not copied (Rule 2)")
        self._value_error_if(x.shape[-1] != d, f"{what}: {x.describe()} has {x.shape[-1]} channels but {w.describe()} has {d}")
        vec = _vec(x.dtype)
        self._decline_if(d % vec != 0, f"{what}: {x.describe()} channel count {d} is not a multiple of {vec} (16-byte vectors)")
        if self.bias is not None:
            self._check_shape(self.bias, (d,), what)
            self._value_error_if(self.bias.dtype != w.dtype, f"{what}: {self.bias.describe()} must have the weight's dtype {w.dtype.short}")
            self._decline_if(self.bias.stride != (1,), f"{what}: {self.bias.describe()} must be contiguous")
        varlen = self.cu_seqlens is not None
        if varlen:
            self._check_rank(self.cu_seqlens, 1, what)
            self._decline_if(self.cu_seqlens.dtype != data_type.INT32, f"{what}: {self.cu_seqlens.describe()} must be int32 (int64 is declined, not converted)")
            self._value_error_if(self.cu_seqlens.shape[0] < 1, f"{what}: {self.cu_seqlens.describe()} needs N + 1 >= 1 entries")
            self._decline_if(self.cu_seqlens.stride != (1,), f"{what}: {self.cu_seqlens.describe()} must be contiguous")
        self._token_stride, self._seq_len = _tokens_view(x, what, vec, varlen)
        self._n_seqs = self.cu_seqlens.shape[0] - 1 if varlen else (x.shape[0] if x.rank == 3 else 1)
        for st in self._states():
            if st is None:
                continue
            self._check_rank(st, 3, what)
            self._check_dtype(st, _FLOATS, what)
            self._check_shape(st, (self._n_seqs, d, width - 1), what)
        self._vec = vec

    def _runtime_sequences(self, what: str, cu_seqlens, states) -> int:
        """Execute-time checks of ``cu_seqlens`` and the [N, D, W - 1] state tensors; returns N. Metadata only."""
        varlen = self.cu_seqlens is not None
        n_seqs = self._n_seqs
        if varlen:
            _check_runtime(cu_seqlens, self.cu_seqlens, 0, what, token_dims_free=True, align=4)
            _check_dense(cu_seqlens, self.cu_seqlens, what)
            n_seqs = cu_seqlens.shape[0] - 1
        for t, plan in states:
            if t is not None:
                _check_runtime(t, plan, 0, what, token_dims_free=False, align=plan.dtype.itemsize, lead_free=varlen)
                if t.shape[0] != n_seqs:
                    raise ValueError(f"{what}: {plan.name} has {t.shape[0]} rows but cu_seqlens describes {n_seqs} sequences")
        return n_seqs


class CausalConv1d(_Conv1dCommon):
    """Forward adapter. Tensors may be torch tensors or TensorDescs (shape, stride, dtype, device)."""

    def __init__(self, x, weight, out, bias=None, cu_seqlens=None, initial_states=None, final_states=None, activation=None):
        super().__init__()
        set_descs(self, x=x, weight=weight, out=out, bias=bias, cu_seqlens=cu_seqlens, initial_states=initial_states, final_states=final_states)
        self.activation = activation
        #: Launch route (set before compile()): the tvm-ffi entry (True) or the DSL's own (False; default unless
        #: ``CUDNN_LA_TVM_FFI=1``). Same device code either way; the tvm-ffi artifact is a separate cache entry.
        self.tvm_ffi = _use_tvm_ffi_default()
        #: Host fast path (set before compile()): execute() memoizes its validation per tensor metadata (see execute).
        self.fast_host = FAST_HOST_DEFAULT
        #: Forward grid (set before compile(); ``Conv1dFwdKey.grid_ctas``): None (default) = the run grid with 4 x the SM
        #: count of the plan's device (528 on an H200, one wave; resolved by compile_key()); N > 0 = the run grid with
        #: about N CTAs, each walking one contiguous token run; 0 = the 64-token CTAs. Outputs bitwise equal either way.
        self.grid_ctas = FWD_GRID_CTAS_DEFAULT
        #: L2 prefetch distance of the run grid (set before compile(); ``Conv1dFwdKey.l2_prefetch``): 0 (default) = off,
        #: P > 0 = the token group P groups beyond the registers' next one is asked into L2. Outputs bitwise equal either way.
        self.l2_prefetch = FWD_L2_PREFETCH_DEFAULT
        #: Steady-group fast path of the run grid (set before compile(); ``Conv1dFwdKey.steady``): None (default) = FWD_STEADY_DEFAULT
        #: on the run grid, off on the 64-token grid (which has no steady path); False / True explicitly.
        self.steady = None
        #: Chunk-interleaved run grid (set before compile(); ``Conv1dFwdKey.chunk``): None (default) = FWD_CHUNK_DEFAULT (8)
        #: dense / FWD_CHUNK_VARLEN_DEFAULT (0) varlen (FWD_VARLEN_STATELESS_WALK_CHUNK, 8, for a varlen plan without states
        #: and ``warp_walk`` None) on the run grid without l2_prefetch, else 0; 0 = contiguous runs;
        #: C > 0 = CTA row j walks the chunks of C tokens j, j + n_runs, ... (the run grid only, C a multiple of 8, without
        #: l2_prefetch). Outputs bitwise equal either way.
        self.chunk = None
        #: Final states written by the forward kernel (set before compile(); ``Conv1dFwdKey.final_fused``): None (default) =
        #: FWD_FINAL_FUSED_DEFAULT (dense) / FWD_FINAL_FUSED_VARLEN_DEFAULT (varlen) where final states are declared, else
        #: False; True = fused (one launch); False = the separate final-states kernel after the forward kernel. Fused is
        #: wrong when final_states overlaps initial_states (a CTA could overwrite a sequence's initial state before another
        #: has read it), so a fused plan declaring both
        #: also compiles the separate pair at compile(), and execute() launches that pair for a call whose two state
        #: buffers overlap (a host check of their address ranges: metadata only). Outputs bitwise equal either way.
        self.final_fused = None
        #: Warp-cooperative ``cu_seqlens`` walk of a varlen plan's run grid (set before compile(); ``Conv1dFwdKey.warp_walk``):
        #: None (default) = FWD_WARP_WALK_DEFAULT on a varlen plan's run grid (True for a varlen plan without states and
        #: ``chunk`` None: FWD_VARLEN_STATELESS_WALK_CHUNK), else False; True = the warp's lanes hold a
        #: window of ``cu_seqlens`` entries (per token a ballot and two shuffles, per chunk a 33-ary search), varlen run grid
        #: only; False = the per-token walk. Outputs bitwise equal either way.
        self.warp_walk = None
        #: The per-token path's register window shifted for every token of a group (set before compile();
        #: ``Conv1dFwdKey.shift_always``): None (default) = FWD_SHIFT_ALWAYS_DEFAULT on the run grid, False on the 64-token
        #: grid; True (run grid only) / False explicitly. Outputs bitwise equal either way.
        self.shift_always = None
        #: The density guess for a run's first sequence (set before compile(); ``Conv1dFwdKey.locate_guess``): None (default)
        #: = FWD_LOCATE_GUESS_DEFAULT on varlen contiguous runs without the warp walk, else False; True (needs those) /
        #: False explicitly. Outputs bitwise equal either way.
        self.locate_guess = None
        #: Vector stores of the final states (set before compile(); ``Conv1dFwdKey.final_contiguous``): None (default) =
        #: True when the declared final states are a contiguous [N, D, W - 1] (execute then needs that layout at a 16-byte
        #: aligned address), else False; False = element by element, any strides; True needs the contiguous declared
        #: layout. Outputs bitwise equal either way.
        self.final_contiguous = None
        #: Initial states as the halo of a chunk that starts a sequence (set before compile(); ``Conv1dFwdKey.seeded_starts``):
        #: None (default) = FWD_SEEDED_STARTS_DEFAULT where valid (dense chunks, the steady path, initial states of x's
        #: dtype) for sequences of at most FWD_SEEDED_MAX_LEN tokens, else False; True needs validity (any length).
        #: Outputs bitwise equal either way.
        self.seeded_starts = None
        #: Vector loads of a seeded halo (set before compile(); ``Conv1dFwdKey.init_contiguous``): None (default) = True
        #: when ``seeded_starts`` resolves True and the declared initial states are a contiguous [N, D, W - 1] (execute then
        #: needs that layout at a 16-byte aligned address), else False; True needs both. Outputs bitwise equal either way.
        self.initial_contiguous = None
        #: Fused final states written as the run grid's tail (set before compile(); ``Conv1dFwdKey.final_tail``): None
        #: (default) = FWD_FINAL_TAIL_DEFAULT (dense) / FWD_FINAL_TAIL_VARLEN_DEFAULT (varlen) where valid (the run grid
        #: with fused final states), else False; True needs validity. Outputs bitwise equal either way.
        self.final_tail = None
        self._entry = None
        self._sep = None  # (compiled kernel, tvm-ffi entry or None) of the separate final-states kernels; see final_fused
        self._alt = None  # (kernel, entry, sep) of the per-call chunk key (varlen plans at chunk None; per_call_chunk_key)
        self._key = None  # the compiled key (compile())
        self._memo = None  # metadata -> memo entry (see execute); set by compile() when fast_host
        self._last = [(None, None)]
        self._varlen = self.cu_seqlens is not None

    def _states(self):
        return (self.initial_states, self.final_states)

    def check_support(self) -> bool:
        what = "causal_conv1d"
        self._check_common(what)
        self._check_dtype(self.out, (self.x.dtype,), what)
        self._value_error_if(self.out.shape != self.x.shape, f"{what}: {self.out.describe()} must have the shape of {self.x.describe()}")
        _tokens_view(self.out, what, self._vec, self.cu_seqlens is not None)
        if self.initial_states is not None and self.final_states is not None:
            self._value_error_if(
                self.initial_states.dtype != self.final_states.dtype,
                f"{what}: {self.initial_states.describe()} and {self.final_states.describe()} must share a dtype",
            )
        self._is_supported = True
        return True

    def compile_key(self):
        from .fwd_kernel import Conv1dFwdKey

        st = self.initial_states or self.final_states
        grid = _default_grid_ctas(self.x.device) if self.grid_ctas is None else self.grid_ctas
        steady = (FWD_STEADY_DEFAULT and grid != 0) if self.steady is None else self.steady
        chunk = self.chunk
        walk_chunk = self._stateless_walk_chunk(grid)
        if chunk is None:  # the default only where it is valid: the run grid without l2_prefetch
            chunk = (FWD_CHUNK_VARLEN_DEFAULT if self.cu_seqlens is not None else FWD_CHUNK_DEFAULT) if grid != 0 and self.l2_prefetch == 0 else 0
            chunk = walk_chunk or chunk
        fused = self.final_fused
        if fused is None:  # the default only where there are final states (varlen and dense defaults)
            fused = (FWD_FINAL_FUSED_VARLEN_DEFAULT if self.cu_seqlens is not None else FWD_FINAL_FUSED_DEFAULT) and self.final_states is not None
        warp = self.warp_walk
        if warp is None:  # the default only where there is a walk: varlen on the run grid
            warp = (FWD_WARP_WALK_DEFAULT or walk_chunk > 0) and self.cu_seqlens is not None and grid != 0
        shift = (FWD_SHIFT_ALWAYS_DEFAULT and grid != 0) if self.shift_always is None else self.shift_always
        guess = self.locate_guess
        if guess is None:  # the default only where the search exists: varlen contiguous runs, no warp walk
            guess = FWD_LOCATE_GUESS_DEFAULT and self.cu_seqlens is not None and grid != 0 and chunk == 0 and warp is False
        seed = self.seeded_starts
        if seed is None:  # the default where valid (dense chunks, the steady path, initial states of x's dtype), short sequences
            ini = self.initial_states
            valid = self._seed_valid(chunk, steady, ini is not None and ini.dtype == self.x.dtype)
            seed = FWD_SEEDED_STARTS_DEFAULT and valid and self._seq_len <= FWD_SEEDED_MAX_LEN
        tail = self.final_tail
        if tail is None:  # the default where valid: the run grid with fused final states (varlen and dense defaults)
            tail = (FWD_FINAL_TAIL_VARLEN_DEFAULT if self.cu_seqlens is not None else FWD_FINAL_TAIL_DEFAULT) and grid != 0 and fused is True
        return Conv1dFwdKey(
            dtype=_CNAME[self.x.dtype],
            w_dtype=_CNAME[self.weight.dtype],
            width=self.weight.shape[1],
            has_bias=self.bias is not None,
            silu=self.silu,
            varlen=self.cu_seqlens is not None,
            has_init=self.initial_states is not None,
            has_final=self.final_states is not None,
            state_dtype=_CNAME[st.dtype] if st is not None else "",
            grid_ctas=grid,
            l2_prefetch=self.l2_prefetch,
            steady=steady,
            chunk=chunk,
            final_fused=fused,
            warp_walk=warp,
            shift_always=shift,
            locate_guess=guess,
            final_contiguous=self._final_contiguous(),
            seeded_starts=seed,
            init_contiguous=self._init_contiguous(seed),
            final_tail=tail,
        )

    def _compile_launchers(self, key, ptrs):
        """``(compiled kernel, tvm-ffi entry or None, separate final-states pair or None)`` of ``key``: the pair (the
        ``final_fused = False`` key) for calls whose final states overlap the initial states (see ``final_fused``)."""
        kernel = _compile_cached(key, ".fwd_kernel", "CausalConv1dFwd", ptrs, 12, self.tvm_ffi)
        sep = None
        if key.final_fused and key.has_init:
            k = _compile_cached(dataclasses.replace(key, final_fused=False, final_tail=False), ".fwd_kernel", "CausalConv1dFwd", ptrs, 12, self.tvm_ffi)
            sep = (k, _tvm_ffi_entry(k) if self.tvm_ffi else None)
        return kernel, (_tvm_ffi_entry(kernel) if self.tvm_ffi else None), sep

    def per_call_chunk_key(self, key):
        """The second key a varlen plan left at ``chunk = None`` compiles (None where there is none): ``key`` with
        ``chunk = FWD_VARLEN_CHUNK_PER_CALL`` (the chunk-interleaved runs, with their own sequence search) when ``key`` is
        the contiguous runs of the run grid without l2_prefetch. execute() launches it for a call whose sequences average
        at least ``FWD_VARLEN_CHUNK_MIN_LEN`` tokens (T >= that x N: host shapes, no device read) and the contiguous runs
        below (many short sequences, where a chunk's sequence search costs more than the chunks win). Both are compiled
        at compile(), so neither side of the rule compiles at call time (Rule 4); the outputs are bitwise equal."""
        if not (self.chunk is None and key.varlen and key.grid_ctas > 0 and key.l2_prefetch == 0 and key.chunk == 0 and FWD_VARLEN_CHUNK_PER_CALL):
            return None
        return dataclasses.replace(key, chunk=FWD_VARLEN_CHUNK_PER_CALL, locate_guess=False)

    def _stateless_walk_chunk(self, grid) -> int:
        """``FWD_VARLEN_STATELESS_WALK_CHUNK`` where that default applies (a varlen plan without states on the run grid
        without l2_prefetch, ``chunk`` and ``warp_walk`` both left at None), else 0."""
        applies = self.chunk is None and self.warp_walk is None and self.cu_seqlens is not None and grid != 0 and self.l2_prefetch == 0
        return FWD_VARLEN_STATELESS_WALK_CHUNK if applies and self.initial_states is None and self.final_states is None else 0

    def _seed_valid(self, chunk, steady, init_like_x) -> bool:
        """Where ``Conv1dFwdKey.seeded_starts`` may be True: dense chunks (``chunk`` > 0) with the steady path and initial
        states of x's dtype (the halo registers hold x's dtype)."""
        return self.cu_seqlens is None and chunk > 0 and steady and init_like_x

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()
        if type(key.grid_ctas) is not int or key.grid_ctas < 0:
            raise ValueError(
                f"CausalConv1d: grid_ctas={key.grid_ctas!r} must be None (4 x the SMs of the device, 528 on an H200: one wave), "
                "an int > 0 (about that many CTAs) or 0 (the 64-token CTAs)"
            )
        pf = key.l2_prefetch
        if type(pf) is not int or pf < 0 or (pf and (key.grid_ctas == 0 or pf * key.group > _THREADS)):
            raise ValueError(
                f"CausalConv1d: l2_prefetch={pf!r} must be 0 (off) or an int P > 0 with P * {key.group} <= {_THREADS} tokens, and needs the run grid "
                f"(grid_ctas None or > 0; got {key.grid_ctas})"
            )
        if type(key.steady) is not bool or (key.steady and key.grid_ctas == 0):
            raise ValueError(
                f"CausalConv1d: steady={key.steady!r} must be True or False, and True needs the run grid (grid_ctas None or > 0; got {key.grid_ctas})"
            )
        c = key.chunk
        if type(c) is not int or c < 0 or (c and (key.grid_ctas == 0 or key.l2_prefetch or c % (2 * key.group))):
            raise ValueError(
                f"CausalConv1d: chunk={c!r} must be None (the default: {FWD_CHUNK_DEFAULT} dense, {FWD_CHUNK_VARLEN_DEFAULT} varlen, 0 where "
                f"invalid), 0 (contiguous runs) or an int C > 0, a multiple of {2 * key.group} tokens, and C > 0 needs the run grid "
                f"(grid_ctas None or > 0; got {key.grid_ctas}) and l2_prefetch 0 (got {key.l2_prefetch})"
            )
        if type(key.final_fused) is not bool or (key.final_fused and not key.has_final):
            raise ValueError(
                f"CausalConv1d: final_fused={self.final_fused!r} must be None (the default with final states: {FWD_FINAL_FUSED_DEFAULT} dense, "
                f"{FWD_FINAL_FUSED_VARLEN_DEFAULT} varlen), True or False, and True needs final_states (declared: {key.has_final})"
            )
        if type(key.warp_walk) is not bool or (key.warp_walk and (not key.varlen or key.grid_ctas == 0)):
            raise ValueError(
                f"CausalConv1d: warp_walk={self.warp_walk!r} must be None (the default: {FWD_WARP_WALK_DEFAULT} on a varlen plan's run grid), True or "
                f"False, and True needs cu_seqlens (declared: {key.varlen}) and the run grid (grid_ctas None or > 0; got {key.grid_ctas})"
            )
        if type(key.shift_always) is not bool or (key.shift_always and key.grid_ctas == 0):
            raise ValueError(
                f"CausalConv1d: shift_always={self.shift_always!r} must be None (the default: {FWD_SHIFT_ALWAYS_DEFAULT} on the run grid), True or "
                f"False, and True needs the run grid (grid_ctas None or > 0; got {key.grid_ctas})"
            )
        if type(key.locate_guess) is not bool or (key.locate_guess and (not key.varlen or key.grid_ctas == 0 or key.chunk or key.warp_walk)):
            raise ValueError(
                f"CausalConv1d: locate_guess={self.locate_guess!r} must be None (the default: {FWD_LOCATE_GUESS_DEFAULT} on varlen contiguous runs "
                f"without the warp walk), True or False, and True needs cu_seqlens (declared: {key.varlen}), the run grid (grid_ctas "
                f"{key.grid_ctas}), chunk 0 (got {key.chunk}) and no warp walk (got {key.warp_walk})"
            )
        fin = self.final_states
        if type(key.final_contiguous) is not bool or (key.final_contiguous and not (fin is not None and _contiguous_states(fin.shape, fin.stride))):
            raise ValueError(
                f"CausalConv1d: final_contiguous={self.final_contiguous!r} must be None (the default: from the declared final states' layout), True "
                f"or False, and True needs final states declared as a contiguous [N, D, W - 1] (declared: {fin.describe() if fin is not None else 'none'})"
            )
        ok = self._seed_valid(key.chunk, key.steady, key.has_init and key.state_dtype == key.dtype)
        if type(key.seeded_starts) is not bool or (key.seeded_starts and not ok):
            raise ValueError(
                f"CausalConv1d: seeded_starts={self.seeded_starts!r} must be None (the default: {FWD_SEEDED_STARTS_DEFAULT} where valid), True or "
                f"False, and True needs a dense plan (cu_seqlens declared: {key.varlen}), chunk > 0 (got {key.chunk}), steady (got {key.steady}) "
                f"and initial_states of x's dtype {key.dtype} (declared: {self.initial_states.describe() if self.initial_states is not None else 'none'})"
            )
        if type(key.final_tail) is not bool or (key.final_tail and not (key.grid_ctas > 0 and key.final_fused)):
            raise ValueError(
                f"CausalConv1d: final_tail={self.final_tail!r} must be None (the default where valid: {FWD_FINAL_TAIL_DEFAULT} dense, "
                f"{FWD_FINAL_TAIL_VARLEN_DEFAULT} varlen), True or False, and True needs the run grid (grid_ctas None or > 0; got {key.grid_ctas}) "
                f"and fused final states (final_fused resolved: {key.final_fused}; final_states declared: {key.has_final})"
            )
        ini = self.initial_states
        if type(key.init_contiguous) is not bool or (
            key.init_contiguous and not (key.seeded_starts and ini is not None and _contiguous_states(ini.shape, ini.stride))
        ):
            raise ValueError(
                f"CausalConv1d: initial_contiguous={self.initial_contiguous!r} must be None (the default: from seeded_starts and the declared "
                f"initial states' layout), True or False, and True needs seeded_starts (resolved: {key.seeded_starts}) and initial states declared "
                f"as a contiguous [N, D, W - 1] (declared: {ini.describe() if ini is not None else 'none'})"
            )
        s = key.state_dtype
        sa, fa = self._state_align(key)  # execute checks them; 1 made the kernels move each bf16 state element as two bytes
        ptrs = [
            (key.dtype, 16),
            (key.w_dtype, 16),
            (key.w_dtype, 16) if key.has_bias else None,
            (key.dtype, 16),
            ("Int32", 4) if key.varlen else None,
            (s, sa) if key.has_init else None,
            (s, fa) if key.has_final else None,
        ]
        self._entry = None
        self._sep = None
        if self.fast_host not in (True, False):
            raise ValueError(f"CausalConv1d: fast_host={self.fast_host!r} must be True or False")
        self._memo = None
        self._alt = None
        self._key = key
        self._compiled_kernel, self._entry, self._sep = self._compile_launchers(key, ptrs)
        alt = self.per_call_chunk_key(key)
        if alt is not None:  # varlen: chunks for calls of long enough sequences, compiled now (see per_call_chunk_key)
            self._alt = self._compile_launchers(alt, ptrs)
        self._memo = {} if self.fast_host else None
        self._last = [(None, None)]
        self._varlen = self.cu_seqlens is not None

    def execute(self, x, weight, out, bias=None, cu_seqlens=None, initial_states=None, final_states=None, *, current_stream=None):
        """Launch on ``current_stream``. ``x``/``out`` may carry a different token total T than the plan (THD).

        The full validation runs once per distinct tensor metadata (:func:`_fwd_meta`: shapes, strides, dtypes and devices
        of every tensor, which optional ones are given; for a varlen plan without the token total T and the sequence count
        N, which change every call under continuous batching); its result, the kernel's scalar arguments, is memoized on
        the plan (``fast_host``, on by default), so a repeated layout reads the metadata (varlen: T, N, and that out and
        the states agree with them), checks the addresses' alignment and launches. A call whose metadata was never
        validated, whose out / states disagree with x / cu_seqlens, or with a misaligned address, takes the full
        validation (and raises exactly its error)."""
        memo = self._memo
        meta = None
        if memo is not None:
            try:
                meta = _fwd_meta(x, weight, out, bias, cu_seqlens, initial_states, final_states, self._varlen)
            except (AttributeError, TypeError):  # not tensors: the full validation names the problem
                meta = None
            if meta is not None:
                last = self._last
                pair = last[0]  # (metadata, memo entry) of the previous call, replaced as one object
                if meta == pair[0]:
                    got = pair[1]
                else:
                    got = memo.get(meta)
                    if got is not None:
                        last[0] = (meta, got)
                if got is not None and self._varlen:  # T and N of this call (the metadata left them out)
                    xs = x.shape
                    n = cu_seqlens.shape[0] - 1
                    if (
                        out.shape != xs
                        or (initial_states is not None and initial_states.shape[0] != n)
                        or (final_states is not None and final_states.shape[0] != n)
                    ):
                        got = None  # the full validation raises its error
                    else:
                        tail = got[0]
                        got = ((xs[0] if len(xs) == 2 else xs[0] * xs[1], tail[1], tail[2], tail[3], tail[4], n, *tail[6:]), got[1], got[2])
                if got is not None:
                    xp, wp, yp = x.data_ptr(), weight.data_ptr(), out.data_ptr()
                    bp = None if bias is None else bias.data_ptr()
                    cp = None if cu_seqlens is None else cu_seqlens.data_ptr()
                    ip = None if initial_states is None else initial_states.data_ptr()
                    fp = None if final_states is None else final_states.data_ptr()
                    a16 = xp | wp | yp | (0 if bp is None else bp)
                    sa, fa = got[2]
                    if not (a16 & 15 or (cp is not None and cp & 3) or (ip is not None and ip % sa) or (fp is not None and fp % fa)):
                        self._launch(got, x, weight, out, bias, cu_seqlens, initial_states, final_states, xp, wp, bp, yp, cp, ip, fp, current_stream)
                        return out
        got = self._validate(x, weight, out, bias, cu_seqlens, initial_states, final_states)
        if meta is not None:
            if len(memo) >= _LAUNCH_MEMO_MAX:
                memo.clear()
            memo[meta] = got
            self._last[0] = (meta, got)
        self._launch(
            got,
            x,
            weight,
            out,
            bias,
            cu_seqlens,
            initial_states,
            final_states,
            x.data_ptr(),
            weight.data_ptr(),
            _data_ptr(bias),
            out.data_ptr(),
            _data_ptr(cu_seqlens),
            _data_ptr(initial_states),
            _data_ptr(final_states),
            current_stream,
        )
        return out

    def _validate(self, x, weight, out, bias, cu_seqlens, initial_states, final_states):
        """The full execute-time checks (metadata and alignment; no conversion, no device read). Returns the memo entry
        ``(launch integers after the pointers, state dtype or None, state alignment)``."""
        what = "CausalConv1d.execute"
        self._ensure_support_checked()
        varlen = self.cu_seqlens is not None
        vec = self._vec
        check_declared(what, self, bias=bias, cu_seqlens=cu_seqlens, initial_states=initial_states, final_states=final_states)
        _check_runtime(x, self.x, vec, what, token_dims_free=varlen)
        _check_runtime(out, self.out, vec, what, token_dims_free=varlen)
        _check_runtime(weight, self.weight, 0, what, token_dims_free=False)
        _check_dense(weight, self.weight, what)
        if tuple(out.shape) != tuple(x.shape):
            raise ValueError(f"{what}: out {tuple(out.shape)} must have the shape of x {tuple(x.shape)}")
        if bias is not None:
            _check_runtime(bias, self.bias, 0, what, token_dims_free=False)
            _check_dense(bias, self.bias, what)
        n_seqs = self._runtime_sequences(what, cu_seqlens, ((initial_states, self.initial_states), (final_states, self.final_states)))
        if self._compiled_kernel is None:
            self.compile()
        f = final_states
        if f is not None and self._final_contiguous() and (not _contiguous_states(tuple(f.shape), tuple(f.stride())) or f.data_ptr() % 16):
            raise ValueError(
                f"{what}: final_states (shape={tuple(f.shape)}, stride={tuple(f.stride())}, dtype={f.dtype}, address 0x{f.data_ptr():x}): the plan "
                f"writes contiguous [N, D, W - 1] final states (strides (D (W - 1), W - 1, 1)) at 16-byte aligned addresses (declared "
                f"{self.final_states.describe()}); build a plan for this layout, or set plan.final_contiguous = False for any strides"
            )
        i = initial_states
        if i is not None and self._key.init_contiguous and (not _contiguous_states(tuple(i.shape), tuple(i.stride())) or i.data_ptr() % 16):
            raise ValueError(
                f"{what}: initial_states (shape={tuple(i.shape)}, stride={tuple(i.stride())}, dtype={i.dtype}, address 0x{i.data_ptr():x}): the "
                f"plan reads contiguous [N, D, W - 1] initial states (strides (D (W - 1), W - 1, 1)) at 16-byte aligned addresses (declared "
                f"{self.initial_states.describe()}); build a plan for this layout, or set plan.initial_contiguous = False for any strides"
            )
        T = _token_count(x)
        D = int(x.shape[-1])
        sx, sy = _token_stride(x), _token_stride(out)
        for name, st in (("x", sx), ("out", sy)):
            if st % vec:
                raise ValueError(f"{what}: {name} token stride {st} is not a multiple of {vec} elements")
        seq_arg = self._seq_len if not varlen else 0
        if not varlen and x.dim() == 3:
            seq_arg = int(x.shape[1])
        tail = (T, D, sx, sy, max(seq_arg, 1), n_seqs, *_state_strides(initial_states), *_state_strides(final_states))
        st = self.initial_states or self.final_states
        sdt = st.dtype if (initial_states is not None or final_states is not None) else None
        return tail, sdt, self._state_align(self._key)

    def _state_align(self, key=None) -> tuple[int, int]:
        """Alignments in bytes the initial / final state pointers are compiled for and checked against: the state dtype's
        size (1 without), 16 for contiguous final states (:meth:`_final_contiguous`: vector stores) and for the initial
        states of a plan whose seeded halos read them by vectors (``Conv1dFwdKey.init_contiguous``)."""
        st = self.initial_states or self.final_states
        a = st.dtype.itemsize if st is not None else 1
        key = key or self.compile_key()  # compile() and execute pass the compiled key
        return (16 if key.init_contiguous else a), (16 if self._final_contiguous() else a)

    def _init_contiguous(self, seed: bool) -> bool:
        """``Conv1dFwdKey.init_contiguous``: ``plan.initial_contiguous`` where set, else whether the plan seeds its chunks
        (``seed``: the resolved ``seeded_starts``) from initial states declared as a contiguous [N, D, W - 1]."""
        if self.initial_contiguous is not None:
            return self.initial_contiguous
        ini = self.initial_states
        return bool(seed) and ini is not None and _contiguous_states(ini.shape, ini.stride)

    def _final_contiguous(self) -> bool:
        """``Conv1dFwdKey.final_contiguous``: ``plan.final_contiguous`` where set, else whether the declared final states
        are a contiguous [N, D, W - 1]; False without final states."""
        if self.final_contiguous is not None:
            return self.final_contiguous
        fin = self.final_states
        return fin is not None and _contiguous_states(fin.shape, fin.stride)

    def _launch(self, got, x, weight, out, bias, cu_seqlens, initial_states, final_states, xp, wp, bp, yp, cp, ip, fp, current_stream):
        """One launch with the memo entry ``got`` and the call's addresses (tvm-ffi: integers; DSL entry: cute pointers).
        A varlen plan with a per-call chunk key launches its chunks for a call of long enough sequences
        (:meth:`per_call_chunk_key`); a fused plan with both state tensors launches its separate final-states kernels when
        they overlap (``final_fused``)."""
        tail, sdt, (sa, fa) = got
        kernel, entry, sep = self._compiled_kernel, self._entry, self._sep
        if self._alt is not None and tail[0] >= FWD_VARLEN_CHUNK_MIN_LEN * tail[5]:  # T >= min length x N: chunks
            kernel, entry, sep = self._alt
        if sep is not None and _overlap(initial_states, ip, final_states, fp):
            kernel, entry = sep
        if entry is not None:  # tvm-ffi: integer addresses, ints and a raw stream handle, no per-call conversion
            entry(xp, wp, bp, yp, cp, ip, fp, *tail, _stream_handle(current_stream, x.device))
            return
        kernel(
            _ptr(x, self.x.dtype, 16),
            _ptr(weight, self.weight.dtype, 16),
            _ptr(bias, self.weight.dtype, 16),
            _ptr(out, self.x.dtype, 16),
            _ptr(cu_seqlens, data_type.INT32, 4),
            _ptr(initial_states, sdt, sa),
            _ptr(final_states, sdt, fa),
            *tail,
            _stream(current_stream, x.device),
        )


class CausalConv1dBackward(_Conv1dCommon):
    """Backward adapter: dx, dweight, dbias (when bias), d(initial_states) (when initial states)."""

    def __init__(self, x, weight, dy, dx, dweight, bias=None, dbias=None, cu_seqlens=None, initial_states=None, dinitial_states=None, activation=None):
        super().__init__()
        set_descs(
            self,
            x=x,
            weight=weight,
            dy=dy,
            dx=dx,
            dweight=dweight,
            bias=bias,
            dbias=dbias,
            cu_seqlens=cu_seqlens,
            initial_states=initial_states,
            dinitial_states=dinitial_states,
        )
        self.activation = activation

    def _states(self):
        return (self.initial_states, self.dinitial_states)

    def check_support(self) -> bool:
        what = "causal_conv1d_backward"
        self._check_common(what)
        varlen = self.cu_seqlens is not None
        for t in (self.dy, self.dx):
            self._check_dtype(t, (self.x.dtype,), what)
            self._value_error_if(t.shape != self.x.shape, f"{what}: {t.describe()} must have the shape of {self.x.describe()}")
            _tokens_view(t, what, self._vec, varlen)
        self._check_shape(self.dweight, self.weight.shape, what)
        self._check_dtype(self.dweight, (self.weight.dtype,), what)
        self._decline_if(self.dweight.stride != self.weight.stride, f"{what}: {self.dweight.describe()} must be contiguous [D, W]")
        self._value_error_if((self.bias is None) != (self.dbias is None), f"{what}: bias and dbias must be given together")
        if self.dbias is not None:
            self._check_shape(self.dbias, self.bias.shape, what)
            self._check_dtype(self.dbias, (self.weight.dtype,), what)
            self._decline_if(self.dbias.stride != (1,), f"{what}: {self.dbias.describe()} must be contiguous")
        self._value_error_if(
            (self.initial_states is None) != (self.dinitial_states is None), f"{what}: initial_states and dinitial_states must be given together"
        )
        if self.initial_states is not None:
            self._value_error_if(self.initial_states.dtype != self.dinitial_states.dtype, f"{what}: dinitial_states must have the dtype of initial_states")
        d = self.weight.shape[0]
        grid_x = (d // self._vec + _THREADS - 1) // _THREADS
        self._g = max(1, min(1024, _BWD_RESIDENT_CTAS // grid_x))
        self._is_supported = True
        return True

    def scratch_workspace_bytes(self) -> int:
        """fp32 partial sums [G, W + 1, D] (G fixed at plan time)."""
        self._ensure_support_checked()
        from cudnn.workspace import ws_align

        d, width = self.weight.shape
        return ws_align(self._g * (width + 1) * d * 4)

    def compile_key(self):
        from .bwd_kernel import Conv1dBwdKey

        return Conv1dBwdKey(
            dtype=_CNAME[self.x.dtype],
            w_dtype=_CNAME[self.weight.dtype],
            width=self.weight.shape[1],
            has_bias=self.bias is not None,
            silu=self.silu,
            varlen=self.cu_seqlens is not None,
            has_init=self.initial_states is not None,
            state_dtype=_CNAME[self.initial_states.dtype] if self.initial_states is not None else "",
        )

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()
        s = key.state_dtype
        ptrs = [
            (key.dtype, 16),  # x
            (key.w_dtype, 16),  # weight
            (key.w_dtype, 16) if key.has_bias else None,
            (key.dtype, 16),  # dy
            ("Int32", 4) if key.varlen else None,
            (s, 1) if key.has_init else None,
            (key.dtype, 16),  # dx
            (key.w_dtype, 16),  # dweight
            (key.w_dtype, 16) if key.has_bias else None,
            (s, 1) if key.has_init else None,
            ("Float32", 16),  # partials
        ]
        self._compiled_kernel = _compile_cached(key, ".bwd_kernel", "CausalConv1dBwd", ptrs, 14)

    def execute(
        self,
        x,
        weight,
        dy,
        dx,
        dweight,
        bias=None,
        dbias=None,
        cu_seqlens=None,
        initial_states=None,
        dinitial_states=None,
        *,
        workspace=None,
        current_stream=None,
    ):
        what = "CausalConv1dBackward.execute"
        self._ensure_support_checked()
        varlen = self.cu_seqlens is not None
        vec = self._vec
        check_declared(what, self, bias=bias, dbias=dbias, cu_seqlens=cu_seqlens, initial_states=initial_states, dinitial_states=dinitial_states)
        for t, plan in ((x, self.x), (dy, self.dy), (dx, self.dx)):
            _check_runtime(t, plan, vec, what, token_dims_free=varlen)
            if tuple(t.shape) != tuple(x.shape):
                raise ValueError(f"{what}: {plan.name} {tuple(t.shape)} must have the shape of x {tuple(x.shape)}")
        for t, plan in ((weight, self.weight), (dweight, self.dweight), (bias, self.bias), (dbias, self.dbias)):
            if plan is not None:
                _check_runtime(t, plan, 0, what, token_dims_free=False)
                _check_dense(t, plan, what)
        n_seqs = self._runtime_sequences(what, cu_seqlens, ((initial_states, self.initial_states), (dinitial_states, self.dinitial_states)))
        from cudnn.workspace import Workspace

        ws = Workspace.over(workspace, self.scratch_workspace_bytes(), type(self).__name__, device=x.device)
        d, width = self.weight.shape
        part = ws.take(self._g * (width + 1) * d, "float32")
        if self._compiled_kernel is None:
            self.compile()
        T = _token_count(x)
        seq_arg = int(x.shape[1]) if (not varlen and x.dim() == 3) else (T if not varlen else 1)
        strides = [_token_stride(t) for t in (x, dy, dx)]
        if any(st % vec for st in strides):
            raise ValueError(f"{what}: token strides {strides} of x, dy, dx must be multiples of {vec} elements")

        sdt = self.initial_states.dtype if self.initial_states is not None else None
        self._compiled_kernel(
            _ptr(x, self.x.dtype, 16),
            _ptr(weight, self.weight.dtype, 16),
            _ptr(bias, self.weight.dtype, 16),
            _ptr(dy, self.x.dtype, 16),
            _ptr(cu_seqlens, data_type.INT32, 4),
            _ptr(initial_states, sdt, 1),
            _ptr(dx, self.x.dtype, 16),
            _ptr(dweight, self.weight.dtype, 16),
            _ptr(dbias, self.weight.dtype, 16),
            _ptr(dinitial_states, sdt, 1),
            _ptr(part, data_type.FLOAT, 16),
            T,
            d,
            *strides,
            max(seq_arg, 1),
            n_seqs,
            self._g,
            *_state_strides(initial_states),
            *_state_strides(dinitial_states),
            _stream(current_stream, x.device),
        )
        return dx


class CausalConv1dUpdate(APIBase):
    """Decode-step adapter: ``out = act(conv(window)); conv_state rolls by one token, in place``."""

    def __init__(self, x, conv_state, weight, out, bias=None, conv_state_indices=None, activation=None):
        super().__init__()
        set_descs(self, x=x, conv_state=conv_state, weight=weight, out=out, bias=bias, conv_state_indices=conv_state_indices)
        self.activation = activation
        #: Launch route (set before compile()), as :class:`CausalConv1d`'s.
        self.tvm_ffi = _use_tvm_ffi_default()
        #: Host fast path (set before compile()): execute() memoizes its validation per tensor metadata (see execute).
        self.fast_host = UPDATE_FAST_HOST_DEFAULT
        self._entry = None
        self._memo = None  # metadata -> launch integers; set by compile() when fast_host

    def check_support(self) -> bool:
        what = "causal_conv1d_update"
        require_cutedsl(f"cudnn.linear_attention.{what}", CUTEDSL_FLOOR)
        self.silu = _silu_flag(self.activation)
        _check_one_device(self, what)
        x, w, st = self.x, self.weight, self.conv_state
        for t in (x, w, st):
            self._check_dtype(t, _FLOATS, what)
        self._check_rank(x, 2, what)
        self._check_rank(w, 2, what)
        self._check_rank(st, 3, what)
        d, width = w.shape
        self._decline_if(not 2 <= width <= 4, f"{what}: {w.describe()} kernel width {width} is outside 2..4")
        self._decline_if(w.stride != (width, 1), f"{what}: {w.describe()} must be contiguous [D, W]")
        self._value_error_if(x.shape[1] != d, f"{what}: {x.describe()} has {x.shape[1]} channels but {w.describe()} has {d}")
        self._value_error_if(st.shape[1:] != (d, width - 1), f"{what}: {st.describe()} must be [S, D, W - 1] = [S, {d}, {width - 1}]")
        vec = _vec(x.dtype)
        self._decline_if(d % vec != 0, f"{what}: {x.describe()} channel count {d} is not a multiple of {vec}")
        for t in (x, self.out):
            self._decline_if(t.shape[1] > 1 and t.stride[1] != 1, f"{what}: {t.describe()} needs unit channel stride; declined (Rule 2)")
            self._decline_if(t.shape[0] > 1 and t.stride[0] % vec != 0, f"{what}: {t.describe()} row stride is not a multiple of {vec} elements")
        self._check_dtype(self.out, (x.dtype,), what)
        self._check_shape(self.out, x.shape, what)
        if self.bias is not None:
            self._check_shape(self.bias, (d,), what)
            self._value_error_if(self.bias.dtype != w.dtype, f"{what}: {self.bias.describe()} must have the weight's dtype")
            self._decline_if(self.bias.stride != (1,), f"{what}: {self.bias.describe()} must be contiguous")
        if self.conv_state_indices is not None:
            idx = self.conv_state_indices
            self._check_rank(idx, 1, what)
            self._decline_if(idx.dtype != data_type.INT32, f"{what}: {idx.describe()} must be int32")
            self._check_shape(idx, (x.shape[0],), what)
            self._decline_if(idx.shape[0] > 1 and idx.stride != (1,), f"{what}: {idx.describe()} must be contiguous")
        else:
            self._value_error_if(st.shape[0] < x.shape[0], f"{what}: {st.describe()} has fewer rows than the batch {x.describe()}")
        self._vec = vec
        self._is_supported = True
        return True

    def compile_key(self):
        from .update_kernel import Conv1dUpdateKey

        return Conv1dUpdateKey(
            dtype=_CNAME[self.x.dtype],
            w_dtype=_CNAME[self.weight.dtype],
            state_dtype=_CNAME[self.conv_state.dtype],
            width=self.weight.shape[1],
            has_bias=self.bias is not None,
            silu=self.silu,
            has_indices=self.conv_state_indices is not None,
            state_contiguous=self._state_contiguous(),
        )

    def _state_contiguous(self) -> bool:
        return _contiguous_states(self.conv_state.shape, self.conv_state.stride)

    def compile(self) -> None:
        self._ensure_support_checked()
        key = self.compile_key()
        ptrs = [
            (key.dtype, 16),
            (key.w_dtype, 16),
            (key.w_dtype, 16) if key.has_bias else None,
            (key.state_dtype, 16 if key.state_contiguous else 1),
            ("Int32", 4) if key.has_indices else None,
            (key.dtype, 16),
        ]
        self._entry = None
        if type(self.fast_host) is not bool:
            raise ValueError(f"CausalConv1dUpdate: fast_host={self.fast_host!r} must be True or False")
        self._memo = None
        self._compiled_kernel = _compile_cached(key, ".update_kernel", "CausalConv1dUpdate", ptrs, 8, self.tvm_ffi)
        if self.tvm_ffi:
            self._entry = _tvm_ffi_entry(self._compiled_kernel)
        self._memo = {} if self.fast_host else None

    def execute(self, x, conv_state, weight, out, bias=None, conv_state_indices=None, *, current_stream=None):
        """Launch on ``current_stream``; ``conv_state`` rolls in place.

        With ``fast_host`` (default) the full validation runs once per distinct tensor metadata (:func:`_update_meta`:
        shapes, strides, dtypes and devices of every tensor, which optional ones are given) and its result, the kernel's
        integer arguments, is memoized on the plan; a repeated layout checks only the addresses' alignment and launches.
        A call whose metadata was never validated, or with a misaligned address, takes the full validation (and raises
        exactly its error)."""
        memo = self._memo
        meta = None
        if memo is not None:
            try:
                meta = _update_meta(x, conv_state, weight, out, bias, conv_state_indices)
            except (AttributeError, TypeError):  # not tensors: the full validation names the problem
                meta = None
            if meta is not None:
                got = memo.get(meta)
                if got is not None:
                    xp, sp, wp, yp = x.data_ptr(), conv_state.data_ptr(), weight.data_ptr(), out.data_ptr()
                    bp = None if bias is None else bias.data_ptr()
                    ip = None if conv_state_indices is None else conv_state_indices.data_ptr()
                    if not ((xp | wp | yp | (0 if bp is None else bp)) & 15 or sp % got[1] or (ip is not None and ip & 3)):
                        self._launch(got[0], x, conv_state, weight, out, bias, conv_state_indices, xp, wp, bp, sp, ip, yp, current_stream)
                        return out
        got = self._validate(x, conv_state, weight, out, bias, conv_state_indices)
        if meta is not None:
            if len(memo) >= _LAUNCH_MEMO_MAX:
                memo.clear()
            memo[meta] = got
        self._launch(
            got[0],
            x,
            conv_state,
            weight,
            out,
            bias,
            conv_state_indices,
            x.data_ptr(),
            weight.data_ptr(),
            _data_ptr(bias),
            conv_state.data_ptr(),
            _data_ptr(conv_state_indices),
            out.data_ptr(),
            current_stream,
        )
        return out

    def _validate(self, x, conv_state, weight, out, bias, conv_state_indices):
        """The full execute-time checks (metadata and alignment; no conversion, no device read). Returns the memo entry
        ``(launch integers after the pointers, conv_state alignment)``."""
        what = "CausalConv1dUpdate.execute"
        self._ensure_support_checked()
        check_declared(what, self, bias=bias, conv_state_indices=conv_state_indices)
        vec = self._vec
        _check_runtime(x, self.x, vec, what, token_dims_free=False)
        _check_runtime(out, self.out, vec, what, token_dims_free=False)
        _check_runtime(weight, self.weight, 0, what, token_dims_free=False)
        _check_dense(weight, self.weight, what)
        state_align = 16 if self._state_contiguous() else self.conv_state.dtype.itemsize
        _check_runtime(conv_state, self.conv_state, 0, what, token_dims_free=False, align=state_align)
        if tuple(conv_state.stride()) != self.conv_state.stride:
            raise ValueError(f"{what}: conv_state strides {tuple(conv_state.stride())} differ from the plan's {self.conv_state.stride}")
        if bias is not None:
            _check_runtime(bias, self.bias, 0, what, token_dims_free=False)
            _check_dense(bias, self.bias, what)
        if conv_state_indices is not None:
            _check_runtime(conv_state_indices, self.conv_state_indices, 0, what, token_dims_free=False, align=4)
            _check_dense(conv_state_indices, self.conv_state_indices, what)
        if self._compiled_kernel is None:
            self.compile()
        B, D = int(x.shape[0]), int(x.shape[1])
        tail = (
            B,
            D,
            int(conv_state.shape[0]),
            int(x.stride(0)) if B > 1 else D,
            int(out.stride(0)) if B > 1 else D,
            *(int(s) for s in conv_state.stride()),
        )
        return tail, state_align

    def _launch(self, tail, x, conv_state, weight, out, bias, conv_state_indices, xp, wp, bp, sp, ip, yp, current_stream):
        """One launch with the integer arguments ``tail`` and the call's addresses (tvm-ffi: integers; DSL entry: cute
        pointers)."""
        if self._entry is not None:  # tvm-ffi: integer addresses, ints and a raw stream handle, no per-call conversion
            self._entry(xp, wp, bp, sp, ip, yp, *tail, _stream_handle(current_stream, x.device))
            return
        state_align = 16 if self._state_contiguous() else self.conv_state.dtype.itemsize
        self._compiled_kernel(
            _ptr(x, self.x.dtype, 16),
            _ptr(weight, self.weight.dtype, 16),
            _ptr(bias, self.weight.dtype, 16),
            _ptr(conv_state, self.conv_state.dtype, state_align),
            _ptr(conv_state_indices, data_type.INT32, 4),
            _ptr(out, self.x.dtype, 16),
            *tail,
            _stream(current_stream, x.device),
        )


def causal_conv1d(x, weight, bias=None, activation=None, cu_seqlens=None, initial_states=None, output_final_states: bool = False):
    """Causal depthwise conv1d over THD ``x`` [T, D] (with ``cu_seqlens`` int32 [N + 1]) or dense [B, L, D].

    ``weight`` [D, W] (W in 2..4), ``bias`` [D], ``activation`` None or 'silu' / 'swish', ``initial_states``
    [N, D, W - 1] (the W - 1 tokens before each sequence, oldest first). Returns ``y`` (shape and dtype
    of ``x``), or ``(y, final_states)`` with final_states [N, D, W - 1] when ``output_final_states``.
    A torch custom op (``torch.ops.cudnn_linear_attention.causal_conv1d_fwd``): fake impl for
    torch.compile, autograd through :class:`CausalConv1dBackward` (dx, dweight, dbias, d initial_states;
    final_states are not differentiable).
    """
    from .torch_op import causal_conv1d as _impl

    return _impl(x, weight, bias, activation, cu_seqlens, initial_states, output_final_states)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None):
    """One decode step: ``x`` [B, D], ``conv_state`` [S, D, W - 1] updated in place, returns ``out`` [B, D].

    ``conv_state_indices`` int32 [B] picks each row's state slot; negative slots are padding (skipped).
    A torch custom op (``torch.ops.cudnn_linear_attention.causal_conv1d_update``, mutates ``conv_state``).
    """
    from .torch_op import causal_conv1d_update as _impl

    return _impl(x, conv_state, weight, bias, activation, conv_state_indices)
