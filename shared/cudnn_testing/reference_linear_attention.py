"""fp32 references for cudnn.linear_attention: causal conv1d (forward, decode update) and the gated delta
rule in its two flavours, Gated DeltaNet (scalar decay per head and token) and Kimi Delta Attention
(per-key-channel decay), both token by token and chunked (chunk 64).

State convention (the issue's): S is [V, K] per head and sequence, fp32, stored [N, H, V, K]::

    S_t = S_{t-1} Diag(exp(g_t)) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale * q_t)

GDN is the case ``g [.., H]`` (one decay per head and token, broadcast over K); KDA is ``g [.., H, K]``.
flash-linear-attention keeps the transpose, h [K, V] = S^T (``h0 = S0.transpose(-1, -2)``).

Layouts: q, k [B, T, Hk, K]; v [B, T, H, V]; g [B, T, H] or [B, T, H, K]; beta [B, T, H]; with
``cu_seqlens`` (int [N + 1]) B must be 1 and sequences are packed along T (THD). Hk divides H: value
head h reads q/k head ``h // (H // Hk)`` (fla's GVA sharing). Every function here reads its
``cu_seqlens`` to the host: these are test references, never an execute path.
"""

from __future__ import annotations

import math


def _torch():
    import torch

    return torch


def _bounds(cu_seqlens, batch: int, length: int):
    """[(b, bos, eos)] for a dense batch (cu_seqlens None) or a packed one (b = 0)."""
    if cu_seqlens is None:
        return [(b, 0, length) for b in range(batch)]
    cu = [int(c) for c in cu_seqlens.detach().cpu().tolist()]
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


# --------------------------------------------------------------------------------------------------
# causal conv1d
# --------------------------------------------------------------------------------------------------
def causal_conv1d_ref(x, weight, bias=None, activation=None, cu_seqlens=None, initial_states=None):
    """fp32 forward. ``x`` [T, D] (THD, with cu_seqlens) or [B, L, D]; ``weight`` [D, W]; ``initial_states``
    [N, D, W - 1] (oldest first). Returns ``(y, final_states)``, both fp32; y has x's shape."""
    torch = _torch()
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(0) if squeeze else x
    w = weight.float()
    d, width = w.shape
    y = torch.empty(x3.shape, dtype=torch.float32, device=x.device)
    bounds = _bounds(cu_seqlens, x3.shape[0], x3.shape[1])
    final = torch.empty((len(bounds), d, width - 1), dtype=torch.float32, device=x.device)
    for n, (b, bos, eos) in enumerate(bounds):
        seq = x3[b, bos:eos].float()  # [L, D]
        head = initial_states[n].float().transpose(0, 1) if initial_states is not None else torch.zeros(width - 1, d, device=x.device)
        xs = torch.cat([head, seq], 0)  # [W - 1 + L, D]
        length = eos - bos
        acc = torch.zeros(length, d, dtype=torch.float32, device=x.device)
        for k in range(width):
            acc += w[:, k] * xs[k : k + length]
        if bias is not None:
            acc += bias.float()
        if activation in ("silu", "swish"):
            acc = torch.nn.functional.silu(acc)
        y[b, bos:eos] = acc
        final[n] = xs[xs.shape[0] - (width - 1) :].transpose(0, 1)
    return (y[0] if squeeze else y), final


def causal_conv1d_update_ref(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None):
    """fp32 decode step. Returns ``(out, new_conv_state)``; rows with a negative index leave both untouched
    (their ``out`` rows are NaN here, so a test compares only live rows)."""
    torch = _torch()
    out = torch.full(x.shape, float("nan"), dtype=torch.float32, device=x.device)
    state = conv_state.float().clone()
    w = weight.float()
    for b in range(x.shape[0]):
        s = b if conv_state_indices is None else int(conv_state_indices[b])
        if s < 0:
            continue
        win = torch.cat([state[s], x[b].float()[:, None]], 1)  # [D, W]
        acc = (win * w).sum(1)
        if bias is not None:
            acc = acc + bias.float()
        if activation in ("silu", "swish"):
            acc = torch.nn.functional.silu(acc)
        out[b] = acc
        state[s] = win[:, 1:]
    return out, state


# --------------------------------------------------------------------------------------------------
# gated delta rule (GDN and KDA)
# --------------------------------------------------------------------------------------------------
def _prep(q, k, v, g, beta, scale, use_qk_l2norm, initial_state, cu_seqlens):
    torch = _torch()
    if cu_seqlens is not None and q.shape[0] != 1:
        raise ValueError(f"with cu_seqlens the batch must be 1 (packed THD), got q {tuple(q.shape)}")
    kdim, h, hk = q.shape[-1], v.shape[2], q.shape[2]
    if h % hk:
        raise ValueError(f"q/k heads {hk} must divide v heads {h}")
    scale = 1.0 / math.sqrt(kdim) if scale is None else scale
    q, k, v, beta = q.float(), k.float(), v.float(), beta.float()
    if use_qk_l2norm:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    rep = h // hk
    q = q.repeat_interleave(rep, dim=2) * scale
    k = k.repeat_interleave(rep, dim=2)
    g = g.float()
    if g.dim() == 3:  # GDN: one decay per head and token
        g = g[..., None].expand(*g.shape, kdim)
    bounds = _bounds(cu_seqlens, q.shape[0], q.shape[1])
    n = len(bounds)
    vdim = v.shape[-1]
    s0 = initial_state.float() if initial_state is not None else torch.zeros(n, h, vdim, kdim, device=q.device)
    return q, k, v, g, beta, bounds, s0


