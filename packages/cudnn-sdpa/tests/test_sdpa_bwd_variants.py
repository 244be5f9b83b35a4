"""GPU correctness of the backward main kernel's schedule variants (compile-key options, default off; see
cudnn.sdpa.bwd.kernel_key.TUNING_FIELDS), against fp32 autograd by the FlashAttention rule, like test_sdpa_bwd_gpu.py:

- ``dq_tma``: dQ partials staged in shared memory, one TMA reduce-add (cp.reduce.async.bulk.tensor) per warpgroup;
- ``stats_tma``: lse_log2 / dpsum rows bulk-copied (cp.async.bulk) into shared memory with Q / dO;
- ``ds2``: double-buffered dS^T (one barrier less per query block);
- ``prepost``: coalesced pre/postprocess (four threads per query row; the sink partials keep their layout);
- ``split_d``: the split-head-dim main kernel (kernel_splitd_sm90.py), which serves D = 256 (and 128);
- ``dq_bulk``: the dQ partial in MMA-fragment order, one non-tensor bulk reduce-add per warpgroup into a
  fragment-ordered accumulator that the postprocess reads back; ``dq_writer``: those reduce-adds issued by a warp of
  the producer warpgroup (with dq_bulk, or with dq_tma: the TMA reduce-adds);
- ``m80`` (with dq_tma): query blocks of 80 rows (FA3 / FA4's d128 tile), dQ computed transposed (dQ^T = K^T dS^T)
  and staged through a 128-byte swizzle for the TMA reduce-add; a last block past the 128-row scratch padding takes
  the masked path (rows past S_q masked). Dense D = 128 only (d64 / varlen are refused: test_sdpa_bwd_variants_compile.py);
- ``dqt`` (with dq_tma): m80's transposed dQ^T and 128-byte-swizzled staging at 64 rows (D = 128, dense or varlen);
- ``m128`` (D = 64): query blocks of 128 rows (FA3 / FA4's d64 tile), with dq_bulk + dq_writer (two bulk reduce-adds
  per warpgroup: one per 64-row fragment-ordered half), dq_tma or the atomic dQ path.

Pruned for compile time (each variant key is one main-kernel compile): the first four together meet every mask
family, GQA / MQA, both layouts, odd lengths, sinks and THD varlen; dq_tma alone meets one GQA causal case with odd
lengths and the other three together (they keep the deterministic mode) meet it on varlen, bitwise-reproducible, so a
failure of the four together points at one side; split_d meets d256 with every mask family, GQA, odd lengths and
varlen, and d128 against the same reference; split_d with ds2 meets d256 dense and varlen; dq_bulk + dq_writer (with
stats_tma, ds2, prepost) meet d128 GQA causal with odd lengths, d64 fp16 two-sided window, d96 bottom-right window
(BHSD), varlen and sinks; dq_bulk without the writer meets MQA bottom-right and varlen; ``_l2_group_dq`` (a launch
argument) meets d128 causal at S = 4096. m80 (with dq_tma, stats_tma, ds2, prepost) meets a last query block past the
scratch padding (S = 1000: 13 blocks of 80 = 1040 rows > 1024), GQA causal with odd lengths, MQA bottom-right (fp16),
S_q > S_kv bottom-right and a two-sided window past the padding; with dq_writer ("M80W") GQA causal past the padding and
the benchmark's non-causal S = 4096; dq_tma + dq_writer at 64 rows ("TMAW") meets GQA causal odd lengths, d64 fp16
window, varlen and sinks; dqt meets GQA causal with odd lengths and (with the writer) varlen. 26 + 13 tests, ~38
compiles: about 180 s on the H200 host (the new ones alone, ``-k "m80 or dqt or dq_tma+dq_writer"``: 13 tests, 13
compiles, about 70 s). m128 (``-k m128``: 5 tests, 5 keys, about 45 s) meets GQA causal at S = 1000 (a last block
past S_q), a single partial block of 77 rows (non-causal), MQA bottom-right with dq_tma, a two-sided window on the atomic
path and THD varlen (empty / one-token sequences) with the writer warp. Session 8's instruction-overhead variants
(``-k "pack1 or dqrows"``: 7 tests, 7 keys, about 50 s): the non-causal default + pack1 + dsk at S = 1000 (partial
last key and query blocks) and fp16 d64 with a two-sided window (cvt.rn.f16x2), the causal default + pack1 + dsk GQA at
S = 1000 and on varlen; m128 + pack1 + dsk + dqrows + stats4 GQA causal at S = 1000, a single partial block of 77 rows
and varlen. Session 9's m80 + dq_bulk + pack1 (``-k "m80 and pack1"``: 4 tests, 4 keys, about 30 s): with the writer warp
GQA causal at S = 1000 (13 blocks of 80 = 1040 rows, the scratch padded to 1152) and a single partial block of 77 rows;
from the consumers non-causal at S = 1000 (partial last key and query blocks) and fp16 MQA causal bottom-right.
"""

from __future__ import annotations

import pytest

from cudnn_testing.data import poison
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref, attention_ref_varlen
from cudnn_testing.reference_attention_bwd import assert_dsinks_close, attention_grads_ref, attention_grads_ref_varlen
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BHSD, BSHD = (0, 1, 2, 3), (0, 2, 1, 3)
ALL = ("dq_tma", "stats_tma", "ds2", "prepost")
SPLIT = ("split_d", "prepost")
SPLIT2 = ("split_d", "ds2", "prepost")
BULK = ("dq_bulk", "stats_tma", "ds2", "prepost")
BULKW = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost")
M80 = ("dq_tma", "stats_tma", "ds2", "prepost", "m80")
M80W = ("dq_tma", "dq_writer", "stats_tma", "ds2", "prepost", "m80")
TMAW = ("dq_tma", "dq_writer", "stats_tma", "ds2", "prepost")
DQT = ("dq_tma", "stats_tma", "ds2", "prepost", "dqt")
# m128 (session 8): 128-row query blocks at D = 64 with the default-like dq_bulk + dq_writer schedule (benchmarks'
# "ours-m128"), with dq_tma from the consumers, and with the atomic dQ path
M128W = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128")
M128T = ("dq_tma", "stats_tma", "ds2", "prepost", "m128")
M128A = ("stats_tma", "ds2", "m128")
# session 8 (issue #6, instruction overhead vs FA4): the non-causal / causal defaults (DEFAULT_TUNING / CAUSAL_TUNING)
# plus pack1 (P^T / dS^T converted once) and dsk (dS stored K-major by transposed stmatrix: the dQ GEMM's A K-major),
# and m128 with those, dqrows (dQ's 128 rows split over the warpgroups, one 64-row block per bulk reduce-add) and
# stats4 (lse_log2 / dpsum stored permuted by the preprocess: one 16-byte load per four columns)
PD = ("dq_bulk", "stats_tma", "ds2", "prepost", "pack1", "dsk")
PDC = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "pack1", "dsk")
M128X = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128", "pack1", "dsk", "dqrows", "stats4")
M128E = M128X + ("stearly",)  # session 16: stats4's words loaded before the WGMMA waits
# session 9 (issue #6): m80 with dq_bulk (80-row fragment-ordered dQ^T blocks, one bulk reduce-add per warpgroup; the
# scratch padded to whole 80-row blocks) and pack1, from the consumers and from the writer warp (benchmarks' ours-m80b /
# ours-m80bw)
M80B = ("dq_bulk", "stats_tma", "ds2", "prepost", "m80", "pack1")
M80BW = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m80", "pack1")


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def _make(shape, dtype, perm):
    stored = [shape[p] for p in perm]
    base = torch.randn(stored, dtype=torch.float32, device="cuda").to(dtype)
    inv = [perm.index(i) for i in range(4)]
    return base.permute(*inv)


