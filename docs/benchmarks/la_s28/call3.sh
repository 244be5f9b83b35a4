#!/usr/bin/env bash
# Session 28, call 3 (~5 min): issue #7, causal_conv1d final_window (opt-in: a sequence's final state from the register
# window at its last token). (1) The fused final-states GPU test (sep / fused / window with vector and element stores).
# (2) Kernel-only A/B, 3 interleaved rounds, on the states rows.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 -m pytest -q -p no:cacheprovider $T/test_conv1d_fast_gpu.py -k "fused_final_states" > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests.log; grep "^FAILED\|^E  " /tmp/keep/tests.log | head -10
timeout 300 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd states B256 T16k D4096,fwd states B128 T16k D4096,fwd states varlen256 T16k D4096" \
  --providers ours+graph,ours-finalwin+graph,ours-finalwin-runs+graph,ours-final-sep+graph,ours-runs+graph,copy --out linear_attention_conv1d_s28_finalwin > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -8 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s28_finalwin.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call3.tgz -C /tmp/keep .
