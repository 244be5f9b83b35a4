"""cudnn-sdpa tests' shared fixture: ``api`` (the CPU launch tests: test_sdpa_fwd_launch.py, test_sdpa_fwd_overhead.py) yields
``cudnn.sdpa.fwd.api`` with the compiled entry replaced by a :class:`Recorder` (``api._test_recorder``), tvm-ffi
assumed, a fixed current-stream handle, no CUDA check and an empty ``sdpa_fwd`` plan cache."""

from __future__ import annotations

import pytest


class Recorder:
    """Stands in for the tvm-ffi compiled function: records every call's positional arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


@pytest.fixture
def api(monkeypatch):
    from cudnn.sdpa.fwd import api as mod

    rec = Recorder()
    monkeypatch.setattr(mod, "_compiled", lambda key, tvm_ffi=False: rec)
    monkeypatch.setattr(mod, "_use_tvm_ffi", lambda: True)
    monkeypatch.setattr(mod, "_current_stream_handle", lambda device_index: 0xABC0)
    monkeypatch.setattr(mod, "_require_cuda", lambda name, x, device: None)
    monkeypatch.setattr(mod, "_PLANS", {})
    mod._test_recorder = rec
    yield mod
    del mod._test_recorder
