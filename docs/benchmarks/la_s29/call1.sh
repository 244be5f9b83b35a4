#!/usr/bin/env bash
# Session 29, call 1 (~8 min): issue #7, causal_conv1d. (1) The conv1d GPU files (sharded) with the new default (a varlen
# plan without states: the warp walk on chunk 8 for every call) and the tail_batch option. (2) Kernel-only A/B, 3
# interleaved rounds: the varlen rows without states, the new default against the one before (ours-nowalk+graph); the
# varlen states rows, the tail one sequence at a time (the default) against 4 and 8 at once.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep /tmp/shards; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 230 python3 ci/gpu_shard_tests.py 14 220 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt; tar czf /tmp/keep/shards.tgz -C /tmp shards
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd varlen64 T32k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096" \
  --providers ours+graph,ours-nowalk+graph --out linear_attention_conv1d_s29_walk > /tmp/keep/bench_walk.log 2>&1
echo "bench walk rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_walk.log | head -8 | cut -d'|' -f1-5
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096" \
  --providers ours+graph,ours-tailbatch4+graph,ours-tailbatch8+graph --out linear_attention_conv1d_s29_tailbatch > /tmp/keep/bench_tail.log 2>&1
echo "bench tail rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_tail.log | head -8 | cut -d'|' -f1-6
cp docs/benchmarks/linear_attention_conv1d_s29_* /tmp/keep/ 2>/dev/null
tar czf $OUT/call1.tgz -C /tmp/keep .