def _run(tuning, q, k, v, o, do, lse, dq, dk, dv, **kw):
    """One plan with ``_tuning`` (the wrapper has no such switch): check_support, compile, execute on caller scratch."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, workspace_bytes_for

    plan = SdpaBwdSm90(q, k, v, o, do, lse, dq, dk, dv, _tuning=tuning, **kw)
    plan.check_support()
    plan.compile()
    cu_q = kw.get("cu_seqlens_q")
    sinks = kw.get("sinks")
    dsinks = poison(torch.empty_like(sinks)) if sinks is not None else None
    ws = torch.empty(workspace_bytes_for(plan, q, cu_q), dtype=torch.uint8, device="cuda")
    poison(ws.view(torch.float32))  # the preprocess must (re)initialize every scratch row the main kernel reads
    varlen = {n: kw[n] for n in ("cu_seqlens_q", "cu_seqlens_kv", "max_seqlen_q", "max_seqlen_kv") if n in kw}
    plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws, sinks, dsinks, **varlen)
    torch.cuda.synchronize()
    return plan, dsinks


# (tuning, dtype, d, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout)
CASES = [
    (ALL, torch.bfloat16, 128, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (ALL, torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (ALL, torch.bfloat16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA, bottom-right
    (ALL, torch.bfloat16, 128, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (ALL, torch.float16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # two-sided window: key blocks no query sees
    (ALL, torch.bfloat16, 96, 6, 3, 211, 389, False, True, (100, 0), BHSD),  # d96 (3 TMA boxes per dQ half), window
    (("dq_tma",), torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),
    (SPLIT, torch.bfloat16, 256, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (SPLIT, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (SPLIT, torch.bfloat16, 256, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (SPLIT, torch.float16, 256, 4, 2, 500, 700, False, False, (70, 33), BHSD),  # two-sided window
    (SPLIT, torch.bfloat16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # d128 through the split-D kernel, MQA
    (SPLIT2, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # double-buffered P^T / dS^T
    (BULKW, torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths: a partial last block
    (BULKW, torch.float16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # key blocks no query sees: no reduce
    (BULKW, torch.bfloat16, 96, 6, 3, 211, 389, False, True, (100, 0), BHSD),
    (BULK, torch.bfloat16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA: 8 heads through one CTA's buffer
    (M80, torch.bfloat16, 128, 4, 4, 1000, 1000, False, False, (-1, -1), BSHD),  # last block (rows 960..1039) past the 1024 padded rows
    (M80, torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (M80, torch.float16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA, bottom-right
    (M80, torch.bfloat16, 128, 4, 4, 700, 129, True, True, (-1, -1), BSHD),  # S_q > S_kv bottom-right: empty rows
    (M80, torch.bfloat16, 128, 4, 2, 500, 700, False, False, (70, 33), BHSD),  # two-sided window, last block past the padding
    (M80W, torch.bfloat16, 128, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # the writer warp's TMA reduce-adds, GQA
    (M80W, torch.bfloat16, 128, 4, 4, 4096, 4096, False, False, (-1, -1), BSHD),  # the benchmark's case: 52 blocks, 4160 > 4096 rows
    (TMAW, torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # dq_tma's reduce-adds from the writer warp
    (TMAW, torch.float16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # d64, key blocks no query sees
    (DQT, torch.bfloat16, 128, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # dQ^T at 64 rows, odd lengths, GQA 4
    (M128W, torch.bfloat16, 64, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal; last block rows 896..1023 past S_q
    (M128W, torch.bfloat16, 64, 4, 4, 77, 300, False, False, (-1, -1), BHSD),  # one partial query block of 77 rows
    (M128T, torch.float16, 64, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA bottom-right, dq_tma's reduce-adds
    (M128A, torch.float16, 64, 4, 2, 500, 700, False, False, (70, 33), BSHD),  # atomics, two-sided window: blocks no query sees
    (PD, torch.bfloat16, 128, 4, 4, 1000, 1000, False, False, (-1, -1), BSHD),  # ragged: a partial last key and query block
    (PDC, torch.bfloat16, 128, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal, ragged
    (PD, torch.float16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # fp16 (cvt.rn.f16x2), two-sided window
    (M128X, torch.bfloat16, 64, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal; last block past S_q
    (M128X, torch.bfloat16, 64, 4, 4, 77, 300, False, False, (-1, -1), BHSD),  # one partial query block of 77 rows
    (M128E, torch.bfloat16, 64, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal (spills 48 B); last block past S_q
    (M128E, torch.bfloat16, 64, 4, 4, 77, 300, False, False, (-1, -1), BHSD),  # one partial query block of 77 rows
    (M128E, torch.float16, 64, 8, 8, 1024, 1024, True, False, (-1, -1), BSHD),  # causal, no GQA (the benchmark's form)
    (M80BW, torch.bfloat16, 128, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal; 13 blocks = 1040 rows, 1152 padded
    (M80BW, torch.bfloat16, 128, 4, 4, 77, 300, False, False, (-1, -1), BHSD),  # one partial query block of 77 rows
    (M80B, torch.bfloat16, 128, 4, 4, 1000, 1000, False, False, (-1, -1), BSHD),  # ragged: partial last key and query blocks
    (M80B, torch.float16, 128, 8, 1, 257, 700, True, True, (-1, -1), BHSD),  # MQA bottom-right, fp16 (cvt.rn.f16x2)
]


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: (
        f"{'+'.join(c[0])}-{str(c[1])[6:]}-d{c[2]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]},{c[9][1]}-{'bshd' if c[10] == BSHD else 'bhsd'}"
    ),
)
def test_variant_grads_match_reference(case):
    tuning, dtype, d, h, hk, sq, sk, causal, br, window, layout = case
    b = 2
    q, k, v = _make((b, h, sq, d), dtype, layout), _make((b, hk, sk, d), dtype, layout), _make((b, hk, sk, d), dtype, layout)
    do = _make((b, h, sq, d), dtype, layout)
    kw = dict(is_causal=causal, bottom_right=br, window=window)
    o, lse = attention_ref(q, k, v, **kw)
    o, lse = o.to(dtype), lse.float()
    dq, dk, dv = (poison(_make(x.shape, dtype, layout)) for x in (q, k, v))
    plan, _ = _run(tuning, q, k, v, o, do, lse, dq, dk, dv, is_causal=causal, causal_bottom_right=br, window_size=window)
    assert plan.key.dq_tma == ("dq_tma" in tuning) and plan.key.stats_tma == ("stats_tma" in tuning)
    assert plan.key.ds_double_buffer == ("ds2" in tuning) and plan.key.prepost_vec == ("prepost" in tuning)
    assert plan.key.split_d == ("split_d" in tuning)
    assert plan.key.dq_bulk == ("dq_bulk" in tuning) and plan.key.dq_writer == ("dq_writer" in tuning)
    assert plan.key.tile_m80 == ("m80" in tuning) and plan.key.dq_t128 == ("dqt" in tuning)
    assert plan.key.tile_m128 == ("m128" in tuning)
    assert plan.key.pack_once == ("pack1" in tuning) and plan.key.ds_kmajor == ("dsk" in tuning) and plan.key.dq_rows == ("dqrows" in tuning)
    assert plan.key.stats_vec4 == ("stats4" in tuning)
    assert plan.key.sdp_wg == ("sdpwg" in tuning) and plan.key.dkv_rs == ("dkvrs" in tuning) and plan.key.dkv_early == ("dkvearly" in tuning)
    assert plan.key.spin_wait == ("spin" in tuning) and plan.key.kv_with_q == ("kvq" in tuning)
    assert plan.key.pdl == ("pdl" in tuning) and plan.key.kv_prefetch == ("kvpf" in tuning)
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)


# (tuning, deterministic, dtype, d, h, h_kv, lens_q, lens_kv, causal, bottom_right, window)
VARLEN = [
    (ALL, False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (("stats_tma", "ds2", "prepost"), True, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (SPLIT, False, torch.bfloat16, 256, 4, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (SPLIT2, False, torch.float16, 256, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
    (BULKW, False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (BULK, False, torch.float16, 64, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
    (TMAW, False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (("dq_tma", "dq_writer", "stats_tma", "ds2", "prepost", "dqt"), False, torch.bfloat16, 128, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
    # m128: per-sequence 128-row padding, empty and one-token sequences, GQA causal bottom-right
    (M128W, False, torch.bfloat16, 64, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    # session 8: the causal default + pack1 + dsk, and m128 + pack1 + dsk + dqrows + stats4 (per-sequence 128-row
    # padding: the permuted stats rows stay inside each sequence's 16-row groups)
    (PDC, False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (M128X, False, torch.bfloat16, 64, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (M128E, False, torch.bfloat16, 64, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    # session 20: stats4 (+ stearly) at the 64-row blocks of the causal default; dqfs (its flags from each sequence's
    # first scratch row: empty, one-token and unreached blocks) at 64 and 128 rows
    (BULKW + ("stats4", "stearly"), False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (BULKW + ("dqfs",), False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (M128X + ("dqfs",), False, torch.bfloat16, 64, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (BULKW + ("dqfs",), False, torch.float16, 128, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
]


@pytest.mark.parametrize("case", VARLEN, ids=lambda c: f"{'+'.join(c[0])}-det{int(c[1])}-d{c[3]}-{len(c[6])}seqs")
def test_variant_thd_varlen_grads_match_reference(case):
    tuning, deterministic, dtype, d, h, hk, lens_q, lens_k, causal, br, window = case
    cu_q, cu_k = [0], [0]
    for a, b in zip(lens_q, lens_k, strict=False):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + b)
    q = torch.randn(cu_q[-1], h, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(cu_k[-1], hk, d, device="cuda", dtype=dtype) for _ in range(2))
    do = torch.randn_like(q)
    kw = dict(is_causal=causal, bottom_right=br, window=window)
    o, lse = attention_ref_varlen(q, k, v, cu_q, cu_k, **kw)
    o, lse = o.to(dtype), lse.float().contiguous()
    tq, tk = torch.tensor(cu_q, dtype=torch.int32, device="cuda"), torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    opts = dict(
        is_causal=causal, causal_bottom_right=br, window_size=window, cu_seqlens_q=tq, cu_seqlens_kv=tk,
        max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_k), deterministic=deterministic,
    )  # fmt: skip
    runs = []
    for _ in range(2 if deterministic else 1):
        grads = tuple(poison(torch.empty_like(x)) for x in (q, k, v))
        plan, _ = _run(tuning, q, k, v, o, do, lse, *grads, **opts)
        assert plan.key.spin_wait == ("spin" in tuning) and plan.key.kv_with_q == ("kvq" in tuning)
        assert plan.key.pdl == ("pdl" in tuning)
        runs.append(grads)
    for other in runs[1:]:
        for name, a, c in zip(("dq", "dk", "dv"), runs[0], other, strict=False):
            assert torch.equal(a, c), f"{name} differs between deterministic runs"
    ref = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, **kw)
    lowp = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), runs[0], ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)


@pytest.mark.parametrize("tuning", [ALL, BULKW, TMAW], ids=["all", "bulkw", "dq_tma+dq_writer"])
def test_all_variants_with_sinks_and_their_gradient(tuning):
    b, h, hk, s, d = 2, 8, 2, 333, 64
    q, k, v, do = (_make((b, x, s, d), torch.bfloat16, BSHD) for x in (h, hk, hk, h))
    sinks = torch.randn(h, device="cuda") * 2
    o, lse = attention_ref(q, k, v, is_causal=True, sinks=sinks)
    o, lse = o.to(q.dtype), lse.float()
    dq, dk, dv = (poison(torch.empty_like(x)) for x in (q, k, v))
    _, dsinks = _run(tuning, q, k, v, o, do, lse, dq, dk, dv, is_causal=True, sinks=sinks)
    ref = attention_grads_ref(q, k, v, do, is_causal=True, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True, sinks=sinks)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)
    assert_dsinks_close(dsinks, o, do, lse, sinks, ref, lowp)  # the rule of test_sdpa_bwd_gpu.py's sinks test


def test_l2dq_launch_order_grads_match_reference():
    """The plan's private ``_l2_group_dq`` (ours-l2dq): the same kernels in another tile order (at S = 4096, d128: L2
    groups of 4 (kv head, batch) pairs instead of 8, so 16 pairs run in 4 groups instead of 2)."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, _group_heads, workspace_bytes_for

    b, h, s, d = 2, 8, 4096, 128
    q, k, v, do = (_make((b, h, s, d), torch.bfloat16, BSHD) for _ in range(4))
    o, lse = attention_ref(q, k, v, is_causal=True)
    o, lse = o.to(q.dtype), lse.float()
    dq, dk, dv = (poison(torch.empty_like(x)) for x in (q, k, v))
    plan = SdpaBwdSm90(q, k, v, o, do, lse, dq, dk, dv, is_causal=True, _tuning=ALL, _l2_group_dq=True)
    plan.check_support()
    plan.compile()
    assert _group_heads(plan.key, s, True) == 4 and _group_heads(plan.key, s) == 8
    ws = torch.empty(workspace_bytes_for(plan, q), dtype=torch.uint8, device="cuda")
    poison(ws.view(torch.float32))
    plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)
    torch.cuda.synchronize()
    ref = attention_grads_ref(q, k, v, do, is_causal=True)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)


