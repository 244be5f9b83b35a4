#!/usr/bin/env bash
# Session 18, call 4 (~2 min): the s1k / s4k backward rows again (mlp default), 4 interleaved rounds, FA4 listed first:
# call 2 measured ours-mlp at 1.01x / 1.02x FA4 on the s1k causal rows, call 3's table 0.92x (FA4 337 -> 358 TFLOP/s).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
ROWS="d128 s1k b16|d128 s1k b16 causal|d64 s1k b16|d64 s1k b16 causal|d128 s4k b4|d128 s4k b4 causal"
timeout 200 python3 benchmarks/sdpa_bwd.py --only="$ROWS" --providers=fa4,ours,torch-cudnn --rounds=4 --out=sdpa_bwd_s18_short > $OUT/r/b_short.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_short.log
grep "^|\|rc=" $OUT/r/b_short.log | tail -n 9
cp docs/benchmarks/sdpa_bwd_s18_short.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
