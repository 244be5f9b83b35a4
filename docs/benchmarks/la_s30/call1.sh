#!/usr/bin/env bash
# Ran with state_chain_trial.patch applied (the options were removed after the A/B).
# Session 30, call 1 (~6 min): issue #7, the state pass with its chain in registers (``reg_chain``, opt-in variant ``rs``):
# (1) its GPU tests (recurrence, default, dense / long, detectors); (2) per-kernel times against the default narrow state
# pass, both families, T 8k H 16 and KDA T 32k H 16; (3) Nsight Compute of the two state-pass kernels (KDA T 8k H 16).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
nvidia-smi --query-gpu=index,name,power.limit,clocks.max.sm --format=csv > /tmp/keep/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 240 python3 -m pytest -p no:cacheprovider -q $T/test_state_pass_rs.py > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests.log; grep "^FAILED\|^E  " /tmp/keep/tests.log | head -12 | cut -c1-300
P=docs/benchmarks/la_s30/state_probe.py
timeout 150 python3 $P --t 8192 --h 16 --variants default,rs3,rs2,default,rs3,rs2 > /tmp/keep/probe_t8k.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; cat /tmp/keep/probe_t8k.log | grep -v Warn | tail -14
timeout 80 python3 $P --t 32768 --h 16 --families kda --variants default,rs3,rs2 > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 120 ncu --clock-control none -k regex:chunk_parallel_state --launch-skip 0 --launch-count 4 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --csv --page details \
  python3 $P --ncu --families kda --variants default,rs3 > /tmp/keep/ncu.csv 2> /tmp/keep/ncu.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/ncu.err
grep -E '"(Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Executed Instructions|Issue Slots Busy|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Registers Per Thread|SM Frequency|Stall [A-Za-z ]+)"' /tmp/keep/ncu.csv | cut -d, -f1,5,13- | head -60
tar czf $OUT/call1.tgz -C /tmp/keep .
