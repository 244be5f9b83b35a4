"""GPU correctness of the forward's prefill plan options under A/B (benchmarks/sdpa_fwd.py --quick).

- ``packed_cvt`` (P converted to 16 bits in bf16x2 / f16x2 pairs), ``persistent`` (one CTA per SM walking the tiles)
  and ``varlen_lpt`` (THD tile order) change no arithmetic: each is checked bitwise against the default plan on the
  same inputs, and against the fp32 reference by the FlashAttention rule.
- ``tile_n`` (the key tile rows) changes the order of the online softmax: checked against the fp32 reference.
- ``varlen_compact`` (THD: one CTA per real tile, batch found by a warp prefix sum) and ``varlen_tma_o`` (THD: O
  stored by TMA through a ragged view, rows past a sequence's end clipped) change no arithmetic: bitwise against the
  default plan on poisoned outputs, including > 31 sequences (several prefix-sum rounds) with empty ones.
- ``o_rescale_early`` (O rescaled under the next S GEMM) multiplies the same numbers in the same order: bitwise.
- ``tile_m=192`` (d <= 64: three consumer warpgroups, round-robin GEMM issue, key tile 128): bitwise against a
  128-row plan with the same key tile where no mask makes the tiles see different key blocks, else the reference.
- ``mask_r2p`` (masks as per-row 32-bit keep masks and one select per score) masks the same scores: bitwise against
  the same plan without it (key length only, causal top-left / bottom-right, sliding window, odd lengths 1000 / 4097,
  GQA, tile_m=192, persistent, THD varlen), and against the reference.
- ``exp2_emu`` (one exponential in N per row of the unmasked key blocks by a degree-3 polynomial on the FMA pipe,
  relative error 7.5e-5) changes P in the last bits: checked against the fp32 reference by the FlashAttention rule,
  including rows with no visible key (bottom-right, S_q > S_kv: O = 0, LSE = -inf must survive).
- ``persistent_pairs`` (the persistent work unit is the pair of query blocks M - 1 - j and j of one head; odd M leaves
  an empty slot) moves tiles between CTAs, not arithmetic: bitwise against the default plan, odd and even M, THD.
- ``ragged_tail`` with ``mask_r2p``, ``persistent`` and ``persistent_pairs`` together (the causal combinations under
  A/B), d = 128 and d = 256: bitwise against the default plan (each option is), and against the reference.
- ``l2_group_mb`` (host only: how many (head, batch) pairs one L2 group of the causal longest-first tile order holds)
  moves tiles between CTAs: bitwise against the default plan at d = 256 causal (odd lengths, GQA, both alignments,
  LSE; the group differs from the default's on every case), on a persistent grid and THD varlen.
- ``wg_epilogue`` (each consumer warpgroup stores its 64 rows of O alone) and ``q_stages=2`` (two Q buffers on a
  persistent plan) change no arithmetic: bitwise against the default plan (d = 128 non-causal with the last tile's
  second half partly or wholly past S_q, causal bottom-right on the persistent pairs grid), and the reference.
- ``pinned_desc`` (the key-block loop's S and PV GEMMs from descriptors pinned once per tile, their own WGMMA asm)
  issues the same WGMMAs on the same tiles: bitwise against the default plan (d = 128 persistent, without
  ``wg_epilogue``, the one-tile grid, causal bottom-right, d = 64 fp16), and against the reference.
- ``kv_multicast`` (clusters of two CTAs running query blocks 2u and 2u + 1 of one head in step, each TMA-loading half of
  every K / V tile and multicasting it to both) loads the same tiles: bitwise against the default plan (d = 128 with M
  even and odd -- a phantom block past S_q --, fewer units than clusters, with ``pinned_desc``, without ``wg_epilogue``,
  d = 64 at 128 and 192 query rows), and against the reference.
- ``spin_wait`` / ``spin_wait_producer`` (the consumers' full-barrier / the producer's empty-barrier waits as a try_wait
  spin without NANOSLEEP) change when a warp resumes, not what it computes: bitwise against the default plan (d = 64 /
  128, causal and not, GQA, odd lengths, the persistent causal d = 128 grid, THD varlen), and against the reference.

Shapes are chosen so a persistent CTA runs several tiles (a grid of at most the SM count over hundreds of tiles),
with odd lengths (S not a multiple of either tile), GQA, both causal alignments and a sliding window.
"""

from __future__ import annotations

import pytest

