"""Autograd through the public ``cudnn.linear_attention.kimi_delta_attention``: its custom op's registered backward runs
``torch.ops.cudnn_linear_attention.kimi_delta_attention_bwd`` (the three sm_90a backward kernels, never a torch
fallback); what that backward declines (``use_qk_l2norm_in_kernel=True``, GVA) raises the backward plan's
NotImplementedError at the forward call when an input requires grad.

CPU (meta tensors, runs in CI): the AOT-autograd backward graph of a training step holds exactly one
``kimi_delta_attention_bwd`` call and no matmul-class aten op; a declined configuration raises at the forward call in
eager and under ``torch.compile(fullgraph=True)`` (static and dynamic shapes), and not under ``torch.no_grad()``.
GPU (marked gpu): the leaves' ``.grad`` after ``loss.backward()`` match the fp32 token-by-token recurrence's autograd
gradients, eager and ``torch.compile(fullgraph=True)``, varlen with initial / final state, both gate regimes, dense
batch, a loss through ``o`` only with bf16 gates; declined configurations raise on real tensors.

Tolerance (the FlashAttention rule, as test_kda_bwd_gpu.py): with ``ref`` the fp32 autograd gradients and ``lowp`` the
hand-written chunked backward rounding to bf16 at the kernels' operand boundaries::

    max|ours - ref| <= 2 * max|lowp - ref| + 2e-3 * max|ref|
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

KIND = "kimi_delta_attention"
GRADS = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention autograd")


def _fn():
    import cudnn.linear_attention as la

    return la.kimi_delta_attention


def make_leaves(lead, H, D, n_seqs, device="cuda", qk_heads=None, regime="weak", gate_dtype=torch.float32):
    """Fresh leaves (requires_grad) q, k, v bf16, per-channel g [.., H, D] and beta in ``gate_dtype``, h0 fp32, and the
    upstream gradients do (bf16) and dht (fp32). k unit-norm; gates weak ``logsigmoid(N) / 8`` or fla's safe-gate
    range ``-5 sigmoid(N)``."""
    import torch.nn.functional as F

    hk = H if qk_heads is None else qk_heads
    q = torch.randn(*lead, hk, D, device=device).to(torch.bfloat16)
    k = F.normalize(torch.randn(*lead, hk, D, device=device), dim=-1).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device=device).to(torch.bfloat16)
    x = torch.randn(*lead, H, D, device=device)
    g = (F.logsigmoid(x) / 8 if regime == "weak" else -5.0 * torch.sigmoid(x)).to(gate_dtype)
    beta = torch.rand(*lead, H, device=device).to(gate_dtype)
    h0 = torch.randn(n_seqs, H, D, D, device=device) * 0.5
    leaves = [t.requires_grad_(True) for t in (q, k, v, g, beta, h0)]
    do = torch.randn(*lead, H, D, device=device).to(torch.bfloat16)
    dht = torch.randn(n_seqs, H, D, D, device=device)
    return leaves, do, dht


def _step(fn, with_final, l2norm=False):
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


def check_against_references(got, leaves, do, dht, cu, batched):
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    q, k, v, g, beta, h0 = (None if t is None else t.detach() for t in leaves)
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    args = [add(t) for t in (q, k, v, g.float(), beta.float(), do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*args, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*args, dtype=torch.bfloat16, **kw)
    for name, leaf in zip(GRADS, leaves, strict=True):
        if leaf is None:
            continue
        out = got[name]
        assert out is not None and out.shape == leaf.shape and out.dtype == leaf.dtype, name
        r, lo = ref[name], low[name]
        out = out if batched or name == "dh0" else out[None]
        noise = 2e-3 * r.abs().max().item() + (8e-3 * r.abs().max().item() if out.dtype == torch.bfloat16 and name in ("dg", "dbeta") else 0.0)
        assert_close_fa(out, r, lo, name=name, factor=2.0, noise=noise)


DECLINED = [
    pytest.param(2, False, r"GVA \(q/k heads 2 != v heads 4\) is not implemented", id="gva"),
    pytest.param(4, True, r"use_qk_l2norm_in_kernel=True is not implemented", id="l2norm"),
]


# -- CPU (meta tensors) ----------------------------------------------------------------------------------------------


def _meta_leaves(qk_heads=4):
    from cudnn_testing.data import cu_seqlens

    leaves, do, dht = make_leaves((100,), 4, 64, 2, device="meta", qk_heads=qk_heads)
    return leaves, cu_seqlens([30, 70], "cpu").to("meta"), do, dht


def test_backward_graph_is_one_backward_op_call():
    """AOT autograd on meta tensors: one kimi_delta_attention_fwd call in the forward graph, one
    kimi_delta_attention_bwd call in the backward graph, no matmul-class aten op in either (no torch reference)."""
    from functorch.compile import aot_function, make_boxed_func

    graphs = {}

    def capture(name):
        def compiler(gm, _):
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    leaves, cu, do, dht = _meta_leaves()
    step = _step(_fn(), True)
    aot_function(lambda *a: step(*a), fw_compiler=capture("fw"), bw_compiler=capture("bw"))(*leaves, cu, do, dht).backward()
    fw = [str(n.target) for n in graphs["fw"].graph.nodes if n.op == "call_function"]
    bw = [str(n.target) for n in graphs["bw"].graph.nodes if n.op == "call_function"]
    assert fw.count(f"cudnn_linear_attention.{KIND}_fwd.default") == 1, fw
    assert bw.count(f"cudnn_linear_attention.{KIND}_bwd.default") == 1, bw
    heavy = {"aten.bmm.default", "aten.mm.default", "aten.matmul.default", "aten.einsum.default", "aten.cumsum.default"}
    assert not heavy.intersection(fw + bw), (fw, bw)
    for t in leaves:
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


@pytest.mark.parametrize("qk_heads,l2norm,message", DECLINED)
def test_declined_config_raises_at_the_forward_call(qk_heads, l2norm, message):
    """Eager: the forward call raises the backward plan's NotImplementedError when an input requires grad (here only the
    initial state); forward-only use of the same configuration is served."""
    fn = _fn()
    leaves, cu, _, _ = _meta_leaves(qk_heads)
    q, k, v, g, beta, h0 = (t.detach() for t in leaves)
    with pytest.raises(NotImplementedError, match=rf"{KIND} backward: {message}"):
        fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0.requires_grad_(True), cu_seqlens=cu)
    with torch.no_grad():
        o, _ = fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, cu_seqlens=cu)
    assert o.shape == v.shape and not o.requires_grad


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("qk_heads,l2norm,message", DECLINED)
def test_declined_config_raises_when_compiled(qk_heads, l2norm, message, dynamic):
    """torch.compile(fullgraph=True): tracing the forward with a grad-requiring input raises (dynamo wraps it; the
    plan's NotImplementedError is the cause), with symbolic extents too (the check reads their hints)."""
    leaves, cu, do, _ = _meta_leaves(qk_heads)
    step = _step(_fn(), False, l2norm)
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:  # noqa: PT011  (the wrapper type is dynamo's; the cause is checked below)
        torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=dynamic)(*leaves, cu, do, None)
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = e.__cause__
    assert any(isinstance(x, NotImplementedError) and f"{KIND} backward:" in str(x) for x in chain), chain


