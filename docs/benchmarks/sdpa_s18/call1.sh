#!/usr/bin/env bash
# Session 18, call 1 (prepared in session 17 as sdpa_s17/next_call1.sh; the shard runner is now ci/gpu_shard_tests.py):
# (1) the GPU tests of the backward's opt-in grouped 3-D grid (g3d: 8 tests, ~10 main-kernel compiles);
# (2) its A/B on the masked d128 / d64 rows, settled, 2 interleaved rounds (ours, ours-g3d, fa4 in one process);
# (3) the per-kernel device times (torch.profiler) of ours vs FA4 at the s1k rows, and ncu of the pre- / postprocess
#     kernels, ours vs FA4, d128 s1k causal and not (FA4's preprocess measured ~10 us
#     faster on causal rows in session 12's profile: docs/benchmarks/sdpa_bwd_s12_post_kernels.md).
# Run from the repository root with carry [".gpu-host"]; results in $OUT/r.tgz.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 180 python3 ci/gpu_shard_tests.py 4 170 $OUT/r/shards \
  $V::test_grouped_grid_grads_equal_the_default_plans $V::test_grouped_grid_thd_varlen_grads_equal_the_default_plans \
  > $OUT/r/tests.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log
ROWS="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d128 s8k b2 causal|d64 s1k b16 causal|d64 s4k b4 causal"
timeout 230 python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-g3d,fa4 --rounds=2 --out=sdpa_bwd_s18_g3d > $OUT/r/b_g3d.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_g3d.log
grep "^|\|rc=" $OUT/r/b_g3d.log | tail -n 12
cp docs/benchmarks/sdpa_bwd_s18_g3d.* $OUT/r/ 2>/dev/null
timeout 80 python3 benchmarks/sdpa_bwd.py --profile --only="d128 s1k b16 causal|d64 s1k b16 causal|d128 s1k b16" --providers=ours,fa4 \
  --out=sdpa_bwd_s18_kernels > $OUT/r/prof.log 2>&1; echo "profile rc=$? t=$(( $(date +%s) - T0 ))"
cp docs/benchmarks/sdpa_bwd_s18_kernels.* $OUT/r/ 2>/dev/null
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats"
timeout 80 ncu --clock-control none --profile-from-start off -k regex:"Preprocess|Postprocess" $S --csv --page details \
  python3 docs/benchmarks/sdpa_s15/ncu_bwd.py "d128 s1k b16 causal" "d128 s1k b16" > $OUT/r/ncu_prepost.csv 2> $OUT/r/ncu_prepost.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 $OUT/r/ncu_prepost.err
cd $OUT && tar czf r.tgz r && rm -rf r
