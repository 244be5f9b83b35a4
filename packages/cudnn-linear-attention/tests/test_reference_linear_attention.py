"""The fp32 references agree with each other (CPU, runs in CI): GDN and KDA token-by-token vs chunked
(chunk 64) with varlen batches (1-token and multi-chunk sequences), initial and final states, L2 norm,
GVA head sharing; the conv1d reference vs torch's F.conv1d and its decode form vs its forward."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing.reference_linear_attention import (  # noqa: E402
    causal_conv1d_ref,
    causal_conv1d_update_ref,
    gated_delta_net_ref,
    kimi_delta_attention_ref,
)

F = torch.nn.functional


def _inputs(kind, T=150, H=4, Hk=2, K=32, V=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, Hk, K, generator=g)
    k = torch.randn(1, T, Hk, K, generator=g) / K**0.5  # |k| ~ 1: the delta rule is contractive only for beta |k|^2 <= 2
    v = torch.randn(1, T, H, V, generator=g)
    beta = torch.rand(1, T, H, generator=g)
    shape = (1, T, H) if kind == "gdn" else (1, T, H, K)
    gate = F.logsigmoid(torch.randn(shape, generator=g)) * 0.5
    return q, k, v, gate, beta


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("l2norm", [False, True])
def test_chunked_matches_recurrent_varlen(kind, l2norm):
    q, k, v, gate, beta = _inputs(kind)
    cu = torch.tensor([0, 1, 66, 67, 150], dtype=torch.int32)  # 1-token, 65-token (2 chunks), 1-token, 83-token
    s0 = torch.randn(4, 4, 16, 32) * 0.2
    fn = gated_delta_net_ref if kind == "gdn" else kimi_delta_attention_ref
    o_r, s_r = fn(q, k, v, gate, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu)
    o_c, s_c = fn(q, k, v, gate, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu, chunked=True)
    assert o_r.abs().max() > 1e-2  # not trivially zero
    torch.testing.assert_close(o_c, o_r, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(s_c, s_r, atol=2e-5, rtol=1e-4)


def test_gdn_is_kda_with_broadcast_gate_and_dense_equals_varlen():
    q, k, v, gate, beta = _inputs("gdn", T=128)
    o_g, _ = gated_delta_net_ref(q, k, v, gate, beta)
    o_k, _ = kimi_delta_attention_ref(q, k, v, gate[..., None].expand(1, 128, 4, 32), beta)
    torch.testing.assert_close(o_g, o_k)
    # dense [2, 64] batch == packed [1, 128] with cu_seqlens [0, 64, 128]
    dense = [t.reshape(2, 64, *t.shape[2:]) for t in (q, k, v, gate, beta)]
    o_d, s_d = gated_delta_net_ref(*dense, output_final_state=True)
    o_p, s_p = gated_delta_net_ref(q, k, v, gate, beta, output_final_state=True, cu_seqlens=torch.tensor([0, 64, 128]))
    torch.testing.assert_close(o_d.reshape(1, 128, 4, 16), o_p)
    torch.testing.assert_close(s_d, s_p)


def test_recurrence_matches_the_definition_on_one_step():
    """S_1 = S_0 Diag(exp g)(I - b k k^T) + b v k^T and o = S_1 (scale q), spelled out with matrices."""
    q, k, v, gate, beta = _inputs("kda", T=1, H=1, Hk=1, K=8, V=4)
    s0 = torch.randn(1, 1, 4, 8)
    o, s1 = kimi_delta_attention_ref(q, k, v, gate, beta, initial_state=s0, output_final_state=True, scale=0.5)
    kk, b = k[0, 0, 0], beta[0, 0, 0]
    want = s0[0, 0] @ torch.diag(gate[0, 0, 0].exp()) @ (torch.eye(8) - b * torch.outer(kk, kk)) + b * torch.outer(v[0, 0, 0], kk)
    torch.testing.assert_close(s1[0, 0], want)
    torch.testing.assert_close(o[0, 0, 0], want @ (0.5 * q[0, 0, 0]))


@pytest.mark.parametrize("width", [2, 3, 4])
def test_conv1d_reference_matches_torch_conv1d(width):
    g = torch.Generator().manual_seed(width)
    x = torch.randn(2, 50, 16, generator=g)
    w = torch.randn(16, width, generator=g)
    b = torch.randn(16, generator=g)
    y, _ = causal_conv1d_ref(x, w, b, "silu")
    want = F.silu(F.conv1d(x.transpose(1, 2), w[:, None, :], b, padding=width - 1, groups=16)[..., :50].transpose(1, 2))
    torch.testing.assert_close(y, want, atol=1e-5, rtol=1e-5)


def test_conv1d_states_and_update_continue_the_forward():
    """Forward over [0, L) with final states, then decode steps with update == forward over [0, L + n)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(30, 8, generator=g)
    w, b = torch.randn(8, 4, generator=g), torch.randn(8, generator=g)
    init = torch.randn(1, 8, 3, generator=g)
    cu = torch.tensor([0, 30])
    full, _ = causal_conv1d_ref(x, w, b, "silu", cu, init)
    head, state = causal_conv1d_ref(x[:25], w, b, "silu", torch.tensor([0, 25]), init)
    torch.testing.assert_close(head, full[:25])
    for t in range(25, 30):
        out, state = causal_conv1d_update_ref(x[t : t + 1], state, w, b, "silu")
        torch.testing.assert_close(out[0], full[t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_chunked_reference_gradients_match_recurrent(kind):
    """The chunked reference is differentiable as written: its autograd gradients (the ground truth the
    GDN / KDA backward kernels will be tested against) equal those of the token loop."""
    q, k, v, gate, beta = _inputs(kind, T=70, H=2, Hk=1, K=16, V=8, seed=3)
    s0 = torch.randn(2, 2, 8, 16) * 0.2
    cu = torch.tensor([0, 1, 70], dtype=torch.int32)
    fn = gated_delta_net_ref if kind == "gdn" else kimi_delta_attention_ref
    do = torch.randn(1, 70, 2, 8)
    grads = []
    for chunked in (False, True):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, gate, beta, s0)]
        o, s1 = fn(*leaves[:5], initial_state=leaves[5], output_final_state=True, use_qk_l2norm=True, cu_seqlens=cu, chunked=chunked)
        loss = (o * do).sum() + s1.square().sum()
        grads.append(torch.autograd.grad(loss, leaves))
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "ds0"), grads[0], grads[1], strict=True):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("l2norm", [False, True])
def test_kda_lowp_reference_split_decay_is_exact_in_fp32_and_close_in_bf16(l2norm):
    """The KDA kernel's emulation (decay split around a reference token per 16-row block) is the chunked algorithm:
    with no rounding it equals the recurrence; rounded to bf16 it stays within bf16 noise of it, with fla's
    safe-gate range (g in [-5, 0)) where the split factors reach exp(35)."""
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_lowp_ref

    q, k, v, _, beta = _inputs("kda", T=150, K=64, V=64)
    gate = -5.0 * torch.sigmoid(torch.randn(1, 150, 4, 64, generator=torch.Generator().manual_seed(1)))
    cu = torch.tensor([0, 1, 66, 67, 150], dtype=torch.int32)
    s0 = torch.randn(4, 4, 64, 64) * 0.2
    kw = dict(initial_state=s0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu)
    o_r, s_r = kimi_delta_attention_ref(q, k, v, gate, beta, **kw)
    o_f, s_f = kimi_delta_attention_chunked_lowp_ref(q, k, v, gate, beta, dtype=torch.float32, **kw)
    torch.testing.assert_close(o_f, o_r, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s_f, s_r, rtol=1e-4, atol=1e-4)
    o_b, s_b = kimi_delta_attention_chunked_lowp_ref(q, k, v, gate, beta, **kw)
    assert (o_b.float() - o_r).abs().max() < 0.05 * o_r.abs().max()
    assert (s_b - s_r).abs().max() < 0.05 * s_r.abs().max()