def gated_delta_rule_recurrent_ref(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, use_qk_l2norm=False, cu_seqlens=None):
    """Token-by-token fp32 recurrence. ``g`` [B, T, H] gives GDN, [B, T, H, K] gives KDA (log decays).
    Returns ``(o [B, T, H, V] fp32, final_state [N, H, V, K] fp32 or None)``."""
    torch = _torch()
    q, k, v, g, beta, bounds, s0 = _prep(q, k, v, g, beta, scale, use_qk_l2norm, initial_state, cu_seqlens)
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    finals = []
    for n, (b, bos, eos) in enumerate(bounds):
        s = s0[n].clone()  # [H, V, K]
        for t in range(bos, eos):
            s = s * torch.exp(g[b, t])[:, None, :]  # S Diag(exp(g_t))
            kt, bt = k[b, t], beta[b, t]  # [H, K], [H]
            sk = torch.einsum("hvk,hk->hv", s, kt)
            s = s + torch.einsum("hv,hk->hvk", bt[:, None] * (v[b, t] - sk), kt)  # S(I - b k k^T) + b v k^T
            o[b, t] = torch.einsum("hvk,hk->hv", s, q[b, t])
        finals.append(s)
    final = torch.stack(finals) if output_final_state else None
    return o, final


def gated_delta_rule_chunked_ref(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, use_qk_l2norm=False, cu_seqlens=None, chunk_size: int = 64
):
    """The chunked (WY) form, fp32, chunk 64 by default: the algorithm the kernels implement.

    Per chunk of C tokens with cumulative log decays G (per key channel) and state S0 [V, K]::

        A[i, j]  = beta_i * sum_c k_ic k_jc exp(G_ic - G_jc)              (i > j; strictly lower)
        Tm       = (I + A)^-1
        U        = Tm (beta V),  Wm = Tm (beta K exp(G))
        Vn       = U - Wm S0^T                                             (the "new values")
        O        = (Q exp(G)) S0^T + mask_{i >= j}(sum_c q_ic k_jc exp(G_ic - G_jc)) Vn
        S1       = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))
    """
    torch = _torch()
    q, k, v, g, beta, bounds, s0 = _prep(q, k, v, g, beta, scale, use_qk_l2norm, initial_state, cu_seqlens)
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    finals = []
    for n, (b, bos, eos) in enumerate(bounds):
        s = s0[n].clone()  # [H, V, K]
        for c0 in range(bos, eos, chunk_size):
            c1 = min(c0 + chunk_size, eos)
            cq, ck, cv = q[b, c0:c1].transpose(0, 1), k[b, c0:c1].transpose(0, 1), v[b, c0:c1].transpose(0, 1)  # [H, C, *]
            cb = beta[b, c0:c1].transpose(0, 1)  # [H, C]
            G = torch.cumsum(g[b, c0:c1].transpose(0, 1), dim=1)  # [H, C, K]
            C = c1 - c0
            diff = G[:, :, None, :] - G[:, None, :, :]  # [H, i, j, K]
            lower_eq = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
            decay = torch.where(lower_eq[None, :, :, None], diff, torch.full_like(diff, -float("inf"))).exp()
            kk = torch.einsum("hic,hjc,hijc->hij", ck, ck, decay)
            A = torch.tril(cb[:, :, None] * kk, diagonal=-1)
            eye = torch.eye(C, device=q.device).expand_as(A)
            Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)
            U = Tm @ (cb[:, :, None] * cv)
            Wm = Tm @ (cb[:, :, None] * ck * G.exp())
            Vn = U - Wm @ s.transpose(-1, -2)  # [H, C, V]
            qk = torch.einsum("hic,hjc,hijc->hij", cq, ck, decay)  # masked (upper entries are exp(-inf) = 0)
            o[b, c0:c1] = ((cq * G.exp()) @ s.transpose(-1, -2) + qk @ Vn).transpose(0, 1)
            g_last = G[:, -1:, :]  # [H, 1, K]
            s = s * g_last.exp() + Vn.transpose(-1, -2) @ (ck * (g_last - G).exp())
        finals.append(s)
    final = torch.stack(finals) if output_final_state else None
    return o, final


def gated_delta_net_ref(q, k, v, g, beta, **kwargs):
    """Gated DeltaNet (``g`` [B, T, H]); ``chunked=True`` picks the chunked form."""
    chunked = kwargs.pop("chunked", False)
    if g.dim() != 3:
        raise ValueError(f"GDN takes one log decay per head and token, g [B, T, H]; got {tuple(g.shape)}")
    fn = gated_delta_rule_chunked_ref if chunked else gated_delta_rule_recurrent_ref
    return fn(q, k, v, g, beta, **kwargs)


def kimi_delta_attention_ref(q, k, v, g, beta, **kwargs):
    """Kimi Delta Attention (``g`` [B, T, H, K]); ``chunked=True`` picks the chunked form."""
    chunked = kwargs.pop("chunked", False)
    if g.dim() != 4:
        raise ValueError(f"KDA takes per-key-channel log decays, g [B, T, H, K]; got {tuple(g.shape)}")
    fn = gated_delta_rule_chunked_ref if chunked else gated_delta_rule_recurrent_ref
    return fn(q, k, v, g, beta, **kwargs)


