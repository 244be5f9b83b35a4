#!/usr/bin/env bash
# Session 29, call 2 (~6 min): issue #7, KDA backward pass 3 v2 with MN-major operands (``mn_operands``, opt-in): its GPU
# tests (bitwise dq / dk / dv against the default v2, the fp32 reference), then the backward benchmark with the per-pass
# profile: the default, the default with mn_operands, fla, in one process.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
timeout 200 python3 -m pytest -p no:cacheprovider -q -s $T/test_la_bwd_p3_kda_mn.py > /tmp/keep/tests_mn.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests_mn.log; grep "^FAILED\|^E  " /tmp/keep/tests_mn.log | head -10
timeout 330 python3 benchmarks/linear_attention_bwd.py kda --quick --providers ours,ours-mn,fla --profile-after --out-dir /tmp/keep > /tmp/keep/bench_kda.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench_kda.log | head -30 | cut -c1-200
tar czf $OUT/call2.tgz -C /tmp/keep .
