"""CPU tier of the Gated DeltaNet backward adapter's execute path (no GPU, no kernel run): with the compiled kernels
replaced by recorders, ``execute`` launches exactly the plan's passes (three, four with GVA) in order, each with
exactly the arguments its kernel's ``__call__`` declares, the optional pointers compiled out exactly when the plan
says (R3), the runtime extents (T, N, H, Hk, chunk groups) from the tensors, and the workspace carved inside the
declared size (R2). A wrong argument order or count here is a silent mis-launch on the GPU."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _dsl():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net backward")
    pytest.importorskip("cutlass")


class _Recorder:
    def __init__(self, name):
        self.name = name
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def _n_params(cls) -> int:
    return len(inspect.signature(cls.__call__).parameters) - 1  # minus self


@pytest.mark.parametrize("gva,varlen,with_h0,with_dht,store_tm", [(False, True, True, True, True), (True, False, False, False, False)])
def test_execute_launches_every_pass_with_its_declared_arguments(monkeypatch, gva, varlen, with_h0, with_dht, store_tm):
    from cudnn.linear_attention.gdn import bwd_api
    from cudnn.linear_attention.gdn.bwd_qk_reduce_kernel import GdnBwdQkReduce
    from cudnn.linear_attention.gdn.bwd_states_kernel import GdnBwdDStates, GdnBwdStates
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads

    T, H, D = 200, 4, 64
    Hk = 2 if gva else H
    lead = (T,) if varlen else (2, T // 2)
    n = 3 if varlen else 2
    q = torch.randn(*lead, Hk, D).to(torch.bfloat16)
    v = torch.randn(*lead, H, D).to(torch.bfloat16)
    g = torch.randn(*lead, H)
    h0 = torch.randn(n, H, D, D) if with_h0 else None
    dh0 = torch.empty_like(h0) if with_h0 else None
    dht = torch.randn(n, H, D, D) if with_dht else None
    cu = torch.tensor([0, 50, 51, T], dtype=torch.int32) if varlen else None
    dq, dk, dv, dg, db = torch.empty_like(q), torch.empty_like(q), torch.empty_like(v), torch.empty_like(g), torch.empty_like(g)
    plan = bwd_api.GatedDeltaNetBwdSm90(q, q, v, g, g, v, dq, dk, dv, dg, db, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.store_tm = store_tm
    plan.check_support()
    key = plan.compile_key()
    parts = bwd_api._parts(key)
    assert len(parts) == (4 if gva else 3)
    plan._compiled_kernel = tuple(_Recorder(p) for p in parts)
    monkeypatch.setattr(bwd_api, "_stream", lambda s, d: "stream")
    raw = torch.empty(plan.scratch_workspace_bytes() + 128, dtype=torch.uint8)  # CPU memory: align by hand, as the CUDA allocator does
    ws = raw[(-raw.data_ptr()) % 128 :][: plan.scratch_workspace_bytes()]
    out = plan.execute(q, q, v, g, g, v, dq, dk, dv, dg, db, h0, dh0, dht, cu, workspace=ws)
    assert out[0] is dq and out[5] is dh0

    classes = {"states": GdnBwdStates, "dstates": GdnBwdDStates, "grads": GdnBwdGrads, "qk_reduce": GdnBwdQkReduce}
    for rec in plan._compiled_kernel:
        assert len(rec.calls) == 1, rec.name
        args = rec.calls[0]
        assert len(args) == _n_params(classes[rec.name]), (rec.name, len(args))
        assert args[-1] == "stream"
        names = list(inspect.signature(classes[rec.name].__call__).parameters)[1:]
        by = dict(zip(names, args, strict=True))
        if "cu_ptr" in by:
            assert (by["cu_ptr"] is None) == (not varlen), rec.name
        if "wstm_ptr" in by:
            assert (by["wstm_ptr"] is None) == (not store_tm), rec.name
        if "h0_ptr" in by:
            assert (by["h0_ptr"] is None) == (not with_h0)
        if "dht_ptr" in by:
            assert (by["dht_ptr"] is None) == (not with_dht) and (by["dh0_ptr"] is None) == (not with_h0)
        assert by["T"] == T and by["heads"] == H and by["qk_heads"] == Hk, rec.name
        if "n_seqs" in by:
            assert by["n_seqs"] == n and by["seq_len"] == (0 if varlen else T // 2)
            assert by["slots"] == n + T // 64 + 1
        if rec.name == "grads":
            assert by["z_split"] == bwd_api.chunk_groups(T, n, H)
            inside = ws.data_ptr() <= int(by["dq_ptr"]._pointer) < ws.data_ptr() + ws.numel()
            assert inside == gva and (int(by["dq_ptr"]._pointer) == dq.data_ptr()) == (not gva)  # GVA: fp32 partials in the workspace
            assert by["dq_ptr"].dtype.__name__ == ("Float32" if gva else "BFloat16")
        if rec.name == "qk_reduce":
            assert int(by["dq_ptr"]._pointer) == dq.data_ptr() and int(by["dk_ptr"]._pointer) == dk.data_ptr()
        # every pointer lies inside its tensor or the workspace
        for name, a in by.items():
            if name.endswith("_ptr") and a is not None and name.startswith("ws"):
                assert ws.data_ptr() <= int(a._pointer) < ws.data_ptr() + ws.numel(), (rec.name, name)
