"""GPU correctness of the attention backward at D = 192, D_v = 128 (DeepSeek-style heads: the 96-key kernel,
``D192_TUNING``, and the split-D kernel, tuning "split_d") against fp32 autograd by the FlashAttention rule: dense (both
layouts, GQA / MQA, causal both alignments, sliding window, odd lengths, fp16), sinks with their gradient, THD varlen
with empty and one-token sequences, the deterministic mode (bitwise reruns; D = 256's too: the same split-D path), the
autograd path through our forward (eager and ``torch.compile(fullgraph=True)``) and n96's tile edges (key lengths no
multiple of 96, S_q != S_kv, a two-sided window; plain, with stats_tma, and with its opt-in ds2 / ds2 + pack1)."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref, attention_ref_varlen
from cudnn_testing.reference_attention_bwd import assert_dsinks_close, attention_grads_ref, attention_grads_ref_varlen
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BHSD, BSHD = (0, 1, 2, 3), (0, 2, 1, 3)
D, DV = 192, 128


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


#: D192_TUNING (the default since session 14: the 64 x 96 tile, kernel_n96_sm90.py, with stats_tma and ds2), the same
#: without either ("n96"), the split-D kernel with dq_bulk's dQ path from the writer warp (session 13's default) and its atomic
#: dQ path (the deterministic mode's schedule without the turn counters), each checked on the same grid.
SCHEDULES = {
    "default": None,
    "n96": ("dq_bulk", "dq_writer", "prepost", "n96"),
    "splitd-bulk": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost"),
    "atomic": ("split_d", "ds2", "prepost"),
}


def _use_tuning(monkeypatch, tuning):
    """Plans built by ``sdpa_bwd`` with ``tuning`` as D192_TUNING (None: the default; the wrapper's plan cache emptied
    around it)."""
    from cudnn.sdpa.bwd import api

    if tuning is not None:
        monkeypatch.setattr(api, "D192_TUNING", tuning)
    monkeypatch.setattr(api, "_PLANS", {})


@pytest.fixture(params=list(SCHEDULES))
def schedule(request, monkeypatch):
    _use_tuning(monkeypatch, SCHEDULES[request.param])
    return request.param


def _make(shape, dtype, perm):
    stored = [shape[p] for p in perm]
    return torch.randn(stored, dtype=torch.float32, device="cuda").to(dtype).permute(*[perm.index(i) for i in range(4)])


def _assert_grads(got, q, k, v, do, **kw):
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), got, ref, lowp, strict=True):
        assert g.shape == r.shape, f"{name}: shape {tuple(g.shape)} vs the reference's {tuple(r.shape)}"
        assert_close_fa(g, r, lp, name)


# (dtype, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout)
CASES = [
    (torch.bfloat16, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (torch.bfloat16, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (torch.bfloat16, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA, bottom-right
    (torch.bfloat16, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (torch.float16, 4, 2, 1000, 1000, True, False, (-1, -1), BHSD),
    (torch.bfloat16, 4, 2, 600, 600, False, True, (100, 0), BSHD),  # sliding window
    (torch.float16, 8, 8, 1, 333, False, False, (-1, -1), BSHD),  # S_q = 1
]


def _case_id(c):
    return f"{str(c[0])[6:]}-h{c[1]}:{c[2]}-s{c[3]}x{c[4]}-c{int(c[5])}br{int(c[6])}-w{c[7][0]}-{'bshd' if c[8] == BSHD else 'bhsd'}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_d192_dv128_grads_match_reference(case, schedule):
    _check_case(case)


#: n96's tile edges (96-key blocks, 64-row query blocks): key lengths no multiple of 96 (1000: a 40-key last block;
#: 4096: 43 blocks), S_q != S_kv both ways and alignments, a two-sided window (70, 33) crossing several key blocks, GQA 4
N96_CASES = [
    (torch.bfloat16, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),
    (torch.bfloat16, 8, 2, 1000, 1000, False, False, (70, 33), BHSD),
    (torch.float16, 8, 2, 333, 1000, False, True, (70, 33), BSHD),
    (torch.float16, 8, 2, 512, 1000, True, True, (-1, -1), BHSD),
    (torch.bfloat16, 4, 4, 1000, 300, True, False, (-1, -1), BSHD),
    (torch.bfloat16, 4, 1, 4096, 4096, False, False, (-1, -1), BHSD),
]


#: n96's tunings on the tile-edge grid, added to SCHEDULES["n96"]: stats_tma (lse / dpsum rows with Q / dO), and with it
#: the opt-in follow-ups ds2 (a second dS buffer, no "dS free" barrier: a dS buffer rewritten two blocks after its
#: readers) and ds2 + pack1 (inline conversions of P and dS)
N96_VARIANTS = {"n96": (), "n96-stats": ("stats_tma",), "n96-s2": ("stats_tma", "ds2"), "n96-s2p": ("stats_tma", "ds2", "pack1")}


@pytest.mark.parametrize("variant", list(N96_VARIANTS))
@pytest.mark.parametrize("case", N96_CASES, ids=_case_id)
def test_d192_dv128_n96_tile_edges(case, variant, monkeypatch):
    _use_tuning(monkeypatch, SCHEDULES["n96"] + N96_VARIANTS[variant])
    _check_case(case)


def _check_case(case):
    from cudnn.sdpa import sdpa_bwd

    dtype, h, hk, sq, sk, causal, br, window, layout = case
    b = 2
    q, k, v, do = (
        _make((b, h, sq, D), dtype, layout),
        _make((b, hk, sk, D), dtype, layout),
        _make((b, hk, sk, DV), dtype, layout),
        _make((b, h, sq, DV), dtype, layout),
    )
    kw = dict(is_causal=causal, bottom_right=br, window=window)
    o, lse = attention_ref(q, k, v, **kw)
    res = sdpa_bwd(q, k, v, o.to(dtype), do, lse.float(), is_causal=causal, causal_bottom_right=br, window_size=window)
    torch.cuda.synchronize()
    assert res["dq"].stride() == q.stride() and res["dv"].shape == v.shape
    _assert_grads((res["dq"], res["dk"], res["dv"]), q, k, v, do, **kw)


def test_d192_dv128_sinks_and_their_gradient(schedule):
    from cudnn.sdpa import sdpa_bwd

    b, h, hk, s = 2, 8, 2, 333
    q, k, v, do = (
        _make((b, h, s, D), torch.bfloat16, BSHD),
        _make((b, hk, s, D), torch.bfloat16, BSHD),
        _make((b, hk, s, DV), torch.bfloat16, BSHD),
        _make((b, h, s, DV), torch.bfloat16, BSHD),
    )
    sinks = torch.randn(h, device="cuda") * 2
    o, lse = attention_ref(q, k, v, is_causal=True, sinks=sinks)
    o = o.to(q.dtype)
    res = sdpa_bwd(q, k, v, o, do, lse.float(), is_causal=True, sinks=sinks)
    ref = attention_grads_ref(q, k, v, do, is_causal=True, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True, sinks=sinks)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (res["dq"], res["dk"], res["dv"]), ref[:3], lowp[:3], strict=True):
        assert_close_fa(g, r, lp, name)
    assert_dsinks_close(res["dsinks"], o, do, lse.float(), sinks, ref, lowp)


def test_d192_dv128_thd_varlen(schedule):
    from cudnn.sdpa import sdpa_bwd

    h, hk, lens_q, lens_k = 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64]
    cu_q, cu_k = [0], [0]
    for a, c in zip(lens_q, lens_k, strict=True):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + c)
    q = torch.randn(cu_q[-1], h, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(cu_k[-1], hk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(cu_k[-1], hk, DV, device="cuda", dtype=torch.bfloat16)
    do = torch.randn(cu_q[-1], h, DV, device="cuda", dtype=torch.bfloat16)
    kw = dict(is_causal=True, bottom_right=True)
    o, lse = attention_ref_varlen(q, k, v, cu_q, cu_k, **kw)
    tq, tk = torch.tensor(cu_q, dtype=torch.int32, device="cuda"), torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    res = sdpa_bwd(
        q, k, v, o.to(q.dtype), do, lse.float().contiguous(), is_causal=True, causal_bottom_right=True, cu_seqlens_q=tq, cu_seqlens_kv=tk,
        max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_k),
    )  # fmt: skip
    ref = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, **kw)
    lowp = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (res["dq"], res["dk"], res["dv"]), ref, lowp, strict=True):
        assert_close_fa(g, r, lp, name)


@pytest.mark.parametrize("d, dv, window", [(192, 128, (-1, -1)), (192, 128, (200, 0)), (256, 256, (-1, -1))])
def test_split_d_deterministic_is_bitwise_reproducible_and_correct(d, dv, window):
    """The split-D kernel's deterministic mode (D = 192 / 128 and D = 256): dQ in the turn counters' fixed order."""
    from cudnn.sdpa import sdpa_bwd

    b, h, hk, s = 2, 8, 2, 1000
    q, k = _make((b, h, s, d), torch.bfloat16, BSHD), _make((b, hk, s, d), torch.bfloat16, BSHD)
    v, do = _make((b, hk, s, dv), torch.bfloat16, BSHD), _make((b, h, s, dv), torch.bfloat16, BSHD)
    kw = dict(is_causal=True, window=window)
    o, lse = attention_ref(q, k, v, **kw)
    o, lse = o.to(q.dtype), lse.float()
    runs = [sdpa_bwd(q, k, v, o, do, lse, is_causal=True, window_size=window, deterministic=True) for _ in range(3)]
    torch.cuda.synchronize()
    for other in runs[1:]:
        for name in ("dq", "dk", "dv"):
            assert torch.equal(runs[0][name], other[name]), f"{name} differs between deterministic runs"
    _assert_grads((runs[0]["dq"], runs[0]["dk"], runs[0]["dv"]), q, k, v, do, **kw)


@pytest.mark.parametrize("compiled", [False, True])
def test_d192_dv128_autograd_through_our_forward(compiled):
    import cudnn.sdpa as sdpa
    from cudnn.sdpa.bwd.autograd import register

    register()
    b, h, hk, s = 2, 8, 2, 384
    q, k = _make((b, h, s, D), torch.bfloat16, BSHD), _make((b, hk, s, D), torch.bfloat16, BSHD)
    v, do = _make((b, hk, s, DV), torch.bfloat16, BSHD), _make((b, h, s, DV), torch.bfloat16, BSHD)
    leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]

    def attn(q_, k_, v_):
        return sdpa.scaled_dot_product_attention(q_, k_, v_, is_causal=True, enable_gqa=True)

    fn = torch.compile(attn, fullgraph=True) if compiled else attn
    fn(*leaves).backward(do)
    _assert_grads([x.grad for x in leaves], q, k, v, do, is_causal=True)
