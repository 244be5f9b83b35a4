"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the three causal_conv1d kernels build from the plan alone,
carry the cudnn symbol prefix (Rule 6), really use 16-byte vector loads and stores, and a second plan
with another token total is a kernel-cache hit (Rule 4); the forward's opt-in ``prefetch`` ring builds with 16-byte
cp.async copies, 16-byte stores and no stack frame. Kept small: four compiles, about 12 s."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols
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
    assert "cp.async" not in text  # the default kernel keeps its register double buffer (the prefetch ring is opt-in)

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


def test_tvm_ffi_launch_route_builds_a_separate_positional_entry():
    """``plan.tvm_ffi = True``: the update and forward kernels compile with ``--enable-tvm-ffi`` into their own cache
    entries, and execute() gets the raw positional ``tvm_ffi.Function`` (ints and a raw stream handle, no DSL
    argument conversion). The default route is the DSL's own entry (no ``_entry``) unless ``CUDNN_LA_TVM_FFI=1``."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    from cudnn.linear_attention.conv1d.api import CausalConv1dUpdate

    def upd():
        return CausalConv1dUpdate(
            TensorDesc.contiguous((8, 256), "bfloat16", "x"),
            TensorDesc.contiguous((16, 256, 3), "bfloat16", "conv_state"),
            TensorDesc.contiguous((256, 4), "bfloat16", "weight"),
            TensorDesc.contiguous((8, 256), "bfloat16", "out"),
            TensorDesc.contiguous((256,), "bfloat16", "bias"),
            activation="silu",
        )

    plain, fast = upd(), upd()
    plain.tvm_ffi, fast.tvm_ffi = False, True
    plain.compile()
    fast.compile()
    assert plain._entry is None
    assert fast._compiled_kernel is not plain._compiled_kernel
    assert isinstance(fast._entry, tvm_ffi.Function)
    assert fast._entry is not fast._compiled_kernel  # the raw function, not the DSL wrapper

    fwd = _fwd_plan(1000, 3)
    fwd.tvm_ffi = True
    fwd.compile()
    assert fwd._entry is not None and fwd._entry is not fwd._compiled_kernel


def test_forward_prefetch_ring_compiles_to_16_byte_accesses_without_a_frame(tmp_path):
    """``plan.prefetch = 16`` (opt-in): the ring kernel is its own ``cudnn_``-prefixed symbol, every global access of the
    dense bf16 plan is 16 bytes wide (cp.async of 16 bytes for x, ``ld.global.v4`` for the W - 1 halo tokens and the
    weights, ``st.global.v4`` for y), 2 * 16 copies per thread (16 prologue, 16 refills), and ptxas keeps it in
    registers: frame 0 (no local memory)."""
    import re

    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((2, 1000, 512), "bfloat16", "x")
    plan = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((512,), "bfloat16", "bias"), activation="silu")
    plan.prefetch = 16
    plan.check_support()
    assert plan.compile_key().prefetch == 16
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kernel_prefetch" in names[0], names
    copies = re.findall(r"cp\.async\.(\w+)\.shared\.global \[[^\]]+\], \[[^\]]+\], (\d+)", text)
    assert len(copies) == 32 and set(copies) == {("cg", "16")}, copies[:4]
    accesses = set(re.findall(r"\b(ld|st)\.global((?:\.\w+)*)", text))
    assert accesses == {("ld", ".v4.b32"), ("st", ".v4.b32")}, accesses
    assert "cp.async.wait_group" in text and "bar.sync" not in text  # each thread reads only its own slots
    assert ".local" not in text
    sizes = frame_sizes(tmp_path)
    assert sizes and all(s == 0 for s in sizes), sizes
