#!/usr/bin/env bash
# session 16 call 1: address / clock probe of the cells below 0.95x FA4 or the absolute targets
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE | head -80 > $OUT/r/smi_q.txt
PROBE_OUT=$OUT/r timeout 420 python3 docs/benchmarks/sdpa_s16/addr_probe.py 5 > $OUT/r/probe.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/probe.log
grep "^trial\|rc=\|Error\|error" $OUT/r/probe.log | tail -n 40
cd $OUT && tar czf r.tgz r && rm -rf r
