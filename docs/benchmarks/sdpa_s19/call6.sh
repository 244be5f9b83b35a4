#!/usr/bin/env bash
# Session 19, call 6 (~5 min, diagnostic for the next session): where the d128 causal rows stand with pers in the
# default. (1) per-kernel device times (torch.profiler) of ours / ours-nopers / fa4 at d128 s1k / s2k / s4k causal and
# d64 s1k causal; (2) ncu of the main kernels (ours with pers, ours-nopers, FA4) at d128 s1k and s4k causal: speed of
# light, occupancy, scheduler and warp-state statistics, stall reasons per issued instruction.
# As run; the profile's table is written as <out>_kernels.md, which the cp below missed: its printout is call6_profile.log.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 150 python3 benchmarks/sdpa_bwd.py --profile --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d64 s1k b16 causal" \
  --providers=ours,ours-nopers,fa4 --out=sdpa_bwd_s19_kernels > $OUT/r/prof.log 2>&1; echo "profile rc=$? t=$(( $(date +%s) - T0 ))"
cp docs/benchmarks/sdpa_bwd_s19_kernels.* $OUT/r/ 2>/dev/null
STALL=$(for r in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle membar sleeping dispatch_stall \
  no_instruction selected not_selected branch_resolving drain imc_miss misc tex_throttle; do printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $r; done)
M="${STALL}smsp__inst_executed.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats"
timeout $(( 400 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off -k regex:"cudnnsdpabwdkernel_sm90|flash_bwd_sm90" $S \
  --metrics "$M" --csv --page details python3 docs/benchmarks/sdpa_s19/ncu_bwd_pers.py "d128 s1k b16 causal" "d128 s4k b4 causal" \
  > $OUT/r/ncu_main.csv 2> $OUT/r/ncu_main.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 $OUT/r/ncu_main.err; grep -c "Duration" $OUT/r/ncu_main.csv
cd $OUT && tar czf r.tgz r && rm -rf r
