#!/usr/bin/env bash
# Session 18, call 3 (~8 min): mlp in every default tuning. (1) the backward's GPU suites (reference grid, detectors,
# engine, variants, d192, the training step) in 12 shards; (2) the backward table against the peers, settled, 2
# interleaved rounds: d128 / d64 rows, then d256 / d192 rows.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
T=packages/cudnn-sdpa/tests
timeout 230 python3 ci/gpu_shard_tests.py 12 220 $OUT/r/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_d192_gpu.py \
  $T/test_sdpa_bwd_detectors.py $T/test_sdpa_bwd_engine.py $T/test_sdpa_bwd_variants.py > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
timeout 220 python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s18_grid > $OUT/r/b_bwd.log 2>&1
echo "bwd rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd.log
grep "^|\|rc=" $OUT/r/b_bwd.log | tail -n 23
cp docs/benchmarks/sdpa_bwd_s18_grid.* $OUT/r/ 2>/dev/null
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s18_grid_b > $OUT/r/b_bwd_b.log 2>&1
echo "bwd_b rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd_b.log
grep "^|\|rc=" $OUT/r/b_bwd_b.log | tail -n 11
cp docs/benchmarks/sdpa_bwd_s18_grid_b.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
