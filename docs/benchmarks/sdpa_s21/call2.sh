#!/usr/bin/env bash
# Session 21, call 2 (~8 min): (1) the forward GPU test files (the non-causal d128 default is now the persistent grid with
# the 128-row key tile; the new wg_epilogue / q_stages cases), sharded; (2) the persistent tile-transition A/B over the
# d128 dense rows: ours / ours-wgepi / ours-q2 / ours-q2-wgepi / FA4, settled, 2 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 300 python3 ci/gpu_shard_tests.py 14 290 $OUT/shards $T/test_sdpa_fwd_gpu.py $T/test_sdpa_fwd_prefill_options_gpu.py $T/test_sdpa_fwd_detectors.py \
  $T/test_sdpa_fwd_engine.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log
cat $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -30
timeout $(( 570 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --epi --rounds=2 --out=sdpa_fwd_s21_epi > $OUT/b_epi.log 2>&1
echo "epi rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_epi.log
grep "^|\|rc=" $OUT/b_epi.log | tail -n 20
cp docs/benchmarks/sdpa_fwd_s21_epi.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
