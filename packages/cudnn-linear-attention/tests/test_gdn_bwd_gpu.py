"""GPU correctness of the Gated DeltaNet backward (gdn/bwd_api.py, three sm_90a kernels) against torch.autograd through
the fp32 token-by-token recurrence, fresh random inputs, poisoned outputs.

Tolerance (the FlashAttention rule): with ``ref`` the fp32 autograd gradients and ``lowp`` the hand-written chunked
backward rounding to bf16 where the kernels do (``gated_delta_net_chunked_bwd_ref(dtype=bf16)``, checked against
autograd on CPU by test_gdn_bwd_reference.py)::

    max|ours - ref| <= 2 * max|lowp - ref| + 2e-3 * max|ref|

Inputs keep the recurrence contractive (k unit-norm, g = logsigmoid(N(0, 1)) / 8, beta ~ U(0, 1)), as the forward tests."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net backward")


def make_inputs(lead, H, D, n_seqs, with_h0, with_dht, l2norm=False, qk_heads=None):
    import torch.nn.functional as F

    hk = H if qk_heads is None else qk_heads
    q = torch.randn(*lead, hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(*lead, hk, D, device="cuda")
    k = (k if l2norm else F.normalize(k, dim=-1)).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(*lead, H, device="cuda")) / 8
    beta = torch.rand(*lead, H, device="cuda")
    do = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5 if with_h0 else None
    dht = torch.randn(n_seqs, H, D, D, device="cuda") if with_dht else None
    return q, k, v, g, beta, do, h0, dht


def run_backward(q, k, v, g, beta, do, h0, dht, cu, stream=None, l2norm=False, store_tm=True):
    """(plan, grads dict, workspace) of one backward through GatedDeltaNetBwdSm90 with poisoned outputs."""
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90, workspace_bytes
    from cudnn_testing.data import poison

    dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
    dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = GatedDeltaNetBwdSm90(
        q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu
    )
    plan.store_tm = store_tm
    plan.compile()
    rank = q.dim()
    T = q.shape[0] if rank == 3 else q.shape[0] * q.shape[1]
    n = cu.shape[0] - 1 if cu is not None else (q.shape[0] if rank == 4 else 1)
    from cudnn.linear_attention._host.delta_rule_bwd_api import dstates_workspace_bytes, forward_workspace_bytes

    H, D = v.shape[-2], q.shape[-1]  # the opt-in chunk-parallel passes add their tails (whatever the defaults are)
    tails = (forward_workspace_bytes(T, n, H, D) if plan.parallel_pass1 else 0) + (dstates_workspace_bytes(T, n, H, D) if plan.parallel_pass2 else 0)
    assert plan.scratch_workspace_bytes() == workspace_bytes(T, n, v.shape[-2], q.shape[-1], store_tm, q.shape[-2] != v.shape[-2]) + tails
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu, workspace=ws, current_stream=stream)
    return plan, dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta, dh0=dh0), ws


def check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched, l2norm=False):
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm=l2norm)
    args = [add(t) for t in (q, k, v, g, beta, do)]
    ref = gated_delta_net_recurrent_bwd_ref(*args, **kw)
    low = gated_delta_net_chunked_bwd_ref(*args, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if got[name] is None:
            continue
        r, lo = ref[name], low[name]
        out = got[name] if batched or name == "dh0" else got[name][None]
        assert_close_fa(out, r, lo, name=name, factor=2.0, noise=2e-3 * r.abs().max().item())


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("with_h0,with_dht", [(True, True), (False, False)])
def test_varlen_backward_matches_autograd(D, with_h0, with_dht):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences in one packed batch."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 0, 700, 3, 128]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 4, D, len(lengths), with_h0, with_dht)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


def test_dense_batch_backward_matches_autograd():
    q, k, v, g, beta, do, h0, dht = make_inputs((2, 300), 2, 128, 2, True, False)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, None)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, None, batched=True)


def test_long_sequence_backward_matches_autograd():
    """One 4096-token sequence (64 chunks: pass 3 runs several chunk groups per head)."""
    from cudnn_testing.data import cu_seqlens

    lengths = [4096]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((4096,), 2, 64, 1, True, True)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


@pytest.mark.parametrize("D", [128])
def test_l2norm_backward_matches_autograd(D):
    """q / k normalised in the kernels (as the forward's use_qk_l2norm_in_kernel); gradients w.r.t. the raw q, k."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 200]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, D, len(lengths), True, True, l2norm=True)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu, l2norm=True)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False, l2norm=True)


def test_torch_op_backward_equals_adapter_and_casts_gate_grads():
    """torch.ops.cudnn_linear_attention.gated_delta_net_bwd (through bwd_torch_op.autograd_backward, the forward op's autograd
    backward) gives the adapter's gradients bit for bit; dg / dbeta come back in g's / beta's dtype."""
    from cudnn.linear_attention.gdn.bwd_torch_op import autograd_backward
    from cudnn_testing.data import cu_seqlens

    lengths = [3, 130]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, 64, len(lengths), True, True)
    _, ref, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    dq, dk, dv, dg, dbeta, dh0 = autograd_backward(q, k, v, g, beta, do, dht, None, False, h0, cu)
    torch.cuda.synchronize()
    for name, t in (("dq", dq), ("dk", dk), ("dv", dv), ("dg", dg), ("dbeta", dbeta), ("dh0", dh0)):
        if name in ("dg", "dbeta"):  # row sums by shared-memory float atomics: equal up to summation order
            torch.testing.assert_close(t, ref[name], rtol=1e-4, atol=1e-4 * ref[name].abs().max().item())
        else:
            assert torch.equal(t, ref[name]), name
    # bf16 g: dg comes back bf16; an all-stride-0 gradient (what o.sum() hands autograd) is materialised by the hook
    ones = torch.ones((), dtype=do.dtype, device=do.device).expand_as(do)
    out = autograd_backward(q, k, v, g.to(torch.bfloat16), beta, ones, None, None, False, None, cu)
    assert out[3].dtype == torch.bfloat16 and out[5] is None
    assert all(torch.isfinite(t.float()).all() for t in out[:5])


def test_recomputed_tm_variant_matches_autograd():
    """The A/B knob ``store_tm=False`` (passes 2 and 3 recompute K K^T and the triangular solve instead of reading pass 1's Tm)."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 300]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, 128, len(lengths), True, True)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu, store_tm=False)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


@pytest.mark.parametrize("D,l2norm", [(64, True), (128, False)])
def test_gva_backward_matches_autograd(D, l2norm):
    """4 value heads over 2 q/k heads: pass 3's fp32 per-value-head partials summed by the fourth launch."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 0, 300]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 4, D, len(lengths), True, True, l2norm=l2norm, qk_heads=2)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu, l2norm=l2norm)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False, l2norm=l2norm)
