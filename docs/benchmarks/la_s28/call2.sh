#!/usr/bin/env bash
# Session 28, call 2 (~4 min): issue #7, causal_conv1d, where the varlen rows under 3.5 TB/s lose (no code change):
# kernel-only, 3 interleaved rounds: the warp walk (contiguous runs and chunk 8), the states varlen row with only the
# initial / only the final states, the final states by the separate kernel and element by element.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
timeout 300 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen256 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096" \
  --providers ours+graph,ours-runs+graph,ours-warpwalk+graph,ours-chunk8-warpwalk+graph,ours-initonly+graph,ours-finalonly+graph,ours-final-sep+graph,ours-elemfinal+graph,copy \
  --out linear_attention_conv1d_s28_diag > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -8 | cut -d'|' -f1-11
cp docs/benchmarks/linear_attention_conv1d_s28_diag.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call2.tgz -C /tmp/keep .
