"""Attention backward benchmark: cudnn.sdpa vs FA4 (flash_attn.cute) vs torch SDPA (cuDNN and flash backends).

Same inputs (BSHD storage; torch and ours read the (B, H, S, D) transposed view natively) in the same process.
Only the backward is timed: ours is one ``sdpa_bwd`` call (preprocess + main kernel + postprocess, with the
caller's workspace) on the LSE our forward saved; the peers run ``torch.autograd.grad`` on a retained graph of
their own forward (their backward kernels plus autograd's dispatch).
TFLOP/s by the FlashAttention convention: backward = 2.5 x forward FLOPs = 2.5 * 4 * B * H * S^2 * D, halved for
causal. Shapes: 16k total tokens (B = 16384 / S), H * D = 2048; d 64 / 128 / 256; causal and not.

The ``ours-*`` providers are the main kernel's schedule variants (compile-key options, default off; see
cudnn.sdpa.bwd.kernel_key.TUNING_FIELDS), on the same inputs, so one run A/Bs them against the default and the peers:
``ours-dqtma`` (dQ partials through shared memory and one TMA reduce-add per warpgroup instead of fp32 atomics),
``ours-stats`` (lse / dpsum rows bulk-copied with Q / dO), ``ours-ds2`` (double-buffered dS^T, one barrier less per
query block), ``ours-prepost`` (coalesced pre/postprocess: four threads per row), ``ours-all`` (all four) and
``ours-splitd`` / ``ours-splitd2`` (the split-head-dim kernel that serves d256, with the coalesced pre/postprocess;
``2``: with double-buffered P^T / dS^T, the d256 default until session 5), ``ours-bulk`` (ours-all with dq_bulk for dq_tma: the dQ partial in
MMA-fragment order, one contiguous bulk reduce-add per warpgroup) and ``ours-bulkw`` (the same, the reduce-adds
issued by a dedicated writer warp, as FA3 / FA4 do); ``ours-m80`` (FA3 / FA4's d128 query tile of 80 rows: dQ^T
staged through a 128-byte swizzle and TMA reduce-adds, with dq_tma, stats_tma, ds2, prepost; d128 only), ``ours-m80w``
(the same, the reduce-adds from the writer warp), ``ours-dqt`` (m80's dQ^T staging and 128-byte-row TMA boxes at 64
rows: separates the tile's gain from the staging's) and ``ours-tmaw`` (dq_tma's 64-row schedule with the writer warp);
``ours-m80b`` / ``ours-m80bw`` (session 9: m80 with dq_bulk's path instead of dq_tma's: each warpgroup's 64 x 80 dQ^T
fragment staged in fragment order and added by one 20 KiB bulk reduce-add into 80-row fragment-ordered accumulator
blocks, with stats_tma, ds2, prepost and pack1, which keeps ptxas from serializing the WGMMAs at 80 rows; the
reduce-adds from the consumers or from the writer warp; d128 only);
``ours-m128`` (d64 only: FA3 / FA4's 128-row query blocks, with the causal default's dq_bulk + dq_writer, stats_tma,
ds2, prepost, causal and not) and ``ours-m128t`` (the same tile with dq_tma's reduce-adds from the consumers);
session 8's instruction-overhead variants: ``ours-pack`` / ``ours-dsk`` / ``ours-pd`` (the case's default schedule plus
``pack1``: P^T / dS^T converted once, ``dsk``: dS stored K-major by transposed stmatrix, or both; ``ours-spin`` /
``ours-kvq`` / ``ours-spinkvq``: the case's own default (``_default_tuning``) plus the fixed-cost variants ``spin``, the
consumers' barrier waits without NANOSLEEP, ``kvq``, K / V on the first Q / dO stage's barrier, or both; ``ours-pdl`` /
``ours-kvqpdl``: the same with ``pdl``, Programmatic Dependent Launch of the three kernels, alone or with kvq; ``ours-kvpf``
/ ``ours-pdlkvpf``: ``kvpf``, L2 prefetch of the next wave's K / V, alone or with pdl; ``ours-g3d``: ``g3d``, the
grouped 3-D launch grid of masked plans, the same tile order: masked rows only, elsewhere the same launch as ours; ``ours-mlp``:
``mlp``, the pre- / postprocess with every preprocess load issued before its first store and 64-row postprocess CTAs;
``ours-g3dmlp``: both), ``ours-m128r``
(ours-m128 with ``dqrows``: dQ's 128 rows split over the warpgroups) and ``ours-m128x`` (ours-m128 with those three
and ``stats4``: lse_log2 / dpsum read as 16-byte words);
``ours-splitdb`` (d256: split_d with FA4's dQ path: one 64 x 128 dQ GEMM per warpgroup, staged in fragment order and
added by one bulk reduce-add per warpgroup from the writer warp, one Q / dO stage), ``ours-splitdw`` (the same with S^T
on one consumer warpgroup and dP^T on the other, 64 x 64 each: a third less shared-memory operand traffic for the two
GEMMs), ``ours-splitdr`` (sdpwg with dV whole on warpgroup 1 and dK on warpgroup 2 as 64 x 256 RS WGMMAs from the
P^T / dS^T registers: the d256 default since session 5, so ``ours`` at d256) and ``ours-splitdr2`` (splitdr with
``dkvearly``: both RS GEMMs from one call site, which keeps ptxas from serializing the kernel's WGMMAs, issued before
the dS^T barrier, Q / dO released per warpgroup, dO loaded first); session 4's cluster variants (``ours-splitdc``,
``-splitdcp``, ``-splitdrcp``, ...) lost on the H200 and were removed in session 5, session 5's ``mrot`` / ``msel``
providers (``ours-mrot``, ``-mrotw``, ``-mrotw2``, ``-msel``, ``-bulkw2``) in session 6 (docs/benchmarks/sdpa_bwd_writer.md);
``ours-n96`` (D = 192 / D_v = 128: FA4's 64 x 96 tile, bwd/kernel_n96_sm90.py; ``ours-n96s`` with stats_tma; ``ours-n96s2`` / ``-n96sp`` / ``-n96s2p``
that with ds2 / pack1 / both; the A/B is
``--providers=ours,ours-n96,fa4 --only=d192``); ``ours-l2dq`` / ``ours-bulkw-l2dq``: ours / ours-bulkw with the
plan's private ``_l2_group_dq`` (the main kernel's L2 groups of heads sized counting the fp32 dQ accumulator: half as
many heads in flight at d128; a launch argument, same kernels); session 20: ``ours-dqfs`` / ``ours-nodqfs`` (the case's
default with / without dqfs: the dQ accumulator never zeroed, each query block's first dq_writer stores, in the d128
causal and d64 defaults since), ``ours-s4`` / ``-s4e`` / ``-s4ee`` (stats4 at the 64 / 80-row blocks; with stearly;
with elr too). A short A/B of these against the peers:

    python benchmarks/sdpa_bwd.py --quick --providers=ours,ours-bulk,ours-bulkw,ours-l2dq,ours-bulkw-l2dq,fa4,torch-cudnn
    python benchmarks/sdpa_bwd.py --quick --providers=ours,ours-m80,ours-m80w,ours-dqt,ours-tmaw,fa4,torch-cudnn
    python benchmarks/sdpa_bwd.py --only="d256 s8k" --providers=ours,fa4,torch-cudnn,ours-splitdr2 --out=sdpa_bwd_d256
    python benchmarks/sdpa_bwd.py --only=d64 --providers=ours,ours-m128,ours-m128t,fa4 --out=sdpa_bwd_m128
    python benchmarks/sdpa_bwd.py --only="d128 s4k|d128 s8k|d64 s4k|d64 s8k" --providers=ours,ours-pd,ours-m128,ours-m128x,fa4 --out=sdpa_bwd_instr
    python benchmarks/sdpa_bwd.py --only="d128 s4k|d128 s8k" --providers=ours,ours-m80b,ours-m80bw,ours-pd,fa4 --rounds=3 --out=sdpa_bwd_m80b

    python benchmarks/sdpa_bwd.py [--quick]     # writes docs/benchmarks/sdpa_bwd.{md,csv,png}; --quick: d128 8k (causal and not) + d256 8k -> sdpa_bwd_quick.*; --providers=a,b
    # --rounds=N: each case's providers timed in N interleaved rounds, the fastest kept (an A/B within run-to-run noise)
    # --providers=a,b also orders the columns (and the runs within a case); --only=d128 keeps the cases whose label
    # contains that text (--only="d128 s4k|d128 s8k": either); --out=NAME writes docs/benchmarks/NAME.* instead (an A/B that must not replace the tables)
    python benchmarks/sdpa_bwd.py --profile --only="d128 s1k b16 causal" --providers=ours,fa4 --out=sdpa_bwd_s1k
    # --profile: no timing table; each selected case and provider warmed, then --iters=N (default 10) calls under
    # torch.profiler: every kernel's mean device time per call -> docs/benchmarks/NAME_kernels.md (default sdpa_bwd_kernels.md)
"""

