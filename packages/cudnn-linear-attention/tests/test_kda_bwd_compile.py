"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) for the Kimi Delta Attention backward, one configuration (K = 128,
varlen, initial state and final-state gradient): each of the three kernels builds from the plan alone, really issues
WGMMA m64n64k16 bf16 -> fp32 (exact PTX counts), has no local-memory traffic (PTX, and a zero ptxas stack frame), carries
the cudnn symbol prefix (Rule 6), and the compile key does not depend on the token total or the sequence count
(Rule 4); and the ``dp_split_hilo`` switch (issue #7; the default since session 9) is a pass-3-only compile-key field
whose off state is session 6's pass 3 (WGMMA count). The plans here take the serial pass 1 (``parallel_pass1 = False``, the
default; the chunk-parallel opt-in's kernel is compiled in ``test_la_bwd_parallel_gpu.py``). About 35 s on 2 cores."""

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
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention backward")
    pytest.importorskip("cutlass")


def _plan(T, N, D=128, H=4):
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    g = TensorDesc.contiguous((T, H, D), "float32", "g")
    beta = TensorDesc.contiguous((T, H), "float32", "beta")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
    plan = KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu)
    plan.parallel_pass1 = False  # the serial passes 1-2 (KdaBwdStates, KdaBwdDStates; no fold)
    plan.grads_v2 = False  # pass 3 version 1 (KdaBwdGrads; version 2: test_la_bwd_p3.py)
    return plan


#: WGMMA m64n64k16 instructions in the PTX text at K = V = 128 (the 16-row-block loops are runtime loops: one copy each).
#: states: A, P (8 + 8) + U 4 + Wm 8 + Vn 8 + state 8; dstates: Wm^T 8 + dVn 12 + dS0 16;
#: grads: phase A 48 (dWm 16, dUb 8, dTm 16, X 4, dA 4), B1 32 (dP~ 8, per 64 channels dO S0 8 + block 4), B2 48 (per 64 channels 3 x 4 + dkd 8 + dKb 4),
#: plus, with ``dp_split_hilo`` (the default since session 9), 16 more: the lo halves of the two dP~ block products, 4 per
#: 64 channels in B1 and in B2 (144; 128 with ``dp_split_hilo = False``, session 6's pass 3).
_WGMMA_128 = {"KdaBwdStates": 44, "KdaBwdDStates": 36, "KdaBwdGrads": 144}
_WGMMA_128_GRADS_SINGLE = 128


def test_three_kernels_issue_wgmma_with_no_local_memory(tmp_path):
    from cudnn.linear_attention.kda.bwd_api import _parts, build_kernel

    plan = _plan(1000, 5)
    plan.check_support()
    key = plan.compile_key()
    assert key.head_dim == 128 and key.varlen and key.has_initial and key.has_dfinal
    assert _plan(123457, 77).compile_key() == key  # Rule 4: token total and sequence count are runtime arguments
    for part in _parts(key):
        d = tmp_path / part
        with keep_artifacts(d) as ptx:
            build_kernel(part, key)()  # directly, not through the cache: one compile, its PTX dumped
            text = ptx()
        names = kernel_symbols(text)
        assert len(names) == 1 and names[0].startswith("cudnn_"), names
        kind = next(k for k in _WGMMA_128 if k + "_" in names[0])
        assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128[kind], kind
        assert "ld.global.v4" in text and "fence.proxy.async.shared::cta" in text
        assert "ld.local" not in text and "st.local" not in text
        assert all(f == 0 for f in frame_sizes(d)), (part, frame_sizes(d))  # ptxas spilled nothing


def test_dp_split_hilo_is_a_pass3_key_field(tmp_path):
    """``plan.dp_split_hilo = False`` (the opt-out; True is the default since session 9) changes the compile key, but only
    pass 3's cache key (passes 1 and 2 are shared with the default plan); its pass 3 is session 6's, without the 16
    lo-half products (128 WGMMAs at K = 128 against the default's 144), still with no local memory."""
    from cudnn.linear_attention.kda.bwd_api import _parts, build_kernel

    on, off = _plan(1000, 5), _plan(1000, 5)
    off.dp_split_hilo = False
    for p in (on, off):
        p.check_support()
    kon, koff = on.compile_key(), off.compile_key()
    assert kon.dp_split_hilo and not koff.dp_split_hilo and kon != koff
    for part in _parts(kon):
        assert (on._cache_key(part, kon) == off._cache_key(part, koff)) == (part != "grads"), part
    d = tmp_path / "grads_single"
    with keep_artifacts(d) as ptx:
        build_kernel("grads", koff)()
        text = ptx()
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128_GRADS_SINGLE
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(d)), frame_sizes(d)
