"""Reference sdpa / sdpa_backward (pure PyTorch, fp32): every mask and layout the graph API declares.

Covers attn_scale (number, by-value or device tensor; default 1.0 as upstream), bias, ALiBi, padding
masks (seq_len_q / seq_len_kv; rows past seq_len_q are written as 0), causal / band masks aligned top-left
or bottom-right (per-batch lengths when padded), sliding windows, THD ragged offsets (gathered and
scattered on device: no host read), paged KV, GQA / MQA, sink tokens, stats, score_max / score_sum_exp.
Backward recomputes the forward in fp32 and differentiates it with autograd (the stats and o inputs are
not needed by the oracle). Declined: dropout, block_mask, score_mod.
"""

from __future__ import annotations

import math

from .enums import diagonal_alignment as align
from .reference import OpContext, register_reference_op

_UNSUPPORTED = ("dropout", "rng_dump", "score_mod", "score_mod_bprop")


def _check(node) -> None:
    for attr in _UNSUPPORTED:
        if node.attrs.get(attr) is not None:
            raise NotImplementedError(f"reference: {node.describe()}: {attr} is not implemented by the reference engine")
    if node.inputs.get("block_mask") is not None:
        raise NotImplementedError(f"reference: {node.describe()}: block_mask is not implemented by the reference engine")


def _flat(raw, what: str):
    if not raw.is_contiguous():
        raise ValueError(f"reference: the packed (ragged) storage of {what} must be contiguous; got shape {tuple(raw.shape)} stride {tuple(raw.stride())}")
    return raw.view(-1)


def _ragged_index(desc, offsets, lens, device):
    """Element index of every (b, h, s, d) of a ragged descriptor and whether the row is inside its sequence."""
    import torch

    b, h, s, d = desc.dim
    _, sh, ss, sd = desc.stride
    off = offsets.reshape(-1)[:b].to(device=device, dtype=torch.int64).view(b, 1, 1, 1)

    def ar(n, shape):
        return torch.arange(n, device=device, dtype=torch.int64).view(shape)

    idx = off + ar(h, (1, h, 1, 1)) * sh + ar(s, (1, 1, s, 1)) * ss + ar(d, (1, 1, 1, d)) * sd
    valid = (ar(s, (1, 1, s, 1)) < lens.view(b, 1, 1, 1)).expand(b, h, s, d)
    return idx, valid


def _read(ctx: OpContext, port: str, lens):
    """An input as fp32 ``[b, h, s, d]``; ragged (THD) storage is gathered through its offsets."""
    t = ctx.node.inputs[port]
    if t.ragged_offset is None:
        return ctx.input(port)
    raw = ctx.raw(port)
    idx, valid = _ragged_index(t, ctx._pack[t.ragged_offset.uid], lens, raw.device)
    flat = _flat(raw, t.describe())
    safe = idx.masked_fill(~valid, 0).clamp(0, max(flat.numel() - 1, 0))
    return flat[safe].float()


def _write(ctx: OpContext, port: str, value, lens) -> None:
    """Store an output; ragged outputs are scattered through their offsets without touching other bytes."""
    import torch

    t = ctx.node.outputs.get(port)
    if t is None:
        return
    raw = ctx.raw_output(port)
    if t.ragged_offset is None or raw is None:
        ctx.output(port, value)
        return
    idx, valid = _ragged_index(t, ctx._pack[t.ragged_offset.uid], lens, raw.device)
    flat = _flat(raw, t.describe())
    n = flat.numel()
    pos = torch.arange(idx.numel(), device=raw.device, dtype=torch.int64).view_as(idx)
    owner = torch.full((n,), -1, dtype=torch.int64, device=raw.device)
    target = idx.masked_fill(~valid, 0).clamp(0, max(n - 1, 0)).reshape(-1)
    owner.scatter_reduce_(0, target, pos.masked_fill(~valid, -1).reshape(-1), reduce="amax", include_self=True)
    new = value.reshape(-1)[owner.clamp(min=0)].to(flat.dtype)
    flat.copy_(torch.where(owner >= 0, new, flat))
    ctx.written(port, value)


