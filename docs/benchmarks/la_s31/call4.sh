#!/usr/bin/env bash
# Session 31, call 4 (~2.5 min; the last of the session's device time): issue #7, the GDN harness rows (kernel-only, CUDA
# graphs) with fla in the same run, then two of the GPU tests call 3's time limit cut (the fused defaults, H = 64 and
# per call).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 95 python3 benchmarks/linear_attention.py gdn --cases "gdn fwd T4k H16,gdn fwd T8k H16,gdn fwd T32k H16" \
  --providers ours-parallel+graph,ours-par-three+graph,fla+graph --out linear_attention_gdn_s31 > /tmp/keep/bench_gdn.log 2>&1
echo "bench gdn rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_gdn.log | head -6
cp docs/benchmarks/linear_attention_gdn_s31.* /tmp/keep/ 2>/dev/null
timeout 50 python3 -m pytest -p no:cacheprovider -v \
  "$T/test_parallel_state_out.py::test_per_call_plan_launches_by_sequence_count_with_no_compile" "$T/test_parallel_state_out.py::test_default_plan_at_h64_is_the_fused_schedule" \
  > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -cE " PASSED" /tmp/keep/tests.log; grep -E " FAILED| ERROR|^E  " /tmp/keep/tests.log | head -10 | cut -c1-300
tar czf $OUT/call4.tgz -C /tmp/keep .
