"""FUSED_AUTO2 (the default since session 5) / AUX_KEEP_STAGES (opt-in) on CPU (issue #5): the plans they build, the
kernels they compile, and the plans ``fused_auto2=False`` restores (:mod:`cudnn.gemm.dense.fused_schedule`).

- plan level (metadata only): at qwen3-32b down M = 2048 the fused plans without fused_auto2 run 128 x 256 where the
  plain plan runs 128 x 224, and dsrelu's 8-deep pre-activation ring leaves 3 mainloop stages (the cause); with ``fused_auto2``
  every staged-read fusion takes the plain plan's tile, swiglu keeps its configuration; ``aux_keep_stages`` sizes the
  prefetch per tile of the set so that the stage count is the plain ring's; the kernel class agrees with the
  fused_schedule arithmetic (ring depth, shared-memory budget).
- compile-only: the new kernels (128 x 224 with staged bias + gelu + amax; dsrelu at 128 x 224 with 6- and 8-deep rings;
  dsrelu at 128 x 256 with a 4-deep prefetch) build for sm_90a with WGMMA m64n224k16 / m64n256k16, TMA loads with
  multicast, no local memory in the PTX and a zero cubin frame (no spills); and a fused_auto2 plan compiles its tile set
  once, so a new M never compiles (Rule 4).
GPU correctness: test_gemm_options_gpu.py -k fused_auto2.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl

FLOOR = "4.8.0"  # cudnn.gemm.CUTEDSL_MIN_VERSION
FUSIONS = ("bias", "srelu", "gelu_tanh", "amax", "dsrelu", "swiglu")


def _desc(shape, stride=None, dtype="bfloat16", name="t"):
    return TensorDesc(shape, stride, dtype, name) if stride else TensorDesc.contiguous(shape, dtype, name)


def _plan(fusion, m, n, k, **kw):
    """The plan a fusion wrapper builds for (M, N, K) (w.t() weights, bias (N,) except dsrelu), plus ``kw``."""
    from cudnn.gemm import GemmSm90

    a, b = _desc((m, k), name="a"), _desc((k, n), (1, k), name="b")
    d = _desc((m, n // 2 if fusion == "swiglu" else n), name="d")
    t = {} if fusion in ("plain", "dsrelu") else {"bias": _desc((n,), name="bias")}
    t.update(
        {
            "srelu": {"activation": "relu2"},
            "gelu_tanh": {"activation": "gelu_tanh"},
            "amax": {"amax": _desc((1,), dtype="float32", name="amax")},
            "dsrelu": {"aux": _desc((m, n), name="aux"), "dsrelu": True},
            "swiglu": {"swiglu": "interleaved"},
        }.get(fusion, {})
    )
    p = GemmSm90(a, b, d, **t, **kw)
    p.check_support()
    return p


QWEN_DOWN = (2048, 5120, 25600)


def test_fused_plans_without_fused_auto2_miss_the_plain_tile():
    """The cause, as plan metadata: plain takes 128 x 224 (auto2), the staged-read fusions with fused_auto2=False (the
    session-4 default) 128 x 256, dsrelu 3 stages."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense.fused_schedule import plan_summary

    plain = plan_summary(_plan("plain", *QWEN_DOWN))
    assert (plain["tile"], plain["stages"], plain["waves"], plain["auto2"]) == ((128, 224), 4, 3, True), plain
    for f in FUSIONS:
        s = plan_summary(_plan(f, *QWEN_DOWN, fused_auto2=False) if f != "swiglu" else _plan(f, 2048, 2 * 5120, 25600, fused_auto2=False))
        assert s["tile"] == (128, 256) and not s["auto2"], (f, s)
        assert s["stages"] == (3 if f == "dsrelu" else 4), (f, s)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fused_auto2_takes_the_plain_plans_tile(fusion):
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense.fused_schedule import mainloop_stages

    m, n, k = QWEN_DOWN
    if fusion == "swiglu":
        n *= 2
    plain = _plan("plain", m, n, k)
    default = _plan(fusion, m, n, k, fused_auto2=False)
    opt = _plan(fusion, m, n, k, fused_auto2=True)
    assert _plan(fusion, m, n, k)._make_config() == opt._make_config()  # FUSED_AUTO2 is the default
    if fusion == "swiglu":  # gate/up pairing needs 256-wide tiles: the option leaves the plan as it was
        assert opt._make_config() == default._make_config() and opt._tile_set == ()
        return
    assert opt.tile_mn() == plain.tile_mn() == (128, 224)
    assert [t for t, _ in opt._tile_set] == [t for t, _ in plain._tile_set] == [(128, 256)]
    assert opt.swizzle == plain.swizzle
    cfg = opt._make_config()
    assert cfg.stage_bias == (fusion != "dsrelu") and cfg.stage_aux == (fusion == "dsrelu")
    if fusion == "dsrelu":
        assert cfg.aux_prefetch == 8 and mainloop_stages(cfg.tile_mn, 8) == 3  # fused_auto2 alone keeps AUX_PREFETCH
        keep = _plan(fusion, m, n, k, fused_auto2=True, aux_keep_stages=True)
        assert keep._aux_prefetch_of == {(128, 224): 6, (128, 256): 4}
        assert keep._make_config().aux_prefetch == 6 and mainloop_stages((128, 224), 6) == mainloop_stages((128, 224)) == 4


