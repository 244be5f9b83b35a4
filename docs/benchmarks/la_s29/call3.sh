#!/usr/bin/env bash
# Session 29, call 3 (~6 min): (1) issue #7, the KDA backward GPU suite with mn_operands the default (sharded), and the
# conv1d window-shift test whose key check the stateless walk default had broken (fixed test). (2) causal_conv1d, the
# varlen states rows: what each state side costs now (initial states only / final states only, kernel-only, 3 rounds).
set -u
T0=$(date +%s)
[ -d s29_restore ] && cp -r s29_restore/. . && echo "restored the committed: $(cd s29_restore && find . -type f | tr '\n' ' ')"
source ci/gpu_env.sh
rm -rf /tmp/keep /tmp/shards; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 330 python3 ci/gpu_shard_tests.py 14 320 /tmp/shards $T/test_kda_bwd_gpu.py $T/test_delta_rule_bwd_detectors.py $T/test_kda_autograd_gpu.py \
  $T/test_kda_bwd_torch_op.py $T/test_la_bwd_p3.py $T/test_la_bwd_p3_kda_mn.py $T/test_la_bwd_parallel_gpu.py $T/test_la_bwd_fold.py $T/test_la_bwd_p2.py \
  $T/test_delta_rule_torch_op.py "$T/test_conv1d_fast_gpu.py::test_forward_shift_always_is_bitwise_the_guarded_shift" > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt; tar czf /tmp/keep/shards.tgz -C /tmp shards
timeout 120 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096" \
  --providers ours+graph,ours-initonly+graph,ours-finalonly+graph --out linear_attention_conv1d_s29_sides > /tmp/keep/bench_sides.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_sides.log | head -8 | cut -d'|' -f1-6
cp docs/benchmarks/linear_attention_conv1d_s29_* /tmp/keep/ 2>/dev/null
tar czf $OUT/call3.tgz -C /tmp/keep .
