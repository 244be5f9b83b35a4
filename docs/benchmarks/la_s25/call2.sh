#!/usr/bin/env bash
# Session 25, call 2 (~8 min): issue #7, the varlen rows (64 sequences, T 32k, H 32) of KDA and GDN with the per-call
# default: the default public op graphed (`ours+graph`: the fused pair for this 64-sequence call) against the three
# kernels (the default before), the fused pair alone and fla graphed, one harness run per family.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
for fam in kda gdn; do
  [ $fam = kda ] && lim=300 || lim=$(( 560 - ($(date +%s) - T0) ))
  timeout $lim python3 benchmarks/linear_attention.py $fam --cases "$fam fwd varlen64 T32k H32" --providers ours+graph,ours-par-three,ours-par-fso-w2,fla+graph \
    --out linear_attention_${fam}_s25_varlen > $OUT/${fam}_varlen.log 2>&1
  echo "$fam rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/${fam}_varlen.log | head -4; grep "ms$" $OUT/${fam}_varlen.log | tail -n 5
  cp docs/benchmarks/linear_attention_${fam}_s25_varlen.* $OUT/ 2>/dev/null
done
