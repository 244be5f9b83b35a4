#!/usr/bin/env bash
# Session 26, call 1 (~6 min): issue #7, causal_conv1d's chunk_guess (session 25's opt-in, written after its device time
# was spent: varlen chunks locate each chunk's first sequence from the density guess loaded one chunk ahead). (1) The
# conv1d GPU files, including test_forward_varlen_chunk_is_bitwise_the_default's guess cases. (2) That test against a
# planted violation (the guess taken as the chunk's sequence without checking it). (3) The varlen rows, kernel-only A/B
# (3 interleaved rounds): contiguous runs (the default), chunk 8, chunk 8 + guess. (4) Where the dense states batch
# (3468-3504 GB/s in session 25, the dense row 3641) loses: the same batch without states, initial only, final only.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
nvidia-smi --query-gpu=index,name,power.limit --format=csv | tee $OUT/gpus.txt
T=packages/cudnn-linear-attention/tests
timeout 120 python3 ci/gpu_shard_tests.py 14 110 $OUT/shards $T/test_conv1d_gpu.py $T/test_conv1d_fast_gpu.py $T/test_conv1d_detectors.py \
  $T/test_conv1d_overhead.py > $OUT/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" | tee -a $OUT/tests.log; tail -n 3 $OUT/tests.log; grep -h "^FAILED\|^ERROR" $OUT/shards/*.log | head -10
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "n = locate_from_guess(mCu, t0, n, n_seqs, pg, pa, pb)"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "n = pg"))
print("planted: the chunk's density guess taken as its sequence, unchecked")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 90 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_varlen_chunk_is_bitwise_the_default[8-bfloat16-4-True-silu-None-True-True]" ) > $OUT/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m2 "AssertionError\|passed\|failed" $OUT/planted.log
timeout 90 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd varlen1tok T16k D4096,fwd varlen64 T32k D4096" \
  --providers ours+graph,ours-chunk8+graph,ours-chunk8-guess+graph,copy --out linear_attention_conv1d_s26_chunkguess > $OUT/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench.log | head -5 | cut -d'|' -f1-6
timeout 90 python3 benchmarks/linear_attention.py conv1d --quick --cases "fwd T16k D4096,fwd batch B16 T16k D4096,fwd states B16 T16k D4096" \
  --providers ours+graph,ours-initonly+graph,ours-finalonly+graph,ours-final-sep+graph,ours-runs+graph,ours-chunk16+graph,copy --out linear_attention_conv1d_s26_states > $OUT/bench2.log 2>&1
echo "bench2 rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" $OUT/bench2.log | head -5 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s26_*.* $OUT/ 2>/dev/null
cd $OUT && tar czf shards.tgz shards && rm -rf shards