def gated_delta_net_chunked_lowp_ref(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, use_qk_l2norm=False, cu_seqlens=None, chunk_size: int = 64, dtype=None
):
    """Gated DeltaNet (``g`` [B, T, H]) in the chunked form, rounding to ``dtype`` (default bf16) exactly where
    the sm_90a kernel (cudnn.linear_attention.gdn) and fla's chunk kernels do: the FlashAttention-rule
    low-precision baseline of the GDN tests. ``dtype=torch.float32`` rounds nowhere and then equals
    :func:`gated_delta_rule_chunked_ref`.

    Rounded to ``dtype``: the (L2-normalised) q and k, ``Tm``, ``beta K exp(G)``, ``beta V``, ``-Wm``, the state as
    an operand, ``Vn``, the masked decayed scaled ``Q K^T``, ``K exp(G_C - G)`` and the output. Products
    accumulate in fp32 (as WGMMA does); G, A, the triangular solve and the carried state stay fp32.
    Returns ``(o [B, T, H, V] in dtype, final_state [N, H, V, K] fp32 or None)``.
    """
    torch = _torch()
    dtype = torch.bfloat16 if dtype is None else dtype
    if g.dim() != 3:
        raise ValueError(f"GDN takes g [B, T, H]; got {tuple(g.shape)}")

    def rnd(x):
        return x.to(dtype).float()

    kdim, h, hk = q.shape[-1], v.shape[2], q.shape[2]
    scale = 1.0 / math.sqrt(kdim) if scale is None else scale
    qf, kf = q.float(), k.float()
    if use_qk_l2norm:
        qf = qf * torch.rsqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
        kf = kf * torch.rsqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
    rep = h // hk
    qf = rnd(qf).repeat_interleave(rep, dim=2)
    kf = rnd(kf).repeat_interleave(rep, dim=2)
    vf, gf, bf = v.float(), g.float(), beta.float()
    bounds = _bounds(cu_seqlens, q.shape[0], q.shape[1])
    vdim = v.shape[-1]
    s0 = initial_state.float() if initial_state is not None else torch.zeros(len(bounds), h, vdim, kdim, device=q.device)
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    finals = []
    for n, (b, bos, eos) in enumerate(bounds):
        s = s0[n].clone()  # [H, V, K] fp32
        for c0 in range(bos, eos, chunk_size):
            c1 = min(c0 + chunk_size, eos)
            C = c1 - c0
            cq, ck, cv = qf[b, c0:c1].transpose(0, 1), kf[b, c0:c1].transpose(0, 1), vf[b, c0:c1].transpose(0, 1)  # [H, C, *]
            cb = bf[b, c0:c1].transpose(0, 1)[:, :, None]  # [H, C, 1]
            G = torch.cumsum(gf[b, c0:c1].transpose(0, 1), dim=1)  # [H, C]
            diff = G[:, :, None] - G[:, None, :]
            lower_eq = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
            decay = torch.where(lower_eq, diff, torch.full_like(diff, -float("inf"))).exp()
            A = torch.tril(cb * (ck @ ck.transpose(-1, -2)) * decay, diagonal=-1)
            eye = torch.eye(C, device=q.device).expand_as(A)
            Tm = rnd(torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True))
            neg_w = rnd(-(Tm @ rnd(cb * ck * G.exp()[..., None])))
            s_op = rnd(s)
            vn = rnd(Tm @ rnd(cb * cv) + neg_w @ s_op.transpose(-1, -2))  # [H, C, V]
            p = rnd((cq @ ck.transpose(-1, -2)) * decay * scale)
            o[b, c0:c1] = ((cq @ s_op.transpose(-1, -2)) * (G.exp()[..., None] * scale) + p @ vn).transpose(0, 1)
            g_last = G[:, -1:]  # [H, 1]
            s = s * g_last.exp()[..., None] + vn.transpose(-1, -2) @ rnd(ck * (g_last - G).exp()[..., None])
        finals.append(s)
    final = torch.stack(finals) if output_final_state else None
    return o.to(dtype), final


