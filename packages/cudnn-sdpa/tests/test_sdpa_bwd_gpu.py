"""GPU correctness of the attention backward against fp32 autograd, by the FlashAttention rule (dq, dk, dv), and
the autograd path (torch.ops.cudnn.sdpa_fwd's formula, eager and torch.compile(fullgraph=True)).

The forward's outputs (o, LSE) come from the fp32 reference, so these tests isolate the backward kernels; the
autograd tests run our forward too. The grid is a curated cross-section (each distinct compile key costs a
compile): every dtype meets every head dim, every mask meets GQA/MQA and both layouts, and odd lengths (S not a
multiple of the tiles, S_q != S_kv both ways, S_q = 1, empty rows, key blocks no query sees) appear with masks.
"""

from __future__ import annotations

import math

import pytest

from cudnn_testing.data import poison
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref, attention_ref_varlen
from cudnn_testing.reference_attention_bwd import assert_dsinks_close, attention_grads_ref, attention_grads_ref_varlen, sink_grad_from_output
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BHSD, BSHD = (0, 1, 2, 3), (0, 2, 1, 3)


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def _make(shape, dtype, perm):
    stored = [shape[p] for p in perm]
    base = torch.randn(stored, dtype=torch.float32, device="cuda").to(dtype)
    inv = [perm.index(i) for i in range(4)]
    return base.permute(*inv)


def _ref_fwd(q, k, v, **kw):
    o, lse = attention_ref(q, k, v, **kw)
    return o.to(q.dtype), lse.float()


def _check_grads(got, q, k, v, do, **kw):
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), got, ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)