from __future__ import annotations

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, Unsupported, device_times, run_benchmark  # noqa: E402

TOTAL = 16384


def _shapes(quick: bool):
    seqs = {128: [1024, 2048, 4096, 8192, 16384], 64: [1024, 2048, 4096, 8192, 16384], 256: [4096, 8192], 192: [4096, 8192]}
    if quick:
        # d128 8k, causal and not (ours, its variants and the peers); d256 8k non-causal (ours-splitd*, peers)
        seqs = {128: [8192], 64: [], 256: [8192], 192: []}
    out = []
    for d in (128, 64, 256, 192):
        dv = 128 if d == 192 else d  # 192: DeepSeek-style heads, D_v = 128
        for s in seqs[d]:
            for causal in (False,) if quick and d == 256 else (False, True):
                b, h = max(1, TOTAL // s), 2048 // dv
                p = dict(b=b, h=h, hk=h, s=s, d=d, dv=dv, causal=causal)
                flops = 2.5 * 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
                dims = f"d{d}" if dv == d else f"d{d}-{dv}"
                out.append(Case(f"{dims} s{s // 1024}k b{b}{' causal' if causal else ''}", p, flops=flops))
    return out


_CACHE = {}


def _inputs(p):
    import torch

    key = tuple(sorted(p.items()))
    if key in _CACHE:
        return _CACHE[key]
    _CACHE.clear()
    torch.manual_seed(0)
    dt = torch.bfloat16
    q = torch.randn(p["b"], p["s"], p["h"], p["d"], device="cuda", dtype=dt)
    k = torch.randn(p["b"], p["s"], p["hk"], p["d"], device="cuda", dtype=dt)
    v = torch.randn(p["b"], p["s"], p["hk"], p["dv"], device="cuda", dtype=dt)
    do = torch.randn(p["b"], p["s"], p["h"], p["dv"], device="cuda", dtype=dt)
    _CACHE[key] = dict(q=q, k=k, v=v, do=do)  # BSHD storage
    return _CACHE[key]


def make_ours(case, tuning=None, l2_group_dq=False, group_heads=None):
    """Our backward; ``tuning``: the plan's ``_tuning`` (None: the library's defaults, DEFAULT_TUNING / D256_TUNING);
    ``l2_group_dq`` / ``group_heads``: the plan's ``_l2_group_dq`` / ``_group_heads`` launch-order switches."""
    import torch

    from cudnn.sdpa import SdpaBwdSm90, sdpa_fwd
    from cudnn.sdpa.bwd import api as bwd_api

    p = case.params
    if tuning is not None and "split_d" in tuning and p["d"] < 192:
        raise Unsupported("benchmarked at d192 / d256 only (the split-D kernel's reason to exist)")
    if tuning is not None and ("m80" in tuning or "dqt" in tuning) and p["d"] != 128:
        raise Unsupported("m80 / dqt (dQ^T, the head dim split over the warpgroups) serve D = 128 only")
    if tuning is not None and "m128" in tuning and p["d"] != 64:
        raise Unsupported("m128 (128-row query blocks) serves D = 64 only")
    if tuning is not None and "n96" in tuning and (p["d"], p["dv"]) != (192, 128):
        raise Unsupported("n96 (the 64 x 96 tile) serves D = 192 / D_v = 128 only")
    if p["d"] not in (64, 96, 128) and (
        tuning is not None and not {"split_d", "n96"} & set(tuning) or tuning is None and bwd_api._default_tuning(p["d"], p["dv"], False) == ()
    ):
        raise Unsupported(f"head dim {p['d']} is served by the split_d (ours-splitd) and, at 192 / 128, n96 (ours-n96) variants only")
    x = _inputs(p)
    q, k, v, do = (t.transpose(1, 2) for t in (x["q"], x["k"], x["v"], x["do"]))
    causal = p["causal"]
    o, lse = sdpa_fwd(q, k, v, is_causal=causal, return_lse=True)
    dq, dk, dv = (torch.empty_like(t) for t in (x["q"], x["k"], x["v"]))
    dq, dk, dv = (t.transpose(1, 2) for t in (dq, dk, dv))
    plan = SdpaBwdSm90(q, k, v, o, do, lse, dq, dk, dv, is_causal=causal, _tuning=tuning, _l2_group_dq=l2_group_dq, _group_heads=group_heads)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)
    return lambda: plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)


