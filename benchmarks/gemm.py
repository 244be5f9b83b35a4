"""cudnn.gemm benchmark through the shared harness (benchmarks/harness.py).

Tables, each written as docs/benchmarks/<name>.{md,csv,png}:
- ``gemm``: our plain bf16 GEMM under the plan-time tile schedules (``cudnn.gemm.dense.schedule``,
  ``api.TILE_SCHEDULE``): "ours" = the default "auto2" (two tiles compiled per (N, K), chosen from N and K only, each
  M picking one: M-free), "ours_auto" = "auto" (128 x 256, 2x1, the scheduler swizzle chosen from N alone: one kernel
  for every M; the default until session 4), "ours_m" = "waves+l2" (tile / cluster / swizzle also from M: the opt-in
  for plans whose M is fixed), "ours_fixed" = "fixed" (128 x 256 tiles, 2x1 cluster, no swizzle), vs cuBLAS (torch.matmul)
  and quack's GEMM (when importable, default config, no autotuning; not in --quick) on square 2048-8192 and LLM
  MLP shapes (Llama-3-8B/70B, Qwen3-32B up/down projections; M = tokens 2048, 4096, 16384; decode M is the
  ``gemm_decode`` table). A row-major (M, K), B = w.t() of an (N, K) weight. The table's convention line lists
  the cases where the model's choice differs from the fixed one. 3 interleaved rounds per cell (fastest kept). --quick: 4096^3, 8192^3 and four MLP shapes.
- ``gemm_fusions``: each fused GEMM ("ours") vs our plain GEMM of the same problem ("ours_plain": the
  ratio column ours/ours_plain is the fusion's cost, >= 0.95x means <= 5% over plain) and vs cuBLAS
  followed by the torch elementwise op it replaces ("cublas+torch"). Epilogue A/B candidates, on the dsrelu and
  gelu_tanh rows only (Unsupported elsewhere): "ours_epi3" (dsrelu: 3 pre-activation sub-tiles in flight, ldmatrix
  reads; gelu_tanh: folded constants), "ours_epi8" (dsrelu: the whole pre-activation tile loaded during the
  mainloop). Flip ``api.AUX_PREFETCH`` / ``AUX_LDMATRIX`` / ``GELU_FOLD`` if they beat "ours". "ours_epi2" (amax and
  swiglu rows only): amax without the per-element bounds predicate (``api.AMAX_FAST``), swiglu's silu through one
  tanh.approx (``api.SWIGLU_TANH``); flip those if it beats "ours".
- ``gemm_fusions_mlp``: every fusion ("ours") vs our plain GEMM of the same problem ("ours_plain") at every MLP
  shape above with M >= 2048 (108 rows, about 4 minutes): the per-shape ratio issue #5 asks for.
- ``gemm_fp8``: our fp8 GEMM (e4m3 or e5m2 operands, per-tensor fp32 scales, bf16 D) vs cuBLAS fp8
  (``torch._scaled_mm``, same operands and scales) in both accumulation modes: "ours" (default, promoted
  fp32 accumulation) vs "cublas_fp8" (use_fast_accum=False), "ours_fast" (fast_accum=True) vs
  "cublas_fp8_fast" (use_fast_accum=True); and vs our bf16 GEMM of the same shape ("ours_bf16": the column
  ours/ours_bf16 is the fp8 speed-up, target >= 1.6x at 8192^3).
- ``gemm_decode``: small-M (decode) MLP shapes with split-K (``split_k_for`` heuristic, single-CTA clusters,
  "ours") vs our default plan ("ours_default", no split, 2x1 cluster) and cuBLAS.
- ``gemm_epi2``: the round-2 A/B in one short table (about a minute): amax and swiglu at llama3-8b up M=16384 with
  their defaults ("ours"), "ours_epi2" and "ours_plain"; qwen3-32b down M=2048 with "ours" (the default, auto2 since session 4), "ours_auto" and
  cuBLAS; every row twice, so the table shows its own run-to-run spread.
- ``gemm_fusions_down``: issue #5's low cells of gemm_fusions_mlp (M = 2048 down projections; about a minute): each
  fusion's default ("ours"), with ``fused_auto2=False`` ("ours_nofa2": the session-4 plans, "auto"'s 128 x 256 tiles; dsrelu also
  "ours_fa2k" with ``aux_keep_stages``), with per-element reads ("ours_nostage") and our plain GEMM; every row twice.
- ``gemm_fusions_gap``: the three cells of session 5's gemm_fusions_mlp below 0.95x (srelu qwen3-32b up M=2048, dsrelu
  llama3-8b up M=4096 and down M=2048), fused ("ours") and plain ("ours_plain"); 3 interleaved rounds (about 20 s).
- ``gemm_pingpong``: each fusion (and plain) in every variant a per-fusion default can pick
  (``cudnn.gemm.dense.api.FUSION_DEFAULTS``): "coop" (cooperative 128x256, per-element bias / pre-activation
  reads), "coop_staged" (stage_bias; dsrelu: stage_aux), "pp" (pingpong=True), "pp_staged", next to the
  fusion's current default ("ours") and our plain GEMM ("ours_plain"). Pick, per fusion, the fastest variant
  into FUSION_DEFAULTS; the <= 5% target is variant / ours_plain >= 0.95 in TFLOP/s.

Isolation: each table runs in its own process (``--table NAME``); a device fault poisons only that process,
and the table is rerun (at most 3 attempts) with the faulting cell skipped and named in the table's notes.

Run on the GPU host:  source ci/gpu_env.sh; python3 benchmarks/gemm.py [--quick] [--fusions (gemm_fusions only)]
    [--new (gemm_fp8 and gemm_pingpong)] [--tables gemm,gemm_decode,...] [--in-process (no isolation, debugging)]
"""

