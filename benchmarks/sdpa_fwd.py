"""Attention forward benchmark: cudnn.sdpa vs FA4 (flash_attn.cute) vs torch SDPA (cuDNN and flash backends).

Same inputs (BSHD storage; torch and ours read the (B, H, S, D) transposed view natively) in the same process.
TFLOP/s by the FlashAttention convention: 4 * B * H * S_q * S_kv * D, halved for causal.
Shapes: 16k total tokens per batch (B = 16384 / S), H * D = 2048; d 64 / 128 / 256; causal and not; GQA 8:1;
a varlen mix (THD) and a decode batch (S_q = 1, S_kv = 8192, dense KV).

    python benchmarks/sdpa_fwd.py [--quick]     # writes docs/benchmarks/sdpa_fwd.{md,csv,png}
    python benchmarks/sdpa_fwd.py --only=decode,d64,d128+s4k    # a subset -> docs/benchmarks/sdpa_fwd_subset.*
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
    if quick:
        seqs = {128: [4096], 64: [], 256: []}
    for d in (128, 64, 256):
        for s in seqs[d]:
            for causal in (False, True):
                b = max(1, TOTAL // s)
                h = 2048 // d
                cases.append(dict(kind="dense", b=b, h=h, hk=h, s=s, d=d, causal=causal))
    for s in [4096, 8192] if not quick else []:
        for causal in (False, True):
            cases.append(dict(kind="dense", b=TOTAL // s, h=32, hk=4, s=s, d=128, causal=causal))
    if not quick:
        cases.append(dict(kind="varlen", lens=[512, 1024, 3000, 4096, 2048, 777, 4927], h=16, hk=16, d=128, causal=True))
        cases.append(dict(kind="decode", b=64, h=32, hk=8, s=8192, d=128, causal=False))
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
            out.append(Case(f"decode b{p['b']} h{p['h']}:{p['hk']} skv{p['s'] // 1024}k", p, flops=4 * p["b"] * p["h"] * p["s"] * p["d"], bytes=byt))
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
    q, k, v = (t.transpose(1, 2) for t in (x["q"], x["k"], x["v"]))
    out = torch.empty_like(x["q"]).transpose(1, 2)
    causal = p["causal"]
    sdpa_fwd(q, k, v, is_causal=causal, out=out)
    return lambda: sdpa_fwd(q, k, v, is_causal=causal, out=out)


def fa4_available():
    try:
        import flash_attn.cute  # noqa: F401

        return None
    except Exception as exc:  # noqa: BLE001
        return f"flash_attn.cute not importable ({type(exc).__name__}: {exc})"


def make_fa4(case):
    from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

    p = case.params
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
        if p["kind"] == "varlen":
            raise Unsupported("no THD varlen in torch SDPA")
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


def host_overhead():
    """Host microseconds per call of a cached sdpa_fwd and of a prepared SdpaFwdSm90.execute (queue kept busy)."""
    import time

    import torch

    from cudnn.sdpa import SdpaFwdSm90, sdpa_fwd

    q, k, v = (torch.randn(1, 128, 4, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    o = torch.empty_like(q)
    plan = SdpaFwdSm90(q, k, v, o)
    plan.compile()
    for name, fn in (("sdpa_fwd (cached plan)", lambda: sdpa_fwd(q, k, v, out=o)), ("SdpaFwdSm90.execute", lambda: plan.execute(q, k, v, o))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        torch.cuda._sleep(200_000_000)
        t0 = time.perf_counter()
        n = 200
        for _ in range(n):
            fn()
        dt = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        print(f"host overhead: {name}: {dt:.1f} us/call")


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
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    cases, name = _shapes(quick), "sdpa_fwd"
    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    if only:  # a subset (written as sdpa_fwd_subset.*): cases whose label contains every listed word of one group
        groups = [g.split("+") for g in only[0]]
        cases = [c for c in cases if any(all(w in c.label for w in grp) for grp in groups)]
        name = "sdpa_fwd_subset"
    run_benchmark(
        name,
        cases,
        providers,
        convention="4*B*H*S_q*S_kv*D FLOPs (halved for causal); decode GB/s counts K+V bytes; bf16, BSHD storage",
        out_dir=out_dir,
        title="attention forward, H200",
    )


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
