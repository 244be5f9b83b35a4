#!/usr/bin/env bash
# Session 20, call 3 (~6 min): dqfs at the m80 (d128 non-causal default) and m128 (d64 default) blocks. (1) the dqfs GPU
# tests (9 cases + the repeated-call / graph-replay test); (2) A/B ours / ours-dqfs / fa4 at d128 s1k / s4k and d64 s1k /
# s4k, both masks, settled, 2 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 150 python3 ci/gpu_shard_tests.py 10 140 $OUT/shards "$V::test_dq_first_store_grads_equal_the_default_plans" \
  "$V::test_dq_first_store_flags_are_reset_every_call_and_under_graph_replay" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log; cat $OUT/tests.log; grep -h "^FAILED\|^ERROR\|Timeout\|timed out" $OUT/shards/*.log | head -20
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16|d128 s4k b4|d64 s1k b16|d64 s4k b4" \
  --providers=ours,ours-dqfs,fa4 --rounds=2 --out=sdpa_bwd_s20_dqfs_all > $OUT/b_dqfs_all.log 2>&1
echo "dqfs_all rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_dqfs_all.log
grep "^|\|rc=" $OUT/b_dqfs_all.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s20_dqfs_all.* $OUT/ 2>/dev/null
