"""The torch custom ops ``torch.ops.cudnn_linear_attention.{gated_delta_net,kimi_delta_attention}_fwd`` under the public
``gated_delta_net`` / ``kimi_delta_attention``.

CPU (meta and fake tensors: the fake implementation is what runs): output metadata (THD varlen, dense batch, with
and without the final state), ``torch.compile(fullgraph=True)`` traces through the op, ``make_fx`` records one op
call, ``torch.library.opcheck`` (schema, autograd registration, fake tensor, AOT dispatch), backward through either
output runs through ``<kind>_bwd`` (its fake implementation on meta tensors; a compiled training step traces), a
configuration the KDA backward declines raises its NotImplementedError at the forward call (never silent wrong
gradients); the ``out=`` form refuses inputs that require grad.
GPU (marked gpu): compiled (fullgraph) equals eager bit for bit; GDN's backward runs on real tensors, KDA's GVA
inputs raise at the forward call. Gradient values: test_{gdn,kda}_autograd_gpu.py.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

KINDS = ("gated_delta_net", "kimi_delta_attention")


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention delta-rule ops")


def _public(kind):
    import cudnn.linear_attention as la

    return getattr(la, kind)


def _op(kind):
    _public(kind)  # the public wrapper imports the op module on first use
    from cudnn.linear_attention.gdn.torch_op import gated_delta_net_fwd
    from cudnn.linear_attention.kda.torch_op import kimi_delta_attention_fwd

    return gated_delta_net_fwd if kind == "gated_delta_net" else kimi_delta_attention_fwd


def _inputs(kind, device, lead=(100,), hk=2, h=4, d=64, n=2, varlen=True, state=True):
    q = torch.randn(*lead, hk, d, device=device).bfloat16()
    k = torch.randn(*lead, hk, d, device=device).bfloat16()
    v = torch.randn(*lead, h, d, device=device).bfloat16()
    g = torch.nn.functional.logsigmoid(torch.randn(*lead, h, *(() if kind == "gated_delta_net" else (d,)), device=device)) / 8
    beta = torch.rand(*lead, h, device=device)
    cu = torch.tensor([0, 30, lead[0]], dtype=torch.int32, device=device) if varlen else None
    s0 = torch.randn(n, h, d, d, device=device) * 0.5 if state else None
    return q, k, v, g, beta, cu, s0


@pytest.mark.parametrize("kind", KINDS)
def test_fake_metadata_varlen_dense_and_without_final_state(kind):
    fn = _public(kind)
    q, k, v, g, beta, cu, s0 = _inputs(kind, "meta")
    o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu)
    assert o.shape == v.shape and o.dtype == torch.bfloat16 and o.is_contiguous()
    assert fs.shape == (2, 4, 64, 64) and fs.dtype == torch.float32
    q, k, v, g, beta, _, _ = _inputs(kind, "meta", lead=(3, 50), varlen=False, state=False)
    o, fs = fn(q, k, v, g, beta, output_final_state=True)
    assert o.shape == (3, 50, 4, 64) and fs.shape == (3, 4, 64, 64)
    res = fn(q, k, v, g, beta)
    assert res["final_state"] is None and res["o"].shape == v.shape


@pytest.mark.parametrize("kind", KINDS)
def test_compile_fullgraph_and_make_fx_trace_one_op_call(kind):
    from torch.fx.experimental.proxy_tensor import make_fx

    fn = _public(kind)

    def f(q, k, v, g, beta, cu, s0):
        o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu)
        return o.float() * 2, fs

    x = _inputs(kind, "meta")
    o, fs = torch.compile(f, backend="eager", fullgraph=True)(*x)
    assert o.shape == x[2].shape and fs.shape == (2, 4, 64, 64)
    gm = make_fx(f, tracing_mode="fake")(*_inputs(kind, "cpu"))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert sum(t == f"cudnn_linear_attention.{kind}_fwd.default" for t in targets) == 1, targets


@pytest.mark.parametrize("kind", KINDS)
def test_opcheck(kind):
    q, k, v, g, beta, cu, s0 = _inputs(kind, "meta")
    torch.library.opcheck(
        _op(kind),
        (q, k, v, g, beta, 0.125, True, s0, True, cu),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"),
    )


@pytest.mark.parametrize("l2norm", [False, True])
def test_kda_declined_backward_raises_at_the_forward_call(l2norm):
    """A configuration the KDA backward declines (GVA here, in-kernel L2 norm) raises the backward plan's
    NotImplementedError at the forward call when an input requires grad; forward-only use is unaffected."""
    fn = _public("kimi_delta_attention")
    q, k, v, g, beta, cu, s0 = _inputs("kimi_delta_attention", "meta", hk=4 if l2norm else 2)
    s0.requires_grad_(True)
    what = "use_qk_l2norm_in_kernel=True is not implemented" if l2norm else r"GVA \(q/k heads 2 != v heads 4\) is not implemented"
    with pytest.raises(NotImplementedError, match=rf"kimi_delta_attention backward: {what}"):
        fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu, use_qk_l2norm_in_kernel=l2norm)
    with torch.no_grad():
        assert not fn(q, k, v, g, beta, initial_state=s0, cu_seqlens=cu, use_qk_l2norm_in_kernel=l2norm)["o"].requires_grad


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("through", ["o", "final_state"])
def test_backward_runs_through_the_backward_op(kind, through):
    """Meta tensors: autograd reaches torch.ops.cudnn_linear_attention.<kind>_bwd (its fake implementation) and returns
    every gradient with its input's metadata (GDN: GVA q/k; bf16 dq/dk, g's / beta's dtype for dg/dbeta, fp32 d initial_state)."""
    fn = _public(kind)
    q, k, v, g, beta, cu, s0 = _inputs(kind, "meta", hk=2 if kind == "gated_delta_net" else 4)
    leaves = (q, k, v, g, beta, s0)
    for t in leaves:
        t.requires_grad_(True)
    res = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu)
    res[through].float().sum().backward()
    for t in leaves:
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype


