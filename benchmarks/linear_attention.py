"""cudnn.linear_attention benchmark: causal_conv1d forward / backward / decode update in GB/s, and the
Gated DeltaNet forward (chunked, K = V = 128) in milliseconds and GB/s of minimum traffic.

Providers, all on the same inputs in one process: ours (cudnn.linear_attention), ours replayed from a
CUDA graph (no host overhead), fla-core's Triton causal_conv1d when importable, and a torch F.conv1d
(cuDNN) baseline on the same [B, T, D] storage (dense cases only).

Byte convention (minimum memory traffic, "effective"): forward reads x and writes y once
(2 * T * D * itemsize); backward reads x and dy and writes dx (3 * T * D * itemsize); update reads x,
writes out and reads and writes the state (B * D * (2 + 2 (W - 1)) * itemsize). Weights, bias and
metadata are not counted. Run:

    source ci/gpu_env.sh; python3 benchmarks/linear_attention.py      # writes docs/benchmarks/linear_attention.{md,csv,png}
    python3 benchmarks/linear_attention.py gdn                        # GDN only: docs/benchmarks/linear_attention_gdn.{md,csv,png}
    python3 benchmarks/linear_attention.py conv1d                     # conv1d only

GDN forward (issue 7's shapes: B = 1, T in {4k, 8k, 32k}, H in {16, 32, 64}, K = V = 128, plus a varlen mix of
64 sequences): providers ours (``cudnn.linear_attention.gdn.api.gated_delta_net``, eager), ours+graph (the
same call replayed from a CUDA graph), fla (fla-core's Triton ``chunk_gated_delta_rule``), fla+graph. Same
inputs for all: bf16 q/k/v, fp32 g = logsigmoid(N(0,1)) / 8 and beta ~ U(0,1), q/k L2-normalised in the kernel,
no initial state, no final state. Byte convention (the minimum traffic: the roofline's numerator): q, k, v read
and o written once in bf16, g and beta read once in fp32: T H (2 K + 2 V) bf16 elements and 2 T H fp32 ones, counted as
``T * H * (2 * K * 2 + 2 * V * 2 + 8)``; the achieved fraction of the roofline is GB/s over the device's HBM
bandwidth (about 4.8 TB/s on an H200).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, Unsupported, run_benchmark  # noqa: E402

WIDTH = 4


def _cases():
    cases = []
    for t, d in ((4096, 4096), (16384, 4096), (32768, 4096), (8192, 8192)):
        cases.append(Case(f"fwd T{t // 1024}k D{d}", {"op": "fwd", "t": t, "d": d, "varlen": False}, bytes=2 * t * d * 2))
    cases.append(Case("fwd varlen64 T32k D4096", {"op": "fwd", "t": 32768, "d": 4096, "varlen": True}, bytes=2 * 32768 * 4096 * 2))
    cases.append(Case("fwd varlen1tok T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": "ones"}, bytes=2 * 16384 * 4096 * 2))
    for t, d in ((16384, 4096),):
        cases.append(Case(f"bwd T{t // 1024}k D{d}", {"op": "bwd", "t": t, "d": d, "varlen": False}, bytes=3 * t * d * 2))
    cases.append(Case("bwd varlen64 T32k D4096", {"op": "bwd", "t": 32768, "d": 4096, "varlen": True}, bytes=3 * 32768 * 4096 * 2))
    for b, d in ((64, 8192), (512, 8192)):
        cases.append(Case(f"update B{b} D{d}", {"op": "update", "b": b, "d": d}, bytes=b * d * (2 + 2 * (WIDTH - 1)) * 2))
    return cases


def _lengths(total, kind):
    import torch

    if kind == "ones":
        return [1] * total
    g = torch.Generator().manual_seed(0)
    cuts = sorted(torch.randperm(total - 1, generator=g)[:63].add(1).tolist())
    return [b - a for a, b in zip([0] + cuts, cuts + [total], strict=True)]


def _inputs(case):
    import torch

    from cudnn_testing.data import cu_seqlens

    p = case.params
    torch.manual_seed(0)
    if p["op"] == "update":
        x = torch.randn(p["b"], p["d"], device="cuda", dtype=torch.bfloat16)
        state = torch.randn(p["b"], p["d"], WIDTH - 1, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(p["d"], WIDTH, device="cuda", dtype=torch.bfloat16)
        return dict(x=x, state=state, w=w, b=torch.randn(p["d"], device="cuda", dtype=torch.bfloat16))
    t, d = p["t"], p["d"]
    x = torch.randn(1, t, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(d, WIDTH, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    cu = cu_seqlens(_lengths(t, p["varlen"]), "cuda") if p["varlen"] else None
    return dict(x=x, w=w, b=b, cu=cu, dy=torch.randn_like(x))


def _grad_fn(fwd, inp):
    import torch

    x = inp["x"].requires_grad_()
    w = inp["w"].requires_grad_()
    b = inp["b"].requires_grad_()
    y = fwd(x, w, b)
    return lambda: torch.autograd.grad(y, (x, w, b), inp["dy"], retain_graph=True)


def _make_ours(case):
    from cudnn.linear_attention import causal_conv1d, causal_conv1d_update

    inp = _inputs(case)
    op = case.params["op"]
    if op == "update":
        return lambda: causal_conv1d_update(inp["x"], inp["state"], inp["w"], inp["b"], "silu")
    cu = inp["cu"]

    def fwd(x, w, b):
        return causal_conv1d(x[0] if cu is not None else x, w, b, "silu", cu_seqlens=cu)

    if op == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    inp["dy"] = inp["dy"][0] if cu is not None else inp["dy"]
    return _grad_fn(fwd, inp)


def _make_ours_graph(case):
    import torch

    fn = _make_ours(case)
    if case.params["op"] == "bwd":
        raise Unsupported("autograd.grad is not graph-captured here")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _make_ours_variant(group, min_ctas):
    """Tuning probe: the forward adapter called directly, compiled with another register-buffer depth."""

    def make(case):
        import dataclasses

        from cudnn.linear_attention.conv1d.api import CausalConv1d

        if case.params["op"] != "fwd":
            raise Unsupported("forward-only tuning probe")
        inp = _inputs(case)
        cu = inp["cu"]
        x = inp["x"][0] if cu is not None else inp["x"]
        y = x.new_empty(x.shape)
        plan = CausalConv1d(x, inp["w"], y, inp["b"], cu, activation="silu")
        plan.check_support()
        key = dataclasses.replace(plan.compile_key(), group=group, min_ctas_per_sm=min_ctas)
        plan.compile_key = lambda: key
        plan.compile()
        return lambda: plan.execute(x, inp["w"], y, inp["b"], cu)

    return make


def _fla_available():
    try:
        import fla.modules.causal_conv1d  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"fla not importable: {type(exc).__name__}: {exc}"[:200]
    return None


def _make_fla(case):
    from fla.modules.causal_conv1d import causal_conv1d, causal_conv1d_update

    inp = _inputs(case)
    op = case.params["op"]
    if op == "update":
        # fla's cache is [B, D, W] (it keeps the current token too)
        import torch

        cache = torch.randn(inp["x"].shape[0], inp["x"].shape[1], WIDTH, device="cuda", dtype=torch.bfloat16)
        return lambda: causal_conv1d_update(inp["x"], cache, weight=inp["w"], bias=inp["b"], activation="silu")
    cu = inp["cu"]
    cu64 = cu.long() if cu is not None else None

    def fwd(x, w, b):
        return causal_conv1d(x, w, b, activation="silu", cu_seqlens=cu64, backend="triton")[0]

    if op == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    return _grad_fn(fwd, inp)


def _make_torch(case):
    import torch.nn.functional as F

    if case.params["op"] == "update" or case.params.get("varlen"):
        raise Unsupported("F.conv1d has no varlen or rolling-state form")
    inp = _inputs(case)
    t = case.params["t"]

    def fwd(x, w, b):
        return F.silu(F.conv1d(x.transpose(1, 2), w[:, None, :], b, padding=WIDTH - 1, groups=w.shape[0])[..., :t]).transpose(1, 2)

    if case.params["op"] == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    return _grad_fn(fwd, inp)


GDN_D = 128


def _gdn_bytes(t, h, d=GDN_D):
    return t * h * (2 * d * 2 + 2 * d * 2 + 8)


def _gdn_cases():
    cases = []
    for t in (4096, 8192, 32768):
        for h in (16, 32, 64):
            cases.append(Case(f"gdn fwd T{t // 1024}k H{h}", {"t": t, "h": h, "varlen": False}, bytes=_gdn_bytes(t, h)))
    cases.append(Case("gdn fwd varlen64 T32k H32", {"t": 32768, "h": 32, "varlen": True}, bytes=_gdn_bytes(32768, 32)))
    return cases


def _gdn_inputs(case):
    import torch
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    p = case.params
    torch.manual_seed(0)
    t, h, d = p["t"], p["h"], GDN_D
    q = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(1, t, h, device="cuda")) / 8
    beta = torch.rand(1, t, h, device="cuda")
    cu = cu_seqlens(_lengths(t, True), "cuda") if p["varlen"] else None
    return dict(q=q, k=k, v=v, g=g, beta=beta, cu=cu)


def _make_gdn_ours(case):
    from cudnn.linear_attention.gdn.api import gated_delta_net

    i = _gdn_inputs(case)
    return lambda: gated_delta_net(i["q"], i["k"], i["v"], i["g"], i["beta"], use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"])


def _gdn_fla_available():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"fla not importable: {type(exc).__name__}: {exc}"[:200]
    return None


def _make_gdn_fla(case):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    i = _gdn_inputs(case)
    cu = i["cu"].long() if i["cu"] is not None else None
    return lambda: chunk_gated_delta_rule(i["q"], i["k"], i["v"], i["g"], i["beta"], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)


def _graphed(make):
    def make_graph(case):
        import torch

        fn = make(case)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay

    return make_graph


def main_gdn():
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    run_benchmark(
        "linear_attention_gdn",
        _gdn_cases(),
        [
            Provider("ours", _make_gdn_ours),
            Provider("ours+graph", _graphed(_make_gdn_ours)),
            Provider("fla", _make_gdn_fla, _gdn_fla_available),
            Provider("fla+graph", _graphed(_make_gdn_fla), _gdn_fla_available),
        ],
        convention="GDN forward, B=1, K=V=128, bf16 q/k/v, fp32 g/beta, L2 norm in kernel, no states; "
        "effective bytes T*H*(2*K*2 + 2*V*2 + 8) (q, k, v read, o written, g, beta read); roofline fraction = GB/s / HBM GB/s",
        metric="gbps",
        out_dir=out_dir,
        title="Gated DeltaNet forward (bf16, K=V=128)",
    )


def main():
    providers = [
        Provider("ours", _make_ours),
        Provider("ours+graph", _make_ours_graph),
        Provider("ours-u8", _make_ours_variant(8, 3)),
        Provider("fla", _make_fla, _fla_available),
        Provider("torch", _make_torch),
    ]
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    run_benchmark(
        "linear_attention",
        _cases(),
        providers,
        convention="effective bytes: fwd 2*T*D*2 (x read, y written), bwd 3*T*D*2 (x, dy read, dx written), update B*D*(2+2(W-1))*2; bf16, W=4, SiLU, bias",
        metric="gbps",
        out_dir=out_dir,
        title="causal_conv1d (bf16, W=4, SiLU)",
    )


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which in ("all", "conv1d"):
        main()
    if which in ("all", "gdn"):
        main_gdn()


def compile_check() -> list[str]:
    """Without a GPU: build causal_conv1d forward (varlen, SiLU, width 4) for sm_90a (benchmarks/run_all.py)."""
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((32768, 4096), "bfloat16", "x")
    st = TensorDesc.contiguous((64, 4096, 3), "bfloat16", "states")
    plan = CausalConv1d(
        x,
        TensorDesc.contiguous((4096, 4), "bfloat16", "weight"),
        x,
        TensorDesc.contiguous((4096,), "bfloat16", "bias"),
        TensorDesc.contiguous((65,), "int32", "cu_seqlens"),
        st,
        st,
        "silu",
    )
    plan.compile()
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    qk = TensorDesc.contiguous((32768, 32, GDN_D), "bfloat16", "q")
    gate = TensorDesc.contiguous((32768, 32), "float32", "g")
    gdn = GatedDeltaNetFwdSm90(qk, qk, qk, gate, gate, qk, use_qk_l2norm_in_kernel=True, cu_seqlens=TensorDesc.contiguous((65,), "int32", "cu_seqlens"))
    gdn.compile()
    return ["causal_conv1d fwd varlen silu w4", "gated_delta_net fwd varlen l2norm K=V=128"]
