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


def test_tvm_ffi_entry_matches_the_dsl_entry_bitwise():
    """The tvm-ffi launch (raw tvm_ffi.Function, integer addresses) and the DSL's generic entry run the same device code:
    outputs are bitwise equal for a dense GQA causal call with LSE (BSHD, odd lengths), first and memoized launches."""
    from cudnn._compat import tvm_ffi_available
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    if not tvm_ffi_available():
        pytest.skip("apache-tvm-ffi is not installed")
    q, k, v = _make((2, 8, 300, 128), torch.bfloat16, BSHD), _make((2, 2, 257, 128), torch.bfloat16, BSHD), _make((2, 2, 257, 128), torch.bfloat16, BSHD)
    outs = []
    for env in ("1", "0"):
        mp = pytest.MonkeyPatch()
        mp.setenv("CUDNN_SDPA_TVM_FFI", env)
        o, lse = poison(torch.empty_like(q)), poison(torch.empty(2, 8, 300, device="cuda"))
        plan = SdpaFwdSm90(q, k, v, o, lse, is_causal=True, scale=0.1)
        plan.compile()
        mp.undo()
        assert plan._tvm_ffi == (env == "1")
        for _ in range(2):  # the second call takes the memoized arguments
            plan.execute(q, k, v, o, lse)
        outs.append((o, lse))
    torch.cuda.synchronize()
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    _check(q, k, v, outs[0][0], outs[0][1], is_causal=True, scale=0.1)


def test_thd_memoized_launch_reads_new_lengths_from_the_device():
    """Same tensor metadata, different cu_seqlens contents: the memoized launch arguments hold no lengths, so the second
    call is correct for the new split (the device lengths are read on the device, never on the host)."""
    from cudnn.sdpa import sdpa_fwd

    h, hk, d, total = 8, 2, 64, 600
    q, k, v = (torch.randn(total, n, d, device="cuda", dtype=torch.float16) for n in (h, hk, hk))
    for lens in ([100, 500, 0], [450, 1, 149]):
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")  # same shape, same max_seqlen bound: a memo hit
        out = poison(torch.empty_like(q))
        sdpa_fwd(q, k, v, is_causal=True, cu_seqlens_q=cu_t, cu_seqlens_kv=cu_t, max_seqlen_q=total, max_seqlen_kv=total, out=out)
        torch.cuda.synchronize()
        ref, _ = attention_ref_varlen(q, k, v, cu, cu, is_causal=True)
        lowp, _ = attention_ref_varlen(q, k, v, cu, cu, is_causal=True, upcast=False)
        assert_close_fa(out, ref, lowp, "o")


# Split-KV (dense): (dtype, d, dv, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout, num_splits, sinks, lse_log2)
SPLIT_CASES = [
    (torch.bfloat16, 128, 128, 32, 8, 1, 3000, False, False, (-1, -1), BSHD, None, True, False),  # decode, pack-GQA, heuristic
    (torch.bfloat16, 128, 128, 32, 8, 1, 3000, True, True, (-1, -1), BSHD, 5, False, True),  # decode, causal bottom-right
    (torch.float16, 64, 64, 8, 8, 5, 1000, True, True, (-1, -1), BHSD, 4, False, False),  # no packing (G = 1)
    (torch.bfloat16, 256, 256, 16, 2, 1, 700, False, False, (-1, -1), BHSD, 9, False, False),  # pack G = 8, one block per split
    (torch.bfloat16, 128, 128, 4, 4, 64, 2000, True, False, (-1, -1), BSHD, 4, True, False),  # top-left causal: empty splits
    (torch.float16, 128, 128, 8, 2, 300, 1500, False, True, (200, 0), BSHD, 3, False, False),  # several m-blocks, window
    (torch.bfloat16, 96, 96, 6, 3, 1, 257, False, False, (-1, -1), BHSD, 1, False, False),  # one split: the combine copies
]