from cudnn_testing.data import poison
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_attention import attention_ref, attention_ref_varlen
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

BSHD = (0, 2, 1, 3)


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _make(shape, dtype):
    stored = [shape[p] for p in BSHD]
    return torch.randn(stored, dtype=torch.float32, device="cuda").to(dtype).permute(0, 2, 1, 3)


def _run(q, k, v, causal, br, window, pins=None, **plan_kw):
    """Run a plan with the options ``plan_kw`` (each checked on the key) and ``pins`` (options passed unchecked, e.g.
    ``tile_m=128``, which the key spells as 0); returns ``(o, lse)``."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    b, h, sq, _ = q.shape
    out = poison(_make((b, h, sq, v.shape[-1]), q.dtype))
    lse = poison(torch.empty(b, h, sq, device="cuda"))
    plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, causal_bottom_right=br, window_size=window, **(pins or {}), **plan_kw)
    plan.compile()
    for name, want in plan_kw.items():
        if name in HOST_OPTIONS:  # a launch argument, not a compile-key field
            continue
        assert getattr(plan.key, name) == want, (name, getattr(plan.key, name))
    plan.execute(q, k, v, out, lse)
    return out, lse


#: Plan options that are host-side launch arguments (the same compiled kernel), not compile-key fields.
HOST_OPTIONS = ("l2_group_mb",)


def _default_tile_m(option: dict, d: int) -> dict:
    """The default plan's query tile pinned to the option plan's: head dims <= 64 default to 192 rows, which a
    persistent plan does not take (128 rows), and a bitwise comparison needs the same tiles."""
    return {"tile_m": 128} if d <= 64 and option.get("persistent") and option.get("tile_m") != 192 else {}


def _check_ref(q, k, v, out, lse, **kw):
    ref, ref_lse = attention_ref(q, k, v, **kw)
    lowp, _ = attention_ref(q, k, v, upcast=False, **kw)
    assert_close_fa(out, ref, lowp, "o")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse: -inf pattern differs from the reference"
    if finite.any():
        assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3


# (dtype, d, dv, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)
D128 = (torch.bfloat16, 128, 128, 3, 12, 4, 1500, 1500, False, False, (-1, -1))  # 12 m-blocks * 36 = 432 tiles, GQA 3
D128_CAUSAL = (torch.bfloat16, 128, 128, 3, 12, 12, 1500, 1700, True, True, (-1, -1))  # causal bottom-right: longest-first
D64_BR = (torch.float16, 64, 64, 2, 16, 2, 1100, 1700, True, True, (-1, -1))  # bottom-right, S_q < S_kv, tile_n 192
D256 = (torch.bfloat16, 256, 256, 6, 8, 8, 700, 600, False, False, (-1, -1))  # tile_n 80; 288 tiles
D192_WINDOW = (torch.bfloat16, 192, 128, 6, 8, 4, 900, 900, False, True, (100, 0))  # sliding window, tile_n 112; 384 tiles
# d = 64 non-causal (three consumer warpgroups of 64 rows, key tile 128), odd S_q / S_kv, GQA 2.
D64 = (torch.bfloat16, 64, 64, 2, 16, 8, 1000, 1337, False, False, (-1, -1))
D128_LAST_HALF_OUT = (torch.bfloat16, 128, 128, 4, 16, 16, 1050, 1300, False, False, (-1, -1))  # 9 m-blocks, 576 tiles, S_q < S_kv
D128_TINY = (torch.bfloat16, 128, 128, 1, 1, 1, 300, 5000, False, False, (-1, -1))  # 3 m-blocks, one head
# packed_cvt where the whole-fragment convert is scalar (non-power-of-two fragments); persistent over every mask.
BITWISE = [
    (dict(packed_cvt=True), D64_BR),
    (dict(packed_cvt=True), D256),
    (dict(packed_cvt=True), D192_WINDOW),
    (dict(persistent=False, tile_n=128), D128),  # the one-tile grid at the default persistent plan's key tile
    (dict(persistent=True), D128_CAUSAL),
    (dict(persistent=True), D192_WINDOW),
    (dict(persistent=True, packed_cvt=True), D256),  # no room for a separate O tile: O reuses Q's buffer
    (dict(o_rescale_early=True), D256),  # the same products in the same order: bitwise
    (dict(o_rescale_early=True), D128_CAUSAL),
    (dict(o_rescale_early=True), D192_WINDOW),
    (dict(o_rescale_early=True, persistent=True), D64_BR),
    (dict(mask_r2p=True), D128_CAUSAL),  # causal bottom-right, S_q < S_kv, GQA off: the first block masks both limits
    (dict(mask_r2p=True), D64_BR),  # 48 scores per row: two 32-bit keep masks, the second partial
    (dict(mask_r2p=True), D256),  # non-causal: the key-length mask alone (600 keys, tile_n 80: 20 scores per row)
    (dict(mask_r2p=True), D192_WINDOW),  # left and right limits: one [lo, hi) interval per row
    (dict(persistent=True, persistent_pairs=True), D128_CAUSAL),  # M = 12 query blocks: 6 pairs per head
    (dict(persistent=True, persistent_pairs=True), D192_WINDOW),  # M = 8, sliding window
    (dict(persistent=True, persistent_pairs=True, mask_r2p=True), D64_BR),  # M = 9 (128 x 192 tiles): an empty slot
    (dict(wg_epilogue=True), D128),  # per-warpgroup O stores; the last tile's second half partly past S_q = 1500
    (dict(wg_epilogue=True), D128_LAST_HALF_OUT),  # S_q = 1050: the last tile's second half lies wholly past S_q
    (dict(q_stages=2), D128),
    (dict(q_stages=2, wg_epilogue=True), D128),
    (dict(q_stages=2, wg_epilogue=True), D128_CAUSAL),  # the default persistent pairs grid, causal bottom-right
    (dict(q_stages=2, wg_epilogue=True), D128_LAST_HALF_OUT),
    (dict(tile_m=192, persistent=True), D64),  # three consumer warpgroups on the persistent grid: the default's tiles
    (dict(tile_m=192, persistent=True, q_stages=2, wg_epilogue=True), D64),
    (dict(tile_m=192, persistent=True, persistent_pairs=True, q_stages=2, wg_epilogue=True), D64_BR),
    (dict(pinned_desc=True), D128),  # the loop's GEMMs from pinned descriptors: the same WGMMAs on the same tiles
    (dict(pinned_desc=True), D128_CAUSAL),
    (dict(pinned_desc=True), D128_LAST_HALF_OUT),
    (dict(pinned_desc=True, wg_epilogue=False), D128),  # O stored by warp 4 for both warpgroups
    (dict(pinned_desc=True, persistent=False, tile_n=128), D128),  # the one-tile grid
    (dict(pinned_desc=True), D64),  # d = 64, three consumer warpgroups
    (dict(pinned_desc=True), D64_BR),  # fp16, causal bottom-right
    (dict(kv_multicast=True), D128),  # clusters of 2 sharing K / V by TMA multicast: M = 12, 216 units over 66 clusters
    (dict(kv_multicast=True), D128_LAST_HALF_OUT),  # M = 9: every head's last cluster runs a phantom block past S_q
    (dict(kv_multicast=True, wg_epilogue=False), D128),  # O stored by warp 4 for both warpgroups
    (dict(kv_multicast=True, pinned_desc=True), D128),
    (dict(kv_multicast=True), D128_TINY),  # fewer units than clusters: 2 clusters, S_kv 5000 (40 key blocks, the last partial)
    (dict(kv_multicast=True, persistent=True), D64),  # d = 64 on the persistent grid (128-row tiles)
    (dict(kv_multicast=True, persistent=True, tile_m=192), D64),  # three consumer warpgroups, M = 6
]


def _ids(oc):
    o, c = oc
    return "+".join(o) + f"-{str(c[0])[6:]}-d{c[1]}x{c[2]}-h{c[4]}:{c[5]}-s{c[6]}x{c[7]}-c{int(c[8])}br{int(c[9])}-w{c[10][0]},{c[10][1]}"


@pytest.mark.parametrize("option_case", BITWISE, ids=_ids)
def test_option_is_bitwise_the_default_and_matches_reference(option_case):
    _check_bitwise_the_default(option_case)


def _check_bitwise_the_default(option_case):
    option, (dtype, d, dv, b, h, hk, sq, sk, causal, br, window) = option_case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, dv), dtype)
    o_opt, lse_opt = _run(q, k, v, causal, br, window, **option)
    o_def, lse_def = _run(q, k, v, causal, br, window, pins=_default_tile_m(option, d))
    torch.cuda.synchronize()
    assert torch.equal(o_opt, o_def), f"{option}: O differs from the default plan"
    assert torch.equal(lse_opt, lse_def), f"{option}: LSE differs from the default plan"
    _check_ref(q, k, v, o_opt, lse_opt, is_causal=causal, bottom_right=br, window=window)


# (tile_n, persistent, dtype, d, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)
TILE_N_CASES = [
    (176, False, torch.bfloat16, 128, 2, 8, 2, 1000, 1111, False, False, (-1, -1)),  # FA3's d = 128 non-causal tile, odd S_kv
    (176, False, torch.bfloat16, 128, 2, 8, 8, 700, 900, True, True, (-1, -1)),  # the same tile under a causal mask
    (192, False, torch.float16, 128, 2, 4, 4, 1300, 1300, False, False, (-1, -1)),  # FA4's sm90 choice
    (176, True, torch.bfloat16, 128, 3, 12, 4, 1500, 1500, False, False, (-1, -1)),  # persistent, O in Q's buffer
]


@pytest.mark.parametrize(
    "case",
    TILE_N_CASES,
    ids=lambda c: f"n{c[0]}{'-persistent' if c[1] else ''}-{str(c[2])[6:]}-d{c[3]}-h{c[5]}:{c[6]}-s{c[7]}x{c[8]}-c{int(c[9])}br{int(c[10])}",
)
def test_tile_n_matches_reference(case):
    tile_n, persistent, dtype, d, b, h, hk, sq, sk, causal, br, window = case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, d), dtype)
    out, lse = _run(q, k, v, causal, br, window, tile_n=tile_n, packed_cvt=True, persistent=persistent)
    torch.cuda.synchronize()
    _check_ref(q, k, v, out, lse, is_causal=causal, bottom_right=br, window=window)


# (option, causal, d): packed_cvt is left out at d = 128 (the P fragment is a power of two long: the same code);
# persistent at d = 128 has a separate O tile, at d = 256 O shares Q's buffer (released after the predicated stores).
VARLEN_CASES = [
    (dict(tile_n=176), True, 128),
    (dict(varlen_lpt=True, varlen_compact=False), True, 128),  # varlen_compact (the default since session 4) is its own order
    (dict(persistent=True, varlen_lpt=True), True, 128),
    (dict(persistent=True, packed_cvt=True), False, 256),
    (dict(varlen_compact=True), True, 128),
    (dict(varlen_compact=True), False, 64),
    (dict(varlen_tma_o=True), True, 128),
    (dict(varlen_compact=True, varlen_tma_o=True), False, 64),
    (dict(tile_m=192, varlen_compact=True, varlen_tma_o=True), True, 64),  # key tile 128 (default 192): reference only
    (dict(mask_r2p=True), True, 128),  # per-sequence key lengths and the causal limit in one interval per row
    (dict(persistent=True, persistent_pairs=True, mask_r2p=True), True, 128),  # pairs of blocks past short sequences' ends
    (dict(pinned_desc=True), True, 128),
]


@pytest.mark.parametrize(
    "option, causal, d",
    VARLEN_CASES,
    ids=lambda x: "+".join(f"{k}{v}" for k, v in x.items()) if isinstance(x, dict) else f"{x}" if type(x) is int else f"c{int(x)}",
)
def test_thd_varlen_option_matches_reference(option, causal, d):
    """THD varlen (an empty and a one-token sequence, 8 heads over 2 kv heads) with a tuned key tile, the head-major tile
    order or the persistent grid; all but tile_n change no arithmetic and are also compared bitwise with the default."""
    _check_thd_option(option, causal, d)


def _check_thd_option(option, causal, d):
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    h, hk = 8, 2
    lens = [0, 1, 300, 1000, 177, 529]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    q = torch.randn(cu[-1], h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(cu[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(cu[-1], hk, d, device="cuda", dtype=torch.bfloat16)
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    outs = []
    for kw in (option, {}):
        out = poison(torch.empty_like(q))
        lse = poison(torch.empty(h, cu[-1], device="cuda"))
        plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, cu_seqlens_q=cu_t, cu_seqlens_kv=cu_t, max_seqlen_q=max(lens), max_seqlen_kv=max(lens), **kw)
        plan.compile()
        plan.execute(q, k, v, out, lse, None, cu_t, cu_t, max(lens))
        outs.append((out, lse))
    torch.cuda.synchronize()
    (out, lse), (out_def, lse_def) = outs
    if "tile_n" not in option and "tile_m" not in option:
        assert torch.equal(out, out_def) and torch.equal(lse, lse_def), f"{option}: differs from the default plan"
    ref, ref_lse = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal)
    lowp, _ = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal, upcast=False)
    assert_close_fa(out, ref, lowp, "o")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3


@pytest.mark.parametrize("causal, option", [(True, {}), (False, {}), (True, dict(q_stages=2, wg_epilogue=True)), (False, dict(q_stages=2, wg_epilogue=True))])
def test_persistent_execute_never_syncs_or_allocates_and_captures(causal, option):
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn_testing import detectors

    q, k, v = (_make((2, 16, 2048, 128), torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    plan = SdpaFwdSm90(q, k, v, o, is_causal=causal, persistent=True, **option)
    plan.compile()

    def run():
        plan.execute(q, k, v, o)

    run()
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(run)
    detectors.assert_capture_matches_eager(run, [o])


def _thd(lens, h, hk, d, dtype=torch.bfloat16):
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    q = torch.randn(cu[-1], h, d, device="cuda", dtype=dtype)
    k = torch.randn(cu[-1], hk, d, device="cuda", dtype=dtype)
    v = torch.randn(cu[-1], hk, d, device="cuda", dtype=dtype)
    return q, k, v, cu, torch.tensor(cu, dtype=torch.int32, device="cuda")


@pytest.mark.parametrize(
    "causal, option",
    [(True, dict(varlen_compact=True)), (False, dict(varlen_compact=True)), (True, dict(varlen_compact=True, varlen_tma_o=True))],
    ids=["causal-compact", "full-compact", "causal-compact-tma_o"],
)
def test_varlen_compact_many_sequences_bitwise(causal, option):
    """70 sequences (three 31-batch prefix-sum rounds), some empty, one-token and longer than a tile, 6 heads over 3 kv
    heads, LSE and sinks: the option is bitwise the default plan and matches the reference."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    g = torch.Generator().manual_seed(7)
    lens = [int(x) for x in torch.randint(0, 400, (70,), generator=g)]
    lens[3] = lens[40] = 0
    lens[5], lens[64] = 1, 1100
    h, hk, d = 6, 3, 128
    q, k, v, cu, cu_t = _thd(lens, h, hk, d)
    sinks = torch.randn(h, device="cuda")
    outs = []
    for kw in (option, {name: False for name in option}):  # with the option, then with its fields off
        out = poison(torch.empty_like(q))
        lse = poison(torch.empty(h, cu[-1], device="cuda"))
        plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, sinks=sinks, cu_seqlens_q=cu_t, cu_seqlens_kv=cu_t, max_seqlen_q=max(lens),
                           max_seqlen_kv=max(lens), **kw)  # fmt: skip
        plan.compile()
        assert all(getattr(plan.key, name) == (kw is option and want) for name, want in option.items())
        plan.execute(q, k, v, out, lse, sinks, cu_t, cu_t, max(lens))
        outs.append((out, lse))
    torch.cuda.synchronize()
    (out, lse), (out_def, lse_def) = outs
    assert torch.equal(out, out_def) and torch.equal(lse, lse_def), f"{option}: differs from the default plan"
    ref, ref_lse = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal, sinks=sinks)
    lowp, _ = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal, sinks=sinks, upcast=False)
    assert_close_fa(out, ref, lowp, "o")


