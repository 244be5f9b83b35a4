#!/usr/bin/env bash
# Session 28, call 5 (~7 min): issue #7, causal_conv1d with the session-28 default (varlen plans write their final states
# with the separate kernel: FWD_FINAL_FUSED_VARLEN_DEFAULT = False). (1) The conv1d GPU files (sharded). (2) Every
# conv1d forward row, kernel-only and eager, 3 interleaved rounds: the default, the fused final states, the warp walk.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 ci/gpu_shard_tests.py 14 190 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt; tar czf /tmp/keep/shards.tgz -C /tmp shards
timeout 240 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd T16k D4096,fwd T32k D4096,fwd T8k D8192,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen1024 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096" \
  --providers ours,ours+graph,ours-final-fused+graph,ours-warpwalk+graph,copy --out linear_attention_conv1d_s28 > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -20 | cut -d'|' -f1-7
cp docs/benchmarks/linear_attention_conv1d_s28.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call5.tgz -C /tmp/keep .
