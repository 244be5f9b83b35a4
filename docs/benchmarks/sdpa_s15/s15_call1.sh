#!/usr/bin/env bash
# session 15 call 1: spin / kvq fixed-cost variants: GPU tests (GPU 1) then the d64 A/B; d128 A/B on GPU 0
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -k fixed_cost packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py > $OUT/r/t_fixed.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_fixed.log
  timeout $(( 520 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d64 s1k|d64 s2k|d64 s4k" --providers=ours,ours-spin,ours-kvq,ours-spinkvq,fa4 --rounds=3 --out=sdpa_bwd_s15_fixed_d64 > $OUT/r/b_d64.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d64.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 520 python3 benchmarks/sdpa_bwd.py --only="d128 s1k|d128 s2k|d128 s4k" --providers=ours,ours-spin,ours-kvq,ours-spinkvq,fa4 --rounds=3 --out=sdpa_bwd_s15_fixed_d128 > $OUT/r/b_d128.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d128.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s15_* $OUT/r/ 2>/dev/null
for f in $OUT/r/*.log; do echo "== $(basename $f)"; tail -n 4 $f; done
cd $OUT && tar czf r.tgz r && rm -rf r
