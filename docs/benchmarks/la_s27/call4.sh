#!/usr/bin/env bash
# Session 27, call 4 (~2 min): issue #7, causal_conv1d's seeded starts by sequence length: dense states batches of 16, 128,
# 256 and 512 sequences over T16k (1024, 128, 64, 32 tokens each), kernel-only, 3 interleaved rounds: the default
# (seeded up to FWD_SEEDED_MAX_LEN = 64 tokens), seeded at every length (vector loads), element loads, unseeded. Data for
# the rule's length, and whether call 2's 5% loss of the vector-seeded kernel on 16 sequences repeats.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states B512 T16k D4096" \
  --providers ours+graph,ours-seed+graph,ours-seed-elem+graph,ours-noseed+graph,copy --out linear_attention_conv1d_s27_seedlen > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -6 | cut -d'|' -f1-7
cp docs/benchmarks/linear_attention_conv1d_s27_seedlen.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call4.tgz -C /tmp/keep .
