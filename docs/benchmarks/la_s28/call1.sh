#!/usr/bin/env bash
# Session 28, call 1 (~6 min): issue #7, causal_conv1d window_reset (opt-in). (1) The new GPU test (bitwise against the
# default plan, reference) and the per-call / seeded tests beside it. (2) Kernel-only A/B, 3 interleaved rounds, on the
# varlen rows under 3.5 TB/s: the default, contiguous runs, chunk 8, window_reset on the default and on contiguous runs.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 -m pytest -q -p no:cacheprovider $T/test_conv1d_fast_gpu.py -k "window_reset or per_call" > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests.log; grep "^FAILED\|^E  " /tmp/keep/tests.log | head -10
timeout 240 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen256 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096,fwd varlen64 T32k D4096" \
  --providers ours+graph,ours-runs+graph,ours-chunk8+graph,ours-reset+graph,ours-reset-runs+graph,copy --out linear_attention_conv1d_s28_reset > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -8 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s28_reset.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call1.tgz -C /tmp/keep .
