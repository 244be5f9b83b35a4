#!/usr/bin/env bash
# Session 23, call 1 (~9 min): kv_multicast (clusters of two CTAs sharing every K / V tile by TMA multicast: half the
# K / V bytes out of L2 per query block). (1) Its GPU tests (bitwise against the default plan, and the reference); a hang
# is cut by the timeout. (2) The settled clock and TFLOP/s against the default and FA4 (session 22's clock_probe.py, 3 s
# windows at the 700 W cap). (3) The harness A/B on the d128 non-causal rows (sdpa_fwd.py --mcast). (4) With the time
# left: KDA forward at H 32 (dense B 1), the three kernels against the fused state pass + output (fso-w2).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
export CUDNN_KERNEL_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/smi.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py -k "kv_multicast" -x > $OUT/tests.log 2>&1
rc=$?; echo "tests rc=$rc t=$(( $(date +%s) - T0 ))"; tail -n 15 $OUT/tests.log
if [ $rc -ne 0 ]; then exit 0; fi
PROBE_VARIANTS=ours,mcast timeout 150 python3 docs/benchmarks/sdpa_s22/clock_probe.py $OUT > $OUT/clock.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/clock.log; tail -n 2 $OUT/clock.log
timeout 200 python3 benchmarks/sdpa_fwd.py --mcast --rounds=2 --providers=ours,ours-mcast,fa4 > $OUT/b_mcast.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/b_mcast.log | head -12; tail -n 2 $OUT/b_mcast.log
cp docs/benchmarks/sdpa_fwd_mcast.md $OUT/ 2>/dev/null; cp docs/benchmarks/sdpa_fwd_mcast.csv docs/benchmarks/sdpa_fwd_mcast.png $OUT/ 2>/dev/null
REM=$(( 570 - ($(date +%s) - T0) ))
if [ $REM -gt 90 ]; then
  timeout $REM python3 benchmarks/linear_attention_kernels.py --family kda --t 8192 --h 32 --variants parallel,par-three,par-fso-w2 --out $OUT/kda_kernels_t8192_h32.md > $OUT/kda_h32.log 2>&1
  echo "kda rc=$? t=$(( $(date +%s) - T0 ))"; cat $OUT/kda_kernels_t8192_h32.md 2>/dev/null | grep "|"; tail -n 2 $OUT/kda_h32.log
fi
