#!/usr/bin/env bash
# session 15 call 2: conv1d DRAM-pattern probe + conv1d reference (GPU 0); the forward SDPA GPU test files, sharded (GPU 1)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=0
  timeout 200 python3 .gpu-host/conv_pattern.py > $OUT/r/conv_pattern.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/conv_pattern.log
  timeout $(( 500 - ($(date +%s) - T0) )) python3 benchmarks/linear_attention.py conv1d --cases "fwd T16k D4096,fwd T32k D4096" --providers "ours+graph,ours-steady+graph,copy" --out linear_attention_conv1d_s15 > $OUT/r/b_conv.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_conv.log
) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 460 python3 .gpu-host/shard_tests.py 12 440 $OUT/r/fwd packages/cudnn-sdpa/tests/test_sdpa_fwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py packages/cudnn-sdpa/tests/test_sdpa_fwd_detectors.py packages/cudnn-sdpa/tests/test_sdpa_fwd_engine.py packages/cudnn-sdpa/tests/test_sdpa_fwd_launch.py > $OUT/r/t_fwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_fwd.log
  timeout $(( 560 - ($(date +%s) - T0) )) python3 -m pytest -q -p no:cacheprovider -rf --tb=short packages/cudnn-sdpa/tests/test_sdpa_fwd_overhead.py > $OUT/r/t_fwd_overhead.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_fwd_overhead.log
) &
wait
cp docs/benchmarks/linear_attention_conv1d_s15* $OUT/r/ 2>/dev/null
cat $OUT/r/conv_pattern.log; cat $OUT/r/t_fwd.log; tail -n 3 $OUT/r/t_fwd_overhead.log; tail -n 8 $OUT/r/b_conv.log
cd $OUT && tar czf r.tgz r && rm -rf r
