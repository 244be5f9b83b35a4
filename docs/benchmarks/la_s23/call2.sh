#!/usr/bin/env bash
# Session 23, call 2 (~9 min): issue #7, KDA forward at H = 32 (the band the plan-time fused rule leaves unfused: 128
# chains for 132 SMs), dense T 4k / 8k / 32k and the varlen mix of 64 sequences: the fused state pass + output (fso-w2)
# against the three kernels (both through the adapter), the default public op graphed, and fla graphed.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
timeout 560 python3 benchmarks/linear_attention.py kda --cases "kda fwd T4k H32,kda fwd T8k H32,kda fwd T32k H32,kda fwd varlen64 T32k H32" \
  --providers ours+graph,ours-par-fso-w2,ours-par-three,fla+graph --out linear_attention_kda_s23_h32 > $OUT/kda_h32.log 2>&1
echo "kda rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/kda_h32.log | head -8; grep -v "^|" $OUT/kda_h32.log | tail -n 12
cp docs/benchmarks/linear_attention_kda_s23_h32.* $OUT/ 2>/dev/null
