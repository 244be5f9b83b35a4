"""The FlashAttention tolerance rule: ``max|out - ref| <= factor * max|out_lowp_torch - ref| + noise``.

``ref`` is computed in fp32 (or fp64); ``lowp`` is the same computation done by plain torch in the
output's dtype, which measures the rounding a correct low-precision kernel cannot avoid.
"""

from __future__ import annotations


def rounding_noise(dtype) -> float:
    import torch

    return {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(dtype, 1e-2)


def assert_close_fa(out, ref, lowp, name: str = "out", factor: float = 2.0, noise: float | None = None) -> None:
    """Assert ``out`` is within the FlashAttention rule of ``ref``; NaN and Inf never pass."""
    import torch

    out32, ref32, lowp32 = out.float(), ref.float(), lowp.float()
    if not torch.isfinite(out32).all():
        bad = (~torch.isfinite(out32)).nonzero()[:5].tolist()
        raise AssertionError(f"{name}: non-finite values at {bad}")
    noise = rounding_noise(out.dtype) if noise is None else noise
    err = (out32 - ref32).abs().max().item()
    base = (lowp32 - ref32).abs().max().item()
    bound = factor * base + noise
    if err > bound:
        idx = (out32 - ref32).abs().argmax().item()
        raise AssertionError(
            f"{name}: max|out-ref| = {err:.3e} exceeds {factor}*max|torch_{out.dtype}-ref| + noise = {bound:.3e} "
            f"(torch's own error {base:.3e}); worst flat index {idx}: out={out32.flatten()[idx].item():.5f} ref={ref32.flatten()[idx].item():.5f}"
        )


def rel_error(out, ref) -> float:
    """‖out - ref‖ / ‖ref‖ in fp64."""
    out64, ref64 = out.double(), ref.double()
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()
