"""cudnn.gemm benchmark through the shared harness (benchmarks/harness.py).

Two tables, each written as docs/benchmarks/<name>.{md,csv,png}:
- ``gemm``: our plain bf16 GEMM vs cuBLAS (torch.matmul) and quack's GEMM (when importable, default
  config, no autotuning) on square 2048-8192 and LLM MLP shapes (Llama-3-8B/70B, Qwen3-32B up/down
  projections; M = tokens from 1 to 16384). A row-major (M, K), B = w.t() of an (N, K) weight.
- ``gemm_fusions``: each fused GEMM ("ours") vs our plain GEMM of the same problem ("ours_plain": the
  ratio column ours/ours_plain is the fusion's cost, >= 0.95x means <= 5% over plain) and vs cuBLAS
  followed by the torch elementwise op it replaces ("cublas+torch").

- ``gemm_fp8``: our fp8 GEMM (e4m3 or e5m2 operands, per-tensor fp32 scales, bf16 D) vs cuBLAS fp8
  (``torch._scaled_mm``, same operands and scales) and vs our bf16 GEMM of the same shape ("ours_bf16": the
  column ours/ours_bf16 is the fp8 speed-up, target >= 1.6x at 8192^3).
- ``gemm_decode``: small-M (decode) MLP shapes with split-K (``split_k_for`` heuristic, single-CTA clusters,
  "ours") vs our default plan ("ours_default", no split, 2x1 cluster) and cuBLAS.
- ``gemm_pingpong``: each fusion (and plain) with ``pingpong=True`` and the staged reads ("ours"), pingpong
  alone ("ours_pp"), the default cooperative kernel ("ours_coop") and our default plain GEMM ("ours_plain":
  the <= 5% target column).
- ``gemm_staged``: fused epilogues with ``stage_bias=True`` (dsrelu: ``stage_aux=True``, the pre-activation
  by TMA) ("ours") vs the same fusion reading bias / pre per element ("ours_unstaged") and our plain GEMM
  ("ours_plain").

Run on the GPU host:  source ci/gpu_env.sh; python3 benchmarks/gemm.py [--quick] [--fusions (the fusion table only)]
    [--new (only the fp8, decode, pingpong and staged tables)]
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
MLP_M = (1, 2048, 16384) if not QUICK else (2048,)


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
    def ours(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

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

    return [Provider("ours", ours), Provider("cublas", cublas), Provider("quack", quack, _quack_available)]


def plain_cases():
    cases = []
    for s in (2048, 4096, 8192):
        cases.append(Case(f"{s}^3", {"m": s, "n": s, "k": s}, flops=2 * s**3))
    for label, n, k in MLP if not QUICK else MLP[:2]:
        for m in MLP_M:
            cases.append(Case(f"{label} M={m}", {"m": m, "n": n, "k": k}, flops=2 * m * n * k))
    return cases


# ------------------------------------------------------------------------------------ fusions
FUSIONS = ("bias", "srelu", "gelu_tanh", "swiglu", "amax", "dsrelu")


def fusion_cases():
    shapes = [
        ("4096^3", 4096, 4096, 4096),
        ("8192^3", 8192, 8192, 8192),
        ("llama3-8b up M=16384", 16384, 14336, 4096),
    ]
    if QUICK:
        shapes = shapes[:1]
    cases = []
    for f in FUSIONS:
        for label, m, n, k in shapes:
            n_eff = 2 * n if f == "swiglu" else n  # swiglu: N gate + N up columns -> N outputs
            cases.append(Case(f"{f} {label}", {"m": m, "n": n_eff, "k": k, "fusion": f}, flops=2 * m * n_eff * k))
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

    return [Provider("ours", ours), Provider("ours_plain", ours_plain), Provider("cublas+torch", cublas_torch)]


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
    def ours(case):
        from cudnn.gemm import gemm

        a, b, sa, sb = _fp8_inputs(case)
        out = gemm(a, b, scale_a=sa, scale_b=sb)["d"]
        return lambda: gemm(a, b, scale_a=sa, scale_b=sb, out=out)

    def cublas_fp8(case):
        import torch

        a, b, sa, sb = _fp8_inputs(case)
        # use_fast_accum=True: like our kernel, cuBLAS then accumulates in the fp8 WGMMA accumulators without
        # periodic promotion to a separate fp32 sum (the default False is slower and more accurate)
        kw = dict(scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True)
        try:
            torch._scaled_mm(a, b, **kw)
        except Exception as exc:  # noqa: BLE001
            raise Unsupported(f"torch._scaled_mm: {type(exc).__name__}: {str(exc)[:120]}") from exc
        return lambda: torch._scaled_mm(a, b, **kw)

    def ours_bf16(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

    return [Provider("ours", ours), Provider("cublas_fp8", cublas_fp8), Provider("ours_bf16", ours_bf16)]


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


# ------------------------------------------------------------------------------------ staged bias
STAGED = ("bias", "srelu", "gelu_tanh", "swiglu", "amax", "dsrelu")


def staged_cases():
    shapes = [("8192^3", 8192, 8192, 8192), ("llama3-8b up M=16384", 16384, 14336, 4096)]
    if QUICK:
        shapes = shapes[1:]
    cases = []
    for f in STAGED:
        for label, m, n, k in shapes:
            n_eff = 2 * n if f == "swiglu" else n
            cases.append(Case(f"{f} {label}", {"m": m, "n": n_eff, "k": k, "fusion": f}, flops=2 * m * n_eff * k))
    return cases


def staged_providers():
    def make(staged):
        def build(case):
            import torch

            from cudnn.gemm.dense.api import run_gemm

            a, b = _inputs(case)
            f = case.params["fusion"]
            n = case.params["n"]
            bias = torch.randn(n, device="cuda", dtype=a.dtype)
            kw = dict(bias=bias, stage_bias=staged)
            if f == "dsrelu":  # no bias: the pre-activation read is what is staged (stage_aux, by TMA)
                pre = torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype)
                kw = dict(aux=pre, dsrelu=True, stage_aux=staged)
            elif f == "srelu":
                kw["activation"] = "relu2"
            elif f == "gelu_tanh":
                kw["activation"] = "gelu_tanh"
            elif f == "swiglu":
                kw.update(swiglu="interleaved", n_out=n // 2)
            elif f == "amax":
                kw["amax"] = torch.empty(1, device="cuda", dtype=torch.float32)
            return lambda: run_gemm(a, b, **kw)

        return build

    def ours_plain(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        return lambda: gemm(a, b)

    return [Provider("ours", make(True)), Provider("ours_unstaged", make(False)), Provider("ours_plain", ours_plain)]


# ------------------------------------------------------------------------------------ pingpong
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


def pingpong_providers():
    def make(pingpong, staged):
        def build(case):
            import torch

            from cudnn.gemm.dense.api import run_gemm

            a, b = _inputs(case)
            f = case.params["fusion"]
            n = case.params["n"]
            kw = dict(pingpong=pingpong) if pingpong else {}
            if f not in ("plain", "dsrelu"):
                kw["bias"] = torch.randn(n, device="cuda", dtype=a.dtype)
                if staged:
                    kw["stage_bias"] = True
            if f == "dsrelu":
                kw.update(aux=torch.randn(a.shape[0], n, device="cuda", dtype=a.dtype), dsrelu=True)
                if staged:
                    kw["stage_aux"] = True
            elif f == "srelu":
                kw["activation"] = "relu2"
            elif f == "gelu_tanh":
                kw["activation"] = "gelu_tanh"
            elif f == "swiglu":
                kw.update(swiglu="interleaved", n_out=n // 2)
            elif f == "amax":
                kw["amax"] = torch.empty(1, device="cuda", dtype=torch.float32)
            out = run_gemm(a, b, **kw)
            return lambda: run_gemm(a, b, out=out, **kw)

        return build

    def ours_plain(case):
        from cudnn.gemm import gemm

        a, b = _inputs(case)
        out = gemm(a, b)["d"]
        return lambda: gemm(a, b, out=out)

    return [
        Provider("ours", make(True, True)),
        Provider("ours_pp", make(True, False)),
        Provider("ours_coop", make(False, False)),
        Provider("ours_plain", ours_plain),
    ]


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks")
    if "--new" not in sys.argv:
        if "--fusions" not in sys.argv:
            _plain(out_dir)
        _fusions(out_dir)
        if "--fusions" in sys.argv:
            return
    run_benchmark(
        "gemm_fp8",
        fp8_cases(),
        fp8_providers(),
        convention="2*M*N*K FLOPs; fp8 A (M, K) row-major and B = w.t() (K-major), per-tensor fp32 scales, bf16 D, "
        "accumulation in the fp8 WGMMA accumulators (cuBLAS with use_fast_accum=True); "
        "ours_bf16 is our bf16 GEMM of the same shape (ours/ours_bf16 = the fp8 speed-up)",
        out_dir=out_dir,
        title="cudnn.gemm fp8 GEMM vs cuBLAS fp8 (torch._scaled_mm) and our bf16 GEMM (H200)",
    )
    run_benchmark(
        "gemm_decode",
        decode_cases(),
        decode_providers(),
        convention="2*M*N*K FLOPs; bf16; ours = split-K (split_k_for heuristic, 1x1 cluster, fp32 partials + deterministic reduction, "
        "2 launches); ours_default = our default plan (no split, 2x1 cluster)",
        out_dir=out_dir,
        title="cudnn.gemm decode shapes: split-K vs our default plan and cuBLAS (H200)",
    )
    run_benchmark(
        "gemm_pingpong",
        pingpong_cases(),
        pingpong_providers(),
        convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) except plain and dsrelu; "
        "ours = pingpong=True (64x256 tiles, two consumer warpgroups taking turns) with the staged bias / pre-activation reads; "
        "ours_pp = pingpong with per-element reads; ours_coop = the same fusion on the default cooperative 128x256 kernel; "
        "ours_plain = our default plain GEMM (ours/ours_plain >= 0.95x is the <= 5% fusion target)",
        out_dir=out_dir,
        title="cudnn.gemm ping-pong consumers vs the cooperative kernel (H200)",
    )
    run_benchmark(
        "gemm_staged",
        staged_cases(),
        staged_providers(),
        convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) except dsrelu; ours = stage_bias=True "
        "(dsrelu: stage_aux=True), ours_unstaged = per-element reads (the default)",
        out_dir=out_dir,
        title="cudnn.gemm fused epilogues with the bias staged in shared memory (H200)",
    )


def _plain(out_dir):
    run_benchmark(
        "gemm",
        plain_cases(),
        plain_providers(),
        convention="2*M*N*K FLOPs; bf16 in/out, fp32 accumulate; A row-major, B = w.t() (K-major)",
        out_dir=out_dir,
        title="cudnn.gemm bf16 GEMM vs cuBLAS and quack (H200)",
    )


def _fusions(out_dir):
    run_benchmark(
        "gemm_fusions",
        fusion_cases(),
        fusion_providers(),
        convention="2*M*N*K FLOPs of the GEMM (N = gate + up columns for swiglu); bf16; bias (N,) where the fusion takes one",
        out_dir=out_dir,
        title="cudnn.gemm fused epilogues vs our plain GEMM and cuBLAS + torch epilogue (H200)",
    )


if __name__ == "__main__":
    main()


def compile_check() -> list[str]:
    """Without a GPU: compile the plain GEMM and the heaviest fused epilogue for sm_90a (benchmarks/run_all.py)."""
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, compile_kernel

    configs = {
        "gemm bf16 (K-major, 2x1 cluster)": GemmSm90Config(),
        "gemm_swiglu + bias + amax": GemmSm90Config(swiglu=True, bias="n", amax=True, cluster_mn=(1, 1)),
        "gemm fp8 e4m3, per-tensor scales": GemmSm90Config(ab_dtype="float8_e4m3fn", scale_ab=True),
    }
    for config in configs.values():
        compile_kernel(config)
    return list(configs)
