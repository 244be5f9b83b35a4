"""Reference GEMM epilogues for cudnn.gemm tests and benchmarks.

``reference(a, b, ...)`` computes in fp32 (the ground truth); ``reference(..., lowp=True)`` does the same
chain the way plain torch would in the operands' dtype (cuBLAS matmul with a low-precision output, each
elementwise step rounded), which measures the rounding a correct low-precision kernel cannot avoid (the
FlashAttention tolerance rule in cudnn_testing.tolerance).
"""

from __future__ import annotations


def _act(x, activation: str):
    import torch
    import torch.nn.functional as F

    if activation == "none":
        return x
    if activation == "relu":
        return torch.relu(x)
    if activation == "relu2":
        return torch.relu(x).square()
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "gelu_erf":
        return F.gelu(x)
    raise ValueError(activation)


def swiglu_split(x, layout: str, block: int = 128):
    """(gate, up) column sets of a pre-activation ``x`` (..., N) in the given B layout."""
    n = x.shape[-1]
    if layout == "halves":
        return x[..., : n // 2], x[..., n // 2 :]
    blocks = x.unflatten(-1, (n // (2 * block), 2, block))
    return blocks[..., 0, :].flatten(-2), blocks[..., 1, :].flatten(-2)


def reference(a, b, *, bias=None, bias_kind="col", c=None, alpha=1.0, beta=1.0, activation="none", swiglu=None, dsrelu_pre=None, lowp=False):
    """(d, pre) for ``epilogue(alpha * a @ b + beta * c + bias)``; fp32 unless ``lowp``."""
    import torch

    dt = a.dtype if lowp else torch.float32
    x = torch.matmul(a.to(dt), b.to(dt)) if lowp else torch.matmul(a.float(), b.float())
    if alpha != 1.0:
        x = x * alpha
    if c is not None:
        x = x + beta * c.to(dt)
    if bias is not None:
        bb = bias.to(dt)
        if bias_kind == "row":
            bb = bb.unsqueeze(-1)
        elif bias.dim() == 2:
            bb = bb.unsqueeze(-2)
        x = x + bb
    pre = x
    if dsrelu_pre is not None:
        return x * 2 * torch.relu(dsrelu_pre.to(dt)), pre
    if swiglu is not None:
        g, u = swiglu_split(x, swiglu)
        return torch.nn.functional.silu(g) * u, pre
    return _act(x, activation), pre
