"""Per-thread channel access of the causal_conv1d kernels: one thread owns ``vec`` consecutive channels
(16 bytes of the activation dtype) and moves them with 16-byte vector loads / stores."""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr


@cute.jit
def channel_vectors(ptr: cute.Pointer, rows: Int32, D: Int32, row_stride: Int32, vec: cutlass.Constexpr[int]):
    """[rows, D] (unit channel stride, ``row_stride`` a multiple of ``vec``) tiled into ``vec``-channel
    vectors: element ``[(None, None), (row, dv)]`` is the vector of channels ``dv * vec ...``."""
    m = cute.make_tensor(ptr, cute.make_layout((rows, D), stride=(cute.assume(row_stride, divby=vec), 1)))
    return cute.zipped_divide(m, (1, vec))


@cute.jit
def state_vectors(ptr: cute.Pointer, rows: Int32, D: Int32, width_states: cutlass.Constexpr[int], vec: cutlass.Constexpr[int]):
    """A contiguous [rows, D, width_states] state tensor tiled into each thread's slice: element ``[(None, None), (n,
    dv)]`` is the ``vec * width_states`` consecutive elements of channels ``dv * vec ...`` of row ``n`` (channel-major, tap
    fastest), which :func:`cute.autovec_copy` moves with the widest accesses the slice's alignment allows (16 bytes for a
    16-byte aligned base: the slice is ``vec * width_states`` elements, a multiple of 16 bytes for 2- and 4-byte states
    with 16-byte x vectors)."""
    row = D * width_states
    m = cute.make_tensor(ptr, cute.make_layout((rows, row), stride=(cute.assume(row, divby=vec * width_states), 1)))
    return cute.zipped_divide(m, (1, vec * width_states))


@cute.jit
def load_taps(w_ptr: cute.Pointer, b_ptr: cute.Pointer | None, D: Int32, d0: Int32, width: cutlass.Constexpr[int], vec: cutlass.Constexpr[int]):
    """Weights [D, width] (contiguous) and bias [D] (zero without one) of channels ``d0 .. d0 + vec`` in fp32
    registers: returns ``(rW [width, vec], rB [vec])``."""
    mW = cute.make_tensor(w_ptr, cute.make_layout((D, width), stride=(width, 1)))
    rW = cute.make_rmem_tensor((width, vec), Float32)
    rB = cute.make_rmem_tensor((vec,), Float32)
    for i in cutlass.range_constexpr(vec):
        for k in cutlass.range_constexpr(width):
            rW[k, i] = mW[d0 + i, k].to(Float32)
        rB[i] = Float32(0.0)
    if const_expr(b_ptr is not None):
        mB = cute.make_tensor(b_ptr, cute.make_layout((D,)))
        for i in cutlass.range_constexpr(vec):
            rB[i] = mB[d0 + i].to(Float32)
    return rW, rB


@cute.jit
def load_history(gX: cute.Tensor, win: cute.Tensor, halo: cute.Tensor, t0: Int32, dv: Int32, width: cutlass.Constexpr[int], vec: cutlass.Constexpr[int]):
    """The tokens before ``t0`` into the register window: ``win[k, :] = x[t0 - width + k]`` (fp32) for
    ``1 <= k < width`` and ``t0 - width + k >= 0`` (other rows are left as they are). ``gX`` is a
    :func:`channel_vectors` view, ``halo`` a [1, vec] staging register tensor of x's dtype."""
    for k in cutlass.range_constexpr(1, width):
        p = t0 - width + k
        if p >= 0:
            cute.autovec_copy(gX[(None, None), (p, dv)], halo)
            for i in cutlass.range_constexpr(vec):
                win[k, i] = halo[0, i].to(Float32)
