#!/usr/bin/env bash
# Session 20, call 4 (~5 min): the dqfs A/B at the m80 (d128 non-causal default) and m128 (d64 default) rows, which call
# 3's provider still refused, and d128 s4k causal again: ours / ours-dqfs / fa4, settled, 3 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
timeout 300 python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16|d128 s4k b4|d64 s1k b16|d64 s4k b4" \
  --providers=ours,ours-dqfs,fa4 --rounds=3 --out=sdpa_bwd_s20_dqfs_all > $OUT/b_dqfs_all.log 2>&1
echo "dqfs_all rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_dqfs_all.log
grep "^|\|rc=" $OUT/b_dqfs_all.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s20_dqfs_all.* $OUT/ 2>/dev/null
