#!/usr/bin/env bash
# session 16 call 6: GPU tests of the 3-D grid (forward / backward suites) and the fused conv1d final states, then the
# conv1d final-states A/B
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 430 python3 .gpu-host/shard_tests.py 12 420 $OUT/r/shards \
  packages/cudnn-sdpa/tests/test_sdpa_fwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py \
  packages/cudnn-sdpa/tests/test_sdpa_fwd_detectors.py packages/cudnn-sdpa/tests/test_sdpa_fwd_engine.py \
  packages/cudnn-sdpa/tests/test_sdpa_bwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_bwd_detectors.py \
  packages/cudnn-sdpa/tests/test_sdpa_bwd_engine.py packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py \
  packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py packages/cudnn-linear-attention/tests/test_conv1d_gpu.py \
  packages/cudnn-linear-attention/tests/test_conv1d_detectors.py packages/cudnn-linear-attention/tests/test_conv1d_overhead.py \
  > $OUT/r/tests.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log
grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -30
timeout $(( 570 - ($(date +%s) - T0) )) python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd states B16 T16k D4096" --providers ours+graph,ours-final-fused+graph,ours-final-sep+graph,ours-runs+graph,copy --out linear_attention_conv1d_s16_final > $OUT/r/b_conv.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_conv.log
cp docs/benchmarks/linear_attention_conv1d_s16_final.* $OUT/r/ 2>/dev/null
grep "^|\|rc=" $OUT/r/b_conv.log | tail -n 8
cd $OUT && tar czf r.tgz r && rm -rf r
