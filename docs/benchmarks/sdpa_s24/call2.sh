#!/usr/bin/env bash
# Session 24, call 2 (~9 min): issue #4 on unchanged forward defaults (their PTX unchanged since session 22): session
# 21's final-verification call -- the forward GPU suite in 14 shards (correctness, plan options, detectors, engine),
# the host-overhead file, and the full forward grid against FA4 and torch's cuDNN backend (settled, the fastest of 2
# interleaved rounds).
GRID_ROUNDS=2 GRID_OUT=sdpa_fwd_s24 bash docs/benchmarks/sdpa_s21/call4.sh
