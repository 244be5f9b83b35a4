"""Reference (pure PyTorch, fp32) implementations of matmul, pointwise and reduction nodes.

torch is imported inside the functions: registering them imports nothing heavy.
"""

from __future__ import annotations

import math

from .enums import pointwise_mode as pm
from .enums import reduction_mode as rm
from .reference import OpContext, register_reference_op


def _matmul(ctx: OpContext) -> None:
    import torch

    ctx.output("C", torch.matmul(ctx.input("A"), ctx.input("B")))


def _check_matmul(node) -> None:
    if node.attrs.get("padding", 0.0) != 0.0:
        raise NotImplementedError(f"reference: {node.describe()} padding={node.attrs['padding']} is not implemented")


def _relu_parts(attrs):
    lower = attrs.get("relu_lower_clip")
    slope = attrs.get("relu_lower_clip_slope")
    upper = attrs.get("relu_upper_clip")
    return (0.0 if lower is None else float(lower)), (0.0 if slope is None else float(slope)), (None if upper is None else float(upper))


def _gelu_tanh_grad(x):
    import torch

    c = math.sqrt(2.0 / math.pi)
    inner = c * (x + 0.044715 * x**3)
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


def _pointwise_fn(mode, attrs):
    """``fn(*fp32 operands) -> fp32`` for ``mode``."""
    import torch
    import torch.nn.functional as F

    lower, slope, upper = _relu_parts(attrs)
    beta = attrs.get("swish_beta")
    beta = 1.0 if beta is None else float(beta)
    alpha = attrs.get("elu_alpha")
    alpha = 1.0 if alpha is None else float(alpha)

    def relu(x):
        y = torch.where(x > lower, x, lower + slope * (x - lower))
        return y if upper is None else torch.clamp(y, max=upper)

    def relu_bwd(dy, x):
        keep = (x > lower) & (x < upper) if upper is not None else (x > lower)
        grad = torch.where(keep, torch.ones_like(x), torch.where(x > lower, torch.zeros_like(x), torch.full_like(x, slope)))
        return dy * grad

    def bool_op(f):
        return lambda *xs: f(*[x != 0 for x in xs]).float()

    table = {
        pm.ADD: lambda a, b: a + b,
        pm.SUB: lambda a, b: a - b,
        pm.MUL: lambda a, b: a * b,
        pm.DIV: lambda a, b: a / b,
        pm.ADD_SQUARE: lambda a, b: a + b * b,
        pm.MAX: torch.maximum,
        pm.MIN: torch.minimum,
        pm.MOD: torch.fmod,
        pm.POW: torch.pow,
        pm.ABS: torch.abs,
        pm.CEIL: torch.ceil,
        pm.COS: torch.cos,
        pm.EXP: torch.exp,
        pm.FLOOR: torch.floor,
        pm.LOG: torch.log,
        pm.NEG: torch.neg,
        pm.RSQRT: torch.rsqrt,
        pm.SIN: torch.sin,
        pm.SQRT: torch.sqrt,
        pm.TAN: torch.tan,
        pm.ERF: torch.erf,
        pm.IDENTITY: lambda x: x,
        pm.RECIPROCAL: torch.reciprocal,
        pm.RELU_FWD: relu,
        pm.TANH_FWD: torch.tanh,
        pm.SIGMOID_FWD: torch.sigmoid,
        pm.ELU_FWD: lambda x: torch.where(x > 0, x, alpha * torch.expm1(x)),
        pm.GELU_FWD: lambda x: F.gelu(x),
        pm.GELU_APPROX_TANH_FWD: lambda x: F.gelu(x, approximate="tanh"),
        pm.SOFTPLUS_FWD: F.softplus,
        pm.SWISH_FWD: lambda x: x * torch.sigmoid(beta * x),
        pm.RELU_BWD: relu_bwd,
        pm.TANH_BWD: lambda dy, x: dy * (1 - torch.tanh(x) ** 2),
        pm.SIGMOID_BWD: lambda dy, x: dy * torch.sigmoid(x) * (1 - torch.sigmoid(x)),
        pm.ELU_BWD: lambda dy, x: dy * torch.where(x > 0, torch.ones_like(x), alpha * torch.exp(x)),
        pm.GELU_BWD: lambda dy, x: dy * (0.5 * (1 + torch.erf(x / math.sqrt(2.0))) + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)),
        pm.GELU_APPROX_TANH_BWD: lambda dy, x: dy * _gelu_tanh_grad(x),
        pm.SOFTPLUS_BWD: lambda dy, x: dy * torch.sigmoid(x),
        pm.SWISH_BWD: lambda dy, x: dy * (torch.sigmoid(beta * x) * (1 + beta * x * (1 - torch.sigmoid(beta * x)))),
        pm.CMP_EQ: lambda a, b: (a == b).float(),
        pm.CMP_NEQ: lambda a, b: (a != b).float(),
        pm.CMP_GT: lambda a, b: (a > b).float(),
        pm.CMP_GE: lambda a, b: (a >= b).float(),
        pm.CMP_LT: lambda a, b: (a < b).float(),
        pm.CMP_LE: lambda a, b: (a <= b).float(),
        pm.LOGICAL_AND: bool_op(torch.logical_and),
        pm.LOGICAL_OR: bool_op(torch.logical_or),
        pm.LOGICAL_NOT: bool_op(torch.logical_not),
        pm.BINARY_SELECT: lambda a, b, mask: torch.where(mask != 0, a, b),
    }
    return table[mode]


