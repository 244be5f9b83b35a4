#!/usr/bin/env bash
# session 15 call 4: conv1d GPU tests + ncu of the short bwd rows (GPU 1); conv1d chunk A/B incl. varlen / states, then the official conv1d table (GPU 0)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -n 8 packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py packages/cudnn-linear-attention/tests/test_conv1d_gpu.py packages/cudnn-linear-attention/tests/test_conv1d_detectors.py > $OUT/r/t_conv.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_conv.log
  timeout $(( 540 - ($(date +%s) - T0) )) /usr/local/cuda/bin/ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --csv --page details python3 .gpu-host/ncu_bwd.py "d128 s1k b16" "d64 s1k b16 causal" > $OUT/r/ncu_bwd.csv 2> $OUT/r/ncu_bwd.err; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/ncu_bwd.err
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 300 python3 benchmarks/linear_attention.py conv1d --cases "fwd T16k D4096,fwd T32k D4096,fwd T8k D8192,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096" --providers "ours+graph,ours-runs+graph,ours-chunk8+graph,ours-chunk16+graph,copy" --out linear_attention_conv1d_s15_chunk_varlen > $OUT/r/b_chunk.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_chunk.log
  timeout $(( 540 - ($(date +%s) - T0) )) python3 benchmarks/linear_attention.py conv1d --providers "ours,ours+graph,fla,torch,copy" > $OUT/r/b_conv_table.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_conv_table.log
) &
wait
cp docs/benchmarks/linear_attention_conv1d_s15_chunk_varlen* docs/benchmarks/linear_attention.csv docs/benchmarks/linear_attention.md docs/benchmarks/linear_attention.png $OUT/r/ 2>/dev/null
for f in $OUT/r/t_*.log; do echo "== $(basename $f)"; tail -n 5 $f; done
tail -n 3 $OUT/r/ncu_bwd.err; wc -l $OUT/r/ncu_bwd.csv
for f in $OUT/r/b_*.log; do echo "== $(basename $f)"; grep "^|\|rc=" $f | tail -n 14; done
cd $OUT && tar czf r.tgz r && rm -rf r
