"""CPU check of the Kimi Delta Attention backward reference: the hand-written chunked backward
(``kimi_delta_attention_chunked_bwd_ref``, the algorithm of the sm_90a KDA backward kernels) against torch.autograd
through the fp32 token-by-token recurrence (``kimi_delta_attention_recurrent_bwd_ref``), on varlen batches with
1-token, empty, exactly-one-chunk, one-past-a-chunk and multi-chunk sequences, initial states and final-state
gradients, L2 norm and GVA. g is per key channel, so dg is [B, T, H, K]. fp32 throughout: the two may differ only by
reassociation."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _case(lengths, H, Hk, D, l2norm, with_h0, with_dht, seed):
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    gen = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q = torch.randn(1, T, Hk, D, generator=gen)
    k = torch.randn(1, T, Hk, D, generator=gen)
    if not l2norm:
        k = F.normalize(k, dim=-1)
    v = torch.randn(1, T, H, D, generator=gen)
    g = F.logsigmoid(torch.randn(1, T, H, D, generator=gen)) / 8  # per key channel
    beta = torch.rand(1, T, H, generator=gen)
    do = torch.randn(1, T, H, D, generator=gen)
    h0 = torch.randn(len(lengths), H, D, D, generator=gen) * 0.5 if with_h0 else None
    dht = torch.randn(len(lengths), H, D, D, generator=gen) if with_dht else None
    return q, k, v, g, beta, do, h0, dht, cu_seqlens(lengths, "cpu")


@pytest.mark.parametrize(
    "lengths,H,Hk,D,l2norm,with_h0,with_dht",
    [
        ([1, 64, 65, 0, 150, 3], 2, 2, 16, False, True, True),
        ([130], 2, 1, 32, True, True, False),
        ([5, 70], 4, 2, 16, True, False, True),
        ([200, 1], 1, 1, 16, False, False, False),
    ],
)
def test_kda_chunked_backward_matches_autograd_of_recurrence(lengths, H, Hk, D, l2norm, with_h0, with_dht):
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case(lengths, H, Hk, D, l2norm, with_h0, with_dht, seed=sum(lengths) + D)
    kw = dict(initial_state=h0, dfinal_state=dht, use_qk_l2norm=l2norm, cu_seqlens=cu)
    ref = kimi_delta_attention_recurrent_bwd_ref(q, k, v, g, beta, do, **kw)
    got = kimi_delta_attention_chunked_bwd_ref(q, k, v, g, beta, do, **kw)
    assert ref["dg"].shape == g.shape and got["dg"].shape == g.shape
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if ref[name] is None:
            assert got[name] is None
            continue
        scale = ref[name].abs().max().item()
        err = (got[name] - ref[name]).abs().max().item()
        assert err <= 2e-5 * max(scale, 1.0), (name, err, scale)


def test_kda_dg_is_per_channel():
    """A per-channel dg that collapsed to one value per head (the GDN answer broadcast) must fail: the channels differ."""
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case([70, 3], 2, 2, 16, False, True, True, seed=3)
    dg = kimi_delta_attention_chunked_bwd_ref(q, k, v, g, beta, do, initial_state=h0, dfinal_state=dht, cu_seqlens=cu)["dg"]
    spread = (dg - dg.mean(-1, keepdim=True)).abs().max().item()
    assert spread > 1e-2 * dg.abs().max().item()


def test_kda_bf16_chunked_backward_is_a_meaningful_baseline():
    """The bf16-rounding run (the GPU tests' FlashAttention-rule baseline) is close to, but not equal to, the fp32 truth."""
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case([70, 3], 2, 2, 32, False, True, True, seed=7)
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    ref = kimi_delta_attention_recurrent_bwd_ref(q, k, v, g, beta, do, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(q, k, v, g, beta, do, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        err = (low[name] - ref[name]).abs().max().item()
        scale = ref[name].abs().max().item()
        assert 0 < err < 0.1 * scale, (name, err, scale)


def test_kda_recurrent_bwd_ref_rejects_scalar_gate():
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case([3], 1, 1, 16, False, False, False, seed=1)
    for fn in (kimi_delta_attention_recurrent_bwd_ref, kimi_delta_attention_chunked_bwd_ref):
        with pytest.raises(ValueError, match="g \\[B, T, H, K\\]"):
            fn(q, k, v, g[..., 0], beta, do, cu_seqlens=cu)


def _kernel_algorithm(q, k, v, g, beta, do, h0, dht, cu, scale):
    """The three KDA backward kernels' algorithm in fp32 torch, as written in kda/{bwd_states_kernel,chunk_bwd_kernel}.py:
    chunks padded to 64 rows (zero q / k / v / dO / beta and g = 0 past the end), the per-channel decay split around the
    reference token 16 I + 8 of every 16-row block (rows products keep block I's rows of X (Y exp(G_r - G))_{j < 16 (I+1)}
    times exp(G_i - G_r); cols products keep block J's rows of X^T (Y exp(G - G_r))_{i >= 16 J} times exp(G_r - G_j)), and
    pass 3's identities dG = Q dQ - K dK + 2 beta K Y, dbeta = rowsum(dUb V) + rowsum(K Y). Inputs [T, H, *] (B = 1)."""
    C, BLK, OFF = 64, 16, 8
    T, H, D = q.shape
    cu_l = [int(x) for x in cu.tolist()]
    out = {n: torch.zeros_like(t) for n, t in (("dq", q), ("dk", k), ("dv", v), ("dg", g), ("dbeta", beta))}
    dh0 = torch.zeros_like(h0) if h0 is not None else None
    eye = torch.eye(C)

    def pad(x, t0, n):
        z = torch.zeros((C, *x.shape[1:]))
        z[:n] = x[t0 : t0 + n]
        return z

    def rows(X, Y, G):  # sum over row blocks of the split product
        res = torch.zeros(X.shape[0], Y.shape[1])
        for bi in range(C // BLK):
            r = bi * BLK + OFF
            yb = Y * (G[r] - G).exp()
            yb[(bi + 1) * BLK :] = 0
            res[bi * BLK : (bi + 1) * BLK] = ((X @ yb) * (G - G[r]).exp())[bi * BLK : (bi + 1) * BLK]
        return res

    def cols(XT, Y, G):
        res = torch.zeros(XT.shape[0], Y.shape[1])
        for bi in range(C // BLK):
            r = bi * BLK + OFF
            yb = Y * (G - G[r]).exp()
            yb[: bi * BLK] = 0
            res[bi * BLK : (bi + 1) * BLK] = ((XT @ yb) * (G[r] - G).exp())[bi * BLK : (bi + 1) * BLK]
        return res

    for n in range(len(cu_l) - 1):
        bos, eos = cu_l[n], cu_l[n + 1]
        for h in range(H):
            starts = list(range(bos, eos, C))
            chunks = []
            for t0 in starts:
                nv = min(eos - t0, C)
                Q, K, V, dO = (pad(x[:, h], t0, nv) for x in (q, k, v, do))
                Bt = pad(beta[:, h], t0, nv)
                G = pad(g[:, h], t0, nv).cumsum(0)
                low = torch.tril(torch.ones(C, C))
                A = torch.zeros(C, C)
                for bi in range(C // BLK):  # pass 1's A and P by blocks
                    r = bi * BLK + OFF
                    kr = K * (G[r] - G).exp()
                    kr[(bi + 1) * BLK :] = 0
                    sl = slice(bi * BLK, (bi + 1) * BLK)
                    A[sl] = ((K * (G - G[r]).exp()) @ kr.T)[sl]
                A = torch.tril(Bt[:, None] * A, -1)
                P = torch.zeros(C, C)
                for bi in range(C // BLK):
                    r = bi * BLK + OFF
                    kr = K * (G[r] - G).exp()
                    kr[(bi + 1) * BLK :] = 0
                    sl = slice(bi * BLK, (bi + 1) * BLK)
                    P[sl] = ((Q * (G - G[r]).exp()) @ kr.T)[sl]
                P = low * P * scale
                Tm = torch.linalg.inv(eye + A)
                Kbg = Bt[:, None] * K * G.exp()
                chunks.append(dict(nv=nv, t0=t0, Q=Q, K=K, V=V, dO=dO, B=Bt, G=G, P=P, Tm=Tm, Wm=Tm @ Kbg, Kbg=Kbg))
            s = h0[n, h].clone() if h0 is not None else torch.zeros(D, D)
            for c in chunks:  # pass 1
                c["S0"] = s
                c["Vn"] = c["Tm"] @ (c["B"][:, None] * c["V"]) - c["Wm"] @ s.T
                s = s * c["G"][-1].exp() + c["Vn"].T @ (c["K"] * (c["G"][-1] - c["G"]).exp())
            ds = dht[n, h].clone() if dht is not None else torch.zeros(D, D)
            for c in reversed(chunks):  # pass 2
                c["dS1"] = ds
                kd = c["K"] * (c["G"][-1] - c["G"]).exp()
                c["dVn"] = c["P"].T @ c["dO"] + kd @ ds.T
                ds = ds * c["G"][-1].exp() + c["dO"].T @ (scale * c["Q"] * c["G"].exp()) - c["dVn"].T @ c["Wm"]
            if dh0 is not None:
                dh0[n, h] = ds
            for c in chunks:  # pass 3
                Q, K, V, dO, Bt, G, Tm, S0, dS1, Vn, dVn = (c[x] for x in ("Q", "K", "V", "dO", "B", "G", "Tm", "S0", "dS1", "Vn", "dVn"))
                dWm = -dVn @ S0
                dUb = Tm.T @ dVn
                dTm = (dVn @ V.T) * Bt[None, :] + dWm @ c["Kbg"].T
                dA = -torch.tril(Tm.T @ dTm @ Tm.T, -1)
                dP = torch.tril(dO @ Vn.T) * scale
                dQ = scale * G.exp() * (dO @ S0) + rows(dP, K, G)
                R = rows(dA, K, G)
                dKb = Tm.T @ dWm
                Y = R + G.exp() * dKb
                dkd = Vn @ dS1
                kdec = (G[-1] - G).exp()
                dK = cols(dP.T, Q, G) + cols((Bt[:, None] * dA).T, K, G) + Bt[:, None] * Y + kdec * dkd
                dbeta = (dUb * V).sum(-1) + (K * Y).sum(-1)
                dG = Q * dQ - K * dK + 2 * Bt[:, None] * K * Y
                extra = G[-1].exp() * (dS1 * S0).sum(0) + (dkd * kdec * K).sum(0)
                dg = dG.flip(0).cumsum(0).flip(0) + extra
                t0, nv = c["t0"], c["nv"]
                out["dq"][t0 : t0 + nv, h] = dQ[:nv]
                out["dk"][t0 : t0 + nv, h] = dK[:nv]
                out["dv"][t0 : t0 + nv, h] = (Bt[:, None] * dUb)[:nv]
                out["dg"][t0 : t0 + nv, h] = dg[:nv]
                out["dbeta"][t0 : t0 + nv, h] = dbeta[:nv]
    out["dh0"] = dh0
    return out


@pytest.mark.parametrize("regime", ["weak", "strong"])
def test_kernel_algorithm_matches_autograd(regime):
    """The kernels' algorithm (decay split, padding, pass-3 identities), emulated in fp32, equals the autograd truth:
    what the GPU run leaves to check is the kernels' indexing, not their math. ``strong`` is fla's safe-gate range
    (g in [-5, 0)), where the split factors reach exp(40)."""
    import torch.nn.functional as F

    from cudnn_testing.reference_linear_attention import kimi_delta_attention_recurrent_bwd_ref

    lengths = [1, 64, 65, 0, 150]
    q, k, v, g, beta, do, h0, dht, cu = _case(lengths, 2, 2, 16, False, True, True, seed=11)
    if regime == "strong":
        g = -5.0 * torch.sigmoid(torch.randn(g.shape, generator=torch.Generator().manual_seed(5)))
        k = F.normalize(k, dim=-1)
    scale = 16**-0.5
    ref = kimi_delta_attention_recurrent_bwd_ref(q, k, v, g, beta, do, initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    got = _kernel_algorithm(q[0], k[0], v[0], g[0], beta[0], do[0], h0, dht, cu, scale)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        r = ref[name] if name == "dh0" else ref[name][0]
        scale_ = r.abs().max().item()
        err = (got[name] - r).abs().max().item()
        assert err <= 1e-4 * max(scale_, 1.0), (name, err, scale_)
