#!/usr/bin/env bash
# session 15 call 5: backward launch-order A/B (_group_heads): d128 rows on GPU 0, d64 / d192 / d256 rows on GPU 1
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=0
  timeout 500 python3 benchmarks/sdpa_bwd.py --only="d128 s" --providers=ours,ours-g1,ours-g2,ours-g4,fa4 --rounds=2 --out=sdpa_bwd_s15_order_d128 > $OUT/r/b_d128.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d128.log
) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 500 python3 benchmarks/sdpa_bwd.py --only="d64 s|d192|d256" --providers=ours,ours-g1,ours-g2,ours-g4,fa4 --rounds=2 --out=sdpa_bwd_s15_order_rest > $OUT/r/b_rest.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_rest.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s15_order* $OUT/r/ 2>/dev/null
for f in $OUT/r/b_*.log; do echo "== $(basename $f)"; grep "^|\|rc=" $f | tail -n 22; done
cd $OUT && tar czf r.tgz r && rm -rf r
