"""Reference attention in plain torch: the fp32 ground truth and the same-dtype baseline of the FlashAttention
tolerance rule (``assert_close_fa(out, ref, lowp)``).

Mask convention (the one cudnn.sdpa documents): query row i attends key j iff j < S_kv and, with
``offset = S_kv - S_q`` (bottom-right) or 0 (top-left), ``j <= i + offset`` when causal,
``j <= i + offset + right`` when ``right >= 0`` and ``j >= i + offset - left`` when ``left >= 0``.
Sinks add one softmax column per head with logit ``sinks[h]`` (unscaled) and no value. Fully masked rows
give O = 0 and LSE = -inf (or the sink).
"""

from __future__ import annotations

import math


def attention_mask(s_q: int, s_kv: int, *, is_causal=False, bottom_right=False, window=(-1, -1), device=None):
    """Boolean (S_q, S_kv) tensor, True where attention is allowed."""
    import torch

    i = torch.arange(s_q, device=device)[:, None]
    j = torch.arange(s_kv, device=device)[None, :]
    off = (s_kv - s_q) if bottom_right else 0
    allowed = torch.ones(s_q, s_kv, dtype=torch.bool, device=device)
    left, right = window
    if is_causal:
        allowed &= j <= i + off
    if right >= 0:
        allowed &= j <= i + off + right
    if left >= 0:
        allowed &= j >= i + off - left
    return allowed


def attention_ref(q, k, v, *, is_causal=False, bottom_right=False, window=(-1, -1), scale=None, sinks=None, upcast=True):
    """Dense (B, H, S, D) attention. ``upcast``: compute in fp32 (ground truth); else in q's dtype (the baseline).
    GQA/MQA: K/V heads are repeated. Returns ``(o, lse)`` with o in q's dtype when not upcast, fp32 otherwise."""
    import torch

    dtype = torch.float32 if upcast else q.dtype
    qf, kf, vf = q.to(dtype), k.to(dtype), v.to(dtype)
    g = q.shape[1] // k.shape[1]
    if g > 1:
        kf = kf.repeat_interleave(g, dim=1)
        vf = vf.repeat_interleave(g, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = torch.matmul(qf, kf.transpose(-1, -2)).float() * scale
    allowed = attention_mask(q.shape[2], k.shape[2], is_causal=is_causal, bottom_right=bottom_right, window=window, device=q.device)
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        sink_col = sinks.float().view(1, -1, 1, 1).expand(s.shape[0], s.shape[1], s.shape[2], 1)
        s = torch.cat([s, sink_col], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    if sinks is not None:
        p = p[..., :-1]
    o = torch.matmul(p.to(dtype), vf)
    return (o.float() if upcast else o.to(q.dtype)), lse


def attention_ref_varlen(q, k, v, cu_q, cu_k, **kw):
    """THD varlen: q (T_q, H, D), k/v (T_kv, H_kv, D), cumulative lengths as python lists. Returns (o (T_q, H, D_v), lse (H, T_q))."""
    import torch

    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qb = q[qs].permute(1, 0, 2)[None]
        kb = k[ks].permute(1, 0, 2)[None]
        vb = v[ks].permute(1, 0, 2)[None]
        o, lse = attention_ref(qb, kb, vb, **kw)
        outs.append(o[0].permute(1, 0, 2))
        lses.append(lse[0])
    return torch.cat(outs, 0), torch.cat(lses, 1)
