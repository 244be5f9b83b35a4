#!/usr/bin/env bash
# Session 31, call 2 (~7 min): issue #7, the A/B after call 1 (session 30's next_call.sh: ``ovl-stsm`` fastest at T 8k H 16 in
# both families). (1) ovl / ovl-stsm bitwise the three kernels (GPU tests); (2) KDA T 32k H 16 probe; (3) fso-w2 against
# fso-w2-stsm at T 8k H 64; (4) the harness's kernel-only rows, both families, with fla in the same run.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
P=docs/benchmarks/la_s30/state_probe.py
timeout 150 python3 -m pytest -p no:cacheprovider -q $T/test_parallel_overlap_out.py -k "bitwise or dense" > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 1 /tmp/keep/tests.log; grep "^FAILED\|^E  " /tmp/keep/tests.log | head -8 | cut -c1-300
timeout 90 python3 $P --t 32768 --heads 16 --families kda --wall --variants three,ovl,ovl-stsm,three,ovl-stsm > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 80 python3 $P --t 8192 --heads 64 --wall --variants fso-w2,fso-w2-stsm,fso-w2,fso-w2-stsm > /tmp/keep/probe_h64.log 2>&1
echo "probe h64 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_h64.log
for fam in kda gdn; do
  cases="$fam fwd T4k H16,$fam fwd T8k H16,$fam fwd T32k H16"
  timeout 110 python3 benchmarks/linear_attention.py $fam --cases "$cases" \
    --providers ours-par-three+graph,ours-par-ovl+graph,ours-par-ovl-stsm+graph,fla+graph --out linear_attention_${fam}_s31_ovl > /tmp/keep/bench_$fam.log 2>&1
  echo "bench $fam rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_$fam.log | head -6
  cp docs/benchmarks/linear_attention_${fam}_s31_ovl.* /tmp/keep/ 2>/dev/null
done
tar czf $OUT/call2.tgz -C /tmp/keep .
