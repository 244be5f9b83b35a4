"""CPU tier of the Kimi Delta Attention backward adapter's execute path (no GPU, no kernel run): with the compiled
kernels replaced by recorders, ``execute`` launches exactly the plan's three passes in order, each with exactly the
arguments its kernel's ``__call__`` declares, the optional pointers compiled out exactly when the plan says (R3), the
runtime extents (T, N, H, Hk, chunk groups) from the tensors, and Tm / P carved inside the declared workspace (R2). A
wrong argument order or count here is a silent mis-launch on the GPU."""

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

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention backward")
    pytest.importorskip("cutlass")


@pytest.mark.parametrize("varlen,with_h0,with_dht", [(True, True, True), (False, False, False)])
def test_execute_launches_every_pass_with_its_declared_arguments(monkeypatch, varlen, with_h0, with_dht):

    from cudnn.linear_attention.kda import bwd_api
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdDStates, KdaBwdStates
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads

    T, H, D = 200, 4, 64
    lead = (T,) if varlen else (2, T // 2)
    n = 3 if varlen else 2
    q = torch.randn(*lead, H, D).to(torch.bfloat16)
    g = torch.randn(*lead, H, D)
    beta = torch.randn(*lead, H)
    h0 = torch.randn(n, H, D, D) if with_h0 else None
    dh0 = torch.empty_like(h0) if with_h0 else None
    dht = torch.randn(n, H, D, D) if with_dht else None
    cu = torch.tensor([0, 50, 51, T], dtype=torch.int32) if varlen else None
    dq, dk, dv, dg, db = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q), torch.empty_like(g), torch.empty_like(beta)
    plan = bwd_api.KimiDeltaAttentionBwdSm90(q, q, q, g, beta, q, dq, dk, dv, dg, db, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.parallel_pass1 = False  # the serial pass 1 (the default is chunk-parallel since session 9: test_la_bwd_parallel_gpu.py)
    plan.check_support()
    parts = bwd_api._parts(plan.compile_key())
    assert parts == ("states", "dstates", "grads")
    out, ws = run_recorded(monkeypatch, plan, parts, q, q, q, g, beta, q, dq, dk, dv, dg, db, h0, dh0, dht, cu)
    assert out[0] is dq and out[3] is dg and out[5] is dh0

    classes = {"states": KdaBwdStates, "dstates": KdaBwdDStates, "grads": KdaBwdGrads}
    seen = {}
    for rec in plan._compiled_kernel:
        by = check_launch(rec, classes[rec.name], ws, T=T, n=n, H=H, Hk=H, varlen=varlen, seq_len=0 if varlen else T // 2, with_h0=with_h0, with_dht=with_dht)
        for name in ("wstm_ptr", "wsp_ptr", "wsh_ptr", "wsdh_ptr", "wsvn_ptr", "wsdvn_ptr"):
            if name in by:
                assert by[name] is not None and by[name].dtype.__name__ == "BFloat16", (rec.name, name)
                seen.setdefault(name, int(by[name]._pointer))
                assert seen[name] == int(by[name]._pointer), (rec.name, name)  # every pass reads the same array
        if rec.name == "grads":
            assert by["z_split"] == bwd_api.chunk_groups(T, n, H)
            assert int(by["dq_ptr"]._pointer) == dq.data_ptr() and int(by["dg_ptr"]._pointer) == dg.data_ptr()
            assert by["dg_ptr"].dtype.__name__ == "Float32" and by["dbeta_ptr"].dtype.__name__ == "Float32"
    assert len(set(seen.values())) == len(seen) == 6  # six distinct workspace arrays
