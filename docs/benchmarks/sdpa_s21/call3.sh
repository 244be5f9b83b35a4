#!/usr/bin/env bash
# Session 21, call 3 (~5 min): (1) the GPU tests of the 192-row tile on the persistent grid and of q_stages / wg_epilogue;
# (2) the d64 A/B: ours (192-row tile, one tile per CTA) / ours-m192-pers / ours-m192-pers-q2 / FA4, 2 rounds; (3) ncu
# elapsed cycles of the new d128 defaults (the persistent grid) against q_stages=2 + wg_epilogue and FA4.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 200 python3 ci/gpu_shard_tests.py 12 190 $OUT/shards $T/test_sdpa_fwd_prefill_options_gpu.py -k "tile_m or q_stages or wg_epilogue or persistent_execute" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log
cat $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -30
timeout 200 python3 benchmarks/sdpa_fwd.py --d64-pers --rounds=2 --out=sdpa_fwd_s21_d64 > $OUT/b_d64.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_d64.log
grep "^|\|rc=" $OUT/b_d64.log | tail -n 8
cp docs/benchmarks/sdpa_fwd_s21_d64.* $OUT/ 2>/dev/null
M=smsp__inst_executed.sum,sm__cycles_active.avg,dram__bytes_read.sum
NCU_VARIANTS=ours,q2wgepi,fa4 timeout $(( 560 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off --section SpeedOfLight --metrics $M --csv --page details \
  python3 docs/benchmarks/sdpa_s21/ncu_fwd_variants.py "d128 s1k b16" "d128 s2k b8" "d128 s4k b4" "d128 s4k b4 causal" > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 2 $OUT/ncu.err
python3 docs/benchmarks/sdpa_s21/ncu_summary.py $OUT/ncu_summary.md $OUT/ncu.csv:fwd; cat $OUT/ncu_summary.md
cd $OUT && tar czf shards.tgz shards && rm -rf shards
