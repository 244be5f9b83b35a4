"""Host time per prepared SdpaBwdSm90.execute on the GPU host: full validation every call (memo off), memo, fast_guard."""

import time

import torch

from cudnn.sdpa import SdpaBwdSm90, sdpa_fwd

torch.manual_seed(0)
b, h, hk, s, d = 1, 4, 2, 256, 128
q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(2))
do = torch.randn_like(q)
o, lse = sdpa_fwd(q, k, v, is_causal=True, return_lse=True)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
res = {}
for mode in ("reference", "memo", "guard"):
    plan = SdpaBwdSm90(q, k, v, o, do, lse, dq, dk, dv, is_causal=True)
    plan.fast_guard = mode == "guard"
    plan.compile()
    if mode == "reference":
        plan._fast.memo_on = False
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    for _ in range(20):
        plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(100):
            plan.execute(q, k, v, o, do, lse, dq, dk, dv, ws)
        best = min(best, (time.perf_counter() - t0) / 100 * 1e6)
        torch.cuda.synchronize()
    res[mode] = best
for mode, us in res.items():
    print(f"bwd execute host time ({mode}): {us:.1f} us per call (best of 5 x 100, d128 b1 h4:2 s256 causal)")
