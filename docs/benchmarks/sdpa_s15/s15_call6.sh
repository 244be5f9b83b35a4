#!/usr/bin/env bash
# session 15 call 6: candidate FULL_GROUP_HEADS = 1 tested on a patched copy (GPU 1), then d256 / d192 A/B;
# d128 / d64 A/B of ours vs ours-g1 vs FA4, 3 rounds (GPU 0, the unpatched tree)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r /tmp/cand
cp -r packages shared ci benchmarks conftest.py pyproject.toml /tmp/cand/ 2>/dev/null
A=/tmp/cand/packages/cudnn-sdpa/src/cudnn/sdpa/bwd/api.py
sed -i 's/^FULL_GROUP_HEADS: int | None = None/FULL_GROUP_HEADS: int | None = 1/' $A
grep -n "^FULL_GROUP_HEADS" $A > $OUT/r/patched.txt
( export CUDA_VISIBLE_DEVICES=1; cd /tmp/cand; source ci/gpu_env.sh
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -n 6 packages/cudnn-sdpa/tests/test_sdpa_bwd_gpu.py packages/cudnn-sdpa/tests/test_sdpa_bwd_detectors.py packages/cudnn-sdpa/tests/test_sdpa_bwd_engine.py > $OUT/r/t_bwd_cand.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_bwd_cand.log
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rf --tb=short -n 6 -k "default or autograd" packages/cudnn-sdpa/tests/test_sdpa_bwd_d192_gpu.py > $OUT/r/t_d192_cand.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/t_d192_cand.log
) &
( export CUDA_VISIBLE_DEVICES=0
  timeout 330 python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,ours-g1,fa4 --rounds=3 --out=sdpa_bwd_s15_g1_a > $OUT/r/b_a.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_a.log
  timeout $(( 545 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,ours-g1,fa4 --rounds=3 --out=sdpa_bwd_s15_g1_b > $OUT/r/b_b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_b.log
) &
wait
cp docs/benchmarks/sdpa_bwd_s15_g1* $OUT/r/ 2>/dev/null
for f in $OUT/r/t_*.log; do echo "== $(basename $f)"; tail -n 4 $f; done
for f in $OUT/r/b_*.log; do echo "== $(basename $f)"; grep "^|\|rc=" $f | tail -n 22; done
cat $OUT/r/patched.txt
cd $OUT && tar czf r.tgz r && rm -rf r
