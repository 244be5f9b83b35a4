#!/usr/bin/env bash
# Session 29, call 5 (~3 min): issue #7, causal_conv1d at 3 CTAs per SM (``ctas_per_sm = 3``, opt-in: 170 registers, the
# dense states kernel without its ptxas frame). Its bitwise GPU test, then a kernel-only A/B (3 rounds) on the states
# rows and one dense row without states.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
K=/tmp/keep; rm -rf $K; mkdir -p $K
T=packages/cudnn-linear-attention/tests
timeout 90 python3 -m pytest -p no:cacheprovider -q "$T/test_conv1d_fast_gpu.py::test_ctas_per_sm_is_bitwise_the_default" > $K/tests_cta.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 1 $K/tests_cta.log; grep -h "^FAILED\|^E  " $K/tests_cta.log | head -5
timeout 120 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states B512 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096,fwd T16k D4096" \
  --providers ours+graph,ours-cta3+graph --out linear_attention_conv1d_s29_cta3 > $K/bench_cta.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $K/bench_cta.log | head -10 | cut -d'|' -f1-5
cp docs/benchmarks/linear_attention_conv1d_s29_cta3.* $K/ 2>/dev/null
tar czf $OUT/call5.tgz -C $K .