from __future__ import annotations

import os
import sys

from harness import Case, Provider, Unsupported, run_benchmark

QUICK = "--quick" in sys.argv

# (label, N, K): up (gate) and down projections of each model's MLP
MLP = [
    ("llama3-8b up", 14336, 4096),
    ("llama3-8b down", 4096, 14336),
    ("llama3-70b up", 28672, 8192),
    ("llama3-70b down", 8192, 28672),
    ("qwen3-32b up", 25600, 5120),
    ("qwen3-32b down", 5120, 25600),
]
MLP_M = (2048, 4096, 16384)
#: --quick subset of the ``gemm`` table (besides 4096^3 and 8192^3): the two shapes whose tile the model changes
#: and two whose swizzle it changes
QUICK_PLAIN = ("qwen3-32b down M=2048", "qwen3-32b up M=2048", "llama3-8b up M=16384", "qwen3-32b down M=16384")


def _inputs(case, dtype=None):
    import torch

    dtype = dtype or torch.bfloat16
    m, n, k = case.params["m"], case.params["n"], case.params["k"]
    a = torch.randn(m, k, device="cuda", dtype=dtype) / k**0.25
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.25
    return a, w.t()


def _quack_available():
    try:
        import quack.gemm_interface  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"quack not importable: {type(exc).__name__}: {exc}"
    return None


def plain_providers():
    def ours(schedule):
        def build(case):
            from cudnn.gemm.dense.api import run_gemm

            a, b = _inputs(case)
            out = run_gemm(a, b, schedule=schedule)
            return lambda: run_gemm(a, b, out=out, schedule=schedule)

        return build

    def cublas(case):
        import torch

        a, b = _inputs(case)
        out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
        return lambda: torch.matmul(a, b, out=out)

    def quack(case):
        from quack.gemm_interface import gemm as qgemm

        a, b = _inputs(case)
        out = qgemm(a, b, tuned=False)
        return lambda: qgemm(a, b, out=out, tuned=False)

    providers = [
        Provider("ours", ours(None)),
        Provider("ours_m", ours("waves+l2")),
        Provider("ours_fixed", ours("fixed")),
        Provider("ours_auto", ours("auto")),
        Provider("cublas", cublas),
    ]
    if not QUICK:
        providers.append(Provider("quack", quack, _quack_available))
    return providers


def plain_cases():
    cases = []
    for s in (2048, 4096, 8192) if not QUICK else (4096, 8192):
        cases.append(Case(f"{s}^3", {"m": s, "n": s, "k": s}, flops=2 * s**3))
    for label, n, k in MLP:
        for m in MLP_M:
            c = Case(f"{label} M={m}", {"m": m, "n": n, "k": k}, flops=2 * m * n * k)
            if not QUICK or c.label in QUICK_PLAIN:
                cases.append(c)
    return cases


def schedule_notes(cases) -> str:
    """Which kernel each "ours" / "ours_auto" / "ours_m" number comes from: the cases where "auto" or "waves+l2" picks
    another tile / cluster / swizzle than "fixed", and where the default "auto2" picks another tile than "auto" (for the
    table's convention line)."""
    from cudnn.gemm.dense.api import _sm_count
    from cudnn.gemm.dense.schedule import DEFAULT_CLUSTER, DEFAULT_TILE, choose_in_set, choose_swizzle, choose_tile, choose_tile_set

    sm = _sm_count(None)
    auto, per_m, auto2 = [], [], []
    for case in cases:
        p = case.params
        s = choose_swizzle(None, p["n"], p["k"], DEFAULT_TILE, DEFAULT_CLUSTER, sm_count=sm)
        if s != 1:
            auto.append(f"{case.label}: swizzle {s}")
        c = choose_tile(p["m"], p["n"], p["k"], sm_count=sm, l2=True)
        if (c.tile_mn, c.cluster_mn, c.swizzle) != ((128, 256), (2, 1), 1):
            per_m.append(f"{case.label}: {c.tile_mn[0]}x{c.tile_mn[1]} cluster {c.cluster_mn[0]}x{c.cluster_mn[1]} swizzle {c.swizzle}")
        t2 = choose_in_set(p["m"], p["n"], p["k"], 1, choose_tile_set(p["n"], p["k"], sm_count=sm), sm_count=sm).tile_mn
        if t2 != DEFAULT_TILE:
            s2 = choose_swizzle(None, p["n"], p["k"], t2, DEFAULT_CLUSTER, sm_count=sm)
            auto2.append(f"{case.label}: {t2[0]}x{t2[1]} swizzle {s2}")
    return (
        f"{sm} SMs; ours_auto (auto) changed from fixed: {'; '.join(auto) or 'none'}; ours_m (waves+l2) changed from fixed: "
        f"{'; '.join(per_m) or 'none'}; ours (auto2) changed from auto: {'; '.join(auto2) or 'none'}"
    )


# ------------------------------------------------------------------------------------ fusions
FUSIONS = ("bias", "srelu", "gelu_tanh", "swiglu", "amax", "dsrelu")


def fusion_cases():
    shapes = [
        ("4096^3", 4096, 4096, 4096),
        ("8192^3", 8192, 8192, 8192),
        ("llama3-8b up M=16384", 16384, 14336, 4096),
    ]
    if QUICK:
        shapes = shapes[2:]  # the MLP shape, where the epilogue costs the most
    cases = []
    for f in FUSIONS:
        for label, m, n, k in shapes:
            n_eff = 2 * n if f == "swiglu" else n  # swiglu: N gate + N up columns -> N outputs
            cases.append(Case(f"{f} {label}", {"m": m, "n": n_eff, "k": k, "fusion": f}, flops=2 * m * n_eff * k))
    return cases