def kimi_delta_attention_chunked_lowp_ref(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, use_qk_l2norm=False, cu_seqlens=None, dtype=None
):
    """Kimi Delta Attention (``g`` [B, T, H, K]) in the chunked form (chunk 64), rounding to ``dtype`` (default bf16)
    exactly where the sm_90a kernel (cudnn.linear_attention.kda) does: the FlashAttention-rule low-precision
    baseline of the KDA tests. ``dtype=torch.float32`` rounds nowhere and then equals
    :func:`gated_delta_rule_chunked_ref` (up to fp32 reassociation).

    The per-channel decay inside ``A`` and ``Q K^T`` is split over the two operands around a reference token
    per 16-row block (row ``16 I + 8``; a partial chunk's rows past its end repeat its last cumulative decay, as
    the kernel's zero-g padding does): ``K exp(G - G_r)``, ``Q exp(G - G_r)`` and ``K exp(G_r - G)`` are rounded.
    Also rounded: the (L2-normalised) q and k, ``Tm``, ``beta K exp(G)``, ``beta V``, ``-Wm``, the state as an
    operand, ``Vn``, ``P``, ``scale Q exp(G)``, ``K exp(G_C - G)`` and the output. G, A, the solve and the
    carried state stay fp32. Returns ``(o [B, T, H, V] in dtype, final_state [N, H, V, K] fp32 or None)``.
    """
    torch = _torch()
    dtype = torch.bfloat16 if dtype is None else dtype
    if g.dim() != 4:
        raise ValueError(f"KDA takes g [B, T, H, K]; got {tuple(g.shape)}")

    def rnd(x):
        return x.to(dtype).float()

    chunk, block, ref_off = 64, 16, 8
    kdim, h, hk = q.shape[-1], v.shape[2], q.shape[2]
    scale = 1.0 / math.sqrt(kdim) if scale is None else scale
    qf, kf = q.float(), k.float()
    if use_qk_l2norm:
        qf = qf * torch.rsqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
        kf = kf * torch.rsqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
    rep = h // hk
    qf = rnd(qf).repeat_interleave(rep, dim=2)
    kf = rnd(kf).repeat_interleave(rep, dim=2)
    vf, gf, bf = v.float(), g.float(), beta.float()
    bounds = _bounds(cu_seqlens, q.shape[0], q.shape[1])
    vdim = v.shape[-1]
    s0 = initial_state.float() if initial_state is not None else torch.zeros(len(bounds), h, vdim, kdim, device=q.device)
    o = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    finals = []
    for n, (b, bos, eos) in enumerate(bounds):
        s = s0[n].clone()  # [H, V, K] fp32
        for c0 in range(bos, eos, chunk):
            c1 = min(c0 + chunk, eos)
            C = c1 - c0
            cq, ck, cv = qf[b, c0:c1].transpose(0, 1), kf[b, c0:c1].transpose(0, 1), vf[b, c0:c1].transpose(0, 1)  # [H, C, *]
            cb = bf[b, c0:c1].transpose(0, 1)[:, :, None]  # [H, C, 1]
            G = torch.cumsum(gf[b, c0:c1].transpose(0, 1), dim=1)  # [H, C, K]
            rows = torch.arange(C, device=q.device)
            ref = ((rows // block) * block + ref_off).clamp(max=C - 1)
            kl = rnd(ck * (G - G[:, ref]).exp())
            qr = rnd(cq * (G - G[:, ref]).exp())
            A = torch.zeros(h, C, C, device=q.device)
            P = torch.zeros(h, C, C, device=q.device)
            for i0 in range(0, C, block):
                i1 = min(i0 + block, C)
                r = min(i0 + ref_off, C - 1)
                kr = torch.zeros_like(ck)
                kr[:, :i1] = rnd(ck[:, :i1] * (G[:, r : r + 1] - G[:, :i1]).exp())
                A[:, i0:i1] = kl[:, i0:i1] @ kr.transpose(-1, -2)
                P[:, i0:i1] = qr[:, i0:i1] @ kr.transpose(-1, -2)
            A = torch.tril(cb * A, diagonal=-1)
            p = rnd(torch.tril(P) * scale)
            eye = torch.eye(C, device=q.device).expand_as(A)
            Tm = rnd(torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True))
            neg_w = rnd(-(Tm @ rnd(cb * ck * G.exp())))
            s_op = rnd(s)
            vn = rnd(Tm @ rnd(cb * cv) + neg_w @ s_op.transpose(-1, -2))  # [H, C, V]
            o[b, c0:c1] = (rnd(cq * G.exp() * scale) @ s_op.transpose(-1, -2) + p @ vn).transpose(0, 1)
            g_last = G[:, -1:, :]  # [H, 1, K]
            s = s * g_last.exp() + vn.transpose(-1, -2) @ rnd(ck * (g_last - G).exp())
        finals.append(s)
    final = torch.stack(finals) if output_final_state else None
    return o.to(dtype), final


# --------------------------------------------------------------------------------------------------
# Gated DeltaNet backward
# --------------------------------------------------------------------------------------------------
def gated_delta_net_recurrent_bwd_ref(q, k, v, g, beta, do, scale=None, initial_state=None, dfinal_state=None, use_qk_l2norm=False, cu_seqlens=None):
    """Gradients of the fp32 token-by-token recurrence (:func:`gated_delta_rule_recurrent_ref`, GDN ``g`` [B, T, H])
    by torch.autograd, for the loss ``sum(o * do) + sum(final_state * dfinal_state)``: the ground truth of the
    backward tests. Returns a dict of fp32 tensors ``dq, dk, dv, dg, dbeta`` (the inputs' shapes) and ``dh0``
    ([N, H, V, K], None without ``initial_state``)."""
    torch = _torch()
    leaves = {name: t.detach().float().clone().requires_grad_(True) for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta))}
    h0 = initial_state.detach().float().clone().requires_grad_(True) if initial_state is not None else None
    with torch.enable_grad():
        o, final = gated_delta_rule_recurrent_ref(
            leaves["q"],
            leaves["k"],
            leaves["v"],
            leaves["g"],
            leaves["beta"],
            scale=scale,
            initial_state=h0,
            output_final_state=dfinal_state is not None,
            use_qk_l2norm=use_qk_l2norm,
            cu_seqlens=cu_seqlens,
        )
        loss = (o * do.float()).sum()
        if dfinal_state is not None:
            loss = loss + (final * dfinal_state.float()).sum()
        inputs = list(leaves.values()) + ([h0] if h0 is not None else [])
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    out = {f"d{name}": (gr if gr is not None else torch.zeros_like(t)) for (name, t), gr in zip(leaves.items(), grads[:5], strict=True)}
    out["dh0"] = grads[5] if h0 is not None else None
    return out


