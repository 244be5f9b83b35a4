#!/usr/bin/env bash
# session 15 call 7 (final defaults): backward variants file (GPU 1) then the d256 / d192 grid half; d128 / d64 grid half
# (GPU 0) then the conv1d states probe
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 260 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -n 8 packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py packages/cudnn-sdpa/tests/test_sdpa_bwd_overhead.py > $OUT/r/t_bwd_var.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_bwd_var.log
  timeout $(( 540 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s15_grid_b > $OUT/r/b_grid_b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_grid_b.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 300 python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s15_grid_a > $OUT/r/b_grid_a.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_grid_a.log
  timeout $(( 540 - ($(date +%s) - T0) )) python3 .gpu-host/conv_states_probe.py > $OUT/r/conv_states.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/conv_states.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s15_grid* $OUT/r/ 2>/dev/null
for f in $OUT/r/t_*.log; do echo "== $(basename $f)"; tail -n 6 $f; done
cat $OUT/r/conv_states.log | grep -v Warn
for f in $OUT/r/b_*.log; do echo "== $(basename $f)"; grep "^|\|rc=" $f | tail -n 22; done
cd $OUT && tar czf r.tgz r && rm -rf r
