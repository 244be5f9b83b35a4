#!/usr/bin/env bash
# Session 26, call 2 (~4 min): issue #7, where causal_conv1d's fused final states are written (Conv1dFwdKey.final_at:
# "pair" = after each group pair, the default until now; "start" / "end" = before / after each CTA row's tokens, the
# token loop without final-states code; the adapter's default on dense plans is now "start"). (1) The conv1d GPU files
# with it, including test_fused_final_states_are_bitwise_the_separate_kernel's "start" / "end" cases. (2) That test
# against a planted violation (CTA rows stepping n_runs + 1 sequences: some final rows never written). (3) Kernel-only
# A/B, 3 interleaved rounds: the dense states batches (16 x 1024, 512 x 32) and the batch without states.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv > $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 120 python3 ci/gpu_shard_tests.py 14 110 /tmp/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > /tmp/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a /tmp/tests.log; tail -n 2 /tmp/tests.log; grep -h "^FAILED\|^ERROR" /tmp/shards/*.log | head -10
grep -h "passed\|failed" /tmp/shards/*.log | tail -n 14 > /tmp/tests_summary.txt
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "for m in cutlass.range(bidy, n_seqs, n_runs, unroll=1):"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "for m in cutlass.range(bidy, n_seqs, n_runs + 1, unroll=1):"))
print("planted: CTA rows step n_runs + 1 sequences")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 90 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_fused_final_states_are_bitwise_the_separate_kernel[dense-bfloat16-bfloat16-4-True-None-None-None]" ) > /tmp/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "AssertionError\|passed\|failed" /tmp/planted.log
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd states B16 T16k D4096,fwd states B512 T16k D4096,fwd batch B16 T16k D4096" \
  --providers ours,ours+graph,ours-final-pair+graph,ours-final-start+graph,ours-final-end+graph,ours-final-sep+graph,copy --out linear_attention_conv1d_s26_final_at > /tmp/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/bench.log | head -5 | cut -d'|' -f1-9
mkdir -p /tmp/keep && cp /tmp/tests.log /tmp/tests_summary.txt /tmp/planted.log /tmp/bench.log /tmp/keep/ && cp docs/benchmarks/linear_attention_conv1d_s26_final_at.* /tmp/keep/
tar czf /tmp/keep/shards.tgz -C /tmp shards; tar czf $OUT/call2.tgz -C /tmp/keep .
