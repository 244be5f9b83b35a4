"""Reference ``gdn`` / ``kda`` (pure PyTorch, fp32): the gated delta rule token by token.

Per sequence and v head, with the state ``S`` [V, K] (fp32), log decays ``g`` and ``q`` pre-scaled::

    S <- S Diag(exp(g_t));  S <- S + beta_t (v_t - S k_t) k_t^T;  O_t = S q_t

(``gdn``: the scalar ``g_t`` broadcast over K). q / k are L2-normalised first when ``use_qk_l2norm``
(``x * rsqrt(sum x^2 + 1e-6)``), GVA heads are repeated (v head ``h`` reads q/k head ``h // (H // Hk)``).

Packed sequences (``cu_seqlens``) are walked token by token over the whole packed extent with every
sequence's state kept in one ``[N, H, V, K]`` tensor: the token's sequence id comes from a device-side
``searchsorted`` and selects its state by ``index_select`` / ``index_copy_``, so nothing is read back to the host
(the reference also runs under CUDA-graph capture) and an empty sequence keeps its initial state. The
``cu_seqlens`` contract is the kernels': starts at 0, ends at T, non-decreasing. Dense batches ``[B, L, ...]``
step all B sequences at once. Slow by design (one step per token): an oracle for tests.
"""

from __future__ import annotations

from .reference import OpContext, register_reference_op


def _step(s, q_t, k_t, v_t, g_t, b_t):
    """One token for a batch of states ``s`` [n, H, V, K]: returns (new state, output [n, H, V])."""
    import torch

    s = s * torch.exp(g_t)[:, :, None, :]
    sk = torch.einsum("nhvk,nhk->nhv", s, k_t)
    s = s + torch.einsum("nhv,nhk->nhvk", b_t[..., None] * (v_t - sk), k_t)
    return s, torch.einsum("nhvk,nhk->nhv", s, q_t)


def delta_rule_fp32(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None, use_qk_l2norm=False):
    """``(o [.., H, V] fp32, final_state [N, H, V, K] fp32)`` for fp32 ``q, k [.., Hk, K]``, ``v [.., H, V]``,
    ``g [.., H]`` (gdn) or ``[.., H, K]`` (kda), ``beta [.., H]``; ``[T, ...]`` or ``[B, L, ...]`` token dims."""
    import torch

    thd = q.dim() == 3
    if thd:
        q, k, v, g, beta = (t.unsqueeze(0) for t in (q, k, v, g, beta))
    kdim, hk = q.shape[-1], q.shape[-2]
    h, vdim = v.shape[-2], v.shape[-1]
    if use_qk_l2norm:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    rep = h // hk
    q = q.repeat_interleave(rep, dim=2) * scale
    k = k.repeat_interleave(rep, dim=2)
    if g.dim() == 3:  # gdn: one decay per token and head, broadcast over K
        g = g[..., None].expand(*g.shape, kdim)
    batch, length = q.shape[0], q.shape[1]
    n = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
    if initial_state is None:
        states = torch.zeros(n, h, vdim, kdim, dtype=torch.float32, device=q.device)
    else:
        states = initial_state.float().clone()
    o = torch.empty(batch, length, h, vdim, dtype=torch.float32, device=q.device)
    if cu_seqlens is None:
        for t in range(length):
            states, o[:, t] = _step(states, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
    else:
        ends = cu_seqlens.reshape(-1)[1:].to(torch.int64)
        tokens = torch.arange(length, device=q.device, dtype=torch.int64)
        seq = torch.searchsorted(ends, tokens, right=True).clamp_(max=n - 1)  # on device: no host read
        for t in range(length):
            idx = seq[t : t + 1]
            s, o[:, t] = _step(states.index_select(0, idx), q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
            states.index_copy_(0, idx, s)
    return (o[0] if thd else o), states


def _delta_rule(ctx: OpContext) -> None:
    cu = ctx.raw("cu_seqlens")
    o, final = delta_rule_fp32(
        ctx.input("q"),
        ctx.input("k"),
        ctx.input("v"),
        ctx.input("g"),
        ctx.input("beta"),
        float(ctx.attrs["scale_value"]),
        ctx.input("initial_state") if ctx.has("initial_state") else None,
        cu,
        bool(ctx.attrs.get("use_qk_l2norm")),
    )
    ctx.output("O", o)
    if ctx.node.outputs.get("final_state") is not None:
        ctx.output("final_state", final)


def _check(node) -> None:
    for port in ("q", "k", "v", "g", "beta", "initial_state"):
        t = node.inputs.get(port)
        if t is not None and t.ragged_offset is not None:
            raise NotImplementedError(f"reference: {node.describe()}: {port} {t.describe()} has a ragged offset; packed sequences are declared with cu_seqlens")


register_reference_op("gdn", _delta_rule, _check)
register_reference_op("kda", _delta_rule, _check)
