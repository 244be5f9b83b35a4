#!/usr/bin/env bash
# session 16 call 3: the forward's per-tile fixed cost under ncu (plan-option variants and FA4 at d128 s1k / s2k / s4k)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
M=lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,lts__t_sectors_op_red.sum,lts__t_requests_srcunit_tex.sum,lts__t_sectors_srcunit_tex.sum,smsp__inst_executed.sum,sm__cycles_active.avg,dram__bytes_read.sum
timeout 400 ncu --clock-control none --profile-from-start off --section SpeedOfLight --section WarpStateStats --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s16/ncu_fwd_variants.py > $OUT/r/ncu_fwd_var.csv 2> $OUT/r/ncu_fwd_var.err; echo "rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 3 $OUT/r/ncu_fwd_var.err
cd $OUT && tar czf r.tgz r && rm -rf r
