#!/usr/bin/env bash
# session 15 call 8 (the tree CI runs): linear-attention GPU suite (GPU 1); forward SDPA grid, 2 rounds (GPU 0)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
( export CUDA_VISIBLE_DEVICES=1
  timeout 400 python3 -m pytest -q -p no:cacheprovider -rf --tb=line -n 10 packages/cudnn-linear-attention/tests > $OUT/r/t_la.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_la.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 400 python3 benchmarks/sdpa_fwd.py --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_fwd_s15 > $OUT/r/b_fwd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_fwd.log
) &
wait
cp docs/benchmarks/sdpa_fwd_s15* $OUT/r/ 2>/dev/null
tail -n 8 $OUT/r/t_la.log
grep "^|\|rc=" $OUT/r/b_fwd.log | tail -n 32
cd $OUT && tar czf r.tgz r && rm -rf r
