"""GPU correctness of the fp8 GEMM (Hopper fp8 WGMMA, per-tensor scales) against an fp32 reference.

Reference and tolerance (``cudnn_testing.reference_gemm.reference_scaled``): the fp32 reference runs on the
dequantized operands (``a.float() * scale_a``, exact), and ``lowp`` is that fp32 result rounded to D's dtype.
With fp8 operands every product is exact and the sums are fp32 in any correct kernel, so the only error a
kernel cannot avoid is D's rounding: the FlashAttention rule (factor 2 + the output dtype's noise) allows about
one ulp of D's format at the largest outputs. A wrong scale, a missed K slice or a mis-addressed tile is far
outside that.

Grid: (A, B) fp8 formats x odd shapes for bf16 D (K not a multiple of the 128-deep fp8 k-tile, M = 1, N not a
multiple of 256); then fp16 / e4m3 D with an output scale, bias + GELU, amax, unit scales (no scale tensors),
batched L, the torch op under torch.compile, and the no-sync / no-allocation detector (the scales are device
scalars: the host never reads them).
"""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_gemm import fp8_accum_noise, quantize_fp8, reference_scaled
from cudnn_testing.tolerance import assert_close_fa, rounding_noise

torch = pytest.importorskip("torch")

E4M3, E5M2 = "e4m3", "e5m2"
# K is a multiple of 16 (fp8 rows of a row-major a need 16-byte strides) but not of the 128-deep k-tile
SHAPES = [(1, 256, 64), (7, 264, 208), (300, 520, 1008), (1031, 776, 144), (2048, 1024, 2064)]
FORMATS = [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)]


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm")


def _dt(name):
    return {E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2}[name]


def _fp8_operands(m, n, k, fa=E4M3, fb=E4M3, batch=None):
    """Row-major fp8 a (M, K) and K-major b = w.t() of an (N, K) fp8 weight, with their fp32 scales."""
    lead = () if batch is None else (batch,)
    a32 = torch.randn(*lead, m, k, device="cuda") * 3.0
    w32 = torch.randn(*lead, n, k, device="cuda") * 0.02
    a, sa = quantize_fp8(a32, _dt(fa))
    w, sb = quantize_fp8(w32, _dt(fb))
    return a, w.transpose(-1, -2), sa, sb


def _poisoned(m, n, dtype, lead=()):
    from cudnn.gemm.dense.api import alloc_rows

    out = alloc_rows(lead, m, n, dtype, "cuda")
    return out.view(torch.uint8).fill_(0x7F).view(dtype) if dtype.itemsize == 1 else out.fill_(float("nan"))


@pytest.mark.gpu
@pytest.mark.parametrize("fa,fb", FORMATS, ids=[f"{a}x{b}" for a, b in FORMATS])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fp8_bf16_out(fa, fb, shape):
    from cudnn.gemm import gemm

    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k, fa, fb)
    out = _poisoned(m, n, torch.bfloat16)
    d = gemm(a, b, scale_a=sa, scale_b=sb, out=out)["d"]
    ref, low = reference_scaled(a, b, sa, sb, out_dtype=torch.bfloat16)
    assert_close_fa(d, ref, low, name=f"fp8 {fa}x{fb} {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("tile_n", [128, 192])
@pytest.mark.parametrize("shape", [(7, 264, 208), (1031, 776, 144), (2048, 1024, 2064)], ids=lambda s: "x".join(map(str, s)))
def test_fp8_promoted_tile_widths(tile_n, shape, monkeypatch):
    """Both promoted-accumulation tiles (api.FP8_PROMOTED_TILE_N): 128 x 128 and 128 x 192 (N not a multiple of
    192: a partial last tile), bf16 and fp16-with-scale_d D."""
    from cudnn.gemm import GemmSm90
    from cudnn.gemm.dense import api

    monkeypatch.setattr(api, "FP8_PROMOTED_TILE_N", tile_n)
    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k)
    for out_dtype in (torch.bfloat16, torch.float16):
        ref0, _ = reference_scaled(a, b, sa, sb)
        sd = (torch.finfo(out_dtype).max / 2 / ref0.abs().max()).reshape(1).float() if out_dtype == torch.float16 else None
        out = _poisoned(m, n, out_dtype)
        extra = {} if sd is None else {"scale_d": sd}
        plan = GemmSm90(a, b, out, scale_a=sa, scale_b=sb, **extra)
        plan.compile()
        assert plan.config.tile_mn == (128, tile_n)
        plan.execute(a, b, out, scale_a=sa, scale_b=sb, **extra)
        ref, low = reference_scaled(a, b, sa, sb, scale_d=sd, out_dtype=out_dtype)
        noise = rounding_noise(out_dtype) + fp8_accum_noise(a, b, sa, sb, sd)
        assert_close_fa(out, ref, low, name=f"fp8 promoted 128x{tile_n} {shape} -> {out_dtype}", noise=noise)


