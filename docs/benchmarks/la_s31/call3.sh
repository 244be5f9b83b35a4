#!/usr/bin/env bash
# Session 31, call 3 (~8 min): issue #7, the overlapped output as the default (``parallel_overlap``: ovl-stsm wherever the
# plan runs the three kernels; ``FUSED_VARIANT`` = fso-w2-stsm). (1) The GPU tests the default plans reach (overlap
# bitwise three, detectors, parallel GPU suites, the torch ops, graph engines, the fused defaults); (2) the KDA harness
# rows (kernel-only, CUDA graphs) with fla in the same run.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 320 python3 -m pytest -p no:cacheprovider -q $T/test_parallel_overlap_out.py $T/test_kda_detectors.py $T/test_gdn_detectors.py \
  $T/test_kda_parallel_gpu.py $T/test_gdn_parallel_gpu.py $T/test_delta_rule_torch_op.py $T/test_delta_rule_schedule_op.py $T/test_graph_engines.py \
  "$T/test_parallel_state_out.py::test_per_call_plan_launches_by_sequence_count_with_no_compile" "$T/test_parallel_state_out.py::test_default_plan_at_h64_is_the_fused_schedule" \
  --durations=15 > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed" /tmp/keep/tests.log | tail -n 1; grep "^FAILED\|^ERROR\|^E  " /tmp/keep/tests.log | head -10 | cut -c1-300
timeout 175 python3 benchmarks/linear_attention.py kda --cases "kda fwd T4k H16,kda fwd T8k H16,kda fwd T32k H16" \
  --providers ours-parallel+graph,ours-par-three+graph,fla+graph --out linear_attention_kda_s31 > /tmp/keep/bench_kda.log 2>&1
echo "bench kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_kda.log | head -6
cp docs/benchmarks/linear_attention_kda_s31.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call3.tgz -C /tmp/keep .
