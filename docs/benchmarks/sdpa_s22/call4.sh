#!/usr/bin/env bash
# Session 22, call 4 (~6 min): the final code, as session 21's call 4 (the forward GPU suite in 14 shards, the
# host-overhead tests, the full forward grid against FA4 and torch's cuDNN backend), the grid the fastest of 3 rounds.
GRID_ROUNDS=3 GRID_OUT=sdpa_fwd_s22 bash docs/benchmarks/sdpa_s21/call4.sh
