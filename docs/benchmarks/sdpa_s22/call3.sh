#!/usr/bin/env bash
# Session 22, call 3 (~6 min): pinned_desc (the step loop's S GEMM from descriptor low words pinned once per tile).
# (1) its GPU tests (bitwise against the default plan, and the reference); (2) the per-block line fit against the
# default and the one-tile n128 plan; (3) the settled clock and TFLOP/s against the default and FA4.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
timeout 240 python3 -m pytest -q -p no:cacheprovider packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py -k "pinned" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 5 $OUT/tests.log
M=gpc__cycles_elapsed.max,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
NCU_VARIANTS=ours,pinned,one128 NCU_REPEAT=1 timeout $(( 420 - ($(date +%s) - T0) )) ncu --clock-control none --profile-from-start off --metrics $M --csv --page details \
  python3 docs/benchmarks/sdpa_s22/ncu_blocks.py > $OUT/ncu_blocks3.csv 2> $OUT/ncu_blocks3.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 $OUT/ncu_blocks3.err
python3 docs/benchmarks/sdpa_s22/blocks_summary.py $OUT/ncu_blocks3.csv $OUT/blocks_summary3.md 2>&1 | tail -6
PROBE_VARIANTS=ours,pinned timeout $(( 560 - ($(date +%s) - T0) )) python3 docs/benchmarks/sdpa_s22/clock_probe.py $OUT > $OUT/clock3.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/clock3.log; tail -n 2 $OUT/clock3.log
