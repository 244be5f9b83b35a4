#!/usr/bin/env bash
# Session 26, call 4 (~4 min): issue #7, causal_conv1d's contiguous-states path (Conv1dFwdKey.states_contiguous, the new
# default for contiguous [N, D, W - 1] states: each thread's initial- and final-state slice moves with vector accesses
# instead of one 2-byte access per element; the 512-sequence states batch ran at 1.7 TB/s in call 2). (1) Kernel-only
# A/B, 3 interleaved rounds: the states batches (16 x 1024, 512 x 32) and 256 varlen sequences with states, default vs
# contig_history = False (vector accesses for the final states only) vs states_contiguous = False. (2) The conv1d GPU files, including the new bitwise test. (3) That test against a planted
# violation (the vector path's final states taking the initial state's entries unshifted).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd states varlen256 T16k D4096" \
  --providers ours,ours+graph,ours-vecfinal+graph,ours-elemstates+graph,copy --out linear_attention_conv1d_s26_vecstates > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -5 | cut -d'|' -f1-7
cp docs/benchmarks/linear_attention_conv1d_s26_vecstates.* /tmp/keep/
T=packages/cudnn-linear-attention/tests
timeout 130 python3 ci/gpu_shard_tests.py 14 120 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "rF[0, i * WS + j] = rI[0, i * WS + ss + j]"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "rF[0, i * WS + j] = rI[0, i * WS + j]"))
print("planted: the vector path's final states take the initial state's entries unshifted")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 90 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_contiguous_states_are_bitwise_the_elementwise_path[varlen-bfloat16-bfloat16-4-None]" ) > /tmp/keep/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "AssertionError\|passed\|failed" /tmp/keep/planted.log
tar czf /tmp/keep/shards.tgz -C /tmp shards; tar czf $OUT/call4.tgz -C /tmp/keep .