# ---------------------------------------------------------------------------------------------------------------------
# d256 (issue #6): split_d with FA4's dQ path (``dq_bulk``: one 64 x 128 dQ GEMM per warpgroup, fragment-ordered
# staging, one bulk reduce-add per warpgroup; one Q / dO stage; the P^T / dS^T buffer pair chosen by the pipeline phase
# with ds2). Pruned like SPLIT's grid: the writer warp with ds2 (dense, GQA causal odd lengths, varlen); without both
# (SPLITB1) one two-sided window. ``sdpwg`` (S^T on warpgroup 1, dP^T on warpgroup 2, each 64 x 64; dS^T from P^T read
# back in bf16) meets GQA causal odd lengths and a window; ``dkvrs`` (with sdpwg: dV whole on warpgroup 1, dK whole on
# warpgroup 2, RS WGMMAs 64 x 256 from the P^T / dS^T registers; the d256 default since session 5, D256_TUNING) meets
# dense, GQA causal odd lengths, bottom-right with empty rows, a two-sided window, varlen and (below) sinks and a plan
# built without ``_tuning``. ``dkvearly`` (SPLITR2, on dkvrs: the RS GEMMs issued before the P^T / dS^T barrier from
# one call site, B = sQ's fragment shifted to sdO for warpgroup 1, Q / dO released per warpgroup, dO loaded first)
# meets the same grid as SPLITR: dense, GQA causal odd lengths, bottom-right empty rows, a two-sided window (fp16),
# varlen, sinks. (Session 4's cluster2 / dqpair variants lost on the H200 and were removed in session 5.)
# 15 + 4 + 2 tests, 13 main-kernel compiles: about 80 s on the H200 host (``-k dkvearly``: 7 tests, about 35 s).
SPLITB = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost")
SPLITB1 = ("split_d", "dq_bulk", "prepost")
SPLITW = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg")
SPLITR = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs")
SPLITR2 = SPLITR + ("dkvearly",)