#: Schedule variants of our main kernel, by provider name (cudnn.sdpa.bwd.kernel_key.TUNING_FIELDS).
VARIANTS = {
    "ours-dqtma": ("dq_tma",),
    "ours-stats": ("stats_tma",),
    "ours-ds2": ("ds2",),
    "ours-prepost": ("prepost",),
    "ours-all": ("dq_tma", "stats_tma", "ds2", "prepost"),
    "ours-splitd": ("split_d", "prepost"),
    "ours-splitd2": ("split_d", "ds2", "prepost"),
    # d192 / d128 (session 13): split_d with dq_bulk's dQ path from the writer warp (the default, D192_TUNING), with
    # sdpwg (no dkvrs: D != D_v), and the atomic dQ path (split_d, ds2, prepost: ours-splitd2)
    "ours-d192b": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost"),
    "ours-d192bs": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg"),
    # d192 / 128: FA4's 64 x 96 tile (kernel_n96_sm90.py: 48 keys per warpgroup, dK^T / dV^T with M = the head dim, all
    # SS, dQ through the writer warp); ours-n96s is D192_TUNING since session 14
    "ours-n96": ("dq_bulk", "dq_writer", "prepost", "n96"),
    "ours-n96s": ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96"),
    # n96's opt-in follow-ups on top of ours-n96s: ds2 (a second dS buffer, no "dS free" CTA barrier: 226 KiB of
    # shared memory), pack1 (P / dS converted by inline cvt.rn pairs) and both
    "ours-n96s2": ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96", "ds2"),
    "ours-n96sp": ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96", "pack1"),
    "ours-n96s2p": ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96", "ds2", "pack1"),
    "ours-bulk": ("dq_bulk", "stats_tma", "ds2", "prepost"),
    "ours-bulkw": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost"),
    "ours-m80": ("dq_tma", "stats_tma", "ds2", "prepost", "m80"),
    "ours-m80w": ("dq_tma", "dq_writer", "stats_tma", "ds2", "prepost", "m80"),
    "ours-m80s": ("dq_tma", "stats_tma", "prepost", "m80"),  # one dS^T buffer: 20 KiB below m80's 227 KiB of shared memory
    "ours-dqt": ("dq_tma", "stats_tma", "ds2", "prepost", "dqt"),
    # session 9 (issue #6): m80 with dq_bulk instead of dq_tma (each warpgroup's 64 x 80 dQ^T fragment staged in
    # fragment order, one 20 KiB bulk reduce-add per warpgroup into 80-row fragment-ordered accumulator blocks) and
    # pack1 (without it ptxas serializes every WGMMA at 80 rows: C7512); from the consumers or the writer warp
    "ours-m80b": ("dq_bulk", "stats_tma", "ds2", "prepost", "m80", "pack1"),
    "ours-m80bw": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m80", "pack1"),
    "ours-tmaw": ("dq_tma", "dq_writer", "stats_tma", "ds2", "prepost"),
    # d64 (issue #6, session 8): FA3 / FA4's 128-row query blocks; the causal default's schedule (CAUSAL_TUNING) + m128,
    # causal and not (dq_bulk at 128 rows takes the writer warp), and with dq_tma's reduce-adds from the consumers
    "ours-m128": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128"),
    "ours-m128t": ("dq_tma", "stats_tma", "ds2", "prepost", "m128"),
    # session 8 (issue #6, instruction overhead vs FA4): ours-m128 with dQ's 128 rows split over the warpgroups (8
    # m64n64k16 dQ WGMMAs a block instead of 16 m64n32k16, one 16 KiB bulk reduce-add per warpgroup), and with it P^T /
    # dS^T converted once (pack1), dS stored K-major by transposed stmatrix (dsk) and lse_log2 / dpsum read as 16-byte
    # words from rows the preprocess stored permuted (stats4)
    "ours-m128r": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128", "dqrows"),
    "ours-m128x": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128", "pack1", "dsk", "dqrows", "stats4"),
    # d256 (issue #6): split_d with FA4's dQ path (one dQ GEMM per warpgroup, fragment-ordered staging, a bulk
    # reduce-add from the writer warp, one Q / dO stage)
    "ours-splitdb": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost"),
    # ... with S^T on one consumer warpgroup and dP^T on the other (64 x 64 WGMMAs: less shared-memory operand traffic)
    "ours-splitdw": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg"),
    # ... with dV whole on one warpgroup and dK on the other as RS WGMMAs (64 x 256, A from the P^T / dS^T registers):
    # the d256 default since session 5 (bwd/api.py D256_TUNING)
    "ours-splitdr": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs"),
    # ... with dkvearly: the RS GEMMs from one call site (no ptxas WGMMA serialization) ahead of the dS^T barrier
    "ours-splitdr2": ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs", "dkvearly"),
}


