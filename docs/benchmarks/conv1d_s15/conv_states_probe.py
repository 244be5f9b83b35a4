"""Session-15 probe (a diagnostic, not a benchmark table): where the conv1d forward's states batch loses (dense
[16, 1024, 4096] bf16, W 4, SiLU, bias): kernel-only time (CUDA graph replay, do_bench) with / without initial and final
states, chunk 8 and contiguous runs. Run from the repository root with the packages on PYTHONPATH. (The logged run
printed TB/s under a "GB/s" label.)"""

import torch
import triton

from cudnn.linear_attention.conv1d.api import CausalConv1d


def main():
    B, L, D, W = 16, 1024, 4096, 4
    torch.manual_seed(0)
    x = torch.randn(B, L, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
    init = torch.randn(B, D, W - 1, device="cuda", dtype=torch.bfloat16)
    fin = torch.empty(B, D, W - 1, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    nbytes = 2 * B * L * D * 2
    for chunk in (8, 0):
        for i, f in ((None, None), (init, None), (None, fin), (init, fin)):
            plan = CausalConv1d(x, w, y, b, None, i, f, activation="silu")
            plan.tvm_ffi = True
            plan.chunk = chunk
            plan.check_support()
            plan.compile()

            def fn(plan=plan, i=i, f=f):
                plan.execute(x, w, y, b, None, i, f)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            ms = min(triton.testing.do_bench(g.replay, warmup=25, rep=200) for _ in range(3))
            print(f"chunk {chunk} init {i is not None:d} final {f is not None:d}: {ms * 1e3:7.1f} us {nbytes / ms / 1e9:7.1f} TB/s", flush=True)


if __name__ == "__main__":
    main()
