"""GPU correctness of the Kimi Delta Attention backward (kda/bwd_api.py, three sm_90a kernels) against torch.autograd
through the fp32 token-by-token recurrence, fresh random inputs, poisoned outputs.

Tolerance (the FlashAttention rule): with ``ref`` the fp32 autograd gradients and ``lowp`` the hand-written chunked
backward rounding to bf16 at the kernels' operand boundaries (``kimi_delta_attention_chunked_bwd_ref(dtype=bf16)``,
checked against autograd on CPU by test_kda_bwd_reference.py)::

    max|ours - ref| <= 2 * max|lowp - ref| + 2e-3 * max|ref|

Inputs keep the recurrence contractive (k unit-norm, beta ~ U(0, 1)); per-channel gates in the forward tests' two
regimes: weak ``logsigmoid(N(0, 1)) / 8`` and fla's safe-gate range ``-5 sigmoid(N(0, 1))`` (the decay-split factors
reach exp(40) inside a 16-token block)."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention backward")


def make_inputs(lead, H, D, n_seqs, with_h0, with_dht, regime="weak"):
    import torch.nn.functional as F

    q = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    k = F.normalize(torch.randn(*lead, H, D, device="cuda"), dim=-1).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    x = torch.randn(*lead, H, D, device="cuda")
    g = F.logsigmoid(x) / 8 if regime == "weak" else -5.0 * torch.sigmoid(x)
    beta = torch.rand(*lead, H, device="cuda")
    do = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5 if with_h0 else None
    dht = torch.randn(n_seqs, H, D, D, device="cuda") if with_dht else None
    return q, k, v, g, beta, do, h0, dht


def run_backward(q, k, v, g, beta, do, h0, dht, cu, stream=None, dp_split_hilo=None):
    """(plan, grads dict, workspace) of one backward through KimiDeltaAttentionBwdSm90 with poisoned outputs (the plan's
    defaults unless ``dp_split_hilo`` is given)."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90, workspace_bytes
    from cudnn_testing.data import poison

    dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
    dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    if dp_split_hilo is not None:
        plan.dp_split_hilo = dp_split_hilo
    plan.compile()
    rank = q.dim()
    T = q.shape[0] if rank == 3 else q.shape[0] * q.shape[1]
    n = cu.shape[0] - 1 if cu is not None else (q.shape[0] if rank == 4 else 1)
    from cudnn.linear_attention._host.delta_rule_bwd_api import dstates_workspace_bytes, forward_workspace_bytes

    H, D = v.shape[-2], q.shape[-1]  # the opt-in chunk-parallel passes add their tails (whatever the defaults are)
    tails = (forward_workspace_bytes(T, n, H, D) if plan.parallel_pass1 else 0) + (dstates_workspace_bytes(T, n, H, D) if plan.parallel_pass2 else 0)
    assert plan.scratch_workspace_bytes() == workspace_bytes(T, n, v.shape[-2], q.shape[-1]) + tails
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu, workspace=ws, current_stream=stream)
    return plan, dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta, dh0=dh0), ws


def check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched):
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    args = [add(t) for t in (q, k, v, g, beta, do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*args, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*args, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if got[name] is None:
            continue
        r, lo = ref[name], low[name]
        out = got[name] if batched or name == "dh0" else got[name][None]
        assert_close_fa(out, r, lo, name=name, factor=2.0, noise=2e-3 * r.abs().max().item())


@pytest.mark.parametrize("D,with_h0,with_dht", [(64, True, True), (128, True, True), (128, False, False)])
def test_varlen_backward_matches_autograd(D, with_h0, with_dht):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences in one packed batch."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 0, 300, 3, 128]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, D, len(lengths), with_h0, with_dht)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


def test_strong_decay_backward_matches_autograd():
    """fla's safe-gate range (g in [-5, 0)): the decay-split factors of the three backward kernels stay finite."""
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 65, 200]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, 128, len(lengths), True, True, regime="strong")
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


def _hard_gate_case(layout):
    """Issue #7's failing shapes: fla's safe-gate range, H = 4, K = 64, no states (so the FA rule's noise term is set by
    the gradients alone); dense (2, 257) or varlen [1, 0, 700, 64, 130, 0] (1-token, empty, multi-chunk, partial)."""
    from cudnn_testing.data import cu_seqlens

    torch.manual_seed(7 if layout == "dense" else 8)
    if layout == "dense":
        lead, cu, n = (2, 257), None, 2
    else:
        lengths = [1, 0, 700, 64, 130, 0]
        lead, cu, n = (sum(lengths),), cu_seqlens(lengths, "cuda"), len(lengths)
    q, k, v, g, beta, do, h0, dht = make_inputs(lead, 4, 64, n, False, False, regime="strong")
    return (q, k, v, g, beta, do, h0, dht, cu), layout == "dense"