#: Variants ON TOP of the library's defaults for the case (CAUSAL_TUNING or DEFAULT_TUNING; D <= 128), by provider name
#: (session 8, issue #6): ``pack1`` (P^T / dS^T converted to 16 bits once: one inline cvt per register pair), ``dsk``
#: (dS stored K-major by transposed stmatrix: one base address plus immediates) and both.
DEFAULT_PLUS = {
    "ours-pack": ("pack1",),
    "ours-dsk": ("dsk",),
    "ours-pd": ("pack1", "dsk"),
    "ours-spin": ("spin",),
    "ours-kvq": ("kvq",),
    "ours-spinkvq": ("spin", "kvq"),
    "ours-pdl": ("pdl",),
    "ours-kvqpdl": ("kvq", "pdl"),
    "ours-kvpf": ("kvpf",),
    "ours-pdlkvpf": ("pdl", "kvpf"),
    "ours-stearly": ("stearly",),
    "ours-g3d": ("g3d",),
    "ours-mlp": ("mlp",),
    "ours-g3dmlp": ("g3d", "mlp"),
    "ours-pers": ("pers",),
    # pack1 + dsk on the persistent grid (session 19: the d128 causal default plus both; ours-pd is the same without pers)
    "ours-perspd": ("pers", "pack1", "dsk"),
    # the step's Q / dO stage releases from the lane elect.sync picks (no S2R of the thread index in the loop)
    "ours-elr": ("elr",),
    # the case's default without pers (api.PERSISTENT_SCOPE's rows run the persistent grid by default since session 19)
    "ours-nopers": (),
    # session 20: lse_log2 / dpsum stored permuted, a thread's four columns one 16-byte load (stats4) at the 64 / 80-row
    # blocks; s4e with the words loaded before the WGMMA waits (stearly: stats4 alone spills 24 bytes at d128 causal);
    # s4ee with elr as well
    "ours-s4": ("stats4",),
    "ours-s4e": ("stats4", "stearly"),
    "ours-s4ee": ("stats4", "stearly", "elr"),
    # session 20: no zeroed dQ accumulator (the first dq_writer to reach a query block stores, the others reduce-add);
    # in the d128 causal and d64 defaults since session 20: ours-nodqfs is the case's default without it
    "ours-dqfs": ("dqfs",),
    "ours-nodqfs": ("-dqfs",),
}
#: The fixed-cost variants (notes/bwd_fixed_cost.md A / B: ``spin`` consumer waits without NANOSLEEP, ``kvq`` K / V on
#: the first Q / dO stage's barrier; ``pdl``: Programmatic Dependent Launch of the three kernels; ``kvpf``: L2 prefetch
#: of the next wave's K / V; ``stearly``: m128's lse_log2 / dpsum words loaded before the WGMMA waits, d64 only;
#: ``g3d``: the grouped 3-D grid of masked plans, one division per CTA's tile instead of three; ``mlp``: the pre- and
#: postprocess's memory-level parallelism, every preprocess load before its first store, 64-row postprocess CTAs): they
#: combine with the case's default schedule, so their providers run on the case's
#: own default (``_default_tuning``: m80 at d128 non-causal, m128 at d64, n96 at d192, split_d at d256), not on
#: DEFAULT_TUNING / CAUSAL_TUNING as pack1 / dsk do. ``pers`` (session 19): the persistent grid, one CTA per SM walking
#: tiles from a workspace counter (the 64-wide main kernel: d64 / d128; the default at api.PERSISTENT_SCOPE's rows since
#: session 19). The variants the persistent grid refuses (kvq, pdl, kvpf, g3d) run on the case's default without it.
#: ``elr`` (session 19): the step's Q / dO stage releases from the lane elect.sync picks (64-wide kernel).
#: ``stats4`` (session 20): lse_log2 / dpsum stored permuted, one 16-byte load per four columns, at any query tile.
#: ``dqfs`` (session 20): the dQ accumulator never zeroed, each query block's first arrival stores (dq_bulk + dq_writer).
CASE_DEFAULT_EXTRAS = frozenset({"spin", "kvq", "pdl", "kvpf", "stearly", "g3d", "mlp", "pers", "elr", "stats4", "dqfs", "-dqfs"})


