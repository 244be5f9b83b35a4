#!/usr/bin/env bash
# Session 18, call 8 (~2 min): the backward variant tests after their THD setup became one helper
# (_thd_variant_matches_its_base) and the g3d pair went through _variant_pair.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 150 python3 ci/gpu_shard_tests.py 5 140 $OUT/r/shards $V::test_grouped_grid_grads_equal_the_default_plans \
  $V::test_grouped_grid_thd_varlen_grads_equal_the_default_plans $V::test_prepost_mlp_thd_varlen_grads_equal_the_default_plan \
  > $OUT/r/tests.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
cd $OUT && tar czf r.tgz r && rm -rf r
