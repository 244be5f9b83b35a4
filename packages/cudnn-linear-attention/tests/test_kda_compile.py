"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) for the Kimi Delta Attention forward: the kernel builds from the
plan alone, really issues WGMMA (m64n64k16 bf16 -> fp32) and 16-byte loads, never spills (PTX and cubin), carries
the cudnn symbol prefix (Rule 6), and a plan with another token total and sequence count is a kernel-cache hit
(Rule 4). One compile (K = 128, varlen, states, L2 norm), about 12 s on one core."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


def _varlen_plan(T, N):
    return compile_varlen_plan(KDA, T, N)


def test_varlen_kernel_issues_wgmma_never_spills_and_is_one_artifact_for_every_batch(tmp_path):
    from cudnn.kernel_cache import kernel_cache

    plan = _varlen_plan(1000, 5)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.kda", plan.compile_key()), None)  # build it here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_"), names
    # K = 128: 4 row blocks x (8 (K' K'_I^T) + 8 (Q' K'_I^T)) + 4 (U) + 8 (Wm) + 8 (Vn) + 12 (O) + 8 (S) = 104.
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 104
    assert "ld.global.v4" in text  # q, k, v rows by 16-byte loads
    assert "fence.proxy.async.shared::cta" in text  # generic-proxy smem writes published to WGMMA
    assert ".local" not in text
    frames = frame_sizes(tmp_path)
    # ptxas spills at most one 8-byte slot: none with the DSL's ptxas on the CI machine (241 registers), 8 bytes
    # with the GPU host's CUDA 13.0 toolchain (seen 2026-11-29); anything larger is a register-pressure regression
    assert frames and all(f <= 8 for f in frames), frames

    misses = kernel_cache.stats.misses
    other = _varlen_plan(123457, 77)  # another token total and sequence count: the same artifact
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_kernel is plan._compiled_kernel