def _make_default_plus(extra):
    def make(case):
        from cudnn.sdpa.bwd import api as bwd_api

        p = case.params
        if set(extra) <= CASE_DEFAULT_EXTRAS:
            base = bwd_api._default_tuning(p["d"], p["dv"], False, p["causal"], True)
            if not extra or {"kvq", "pdl", "kvpf", "g3d"} & set(extra):
                base = tuple(t for t in base if t != "pers")  # ours-nopers; the variants the persistent grid refuses
            if "kvq" in extra and "split_d" in base:
                raise Unsupported("kvq is a prologue of the 64-wide and n96 main kernels (not split_d)")
            if "kvpf" in extra and "split_d" in base:
                raise Unsupported("kvpf serves the 64-wide and n96 main kernels (not split_d)")
            if "stearly" in extra and "stats4" not in base + tuple(extra):
                raise Unsupported("stearly schedules stats4's words (the d64 m128 default, or with stats4)")
            if "stats4" in extra and ("split_d" in base or "n96" in base):
                raise Unsupported("stats4 is a layout of the 64-wide main kernel's staged stats (not split_d / n96)")
            if "pers" in extra and ("split_d" in base or "n96" in base):
                raise Unsupported("pers serves the 64-wide main kernel (D <= 128; not split_d / n96)")
            if "elr" in extra and ("split_d" in base or "n96" in base):
                raise Unsupported("elr changes the 64-wide main kernel's step (D <= 128; not split_d / n96)")
            if "dqfs" in extra and ({"split_d", "n96"} & set(base) or "dq_writer" not in base):
                raise Unsupported("dqfs is a dq_bulk + dq_writer schedule of the 64-wide main kernel (64 / 80 / 128-row blocks)")
            if "g3d" in extra and not p["causal"]:
                raise Unsupported("g3d changes the launch of masked plans only (unmasked dense plans launch 3-D already)")
            drop = {e[1:] for e in extra if e.startswith("-")}  # "-x": the default without x
            base = tuple(t for t in base if t not in drop)
            return make_ours(case, tuple(base) + tuple(e for e in extra if e not in base and not e.startswith("-")))
        if case.params["d"] > 128:
            raise Unsupported("pack1 / dsk are schedules of the 64-wide main kernel (D <= 128)")
        base = bwd_api.CAUSAL_TUNING if case.params["causal"] else bwd_api.DEFAULT_TUNING
        return make_ours(case, tuple(base) + tuple(extra))

    return make


