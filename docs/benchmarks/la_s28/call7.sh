#!/usr/bin/env bash
# Session 28, call 7 (~4 min): issue #7, causal_conv1d with the final session-28 defaults (varlen plans fuse their final
# states as the run grid's tail; dense plans inside the token loop, as before): every forward row, eager and kernel-only,
# fla's Triton kernel and the copy ceiling in the same run, 3 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
timeout 330 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd T4k D4096,fwd T16k D4096,fwd T32k D4096,fwd T8k D8192,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096,fwd batch B16 T16k D4096,fwd batch B512 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096" \
  --providers ours,ours+graph,fla,copy --out linear_attention_conv1d_s28_final > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -22 | cut -d'|' -f1-6
cp docs/benchmarks/linear_attention_conv1d_s28_final.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call7.tgz -C /tmp/keep .
