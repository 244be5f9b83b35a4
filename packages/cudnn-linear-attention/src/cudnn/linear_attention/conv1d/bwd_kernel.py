"""causal_conv1d backward: dx, dweight, dbias and d(initial_states) of the forward in fwd_kernel.py, CuTe DSL.

With ``z[t, d] = bias[d] + sum_k weight[d, k] * xs(t - (W - 1) + k, d)`` (``xs`` as in the forward: x
inside the sequence, the initial state or zero before it) and ``dz = dy * act'(z)``::

    dx[t, d]       = sum_k weight[d, k] * dz[t + (W - 1) - k, d]      (terms past the sequence end are 0)
    dweight[d, k]  = sum_t dz[t, d] * xs(t - (W - 1) + k, d)
    dbias[d]       = sum_t dz[t, d]
    dinit[n, d, j] = sum_{k <= j} weight[d, k] * dz[bos_n + j - k, d]    (tokens inside the sequence)

Three kernels, one launch each, all on the caller's stream:

1. ``kernel``: a grid of [D / (8 * 128), G] CTAs; each CTA walks token chunks ``c = y, y + G, ...`` of 64
   tokens, recomputes z from x (16-byte loads, the same register window as the forward), emits dx with
   16-byte stores, and accumulates its dweight / dbias partial sums in registers; it writes one fp32
   partial row per CTA into the caller's workspace ([G, W + 1, D], deterministic, no atomics).
2. ``reduce_kernel``: sums the G partial rows per channel and writes dweight [D, W] / dbias [D].
3. ``dinit_kernel`` (only with initial states): one thread per (sequence, 8 channels) recomputes dz for
   the first W - 1 tokens of its sequence and writes d(initial_states).

G is a plan-time constant (the workspace is sized from it); T, D, N and all strides are runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .._device.activation import silu_grad
from .._device.channels import channel_vectors, load_history, load_taps
from .._device.sequences import advance_sequence, locate_sequence, sequence_bounds

THREADS = 128


@dataclass(frozen=True)
class Conv1dBwdKey:
    """Plan-time choices of the backward kernels: exactly their compile key (Rule 4)."""

    dtype: str  # x / dy / dx
    w_dtype: str  # weight, bias, dweight, dbias
    width: int
    has_bias: bool
    silu: bool
    varlen: bool
    has_init: bool
    state_dtype: str  # "" without initial states
    tokens_per_chunk: int = 64
    group: int = 8


class CausalConv1dBwd:
    def __init__(self, key: Conv1dBwdKey):
        self.key = key
        self.dtype = getattr(cutlass, key.dtype)
        self.w_dtype = getattr(cutlass, key.w_dtype)
        self.state_dtype = getattr(cutlass, key.state_dtype) if key.state_dtype else None
        self.W = key.width
        self.vec = 128 // self.dtype.width
        self.bt = key.tokens_per_chunk
        self.group = key.group
        self.n_groups = (self.bt + self.W - 1 + self.group - 1) // self.group

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        dy_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        dx_ptr: cute.Pointer,
        dw_ptr: cute.Pointer,
        db_ptr: cute.Pointer | None,
        dinit_ptr: cute.Pointer | None,
        part_ptr: cute.Pointer,
        T: Int32,
        D: Int32,
        sx: Int32,
        sdy: Int32,
        sdx: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        G: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        dinit_sn: Int32,
        dinit_sd: Int32,
        dinit_sj: Int32,
        stream: cuda.CUstream,
    ):
        grid_x = (D // self.vec + THREADS - 1) // THREADS
        self.kernel(x_ptr, w_ptr, b_ptr, dy_ptr, cu_ptr, init_ptr, dx_ptr, part_ptr, T, D, sx, sdy, sdx, seq_arg, n_seqs, G, init_sn, init_sd, init_sj).launch(
            grid=[grid_x, G, 1], block=[THREADS, 1, 1], stream=stream
        )
        self.reduce_kernel(part_ptr, dw_ptr, db_ptr, D, G).launch(grid=[(D + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)
        if const_expr(self.key.has_init):
            self.dinit_kernel(
                x_ptr,
                w_ptr,
                b_ptr,
                dy_ptr,
                cu_ptr,
                init_ptr,
                dinit_ptr,
                T,
                D,
                sx,
                sdy,
                seq_arg,
                n_seqs,
                init_sn,
                init_sd,
                init_sj,
                dinit_sn,
                dinit_sd,
                dinit_sj,
            ).launch(grid=[grid_x, n_seqs + 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        dy_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        dx_ptr: cute.Pointer,
        part_ptr: cute.Pointer,
        T: Int32,
        D: Int32,
        sx: Int32,
        sdy: Int32,
        sdx: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        G: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
    ):
        W = self.W
        VEC = self.vec
        U = self.group
        BT = self.bt
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        if dv < D // VEC:
            d0 = dv * VEC
            gX = channel_vectors(x_ptr, T, D, sx, VEC)
            gDY = channel_vectors(dy_ptr, T, D, sdy, VEC)
            gDX = channel_vectors(dx_ptr, T, D, sdx, VEC)
            mP = cute.make_tensor(part_ptr, cute.make_layout((G, W + 1, D), stride=((W + 1) * D, D, 1)))

            rW, rB = load_taps(w_ptr, b_ptr, D, d0, W, VEC)
            dwacc = cute.make_rmem_tensor((W, VEC), Float32)
            dbacc = cute.make_rmem_tensor((VEC,), Float32)
            for i in cutlass.range_constexpr(VEC):
                for k in cutlass.range_constexpr(W):
                    dwacc[k, i] = Float32(0.0)
                dbacc[i] = Float32(0.0)

            xwin = cute.make_rmem_tensor((W, VEC), Float32)
            val = cute.make_rmem_tensor((W, VEC), Float32)
            dzwin = cute.make_rmem_tensor((W, VEC), Float32)
            nwin = cute.make_rmem_tensor((W,), Int32)
            halo = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            xg = cute.make_rmem_tensor(cute.make_layout((1, VEC, U)), self.dtype)
            dyg = cute.make_rmem_tensor(cute.make_layout((1, VEC, U)), self.dtype)
            dxo = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            n_chunks = (T + BT - 1) // BT
            for c in cutlass.range(bidy, n_chunks, G, unroll=1):
                t0 = c * BT
                n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, self.key.varlen)
                for k in cutlass.range_constexpr(W):
                    nwin[k] = Int32(-1)
                    for i in cutlass.range_constexpr(VEC):
                        xwin[k, i] = Float32(0.0)
                        dzwin[k, i] = Float32(0.0)
                load_history(gX, xwin, halo, t0, dv, W, VEC)
                for g in cutlass.range(self.n_groups, unroll=1):
                    sg = g * U
                    for u in cutlass.range_constexpr(U):
                        if sg + u < BT + W - 1 and t0 + sg + u < T:
                            cute.autovec_copy(gX[(None, None), (t0 + sg + u, dv)], xg[None, None, u])
                            cute.autovec_copy(gDY[(None, None), (t0 + sg + u, dv)], dyg[None, None, u])
                    for u in cutlass.range_constexpr(U):
                        s = sg + u
                        tp = t0 + s
                        if s < BT + W - 1:
                            for k in cutlass.range_constexpr(W - 1):
                                nwin[k] = nwin[k + 1]
                                for i in cutlass.range_constexpr(VEC):
                                    xwin[k, i] = xwin[k + 1, i]
                                    dzwin[k, i] = dzwin[k + 1, i]
                            nwin[W - 1] = Int32(-1)
                            for i in cutlass.range_constexpr(VEC):
                                dzwin[W - 1, i] = Float32(0.0)
                            if tp < T:
                                n, bos, nxt = advance_sequence(cu_ptr, tp, n, bos, nxt, n_seqs, seq_arg, self.key.varlen)
                                for i in cutlass.range_constexpr(VEC):
                                    xwin[W - 1, i] = xg[0, i, u].to(Float32)
                                    val[W - 1, i] = xwin[W - 1, i]
                                for k in cutlass.range_constexpr(W - 1):
                                    prel = tp - (W - 1) + k - bos
                                    for i in cutlass.range_constexpr(VEC):
                                        val[k, i] = Float32(0.0)
                                    if prel >= 0:
                                        for i in cutlass.range_constexpr(VEC):
                                            val[k, i] = xwin[k, i]
                                    else:
                                        if const_expr(self.key.has_init):
                                            if prel >= -(W - 1):
                                                mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
                                                for i in cutlass.range_constexpr(VEC):
                                                    val[k, i] = mInit[n, d0 + i, prel + (W - 1)].to(Float32)
                                nwin[W - 1] = n
                                for i in cutlass.range_constexpr(VEC):
                                    z = rB[i]
                                    for k in cutlass.range_constexpr(W):
                                        z = z + rW[k, i] * val[k, i]
                                    dz = dyg[0, i, u].to(Float32)
                                    if const_expr(self.key.silu):
                                        dz = silu_grad(dz, z)
                                    dzwin[W - 1, i] = dz
                                if s < BT:
                                    for i in cutlass.range_constexpr(VEC):
                                        dbacc[i] = dbacc[i] + dzwin[W - 1, i]
                                        for k in cutlass.range_constexpr(W):
                                            dwacc[k, i] = dwacc[k, i] + dzwin[W - 1, i] * val[k, i]
                            if s >= W - 1:
                                t = tp - (W - 1)
                                if t < T:
                                    for i in cutlass.range_constexpr(VEC):
                                        acc = rW[W - 1, i] * dzwin[0, i]
                                        for k in cutlass.range_constexpr(W - 1):
                                            if nwin[W - 1 - k] == nwin[0]:
                                                acc = acc + rW[k, i] * dzwin[W - 1 - k, i]
                                        dxo[0, i] = acc.to(self.dtype)
                                    cute.autovec_copy(dxo, gDX[(None, None), (t, dv)])
            for k in cutlass.range_constexpr(W):
                for i in cutlass.range_constexpr(VEC):
                    mP[bidy, k, d0 + i] = dwacc[k, i]
            for i in cutlass.range_constexpr(VEC):
                mP[bidy, W, d0 + i] = dbacc[i]

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.kernel
    def reduce_kernel(self, part_ptr: cute.Pointer, dw_ptr: cute.Pointer, db_ptr: cute.Pointer | None, D: Int32, G: Int32):
        W = self.W
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        d = bidx * THREADS + tidx
        if d < D:
            mP = cute.make_tensor(part_ptr, cute.make_layout((G, W + 1, D), stride=((W + 1) * D, D, 1)))
            mDW = cute.make_tensor(dw_ptr, cute.make_layout((D, W), stride=(W, 1)))
            acc = cute.make_rmem_tensor((W + 1,), Float32)
            for k in cutlass.range_constexpr(W + 1):
                acc[k] = Float32(0.0)
            for g in cutlass.range(G, unroll=4):
                for k in cutlass.range_constexpr(W + 1):
                    acc[k] = acc[k] + mP[g, k, d]
            for k in cutlass.range_constexpr(W):
                mDW[d, k] = acc[k].to(self.w_dtype)
            if const_expr(db_ptr is not None):
                mDB = cute.make_tensor(db_ptr, cute.make_layout((D,)))
                mDB[d] = acc[W].to(self.w_dtype)

    reduce_kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.kernel
    def dinit_kernel(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        dy_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer,
        dinit_ptr: cute.Pointer,
        T: Int32,
        D: Int32,
        sx: Int32,
        sdy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        dinit_sn: Int32,
        dinit_sd: Int32,
        dinit_sj: Int32,
    ):
        W = self.W
        VEC = self.vec
        tidx, _, _ = cute.arch.thread_idx()
        bidx, n, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        if dv < D // VEC and n < n_seqs:
            d0 = dv * VEC
            mX = cute.make_tensor(x_ptr, cute.make_layout((T, D), stride=(sx, 1)))
            mDY = cute.make_tensor(dy_ptr, cute.make_layout((T, D), stride=(sdy, 1)))
            mW = cute.make_tensor(w_ptr, cute.make_layout((D, W), stride=(W, 1)))
            mInit = cute.make_tensor(init_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(init_sn, init_sd, init_sj)))
            mDI = cute.make_tensor(dinit_ptr, cute.make_layout((n_seqs, D, W - 1), stride=(dinit_sn, dinit_sd, dinit_sj)))
            bos, eos = sequence_bounds(cu_ptr, n, n_seqs, seq_arg, self.key.varlen)
            dzr = cute.make_rmem_tensor((W - 1, VEC), Float32)
            for tr in cutlass.range_constexpr(W - 1):
                for i in cutlass.range_constexpr(VEC):
                    dzr[tr, i] = Float32(0.0)
                if bos + tr < eos:
                    for i in cutlass.range_constexpr(VEC):
                        z = Float32(0.0)
                        if const_expr(b_ptr is not None):
                            mB = cute.make_tensor(b_ptr, cute.make_layout((D,)))
                            z = mB[d0 + i].to(Float32)
                        for k in cutlass.range_constexpr(W):
                            prel = tr - (W - 1) + k
                            if const_expr(prel >= 0):
                                z = z + mW[d0 + i, k].to(Float32) * mX[bos + prel, d0 + i].to(Float32)
                            else:
                                z = z + mW[d0 + i, k].to(Float32) * mInit[n, d0 + i, prel + (W - 1)].to(Float32)
                        dz = mDY[bos + tr, d0 + i].to(Float32)
                        if const_expr(self.key.silu):
                            dz = silu_grad(dz, z)
                        dzr[tr, i] = dz
            for j in cutlass.range_constexpr(W - 1):
                for i in cutlass.range_constexpr(VEC):
                    acc = Float32(0.0)
                    for k in cutlass.range_constexpr(j + 1):
                        acc = acc + mW[d0 + i, k].to(Float32) * dzr[j - k, i]
                    mDI[n, d0 + i, j] = acc.to(self.state_dtype)

    dinit_kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
