"""Metadata-only checks of the Kimi Delta Attention backward adapter (CPU, no compile): what it accepts, what it
declines (NotImplementedError naming the tensor, Rule 2) or rejects (ValueError), and its workspace size (R2)."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention backward")


def _plan(T=200, N=3, D=64, H=2, Hk=None, g_shape=None, dg_shape=None, l2norm=False, initial=True, dinitial=True):
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    Hk = H if Hk is None else Hk
    qk = TensorDesc.contiguous((T, Hk, D), "bfloat16", "q")
    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    g = TensorDesc.contiguous(g_shape or (T, H, D), "float32", "g")
    dg = TensorDesc.contiguous(dg_shape or (T, H, D), "float32", "dg")
    beta = TensorDesc.contiguous((T, H), "float32", "beta")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
    return KimiDeltaAttentionBwdSm90(
        qk,
        qk,
        x,
        g,
        beta,
        x,
        qk,
        qk,
        x,
        dg,
        beta,
        use_qk_l2norm_in_kernel=l2norm,
        initial_state=st if initial else None,
        dinitial_state=st if dinitial else None,
        dfinal_state=st,
        cu_seqlens=cu,
    )


def test_accepts_per_channel_gate_and_sizes_workspace():
    from cudnn.linear_attention.kda.bwd_api import dstates_workspace_bytes, forward_workspace_bytes, workspace_bytes

    plan = _plan()
    assert plan.check_support()
    slots = 3 + 200 // 64 + 1
    expect = 2 * slots * 2 * 64 * 64 * 2 + 2 * 200 * 2 * 64 * 2 + 2 * slots * 2 * 64 * 64 * 2
    assert workspace_bytes(200, 3, 2, 64) == expect
    assert plan.scratch_workspace_bytes() == expect + forward_workspace_bytes(200, 3, 2, 64) + dstates_workspace_bytes(200, 3, 2, 64)  # the default tails
    plan.parallel_pass2 = False  # without the chunk-parallel pass 2: the forward's arrays only
    assert plan.scratch_workspace_bytes() == expect + forward_workspace_bytes(200, 3, 2, 64)
    plan.parallel_pass1 = False  # the serial pass 1: the backward's own arrays only
    assert plan.scratch_workspace_bytes() == expect


def test_dg_must_be_per_channel():
    with pytest.raises(ValueError, match="dg"):
        _plan(dg_shape=(200, 2)).check_support()


def test_scalar_gate_is_not_kda():
    with pytest.raises((ValueError, NotImplementedError), match="g"):
        _plan(g_shape=(200, 2), dg_shape=(200, 2)).check_support()


def test_declines_l2norm_and_gva_in_this_version():
    with pytest.raises(NotImplementedError, match="l2norm"):
        _plan(l2norm=True).check_support()
    with pytest.raises(NotImplementedError, match="GVA"):
        _plan(H=4, Hk=2).check_support()


def test_dinitial_state_required_exactly_with_initial_state():
    with pytest.raises(ValueError, match="dinitial_state"):
        _plan(dinitial=False).check_support()
