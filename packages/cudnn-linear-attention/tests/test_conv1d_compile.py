"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the three causal_conv1d kernels build from the plan alone,
carry the cudnn symbol prefix (Rule 6), really use 16-byte vector loads and stores, and a second plan
with another token total is a kernel-cache hit (Rule 4). Kept small: three compiles, about 10 s."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import keep_artifacts, kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.compile_only


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")
    pytest.importorskip("cutlass")


def _fwd_plan(T, N, **kw):
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((T, 512), "bfloat16", "x")
    st = TensorDesc.contiguous((N, 512, 3), "bfloat16", "states")
    return CausalConv1d(
        x,
        TensorDesc.contiguous((512, 4), "bfloat16", "weight"),
        x,
        TensorDesc.contiguous((512,), "bfloat16", "bias"),
        TensorDesc.contiguous((N + 1,), "int32", "cu"),
        st,
        st,
        "silu",
        **kw,
    )


def test_forward_compiles_with_prefix_and_vector_access(tmp_path):
    from cudnn.kernel_cache import kernel_cache

    plan = _fwd_plan(1000, 5)
    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)  # build it here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 2 and all(n.startswith("cudnn_") for n in names), names
    assert "ld.global.v4" in text and "st.global.v4" in text
    assert ".local" not in text  # the register window never spills to local memory

    misses = kernel_cache.stats.misses
    other = _fwd_plan(123457, 77)  # another token total and sequence count: same artifact
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_kernel is plan._compiled_kernel


def test_backward_and_update_compile(tmp_path):
    from cudnn.linear_attention.conv1d.api import CausalConv1dBackward, CausalConv1dUpdate

    x = TensorDesc.contiguous((300, 256), "bfloat16", "x")
    w = TensorDesc.contiguous((256, 3), "float32", "weight")
    st = TensorDesc.contiguous((4, 256, 2), "bfloat16", "states")
    bwd = CausalConv1dBackward(
        x,
        w,
        x,
        x,
        w,
        TensorDesc.contiguous((256,), "float32"),
        TensorDesc.contiguous((256,), "float32"),
        TensorDesc.contiguous((5,), "int32", "cu"),
        st,
        st,
        "silu",
    )
    upd = CausalConv1dUpdate(
        TensorDesc.contiguous((8, 256), "bfloat16", "x"),
        TensorDesc.contiguous((16, 256, 2), "float32", "conv_state"),
        w,
        TensorDesc.contiguous((8, 256), "bfloat16", "out"),
        conv_state_indices=TensorDesc.contiguous((8,), "int32"),
        activation=None,
    )
    with keep_artifacts(tmp_path) as ptx:
        bwd.compile()
        upd.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert names and all(n.startswith("cudnn_") for n in names), names