def gated_delta_net_chunked_bwd_ref(
    q, k, v, g, beta, do, scale=None, initial_state=None, dfinal_state=None, use_qk_l2norm=False, cu_seqlens=None, chunk_size: int = 64, dtype=None
):
    """The chunked backward of Gated DeltaNet (``g`` [B, T, H]), written out by hand: the algorithm of
    cudnn.linear_attention.gdn's backward kernels (three passes), optionally rounding to ``dtype`` where they do.
    ``dtype=None`` or ``torch.float32`` rounds nowhere and equals :func:`gated_delta_net_recurrent_bwd_ref` up to
    fp32 reassociation (tests/test_gdn_bwd_reference.py checks it on CPU); ``torch.bfloat16`` is the
    FlashAttention-rule low-precision baseline of the GPU tests.

    Per chunk (C tokens, cumulative log decay G, Gamma_ij = exp(G_i - G_j) for i >= j, unscaled normalised Q, K;
    A, Tm, Wm = Tm (beta exp(G) K), U = Tm (beta V), Vn = U - Wm S0^T and P = scale lower_eq(Q K^T Gamma) as in the
    forward):

    1. states (forward over chunks): S0 of every chunk and Vn (rounded: the stored S0 and Vn).
    2. state gradients (reverse over chunks; dS1 = the gradient of the chunk's outgoing state, dS1 of the last
       chunk = ``dfinal_state``)::

           dVn = P^T dO + (K exp(G_C - G)) dS1^T
           dS0 = exp(G_C) dS1 + dO^T (scale exp(G) Q) - dVn^T Wm           (dS0 of the first chunk = dh0)

    3. intra-chunk gradients (each chunk alone, from S0, dS1, Vn, dVn)::

           dQ   = scale exp(G) (dO S0) + dP~ K          dP~ = scale lower_eq(Gamma * (dO Vn^T))
           dWm  = -dVn S0        dKb = Tm^T dWm        dUb = Tm^T dVn        dV = beta dUb
           dTm  = dVn (beta V)^T + dWm (beta exp(G) K)^T                     dA = -strictly_lower(Tm^T dTm Tm^T)
           B    = dA * beta_i * Gamma
           dK   = dP~^T Q + exp(G_C - G) (Vn dS1) + beta exp(G) dKb + (B + B^T) K
           dbeta = rowsum(dUb * V) + rowsum(dKb * exp(G) K) + rowsum(dA * K K^T * Gamma)
           dG   = rowsum(Q * scale exp(G) (dO S0)) + rowsum(Z) - colsum(Z) + rowsum(dKb * beta exp(G) K)
                  - rowsum((Vn dS1) * exp(G_C - G) K),   Z = dP~ * Q K^T + dA * A
           dG_C += exp(G_C) <dS1, S0> + sum((Vn dS1) * exp(G_C - G) K);   dg = reverse cumsum of dG in the chunk

    then the L2-norm chain rule (``dx = r (dxn - xn (xn . dxn))``, r = rsqrt(|x|^2 + 1e-6)) and the sum over the
    value heads sharing a q/k head (GVA). Returns the dict of :func:`gated_delta_net_recurrent_bwd_ref` (fp32).
    """
    torch = _torch()
    if g.dim() != 3:
        raise ValueError(f"GDN takes g [B, T, H]; got {tuple(g.shape)}")
    rounding = dtype is not None and dtype != torch.float32

    def rnd(x):
        return x.to(dtype).float() if rounding else x

    kdim, h, hk = q.shape[-1], v.shape[2], q.shape[2]
    vdim = v.shape[-1]
    sc = 1.0 / math.sqrt(kdim) if scale is None else scale
    qf, kf = q.float(), k.float()
    rq = rk = None
    if use_qk_l2norm:
        rq = torch.rsqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
        rk = torch.rsqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
        qf, kf = qf * rq, kf * rk
    rep = h // hk
    qn, kn = rnd(qf).repeat_interleave(rep, dim=2), rnd(kf).repeat_interleave(rep, dim=2)
    vf, gf, bf, dof = v.float(), g.float(), beta.float(), rnd(do.float())
    bounds = _bounds(cu_seqlens, q.shape[0], q.shape[1])
    s0_all = initial_state.float() if initial_state is not None else torch.zeros(len(bounds), h, vdim, kdim, device=q.device)
    dq, dk = torch.zeros_like(qn), torch.zeros_like(kn)
    dv, dg, dbeta = torch.zeros_like(vf), torch.zeros_like(gf), torch.zeros_like(bf)
    dh0 = torch.zeros_like(s0_all)

    def chunk_terms(b, c0, c1):
        C = c1 - c0
        cq, ck, cv = qn[b, c0:c1].transpose(0, 1), kn[b, c0:c1].transpose(0, 1), vf[b, c0:c1].transpose(0, 1)  # [H, C, *]
        cb = bf[b, c0:c1].transpose(0, 1)[:, :, None]  # [H, C, 1]
        G = torch.cumsum(gf[b, c0:c1].transpose(0, 1), dim=1)  # [H, C]
        diff = G[:, :, None] - G[:, None, :]
        lower_eq = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
        gamma = torch.where(lower_eq, diff, torch.full_like(diff, -float("inf"))).exp()
        kk = ck @ ck.transpose(-1, -2)
        qk = cq @ ck.transpose(-1, -2)
        A = torch.tril(cb * kk * gamma, diagonal=-1)
        eye = torch.eye(C, device=q.device).expand_as(A)
        Tm = rnd(torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True))
        eg = G.exp()[..., None]  # [H, C, 1]
        kbg = rnd(cb * ck * eg)
        vb = rnd(cb * cv)
        wm = rnd(Tm @ kbg)
        p = rnd(qk * gamma * sc)
        gl = G[:, -1:]  # [H, 1]
        kdec = (gl - G).exp()[..., None]  # [H, C, 1]
        return dict(q=cq, k=ck, v=cv, b=cb, G=G, gamma=gamma, kk=kk, qk=qk, A=A, Tm=Tm, eg=eg, kbg=kbg, vb=vb, wm=wm, p=p, gl=gl, kdec=kdec)

    for n, (b, bos, eos) in enumerate(bounds):
        starts = list(range(bos, eos, chunk_size))
        # 1. states
        s = s0_all[n].clone()  # [H, V, K] fp32
        s_ops, vns = [], []
        for c0 in starts:
            c = chunk_terms(b, c0, min(c0 + chunk_size, eos))
            s_op = rnd(s)
            vn = rnd(c["Tm"] @ c["vb"] - c["wm"] @ s_op.transpose(-1, -2))
            s_ops.append(s_op)
            vns.append(vn)
            s = s * c["gl"].exp()[..., None] + vn.transpose(-1, -2) @ rnd(c["k"] * c["kdec"])
        # 2. state gradients
        ds = dfinal_state[n].float().clone() if dfinal_state is not None else torch.zeros_like(s)
        ds1s, dvns = [None] * len(starts), [None] * len(starts)
        for idx in reversed(range(len(starts))):
            c0 = starts[idx]
            c1 = min(c0 + chunk_size, eos)
            c = chunk_terms(b, c0, c1)
            cdo = dof[b, c0:c1].transpose(0, 1)  # [H, C, V]
            ds_op = rnd(ds)
            ds1s[idx] = ds_op
            dvn = rnd(c["p"].transpose(-1, -2) @ cdo + rnd(c["k"] * c["kdec"]) @ ds_op.transpose(-1, -2))
            dvns[idx] = dvn
            ds = ds * c["gl"].exp()[..., None] + cdo.transpose(-1, -2) @ rnd(c["q"] * c["eg"] * sc) - dvn.transpose(-1, -2) @ c["wm"]
        dh0[n] = ds
        # 3. intra-chunk gradients
        for idx, c0 in enumerate(starts):
            c1 = min(c0 + chunk_size, eos)
            c = chunk_terms(b, c0, c1)
            cdo = dof[b, c0:c1].transpose(0, 1)
            S0, dS1, Vn, dVn = s_ops[idx], ds1s[idx], vns[idx], dvns[idx]
            cq, ck, cv, cb, Tm, eg, kdec = c["q"], c["k"], c["v"], c["b"], c["Tm"], c["eg"], c["kdec"]
            dq_state = sc * eg * (cdo @ S0)  # [H, C, K]
            dpt = c["gamma"] * (cdo @ Vn.transpose(-1, -2)) * sc  # lower_eq (gamma is 0 above the diagonal)
            dpt_op = rnd(dpt)
            cdq = dq_state + dpt_op @ ck
            dkd = Vn @ dS1  # [H, C, K]
            dwm = -(dVn @ S0)
            dkb = Tm.transpose(-1, -2) @ rnd(dwm)
            dub = Tm.transpose(-1, -2) @ dVn
            dTm = dVn @ c["vb"].transpose(-1, -2) + rnd(dwm) @ c["kbg"].transpose(-1, -2)
            dA = -torch.tril(rnd(Tm.transpose(-1, -2) @ rnd(dTm)) @ Tm.transpose(-1, -2), diagonal=-1)
            bm = dA * cb * c["gamma"]
            cdk = dpt_op.transpose(-1, -2) @ cq + kdec * dkd + cb * eg * dkb + rnd(bm + bm.transpose(-1, -2)) @ ck
            cdv = cb * dub
            cdbeta = (dub * cv).sum(-1) + (dkb * eg * ck).sum(-1) + (dA * c["kk"] * c["gamma"]).sum(-1)
            Z = dpt * c["qk"] + dA * c["A"]
            dG = (cq * dq_state).sum(-1) + Z.sum(-1) - Z.sum(-2) + (dkb * c["kbg"]).sum(-1) - (dkd * kdec * ck).sum(-1)
            dG[:, -1] += c["gl"][:, 0].exp() * (dS1 * S0).sum((-1, -2)) + (dkd * kdec * ck).sum((-1, -2))
            cdg = dG.flip(-1).cumsum(-1).flip(-1)
            dq[b, c0:c1] = cdq.transpose(0, 1)
            dk[b, c0:c1] = cdk.transpose(0, 1)
            dv[b, c0:c1] = cdv.transpose(0, 1)
            dg[b, c0:c1] = cdg.transpose(0, 1)
            dbeta[b, c0:c1] = cdbeta.squeeze(-1).transpose(0, 1) if cdbeta.dim() == 3 else cdbeta.transpose(0, 1)
    if rep > 1:
        dq = dq.unflatten(2, (hk, rep)).sum(3)
        dk = dk.unflatten(2, (hk, rep)).sum(3)
    if use_qk_l2norm:
        qn1, kn1 = q.float() * rq, k.float() * rk
        dq = rq * (dq - qn1 * (qn1 * dq).sum(-1, keepdim=True))
        dk = rk * (dk - kn1 * (kn1 * dk).sum(-1, keepdim=True))
    return {"dq": dq, "dk": dk, "dv": dv, "dg": dg, "dbeta": dbeta, "dh0": dh0 if initial_state is not None else None}


