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
[D, W] contiguous; ``bias`` [D]; states [N, D, W - 1] with any strides; ``cu_seqlens`` int32 [N + 1].
Dtypes: x/y bf16, fp16 or fp32; weight/bias any of those; math in fp32. W in 2..4.

Memory-bound and one pass: each thread owns 16 bytes of channels (8 bf16) and a run of tokens; it
loads its token run with 16-byte vector loads in groups (so several loads are in flight), keeps the
last W inputs in registers, and stores 16-byte outputs. Sequence boundaries are found on device from
``cu_seqlens`` (a binary search per CTA, then a forward walk), so varlen batches need no host planning
and no padding. Runtime extents (T, D, N, strides) are kernel arguments, never compile keys (Rule 4).

Opt-in ``prefetch`` (``Conv1dFwdKey.prefetch``, 0 = off; ``kernel_prefetch``): the same math in the same order, but x
reaches the registers through a private ring of ``prefetch`` 16-byte slots per thread in shared memory, filled by cp.async
(L2 only) ``prefetch / group`` commit groups ahead. Up to ``prefetch`` loads per thread stay in flight (the default
keeps at most ``2 * group``, limited by the registers that hold them), the ring's first groups are issued before the
taps, the sequence search and the halo, and no register holds an in-flight load (96 registers instead of 128 at bf16,
W = 4). Each thread reads back only its own slots, so there is no CTA barrier. Outputs are bitwise the default's.

Tests: packages/cudnn-linear-attention/tests/test_conv1d*.py; benchmark: benchmarks/linear_attention.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import cpasync

from .._device.activation import silu
from .._device.channels import channel_vectors, load_history, load_taps
from .._device.sequences import advance_sequence, locate_sequence, sequence_bounds

THREADS = 128


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
    #: Opt-in (0 = off, the register double buffer above): x tokens each thread keeps in flight through a private ring of
    #: ``prefetch`` 16-byte slots in shared memory filled by cp.async (``kernel_prefetch``). A multiple of ``group`` that
    #: divides ``tokens_per_cta``; costs ``128 * prefetch * 16`` bytes of shared memory per CTA (16: 32 KB, 4 CTAs per SM).
    prefetch: int = 0


