"""GPU correctness of cudnn.gemm against fp32 torch (FlashAttention tolerance rule), on the GPU host.

Grid: dtype x (A major, B major) x odd shapes for the plain GEMM (the majors change the TMA/WGMMA
descriptors, so every pair runs); the fusions run on bf16 with row-major A and both B majors (their
epilogue code does not depend on the operand dtype or A's major). Shapes are not multiples of the
128 x 256 x 64 tile: M = 1, small M, K not a multiple of 64, and a batched case.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_gemm import reference
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")

SHAPES = [(1, 256, 64), (7, 264, 200), (300, 520, 1000), (1031, 776, 136), (2048, 1024, 2056)]
BATCHED = (3, 130, 264, 136)


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm")


def _operands(m, n, k, dtype, a_major, b_major, batch=None):
    lead = () if batch is None else (batch,)
    s = k**-0.25  # scaled before the views are taken: elementwise ops on a view return dense strides
    if a_major == "k":
        a = (torch.randn(*lead, m, k, device="cuda") * s).to(dtype)
    else:  # M-major: the transpose of a (K, M) row-major tensor (M padded to 8 for 16-byte strides)
        mp = (m + 7) // 8 * 8
        a = (torch.randn(*lead, k, mp, device="cuda") * s).to(dtype)[..., :m].transpose(-1, -2)
    if b_major == "n":
        b = (torch.randn(*lead, k, n, device="cuda") * s).to(dtype)
    else:  # K-major: w.t() of an (N, K) nn.Linear weight
        b = (torch.randn(*lead, n, k, device="cuda") * s).to(dtype).transpose(-1, -2)
    return a, b


def _poisoned_out(shape, dtype):
    from cudnn.gemm.dense.api import alloc_rows

    out = alloc_rows(tuple(shape[:-2]), shape[-2], shape[-1], dtype, "cuda")
    return out.fill_(float("nan"))


# bf16 runs every (A, B) major pair; fp16 differs only in the element type, so it runs the default pair.
PLAIN_GRID = [("bf16", mj) for mj in ("kk", "kn", "mk", "mn")] + [("fp16", "kk")]


@pytest.mark.gpu
@pytest.mark.parametrize("dt,majors", PLAIN_GRID, ids=[f"{d}-{m}" for d, m in PLAIN_GRID])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_plain(dt, majors, shape):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    from cudnn.gemm import gemm

    m, n, k = shape
    a, b = _operands(m, n, k, dtype, majors[0], majors[1])
    out = _poisoned_out((m, n), dtype)
    d = gemm(a, b, out=out)["d"]
    torch.cuda.synchronize()
    ref, _ = reference(a, b)
    low, _ = reference(a, b, lowp=True)
    assert_close_fa(d, ref, low, name=f"gemm {majors} {shape}")


@pytest.mark.gpu
def test_batched_bias_alpha_beta_c():
    from cudnn.gemm import gemm

    nb, m, n, k = BATCHED
    a, b = _operands(m, n, k, torch.bfloat16, "k", "k", batch=nb)
    c = torch.randn(nb, m, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    d = gemm(a, b, bias=bias, c=c, alpha=0.5, beta=-1.5)["d"]
    ref, _ = reference(a, b, bias=bias, c=c, alpha=0.5, beta=-1.5)
    low, _ = reference(a, b, bias=bias, c=c, alpha=0.5, beta=-1.5, lowp=True)
    assert_close_fa(d, ref, low, name="batched gemm + c + bias")


@pytest.mark.gpu
def test_row_bias_and_transposed_c():
    from cudnn.gemm import gemm

    m, n, k = 300, 520, 1000
    a, b = _operands(m, n, k, torch.bfloat16, "k", "n")
    c = torch.randn(n, m, device="cuda", dtype=torch.float32).t()  # column-major fp32 c
    bias = torch.randn(m, device="cuda", dtype=torch.bfloat16)
    d = gemm(a, b, bias=bias, bias_kind="row", c=c)["d"]
    ref, _ = reference(a, b, bias=bias, bias_kind="row", c=c)
    low, _ = reference(a, b, bias=bias, bias_kind="row", c=c, lowp=True)
    assert_close_fa(d, ref, low, name="row bias + fp32 col-major c")


FUSION_SHAPES = [(1, 512, 64), (37, 768, 200), (1031, 1280, 1000)]


# Every fusion with K-major B (nn.Linear weights); N-major B only where B's TMA view differs (swiglu halves
# is a hierarchical view of B) -- the epilogue itself does not see B's major.
FUSIONS = ["srelu", "gelu_tanh", "gelu_erf", "swiglu_interleaved", "swiglu_halves", "amax", "dsrelu"]
FUSION_GRID = [(f, "k") for f in FUSIONS] + [("swiglu_halves", "n")]


@pytest.mark.gpu
@pytest.mark.parametrize("fusion,b_major", FUSION_GRID, ids=[f"{f}-b{m}" for f, m in FUSION_GRID])
@pytest.mark.parametrize("shape", FUSION_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fusions(fusion, b_major, shape):
    import cudnn.gemm as G

    m, n, k = shape
    a, b = _operands(m, n, k, torch.bfloat16, "k", b_major)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    if fusion == "srelu":
        r = G.gemm_srelu(a, b, bias=bias, store_pre=True)
        ref, pre = reference(a, b, bias=bias, activation="relu2")
        low, lpre = reference(a, b, bias=bias, activation="relu2", lowp=True)
        assert_close_fa(r["pre"], pre, lpre, name="srelu pre")
    elif fusion.startswith("gelu"):
        approx = "tanh" if fusion == "gelu_tanh" else "none"
        r = G.gemm_gelu(a, b, bias=bias, approximate=approx)
        ref, _ = reference(a, b, bias=bias, activation=fusion)
        low, _ = reference(a, b, bias=bias, activation=fusion, lowp=True)
    elif fusion.startswith("swiglu"):
        layout = fusion.split("_")[1]
        r = G.gemm_swiglu(a, b, bias=bias, layout=layout, store_pre=True)
        ref, pre = reference(a, b, bias=bias, swiglu=layout)
        low, lpre = reference(a, b, bias=bias, swiglu=layout, lowp=True)
        assert_close_fa(r["pre"], pre, lpre, name=f"swiglu {layout} pre")
    elif fusion == "amax":
        r = G.gemm_amax(a, b, bias=bias)
        ref, _ = reference(a, b, bias=bias)
        low, _ = reference(a, b, bias=bias, lowp=True)
        torch.testing.assert_close(r["amax"][0], ref.abs().max(), rtol=1e-5, atol=1e-6)
    else:
        pre_fwd = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        r = G.gemm_dsrelu(a, b, pre_fwd)
        ref, _ = reference(a, b, dsrelu_pre=pre_fwd)
        low, _ = reference(a, b, dsrelu_pre=pre_fwd, lowp=True)
    assert_close_fa(r["d"], ref, low, name=f"{fusion} {shape}")


@pytest.mark.gpu
def test_torch_ops_and_compile():
    import cudnn.gemm.ops  # noqa: F401  (registers torch.ops.cudnn.*)

    a, b = _operands(256, 512, 128, torch.bfloat16, "k", "k")
    d = torch.ops.cudnn.gemm(a, b)
    ref, _ = reference(a, b)
    low, _ = reference(a, b, lowp=True)
    assert_close_fa(d, ref, low, name="torch.ops.cudnn.gemm")
    compiled = torch.compile(lambda x, y: torch.ops.cudnn.gemm_srelu(x, y), fullgraph=True)
    d2 = compiled(a, b)
    ref2, _ = reference(a, b, activation="relu2")
    low2, _ = reference(a, b, activation="relu2", lowp=True)
    assert_close_fa(d2, ref2, low2, name="torch.compile(gemm_srelu)")
    d3, amax = torch.ops.cudnn.gemm_amax(a, b)
    torch.testing.assert_close(amax[0], ref.abs().max(), rtol=1e-5, atol=1e-6)
