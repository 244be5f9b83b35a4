"""causal_conv1d_update: one decode step of the short causal convolution over a rolling state, CuTe DSL.

For each batch row ``b`` (state slot ``s = b``, or ``s = conv_state_indices[b]`` when indices are given;
rows with ``s < 0`` are padding and are skipped: neither ``out`` nor the state is written)::

    win[k] = conv_state[s, d, k] for k < W - 1;  win[W - 1] = x[b, d]
    out[b, d] = act(bias[d] + sum_k weight[d, k] * win[k])
    conv_state[s, d, j] = win[j + 1]                 (in place: the state rolls by one token)

Layouts: ``x`` / ``out`` [B, D] with unit channel stride and a 16-byte-multiple row stride; ``conv_state``
[S, D, W - 1] with any strides (vLLM's [S, D, W - 1] contiguous is the usual one); ``weight`` [D, W]
contiguous; ``conv_state_indices`` int32 [B]. One thread owns 16 bytes of channels of one row; a contiguous
[S, D, W - 1] state (plan-time flag ``state_contiguous``) is read and written with vector accesses of the
thread's VEC * (W - 1) consecutive elements, any other state layout element by element.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .._device.activation import silu
from .._device.channels import channel_vectors, state_vectors

THREADS = 128


@dataclass(frozen=True)
class Conv1dUpdateKey:
    """Plan-time choices of the update kernel: exactly its compile key (Rule 4)."""

    dtype: str
    w_dtype: str
    state_dtype: str
    width: int
    has_bias: bool
    silu: bool
    has_indices: bool
    state_contiguous: bool = False  # [S, D, W - 1] with strides (D (W - 1), W - 1, 1): 16-byte state accesses


class CausalConv1dUpdate:
    def __init__(self, key: Conv1dUpdateKey):
        self.key = key
        self.dtype = getattr(cutlass, key.dtype)
        self.state_dtype = getattr(cutlass, key.state_dtype)
        self.W = key.width
        self.vec = 128 // self.dtype.width

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        state_ptr: cute.Pointer,
        idx_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        B: Int32,
        D: Int32,
        S: Int32,
        sx: Int32,
        sy: Int32,
        st_sn: Int32,
        st_sd: Int32,
        st_sj: Int32,
        stream: cuda.CUstream,
    ):
        grid_x = (D // self.vec + THREADS - 1) // THREADS
        grid_y = B + 1  # one idle row of CTAs keeps B == 0 a valid launch (the kernel guards b < B)
        self.kernel(x_ptr, w_ptr, b_ptr, state_ptr, idx_ptr, y_ptr, B, D, S, sx, sy, st_sn, st_sd, st_sj).launch(
            grid=[grid_x, grid_y, 1], block=[THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        state_ptr: cute.Pointer,
        idx_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        B: Int32,
        D: Int32,
        S: Int32,
        sx: Int32,
        sy: Int32,
        st_sn: Int32,
        st_sd: Int32,
        st_sj: Int32,
    ):
        W = self.W
        VEC = self.vec
        tidx, _, _ = cute.arch.thread_idx()
        bidx, b, _ = cute.arch.block_idx()
        dv = bidx * THREADS + tidx
        slot = b
        if const_expr(self.key.has_indices):
            mIdx = cute.make_tensor(idx_ptr, cute.make_layout((B,)))
            if b < B:
                slot = mIdx[b]
        if dv < D // VEC and b < B and slot >= 0:
            d0 = dv * VEC
            mW = cute.make_tensor(w_ptr, cute.make_layout((D, W), stride=(W, 1)))
            mS = cute.make_tensor(state_ptr, cute.make_layout((S, D, W - 1), stride=(st_sn, st_sd, st_sj)))
            gX = channel_vectors(x_ptr, B, D, sx, VEC)
            gY = channel_vectors(y_ptr, B, D, sy, VEC)
            rx = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            cute.autovec_copy(gX[(None, None), (b, dv)], rx)
            win = cute.make_rmem_tensor((W, VEC), Float32)
            WS = W - 1
            # Contiguous state: this thread's VEC channels x (W - 1) taps are VEC * (W - 1) consecutive elements.
            gSv = state_vectors(state_ptr, S, D, WS, VEC)
            rs = cute.make_rmem_tensor(cute.make_layout((1, VEC * WS)), self.state_dtype)
            if const_expr(self.key.state_contiguous):
                cute.autovec_copy(gSv[(None, None), (slot, dv)], rs)
                for i in cutlass.range_constexpr(VEC):
                    for k in cutlass.range_constexpr(WS):
                        win[k, i] = rs[0, i * WS + k].to(Float32)
            else:
                for i in cutlass.range_constexpr(VEC):
                    for k in cutlass.range_constexpr(WS):
                        win[k, i] = mS[slot, d0 + i, k].to(Float32)
            for i in cutlass.range_constexpr(VEC):
                win[W - 1, i] = rx[0, i].to(Float32)
            acc = cute.make_rmem_tensor((VEC,), Float32)
            for i in cutlass.range_constexpr(VEC):
                acc[i] = Float32(0.0)
            if const_expr(b_ptr is not None):
                mB = cute.make_tensor(b_ptr, cute.make_layout((D,)))
                for i in cutlass.range_constexpr(VEC):
                    acc[i] = mB[d0 + i].to(Float32)
            for i in cutlass.range_constexpr(VEC):
                for k in cutlass.range_constexpr(W):
                    acc[i] = acc[i] + mW[d0 + i, k].to(Float32) * win[k, i]
            if const_expr(self.key.silu):
                for i in cutlass.range_constexpr(VEC):
                    acc[i] = silu(acc[i])
            ry = cute.make_rmem_tensor(cute.make_layout((1, VEC)), self.dtype)
            for i in cutlass.range_constexpr(VEC):
                ry[0, i] = acc[i].to(self.dtype)
            cute.autovec_copy(ry, gY[(None, None), (b, dv)])
            # Roll the state: all reads above happen before these writes (same thread, same elements).
            if const_expr(self.key.state_contiguous):
                for i in cutlass.range_constexpr(VEC):
                    for j in cutlass.range_constexpr(WS):
                        rs[0, i * WS + j] = win[j + 1, i].to(self.state_dtype)
                cute.autovec_copy(rs, gSv[(None, None), (slot, dv)])
            else:
                for i in cutlass.range_constexpr(VEC):
                    for j in cutlass.range_constexpr(WS):
                        mS[slot, d0 + i, j] = win[j + 1, i].to(self.state_dtype)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