D256_CASES = [
    (SPLITB, torch.bfloat16, 256, 4, 4, 512, 512, False, False, (-1, -1), BHSD),
    (SPLITB, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (SPLITB1, torch.float16, 256, 4, 2, 500, 700, False, False, (70, 33), BHSD),  # two-sided window, consumers issue the adds
    (SPLITW, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # S^T / dP^T one per warpgroup, P^T via bf16
    (SPLITW, torch.float16, 256, 4, 2, 500, 700, False, False, (70, 33), BHSD),
    (SPLITR, torch.bfloat16, 256, 4, 4, 512, 512, False, False, (-1, -1), BHSD),  # dV / dK whole on one warpgroup each (RS)
    (SPLITR, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (SPLITR, torch.float16, 256, 4, 4, 700, 129, True, True, (-1, -1), BHSD),  # S_q > S_kv bottom-right: empty rows
    (SPLITR, torch.float16, 256, 4, 2, 500, 700, False, False, (70, 33), BHSD),  # two-sided window: key blocks no query sees
    (SPLITR2, torch.bfloat16, 256, 4, 4, 512, 512, False, False, (-1, -1), BHSD),  # RS GEMMs before the barrier, one call site
    (SPLITR2, torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD),  # odd lengths, GQA 4
    (SPLITR2, torch.float16, 256, 4, 4, 700, 129, True, True, (-1, -1), BHSD),  # S_q > S_kv bottom-right: empty rows
    (SPLITR2, torch.float16, 256, 4, 2, 500, 700, False, False, (70, 33), BHSD),  # two-sided window: key blocks no query sees
]


@pytest.mark.parametrize(
    "case",
    D256_CASES,
    ids=lambda c: f"{'+'.join(c[0])}-{str(c[1])[6:]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]},{c[9][1]}",
)
def test_d256_bulk_grads_match_reference(case):
    test_variant_grads_match_reference(case)


D256_VARLEN = [
    (SPLITB, False, torch.bfloat16, 256, 4, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (SPLITR, False, torch.bfloat16, 256, 4, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
    (SPLITR, False, torch.float16, 256, 4, 4, [1000, 33, 257], [1000, 33, 257], False, False, (-1, -1)),
    (SPLITR2, False, torch.bfloat16, 256, 4, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1)),
]


@pytest.mark.parametrize("case", D256_VARLEN, ids=lambda c: f"{'+'.join(c[0])}-{str(c[2])[6:]}-{len(c[6])}seqs")
def test_d256_bulk_thd_varlen_grads_match_reference(case):
    test_variant_thd_varlen_grads_match_reference(case)


@pytest.mark.parametrize("tuning", [None, SPLITR2], ids=["d256-default", "dkvearly"])
def test_d256_with_sinks_and_their_gradient(tuning):
    """d256 with sinks, GQA causal, odd length: the plan built without ``_tuning`` (D256_TUNING, the dkvrs schedule) and
    dkvearly; dsinks by the rule of test_sdpa_bwd_gpu.py's sinks test (exact from the o and lse given, and vs fp32)."""
    from cudnn.sdpa.bwd import api

    b, h, hk, s, d = 2, 8, 2, 333, 256
    q, k, v, do = (_make((b, x, s, d), torch.bfloat16, BSHD) for x in (h, hk, hk, h))
    sinks = torch.randn(h, device="cuda") * 2
    o, lse = attention_ref(q, k, v, is_causal=True, sinks=sinks)
    o, lse = o.to(q.dtype), lse.float()
    dq, dk, dv = (poison(torch.empty_like(x)) for x in (q, k, v))
    plan, dsinks = _run(tuning, q, k, v, o, do, lse, dq, dk, dv, is_causal=True, sinks=sinks)
    assert plan.key.split_d and plan.key.dkv_rs and plan.key.dkv_early == ("dkvearly" in plan._tuning)
    assert plan._tuning == (api.D256_TUNING if tuning is None else tuning)
    ref = attention_grads_ref(q, k, v, do, is_causal=True, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True, sinks=sinks)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, lowp, strict=False):
        assert_close_fa(g, r, lp, name)
    assert_dsinks_close(dsinks, o, do, lse, sinks, ref, lowp)


# ---------------------------------------------------------------------------------------------------------------------
# Fixed-cost variants (notes/bwd_fixed_cost.md A / B): ``spin`` (the consumers' K / V, Q and dO waits spin on a
# hint-less try_wait, no NANOSLEEP; results bitwise those of the schedule without it) and ``kvq`` (K on the CTA's first Q
# stage's barrier, V on its first dO stage's; no K / V barrier), each and together, on top of the case's own default
# (bwd/api.py: CAUSAL_TUNING at d128 causal, D128_NONCAUSAL_TUNING (m80) at d128 non-causal, D64_TUNING (m128) at d64,
# DEFAULT_TUNING for a varlen window plan). The d64 two-sided window and the varlen window (GQA; empty and one-token
# sequences) have key blocks that no query block sees: kvq loads no K / V there and the epilogue writes sK / sV with no
# TMA in flight. ``pdl`` (Programmatic Dependent Launch of the three kernels; K / V issued before the main kernel's
# griddepcontrol.wait) alone and with kvq (K only before the wait) on the same grid. 20 tests, 20 main-kernel compiles.
FIXED_COST = [("spin",), ("kvq",), ("spin", "kvq"), ("pdl",), ("kvq", "pdl")]
# (default tuning's name in bwd/api.py, dtype, d, h, h_kv, s_q, s_kv, causal, bottom_right, window, layout)
FIXED_COST_DENSE = [
    ("CAUSAL_TUNING", torch.bfloat16, 128, 8, 2, 1000, 1000, True, False, (-1, -1), BSHD),  # GQA causal, ragged
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 4, 4, 1000, 1000, False, False, (-1, -1), BSHD),  # m80, last block past the padding
    ("D64_TUNING", torch.float16, 64, 4, 4, 500, 700, False, False, (70, 33), BSHD),  # m128, key blocks no query sees
]


@pytest.mark.parametrize("extra", FIXED_COST, ids=["+".join(e) for e in FIXED_COST])
@pytest.mark.parametrize("case", FIXED_COST_DENSE, ids=["d128-causal-gqa", "d128-noncausal-m80", "d64-m128-window"])
def test_fixed_cost_variant_grads_match_reference(case, extra):
    from cudnn.sdpa.bwd import api

    base = getattr(api, case[0])
    own = api._default_tuning(case[2], case[2], False, case[7], case[9] == (-1, -1))
    assert base == tuple(t for t in own if t != "pers")  # the case's own default, without the persistent grid (refuses kvq / pdl)
    test_variant_grads_match_reference((tuple(base) + extra,) + case[1:])


@pytest.mark.parametrize("extra", FIXED_COST, ids=["+".join(e) for e in FIXED_COST])
def test_fixed_cost_variant_varlen_gqa_window_grads_match_reference(extra):
    """THD varlen, GQA 4, two-sided window (70, 33) on DEFAULT_TUNING (a window plan's default) + ``extra``; the plan's
    key carries spin_wait / kv_with_q."""
    from cudnn.sdpa.bwd import api

    assert api._default_tuning(128, 128, False, False, False) == api.DEFAULT_TUNING
    tuning = tuple(api.DEFAULT_TUNING) + extra
    case = (tuning, False, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], False, False, (70, 33))
    test_variant_thd_varlen_grads_match_reference(case)


# ---------------------------------------------------------------------------------------------------------------------
# pdl on the other main kernels and launch paths: the d256 default (split-D bulk), the d192 default (n96), a
# deterministic varlen plan (bitwise reproducible; the turn counters are zeroed by the preprocess the main kernel's
# consumers wait for), back-to-back executes on one workspace without a sync (the next preprocess rewrites the scratch
# the previous postprocess reads: it waits first), and a first execute inside CUDA-graph capture (programmatic edges)
# replayed against eager.
def test_pdl_d256_default_grads_match_reference():
    from cudnn.sdpa.bwd import api

    test_variant_grads_match_reference((tuple(api.D256_TUNING) + ("pdl",), torch.bfloat16, 256, 8, 2, 300, 257, True, False, (-1, -1), BSHD))


@pytest.mark.parametrize("window", [(-1, -1), (70, 33)], ids=["causal", "window"])
def test_pdl_d192_default_grads_match_reference(window):
    from cudnn.sdpa.bwd import api

    b, h, hk, s, d, dv = 2, 8, 2, 1000, 192, 128
    causal = window == (-1, -1)
    q, k = _make((b, h, s, d), torch.bfloat16, BSHD), _make((b, hk, s, d), torch.bfloat16, BSHD)
    v, do = _make((b, hk, s, dv), torch.bfloat16, BSHD), _make((b, h, s, dv), torch.bfloat16, BSHD)
    kw = dict(is_causal=causal, window=window)
    o, lse = attention_ref(q, k, v, **kw)
    o, lse = o.to(q.dtype), lse.float()
    dq, dk, dv_ = (poison(torch.empty_like(x)) for x in (q, k, v))
    plan, _ = _run(tuple(api.D192_TUNING) + ("pdl",), q, k, v, o, do, lse, dq, dk, dv_, is_causal=causal, window_size=window)
    assert plan.key.tile_n96 and plan.key.pdl
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv_), ref, lowp, strict=True):
        assert_close_fa(g, r, lp, name)


