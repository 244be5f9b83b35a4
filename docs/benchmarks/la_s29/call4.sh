#!/usr/bin/env bash
# Session 29, call 4 (~8 min): issue #7. (1) The pass-3 wide epilogue (``wide_epilogue``, opt-in, KDA and GDN): its GPU
# tests, then each family's backward benchmark, the default against the option, one process each. (2) causal_conv1d:
# the init-prefetch option's GPU test, then kernel-only A/Bs (3 rounds): the varlen states rows with and without it; the
# dense states batches with the seeded starts at every length (ours-seed) and never (ours-noseed) beside the default
# (seeded up to 64 tokens per sequence).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
K=$OUT/keep; mkdir -p $K  # written as it goes: a timed-out call still returns what it has
T=packages/cudnn-linear-attention/tests
timeout 150 python3 -m pytest -p no:cacheprovider -q $T/test_la_bwd_p3_wide.py -m "not compile_only" > $K/tests_wide.log 2>&1 &
timeout 150 python3 -m pytest -p no:cacheprovider -q -x "$T/test_conv1d_fast_gpu.py::test_init_prefetch_is_bitwise_the_default" > $K/tests_pf.log 2>&1 &
wait
echo "tests t=$(( $(date +%s) - T0 ))"; tail -n 1 $K/tests_wide.log $K/tests_pf.log; grep -h "^FAILED\|^E  " $K/tests_*.log | head -10
timeout 120 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096" \
  --providers ours+graph,ours-initpf+graph --out linear_attention_conv1d_s29_initpf > $K/bench_pf.log 2>&1
echo "bench pf rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $K/bench_pf.log | head -8 | cut -d'|' -f1-5
timeout 100 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B16 T16k D4096,fwd states B128 T16k D4096,fwd states B256 T16k D4096,fwd states B512 T16k D4096" \
  --providers ours+graph,ours-seed+graph,ours-noseed+graph --out linear_attention_conv1d_s29_seed > $K/bench_seed.log 2>&1
echo "bench seed rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $K/bench_seed.log | head -8 | cut -d'|' -f1-5
cp docs/benchmarks/linear_attention_conv1d_s29_* $K/ 2>/dev/null
for fam in kda gdn; do
  mkdir -p $K/$fam; timeout 170 python3 benchmarks/linear_attention_bwd.py $fam --quick --providers ours,ours-wide --profile-after --out-dir $K/$fam > $K/bench_bwd_$fam.log 2>&1
  echo "bench $fam rc=$? t=$(( $(date +%s) - T0 ))"; grep "^| ours" $K/bench_bwd_$fam.log | grep -i "grads\|total" | head -6; grep "^| $fam bwd" $K/bench_bwd_$fam.log | head -2 | cut -c1-120
done
