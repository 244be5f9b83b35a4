"""Quick GPU smoke check (not collected by pytest): python packages/cudnn-sdpa/tests/smoke_sdpa_fwd.py"""

import torch

from cudnn.sdpa import sdpa_fwd
from cudnn_testing.reference_attention import attention_ref

for d, causal, s in ((128, False, 512), (128, True, 300), (64, False, 1000), (256, True, 333)):
    q, k, v = (torch.randn(2, 4, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = sdpa_fwd(q, k, v, is_causal=causal, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, is_causal=causal)
    print(
        f"d={d} causal={causal} s={s}: max|o-ref|={(o.float() - ref).abs().max().item():.4f} max|lse-ref|={(lse - ref_lse).abs().max().item():.4f}", flush=True
    )
