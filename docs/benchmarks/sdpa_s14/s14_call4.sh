#!/usr/bin/env bash
# session 14 call 4: candidates CAUSAL_TUNING + pack1 + dsk (d128 causal) and D192_TUNING + ds2, tested on a patched
# copy of the tree (GPU 1); A/B against the current defaults and FA4, 3 rounds (GPU 0, the unpatched tree)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r /tmp/cand
cp -r packages shared ci benchmarks conftest.py pyproject.toml /tmp/cand/ 2>/dev/null
A=/tmp/cand/packages/cudnn-sdpa/src/cudnn/sdpa/bwd/api.py
sed -i 's/^CAUSAL_TUNING: tuple\[str, ...\] = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost")/CAUSAL_TUNING: tuple[str, ...] = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "pack1", "dsk")/' $A
sed -i 's/^D192_TUNING: tuple\[str, ...\] | None = ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96")/D192_TUNING: tuple[str, ...] | None = ("dq_bulk", "dq_writer", "stats_tma", "prepost", "n96", "ds2")/' $A
grep -n "^CAUSAL_TUNING\|^D192_TUNING" $A > $OUT/r/patched.txt
( export CUDA_VISIBLE_DEVICES=1; cd /tmp/cand; source ci/gpu_env.sh
  timeout 330 python3 -m pytest -q -p no:cacheprovider -rf --tb=line packages/cudnn-sdpa/tests/test_sdpa_bwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_bwd_detectors.py > $OUT/r/t_bwd_cand.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_bwd_cand.log
  timeout $(( 440 - ($(date +%s) - T0) )) python3 -m pytest -q -p no:cacheprovider -rf --tb=line -k "default or autograd" packages/cudnn-sdpa/tests/test_sdpa_bwd_d192_gpu.py > $OUT/r/t_d192_cand.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_d192_cand.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 220 python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d128 s8k b2 causal|d128 s16k b1 causal" --providers=ours,ours-pack,ours-pd,fa4 --rounds=3 --out=sdpa_bwd_s14_causal_pd > $OUT/r/b_pd.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_pd.log
  timeout $(( 440 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d192" --providers=ours,ours-n96s2,fa4 --rounds=3 --out=sdpa_bwd_s14_n96c > $OUT/r/b_n96c.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_n96c.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s14_* $OUT/r/ 2>/dev/null
for f in $OUT/r/*.log; do echo "== $(basename $f)"; tail -n 3 $f; done
cat $OUT/r/patched.txt
cd $OUT && tar czf r.tgz r && rm -rf r
