#!/usr/bin/env bash
# Session 20, call 2 (~7 min): dqfs (dq_first_store: no zeroed dQ accumulator; per 64-row query block the first
# dq_writer stores, the others reduce-add once it marked the block done). (1) its GPU tests and, for the postprocess's
# new flags argument, the backward's reference grid, detectors and engine suites in 12 shards; (2) A/B at d128 causal:
# ours / ours-dqfs / fa4, settled, 2 interleaved rounds; (3) the per-kernel profile at s1k / s4k causal.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-sdpa/tests
timeout 230 python3 ci/gpu_shard_tests.py 12 220 $OUT/shards $T/test_sdpa_bwd_gpu.py $T/test_sdpa_bwd_detectors.py $T/test_sdpa_bwd_engine.py \
  "$T/test_sdpa_bwd_variants.py::test_dq_first_store_grads_equal_the_default_plans" \
  "$T/test_sdpa_bwd_variants.py::test_dq_first_store_flags_are_reset_every_call_and_under_graph_replay" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log; cat $OUT/tests.log; grep -h "^FAILED\|^ERROR\|Timeout\|timed out" $OUT/shards/*.log | head -20
timeout $(( 500 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d128 s8k b2 causal" \
  --providers=ours,ours-dqfs,fa4 --rounds=2 --out=sdpa_bwd_s20_dqfs > $OUT/b_dqfs.log 2>&1
echo "dqfs rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_dqfs.log
grep "^|\|rc=" $OUT/b_dqfs.log | tail -n 8
cp docs/benchmarks/sdpa_bwd_s20_dqfs.* $OUT/ 2>/dev/null
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --profile --only="d128 s1k b16 causal|d128 s4k b4 causal" \
  --providers=ours,ours-dqfs,fa4 --out=sdpa_bwd_s20_dqfs > $OUT/profile.log 2>&1
echo "profile rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/profile.log
cp docs/benchmarks/sdpa_bwd_s20_dqfs_kernels.md $OUT/ 2>/dev/null; cat $OUT/sdpa_bwd_s20_dqfs_kernels.md 2>/dev/null | cut -c1-110 | head -40