def _as_tensor(v, like):
    import torch

    if isinstance(v, torch.Tensor):
        return v
    device = like.device if like is not None else "cpu"
    return torch.full((), float(v), dtype=torch.float32, device=device)  # a fill kernel, not a host-to-device copy


def _pointwise(ctx: OpContext) -> None:
    import torch

    node = ctx.node
    mode = node.attrs["mode"]
    out = node.outputs["OUT_0"]
    if mode is pm.GEN_INDEX:
        axis = int(node.attrs["axis"])
        shape = [1] * len(out.dim)
        shape[axis] = out.dim[axis]
        idx = torch.arange(out.dim[axis], device=ctx.device, dtype=torch.float32).view(shape)
        ctx.output("OUT_0", idx.expand(out.dim))
        return
    ports = [p for p in ("IN_0", "IN_1", "IN_2") if ctx.has(p)]
    vals = [ctx.input(p) for p in ports]
    like = next((v for v in vals if isinstance(v, torch.Tensor)), None)
    vals = [_as_tensor(v, like) for v in vals]
    ctx.output("OUT_0", _pointwise_fn(mode, node.attrs)(*vals))


def _reduction(ctx: OpContext) -> None:
    import torch

    node = ctx.node
    x = ctx.input("X")
    y = node.outputs["Y"]
    dims = [i for i, (dx, dy) in enumerate(zip(node.inputs["X"].dim, y.dim, strict=False)) if dy == 1 and dx != 1]
    mode = node.attrs["mode"]
    if not dims:
        ctx.output("Y", x if mode not in (rm.AMAX, rm.NORM1, rm.NORM2) else x.abs())
        return
    if mode is rm.ADD:
        r = x.sum(dim=dims, keepdim=True)
    elif mode is rm.MUL:
        r = x
        for d in dims:
            r = r.prod(dim=d, keepdim=True)
    elif mode is rm.MUL_NO_ZEROS:
        r = torch.where(x == 0, torch.ones_like(x), x)
        for d in dims:
            r = r.prod(dim=d, keepdim=True)
    elif mode is rm.MIN:
        r = x.amin(dim=dims, keepdim=True)
    elif mode is rm.MAX:
        r = x.amax(dim=dims, keepdim=True)
    elif mode is rm.AMAX:
        r = x.abs().amax(dim=dims, keepdim=True)
    elif mode is rm.AVG:
        r = x.mean(dim=dims, keepdim=True)
    elif mode is rm.NORM1:
        r = x.abs().sum(dim=dims, keepdim=True)
    elif mode is rm.NORM2:
        r = x.square().sum(dim=dims, keepdim=True).sqrt()
    else:
        raise NotImplementedError(f"reference: reduction mode {mode} is not implemented")
    ctx.output("Y", r)


register_reference_op("matmul", _matmul, _check_matmul)
register_reference_op("pointwise", _pointwise)
register_reference_op("reduction", _reduction)

from . import reference_sdpa as _reference_sdpa  # noqa: E402,F401 - registers sdpa / sdpa_backward
