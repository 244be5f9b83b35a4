"""Gated DeltaNet backward vs our own Gated DeltaNet forward at the same shapes (issue #7: the backward must be
within 3x of our forward; fla cannot run the GDN backward on this Hopper stack).

Providers: ``ours_fwd`` (GatedDeltaNetFwdSm90, one launch) and ``ours_bwd`` (GatedDeltaNetBwdSm90, three launches,
workspace allocated once outside the timed call), on the same inputs; B = 1, T in {8k, 32k}, H in {16, 64},
K = V = 128, bf16 q/k/v, fp32 g/beta, with initial state. Time: the harness's median (L2 cleared between runs).
Convention: milliseconds; the table's ratio bwd / fwd is the acceptance number. Writes docs/benchmarks/linear_attention_gdn_bwd.{md,csv,png}.

    source ci/gpu_env.sh && python benchmarks/linear_attention_gdn_bwd.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, run_benchmark  # noqa: E402

SHAPES = [(8192, 16), (8192, 64), (32768, 16), (32768, 64)]
D = 128


def _inputs(T, H):
    import torch
    import torch.nn.functional as F

    q = torch.randn(T, H, D, device="cuda").to(torch.bfloat16)
    k = F.normalize(torch.randn(T, H, D, device="cuda"), dim=-1).to(torch.bfloat16)
    v = torch.randn(T, H, D, device="cuda").to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(T, H, device="cuda")) / 8
    beta = torch.rand(T, H, device="cuda")
    h0 = torch.randn(1, H, D, D, device="cuda") * 0.5
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    return q, k, v, g, beta, h0, cu


def _available():
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return "needs an sm_90 GPU"
    return None


def make_fwd(case):
    import torch

    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    q, k, v, g, beta, h0, cu = _inputs(case.params["T"], case.params["H"])
    o = torch.empty_like(v)
    plan = GatedDeltaNetFwdSm90(q, k, v, g, beta, o, initial_state=h0, cu_seqlens=cu)
    plan.compile()
    return lambda: plan.execute(q, k, v, g, beta, o, h0, None, cu)


def make_bwd(case):
    import torch

    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90, workspace_bytes

    T, H = case.params["T"], case.params["H"]
    q, k, v, g, beta, h0, cu = _inputs(T, H)
    do = torch.randn_like(v)
    dq, dk, dv, dg, dbeta, dh0 = (torch.empty_like(t) for t in (q, k, v, g, beta, h0))
    plan = GatedDeltaNetBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, cu_seqlens=cu)
    plan.compile()
    ws = torch.empty(workspace_bytes(T, 1, H, D), dtype=torch.uint8, device="cuda")
    return lambda: plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, None, cu, workspace=ws)


def main():
    cases = [Case(f"T{T // 1024}k_H{H}", {"T": T, "H": H}) for T, H in SHAPES]
    providers = [Provider("ours_fwd", make_fwd, _available), Provider("ours_bwd", make_bwd, _available)]
    results = run_benchmark(
        "linear_attention_gdn_bwd",
        cases,
        providers,
        convention="milliseconds (B=1, K=V=128, with initial state); acceptance: ours_bwd / ours_fwd <= 3",
        metric="ms",
        title="Gated DeltaNet backward vs forward (H200)",
    )
    by = {(r.case, r.provider): r.ms for r in results}
    for c in cases:
        f, b = by.get((c.label, "ours_fwd")), by.get((c.label, "ours_bwd"))
        if f and b:
            print(f"{c.label}: bwd / fwd = {b / f:.2f}")


if __name__ == "__main__":
    main()