def test_defaults_are_fused_auto2_and_off_restores_the_session4_plans():
    """FUSED_AUTO2 on, AUX_KEEP_STAGES off: the default plan is the fused_auto2=True one; fused_auto2=False builds the
    session-4 plans (staged reads at "auto"'s fixed 128 x 256, no tile set, AUX_PREFETCH as is)."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense import api

    assert api.FUSED_AUTO2 is True and api.AUX_KEEP_STAGES is False
    for shape in (QWEN_DOWN, (2048, 4096, 14336), (777, 5120, 1000), (1, 5120, 264)):
        for f in FUSIONS:
            m, n, k = shape
            n = 2 * n if f == "swiglu" else n
            d = _plan(f, m, n, k)
            on = _plan(f, m, n, k, fused_auto2=True, aux_keep_stages=False)
            assert d._make_config() == on._make_config() and d._tile_set == on._tile_set
            off = _plan(f, m, n, k, fused_auto2=False)
            if f != "swiglu":
                assert off.tile_mn() == (128, 256) and off._tile_set == () and not off._auto2 and off._aux_prefetch_of == {}, (f, shape)
                assert off._make_config().aux_prefetch == (8 if f == "dsrelu" else 1)


def test_stage_keeping_prefetch_matches_the_kernel():
    """fused_schedule's ring / stage / shared-memory arithmetic against GemmSm90Kernel's own fields."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense.fused_schedule import SMEM_CAPACITY_SM90, mainloop_stages, smem_bytes, stage_keeping_prefetch
    from cudnn.gemm.dense.kernel_sm90 import GemmSm90Config, GemmSm90Kernel

    want = {(128, 256): 4, (128, 224): 6, (128, 192): 8, (128, 128): 4}
    for tile, p in want.items():
        assert stage_keeping_prefetch(tile, 8) == p, tile
        assert mainloop_stages(tile, max(4, p)) == mainloop_stages(tile)
        assert smem_bytes(tile, max(4, p), stage_bias_or_aux=True) <= SMEM_CAPACITY_SM90
        kern = GemmSm90Kernel(GemmSm90Config(tile_mn=tile, dsrelu=True, stage_aux=True, aux_prefetch=p, aux_ldmatrix=True))
        assert kern.smem_capacity == SMEM_CAPACITY_SM90 and kern.epi_stage == max(4, p)
    assert mainloop_stages((128, 256), 8) == 3  # AUX_PREFETCH = 8 at the default tile: one stage less


def _opt_config(fusion, m, n, k, **kw):
    return _plan(fusion, m, n, k, fused_auto2=True, **kw)._make_config()


