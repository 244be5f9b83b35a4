"""sdpa and sdpa_backward through the reference engine against plain torch (CPU).

The torch side is written independently of the engine: masks from ``tril`` per batch, the sink as an
extra softmax column, stats from ``logsumexp``, backward from autograd of F.scaled_dot_product_attention
or of the manual formula. Layouts: BHSD, BSHD (strided), padded, THD ragged, paged KV; GQA throughout.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import cudnn  # noqa: E402
from cudnn_testing.tolerance import assert_close_fa  # noqa: E402

BF16 = cudnn.data_type.BFLOAT16
B, HQ, HK, D = 2, 4, 2, 32
CPU = cudnn.create_handle(device="cpu")


def _graph(**kw):
    return cudnn.pygraph(io_data_type=BF16, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=CPU, **kw)


def _keep(sq, skv, left=None, right=None, bottom_right=False, lq=None, lkv=None):
    """Bool [sq, skv] of attended positions for one sequence (lengths lq / lkv when padded)."""
    lq = sq if lq is None else lq
    lkv = skv if lkv is None else lkv
    shift = (lkv - lq) if bottom_right else 0
    keep = torch.ones(sq, skv, dtype=torch.bool)
    if right is not None:
        keep &= torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=shift + right)
    if left is not None:
        keep &= ~torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=shift - left)
    keep[:, lkv:] = False
    return keep


def _torch_attention(q, k, v, keep, scale, sink=None, bias=None):
    """One sequence: q [h, sq, d], k/v [hk, skv, d] (fp32), keep [sq, skv]. Returns (o, lse)."""
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~keep, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.view(-1, 1, 1).expand(-1, s.shape[1], 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    if sink is not None:
        p = p[..., :-1]
    return p @ v, lse


def _rand(*shape):
    return torch.randn(*shape).bfloat16()


def _check(out, ref, name):
    assert_close_fa(out, ref.float(), ref.to(out.dtype), name)


MASKS = {
    "none": {},
    "causal": {"use_causal_mask": True},
    "causal_bottom_right": {"use_causal_mask_bottom_right": True},
    "sliding_window": {"use_causal_mask_bottom_right": True, "sliding_window_length": 7},
    "band": {"diagonal_band_left_bound": 5, "diagonal_band_right_bound": 3},
    "band_bottom_right": {"diagonal_alignment": cudnn.diagonal_alignment.BOTTOM_RIGHT, "diagonal_band_left_bound": 4, "diagonal_band_right_bound": 2},
}


def _mask_args(kw):
    right = 0 if kw.get("use_causal_mask") or kw.get("use_causal_mask_bottom_right") else kw.get("diagonal_band_right_bound")
    left = kw.get("sliding_window_length", kw.get("diagonal_band_left_bound"))
    br = kw.get("use_causal_mask_bottom_right", False) or kw.get("diagonal_alignment") is cudnn.diagonal_alignment.BOTTOM_RIGHT
    return left, right, br


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_sdpa_forward_masks_layouts_gqa_stats(mask, layout):
    sq, skv = 19, 27
    if layout == "bhsd":
        q_t, k_t, v_t = _rand(B, HQ, sq, D), _rand(B, HK, skv, D), _rand(B, HK, skv, D)
    else:  # BSHD storage, described as BHSD with strides
        q_t, k_t, v_t = _rand(B, sq, HQ, D).transpose(1, 2), _rand(B, skv, HK, D).transpose(1, 2), _rand(B, skv, HK, D).transpose(1, 2)
    scale = 1.0 / math.sqrt(D)
    g = _graph()
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    o, stats = g.sdpa(name="attn", q=q, k=k, v=v, attn_scale=scale, generate_stats=True, **MASKS[mask])
    o.set_output(True)
    stats.set_output(True)
    g.build()
    assert o.get_stride() == list(q_t.stride()) or layout == "bhsd"  # O follows Q's layout
    o_t = torch.empty_strided(o.get_dim(), o.get_stride(), dtype=torch.bfloat16).fill_(float("nan"))
    st_t = torch.full((B, HQ, sq, 1), float("nan"))
    g.execute({q: q_t, k: k_t, v: v_t, o: o_t, stats: st_t}, None)
    left, right, br = _mask_args(MASKS[mask])
    keep = _keep(sq, skv, left, right, br)
    for b in range(B):
        ref_o, ref_lse = _torch_attention(q_t[b].float(), k_t[b].float(), v_t[b].float(), keep, scale)
        _check(o_t[b], ref_o, f"o[{b}]")
        torch.testing.assert_close(st_t[b], ref_lse, rtol=1e-4, atol=1e-4)


def test_sdpa_forward_matches_torch_sdpa_causal():
    """Against F.scaled_dot_product_attention itself (is_causal, enable_gqa)."""
    q_t, k_t, v_t = _rand(B, HQ, 40, D), _rand(B, HK, 40, D), _rand(B, HK, 40, D)
    g = _graph()
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    o, _ = g.sdpa(q=q, k=k, v=v, attn_scale=D**-0.5, is_inference=True, use_causal_mask=True)
    o.set_output(True)
    g.build()
    o_t = torch.full((B, HQ, 40, D), float("nan")).bfloat16()
    g.execute({q: q_t, k: k_t, v: v_t, o: o_t}, None)
    ref = F.scaled_dot_product_attention(q_t.float(), k_t.float(), v_t.float(), is_causal=True, enable_gqa=True)
    lowp = F.scaled_dot_product_attention(q_t, k_t, v_t, is_causal=True, enable_gqa=True)
    assert_close_fa(o_t, ref, lowp, "o")


def test_sdpa_sink_bias_alibi_scale_tensor():
    sq, skv = 16, 24
    q_t, k_t, v_t = _rand(B, HQ, sq, D), _rand(B, HK, skv, D), _rand(B, HK, skv, D)
    sink_t = torch.randn(1, HQ, 1, 1)
    bias_t = torch.randn(1, HQ, sq, skv).bfloat16()
    g = _graph()
    q, k, v, sink, bias = (g.tensor_like(t) for t in (q_t, k_t, v_t, sink_t, bias_t))
    scale = g.tensor(name="scale", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT, is_pass_by_value=True)
    o, stats = g.sdpa(q=q, k=k, v=v, attn_scale=scale, bias=bias, sink_token=sink, generate_stats=True, use_causal_mask=True)
    o.set_output(True)
    stats.set_output(True)
    g.build()
    o_t, st_t = torch.full((B, HQ, sq, D), float("nan")).bfloat16(), torch.full((B, HQ, sq, 1), float("nan"))
    g.execute({q: q_t, k: k_t, v: v_t, sink: sink_t, bias: bias_t, scale: 0.2, o: o_t, stats: st_t}, None)
    keep = _keep(sq, skv, None, 0, False)
    for b in range(B):
        ref_o, ref_lse = _torch_attention(q_t[b].float(), k_t[b].float(), v_t[b].float(), keep, 0.2, sink_t.view(-1), bias_t[0].float())
        _check(o_t[b], ref_o, "o")
        torch.testing.assert_close(st_t[b], ref_lse, rtol=1e-4, atol=1e-4)
    # ALiBi: slopes 2^(-8 i / h) for a power-of-two head count, bias (j - i) * slope
    g = _graph()
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    o, _ = g.sdpa(q=q, k=k, v=v, attn_scale=0.3, use_alibi_mask=True, is_inference=True, use_causal_mask=True)
    o.set_output(True)
    g.build()
    g.execute({q: q_t, k: k_t, v: v_t, o: o_t}, None)
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / HQ) for i in range(HQ)]).view(HQ, 1, 1)
    alibi = (torch.arange(skv).view(1, -1) - torch.arange(sq).view(-1, 1)).float() * slopes
    for b in range(B):
        ref_o, _ = _torch_attention(q_t[b].float(), k_t[b].float(), v_t[b].float(), keep, 0.3, None, alibi)
        _check(o_t[b], ref_o, "o alibi")


def test_sdpa_padding_mask_bottom_right():
    sq, skv = 12, 20
    lq, lkv = torch.tensor([12, 5], dtype=torch.int32), torch.tensor([9, 20], dtype=torch.int32)
    q_t, k_t, v_t = _rand(B, HQ, sq, D), _rand(B, HK, skv, D), _rand(B, HK, skv, D)
    g = _graph()
    q, k, v = g.tensor_like(q_t), g.tensor_like(k_t), g.tensor_like(v_t)
    slq, slkv = g.tensor_like(lq.view(B, 1, 1, 1)), g.tensor_like(lkv.view(B, 1, 1, 1))
    o, _ = g.sdpa(q=q, k=k, v=v, attn_scale=0.2, is_inference=True, use_padding_mask=True, seq_len_q=slq, seq_len_kv=slkv, use_causal_mask_bottom_right=True)
    o.set_output(True)
    g.build()
    o_t = torch.full((B, HQ, sq, D), float("nan")).bfloat16()
    g.execute({q: q_t, k: k_t, v: v_t, slq: lq.view(B, 1, 1, 1), slkv: lkv.view(B, 1, 1, 1), o: o_t}, None)
    for b in range(B):
        n, m = int(lq[b]), int(lkv[b])
        keep = _keep(n, m, None, 0, True)
        ref_o, _ = _torch_attention(q_t[b, :, :n].float(), k_t[b, :, :m].float(), v_t[b, :, :m].float(), keep, 0.2)
        _check(o_t[b, :, :n], ref_o, f"o[{b}] valid rows")
        assert torch.all(o_t[b, :, n:] == 0), "padded rows are written as zeros by the reference"


def _pack(lens, h, d):
    """THD storage [T, h, d] of ``lens`` sequences plus its ragged offsets (elements) [b+1, 1, 1, 1]."""
    total = int(sum(lens))
    data = _rand(total + 3, h, d)  # 3 spare rows past the end: must stay untouched
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    offsets = torch.tensor(starts, dtype=torch.int32).view(-1, 1, 1, 1) * (h * d)
    return data, offsets, starts


def test_sdpa_thd_ragged_forward_and_backward():
    lens_q, lens_kv = [7, 13], [9, 13]
    s_max = 16
    q_p, q_off, q_st = _pack(lens_q, HQ, D)
    k_p, kv_off, kv_st = _pack(lens_kv, HK, D)
    v_p, _, _ = _pack(lens_kv, HK, D)
    o_p = torch.full_like(q_p, float("nan"))
    lq = torch.tensor(lens_q, dtype=torch.int32).view(B, 1, 1, 1)
    lkv = torch.tensor(lens_kv, dtype=torch.int32).view(B, 1, 1, 1)
    g = _graph()
    qo_off = g.tensor(name="q_off", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    kv_off_t = g.tensor(name="kv_off", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    thd_q = [s_max * HQ * D, D, HQ * D, 1]
    thd_kv = [s_max * HK * D, D, HK * D, 1]
    q = g.tensor(name="q", dim=[B, HQ, s_max, D], stride=thd_q, data_type=BF16, ragged_offset=qo_off)
    k = g.tensor(name="k", dim=[B, HK, s_max, D], stride=thd_kv, data_type=BF16, ragged_offset=kv_off_t)
    v = g.tensor(name="v", dim=[B, HK, s_max, D], stride=thd_kv, data_type=BF16, ragged_offset=kv_off_t)
    slq, slkv = g.tensor_like(lq), g.tensor_like(lkv)
    o, stats = g.sdpa(
        q=q, k=k, v=v, attn_scale=0.25, generate_stats=True, use_padding_mask=True, seq_len_q=slq, seq_len_kv=slkv, use_causal_mask_bottom_right=True
    )
    o.set_output(True).set_stride(thd_q).set_ragged_offset(qo_off)
    stats.set_output(True)
    g.build()
    st_t = torch.full((B, HQ, s_max, 1), float("nan"))
    g.execute({q: q_p, k: k_p, v: v_p, qo_off: q_off, kv_off_t: kv_off, slq: lq, slkv: lkv, o: o_p, stats: st_t}, None)
    assert torch.isnan(o_p[q_st[-1] :].float()).all(), "bytes past the packed sequences must stay untouched"
    refs = []
    for b in range(B):
        qb = q_p[q_st[b] : q_st[b + 1]].transpose(0, 1).float()
        kb = k_p[kv_st[b] : kv_st[b + 1]].transpose(0, 1).float()
        vb = v_p[kv_st[b] : kv_st[b + 1]].transpose(0, 1).float()
        keep = _keep(lens_q[b], lens_kv[b], None, 0, True)
        ref_o, ref_lse = _torch_attention(qb, kb, vb, keep, 0.25)
        refs.append((qb, kb, vb, keep))
        _check(o_p[q_st[b] : q_st[b + 1]].transpose(0, 1), ref_o, f"o[{b}]")
        torch.testing.assert_close(st_t[b, :, : lens_q[b]], ref_lse, rtol=1e-4, atol=1e-4)

    # backward over the same THD layout: dQ/dK/dV packed like Q/K/V
    do_p, _, _ = _pack(lens_q, HQ, D)
    gb = _graph()
    qo_off2 = gb.tensor(name="q_off", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    kv_off2 = gb.tensor(name="kv_off", dim=[B + 1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
    mk = {
        n: gb.tensor(name=n, dim=[B, h, s_max, D], stride=st, data_type=BF16, ragged_offset=off)
        for n, h, st, off in (
            ("q", HQ, thd_q, qo_off2),
            ("k", HK, thd_kv, kv_off2),
            ("v", HK, thd_kv, kv_off2),
            ("o", HQ, thd_q, qo_off2),
            ("dO", HQ, thd_q, qo_off2),
        )
    }
    st_in = gb.tensor_like(st_t)
    slq2, slkv2 = gb.tensor_like(lq), gb.tensor_like(lkv)
    dq, dk, dv = gb.sdpa_backward(
        q=mk["q"], k=mk["k"], v=mk["v"], o=mk["o"], dO=mk["dO"], stats=st_in, attn_scale=0.25,
        use_padding_mask=True, seq_len_q=slq2, seq_len_kv=slkv2, use_causal_mask_bottom_right=True,
    )  # fmt: skip
    for t, off in ((dq, qo_off2), (dk, kv_off2), (dv, kv_off2)):
        t.set_output(True).set_ragged_offset(off)
    gb.build()
    dq_p, dk_p, dv_p = torch.full_like(q_p, float("nan")), torch.full_like(k_p, float("nan")), torch.full_like(v_p, float("nan"))
    gb.execute(
        {
            mk["q"]: q_p,
            mk["k"]: k_p,
            mk["v"]: v_p,
            mk["o"]: o_p,
            mk["dO"]: do_p,
            st_in: st_t,
            qo_off2: q_off,
            kv_off2: kv_off,
            slq2: lq,
            slkv2: lkv,
            dq: dq_p,
            dk: dk_p,
            dv: dv_p,
        },
        None,
    )
    for b in range(B):
        qb, kb, vb, keep = (x.clone().requires_grad_(True) if i < 3 else x for i, x in enumerate(refs[b]))
        ref_o, _ = _torch_attention(qb, kb, vb, keep, 0.25)
        ref_o.backward(do_p[q_st[b] : q_st[b + 1]].transpose(0, 1).float())
        _check(dq_p[q_st[b] : q_st[b + 1]].transpose(0, 1), qb.grad, f"dQ[{b}]")
        _check(dk_p[kv_st[b] : kv_st[b + 1]].transpose(0, 1), kb.grad, f"dK[{b}]")
        _check(dv_p[kv_st[b] : kv_st[b + 1]].transpose(0, 1), vb.grad, f"dV[{b}]")


def test_sdpa_paged_kv():
    block, pages, sq = 8, 4, 6
    lkv = torch.tensor([29, 17], dtype=torch.int32)
    k_dense, v_dense = _rand(B, HK, pages * block, D), _rand(B, HK, pages * block, D)
    nblocks = B * pages + 3
    perm = torch.randperm(nblocks)[: B * pages].view(B, pages)  # sequence b's page p lives in block perm[b, p]
    k_cont, v_cont = _rand(nblocks, HK, block, D), _rand(nblocks, HK, block, D)
    for b in range(B):
        for p in range(pages):
            k_cont[perm[b, p]] = k_dense[b, :, p * block : (p + 1) * block]
            v_cont[perm[b, p]] = v_dense[b, :, p * block : (p + 1) * block]
    table = perm.to(torch.int32).view(B, 1, pages, 1)
    q_t = _rand(B, HQ, sq, D)
    lq = torch.full((B, 1, 1, 1), sq, dtype=torch.int32)
    g = _graph()
    q, kc, vc, kt, vt = (g.tensor_like(t) for t in (q_t, k_cont, v_cont, table, table.clone()))
    slq, slkv = g.tensor_like(lq), g.tensor_like(lkv.view(B, 1, 1, 1))
    o, _ = g.sdpa(
        q=q, k=kc, v=vc, attn_scale=0.2, is_inference=True, use_padding_mask=True, seq_len_q=slq, seq_len_kv=slkv,
        paged_attention_k_table=kt, paged_attention_v_table=vt, paged_attention_max_seq_len_kv=pages * block, use_causal_mask_bottom_right=True,
    )  # fmt: skip
    o.set_output(True)
    g.build()
    o_t = torch.full((B, HQ, sq, D), float("nan")).bfloat16()
    g.execute({q: q_t, kc: k_cont, vc: v_cont, kt: table, vt: table.clone(), slq: lq, slkv: lkv.view(B, 1, 1, 1), o: o_t}, None)
    for b in range(B):
        m = int(lkv[b])
        ref_o, _ = _torch_attention(q_t[b].float(), k_dense[b, :, :m].float(), v_dense[b, :, :m].float(), _keep(sq, m, None, 0, True), 0.2)
        _check(o_t[b], ref_o, f"o[{b}]")


@pytest.mark.parametrize("mask", ["none", "causal", "sliding_window"])
def test_sdpa_backward_against_autograd(mask):
    sq, skv = 17, 23
    q_t, k_t, v_t, do_t = _rand(B, HQ, sq, D), _rand(B, HK, skv, D), _rand(B, HK, skv, D), _rand(B, HQ, sq, D)
    left, right, br = _mask_args(MASKS[mask])
    keep = _keep(sq, skv, left, right, br)
    qr, kr, vr = (t.float().requires_grad_(True) for t in (q_t, k_t, v_t))
    outs, lses = zip(*[_torch_attention(qr[b], kr[b], vr[b], keep, 0.3) for b in range(B)], strict=True)
    o_ref = torch.stack(outs)
    o_ref.backward(do_t.float())
    lse = torch.stack(lses).detach()
    g = _graph()
    q, k, v, o, d_o = (g.tensor_like(t) for t in (q_t, k_t, v_t, o_ref.detach().bfloat16(), do_t))
    st = g.tensor_like(lse)
    dq, dk, dv = g.sdpa_backward(q=q, k=k, v=v, o=o, dO=d_o, stats=st, attn_scale=0.3, **MASKS[mask])
    for t in (dq, dk, dv):
        t.set_output(True)
    g.build()
    bufs = [torch.full(t.shape, float("nan")).bfloat16() for t in (q_t, k_t, v_t)]
    g.execute({q: q_t, k: k_t, v: v_t, o: o_ref.detach().bfloat16(), d_o: do_t, st: lse, dq: bufs[0], dk: bufs[1], dv: bufs[2]}, None)
    for name, buf, ref in zip(("dQ", "dK", "dV"), bufs, (qr.grad, kr.grad, vr.grad), strict=True):
        _check(buf, ref, name)


def test_sdpa_backward_sink_and_bias_gradients():
    sq, skv = 9, 9
    q_t, k_t, v_t, do_t = _rand(1, HQ, sq, D), _rand(1, HK, skv, D), _rand(1, HK, skv, D), _rand(1, HQ, sq, D)
    sink_t, bias_t = torch.randn(1, HQ, 1, 1), torch.randn(1, 1, sq, skv)
    qr, kr, vr, sr, br = (t.float().clone().requires_grad_(True) for t in (q_t, k_t, v_t, sink_t, bias_t))
    keep = _keep(sq, skv, None, 0, False)
    o_ref, lse = _torch_attention(qr[0], kr[0], vr[0], keep, 0.3, sr.view(-1), br[0])
    o_ref.backward(do_t[0].float())
    g = _graph()
    q, k, v, d_o, sink, bias = (g.tensor_like(t) for t in (q_t, k_t, v_t, do_t, sink_t, bias_t.bfloat16()))
    o = g.tensor_like(o_ref.detach().unsqueeze(0).bfloat16())
    st = g.tensor_like(lse.detach().unsqueeze(0))
    dsink = g.tensor_like(sink_t)
    dbias = g.tensor_like(bias_t)
    dq, dk, dv = g.sdpa_backward(
        q=q, k=k, v=v, o=o, dO=d_o, stats=st, attn_scale=0.3, use_causal_mask=True, sink_token=sink, dSink_token=dsink, bias=bias, dBias=dbias
    )
    for t in (dq, dk, dv):
        t.set_output(True)
    g.build()
    bufs = [torch.full(t.shape, float("nan")).bfloat16() for t in (q_t, k_t, v_t)]
    ds_buf, db_buf = torch.full_like(sink_t, float("nan")), torch.full_like(bias_t, float("nan"))
    g.execute(
        {q: q_t, k: k_t, v: v_t, o: o_ref.detach().unsqueeze(0).bfloat16(), d_o: do_t, st: lse.detach().unsqueeze(0), sink: sink_t, bias: bias_t.bfloat16(),
         dq: bufs[0], dk: bufs[1], dv: bufs[2], dsink: ds_buf, dbias: db_buf},
        None,
    )  # fmt: skip
    _check(bufs[0], qr.grad, "dQ")
    torch.testing.assert_close(ds_buf, sr.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(db_buf, br.grad, rtol=2e-2, atol=2e-2)
