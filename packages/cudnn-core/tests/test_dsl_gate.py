"""Rule 7: the DSL version gate reads metadata, compares versions and names both in its error."""

from __future__ import annotations

import pytest

from cudnn import dsl_gate
from cudnn.dsl_gate import CuteDslState, CuteDslVersionError, cutedsl_requirement_error, cutedsl_too_old, require_cutedsl


@pytest.fixture
def installed(monkeypatch):
    def set_version(v, importable=True):
        monkeypatch.setattr(dsl_gate, "cutedsl_state", lambda: CuteDslState(version=v, importable=importable))

    return set_version


def test_too_old_comparisons(installed):
    installed("4.6.2")
    assert cutedsl_too_old("4.8.0") and not cutedsl_too_old("4.6.2") and not cutedsl_too_old("4.6.0")
    installed("4.8.1")
    assert not cutedsl_too_old("4.8.0")
    installed("4.10.0")
    assert not cutedsl_too_old("4.8.0")  # numeric, not lexical
    installed(None, importable=False)
    assert cutedsl_too_old("4.6.2")


def test_requirement_error_names_both_versions(installed):
    installed("4.6.2")
    err = cutedsl_requirement_error("cudnn.sdpa.sdpa_fwd", "4.8.0")
    assert isinstance(err, CuteDslVersionError)
    assert "cudnn.sdpa.sdpa_fwd needs nvidia-cutlass-dsl>=4.8.0, but 4.6.2 is installed" in str(err)
    with pytest.raises(CuteDslVersionError, match="4.6.2 is installed"):
        require_cutedsl("k", "4.8.0")
    installed(None, importable=False)
    assert "found no nvidia-cutlass-dsl installed" in str(cutedsl_requirement_error("k", "4.8.0"))


def test_real_state_is_consistent():
    state = dsl_gate.cutedsl_state()
    if state.version is None:
        pytest.skip("no DSL in this environment")
    assert not cutedsl_too_old(state.version)