def _gather_paged(container, table, s_kv: int):
    """``[b, h, s_kv, d]`` from a paged container ``[blocks, h, block_size, d]`` and its table ``[b, 1, pages, 1]``."""
    import torch

    nb, _, bs, _ = container.shape
    pages = table.reshape(table.shape[0], -1).to(torch.int64)
    pos = torch.arange(s_kv, device=container.device, dtype=torch.int64)
    blk = pages[:, pos // bs].clamp(0, nb - 1)
    cont = container.float().permute(0, 2, 1, 3)
    g = cont[blk, (pos % bs).unsqueeze(0).expand_as(blk)]
    return g.permute(0, 2, 1, 3)


def _alibi_slopes(h: int, device):
    import torch

    n = 2 ** math.floor(math.log2(h))
    m = torch.pow(2.0 ** (-8.0 / n), torch.arange(1, 1 + n, dtype=torch.float32))
    if n < h:
        extra = torch.pow(2.0 ** (-4.0 / n), torch.arange(1, 1 + 2 * (h - n), 2, dtype=torch.float32))
        m = torch.cat([m, extra])
    return m.view(1, -1, 1, 1).to(device)


def attention_fp32(q, k, v, attrs, scale=1.0, bias=None, sink=None, len_q=None, len_kv=None):
    """``(o, stats, row_max, row_sum_exp)`` in fp32 for ``q [b, h_q, s_q, d]``, ``k/v [b, h_k, s_kv, d]``."""
    import torch

    b, hq, sq, _ = q.shape
    hk, skv = k.shape[1], k.shape[2]
    if hk != hq:
        k = k.repeat_interleave(hq // hk, dim=1)
    if v.shape[1] != hq:
        v = v.repeat_interleave(hq // v.shape[1], dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if bias is not None:
        s = s + bias
    dev = q.device
    i = torch.arange(sq, device=dev).view(1, 1, sq, 1)
    j = torch.arange(skv, device=dev).view(1, 1, 1, skv)
    if attrs.get("use_alibi_mask"):
        s = s + (j - i).float() * _alibi_slopes(hq, dev)
    mask = torch.zeros(1, 1, sq, skv, dtype=torch.bool, device=dev)
    if len_kv is not None:
        mask = mask | (j >= len_kv.view(b, 1, 1, 1))
    left, right = attrs.get("diagonal_band_left_bound"), attrs.get("diagonal_band_right_bound")
    if left is not None or right is not None:
        if attrs.get("diagonal_alignment") is align.BOTTOM_RIGHT:
            offset = (len_kv - len_q).view(b, 1, 1, 1) if len_q is not None else (skv - sq)
        else:
            offset = 0
        diag = i + offset
        if right is not None:
            mask = mask | (j > diag + int(right))
        if left is not None:
            mask = mask | (j <= diag - int(left))
    s = s.masked_fill(mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    if sink is not None:
        m = torch.maximum(m, sink)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m_safe)
    total = e.sum(dim=-1, keepdim=True)
    if sink is not None:
        total = total + torch.exp(sink - m_safe)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    o = torch.einsum("bhqk,bhkd->bhqd", p, v)
    stats = torch.log(total) + m_safe
    if len_q is not None:
        o = torch.where(i < len_q.view(b, 1, 1, 1), o, torch.zeros_like(o))
    return o, stats, m, total


def _lens(ctx: OpContext, port: str):
    import torch

    raw = ctx.raw(port)
    return None if raw is None else raw.reshape(-1).to(torch.int64)


def _scale(ctx: OpContext):
    if ctx.has("attn_scale"):
        return ctx.input("attn_scale")
    value = ctx.attrs.get("attn_scale")
    return 1.0 if value is None else float(value)


def _kv(ctx: OpContext, len_kv):
    node = ctx.node
    if node.inputs.get("paged_attention_k_table") is not None:
        s_kv = node.attrs["s_kv"]
        k = _gather_paged(ctx.raw("k"), ctx.raw("paged_attention_k_table"), s_kv)
        v = _gather_paged(ctx.raw("v"), ctx.raw("paged_attention_v_table"), s_kv)
        return k, v
    return _read(ctx, "k", len_kv), _read(ctx, "v", len_kv)


def _sdpa(ctx: OpContext) -> None:
    len_q, len_kv = _lens(ctx, "seq_len_q"), _lens(ctx, "seq_len_kv")
    q = _read(ctx, "q", len_q)
    k, v = _kv(ctx, len_kv)
    bias = ctx.input("bias") if ctx.has("bias") else None
    sink = ctx.input("sink_token") if ctx.has("sink_token") else None
    o, stats, m, total = attention_fp32(q, k, v, ctx.attrs, _scale(ctx), bias, sink, len_q, len_kv)
    _write(ctx, "o", o, len_q)
    if ctx.node.outputs.get("stats") is not None:
        _write(ctx, "stats", stats, len_q)
    if ctx.node.outputs.get("score_max") is not None:
        ctx.output("score_max", m)
    if ctx.node.outputs.get("score_sum_exp") is not None:
        ctx.output("score_sum_exp", total)


def _sdpa_backward(ctx: OpContext) -> None:
    import torch

    node = ctx.node
    len_q, len_kv = _lens(ctx, "seq_len_q"), _lens(ctx, "seq_len_kv")
    q = _read(ctx, "q", len_q).detach().requires_grad_(True)
    k = _read(ctx, "k", len_kv).detach().requires_grad_(True)
    v = _read(ctx, "v", len_kv).detach().requires_grad_(True)
    d_o = _read(ctx, "dO", len_q)
    leaves = [q, k, v]
    bias = sink = None
    if ctx.has("bias"):
        bias = ctx.input("bias").detach().requires_grad_(node.outputs.get("dBias") is not None)
        if bias.requires_grad:
            leaves.append(bias)
    if ctx.has("sink_token"):
        sink = ctx.input("sink_token").detach().requires_grad_(node.outputs.get("dSink_token") is not None)
        if sink.requires_grad:
            leaves.append(sink)
    with torch.enable_grad():
        o, *_ = attention_fp32(q, k, v, node.attrs, _scale(ctx), bias, sink, len_q, len_kv)
        grads = torch.autograd.grad(o, leaves, grad_outputs=d_o, allow_unused=True)
    grads = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves, strict=False)]
    _write(ctx, "dQ", grads[0], len_q)
    _write(ctx, "dK", grads[1], len_kv)
    _write(ctx, "dV", grads[2], len_kv)
    rest = grads[3:]
    if bias is not None and bias.requires_grad:
        ctx.output("dBias", rest.pop(0))
    if sink is not None and sink.requires_grad:
        ctx.output("dSink_token", rest.pop(0))


register_reference_op("sdpa", _sdpa, _check)
register_reference_op("sdpa_backward", _sdpa_backward, _check)
