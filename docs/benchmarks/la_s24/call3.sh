#!/usr/bin/env bash
# Session 24, call 3 (~9 min): issue #7, the rest of the forward's GPU suite with the per-call default (call 1 ran
# test_parallel_state_out.py, the schedule-op file, the detectors and the graph engines): the chunk-parallel kernel
# files, the host path, the torch ops and autograd (the public op's forward per call), the serial kernels; 14 shards.
# Then KDA's varlen row, the default adapter against the three kernels (call 1's three-kernel cell was cut by its
# timeout behind fla's autotuning).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-linear-attention/tests
timeout 470 python3 ci/gpu_shard_tests.py 14 450 $OUT/shards $T/test_kda_parallel_gpu.py $T/test_gdn_parallel_gpu.py $T/test_state_pass_gpu.py \
  $T/test_out_kernel_gpu.py $T/test_gdn_prep_tc_gpu.py $T/test_kda_prep_opts_gpu.py $T/test_kda_prep_speed_gpu.py $T/test_kda_prep_staged_gpu.py \
  $T/test_delta_rule_host_path.py $T/test_delta_rule_torch_op.py $T/test_gdn_autograd_gpu.py $T/test_kda_autograd_gpu.py $T/test_kda_gpu.py \
  $T/test_gdn_gpu.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 16 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -30
left=$(( 570 - ($(date +%s) - T0) ))
if [ $left -gt 40 ]; then
  timeout $left python3 benchmarks/linear_attention.py kda --cases "kda fwd varlen64 T32k H32" --providers ours-parallel,ours-par-three \
    --out linear_attention_kda_s24_varlen_three > $OUT/kda_varlen_three.log 2>&1
  echo "kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "ms$" $OUT/kda_varlen_three.log | tail -n 3
  cp docs/benchmarks/linear_attention_kda_s24_varlen_three.* $OUT/ 2>/dev/null
fi
cd $OUT && tar czf shards.tgz shards && rm -rf shards
