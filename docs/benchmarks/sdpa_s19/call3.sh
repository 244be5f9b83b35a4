#!/usr/bin/env bash
# Session 19, call 3: the A/B ours / ours-pers / fa4 on the rows call 2 left out (d64 s8k / s16k, d128 causal s4k to
# s16k, d128 s1k causal again), settled, 3 interleaved rounds: where pers joins the defaults.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
ROWS="d64 s8k|d64 s16k|d128 s1k b16 causal|d128 s4k b4 causal|d128 s8k b2 causal|d128 s16k b1 causal"
timeout 560 python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-pers,fa4 --rounds=3 --out=sdpa_bwd_s19_pers_long > $OUT/r/b_pers_long.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_pers_long.log
grep "^|\|rc=" $OUT/r/b_pers_long.log | tail -n 14
cp docs/benchmarks/sdpa_bwd_s19_pers_long.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
