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


def quantize_fp8(x, dtype):
    """(x_fp8, scale) with ``x ~= x_fp8.float() * scale``: per-tensor scale mapping max|x| onto the format's max."""
    import torch

    fmax = torch.finfo(dtype).max
    scale = (x.abs().amax().float() / fmax).clamp_min(1e-12)
    return (x / scale).clamp(-fmax, fmax).to(dtype), scale.reshape(1)


def reference_scaled(a, b, scale_a=None, scale_b=None, *, bias=None, activation="none", scale_d=None, out_dtype=None):
    """(ref, lowp) for an fp8 GEMM ``cast(act(scale_a * scale_b * a @ b + bias) * scale_d)``.

    ``ref`` is fp32 on the dequantized operands (``a.float() * scale_a``: exact, fp8 values and fp32 scales).
    ``lowp`` is that same fp32 result rounded to ``out_dtype`` (then read back as fp32): with fp8 operands the
    products are exact, so the rounding of D is the dominant error a correct kernel cannot avoid for bf16 / fp8
    D. Hopper's fp8 WGMMA accumulates with fewer bits than fp32: where D's format is finer (fp16 D scaled
    near its range), add :func:`fp8_accum_noise` to the rule's noise. The FlashAttention rule (``assert_close_fa(out, ref, lowp)``, factor 2 plus the
    output dtype's noise) then allows one ulp of D's format at the largest outputs: for an fp8 D that is the
    2**-3 (e4m3) or 2**-2 (e5m2) relative step of those values."""
    import torch

    sa = 1.0 if scale_a is None else scale_a.float()
    sb = 1.0 if scale_b is None else scale_b.float()
    x = torch.matmul(a.float() * sa, b.float() * sb)
    if bias is not None:
        x = x + bias.float()
    y = _act(x, activation)
    if scale_d is not None:
        y = y * scale_d.float()
    out_dtype = out_dtype or torch.bfloat16
    lowp = y
    if out_dtype.itemsize == 1:
        fmax = torch.finfo(out_dtype).max
        lowp = y.clamp(-fmax, fmax)  # the kernel's conversion saturates (cvt.rn.satfinite)
    return y, lowp.to(out_dtype).float()


def fp8_accum_noise(a, b, scale_a=None, scale_b=None, scale_d=None, bits: int = 14) -> float:
    """Bound of the error Hopper's fp8 WGMMA adds inside one promotion interval: it keeps about ``bits`` = 14
    mantissa bits while accumulating (DeepSeek-V3 report, sec. 3.3.2), each product's loss at most 2**-bits of
    the interval's running magnitude, bounded here by ``2**-bits * max(|a| @ |b|)`` in D's units (scales
    applied). Add it to ``assert_close_fa``'s noise where D's own rounding is finer than this (fp16 D)."""
    import torch

    sa = 1.0 if scale_a is None else scale_a.float()
    sb = 1.0 if scale_b is None else scale_b.float()
    sd = 1.0 if scale_d is None else scale_d.float()
    mag = torch.matmul(a.float().abs() * sa, b.float().abs() * sb) * sd
    return 2.0**-bits * mag.max().item()
