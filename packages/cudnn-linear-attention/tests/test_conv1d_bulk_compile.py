"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the forward's bulk-copy variant (``plan.bulk_stages`` > 0,
fwd_bulk_kernel.py): it builds from the plan alone under the cudnn symbol prefix (Rule 6), streams x by 1D
``cp.async.bulk`` copies completing on transaction mbarriers, reads shared memory with 16-byte vector loads and writes y
with 16-byte stores; its plan sizes the CTAs per SM from the ring; options it does not serve are ValueErrors at plan time
(never a silent fallback); the default plan stays the register kernel. Kept small: two compiles."""

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


def _plan(T=1000, N=5, D=512, varlen=True, states=True, bias=True, dtype="bfloat16", activation="silu"):
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((T, D), dtype, "x")
    st = TensorDesc.contiguous((N, D, 3), dtype, "states") if states else None
    return CausalConv1d(
        x,
        TensorDesc.contiguous((D, 4), dtype, "weight"),
        x,
        TensorDesc.contiguous((D,), dtype, "bias") if bias else None,
        TensorDesc.contiguous((N + 1,), "int32", "cu") if varlen else None,
        st,
        st,
        activation,
    )


def _build(plan, tmp_path):
    from cudnn.kernel_cache import kernel_cache

    plan.check_support()
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)  # build it here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        return ptx()


def _body(text, part):
    names = kernel_symbols(text)
    body = text[text.index(".entry " + next(n for n in names if part in n)) :]
    return body[: body.find(".entry ", 1)] if ".entry " in body[1:] else body


def test_bulk_variant_compiles_with_bulk_copies_and_mbarriers(tmp_path):
    """Varlen, initial and final states, bias, SiLU, 4 stages x 8 rows: ``kernel_bulk`` (cudnn prefix) next to the shared
    final-states kernel; x by 1D bulk copies on transaction mbarriers, 16-byte shared loads, 16-byte y stores, no local
    memory; 3 CTAs per SM (64 KB ring each) and a one-wave grid of 3 x 132."""
    plan = _plan()
    plan.check_support()
    plan.bulk_stages, plan.bulk_group = 4, 8
    key = plan.compile_key()
    assert (key.bulk_stages, key.group, key.min_ctas_per_sm, key.grid_ctas) == (4, 8, 3, 396), key
    text = _build(plan, tmp_path)
    names = kernel_symbols(text)
    assert len(names) == 2 and all(n.startswith("cudnn_") for n in names), names
    body = _body(text, "kernel_bulk")
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in body
    assert "mbarrier.init" in body and "mbarrier.try_wait.parity" in body
    assert "expect_tx" in body and "mbarrier.arrive" in body
    assert "ld.shared.v4" in body and "st.global.v4" in body and "ld.global.v4" in body  # ring reads, y stores, halo
    assert ".local" not in body


def test_bulk_variant_dense_no_states_and_grid_sizing(tmp_path):
    """Dense fp16, no bias, no activation, no states, 2 stages x 16 rows (64 KB: 3 CTAs per SM); an explicit grid_ctas
    is kept; 4 x 4 rows (32 KB) keeps 4 CTAs per SM; the default plan is unchanged (no bulk)."""
    plan = _plan(T=4096, N=1, D=1024, varlen=False, states=False, bias=False, dtype="float16", activation=None)
    plan.check_support()
    assert plan.compile_key().bulk_stages == 0 and plan.compile_key().min_ctas_per_sm == 4  # default: register kernel
    plan.bulk_stages, plan.bulk_group = 4, 4
    assert (plan.compile_key().min_ctas_per_sm, plan.compile_key().grid_ctas) == (4, 528)
    plan.bulk_stages, plan.bulk_group = 2, 16
    plan.grid_ctas = 300
    assert (plan.compile_key().min_ctas_per_sm, plan.compile_key().grid_ctas) == (3, 300)
    text = _build(plan, tmp_path)
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kernel_bulk" in names[0], names
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in text and "st.global.v4" in text


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"bulk_stages": 1}, "bulk_stages=1"),
        ({"bulk_stages": -2}, "bulk_stages=-2"),
        ({"bulk_stages": 2.0}, "bulk_stages=2.0"),
        ({"bulk_stages": 4, "bulk_group": 3}, "bulk_group=3"),
        ({"bulk_stages": 4, "bulk_group": 64}, "bulk_group=64"),
        ({"bulk_stages": 16, "bulk_group": 32}, "exceeds one CTA"),
        ({"bulk_stages": 4, "grid_ctas": 0}, "needs the run grid"),
        ({"bulk_stages": 4, "l2_prefetch": 2}, "does not serve l2_prefetch=2"),
    ],
)
def test_bulk_options_it_does_not_serve_are_value_errors(opts, match):
    """Plan-time rejections, before any build: the variant is never replaced by another kernel silently."""
    plan = _plan()
    for k, v in opts.items():
        setattr(plan, k, v)
    plan.check_support()
    with pytest.raises(ValueError, match=match):
        plan.compile()
    assert plan._compiled_kernel is None
