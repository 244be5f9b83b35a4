#!/usr/bin/env bash
# (It ran with the providers ours-seeded+graph and ours-runs-pfinit+graph, since renamed ours-noseed / ours-seed-elem and removed.)
# Session 27, call 1 (~5 min): issue #7, where causal_conv1d's session-26 states rows (512 dense sequences of 32 tokens:
# 2654.6 GB/s kernel-only; 256 varlen sequences: 2845.5) lose against the dense rows (3.6 TB/s). (1) Kernel-only
# dissection, 3 interleaved rounds: both states (ours+graph), initial states only, final states only, and the same
# batches without states (the new "fwd batch B512" / "fwd varlen256" cases); chunk 8 and contiguous runs beside the
# default; ``seeded_starts`` (new, opt-in: a dense chunk that starts a sequence takes its initial state as the halo).
# (2) Nsight Compute of kernel_runs on the B512 batch with and without states and on varlen256 with states. (3) The
# seeded-starts bitwise test, and the same test against a planted violation (the halo's initial-state entries reversed).
set -u
T0=$(date +%s)
source ci/gpu_env.sh
mkdir -p /tmp/keep
nvidia-smi --query-gpu=index,name,power.limit --format=csv > /tmp/keep/gpus.txt
timeout 220 python3 benchmarks/linear_attention.py conv1d --quick \
  --cases "fwd states B512 T16k D4096,fwd batch B512 T16k D4096,fwd states varlen256 T16k D4096,fwd varlen256 T16k D4096" \
  --providers ours+graph,ours-seeded+graph,ours-runs-pfinit+graph,ours-initonly+graph,ours-finalonly+graph,ours-chunk8+graph,ours-runs+graph,copy --out linear_attention_conv1d_s27_states > /tmp/keep/bench.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; grep "^|" /tmp/keep/bench.log | head -9 | cut -d'|' -f1-8
cp docs/benchmarks/linear_attention_conv1d_s27_states.* /tmp/keep/ 2>/dev/null
S="python3 docs/benchmarks/la_s25/conv_probe.py --cases"
timeout 150 ncu --clock-control none -k regex:kernel_runs --launch-skip 0 \
  --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__inst_executed.sum,dram__bytes.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats --csv --page details \
  $S "fwd states B512 T16k D4096,fwd batch B512 T16k D4096,fwd states varlen256 T16k D4096" > /tmp/keep/ncu.csv 2> /tmp/keep/ncu.err
echo "ncu rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/ncu.err; wc -l /tmp/keep/ncu.csv
grep -E '"(Duration|DRAM Throughput|Executed Instructions|Issue Slots Busy|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Registers Per Thread)"' /tmp/keep/ncu.csv | cut -d, -f1,5,13- | head -60
grep -E 'stalled|inst_executed.sum|dram__bytes|sectors|requests' /tmp/keep/ncu.csv | cut -d, -f1,5,13- | head -120
T=packages/cudnn-linear-attention/tests
timeout 130 python3 -m pytest -q -p no:cacheprovider $T/test_conv1d_fast_gpu.py -k "seeded or variants" > /tmp/keep/tests.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 3 /tmp/keep/tests.log
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r packages shared ci benchmarks /tmp/planted/
python3 - <<'PY'
p = "/tmp/planted/packages/cudnn-linear-attention/src/cudnn/linear_attention/conv1d/fwd_kernel.py"
s = open(p).read()
old = "halo[i, k, 0] = mInit[nh, dv * VEC + i, k]"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "halo[i, k, 0] = mInit[nh, dv * VEC + i, W - 2 - k]"))
print("planted: the seeded halo takes the initial state's entries reversed")
PY
( cd /tmp/planted && source ci/gpu_env.sh && CUDNN_KERNEL_CACHE=0 timeout 75 python3 -m pytest -q -p no:cacheprovider -x \
  "packages/cudnn-linear-attention/tests/test_conv1d_fast_gpu.py::test_forward_seeded_starts_are_bitwise_the_default[bfloat16-4-8-True]" ) > /tmp/keep/planted.log 2>&1
echo "planted rc=$? (1 = the test failed, as it must) t=$(( $(date +%s) - T0 ))"; grep -m3 "AssertionError\|passed\|failed" /tmp/keep/planted.log
tar czf $OUT/call1.tgz -C /tmp/keep .
