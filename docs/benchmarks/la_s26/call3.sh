#!/usr/bin/env bash
# Session 26, call 3 (~3 min): call 2's one failure, test_conv1d_gpu.py::test_tvm_ffi_launch_route_matches_the_dsl_entry_bit_for_bit
# (varlen, both state tensors: the final_at change leaves that plan's device code as it was). (1) route_probe.py: both
# routes, 4 executes each, where y and the final states differ and how many NaNs. (2) The test 4 times on this tree and
# 4 times on the last commit's tree (.s26_head.tgz: git archive HEAD).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
for s in 0 1; do timeout 60 python3 docs/benchmarks/la_s26/route_probe.py $s > $OUT/probe$s.log 2>&1; echo "probe $s rc=$?"; grep -v "^route" $OUT/probe$s.log | head -16; done
TEST="packages/cudnn-linear-attention/tests/test_conv1d_gpu.py::test_tvm_ffi_launch_route_matches_the_dsl_entry_bit_for_bit"
for i in 1 2 3 4; do timeout 60 python3 -m pytest -q -p no:cacheprovider "$TEST" 2>&1 | tail -n 1; done
echo "head tree t=$(( $(date +%s) - T0 ))"
rm -rf /tmp/head && mkdir /tmp/head && tar xzf .s26_head.tgz -C /tmp/head
( cd /tmp/head && source ci/gpu_env.sh && for i in 1 2 3 4; do timeout 60 python3 -m pytest -q -p no:cacheprovider "$TEST" 2>&1 | tail -n 1; done )
echo "t=$(( $(date +%s) - T0 ))"
