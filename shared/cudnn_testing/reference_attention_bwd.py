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
