#!/usr/bin/env bash
# Session 18, call 6 (~2 min): call 5 had ours-g1 (FA4's launch order) at 1.035x ours on d64 s1k causal (and 0.98x at
# d128 s1k causal); the d64 causal rows s1k-s16k, ours vs ours-g1, 3 interleaved rounds, FA4 beside them.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 240 python3 benchmarks/sdpa_bwd.py --only="d64 s1k b16 causal|d64 s2k b8 causal|d64 s4k b4 causal|d64 s8k b2 causal|d64 s16k b1 causal" --providers=ours,ours-g1,fa4 --rounds=3 --out=sdpa_bwd_s18_order_d64 > $OUT/r/b_order.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_order.log
grep "^|\|rc=" $OUT/r/b_order.log | tail -n 8
cp docs/benchmarks/sdpa_bwd_s18_order_d64.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