# --------------------------------------------------------------------------------------------------
# Kimi Delta Attention backward
# --------------------------------------------------------------------------------------------------
def kimi_delta_attention_recurrent_bwd_ref(q, k, v, g, beta, do, scale=None, initial_state=None, dfinal_state=None, use_qk_l2norm=False, cu_seqlens=None):
    """Gradients of the fp32 token-by-token KDA recurrence (:func:`gated_delta_rule_recurrent_ref` with ``g`` [B, T, H, K])
    by torch.autograd, for the loss ``sum(o * do) + sum(final_state * dfinal_state)``: the ground truth of the KDA
    backward tests. Returns a dict of fp32 tensors ``dq, dk, dv, dg`` ([B, T, H, K] for dg: per key channel), ``dbeta``
    and ``dh0`` ([N, H, V, K], None without ``initial_state``)."""
    if g.dim() != 4:
        raise ValueError(f"KDA takes per-key-channel log decays, g [B, T, H, K]; got {tuple(g.shape)}")
    return gated_delta_net_recurrent_bwd_ref(
        q, k, v, g, beta, do, scale=scale, initial_state=initial_state, dfinal_state=dfinal_state, use_qk_l2norm=use_qk_l2norm, cu_seqlens=cu_seqlens
    )


def kimi_delta_attention_chunked_bwd_ref(
    q, k, v, g, beta, do, scale=None, initial_state=None, dfinal_state=None, use_qk_l2norm=False, cu_seqlens=None, chunk_size: int = 64, dtype=None
):
    """The chunked backward of Kimi Delta Attention (``g`` [B, T, H, K], per-key-channel log decays), written out by
    hand: the algorithm of cudnn.linear_attention.kda's backward kernels (three passes, as Gated DeltaNet's), optionally
    rounding to ``dtype`` at the operand boundaries where the kernels do. ``dtype=None`` or ``torch.float32`` rounds
    nowhere and equals :func:`kimi_delta_attention_recurrent_bwd_ref` up to fp32 reassociation
    (tests/test_kda_bwd_reference.py checks it on CPU); ``torch.bfloat16`` is the FlashAttention-rule baseline.

    Per chunk (C tokens, per-channel cumulative log decay G [C, K], D_ijc = exp(G_ic - G_jc) for i >= j else 0,
    unscaled normalised Q, K; the forward's A_ij = beta_i sum_c k_ic k_jc D_ijc (i > j), Tm = (I + A)^-1,
    Wm = Tm (beta exp(G) K), U = Tm (beta V), Vn = U - Wm S0^T, P_ij = scale sum_c q_ic k_jc D_ijc, Kd = K exp(G_C - G)):

    1. states (forward over chunks): S0 of every chunk and Vn.
    2. state gradients (reverse over chunks; dS1 of the last chunk = ``dfinal_state``)::

           dVn = P^T dO + Kd dS1^T
           dS0 = dS1 Diag(exp(G_C)) + dO^T (scale exp(G) Q) - dVn^T Wm            (dS0 of the first chunk = dh0)

    3. intra-chunk gradients (each chunk alone, from S0, dS1, Vn, dVn); every "decayed product" X . Y is the
       per-channel sum_j X_ij Y_jc D_ijc (rows) or sum_i X_ij Y_ic D_ijc (columns)::

           dQs  = scale exp(G) (dO S0)      dP~ = scale lower_eq(dO Vn^T)      dQ = dQs + rows(dP~, K)
           dWm  = -dVn S0      dKb = Tm^T dWm      dUb = Tm^T dVn      dV = beta dUb
           dTm  = dVn (beta V)^T + dWm (beta exp(G) K)^T      dA = -strictly_lower(Tm^T dTm Tm^T)      B = beta_i dA
           dkd  = Vn dS1
           dK   = cols(dP~, Q) + rows(B, K) + cols(B, K) + Kd/K * dkd + beta exp(G) dKb
           dbeta = rowsum(dUb V) + rowsum(dKb exp(G) K) + rowsum(dA K.K^T)  (K.K^T_ij = sum_c k_ic k_jc D_ijc)
           dG   = Q dQs + Q rows(dP~, K) - K cols(dP~, Q) + K rows(B, K) - K cols(B, K) + dKb beta exp(G) K - dkd Kd
           dG_C += exp(G_C) colsum(dS1 * S0) + colsum(dkd Kd);    dg = reverse cumsum of dG in the chunk (per channel)

    then the L2-norm chain rule and the sum over the value heads sharing a q/k head (GVA), as
    :func:`gated_delta_net_chunked_bwd_ref`. Returns the dict of :func:`kimi_delta_attention_recurrent_bwd_ref` (fp32).
    """
    torch = _torch()
    if g.dim() != 4:
        raise ValueError(f"KDA takes g [B, T, H, K]; got {tuple(g.shape)}")
    rounding = dtype is not None and dtype != torch.float32

    def rnd(x):
        return x.to(dtype).float() if rounding else x

    kdim, h, hk = q.shape[-1], v.shape[2], q.shape[2]
    vdim = v.shape[-1]
    sc = 1.0 / math.sqrt(kdim) if scale is None else scale
    qf, kf = q.float(), k.float()
    rq = rk = None
    if use_qk_l2norm:
        rq = torch.rsqrt((qf * qf).sum(-1, keepdim=True) + 1e-6)
        rk = torch.rsqrt((kf * kf).sum(-1, keepdim=True) + 1e-6)
        qf, kf = qf * rq, kf * rk
    rep = h // hk
    qn, kn = rnd(qf).repeat_interleave(rep, dim=2), rnd(kf).repeat_interleave(rep, dim=2)
    vf, gf, bf, dof = v.float(), g.float(), beta.float(), rnd(do.float())
    bounds = _bounds(cu_seqlens, q.shape[0], q.shape[1])
    s0_all = initial_state.float() if initial_state is not None else torch.zeros(len(bounds), h, vdim, kdim, device=q.device)
    dq, dk = torch.zeros_like(qn), torch.zeros_like(kn)
    dv, dg, dbeta = torch.zeros_like(vf), torch.zeros_like(gf), torch.zeros_like(bf)
    dh0 = torch.zeros_like(s0_all)

    def chunk_terms(b, c0, c1):
        C = c1 - c0
        cq, ck, cv = qn[b, c0:c1].transpose(0, 1), kn[b, c0:c1].transpose(0, 1), vf[b, c0:c1].transpose(0, 1)  # [H, C, *]
        cb = bf[b, c0:c1].transpose(0, 1)[:, :, None]  # [H, C, 1]
        G = torch.cumsum(gf[b, c0:c1].transpose(0, 1), dim=1)  # [H, C, K]
        diff = G[:, :, None, :] - G[:, None, :, :]  # [H, i, j, K]
        lower_eq = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
        dec = torch.where(lower_eq[None, :, :, None], diff, torch.full_like(diff, -float("inf"))).exp()  # D_ijc
        kk = torch.einsum("hic,hjc,hijc->hij", ck, ck, dec)
        A = torch.tril(cb * kk, diagonal=-1)
        eye = torch.eye(C, device=q.device).expand_as(A)
        Tm = rnd(torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True))
        eg = G.exp()  # [H, C, K]
        kbg = rnd(cb * ck * eg)
        vb = rnd(cb * cv)
        wm = rnd(Tm @ kbg)
        p = rnd(torch.einsum("hic,hjc,hijc->hij", cq, ck, dec) * sc)
        gl = G[:, -1:, :]  # [H, 1, K]
        kd = ck * (gl - G).exp()  # [H, C, K]
        return dict(q=cq, k=ck, v=cv, b=cb, G=G, dec=dec, kk=kk, A=A, Tm=Tm, eg=eg, kbg=kbg, vb=vb, wm=wm, p=p, gl=gl, kd=kd)

    def rows(X, Y, dec):  # sum_j X_ij Y_jc D_ijc -> [H, C, K]
        return torch.einsum("hij,hjc,hijc->hic", X, Y, dec)

    def cols(X, Y, dec):  # sum_i X_ij Y_ic D_ijc -> [H, C(j), K]
        return torch.einsum("hij,hic,hijc->hjc", X, Y, dec)

    for n, (b, bos, eos) in enumerate(bounds):
        starts = list(range(bos, eos, chunk_size))
        # 1. states
        s = s0_all[n].clone()  # [H, V, K] fp32
        s_ops, vns = [], []
        for c0 in starts:
            c = chunk_terms(b, c0, min(c0 + chunk_size, eos))
            s_op = rnd(s)
            vn = rnd(c["Tm"] @ c["vb"] - c["wm"] @ s_op.transpose(-1, -2))
            s_ops.append(s_op)
            vns.append(vn)
            s = s * c["gl"].exp() + vn.transpose(-1, -2) @ rnd(c["kd"])
        # 2. state gradients
        ds = dfinal_state[n].float().clone() if dfinal_state is not None else torch.zeros_like(s)
        ds1s, dvns = [None] * len(starts), [None] * len(starts)
        for idx in reversed(range(len(starts))):
            c0 = starts[idx]
            c1 = min(c0 + chunk_size, eos)
            c = chunk_terms(b, c0, c1)
            cdo = dof[b, c0:c1].transpose(0, 1)  # [H, C, V]
            ds_op = rnd(ds)
            ds1s[idx] = ds_op
            dvn = rnd(c["p"].transpose(-1, -2) @ cdo + rnd(c["kd"]) @ ds_op.transpose(-1, -2))
            dvns[idx] = dvn
            ds = ds * c["gl"].exp() + cdo.transpose(-1, -2) @ rnd(c["q"] * c["eg"] * sc) - dvn.transpose(-1, -2) @ c["wm"]
        dh0[n] = ds
        # 3. intra-chunk gradients
        for idx, c0 in enumerate(starts):
            c1 = min(c0 + chunk_size, eos)
            c = chunk_terms(b, c0, c1)
            cdo = dof[b, c0:c1].transpose(0, 1)
            S0, dS1, Vn, dVn = s_ops[idx], ds1s[idx], vns[idx], dvns[idx]
            cq, ck, cv, cb, Tm, eg, kd, dec = c["q"], c["k"], c["v"], c["b"], c["Tm"], c["eg"], c["kd"], c["dec"]
            C = c1 - c0
            lower_eq = torch.tril(torch.ones(C, C, dtype=torch.bool, device=q.device))
            dq_state = sc * eg * (cdo @ S0)  # [H, C, K]
            dpt = rnd(torch.where(lower_eq, cdo @ Vn.transpose(-1, -2), torch.zeros((), device=q.device)) * sc)
            dq_p = rows(dpt, ck, dec)
            dk_p = cols(dpt, cq, dec)
            dkd = Vn @ dS1  # [H, C, K]
            dwm = rnd(-(dVn @ S0))
            dkb = Tm.transpose(-1, -2) @ dwm
            dub = Tm.transpose(-1, -2) @ dVn
            dTm = dVn @ c["vb"].transpose(-1, -2) + dwm @ c["kbg"].transpose(-1, -2)
            dA = -torch.tril(rnd(Tm.transpose(-1, -2) @ rnd(dTm)) @ Tm.transpose(-1, -2), diagonal=-1)
            bm = rnd(dA * cb)
            dk_ar, dk_ac = rows(bm, ck, dec), cols(bm, ck, dec)
            kdec = (c["gl"] - c["G"]).exp()
            cdk = dk_p + dk_ar + dk_ac + kdec * dkd + cb * eg * dkb
            cdq = dq_state + dq_p
            cdv = cb * dub
            cdbeta = (dub * cv).sum(-1) + (dkb * eg * ck).sum(-1) + (dA * c["kk"]).sum(-1)
            dG = cq * dq_state + cq * dq_p - ck * dk_p + ck * dk_ar - ck * dk_ac + dkb * c["kbg"] - dkd * kd
            dG[:, -1] += c["gl"][:, 0].exp() * (dS1 * S0).sum(-2) + (dkd * kd).sum(-2)
            cdg = dG.flip(1).cumsum(1).flip(1)
            dq[b, c0:c1] = cdq.transpose(0, 1)
            dk[b, c0:c1] = cdk.transpose(0, 1)
            dv[b, c0:c1] = cdv.transpose(0, 1)
            dg[b, c0:c1] = cdg.transpose(0, 1)
            dbeta[b, c0:c1] = cdbeta.transpose(0, 1)
    if rep > 1:
        dq = dq.unflatten(2, (hk, rep)).sum(3)
        dk = dk.unflatten(2, (hk, rep)).sum(3)
    if use_qk_l2norm:
        qn1, kn1 = q.float() * rq, k.float() * rk
        dq = rq * (dq - qn1 * (qn1 * dq).sum(-1, keepdim=True))
        dk = rk * (dk - kn1 * (kn1 * dk).sum(-1, keepdim=True))
    return {"dq": dq, "dk": dk, "dv": dv, "dg": dg, "dbeta": dbeta, "dh0": dh0 if initial_state is not None else None}
