#!/usr/bin/env bash
# Session 28, call 6 (~6 min): issue #7, causal_conv1d final_tail (the fused final states written after the token loop,
# CTA row j those of sequences j, j + n_runs, ...). Run with the candidate defaults set on this copy only:
# FWD_FINAL_TAIL_DEFAULT = True and FWD_FINAL_FUSED_VARLEN_DEFAULT = True (every plan with final states fuses them as the
# tail). (1) The conv1d GPU files (sharded). (2) Kernel-only A/B on the states rows, 3 interleaved rounds: the candidate
# default, the fused final states inside the token loop, the separate kernel.
set -u
T0=$(date +%s)
A=packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/api.py
sed -i 's/^FWD_FINAL_TAIL_DEFAULT = False$/FWD_FINAL_TAIL_DEFAULT = True/; s/^FWD_FINAL_FUSED_VARLEN_DEFAULT = False$/FWD_FINAL_FUSED_VARLEN_DEFAULT = True/' $A
grep -n "^FWD_FINAL_TAIL_DEFAULT\|^FWD_FINAL_FUSED_VARLEN_DEFAULT" $A
source ci/gpu_env.sh
rm -rf /tmp/keep /tmp/shards; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 ci/gpu_shard_tests.py 14 190 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt; tar czf /tmp/keep/shards.tgz -C /tmp shards
timeout 200 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096" \
  --providers ours,ours+graph,ours-final-loop+graph,ours-final-sep+graph,copy --out linear_attention_conv1d_s28_tail > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -12 | cut -d'|' -f1-7
cp docs/benchmarks/linear_attention_conv1d_s28_tail.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call6.tgz -C /tmp/keep .
