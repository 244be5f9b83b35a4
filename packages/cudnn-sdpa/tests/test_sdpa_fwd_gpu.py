"""GPU correctness of the attention forward against the fp32 reference, by the FlashAttention rule.

The grid is a curated cross-section rather than a full product (each distinct compile key costs a compile):
every dtype meets every head-dim pair once, every mask meets GQA and both layouts, and odd lengths (S not a
multiple of the tile, S_q != S_kv both ways, S_q = 1) appear with every mask.
"""

from __future__ import annotations

import pytest

from cudnn_testing.data import poison
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref, attention_ref_varlen
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BHSD, BSHD = (0, 1, 2, 3), (0, 2, 1, 3)


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _make(shape, dtype, perm):
    stored = [shape[p] for p in perm]
    base = torch.randn(stored, dtype=torch.float32, device="cuda").to(dtype)
    inv = [perm.index(i) for i in range(4)]
    return base.permute(*inv)


def _check(q, k, v, out, lse, **kw):
    ref, ref_lse = attention_ref(q, k, v, **kw)
    lowp, _ = attention_ref(q, k, v, upcast=False, **kw)
    assert_close_fa(out, ref, lowp, "o")
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), finite), "lse: -inf pattern differs from the reference"
        assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3 if finite.any() else True


