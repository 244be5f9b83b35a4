"""CPU tier of the Gated DeltaNet backward torch op (gdn/bwd_torch_op.py, the forward's autograd backward): it
registers as ``torch.ops.cudnn_linear_attention.gated_delta_net_bwd`` and its fake implementation gives meta tensors the
gradients' metadata (what torch.compile traces), with and without an initial state, varlen and dense."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("varlen,with_h0", [(True, True), (False, False)])
def test_fake_implementation_shapes(varlen, with_h0):
    from cudnn.linear_attention.gdn import bwd_torch_op  # noqa: F401  (registers the op)

    lead = (300,) if varlen else (2, 150)
    n = 3 if varlen else 2
    q = torch.empty(*lead, 4, 64, dtype=torch.bfloat16, device="meta")
    g = torch.empty(*lead, 4, dtype=torch.bfloat16, device="meta")
    beta = torch.empty(*lead, 4, dtype=torch.float32, device="meta")
    h0 = torch.empty(n, 4, 64, 64, dtype=torch.float32, device="meta") if with_h0 else None
    cu = torch.empty(n + 1, dtype=torch.int32, device="meta") if varlen else None
    out = torch.ops.cudnn_linear_attention.gated_delta_net_bwd(q, q, q, g, beta, q, None, None, False, h0, cu)
    dq, dk, dv, dg, dbeta, dh0 = out
    assert dq.shape == q.shape and dq.dtype == torch.bfloat16 and dv.shape == q.shape
    assert dg.shape == g.shape and dg.dtype == torch.float32 and dbeta.dtype == torch.float32
    assert dh0.shape == ((n, 4, 64, 64) if with_h0 else (0,)) and dh0.dtype == torch.float32
