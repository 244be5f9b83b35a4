"""cudnn.gemm benchmark through the shared harness (benchmarks/harness.py).

Two tables, each written as docs/benchmarks/<name>.{md,csv,png}:
- ``gemm``: our plain bf16 GEMM vs cuBLAS (torch.matmul) and quack's GEMM (when importable, default
  config, no autotuning) on square 2048-8192 and LLM MLP shapes (Llama-3-8B/70B, Qwen3-32B up/down
  projections; M = tokens from 1 to 16384). A row-major (M, K), B = w.t() of an (N, K) weight.
- ``gemm_fusions``: each fused GEMM ("ours") vs our plain GEMM of the same problem ("ours_plain": the
  ratio column ours/ours_plain is the fusion's cost, >= 0.95x means <= 5% over plain) and vs cuBLAS
  followed by the torch elementwise op it replaces ("cublas+torch").

Run on the GPU host:  source ci/gpu_env.sh; python3 benchmarks/gemm.py [--quick] [--fusions (the fusion table only)]
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


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks")
    if "--fusions" not in sys.argv:
        _plain(out_dir)
    _fusions(out_dir)


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
    }
    for config in configs.values():
        compile_kernel(config)
    return list(configs)
