"""SiLU and its derivative in fp32, as the causal_conv1d kernels compute them (forward, backward, decode update).

``sigmoid(x) = 1 / (1 + 2^(-x log2 e))`` with ``ex2.approx`` (fast exp2) and ``rcp.approx``.
"""

import cutlass.cute as cute
from cutlass import Float32

LOG2E = 1.4426950408889634


@cute.jit
def sigmoid(x: Float32) -> Float32:
    """``1 / (1 + exp(-x))`` by fast exp2 and approximate reciprocal."""
    return cute.arch.rcp_approx(Float32(1.0) + cute.math.exp2(x * Float32(-LOG2E), fastmath=True))


@cute.jit
def silu(x: Float32) -> Float32:
    """``x * sigmoid(x)``."""
    return x * sigmoid(x)


@cute.jit
def silu_grad(dy: Float32, z: Float32) -> Float32:
    """``dy * silu'(z) = dy * s * (1 + z (1 - s))`` with ``s = sigmoid(z)``."""
    sig = sigmoid(z)
    return dy * sig * (Float32(1.0) + z * (Float32(1.0) - sig))