def fusion_mlp_cases():
    """Every fusion at every MLP shape with M >= 2048 (issue #5's "every fusion <= 5% over plain at those shapes")."""
    cases = []
    for f in FUSIONS:
        for label, n, k in MLP:
            for m in MLP_M:
                n_eff = 2 * n if f == "swiglu" else n
                cases.append(Case(f"{f} {label} M={m}", {"m": m, "n": n_eff, "k": k, "fusion": f}, flops=2 * m * n_eff * k))
    return cases


def fusion_providers():
    def ours(case):
        import torch

        import cudnn.gemm as G

        a, b = _inputs(case)
        f = case.params["fusion"]
        n = case.params["n"]
        bias = torch.randn(n, device="cuda", dtype=a.dtype)
        if f == "bias":
            return lambda: G.gemm(a, b, bias=bias)
        if f == "srelu":
            return lambda: G.gemm_srelu(a, b, bias=bias)
        if f == "gelu_tanh":
            return lambda: G.gemm_gelu(a, b, bias=bias, approximate="tanh")
        if f == "swiglu":
            return lambda: G.gemm_swiglu(a, b, bias=bias, layout="interleaved")
        if f == "amax":
            return lambda: G.gemm_amax(a, b, bias=bias)
        if f == "dsrelu":
            pre = torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype)
            return lambda: G.gemm_dsrelu(a, b, pre)
        raise Unsupported(f)

    def ours_plain(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        return lambda: gemm(a, b)

    def cublas_torch(case):
        import torch
        import torch.nn.functional as F

        a, b = _inputs(case)
        f = case.params["fusion"]
        n = case.params["n"]
        bias = torch.randn(n, device="cuda", dtype=a.dtype)
        if f == "bias":
            return lambda: torch.addmm(bias, a, b)
        if f == "srelu":
            return lambda: torch.relu(torch.addmm(bias, a, b)).square()
        if f == "gelu_tanh":
            return lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh")
        if f == "swiglu":

            def run():
                x = torch.addmm(bias, a, b)
                g, u = x.unflatten(-1, (-1, 2, 128)).unbind(-2)
                return F.silu(g) * u

            return run
        if f == "amax":

            def run():
                x = torch.addmm(bias, a, b)
                return x, x.abs().amax()

            return run
        if f == "dsrelu":
            pre = torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype)
            return lambda: torch.matmul(a, b) * 2 * torch.relu(pre)
        raise Unsupported(f)

    def ours_epi(prefetch):
        """The epilogue A/B candidates (api.AUX_PREFETCH / AUX_LDMATRIX / GELU_FOLD), through run_gemm exactly as the
        wrappers call it (d allocated per call, like "ours"): dsrelu with ``prefetch`` pre-activation sub-tiles in flight
        and ldmatrix reads; gelu_tanh with the folded constants (prefetch 3 only). Other rows: Unsupported."""

        def build(case):
            import torch

            from cudnn.gemm.dense.api import run_gemm

            a, b = _inputs(case)
            f = case.params["fusion"]
            n = case.params["n"]
            if f == "dsrelu":
                pre = torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype)
                return lambda: run_gemm(a, b, aux=pre, dsrelu=True, aux_prefetch=prefetch, aux_ldmatrix=True)
            if f == "gelu_tanh" and prefetch == 3:
                bias = torch.randn(n, device="cuda", dtype=a.dtype)
                return lambda: run_gemm(a, b, bias=bias, activation="gelu_tanh", store_pre=False, gelu_fold=True)
            raise Unsupported(f"epilogue A/B candidate for dsrelu{' / gelu_tanh' if prefetch == 3 else ''} only")

        return build

    def ours_epi2(case):
        """Epilogue A/B round 2, called exactly as the gemm_amax / gemm_swiglu wrappers call run_gemm (d and the amax
        output allocated per call, like "ours"): amax_fast on the amax rows, swiglu_tanh on the swiglu rows."""
        import torch

        from cudnn.gemm.dense.api import run_gemm

        a, b = _inputs(case)
        f = case.params["fusion"]
        n = case.params["n"]
        bias = torch.randn(n, device="cuda", dtype=a.dtype)
        if f == "amax":

            def run():
                amax = torch.empty((1,), dtype=torch.float32, device=a.device)
                return run_gemm(a, b, bias=bias, amax=amax, activation="none", amax_fast=True), amax

            return run
        if f == "swiglu":
            return lambda: run_gemm(a, b, n_out=n // 2, bias=bias, swiglu="interleaved", store_pre=False, swiglu_tanh=True)
        raise Unsupported("epilogue A/B round 2: amax and swiglu rows only")

    return [
        Provider("ours", ours),
        Provider("ours_plain", ours_plain),
        Provider("cublas+torch", cublas_torch),
        Provider("ours_epi3", ours_epi(3)),
        Provider("ours_epi8", ours_epi(8)),
        Provider("ours_epi2", ours_epi2),
    ]


# ------------------------------------------------------------------------------------ fp8
def _fp8_inputs(case):
    import torch

    from cudnn_testing.reference_gemm import quantize_fp8

    m, n, k = case.params["m"], case.params["n"], case.params["k"]
    fa = getattr(torch, case.params["fa"])
    fb = getattr(torch, case.params["fb"])
    a, sa = quantize_fp8(torch.randn(m, k, device="cuda"), fa)
    w, sb = quantize_fp8(torch.randn(n, k, device="cuda"), fb)
    return a, w.t(), sa, sb  # row-major a, K-major b (w.t()): the layout both fp8 GEMMs take


def fp8_cases():
    shapes = [("4096^3", 4096, 4096, 4096), ("8192^3", 8192, 8192, 8192), ("llama3-70b up M=8192", 8192, 28672, 8192)]
    if QUICK:
        shapes = shapes[1:2]
    cases = []
    for fa, fb in (("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn")):
        tag = "e4m3" if fa == fb else "e5m2 x e4m3"
        for label, m, n, k in shapes:
            cases.append(Case(f"{tag} {label}", {"m": m, "n": n, "k": k, "fa": fa, "fb": fb}, flops=2 * m * n * k))
    return cases


def fp8_providers():
    def ours(fast, tile_mn=None, promotion_interval=None):
        def build(case):
            from cudnn.gemm.dense.api import run_gemm

            a, b, sa, sb = _fp8_inputs(case)
            kw = dict(scale_a=sa, scale_b=sb, fast_accum=fast)
            if tile_mn is not None:
                kw["tile_mn"] = tile_mn
            if promotion_interval is not None:
                kw["promotion_interval"] = promotion_interval
            out = run_gemm(a, b, **kw)
            return lambda: run_gemm(a, b, out=out, **kw)

        return build

    def cublas_fp8(fast):
        def build(case):
            import torch

            a, b, sa, sb = _fp8_inputs(case)
            # use_fast_accum=True: cuBLAS accumulates in the fp8 WGMMA accumulators without periodic promotion to a
            # separate fp32 sum (like our fast_accum=True); False (the default) promotes, like our default
            kw = dict(scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
            try:
                torch._scaled_mm(a, b, **kw)
            except Exception as exc:  # noqa: BLE001
                raise Unsupported(f"torch._scaled_mm: {type(exc).__name__}: {str(exc)[:120]}") from exc
            return lambda: torch._scaled_mm(a, b, **kw)

        return build

    def ours_bf16(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

    return [
        Provider("ours", ours(False)),
        Provider("ours_n128", ours(False, (128, 128))),
        Provider("ours_p2", ours(False, promotion_interval=2)),
        Provider("cublas_fp8", cublas_fp8(False)),
        Provider("ours_fast", ours(True)),
        Provider("cublas_fp8_fast", cublas_fp8(True)),
        Provider("ours_bf16", ours_bf16),
    ]


# ------------------------------------------------------------------------------------ decode (split-K)
def decode_cases():
    cases = []
    for label, n, k in MLP:
        for m in (1, 16, 64) if not QUICK else (1,):
            cases.append(Case(f"{label} M={m}", {"m": m, "n": n, "k": k}, flops=2 * m * n * k))
    return cases


def decode_providers():
    def ours(case):
        import torch

        from cudnn.gemm.dense.api import cached_plan, run_gemm, split_k_for

        a, b = _inputs(case)
        s = split_k_for(case.params["m"], case.params["n"], case.params["k"])
        out = run_gemm(a, b, split_k=s, cluster_mn=(1, 1))
        plan = cached_plan(a, b, out, split_k=s, cluster_mn=(1, 1))
        ws = torch.empty(max(plan.scratch_workspace_bytes(), 1), dtype=torch.uint8, device="cuda")  # allocated once, outside the timing
        return lambda: run_gemm(a, b, split_k=s, cluster_mn=(1, 1), out=out, workspace=ws)

    def ours_default(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

    def cublas(case):
        import torch

        a, b = _inputs(case)
        out = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=a.dtype)
        return lambda: torch.matmul(a, b, out=out)

    return [Provider("ours", ours), Provider("ours_default", ours_default), Provider("cublas", cublas)]


# ------------------------------------------------------------------------------------ epilogue / schedule A/B, round 2
def epi2_cases():
    """The three cells the round-2 options target, each twice (rows "#1", "#2", timed minutes apart in one process:
    the spread between them is this run's noise, to read the A/B against)."""
    shapes = [("amax", "llama3-8b up M=16384", 16384, 14336, 4096), ("swiglu", "llama3-8b up M=16384", 16384, 2 * 14336, 4096)]
    shapes.append(("plain", "qwen3-32b down M=2048", 2048, 5120, 25600))
    cases = []
    for rep_ in (1, 2):
        for f, label, m, n, k in shapes:
            cases.append(Case(f"{f} {label} #{rep_}", {"m": m, "n": n, "k": k, "fusion": f}, flops=2 * m * n * k))
    return cases


def epi2_providers():
    """ours = the default (fused wrapper; plain: gemm), ours_epi2 = amax_fast / swiglu_tanh, ours_auto = schedule auto
    (plain rows), ours_plain = our default plain GEMM of the fused rows' problem, cublas (plain rows)."""
    fused = {p.name: p for p in fusion_providers()}

    def ours(case):
        if case.params["fusion"] == "plain":
            return plain_providers()[0].make(case)
        return fused["ours"].make(case)

    def only_fused(name):
        def build(case):
            if case.params["fusion"] == "plain":
                raise Unsupported("fused rows only")
            return fused[name].make(case)

        return build

    def only_plain(p):
        def build(case):
            if case.params["fusion"] != "plain":
                raise Unsupported("plain rows only")
            return p.make(case)

        return build

    plain = {p.name: p for p in plain_providers()}
    return [
        Provider("ours", ours),
        Provider("ours_epi2", only_fused("ours_epi2")),
        Provider("ours_plain", only_fused("ours_plain")),
        Provider("ours_auto", only_plain(plain["ours_auto"])),
        Provider("cublas", only_plain(plain["cublas"])),
    ]


# ------------------------------------------------------------------------------------ issue #5: fusions at M = 2048 down projections
#: the cells of gemm_fusions_mlp (session 4, two runs) below 0.95x our plain GEMM, and one control: bias at llama3-8b down
#: (the same plan as srelu / gelu_tanh / amax there but for the activation, and at or above plain in both runs)
FUSIONS_DOWN = [
    ("dsrelu", "qwen3-32b down", 5120, 25600),
    ("gelu_tanh", "llama3-8b down", 4096, 14336),
    ("srelu", "qwen3-32b down", 5120, 25600),
    ("amax", "qwen3-32b down", 5120, 25600),
    ("amax", "llama3-8b down", 4096, 14336),
    ("swiglu", "llama3-8b down", 4096, 14336),
    ("bias", "qwen3-32b up", 25600, 5120),
    ("bias", "llama3-8b down", 4096, 14336),
]


def fusions_down_cases():
    """The FUSIONS_DOWN cells at M = 2048, each twice (rows "#1", "#2": the run's noise, to read the A/B against)."""
    cases = []
    for rep_ in (1, 2):
        for f, label, n, k in FUSIONS_DOWN:
            n_eff = 2 * n if f == "swiglu" else n
            cases.append(Case(f"{f} {label} M=2048 #{rep_}", {"m": 2048, "n": n_eff, "k": k, "fusion": f}, flops=2 * 2048 * n_eff * k))
    return cases


def fusions_down_providers():
    """ours = the fused wrapper (plan defaults: fused_auto2 on since session 5); ours_plain = our default plain GEMM of the
    same problem; ours_nofa2 = the fusion with fused_auto2=False (the session-4 plans: "auto"'s 128 x 256 for staged-read
    fusions); ours_fa2k = dsrelu with fused_auto2
    and aux_keep_stages (api.AUX_KEEP_STAGES: the pre-activation prefetch sized to keep the mainloop's stages; dsrelu
    rows only); ours_nostage = the fusion with per-element bias reads (stage_bias False: the plan is then "free" and takes
    auto2 by default; gelu_tanh / amax llama3-8b down rows only, where the fused plan already equals the plain one).
    A variant whose kernel is the default's (fused_auto2 off on the llama3-8b down and swiglu rows) is not run. All through
    run_gemm as the wrappers call it (d, and amax's output, allocated per call like "ours")."""
    import torch

    fused = {p.name: p for p in fusion_providers()}

    def variant(opts, only=None):
        def build(case):
            from cudnn.gemm.dense.api import run_gemm

            f = case.params["fusion"]
            if only is not None and f not in only:
                raise Unsupported(f"{', '.join(only)} rows only")
            extra = opts(f) if callable(opts) else opts  # may raise Unsupported: before any allocation
            a, b = _inputs(case)
            kw = _fusion_kw(case, a)
            if same_plan_as_default(a, b, kw, extra):
                raise Unsupported("the same kernel as ours (the option does not change this plan)")
            kw.update(extra)
            if "amax" in kw:

                def run():
                    amax = torch.empty((1,), dtype=torch.float32, device=a.device)
                    return run_gemm(a, b, **{**kw, "amax": amax}), amax

                return run
            return lambda: run_gemm(a, b, **kw)

        return build

    def same_plan_as_default(a, b, kw, extra):
        """Whether ``extra`` leaves the kernel this M launches as the default's (metadata only: no compile)."""
        from cudnn.api_base import TensorDesc
        from cudnn.gemm.dense.api import GemmSm90

        d = TensorDesc.contiguous((a.shape[0], kw.get("n_out", b.shape[-1])), "bfloat16", "d")
        plans = [GemmSm90(a, b, d, **{k: v for k, v in kw.items() if k != "n_out"}, **x) for x in ({}, extra)]
        for p in plans:
            p.check_support()
        return plans[0]._make_config() == plans[1]._make_config()

    def nostage(f):
        if f not in ("gelu_tanh", "amax"):
            raise Unsupported("gelu_tanh / amax llama3-8b down rows only")
        return {"stage_bias": False}

    def llama_down_only(build):
        def make(case):
            if case.params["n"] != 4096:  # the cells whose plan equals the plain plan: is it the staging, or the run?
                raise Unsupported("gelu_tanh / amax llama3-8b down rows only")
            return build(case)

        return make

    return [
        Provider("ours", fused["ours"].make),
        Provider("ours_plain", fused["ours_plain"].make),
        Provider("ours_nofa2", variant({"fused_auto2": False})),
        Provider("ours_fa2k", variant({"fused_auto2": True, "aux_keep_stages": True}, only=("dsrelu",))),
        Provider("ours_nostage", llama_down_only(variant(nostage))),
    ]


def fusions_down_notes() -> str:
    """The plans behind each column (cudnn.gemm.dense.fused_schedule.plan_summary), from plan-time metadata only."""
    from cudnn.api_base import TensorDesc
    from cudnn.gemm.dense.api import GemmSm90
    from cudnn.gemm.dense.fused_schedule import format_summary, plan_summary

    def desc(shape, name, stride=None, dtype="bfloat16"):
        return TensorDesc.contiguous(shape, dtype, name) if stride is None else TensorDesc(shape, stride, dtype, name)

    out = []
    for f, label, n, k in FUSIONS_DOWN:
        m, n_eff = 2048, (2 * n if f == "swiglu" else n)
        a, b = desc((m, k), "a"), desc((k, n_eff), "b", (1, k))
        d = desc((m, n_eff // 2 if f == "swiglu" else n_eff), "d")
        kw = {"bias": desc((n_eff,), "bias")} if f != "dsrelu" else {"aux": desc((m, n_eff), "aux"), "dsrelu": True}
        kw.update(
            {"srelu": {"activation": "relu2"}, "gelu_tanh": {"activation": "gelu_tanh"}, "swiglu": {"swiglu": "interleaved"}}.get(f, {}),
            **({"amax": desc((1,), "amax", dtype="float32")} if f == "amax" else {}),
        )
        plans = {"plain": GemmSm90(a, b, desc((m, n_eff), "d")), "ours": GemmSm90(a, b, d, **kw), "nofa2": GemmSm90(a, b, d, fused_auto2=False, **kw)}
        if f == "dsrelu":
            plans["fa2k"] = GemmSm90(a, b, d, fused_auto2=True, aux_keep_stages=True, **kw)
        out.append(f"{f} {label}: " + "; ".join(f"{name} {format_summary(plan_summary(p))}" for name, p in plans.items()))
    return " | ".join(out)


# ------------------------------------------------------------------------------------ issue #5: the cells still below 0.95x
#: session 5's gemm_fusions_mlp (3 interleaved rounds, fastest kept) cells below 0.95x our plain GEMM: (fusion, label, M, N, K)
FUSIONS_GAP = [
    ("srelu", "qwen3-32b up", 2048, 25600, 5120),
    ("dsrelu", "llama3-8b up", 4096, 14336, 4096),
    ("dsrelu", "llama3-8b down", 2048, 4096, 14336),
]


def fusions_gap_cases():
    return [Case(f"{f} {label} M={m}", {"m": m, "n": n, "k": k, "fusion": f}, flops=2 * m * n * k) for f, label, m, n, k in FUSIONS_GAP]


def fusions_gap_providers():
    """ours / ours_plain as in gemm_fusions_mlp (the fused wrapper with its plan defaults, our default plain GEMM)."""
    fused = {p.name: p for p in fusion_providers()}
    return [Provider("ours", fused["ours"].make), Provider("ours_plain", fused["ours_plain"].make)]


# ------------------------------------------------------------------------------------ pingpong / staged reads
PINGPONG = ("plain", "bias", "srelu", "gelu_tanh", "swiglu", "amax", "dsrelu")


def pingpong_cases():
    shapes = [("4096^3", 4096, 4096, 4096), ("8192^3", 8192, 8192, 8192), ("llama3-8b up M=16384", 16384, 14336, 4096)]
    if QUICK:
        shapes = shapes[2:]
    cases = []
    for f in PINGPONG:
        for label, m, n, k in shapes:
            n_eff = 2 * n if f == "swiglu" else n
            cases.append(Case(f"{f} {label}", {"m": m, "n": n_eff, "k": k, "fusion": f}, flops=2 * m * n_eff * k))
    return cases


def _fusion_kw(case, a):
    """run_gemm keyword arguments of one fusion case (the tensors it needs, built once, outside the timing)."""
    import torch

    f = case.params["fusion"]
    n = case.params["n"]
    kw = {}
    if f not in ("plain", "dsrelu"):
        kw["bias"] = torch.randn(n, device="cuda", dtype=a.dtype)
    if f == "dsrelu":
        kw.update(aux=torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype), dsrelu=True)
    elif f == "srelu":
        kw["activation"] = "relu2"
    elif f == "gelu_tanh":
        kw["activation"] = "gelu_tanh"
    elif f == "swiglu":
        kw.update(swiglu="interleaved", n_out=n // 2)
    elif f == "amax":
        kw["amax"] = torch.empty(1, device="cuda", dtype=torch.float32)
    return kw


def pingpong_providers():
    """Every variant a per-fusion default can pick (api.FUSION_DEFAULTS), with explicit flags, next to the default."""

    def make(pingpong, staged):
        def build(case):
            from cudnn.gemm.dense.api import run_gemm

            a, b = _inputs(case)
            f = case.params["fusion"]
            if staged and f == "plain":
                raise Unsupported("nothing to stage")
            kw = _fusion_kw(case, a)
            if pingpong is not None:  # None: the plan's own defaults (FUSION_DEFAULTS)
                kw["pingpong"] = pingpong
                kw["stage_aux" if f == "dsrelu" else "stage_bias"] = staged
            out = run_gemm(a, b, **kw)
            return lambda: run_gemm(a, b, out=out, **kw)

        return build

    def ours_plain(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

    return [
        Provider("ours", make(None, False)),
        Provider("coop", make(False, False)),
        Provider("coop_staged", make(False, True)),
        Provider("pp", make(True, False)),
        Provider("pp_staged", make(True, True)),
        Provider("ours_plain", ours_plain),
    ]


# ------------------------------------------------------------------------------------ tables
def _run_table(name, out_dir, guard):
    """One table, in this process (``guard`` wraps the providers: see :func:`_guarded`)."""
    if name == "gemm":
        cases = plain_cases()
        run_benchmark(
            "gemm",
            cases,
            guard(plain_providers()),
            convention="2*M*N*K FLOPs; bf16 in/out, fp32 accumulate; A row-major, B = w.t() (K-major); ours = default schedule auto2 "
            "(two tiles per (N, K) from N and K only, each M picks one: one compile set for every M), ours_auto = schedule auto (one "
            "kernel for every M), ours_m = schedule waves+l2 (choice from M too: for fixed-M plans), ours_fixed = schedule fixed "
            f"(128x256, 2x1, no swizzle); {schedule_notes(cases)}",
            out_dir=out_dir,
            title="cudnn.gemm bf16 GEMM (tile schedules) vs cuBLAS and quack (H200)",
            rounds=3,  # the verdict is ours vs cuBLAS per cell: interleave the providers so a clock drift hits all of them
        )
    elif name == "gemm_fusions":
        run_benchmark(
            "gemm_fusions",
            fusion_cases(),
            guard(fusion_providers()),
            convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) where the fusion takes one; "
            "ours = the public wrapper with its plan defaults (api.FUSION_DEFAULTS); epilogue A/B candidates (api.AUX_PREFETCH / "
            "AUX_LDMATRIX / GELU_FOLD): ours_epi3 = dsrelu with 3 pre-activation sub-tiles in flight + ldmatrix reads, gelu_tanh with "
            "folded constants; ours_epi8 = dsrelu with the whole pre-activation tile loaded during the mainloop (8-deep D ring, one "
            "mainloop stage less) + ldmatrix reads; ours_epi2 = amax without the per-element bounds predicate (api.AMAX_FAST), "
            "swiglu with silu through one tanh.approx (api.SWIGLU_TANH)",
            out_dir=out_dir,
            title="cudnn.gemm fused epilogues vs our plain GEMM and cuBLAS + torch epilogue (H200)",
        )
    elif name == "gemm_fusions_mlp":
        fused = {p.name: p for p in fusion_providers()}
        run_benchmark(
            "gemm_fusions_mlp",
            fusion_mlp_cases(),
            guard([fused["ours"], fused["ours_plain"]]),
            convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) where the fusion takes one; "
            "ours = the public wrapper with its plan defaults; ours_plain = our default plain GEMM of the same (M, N, K); the target "
            "is ours/ours_plain >= 0.95x (a fusion costs <= 5% over the plain GEMM)",
            out_dir=out_dir,
            title="cudnn.gemm fused epilogues at every MLP shape vs our plain GEMM (H200)",
            rounds=3,  # the verdict is a ratio of two of our kernels: interleave them so a clock drift hits both
        )
    elif name == "gemm_fp8":
        run_benchmark(
            "gemm_fp8",
            fp8_cases(),
            guard(fp8_providers()),
            convention="2*M*N*K FLOPs; fp8 A (M, K) row-major and B = w.t() (K-major), per-tensor fp32 scales, bf16 D; "
            "ours = our default (fast_accum=False: WGMMA partial sums promoted into an fp32 accumulator every 128 of K, 128x192 tiles, "
            "api.FP8_PROMOTED_TILE_N) vs cublas_fp8 = torch._scaled_mm(use_fast_accum=False); ours_n128 = the same with 128x128 tiles; ours_p2 = promotion every 256 of K (api.FP8_PROMOTION_INTERVAL A/B); ours_fast = fast_accum=True (no promotion, 128x256 tiles) "
            "vs cublas_fp8_fast = use_fast_accum=True; ours_bf16 = our bf16 GEMM of the same shape (ours/ours_bf16 = the fp8 speed-up)",
            out_dir=out_dir,
            title="cudnn.gemm fp8 GEMM vs cuBLAS fp8 (torch._scaled_mm) and our bf16 GEMM (H200)",
        )
    elif name == "gemm_decode":
        run_benchmark(
            "gemm_decode",
            decode_cases(),
            guard(decode_providers()),
            convention="2*M*N*K FLOPs; bf16; ours = split-K (split_k_for heuristic, 1x1 cluster, fp32 partials + deterministic reduction, "
            "2 launches); ours_default = our default plan (no split, 2x1 cluster)",
            out_dir=out_dir,
            title="cudnn.gemm decode shapes: split-K vs our default plan and cuBLAS (H200)",
        )
    elif name == "gemm_pingpong":
        run_benchmark(
            "gemm_pingpong",
            pingpong_cases(),
            guard(pingpong_providers()),
            convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) except plain and dsrelu; "
            "ours = the fusion with its plan defaults (api.FUSION_DEFAULTS); coop = cooperative 128x256 kernel, per-element bias / pre reads; "
            "coop_staged = cooperative with stage_bias (dsrelu: stage_aux, the pre-activation by TMA); pp = pingpong=True (64x256 tiles, "
            "two consumer warpgroups taking turns); pp_staged = pingpong with the staged reads; ours_plain = our default plain GEMM. "
            "A fusion's default should be its fastest variant; the <= 5% target is variant / ours_plain >= 0.95 (TFLOP/s)",
            out_dir=out_dir,
            title="cudnn.gemm fusions: cooperative vs ping-pong, per-element vs staged reads (H200)",
        )
    elif name == "gemm_epi2":
        run_benchmark(
            "gemm_epi2",
            epi2_cases(),
            guard(epi2_providers()),
            convention="2*M*N*K FLOPs (N = gate + up columns for swiglu); bf16; bias (N,) for the fusions; each row twice (#1, #2: the "
            "run's noise); ours = default plan (fused wrapper / plain gemm, default schedule); ours_epi2 = amax_fast (amax without the "
            "per-element bounds predicate) / swiglu_tanh (silu through one tanh.approx); ours_plain = our default plain GEMM of the same "
            "problem; ours_auto = schedule auto (one tile per (N, K); the default until session 4); cublas = torch.matmul",
            out_dir=out_dir,
            title="cudnn.gemm round-2 A/B: amax / swiglu epilogues and the auto2 schedule (H200)",
        )
    elif name == "gemm_fusions_down":
        run_benchmark(
            "gemm_fusions_down",
            fusions_down_cases(),
            guard(fusions_down_providers()),
            convention="2*M*N*K FLOPs (N = gate + up columns for swiglu); bf16; bias (N,) except dsrelu; each row twice (#1, #2: the "
            "run's noise); ours = the fused wrapper with its plan defaults; ours_plain = our default plain GEMM of the same problem "
            "(ours/ours_plain = the fusion's cost, target >= 0.95x); ours (api.FUSED_AUTO2 on since session 5: the plain plan's auto2 "
            "tile set for staged-read fusions); ours_nofa2 = fused_auto2=False (the session-4 plans); ours_fa2k = dsrelu with fused_auto2 + aux_keep_stages "
            "(api.AUX_KEEP_STAGES: the pre-activation prefetch sized to keep 4 mainloop stages); ours_nostage = per-element bias "
            "reads (stage_bias False; gelu_tanh / amax llama3-8b down, whose fused plan equals the plain plan); a variant whose kernel "
            "is the default's is not run; an option's own ratio to plain is "
            f"(ours/ours_plain) / (ours/option); plans (M=2048): {fusions_down_notes()}",
            out_dir=out_dir,
            title="cudnn.gemm issue #5: fusions at M = 2048 down projections, default (fused_auto2) vs the session-4 plans (H200)",
            rounds=3,
        )
    elif name == "gemm_fusions_gap":
        run_benchmark(
            "gemm_fusions_gap",
            fusions_gap_cases(),
            guard(fusions_gap_providers()),
            convention="2*M*N*K FLOPs; bf16; bias (N,) for srelu; the three cells of session 5's gemm_fusions_mlp below 0.95x; "
            "ours = the fused wrapper with its plan defaults; ours_plain = our default plain GEMM of the same problem; "
            "ours/ours_plain = the fusion's cost (target >= 0.95x)",
            out_dir=out_dir,
            title="cudnn.gemm issue #5: the cells that were below 0.95x of plain (H200)",
            rounds=3,
        )
    else:
        raise SystemExit(f"unknown table {name!r}; known: {', '.join(TABLES)}")


TABLES = ("gemm", "gemm_fusions", "gemm_fusions_mlp", "gemm_fp8", "gemm_decode", "gemm_pingpong", "gemm_epi2", "gemm_fusions_down", "gemm_fusions_gap")
NEW = ("gemm_fp8", "gemm_pingpong")


def _is_poison(exc) -> bool:
    """A device fault: the CUDA context is unusable afterwards (every later launch in this process fails)."""
    text = f"{type(exc).__name__}: {exc}"
    return "AcceleratorError" in text or "CUDA error" in text or "cudaError" in text or "CUDA_ERROR" in text


def _guarded(excluded: dict, fault: dict):
    """Provider wrapper for one table process: cells in ``excluded`` (a previous attempt faulted there) are skipped;
    each cell's first launch is synchronized so a device fault is charged to that cell; after a fault the
    remaining cells are skipped (the context is gone) and recorded in ``fault`` for the parent to retry."""

    def guard(providers):
        out = []
        for p in providers:

            def make(case, p=p):
                key = f"{case.label} / {p.name}"
                if key in excluded:
                    raise Unsupported(f"skipped: a device fault in an earlier attempt ({excluded[key][:160]})")
                if fault:
                    raise Unsupported(f"not run in this attempt: the CUDA context was lost at {fault['key']}")
                try:
                    fn = p.make(case)
                    fn()
                    import torch

                    torch.cuda.synchronize()
                except Unsupported:
                    raise
                except Exception as exc:
                    if _is_poison(exc):
                        fault.update(key=key, msg=f"{type(exc).__name__}: {str(exc)[:200]}")
                    raise
                return fn

            out.append(Provider(p.name, make, p.available))
        return out

    return guard


def _child(name, out_dir, state_path):
    """Run one table; record a device fault (and exit 3) so the parent can rerun the table without that cell."""
    import json

    excluded = {}
    if state_path and os.path.exists(state_path):
        with open(state_path) as f:
            excluded = json.load(f)
    fault = {}
    _run_table(name, out_dir, _guarded(excluded, fault))
    if fault:
        excluded[fault["key"]] = fault["msg"]
        with open(state_path, "w") as f:
            json.dump(excluded, f)
        print(f"[gemm.py] {name}: device fault at {fault['key']}; the table will be rerun without it", flush=True)
        sys.exit(3)


def _selected():
    if "--tables" in sys.argv:
        return tuple(sys.argv[sys.argv.index("--tables") + 1].split(","))
    if "--new" in sys.argv:
        return NEW
    if "--fusions" in sys.argv:
        return ("gemm_fusions",)
    return TABLES


def main():
    import subprocess
    import tempfile

    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks")
    if "--table" in sys.argv:  # a child: one table in this process
        i = sys.argv.index("--table")
        state = sys.argv[sys.argv.index("--state") + 1] if "--state" in sys.argv else None
        _child(sys.argv[i + 1], out_dir, state)
        return
    tables = _selected()
    if "--in-process" in sys.argv:  # debugging: no isolation
        for name in tables:
            _run_table(name, out_dir, lambda providers: providers)
        return
    # each table in its own process: a device fault (a poisoned CUDA context) costs at most that table's attempt;
    # the table is rerun without the faulting cell (at most 3 attempts), the other tables never see it
    passthrough = [a for a in sys.argv[1:] if a == "--quick"]
    failed = []
    for name in tables:
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, "excluded.json")
            for _attempt in range(3):
                rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--table", name, "--state", state, *passthrough])
                if rc != 3:
                    break
            if rc != 0:
                failed.append(f"{name} (exit {rc})")
    if failed:
        print("[gemm.py] tables that did not finish cleanly: " + ", ".join(failed), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()


def compile_check() -> list[str]:
    """Without a GPU: compile the plain GEMM and the heaviest fused epilogue for sm_90a (benchmarks/run_all.py)."""
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, compile_kernel

    configs = {
        "gemm bf16 (K-major, 2x1 cluster)": GemmSm90Config(),
        "gemm_swiglu + bias + amax": GemmSm90Config(swiglu=True, bias="n", amax=True, cluster_mn=(1, 1)),
        "gemm fp8 e4m3, per-tensor scales, promoted accumulation": GemmSm90Config(ab_dtype="float8_e4m3fn", scale_ab=True, tile_mn=(128, 128)),
    }
    for config in configs.values():
        compile_kernel(config)
    return list(configs)
