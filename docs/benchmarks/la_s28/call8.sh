#!/usr/bin/env bash
# Session 28, call 8 (~2 min): issue #7, causal_conv1d, no code change: the warp walk (opt-in) beside the final session-28
# defaults (varlen final states as the run grid's tail), kernel-only, 3 interleaved rounds, on the varlen rows.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
timeout 200 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096,fwd varlen64 T32k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096" \
  --providers ours+graph,ours-warpwalk+graph,ours-chunk8-warpwalk+graph --out linear_attention_conv1d_s28_walk > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -12 | cut -d'|' -f1-5
cp docs/benchmarks/linear_attention_conv1d_s28_walk.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call8.tgz -C /tmp/keep .
