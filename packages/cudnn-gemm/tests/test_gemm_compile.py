"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the sm90 GEMM builds from placeholder arguments and its
PTX really uses WGMMA and TMA bulk-tensor copies, under the ``cudnn`` symbol prefix (Rule 6).
Two configurations keep the set small: the plain K-major GEMM with a 2x1 multicast cluster, and the
heaviest epilogue (M-major A, N-major B, swiglu over B's halves, bias, stored pre-activation, amax)."""

from __future__ import annotations

import re

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl

CONFIGS = {
    "plain_kk_cluster2": dict(),
    "swiglu_halves_mn_bias_pre_amax": dict(a_major="m", b_major="n", swiglu=True, swiglu_halves=True, bias="n", store_pre=True, amax=True, cluster_mn=(1, 1)),
}


@pytest.mark.compile_only
@pytest.mark.parametrize("name", list(CONFIGS))
def test_compiles_to_wgmma_and_tma(name, tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.gemm sm90 kernel")
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, compile_kernel

    with keep_artifacts(tmp_path) as ptx_text:
        # the flags as well as the env: the DSL reads CUTE_DSL_KEEP once, at import
        compile_kernel(GemmSm90Config(**CONFIGS[name]), options=f"--keep-ptx --dump-dir={tmp_path}")
        ptx = ptx_text()
    assert "wgmma.mma_async" in ptx, "no WGMMA in the PTX"
    assert "cp.async.bulk.tensor" in ptx, "no TMA bulk-tensor copy in the PTX"
    assert "stmatrix" in ptx, "epilogue does not go through stmatrix"
    if CONFIGS[name].get("cluster_mn", (2, 1)) != (1, 1):
        assert ".multicast::cluster" in ptx, "2x1 cluster without TMA multicast"
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms
    assert not any("cutlass" in s for s in syms), syms


# fp8 (both WGMMA instruction variants, fp8 and bf16 outputs) and the plan-time options that are not yet
# validated on the GPU (split-K, staged bias): each compiles for sm_90a and emits the instructions it promises.
OPTION_CONFIGS = {
    "fp8_e4m3_fast_accum_cluster2": (dict(ab_dtype="float8_e4m3fn", scale_ab=True, fast_accum=True), "m64n256k32.f32.e4m3.e4m3"),
    # the default fp8 plan: 128 x 128 tiles, WGMMA partial sums promoted into a second fp32 accumulator
    "fp8_e5m2_promoted_to_e4m3_scale_d_amax": (
        dict(ab_dtype="float8_e5m2", d_dtype="float8_e4m3fn", tile_mn=(128, 128), scale_ab=True, scale_d=True, amax=True, cluster_mn=(1, 1)),
        "m64n128k32.f32.e5m2.e5m2",
    ),
    "fp8_e4m3_promoted_n192_every2": (
        dict(ab_dtype="float8_e4m3fn", tile_mn=(128, 192), scale_ab=True, promotion_interval=2),
        "m64n192k32.f32.e4m3.e4m3",
    ),
    # the schedule's extra width (cudnn.gemm.dense.schedule) with the scheduler swizzle, both majors served
    "tile224_swizzle8_mn_bias_gelu": (
        dict(tile_mn=(128, 224), swizzle=8, a_major="m", b_major="n", bias="n", activation="gelu_tanh"),
        "m64n224k16.f32.bf16.bf16",
    ),
    "splitk4_bias_relu": (dict(split_k=4, cluster_mn=(1, 1), bias="n", activation="relu"), "m64n256k16.f32.bf16.bf16"),
    "stage_bias_relu2": (dict(bias="n", stage_bias=True, activation="relu2"), "m64n256k16.f32.bf16.bf16"),
    "stage_aux_dsrelu": (dict(dsrelu=True, stage_aux=True), "m64n256k16.f32.bf16.bf16"),
    # epilogue A/B options (api.AUX_PREFETCH / AUX_LDMATRIX / GELU_FOLD): the whole pre-activation tile in flight
    # (8-deep D ring) read back with ldmatrix; gelu_tanh with folded constants
    "stage_aux_dsrelu_prefetch8_ldmatrix": (dict(dsrelu=True, stage_aux=True, aux_prefetch=8, aux_ldmatrix=True), "m64n256k16.f32.bf16.bf16"),
    "gelu_fold_stage_bias": (dict(bias="n", stage_bias=True, activation="gelu_tanh", gelu_fold=True), "m64n256k16.f32.bf16.bf16"),
    # epilogue A/B round 2 (api.AMAX_FAST / SWIGLU_TANH): unpredicated amax (a staged bias keeps its other mode's
    # predicate), silu through one tanh.approx
    "amax_fast_stage_bias": (dict(bias="n", stage_bias=True, amax=True, amax_fast=True), "m64n256k16.f32.bf16.bf16"),
    "swiglu_tanh_bias": (dict(bias="n", swiglu=True, swiglu_tanh=True), "m64n256k16.f32.bf16.bf16"),
    "pingpong_staged_bias_gelu_amax": (
        dict(tile_mn=(64, 256), pingpong=True, bias="n", stage_bias=True, activation="gelu_tanh", amax=True),
        "m64n256k16.f32.bf16.bf16",
    ),
}


def cfg_ring(cfg) -> int:
    """Depth of the D smem ring of a 16-bit-output config (grown to aux_prefetch when that is deeper)."""
    return max(4, cfg.aux_prefetch)


@pytest.mark.compile_only
@pytest.mark.parametrize("name", list(OPTION_CONFIGS))
def test_fp8_and_options_compile(name, tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.gemm sm90 kernel")
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, compile_kernel

    fields, wgmma = OPTION_CONFIGS[name]
    cfg = GemmSm90Config(**fields)
    with keep_artifacts(tmp_path / "gemm") as ptx_text:
        compile_kernel(cfg, options=f"--keep-ptx --dump-dir={tmp_path / 'gemm'}")
        ptx = ptx_text()
    assert f"wgmma.mma_async.sync.aligned.{wgmma}" in ptx, f"no {wgmma} WGMMA in the PTX"
    assert "cp.async.bulk.tensor" in ptx, "no TMA bulk-tensor copy in the PTX"
    if cfg.ab_dtype.startswith("float8"):
        assert "m64n256k16" not in ptx, "an fp8 kernel emitted a 16-bit WGMMA"
    if cfg.d_dtype == "float8_e4m3fn":
        assert "cvt.rn.satfinite.e4m3x2.f32" in ptx, "fp8 output without a saturating e4m3 conversion"
    if cfg.scale_ab:
        assert ptx.count("ld.global") >= 2, "scales are not read by the kernel"
    if cfg.stage_bias:
        # the tile's 256 bias values are read once per tile, one per consumer thread (2 per thread when one
        # 128-thread warpgroup owns the tile: pingpong), then from shared memory
        assert ptx.count("ld.global") == (2 if cfg.pingpong else 1), ptx.count("ld.global")
    if cfg.stage_aux:
        # the pre-activation comes by TMA (8 sub-tile loads per tile on top of A and B), none per element
        assert "ld.global" not in ptx, "stage_aux still reads aux per element from global memory"
        assert ptx.count("cp.async.bulk.tensor.3d.shared::cta.global") > ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global"), "no aux TMA loads"
    if cfg.aux_ldmatrix:
        # the staged pre-activation leaves shared memory by ldmatrix (16-byte rows), not per-element 2-byte loads
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx, "aux_ldmatrix without ldmatrix"
        assert "ld.shared.b16" not in ptx, "aux_ldmatrix still reads the pre-activation per element"
    if cfg.aux_prefetch > 1:
        # before issuing a sub-tile's aux load into a ring buffer, the D stores from that buffer must have read it
        assert re.search(rf"cp\.async\.bulk\.wait_group\.read\s+{cfg_ring(cfg) - cfg.aux_prefetch};", ptx), "aux prefetch does not wait for the ring's stores"
        # and the D store ring is as deep as the prefetch window (its acquire leaves depth - 1 stores pending)
        assert re.search(rf"cp\.async\.bulk\.wait_group\.read\s+{cfg_ring(cfg) - 1};", ptx), "the D ring did not grow to the prefetch depth"
    if cfg.activation == "gelu_tanh":
        assert "tanh.approx.f32" in ptx, "gelu_tanh without the hardware tanh"
        one_plus = re.search(r"add\.f32\s+%r\d+, %r\d+, 0f3F800000;", ptx)
        assert (one_plus is None) == cfg.gelu_fold, "gelu_fold: the textbook 1 + tanh(...) is (still / no longer) there"
    if cfg.ab_dtype.startswith("float8") and not cfg.fast_accum:
        # promotion: each k-tile's WGMMAs are retired (wait_group 0) inside the k loop, then added to the fp32 sum
        drain = re.search(r"wgmma\.commit_group\.sync\.aligned;\s*wgmma\.wait_group\.sync\.aligned\s+0;", ptx)
        assert drain, "no per-k-tile WGMMA drain"
        # ... and right after it (same loop body) every accumulator register is added into the fp32 sum
        acc_regs = cfg.tile_mn[0] * cfg.tile_mn[1] // 256
        assert ptx[drain.end() : drain.end() + 8000].count("add.f32") >= acc_regs, "the WGMMA partial sums are not promoted"
    if cfg.swiglu:
        # silu(g) = g * rcp(1 + ex2(-g log2 e)) by default; swiglu_tanh: h * tanh(h) + h, one MUFU per output
        assert ("tanh.approx.f32" in ptx) == cfg.swiglu_tanh and ("ex2.approx" in ptx) != cfg.swiglu_tanh, "swiglu_tanh: wrong silu form"
        assert ("rcp.approx" in ptx) != cfg.swiglu_tanh, "swiglu_tanh still divides"
    if cfg.pingpong:
        # each consumer warpgroup synchronizes its own epilogue: a 128-thread named barrier whose id is its warpgroup
        assert re.search(r"bar\.sync\s+%r\d+, 128;", ptx), "no per-warpgroup named barrier in the pingpong epilogue"
        # and the two mainloops take turns: bar.sync on its own 256-thread barrier, bar.arrive on the other's
        # (two arrives: the first warpgroup opening its own turn at start, and the hand-over after each mainloop)
        assert re.search(r"bar\.sync\s+%r\d+, 256;", ptx), "pingpong mainloops do not wait for their turn"
        assert len(re.findall(r"bar\.arrive\s+%r\d+, 256;", ptx)) >= 2, "pingpong mainloops do not hand over their turn"
    assert "ld.local" not in ptx and "st.local" not in ptx, f"{name} spills registers"
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms
    if cfg.split_k > 1:
        from cudnn.gemm.dense.splitk_reduce_sm90 import compile_reduce

        with keep_artifacts(tmp_path / "reduce") as reduce_ptx:
            compile_reduce(cfg, options=f"--keep-ptx --dump-dir={tmp_path / 'reduce'}")
            rptx = reduce_ptx()
        rsyms = kernel_symbols(rptx)
        assert rsyms and all(s.startswith("cudnn") and "cutlass" not in s for s in rsyms), rsyms
        assert not re.search(r"^\s*(atom|red)\.", rptx, re.M), "the split-K reduction must be deterministic (no atomics)"


@pytest.mark.compile_only
def test_amax_fast_drops_the_bounds_predicate(tmp_path):
    """amax_fast: the epilogue's per-element bounds tests (setp) are gone: about as many as the plain kernel's, where
    the predicated amax adds one per accumulator element (128 per thread for a 128 x 256 tile); same max count."""
    skip_unless_cutedsl("4.8.0", "cudnn.gemm sm90 kernel")
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, compile_kernel

    ptx = {}
    for name, fields in (("plain", {}), ("amax", dict(amax=True)), ("fast", dict(amax=True, amax_fast=True))):
        with keep_artifacts(tmp_path / name) as ptx_text:
            compile_kernel(GemmSm90Config(**fields), options=f"--keep-ptx --dump-dir={tmp_path / name}")
            ptx[name] = ptx_text()
    setp = {k: len(re.findall(r"^\s*setp\.", v, re.M)) for k, v in ptx.items()}
    fmax = {k: len(re.findall(r"^\s*max\.(?:NaN\.)?f32", v, re.M)) for k, v in ptx.items()}
    assert setp["amax"] >= setp["plain"] + 64, setp  # the predicated form: bounds tests per element
    assert setp["fast"] <= setp["plain"] + 4, setp  # amax_fast: none per element
    assert fmax["fast"] >= 128 and fmax["amax"] >= 128, fmax  # one max per accumulator element either way
    assert "ld.local" not in ptx["fast"] and "st.local" not in ptx["fast"], "amax_fast spills registers"


@pytest.mark.compile_only
def test_auto2_compiles_its_tile_set_once():
    """schedule "auto2" on CPU (plans from TensorDescs): the first plan of an (N, K) compiles both tiles of its set, so
    no later M compiles, neither one that keeps 128 x 256 nor one that picks 128 x 224 (Rule 4; the GPU detector
    test_epi2_auto2_compile_cache_hit_when_m_changes checks the same through real launches)."""
    skip_unless_cutedsl("4.8.0", "cudnn.gemm sm90 kernel")
    from cudnn.api_base import TensorDesc
    from cudnn.gemm import GemmSm90
    from cudnn.kernel_cache import kernel_cache

    n, k = 5120, 264  # a K no other test compiles with this tile set (the cache key holds no K, but keep the test independent)

    def plan(m):
        a = TensorDesc.contiguous((m, k), "bfloat16", "a")
        b = TensorDesc((k, n), (1, k), "bfloat16", "b")  # w.t(): K-major
        p = GemmSm90(a, b, TensorDesc.contiguous((m, n), "bfloat16", "d"), schedule="auto2")
        p.compile()
        return p

    first = plan(4096)
    assert first.tile_mn() == (128, 256) and [t for t, _ in first._tile_set] == [(128, 224)]
    before = kernel_cache.stats.misses
    picked = {plan(m).tile_mn() for m in (1, 77, 512, 2048)}
    assert picked == {(128, 256), (128, 224)}, picked
    assert kernel_cache.stats.misses == before, "a new M compiled a kernel under schedule auto2"
