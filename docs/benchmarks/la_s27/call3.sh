#!/usr/bin/env bash
# Session 27, call 3 (~5 min): issue #7, causal_conv1d with the rules call 2's A/B set: the seeded starts by default only
# for dense sequences of at most 64 tokens (FWD_SEEDED_MAX_LEN: the 16 x 1024 states batch lost 5% with them) and the
# varlen per-call chunks from 32 tokens per sequence on average (FWD_VARLEN_CHUNK_MIN_LEN: at 16, 1024 sequences, the
# contiguous runs won by 1.6%). (1) Kernel-only A/B, 3 interleaved rounds, on the rows the rules decide. (2) The conv1d
# GPU files with these defaults.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd states varlen256 T16k D4096" \
  --providers ours,ours+graph,ours-noseed+graph,ours-seed-elem+graph,ours-runs+graph,ours-chunk8+graph,copy --out linear_attention_conv1d_s27_rules > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -7 | cut -d'|' -f1-9
cp docs/benchmarks/linear_attention_conv1d_s27_rules.* /tmp/keep/ 2>/dev/null
T=packages/cudnn-linear-attention/tests
timeout 150 python3 ci/gpu_shard_tests.py 14 140 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt
tar czf /tmp/keep/shards.tgz -C /tmp shards; tar czf $OUT/call3.tgz -C /tmp/keep .