@pytest.mark.parametrize(
    "case",
    SPLIT_CASES,
    ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]}-splits{c[11]}-sink{int(c[12])}",
)
def test_split_kv_matches_reference(case):
    """Split-KV plan through the adapter: fp32 partials in the caller's workspace (poisoned), combine kernel; O and LSE
    against the fp32 reference (LSE in log2 units when asked), including splits that see no key (LSE = -inf, weight 0)."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    dtype, d, dv, h, hk, sq, sk, causal, br, window, layout, splits, with_sinks, log2 = case
    b = 2
    q, k, v = _make((b, h, sq, d), dtype, layout), _make((b, hk, sk, d), dtype, layout), _make((b, hk, sk, dv), dtype, layout)
    out = poison(_make((b, h, sq, dv), dtype, layout))
    lse = poison(torch.empty(b, h, sq, device="cuda"))
    sinks = torch.randn(h, device="cuda") if with_sinks else None
    plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, causal_bottom_right=br, window_size=window, sinks=sinks, lse_log2=log2, split_kv=True)
    plan.compile()
    nbytes = plan.workspace_bytes_for(b, h, sq, hk, sk, splits)
    ws = torch.full((nbytes,), 0xFF, dtype=torch.uint8, device="cuda")  # NaN-patterned fp32 partials until written
    plan.execute(q, k, v, out, lse, sinks, workspace=ws, num_splits=splits)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, is_causal=causal, bottom_right=br, window=window, sinks=sinks)
    lowp, _ = attention_ref(q, k, v, is_causal=causal, bottom_right=br, window=window, sinks=sinks, upcast=False)
    assert_close_fa(out, ref, lowp, "o")
    got = lse / 1.4426950408889634 if log2 else lse
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(got), finite), "lse: -inf pattern differs from the reference"
    if finite.any():
        assert (got[finite] - ref_lse[finite]).abs().max().item() < 1e-3


def test_split_kv_execute_never_syncs_or_allocates_and_captures():
    """Rules 1-3 for the split path (two kernels, one workspace): no sync, no allocation; first execute inside CUDA-graph
    capture replays like eager."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn_testing import detectors

    q, k, v = _make((2, 32, 1, 128), torch.bfloat16, BSHD), _make((2, 8, 4096, 128), torch.bfloat16, BSHD), _make((2, 8, 4096, 128), torch.bfloat16, BSHD)
    o = torch.empty_like(q)
    plan = SdpaFwdSm90(q, k, v, o, split_kv=True)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, o, workspace=ws)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(q, k, v, o, workspace=ws))
    plan2 = SdpaFwdSm90(q, k, v, o, split_kv=True, is_causal=True, causal_bottom_right=True)
    plan2.compile()
    detectors.assert_capture_matches_eager(lambda: plan2.execute(q, k, v, o, workspace=ws), [o])


def test_sdpa_fwd_auto_split_decode_matches_unsplit():
    """``num_splits=0`` on a small decode batch picks a split plan; its output matches the unsplit kernel's within the
    FlashAttention rule (both against the fp32 reference)."""
    from cudnn.sdpa import sdpa_fwd
    from cudnn.sdpa.fwd.api import _PLANS

    q, k, v = _make((1, 32, 1, 128), torch.bfloat16, BSHD), _make((1, 8, 8192, 128), torch.bfloat16, BSHD), _make((1, 8, 8192, 128), torch.bfloat16, BSHD)
    o_split, lse_split = sdpa_fwd(q, k, v, num_splits=0, return_lse=True)
    assert any(p.key.split_kv for p in _PLANS.values())
    o_one, lse_one = sdpa_fwd(q, k, v, return_lse=True)
    torch.cuda.synchronize()
    _check(q, k, v, o_split, lse_split)
    _check(q, k, v, o_one, lse_one)


