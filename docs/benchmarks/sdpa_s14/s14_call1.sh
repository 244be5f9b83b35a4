#!/usr/bin/env bash
# session 14 call 1: forward full grid (GPU 0, 3 rounds) + host overhead; forward GPU suite + detectors (GPU 1)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/smi0.txt
( export CUDA_VISIBLE_DEVICES=1
  timeout 540 python3 -m pytest -q -p no:cacheprovider packages/cudnn-sdpa/tests/test_sdpa_fwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py packages/cudnn-sdpa/tests/test_sdpa_fwd_detectors.py packages/cudnn-sdpa/tests/test_sdpa_fwd_engine.py packages/cudnn-sdpa/tests/test_sdpa_fwd_overhead.py packages/cudnn-sdpa/tests/test_sdpa_fwd_launch.py > $OUT/r/t_fwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_fwd.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 420 python3 benchmarks/sdpa_fwd.py --providers=ours,fa4,torch-cudnn --rounds=3 --out=sdpa_fwd_s14 > $OUT/r/b_fwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_fwd.log
  timeout $(( 560 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --overhead > $OUT/r/b_ovh.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_ovh.log
) &
wait
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/r/smi1.txt
cp docs/benchmarks/sdpa_fwd_s14* docs/benchmarks/sdpa_fwd_overhead.md $OUT/r/ 2>/dev/null
for f in $OUT/r/*.log; do echo "== $(basename $f)"; tail -5 $f; done
cd $OUT && tar czf r.tgz r && rm -rf r