# (dtype, d, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)
M192_CASES = [
    (torch.bfloat16, 64, 2, 16, 2, 1100, 1700, False, False, (-1, -1)),  # S not a multiple of 192 or 128, GQA 8
    (torch.float16, 64, 3, 8, 8, 1000, 1000, True, False, (-1, -1)),  # causal top-left
    (torch.bfloat16, 64, 2, 8, 4, 700, 1300, True, True, (-1, -1)),  # causal bottom-right, S_q < S_kv
    (torch.bfloat16, 64, 2, 8, 8, 900, 900, False, False, (150, 30)),  # sliding window
]


@pytest.mark.parametrize(
    "case", M192_CASES, ids=lambda c: f"{str(c[0])[6:]}-d{c[1]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]},{c[9][1]}"
)
def test_tile_m192_matches_reference(case):
    dtype, d, b, h, hk, sq, sk, causal, br, window = case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, d), dtype)
    out, lse = _run(q, k, v, causal, br, window, tile_m=192)
    if not causal and window == (-1, -1):  # every tile sees every key block: per row the same arithmetic as 128 x 128
        o_128, lse_128 = _run(q, k, v, causal, br, window, pins=dict(tile_m=128), tile_n=128)
        torch.cuda.synchronize()
        assert torch.equal(out, o_128) and torch.equal(lse, lse_128), "tile_m=192 differs from the 128-row plan with the same key tile"
    torch.cuda.synchronize()
    _check_ref(q, k, v, out, lse, is_causal=causal, bottom_right=br, window=window)


