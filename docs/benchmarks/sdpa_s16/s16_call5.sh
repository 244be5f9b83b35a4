#!/usr/bin/env bash
# session 16 call 5: (a) warp-stall sampling per SASS line, ours at tile_n 128 vs FA4, d128 s1k; (b) the tile_n A/B
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
NCU_VARIANTS=n128,fa4 timeout 150 ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats --page source --print-source sass --csv python3 docs/benchmarks/sdpa_s16/ncu_fwd_variants.py "d128 s1k b16" > $OUT/r/ncu_src_n128.csv 2> $OUT/r/ncu_src_n128.err; echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"
timeout 330 python3 benchmarks/sdpa_fwd.py --tile-n --rounds=2 > $OUT/r/b_tile_n.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
cp docs/benchmarks/sdpa_fwd_tile_n.* $OUT/r/ 2>/dev/null
grep "^|" $OUT/r/b_tile_n.log | tail -n 12
cd $OUT && tar czf r.tgz r && rm -rf r
