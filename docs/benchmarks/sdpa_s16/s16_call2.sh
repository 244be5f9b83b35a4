#!/usr/bin/env bash
# session 16 call 2: ncu of the backward / forward cells under the targets, ours vs FA4 (work per kernel: instructions,
# DRAM bytes, L2 hit rate, stall reasons; clocks not controlled, so cycles are at the idle-boost clock)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,smsp__inst_executed.sum,sm__cycles_elapsed.avg,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier.ratio
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
timeout 300 ncu --clock-control none --profile-from-start off $S --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s15/ncu_bwd.py "d64 s1k b16 causal" "d128 s4k b4 causal" "d128 s4k b4" > $OUT/r/ncu_bwd.csv 2> $OUT/r/ncu_bwd.err; echo "bwd rc=$? t=$(( $(date +%s) - T0 ))"
timeout 200 ncu --clock-control none --profile-from-start off $S --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s16/ncu_fwd.py "d128 s4k b4" "d128 s2k b8" > $OUT/r/ncu_fwd.csv 2> $OUT/r/ncu_fwd.err; echo "fwd rc=$? t=$(( $(date +%s) - T0 ))"
tail -3 $OUT/r/ncu_bwd.err $OUT/r/ncu_fwd.err
cd $OUT && tar czf r.tgz r && rm -rf r