# (base plan options, (dtype, d, dv, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)): the plan with and without
# mask_r2p on the same inputs. Odd lengths (1000: the last key block has 104 of 128 keys; 4097: one row and one key past
# a tile), GQA, and the plans whose tiles differ from the default (192-row tiles, persistent).
R2P_CASES = [
    ({}, (torch.bfloat16, 128, 128, 2, 8, 2, 1000, 1000, True, False, (-1, -1))),  # causal top-left, GQA 4
    ({}, (torch.float16, 128, 128, 1, 4, 4, 4097, 4097, True, False, (-1, -1))),
    ({}, (torch.bfloat16, 128, 128, 1, 8, 2, 4097, 4097, False, False, (-1, -1))),  # key length only, tile_n 192
    ({}, (torch.bfloat16, 128, 128, 2, 4, 4, 1000, 4097, True, True, (-1, -1))),  # bottom-right, S_q << S_kv
    (dict(tile_m=192), (torch.bfloat16, 64, 64, 2, 8, 4, 1000, 1000, True, False, (-1, -1))),  # two masked blocks per tile
    (dict(tile_m=192), (torch.float16, 64, 64, 2, 8, 8, 1000, 1300, False, False, (150, 30))),  # sliding window
    (dict(persistent=True), (torch.bfloat16, 128, 128, 2, 12, 4, 1000, 1000, True, False, (-1, -1))),
]