#: Launch-order A/B (the plan's ``_l2_group_dq``), by provider name: the tuning it runs with (None: the defaults).
L2DQ_VARIANTS = {
    "ours-l2dq": None,
    "ours-bulkw-l2dq": ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost"),
}


def _make_variant(tuning, l2_group_dq=False):
    return lambda case: make_ours(case, tuning, l2_group_dq)


#: Launch-order A/B (the plan's ``_group_heads``: (kv head, batch) pairs per L2 group, fixed), by provider name; the
#: defaults' tuning. ``ours-g1``: each head's key blocks consecutive (FA4's order: a wave holds every key block of ~16
#: heads at s1k, so each head's Q / dO and dQ accumulator are read / added by CTAs running together); ``ours-gbudget``:
#: the groups sized from the L2 budget for every plan (the order before ``api.FULL_GROUP_HEADS``).
GROUP_VARIANTS = {"ours-g1": 1, "ours-g2": 2, "ours-g4": 4, "ours-g8": 8, "ours-gbudget": 0}


def fa4_available():
    try:
        import flash_attn.cute  # noqa: F401

        return None
    except Exception as exc:  # noqa: BLE001
        return f"flash_attn.cute not importable ({type(exc).__name__}: {exc})"


def _autograd_bwd(fwd, x):
    import torch

    leaves = [x[n].detach().requires_grad_(True) for n in ("q", "k", "v")]
    out = fwd(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    do = x["do"] if out.shape == x["do"].shape else x["do"].transpose(1, 2)
    torch.autograd.grad(out, leaves, do, retain_graph=True)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def make_fa4(case):
    from flash_attn.cute import flash_attn_func

    p = case.params
    causal = p["causal"]
    return _autograd_bwd(lambda q, k, v: flash_attn_func(q, k, v, causal=causal), _inputs(p))


def _make_torch(backend_name):
    def make(case):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        p = case.params
        backend = getattr(SDPBackend, backend_name)
        causal = p["causal"]

        def fwd(q, k, v):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)

        bwd = _autograd_bwd(fwd, _inputs(p))

        def fn():
            with sdpa_kernel(backend):
                return bwd()

        return fn

    return make