def _paged_inputs(lens_k, hk, d, page_size, dtype, extra_pages=3, seed=0):
    """Page pools with every sequence's pages shuffled through the pool (plus unused pages filled with large values,
    so a wrong page shows), the page table, cu_seqlens_kv, and the dense per-sequence K/V for the reference."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    max_pages = max(1, max(-(-n // page_size) for n in lens_k))
    pages = len(lens_k) * max_pages + extra_pages
    k_pool = torch.full((pages, page_size, hk, d), 30.0, dtype=dtype, device="cuda")
    v_pool = torch.full((pages, page_size, hk, d), -30.0, dtype=dtype, device="cuda")
    perm = torch.randperm(pages, generator=g).to(torch.int32)
    table = perm[: len(lens_k) * max_pages].view(len(lens_k), max_pages).contiguous()
    ks, vs = [], []
    for b, n in enumerate(lens_k):
        kb = torch.randn(n, hk, d, dtype=dtype, device="cuda")
        vb = torch.randn(n, hk, d, dtype=dtype, device="cuda")
        for j in range(-(-n // page_size)):
            rows = slice(j * page_size, min(n, (j + 1) * page_size))
            p = int(table[b, j])
            k_pool[p, : rows.stop - rows.start] = kb[rows]
            v_pool[p, : rows.stop - rows.start] = vb[rows]
        ks.append(kb)
        vs.append(vb)
    cu = [0]
    for n in lens_k:
        cu.append(cu[-1] + n)
    return k_pool, v_pool, table.cuda(), torch.tensor(cu, dtype=torch.int32, device="cuda"), ks, vs


# (dtype, d, h, h_kv, s_q, lens_k, page_size, causal, num_splits)
PAGED_CASES = [
    (torch.bfloat16, 128, 32, 8, 1, [4000, 1, 129, 8192], 256, True, None),  # decode, pack-GQA, unsplit
    (torch.bfloat16, 128, 32, 8, 1, [4000, 1, 129, 8192], 128, True, 0),  # decode, split-KV heuristic
    (torch.float16, 128, 8, 8, 200, [300, 700, 200], 128, True, None),  # prefill chunk, bottom-right causal
    (torch.bfloat16, 128, 16, 2, 5, [1000, 0, 640], 512, False, 3),  # speculative decode, an empty sequence, 3 splits
    # pages shorter than the key tile (one TMA per page into the stage; page-table window reloads every few blocks)
    (torch.bfloat16, 128, 32, 8, 1, [4000, 1, 129, 8192], 16, True, None),  # vLLM's page 16, G = 4
    (torch.bfloat16, 128, 32, 32, 1, [3000, 77], 32, True, 0),  # G = 1, split-KV heuristic (64 tiles: 2 splits)
    (torch.float16, 128, 16, 2, 5, [1000, 0, 640], 64, False, 3),  # G = 8, speculative decode, an empty sequence, 3 splits
    (torch.bfloat16, 64, 8, 8, 200, [300, 700, 200], 16, True, None),  # D = 64 (tile 192: 12 pages per block), prefill chunk
]


@pytest.mark.parametrize("case", PAGED_CASES, ids=lambda c: f"{str(c[0])[6:]}-h{c[2]}:{c[3]}-sq{c[4]}-page{c[6]}-c{int(c[7])}-splits{c[8]}")
def test_paged_kv_matches_reference(case):
    """Paged KV (shuffled pages, foreign values in unused pages) against the fp32 reference per sequence, through
    sdpa_fwd; causal is bottom-right (each sequence's queries are its last S_q positions)."""
    from cudnn.sdpa import sdpa_fwd

    dtype, d, h, hk, sq, lens_k, page_size, causal, splits = case
    b = len(lens_k)
    k_pool, v_pool, table, cu, ks, vs = _paged_inputs(lens_k, hk, d, page_size, dtype)
    q = _make((b, h, sq, d), dtype, BSHD)
    out = poison(_make((b, h, sq, d), dtype, BSHD))
    o, lse = sdpa_fwd(
        q, k_pool, v_pool, page_table=table, cu_seqlens_kv=cu, is_causal=causal, causal_bottom_right=True, out=out, return_lse=True, num_splits=splits
    )
    torch.cuda.synchronize()
    for i in range(b):
        kb, vb = ks[i].transpose(0, 1)[None], vs[i].transpose(0, 1)[None]
        if lens_k[i] == 0:
            assert (o[i].float().abs().max().item() == 0.0) and torch.isneginf(lse[i]).all()
            continue
        ref, ref_lse = attention_ref(q[i : i + 1], kb, vb, is_causal=causal, bottom_right=True)
        lowp, _ = attention_ref(q[i : i + 1], kb, vb, is_causal=causal, bottom_right=True, upcast=False)
        assert_close_fa(o[i : i + 1], ref, lowp, "o")
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse[i : i + 1]), finite)
        if finite.any():
            assert (lse[i : i + 1][finite] - ref_lse[finite]).abs().max().item() < 1e-3