# (dtype, d, dv, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout)
CASES = [
    (torch.bfloat16, 128, 128, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (torch.bfloat16, 128, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),
    (torch.bfloat16, 128, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),
    (torch.bfloat16, 128, 128, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (torch.float16, 64, 64, 4, 4, 1000, 1000, True, False, (-1, -1), BHSD),
    (torch.float16, 64, 64, 8, 1, 1, 333, False, False, (-1, -1), BSHD),  # decode-shaped
    (torch.bfloat16, 96, 96, 6, 3, 211, 389, False, False, (-1, -1), BHSD),
    (torch.float16, 192, 128, 4, 2, 333, 333, True, False, (-1, -1), BSHD),
    (torch.bfloat16, 256, 256, 2, 2, 385, 385, False, False, (-1, -1), BHSD),
    (torch.float16, 256, 256, 4, 1, 200, 450, True, True, (-1, -1), BSHD),
    (torch.bfloat16, 128, 128, 4, 2, 600, 600, False, True, (100, 0), BHSD),  # sliding window, causal-like
    (torch.bfloat16, 64, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # two-sided window, top-left
    (torch.float16, 128, 128, 8, 8, 1, 1, True, True, (-1, -1), BHSD),
    (torch.bfloat16, 128, 128, 8, 2, 5, 300, True, True, (-1, -1), BSHD),  # pack-GQA (auto: S_q <= 64), speculative-decode shape
    (torch.bfloat16, 256, 256, 16, 2, 1, 1000, False, False, (-1, -1), BHSD),  # pack-GQA decode, G = 8
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: (
        f"{str(c[0])[6:]}-d{c[1]}x{c[2]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]},{c[9][1]}-{'bshd' if c[10] == BSHD else 'bhsd'}"
    ),
)
def test_dense_matches_reference(case):
    from cudnn.sdpa import sdpa_fwd

    dtype, d, dv, h, hk, sq, sk, causal, br, window, layout = case
    b = 2
    q, k, v = _make((b, h, sq, d), dtype, layout), _make((b, hk, sk, d), dtype, layout), _make((b, hk, sk, dv), dtype, layout)
    out = poison(_make((b, h, sq, dv), dtype, layout))
    lse = poison(torch.empty(b, h, sq, device="cuda"))
    res = sdpa_fwd(q, k, v, is_causal=causal, causal_bottom_right=br, window_size=window, out=out, lse=lse)
    assert res["o"] is out and res["lse"] is lse
    torch.cuda.synchronize()
    _check(q, k, v, out, lse, is_causal=causal, bottom_right=br, window=window)


def test_sinks_scale_and_log2_lse():
    from cudnn.sdpa import sdpa_fwd

    q, k, v = (_make((2, 4, 300, 128), torch.bfloat16, BSHD) for _ in range(3))
    sinks = torch.randn(4, device="cuda") * 2
    o, lse = sdpa_fwd(q, k, v, is_causal=True, sinks=sinks, scale=0.3, return_lse=True, lse_log2=True)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, is_causal=True, sinks=sinks, scale=0.3)
    lowp, _ = attention_ref(q, k, v, is_causal=True, sinks=sinks, scale=0.3, upcast=False)
    assert_close_fa(o, ref, lowp, "o")
    assert (lse / 1.4426950408889634 - ref_lse).abs().max().item() < 1e-3
    assert o.stride()[1] < o.stride()[2], "output keeps q's BSHD memory order"


@pytest.mark.parametrize("causal", [False, True])
def test_thd_varlen_with_empty_and_one_token_sequences(causal):
    from cudnn.sdpa import sdpa_fwd

    lens_q = [0, 1, 300, 129, 1, 77]
    lens_k = [5, 1, 300, 500, 0, 77]
    cu_q = [0]
    cu_k = [0]
    for a, c in zip(lens_q, lens_k, strict=False):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + c)
    h, hk, d = 8, 2, 128
    q = torch.randn(cu_q[-1], h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(cu_k[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(cu_k[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    cq = torch.tensor(cu_q, dtype=torch.int32, device="cuda")
    ck = torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    out = poison(torch.empty_like(q))
    o, lse = sdpa_fwd(
        q,
        k,
        v,
        is_causal=causal,
        causal_bottom_right=True,
        cu_seqlens_q=cq,
        cu_seqlens_kv=ck,
        max_seqlen_q=max(lens_q),
        max_seqlen_kv=max(lens_k),
        out=out,
        return_lse=True,
    )
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref_varlen(q, k, v, cu_q, cu_k, is_causal=causal, bottom_right=True)
    lowp, _ = attention_ref_varlen(q, k, v, cu_q, cu_k, is_causal=causal, bottom_right=True, upcast=False)
    assert_close_fa(o, ref, lowp, "o")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3


def test_torch_sdpa_surface_and_compile():
    from cudnn.sdpa import scaled_dot_product_attention

    q = torch.randn(2, 8, 256, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(2, 2, 256, 64, device="cuda", dtype=torch.float16)
    v = torch.randn(2, 2, 256, 64, device="cuda", dtype=torch.float16)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    got = scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref, _ = attention_ref(q, k, v, is_causal=True)
    assert_close_fa(got, ref, want, "sdpa")
    compiled = torch.compile(lambda a, b, c: scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True) * 2, fullgraph=True)
    assert torch.allclose(compiled(q, k, v), got * 2)
    with pytest.raises(NotImplementedError, match="attn_mask"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(256, 256, device="cuda", dtype=torch.bool), enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("g, sq, sk, causal, window", [(4, 200, 333, True, (-1, -1)), (2, 37, 500, False, (50, 3)), (8, 300, 129, True, (-1, -1))])
def test_pack_gqa_forced_matches_reference(g, sq, sk, causal, window):
    """Pack-GQA on longer queries (several m-blocks, rows p = s * G + g) with sinks and LSE, bottom-right masks."""
    from cudnn.sdpa import SdpaFwdSm90

    hk, d = 2, 128
    q, k, v = _make((2, hk * g, sq, d), torch.bfloat16, BSHD), _make((2, hk, sk, d), torch.bfloat16, BSHD), _make((2, hk, sk, d), torch.bfloat16, BSHD)
    o = poison(_make((2, hk * g, sq, d), torch.bfloat16, BSHD))
    lse = poison(torch.empty(2, hk * g, sq, device="cuda"))
    sinks = torch.randn(hk * g, device="cuda")
    plan = SdpaFwdSm90(q, k, v, o, lse, is_causal=causal, causal_bottom_right=True, window_size=window, sinks=sinks, pack_gqa=True)
    plan.compile()
    assert plan.key.pack_gqa
    plan.execute(q, k, v, o, lse, sinks)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, is_causal=causal, bottom_right=True, window=window, sinks=sinks)
    lowp, _ = attention_ref(q, k, v, is_causal=causal, bottom_right=True, window=window, sinks=sinks, upcast=False)
    assert_close_fa(o, ref, lowp, "o")
    assert (lse - ref_lse).abs().max().item() < 1e-3