@cute.jit
def ring_fill(g2s: cute.CopyAtom, gX: cute.Tensor, sRing: cute.Tensor, t: Int32, dv: Int32, slot: Int32, tidx: Int32, vec: cutlass.Constexpr[int]):
    """One 16-byte cp.async: token ``t``'s channel vector ``dv`` of the :func:`channel_vectors` view ``gX`` into ring slot
    ``slot`` of thread ``tidx`` (``sRing`` [1, vec, slots, threads]). Both sides as flat ``vec``-element views, so the copy
    atom moves the vector in one instruction (a [1, vec] view would issue one 16-byte copy per element)."""
    src = cute.make_tensor(gX[(None, None), (t, dv)].iterator, cute.make_layout((vec,)))
    dst = cute.make_tensor(sRing[None, None, slot, tidx].iterator, cute.make_layout((vec,)))
    cute.copy(g2s, src, dst)


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
        self.prefetch = key.prefetch
        if self.prefetch:
            # whole ring rounds per CTA (the slot of a group is static), at least two groups in the ring
            assert self.prefetch % self.group == 0 and self.prefetch >= 2 * self.group and self.bt % self.prefetch == 0, key

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
        grid_y = (T + self.bt) // self.bt  # >= 1 even for T == 0 (the kernel guards t < T)
        if const_expr(self.prefetch):
            self.kernel_prefetch(x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj).launch(
                grid=[grid_x, grid_y, 1],
                block=[THREADS, 1, 1],
                smem=THREADS * self.prefetch * 16,
                stream=stream,
                min_blocks_per_mp=self.key.min_ctas_per_sm,
                preferred_smem_carveout=100,  # the ring lives in shared memory: the maximum carveout (no device query at compile time)
            )
        else:
            self.kernel(x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj).launch(
                grid=[grid_x, grid_y, 1],
                block=[THREADS, 1, 1],
                stream=stream,
                min_blocks_per_mp=self.key.min_ctas_per_sm,
                preferred_smem_carveout=0,
            )
        if const_expr(self.key.has_final):
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
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
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
                            for k in cutlass.range_constexpr(W - 1):
                                for i in cutlass.range_constexpr(VEC):
                                    win[k, i] = win[k + 1, i]
                            for i in cutlass.range_constexpr(VEC):
                                win[W - 1, i] = xb[0, i, u, half].to(Float32)
                                acc[i] = rB[i] + rW[W - 1, i] * win[W - 1, i]
                            for k in cutlass.range_constexpr(W - 1):
                                prel = t - (W - 1) + k - bos
                                if prel >= 0:
                                    for i in cutlass.range_constexpr(VEC):
                                        acc[i] = acc[i] + rW[k, i] * win[k, i]
                                else:
                                    if const_expr(self.key.has_init):
                                        if prel >= -(W - 1):
                                            mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                                            for i in cutlass.range_constexpr(VEC):
                                                acc[i] = acc[i] + rW[k, i] * mInit[n, d0 + i, prel + (W - 1)].to(Float32)
                            if const_expr(self.key.silu):
                                for i in cutlass.range_constexpr(VEC):
                                    acc[i] = silu(acc[i])
                            for i in cutlass.range_constexpr(VEC):
                                yg[0, i, u] = acc[i].to(self.dtype)
                            cute.autovec_copy(yg[None, None, u], gY[(None, None), (t, dv)])

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.kernel
    def kernel_prefetch(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
    ):
        """:meth:`kernel` with the opt-in ``prefetch`` ring: the same math, token by token, in the same order; only the
        way x reaches the registers differs. Each thread's next tokens are copied by cp.async (16 bytes, L2 only) into
        its own ``prefetch`` slots of shared memory, one commit group per ``group`` tokens, ``prefetch / group`` groups
        in flight: up to ``prefetch`` loads per thread (256 bytes at 16) instead of ``2 * group``, and no registers held
        by loads in flight. A thread reads back only the slots it filled itself (``cp.async.wait_group`` makes its own
        copies visible to it), so there is no CTA barrier; a slot is refilled only after the token in it was consumed."""
        W = self.W
        VEC = self.vec
        U = self.group
        P = self.prefetch
        S = P // U  # commit groups in flight
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        # ring[.., slot, thread]: threads innermost, so a warp's 16-byte accesses to one slot are 512 contiguous bytes
        smem = cutlass.utils.SmemAllocator()
        sRing = smem.allocate_tensor(self.dtype, cute.make_layout((1, VEC, P, THREADS), stride=(VEC, 1, THREADS * VEC, VEC)), byte_alignment=16)
        dv = bidx * THREADS + tidx
        t0 = bidy * self.bt
        if dv < D // VEC and t0 < T:
            d0 = dv * VEC
            gX = channel_vectors(x_ptr, T, D, sx, VEC)
            gY = channel_vectors(y_ptr, T, D, sy, VEC)
            g2s = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.dtype, num_bits_per_copy=128)

            # Prologue first: groups 0 .. S - 1 of this CTA's tokens into the ring (one commit group each, empty past T),
            # so they are in flight while the taps, the sequence search and the halo below wait on their own loads.
            for j in cutlass.range_constexpr(S):
                for u in cutlass.range_constexpr(U):
                    if t0 + j * U + u < T:
                        ring_fill(g2s, gX, sRing, t0 + j * U + u, dv, j * U + u, tidx, VEC)
                cute.arch.cp_async_commit_group()

            rW, rB = load_taps(w_ptr, b_ptr, D, d0, W, VEC)
            n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, self.key.varlen)

            win = cute.make_rmem_tensor((W, VEC), Float32)
            halo = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            for k in cutlass.range_constexpr(W):
                for i in cutlass.range_constexpr(VEC):
                    win[k, i] = Float32(0.0)
            load_history(gX, win, halo, t0, dv, W, VEC)

            xr = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            yg = cute.make_rmem_tensor(cute.make_layout((1, VEC, U)), self.dtype)
            acc = cute.make_rmem_tensor((VEC,), Float32)
            n_groups = self.bt // U
            for rd in cutlass.range(n_groups // S, unroll=1):
                for s in cutlass.range_constexpr(S):
                    g = rd * S + s
                    tg = t0 + g * U
                    cute.arch.cp_async_wait_group(S - 1)  # group g (this thread's copies) has landed
                    for u in cutlass.range_constexpr(U):
                        t = tg + u
                        if t < T:
                            n, bos, nxt = advance_sequence(cu_ptr, t, n, bos, nxt, n_seqs, seq_arg, self.key.varlen)
                            cute.autovec_copy(sRing[None, None, s * U + u, tidx], xr)
                            for k in cutlass.range_constexpr(W - 1):
                                for i in cutlass.range_constexpr(VEC):
                                    win[k, i] = win[k + 1, i]
                            for i in cutlass.range_constexpr(VEC):
                                win[W - 1, i] = xr[0, i].to(Float32)
                                acc[i] = rB[i] + rW[W - 1, i] * win[W - 1, i]
                            for k in cutlass.range_constexpr(W - 1):
                                prel = t - (W - 1) + k - bos
                                if prel >= 0:
                                    for i in cutlass.range_constexpr(VEC):
                                        acc[i] = acc[i] + rW[k, i] * win[k, i]
                                else:
                                    if const_expr(self.key.has_init):
                                        if prel >= -(W - 1):
                                            mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                                            for i in cutlass.range_constexpr(VEC):
                                                acc[i] = acc[i] + rW[k, i] * mInit[n, d0 + i, prel + (W - 1)].to(Float32)
                            if const_expr(self.key.silu):
                                for i in cutlass.range_constexpr(VEC):
                                    acc[i] = silu(acc[i])
                            for i in cutlass.range_constexpr(VEC):
                                yg[0, i, u] = acc[i].to(self.dtype)
                            cute.autovec_copy(yg[None, None, u], gY[(None, None), (t, dv)])
                    # Refill the slots group g just left with group g + S (issued after their tokens were read above).
                    if g + S < n_groups:
                        for u in cutlass.range_constexpr(U):
                            tn = tg + S * U + u
                            if tn < T:
                                ring_fill(g2s, gX, sRing, tn, dv, s * U + u, tidx, VEC)
                    cute.arch.cp_async_commit_group()

    kernel_prefetch.set_name_prefix("cudnn", remove_cutlass_symbol=True)

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
            d0 = dv * VEC
            mX = cute.make_tensor(x_ptr, cute.make_layout((T, D), stride=(sx, 1)))
            mF = cute.make_tensor(final_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(fin_sn, fin_sd, fin_sj)))
            bos, eos = sequence_bounds(cu_ptr, n, n_seqs, seq_arg, self.key.varlen)
            for j in cutlass.range_constexpr(W - 1):
                p = eos - (W - 1) + j
                if p >= bos:
                    for i in cutlass.range_constexpr(VEC):
                        mF[n, d0 + i, j] = mX[p, d0 + i].to(self.state_dtype)
                else:
                    if const_expr(self.key.has_init):
                        mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                        for i in cutlass.range_constexpr(VEC):
                            mF[n, d0 + i, j] = mInit[n, d0 + i, j + eos - bos]
                    else:
                        for i in cutlass.range_constexpr(VEC):
                            mF[n, d0 + i, j] = Float32(0.0).to(self.state_dtype)

    final_kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
