#!/usr/bin/env bash
# Session 27, call 2 (~7 min): issue #7, causal_conv1d with the session's new defaults: seeded starts (a dense chunk that
# starts a sequence takes its initial state as the halo, by 16-byte loads of contiguous initial states) and the varlen
# per-call choice (chunks for calls whose sequences average >= 16 tokens, contiguous runs below). (1) Kernel-only A/B,
# 3 interleaved rounds: the states and varlen rows, default vs without seeded starts / with element loads / contiguous
# runs / chunk 8 (state bytes counted in the states rows since this session). (2) The conv1d GPU files. (3) The
# seeded-starts bitwise test against a planted violation (the vector halo read in the x halo's order).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
nvidia-smi --query-gpu=index,name,power.limit --format=csv > /tmp/keep/gpus.txt
timeout 250 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd batch B512 T16k D4096,fwd states varlen256 T16k D4096,fwd varlen256 T16k D4096,fwd varlen1024 T16k D4096,fwd varlen4096 T16k D4096,fwd varlen1tok T16k D4096,fwd varlen64 T32k D4096" \
  --providers ours,ours+graph,ours-noseed+graph,ours-seed-elem+graph,ours-runs+graph,ours-chunk8+graph,copy --out linear_attention_conv1d_s27 > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -11 | cut -d'|' -f1-9
cp docs/benchmarks/linear_attention_conv1d_s27.* /tmp/keep/ 2>/dev/null
T=packages/cudnn-linear-attention/tests
timeout 140 python3 ci/gpu_shard_tests.py 14 130 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log > /tmp/keep/tests_summary.txt
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "f = i * (W - 1) + k"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "f = k * VEC + i"))
print("planted: the vector-seeded halo read in the x halo's order")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 70 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_seeded_starts_are_bitwise_the_default[bfloat16-4-8-True]" ) > /tmp/keep/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "AssertionError\|passed\|failed" /tmp/keep/planted.log
tar czf /tmp/keep/shards.tgz -C /tmp shards; tar czf $OUT/call2.tgz -C /tmp/keep .
