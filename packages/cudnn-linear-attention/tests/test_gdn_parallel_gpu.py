"""GPU tier of the chunk-parallel Gated DeltaNet forward (``schedule="parallel"``): correctness against the fp32
token-by-token recurrence, and against the serial kernel: bitwise with the one-warpgroup prep kernel
(``gdn-prep-base``: every operand formed as the serial kernel forms it; the default state pass and output kernel), by
the FlashAttention rule with the default restructured prep (``test_gdn_prep_tc_gpu.py``, ``test_delta_rule_schedule_op.py``);
fresh random inputs, poisoned outputs; the execute path's no-sync / no-allocation / graph-capture properties with a
caller workspace. Bodies and the tolerance rule: ``_parallel_cases.py``."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
import _parallel_cases as cases  # noqa: E402
from _delta_rule_cases import GDN  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")


@pytest.mark.parametrize("D, l2norm, regime", [(64, False, "weak"), (128, True, "weak")])
def test_varlen_matches_recurrence(D, l2norm, regime):
    cases.check_varlen_matches_recurrence(GDN, D, l2norm, regime)


@pytest.mark.parametrize("D, l2norm, regime", [(64, False, "weak"), (128, True, "weak")])
def test_bitwise_equal_to_serial_schedule_with_the_one_warpgroup_prep(D, l2norm, regime):
    cases.check_bitwise_equal_to_serial(GDN, D, l2norm, regime, variant="gdn-prep-base")


def test_dense_batch_and_thd_without_initial_state():
    cases.check_dense_batch_and_thd_without_initial_state(GDN)


def test_one_plan_rebinds_new_totals_with_a_workspace_per_batch():
    cases.check_one_plan_rebinds_new_totals(GDN)


@pytest.mark.detector
def test_execute_never_syncs_or_allocates_and_replays_under_capture():
    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(GDN)


@pytest.mark.parametrize(
    "opts, D, g_dtype",
    [
        ({"parallel_state_stages": 3}, 128, torch.float32),
        ({"parallel_prefetch": True}, 128, torch.float32),
        ({"parallel_prefetch": True, "parallel_state_stages": 3}, 64, torch.bfloat16),
        ({"parallel_prep_two_per_sm": True}, 128, torch.float32),
        ({"parallel_prep_two_per_sm": True}, 64, torch.float32),
        ({"parallel_prefetch": True, "parallel_state_stages": 3, "parallel_prep_two_per_sm": True}, 128, torch.float32),
    ],
    ids=["stages3", "pf", "pf-stages3-d64-bf16g", "two-d128", "two-d64", "all-d128"],
)
def test_tuning_options_are_bitwise_the_default_parallel_schedule(opts, D, g_dtype):
    """The knobs change only when and where things happen: bitwise the default plan (``parallel_state_stages``), or,
    for the prep knobs (which select the one-warpgroup prep kernel), the ``gdn-prep-base`` plan."""
    prep_knob = any(k in opts for k in ("parallel_prefetch", "parallel_prep_two_per_sm"))
    cases.check_options_bitwise_equal_to_default(GDN, opts, D, True, g_dtype, baseline="gdn-prep-base" if prep_knob else None)


# -- the session-5 state pass (``state-base``: cp.async, two stages) and a 16-row slice (``KdaParallelStateKey.v_slice``;
# the state pass is family-agnostic, so GDN takes these: state-pass fields only). Bodies:
# test_kda_parallel_gpu.py::check_narrow_state_pass.

V16_BASE = {"state": {"v_slice": 16, "tma": False, "tma_store": False, "stages": 2}}


@pytest.mark.parametrize(
    "variant, D, l2norm, regime, g_dtype",
    [("state-base", 128, True, "weak", torch.float32), (V16_BASE, 64, False, "weak", torch.bfloat16)],
    ids=["base-d128", "v16-base-d64-bf16g"],
)
def test_narrow_state_pass_matches_recurrence_and_default(variant, D, l2norm, regime, g_dtype):
    from test_kda_parallel_gpu import check_narrow_state_pass

    check_narrow_state_pass(GDN, variant, D, l2norm, regime, g_dtype)


def test_narrow_state_pass_dense_long_sequence():
    from test_kda_parallel_gpu import check_narrow_state_pass_dense_long

    check_narrow_state_pass_dense_long(GDN, "state-base")
