#!/usr/bin/env bash
# Session 20, call 1 (~9 min): stats4 at the 64 / 80-row blocks (lse_log2 / dpsum stored permuted by the preprocess, a
# thread's four S^T columns one 16-byte load; stearly: loaded before the WGMMA waits) and elr (session 19, unmeasured).
# (1) their GPU tests (bitwise dK / dV against the plan without them, all three against the reference; a varlen case);
# (2) A/B at d128 causal: ours / ours-s4e / ours-s4ee / ours-elr / fa4; (3) d128 s1k / s4k both masks (non-causal: m80): ours / ours-s4 / fa4 (stats4 alone spills 24 bytes at causal).
# Settled, 2 interleaved rounds. Logs go straight to $OUT.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 150 python3 ci/gpu_shard_tests.py 9 140 $OUT/shards "$V::test_step_variant_grads_equal_the_default_plans" \
  "$V::test_variant_thd_varlen_grads_match_reference" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/tests.log; cat $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
timeout $(( 440 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d128 s8k b2 causal" \
  --providers=ours,ours-s4e,ours-s4ee,ours-elr,fa4 --rounds=2 --out=sdpa_bwd_s20_stats4_causal > $OUT/b_causal.log 2>&1
echo "causal rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_causal.log
grep "^|\|rc=" $OUT/b_causal.log | tail -n 8
cp docs/benchmarks/sdpa_bwd_s20_stats4_causal.* $OUT/ 2>/dev/null
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16|d128 s4k b4" \
  --providers=ours,ours-s4,fa4 --rounds=2 --out=sdpa_bwd_s20_stats4_m80 > $OUT/b_m80.log 2>&1
echo "m80 rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_m80.log
grep "^|\|rc=" $OUT/b_m80.log | tail -n 6
cp docs/benchmarks/sdpa_bwd_s20_stats4_m80.* $OUT/ 2>/dev/null
