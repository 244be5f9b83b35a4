"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) for the Gated DeltaNet backward (three kernels): each builds from the
plan alone, really issues WGMMA m64n64k16 bf16 -> fp32 (exact counts at K = 128), has no local-memory traffic in PTX,
carries the cudnn symbol prefix (Rule 6), and a plan with another token total and sequence count is a cache hit for
all three (Rule 4: one artifact for every token total). About 25 s on 2 cores."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import keep_artifacts, kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _delta_rule_cases import frame_sizes  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net backward")
    pytest.importorskip("cutlass")


def _plan(T, N, D=128, H=4, initial=True, l2norm=False):
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    gate = TensorDesc.contiguous((T, H), "float32", "gate")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state") if initial else None
    plan = GatedDeltaNetBwdSm90(
        x,
        x,
        x,
        gate,
        gate,
        x,
        x,
        x,
        x,
        gate,
        gate,
        use_qk_l2norm_in_kernel=l2norm,
        initial_state=st,
        dinitial_state=st,
        dfinal_state=st,
        cu_seqlens=TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens"),
    )
    plan.parallel_pass1 = False  # the serial pass 1 (the chunk-parallel default's kernels: test_la_bwd_parallel_gpu.py)
    plan.grads_v2 = False  # pass 3 version 1 (GdnBwdGrads; version 2, the default: test_la_bwd_p3_gdn.py)
    return plan


_FRAME_BUDGET = {"states": 0, "dstates": 64, "grads": 1024}

#: WGMMA m64n64k16 instructions per kernel at K = V = 128 (PTX text; see each kernel's product list).
_WGMMA_128 = {"GdnBwdStates": 36, "GdnBwdDStates": 44, "GdnBwdGrads": 136}  # store_tm (default): no K K^T in passes 2, 3


def test_three_kernels_issue_wgmma_and_are_one_artifact_for_every_batch(tmp_path):
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.gdn.bwd_api import FAMILY, build_kernel

    plan = _plan(1000, 5)
    plan.check_support()
    key = plan.compile_key()
    plan.compile()  # before keep_artifacts: a cache-miss compile after it dumps PTX into the working directory
    for part in ("states", "dstates", "grads"):
        d = tmp_path / part
        with keep_artifacts(d) as ptx:
            build_kernel(part, key)()
            text = ptx()
        names = kernel_symbols(text)
        assert len(names) == 1 and names[0].startswith("cudnn_"), names
        kind = next(k for k in _WGMMA_128 if k + "_" in names[0])
        assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128[kind], kind
        assert "ld.global.v4" in text and "fence.proxy.async.shared::cta" in text
        assert "ld.local" not in text and "st.local" not in text
        # ptxas stack frame (spill) budget, measured at K = 128 with store_tm: pass 1 none, pass 2 8 bytes, pass 3 640 bytes
        # (24 with store_tm=False); a growth past these budgets is a register-pressure regression.
        assert all(f <= _FRAME_BUDGET[part] for f in frame_sizes(d)), (part, frame_sizes(d))

    misses = kernel_cache.stats.misses
    other = _plan(123457, 77)  # another token total and sequence count: the same three artifacts
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert all(a is b for a, b in zip(other._compiled_kernel, plan._compiled_kernel, strict=True))
    assert all(
        (FAMILY, (part, plan._cache_key(part, key))) in kernel_cache._entries for part in ("states", "dstates", "grads")
    )  # one entry per pass, keyed by plan only


def test_gva_plan_adds_the_qk_reduction_kernel(tmp_path):
    """GVA (q/k heads < v heads): a fourth launch sums the per-value-head dq / dk partials (and applies the L2-norm chain
    rule there); it compiles with the cudnn prefix, and the plan's workspace grows by the two fp32 partials."""
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90, _parts, build_kernel, dstates_workspace_bytes, forward_workspace_bytes, workspace_bytes

    x = TensorDesc.contiguous((100, 4, 64), "bfloat16", "x")
    gate = TensorDesc.contiguous((100, 4), "float32", "gate")
    qk = TensorDesc.contiguous((100, 2, 64), "bfloat16", "q")
    plan = GatedDeltaNetBwdSm90(qk, qk, x, gate, gate, x, qk, qk, x, gate, gate, use_qk_l2norm_in_kernel=True)
    plan.check_support()
    key = plan.compile_key()
    assert key.gva and _parts(key)[-1] == "qk_reduce"
    base = workspace_bytes(100, 1, 4, 64) + 2 * 100 * 4 * 64 * 4
    tails = forward_workspace_bytes(100, 1, 4, 64) + dstates_workspace_bytes(100, 1, 4, 64)  # the default chunk-parallel passes 1-2
    assert plan.scratch_workspace_bytes() == base + tails
    plan.parallel_pass1 = False  # the serial passes 1-2: no tails (and the serial kernels compiled below)
    assert plan.scratch_workspace_bytes() == base
    with keep_artifacts(tmp_path) as ptx:
        build_kernel("qk_reduce", key)()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "qk_reduce" in names[0], names
    assert "shfl.sync.bfly" in text and "ld.local" not in text


def test_l2norm_variant_compiles_and_is_another_artifact(tmp_path):
    """The L2-norm chain rule (pass 3 keeps both dq / dk halves live) at K = 128: WGMMA count unchanged, no local
    memory in PTX; passes 1 and 2 compile with the normalising loaders."""
    from cudnn.linear_attention.gdn.bwd_api import build_kernel

    plan = _plan(1000, 5, l2norm=True)
    plan.check_support()
    key = plan.compile_key()
    assert key.l2norm and key != _plan(1000, 5).compile_key()
    with keep_artifacts(tmp_path) as ptx:
        build_kernel("grads", key)()
        text = ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128["GdnBwdGrads"]
    assert "ld.local" not in text and "st.local" not in text
    assert "shfl.sync.bfly" in text  # the row norm: a pair of threads per row


def test_recomputed_tm_variant_compiles(tmp_path):
    """``store_tm=False`` (passes 2 and 3 recompute K K^T and the solve): another key; pass 2 has 8 more WGMMAs (K K^T) at K = 128."""
    from cudnn.linear_attention.gdn.bwd_api import build_kernel

    plan = _plan(1000, 5)
    plan.store_tm = False
    plan.check_support()
    key = plan.compile_key()
    assert not key.store_tm
    with keep_artifacts(tmp_path) as ptx:
        build_kernel("dstates", key)()
        text = ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128["GdnBwdDStates"] + 8
