#!/usr/bin/env bash
# Session 21, call 5 (~3 min): the wait form on the new persistent d128 defaults. Under ncu our forward issues 12% more
# instructions than FA4's at d128 s4k (spinning consumers), and the harness (back-to-back runs at the 700 W cap) has
# timed it below FA4 on long rows where ncu counts fewer cycles. (1) The --spin A/B (d128 s4k / s8k both masks, d64 s4k):
# ours / ours-nospin / ours-spin-all / FA4, settled, 3 rounds; (2) ncu cycles and instructions of the same variants.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
timeout 150 python3 benchmarks/sdpa_fwd.py --spin --rounds=3 --providers=ours,ours-nospin,ours-spin-all,fa4 --out=sdpa_fwd_s21_spin > $OUT/b_spin.log 2>&1
echo "spin rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_spin.log
grep "^|\|rc=" $OUT/b_spin.log | tail -n 8
cp docs/benchmarks/sdpa_fwd_s21_spin.* $OUT/ 2>/dev/null
M=smsp__inst_executed.sum,sm__cycles_active.avg,dram__bytes_read.sum
NCU_VARIANTS=ours,nospin2,spinall,fa4 timeout $(( 230 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off --section SpeedOfLight --metrics $M --csv --page details \
  python3 docs/benchmarks/sdpa_s21/ncu_fwd_variants.py "d128 s4k b4" "d128 s8k b2" "d128 s4k b4 causal" > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
python3 docs/benchmarks/sdpa_s21/ncu_summary.py $OUT/ncu_summary.md $OUT/ncu.csv:fwd; cat $OUT/ncu_summary.md
