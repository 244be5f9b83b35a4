"""Random inputs and output poisoning. Never test on zeros: they hide unwritten outputs."""

from __future__ import annotations


def randn(shape, dtype, device, scale: float = 1.0, generator=None):
    import torch

    return (torch.randn(shape, dtype=torch.float32, device=device, generator=generator) * scale).to(dtype)


def poison(t):
    """Fill ``t`` with NaN (float) or a sentinel (int) so any element a kernel fails to write shows up."""
    import torch

    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    return t.fill_(torch.iinfo(t.dtype).min)


def empty_poisoned(shape, dtype, device):
    import torch

    return poison(torch.empty(shape, dtype=dtype, device=device))


def strided_view(shape, dtype, device, perm):
    """A tensor of logical ``shape`` whose memory is laid out in ``perm`` order (e.g. BSHD storage for a BHSD view)."""
    import torch

    stored = [shape[p] for p in perm]
    base = torch.randn(stored, dtype=torch.float32, device=device).to(dtype)
    inv = [perm.index(i) for i in range(len(perm))]
    return base.permute(*inv)


def cu_seqlens(lengths, device):
    import torch

    out = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    out[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return out.to(device)
