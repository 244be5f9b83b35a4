#!/usr/bin/env bash
# Session 18, call 2 (~6 min): the backward's opt-in ``mlp`` (prepost_mlp: every preprocess load before its first
# store, 64-row dq_bulk postprocess CTAs), after call 1's ncu (our preprocess at 69% of DRAM bandwidth, 12 CTAs/SM,
# 1.29 waves; our postprocess at 24 warps/SM, 6 CTAs by shared memory; FA4 78% / 83%):
# (1) its GPU tests (8); (2) per-kernel device times, ours / ours-mlp / FA4 at the s1k rows;
# (3) the A/B at the short rows (ours, ours-mlp, ours-g3dmlp, fa4; 2 interleaved rounds).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 170 python3 ci/gpu_shard_tests.py 4 160 $OUT/r/shards \
  $V::test_prepost_mlp_grads_equal_the_default_plans $V::test_prepost_mlp_thd_varlen_grads_equal_the_default_plan \
  > $OUT/r/tests.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log
timeout 100 python3 benchmarks/sdpa_bwd.py --profile --only="d128 s1k b16 causal|d64 s1k b16 causal|d128 s1k b16|d64 s1k b16" --providers=ours,ours-mlp,fa4 \
  --out=sdpa_bwd_s18_mlp > $OUT/r/prof.log 2>&1; echo "profile rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "Warn\|warn\|exe_args" $OUT/r/prof.log | grep "us per call\|Pre\|Post" | cut -c1-100
cp docs/benchmarks/sdpa_bwd_s18_mlp_kernels.* $OUT/r/ 2>/dev/null
ROWS="d128 s1k b16|d128 s1k b16 causal|d128 s2k b8|d128 s2k b8 causal|d128 s4k b4 causal|d64 s1k b16|d64 s1k b16 causal|d64 s2k b8|d64 s2k b8 causal"
timeout 280 python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=ours,ours-mlp,ours-g3dmlp,fa4 --rounds=2 --out=sdpa_bwd_s18_mlpab > $OUT/r/b_mlp.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_mlp.log
grep "^|\|rc=" $OUT/r/b_mlp.log | tail -n 14
cp docs/benchmarks/sdpa_bwd_s18_mlpab.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
