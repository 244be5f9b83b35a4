#!/usr/bin/env bash
# Ran with overlap_out_trial.patch applied (removed after; call 5 and 6 with its experiment hooks LA_OVL_LAG / LA_OVL_NOPDL).
# Session 30, call 5 (~2 min): issue #7, why ``ovl`` slows the state pass (call 4: 113 -> 183 us at KDA T 8k H 16).
# The experiment build (not committed) reads two environment variables at compile time: LA_OVL_NOPDL (the output kernel
# launched without PDL: it starts after the state pass, so only the signalling's own cost remains) and LA_OVL_LAG (the
# chunks between a chunk and its flag: 2 by default). One process per configuration, kernel cache off.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
P=docs/benchmarks/la_s30/state_probe.py
export CUDNN_KERNEL_CACHE=0
for cfg in "three" "ovl" "ovl LA_OVL_NOPDL=1" "ovl LA_OVL_LAG=6" "ovl LA_OVL_LAG=6 LA_OVL_NOPDL=1"; do
  set -- $cfg; v=$1; shift
  env "$@" timeout 60 python3 $P --t 8192 --heads 16 --wall --families kda --variants $v > /tmp/keep/p.log 2>&1
  echo "[$cfg] rc=$? $(grep total /tmp/keep/p.log)"
done
echo "t=$(( $(date +%s) - T0 ))"
