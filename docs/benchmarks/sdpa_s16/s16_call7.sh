#!/usr/bin/env bash
# session 16 call 7: ncu after the 3-D grid: forward cycles ours / FA4 (d128 non-causal s1k / s2k / s4k), backward main
# kernels (d128 s4k non-causal: 3-D grid; d64 s1k causal: 1-D budget groups), the backward's source view at d64 s1k causal
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
M=smsp__inst_executed.sum,lts__t_sectors_op_read.sum,dram__bytes_read.sum
NCU_VARIANTS=ours,fa4 timeout 150 ncu --clock-control none --profile-from-start off --section SpeedOfLight --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s16/ncu_fwd_variants.py > $OUT/r/ncu_fwd_grid.csv 2> $OUT/r/ncu_fwd_grid.err; echo "fwd rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 ncu --clock-control none --profile-from-start off --section SpeedOfLight --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s15/ncu_bwd.py "d128 s4k b4" "d64 s1k b16 causal" "d128 s1k b16" > $OUT/r/ncu_bwd_grid.csv 2> $OUT/r/ncu_bwd_grid.err; echo "bwd rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv python3 docs/benchmarks/sdpa_s15/ncu_bwd.py "d64 s1k b16 causal" > $OUT/r/ncu_src_bwd.csv 2> $OUT/r/ncu_src_bwd.err; echo "src rc=$? t=$(( $(date +%s) - T0 ))"
cd $OUT && tar czf r.tgz r && rm -rf r