# the kernels the opt-ins add (each one compile, about 2 s on CPU)
NEW_KERNELS = {
    # the gelu_tanh plan's kernel plus amax (the heaviest staged-bias epilogue on the new tile)
    "gelu_amax_staged_bias_224": lambda: replace(_opt_config("gelu_tanh", *QWEN_DOWN), amax=True),
    "dsrelu_224_keep_prefetch6": lambda: _opt_config("dsrelu", *QWEN_DOWN, aux_keep_stages=True),
    "dsrelu_224_prefetch8": lambda: _opt_config("dsrelu", *QWEN_DOWN),
    "dsrelu_256_keep_prefetch4": lambda: _opt_config("dsrelu", 4096, 5120, 264, aux_keep_stages=True),
}


@pytest.mark.compile_only
@pytest.mark.parametrize("name", list(NEW_KERNELS))
def test_fused_auto2_kernels_compile(name, tmp_path):
    skip_unless_cutedsl(FLOOR, "cudnn.gemm sm90 kernel")
    from cudnn.gemm.dense.kernel_sm90 import compile_kernel

    cfg = NEW_KERNELS[name]()
    expect = {"gelu_amax_staged_bias_224": ((128, 224), 1), "dsrelu_224_keep_prefetch6": ((128, 224), 6)}.get(name)
    expect = expect or {"dsrelu_224_prefetch8": ((128, 224), 8), "dsrelu_256_keep_prefetch4": ((128, 256), 4)}[name]
    assert (cfg.tile_mn, cfg.aux_prefetch) == expect, cfg
    with keep_artifacts(tmp_path, "ptx,cubin") as ptx_text:
        compile_kernel(cfg, options=f"--keep-ptx --keep-cubin --dump-dir={tmp_path}")
        ptx = ptx_text()
    wgmma = f"m64n{cfg.tile_mn[1]}k16.f32.bf16.bf16"
    assert f"wgmma.mma_async.sync.aligned.{wgmma}" in ptx, f"no {wgmma} WGMMA"
    assert "cp.async.bulk.tensor" in ptx and ".multicast::cluster" in ptx, "no multicast TMA loads"
    assert "ld.local" not in ptx and "st.local" not in ptx, f"{name}: local memory in the PTX"
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), f"{name}: ptxas spilled (frame sizes {frames})"
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") and "cutlass" not in s for s in syms), syms
    if cfg.stage_bias:
        assert ptx.count("ld.global") == 1, "the staged bias is read once per tile"
    if cfg.stage_aux:
        ring = max(4, cfg.aux_prefetch)
        assert "ld.global" not in ptx, "the pre-activation comes by TMA"
        if cfg.aux_prefetch > 1:
            assert re.search(rf"cp\.async\.bulk\.wait_group\.read\s+{ring - cfg.aux_prefetch};", ptx), "prefetch does not wait for the ring"
            assert re.search(rf"cp\.async\.bulk\.wait_group\.read\s+{ring - 1};", ptx), f"the D ring is not {ring} deep"


@pytest.mark.compile_only
def test_fused_auto2_compiles_its_tile_set_once():
    """A fused_auto2 plan compiles both tiles of its (N, K) set (dsrelu with aux_keep_stages: each with its own prefetch);
    no later M compiles (Rule 4)."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm sm90 kernel")
    from cudnn.kernel_cache import kernel_cache

    n, k = 5120, 328  # a K no other test compiles these configurations with (the key holds no K: keep the test independent)

    def plan(fusion, m, **kw):
        p = _plan(fusion, m, n, k, fused_auto2=True, **kw)
        p.compile()
        return p

    for fusion, kw in (("gelu_tanh", {}), ("dsrelu", {"aux_keep_stages": True})):
        first = plan(fusion, 4096, **kw)
        assert first.tile_mn() == (128, 256) and [t for t, _ in first._tile_set] == [(128, 224)]
        before = kernel_cache.stats.misses
        picked = {(p.tile_mn(), p.config.aux_prefetch) for p in (plan(fusion, m, **kw) for m in (1, 77, 512, 2048))}
        want = {((128, 256), 4), ((128, 224), 6)} if fusion == "dsrelu" else {((128, 256), 1), ((128, 224), 1)}
        assert picked == want, picked
        assert kernel_cache.stats.misses == before, f"{fusion}: a new M compiled a kernel under fused_auto2"
