#!/usr/bin/env bash
# Session 22, call 5 (~5 min): the final code (defaults unchanged since session 21: pinned_desc is opt-in, and the default
# plans' PTX is the same as before this session's change) through session 21's call 4: the forward GPU suite in 14
# shards (correctness, plan options, detectors, engine), the host-overhead tests, and the full forward grid against FA4
# and torch's cuDNN backend (settled, the fastest of 2 interleaved rounds).
GRID_ROUNDS=2 GRID_OUT=sdpa_fwd_s22 bash docs/benchmarks/sdpa_s21/call4.sh
