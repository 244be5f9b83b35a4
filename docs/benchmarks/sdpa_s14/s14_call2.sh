#!/usr/bin/env bash
# session 14 call 2: n96 GPU tests then the rest of the d192 file (GPU 1); d192 A/B ours vs n96 vs FA4 (GPU 0)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rf --tb=line -k n96 packages/cudnn-sdpa/tests/test_sdpa_bwd_d192_gpu.py > $OUT/r/t_n96.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_n96.log
  timeout $(( 420 - ($(date +%s) - T0) )) python3 -m pytest -q -p no:cacheprovider -rf --tb=line -k "not n96" packages/cudnn-sdpa/tests/test_sdpa_bwd_d192_gpu.py > $OUT/r/t_d192.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_d192.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 400 python3 benchmarks/sdpa_bwd.py --only="d192" --providers=ours,ours-n96,ours-n96s,fa4 --rounds=2 --out=sdpa_bwd_s14_n96 > $OUT/r/b_n96.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_n96.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s14_* $OUT/r/ 2>/dev/null
for f in $OUT/r/*.log; do echo "== $(basename $f)"; tail -n 6 $f; done
cd $OUT && tar czf r.tgz r && rm -rf r