def test_pdl_deterministic_varlen_is_bitwise_reproducible_and_correct():
    case = (("stats_tma", "ds2", "prepost", "pdl"), True, torch.bfloat16, 128, 8, 2, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64], True, True, (-1, -1))
    test_variant_thd_varlen_grads_match_reference(case)


def _pdl_plan(deterministic=False):
    """A compiled d128 causal plan with pdl on the case's default (``deterministic``: its deterministic schedule), its
    inputs and a workspace (GQA 4, ragged length)."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, workspace_bytes_for

    b, h, hk, s, d = 2, 8, 2, 1000, 128
    q, do = (_make((b, h, s, d), torch.bfloat16, BSHD) for _ in range(2))
    k, v = (_make((b, hk, s, d), torch.bfloat16, BSHD) for _ in range(2))
    o, lse = attention_ref(q, k, v, is_causal=True)
    o, lse = o.to(q.dtype), lse.float()
    tuning = api._default_tuning(d, d, deterministic, True) + ("pdl",)
    plan = SdpaBwdSm90(q, k, v, o, do, lse, is_causal=True, deterministic=deterministic, _tuning=tuning)
    plan.check_support()
    plan.compile()
    assert plan.key.pdl
    ws = torch.empty(workspace_bytes_for(plan, q), dtype=torch.uint8, device="cuda")
    return plan, (q, k, v, o, do, lse), ws


def test_pdl_back_to_back_executes_on_one_workspace():
    """Eight executes in a row on one workspace, no sync between them, each into its own poisoned outputs: all match
    the reference (a preprocess overwriting the scratch before the previous postprocess read it would show here)."""
    plan, (q, k, v, o, do, lse), ws = _pdl_plan()
    poison(ws.view(torch.float32))
    outs = [tuple(poison(torch.empty_like(x)) for x in (q, k, v)) for _ in range(8)]
    for dq, dk, dv in outs:
        plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)
    torch.cuda.synchronize()
    ref = attention_grads_ref(q, k, v, do, is_causal=True)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True)
    for grads in outs:
        for name, g, r, lp in zip(("dq", "dk", "dv"), grads, ref, lowp, strict=True):
            assert_close_fa(g, r, lp, name)


def test_pdl_execute_inside_graph_capture_replays_like_eager():
    """The first execute of a compiled pdl plan inside CUDA-graph capture (the launches become programmatic edges),
    replayed, matches an eager execute bit for bit (the deterministic schedule: dQ in a fixed order) and the reference."""
    from cudnn_testing import detectors

    plan, (q, k, v, o, do, lse), ws = _pdl_plan(deterministic=True)
    assert plan.key.deterministic
    dq, dk, dv = (poison(torch.empty_like(x)) for x in (q, k, v))
    detectors.assert_capture_matches_eager(lambda: plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws), [dq, dk, dv])
    ref = attention_grads_ref(q, k, v, do, is_causal=True)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, lowp, strict=True):
        assert_close_fa(g, r, lp, name)


# ---------------------------------------------------------------------------------------------------------------------
# kvpf (kv_prefetch, notes/bwd_fixed_cost.md C): with its CTA's last Q / dO load the producer L2-prefetches the K / V of
# the tile ``blockIdx.x + SM count`` (dense only). The fixed-cost grid (fewer CTAs than SMs: no prefetch issued, the
# bound check) plus multi-wave cases (512 and 768 CTAs: prefetches issued, the last wave's past the grid skipped), alone
# and with kvq + pdl. Results must be unaffected (a prefetch moves data into L2 only).
KVPF = [("kvpf",), ("kvq", "pdl", "kvpf")]
KVPF_WAVES = [
    ("CAUSAL_TUNING", torch.bfloat16, 128, 8, 8, 4096, 4096, True, False, (-1, -1), BSHD),  # 32 key blocks x 8 heads x 2
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 8, 4, 3000, 3000, False, False, (-1, -1), BHSD),  # m80, GQA, ragged
    ("D64_TUNING", torch.float16, 64, 16, 8, 3000, 6000, False, False, (-1, -1), BSHD),  # m128: 47 key blocks x 8 x 2
]


@pytest.mark.parametrize("extra", KVPF, ids=["+".join(e) for e in KVPF])
@pytest.mark.parametrize(
    "case",
    FIXED_COST_DENSE + KVPF_WAVES,
    ids=["d128-causal-gqa", "d128-noncausal-m80", "d64-m128-window", "d128-causal-waves", "d128-m80-waves", "d64-m128-waves"],
)
def test_kvpf_grads_match_reference(case, extra):
    test_fixed_cost_variant_grads_match_reference(case, extra)


def test_kvpf_d192_default_grads_match_reference():
    from cudnn.sdpa.bwd import api

    b, h, hk, s, d, dv = 2, 8, 2, 4096, 192, 128  # 43 key blocks of 96 x 2 kv heads x 2: several waves
    q, k = _make((b, h, s, d), torch.bfloat16, BSHD), _make((b, hk, s, d), torch.bfloat16, BSHD)
    v, do = _make((b, hk, s, dv), torch.bfloat16, BSHD), _make((b, h, s, dv), torch.bfloat16, BSHD)
    o, lse = attention_ref(q, k, v, is_causal=True)
    o, lse = o.to(q.dtype), lse.float()
    dq, dk, dv_ = (poison(torch.empty_like(x)) for x in (q, k, v))
    plan, _ = _run(tuple(api.D192_TUNING) + ("pdl", "kvpf"), q, k, v, o, do, lse, dq, dk, dv_, is_causal=True)
    assert plan.key.tile_n96 and plan.key.kv_prefetch
    ref = attention_grads_ref(q, k, v, do, is_causal=True)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True)
    for name, g, r, lp in zip(("dq", "dk", "dv"), (dq, dk, dv_), ref, lowp, strict=True):
        assert_close_fa(g, r, lp, name)


# ---------------------------------------------------------------------------------------------------------------------
# g3d (grouped_grid, session 17): masked / varlen plans launch (group_heads, key blocks, pairs / group_heads) when the
# L2 group size divides the (kv head, batch) pairs, the same tile order with one division per CTA. Each case runs the
# plan's own default and default + g3d on the same inputs: dK / dV bitwise equal (a key block's CTA computes them alone,
# in a fixed query order), dQ (reduce-adds in arrival order) and all three against the reference.
# (default tuning's name, dtype, D, D_v, B, H, H_kv, S, causal, window, extra variants): the launched group size
GROUPED = [
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 3, 8, 8, 2048, True, (-1, -1), ()),  # 24 pairs, budget 16 -> 12: 2 groups
    ("D64_TUNING", torch.float16, 64, 64, 2, 16, 4, 1000, True, (-1, -1), ()),  # GQA 4: 8 pairs within the budget: 1 group
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 1, 13, 13, 4096, True, (-1, -1), ()),  # 13 pairs, budget 8: the 1-D decode
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 8, 8, 4096, True, (-1, -1), ("kvpf",)),  # 8 of 16 pairs, 512 CTAs: waves
    ("D192_TUNING", torch.bfloat16, 192, 128, 2, 8, 2, 1000, True, (-1, -1), ()),  # n96, GQA 4
    ("D256_TUNING", torch.bfloat16, 256, 256, 2, 6, 6, 1000, True, (-1, -1), ()),  # split-D bulk, 12 pairs
    ("D64_TUNING", torch.float16, 64, 64, 2, 4, 4, 700, False, (70, 33), ()),  # two-sided window: key blocks no query sees
]


def _variant_pair(tuning, variant, q, k, v, o, do, lse, **kw):
    """The gradients (dq, dk, dv, dsinks or None) of ``tuning``'s plan and of ``tuning + (variant,)``'s on the same inputs."""
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS

    out = []
    for t in (tuning, tuning + (variant,)):
        grads = tuple(poison(torch.empty_like(x)) for x in (q, k, v))
        plan, dsinks = _run(t, q, k, v, o, do, lse, *grads, **kw)
        assert getattr(plan.key, TUNING_FIELDS[variant]) == (variant in t)
        out.append(grads + (dsinks,))
    return out


@pytest.mark.parametrize(
    "case", GROUPED, ids=["d128-causal-2groups", "d64-gqa-1group", "d128-causal-13pairs-1d", "d128-causal-kvpf", "d192-n96", "d256-splitd", "d64-window"]
)
def test_grouped_grid_grads_equal_the_default_plans(case):
    from cudnn.sdpa.bwd import api

    name, dtype, d, dv, b, h, hk, s, causal, window, extra = case
    tuning = tuple(getattr(api, name)) + extra
    q, k = _make((b, h, s, d), dtype, BSHD), _make((b, hk, s, d), dtype, BSHD)
    v, do = _make((b, hk, s, dv), dtype, BSHD), _make((b, h, s, dv), dtype, BSHD)
    kw = dict(is_causal=causal, window=window)
    o, lse = attention_ref(q, k, v, **kw)
    o, lse = o.to(dtype), lse.float()
    base, grouped = (g[:3] for g in _variant_pair(tuning, "g3d", q, k, v, o, do, lse, is_causal=causal, window_size=window))
    assert torch.equal(base[1], grouped[1]) and torch.equal(base[2], grouped[2]), "dK / dV differ from the default plan's"
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for grads in (base, grouped):
        for n, g, r, lp in zip(("dq", "dk", "dv"), grads, ref, lowp, strict=True):
            assert_close_fa(g, r, lp, n)


def _thd_variant_matches_its_base(variant):
    """THD varlen, GQA 4, causal bottom-right, empty and one-token sequences: the causal default plan without
    ``variant`` and with it on the same inputs; dK / dV bitwise equal, the variant's three gradients against the
    reference."""
    from cudnn.sdpa.bwd import api

    h, hk, d, lens_q, lens_k = 8, 2, 128, [300, 1, 0, 517, 64], [300, 129, 5, 700, 64]
    cu_q, cu_k = [0], [0]
    for a, c in zip(lens_q, lens_k, strict=True):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + c)
    q = torch.randn(cu_q[-1], h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(cu_k[-1], hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    kw = dict(is_causal=True, bottom_right=True)
    o, lse = attention_ref_varlen(q, k, v, cu_q, cu_k, **kw)
    o, lse = o.to(q.dtype), lse.float().contiguous()
    tq, tk = torch.tensor(cu_q, dtype=torch.int32, device="cuda"), torch.tensor(cu_k, dtype=torch.int32, device="cuda")
    opts = dict(is_causal=True, causal_bottom_right=True, cu_seqlens_q=tq, cu_seqlens_kv=tk, max_seqlen_q=max(lens_q), max_seqlen_kv=max(lens_k))
    tuning = tuple(t for t in api._default_tuning(d, d, False, True, False) if t != variant)
    base, var = _variant_pair(tuning, variant, q, k, v, o, do, lse, **opts)
    assert torch.equal(base[1], var[1]) and torch.equal(base[2], var[2]), f"dK / dV differ from the plan without {variant}"
    ref = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, **kw)
    lowp = attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, upcast=False, **kw)
    for n, g, r, lp in zip(("dq", "dk", "dv"), var[:3], ref, lowp, strict=True):
        assert_close_fa(g, r, lp, n)


def test_grouped_grid_thd_varlen_grads_equal_the_default_plans():
    """5 sequences x 2 kv heads = 10 pairs, one g3d group (the budget's 15 at max_seqlen_q 517)."""
    _thd_variant_matches_its_base("g3d")


# ---------------------------------------------------------------------------------------------------------------------
# mlp (prepost_mlp, session 18): the preprocess issues all of a thread's O / dO / LSE loads before its first store (rows
# past the end read the last row and are discarded) and a dq_bulk postprocess CTA converts one 64-row fragment block.
# The scratch it writes is the same, so each plan's dK / dV (and dsinks, and dQ when deterministic) equal the plan
# without mlp bitwise (every default takes mlp since session 18: the base plans are the defaults without it); dQ of the reduce-add plans (arrival order) and all gradients are checked against the reference.
# (default tuning's name, dtype, D, D_v, B, H, H_kv, S, causal, sinks, deterministic)
MLP = [
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 4, 4, 1000, True, False, False),  # S past the last 128-row block
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 4, 2, 700, False, False, False),  # m80 bulk, GQA 2
    ("D64_TUNING", torch.float16, 64, 64, 2, 8, 2, 333, True, False, False),  # m128 dq_rows blocks
    ("D192_TUNING", torch.bfloat16, 192, 128, 1, 4, 4, 500, True, False, False),  # n96
    ("D256_TUNING", torch.bfloat16, 256, 256, 1, 4, 4, 300, False, False, False),  # split-D bulk
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 1, 8, 8, 257, True, True, False),  # sinks: the per-warp partials
    ("DEFAULT_TUNING", torch.bfloat16, 128, 128, 2, 4, 4, 300, True, False, True),  # deterministic: the row postprocess
]


