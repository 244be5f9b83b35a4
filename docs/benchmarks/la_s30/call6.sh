#!/usr/bin/env bash
# Ran with overlap_out_trial.patch applied (removed after; call 5 and 6 with its experiment hooks LA_OVL_LAG / LA_OVL_NOPDL).
# Session 30, call 6 (~1.5 min): issue #7, ``ovl`` with the flags set by warp 1 after the chunk barrier (call 5: set by
# the TMA-issuing lane behind a proxy fence, the state pass took 168 us without any overlap against 112: the fence
# waited for that lane's TMA loads in flight). One process per configuration, kernel cache off; LA_OVL_NOPDL as call 5.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
P=docs/benchmarks/la_s30/state_probe.py
export CUDNN_KERNEL_CACHE=0
for cfg in "kda three" "kda ovl" "kda ovl LA_OVL_NOPDL=1" "gdn three" "gdn ovl"; do
  set -- $cfg; f=$1; v=$2; shift 2
  env "$@" timeout 60 python3 $P --t 8192 --heads 16 --wall --families $f --variants $v,$v > /tmp/p.log 2>&1
  echo "[$cfg] rc=$? $(grep total /tmp/p.log | tail -1)"
done
for v in three ovl; do timeout 60 python3 $P --t 32768 --heads 16 --wall --families kda --variants $v > /tmp/p.log 2>&1; echo "[kda T32k $v] $(grep total /tmp/p.log)"; done
echo "t=$(( $(date +%s) - T0 ))"
