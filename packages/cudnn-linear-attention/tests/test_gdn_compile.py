"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) for the Gated DeltaNet forward: the kernel builds from the plan
alone, really issues WGMMA (m64n64k16 bf16 -> fp32) and 16-byte loads, never spills (PTX and cubin), carries the
cudnn symbol prefix (Rule 6), and a plan with another token total and sequence count (varlen) or another
batch and length (dense) is a kernel-cache hit (Rule 4). Two compiles, a few seconds each."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(GDN)
    pytest.importorskip("cutlass")


def _varlen_plan(T, N):
    return compile_varlen_plan(GDN, T, N)


def _dense_plan(B, L, D=64, H=2):
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    x = TensorDesc.contiguous((B, L, H, D), "bfloat16", "x")
    gate = TensorDesc.contiguous((B, L, H), "bfloat16", "beta")
    return GatedDeltaNetFwdSm90(x, x, x, TensorDesc.contiguous((B, L, H), "float32", "g"), gate, x)


def test_varlen_kernel_issues_wgmma_and_is_one_artifact_for_every_batch(tmp_path):
    from cudnn.kernel_cache import kernel_cache

    plan = _varlen_plan(1000, 5)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.gdn", plan.compile_key()), None)  # build it here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_"), names
    # Every product is m64n64k16 (K = 128: 8 + 8 (K K^T, Q K^T) + 4 (U) + 8 (Wm) + 8 (Vn) + 12 (O) + 8 (S) = 56).
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 56
    assert "ld.global.v4" in text  # q, k, v rows by 16-byte loads
    assert "wgmma.fence" in text and "wgmma.wait_group" in text
    assert "fence.proxy.async.shared::cta" in text  # generic-proxy smem writes published to WGMMA
    assert ".local" not in text
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), frames  # ptxas spilled nothing (254 registers, measured)

    misses = kernel_cache.stats.misses
    other = _varlen_plan(123457, 77)  # another token total and sequence count: the same artifact
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_kernel is plan._compiled_kernel


def test_dense_head_dim_64_compiles_and_rebinds_batch_and_length(tmp_path):
    from cudnn.kernel_cache import kernel_cache

    plan = _dense_plan(2, 300)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.gdn", plan.compile_key()), None)
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    assert all(n.startswith("cudnn_") for n in kernel_symbols(text))
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in text
    misses = kernel_cache.stats.misses
    other = _dense_plan(7, 4099)
    other.compile()
    assert kernel_cache.stats.misses == misses and other._compiled_kernel is plan._compiled_kernel

    column = _dense_plan(2, 300)  # the plain one-thread-per-column triangular solve: another artifact
    column.blocked_solve = False
    column.compile()
    assert kernel_cache.stats.misses == misses + 1 and column._compiled_kernel is not plan._compiled_kernel
