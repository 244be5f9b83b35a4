#!/usr/bin/env bash
# Session 20, call 7 (~4.5 min), the session's final tables on the final code (dqfs in the causal d128 / d64 defaults,
# dense and varlen; dqz removed): the d128 / d64 grid and the d256 / d192 rows against the peers, settled, 2 interleaved
# rounds each.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
timeout 200 python3 benchmarks/sdpa_bwd.py --only="d128 s|d64 s" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s20_final > $OUT/b_final.log 2>&1
echo "final rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_final.log
grep "^|\|rc=" $OUT/b_final.log | tail -n 23
cp docs/benchmarks/sdpa_bwd_s20_final.* $OUT/ 2>/dev/null
timeout $(( 330 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 --out=sdpa_bwd_s20_final_b > $OUT/b_final_b.log 2>&1
echo "final_b rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/b_final_b.log
grep "^|\|rc=" $OUT/b_final_b.log | tail -n 11
cp docs/benchmarks/sdpa_bwd_s20_final_b.* $OUT/ 2>/dev/null
