#!/usr/bin/env bash
# Session 21, call 7 (~3 min): where the run-to-run spread of our d128 cells comes from (ours 631.8-672.8 TFLOP/s at s4k
# over four runs of the same code, FA4 628.8-650.2). Session 16's probe on the final code, forward cells only: 5 trials
# of fresh inputs behind a growing spacer allocation, ours and FA4 in 3 interleaved do_bench rounds per trial, and
# nvidia-smi sampling the SM clock, power and throttle reasons every 100 ms.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
PROBE_OUT=$OUT PROBE_FWD_ONLY=1 timeout 200 python3 docs/benchmarks/sdpa_s16/addr_probe.py 5 > $OUT/probe.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/probe.log
grep "^trial\|rc=" $OUT/probe.log