@pytest.mark.gpu
@pytest.mark.parametrize("out_name", ["float16", "float8_e4m3fn", "float8_e5m2"])
def test_fp8_other_outputs_with_output_scale(out_name):
    from cudnn.gemm import gemm

    out_dtype = getattr(torch, out_name)
    m, n, k = 300, 520, 1008
    a, b, sa, sb = _fp8_operands(m, n, k)
    ref0, _ = reference_scaled(a, b, sa, sb)
    sd = (torch.finfo(out_dtype).max / 2 / ref0.abs().max()).reshape(1).float()  # quantize D into half the range
    out = _poisoned(m, n, out_dtype)
    d = gemm(a, b, scale_a=sa, scale_b=sb, scale_d=sd, out=out)["d"]
    assert d.dtype == out_dtype
    ref, low = reference_scaled(a, b, sa, sb, scale_d=sd, out_dtype=out_dtype)
    assert_close_fa(d, ref, low, name=f"fp8 -> {out_name} with scale_d", noise=rounding_noise(out_dtype) + fp8_accum_noise(a, b, sa, sb, sd))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 520, 1008), (2048, 1024, 2064)], ids=lambda s: "x".join(map(str, s)))
def test_fp8_fast_accum_bf16_out(shape):
    """fast_accum=True (no promotion, 128 x 256 tiles): within bf16 D's rounding at these K."""
    from cudnn.gemm import gemm

    m, n, k = shape
    a, b, sa, sb = _fp8_operands(m, n, k)
    out = _poisoned(m, n, torch.bfloat16)
    d = gemm(a, b, scale_a=sa, scale_b=sb, out=out, fast_accum=True)["d"]
    ref, low = reference_scaled(a, b, sa, sb, out_dtype=torch.bfloat16)
    assert_close_fa(d, ref, low, name=f"fp8 fast_accum {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("pingpong", [False, True])
def test_fp8_promotion_every_two_k_tiles(pingpong):
    """promotion_interval=2 (the FP8_PROMOTION_INTERVAL A/B): 9 k-tiles = 4 pairs + a remainder, bf16 D."""
    from cudnn.gemm import GemmSm90

    m, n, k = 1031, 776, 1040
    a, b, sa, sb = _fp8_operands(m, n, k)
    out = _poisoned(m, n, torch.bfloat16)
    plan = GemmSm90(a, b, out, scale_a=sa, scale_b=sb, promotion_interval=2, pingpong=pingpong)
    plan.compile()
    plan.execute(a, b, out, scale_a=sa, scale_b=sb)
    ref, low = reference_scaled(a, b, sa, sb, out_dtype=torch.bfloat16)
    assert_close_fa(out, ref, low, name=f"fp8 promotion_interval=2 pingpong={pingpong}")


@pytest.mark.gpu
def test_fp8_promotion_is_more_accurate_than_fast_accum():
    """The promoted (default) sum is closer to the fp32 reference than the fast one, on fp16 D (ulp 16 at 3e4)."""
    from cudnn.gemm import gemm

    m, n, k = 300, 520, 4096
    a, b, sa, sb = _fp8_operands(m, n, k)
    ref0, _ = reference_scaled(a, b, sa, sb)
    sd = (torch.finfo(torch.float16).max / 2 / ref0.abs().max()).reshape(1).float()
    ref, _ = reference_scaled(a, b, sa, sb, scale_d=sd, out_dtype=torch.float16)
    errs = []
    for fast in (False, True):
        d = gemm(a, b, scale_a=sa, scale_b=sb, scale_d=sd, out=_poisoned(m, n, torch.float16), fast_accum=fast)["d"]
        errs.append((d.float() - ref).abs().mean().item())
    assert errs[0] < errs[1], f"promoted mean error {errs[0]:.3f} is not below fast_accum's {errs[1]:.3f}"


@pytest.mark.gpu
def test_fp8_bias_gelu_and_batched():
    from cudnn.gemm import GemmSm90

    nb, m, n, k = 2, 130, 264, 272
    a, b, sa, sb = _fp8_operands(m, n, k, E4M3, E5M2, batch=nb)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = _poisoned(m, n, torch.bfloat16, lead=(nb,))
    plan = GemmSm90(a, b, out, bias=bias, activation="gelu_tanh", scale_a=sa, scale_b=sb)
    plan.compile()
    plan.execute(a, b, out, bias=bias, scale_a=sa, scale_b=sb)
    ref, low = reference_scaled(a, b, sa, sb, bias=bias, activation="gelu_tanh")
    assert_close_fa(out, ref, low, name="batched fp8 + bias + gelu_tanh")


@pytest.mark.gpu
def test_fp8_unit_scales_and_amax():
    from cudnn.gemm import gemm_amax

    m, n, k = 257, 512, 512
    a, b, _, _ = _fp8_operands(m, n, k)
    r = gemm_amax(a, b)
    ref, low = reference_scaled(a, b)
    assert_close_fa(r["d"], ref, low, name="fp8 without scales")
    # amax is max |D| of the fp32 accumulator, before D's bf16 rounding: within half a bf16 ulp of max |D| ...
    amax, dmax, refmax = r["amax"][0].item(), r["d"].float().abs().max().item(), ref.abs().max().item()
    assert abs(amax - dmax) <= dmax * 2.0**-8, (amax, dmax)
    # ... and as close to the fp32 reference as D itself is (the fp8 WGMMA accumulation error of D applies to it)
    assert abs(amax - refmax) <= 2 * (low.float() - ref).abs().max().item() + refmax * 2.0**-8, (amax, refmax)


@pytest.mark.gpu
def test_fp8_scales_are_read_on_device_each_launch():
    """A plan re-reads the scale tensors every launch (they are device scalars, not plan constants)."""
    from cudnn.gemm import gemm

    m, n, k = 256, 512, 256
    a, b, sa, sb = _fp8_operands(m, n, k)
    d1 = gemm(a, b, scale_a=sa, scale_b=sb)["d"].float()
    sa2 = sa * 4
    d2 = gemm(a, b, scale_a=sa2, scale_b=sb)["d"].float()
    torch.testing.assert_close(d2, d1 * 4, rtol=0, atol=0)  # a power-of-two scale is exact


@pytest.mark.gpu
def test_fp8_torch_op_and_compile():
    import cudnn.gemm.ops  # noqa: F401  (registers torch.ops.cudnn.*)

    a, b, sa, sb = _fp8_operands(256, 512, 256)
    ref, low = reference_scaled(a, b, sa, sb)
    d = torch.ops.cudnn.gemm(a, b, scale_a=sa, scale_b=sb)
    assert_close_fa(d, ref, low, name="torch.ops.cudnn.gemm fp8")
    compiled = torch.compile(lambda x, y, p, q: torch.ops.cudnn.gemm(x, y, scale_a=p, scale_b=q, out_dtype=torch.float16), fullgraph=True)
    d2 = compiled(a, b, sa, sb)
    assert d2.dtype == torch.float16
    ref2, low2 = reference_scaled(a, b, sa, sb, out_dtype=torch.float16)
    assert_close_fa(d2, ref2, low2, name="torch.compile(gemm fp8 -> fp16)")


@pytest.mark.gpu
@pytest.mark.detector
def test_fp8_execute_no_sync_no_alloc():
    from cudnn.gemm import GemmSm90

    a, b, sa, sb = _fp8_operands(512, 768, 256)
    sd = torch.ones(1, device="cuda")
    d = torch.empty(512, 768, device="cuda", dtype=torch.float8_e4m3fn)
    plan = GemmSm90(a, b, d, scale_a=sa, scale_b=sb, scale_d=sd)
    plan.compile()
    plan.execute(a, b, d, scale_a=sa, scale_b=sb, scale_d=sd)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(a, b, d, scale_a=sa, scale_b=sb, scale_d=sd), repeats=3)


@pytest.mark.gpu
def test_fp8_rejects_missing_scale_at_execute():
    from cudnn.gemm import GemmSm90

    a, b, sa, sb = _fp8_operands(64, 256, 128)
    d = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
    plan = GemmSm90(a, b, d, scale_a=sa, scale_b=sb)
    plan.compile()
    with pytest.raises(ValueError):
        plan.execute(a, b, d, scale_a=sa)  # compiled with scale_b: a missing one must raise, never default to 1
    with pytest.raises(ValueError):
        plan.execute(a, b, d, scale_a=sa, scale_b=sb, scale_d=sb)  # not compiled in: would be ignored
