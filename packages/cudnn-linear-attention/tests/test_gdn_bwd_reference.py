"""CPU check of the Gated DeltaNet backward reference: the hand-written chunked backward
(``gated_delta_net_chunked_bwd_ref``, the algorithm of the three sm_90a backward kernels) against torch.autograd through
the fp32 token-by-token recurrence (``gated_delta_net_recurrent_bwd_ref``), on varlen batches with 1-token, empty,
exactly-one-chunk, one-past-a-chunk and multi-chunk sequences, initial states and final-state gradients, L2 norm and
GVA. fp32 throughout: the two may differ only by reassociation (measured max abs difference ~5e-6 at O(10) gradients)."""

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
    g = F.logsigmoid(torch.randn(1, T, H, generator=gen)) / 8
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
def test_chunked_backward_matches_autograd_of_recurrence(lengths, H, Hk, D, l2norm, with_h0, with_dht):
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case(lengths, H, Hk, D, l2norm, with_h0, with_dht, seed=sum(lengths) + D)
    kw = dict(initial_state=h0, dfinal_state=dht, use_qk_l2norm=l2norm, cu_seqlens=cu)
    ref = gated_delta_net_recurrent_bwd_ref(q, k, v, g, beta, do, **kw)
    got = gated_delta_net_chunked_bwd_ref(q, k, v, g, beta, do, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if ref[name] is None:
            assert got[name] is None
            continue
        scale = ref[name].abs().max().item()
        err = (got[name] - ref[name]).abs().max().item()
        assert err <= 2e-5 * max(scale, 1.0), (name, err, scale)


def test_bf16_chunked_backward_is_a_meaningful_baseline():
    """The bf16-rounding run (the GPU tests' FlashAttention-rule baseline) is close to, but not equal to, the fp32 truth:
    a baseline that rounded nowhere would make the GPU tolerance vacuous."""
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref

    q, k, v, g, beta, do, h0, dht, cu = _case([70, 3], 2, 2, 32, False, True, True, seed=7)
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    ref = gated_delta_net_recurrent_bwd_ref(q, k, v, g, beta, do, **kw)
    low = gated_delta_net_chunked_bwd_ref(q, k, v, g, beta, do, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        err = (low[name] - ref[name]).abs().max().item()
        scale = ref[name].abs().max().item()
        assert 0 < err < 0.1 * scale, (name, err, scale)
