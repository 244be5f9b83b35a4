"""CPU tier of the Gated DeltaNet backward adapter's execute path (no GPU, no kernel run): with the compiled kernels
replaced by recorders, ``execute`` launches exactly the plan's passes (three, four with GVA) in order, each with
exactly the arguments its kernel's ``__call__`` declares, the optional pointers compiled out exactly when the plan
says (R3), the runtime extents (T, N, H, Hk, chunk groups) from the tensors, and the workspace carved inside the
declared size (R2). A wrong argument order or count here is a silent mis-launch on the GPU."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_bwd_cases.py: --import-mode=importlib adds no test folder
from _bwd_cases import check_launch, run_recorded  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net backward")
    pytest.importorskip("cutlass")


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
    plan.parallel_pass1 = False  # the serial pass 1 (the default is chunk-parallel since session 9: test_la_bwd_parallel_gpu.py)
    plan.check_support()
    key = plan.compile_key()
    parts = bwd_api._parts(key)
    assert len(parts) == (4 if gva else 3)
    out, ws = run_recorded(monkeypatch, plan, parts, q, q, v, g, g, v, dq, dk, dv, dg, db, h0, dh0, dht, cu)
    assert out[0] is dq and out[5] is dh0

    classes = {"states": GdnBwdStates, "dstates": GdnBwdDStates, "grads": GdnBwdGrads, "qk_reduce": GdnBwdQkReduce}
    for rec in plan._compiled_kernel:
        by = check_launch(rec, classes[rec.name], ws, T=T, n=n, H=H, Hk=Hk, varlen=varlen, seq_len=0 if varlen else T // 2, with_h0=with_h0, with_dht=with_dht)
        if "wstm_ptr" in by:
            assert (by["wstm_ptr"] is None) == (not store_tm), rec.name
        if rec.name == "grads":
            assert by["z_split"] == bwd_api.chunk_groups(T, n, H)
            inside = ws.data_ptr() <= int(by["dq_ptr"]._pointer) < ws.data_ptr() + ws.numel()
            assert inside == gva and (int(by["dq_ptr"]._pointer) == dq.data_ptr()) == (not gva)  # GVA: fp32 partials in the workspace
            assert by["dq_ptr"].dtype.__name__ == ("Float32" if gva else "BFloat16")
        if rec.name == "qk_reduce":
            assert int(by["dq_ptr"]._pointer) == dq.data_ptr() and int(by["dk_ptr"]._pointer) == dk.data_ptr()
