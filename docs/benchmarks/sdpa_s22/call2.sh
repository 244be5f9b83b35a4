#!/usr/bin/env bash
# Session 22, call 2 (~4 min): why the persistent d128 plan's key block costs ~3% more cycles than the one-tile plan's
# (call 1: 2.51K vs 2.44K). (1) ncu's SASS source view (warp-stall samples per line) of both at s8k b2; (2) the line fit
# for three more persistent variants (no ragged first block; one Q buffer and the shared epilogue; key tile 192).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
NCU_VARIANTS=ours,one128 NCU_REPEAT=1 timeout 200 ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  python3 docs/benchmarks/sdpa_s22/ncu_blocks.py "d128 s8k b2" > $OUT/ncu_src.csv 2> $OUT/ncu_src.err; echo "ncu src rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 2 $OUT/ncu_src.err
M=gpc__cycles_elapsed.max,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
NCU_VARIANTS=ours,pers_notail,pers_q1,pers192 NCU_REPEAT=1 timeout $(( 450 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off --metrics $M --csv --page details \
  python3 docs/benchmarks/sdpa_s22/ncu_blocks.py "d128 s4k b4" "d128 s8k b2" > $OUT/ncu_blocks2.csv 2> $OUT/ncu_blocks2.err
echo "ncu blocks rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 2 $OUT/ncu_blocks2.err
python3 docs/benchmarks/sdpa_s22/blocks_summary.py $OUT/ncu_blocks2.csv $OUT/blocks_summary2.md 2>&1 | tail -8
gzip $OUT/ncu_src.csv
