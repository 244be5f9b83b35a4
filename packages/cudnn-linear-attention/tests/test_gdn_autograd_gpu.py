"""Autograd through the public ``cudnn.linear_attention.gated_delta_net``: its custom op's registered backward runs
``torch.ops.cudnn_linear_attention.gated_delta_net_bwd`` (the three / four sm_90a backward kernels, never a torch
fallback).

CPU (meta tensors, runs in CI): the AOT-autograd backward graph of a training step holds exactly one
``gated_delta_net_bwd`` call and no other compute op on q, k, v (no silent reference fallback); the forward-time
backward check runs only when an input requires grad.
GPU (marked gpu): the leaves' ``.grad`` after ``loss.backward()`` match the fp32 token-by-token recurrence's autograd
gradients, eager and ``torch.compile(fullgraph=True)``, varlen with initial / final state, dense batch, GVA with the
in-kernel L2 norm, a loss through ``o`` only (autograd's stride-0 ``do``, no final state), bf16 gates.

Tolerance (the FlashAttention rule, as test_gdn_bwd_gpu.py): with ``ref`` the fp32 autograd gradients and ``lowp`` the
hand-written chunked backward rounding to bf16 where the kernels do::

    max|ours - ref| <= 2 * max|lowp - ref| + 2e-3 * max|ref|
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

KIND = "gated_delta_net"
GRADS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net autograd")


def _fn():
    import cudnn.linear_attention as la

    return la.gated_delta_net


def make_leaves(lead, H, D, n_seqs, device="cuda", qk_heads=None, l2norm=False, gate_dtype=torch.float32):
    """Fresh leaves (requires_grad) q, k, v bf16, g, beta in ``gate_dtype``, h0 fp32, and the upstream gradients do
    (bf16) and dht (fp32). Contractive recurrence: k unit-norm (unless normalised in the kernel), small log decays."""
    import torch.nn.functional as F

    hk = H if qk_heads is None else qk_heads
    q = torch.randn(*lead, hk, D, device=device).to(torch.bfloat16)
    k = torch.randn(*lead, hk, D, device=device)
    k = (k if l2norm else F.normalize(k, dim=-1)).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device=device).to(torch.bfloat16)
    g = (F.logsigmoid(torch.randn(*lead, H, device=device)) / 8).to(gate_dtype)
    beta = torch.rand(*lead, H, device=device).to(gate_dtype)
    h0 = torch.randn(n_seqs, H, D, D, device=device) * 0.5
    leaves = [t.requires_grad_(True) for t in (q, k, v, g, beta, h0)]
    do = torch.randn(*lead, H, D, device=device).to(torch.bfloat16)
    dht = torch.randn(n_seqs, H, D, D, device=device)
    return leaves, do, dht


def _step(fn, l2norm, with_final):
    def step(q, k, v, g, beta, h0, cu, do, dht):
        o, fs = fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, output_final_state=with_final, cu_seqlens=cu)
        loss = (o.float() * do.float()).sum()
        return loss + (fs * dht).sum() if with_final else loss

    return step


def grads_of(step, leaves, cu, do, dht, compiled):
    for t in leaves:
        t.grad = None
    run = torch.compile(step, fullgraph=True) if compiled else step
    run(*leaves, cu, do, dht).backward()
    torch.cuda.synchronize()
    return dict(zip(GRADS, (t.grad for t in leaves), strict=True))


def check_against_references(got, leaves, do, dht, cu, batched, l2norm=False):
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    q, k, v, g, beta, h0 = (None if t is None else t.detach() for t in leaves)
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm=l2norm)
    args = [add(t) for t in (q, k, v, g.float(), beta.float(), do)]
    ref = gated_delta_net_recurrent_bwd_ref(*args, **kw)
    low = gated_delta_net_chunked_bwd_ref(*args, dtype=torch.bfloat16, **kw)
    for name, leaf in zip(GRADS, leaves, strict=True):
        if leaf is None:
            continue
        out = got[name]
        assert out is not None and out.shape == leaf.shape and out.dtype == leaf.dtype, name
        r, lo = ref[name], low[name]
        out = out if batched or name == "dh0" else out[None]
        noise = 2e-3 * r.abs().max().item() + (8e-3 * r.abs().max().item() if out.dtype == torch.bfloat16 and name in ("dg", "dbeta") else 0.0)
        assert_close_fa(out, r, lo, name=name, factor=2.0, noise=noise)


# -- CPU (meta tensors) ----------------------------------------------------------------------------------------------


def _meta_leaves(qk_heads=2):
    from cudnn_testing.data import cu_seqlens

    leaves, do, dht = make_leaves((100,), 4, 64, 2, device="meta", qk_heads=qk_heads)
    return leaves, cu_seqlens([30, 70], "cpu").to("meta"), do, dht


def test_backward_graph_is_one_backward_op_call():
    """AOT autograd on meta tensors: the forward graph calls gated_delta_net_fwd once, the backward graph calls
    gated_delta_net_bwd once, and no aten op in the backward graph produces a q / k / v-shaped gradient by itself
    (the gradients come from the kernels, not from a differentiated torch reference)."""
    from functorch.compile import aot_function, make_boxed_func

    graphs = {}

    def capture(name):
        def compiler(gm, _):
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    leaves, cu, do, dht = _meta_leaves()
    step = _step(_fn(), False, True)
    aot_function(lambda *a: step(*a), fw_compiler=capture("fw"), bw_compiler=capture("bw"))(*leaves, cu, do, dht).backward()
    fw = [str(n.target) for n in graphs["fw"].graph.nodes if n.op == "call_function"]
    bw = [str(n.target) for n in graphs["bw"].graph.nodes if n.op == "call_function"]
    assert fw.count(f"cudnn_linear_attention.{KIND}_fwd.default") == 1, fw
    assert bw.count(f"cudnn_linear_attention.{KIND}_bwd.default") == 1, bw
    heavy = {"aten.bmm.default", "aten.mm.default", "aten.matmul.default", "aten.einsum.default", "aten.cumsum.default"}
    assert not heavy.intersection(fw + bw), (fw, bw)
    for t in leaves:
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


def test_forward_time_check_runs_only_when_a_gradient_can_be_asked_for(monkeypatch):
    """The backward plan's check runs at the forward call when an input requires grad (GVA + L2 norm are served by the
    GDN backward: it passes), and not at all under torch.no_grad() or without grad-requiring inputs."""
    from cudnn.linear_attention.gdn import bwd_torch_op

    calls = []
    real = bwd_torch_op.BACKWARD.check
    monkeypatch.setattr(bwd_torch_op.BACKWARD, "check", lambda *a: calls.append(a) or real(*a))
    fn = _fn()
    leaves, cu, _, _ = _meta_leaves()
    q, k, v, g, beta, h0 = leaves
    with torch.no_grad():
        fn(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    fn(*(t.detach() for t in (q, k, v, g, beta)), initial_state=h0.detach(), cu_seqlens=cu)
    assert calls == []
    o, _ = fn(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    assert len(calls) == 1 and o.requires_grad


def test_malformed_config_raises_at_the_forward_call():
    """What the backward plan rejects (here: fp32 q, k, v, which the kernels do not read) fails at the forward call when
    gradients are wanted, with the plan's message."""
    fn = _fn()
    leaves, cu, _, _ = _meta_leaves(qk_heads=4)
    q, k, v, g, beta, h0 = leaves
    with pytest.raises(NotImplementedError, match=r"gated_delta_net: q .*unsupported dtype fp32; accepted: bf16"):
        fn(q.detach().float().requires_grad_(True), k.detach().float(), v.detach().float(), g, beta, initial_state=h0, cu_seqlens=cu)


