#!/usr/bin/env bash
# Session 21, call 1 (~8 min): the forward's per-tile cost at d128 non-causal. (a) The key-tile / persistent A/B through
# the harness, settled, 2 interleaved rounds: ours (192-row key tile), ours-n128, ours-pers-n128 (persistent, O in its own
# shared-memory tile), FA4. (b) ncu elapsed cycles of the plan variants and FA4 at s1k / s2k / s4k.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 300 python3 benchmarks/sdpa_fwd.py --tile-n --rounds=2 --out=sdpa_fwd_s21_tile > $OUT/r/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/r/bench.log
grep "^|" $OUT/r/bench.log | tail -n 8
cp docs/benchmarks/sdpa_fwd_s21_tile.* $OUT/ 2>/dev/null
M=smsp__inst_executed.sum,sm__cycles_active.avg,dram__bytes_read.sum
NCU_VARIANTS=ours,n128,n128notail,pers,persn128,persn128notail,fa4 timeout $(( 560 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off --section SpeedOfLight --metrics $M --csv --page details python3 docs/benchmarks/sdpa_s21/ncu_fwd_variants.py > $OUT/r/ncu_fwd_var.csv 2> $OUT/r/ncu_fwd_var.err; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 3 $OUT/r/ncu_fwd_var.err
python3 docs/benchmarks/sdpa_s21/ncu_summary.py $OUT/r/ncu_summary.md $OUT/r/ncu_fwd_var.csv:fwd 2>&1 | tail -3; cat $OUT/r/ncu_summary.md 2>/dev/null | head -40
