#!/usr/bin/env bash
# Session 20, call 6 (~4 min): dqfs on THD varlen plans (in the causal / d64 defaults now: flags from each sequence's
# first scratch row) and dqz (dq_first_zero: ticket 0 zeroes its block at once, then everyone reduce-adds). (1) every
# backward GPU test with varlen / thd / dq_first in its id (the defaults' varlen grid, the variants, dqfs, dqz);
# (2) A/B ours / ours-dqz / fa4 at d128 s1k / s4k (non-causal: the m80 default + dqfs + dqz) and d64 s1k, 2 rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 170 python3 ci/gpu_shard_tests.py 14 160 $OUT/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_variants.py $T/test_sdpa_bwd_detectors.py \
  $T/test_sdpa_bwd_engine.py -k "varlen or thd or dq_first" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log
cat $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
timeout $(( 300 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16|d128 s4k b4|d64 s1k b16" --providers=ours,ours-dqz,fa4 \
  --rounds=2 --out=sdpa_bwd_s20_dqz > $OUT/b_dqz.log 2>&1
echo "dqz rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_dqz.log
grep "^|\|rc=" $OUT/b_dqz.log | tail -n 8
cp docs/benchmarks/sdpa_bwd_s20_dqz.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
