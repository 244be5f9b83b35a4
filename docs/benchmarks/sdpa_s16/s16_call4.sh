#!/usr/bin/env bash
# session 16 call 4: warp-stall sampling per SASS line, ours vs FA4, d128 s1k non-causal forward (the per-tile cost)
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
ncu --version | tail -1 > $OUT/r/ncu_version.txt
timeout 250 ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv python3 docs/benchmarks/sdpa_s16/ncu_fwd.py "d128 s1k b16" > $OUT/r/ncu_src.csv 2> $OUT/r/ncu_src.err; echo "rc=$? t=$(( $(date +%s) - T0 ))"
ls -la $OUT/r; head -c 600 $OUT/r/ncu_src.csv; tail -n 3 $OUT/r/ncu_src.err
cd $OUT && tar czf r.tgz r && rm -rf r
