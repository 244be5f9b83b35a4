"""GPU tier of the chunk-parallel Kimi Delta Attention forward (``schedule="parallel"``): correctness against the fp32
token-by-token recurrence and against the serial kernel (bitwise), fresh random inputs, poisoned outputs; the
execute path's no-sync / no-allocation / graph-capture properties with a caller workspace. Bodies and the tolerance
rule: ``_parallel_cases.py``."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
import _parallel_cases as cases  # noqa: E402
from _delta_rule_cases import KDA  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


@pytest.mark.parametrize("D, l2norm, regime", [(64, False, "weak"), (128, True, "weak"), (128, True, "safe_gate")])
def test_varlen_matches_recurrence(D, l2norm, regime):
    cases.check_varlen_matches_recurrence(KDA, D, l2norm, regime)


@pytest.mark.parametrize("D, l2norm, regime", [(64, False, "safe_gate"), (128, True, "safe_gate")])
def test_bitwise_equal_to_serial_schedule(D, l2norm, regime):
    cases.check_bitwise_equal_to_serial(KDA, D, l2norm, regime)


def test_dense_batch_and_thd_without_initial_state():
    cases.check_dense_batch_and_thd_without_initial_state(KDA)


def test_one_plan_rebinds_new_totals_with_a_workspace_per_batch():
    cases.check_one_plan_rebinds_new_totals(KDA)


@pytest.mark.detector
def test_execute_never_syncs_or_allocates_and_replays_under_capture():
    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA)
