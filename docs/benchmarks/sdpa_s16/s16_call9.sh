#!/usr/bin/env bash
# session 16 call 9 (final): conv1d GPU tests (warp_walk, fused final states), the warp-walk A/B, the conv1d table
# (settled), the backward d128 / d64 grid (settled, 2 rounds)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 200 python3 .gpu-host/shard_tests.py 10 190 $OUT/r/shards packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py \
  packages/cudnn-linear-attention/tests/test_conv1d_gpu.py packages/cudnn-linear-attention/tests/test_conv1d_detectors.py > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
timeout 120 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd varlen1tok T16k D4096,fwd varlen64 T32k D4096" --providers ours+graph,ours-warpwalk+graph,ours-chunk8+graph,ours-chunk8-warpwalk+graph,copy --out linear_attention_conv1d_s16_warpwalk > $OUT/r/b_ww.log 2>&1; echo "ww rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_ww.log
grep "^|\|rc=" $OUT/r/b_ww.log | tail -n 5
timeout 150 python3 benchmarks/linear_attention.py conv1d --providers ours,ours+graph,ours-warpwalk+graph,ours-chunk8-warpwalk+graph,fla,torch,copy > $OUT/r/b_conv.log 2>&1; echo "conv rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_conv.log
grep "^|\|rc=" $OUT/r/b_conv.log | tail -n 14
timeout $(( 585 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s16_grid > $OUT/r/b_bwd.log 2>&1; echo "bwd rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd.log
grep "^|\|rc=" $OUT/r/b_bwd.log | tail -n 23
cp docs/benchmarks/linear_attention_conv1d_s16_warpwalk.* docs/benchmarks/linear_attention.* docs/benchmarks/sdpa_bwd_s16_grid.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
