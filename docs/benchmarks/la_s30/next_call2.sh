#!/usr/bin/env bash
# For session 31's second call (~6 min): the rest of next_call.sh's A/B -- KDA T 32k H 16 (three / ovl / stsm / both),
# fso-w2 against fso-w2-stsm at T 8k H 64, and the harness's kernel-only rows with fla in the same run.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
P=docs/benchmarks/la_s30/state_probe.py
timeout 120 python3 $P --t 32768 --heads 16 --families kda --wall --variants three,ovl,stsm,ovl-stsm > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 100 python3 $P --t 8192 --heads 64 --wall --variants fso-w2,fso-w2-stsm,fso-w2,fso-w2-stsm > /tmp/keep/probe_h64.log 2>&1
echo "probe h64 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_h64.log
timeout 150 python3 benchmarks/linear_attention.py kda --cases "kda fwd T4k H16,kda fwd T8k H16,kda fwd T32k H16" \
  --providers ours-par-three+graph,ours-par-ovl+graph,ours-par-stsm+graph,fla+graph --out linear_attention_kda_s31_ovl > /tmp/keep/bench_kda.log 2>&1
echo "bench kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_kda.log | head -6
cp docs/benchmarks/linear_attention_kda_s31_ovl.* /tmp/keep/ 2>/dev/null
tar czf $OUT/next_call2.tgz -C /tmp/keep .
