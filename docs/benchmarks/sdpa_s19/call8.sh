#!/usr/bin/env bash
# Session 19, call 8 (~2.5 min, the session's last device time): elr (elect_release: the step's Q / dO stage releases
# from the lane elect.sync picks, after call 7's source view put 4.6% of the persistent kernel's stall samples on the
# lane-0 test's S2R). (1) its GPU tests (3 cases); (2) A/B ours / ours-elr / fa4, settled, 2 interleaved rounds.
# Logs go straight to $OUT (what a run cut short by the device budget leaves there still comes back).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 60 python3 ci/gpu_shard_tests.py 3 55 $OUT/shards $V::test_elect_release_grads_equal_the_default_plans > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log; cat $OUT/tests.log
timeout $(( 160 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d64 s1k b16" \
  --providers=ours,ours-elr,fa4 --rounds=2 --out=sdpa_bwd_s19_elr > $OUT/b_elr.log 2>&1
echo "elr rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_elr.log
grep "^|\|rc=\|/ ours" $OUT/b_elr.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s19_elr.* $OUT/ 2>/dev/null
