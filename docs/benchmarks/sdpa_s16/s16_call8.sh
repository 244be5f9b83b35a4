#!/usr/bin/env bash
# session 16 call 8: backward d64 A/B (stats_early), then the forward grid with the 3-D grid (settled, 2 rounds)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 200 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -n 4 packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py -k "stearly" > $OUT/r/t_var.log 2>&1 &
timeout 200 python3 benchmarks/sdpa_bwd.py --only="d64 s" --providers=ours,ours-stearly,fa4 --rounds=2 --out=sdpa_bwd_s16_stearly > $OUT/r/b_stearly.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_stearly.log
wait
timeout $(( 560 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_fwd_s16 > $OUT/r/b_fwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_fwd.log
cp docs/benchmarks/sdpa_bwd_s16_stearly.* docs/benchmarks/sdpa_fwd_s16.* $OUT/r/ 2>/dev/null
tail -n 3 $OUT/r/t_var.log
grep "^|\|rc=" $OUT/r/b_stearly.log | tail -n 14
grep "^|\|rc=" $OUT/r/b_fwd.log | tail -n 32
cd $OUT && tar czf r.tgz r && rm -rf r
