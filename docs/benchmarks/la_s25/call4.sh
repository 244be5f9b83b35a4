#!/usr/bin/env bash
# Session 25, call 4 (~3 min): issue #7, where the causal_conv1d forward's 64M-element rows below 3.5 TB/s lose time:
# Nsight Compute of kernel_runs (both launches of each) on dense T16k x D4096 (3.64 TB/s), the dense states batch
# (3.47) and the 1-token-sequence batch (3.27; also with the warp walk): speed of light, scheduler and warp-state stats,
# memory workload, instructions executed.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
S="python3 docs/benchmarks/la_s25/conv_probe.py --walk"
timeout 400 ncu --clock-control none -k regex:kernel_runs \
  --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__inst_executed.sum,dram__bytes.sum \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section InstructionStats --csv --page details $S > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 $OUT/ncu.err; wc -l $OUT/ncu.csv
grep -E '"(Duration|DRAM Throughput|Executed Instructions|Issue Slots Busy|No Eligible|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Warp Cycles Per Issued Instruction|Registers Per Thread|Achieved Occupancy|Memory Throughput)"' $OUT/ncu.csv | cut -d, -f1,13- | head -80
grep -E 'stalled|inst_executed.sum|dram__bytes' $OUT/ncu.csv | cut -d, -f1,13- | head -120
