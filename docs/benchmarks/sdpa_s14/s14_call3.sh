#!/usr/bin/env bash
# session 14 call 3: the backward grid in one call (GPU 0: d128 + d64 rows; GPU 1: d256 + d192 rows, then the n96
# follow-up A/B, then the d192 tests); GPU 0 then runs the bwd GPU suite + detectors + engine + overhead
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/r/smi0.txt
( export CUDA_VISIBLE_DEVICES=1
  timeout 200 python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s14_grid_b > $OUT/r/b_grid_b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_grid_b.log
  timeout 150 python3 benchmarks/sdpa_bwd.py --only="d192" --providers=ours,ours-n96s2,ours-n96sp,ours-n96s2p,fa4 --rounds=2 --out=sdpa_bwd_s14_n96b > $OUT/r/b_n96b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_n96b.log
  timeout $(( 575 - ($(date +%s) - T0) )) python3 -m pytest -q -p no:cacheprovider -rf --tb=line packages/cudnn-sdpa/tests/test_sdpa_bwd_d192_gpu.py > $OUT/r/t_d192.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_d192.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 330 python3 benchmarks/sdpa_bwd.py --only="d128|d64" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s14_grid_a > $OUT/r/b_grid_a.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_grid_a.log
  timeout $(( 575 - ($(date +%s) - T0) )) python3 -m pytest -q -p no:cacheprovider -rf --tb=line packages/cudnn-sdpa/tests/test_sdpa_bwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_bwd_detectors.py packages/cudnn-sdpa/tests/test_sdpa_bwd_engine.py packages/cudnn-sdpa/tests/test_sdpa_bwd_overhead.py > $OUT/r/t_bwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_bwd.log
) &
wait
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/r/smi1.txt
cp docs/benchmarks/sdpa_bwd_s14_* $OUT/r/ 2>/dev/null
for f in $OUT/r/*.log; do echo "== $(basename $f)"; tail -n 4 $f; done
cd $OUT && tar czf r.tgz r && rm -rf r
