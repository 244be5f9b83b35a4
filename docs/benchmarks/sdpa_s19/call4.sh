#!/usr/bin/env bash
# Session 19, call 4 (~9 min): pers in the defaults of api.PERSISTENT_SCOPE's plain plans (d64 non-causal, d128 causal).
# (1) the backward's GPU suites (reference grid, detectors, engine, variants, d192) in 12 shards; (2) the d128 / d64
# table against the peers, settled, 2 interleaved rounds, with ours-nopers (the same defaults without pers) beside ours.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
T=packages/cudnn-sdpa/tests
timeout 230 python3 ci/gpu_shard_tests.py 12 220 $OUT/r/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_d192_gpu.py \
  $T/test_sdpa_bwd_detectors.py $T/test_sdpa_bwd_engine.py $T/test_sdpa_bwd_variants.py > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,ours-nopers,fa4,torch-cudnn \
  --rounds=2 --out=sdpa_bwd_s19_grid > $OUT/r/b_bwd.log 2>&1
echo "bwd rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd.log
grep "^|\|rc=" $OUT/r/b_bwd.log | tail -n 23
cp docs/benchmarks/sdpa_bwd_s19_grid.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
