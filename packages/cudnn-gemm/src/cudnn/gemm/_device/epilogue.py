"""Epilogue math on the fp32 accumulator, written once and shared by every fusion.

Each helper is a ``@cute.jit`` function on one fp32 register value (the kernel calls them inside its
``range_constexpr`` loops, so they inline). The kernel composes them in this fixed order::

    x = alpha * acc  [+ beta * C[m, n]]  [+ bias[n] or bias[m]]      # affine part
    pre = x                                                             # optionally stored (aux out)
    y = activation(x)              # none | relu | relu2 | gelu_tanh | gelu_erf
    y = silu(gate) * up            # swiglu pairs a gate value with its up value (silu via tanh: swiglu_tanh)
    y = acc * 2 * relu(pre_in)     # dsrelu: acc is dD, pre_in read from the aux input
    amax = max(amax, |y|)          # optional per-tensor amax (amax_fast: unpredicated, 4 running maxima)

A new elementwise fusion is one more branch of :func:`activation`, keyed by a plan-time string.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32

#: Activations :func:`activation` knows (plan-time strings, part of the compile key).
ACTIVATIONS = ("none", "relu", "relu2", "gelu_tanh", "gelu_erf")

_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_CUBIC = 0.044715
_INV_SQRT_2 = 0.7071067811865476


@cute.jit
def activation(x: Float32, act: cutlass.Constexpr) -> Float32:
    """``act(x)`` for one fp32 value; ``act`` is a plan-time string from :data:`ACTIVATIONS`."""
    y = x
    if cutlass.const_expr(act == "relu"):
        y = cute.arch.fmax(x, Float32(0.0))
    if cutlass.const_expr(act == "relu2"):
        r = cute.arch.fmax(x, Float32(0.0))
        y = r * r
    if cutlass.const_expr(act == "gelu_tanh"):
        inner = Float32(_SQRT_2_OVER_PI) * (x + Float32(_GELU_CUBIC) * x * x * x)
        y = Float32(0.5) * x * (Float32(1.0) + cute.math.tanh(inner, fastmath=True))
    if cutlass.const_expr(act == "gelu_erf"):
        y = Float32(0.5) * x * (Float32(1.0) + cute.math.erf(x * Float32(_INV_SQRT_2)))
    return y


@cute.jit
def gelu_tanh_folded(x: Float32) -> Float32:
    """``gelu_tanh`` with its constants folded (kernel option ``gelu_fold``): ``h + h * tanh(x * (k + k c x^2))``,
    ``h = x / 2``: five fp32 operations (mul, fma, mul, mul, fma) and one ``tanh.approx.f32`` per element, against
    eight and one for the textbook form of :func:`activation`. Same math up to fp32 rounding."""
    x2 = x * x
    u = x * (x2 * Float32(_SQRT_2_OVER_PI * _GELU_CUBIC) + Float32(_SQRT_2_OVER_PI))
    h = Float32(0.5) * x
    return h * cute.math.tanh(u, fastmath=True) + h


@cute.jit
def silu_mul(gate: Float32, up: Float32) -> Float32:
    """SwiGLU: ``silu(gate) * up`` with ``silu(g) = g * rcp(1 + exp(-g))`` (approximate reciprocal, fast exp)."""
    return gate * cute.arch.rcp_approx(Float32(1.0) + cute.math.exp(-gate, fastmath=True)) * up


@cute.jit
def silu_mul_tanh(gate: Float32, up: Float32) -> Float32:
    """SwiGLU through tanh (kernel option ``swiglu_tanh``): ``silu(g) = g / 2 * (1 + tanh(g / 2)) = h * tanh(h) + h``,
    ``h = g / 2``: one ``tanh.approx.f32`` and three fp32 operations (mul, fma, mul), against ``ex2.approx`` +
    ``rcp.approx`` and five for :func:`silu_mul`. Same math up to the approximations' rounding (tanh.approx: about
    2^-11 relative; near g << 0 the result is an absolute error of that order times |g|, like gelu_tanh's)."""
    h = Float32(0.5) * gate
    return (h * cute.math.tanh(h, fastmath=True) + h) * up


@cute.jit
def dsrelu(grad: Float32, pre: Float32) -> Float32:
    """Backward of squared ReLU: ``grad * 2 * relu(pre)``."""
    return grad * Float32(2.0) * cute.arch.fmax(pre, Float32(0.0))


@cute.jit
def relu_times(g: Float32, pre: Float32) -> Float32:
    """``g * relu(pre)``: :func:`dsrelu` with the factor 2 already in ``g`` (the kernel folds it into alpha)."""
    return g * cute.arch.fmax(pre, Float32(0.0))
