"""Session 25 probe: run the causal_conv1d forward adapter on the issue-#7 64M-element rows (dense T16k x D4096, the
dense states batch B16 x 1024, the 1-token-sequence batch; the last also with the warp walk) twice each, so
``ncu -k regex:kernel_runs`` sees every kernel; ``--cases`` picks rows by label."""

import argparse
import sys

import torch

sys.path.insert(0, "benchmarks")
import linear_attention as la  # noqa: E402

from cudnn.linear_attention.conv1d.api import CausalConv1d  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--cases", default="fwd T16k D4096,fwd states B16 T16k D4096,fwd varlen1tok T16k D4096")
ap.add_argument("--walk", action="store_true", help="also the 1-token row with warp_walk")
args = ap.parse_args()
runs = [(c, {}) for c in la._cases() if c.label in args.cases.split(",")]
if args.walk:
    runs += [(c, {"warp_walk": True}) for c in la._cases() if c.label == "fwd varlen1tok T16k D4096"]
for case, fields in runs:
    inp = la._inputs(case)
    cu = inp["cu"]
    x = inp["x"][0] if cu is not None else inp["x"]
    y = x.new_empty(x.shape)
    plan = CausalConv1d(x, inp["w"], y, inp["b"], cu, inp["init"], inp["final"], activation="silu")
    for k, v in fields.items():
        setattr(plan, k, v)
    plan.check_support()
    plan.compile()
    for _ in range(2):
        plan.execute(x, inp["w"], y, inp["b"], cu, inp["init"], inp["final"])
    torch.cuda.synchronize()
    print(case.label, fields, plan.compile_key(), flush=True)
