"""Small backward calls for compute-sanitizer (racecheck / memcheck): the staged postprocess of each dq_bulk path."""

import torch

from cudnn.sdpa import sdpa_bwd, sdpa_fwd

torch.manual_seed(0)
for d, causal, s in ((128, True, 300), (128, False, 300), (64, True, 257)):
    q, k, v = (torch.randn(1, s, 2, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    o, lse = sdpa_fwd(q, k, v, is_causal=causal, return_lse=True)
    do = torch.randn_like(o)
    r = sdpa_bwd(q, k, v, o, do, lse, is_causal=causal)
    torch.cuda.synchronize()
    print(d, causal, s, float(r["dq"].float().abs().sum()), flush=True)
