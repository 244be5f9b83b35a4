#!/usr/bin/env bash
# NOTE: ran on the tree with docs/benchmarks/la_s25/start_groups_trial.patch applied (plan option start_groups, its
# providers ours-*-nostart+graph and its GPU test); the option did not win the A/B and was removed after this call.
# Session 25, call 6 (~4 min): issue #7, causal_conv1d's sequence-start groups (Conv1dFwdKey.start_groups, default on
# contiguous runs without initial states: a group's walks first; a group whose every token starts its sequence runs as
# straight-line code with only the tokens' own products). (1) The conv1d GPU files with it as the default, including the
# bitwise A/B tests. (2) The start-groups A/B test seen failing against a planted violation (the start path adds the
# history taps). (3) The 64M-element and varlen rows, kernel-only A/B (3 interleaved rounds), against start_groups = False.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 200 python3 ci/gpu_shard_tests.py 12 190 $OUT/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 3 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "token_output_steady(win, xb[None, u, half], yg[None, u], acc, rW, rB, W, VEC, act, False)"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, old.replace("act, False)", "act, True)")))
print("planted: the start path adds the history taps")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 100 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_start_groups_is_bitwise_the_per_token_path[varlen-None-False-bfloat16-4-True-silu-None-True]" ) > $OUT/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m2 "AssertionError\|passed\|failed" $OUT/planted.log
left=$(( 400 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd T16k D4096,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096" \
  --providers ours,ours+graph,ours-nostart+graph,ours-warpwalk+graph,ours-warpwalk-nostart+graph,copy \
  --out linear_attention_conv1d_s25_starts > $OUT/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench.log | head -8 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s25_starts.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
