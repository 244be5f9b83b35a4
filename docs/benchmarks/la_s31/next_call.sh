#!/usr/bin/env bash
# For session 32's first call (~8 min): issue #7, the GPU tests the session-31 defaults (``parallel_overlap`` = ovl-stsm,
# ``FUSED_VARIANT`` = fso-w2-stsm) reach that session 31's device time did not cover -- the fused defaults (H = 64, per
# call), the torch ops (eager, torch.compile, CUDA graphs), the schedule ops and the graph engines -- then the GDN T 32k
# harness row of the default plan with fla in the same run (call 4 stopped before it).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 360 python3 -m pytest -p no:cacheprovider -v \
  "$T/test_parallel_state_out.py::test_per_call_plan_launches_by_sequence_count_with_no_compile" "$T/test_parallel_state_out.py::test_default_plan_at_h64_is_the_fused_schedule" \
  $T/test_delta_rule_torch_op.py $T/test_delta_rule_schedule_op.py $T/test_graph_engines.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -cE " PASSED" /tmp/keep/tests.log; grep -E " FAILED| ERROR|^E  " /tmp/keep/tests.log | head -10 | cut -c1-300
timeout 100 python3 benchmarks/linear_attention.py gdn --cases "gdn fwd T32k H16" \
  --providers ours-parallel+graph,ours-par-three+graph,fla+graph --out linear_attention_gdn_s32 > /tmp/keep/bench_gdn.log 2>&1
echo "bench gdn rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_gdn.log | head -4
cp docs/benchmarks/linear_attention_gdn_s32.* /tmp/keep/ 2>/dev/null
tar czf $OUT/next_call.tgz -C /tmp/keep .
