#!/usr/bin/env bash
# Session 20, call 5 (~10 min): dqfs in CAUSAL_TUNING and D64_TUNING (dense plans). (1) the backward's GPU suites
# (reference grid, GPT training step, detectors, engine, variants, d192) in 14 shards; (2) the d128 / d64 table against
# the peers, settled, 2 interleaved rounds, with ours-nodqfs (the same defaults without dqfs) beside ours.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 250 python3 ci/gpu_shard_tests.py 14 240 $OUT/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_d192_gpu.py \
  $T/test_sdpa_bwd_detectors.py $T/test_sdpa_bwd_engine.py $T/test_sdpa_bwd_variants.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log
cat $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
timeout $(( 590 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,ours-nodqfs,fa4,torch-cudnn \
  --rounds=2 --out=sdpa_bwd_s20_grid > $OUT/b_bwd.log 2>&1
echo "bwd rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_bwd.log
grep "^|\|rc=" $OUT/b_bwd.log | tail -n 23
cp docs/benchmarks/sdpa_bwd_s20_grid.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
