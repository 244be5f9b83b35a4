"""Attention forward benchmark: cudnn.sdpa vs FA4 (flash_attn.cute) vs torch SDPA (cuDNN and flash backends).

Same inputs (BSHD storage; torch and ours read the (B, H, S, D) transposed view natively) in the same process.
TFLOP/s by the FlashAttention convention: 4 * B * H * S_q * S_kv * D, halved for causal.
Shapes: 16k total tokens per batch (B = 16384 / S), H * D = 2048; d 64 / 128 / 256; causal and not; GQA 8:1;
a varlen mix (THD) and decode batches (S_q = 1): B = 64 dense KV, B = 2 with S_kv = 32k (split-KV through
``num_splits=0``), and issue 4's target B = 64 paged (page 256, shuffled pages), and the same with vLLM's page 16.

    python benchmarks/sdpa_fwd.py               # writes docs/benchmarks/sdpa_fwd.{md,csv,png}
    python benchmarks/sdpa_fwd.py --quick       # the prefill A/B: d128 s4k/s8k, d64 / d256 s8k, causal s1k, d256 causal s2k /
                                                # s8k, varlen,
                                                # ours vs the plan options varlen_compact (+ varlen_tma_o) / tile_m=192
                                                # (+ kv_stages=3) / o_rescale_early -> sdpa_fwd_quick.*
    python benchmarks/sdpa_fwd.py --only=decode,d64,d128+s4k    # a subset -> docs/benchmarks/sdpa_fwd_subset.*
    python benchmarks/sdpa_fwd.py --only=decode                 # decode rows in GB/s, + the decode plan A/B columns
    python benchmarks/sdpa_fwd.py --only=decode --kv3           # decode rows, plus the kernel with a 3-deep K/V ring
    python benchmarks/sdpa_fwd.py --quick --providers=ours,ours-tail,fa4   # any run: only the listed columns
    python benchmarks/sdpa_fwd.py --only=d128+s1k,d256 --providers=ours,fa4 --out=sdpa_fwd_rows   # any run: written as NAME.*
                                                # (ours-tail: ragged_tail, the first key block at its visible width;
                                                # causal rows: ours-tail-r2p = + mask_r2p, ours-tail-pairs-r2p = + persistent
                                                # pairs (d128), ours-l2g32 = l2_group_mb=32, the default's kernel)
    python benchmarks/sdpa_fwd.py --quick --only=causal --providers=ours,ours-tail,ours-tail-r2p,ours-tail-pairs-r2p,ours-l2g32,fa4
                                                # the causal A/B of session 5 -> sdpa_fwd_subset.*
    python benchmarks/sdpa_fwd.py --quick --old-options         # + the decided session-3 columns (cvt, pers, n176, ...)
    python benchmarks/sdpa_fwd.py --only=d128 --rounds=3 --providers=ours,fa4 --out=sdpa_fwd_d128
                                                # any run: N interleaved rounds per cell, the fastest kept
    python benchmarks/sdpa_fwd.py --spin --rounds=3  # the wait-form A/B (~60-80 s): d128 s4k / s8k both masks, d64 s4k;
                                                # ours, ours-nospin (spin_wait=False), ours-plan (the default plan through
                                                # the prepared execute: spin_wait), ours-spin-all (+ spin_wait_producer), FA4
    python benchmarks/sdpa_fwd.py --overhead                    # host us/call -> docs/benchmarks/sdpa_fwd_overhead.md
    python benchmarks/sdpa_fwd.py --only=s1k,s2k --persistent --providers=ours,ours-pers,fa4 --out=sdpa_fwd_pers
                                                # the persistent grid (+ pairs when causal) on the rows the default
                                                # runs one tile per CTA
    python benchmarks/sdpa_fwd.py --causal      # the session-4 A/B (~90 s): d128 causal s1k / s4k / s8k, d64 s8k both
                                                # masks, varlen; ours vs mask_r2p, persistent_pairs + mask_r2p (d128
                                                # causal), exp2_emu=8 (d64), FA4 -> sdpa_fwd_causal.*
    python benchmarks/sdpa_fwd.py --tile-n      # d128 non-causal: ours, ours-n128 (one tile per CTA, key tile 128),
                                                # ours-pers-n128 (persistent, key tile 128), FA4 -> sdpa_fwd_tile_n.*
    python benchmarks/sdpa_fwd.py --epi         # d128 dense rows (the persistent grid): ours, ours-wgepi (wg_epilogue),
                                                # ours-q2 (q_stages=2), ours-q2-wgepi, FA4 -> sdpa_fwd_epi.*
    python benchmarks/sdpa_fwd.py --pinned      # d128 dense rows: ours, ours-pinned (pinned_desc: the loop's GEMMs from
                                                # descriptors pinned per tile), FA4 -> sdpa_fwd_pinned.*
    python benchmarks/sdpa_fwd.py --mcast       # d128 dense non-causal rows: ours, ours-mcast (kv_multicast: CTA pairs
                                                # share K / V by TMA multicast), FA4 -> sdpa_fwd_mcast.*
    python benchmarks/sdpa_fwd.py --d64-pers    # d64 dense rows: ours, ours-m192-pers (192-row tile, persistent; pairs
                                                # when causal), ours-m192-pers-q2 (+ q_stages=2, wg_epilogue), FA4
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, Unsupported, run_benchmark  # noqa: E402

TOTAL = 16384


def _shapes(quick: bool):
    cases = []
    seqs = {128: [1024, 2048, 4096, 8192, 16384, 32768], 64: [2048, 8192], 256: [2048, 8192]}
    if quick:  # the prefill A/B set: d128 s4k / s8k both masks, d64 s8k non-causal, d256 s8k both masks and s2k causal,
        # d128 causal s1k, the varlen mix
        seqs = {128: [1024, 4096, 8192], 64: [8192], 256: [2048, 8192]}
    for d in (128, 64, 256):
        for s in seqs[d]:
            for causal in (False, True):
                if quick and ((d == 64 and causal) or (s < 4096 and not causal)):
                    continue
                b = max(1, TOTAL // s)
                h = 2048 // d
                cases.append(dict(kind="dense", b=b, h=h, hk=h, s=s, d=d, causal=causal))
    for s in [4096, 8192] if not quick else []:
        for causal in (False, True):
            cases.append(dict(kind="dense", b=TOTAL // s, h=32, hk=4, s=s, d=128, causal=causal))
    cases.append(dict(kind="varlen", lens=[512, 1024, 3000, 4096, 2048, 777, 4927], h=16, hk=16, d=128, causal=True))
    if not quick:
        cases.append(dict(kind="decode", b=64, h=32, hk=8, s=8192, d=128, causal=False))
        cases.append(dict(kind="decode", b=2, h=32, hk=8, s=32768, d=128, causal=False))  # 16 tiles on 132 SMs: split-KV
        cases.append(dict(kind="paged", b=64, h=32, hk=8, s=8192, d=128, causal=True, page=256))  # issue 4's decode target
        cases.append(dict(kind="paged", b=64, h=32, hk=8, s=8192, d=128, causal=True, page=16))  # vLLM's page size: one TMA per page
    return _as_cases(cases)


def _spin_shapes():
    """The wait-form A/B set (--spin, issue 4's d128 rows): d128 s4k / s8k both masks, d64 s4k non-causal."""
    cases = [dict(kind="dense", b=TOTAL // s, h=16, hk=16, s=s, d=128, causal=c) for s in (4096, 8192) for c in (False, True)]
    cases.append(dict(kind="dense", b=TOTAL // 4096, h=32, hk=32, s=4096, d=64, causal=False))
    return _as_cases(cases)


def _as_cases(cases):
    """Case objects (label, FLOPs or bytes) of the shape dicts ``cases``."""
    out = []
    for p in cases:
        if p["kind"] == "dense":
            flops = 4 * p["b"] * p["h"] * p["s"] * p["s"] * p["d"] / (2 if p["causal"] else 1)
            gqa = f" gqa{p['h'] // p['hk']}:1" if p["hk"] != p["h"] else ""
            label = f"d{p['d']} s{p['s'] // 1024}k b{p['b']}{gqa}{' causal' if p['causal'] else ''}"
            out.append(Case(label, p, flops=flops))
        elif p["kind"] == "varlen":
            flops = sum(4 * p["h"] * n * n * p["d"] / 2 for n in p["lens"])
            out.append(Case(f"varlen d{p['d']} {len(p['lens'])} seqs causal", p, flops=flops))
        else:
            byt = 2 * p["b"] * p["hk"] * p["s"] * p["d"] * 2
            kind = "decode" if p["kind"] == "decode" else f"paged decode (page {p['page']})"
            out.append(Case(f"{kind} b{p['b']} h{p['h']}:{p['hk']} skv{p['s'] // 1024}k", p, flops=4 * p["b"] * p["h"] * p["s"] * p["d"], bytes=byt))
    return out


_CACHE = {}


def _inputs(p):
    import torch

    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in p.items()))
    if key in _CACHE:
        return _CACHE[key]
    _CACHE.clear()
    torch.manual_seed(0)
    dt = torch.bfloat16
    if p["kind"] == "varlen":
        tq = sum(p["lens"])
        q = torch.randn(tq, p["h"], p["d"], device="cuda", dtype=dt)
        k = torch.randn(tq, p["hk"], p["d"], device="cuda", dtype=dt)
        v = torch.randn(tq, p["hk"], p["d"], device="cuda", dtype=dt)
        cu = [0]
        for n in p["lens"]:
            cu.append(cu[-1] + n)
        cu = torch.tensor(cu, dtype=torch.int32, device="cuda")
        res = dict(q=q, k=k, v=v, cu=cu, max=max(p["lens"]))
    elif p["kind"] == "paged":
        per = p["s"] // p["page"]
        pages = p["b"] * per
        q = torch.randn(p["b"], 1, p["h"], p["d"], device="cuda", dtype=dt)
        k = torch.randn(pages, p["page"], p["hk"], p["d"], device="cuda", dtype=dt)
        v = torch.randn(pages, p["page"], p["hk"], p["d"], device="cuda", dtype=dt)
        table = torch.randperm(pages, device="cuda").to(torch.int32).view(p["b"], per)
        cu = torch.arange(0, (p["b"] + 1) * p["s"], p["s"], dtype=torch.int32, device="cuda")
        res = dict(q=q, k=k, v=v, table=table, cu=cu)
    else:
        sq = 1 if p["kind"] == "decode" else p["s"]
        q = torch.randn(p["b"], sq, p["h"], p["d"], device="cuda", dtype=dt)
        k = torch.randn(p["b"], p["s"], p["hk"], p["d"], device="cuda", dtype=dt)
        v = torch.randn(p["b"], p["s"], p["hk"], p["d"], device="cuda", dtype=dt)
        res = dict(q=q, k=k, v=v)  # BSHD storage
    _CACHE[key] = res
    return res


def make_ours(case):
    import torch

    from cudnn.sdpa import sdpa_fwd

    p = case.params
    x = _inputs(p)
    if p["kind"] == "varlen":
        out = torch.empty_like(x["q"])
        return lambda: sdpa_fwd(
            x["q"], x["k"], x["v"], is_causal=True, cu_seqlens_q=x["cu"], cu_seqlens_kv=x["cu"], max_seqlen_q=x["max"], max_seqlen_kv=x["max"], out=out
        )
    if p["kind"] == "paged":
        q = x["q"].transpose(1, 2)
        out = torch.empty_like(x["q"]).transpose(1, 2)
        kw = dict(page_table=x["table"], cu_seqlens_kv=x["cu"], is_causal=True, causal_bottom_right=True, out=out, num_splits=0)
        sdpa_fwd(q, x["k"], x["v"], **kw)
        return lambda: sdpa_fwd(q, x["k"], x["v"], **kw)
    q, k, v = (t.transpose(1, 2) for t in (x["q"], x["k"], x["v"]))
    out = torch.empty_like(x["q"]).transpose(1, 2)
    causal = p["causal"]
    splits = 0 if p["kind"] == "decode" else None  # decode: the split-KV heuristic (1 split when the grid is full)
    sdpa_fwd(q, k, v, is_causal=causal, out=out, num_splits=splits)
    return lambda: sdpa_fwd(q, k, v, is_causal=causal, out=out, num_splits=splits)


def make_ours_plan(case):
    """Prefill rows: the default plan through the prepared ``SdpaFwdSm90`` execute (the path of every plan-option
    column), so an A/B against it differs in the kernel only (``ours`` goes through ``sdpa_fwd``)."""
    return _make_ours_prefill_plan(case)


def make_ours_nospin(case):
    """Prefill rows: ``spin_wait=False`` (the DSL's hinted wait on the consumers' Q / K / V full barriers: TRYWAIT, then
    NANOSLEEP.SYNCS while the phase is incomplete): the default before session 9, the baseline of the wait-form A/B."""
    return _make_ours_prefill_plan(case, spin_wait=False)


def make_ours_spin_all(case):
    """Prefill rows: ``spin_wait`` (the default) and ``spin_wait_producer`` (no NANOSLEEP on any pipeline wait)."""
    return _make_ours_prefill_plan(case, spin_wait=True, spin_wait_producer=True)


def make_ours_kv3(case):
    """Decode rows only: the same kernel with a 3-deep K/V ring (``kv_stages=3``, a plan-time tuning knob). A tuning
    experiment for the decode target, not a separate product."""
    return _make_ours_plan(case, kv_stages=3)


def _make_ours_plan(case, **plan_kw):
    """Decode rows only: an ``SdpaFwdSm90`` plan with the plan-time options ``plan_kw``, through the adapter, split-KV
    when the heuristic splits (as ``sdpa_fwd(num_splits=0)`` does for ``ours``)."""
    import torch

    from cudnn.sdpa import SdpaFwdSm90
    from cudnn.sdpa.fwd.api import num_splits_for

    p = case.params
    if p["kind"] not in ("decode", "paged"):
        raise Unsupported("decode rows only (a decode plan option)")
    x = _inputs(p)
    q = x["q"].transpose(1, 2)
    out = torch.empty_like(x["q"]).transpose(1, 2)
    if p["kind"] == "paged":
        k, v = x["k"], x["v"]
        kw = dict(page_table=x["table"], cu_seqlens_kv=x["cu"], is_causal=True, causal_bottom_right=True)
    else:
        k, v = x["k"].transpose(1, 2), x["v"].transpose(1, 2)
        kw = {}
    probe = SdpaFwdSm90(q, k, v, out, **plan_kw, **kw)
    probe.check_support()
    split = num_splits_for(probe.key, p["b"], p["h"], p["hk"], 1, p["s"]) > 1
    plan = SdpaFwdSm90(q, k, v, out, split_kv=split, **plan_kw, **kw) if split else probe
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda") if split else None
    cu, table = kw.get("cu_seqlens_kv"), kw.get("page_table")

    def fn():
        return plan.execute(q, k, v, out, None, None, None, cu, None, None, None, ws, None, table)

    fn()
    return fn


def _make_ours_prefill_plan(case, only_d=None, dense_only=False, non_causal_only=False, **plan_kw):
    """Prefill rows (dense, or THD varlen unless ``dense_only``): an ``SdpaFwdSm90`` plan with the plan-time options
    ``plan_kw``, on the same BSHD inputs as ``ours`` (the prepared execute, so only the kernel differs). ``only_d``: a
    head dim (int) or a predicate on it; rows outside it are left blank (each plan costs a compile)."""
    import torch

    from cudnn.sdpa import SdpaFwdSm90

    p = case.params
    if p["kind"] not in ("dense", "varlen") or (dense_only and p["kind"] != "dense"):
        raise Unsupported("dense prefill rows only (a prefill plan option)" if dense_only else "prefill rows only (a prefill plan option)")
    if only_d is not None and not (only_d(p["d"]) if callable(only_d) else p["d"] == only_d):
        raise Unsupported("not measured for this head dim (a plan-option A/B column)")
    if non_causal_only and p["causal"]:
        raise Unsupported("non-causal rows only (a plan-option A/B column)")
    x = _inputs(p)
    if p["kind"] == "varlen":
        q, k, v = x["q"], x["k"], x["v"]
        out = torch.empty_like(q)
        cu, mx = x["cu"], x["max"]
        plan = SdpaFwdSm90(q, k, v, out, is_causal=True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=mx, max_seqlen_kv=mx, **plan_kw)
        plan.compile()

        def fn():
            return plan.execute(q, k, v, out, None, None, cu, cu, mx)
    else:
        q, k, v = (t.transpose(1, 2) for t in (x["q"], x["k"], x["v"]))
        out = torch.empty_like(x["q"]).transpose(1, 2)
        plan = SdpaFwdSm90(q, k, v, out, is_causal=p["causal"], **plan_kw)
        plan.compile()

        def fn():
            return plan.execute(q, k, v, out)

    fn()
    return fn


def make_ours_cvt(case):
    """d = 64 / 256 prefill: ``packed_cvt=True`` (P converted in bf16x2 pairs; the default key tiles of d = 64 / 192 /
    256 convert element by element, their P fragments not being a power of two long; at d = 128 it is the same code).
    The A/B for flipping PACKED_CVT_DEFAULT."""
    return _make_ours_prefill_plan(case, only_d=lambda d: d != 128, dense_only=True, packed_cvt=True)


def make_ours_persistent(case):
    """Dense prefill: ``persistent=True`` (one CTA per SM, static-stride tiles, longest-first when causal, next tile's
    K/V loads under the epilogue), with packed_cvt. The A/B for flipping PERSISTENT_DEFAULT."""
    return _make_ours_prefill_plan(case, dense_only=True, persistent=True, packed_cvt=True)


def make_ours_n176(case):
    """d = 128 prefill: a 176-row key tile (FA3's Hopper choice for non-causal d = 128; FA4's sm90 path takes 192), with
    packed_cvt (which tile_n implies)."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, tile_n=176)


def make_ours_n192(case):
    """d = 128 non-causal prefill: a 192-row key tile (FA4's sm90 choice for non-causal d = 128), packed_cvt."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, non_causal_only=True, tile_n=192)


def make_ours_n128(case):
    """d = 128 non-causal prefill: the one-tile grid at the 128-row key tile (tile_config's, FA4 4.0's sm90 choice; an
    explicit tile_n keeps the one-tile grid) instead of TILE_N_NONCAUSAL_D128_DEFAULT's 192 (session 21: the default is
    the persistent grid at 128). The A/B of that default (session 16: under ncu the 192-row tile's per-block cost
    equals the 128-row tile's per key row, its per-tile cost is larger: the unoverlapped last PV GEMM and first block)."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, non_causal_only=True, tile_n=128)


def make_ours_vlpt(case):
    """THD varlen rows: ``varlen_lpt=True`` (L2 groups of whole heads over every sequence, longest-first over all of
    them; the default order runs the groups of the last sequences last)."""
    if case.params["kind"] != "varlen":
        raise Unsupported("THD varlen rows only (a varlen plan option)")
    return _make_ours_prefill_plan(case, varlen_lpt=True)


def make_ours_vlpt_pers(case):
    """THD varlen rows: ``varlen_lpt`` and ``persistent`` together (tiles past a sequence's end skipped in-loop instead
    of launched as CTAs that exit)."""
    if case.params["kind"] != "varlen":
        raise Unsupported("THD varlen rows only (a varlen plan option)")
    return _make_ours_prefill_plan(case, varlen_lpt=True, persistent=True)


def make_ours_vcompact(case):
    """THD varlen rows: ``varlen_compact=True`` (no CTA for tiles past a sequence's end, the batch found by a warp prefix
    sum over cu_seqlens_q; per-sequence L2 sections of heads, longest-first inside every sequence). The A/B for
    flipping VARLEN_COMPACT_DEFAULT."""
    if case.params["kind"] != "varlen":
        raise Unsupported("THD varlen rows only (a varlen plan option)")
    return _make_ours_prefill_plan(case, varlen_compact=True)


def make_ours_vc_tmao(case):
    """THD varlen rows: ``varlen_compact`` and ``varlen_tma_o`` (O stored by one TMA per tile through a ragged view, as
    dense tiles store it, instead of predicated 16-byte stores from the consumers)."""
    if case.params["kind"] != "varlen":
        raise Unsupported("THD varlen rows only (a varlen plan option)")
    return _make_ours_prefill_plan(case, varlen_compact=True, varlen_tma_o=True)


def make_ours_m192_kv3(case):
    """d = 64 prefill: ``tile_m=192`` with a 3-deep K/V ring (a 192 x 128 d = 64 tile leaves shared memory for it; a
    key block is little work at d = 64, so the loads run further ahead)."""
    return _make_ours_prefill_plan(case, only_d=64, dense_only=True, tile_m=192, kv_stages=3)


def make_ours_oearly(case):
    """d = 256 prefill: ``o_rescale_early=True`` (O's softmax rescale issued under the next S GEMM, before the PV GEMM,
    instead of after the PV GEMM drains: FA4's order for d_v > 128; bitwise the same result)."""
    return _make_ours_prefill_plan(case, only_d=256, dense_only=True, o_rescale_early=True)


def make_ours_m192(case):
    """d = 64 prefill: ``tile_m=192`` (three consumer warpgroups of 64 rows issuing their GEMMs round-robin, key tile
    128: FA4's sm90 tile for d <= 64; the default is 128 x 192 on two warpgroups)."""
    return _make_ours_prefill_plan(case, only_d=64, dense_only=True, tile_m=192)


def make_ours_r2p(case):
    """Prefill rows: ``mask_r2p=True`` (masked key blocks select each score on one bit of a per-row 32-bit keep mask,
    R2P + FSEL, instead of an ``if`` per score; bitwise the same result). The A/B for flipping MASK_R2P_DEFAULT."""
    return _make_ours_prefill_plan(case, mask_r2p=True)


def make_ours_pers_pairs_r2p(case):
    """d = 128 causal dense rows: ``persistent`` with ``persistent_pairs`` (a CTA takes query blocks M - 1 - j and j of
    one head back to back: equal causal work per unit, dealt by the static stride) and ``mask_r2p``."""
    if case.params["kind"] == "dense" and not case.params["causal"]:
        raise Unsupported("causal rows only (a causal load-balance option)")
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, persistent=True, persistent_pairs=True, mask_r2p=True)


def make_ours_emu8(case):
    """d = 64 dense rows: ``exp2_emu=8`` (one exponential in 8 per row of the unmasked key blocks on the FMA pipe, a
    degree-3 polynomial, instead of MUFU.EX2: at d = 64 the 4 MUFU lanes per SM partition bound a key block)."""
    return _make_ours_prefill_plan(case, only_d=64, dense_only=True, exp2_emu=8)


def make_ours_tail(case):
    """Prefill rows: ``ragged_tail=True`` (each warpgroup's first key block, the partial last block or the causal
    diagonal, at the width its rows see: S GEMM N = 64 / 128, softmax on that slice, PV k-loop stopped there; d128 s4k
    non-causal: 4096 = 21 x 192 + 64). The A/B for flipping RAGGED_TAIL_DEFAULT."""
    return _make_ours_prefill_plan(case, ragged_tail=True)


def _causal_rows_only(case):
    p = case.params
    if p["kind"] == "dense" and not p["causal"]:
        raise Unsupported("causal rows only (a causal-path A/B column)")


def make_ours_tail_r2p(case):
    """Causal prefill rows (dense and THD varlen): ``ragged_tail`` with ``mask_r2p`` (the first key block at its visible
    width, every masked block through per-row 32-bit keep masks). Both bitwise the default: the A/B for flipping the two
    together on causal plans."""
    _causal_rows_only(case)
    return _make_ours_prefill_plan(case, ragged_tail=True, mask_r2p=True)


def make_ours_tail_pairs_r2p(case):
    """d = 128 causal dense rows: ``ragged_tail`` + ``persistent`` + ``persistent_pairs`` + ``mask_r2p`` (session 4's
    pairs + r2p column, 566.4 vs 548.1 TFLOP/s at s4k but 535.1 vs 591.2 at s8k, with the narrow first block)."""
    _causal_rows_only(case)
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, ragged_tail=True, persistent=True, persistent_pairs=True, mask_r2p=True)


def make_ours_l2g32(case):
    """Causal dense rows: ``l2_group_mb=32`` (host only, the default's kernel: the longest-first tile order runs as many
    (head, batch) pairs together as 32 MiB of K/V hold, FA4's LPT sections, instead of 8 MiB: at d256 s8k 4 heads per group
    instead of 1, whose longest tiles then no longer start near the end of the grid). The A/B for L2_GROUP_MB_DEFAULT."""
    _causal_rows_only(case)
    return _make_ours_prefill_plan(case, dense_only=True, l2_group_mb=32)


#: The masked-path A/B set (--causal): the causal d = 128 rows of the quick set, d = 64 s8k both masks, the varlen mix.
CAUSAL_AB_LABELS = ("d128 s1k b16 causal", "d128 s4k b4 causal", "d128 s8k b2 causal", "d64 s8k b2", "d64 s8k b2 causal", "varlen d128 7 seqs causal")


def make_ours_pers_short(case):
    """Dense rows the default runs on the one-tile grid (non-causal, and causal at head dims other than 128):
    ``persistent=True`` (one CTA per SM over a static tile stride: the next tile's Q / K / V loads under this tile's
    epilogue), causal rows with ``persistent_pairs`` (query blocks M - 1 - j and j of one head back to back). The A/B
    (--persistent) for the short-sequence rows below 0.95x FA4, where a CTA's prologue and O store are a larger share."""
    p = case.params
    if p["kind"] == "dense" and p["causal"] and p["d"] == 128:
        raise Unsupported("dense causal d = 128 is persistent + pairs by default")
    return _make_ours_prefill_plan(case, dense_only=True, persistent=True, persistent_pairs=bool(p["causal"]))


def make_ours_pers_n128(case):
    """d = 128 non-causal prefill: persistent with the 128-row key tile (O then gets its own shared-memory tile, so Q is
    released after the tile's last S GEMM and the next tile's Q loads under its last PV GEMM and epilogue)."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, non_causal_only=True, tile_n=128, persistent=True)


def _make_ours_d128_option(case, **plan_kw):
    """d = 128 dense prefill rows (causal or not: both run the persistent grid by default) with plan options on top of
    the defaults."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, **plan_kw)


def make_ours_wgepi(case):
    """d = 128 dense prefill: ``wg_epilogue=True`` (each consumer warpgroup stores its 64 rows of O alone)."""
    return _make_ours_d128_option(case, wg_epilogue=True)


def make_ours_q2(case):
    """d = 128 dense prefill: ``q_stages=2`` (two Q buffers: the next tile's Q loads while this tile runs)."""
    return _make_ours_d128_option(case, q_stages=2)


def make_ours_q2_wgepi(case):
    """d = 128 dense prefill: ``q_stages=2`` and ``wg_epilogue=True`` together."""
    return _make_ours_d128_option(case, q_stages=2, wg_epilogue=True)


def make_ours_pinned(case):
    """d = 128 dense prefill: ``pinned_desc=True`` (the key-block loop's GEMMs from descriptors pinned once per tile)."""
    return _make_ours_d128_option(case, pinned_desc=True)


def make_ours_mcast(case):
    """d = 128 dense non-causal prefill: ``kv_multicast=True`` (clusters of two CTAs sharing every K / V tile by TMA
    multicast); the causal rows are not served (the two query blocks of a cluster would see different key blocks)."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, non_causal_only=True, kv_multicast=True)


def make_ours_m192_pers(case):
    """d = 64 dense prefill: the 192-row query tile (three consumer warpgroups) on the persistent grid (O in its own
    shared-memory tile; pairs when causal)."""
    return _make_ours_prefill_plan(case, only_d=64, dense_only=True, tile_m=192, persistent=True, persistent_pairs=bool(case.params["causal"]))


def make_ours_m192_pers_q2(case):
    """d = 64 dense prefill: ``ours-m192-pers`` with ``q_stages=2`` and ``wg_epilogue=True``."""
    p = case.params
    return _make_ours_prefill_plan(
        case, only_d=64, dense_only=True, tile_m=192, persistent=True, persistent_pairs=bool(p["causal"]), q_stages=2, wg_epilogue=True
    )


def make_ours_pers_n176(case):
    """d = 128 non-causal prefill: persistent with the 176-row key tile (and packed_cvt) together."""
    return _make_ours_prefill_plan(case, only_d=128, dense_only=True, non_causal_only=True, tile_n=176, persistent=True)


def _require_large_pages(case):
    if case.params["kind"] != "paged":
        raise Unsupported("paged rows only (page-table prefetch)")
    if case.params["page"] < 128:
        raise Unsupported("pages shorter than the key tile always read the page table through the window")


def make_ours_prefetch(case):
    """Paged decode rows only: the paged plan with ``page_prefetch=True`` (the producer warp reads the page table 32
    entries per load and shuffles each block's page, instead of a dependent load before every K/V TMA), otherwise as
    ``ours`` (default ring depth, split-KV when the heuristic splits). The A/B for flipping the paged default."""
    _require_large_pages(case)
    return _make_ours_plan(case, page_prefetch=True)


def make_ours_m64(case):
    """Decode rows: the plan with ``tile_m64=True`` (64-row query tile, one consumer warpgroup: half the padded MMA
    work of a pack-GQA tile), otherwise as ``ours``. The A/B for a decode plan choice."""
    return _make_ours_plan(case, tile_m64=True)


def make_ours_m64_prefetch(case):
    """Paged decode rows only: ``tile_m64`` and ``page_prefetch`` together."""
    _require_large_pages(case)
    return _make_ours_plan(case, tile_m64=True, page_prefetch=True)


def fa4_available():
    try:
        import flash_attn.cute  # noqa: F401

        return None
    except Exception as exc:  # noqa: BLE001
        return f"flash_attn.cute not importable ({type(exc).__name__}: {exc})"


def make_fa4(case):
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    p = case.params
    if p["kind"] == "paged":
        raise Unsupported("paged KV not wired for FA4 in this benchmark")
    x = _inputs(p)
    if p["kind"] == "varlen":
        return lambda: flash_attn_varlen_func(
            x["q"], x["k"], x["v"], cu_seqlens_q=x["cu"], cu_seqlens_k=x["cu"], max_seqlen_q=x["max"], max_seqlen_k=x["max"], causal=True
        )
    causal = p["causal"]
    flash_attn_func(x["q"], x["k"], x["v"], causal=causal)
    return lambda: flash_attn_func(x["q"], x["k"], x["v"], causal=causal)


def _make_torch(backend_name):
    def make(case):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        p = case.params
        if p["kind"] in ("varlen", "paged"):
            raise Unsupported(f"no {'THD varlen' if p['kind'] == 'varlen' else 'paged KV'} in torch SDPA")
        x = _inputs(p)
        q, k, v = (t.transpose(1, 2) for t in (x["q"], x["k"], x["v"]))
        gqa = p["h"] != p["hk"]
        backend = getattr(SDPBackend, backend_name)
        causal = p["causal"]

        def fn():
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        fn()
        return fn

    return make


#: The H200's HBM3e bandwidth (GB/s, NVIDIA's specification): the denominator of issue 4's decode target.
HBM_GBPS = 4800

#: Issue 4's host-overhead targets (microseconds per call).
OVERHEAD_TARGETS = {
    "sdpa_fwd (cached plan, out given)": 20.0,
    "SdpaFwdSm90.execute (prepared)": 8.0,
}


def _empty_launch_entry():
    """The DSL launch floor: a tvm-ffi entry that launches an empty one-warp kernel (no argument but the stream),
    through the same runtime path (cudaLaunchKernelEx in the DSL's runtime library) as the forward's host function."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute

    @cute.kernel
    def overhead_empty_kernel():
        pass

    overhead_empty_kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    def launch_empty(stream):
        overhead_empty_kernel().launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    launch_empty.__annotations__ = {"stream": cuda.CUstream}  # an object, not this module's postponed string
    fn = cute.compile(cute.jit(launch_empty), cuda.CUstream(0), options="--enable-tvm-ffi")
    get = getattr(fn, "__tvm_ffi_object__", None)
    return get() if get is not None else fn


def host_overhead():
    """Host microseconds per call (the GPU queue kept busy by a long sleep kernel, so launches never wait on the device):
    cached ``sdpa_fwd`` with and without a preallocated output, prepared ``SdpaFwdSm90.execute`` on torch's current
    stream and on an explicit handle, THD executes (the default plans: ``fast_guard`` on, the metadata check of a repeated
    call in one C++ TensorGuards call), each prepared row again with ``fast_guard=False`` (the memo path alone), and the breakdown: the Python side with the entry stubbed, the
    compiled entry alone on prebuilt arguments, and the DSL's launch floor (an empty kernel through tvm-ffi). Rows are
    timed interleaved (round by round) so drift hits every row alike. Prints one line per entry with the issue's target,
    and writes docs/benchmarks/sdpa_fwd_overhead.md."""
    import time

    import torch

    from cudnn.sdpa import SdpaFwdSm90, sdpa_fwd

    q, k, v = (torch.randn(1, 128, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    o = torch.empty_like(q)
    handle = torch.cuda.current_stream().cuda_stream
    tq, tk, tv = (torch.randn(256, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    to = torch.empty_like(tq)
    cu = torch.tensor([0, 100, 256], dtype=torch.int32, device="cuda")

    def prepared(*args, **kw):
        plan = SdpaFwdSm90(*args, **kw)
        plan.compile()
        return plan

    plan = prepared(q, k, v, o)
    mplan = prepared(q, k, v, o, fast_guard=False)
    vkw = dict(is_causal=True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=156, max_seqlen_kv=156)
    vplan = prepared(tq, tk, tv, to, **vkw)
    mvplan = prepared(tq, tk, tv, to, fast_guard=False, **vkw)
    # the same THD plan with O stored by TMA: one more TMA descriptor built per launch (4 instead of 3)
    vplan_tma = prepared(tq, tk, tv, to, varlen_tma_o=True, **vkw)
    mplan.execute(q, k, v, o)
    tail = mplan._fast[3][0][1][2]  # the memoized launch arguments after the four data pointers (see execute)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
    entry = mplan._entry
    plan128 = prepared(q, k, v, o, tile_n=128)  # the pre-session-3 default key tile (164 KB of shared memory, not 225)
    stubs = {}
    for fg in (False, True):  # the same plan with the compiled entry replaced by a no-op: the Python side alone
        stubs[fg] = prepared(q, k, v, o, fast_guard=fg)
        stubs[fg]._entry = lambda *a: None
    try:
        empty = _empty_launch_entry()
    except Exception as exc:  # a calibration row only: the run goes on without it
        print(f"host overhead: no DSL launch-floor row ({type(exc).__name__}: {exc})", flush=True)
        empty = None
    entries = [
        ("sdpa_fwd (cached plan, out given)", lambda: sdpa_fwd(q, k, v, out=o)),
        ("sdpa_fwd (cached plan, allocating o)", lambda: sdpa_fwd(q, k, v)),
        ("SdpaFwdSm90.execute (prepared)", lambda: plan.execute(q, k, v, o)),
        ("SdpaFwdSm90.execute (prepared, fast_guard=False)", lambda: mplan.execute(q, k, v, o)),
        ("SdpaFwdSm90.execute (prepared, stream handle)", lambda: plan.execute(q, k, v, o, current_stream=handle)),
        ("SdpaFwdSm90.execute (prepared, stream handle, fast_guard=False)", lambda: mplan.execute(q, k, v, o, current_stream=handle)),
        ("SdpaFwdSm90.execute (prepared, THD)", lambda: vplan.execute(tq, tk, tv, to, None, None, cu, cu, 156)),
        ("SdpaFwdSm90.execute (prepared, THD, fast_guard=False)", lambda: mvplan.execute(tq, tk, tv, to, None, None, cu, cu, 156)),
        ("SdpaFwdSm90.execute (prepared, tile_n=128)", lambda: plan128.execute(q, k, v, o)),
        ("SdpaFwdSm90.execute (prepared, THD, varlen_tma_o)", lambda: vplan_tma.execute(tq, tk, tv, to, None, None, cu, cu, 156)),
        # the breakdown of the prepared execute: Python validation and argument building with no launch, and the
        # compiled tvm-ffi entry alone on prebuilt arguments (its host function packs the 4 TMA descriptors inline, no
        # driver call, then calls cudaLaunchKernelEx), and the same runtime's launch of an empty kernel
        ("  execute, Python side only (entry stubbed)", lambda: stubs[True].execute(q, k, v, o)),
        ("  execute, Python side only, fast_guard=False (entry stubbed)", lambda: stubs[False].execute(q, k, v, o)),
    ]
    if mplan._tvm_ffi and tail is not None:
        entries.append(("  compiled entry alone (prebuilt arguments)", lambda: entry(*ptrs, *tail, handle)))
    if empty is not None:
        entries.append(("  DSL launch floor: empty kernel through tvm-ffi", lambda: empty(handle)))
    for _, fn in entries:
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    guarded = [p._guard is not None for p in (plan, vplan, plan128, stubs[True])]
    best = {name: float("inf") for name, _ in entries}
    n = 300
    for _ in range(5):
        for name, fn in entries:
            torch.cuda._sleep(100_000_000)  # ~50 ms of device work: the timed launches only queue
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
    rows = []
    for name, _ in entries:
        target = OVERHEAD_TARGETS.get(name)
        verdict = "" if target is None else f" (target <= {target:.0f} us: {'PASS' if best[name] <= target else 'FAIL'})"
        rows.append((name, best[name], target, verdict))
        print(f"host overhead: {name}: {best[name]:.1f} us/call{verdict}", flush=True)
    tvm = "tvm-ffi" if plan._tvm_ffi else "DSL generic entry"
    guard_note = "installed" if all(guarded) else f"NOT installed on every default plan ({guarded}): those rows ran the memo path"
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    lines = [
        "## attention forward: host overhead per call (H200 host)",
        "",
        f"- launch entry: {tvm}; best of 5 x 300 calls while the GPU is busy (launches only queue); rows interleaved per round",
        f"- fast_guard (one C++ TensorGuards metadata check per repeated call): {guard_note}",
        f"- device: {torch.cuda.get_device_name()} (torch {torch.__version__})",
        f"- written by benchmarks/sdpa_fwd.py --overhead on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| call | us/call | target |",
        "|---|---|---|",
    ] + [f"| {n} | {b:.1f} | {'-' if t is None else f'<= {t:.0f}'}{v and (' ' + v.split(': ')[-1].rstrip(')'))} |" for n, b, t, v in rows]
    with open(os.path.join(out_dir, "sdpa_fwd_overhead.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    quick = "--quick" in sys.argv
    if "--overhead" in sys.argv:
        host_overhead()
        return
    providers = [
        Provider("ours", make_ours),
        Provider("fa4", make_fa4, fa4_available),
        Provider("torch-cudnn", _make_torch("CUDNN_ATTENTION")),
        Provider("torch-flash", _make_torch("FLASH_ATTENTION")),
    ]
    if "--persistent" in sys.argv:  # the short-sequence A/B: the persistent grid where the default is one tile per CTA
        providers.insert(1, Provider("ours-pers", make_ours_pers_short))
    if "--kv3" in sys.argv:  # decode tuning experiment: a 3-deep K/V ring next to the default
        providers.insert(1, Provider("ours-kv3", make_ours_kv3))
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    cases, name = _shapes(quick), "sdpa_fwd"
    if "--causal" in sys.argv:  # the masked-path A/B (torch's backends left out for time)
        cases = [c for c in _shapes(False) if c.label in CAUSAL_AB_LABELS]
        providers = [
            providers[0],
            Provider("ours-r2p", make_ours_r2p),
            Provider("ours-pairs-r2p", make_ours_pers_pairs_r2p),
            Provider("ours-emu8", make_ours_emu8),
            providers[1],
        ]
        name = "sdpa_fwd_causal"
    if "--spin" in sys.argv:  # the wait-form A/B (issue 4): consumer / producer waits spinning without NANOSLEEP
        cases = _spin_shapes()
        providers = [
            providers[0],
            Provider("ours-nospin", make_ours_nospin),
            Provider("ours-plan", make_ours_plan),
            Provider("ours-spin-all", make_ours_spin_all),
            providers[1],
        ]
        name = "sdpa_fwd_spin"
    if "--tile-n" in sys.argv:  # the key-tile A/B of d = 128 non-causal prefill (TILE_N_NONCAUSAL_D128_DEFAULT)
        cases = [c for c in _shapes(False) if c.params["kind"] == "dense" and c.params["d"] == 128 and not c.params["causal"]]
        providers = [providers[0], Provider("ours-n128", make_ours_n128), Provider("ours-pers-n128", make_ours_pers_n128), providers[1]]
        name = "sdpa_fwd_tile_n"
    if "--epi" in sys.argv:  # the persistent tile-transition A/B of d = 128 (wg_epilogue, q_stages; both defaults since session 21)
        cases = [c for c in _shapes(False) if c.params["kind"] == "dense" and c.params["d"] == 128]
        providers = [
            providers[0],
            Provider("ours-wgepi", make_ours_wgepi),
            Provider("ours-q2", make_ours_q2),
            Provider("ours-q2-wgepi", make_ours_q2_wgepi),
            providers[1],
        ]
        name = "sdpa_fwd_epi"
    if "--pinned" in sys.argv:  # session 22: pinned_desc on the d = 128 rows (opt-in)
        cases = [c for c in _shapes(False) if c.params["kind"] == "dense" and c.params["d"] == 128]
        providers = [providers[0], Provider("ours-pinned", make_ours_pinned), providers[1]]
        name = "sdpa_fwd_pinned"
    if "--mcast" in sys.argv:  # session 23: kv_multicast on the d = 128 non-causal rows (opt-in)
        cases = [c for c in _shapes(False) if c.params["kind"] == "dense" and c.params["d"] == 128 and not c.params["causal"]]
        providers = [providers[0], Provider("ours-mcast", make_ours_mcast), providers[1]]
        name = "sdpa_fwd_mcast"
    if "--d64-pers" in sys.argv:  # d = 64: the 192-row tile on the persistent grid
        cases = [c for c in _shapes(False) if c.params["kind"] == "dense" and c.params["d"] == 64]
        providers = [providers[0], Provider("ours-m192-pers", make_ours_m192_pers), Provider("ours-m192-pers-q2", make_ours_m192_pers_q2), providers[1]]
        name = "sdpa_fwd_d64_pers"
    if quick:  # the prefill plan-option A/B (torch's flash backend left out for time)
        # Decided columns, back with --old-options: session 3's (cvt, pers, n176, n192, pers-n176, vlpt, vlpt-pers:
        # packed_cvt and tile_n 192 are defaults, the rest lost) and session 4's (vcompact, vc-tmao, m192, oearly: now
        # defaults, so they build the default's kernel).
        old = [
            Provider("ours-vcompact", make_ours_vcompact),
            Provider("ours-vc-tmao", make_ours_vc_tmao),
            Provider("ours-m192", make_ours_m192),
            Provider("ours-oearly", make_ours_oearly),
            Provider("ours-cvt", make_ours_cvt),
            Provider("ours-pers", make_ours_persistent),
            Provider("ours-n176", make_ours_n176),
            Provider("ours-n192", make_ours_n192),
            Provider("ours-pers-n176", make_ours_pers_n176),
            Provider("ours-vlpt", make_ours_vlpt),
            Provider("ours-vlpt-pers", make_ours_vlpt_pers),
        ]
        providers = [
            providers[0],
            Provider("ours-tail", make_ours_tail),
            Provider("ours-tail-r2p", make_ours_tail_r2p),
            Provider("ours-tail-pairs-r2p", make_ours_tail_pairs_r2p),
            Provider("ours-l2g32", make_ours_l2g32),
            Provider("ours-m192-kv3", make_ours_m192_kv3),
            *(old if "--old-options" in sys.argv else []),
            providers[1],
            providers[2],
        ]
        name = "sdpa_fwd_quick"
    keep = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--providers=")]
    if keep:  # a subset of the columns (the GPU time of one A/B run is scarce)
        providers = [p for p in providers if p.name in keep[0]]
    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    if only:  # a subset (written as sdpa_fwd_subset.*): cases whose label contains every listed word of one group
        groups = [g.split("+") for g in only[0]]
        cases = [c for c in cases if any(all(w in c.label for w in grp) for grp in groups)]
        name = "sdpa_fwd_subset"
    out = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--out=")), None)
    name = out or name  # --out=NAME: docs/benchmarks/NAME.* (a table that must not replace another)
    rounds = int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--rounds=")), 1))  # interleaved rounds, fastest kept
    decode_only = bool(cases) and all(c.params["kind"] in ("decode", "paged") for c in cases)
    if decode_only:  # a decode table: in GB/s of K+V (issue 4's target is a fraction of HBM bandwidth), the paged A/B column
        providers[1:1] = [Provider("ours-prefetch", make_ours_prefetch), Provider("ours-m64", make_ours_m64), Provider("ours-m64-pf", make_ours_m64_prefetch)]
    results = run_benchmark(
        name,
        cases,
        providers,
        convention="4*B*H*S_q*S_kv*D FLOPs (halved for causal); decode GB/s counts K+V bytes; bf16, BSHD storage",
        metric="gbps" if decode_only else "tflops",
        out_dir=out_dir,
        title="attention forward, H200",
        rounds=rounds,
    )
    for r in results:  # issue 4: paged decode >= 80% of the H200's HBM bandwidth
        if r.case.startswith("paged decode") and r.gbps and r.provider.startswith("ours"):
            frac = r.gbps / HBM_GBPS
            print(f"{r.case} / {r.provider}: {r.gbps:.0f} GB/s = {frac:.0%} of {HBM_GBPS} GB/s (target >= 80%: {'PASS' if frac >= 0.8 else 'FAIL'})")


if __name__ == "__main__":
    main()


def compile_check() -> list[str]:
    """Without a GPU: build the forward plans the table measures for sm_90a (benchmarks/run_all.py)."""
    from cudnn.api_base import TensorDesc
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    names = []
    for d, causal in ((128, False), (128, True), (64, False), (256, True)):
        q = TensorDesc((2, 16, 4096, d), (4096 * 16 * d, d, 16 * d, 1), "bfloat16", "q")  # BSHD storage, BHSD view
        kv = TensorDesc((2, 16, 4096, d), (4096 * 16 * d, d, 16 * d, 1), "bfloat16", "k")
        SdpaFwdSm90(q, kv, kv, is_causal=causal).compile()
        names.append(f"sdpa_fwd d{d}{' causal' if causal else ''} (BSHD)")
    return names
