"""Planted violations for the R9 detectors: a detector counts only once seen failing (GPU tier).

``assert_detectors_catch_planted_sync`` wraps a function on an adapter's execute path (typically the
module-level stream helper an ``api.py`` looks up at call time) with a device-to-host read plus an
allocation, then checks that :func:`cudnn_testing.detectors.no_sync` and
:func:`cudnn_testing.detectors.no_allocation` each go red around ``run()``::

    def test_detectors_fail_on_planted_sync_and_allocation(monkeypatch):
        import cudnn.linear_attention.gdn.api as api

        plan.execute(*args)  # warm: the planted call must be the only sync / allocation
        torch.cuda.synchronize()
        assert_detectors_catch_planted_sync(monkeypatch, api, "_stream", lambda: plan.execute(*args))
"""

from __future__ import annotations


def assert_detectors_catch_planted_sync(monkeypatch, owner, attr: str, run) -> None:
    """Plant ``torch.zeros(1, device="cuda").sum().item()`` (an allocation and a blocking D2H read) in front of
    ``owner.<attr>`` (restored by ``monkeypatch``); ``run()`` must then raise under ``no_sync`` (torch's sync
    debug mode raises RuntimeError) and fail ``no_allocation`` (AssertionError naming the allocation)."""
    import pytest
    import torch

    from cudnn_testing import detectors

    real = getattr(owner, attr)

    def with_sync(*args, **kwargs):
        torch.zeros(1, device="cuda").sum().item()  # D2H read + allocation
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, attr, with_sync)
    with pytest.raises(RuntimeError):  # torch's sync debug mode raises RuntimeError on a blocking call
        with detectors.no_sync():
            run()
    with pytest.raises(AssertionError, match="allocated"):
        with detectors.no_allocation():
            run()