@pytest.mark.parametrize(
    "base, case",
    R2P_CASES,
    ids=lambda x: (
        ("mask_r2p" + "".join(f"+{k}{v}" for k, v in x.items()))
        if isinstance(x, dict)
        else f"{str(x[0])[6:]}-d{x[1]}-h{x[4]}:{x[5]}-s{x[6]}x{x[7]}-c{int(x[8])}br{int(x[9])}-w{x[10][0]},{x[10][1]}"
    ),
)
def test_mask_r2p_is_bitwise_the_branch_mask(base, case):
    dtype, d, dv, b, h, hk, sq, sk, causal, br, window = case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, dv), dtype)
    o_r2p, lse_r2p = _run(q, k, v, causal, br, window, mask_r2p=True, **base)
    o_ref_plan, lse_ref_plan = _run(q, k, v, causal, br, window, mask_r2p=False, **base)
    torch.cuda.synchronize()
    assert torch.equal(o_r2p, o_ref_plan), f"mask_r2p {base}: O differs from the same plan without it"
    assert torch.equal(lse_r2p, lse_ref_plan), f"mask_r2p {base}: LSE differs from the same plan without it"
    _check_ref(q, k, v, o_r2p, lse_r2p, is_causal=causal, bottom_right=br, window=window)


# (exp2_emu, plan options, (dtype, d, dv, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)): d = 64 (the 192-row
# tile the default takes, and the 128-row one), d = 128, odd lengths, GQA, a window, rows with no visible key.
EMU_CASES = [
    (8, {}, (torch.bfloat16, 64, 64, 2, 16, 2, 1000, 1300, False, False, (-1, -1))),
    (8, {}, (torch.float16, 64, 64, 1, 8, 8, 4097, 4097, True, False, (-1, -1))),
    (8, {}, (torch.bfloat16, 64, 64, 2, 8, 4, 1000, 700, True, True, (-1, -1))),  # rows 0..299 see no key
    (4, dict(tile_m=128), (torch.bfloat16, 64, 64, 2, 8, 8, 900, 900, False, False, (150, 30))),
    (8, dict(mask_r2p=True), (torch.bfloat16, 128, 128, 2, 8, 2, 1000, 1000, True, False, (-1, -1))),
]


