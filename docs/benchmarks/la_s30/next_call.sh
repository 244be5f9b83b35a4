#!/usr/bin/env bash
# For session 31's first call (~6 min): issue #7, session 30's two opt-ins, compile-verified but not GPU-run: ``ovl``
# (the output kernel beside the state pass, relaxed ready flags) and ``stsm`` (the state pass's transposed copies by
# stmatrix, in the narrow state pass and in the fused default fso-w2). (1) Their GPU tests; (2) per kernel and by CUDA events, the three kernels against each and both,
# both families, T 8k / 32k H 16, and fso-w2 against fso-w2-stsm at T 8k H 64; (3) the harness's kernel-only rows with fla in the same run.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
P=docs/benchmarks/la_s30/state_probe.py
timeout 260 python3 -m pytest -p no:cacheprovider -q $T/test_parallel_overlap_out.py $T/test_state_pass_gpu.py $T/test_parallel_state_out.py -k "overlap or stmatrix or bitwise" > /tmp/keep/tests_ovl.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests_ovl.log; grep "^FAILED\|^E  " /tmp/keep/tests_ovl.log | head -8 | cut -c1-300
timeout 120 python3 $P --t 8192 --heads 16 --wall --variants three,ovl,stsm,ovl-stsm,three,ovl,stsm,ovl-stsm > /tmp/keep/probe_t8k.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t8k.log
timeout 90 python3 $P --t 32768 --heads 16 --wall --variants three,ovl,stsm,ovl-stsm > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 90 python3 $P --t 8192 --heads 64 --wall --variants fso-w2,fso-w2-stsm,fso-w2,fso-w2-stsm > /tmp/keep/probe_h64.log 2>&1
echo "probe h64 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_h64.log
timeout 150 python3 benchmarks/linear_attention.py kda --cases "kda fwd T4k H16,kda fwd T8k H16,kda fwd T32k H16" \
  --providers ours-par-three+graph,ours-par-ovl+graph,fla+graph --out linear_attention_kda_s31_ovl > /tmp/keep/bench_kda.log 2>&1
echo "bench kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_kda.log | head -6
cp docs/benchmarks/linear_attention_kda_s31_ovl.* /tmp/keep/ 2>/dev/null
tar czf $OUT/next_call.tgz -C /tmp/keep .