# -- GPU --------------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("D,compiled", [(64, False), (64, True), (128, False)], ids=["d64-eager", "d64-compiled", "d128-eager"])
def test_varlen_autograd_matches_reference(D, compiled):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences; loss through o and the final state."""
    skip_unless_sm90()
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 0, 300]
    cu = cu_seqlens(lengths, "cuda")
    leaves, do, dht = make_leaves((sum(lengths),), 4, D, len(lengths))
    got = grads_of(_step(_fn(), False, True), leaves, cu, do, dht, compiled)
    check_against_references(got, leaves, do, dht, cu, batched=False)


@pytest.mark.gpu
def test_dense_batch_autograd_matches_reference():
    """Dense [B, L, H, D] batch with an initial state, loss through o only (no final state)."""
    skip_unless_sm90()
    leaves, do, _ = make_leaves((2, 200), 2, 128, 2)
    got = grads_of(_step(_fn(), False, False), leaves, None, do, None, compiled=False)
    check_against_references(got, leaves, do, None, None, batched=True)


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gva_l2norm_autograd_matches_reference(compiled):
    """4 value heads over 2 q/k heads with q, k normalised in the kernels: gradients w.r.t. the raw q, k."""
    skip_unless_sm90()
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 65, 200]
    cu = cu_seqlens(lengths, "cuda")
    leaves, do, dht = make_leaves((sum(lengths),), 4, 64, len(lengths), qk_heads=2, l2norm=True)
    got = grads_of(_step(_fn(), True, True), leaves, cu, do, dht, compiled)
    check_against_references(got, leaves, do, dht, cu, batched=False, l2norm=True)


@pytest.mark.gpu
def test_loss_through_o_only_and_bf16_gates():
    """No initial or final state, ``o.float().sum()`` (autograd hands a stride-0 ``do``, which the hook materialises), bf16
    g (dg comes back bf16) and fp32 beta in one call."""
    skip_unless_sm90()
    from cudnn_testing.data import cu_seqlens

    lengths = [3, 130]
    cu = cu_seqlens(lengths, "cuda")
    (q, k, v, g, beta, _), _, _ = make_leaves((sum(lengths),), 2, 64, len(lengths), gate_dtype=torch.bfloat16)
    beta = beta.detach().float().requires_grad_(True)
    o, fs = _fn()(q, k, v, g, beta, cu_seqlens=cu)
    assert fs is None
    o.float().sum().backward()
    torch.cuda.synchronize()
    leaves = [q, k, v, g, beta, None]
    got = dict(zip(GRADS, [t.grad for t in leaves[:5]] + [None], strict=True))
    assert g.grad.dtype == torch.bfloat16 and beta.grad.dtype == torch.float32
    check_against_references(got, leaves, torch.ones_like(v, dtype=torch.bfloat16), None, cu, batched=False)