def compile_check() -> list[str]:
    """Compile the backward's kernels for sm_90a without a GPU; return their names."""
    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_prepost_sm90 import compile_sdpa_bwd_post, compile_sdpa_bwd_pre
    from cudnn.sdpa.bwd.kernel_sm90 import compile_sdpa_bwd_main

    names = []
    for d, causal in ((128, False), (128, True), (64, True)):
        key = SdpaBwdKey("bf16", d, d, 1, causal, False, False, False, False, False, False)
        for what, fn in (("pre", compile_sdpa_bwd_pre), ("main", compile_sdpa_bwd_main), ("post", compile_sdpa_bwd_post)):
            fn(key)
            names.append(f"sdpa_bwd_{what}_sm90a_bf16_d{d}{'_causal' if causal else ''}")
    # the schedule variants of ours-all (one key: main kernel and the coalesced pre/postprocess)
    key = SdpaBwdKey("bf16", 128, 128, 1, True, False, False, False, False, False, False, True, True, True, True)
    for what, fn in (("pre", compile_sdpa_bwd_pre), ("main", compile_sdpa_bwd_main), ("post", compile_sdpa_bwd_post)):
        fn(key)
        names.append(f"sdpa_bwd_{what}_sm90a_bf16_d128_causal_all_variants")
    # ours-bulkw's main kernel and its fragment-order postprocess
    key = SdpaBwdKey("bf16", 128, 128, 1, True, False, False, False, False, False, False, stats_tma=True, ds_double_buffer=True, dq_bulk=True, dq_writer=True)
    for what, fn in (("main", compile_sdpa_bwd_main), ("post", compile_sdpa_bwd_post)):
        fn(key)
        names.append(f"sdpa_bwd_{what}_sm90a_bf16_d128_causal_dq_bulk_writer")
    # ours-m80w's main kernel (80-row query blocks, dQ^T, the writer warp's TMA reduce-adds)
    key = SdpaBwdKey(
        "bf16", 128, 128, 1, False, False, False, False, False, False, False, dq_tma=True, stats_tma=True, ds_double_buffer=True, dq_writer=True, tile_m80=True
    )
    compile_sdpa_bwd_main(key)
    names.append("sdpa_bwd_main_sm90a_bf16_d128_m80_writer")
    # ours-m80bw's kernels (80-row query blocks, dQ^T in 80-row fragment-ordered blocks by bulk reduce-adds from the
    # writer warp, pack1): the preprocess over every padded row and the 80-row-block postprocess
    key = SdpaBwdKey(
        "bf16", 128, 128, 1, True, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True,
        prepost_vec=True, tile_m80=True, pack_once=True,
    )  # fmt: skip
    for what, fn in (("pre", compile_sdpa_bwd_pre), ("main", compile_sdpa_bwd_main), ("post", compile_sdpa_bwd_post)):
        fn(key)
        names.append(f"sdpa_bwd_{what}_sm90a_bf16_d128_causal_m80_bulk_writer")
    # ours-m128's main kernel (d64, 128-row query blocks, dq_bulk's two reduce-adds per warpgroup from the writer warp)
    key = SdpaBwdKey(
        "bf16", 64, 64, 1, True, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True,
        prepost_vec=True, tile_m128=True,
    )  # fmt: skip
    compile_sdpa_bwd_main(key)
    names.append("sdpa_bwd_main_sm90a_bf16_d64_causal_m128_writer")
    # ours-splitdr2's main kernel (d256: the default dkvrs schedule with dkvearly) and its fragment-order postprocess
    key = SdpaBwdKey(
        "bf16", 256, 256, 1, False, False, False, False, False, False, False, split_d=True, ds_double_buffer=True, dq_bulk=True, dq_writer=True,
        sdp_wg=True, dkv_rs=True, dkv_early=True,
    )  # fmt: skip
    for what, fn in (("main", compile_sdpa_bwd_main), ("post", compile_sdpa_bwd_post)):
        fn(key)
        names.append(f"sdpa_bwd_{what}_sm90a_bf16_d256_split_d_dkvrs_early")
    return names


