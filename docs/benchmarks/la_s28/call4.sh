#!/usr/bin/env bash
# Session 28, call 4 (~4 min): issue #7, causal_conv1d, no kernel change: kernel-only A/B, 3 interleaved rounds, (a) the
# varlen states batches at 16 / 64 / 256 / 1024 random lengths over T16k: fused final states (the default) against the
# separate final-states kernel, contiguous runs, the warp walk; (b) the warp walk on the varlen rows without states.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
timeout 330 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096,fwd varlen64 T32k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096" \
  --providers ours+graph,ours-final-sep+graph,ours-runs+graph,ours-warpwalk+graph,ours-chunk8-warpwalk+graph,copy --out linear_attention_conv1d_s28_varlen > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -12 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s28_varlen.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call4.tgz -C /tmp/keep .
