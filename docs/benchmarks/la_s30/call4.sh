#!/usr/bin/env bash
# Ran with overlap_out_trial.patch applied (removed after; call 5 and 6 with its experiment hooks LA_OVL_LAG / LA_OVL_NOPDL).
# Session 30, call 4 (~3 min): issue #7. Call 3 found the overlapped output (``ovl``) no faster end to end. Here, per
# kernel and by CUDA events (20 back-to-back calls, fastest of 5), the three kernels against ``ovl``, interleaved;
# then Nsight Compute of the KDA and GDN prep kernels (T 8k H 16), the forward's largest kernel at every shape.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
rm -rf /tmp/keep; mkdir -p /tmp/keep
P=docs/benchmarks/la_s30/state_probe.py
timeout 120 python3 $P --t 8192 --heads 16 --wall --variants three,ovl,three,ovl > /tmp/keep/probe_t8k.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t8k.log
timeout 60 python3 $P --t 32768 --heads 16 --wall --families kda --variants three,ovl > /tmp/keep/probe_t32k.log 2>&1
echo "probe32 rc=$? t=$(( $(date +%s) - T0 ))"; grep total /tmp/keep/probe_t32k.log
timeout 100 ncu --clock-control none -k regex:chunk_parallel_prep --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --csv --page details \
  python3 $P --ncu --families kda,gdn --variants three > /tmp/keep/ncu_prep.csv 2> /tmp/keep/ncu_prep.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 /tmp/keep/ncu_prep.err
tar czf $OUT/call4.tgz -C /tmp/keep .