@pytest.mark.parametrize("case", MLP, ids=["d128-causal", "d128-m80", "d64-m128", "d192-n96", "d256-splitd", "d128-sinks", "d128-deterministic"])
def test_prepost_mlp_grads_equal_the_default_plans(case):
    from cudnn.sdpa.bwd import api

    name, dtype, d, dv, b, h, hk, s, causal, with_sinks, deterministic = case
    tuning = api._default_tuning(d, dv, True, causal) if deterministic else tuple(getattr(api, name))
    tuning = tuple(t for t in tuning if t != "mlp")  # the default since session 18: compare against the plan without it
    q, k = _make((b, h, s, d), dtype, BSHD), _make((b, hk, s, d), dtype, BSHD)
    v, do = _make((b, hk, s, dv), dtype, BSHD), _make((b, h, s, dv), dtype, BSHD)
    sinks = torch.randn(h, device="cuda") * 2 if with_sinks else None
    o, lse = attention_ref(q, k, v, is_causal=causal, sinks=sinks)
    o, lse = o.to(dtype), lse.float()
    kw = dict(is_causal=causal, deterministic=deterministic) | (dict(sinks=sinks) if with_sinks else {})
    base, mlp = _variant_pair(tuning, "mlp", q, k, v, o, do, lse, **kw)
    same = ("dk", "dv") + (("dq",) if deterministic else ()) + (("dsinks",) if with_sinks else ())
    for n in same:
        i = ("dq", "dk", "dv", "dsinks").index(n)
        assert torch.equal(base[i], mlp[i]), f"{n} differs from the plan without mlp"
    ref = attention_grads_ref(q, k, v, do, is_causal=causal, sinks=sinks)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=causal, sinks=sinks)
    for n, g, r, lp in zip(("dq", "dk", "dv"), mlp, ref, lowp, strict=False):
        assert_close_fa(g, r, lp, n)
    if with_sinks:
        assert_dsinks_close(mlp[3], o, do, lse, sinks, ref, lowp)


