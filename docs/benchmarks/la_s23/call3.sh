#!/usr/bin/env bash
# Session 23, call 3 (~9.5 min): issue #7 with the fused rule counting the declared sequences (N * H * V / 32 >= SMs;
# the public ops key their plan cache on the decision). (1) The chunk-parallel forward GPU tests (fused and unfused
# plans, the public op's plan per side of the rule, detectors, graph engines). (2) GDN's varlen row, fused against the
# three kernels. (3) KDA's full forward grid (T 4k / 8k / 32k x H 16 / 32 / 64 + the varlen mix), ours against fla,
# both CUDA-graphed.
# Ran with a trial rule (fused_schedule_wins counting the declared sequences, the public ops' plan cache keyed on it),
# reverted after call 4: the Rule-4 cache-hit detectors failed on it (call4/tests4.log). Logs: call3/.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-linear-attention/tests
timeout 230 python3 -m pytest -q -p no:cacheprovider $T/test_parallel_state_out.py $T/test_kda_parallel_gpu.py $T/test_gdn_parallel_gpu.py \
  $T/test_delta_rule_schedule_op.py $T/test_kda_detectors.py $T/test_gdn_detectors.py $T/test_graph_engines.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 6 $OUT/tests.log
timeout 120 python3 benchmarks/linear_attention.py gdn --cases "gdn fwd varlen64 T32k H32" --providers ours+graph,ours-par-fso-w2,ours-par-three,fla+graph \
  --out linear_attention_gdn_s23_varlen > $OUT/gdn_varlen.log 2>&1
echo "gdn rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/gdn_varlen.log | head -4; grep "ms$" $OUT/gdn_varlen.log | tail -n 5
cp docs/benchmarks/linear_attention_gdn_s23_varlen.* $OUT/ 2>/dev/null
timeout $(( 565 - ($(date +%s) - T0) )) python3 benchmarks/linear_attention.py kda --providers ours+graph,fla+graph --out linear_attention_kda_s23 > $OUT/kda_grid.log 2>&1
echo "kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/kda_grid.log | head -13; grep "ms$" $OUT/kda_grid.log | tail -n 3
cp docs/benchmarks/linear_attention_kda_s23.* $OUT/ 2>/dev/null
