"""causal_conv1d forward: the short depthwise causal convolution over THD (varlen) or dense tokens, CuTe DSL.

Computes, per channel ``d`` and token ``t`` of sequence ``n`` (tokens ``bos <= t < eos``)::

    y[t, d] = act(bias[d] + sum_{k < W} weight[d, k] * xs(t - (W - 1) + k, d))
    xs(p, d) = x[p, d]                                  if p >= bos
             = initial_states[n, d, p - bos + W - 1]    if p < bos and initial states are given
             = 0                                        otherwise

``act`` is SiLU or identity. Optionally ``final_states[n, d, j] = xs(eos - (W - 1) + j, d)`` for
``j < W - 1`` (the rolling state the decode ``update`` continues from).

Layouts: ``x`` / ``y`` are [T, D] with unit channel stride and a token stride that is a multiple of
16 bytes (a dense [B, L, D] batch is the equal-length case, passed as [B * L, D] plus ``L``); ``weight``
[D, W] contiguous; ``bias`` [D]; states [N, D, W - 1] with any strides (final states declared contiguous keep that
layout at a 16-byte aligned address: ``final_contiguous``); ``cu_seqlens`` int32 [N + 1].
Dtypes: x/y bf16, fp16 or fp32; weight/bias any of those; math in fp32. W in 2..4.

Memory-bound and one pass: each thread owns 16 bytes of channels (8 bf16) and a run of tokens; it
loads its token run with 16-byte vector loads in groups (so several loads are in flight), keeps the
last W inputs in registers, and stores 16-byte outputs. Sequence boundaries are found on device from
``cu_seqlens`` (a binary search per CTA, then a forward walk), so varlen batches need no host planning
and no padding. Runtime extents (T, D, N, strides) are kernel arguments, never compile keys (Rule 4).

Two grids, one per-token math (``Conv1dFwdKey.grid_ctas``):

- ``grid_ctas`` > 0, the run grid (``kernel_runs``; the adapter's default since session 6, with ``grid_ctas`` = 4 x the
  device's SM count: 528 on an H200, one wave at 4 CTAs per SM): about ``grid_ctas`` CTAs in all, ``n_runs = grid_ctas //
  channel blocks`` (a channel block is 128 threads x 16 bytes) along T, at least 1 and at most one per 64 tokens, each
  CTA walking one contiguous run of ``T / n_runs`` tokens (runs differ by at most one token): the taps, the sequence
  search and the W - 1 halo tokens once per run instead of once per 64 tokens, no second wave (``grid_ctas`` at most the
  resident CTAs), and a prologue that issues the run's first loads, the halo and the taps together before it waits on
  any (the 64-token kernel waits for the taps, then each halo token, then its first group).
- ``grid_ctas`` = 0, the 64-token CTAs (``kernel``; the default until session 6): one CTA per channel block and per
  ``tokens_per_cta`` = 64 tokens.

Same math in the same order: the two grids' outputs are bitwise equal (tests/test_conv1d_fast_gpu.py). H200, bf16,
W = 4, SiLU, GB/s eager (docs/benchmarks/linear_attention_quick.md): 3366 at T16k x D4096, 3599 at T32k x D4096, 3589 on
64 varlen sequences of T32k x D4096 (3469 with the 64-token CTAs); evict-first y stores (``st.global.cs``) were measured
no better and removed.

Run-grid options (session 9, opt-in, both bitwise the default's outputs; the default's PTX is unchanged):
``Conv1dFwdKey.steady`` (a group of ``group`` tokens inside one sequence and W - 1 past its start skips the per-token
sequence walk and history branches: :func:`token_output_steady`, ~91 instead of ~150 SASS instructions per token for bf16
W = 4 SiLU) and ``Conv1dFwdKey.l2_prefetch`` (``cp.async.bulk.prefetch.L2`` of the token group P groups ahead).

Chunk-interleaved runs (``Conv1dFwdKey.chunk`` = C > 0, on the run grid without ``l2_prefetch``; the adapter's default C =
8 for dense plans since the session-15 H200 A/B, +5-7% kernel-only (docs/benchmarks/linear_attention_conv1d_s15_chunk.md),
opt-in for varlen; bitwise the contiguous runs' outputs): the same ``n_runs`` CTA rows, but row ``j`` walks the chunks of
C tokens ``j, j + n_runs, j + 2 n_runs, ...`` (:meth:`CausalConv1dFwd.chunks`), so the CTAs of a wave sweep T together
instead of each streaming its own far-away run. Per chunk: the sequence located (dense: arithmetically; varlen: a binary
search over ``cu_seqlens`` from the previous chunk's sequence, with the chunk's second group's loads in flight), the
window reset from its W - 1 halo tokens (zero / the initial state before a sequence start, as in a run), the run's group
math (steady groups and the per-token sequence walk included). The double buffer crosses chunk boundaries: a chunk's last
group loads the next chunk's first group at its start and its halo token by token into the registers its computed tokens
free, and the next chunk's first group reads the halo into the window before it issues its own next loads. Each chunk
re-reads W - 1 halo rows (mostly L2 hits): 3/8 more load instructions at C = 8. ptxas frames at the 128-register cap
(sm_90a, bf16 W = 4): 0 dense without states, 8 bytes varlen without states (the loop's chunk count: one local load per chunk);
with initial + final states 32 dense / 40 varlen fused, 24 / 40 with ``final_kernel`` (56 before session 16, when the
state pointers were compiled 1-byte aligned and every bf16 state element moved as two bytes).

Final states (``Conv1dFwdKey.final_fused``, the adapter's default since the session-16 H200 A/B: 3207.9 vs 3090.9 GB/s on
the dense states batch): the forward kernel writes them, no ``final_kernel`` launch. On every grid, after each group pair
a thread writes the final states of the sequences that ended in it (:func:`final_states_ending`: varlen empty sequences included; with T = 0 CTA row 0 writes
every row) with ``final_kernel``'s own body (:func:`final_state_of`: the last W - 1 x tokens, just loaded, or the initial
state / zero before a sequence start), so the values are the same bits. Not valid when the final states overlap the
initial states (another CTA may still read a sequence's initial state): the adapter launches the ``final_fused = False``
pair for such a call. Final tail (``Conv1dFwdKey.final_tail``, the adapter's default for varlen plans since the
session-28 H200 A/B: 256 varlen sequences with states 2947.9 -> 3209.7 GB/s kernel-only, 1024 2509.2 -> 2925.5; dense
plans lost with it): the token loop writes none, and after it CTA row ``j`` writes the final states of sequences ``j, j
+ n_runs, ...`` with the same body, so no walk of ``cu_seqlens`` and no reload of a sequence's last tokens sits inside the
loop.

Warp walk (``Conv1dFwdKey.warp_walk``, varlen run grid; the adapter's default on chunk 8 for varlen plans without states
since the session-29 H200 A/B: 1024 varlen sequences 3348.7 -> 3428.1 GB/s kernel-only, 64 3691.4 -> 3787.2; opt-in
with states; bitwise the per-token walk's outputs): every thread of a warp handles the same tokens, so the warp walks ``cu_seqlens`` together: its lanes hold a
window of entries (a token's sequence is a ballot and two shuffles, :func:`warp_advance`, no dependent load per sequence
crossed) and a chunk (or a run's first token) locates its sequence by a window at the density-predicted sequence, then if
needed a (K + 1)-ary search (:func:`warp_locate`), instead of a binary search of ~14 dependent loads over 16k offsets.

Window shift (``Conv1dFwdKey.shift_always``, the adapter's default since the session-25 H200 A/B: the dense states batch
+7.2% kernel-only, other rows within 1%; bitwise the guarded shift's outputs): a group on the per-token path shifts the
register window and runs :func:`token_output` for every token of the group, past the run's or chunk's end too, with only
the sequence walk and the store asking whether the token is inside the run. Guarding the shift too made ptxas merge two
windows after every token (~27 register moves per token at bf16 W = 4).

First sequence of a varlen run (``Conv1dFwdKey.locate_guess``, the adapter's default on varlen contiguous runs without
the warp walk since the session-25 H200 A/B: the 1-token batch +3.6%): :func:`locate_sequence_guess` tries the sequence
the average density predicts (two independent loads) before the binary search, which otherwise costs every CTA ~14
dependent loads over 16k offsets before its first group.

Contiguous final states (``Conv1dFwdKey.final_contiguous``, the adapter's default for a declared contiguous [N, D, W - 1]
final-states layout since the session-26 H200 A/B): :func:`final_state_of` assembles a thread's VEC * (W - 1) final-state
elements in registers (x's tokens by 16-byte loads) and writes them with vector stores (:func:`state_vectors`) instead of
one 2-byte access per element, whose scattered sectors cost the 512-sequence states batch 36% (kernel-only, GB/s: the
dense states batch 16 x 1024 3485.1 -> 3583.3, 512 x 32 1704.0 -> 2654.6, 256 varlen sequences 2291.3 -> 2845.5). The
initial states keep any strides: reading them by vectors too (tried in the same A/B) cost the 16-sequence batch 2%.

Seeded starts (``Conv1dFwdKey.seeded_starts``, the adapter's default for dense chunked plans with initial states of x's
dtype and sequences of at most 64 tokens since the session-27 H200 A/B: the 512 x 32 states batch +20% kernel-only): a
chunk that starts a sequence receives that sequence's initial-state entries in its halo registers, fetched one group
ahead (:func:`fetch_halo`; 16-byte loads of each thread's slice with ``init_contiguous``, mapped into the window by
:func:`seeded_window`), so its first group takes the steady path instead of reading the entries inside the token math.

Tests: packages/cudnn-linear-attention/tests/test_conv1d*.py; benchmark: benchmarks/linear_attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from .._device.activation import silu
from .._device.channels import channel_vectors, load_history, load_taps, state_vectors
from .._device.sequences import (
    advance_sequence,
    locate_sequence,
    locate_sequence_from,
    locate_sequence_guess,
    sequence_bounds,
    warp_advance,
    warp_locate,
)

THREADS = 128


@dsl_user_op
def prefetch_l2_bulk(gmem_ptr: cute.Pointer, num_bytes: Int32, *, loc=None, ip=None):
    """``cp.async.bulk.prefetch.L2.global [ptr], bytes``: asks L2 for ``num_bytes`` (a multiple of 16, ``ptr`` 16-byte
    aligned) of global memory from ``gmem_ptr`` on; no destination, no completion to wait for (a hint: the data is
    unchanged, so the outputs are too). The DSL 4.8.0 floor has no non-experimental wrapper for it, hence one line of PTX
    (the pattern of cudnn.sdpa.bwd.kernel_sm90.reduce_add_bulk_f32); one thread of the CTA per token issues it."""
    llvm.inline_asm(
        None,
        [gmem_ptr.toint(loc=loc, ip=ip).ir_value(), Int32(num_bytes).ir_value(loc=loc, ip=ip)],
        "cp.async.bulk.prefetch.L2.global [$0], $1;",
        "l,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@cute.jit
def vector_copy(
    atom: cute.CopyAtom,
    gX: cute.Tensor,
    buf: cute.Tensor,
    t: Int32,
    dv: Int32,
    slot: cutlass.Constexpr[int],
    half: cutlass.Constexpr[int],
    vec: cutlass.Constexpr[int],
):
    """One 16-byte load through ``atom``: token ``t``'s channel vector ``dv`` of the :func:`channel_vectors` view ``gX`` into
    ``buf[:, slot, half]`` (``buf`` [vec, slots, halves] registers). Both sides as flat ``vec``-element views, so the atom
    moves the vector in one instruction."""
    src = cute.make_tensor(gX[(None, None), (t, dv)].iterator, cute.make_layout((vec,)))
    dst = cute.make_tensor(buf[None, slot, half].iterator, cute.make_layout((vec,)))
    cute.copy(atom, src, dst)


@cute.jit
def vector_store(atom: cute.CopyAtom, buf: cute.Tensor, gY: cute.Tensor, t: Int32, dv: Int32, slot: cutlass.Constexpr[int], vec: cutlass.Constexpr[int]):
    """One 16-byte store through ``atom``: registers ``buf[:, slot]`` (``buf`` [vec, slots]) to token ``t``'s channel vector
    ``dv`` of the :func:`channel_vectors` view ``gY``."""
    src = cute.make_tensor(buf[None, slot].iterator, cute.make_layout((vec,)))
    dst = cute.make_tensor(gY[(None, None), (t, dv)].iterator, cute.make_layout((vec,)))
    cute.copy(atom, src, dst)


@cute.jit
def token_output(
    win: cute.Tensor,
    xv: cute.Tensor,
    yv: cute.Tensor,
    acc: cute.Tensor,
    rW: cute.Tensor,
    rB: cute.Tensor,
    t: Int32,
    bos: Int32,
    n: Int32,
    d0: Int32,
    init_ptr: cute.Pointer | None,
    n_seqs: Int32,
    D: Int32,
    init_sn: Int32,
    init_sd: Int32,
    init_sj: Int32,
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    has_init: cutlass.Constexpr[bool],
    act: cutlass.Constexpr[bool],
):
    """One token of both forward kernels: shift the register window ``win`` [W, VEC] by the token's x vector ``xv``, sum
    the taps (history before the sequence's first token ``bos`` from the initial state of sequence ``n``, else zero),
    add the bias, apply SiLU with ``act``, and write the ``VEC`` outputs to ``yv`` in its element type."""
    for k in cutlass.range_constexpr(W - 1):
        for i in cutlass.range_constexpr(VEC):
            win[k, i] = win[k + 1, i]
    for i in cutlass.range_constexpr(VEC):
        win[W - 1, i] = xv[i].to(Float32)
        acc[i] = rB[i] + rW[W - 1, i] * win[W - 1, i]
    for k in cutlass.range_constexpr(W - 1):
        prel = t - (W - 1) + k - bos
        if prel >= 0:
            for i in cutlass.range_constexpr(VEC):
                acc[i] = acc[i] + rW[k, i] * win[k, i]
        else:
            if const_expr(has_init):
                if prel >= -(W - 1):
                    mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                    for i in cutlass.range_constexpr(VEC):
                        acc[i] = acc[i] + rW[k, i] * mInit[n, d0 + i, prel + (W - 1)].to(Float32)
    if const_expr(act):
        for i in cutlass.range_constexpr(VEC):
            acc[i] = silu(acc[i])
    for i in cutlass.range_constexpr(VEC):
        yv[i] = acc[i].to(yv.element_type)


@cute.jit
def group_output(
    win: cute.Tensor,
    xb: cute.Tensor,
    yg: cute.Tensor,
    acc: cute.Tensor,
    rW: cute.Tensor,
    rB: cute.Tensor,
    r2g: cute.CopyAtom,
    gY: cute.Tensor,
    cu_ptr: cute.Pointer | None,
    init_ptr: cute.Pointer | None,
    t0: Int32,
    rg: Int32,
    run: Int32,
    n: Int32,
    bos: Int32,
    nxt: Int32,
    base: Int32,
    cb: Int32,
    cw: Int32,
    lane: Int32,
    nl: Int32,
    lanes: Int32,
    n_seqs: Int32,
    seq_arg: Int32,
    d0: Int32,
    dv: Int32,
    D: Int32,
    init_sn: Int32,
    init_sd: Int32,
    init_sj: Int32,
    half: cutlass.Constexpr[int],
    U: cutlass.Constexpr[int],
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    varlen: cutlass.Constexpr[bool],
    warp: cutlass.Constexpr[bool],
    has_init: cutlass.Constexpr[bool],
    act: cutlass.Constexpr[bool],
    shift_always: cutlass.Constexpr[bool],
):
    """The run grid's per-token path for one group of ``U`` tokens starting at run offset ``rg`` (register buffer
    ``half`` of ``xb``): for each token inside the run, walk ``(n, bos, nxt)`` to its sequence (``warp``: by the warp's
    window ``(base, cb, cw)`` of ``cu_seqlens``, :func:`warp_advance`), :func:`token_output`, 16-byte store
    (``shift_always``: :func:`token_output` for every token of the group, past the run too, with only the walk and the
    store guarded: ``Conv1dFwdKey.shift_always``). Returns the walked ``(n, bos, nxt, base, cb, cw)`` (the window
    unchanged without ``warp``)."""
    for u in cutlass.range_constexpr(U):
        t = t0 + rg + u
        if rg + u < run:
            if const_expr(warp):
                n, bos, nxt, base, cb, cw = warp_advance(cu_ptr, t, base, cb, cw, n_seqs, lane, nl, lanes)
            else:
                n, bos, nxt = advance_sequence(cu_ptr, t, n, bos, nxt, n_seqs, seq_arg, varlen)
            if const_expr(not shift_always):
                token_output(
                    win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos, n, d0, init_ptr, n_seqs, D, init_sn, init_sd, init_sj, W, VEC, has_init, act
                )
                vector_store(r2g, yg, gY, t, dv, u, VEC)
        if const_expr(shift_always):
            token_output(win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos, n, d0, init_ptr, n_seqs, D, init_sn, init_sd, init_sj, W, VEC, has_init, act)
            if rg + u < run:
                vector_store(r2g, yg, gY, t, dv, u, VEC)
    return n, bos, nxt, base, cb, cw


@cute.jit
def token_output_steady(
    win: cute.Tensor,
    xv: cute.Tensor,
    yv: cute.Tensor,
    acc: cute.Tensor,
    rW: cute.Tensor,
    rB: cute.Tensor,
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    act: cutlass.Constexpr[bool],
):
    """:func:`token_output` for a token at least W - 1 tokens past its sequence's first one (every tap reads x): the same
    fp32 operations in the same order, without the history branches (``Conv1dFwdKey.steady``)."""
    for k in cutlass.range_constexpr(W - 1):
        for i in cutlass.range_constexpr(VEC):
            win[k, i] = win[k + 1, i]
    for i in cutlass.range_constexpr(VEC):
        win[W - 1, i] = xv[i].to(Float32)
        acc[i] = rB[i] + rW[W - 1, i] * win[W - 1, i]
    for k in cutlass.range_constexpr(W - 1):
        for i in cutlass.range_constexpr(VEC):
            acc[i] = acc[i] + rW[k, i] * win[k, i]
    if const_expr(act):
        for i in cutlass.range_constexpr(VEC):
            acc[i] = silu(acc[i])
    for i in cutlass.range_constexpr(VEC):
        yv[i] = acc[i].to(yv.element_type)


@cute.jit
def final_state_of(
    x_ptr: cute.Pointer,
    init_ptr: cute.Pointer | None,
    final_ptr: cute.Pointer,
    m: Int32,
    bos: Int32,
    eos: Int32,
    d0: Int32,
    T: Int32,
    D: Int32,
    sx: Int32,
    n_seqs: Int32,
    init_sn: Int32,
    init_sd: Int32,
    init_sj: Int32,
    fin_sn: Int32,
    fin_sd: Int32,
    fin_sj: Int32,
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    has_init: cutlass.Constexpr[bool],
    contig: cutlass.Constexpr[bool] = False,
):
    """``final_states[m, d0 .. d0 + VEC, j]`` of sequence ``m`` (tokens ``bos .. eos``): ``x[eos - (W - 1) + j]`` in the
    states' dtype where that token is in the sequence, else the initial state's entry ``j + eos - bos``, or zero. The one
    body of both final-states paths (``final_kernel`` and the fused :func:`final_states_ending`): the same bits.
    ``contig`` (``Conv1dFwdKey.final_contiguous``): the thread's slice is assembled in registers, x's tokens by 16-byte
    vector loads, and written with vector stores (:func:`state_vectors`) instead of one element per load and store."""
    mX = cute.make_tensor(x_ptr, cute.make_layout((T, D), stride=(sx, 1)))
    mF = cute.make_tensor(final_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(fin_sn, fin_sd, fin_sj)))
    if const_expr(contig):
        WS = W - 1
        dv = d0 // VEC
        gX = channel_vectors(x_ptr, T, D, sx, VEC)
        gF = state_vectors(final_ptr, n_seqs, D, WS, VEC)
        rF = cute.make_rmem_tensor(cute.make_layout((1, VEC * WS)), mF.element_type)
        rx = cute.make_rmem_tensor(cute.make_layout((1, VEC)), mX.element_type)
        for j in cutlass.range_constexpr(WS):
            p = eos - WS + j
            if p >= bos:
                cute.autovec_copy(gX[(None, None), (p, dv)], rx)
                for i in cutlass.range_constexpr(VEC):
                    rF[0, i * WS + j] = rx[0, i].to(mF.element_type)
            else:
                if const_expr(has_init):
                    mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                    for i in cutlass.range_constexpr(VEC):
                        rF[0, i * WS + j] = mInit[m, d0 + i, j + eos - bos]
                else:
                    for i in cutlass.range_constexpr(VEC):
                        rF[0, i * WS + j] = Float32(0.0).to(mF.element_type)
        cute.autovec_copy(rF, gF[(None, None), (m, dv)])
    else:
        for j in cutlass.range_constexpr(W - 1):
            p = eos - (W - 1) + j
            if p >= bos:
                for i in cutlass.range_constexpr(VEC):
                    mF[m, d0 + i, j] = mX[p, d0 + i].to(mF.element_type)
            else:
                if const_expr(has_init):
                    mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                    for i in cutlass.range_constexpr(VEC):
                        mF[m, d0 + i, j] = mInit[m, d0 + i, j + eos - bos]
                else:
                    for i in cutlass.range_constexpr(VEC):
                        mF[m, d0 + i, j] = Float32(0.0).to(mF.element_type)


@cute.jit
def final_states_ending(
    x_ptr: cute.Pointer,
    cu_ptr: cute.Pointer | None,
    init_ptr: cute.Pointer | None,
    final_ptr: cute.Pointer,
    m: Int32,
    a: Int32,
    b: Int32,
    d0: Int32,
    T: Int32,
    D: Int32,
    sx: Int32,
    seq_len: Int32,
    n_seqs: Int32,
    init_sn: Int32,
    init_sd: Int32,
    init_sj: Int32,
    fin_sn: Int32,
    fin_sd: Int32,
    fin_sj: Int32,
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    varlen: cutlass.Constexpr[bool],
    has_init: cutlass.Constexpr[bool],
    contig: cutlass.Constexpr[bool] = False,
):
    """The fused final states (``Conv1dFwdKey.final_fused``) of the group pair of tokens ``a .. b`` a thread just computed:
    :func:`final_state_of` for every sequence that ends in ``(a, b]`` (varlen: empty ones too; with ``a`` = 0 also those
    ending at 0, the leading empty ones). ``m`` is at most the first of them (the sequence of token ``a - 1`` or ``a``);
    each sequence ends in exactly one thread's pair per channel vector, so each final row is written once. Its x tokens
    were just loaded by this thread (cache hits)."""
    lo = a
    if a == 0:
        lo = -1
        m = 0
    bos, eos = sequence_bounds(cu_ptr, m, n_seqs, seq_len, varlen)
    while m < n_seqs and eos <= b:
        if eos > lo:
            final_state_of(
                x_ptr, init_ptr, final_ptr, m, bos, eos, d0, T, D, sx, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj, W, VEC, has_init, contig
            )  # fmt: skip
        m = m + 1
        bos, eos = sequence_bounds(cu_ptr, cutlass.min(m, n_seqs - 1), n_seqs, seq_len, varlen)  # clamped: both sides of `and` run


@cute.jit
def fetch_halo(
    g2r: cute.CopyAtom,
    gX: cute.Tensor,
    halo: cute.Tensor,
    init_ptr: cute.Pointer | None,
    hn: Int32,
    nh: Int32,
    seeded: cutlass.Boolean,
    k: cutlass.Constexpr[int],
    dv: Int32,
    n_seqs: Int32,
    D: Int32,
    init_sn: Int32,
    init_sd: Int32,
    init_sj: Int32,
    W: cutlass.Constexpr[int],
    VEC: cutlass.Constexpr[int],
    seed: cutlass.Constexpr[bool],
    vec_init: cutlass.Constexpr[bool] = False,
):
    """Halo entry ``k`` of the chunk starting at token ``hn`` into ``halo[:, k, 0]`` (x's dtype): x's token ``hn - (W - 1) +
    k`` (one 16-byte load), or, with ``seed`` (``Conv1dFwdKey.seeded_starts``) when ``seeded`` (``hn`` starts sequence
    ``nh``), that sequence's initial-state entry ``k`` of the thread's channels: the history its first W - 1 tokens read.
    ``vec_init`` (``Conv1dFwdKey.init_contiguous``): the seeded halo is the thread's whole initial-state slice, read by
    16-byte loads at ``k`` = 0 into the halo's registers in the slice's order (channel-major: :func:`seeded_window`)."""
    if const_expr(seed):
        if seeded:
            if const_expr(vec_init):
                if const_expr(k == 0):
                    gI = state_vectors(init_ptr, n_seqs, D, W - 1, VEC)
                    cute.autovec_copy(gI[(None, None), (nh, dv)], cute.make_tensor(halo.iterator, cute.make_layout((1, VEC * (W - 1)))))
            else:
                mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                for i in cutlass.range_constexpr(VEC):
                    halo[i, k, 0] = mInit[nh, dv * VEC + i, k]
        else:
            vector_copy(g2r, gX, halo, hn - (W - 1) + k, dv, k, 0, VEC)
    else:
        vector_copy(g2r, gX, halo, hn - (W - 1) + k, dv, k, 0, VEC)


@cute.jit
def halo_to_window(win: cute.Tensor, halo: cute.Tensor, W: cutlass.Constexpr[int], VEC: cutlass.Constexpr[int], slice_order: cutlass.Constexpr[bool]):
    """``win[k + 1, i]`` (fp32) from the halo entry of channel ``i`` and tap ``k``: at flat position ``k VEC + i`` (x's
    tokens, one 16-byte vector each) or, with ``slice_order``, ``i (W - 1) + k`` (an initial-state slice read whole)."""
    for k in cutlass.range_constexpr(W - 1):
        for i in cutlass.range_constexpr(VEC):
            f = i * (W - 1) + k if slice_order else k * VEC + i
            win[k + 1, i] = halo[f % VEC, f // VEC, 0].to(Float32)


@cute.jit
def seeded_window(
    win: cute.Tensor, halo: cute.Tensor, seeded: cutlass.Boolean, W: cutlass.Constexpr[int], VEC: cutlass.Constexpr[int], vec_init: cutlass.Constexpr[bool]
):
    """A chunk's window from its halo (:func:`halo_to_window`), ``win[0]`` zero; with ``vec_init`` a seeded chunk's halo
    holds its initial-state slice in the slice's order."""
    for i in cutlass.range_constexpr(VEC):
        win[0, i] = Float32(0.0)
    if const_expr(vec_init):
        if seeded:
            halo_to_window(win, halo, W, VEC, True)
        else:
            halo_to_window(win, halo, W, VEC, False)
    else:
        halo_to_window(win, halo, W, VEC, False)


@dataclass(frozen=True)
class Conv1dFwdKey:
    """Plan-time choices of the forward kernel: exactly its compile key (Rule 4)."""

    dtype: str  # x / y element type name (cutlass), e.g. "BFloat16"
    w_dtype: str
    width: int
    has_bias: bool
    silu: bool
    varlen: bool
    has_init: bool
    has_final: bool
    state_dtype: str  # "" when neither initial nor final states are used
    tokens_per_cta: int = 64
    group: int = 4  # tokens per register buffer; two buffers (double-buffered loads)
    min_ctas_per_sm: int = 4  # caps registers at 64K / (4 * 128) = 128 (no spills at group 4): 16 warps per SM
    #: > 0: the run grid, about this many CTAs in all, each walking one contiguous token run (``kernel_runs``; 4 * SMs,
    #: 528 on an H200, is one wave at ``min_ctas_per_sm`` = 4: the adapter's default); 0: the 64-token CTAs (``kernel``).
    grid_ctas: int = 0
    #: Run grid only (``grid_ctas`` > 0): 0 (default) = off; P > 0 (P * ``group`` <= 128) = the CTA asks L2 for the group
    #: of tokens P groups beyond the one its registers are loading (``cp.async.bulk.prefetch.L2``: one thread per token,
    #: the CTA's 2 KB of the token row; the prologue asks for groups 1..P), so about (2 + P) * ``group`` token rows per
    #: thread are on their way from DRAM with the registers of two groups. A hint: bitwise the same outputs.
    l2_prefetch: int = 0
    #: Run grid only: False (default) = every token walks the sequence and checks its W - 1 history taps; True = a group of
    #: ``group`` tokens wholly inside the run and inside one sequence, W - 1 or more tokens past its start, skips both
    #: (:func:`token_output_steady`: the same fp32 operations in the same order, so bitwise the same outputs; fewer
    #: branches and register moves per token). Other groups take the default path.
    steady: bool = False
    #: Run grid only (dense or varlen): 0 (the key's default) = each CTA row walks one contiguous token run; C > 0 (a
    #: multiple of 2 * ``group``; the adapter's dense default 8) = CTA row ``j`` walks the chunks of C tokens ``j, j + n_runs,
    #: j + 2 n_runs, ...`` (:meth:`chunks`; the same ``n_runs``; per chunk its sequence search and W - 1 halo tokens; loads
    #: stay in flight across chunks). The same fp32 operations per token in the same order: bitwise the same outputs.
    chunk: int = 0
    #: ``has_final`` only: False (the key's default) = ``final_kernel`` writes the final states after the forward kernel (a
    #: second launch); True = the forward kernel writes them (:func:`final_states_ending`: after each group pair, for the
    #: sequences that ended in it, empty ones included; :func:`final_state_of`, ``final_kernel``'s body: the same bits).
    #: Wrong when the final states overlap the initial states (a CTA may overwrite ``initial_states[n]`` before another
    #: has read it): the adapter then launches the ``False`` key's kernels (``CausalConv1d.final_fused``).
    final_fused: bool = False
    #: Varlen run grid only (contiguous runs or chunks): False (the key's default) = each token walks ``cu_seqlens`` one
    #: entry at a time (:func:`advance_sequence`: a dependent load per sequence crossed) and a chunk binary-searches it;
    #: True = the warp walks it together (:func:`warp_locate`, :func:`warp_advance`: its lanes hold a window of
    #: ``cu_seqlens`` entries, a token's sequence is a ballot and two shuffles, a chunk's a (K + 1)-ary search of about 3
    #: loads for 16k sequences instead of 14). The same ``(n, bos, nxt)`` per token: bitwise the same outputs.
    warp_walk: bool = False
    #: Run grid only (contiguous runs or chunks): False (the key's default) = a group that takes the per-token path shifts
    #: the register window and computes a token only when the token is inside the run (``if`` around both), so ptxas
    #: merges two windows after every token: ~27 register moves per token (bf16 W = 4, 8 channels); True = the window
    #: shifts and :func:`token_output` runs for every token of the group (past the run's end too, on whatever the
    #: registers hold: nothing reads them afterwards), and only the sequence walk and the 16-byte store are guarded. The
    #: same fp32 operations for every stored token: bitwise the same outputs.
    shift_always: bool = False
    #: Varlen contiguous runs without the warp walk only: False (the key's default) = a run's first token is located by a
    #: binary search over ``cu_seqlens`` (~14 dependent loads for 16k sequences, before the run's first group can be
    #: computed); True = by the density guess first (:func:`locate_sequence_guess`: two independent loads when the
    #: lengths are even, the binary search on the side they rule in otherwise). The same sequence: bitwise the same outputs.
    locate_guess: bool = False
    #: The final states are a contiguous [N, D, W - 1] (strides (D (W - 1), W - 1, 1)) at 16-byte aligned addresses (the
    #: adapter's plan-time reading of their declared layout; execute checks it): each thread's slice, VEC * (W - 1)
    #: consecutive elements, is assembled in registers and written with vector stores, its x tokens read as 16-byte
    #: vectors (:func:`final_state_of`), not one element per access. Any other layout: False. The same values.
    final_contiguous: bool = False
    #: Dense chunks with initial states (``chunk`` > 0, ``steady``, ``has_init``, the states' dtype x's): False (the key's
    #: default) = a chunk that starts a sequence fetches the x halo before it (unused) and its first W - 1 tokens read the
    #: initial state's entries inside the token math, a memory latency on the chunk's first group; True = that chunk's halo
    #: registers receive the sequence's initial-state entries instead, fetched one group ahead as an x halo is
    #: (:func:`fetch_halo`), so the window holds the sequence's history and the chunk's first group takes the steady path.
    #: The same fp32 operations per token: bitwise the same outputs.
    seeded_starts: bool = False
    #: ``seeded_starts`` with initial states declared as a contiguous [N, D, W - 1] at 16-byte aligned addresses (the
    #: adapter's plan-time reading of their declared layout; execute checks it): a seeded halo is the thread's VEC * (W - 1)
    #: consecutive initial-state elements, read with 16-byte loads instead of one element per load. The same values.
    init_contiguous: bool = False
    #: Run grid with fused final states (``grid_ctas`` > 0, ``final_fused``): False (the key's default) = after each group
    #: pair the thread writes the final states of the sequences that ended in it (:func:`final_states_ending`, inside the
    #: token loop); True = the token loop writes none: after its tokens, CTA row ``j`` writes those of sequences ``j, j +
    #: n_runs, ...`` for its channels (:func:`final_state_of`, the separate kernel's body, as a tail: no second launch,
    #: and the other CTAs' token loops hide it). The same values.
    final_tail: bool = False


def _ctype(name: str):
    return getattr(cutlass, name)


class CausalConv1dFwd:
    """The forward kernel class: ``__init__`` holds the plan (the compile key), ``__call__`` launches."""

    def __init__(self, key: Conv1dFwdKey):
        self.key = key
        self.dtype = _ctype(key.dtype)
        self.w_dtype = _ctype(key.w_dtype)
        self.state_dtype = _ctype(key.state_dtype) if key.state_dtype else None
        self.W = key.width
        self.vec = 128 // self.dtype.width
        self.bt = key.tokens_per_cta
        self.group = key.group
        assert self.bt % (2 * self.group) == 0  # groups run in double-buffered pairs
        assert key.grid_ctas >= 0, key
        assert not key.steady or key.grid_ctas > 0, key
        assert key.l2_prefetch == 0 or (key.grid_ctas > 0 and 0 < key.l2_prefetch * key.group <= THREADS), key  # one thread per token
        chunk_ok = key.grid_ctas > 0 and key.l2_prefetch == 0 and key.chunk % (2 * key.group) == 0 and key.group >= key.width - 1
        assert key.chunk == 0 or chunk_ok, key  # halo: W - 1 <= group <= C
        assert key.has_final or not key.final_fused, key
        assert not key.warp_walk or (key.varlen and key.grid_ctas > 0), key
        seed_ok = key.chunk > 0 and key.steady and key.has_init and not key.varlen and key.state_dtype == key.dtype
        assert not key.seeded_starts or seed_ok, key
        assert not key.init_contiguous or key.seeded_starts, key
        assert not key.final_tail or (key.grid_ctas > 0 and key.has_final and key.final_fused), key
        #: the forward kernel writes the final states (no final_kernel launch)
        self.fuse = key.has_final and key.final_fused
        #: ... inside the token loop (after each group pair), or as the run grid's tail (``final_tail``)
        self.fuse_loop = self.fuse and not key.final_tail

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
        stream: cuda.CUstream,
    ):
        dv_total = D // self.vec
        grid_x = (dv_total + THREADS - 1) // THREADS
        fused_ptr = None  # the forward kernel's final-states pointer: compiled out unless final_fused
        if const_expr(self.fuse):
            fused_ptr = final_ptr
        if const_expr(self.key.grid_ctas):
            # runs along T: grid_ctas // grid_x, at most one per tokens_per_cta tokens, at least one (also for T == 0)
            n_runs = cutlass.max(cutlass.min(self.key.grid_ctas // grid_x, (T + self.bt - 1) // self.bt), 1)
            runs = self.kernel_runs(
                x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, fused_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj, n_runs
            )  # fmt: skip
            runs.launch(
                grid=[grid_x, n_runs, 1],
                block=[THREADS, 1, 1],
                stream=stream,
                min_blocks_per_mp=self.key.min_ctas_per_sm,
                preferred_smem_carveout=0,
            )
        else:
            grid_y = (T + self.bt) // self.bt  # >= 1 even for T == 0 (the kernel guards t < T)
            ctas = self.kernel(
                x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, fused_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj
            )  # fmt: skip
            ctas.launch(
                grid=[grid_x, grid_y, 1],
                block=[THREADS, 1, 1],
                stream=stream,
                min_blocks_per_mp=self.key.min_ctas_per_sm,
                preferred_smem_carveout=0,
            )
        if const_expr(self.key.has_final and not self.fuse):
            self.final_kernel(x_ptr, cu_ptr, init_ptr, final_ptr, T, D, sx, seq_arg, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj).launch(
                grid=[grid_x, n_seqs + 1, 1], block=[THREADS, 1, 1], stream=stream
            )  # +1: valid for N == 0, guarded

    @cute.kernel
    def kernel(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
    ):
        W = self.W
        VEC = self.vec
        U = self.group
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        t0 = bidy * self.bt
        if dv < D // VEC and t0 < T:
            d0 = dv * VEC
            gX = channel_vectors(x_ptr, T, D, sx, VEC)
            gY = channel_vectors(y_ptr, T, D, sy, VEC)

            # Weights and bias of this thread's channels, in fp32 registers.
            rW, rB = load_taps(w_ptr, b_ptr, D, d0, W, VEC)

            # The sequence holding t0: n, its first token bos and the next sequence's first token nxt.
            n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, self.key.varlen)

            # win[k] holds x[t - (W - 1) + k] while token t is processed; prologue fills x[t0 - W + k], k >= 1.
            win = cute.make_rmem_tensor((W, VEC), Float32)
            halo = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            for k in cutlass.range_constexpr(W):
                for i in cutlass.range_constexpr(VEC):
                    win[k, i] = Float32(0.0)
            load_history(gX, win, halo, t0, dv, W, VEC)

            # Two register buffers of U tokens: group g + 1 is loaded while group g is computed (software
            # pipelining), so every thread keeps up to 2 * U 16-byte loads in flight.
            xb = cute.make_rmem_tensor(cute.make_layout((1, VEC, U, 2)), self.dtype)
            yg = cute.make_rmem_tensor(cute.make_layout((1, VEC, U)), self.dtype)
            acc = cute.make_rmem_tensor((VEC,), Float32)
            n_groups = self.bt // U
            for u in cutlass.range_constexpr(U):
                if t0 + u < T:
                    cute.autovec_copy(gX[(None, None), (t0 + u, dv)], xb[None, None, u, 0])
            for gp in cutlass.range(n_groups // 2, unroll=1):
                n_pair = n  # the sequence of the pair's first token (or of the token before it)
                for half in cutlass.range_constexpr(2):
                    g = gp * 2 + half
                    tg = t0 + g * U
                    if g + 1 < n_groups:
                        for u in cutlass.range_constexpr(U):
                            if tg + U + u < T:
                                cute.autovec_copy(gX[(None, None), (tg + U + u, dv)], xb[None, None, u, 1 - half])
                    for u in cutlass.range_constexpr(U):
                        t = tg + u
                        if t < T:
                            n, bos, nxt = advance_sequence(cu_ptr, t, n, bos, nxt, n_seqs, seq_arg, self.key.varlen)
                            token_output(
                                win,
                                xb[0, None, u, half],
                                yg[0, None, u],
                                acc,
                                rW,
                                rB,
                                t,
                                bos,
                                n,
                                d0,
                                init_ptr,
                                n_seqs,
                                D,
                                init_sn,
                                init_sd,
                                init_sj,
                                W,
                                VEC,
                                self.key.has_init,
                                self.key.silu,
                            )
                            cute.autovec_copy(yg[None, None, u], gY[(None, None), (t, dv)])
                if const_expr(self.fuse):  # the final states of the sequences that ended in this pair
                    a = t0 + gp * 2 * U
                    b = cutlass.min(a + 2 * U, T)
                    if a < b and (n != n_pair or nxt == b or a == 0):  # tokens, and a sequence ends here (or a == 0)
                        final_states_ending(
                            x_ptr, cu_ptr, init_ptr, final_ptr, n_pair, a, b, d0, T, D, sx, seq_arg, n_seqs, init_sn, init_sd, init_sj,
                            fin_sn, fin_sd, fin_sj, W, VEC, self.key.varlen, self.key.has_init, self.key.final_contiguous,
                        )  # fmt: skip
        if const_expr(self.fuse):
            if T == 0 and bidy == 0 and dv < D // VEC:  # no token: every sequence is empty
                for m in cutlass.range(n_seqs, unroll=1):
                    final_state_of(
                        x_ptr, init_ptr, final_ptr, m, T, T, dv * VEC, T, D, sx, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj, W, VEC,
                        self.key.has_init, self.key.final_contiguous,
                    )  # fmt: skip

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.kernel
    def kernel_runs(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
        n_runs: Int32,
    ):
        """:meth:`kernel` over the run grid (``grid_ctas`` > 0, the default): CTA row ``j`` of ``n_runs`` walks the ``j``-th of ``n_runs``
        contiguous token runs (``T // n_runs`` tokens each, the first ``T % n_runs`` runs one more) with the same register
        window, double buffer and per-token math, in the same order (bitwise the 64-token kernel's outputs). The
        prologue issues the first group's loads, the W - 1 halo loads (raw, converted later) and the taps before the
        sequence search and before any of them is consumed, so a run starts after about one memory latency."""
        if const_expr(self.fuse_loop):
            tidx, _, _ = cute.arch.thread_idx()
            bidx, bidy, _ = cute.arch.block_idx()
            dv = bidx * THREADS + tidx
            if T == 0 and bidy == 0 and dv < D // self.vec:  # no token: every sequence is empty
                for m in cutlass.range(n_seqs, unroll=1):
                    final_state_of(
                        x_ptr, init_ptr, final_ptr, m, T, T, dv * self.vec, T, D, sx, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj,
                        self.W, self.vec, self.key.has_init, self.key.final_contiguous,
                    )  # fmt: skip
        if const_expr(self.key.chunk > 0):
            self.chunks(
                x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, final_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj, n_runs
            )  # fmt: skip
        else:
            W = self.W
            VEC = self.vec
            U = self.group
            tidx, _, _ = cute.arch.thread_idx()
            bidx, bidy, _ = cute.arch.block_idx()
            dv = bidx * THREADS + tidx
            base = T // n_runs
            rem = T - base * n_runs
            t0 = bidy * base + cutlass.min(bidy, rem)
            run = base
            if bidy < rem:
                run = run + 1
            lanes = Int32(0)  # warp_walk: the warp's working lanes (a prefix), voted before the guard drops the others
            if const_expr(self.key.warp_walk):
                lanes = cute.arch.vote_ballot_sync(dv < D // VEC)
            if dv < D // VEC and run > 0:
                d0 = dv * VEC
                gX = channel_vectors(x_ptr, T, D, sx, VEC)
                gY = channel_vectors(y_ptr, T, D, sy, VEC)
                g2r = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), self.dtype, num_bits_per_copy=128)  # ld.global.v4
                r2g = cute.make_copy_atom(cute.nvgpu.CopyR2GOp(), self.dtype, num_bits_per_copy=128)  # st.global.v4

                # Loads first: group 0 of the run and the W - 1 halo tokens before it (raw; zero before token 0).
                xb = cute.make_rmem_tensor(cute.make_layout((VEC, U, 2)), self.dtype)
                for u in cutlass.range_constexpr(U):
                    if u < run:
                        vector_copy(g2r, gX, xb, t0 + u, dv, u, 0, VEC)
                halo = cute.make_rmem_tensor(cute.make_layout((VEC, W - 1, 1)), self.dtype)
                for k in cutlass.range_constexpr(W - 1):
                    for i in cutlass.range_constexpr(VEC):
                        halo[i, k, 0] = self.dtype(0.0)
                for k in cutlass.range_constexpr(W - 1):
                    if t0 - (W - 1) + k >= 0:
                        vector_copy(g2r, gX, halo, t0 - (W - 1) + k, dv, k, 0, VEC)
                # L2 prefetch (``l2_prefetch`` = P > 0): thread u of the CTA asks L2 for the CTA's 2 KB (fewer in a partial
                # channel block) of token t0 + U + u, u < P * U: groups 1..P of the run.
                cdv = pf_bytes = None
                if const_expr(self.key.l2_prefetch > 0):
                    cdv = bidx * THREADS  # the CTA's first channel vector
                    pf_bytes = cutlass.min(D // VEC - cdv, THREADS) * (VEC * self.dtype.width // 8)
                    if tidx < self.key.l2_prefetch * U:
                        if U + tidx < run:
                            prefetch_l2_bulk(gX[(None, None), (t0 + U + tidx, cdv)].iterator, pf_bytes)

                rW, rB = load_taps(w_ptr, b_ptr, D, d0, W, VEC)
                # the sequence of t0; warp_walk: the warp's window of cu_seqlens (base, cb, cw) too, else unused zeros
                lane = Int32(0)
                nl = Int32(0)
                cw = Int32(0)
                cb = Int32(0)
                wbase = Int32(0)
                if const_expr(self.key.warp_walk):
                    lane = cute.arch.lane_idx()
                    nl = cute.arch.popc(lanes)
                    cu0 = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))[0]
                    n, bos, nxt, wbase, cb, cw = warp_locate(cu_ptr, t0, Int32(0), cu0, n_seqs, T, lane, nl, lanes)
                elif const_expr(self.key.locate_guess):
                    n, bos, nxt = locate_sequence_guess(cu_ptr, t0, n_seqs, T)
                else:
                    n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, self.key.varlen)

                # win[k] holds x[t - (W - 1) + k] while token t is processed; the prologue fills x[t0 - W + k], k >= 1.
                win = cute.make_rmem_tensor((W, VEC), Float32)
                for i in cutlass.range_constexpr(VEC):
                    win[0, i] = Float32(0.0)
                for k in cutlass.range_constexpr(W - 1):
                    for i in cutlass.range_constexpr(VEC):
                        win[k + 1, i] = halo[i, k, 0].to(Float32)

                yg = cute.make_rmem_tensor(cute.make_layout((VEC, U)), self.dtype)
                acc = cute.make_rmem_tensor((VEC,), Float32)
                for gp in cutlass.range((run + 2 * U - 1) // (2 * U), unroll=1):
                    n_pair = n  # the sequence of the pair's first token (or of the token before it)
                    for half in cutlass.range_constexpr(2):
                        rg = (gp * 2 + half) * U  # the group's first token, relative to t0
                        for u in cutlass.range_constexpr(U):  # the next group (none past the run)
                            if rg + U + u < run:
                                vector_copy(g2r, gX, xb, t0 + rg + U + u, dv, u, 1 - half, VEC)
                        if const_expr(self.key.l2_prefetch > 0):  # the group P beyond the next one, into L2
                            if tidx < U:
                                if rg + (1 + self.key.l2_prefetch) * U + tidx < run:
                                    prefetch_l2_bulk(gX[(None, None), (t0 + rg + (1 + self.key.l2_prefetch) * U + tidx, cdv)].iterator, pf_bytes)
                        if const_expr(self.key.steady):
                            # steady group: every token of the group is in the run and in the sequence (n, bos, nxt) holds,
                            # at least W - 1 tokens past its start: the per-token math without the sequence walk and the
                            # history branches (the same fp32 operations in the same order)
                            tg = t0 + rg
                            if rg + U <= run and tg + U <= nxt and tg - bos >= W - 1:
                                for u in cutlass.range_constexpr(U):
                                    token_output_steady(win, xb[None, u, half], yg[None, u], acc, rW, rB, W, VEC, self.key.silu)
                                    vector_store(r2g, yg, gY, tg + u, dv, u, VEC)
                            else:
                                n, bos, nxt, wbase, cb, cw = group_output(
                                    win, xb, yg, acc, rW, rB, r2g, gY, cu_ptr, init_ptr, t0, rg, run, n, bos, nxt, wbase, cb, cw, lane, nl, lanes,
                                    n_seqs, seq_arg, d0, dv, D, init_sn, init_sd, init_sj, half, U, W, VEC, self.key.varlen, self.key.warp_walk,
                                    self.key.has_init, self.key.silu, self.key.shift_always,
                                )  # fmt: skip
                        else:
                            n, bos, nxt, wbase, cb, cw = group_output(
                                win, xb, yg, acc, rW, rB, r2g, gY, cu_ptr, init_ptr, t0, rg, run, n, bos, nxt, wbase, cb, cw, lane, nl, lanes,
                                n_seqs, seq_arg, d0, dv, D, init_sn, init_sd, init_sj, half, U, W, VEC, self.key.varlen, self.key.warp_walk,
                                self.key.has_init, self.key.silu, self.key.shift_always,
                            )  # fmt: skip
                    if const_expr(self.fuse_loop):  # the final states of the sequences that ended in this pair
                        a = t0 + gp * 2 * U
                        b = t0 + cutlass.min(gp * 2 * U + 2 * U, run)
                        if a < b and (n != n_pair or nxt == b or a == 0):  # tokens, and a sequence ends here (or a == 0)
                            final_states_ending(
                                x_ptr, cu_ptr, init_ptr, final_ptr, n_pair, a, b, d0, T, D, sx, seq_arg, n_seqs, init_sn, init_sd, init_sj,
                                fin_sn, fin_sd, fin_sj, W, VEC, self.key.varlen, self.key.has_init, self.key.final_contiguous,
                            )  # fmt: skip

        if const_expr(self.fuse and self.key.final_tail):  # the final states as the grid's tail (``final_tail``)
            tidx, _, _ = cute.arch.thread_idx()
            bidx, bidy, _ = cute.arch.block_idx()
            dv = bidx * THREADS + tidx
            if dv < D // self.vec:  # CTA row j: sequences j, j + n_runs, ... (empty ones and T = 0 included)
                for m in cutlass.range(bidy, n_seqs, n_runs, unroll=1):
                    bos, eos = sequence_bounds(cu_ptr, m, n_seqs, seq_arg, self.key.varlen)
                    final_state_of(
                        x_ptr, init_ptr, final_ptr, m, bos, eos, dv * self.vec, T, D, sx, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj,
                        self.W, self.vec, self.key.has_init, self.key.final_contiguous,
                    )  # fmt: skip

    kernel_runs.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def chunks(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
        n_runs: Int32,
    ):
        """:meth:`kernel_runs` with ``Conv1dFwdKey.chunk`` = C > 0: CTA row ``j`` walks the chunks of C tokens
        ``j, j + n_runs, j + 2 n_runs, ...`` (chunk ``c`` = tokens ``c * C ..``, the last one possibly shorter) instead of
        one contiguous run. Per chunk: the sequence search (arithmetic when dense; varlen: binary search over
        ``cu_seqlens`` from the previous chunk's sequence, which starts at or before this chunk's first token, after the
        chunk's second group's loads are issued), the window reset from the chunk's W - 1
        halo tokens, then its groups of ``group`` tokens with the same per-token math as the run (the steady path too),
        so the outputs are bitwise the run grid's. The double buffer runs across chunk boundaries: while a chunk's last
        group is computed, the registers already receive the next chunk's first group and its halo (C is a multiple of
        2 * ``group``, so a chunk's first group is always buffer 0 and one halo buffer suffices)."""
        W = self.W
        VEC = self.vec
        U = self.group
        C = self.key.chunk
        HP = C // (2 * U)  # group pairs per chunk
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        stride = n_runs * C  # tokens from one of this CTA's chunks to its next
        n_chunks = (T + C - 1) // C
        nc = Int32(0)  # chunks of this CTA row
        if bidy < n_chunks:
            nc = (n_chunks - 1 - bidy) // n_runs + 1
        lanes = Int32(0)  # warp_walk: the warp's working lanes (a prefix), voted before the guard drops the others
        if const_expr(self.key.warp_walk):
            lanes = cute.arch.vote_ballot_sync(dv < D // VEC)
        if dv < D // VEC and nc > 0:
            d0 = dv * VEC
            gX = channel_vectors(x_ptr, T, D, sx, VEC)
            gY = channel_vectors(y_ptr, T, D, sy, VEC)
            g2r = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), self.dtype, num_bits_per_copy=128)  # ld.global.v4
            r2g = cute.make_copy_atom(cute.nvgpu.CopyR2GOp(), self.dtype, num_bits_per_copy=128)  # st.global.v4

            # Loads first: group 0 of the first chunk and its W - 1 halo tokens (raw; zero before token 0).
            c0 = bidy * C
            xb = cute.make_rmem_tensor(cute.make_layout((VEC, U, 2)), self.dtype)
            for u in cutlass.range_constexpr(U):
                if c0 + u < T:
                    vector_copy(g2r, gX, xb, c0 + u, dv, u, 0, VEC)
            halo = cute.make_rmem_tensor(cute.make_layout((VEC, W - 1, 1)), self.dtype)
            for k in cutlass.range_constexpr(W - 1):
                for i in cutlass.range_constexpr(VEC):
                    halo[i, k, 0] = self.dtype(0.0)
            seed = self.key.seeded_starts  # a chunk that starts a sequence gets its initial state as the halo (dense)
            vec_init = self.key.init_contiguous
            if const_expr(seed):
                n0 = c0 // seq_arg
                s0 = c0 == n0 * seq_arg
                for k in cutlass.range_constexpr(W - 1):
                    if s0 or c0 - (W - 1) + k >= 0:
                        fetch_halo(g2r, gX, halo, init_ptr, c0, n0, s0, k, dv, n_seqs, D, init_sn, init_sd, init_sj, W, VEC, True, vec_init)
            else:
                for k in cutlass.range_constexpr(W - 1):
                    if c0 - (W - 1) + k >= 0:
                        vector_copy(g2r, gX, halo, c0 - (W - 1) + k, dv, k, 0, VEC)

            rW, rB = load_taps(w_ptr, b_ptr, D, d0, W, VEC)
            win = cute.make_rmem_tensor((W, VEC), Float32)
            yg = cute.make_rmem_tensor(cute.make_layout((VEC, U)), self.dtype)
            acc = cute.make_rmem_tensor((VEC,), Float32)
            n = Int32(0)
            bos = Int32(0)
            nxt = Int32(0)
            lane = Int32(0)  # warp_walk: the warp's window of cu_seqlens (wbase, cb, cw), else unused zeros
            nl = Int32(0)
            cw = Int32(0)
            cb = Int32(0)
            wbase = Int32(0)
            if const_expr(self.key.warp_walk):
                lane = cute.arch.lane_idx()
                nl = cute.arch.popc(lanes)
                bos = cute.make_tensor(cu_ptr, cute.make_layout((n_seqs + 1,)))[0]  # cu[n] for the first chunk's search
            for p in cutlass.range(nc * HP, unroll=1):  # group pairs of all this CTA's chunks, in order
                ci = p // HP  # the chunk, of this CTA's
                q = p - ci * HP  # the pair, of the chunk's
                t0 = c0 + ci * stride
                run = cutlass.min(T - t0, C)
                # the next chunk's first token when this pair is the chunk's last (its halo is fetched during group 1), else T
                hn = t0 + stride
                if const_expr(HP > 1):
                    if q + 1 < HP:
                        hn = T
                nh = Int32(0)  # seed: the next chunk's sequence, and whether hn starts it
                sh = cutlass.Boolean(False)
                if const_expr(seed):
                    nh = hn // seq_arg
                    sh = hn == nh * seq_arg
                for half in cutlass.range_constexpr(2):
                    rg = (q * 2 + half) * U  # the group's first token, relative to t0
                    if const_expr(half == 0):
                        if q == 0:  # the chunk's first group: its sequence (dense) and the window of its W - 1 halo tokens
                            if const_expr(not self.key.varlen):
                                n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, False)
                            seeded_window(win, halo, t0 == bos, W, VEC, vec_init)
                        for u in cutlass.range_constexpr(U):  # the chunk's next group (none past the chunk)
                            if rg + U + u < run:
                                vector_copy(g2r, gX, xb, t0 + rg + U + u, dv, u, 1, VEC)
                        if const_expr(self.key.varlen):
                            if q == 0:  # varlen: the binary search from the previous chunk's sequence, with group 1's loads in flight
                                if const_expr(self.key.warp_walk):
                                    n, bos, nxt, wbase, cb, cw = warp_locate(cu_ptr, t0, n, bos, n_seqs, T, lane, nl, lanes)
                                else:
                                    n, bos, nxt = locate_sequence_from(cu_ptr, t0, n, n_seqs, seq_arg, True)
                        n_pair = n  # the sequence of the pair's first token (or of the token before it)
                    else:
                        if hn < T:  # the next chunk's first group (its halo follows token by token below)
                            for u in cutlass.range_constexpr(U):
                                if hn + u < T:
                                    vector_copy(g2r, gX, xb, hn + u, dv, u, 0, VEC)
                        else:  # the chunk's next pair, if any (none past the chunk)
                            for u in cutlass.range_constexpr(U):
                                if rg + U + u < run:
                                    vector_copy(g2r, gX, xb, t0 + rg + U + u, dv, u, 0, VEC)
                    steady = False
                    tg = t0 + rg
                    if const_expr(self.key.steady):
                        if const_expr(seed and half == 0):  # a chunk starting its sequence holds the history in its window
                            steady = rg + U <= run and tg + U <= nxt and (tg - bos >= W - 1 or (q == 0 and tg == bos))
                        else:
                            steady = rg + U <= run and tg + U <= nxt and tg - bos >= W - 1
                    if steady:
                        for u in cutlass.range_constexpr(U):
                            token_output_steady(win, xb[None, u, half], yg[None, u], acc, rW, rB, W, VEC, self.key.silu)
                            vector_store(r2g, yg, gY, tg + u, dv, u, VEC)
                            if const_expr(half == 1 and u < W - 1):
                                if hn < T:  # hn >= C >= W - 1
                                    fetch_halo(g2r, gX, halo, init_ptr, hn, nh, sh, u, dv, n_seqs, D, init_sn, init_sd, init_sj, W, VEC, seed, vec_init)
                    else:
                        for u in cutlass.range_constexpr(U):
                            t = tg + u
                            if rg + u < run:
                                if const_expr(self.key.warp_walk):
                                    n, bos, nxt, wbase, cb, cw = warp_advance(cu_ptr, t, wbase, cb, cw, n_seqs, lane, nl, lanes)
                                else:
                                    n, bos, nxt = advance_sequence(cu_ptr, t, n, bos, nxt, n_seqs, seq_arg, self.key.varlen)
                                if const_expr(not self.key.shift_always):
                                    token_output(
                                        win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos, n, d0, init_ptr, n_seqs, D, init_sn, init_sd, init_sj,
                                        W, VEC, self.key.has_init, self.key.silu,
                                    )  # fmt: skip
                                    vector_store(r2g, yg, gY, t, dv, u, VEC)
                            if const_expr(self.key.shift_always):  # every token of the group; only the walk and the store guarded
                                token_output(
                                    win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos, n, d0, init_ptr, n_seqs, D, init_sn, init_sd, init_sj,
                                    W, VEC, self.key.has_init, self.key.silu,
                                )  # fmt: skip
                                if rg + u < run:
                                    vector_store(r2g, yg, gY, t, dv, u, VEC)
                            if const_expr(half == 1 and u < W - 1):
                                if hn < T:
                                    fetch_halo(g2r, gX, halo, init_ptr, hn, nh, sh, u, dv, n_seqs, D, init_sn, init_sd, init_sj, W, VEC, seed, vec_init)
                if const_expr(self.fuse_loop):  # the final states of the sequences that ended in this pair
                    a = t0 + q * 2 * U
                    b = t0 + cutlass.min(q * 2 * U + 2 * U, run)
                    if a < b and (n != n_pair or nxt == b or a == 0):  # tokens, and a sequence ends here (or a == 0)
                        final_states_ending(
                            x_ptr, cu_ptr, init_ptr, final_ptr, n_pair, a, b, d0, T, D, sx, seq_arg, n_seqs, init_sn, init_sd, init_sj,
                            fin_sn, fin_sd, fin_sj, W, VEC, self.key.varlen, self.key.has_init, self.key.final_contiguous,
                        )  # fmt: skip

    @cute.kernel
    def final_kernel(
        self,
        x_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer,
        T: Int32,
        D: Int32,
        sx: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
    ):
        W = self.W
        VEC = self.vec
        tidx, _, _ = cute.arch.thread_idx()
        bidx, n, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        if dv < D // VEC and n < n_seqs:
            bos, eos = sequence_bounds(cu_ptr, n, n_seqs, seq_arg, self.key.varlen)
            final_state_of(
                x_ptr, init_ptr, final_ptr, n, bos, eos, dv * VEC, T, D, sx, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj, W, VEC, self.key.has_init, self.key.final_contiguous
            )  # fmt: skip

    final_kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