def test_paged_execute_never_syncs_or_allocates_and_captures():
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn_testing import detectors

    k_pool, v_pool, table, cu, _, _ = _paged_inputs([3000, 8000], 8, 128, 256, torch.bfloat16)
    q = _make((2, 32, 1, 128), torch.bfloat16, BSHD)
    o = torch.empty_like(q)
    plan = SdpaFwdSm90(q, k_pool, v_pool, o, cu_seqlens_kv=cu, page_table=table, split_kv=True)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")

    def run():
        plan.execute(q, k_pool, v_pool, o, None, None, None, cu, workspace=ws, page_table=table)

    run()
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(run)
    plan2 = SdpaFwdSm90(q, k_pool, v_pool, o, cu_seqlens_kv=cu, page_table=table, is_causal=True, causal_bottom_right=True)
    plan2.compile()
    detectors.assert_capture_matches_eager(lambda: plan2.execute(q, k_pool, v_pool, o, None, None, None, cu, page_table=table), [o])


@pytest.mark.parametrize("split", [False, True])
def test_kv_stages_3_decode_matches_reference(split):
    """The 3-deep K/V ring (plan-time knob, d = 128) on a decode shape, with and without split-KV."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    q, k, v = _make((4, 32, 1, 128), torch.bfloat16, BSHD), _make((4, 8, 5000, 128), torch.bfloat16, BSHD), _make((4, 8, 5000, 128), torch.bfloat16, BSHD)
    out, lse = poison(torch.empty_like(q)), poison(torch.empty(4, 32, 1, device="cuda"))
    plan = SdpaFwdSm90(q, k, v, out, lse, kv_stages=3, split_kv=split)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda") if split else None
    plan.execute(q, k, v, out, lse, workspace=ws)
    torch.cuda.synchronize()
    _check(q, k, v, out, lse)


# Paged decode with the page-table prefetch (``page_prefetch=True``, the decode plan under A/B): the producer warp holds
# 32 page-table entries and re-reads them every 31 pages, so sequences of more than 31 pages cross window reloads.
# (h, h_kv, lens_k, page_size, split) with split None (one CTA per tile) or a forced split count.
PREFETCH_CASES = [
    (32, 32, [8960, 1, 129, 4000], 128, None),  # G = 1 (no pack-GQA), 70 pages: two window reloads
    (32, 8, [8960, 1, 129, 4000], 128, 5),  # G = 4, 5 splits: each split's own window
    (32, 4, [20000, 700, 3000], 256, None),  # G = 8, two key blocks per page, 79 pages
    (32, 8, [4000, 0, 129, 8192], 256, 0),  # G = 4, an empty sequence, the split heuristic (4 * 8 tiles)
]


@pytest.mark.parametrize("case", PREFETCH_CASES, ids=lambda c: f"h{c[0]}:{c[1]}-page{c[3]}-split{c[4]}")
def test_paged_decode_page_prefetch_matches_reference_and_default(case):
    """page_prefetch against the fp32 reference per sequence (with LSE), and bitwise against the default paged plan
    (the same arithmetic: only how the producer finds each block's page differs)."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    h, hk, lens_k, page_size, split = case
    b, d, dtype = len(lens_k), 128, torch.bfloat16
    k_pool, v_pool, table, cu, ks, vs = _paged_inputs(lens_k, hk, d, page_size, dtype, seed=7)
    q = _make((b, h, 1, d), dtype, BSHD)
    outs = []
    for prefetch in (True, False):
        o = poison(_make((b, h, 1, d), dtype, BSHD))
        lse = poison(torch.empty(b, h, 1, device="cuda"))
        kw = dict(cu_seqlens_kv=cu, page_table=table, is_causal=True, causal_bottom_right=True, split_kv=split is not None)
        plan = SdpaFwdSm90(q, k_pool, v_pool, o, lse, page_prefetch=prefetch, **kw)
        plan.compile()
        assert plan.key.page_prefetch == prefetch
        need = plan.workspace_bytes_for(b, h, 1, hk, table.shape[1] * page_size, split or None)
        ws = torch.empty(need, dtype=torch.uint8, device="cuda") if split is not None else None
        plan.execute(q, k_pool, v_pool, o, lse, None, None, cu, workspace=ws, num_splits=split or None, page_table=table)
        outs.append((o, lse))
    torch.cuda.synchronize()
    (o, lse), (o_ref_plan, lse_ref_plan) = outs
    assert torch.equal(o, o_ref_plan) and torch.equal(lse, lse_ref_plan), "page_prefetch differs from the default paged plan"
    for i in range(b):
        if lens_k[i] == 0:
            assert o[i].float().abs().max().item() == 0.0 and torch.isneginf(lse[i]).all()
            continue
        kb, vb = ks[i].transpose(0, 1)[None], vs[i].transpose(0, 1)[None]
        _check(q[i : i + 1], kb, vb, o[i : i + 1], lse[i : i + 1], is_causal=True, bottom_right=True)


def test_paged_decode_page_prefetch_never_syncs_or_allocates_and_captures():
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn_testing import detectors

    k_pool, v_pool, table, cu, _, _ = _paged_inputs([3000, 8000], 8, 128, 128, torch.bfloat16)
    q = _make((2, 32, 1, 128), torch.bfloat16, BSHD)
    o = torch.empty_like(q)
    plan = SdpaFwdSm90(q, k_pool, v_pool, o, cu_seqlens_kv=cu, page_table=table, is_causal=True, causal_bottom_right=True, page_prefetch=True)
    plan.compile()

    def run():
        plan.execute(q, k_pool, v_pool, o, None, None, None, cu, page_table=table)

    run()
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(run)
    detectors.assert_capture_matches_eager(run, [o])


# tile_m64 (64-row query tile, one consumer warpgroup: the decode plan under A/B). GQA ratios 1 / 4 / 8, with and
# without split-KV, LSE always; one speculative-decode shape and one multi-tile causal prefill keep the general path honest.
# (dtype, d, h, h_kv, s_q, s_kv, causal, split)
M64_CASES = [
    (torch.bfloat16, 128, 32, 32, 1, 3000, False, False),  # G = 1
    (torch.bfloat16, 128, 32, 8, 1, 8192, False, False),  # G = 4, pack-GQA
    (torch.bfloat16, 128, 32, 4, 1, 5000, True, True),  # G = 8, pack-GQA, split-KV
    (torch.float16, 64, 16, 2, 3, 1000, True, True),  # speculative decode: 24 packed rows, split-KV
    (torch.bfloat16, 128, 8, 8, 200, 333, True, False),  # S_q = 200: four 64-row tiles, bottom-right causal
]


@pytest.mark.parametrize("case", M64_CASES, ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[2]}:{c[3]}-sq{c[4]}-skv{c[5]}-c{int(c[6])}-split{int(c[7])}")
def test_tile_m64_matches_reference(case):
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    dtype, d, h, hk, sq, sk, causal, split = case
    b = 3
    q, k, v = _make((b, h, sq, d), dtype, BSHD), _make((b, hk, sk, d), dtype, BSHD), _make((b, hk, sk, d), dtype, BSHD)
    out, lse = poison(torch.empty_like(q)), poison(torch.empty(b, h, sq, device="cuda"))
    plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, causal_bottom_right=True, tile_m64=True, split_kv=split)
    plan.compile()
    assert plan.key.tile_m64
    ws = torch.empty(plan.workspace_bytes_for(b, h, sq, hk, sk, 4), dtype=torch.uint8, device="cuda") if split else None
    plan.execute(q, k, v, out, lse, workspace=ws, num_splits=4 if split else None)
    torch.cuda.synchronize()
    _check(q, k, v, out, lse, is_causal=causal, bottom_right=True)


