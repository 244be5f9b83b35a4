"""GPU tests of the plan-time performance options that are compiled and PTX-checked on CPU but not yet
validated on the H200: split-K (decode shapes, fp32 partials in the caller's workspace, deterministic
reduction) and the staged bias (``stage_bias=True``: each tile's bias read once into shared memory).

Correctness is against fp32 torch with the FlashAttention rule, as in test_gemm_gpu.py. Split-K is also
checked for run-to-run bit identity (the reduction sums the partials in a fixed order, no atomics), for
K slices that are empty (split_k larger than the number of 64-deep k-tiles), for its workspace contract
(a short or missing workspace raises; execute allocates and syncs nothing when given one) and for CUDA-graph
capture. The staged bias must match the per-element-read bias bit for bit (same fp32 math, same order).
The schedule's tiles (128 x 224 / 192 / 128), 1x1 cluster and scheduler swizzles (with empty tiles in the last
band, and batched) are checked against the reference, a swizzle also bit for bit against the fixed schedule.
"""

from __future__ import annotations

import pytest

from cudnn_testing import detectors
from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_gemm import quantize_fp8, reference, reference_scaled
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm")


def _ab(m, n, k, dtype=torch.bfloat16, batch=None):
    lead = () if batch is None else (batch,)
    s = k**-0.25
    a = (torch.randn(*lead, m, k, device="cuda") * s).to(dtype)
    b = (torch.randn(*lead, n, k, device="cuda") * s).to(dtype).transpose(-1, -2)  # w.t(): K-major
    return a, b


def _poisoned(m, n, dtype=torch.bfloat16, lead=()):
    from cudnn.gemm.dense.api import alloc_rows

    return alloc_rows(lead, m, n, dtype, "cuda").fill_(float("nan"))


