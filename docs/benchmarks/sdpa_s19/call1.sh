#!/usr/bin/env bash
# Session 19, call 1: the persistent backward (pers). (1) a smoke run of one persistent plan under a timeout (a
# deadlock would show here); (2) its GPU tests (7) in 4 shards; (3) the A/B ours / ours-pers / fa4 on the rows under the
# targets, settled, 2 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 120 python3 -m pytest -q -x "$V::test_persistent_grads_equal_the_default_plans[d128-no-writer]" > $OUT/r/smoke.log 2>&1
echo "smoke rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/smoke.log; tail -n 4 $OUT/r/smoke.log
timeout 200 python3 ci/gpu_shard_tests.py 4 190 $OUT/r/shards $V::test_persistent_grads_equal_the_default_plans \
  $V::test_persistent_counter_is_reset_every_call_and_under_graph_replay > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR\|Error" $OUT/r/shards/*.log | head -20
ROWS="d128 s1k b16|d128 s4k b4|d64 s1k b16|d128 s2k b8 causal"
timeout $(( 580 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-pers,fa4 --rounds=2 --out=sdpa_bwd_s19_pers > $OUT/r/b_pers.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_pers.log
grep "^|\|rc=" $OUT/r/b_pers.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s19_pers.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
