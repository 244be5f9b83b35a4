#!/usr/bin/env bash
# Session 21, call 4 (~9 min), on the final code: (1) every forward GPU test file, sharded (the new defaults: the
# persistent d128 grid with the 128-row key tile, q_stages=2, wg_epilogue), then the host-overhead file alone; (2) the
# full forward grid against the peers, settled, 2 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 230 python3 ci/gpu_shard_tests.py 14 220 $OUT/shards $T/test_sdpa_fwd_gpu.py $T/test_sdpa_fwd_prefill_options_gpu.py $T/test_sdpa_fwd_detectors.py \
  $T/test_sdpa_fwd_engine.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log
timeout 90 python3 -m pytest -p no:cacheprovider -q $T/test_sdpa_fwd_overhead.py > $OUT/overhead.log 2>&1
echo "overhead rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/overhead.log
tail -n 3 $OUT/tests.log; tail -n 2 $OUT/overhead.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log $OUT/overhead.log | head -30
timeout $(( 580 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --providers=ours,fa4,torch-cudnn --rounds=${GRID_ROUNDS:-2} --out=${GRID_OUT:-sdpa_fwd_s21} > $OUT/b_grid.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_grid.log
grep "^|\|rc=" $OUT/b_grid.log | tail -n 32
cp docs/benchmarks/${GRID_OUT:-sdpa_fwd_s21}.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
