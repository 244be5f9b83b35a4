#!/usr/bin/env bash
# Session 25, call 7 (~3 min): issue #7, causal_conv1d's density guess for a varlen run's first sequence
# (Conv1dFwdKey.locate_guess, the default on varlen contiguous runs: two independent loads instead of a ~14-load binary
# search at every CTA's start). (1) The conv1d GPU files with it as the default, including its bitwise A/B test. (2) That
# test seen failing against a planted violation (the guess taken without checking cu[g + 1]). (3) The varlen rows,
# kernel-only A/B (3 interleaved rounds), against locate_guess = False and the warp walk.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 110 python3 ci/gpu_shard_tests.py 14 105 $OUT/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 3 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -10
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/_device/sequences.py"
s = open(p).read()
old = "        if b <= t0:\n            lo = g + 1\n        else:\n            hi = g"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "        hi = g"))
print("planted: the guess taken without checking cu[g + 1]")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 60 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_locate_guess_is_bitwise_the_binary_search[bfloat16-4-True-silu-None-True]" ) > $OUT/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m2 "AssertionError\|passed\|failed" $OUT/planted.log
timeout 60 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096" \
  --providers ours+graph,ours-noguess+graph,ours-warpwalk+graph,copy --out linear_attention_conv1d_s25_guess > $OUT/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench.log | head -5 | cut -d'|' -f1-6
cp docs/benchmarks/linear_attention_conv1d_s25_guess.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
