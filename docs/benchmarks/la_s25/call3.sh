#!/usr/bin/env bash
# Session 25, call 3 (~9.5 min): issue #7, causal_conv1d's window shift (Conv1dFwdKey.shift_always, the default now: a
# group on the per-token path shifts the register window for every token, only the sequence walk and the store guarded;
# 27 fewer SASS moves per token). (1) The conv1d GPU files with the new default, including the bitwise A/B against the
# guarded shift. (2) That A/B test seen failing against a planted violation (a copy of the tree whose shift_always path
# checks history against bos + 1). (3) The forward's 64M-element rows and the varlen rows, kernel-only A/B (3 interleaved
# rounds): the default against shift_always = False on runs, chunk 8 and the warp walk, eager, fla and the copy ceiling.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 300 python3 ci/gpu_shard_tests.py 12 290 $OUT/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 14 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
# (2) planted: the shift_always path checks each token's history against bos + 1
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "        if const_expr(shift_always):\n            token_output(win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos, n,"
assert s.count(old) == 1
s = s.replace(old, "        if const_expr(shift_always):\n            token_output(win, xb[None, u, half], yg[None, u], acc, rW, rB, t, bos + 1, n,")
open(p, "w").write(s)
print("planted: shift_always path with bos + 1")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 120 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_shift_always_is_bitwise_the_guarded_shift[varlen-None-False-bfloat16-4-True-silu-None-True]" ) > $OUT/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "assert\|Error\|passed\|failed" $OUT/planted.log
# (3) the A/B
left=$(( 565 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd T16k D4096,fwd T8k D8192,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096" \
  --providers ours,ours+graph,ours-noshift+graph,ours-chunk8+graph,ours-chunk8-noshift+graph,ours-warpwalk+graph,ours-warpwalk-noshift+graph,fla,copy \
  --out linear_attention_conv1d_s25_shift > $OUT/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench.log | head -12
cp docs/benchmarks/linear_attention_conv1d_s25_shift.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