# (dtype, d, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout)
CASES = [
    (torch.bfloat16, 128, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (torch.bfloat16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA, bottom-right
    (torch.bfloat16, 128, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (torch.bfloat16, 128, 4, 4, 1024, 1024, True, False, (-1, -1), BHSD),
    (torch.float16, 64, 4, 4, 1000, 1000, True, False, (-1, -1), BHSD),
    (torch.float16, 64, 8, 1, 1, 333, False, False, (-1, -1), BSHD),  # S_q = 1
    (torch.bfloat16, 96, 6, 3, 211, 389, False, False, (-1, -1), BHSD),
    (torch.float16, 128, 4, 2, 333, 333, False, False, (-1, -1), BSHD),
    (torch.bfloat16, 128, 4, 2, 600, 600, False, True, (100, 0), BHSD),  # sliding window
    (torch.bfloat16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # two-sided window: key blocks no query sees
    (torch.float16, 96, 8, 8, 1, 1, True, True, (-1, -1), BHSD),
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[2]}:{c[3]}-s{c[4]}x{c[5]}-c{int(c[6])}br{int(c[7])}-w{c[8][0]},{c[8][1]}-{'bshd' if c[9] == BSHD else 'bhsd'}",
)
def test_grads_match_reference(case):
    from cudnn.sdpa import sdpa_bwd

    dtype, d, h, hk, sq, sk, causal, br, window, layout = case
    b = 2
    q, k, v = _make((b, h, sq, d), dtype, layout), _make((b, hk, sk, d), dtype, layout), _make((b, hk, sk, d), dtype, layout)
    do = _make((b, h, sq, d), dtype, layout)
    kw = dict(is_causal=causal, bottom_right=br, window=window)
    o, lse = _ref_fwd(q, k, v, **kw)
    dq, dk, dv = (poison(_make(x.shape, dtype, layout)) for x in (q, k, v))
    res = sdpa_bwd(q, k, v, o, do, lse, is_causal=causal, causal_bottom_right=br, window_size=window, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    assert res["dq"] is dq and res["dk"] is dk and res["dv"] is dv
    _check_grads((dq, dk, dv), q, k, v, do, **kw)


def test_wrapper_allocates_in_input_layout_and_honours_scale_and_log2_lse():
    from cudnn.sdpa import sdpa_bwd

    q, k, v, do = (_make((2, 4, 200, 64), torch.bfloat16, BSHD) for _ in range(4))
    scale = 0.3
    o, lse = _ref_fwd(q, k, v, scale=scale, is_causal=True)
    dq, dk, dv = sdpa_bwd(q, k, v, o, do, lse * (1.0 / math.log(2.0)), is_causal=True, scale=scale, lse_log2=True)
    assert dq.stride() == q.stride() and dk.stride() == k.stride()
    _check_grads((dq, dk, dv), q, k, v, do, is_causal=True, scale=scale)


@pytest.mark.parametrize("window", [(-1, -1), (200, 0)])
def test_deterministic_mode_is_bitwise_reproducible_and_correct(window):
    from cudnn.sdpa import sdpa_bwd

    b, h, hk, s, d = 2, 8, 2, 1000, 128
    q, k, v, do = (_make((b, x, s, d), torch.bfloat16, BSHD) for x in (h, hk, hk, h))
    kw = dict(is_causal=True, window=window)
    o, lse = _ref_fwd(q, k, v, **kw)
    runs = [sdpa_bwd(q, k, v, o, do, lse, is_causal=True, window_size=window, deterministic=True) for _ in range(3)]
    torch.cuda.synchronize()
    for other in runs[1:]:
        for name in ("dq", "dk", "dv"):
            assert torch.equal(runs[0][name], other[name]), f"{name} differs between deterministic runs"
    _check_grads((runs[0]["dq"], runs[0]["dk"], runs[0]["dv"]), q, k, v, do, **kw)


@pytest.mark.parametrize("causal", [False, True])
def test_sinks_and_their_gradient(causal):
    from cudnn.sdpa import sdpa_bwd

    b, h, hk, s, d = 2, 8, 2, 333, 64
    q, k, v, do = (
        _make((b, h, s, d), torch.bfloat16, BSHD),
        _make((b, hk, s, d), torch.bfloat16, BSHD),
        _make((b, hk, s, d), torch.bfloat16, BSHD),
        _make((b, h, s, d), torch.bfloat16, BSHD),
    )
    sinks = torch.randn(h, device="cuda") * 2
    o, lse = _ref_fwd(q, k, v, is_causal=causal, sinks=sinks)
    res = sdpa_bwd(q, k, v, o, do, lse, is_causal=causal, sinks=sinks)
    ref = attention_grads_ref(q, k, v, do, is_causal=causal, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=causal, sinks=sinks)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (res["dq"], res["dk"], res["dv"]), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)
    # dsinks = -sum_rows exp(sink - lse) * rowsum(do * o) over B * S_q rows: exact from the o and lse given, and vs fp32
    assert_dsinks_close(res["dsinks"], o, do, lse, sinks, ref, lowp)


# (dtype, d, h, h_kv, lens_q, lens_kv, causal, bottom_right, window): empty and one-token sequences, S_q != S_kv
VARLEN = [
    (torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (torch.float16, 64, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
    (torch.bfloat16, 96, 6, 3, [211, 389, 1], [389, 211, 1], True, False, (64, 0)),
]


@pytest.mark.parametrize("case", VARLEN, ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[2]}:{c[3]}-{len(c[4])}seqs-c{int(c[6])}br{int(c[7])}-w{c[8][0]}")
@pytest.mark.parametrize("deterministic", [False, True])
def test_thd_varlen_grads_match_reference(case, deterministic):
    from cudnn.sdpa import sdpa_bwd

    dtype, d, h, hk, lens_q, lens_k, causal, br, window = case
    cu_q, cu_k = [0], [0]
    for a, b in zip(lens_q, lens_k, strict=False):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + b)
    q = torch.randn(cu_q[-1], h, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(cu_k[-1], hk, d, device="cuda", dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    kw = dict(is_causal=causal, bottom_right=br, window=window)
    o, lse = attention_ref_varlen(q, k, v, cu_q, cu_k, **kw)
    tq, tk = torch.tensor(cu_q, dtype=torch.int32, device="cuda"), torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    res = sdpa_bwd(
        q, k, v, o.to(dtype), do, lse.float().contiguous(), is_causal=causal, causal_bottom_right=br, window_size=window,
        cu_seqlens_q=tq, cu_seqlens_kv=tk, max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_k), deterministic=deterministic,
    )  # fmt: skip
    ref = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, **kw)
    lowp = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (res["dq"], res["dk"], res["dv"]), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)


def _autograd_inputs(dtype=torch.bfloat16, b=2, h=8, hk=2, s=384, d=128, layout=BSHD):
    q = _make((b, h, s, d), dtype, layout).requires_grad_(True)
    k = _make((b, hk, s, d), dtype, layout).requires_grad_(True)
    v = _make((b, hk, s, d), dtype, layout).requires_grad_(True)
    return q, k, v


def _ref_autograd(q, k, v, do, is_causal):
    return attention_grads_ref(q, k, v, do, is_causal=is_causal), attention_grads_ref(q, k, v, do, upcast=False, is_causal=is_causal)


@pytest.mark.parametrize("with_lse", [False, True])
def test_autograd_formula_of_sdpa_fwd(with_lse):
    from cudnn.sdpa.bwd.autograd import register

    register()
    import cudnn.sdpa

    q, k, v = _autograd_inputs()
    do = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    if with_lse:
        o, lse = torch.ops.cudnn.sdpa_fwd(q, k, v, True, False, -1, -1, None, None, None, None, None, None, True)
        assert not lse.requires_grad
    else:
        o = cudnn.sdpa.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    o.backward(do)
    ref, lowp = _ref_autograd(q, k, v, do, True)
    for name, x, r, lp in zip(("dq", "dk", "dv"), (q, k, v), ref, lowp, strict=False):
        assert_close_fa(x.grad, r, lp, name)


def test_autograd_formula_returns_the_sink_gradient():
    from cudnn.sdpa.bwd.autograd import register

    register()
    q, k, v = _autograd_inputs(h=4, hk=2, s=300, d=64)
    sinks = (torch.randn(4, device="cuda") * 2).requires_grad_(True)
    do = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    o, _ = torch.ops.cudnn.sdpa_fwd(q, k, v, True, False, -1, -1, None, sinks, None, None, None, None, True)
    o.backward(do)
    ref = attention_grads_ref(q, k, v, do, is_causal=True, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True, sinks=sinks)
    for name, x, r, lp in zip(("dq", "dk", "dv"), (q, k, v), ref, lowp, strict=False):
        assert_close_fa(x.grad, r, lp, name)
    # baseline: the worse of the bf16 autograd and the fp32 formula on the bf16 reference output (what a kernel
    # that forms rowsum(do * o) from its own bf16 o can reach)
    o_lp, _ = attention_ref(q, k, v, is_causal=True, sinks=sinks, upcast=False)
    _, lse = attention_ref(q, k, v, is_causal=True, sinks=sinks)
    base = max((lowp[3].float() - ref[3]).abs().max().item(), (sink_grad_from_output(o_lp, do, lse, sinks) - ref[3]).abs().max().item())
    err = (sinks.grad - ref[3]).abs().max().item()
    assert err <= 2 * base + 1e-3 * ref[3].abs().max().item() + 1e-4, (err, base)


def test_autograd_under_torch_compile_fullgraph_and_expanded_grad():
    from cudnn.sdpa.bwd.autograd import register

    register()
    import cudnn.sdpa

    def f(q, k, v):
        return cudnn.sdpa.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True).float().sum()

    q, k, v = _autograd_inputs(h=4, hk=4, s=256, d=64, layout=BHSD)
    loss = torch.compile(f, fullgraph=True)(q, k, v)
    loss.backward()  # grad_out is an expanded scalar: the glue makes it addressable
    do = torch.ones(q.shape, device="cuda", dtype=q.dtype)
    ref, lowp = _ref_autograd(q, k, v, do, False)
    for name, x, r, lp in zip(("dq", "dk", "dv"), (q, k, v), ref, lowp, strict=False):
        assert_close_fa(x.grad, r, lp, name)


class _Block(torch.nn.Module):
    def __init__(self, dim, heads, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, s, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, c // self.heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # BSHD storage, BHSD view: served natively
        y = self.attn(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def _gpt(attn, seed=0):
    torch.manual_seed(seed)
    dim, heads, vocab = 256, 4, 512
    emb = torch.nn.Embedding(vocab, dim)
    blocks = [_Block(dim, heads, attn) for _ in range(4)]
    head = torch.nn.Linear(dim, vocab)
    return torch.nn.Sequential(emb, *blocks, torch.nn.LayerNorm(dim), head).cuda().to(torch.bfloat16)


@pytest.mark.parametrize("compiled", [False, True])
def test_gpt_training_step_matches_torch_sdpa(compiled):
    from cudnn.sdpa.bwd.autograd import register

    register()
    import cudnn.sdpa

    tokens = torch.randint(0, 512, (2, 256), device="cuda")
    results = []
    for attn in (torch.nn.functional.scaled_dot_product_attention, cudnn.sdpa.scaled_dot_product_attention):
        model = _gpt(attn)
        fn = torch.compile(model, fullgraph=True) if compiled else model
        logits = fn(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 512), tokens[:, 1:].reshape(-1))
        loss.backward()
        results.append((loss.detach(), [p.grad.float() for p in model.parameters()]))
    (l_ref, g_ref), (l_ours, g_ours) = results
    assert abs(l_ref.item() - l_ours.item()) < 2e-2 * max(1.0, abs(l_ref.item()))
    for i, (a, b) in enumerate(zip(g_ref, g_ours, strict=False)):
        err = (a - b).norm() / a.norm().clamp_min(1e-6)
        assert err.item() < 5e-2, f"param {i}: relative grad difference {err.item():.3e} vs torch SDPA"
