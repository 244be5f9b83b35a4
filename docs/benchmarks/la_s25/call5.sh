#!/usr/bin/env bash
# NOTE: ran on the tree with docs/benchmarks/la_s25/masked_taps_trial.patch applied (plan option masked_taps, its
# providers ours-*-nomask+graph and its GPU test); the option lost the A/B and was removed after this call.
# Session 25, call 5 (~6 min): issue #7, causal_conv1d's history taps kept by selects (Conv1dFwdKey.masked_taps, the
# default now where shift_always holds and there are no initial states: a group's walks first, then its tokens as
# straight-line code), after call 4's ncu of the 1-token batch ("wait" stalls 2.27 cycles per instruction against the
# dense row's 1.15). (1) The conv1d GPU files with the new default, including both bitwise A/B tests. (2) The masked-taps
# A/B test seen failing against a planted violation (the select keeps a tap one token late). (3) The 64M-element and
# varlen rows, kernel-only A/B (3 interleaved rounds): the default against masked_taps = False (runs, chunk 8, warp walk)
# and shift_always = False, eager, fla and the copy ceiling. (4) ncu of the 1-token batch again, if time is left.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 300 python3 ci/gpu_shard_tests.py 12 290 $OUT/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 14 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -20
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "        keep = t - (W - 1) + k - bos >= 0\n"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "        keep = t - (W - 1) + k - bos >= 1\n"))
print("planted: masked taps keep a tap one token late")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 120 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_masked_taps_is_bitwise_the_tap_branches[varlen-None-False-bfloat16-4-True-silu-None-True]" ) > $OUT/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "AssertionError\|Error\|passed\|failed" $OUT/planted.log
left=$(( 480 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd T16k D4096,fwd T8k D8192,fwd varlen64 T32k D4096,fwd varlen1tok T16k D4096,fwd states B16 T16k D4096" \
  --providers ours,ours+graph,ours-nomask+graph,ours-noshift+graph,ours-chunk8+graph,ours-chunk8-nomask+graph,ours-warpwalk+graph,ours-warpwalk-nomask+graph,fla,copy \
  --out linear_attention_conv1d_s25_masked > $OUT/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench.log | head -12 | cut -d'|' -f1-12
cp docs/benchmarks/linear_attention_conv1d_s25_masked.* $OUT/ 2>/dev/null
if [ $(( 560 - ($(date +%s) - T0) )) -gt 40 ]; then
  timeout $(( 560 - ($(date +%s) - T0) )) ncu --clock-control none -k regex:kernel_runs --metrics smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__inst_executed.sum,gpu__time_duration.sum \
    --csv --page details python3 docs/benchmarks/la_s25/conv_probe.py --cases "fwd T16k D4096,fwd varlen1tok T16k D4096" > $OUT/ncu.csv 2> $OUT/ncu.err
  echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; grep -E 'stalled|inst_executed|duration' $OUT/ncu.csv | cut -d, -f1,13- | head -20
fi
cd $OUT && tar czf shards.tgz shards && rm -rf shards
