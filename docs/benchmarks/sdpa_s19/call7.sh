#!/usr/bin/env bash
# Session 19, call 7 (~2 min, diagnostic): the source-level ncu view (SASS, warp-stall samples per instruction) of the
# persistent main kernel and the one-tile one at d128 s1k causal (call 6: twice the short-scoreboard stalls per issue
# with pers, the query-block loops' SASS the same): where the extra stalls sit.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
timeout 300 ncu --clock-control none --profile-from-start off -k regex:"cudnnsdpabwdkernel_sm90" --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv python3 docs/benchmarks/sdpa_s19/ncu_bwd_pers.py "d128 s1k b16 causal" > $OUT/r/ncu_src.csv 2> $OUT/r/ncu_src.err
echo "src rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 $OUT/r/ncu_src.err; wc -c $OUT/r/ncu_src.csv
cd $OUT && tar czf r.tgz r && rm -rf r