@pytest.mark.parametrize("kind", KINDS)
def test_training_step_compiles_fullgraph(kind):
    fn = _public(kind)

    def step(q, k, v, g, beta, cu, s0):
        o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu)
        return o.float().sum() + fs.sum()

    x = _inputs(kind, "meta", hk=2 if kind == "gated_delta_net" else 4)
    for t in (x[0], x[2], x[6]):
        t.requires_grad_(True)
    torch.compile(step, backend="aot_eager", fullgraph=True)(*x).backward()
    assert x[0].grad.shape == x[0].shape and x[6].grad.shape == x[6].shape


@pytest.mark.parametrize("kind", KINDS)
def test_out_form_refuses_inputs_that_require_grad(kind):
    fn = _public(kind)
    q, k, v, g, beta, cu, s0 = _inputs(kind, "meta")
    with pytest.raises(NotImplementedError, match=rf"{kind}\(out=\.\.\.\): an input requires grad"):
        fn(q, k, v.requires_grad_(True), g, beta, cu_seqlens=cu, out=torch.empty_like(v))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_equals_eager_and_backward_on_gpu(kind):
    skip_unless_sm90()
    fn = _public(kind)
    torch.manual_seed(0)
    q, k, v, g, beta, cu, s0 = _inputs(kind, "cuda", lead=(300,))
    k = torch.nn.functional.normalize(k.float(), dim=-1).bfloat16()

    def f(q, k, v, g, beta, cu, s0):
        o, fs = fn(q, k, v, g, beta, initial_state=s0, output_final_state=True, cu_seqlens=cu)
        return o.float() * 2 + 1, fs

    eager = f(q, k, v, g, beta, cu, s0)
    compiled = torch.compile(f, fullgraph=True)(q, k, v, g, beta, cu, s0)
    torch.cuda.synchronize()
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])
    assert torch.isfinite(eager[0]).all()
    if kind == "kimi_delta_attention":  # these inputs are GVA: the KDA backward declines them at the forward call
        with pytest.raises(NotImplementedError, match="GVA"):
            fn(q, k, v.requires_grad_(True), g, beta, initial_state=s0, cu_seqlens=cu)
    else:  # served: values are checked by test_gdn_bwd_gpu.py / test_gdn_autograd_gpu.py
        o, _ = fn(q, k, v.requires_grad_(True), g, beta, initial_state=s0, cu_seqlens=cu)
        o.float().sum().backward()
        assert v.grad is not None and torch.isfinite(v.grad.float()).all()
