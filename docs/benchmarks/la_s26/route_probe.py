"""Session 26 probe: call 2's test_tvm_ffi_launch_route_matches_the_dsl_entry_bit_for_bit failure. The varlen forward
(LENGTHS of test_conv1d_gpu.py, D 512, bf16 W 4 SiLU, initial + final states) through the DSL entry and the tvm-ffi
entry, each executed 4 times into NaN-poisoned outputs: where y / the final states differ between executes and routes,
and how many NaNs (unwritten elements) each holds."""

import sys

import torch

sys.path.insert(0, "packages/cudnn-linear-attention/tests")
from cudnn.linear_attention.conv1d.api import CausalConv1d  # noqa: E402
from cudnn_testing.data import cu_seqlens  # noqa: E402

LENGTHS = [1, 130, 1, 2, 517, 1, 64, 3, 1000, 1]
torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
D, W = 512, 4
cu = cu_seqlens(LENGTHS, "cuda")
x = torch.randn(sum(LENGTHS), D, device="cuda", dtype=torch.bfloat16)
w = torch.randn(D, W, device="cuda", dtype=torch.bfloat16) * 0.5
b = torch.randn(D, device="cuda", dtype=torch.bfloat16)
init = torch.randn(len(LENGTHS), D, W - 1, device="cuda", dtype=torch.bfloat16)
runs = {}
for route in (False, True):
    plan = CausalConv1d(x, w, torch.empty_like(x), b, cu, init, torch.empty_like(init), "silu")
    plan.tvm_ffi = route
    plan.compile()
    print("route", route, plan.compile_key(), flush=True)
    for i in range(4):
        y, fin = torch.full_like(x, float("nan")), torch.full_like(init, float("nan"))
        plan.execute(x, w, y, b, cu, init, fin)
        torch.cuda.synchronize()
        runs[(route, i)] = (y, fin)
        print(f"  route {route} run {i}: y NaN {int(y.isnan().sum())} fin NaN {int(fin.isnan().sum())}", flush=True)
ref_y, ref_f = runs[(False, 0)]
for k, (y, fin) in runs.items():
    dy = (y != ref_y) & ~(y.isnan() & ref_y.isnan())
    df = (fin != ref_f) & ~(fin.isnan() & ref_f.isnan())
    rows = dy.any(1).nonzero().flatten().tolist()
    print(k, "y diffs", int(dy.sum()), "rows", rows[:20], "fin diffs", int(df.sum()), flush=True)
    if rows:
        r = rows[0]
        cols = dy[r].nonzero().flatten().tolist()
        print("   row", r, "cols", cols[:16], "vals", y[r, cols[:4]].tolist(), "ref", ref_y[r, cols[:4]].tolist())
nan_rows = runs[(False, 0)][0].isnan().any(1).nonzero().flatten().tolist()
print("NaN rows of route False run 0:", nan_rows[:40])
