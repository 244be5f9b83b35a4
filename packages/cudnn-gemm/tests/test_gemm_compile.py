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
    "fp8_e4m3_scaled_cluster2": (dict(ab_dtype="float8_e4m3fn", scale_ab=True), "m64n256k32.f32.e4m3.e4m3"),
    "fp8_e5m2_to_e4m3_scale_d_amax": (
        dict(ab_dtype="float8_e5m2", d_dtype="float8_e4m3fn", scale_ab=True, scale_d=True, amax=True, cluster_mn=(1, 1)),
        "m64n256k32.f32.e5m2.e5m2",
    ),
    "splitk4_bias_relu": (dict(split_k=4, cluster_mn=(1, 1), bias="n", activation="relu"), "m64n256k16.f32.bf16.bf16"),
    "stage_bias_relu2": (dict(bias="n", stage_bias=True, activation="relu2"), "m64n256k16.f32.bf16.bf16"),
    "stage_aux_dsrelu": (dict(dsrelu=True, stage_aux=True), "m64n256k16.f32.bf16.bf16"),
    "pingpong_staged_bias_gelu_amax": (
        dict(tile_mn=(64, 256), pingpong=True, bias="n", stage_bias=True, activation="gelu_tanh", amax=True),
        "m64n256k16.f32.bf16.bf16",
    ),
}


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
    if cfg.pingpong:
        # each consumer warpgroup synchronizes its own epilogue: a 128-thread named barrier whose id is its warpgroup
        assert re.search(r"bar\.sync\s+%r\d+, 128;", ptx), "no per-warpgroup named barrier in the pingpong epilogue"
        assert "ld.local" not in ptx and "st.local" not in ptx, "pingpong spills registers"
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
