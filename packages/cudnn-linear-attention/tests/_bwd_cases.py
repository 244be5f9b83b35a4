"""Helpers shared by the CPU launch tests of the gated-delta-rule backwards (test_gdn_bwd_launch.py,
test_kda_bwd_launch.py): run ``execute`` with the compiled kernels replaced by recorders and check each recorded launch
against the ``__call__`` its kernel declares (argument count, names, optional pointers, runtime extents, workspace)."""

from __future__ import annotations

import inspect


class Recorder:
    """Stands in for a compiled kernel: records the arguments of every call."""

    def __init__(self, name):
        self.name = name
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def declared(cls) -> list[str]:
    """The argument names of a kernel class's ``__call__`` (without self)."""
    return list(inspect.signature(cls.__call__).parameters)[1:]


def run_recorded(monkeypatch, plan, parts, *args):
    """``plan.execute(*args)`` over a 128-byte aligned CPU workspace of the plan's size, each pass a :class:`Recorder`
    and the launch stream a marker string; returns ``(out, ws)``."""
    import torch

    from cudnn.linear_attention._host import delta_rule_bwd_api

    plan._compiled_kernel = tuple(Recorder(p) for p in parts)
    monkeypatch.setattr(delta_rule_bwd_api, "_stream", lambda s, d: "stream")
    raw = torch.empty(plan.scratch_workspace_bytes() + 128, dtype=torch.uint8)  # CPU memory: align by hand, as the CUDA allocator does
    ws = raw[(-raw.data_ptr()) % 128 :][: plan.scratch_workspace_bytes()]
    return plan.execute(*args, workspace=ws), ws


def check_launch(rec, cls, ws, *, T, n, H, Hk, varlen, seq_len, with_h0, with_dht) -> dict:
    """The checks every pass shares; returns the recorded arguments by declared name."""
    assert len(rec.calls) == 1, rec.name
    args = rec.calls[0]
    names = declared(cls)
    assert len(args) == len(names), (rec.name, len(args), len(names))
    assert args[-1] == "stream"
    by = dict(zip(names, args, strict=True))
    if "cu_ptr" in by:
        assert (by["cu_ptr"] is None) == (not varlen), rec.name
    if "h0_ptr" in by:
        assert (by["h0_ptr"] is None) == (not with_h0)
    if "dht_ptr" in by:
        assert (by["dht_ptr"] is None) == (not with_dht) and (by["dh0_ptr"] is None) == (not with_h0)
    assert by["T"] == T and by["heads"] == H and by["qk_heads"] == Hk, rec.name
    if "n_seqs" in by:
        assert by["n_seqs"] == n and by["seq_len"] == seq_len
        assert by["slots"] == n + T // 64 + 1
    for name, a in by.items():  # every workspace pointer lies inside the workspace
        if name.endswith("_ptr") and a is not None and name.startswith("ws"):
            assert ws.data_ptr() <= int(a._pointer) < ws.data_ptr() + ws.numel(), (rec.name, name)
    return by
