#!/usr/bin/env bash
# Session 24, call 1 (~9.5 min): issue #7, the per-call schedule as the default (PER_CALL_DEFAULT: a plan whose rule
# keeps the three kernels for one sequence also compiles the fused pair and launches it for calls of at least
# fused_min_sequences sequences). (1) The chunk-parallel forward GPU tests, including the per-call test, the public-op
# schedule file, the detectors (Rule-4 cache hits across sequence counts) and the graph engines. (2) The varlen rows
# (64 sequences, T 32k, H 32) of KDA and GDN: the default public op graphed against the three kernels (the previous
# default there), the fused pair alone and fla graphed.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-linear-attention/tests
timeout 300 python3 -m pytest -q -p no:cacheprovider -rf $T/test_parallel_state_out.py $T/test_delta_rule_schedule_op.py $T/test_kda_detectors.py \
  $T/test_gdn_detectors.py $T/test_graph_engines.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 6 $OUT/tests.log
for fam in kda gdn; do
  timeout 130 python3 benchmarks/linear_attention.py $fam --cases "$fam fwd varlen64 T32k H32" --providers ours+graph,ours-par-three,ours-par-fso-w2,fla+graph \
    --out linear_attention_${fam}_s24_varlen > $OUT/${fam}_varlen.log 2>&1
  echo "$fam rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/${fam}_varlen.log | head -4; grep "ms$" $OUT/${fam}_varlen.log | tail -n 5
  cp docs/benchmarks/linear_attention_${fam}_s24_varlen.* $OUT/ 2>/dev/null
done