@pytest.mark.parametrize(
    "emu, base, case",
    EMU_CASES,
    ids=[
        f"exp2_emu{e}" + "".join(f"+{k}{v}" for k, v in b.items()) + f"-{str(c[0])[6:]}-d{c[1]}-h{c[4]}:{c[5]}-s{c[6]}x{c[7]}-c{int(c[8])}br{int(c[9])}"
        for e, b, c in EMU_CASES
    ],
)
def test_exp2_emu_matches_reference(emu, base, case):
    dtype, d, dv, b, h, hk, sq, sk, causal, br, window = case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, dv), dtype)
    pins = {k_: v_ for k_, v_ in base.items() if k_ == "tile_m"}
    opts = {k_: v_ for k_, v_ in base.items() if k_ != "tile_m"}
    out, lse = _run(q, k, v, causal, br, window, pins=pins, exp2_emu=emu, **opts)
    torch.cuda.synchronize()
    _check_ref(q, k, v, out, lse, is_causal=causal, bottom_right=br, window=window)


# ragged_tail: each warpgroup's first key block (the highest: the partial last block, the causal diagonal) runs at the
# narrowest compiled width (64 / 128 / the tile) covering the keys its 64 rows can see. Expected bitwise equal to the
# default plan: the narrower WGMMA computes each score as the full one does, the row sum is a sequential add chain (the
# default only adds the masked columns' zeros after it), and the PV k-blocks it skips multiply P = 0. Key lengths end in
# every remainder class of the key tile: exact multiples, 1 key, 64 / 65 (the 64 -> 128 width step), 128 / 129, 191.
# Distinct plans are few (each case compiles its key and the default's; the s_kv sweep shares one pair).
# (dtype, d, b, h, h_kv, s_q, s_kv, causal, bottom_right, window)
TAIL_CASES = [
    *[(torch.bfloat16, 128, 2, 4, 2, 257, sk, False, False, (-1, -1)) for sk in (768, 769, 832, 833, 896, 897, 959)],  # key tile 192, GQA 2
    *[(torch.float16, 128, 1, 4, 4, s, s, True, False, (-1, -1)) for s in (1024, 1025, 1088, 1089)],  # 128 x 128: WG 0 sees 64 keys of the diagonal
    (torch.float16, 128, 2, 4, 4, 500, 1089, True, True, (-1, -1)),  # bottom-right, S_q < S_kv: the diagonal off the block grid
    (torch.float16, 128, 1, 4, 4, 1089, 700, True, True, (-1, -1)),  # bottom-right, S_q > S_kv: rows with no visible key
    (torch.bfloat16, 64, 2, 8, 4, 1000, 1000, True, False, (-1, -1)),  # 192 x 128 tile, three warpgroups, three widths
    (torch.bfloat16, 256, 2, 4, 4, 300, 700, False, False, (-1, -1)),  # key tile 80 (widths 64 / 80): 700 = 8 x 80 + 60; o_rescale_early
    (torch.bfloat16, 128, 2, 4, 2, 900, 900, False, True, (100, 0)),  # sliding window: left and right limits
    (torch.bfloat16, 128, 2, 8, 2, 16, 1000, True, True, (-1, -1)),  # decode chunk: pack-GQA rows (s * 4 + g), 64-row tile
]


