"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the sm90 GEMM builds from placeholder arguments and its
PTX really uses WGMMA and TMA bulk-tensor copies, under the ``cudnn`` symbol prefix (Rule 6).
Two configurations keep the set small: the plain K-major GEMM with a 2x1 multicast cluster, and the
heaviest epilogue (M-major A, N-major B, swiglu over B's halves, bias, stored pre-activation, amax)."""

from __future__ import annotations

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