@pytest.mark.parametrize("split", [None, 0])
def test_paged_decode_tile_m64_with_prefetch_matches_reference(split):
    """tile_m64 and page_prefetch together on paged decode (G = 4, window reloads), unsplit and split."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    lens_k, hk, h, d = [8960, 1, 129, 4000], 8, 32, 128
    b = len(lens_k)
    k_pool, v_pool, table, cu, ks, vs = _paged_inputs(lens_k, hk, d, 128, torch.bfloat16, seed=3)
    q = _make((b, h, 1, d), torch.bfloat16, BSHD)
    o, lse = poison(_make((b, h, 1, d), torch.bfloat16, BSHD)), poison(torch.empty(b, h, 1, device="cuda"))
    plan = SdpaFwdSm90(
        q, k_pool, v_pool, o, lse, cu_seqlens_kv=cu, page_table=table, is_causal=True, causal_bottom_right=True,
        page_prefetch=True, tile_m64=True, split_kv=split is not None,
    )  # fmt: skip
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda") if split is not None else None
    plan.execute(q, k_pool, v_pool, o, lse, None, None, cu, workspace=ws, page_table=table)
    torch.cuda.synchronize()
    for i in range(b):
        kb, vb = ks[i].transpose(0, 1)[None], vs[i].transpose(0, 1)[None]
        _check(q[i : i + 1], kb, vb, o[i : i + 1], lse[i : i + 1], is_causal=True, bottom_right=True)
