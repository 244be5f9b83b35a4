#!/usr/bin/env bash
# Session 23, call 4 (~4.5 min, the device time left): the rest of call 3's test list, cut by its timeout after 57 passes
# (test_parallel_state_out.py, the KDA / GDN parallel GPU files and part of the schedule-op file): the schedule-op file,
# the KDA / GDN detectors and the graph engines, with the fused rule counting the declared sequences.
# Result: 46 passed, 3 failed -- the cache-hit detectors (a batch with more sequences crossed the trial rule and
# compiled the fused kernel at call time); the trial rule was reverted. Log: call4/tests4.log.
set -u
T0=$(date +%s)
source ci/gpu_env.sh
T=packages/cudnn-linear-attention/tests
timeout 265 python3 -m pytest -q -p no:cacheprovider -rf $T/test_delta_rule_schedule_op.py $T/test_kda_detectors.py $T/test_gdn_detectors.py $T/test_graph_engines.py > $OUT/tests4.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 8 $OUT/tests4.log
