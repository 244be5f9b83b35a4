#!/usr/bin/env bash
# Ran with overlap_out_trial.patch (ovl) and varlen_seed_trial.patch applied (both removed after the A/B).
# Session 30, call 3 (~7 min): issue #7. (1) GPU tests of the output kernel beside the state pass (``ovl``, opt-in:
# ready flags, PDL) and of causal_conv1d's varlen seeded starts (``varlen_seed``, opt-in, bitwise the default);
# (2) KDA / GDN forward, kernel-only (graphed): the default, the three kernels (``ours-par-three+graph``) and ``ovl``,
# fla in the same run; (3) causal_conv1d varlen states rows with and without ``varlen_seed``, 3 interleaved rounds.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 -m pytest -p no:cacheprovider -q $T/test_parallel_overlap_out.py > /tmp/keep/tests_ovl.log 2>&1
echo "tests ovl rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests_ovl.log; grep "^FAILED\|^E  " /tmp/keep/tests_ovl.log | head -8 | cut -c1-300
timeout 140 python3 benchmarks/linear_attention.py kda --cases "kda fwd T8k H16,kda fwd T32k H16,kda fwd T4k H16" \
  --providers ours-parallel+graph,ours-par-three+graph,ours-par-ovl+graph,fla+graph --out linear_attention_kda_s30_ovl > /tmp/keep/bench_kda.log 2>&1
echo "bench kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_kda.log | head -8 | cut -c1-220
timeout 100 python3 benchmarks/linear_attention.py gdn --cases "gdn fwd T8k H16,gdn fwd T32k H16" \
  --providers ours-parallel+graph,ours-par-three+graph,ours-par-ovl+graph,fla+graph --out linear_attention_gdn_s30_ovl > /tmp/keep/bench_gdn.log 2>&1
echo "bench gdn rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_gdn.log | head -8 | cut -c1-220
cp docs/benchmarks/linear_attention_kda_s30_ovl.* docs/benchmarks/linear_attention_gdn_s30_ovl.* /tmp/keep/ 2>/dev/null
timeout 150 python3 -m pytest -p no:cacheprovider -q $T/test_conv1d_varlen_seed.py > /tmp/keep/tests_vseed.log 2>&1
echo "tests vseed rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests_vseed.log; grep "^FAILED\|^E  " /tmp/keep/tests_vseed.log | head -8 | cut -c1-300
timeout 150 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states varlen16 T16k D4096,fwd states varlen64 T16k D4096,fwd states varlen256 T16k D4096,fwd states varlen1024 T16k D4096" \
  --providers ours+graph,ours-vseed+graph,ours-initonly+graph,ours-vseed-initonly+graph,ours-runs+graph,ours-vseed-runs+graph \
  --out linear_attention_conv1d_s30_vseed > /tmp/keep/bench_conv.log 2>&1
echo "bench conv rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_conv.log | head -8 | cut -c1-220
cp docs/benchmarks/linear_attention_conv1d_s30_vseed.* /tmp/keep/ 2>/dev/null
tar czf $OUT/call3.tgz -C /tmp/keep .