def test_prepost_mlp_thd_varlen_grads_equal_the_default_plan():
    """The preprocess's clamped rows stay inside each sequence and the postprocess's 64-row CTAs start at each
    sequence's padded scratch offset."""
    _thd_variant_matches_its_base("mlp")


def test_short_d64_causal_full_order_grads_equal_the_budget_order():
    """Causal d64 plans with at most ``api.SHORT_D64_CAUSAL_ROWS`` query rows launch in FULL_GROUP_HEADS' order (session
    18): the same kernels as the budget order (``_group_heads=0``), so dK / dV are bitwise equal and all three gradients
    pass the reference; GQA 4 with 24 (kv head, batch) pairs."""
    from cudnn.sdpa.bwd import api

    b, h, hk, s, d = 3, 32, 8, 1024, 64
    q, k = _make((b, h, s, d), torch.bfloat16, BSHD), _make((b, hk, s, d), torch.bfloat16, BSHD)
    v, do = _make((b, hk, s, d), torch.bfloat16, BSHD), _make((b, h, s, d), torch.bfloat16, BSHD)
    o, lse = attention_ref(q, k, v, is_causal=True)
    o, lse = o.to(q.dtype), lse.float()
    out = []
    for group in (None, 0):
        grads = tuple(poison(torch.empty_like(x)) for x in (q, k, v))
        _run(api._default_tuning(d, d, False, True), q, k, v, o, do, lse, *grads, is_causal=True, _group_heads=group)
        out.append(grads)
    assert torch.equal(out[0][1], out[1][1]) and torch.equal(out[0][2], out[1][2]), "dK / dV differ between the launch orders"
    ref = attention_grads_ref(q, k, v, do, is_causal=True)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=True)
    for n, g, r, lp in zip(("dq", "dk", "dv"), out[0], ref, lowp, strict=False):
        assert_close_fa(g, r, lp, n)


# ---------------------------------------------------------------------------------------------------------------------
# pers (persistent, session 19): a grid of at most one CTA per SM, each walking tiles drawn from a workspace counter
# (the preprocess zeroes it) and handed to the consumers / dq_writer warp through a shared-memory mailbox; the Q / dO
# ring and the K / V stage carry over tiles. Every tile computes dK / dV alone in a fixed query order, so dK / dV equal
# the plan without pers bitwise; dQ (reduce-adds in arrival order) and all three are checked against the reference.
# Shapes with more tiles than SMs (several tiles a CTA), tiles no query block sees (a two-sided window, S_q < S_kv
# bottom-right), partial last blocks, GQA and the m80 / m128 tiles.
# (default tuning's name, "+"-joined _tuning names added to it, dtype, D, D_v, B, H, H_kv, S_q, S_kv, causal, bottom_right, window)
PERS = [
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 3, 8, 8, 2048, 2048, True, False, (-1, -1)),  # 384 tiles: ~3 a CTA
    ("D64_TUNING", torch.float16, 64, 64, 2, 16, 4, 1000, 1000, True, False, (-1, -1)),  # m128, GQA 4, partial blocks
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 8, 4, 4096, 4096, False, False, (-1, -1)),  # m80 bulk, 256 tiles
    ("D64_TUNING", torch.float16, 64, 64, 2, 4, 4, 700, 700, False, False, (70, 33)),  # window: tiles no query block sees
    ("CAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 8, 2, 300, 1100, True, True, (-1, -1)),  # bottom-right, S_q < S_kv
    ("DEFAULT_TUNING", torch.bfloat16, 128, 128, 1, 4, 4, 1000, 1000, False, False, (-1, -1)),  # no dq_writer
    ("CAUSAL_TUNING+pack1+dsk", torch.bfloat16, 128, 128, 2, 8, 4, 1000, 1000, True, False, (-1, -1)),  # the d128 pd schedule
]


def _named_tuning(name):
    """``"CAUSAL_TUNING+pack1+dsk"``: the bwd/api.py default tuning of that name, then the ``_tuning`` names added to it."""
    from cudnn.sdpa.bwd import api

    default, *extra = name.split("+")
    return tuple(getattr(api, default)) + tuple(extra)


def _pers_pair(case, variant="pers"):
    name, dtype, d, dv, b, h, hk, sq, sk, causal, bottom_right, window = case
    tuning = tuple(t for t in _named_tuning(name) if t != variant)  # dqfs: in CAUSAL_TUNING / D64_TUNING since session 20
    q, k = _make((b, h, sq, d), dtype, BSHD), _make((b, hk, sk, d), dtype, BSHD)
    v, do = _make((b, hk, sk, dv), dtype, BSHD), _make((b, h, sq, dv), dtype, BSHD)
    kw = dict(is_causal=causal, window=window, bottom_right=bottom_right)
    o, lse = attention_ref(q, k, v, **kw)
    o, lse = o.to(dtype), lse.float()
    opts = dict(is_causal=causal, window_size=window, causal_bottom_right=bottom_right)
    base, pers = (g[:3] for g in _variant_pair(tuning, variant, q, k, v, o, do, lse, **opts))
    return (q, k, v, o, do, lse, kw, opts, tuning), base, pers


@pytest.mark.parametrize(
    "case", PERS, ids=["d128-causal-384tiles", "d64-m128-gqa", "d128-m80-s4k", "d64-window", "d128-bottom-right", "d128-no-writer", "d128-pd"]
)
def test_persistent_grads_equal_the_default_plans(case):
    (q, k, v, o, do, lse, kw, _, _), base, pers = _pers_pair(case)
    assert torch.equal(base[1], pers[1]) and torch.equal(base[2], pers[2]), "dK / dV differ from the plan without pers"
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for n, g, r, lp in zip(("dq", "dk", "dv"), pers, ref, lowp, strict=True):
        assert_close_fa(g, r, lp, n)


