#!/usr/bin/env bash
# Session 21, call 6 (~4 min): (1) where the persistent default's extra instructions come from (ncu counts 275M at d128
# s4k against 241M for the one-tile plan at the same key tile and 245M for FA4): the SASS source view (instructions
# executed and warp-stall samples per line) of ours and ours-n128 (one tile per CTA) at d128 s1k; (2) a second sample
# of the d128 rows against FA4 (settled, 2 rounds), the grid's (call 4) d128 cells having run 2-6% below calls 1 / 5.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
NCU_VARIANTS=ours,n128 timeout 150 ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
  python3 docs/benchmarks/sdpa_s21/ncu_fwd_variants.py "d128 s1k b16" > $OUT/ncu_src.csv 2> $OUT/ncu_src.err; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 2 $OUT/ncu_src.err
timeout $(( 250 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --only="d128 s" --providers=ours,fa4 --rounds=2 --out=sdpa_fwd_s21_d128 > $OUT/b_d128.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_d128.log
grep "^|\|rc=" $OUT/b_d128.log | tail -n 18
cp docs/benchmarks/sdpa_fwd_s21_d128.* $OUT/ 2>/dev/null
gzip $OUT/ncu_src.csv
