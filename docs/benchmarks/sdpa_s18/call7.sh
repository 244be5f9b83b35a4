#!/usr/bin/env bash
# Session 18, call 7 (~4 min): causal d64 plans of at most 1024 query rows launch in FA4's order (api.SHORT_D64_CAUSAL_ROWS).
# (1) the backward's GPU suites again (12 shards), with the new test of that order; (2) its A/B at the short causal rows:
# ours (the new rule) vs ours-gbudget (the budget groups for every plan: the rule before), FA4 beside; 3 rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
T=packages/cudnn-sdpa/tests
timeout 230 python3 ci/gpu_shard_tests.py 12 220 $OUT/r/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_d192_gpu.py \
  $T/test_sdpa_bwd_detectors.py $T/test_sdpa_bwd_engine.py $T/test_sdpa_bwd_variants.py > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
timeout 150 python3 benchmarks/sdpa_bwd.py --only="d64 s1k b16 causal|d64 s2k b8 causal|d128 s1k b16 causal" --providers=ours,ours-gbudget,fa4 --rounds=3 --out=sdpa_bwd_s18_order_rule > $OUT/r/b_rule.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_rule.log
grep "^|\|rc=" $OUT/r/b_rule.log | tail -n 6
cp docs/benchmarks/sdpa_bwd_s18_order_rule.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