def _calls_and_replays(tuning, operands, opts, check):
    """The plan of ``tuning`` executed three times on one workspace, then captured in a CUDA graph on a side stream and
    replayed twice; the gradients poisoned before each run and ``check(grads, what)`` after it."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, workspace_bytes_for

    q = operands[0]
    grads = tuple(poison(torch.empty_like(x)) for x in operands[:3])
    plan = SdpaBwdSm90(*operands, *grads, _tuning=tuning, **opts)
    plan.check_support()
    plan.compile()
    ws = torch.empty(workspace_bytes_for(plan, q), dtype=torch.uint8, device="cuda")
    for i in range(3):
        for g in grads:
            poison(g)
        plan.execute(*operands, *grads, ws)
        torch.cuda.synchronize()
        check(grads, f"call {i}")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        plan.execute(*operands, *grads, ws)
    for i in range(2):
        for g in grads:
            poison(g)
        graph.replay()
        torch.cuda.synchronize()
        check(grads, f"replay {i}")


def test_persistent_counter_is_reset_every_call_and_under_graph_replay():
    """The tile counter lives in the caller's workspace: every call's preprocess zeroes it, so repeated calls on one
    workspace, and replays of a captured graph, walk every tile again (a stale counter would skip tiles: dK / dV
    rows left as the poison)."""
    (q, k, v, o, do, lse, _, opts, tuning), base, _ = _pers_pair(PERS[0])

    def check(grads, what):
        assert torch.equal(base[1], grads[1]) and torch.equal(base[2], grads[2]), f"{what} differs"

    _calls_and_replays(tuning + ("pers",), (q, k, v, o, do, lse), opts, check)


# ---------------------------------------------------------------------------------------------------------------------
# Step variants that change how the step reads or signals, never what it computes, so dK / dV equal the plan without
# them bitwise; all three against the reference. elr (elect_release, session 19): the step's Q / dO stage releases
# arrive from the lane elect.sync picks instead of lane 0 (one arrive per consumer warp either way). stats4 at the 64-
# and 80-row blocks (session 20; m128's since session 8): the preprocess stores lse_log2 / dpsum permuted inside each
# 16-row group and the step reads a thread's four columns as one 16-byte word (with stearly: before the WGMMA waits).
# The 64-wide kernel's tiles: d128 causal (pers), m80 (d128 non-causal), m128 (d64, pers), no writer; GQA, partial
# last blocks.
# (default tuning's name, "+"-joined _tuning names added to it, the "+"-joined variant, dtype, D, B, H, H_kv, S, causal)
STEP_VARIANTS = [
    ("CAUSAL_TUNING+pers", "elr", torch.bfloat16, 128, 2, 8, 2, 1000, True),
    ("D128_NONCAUSAL_TUNING", "elr", torch.bfloat16, 128, 2, 4, 4, 1100, False),
    ("D64_TUNING+pers", "elr", torch.float16, 64, 2, 8, 4, 1000, False),
    ("CAUSAL_TUNING+pers", "stats4+stearly", torch.bfloat16, 128, 2, 8, 2, 1000, True),
    ("CAUSAL_TUNING+pers", "stats4+stearly+elr", torch.float16, 128, 3, 8, 8, 2048, True),
    ("CAUSAL_TUNING", "stats4", torch.bfloat16, 128, 2, 4, 4, 777, True),
    ("D128_NONCAUSAL_TUNING", "stats4", torch.bfloat16, 128, 2, 4, 4, 1100, False),
    ("DEFAULT_TUNING", "stats4", torch.float16, 128, 1, 4, 2, 1000, False),
]
STEP_VARIANT_IDS = [
    "elr-d128-causal-pers",
    "elr-d128-m80",
    "elr-d64-m128-pers",
    "stats4e-d128-causal-pers-gqa",
    "stats4ee-d128-causal-pers-3tiles",
    "stats4-d128-causal",
    "stats4-d128-m80",
    "stats4-d128-no-writer",
]


@pytest.mark.parametrize("case", STEP_VARIANTS, ids=STEP_VARIANT_IDS)
def test_step_variant_grads_equal_the_default_plans(case):
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS

    name, variant, dtype, d, b, h, hk, s, causal = case
    tuning = _named_tuning(name)
    q, k = _make((b, h, s, d), dtype, BSHD), _make((b, hk, s, d), dtype, BSHD)
    v, do = _make((b, hk, s, d), dtype, BSHD), _make((b, h, s, d), dtype, BSHD)
    o, lse = attention_ref(q, k, v, is_causal=causal)
    o, lse = o.to(dtype), lse.float()
    runs = []
    for t in (tuning, tuning + tuple(variant.split("+"))):
        grads = tuple(poison(torch.empty_like(x)) for x in (q, k, v))
        plan, _ = _run(t, q, k, v, o, do, lse, *grads, is_causal=causal)
        assert all(getattr(plan.key, TUNING_FIELDS[x]) == (x in t) for x in variant.split("+"))
        runs.append(grads)
    base, var = runs
    assert torch.equal(base[1], var[1]) and torch.equal(base[2], var[2]), f"dK / dV differ from the plan without {variant}"
    ref = attention_grads_ref(q, k, v, do, is_causal=causal)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, is_causal=causal)
    for n, g, r, lp in zip(("dq", "dk", "dv"), var, ref, lowp, strict=True):
        assert_close_fa(g, r, lp, n)


# ---------------------------------------------------------------------------------------------------------------------
# dqfs (dq_first_store, session 20): the preprocess zeroes no dQ accumulator; per 64-row query block the first dq_writer
# to take the block's ticket bulk-stores its partial, the others reduce-add once it marked the block done, and the
# postprocess writes 0 where no key block reached a block. _run poisons the workspace, so a block read before its first
# store, or a stale flag, shows. dK / dV equal the plan without dqfs bitwise; all three against the reference. Query
# blocks no key block sees (S_q > S_kv bottom-right), several tiles a CTA (pers), GQA without pers, a window.
# (default tuning's name, "+"-joined _tuning names added to it, dtype, D, D_v, B, H, H_kv, S_q, S_kv, causal, bottom_right, window)
DQFS = [
    ("CAUSAL_TUNING+pers", torch.bfloat16, 128, 128, 3, 8, 8, 2048, 2048, True, False, (-1, -1)),  # 384 tiles: ~3 a CTA
    ("CAUSAL_TUNING+pers", torch.bfloat16, 128, 128, 2, 8, 2, 700, 129, True, True, (-1, -1)),  # 571 rows see no key
    ("CAUSAL_TUNING", torch.float16, 128, 128, 2, 8, 2, 1000, 1000, True, False, (-1, -1)),  # GQA 4, one tile a CTA
    ("CAUSAL_TUNING", torch.bfloat16, 64, 64, 2, 4, 4, 700, 700, False, False, (70, 33)),  # d64 64-row blocks, a window
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 4, 4, 1100, 1100, False, False, (-1, -1)),  # m80, partial blocks
    ("D128_NONCAUSAL_TUNING+pers", torch.bfloat16, 128, 128, 2, 8, 4, 4096, 4096, False, False, (-1, -1)),  # m80, 256 tiles
    ("D128_NONCAUSAL_TUNING", torch.bfloat16, 128, 128, 2, 8, 2, 700, 129, True, True, (-1, -1)),  # m80, unreached blocks
    ("D64_TUNING+pers", torch.float16, 64, 64, 2, 16, 4, 1000, 1000, False, False, (-1, -1)),  # m128 + dqrows, GQA 4
    ("D64_TUNING", torch.bfloat16, 64, 64, 2, 8, 2, 700, 129, True, True, (-1, -1)),  # m128, unreached blocks
]
DQFS_IDS = ["d128-causal-pers-384tiles", "d128-pers-sq-gt-skv", "d128-gqa", "d64-window", "m80", "m80-pers", "m80-sq-gt-skv", "m128-pers-gqa", "m128-sq-gt-skv"]


@pytest.mark.parametrize("case", DQFS, ids=DQFS_IDS)
def test_dq_first_store_grads_equal_the_default_plans(case):
    (q, k, v, o, do, lse, kw, _, _), base, fs = _pers_pair(case, "dqfs")
    assert torch.equal(base[1], fs[1]) and torch.equal(base[2], fs[2]), "dK / dV differ from the plan without dqfs"
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)
    for n, g, r, lp in zip(("dq", "dk", "dv"), fs, ref, lowp, strict=True):
        assert_close_fa(g, r, lp, n)


def test_dq_first_store_flags_are_reset_every_call_and_under_graph_replay():
    """The first-store flags live in the caller's workspace: every call's preprocess zeroes them, so repeated calls on
    one workspace, and replays of a captured graph, store each block's first partial again (a stale flag would make
    every arrival a reduce-add onto the previous call's dQ: twice the gradient)."""
    (q, k, v, o, do, lse, kw, opts, tuning), _, first = _pers_pair(DQFS[1], "dqfs")
    ref = attention_grads_ref(q, k, v, do, **kw)
    lowp = attention_grads_ref(q, k, v, do, upcast=False, **kw)

    def check(grads, what):
        assert torch.equal(first[1], grads[1]) and torch.equal(first[2], grads[2]), f"{what}: dK / dV differ"
        assert_close_fa(grads[0], ref[0], lowp[0], f"dq ({what})")

    _calls_and_replays(tuning + ("dqfs",), (q, k, v, o, do, lse), opts, check)
