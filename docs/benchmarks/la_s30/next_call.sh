#!/usr/bin/env bash
# For session 31's first call (~9 min; next_call2.sh is the second): issue #7, session 30's two opt-ins, compile-verified but not GPU-run: ``ovl``
# (the output kernel beside the state pass, relaxed ready flags) and ``stsm`` (the state pass's transposed copies by
# stmatrix, in the narrow state pass and in the fused default fso-w2). (1) Their GPU tests; (2) per kernel and by CUDA events, the three kernels against each and both,
# both families, T 8k / 32k H 16, and fso-w2 against fso-w2-stsm at T 8k H 64; (3) the harness's kernel-only rows with fla in the same run.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
P=docs/benchmarks/la_s30/state_probe.py
timeout 300 python3 -m pytest -p no:cacheprovider -q $T/test_parallel_overlap_out.py $T/test_state_pass_gpu.py $T/test_parallel_state_out.py -k "overlap or stmatrix or bitwise" > /tmp/keep/tests_ovl.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/tests_ovl.log; grep "^FAILED\|^E  " /tmp/keep/tests_ovl.log | head -8 | cut -c1-300
timeout 200 python3 $P --t 8192 --heads 16 --wall --variants three,ovl,stsm,ovl-stsm,three,ovl,stsm,ovl-stsm > /tmp/keep/probe_t8k.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t8k.log
tar czf $OUT/next_call.tgz -C /tmp/keep .
