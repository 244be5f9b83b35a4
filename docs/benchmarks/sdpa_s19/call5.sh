#!/usr/bin/env bash
# Session 19, call 5 (~9 min): (1) the persistent grid's GPU tests (with the new d128-pd case: pack1 + dsk on pers);
# (2) A/B on the d128 causal rows, settled, 3 interleaved rounds: ours (pers since call 4) / ours-perspd (+ pack1 + dsk)
# / ours-pd (pack1 + dsk without pers) / fa4; (3) d64 causal s1k / s2k: ours / ours-pers / fa4, 3 rounds (pers there
# measured 1.02x in call 2); (4) the d256 / d192 rows against the peers, 2 rounds (issue #6's >= 1.2x at d256).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p $OUT/r
V=packages/cudnn-sdpa/tests/test_sdpa_bwd_variants.py
timeout 150 python3 ci/gpu_shard_tests.py 4 140 $OUT/r/shards $V::test_persistent_grads_equal_the_default_plans \
  $V::test_persistent_counter_is_reset_every_call_and_under_graph_replay > $OUT/r/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/tests.log
cat $OUT/r/tests.log; grep -h "^FAILED\|^ERROR" $OUT/r/shards/*.log | head -20
timeout 200 python3 benchmarks/sdpa_bwd.py --only="d128 s1k b16 causal|d128 s2k b8 causal|d128 s4k b4 causal|d128 s8k b2 causal|d128 s16k b1 causal" \
  --providers=ours,ours-perspd,ours-pd,fa4 --rounds=3 --out=sdpa_bwd_s19_perspd > $OUT/r/b_pd.log 2>&1
echo "pd rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_pd.log
grep "^|\|rc=" $OUT/r/b_pd.log | tail -n 8
timeout 80 python3 benchmarks/sdpa_bwd.py --only="d64 s1k b16 causal|d64 s2k b8 causal" --providers=ours,ours-pers,fa4 --rounds=3 \
  --out=sdpa_bwd_s19_d64c > $OUT/r/b_d64c.log 2>&1
echo "d64c rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_d64c.log
grep "^|\|rc=" $OUT/r/b_d64c.log | tail -n 5
timeout $(( 580 - ($(date +%s) - T0) )) python3 benchmarks/sdpa_bwd.py --only="d256|d192" --providers=ours,fa4,torch-cudnn --rounds=2 \
  --out=sdpa_bwd_s19_grid_b > $OUT/r/b_bwd_b.log 2>&1
echo "bwd_b rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/r/b_bwd_b.log
grep "^|\|rc=" $OUT/r/b_bwd_b.log | tail -n 11
cp docs/benchmarks/sdpa_bwd_s19_perspd.* docs/benchmarks/sdpa_bwd_s19_d64c.* docs/benchmarks/sdpa_bwd_s19_grid_b.* $OUT/r/ 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
