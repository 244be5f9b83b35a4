#!/usr/bin/env bash
# Session 19, call 2: the persistent backward (pers) with the dK/dV epilogue staged through the dS^T buffers (the K/V
# stage released before it). (1) its GPU tests (7) in 4 shards; (2) the A/B ours / ours-pers / fa4 on d64 s1k-s4k and
# the d128 rows where call 1 was mixed, settled, 3 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 200 python3 ci/gpu_shard_tests.py 4 190 $OUT/r/shards $V::test_persistent_grads_equal_the_default_plans \
  $V::test_persistent_counter_is_reset_every_call_and_under_graph_replay > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR\|Error" $OUT/r/shards/*.log | head -20
ROWS="d64 s1k b16|d64 s2k b8|d64 s4k b4|d128 s1k b16|d128 s2k b8 causal"
timeout $(( 560 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-pers,fa4 --rounds=3 --out=sdpa_bwd_s19_pers > $OUT/r/b_pers.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_pers.log
grep "^|\|rc=" $OUT/r/b_pers.log | tail -n 14
cp docs/benchmarks/sdpa_bwd_s19_pers.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
