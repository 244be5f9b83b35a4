#!/usr/bin/env bash
# Session 22, call 1 (~6 min): where the d128 non-causal forward's long-sequence gap to FA4 comes from. (1) ncu, 2 launches
# per plan at s4k / s8k / s16k: the steady cycles per key block (line fit) of the persistent default, the one-tile plans at
# key tiles 128 and 192, and FA4, with tensor-pipe and L2 utilization; (2) the clock each settles at under the power cap.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
M=gpc__cycles_elapsed.max,sm__cycles_active.avg,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,gpc__cycles_elapsed.avg.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
timeout 300 ncu --clock-control none --profile-from-start off --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s22/ncu_blocks.py > $OUT/ncu_blocks.csv 2> $OUT/ncu_blocks.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 3 $OUT/ncu_blocks.err
python3 docs/benchmarks/sdpa_s22/blocks_summary.py $OUT/ncu_blocks.csv $OUT/blocks_summary.md 2>&1 | tail -8
timeout $(( 500 - ($(date +%s) - T0) )) python3 docs/benchmarks/sdpa_s22/clock_probe.py $OUT > $OUT/clock.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
grep "^|" $OUT/clock.log; tail -n 3 $OUT/clock.log
