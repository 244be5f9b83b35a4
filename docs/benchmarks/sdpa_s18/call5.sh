#!/usr/bin/env bash
# Session 18, call 5 (~2 min): the launch order of masked plans at the short rows (never measured below s4k: session
# 15's g1 A/B had one causal row, d128 s4k, where the budget groups won): ours (budget groups), ours-g1 (FA4's order:
# each head's key blocks consecutive), ours-g2, ours-g4, FA4; 3 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
ROWS="d128 s1k b16 causal|d128 s2k b8 causal|d64 s1k b16 causal|d64 s2k b8 causal"
timeout 240 python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-g1,ours-g2,ours-g4,fa4 --rounds=3 --out=sdpa_bwd_s18_order > $OUT/r/b_order.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_order.log
grep "^|\|rc=" $OUT/r/b_order.log | tail -n 7
cp docs/benchmarks/sdpa_bwd_s18_order.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
