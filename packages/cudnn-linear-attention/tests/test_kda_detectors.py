"""GPU detectors for the Kimi Delta Attention forward (recipe R9): a warm execute neither synchronizes nor allocates
(three executes); the no-sync and no-allocation detectors go red against a planted .item() + allocation in the
execute path (``test_detectors_fail_on_planted_sync_and_allocation``: green = they fired); the first execute
of a fresh plan (kernel build included) runs inside a CUDA-graph capture and its replay equals eager bit for
bit; default-stream handles never reach torch.cuda.ExternalStream; new token totals and sequence counts
through the public function are kernel-cache hits (Rule 4). The bodies are shared with the other
gated-delta-rule family (_delta_rule_cases.py)."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.detector]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import (  # noqa: E402
    KDA,
    check_default_stream_handle_never_reaches_external_stream,
    check_detectors_fail_on_planted_sync_and_allocation,
    check_execute_no_sync_no_alloc,
    check_first_execute_under_capture_replays_like_eager,
    check_new_token_totals_are_cache_hits,
    skip_unless_family_dsl,
)


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_family_dsl(KDA)


def test_execute_no_sync_no_alloc():
    check_execute_no_sync_no_alloc(KDA)


def test_detectors_fail_on_planted_sync_and_allocation(monkeypatch):
    check_detectors_fail_on_planted_sync_and_allocation(KDA, monkeypatch)


def test_first_execute_under_capture_replays_like_eager():
    check_first_execute_under_capture_replays_like_eager(KDA)


def test_default_stream_handle_never_reaches_external_stream(monkeypatch):
    check_default_stream_handle_never_reaches_external_stream(KDA, monkeypatch)


def test_new_token_totals_are_cache_hits():
    check_new_token_totals_are_cache_hits(KDA)