@pytest.mark.parametrize(
    "case", TAIL_CASES, ids=lambda c: f"ragged_tail-{str(c[0])[6:]}-d{c[1]}-h{c[3]}:{c[4]}-s{c[5]}x{c[6]}-c{int(c[7])}br{int(c[8])}-w{c[9][0]},{c[9][1]}"
)
def test_ragged_tail_matches_reference_and_default(case):
    dtype, d, b, h, hk, sq, sk, causal, br, window = case
    q, k, v = _make((b, h, sq, d), dtype), _make((b, hk, sk, d), dtype), _make((b, hk, sk, d), dtype)
    o_tail, lse_tail = _run(q, k, v, causal, br, window, ragged_tail=True)
    o_def, lse_def = _run(q, k, v, causal, br, window, ragged_tail=False)
    torch.cuda.synchronize()
    _check_ref(q, k, v, o_tail, lse_tail, is_causal=causal, bottom_right=br, window=window)
    assert torch.equal(o_tail, o_def), "ragged_tail: O differs from the default plan"
    assert torch.equal(lse_tail, lse_def), "ragged_tail: LSE differs from the default plan"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_ragged_tail_thd_varlen(causal):
    """THD varlen, sequences ending in every remainder class (one-token and empty ones too), 8 heads over 2 kv heads,
    LSE: key tile 128 (causal) / 192 (non-causal); the reference, and bitwise the default plan."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    lens = [1, 0, 64, 65, 128, 129, 191, 192, 193, 1, 300, 1000, 777]
    q, k, v, cu, cu_t = _thd(lens, 8, 2, 128)
    outs = []
    for tail in (True, False):
        out = poison(torch.empty_like(q))
        lse = poison(torch.empty(8, cu[-1], device="cuda"))
        plan = SdpaFwdSm90(q, k, v, out, lse, is_causal=causal, cu_seqlens_q=cu_t, cu_seqlens_kv=cu_t, max_seqlen_q=max(lens),
                           max_seqlen_kv=max(lens), ragged_tail=tail)  # fmt: skip
        plan.compile()
        assert plan.key.ragged_tail is tail
        plan.execute(q, k, v, out, lse, None, cu_t, cu_t, max(lens))
        outs.append((out, lse))
    torch.cuda.synchronize()
    (out, lse), (out_def, lse_def) = outs
    ref, ref_lse = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal)
    lowp, _ = attention_ref_varlen(q, k, v, cu, cu, is_causal=causal, upcast=False)
    assert_close_fa(out, ref, lowp, "o")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    assert torch.equal(out, out_def) and torch.equal(lse, lse_def), "ragged_tail: differs from the default plan"


# d = 256 causal (key tile 80, o_rescale_early): odd lengths, GQA, both alignments. The L2 group of the tile order
# differs from the default's on both (1500 keys: 1.5 MB of K/V per pair, 5 pairs per 8 MiB group, all 16 per 32 MiB;
# 2049 keys: 3 per 8 MiB, all 12 per 32 MiB).
D256_CAUSAL = (torch.bfloat16, 256, 256, 2, 8, 4, 1500, 1500, True, False, (-1, -1))
D256_CAUSAL_BR = (torch.float16, 256, 256, 3, 4, 4, 700, 2049, True, True, (-1, -1))  # bottom-right, S_q < S_kv
COMBO_CASES = [
    (dict(l2_group_mb=32), D256_CAUSAL),
    (dict(l2_group_mb=32), D256_CAUSAL_BR),
    (dict(ragged_tail=True, mask_r2p=True), D256_CAUSAL),  # widths 64 / 80: the diagonal block at 64 for one warpgroup
    (dict(ragged_tail=True, mask_r2p=True, persistent=True, persistent_pairs=True), D128_CAUSAL),  # M = 12: 6 pairs per head
    (dict(ragged_tail=True, mask_r2p=True, persistent=True, l2_group_mb=32), D256_CAUSAL_BR),  # O in Q's buffer, static stride
]


@pytest.mark.parametrize("option_case", COMBO_CASES, ids=_ids)
def test_causal_combination_is_bitwise_the_default(option_case):
    """The causal options under A/B together (benchmarks/sdpa_fwd.py --quick: ours-tail-r2p, ours-tail-pairs-r2p,
    ours-l2g32), each bitwise the default alone, so together too; and the reference."""
    _check_bitwise_the_default(option_case)


def test_l2_group_and_ragged_tail_thd_varlen_d256():
    """THD varlen d = 256 causal (an empty and a one-token sequence, GQA 4, LSE) on the tile order ``l2_group_mb`` sizes
    (varlen_compact off: the compact grid has its own order) with ragged_tail and mask_r2p: bitwise the default plan."""
    _check_thd_option(dict(varlen_compact=False, l2_group_mb=32, ragged_tail=True, mask_r2p=True), True, 256)


SPIN_CASES = [
    (dict(spin_wait=True), D128),  # d = 128 non-causal (the persistent grid, key tile 128), GQA 3, 1500 keys: a ragged last block
    (dict(spin_wait=True), D128_CAUSAL),  # causal bottom-right d = 128: the default persistent pairs grid (states carried)
    (dict(spin_wait=True, spin_wait_producer=True), D64_BR),  # d = 64 causal bottom-right, S_q < S_kv, GQA 8
    (dict(spin_wait_producer=True), D64),
]


@pytest.mark.parametrize("option_case", SPIN_CASES, ids=_ids)
def test_spin_wait_is_bitwise_the_default_and_matches_reference(option_case):
    """The wait-form A/B (benchmarks/sdpa_fwd.py --spin): the same barriers and phases waited on in another instruction
    form, so the outputs are bitwise the default plan's; and the fp32 reference by the FlashAttention rule."""
    _check_bitwise_the_default(option_case)


def test_spin_wait_thd_varlen():
    """THD varlen d = 128 causal (an empty and a one-token sequence, GQA 4, LSE) with both spins: bitwise the default."""
    _check_thd_option(dict(spin_wait=True, spin_wait_producer=True), True, 128)
