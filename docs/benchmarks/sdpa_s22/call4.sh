#!/usr/bin/env bash
# Session 22, call 4 (~5 min): pinned_desc after call 3. (1) Its GPU tests again (call 3's one failure was the test's
# own key check: q_stages=1 is spelled 0 in the key; that case now runs without wg_epilogue instead); (2) the harness
# A/B (settled, the fastest of 2 interleaved rounds) of ours / ours-pinned / FA4 on the d128 rows from s4k up, since the
# clock probe of call 3 found pinned_desc settling ~4% lower in clock than the default under the power cap. The first
# run of this call passed "d128 s4k|..." (sdpa_bwd.py's syntax) to --only and timed no row; rerun as SKIP_TESTS=1.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
[ -n "${SKIP_TESTS:-}" ] || timeout 200 python3 -m pytest -q -p no:cacheprovider packages/cudnn-sdpa/tests/test_sdpa_fwd_prefill_options_gpu.py -k "pinned" > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 $OUT/tests.log
timeout $(( 560 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_fwd.py --pinned --only=s4k,s8k,s16k,s32k --rounds=2 --out=sdpa_fwd_s22_pinned > $OUT/b_pinned.log 2>&1
echo "pinned rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/b_pinned.log | tail -n 14
cp docs/benchmarks/sdpa_fwd_s22_pinned.* $OUT/ 2>/dev/null