def profile(cases: list[Case], providers: list[Provider], iters: int) -> list:
    """Per-kernel device time of each provider on each case (``device_times``: warmed, then ``iters`` calls under
    torch.profiler); prints and returns ``[(case label, provider, [(kernel, us per call, launches per call)], total us,
    TFLOP/s at that total)]``. A provider that declines or fails gets no row; the others still run."""
    import torch

    rows = []
    for case in cases:
        for p in providers:
            reason = p.available()
            if reason:
                print(f"{case.label} / {p.name}: not run ({reason})", flush=True)
                continue
            try:
                fn = p.make(case)
                times = sorted(device_times(fn, iters), key=lambda r: -r[1])
            except Exception as exc:  # Unsupported included: the cell is empty in the tables too
                print(f"{case.label} / {p.name}: no row ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
                continue
            total = sum(us for _, us, _ in times)
            tflops = case.flops / (total * 1e-6) / 1e12 if case.flops and total else None
            print(f"{case.label} / {p.name}: {total:8.1f} us per call" + (f" ({tflops:.1f} TFLOP/s)" if tflops else ""), flush=True)
            for key, us, n in times:
                print(f"      {us:8.1f} us  x{n:g}  {key[:110]}", flush=True)
            rows.append((case.label, p.name, times, total, tflops))
            del fn
            torch.cuda.empty_cache()
    return rows


def profile_markdown(rows: list, iters: int) -> str:
    """The md of ``profile``'s rows, with the device and versions."""
    from harness import _device_line, _versions

    lines = [
        "## attention backward: per-kernel device time (us per call)",
        "",
        f"- device: {_device_line()}",
        f"- versions: {_versions(None)}",
        f"- torch.profiler mean over {iters} calls after 3 warm-up calls (no L2 clearing: back-to-back calls, unlike the",
        "  timing tables); TFLOP/s = the case's FLOPs (backward convention) over the kernels' summed device time",
        f"- written by benchmarks/sdpa_bwd.py --profile on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        "| case | provider | kernel | us per call | launches per call |",
        "|---|---|---|---:|---:|",
    ]
    for label, name, times, total, tflops in rows:
        lines.append(f"| {label} | {name} | **total**" + (f" ({tflops:.1f} TFLOP/s)" if tflops else "") + f" | {total:.1f} | |")
        lines += [f"| | | `{key[:110]}` | {us:.1f} | {n:g} |" for key, us, n in times]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    providers = [
        Provider("ours", make_ours),
        *(Provider(name, _make_variant(tuning)) for name, tuning in VARIANTS.items()),
        *(Provider(name, _make_default_plus(extra)) for name, extra in DEFAULT_PLUS.items()),
        *(Provider(name, _make_variant(tuning, True)) for name, tuning in L2DQ_VARIANTS.items()),
        *(Provider(name, lambda case, g=g: make_ours(case, group_heads=g)) for name, g in GROUP_VARIANTS.items()),
        Provider("fa4", make_fa4, fa4_available),
        Provider("torch-cudnn", _make_torch("CUDNN_ATTENTION")),
        Provider("torch-flash", _make_torch("FLASH_ATTENTION")),
    ]
    only = next((a.split("=", 1)[1].split(",") for a in argv if a.startswith("--providers=")), None)
    if only:
        by_name = {p.name: p for p in providers}
        unknown = [n for n in only if n not in by_name]
        if unknown:
            raise SystemExit(f"unknown provider(s) {unknown}; known: {list(by_name)}")
        providers = [by_name[n] for n in only]  # in the order given: a provider that faults runs after the others of its case
    quick = "--quick" in argv
    cases = _shapes(quick)
    sub = next((a.split("=", 1)[1] for a in argv if a.startswith("--only=")), None)
    if sub:  # "a|b": the cases whose label contains a or b
        cases = [c for c in cases if any(part in c.label for part in sub.split("|"))]
    out = next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), None)
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    rounds = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--rounds=")), 1))  # interleaved rounds, fastest kept
    if "--profile" in argv:
        iters = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--iters=")), 10))
        md = profile_markdown(profile(cases, providers, iters), iters)
        with open(os.path.join(out_dir, f"{out or 'sdpa_bwd'}_kernels.md"), "w") as f:
            f.write(md)
        return
    run_benchmark(
        out or ("sdpa_bwd_quick" if quick else "sdpa_bwd"),
        cases,
        providers,
        convention="backward = 2.5 x 2*B*H*S_q*S_kv*(D+D_v) FLOPs (halved for causal); bf16, BSHD storage; backward only",
        out_dir=out_dir,
        title="attention backward, H200",
        rounds=rounds,
    )


if __name__ == "__main__":
    main()
