"""Reference attention gradients in plain torch: autograd through
:func:`cudnn_testing.reference_attention.attention_ref`, in fp32 (the ground truth) or in the inputs' dtype (the
baseline of the FlashAttention rule ``assert_close_fa(grad, ref, lowp)``).
"""

from __future__ import annotations

from .reference_attention import attention_ref


def attention_grads_ref(q, k, v, do, *, upcast=True, sinks=None, **kw):
    """``(dq, dk, dv[, dsinks])`` of ``sum(attention(q, k, v) * do)``. Same mask keywords as ``attention_ref``.

    ``upcast``: leaves are fp32 copies (ground truth, fp32 grads); else leaves keep the inputs' dtype and the
    matmuls run in it (grads in that dtype). GQA/MQA grads come back per kv head (summed over the group)."""
    import torch

    dtype = torch.float32 if upcast else q.dtype
    leaves = [x.detach().to(dtype).requires_grad_(True) for x in (q, k, v)]
    s_leaf = sinks.detach().float().requires_grad_(True) if sinks is not None else None
    o, _ = attention_ref(*leaves, sinks=s_leaf, upcast=upcast, **kw)
    o.backward(do.to(o.dtype))
    grads = [x.grad for x in leaves]
    if s_leaf is not None:
        grads.append(s_leaf.grad)
    return tuple(grads)


def attention_grads_ref_varlen(q, k, v, do, cu_q, cu_k, *, upcast=True, **kw):
    """THD varlen: q / do (T_q, H, D), k / v (T_kv, H_kv, D), cumulative lengths as python lists.
    Returns ``(dq, dk, dv)`` packed like the inputs (fp32 when ``upcast``)."""
    import torch

    dqs, dks, dvs = [], [], []
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])

        def bhsd(x, s):
            return x[s].permute(1, 0, 2)[None]

        if cu_q[b + 1] == cu_q[b] or cu_k[b + 1] == cu_k[b]:  # an empty side: every gradient of the sequence is 0
            dt = torch.float32 if upcast else q.dtype
            dqs.append(torch.zeros_like(q[qs], dtype=dt))
            dks.append(torch.zeros_like(k[ks], dtype=dt))
            dvs.append(torch.zeros_like(v[ks], dtype=dt))
            continue
        g = attention_grads_ref(bhsd(q, qs), bhsd(k, ks), bhsd(v, ks), bhsd(do, qs), upcast=upcast, **kw)
        dqs.append(g[0][0].permute(1, 0, 2))
        dks.append(g[1][0].permute(1, 0, 2))
        dvs.append(g[2][0].permute(1, 0, 2))
    return torch.cat(dqs, 0), torch.cat(dks, 0), torch.cat(dvs, 0)


def sink_grad_from_output(o, do, lse, sinks):
    """``dsinks`` as an attention backward computes it from the forward's output: ``-sum_rows exp(sink - lse) *
    rowsum(do * o)`` over batch and rows, in fp32. Given the bf16 ``o`` of the low-precision reference, this is
    the baseline for kernels that form ``rowsum(do * o)`` from their own bf16 output (the rounding of o, not the
    matmuls, dominates the error of the sum). o, do: (B, H, S, D); lse: (B, H, S) natural-log, sink included."""
    import torch

    p_sink = torch.exp(sinks.float().view(1, -1, 1) - lse.float())
    return -(p_sink * (do.float() * o.float()).sum(-1)).sum((0, 2))


def assert_dsinks_close(dsinks, o, do, lse, sinks, ref, lowp):
    """The rule for a kernel's ``dsinks`` given the forward's ``o`` / ``lse`` it was handed: (1) the exact sum formed
    from them (:func:`sink_grad_from_output`), fp32 summation order aside, relative to the sum of |terms| per head; (2)
    against the fp32 ground truth ``ref`` (``attention_grads_ref``'s 4th output), the baseline being the worse of the bf16
    autograd ``lowp`` and that exact sum on the bf16 ``o`` (o's rounding, not the kernel, sets the error: the terms
    cancel, the sum is small)."""
    exact = sink_grad_from_output(o, do, lse, sinks)
    terms = sink_grad_from_output(o.float().abs(), do.float().abs(), lse, sinks).abs()  # sum of |terms| per head
    assert ((dsinks - exact).abs() <= 1e-3 * terms + 1e-6).all(), (dsinks, exact)
    err = (dsinks - ref[3]).abs().max().item()
    base = max((lowp[3].float() - ref[3]).abs().max().item(), (exact - ref[3]).abs().max().item())
    assert err <= 2 * base + 1e-3 * ref[3].abs().max().item() + 1e-4, (err, base)
