#!/usr/bin/env bash
# session 16 call 10: the backward d256 / d192 rows, settled, 2 rounds
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 240 python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s16_grid_b > $OUT/r/b_bwd_b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd_b.log
grep "^|\|rc=" $OUT/r/b_bwd_b.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s16_grid_b.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
