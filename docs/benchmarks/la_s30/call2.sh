#!/usr/bin/env bash
# Ran with state_chain_trial.patch applied (the options were removed after the A/B).
# Session 30, call 2 (~5 min): issue #7, the state pass's serial WGMMA depth. Call 1 measured the register chain (``rs``)
# slower than the default (KDA T 8k H 16: 165 us against 114): both kernels are a chain of small-N WGMMAs whose
# dependent depth sets the chunk's latency. Here: (1) the GPU tests of the chain options (rs and the split chains
# ``vn_split`` / ``update_split``); (2) per kernel, default / split2 / split4 / split44 / rs3, two interleaved rounds,
# both families, T 8k H 16 and KDA T 32k H 16.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
T=packages/cudnn-linear-attention/tests
P=docs/benchmarks/la_s30/state_probe.py
timeout 150 python3 $P --t 8192 --heads 16 --variants default,split2,split4,split44,rs3,default,split2,split4,split44,rs3 > /tmp/keep/probe_t8k.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t8k.log; grep -i "error\|Trace" /tmp/keep/probe_t8k.log | head -5
timeout 90 python3 $P --t 32768 --heads 16 --families kda --variants default,split2,split4,split44 > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 200 python3 -m pytest -p no:cacheprovider -q $T/test_state_pass_chain.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests.log; grep "^FAILED\|^E  " /tmp/keep/tests.log | head -12 | cut -c1-300
tar czf $OUT/call2.tgz -C /tmp/keep .
