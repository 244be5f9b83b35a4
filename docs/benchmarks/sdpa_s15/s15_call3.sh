#!/usr/bin/env bash
# session 15 call 3: pdl / kvpf GPU tests + conv1d chunk GPU tests + d64 A/B (GPU 1); d128 A/B + conv1d chunk A/B (GPU 0)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 270 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -k "pdl or kvpf" packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py > $OUT/r/t_pdl.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_pdl.log
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -k chunk packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py > $OUT/r/t_chunk.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_chunk.log
  timeout $(( 540 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d64 s1k|d64 s2k" --providers=ours,ours-pdl,ours-kvpf,ours-pdlkvpf,fa4 --rounds=3 --out=sdpa_bwd_s15_pdl_d64 > $OUT/r/b_d64.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d64.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 300 python3 benchmarks/sdpa_bwd.py --only="d128 s1k|d128 s2k|d128 s4k" --providers=ours,ours-pdl,ours-kvpf,ours-pdlkvpf,fa4 --rounds=3 --out=sdpa_bwd_s15_pdl_d128 > $OUT/r/b_d128.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d128.log
  timeout $(( 540 - ($(date +%s) - T0) )) python3 benchmarks/linear_attention.py conv1d --cases "fwd T16k D4096,fwd T8k D8192,fwd T32k D4096" --providers "ours+graph,ours-chunk8+graph,ours-chunk16+graph,ours-chunk32+graph,copy" --out linear_attention_conv1d_s15_chunk > $OUT/r/b_conv.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_conv.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s15_pdl* docs/benchmarks/linear_attention_conv1d_s15_chunk* $OUT/r/ 2>/dev/null
for f in $OUT/r/t_*.log; do echo "== $(basename $f)"; tail -n 6 $f; done
for f in $OUT/r/b_*.log; do echo "== $(basename $f)"; grep "^|\|rc=" $f | tail -n 12; done
cd $OUT && tar czf r.tgz r && rm -rf r