# decode and small-M shapes; K = 200 has 4 k-tiles, so split_k = 8 leaves 4 slices empty (they write zeros)
SPLIT_CASES = [(1, 4096, 4096, 4), (1, 520, 1000, 3), (7, 768, 200, 8), (64, 1280, 2056, 2), (200, 256, 4096, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,split", SPLIT_CASES, ids=lambda v: str(v))
def test_split_k_matches_reference(m, n, k, split):
    from cudnn.gemm import gemm

    a, b = _ab(m, n, k)
    out = _poisoned(m, n)
    d = gemm(a, b, split_k=split, out=out)["d"]
    ref, _ = reference(a, b)
    low, _ = reference(a, b, lowp=True)
    assert_close_fa(d, ref, low, name=f"split_k={split} {m}x{n}x{k}")


@pytest.mark.gpu
@pytest.mark.parametrize("bias_kind", ["col", "row"])
def test_split_k_epilogue_alpha_bias_activation(bias_kind):
    from cudnn.gemm import GemmSm90

    m, n, k = 5, 776, 1032
    a, b = _ab(m, n, k)
    bias = torch.randn(n if bias_kind == "col" else m, device="cuda", dtype=torch.bfloat16)
    out = _poisoned(m, n)
    plan = GemmSm90(a, b, out, bias=bias, bias_kind=bias_kind, activation="gelu_tanh", alpha=0.5, split_k=4)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(a, b, out, bias=bias, workspace=ws)
    ref, _ = reference(a, b, bias=bias, bias_kind=bias_kind, alpha=0.5, activation="gelu_tanh")
    low, _ = reference(a, b, bias=bias, bias_kind=bias_kind, alpha=0.5, activation="gelu_tanh", lowp=True)
    assert_close_fa(out, ref, low, name=f"split-K + {bias_kind} bias + gelu_tanh + alpha")


@pytest.mark.gpu
def test_split_k_batched_and_fp8():
    from cudnn.gemm import gemm

    nb, m, n, k = 3, 9, 264, 520
    a, b = _ab(m, n, k, batch=nb)
    d = gemm(a, b, split_k=3)["d"]
    ref, _ = reference(a, b)
    low, _ = reference(a, b, lowp=True)
    assert_close_fa(d, ref, low, name="batched split-K")

    a8, sa = quantize_fp8(torch.randn(1, 4096, device="cuda"), torch.float8_e4m3fn)
    w8, sb = quantize_fp8(torch.randn(1024, 4096, device="cuda") * 0.02, torch.float8_e4m3fn)
    d8 = gemm(a8, w8.t(), scale_a=sa, scale_b=sb, split_k=8)["d"]
    ref8, low8 = reference_scaled(a8, w8.t(), sa, sb)
    assert_close_fa(d8, ref8, low8, name="fp8 decode split-K")


@pytest.mark.gpu
def test_split_k_is_deterministic():
    from cudnn.gemm import gemm

    a, b = _ab(3, 2048, 8192)
    d1 = gemm(a, b, split_k=8)["d"].clone()
    for _ in range(3):
        d2 = gemm(a, b, split_k=8)["d"]
        assert torch.equal(d1, d2), "split-K results differ between runs"


@pytest.mark.gpu
def test_split_k_workspace_contract():
    from cudnn.gemm import GemmSm90

    m, n, k = 2, 512, 1024
    a, b = _ab(m, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plan = GemmSm90(a, b, d, split_k=4)
    plan.compile()
    need = plan.scratch_workspace_bytes()
    assert need >= 4 * m * n * 4
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(a, b, d)
    with pytest.raises(ValueError, match="workspace"):
        plan.execute(a, b, d, workspace=torch.empty(need - 128, dtype=torch.uint8, device="cuda"))
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    plan.execute(a, b, d, workspace=ws)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(a, b, d, workspace=ws), repeats=3)


@pytest.mark.gpu
@pytest.mark.detector
def test_split_k_capture_then_replay_matches_eager():
    from cudnn.gemm import GemmSm90

    m, n, k = 1, 1024, 2048
    a, b = _ab(m, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plan = GemmSm90(a, b, d, split_k=4)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    detectors.assert_capture_matches_eager(lambda: plan.execute(a, b, d, workspace=ws), [d])


STAGE_CASES = [
    ("col", None, (300, 520, 1000)),
    ("col", None, (1, 256, 64)),
    ("row", None, (1031, 776, 136)),
    ("col", "halves", (37, 768, 200)),
    ("col", "interleaved", (1031, 1280, 1000)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("bias_kind,swiglu,shape", STAGE_CASES, ids=lambda v: str(v))
def test_stage_bias_matches_per_element_bias(bias_kind, swiglu, shape):
    from cudnn.gemm import GemmSm90

    m, n, k = shape
    a, b = _ab(m, n, k)
    bias = torch.randn(n if bias_kind == "col" else m, device="cuda", dtype=torch.bfloat16)
    n_out = n // 2 if swiglu else n
    kw = dict(bias=bias, bias_kind=bias_kind, swiglu=swiglu, activation="none" if swiglu else "relu2")
    outs = []
    for staged in (False, True):
        out = _poisoned(m, n_out)
        plan = GemmSm90(a, b, out, stage_bias=staged, **kw)
        plan.compile()
        plan.execute(a, b, out, bias=bias)
        outs.append(out)
    ref, _ = reference(a, b, bias=bias, bias_kind=bias_kind, activation=kw["activation"], swiglu=swiglu)
    low, _ = reference(a, b, bias=bias, bias_kind=bias_kind, activation=kw["activation"], swiglu=swiglu, lowp=True)
    assert_close_fa(outs[1], ref, low, name=f"stage_bias {bias_kind} {swiglu} {shape}")
    assert torch.equal(outs[0], outs[1]), "staged bias differs from the per-element bias"


# dsrelu with the pre-activation loaded by TMA into the D ring (stage_aux). Several tiles per CTA (2048 x 4096)
# wrap the ring's mbarrier phases; odd N uses a padded-row pre; the batched case steps the TMA batch stride.
AUX_CASES = [(1, 256, 64, None), (37, 776, 200, None), (1031, 1280, 1000, None), (2048, 4096, 256, None), (130, 264, 136, 3)]


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,batch", AUX_CASES, ids=lambda v: str(v))
def test_stage_aux_dsrelu_matches_per_element(m, n, k, batch):
    from cudnn.gemm import gemm_dsrelu
    from cudnn.gemm.dense.api import alloc_rows

    lead = () if batch is None else (batch,)
    a, b = _ab(m, n, k, batch=batch)
    pre = alloc_rows(lead, m, n, torch.bfloat16, "cuda")
    pre.copy_(torch.randn(*lead, m, n, device="cuda"))
    outs = []
    for staged in (False, True):
        out = _poisoned(m, n, lead=lead)
        outs.append(gemm_dsrelu(a, b, pre, out=out, stage_aux=staged)["d"])
    ref, _ = reference(a, b, dsrelu_pre=pre)
    low, _ = reference(a, b, dsrelu_pre=pre, lowp=True)
    assert_close_fa(outs[1], ref, low, name=f"dsrelu stage_aux {m}x{n}x{k} L={batch}")
    assert torch.equal(outs[0], outs[1]), "TMA-staged pre differs from the per-element read"


# pingpong: 64 x 256 tiles, two consumer warpgroups taking turns (also with the staged bias / pre-activation,
# which then use one smem slot / barrier ring per warpgroup). Each output element is computed by the same
# m64n256k16 WGMMA sequence over the same k order as in the cooperative kernel, so D must match the default
# plan bit for bit (and the fp32 reference within tolerance). Shapes give odd and even tile counts per CTA
# (the second warpgroup has no tile when a CTA gets one) and many tiles per CTA (ring and phase wrap-around):
# 4096 x 4096 is 1024 tiles of 64 x 256, about 8 per CTA; K = 2048 is 32 k-tiles, several trips around the
# smem ring per tile (the unordered mainloops of the first version failed exactly there).
PINGPONG_CASES = [
    ("plain", (1, 256, 64)),
    ("plain", (300, 520, 1000)),
    ("plain", (4096, 4096, 512)),
    ("plain", (4096, 4096, 2048)),
    ("bias_gelu_amax_staged", (4096, 4096, 2048)),
    ("fp8_fast", (4096, 2048, 2048)),
    ("bias_gelu_amax", (1031, 1280, 1000)),
    ("swiglu_halves_pre", (2048, 2048, 256)),
    ("srelu_pre", (37, 776, 200)),
    ("dsrelu", (1031, 776, 136)),
    ("fp8", (2048, 1024, 2064)),
    ("swiglu_halves_bias_staged", (2048, 2048, 256)),
    ("dsrelu_staged", (2048, 4096, 256)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("what,shape", PINGPONG_CASES, ids=lambda v: str(v))
def test_pingpong_matches_cooperative(what, shape):
    from cudnn.gemm import GemmSm90

    m, n, k = shape
    if what in ("fp8", "fp8_fast"):
        a, sa = quantize_fp8(torch.randn(m, k, device="cuda"), torch.float8_e4m3fn)
        w, sb = quantize_fp8(torch.randn(n, k, device="cuda") * 0.02, torch.float8_e4m3fn)
        b = w.t()
    else:
        a, b = _ab(m, n, k)
    kw, tensors = {}, {}
    n_out = n
    if what in ("bias_gelu_amax", "bias_gelu_amax_staged"):
        tensors = dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16), amax=torch.empty(1, device="cuda"))
        kw = dict(activation="gelu_tanh", stage_bias=what.endswith("staged"))
    elif what == "swiglu_halves_pre":
        n_out = n // 2
        tensors = dict(aux=_poisoned(m, n))
        kw = dict(swiglu="halves", store_pre=True)
    elif what == "srelu_pre":
        tensors = dict(aux=_poisoned(m, n))
        kw = dict(activation="relu2", store_pre=True)
    elif what == "swiglu_halves_bias_staged":
        n_out = n // 2
        tensors = dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16))
        kw = dict(swiglu="halves", stage_bias=True)
    elif what in ("dsrelu", "dsrelu_staged"):
        tensors = dict(aux=torch.randn(m, n, device="cuda", dtype=torch.bfloat16))
        kw = dict(dsrelu=True, stage_aux=what == "dsrelu_staged")
    elif what in ("fp8", "fp8_fast"):
        tensors = dict(scale_a=sa, scale_b=sb)
        kw = dict(fast_accum=what == "fp8_fast")
    results = []
    for pingpong in (False, True):
        run_tensors = {name: (t.clone() if name in ("aux", "amax") and not kw.get("dsrelu") else t) for name, t in tensors.items()}
        out = _poisoned(m, n_out)
        plan = GemmSm90(a, b, out, pingpong=pingpong, **run_tensors, **kw)
        plan.compile()
        plan.execute(a, b, out, **run_tensors)
        results.append((out, run_tensors))
    (d0, t0), (d1, t1) = results
    if what in ("fp8", "fp8_fast"):
        ref, low = reference_scaled(a, b, sa, sb)
    else:
        rk = dict(bias=tensors.get("bias"), activation=kw.get("activation", "none"), swiglu=kw.get("swiglu"))
        if kw.get("dsrelu"):
            rk = dict(dsrelu_pre=tensors["aux"])
        ref, _ = reference(a, b, **rk)
        low, _ = reference(a, b, **rk, lowp=True)
    assert_close_fa(d1, ref, low, name=f"pingpong {what} {shape}")
    assert torch.equal(d0, d1), f"pingpong D differs from the cooperative kernel's (max {(d0.float() - d1.float()).abs().max().item():.3e})"
    for name in ("aux", "amax"):
        if name in t1 and not kw.get("dsrelu"):
            assert torch.equal(t0[name], t1[name]), f"pingpong {name} differs from the cooperative kernel's"


@pytest.mark.gpu
@pytest.mark.detector
def test_pingpong_execute_no_sync_no_alloc():
    from cudnn.gemm import GemmSm90

    a, b = _ab(1024, 768, 256)
    d = torch.empty(1024, 768, device="cuda", dtype=torch.bfloat16)
    plan = GemmSm90(a, b, d, pingpong=True)
    plan.compile()
    plan.execute(a, b, d)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(a, b, d), repeats=3)


# ---- schedule (cudnn.gemm.dense.schedule): the tiles, clusters and swizzles a non-fixed schedule can pick
SCHEDULE_CASES = [
    ("tile224_bias_gelu", (1000, 1000, 1000), dict(tile_mn=(128, 224))),
    ("tile224_nmajor_b", (517, 904, 328), dict(tile_mn=(128, 224), b_nmajor=True)),  # N-major B: 16-byte rows need N % 8 == 0
    ("tile192_cluster11", (777, 520, 1032), dict(tile_mn=(128, 192), cluster_mn=(1, 1))),
    ("tile128", (300, 1000, 520), dict(tile_mn=(128, 128))),
    ("swizzle4_batched", (700, 2048, 264), dict(swizzle=4, batch=3)),
    ("auto_waves_l2", (16384, 2048, 1024), dict(schedule="waves+l2")),  # A = 32 MB: the model picks a swizzle
    ("auto_waves_qwen_down", (2048, 5120, 4096), dict(schedule="waves")),
    # "auto2": the (N, K) set's second tile, picked by this M (128 x 224, swizzle 1: 23 N tiles)
    ("auto2_qwen_down", (2048, 5120, 4096), dict(schedule="auto2")),
    # the default schedule: a swizzle from N alone (16 N tiles: bands of 8) at an M far below a wave
    ("auto_default_m_free", (520, 4096, 264), dict(schedule="auto")),
    # a fused plan with a swizzle (api.SWIZZLE_FIXED_TILE_PLANS gives one to fixed-tile plans): the staged bias must
    # land on the reordered tiles
    ("swizzle4_staged_bias_gelu", (700, 2048, 264), dict(swizzle=4, stage_bias=True)),
    # last: 4 N tiles, so the scheduler's band of 8 runs 4 empty tile columns (TMA loads zero-fill, stores clip)
    ("swizzle8_phantom_columns", (1000, 1000, 520), dict(swizzle=8)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("what,shape,opts", SCHEDULE_CASES, ids=lambda v: str(v))
def test_schedule_variants_match_reference(what, shape, opts):
    """Every tile / cluster / swizzle of a schedule against fp32 torch; a swizzle only reorders tiles, so D is also
    bit-identical to the fixed schedule's."""
    from cudnn.gemm import GemmSm90

    opts = dict(opts)
    m, n, k = shape
    batch = opts.pop("batch", None)
    a, b = _ab(m, n, k, batch=batch)
    if opts.pop("b_nmajor", False):
        b = b.contiguous()  # (K, N) row-major: N-major B
    lead = () if batch is None else (batch,)
    tensors, kw = {}, {}
    if what.endswith("bias_gelu"):
        tensors = dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16))
        kw = dict(activation="gelu_tanh")
    outs = []
    for variant in (dict(schedule="fixed"), opts):
        out = _poisoned(m, n, lead=lead)
        plan = GemmSm90(a, b, out, **tensors, **kw, **variant)
        plan.compile()
        plan.execute(a, b, out, **tensors)
        outs.append((out, plan.config))
    (d0, cfg0), (d1, cfg1) = outs
    if what.startswith("auto"):
        assert cfg1 != cfg0, f"{what}: the schedule kept the fixed configuration {cfg0.tile_mn} {cfg0.cluster_mn} swizzle {cfg0.swizzle}"
    ref, _ = reference(a, b, bias=tensors.get("bias"), activation=kw.get("activation", "none"))
    low, _ = reference(a, b, bias=tensors.get("bias"), activation=kw.get("activation", "none"), lowp=True)
    assert_close_fa(d1, ref, low, name=f"schedule {what} {shape} {cfg1.tile_mn} {cfg1.cluster_mn} swizzle {cfg1.swizzle}")
    if cfg1.tile_mn == cfg0.tile_mn:
        assert torch.equal(d0, d1), f"{what}: same tile, different D (max {(d0.float() - d1.float()).abs().max().item():.3e})"


# Epilogue A/B options (api.AUX_PREFETCH / AUX_LDMATRIX / GELU_FOLD; run with -k epi_). The dsrelu variants change
# only when and how the staged pre-activation reaches the registers (deeper TMA prefetch; ldmatrix instead of
# per-element ld.shared), not the math: D must match the default staged plan bit for bit. 2048 x 4096 gives several
# tiles per CTA (ring phases wrap; at aux_prefetch=8 the whole tile is in flight); odd N has padded pre rows; the
# batched case steps the TMA batch stride; pingpong runs one ring per consumer warpgroup.
# An explicit swizzle keeps one compiled kernel per variant across the shapes (the schedule would pick a swizzle per
# shape: a compile each); 4 still reorders the tiles.
EPI_AUX_VARIANTS = [
    dict(aux_prefetch=3, aux_ldmatrix=True),
    dict(aux_prefetch=8, aux_ldmatrix=True),
    dict(aux_prefetch=1, aux_ldmatrix=True),
    dict(aux_prefetch=8, aux_ldmatrix=True, pingpong=True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,batch", AUX_CASES, ids=lambda v: str(v))
def test_epi_dsrelu_prefetch_matches_default(m, n, k, batch):
    from cudnn.gemm import GemmSm90
    from cudnn.gemm.dense.api import alloc_rows

    lead = () if batch is None else (batch,)
    a, b = _ab(m, n, k, batch=batch)
    pre = alloc_rows(lead, m, n, torch.bfloat16, "cuda")
    pre.copy_(torch.randn(*lead, m, n, device="cuda"))
    ref, _ = reference(a, b, dsrelu_pre=pre)
    low, _ = reference(a, b, dsrelu_pre=pre, lowp=True)
    outs = []
    for opts in [dict(aux_prefetch=1, aux_ldmatrix=False), *EPI_AUX_VARIANTS]:
        out = _poisoned(m, n, lead=lead)
        plan = GemmSm90(a, b, out, aux=pre, dsrelu=True, stage_aux=True, swizzle=4, **opts)
        plan.compile()
        assert (plan.config.aux_prefetch, plan.config.aux_ldmatrix) == (opts["aux_prefetch"], opts["aux_ldmatrix"])
        plan.execute(a, b, out, aux=pre)
        assert_close_fa(out, ref, low, name=f"dsrelu {opts} {m}x{n}x{k} L={batch}")
        outs.append(out)
    for opts, out in zip(EPI_AUX_VARIANTS, outs[1:], strict=True):
        assert torch.equal(outs[0], out), (
            f"dsrelu {opts}: D differs from the default staged plan (max {(outs[0].float() - out.float()).abs().max().item():.3e})"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("shape,staged", [((1031, 1280, 1000), False), ((4096, 4096, 512), True), ((1, 256, 64), True)], ids=lambda v: str(v))
def test_epi_gelu_fold_matches_reference(shape, staged):
    """gelu_tanh with folded constants: same function up to fp32 rounding, within the FA tolerance of the fp32
    reference and at most one bf16 ulp-ish from the textbook form."""
    from cudnn.gemm import GemmSm90

    m, n, k = shape
    a, b = _ab(m, n, k)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    ref, _ = reference(a, b, bias=bias, activation="gelu_tanh")
    low, _ = reference(a, b, bias=bias, activation="gelu_tanh", lowp=True)
    outs = []
    for fold in (False, True):
        out = _poisoned(m, n)
        plan = GemmSm90(a, b, out, bias=bias, activation="gelu_tanh", stage_bias=staged, gelu_fold=fold, swizzle=4)
        plan.compile()
        assert plan.config.gelu_fold == fold
        plan.execute(a, b, out, bias=bias)
        outs.append(out)
    assert_close_fa(outs[1], ref, low, name=f"gelu_fold {shape}")
    diff = (outs[0].float() - outs[1].float()).abs()
    assert (diff <= 1e-2 * outs[0].float().abs() + 1e-3).all(), f"gelu_fold departs from the textbook form (max {diff.max().item():.3e})"


# ---- FUSED_AUTO2 / AUX_KEEP_STAGES (issue #5; run with -k fused_auto2). At 2048 x 5120 x 4096 the plain plan's auto2
# pick is 128 x 224 (23 N tiles, about 3 tiles per CTA: the D / pre-activation ring phases wrap, at ring depths 6 and 8
# over 7 sub-tiles per tile); with fused_auto2 every staged-read fusion takes it too. D against the fp32 reference
# within the FA rule (amax within 2% of max |ref|); dsrelu's staged pre-activation only changes where it comes from, so
# D must also equal the per-element-read plan of the same tile bit for bit (explicit 128 x 224 tile, swizzle 1: one
# compile). swiglu keeps its 256-wide tile and configuration.
FUSED_AUTO2_CASES = ["bias", "srelu", "gelu_tanh", "amax", "dsrelu", "dsrelu_keep", "swiglu"]


@pytest.mark.gpu
@pytest.mark.parametrize("fusion", FUSED_AUTO2_CASES)
def test_fused_auto2_matches_reference(fusion):
    from cudnn.gemm import GemmSm90

    m, n, k = 2048, 5120, 4096
    if fusion == "swiglu":
        n = 2 * n
    a, b = _ab(m, n, k)
    n_out = n // 2 if fusion == "swiglu" else n
    tensors, kw, staged = {}, {}, "stage_bias"
    if fusion.startswith("dsrelu"):
        tensors = dict(aux=torch.randn(m, n, device="cuda", dtype=torch.bfloat16))
        kw, staged = dict(dsrelu=True), "stage_aux"
    else:
        tensors = dict(bias=torch.randn(n, device="cuda", dtype=torch.bfloat16))
        kw = {"srelu": dict(activation="relu2"), "gelu_tanh": dict(activation="gelu_tanh"), "swiglu": dict(swiglu="interleaved")}.get(fusion, {})
        if fusion == "amax":
            kw = dict(activation="none")
    opts = dict(fused_auto2=True, aux_keep_stages=fusion == "dsrelu_keep")

    def run(**plan_kw):
        t = dict(tensors)
        if fusion == "amax":
            t["amax"] = torch.full((1,), float("nan"), device="cuda")
        out = _poisoned(m, n_out)
        plan = GemmSm90(a, b, out, **t, **kw, **plan_kw)
        plan.compile()
        plan.execute(a, b, out, **t)
        return out, t.get("amax"), plan

    d1, amax1, plan = run(**opts)
    default = GemmSm90(a, b, _poisoned(m, n_out), **tensors, **kw, fused_auto2=False, **({"amax": torch.empty(1, device="cuda")} if fusion == "amax" else {}))
    default.check_support()
    if fusion == "swiglu":
        assert plan.config == default._make_config(), "fused_auto2 changed a swiglu plan"
    else:
        assert plan.config.tile_mn == (128, 224) and default.tile_mn() == (128, 256), (plan.config.tile_mn, default.tile_mn())
        assert getattr(plan.config, staged), f"{fusion}: the option's plan lost its staged reads"
        if fusion.startswith("dsrelu"):
            assert plan.config.aux_prefetch == (6 if fusion == "dsrelu_keep" else 8), plan.config.aux_prefetch
    rk = (
        dict(dsrelu_pre=tensors["aux"])
        if fusion.startswith("dsrelu")
        else dict(bias=tensors["bias"], activation=kw.get("activation", "none"), swiglu=kw.get("swiglu"))
    )
    ref, _ = reference(a, b, **rk)
    low, _ = reference(a, b, **rk, lowp=True)
    assert_close_fa(d1, ref, low, name=f"fused_auto2 {fusion} {plan.config.tile_mn} prefetch {plan.config.aux_prefetch}")
    if fusion == "amax":
        assert torch.isfinite(amax1).all() and abs(amax1.item() - ref.abs().max().item()) <= 2e-2 * ref.abs().max().item() + 1e-3, (
            amax1.item(),
            ref.abs().max().item(),
        )
    if fusion.startswith("dsrelu"):  # the new ring depths (6, 8 over 7 sub-tiles): also bit for bit against the per-element read
        d0, _, _ = run(tile_mn=(128, 224), swizzle=1, stage_aux=False)
        assert torch.equal(d0, d1), f"{fusion}: staged fused_auto2 D differs from the per-element plan (max {(d0.float() - d1.float()).abs().max().item():.3e})"