@pytest.mark.parametrize("layout", ["dense", "varlen"])
def test_hard_gate_backward_matches_autograd(layout):
    """Issue #7: under g = -5 sigmoid(N(0, 1)) with no states, dg (and dq, dk) with the opt-in ``dp_split_hilo`` (pass 3's
    dP~ products with hi + lo decay-split operands) meet the FA rule against the bf16 chunked reference (with one bf16
    operand, the default until this passes on the GPU, dg was 4-7x the reference's error). Every gradient is checked."""
    args, batched = _hard_gate_case(layout)
    plan, got, _ = run_backward(*args, dp_split_hilo=True)
    assert plan.compile_key().dp_split_hilo
    check_against_references(got, *args, batched=batched)


def test_hard_gate_dg_error_shrinks_with_dp_split_hilo():
    """The A/B behind issue #7's fix: the same hard-gate dense inputs with ``dp_split_hilo = False`` (pass 3 as before,
    one bf16 decay-split operand, the default) give a dg error well above the opt-in's (the CPU emulation: 3.7x); and the switch is
    a compile-time choice (flipping it after compile() raises)."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_recurrent_bwd_ref

    (q, k, v, g, beta, do, h0, dht, cu), _ = _hard_gate_case("dense")
    ref = kimi_delta_attention_recurrent_bwd_ref(q, k, v, g, beta, do)["dg"]
    err = {}
    for hilo in (True, False):
        dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
        dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
        plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta)
        plan.dp_split_hilo = hilo
        plan.compile()
        assert plan.compile_key().dp_split_hilo == hilo
        ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
        plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, workspace=ws)
        err[hilo] = (dg - ref).abs().max().item()
    print(f"hard-gate dense dg max error: dp_split_hilo on {err[True]:.3e}, off {err[False]:.3e}")
    assert err[False] > 1.5 * err[True], err
    plan.dp_split_hilo = True  # compiled with False
    with pytest.raises(ValueError, match="dp_split_hilo was changed after compile"):
        plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, workspace=ws)


def test_dense_batch_backward_matches_autograd():
    q, k, v, g, beta, do, h0, dht = make_inputs((2, 300), 2, 128, 2, True, False)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, None)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, None, batched=True)


def test_long_sequence_backward_matches_autograd():
    """One 2048-token sequence (32 chunks: pass 3 runs several chunk groups per head)."""
    from cudnn_testing.data import cu_seqlens

    lengths = [2048]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((2048,), 1, 64, 1, True, True)
    _, got, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    check_against_references(got, q, k, v, g, beta, do, h0, dht, cu, batched=False)


def test_torch_op_backward_equals_adapter_and_casts_gate_grads():
    """torch.ops.cudnn_linear_attention.kimi_delta_attention_bwd (through bwd_torch_op.autograd_backward, the forward
    op's autograd backward) gives the adapter's gradients (dg / dbeta up to the order of shared-memory float atomics);
    dg / dbeta come back in g's / beta's dtype."""
    from cudnn.linear_attention.kda.bwd_torch_op import autograd_backward
    from cudnn_testing.data import cu_seqlens

    lengths = [3, 130]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, do, h0, dht = make_inputs((sum(lengths),), 2, 64, len(lengths), True, True)
    _, ref, _ = run_backward(q, k, v, g, beta, do, h0, dht, cu)
    dq, dk, dv, dg, dbeta, dh0 = autograd_backward(q, k, v, g, beta, do, dht, None, False, h0, cu)
    torch.cuda.synchronize()
    for name, t in (("dq", dq), ("dk", dk), ("dv", dv), ("dg", dg), ("dbeta", dbeta), ("dh0", dh0)):
        if name in ("dg", "dbeta"):
            torch.testing.assert_close(t, ref[name], rtol=1e-4, atol=1e-4 * ref[name].abs().max().item())
        else:
            assert torch.equal(t, ref[name]), name
    ones = torch.ones((), dtype=do.dtype, device=do.device).expand_as(do)
    out = autograd_backward(q, k, v, g.to(torch.bfloat16), beta, ones, None, None, False, None, cu)
    assert out[3].dtype == torch.bfloat16 and out[3].shape == g.shape and out[5] is None
    assert all(torch.isfinite(t.float()).all() for t in out[:5])