# -- GPU --------------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize(
    "D,regime,compiled", [(64, "weak", False), (64, "weak", True), (128, "strong", False)], ids=["d64-weak-eager", "d64-weak-compiled", "d128-strong-eager"]
)
def test_varlen_autograd_matches_reference(D, regime, compiled):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences; loss through o and the final state."""
    skip_unless_sm90()
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 64, 65, 0, 200]
    cu = cu_seqlens(lengths, "cuda")
    leaves, do, dht = make_leaves((sum(lengths),), 2, D, len(lengths), regime=regime)
    got = grads_of(_step(_fn(), True), leaves, cu, do, dht, compiled)
    check_against_references(got, leaves, do, dht, cu, batched=False)


@pytest.mark.gpu
def test_dense_batch_autograd_matches_reference():
    """Dense [B, L, H, D] batch with an initial state, loss through o only (no final state)."""
    skip_unless_sm90()
    leaves, do, _ = make_leaves((2, 200), 2, 128, 2)
    got = grads_of(_step(_fn(), False), leaves, None, do, None, compiled=False)
    check_against_references(got, leaves, do, None, None, batched=True)


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


@pytest.mark.gpu
@pytest.mark.parametrize("qk_heads,l2norm,message", DECLINED)
def test_declined_config_raises_on_gpu(qk_heads, l2norm, message):
    """Real tensors: the same NotImplementedError at the forward call, eager; no gradient is produced."""
    skip_unless_sm90()
    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens([30, 70], "cuda")
    leaves, _, _ = make_leaves((100,), 4, 64, 2, qk_heads=qk_heads)
    q, k, v, g, beta, h0 = leaves
    with pytest.raises(NotImplementedError, match=rf"{KIND} backward: {message}"):
        _fn()(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, cu_seqlens=cu)
    assert all(t.grad is None for t in leaves)
