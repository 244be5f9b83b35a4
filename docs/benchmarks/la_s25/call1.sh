#!/usr/bin/env bash
# Session 25, call 1 (~9.5 min): issue #7, the per-call schedule as the default (chunk_parallel.PER_CALL_DEFAULT):
# the linear-attention forward GPU suite that the default touches -- the chunk-parallel forward files with the per-call
# test, the public-op schedule file, the Rule-4 detectors, the graph engines, the kernel files, the host path, the
# torch ops and autograd, the serial kernels -- in 16 shards.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 560 python3 ci/gpu_shard_tests.py 16 540 $OUT/shards $T/test_parallel_state_out.py $T/test_delta_rule_schedule_op.py \
  $T/test_kda_detectors.py $T/test_gdn_detectors.py $T/test_graph_engines.py $T/test_kda_parallel_gpu.py $T/test_gdn_parallel_gpu.py \
  $T/test_state_pass_gpu.py $T/test_out_kernel_gpu.py $T/test_gdn_prep_tc_gpu.py $T/test_kda_prep_opts_gpu.py $T/test_kda_prep_speed_gpu.py \
  $T/test_kda_prep_staged_gpu.py $T/test_delta_rule_host_path.py $T/test_delta_rule_torch_op.py $T/test_gdn_autograd_gpu.py \
  $T/test_kda_autograd_gpu.py $T/test_kda_gpu.py $T/test_gdn_gpu.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 20 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -30
cd $OUT && tar czf shards.tgz shards && rm -rf shards
