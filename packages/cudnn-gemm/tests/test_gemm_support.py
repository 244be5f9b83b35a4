"""check_support on metadata only (no GPU, no cutlass import): what is served and what is declined."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl

FLOOR = "4.8.0"  # cudnn.gemm.CUTEDSL_MIN_VERSION


def _desc(shape, stride=None, dtype="bfloat16", name="t"):
    return TensorDesc(shape, stride, dtype, name) if stride else TensorDesc.contiguous(shape, dtype, name)


def _plan(m=300, n=512, k=200, **kw):
    from cudnn.gemm import GemmSm90

    a = kw.pop("a", _desc((m, k), name="a"))
    b = kw.pop("b", _desc((k, n), name="b"))
    d = kw.pop("d", _desc((m, n), name="d"))
    return GemmSm90(a, b, d, **kw)


def test_serves_all_majors():
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    k, n, m = 200, 512, 300
    for a in (_desc((m, k), name="a"), _desc((m, k), (1, m + 4), name="a")):
        for b in (_desc((k, n), name="b"), _desc((k, n), (1, k), name="b")):
            p = _plan(a=a, b=b)
            assert p.check_support()
    p = _plan(a=_desc((m, k), (1, m + 4), name="a"), b=_desc((k, n), (1, k), name="b"))
    p.check_support()
    assert (p._a_major, p._b_major) == ("m", "k")


def test_check_support_imports_no_cutlass():
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    code = (
        "import sys; from cudnn.api_base import TensorDesc as T; from cudnn.gemm import GemmSm90;"
        "p = GemmSm90(T.contiguous((8, 64), 'bfloat16', 'a'), T.contiguous((64, 256), 'bfloat16', 'b'), T.contiguous((8, 256), 'bfloat16', 'd'));"
        "assert p.check_support(); assert 'cutlass' not in sys.modules, 'check_support imported cutlass'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(a=_desc((300, 200), (200, 2), name="a")), "unit stride"),
        (dict(a=_desc((300, 201), name="a"), b=_desc((201, 512), name="b")), "multiple of 8"),
        (dict(a=_desc((300, 200), dtype="float32", name="a")), "unsupported dtype"),
        (dict(swiglu="halves", n=384, d=_desc((300, 192), name="d")), "multiple of 256"),
    ],
)
def test_declines_with_named_tensor(kw, match):
    with pytest.raises(NotImplementedError, match=match):
        _plan(**kw).check_support()


def test_malformed_values_raise_value_error():
    with pytest.raises(ValueError, match="disagree on K"):
        _plan(b=_desc((100, 512), name="b")).check_support()
    with pytest.raises(ValueError, match="activation"):
        _plan(activation="swish").check_support()
    with pytest.raises(ValueError, match="aux is required"):
        _plan(store_pre=True).check_support()


def test_declines_below_the_dsl_floor_naming_both_versions(monkeypatch):
    """Rule 7: on a DSL below the family floor, check_support declines with the version-naming error."""
    from cudnn import dsl_gate

    monkeypatch.setattr(dsl_gate, "cutedsl_state", lambda: dsl_gate.CuteDslState(version="4.6.2", importable=True))
    with pytest.raises(dsl_gate.CuteDslVersionError, match=r"needs nvidia-cutlass-dsl>=4\.8\.0, but 4\.6\.2 is installed"):
        _plan().check_support()


# ---- fp8, split-K, staged bias (metadata only)
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"


def _fp8_plan(m=300, n=512, k=256, a_stride=None, b_stride="k", b_dtype=E4M3, d_dtype="bfloat16", **kw):
    a = _desc((m, k), a_stride, dtype=E4M3, name="a")
    b = _desc((k, n), (1, k) if b_stride == "k" else None, dtype=b_dtype, name="b")
    return _plan(a=a, b=b, d=_desc((m, n), dtype=d_dtype, name="d"), **kw)


def _scale(name):
    return _desc((1,), dtype="float32", name=name)


def test_fp8_serves_k_major_with_scales():
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    for b_dtype in (E4M3, E5M2):
        for d_dtype in ("bfloat16", "float16", E4M3, E5M2):
            p = _fp8_plan(b_dtype=b_dtype, d_dtype=d_dtype, scale_a=_scale("sa"), scale_b=_scale("sb"), scale_d=_scale("sd"))
            assert p.check_support()
            cfg = p._make_config()
            assert cfg.ab_dtype == E4M3 and cfg.scale_ab and cfg.scale_d and cfg.b_dtype == ("" if b_dtype == E4M3 else E5M2)
    assert _fp8_plan().check_support()  # unit scales: no scale tensors at all


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(b_stride="n"), r"fp8 b \(shape=\(256, 512\), stride=\(512, 1\).*N-major"),
        (dict(a_stride=(1, 304)), r"fp8 a \(shape=\(300, 256\), stride=\(1, 304\).*M-major"),
        (dict(k=200), "multiple of 16 elements"),
        (dict(d_dtype="float32"), "an fp8 GEMM writes"),
        (dict(split_k=2, amax=_desc((1,), dtype="float32", name="amax")), "split_k=2 does not serve amax"),
    ],
)
def test_fp8_and_split_declines(kw, match):
    with pytest.raises(NotImplementedError, match=match):
        _fp8_plan(**kw).check_support()


def test_scales_and_options_values():
    with pytest.raises(NotImplementedError, match="fp8 operands only"):
        _plan(scale_a=_scale("sa"), scale_b=_scale("sb")).check_support()
    with pytest.raises(ValueError, match="go together"):
        _fp8_plan(scale_a=_scale("sa")).check_support()
    with pytest.raises(ValueError, match="one float32"):
        _fp8_plan(scale_a=_desc((2,), dtype="float32", name="sa"), scale_b=_scale("sb")).check_support()
    with pytest.raises(ValueError, match="split_k"):
        _plan(split_k=0).check_support()
    with pytest.raises(ValueError, match="stage_bias"):
        _plan(stage_bias=True).check_support()
    with pytest.raises(NotImplementedError, match="beta \\* c"):
        _plan(split_k=4, c=_desc((300, 512), name="c")).check_support()


def test_split_k_workspace_size_and_default_cluster():
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    p = _plan(m=3, n=1001, k=4096, b=_desc((4096, 1001), (1, 4096), name="b"), d=_desc((3, 1001), (1008, 1), name="d"), split_k=8)
    assert p.check_support()
    assert p.scratch_workspace_bytes() == 8 * 3 * 1004 * 4 + (-(8 * 3 * 1004 * 4) % 128)
    assert p.cluster_mn == (1, 1) and _plan().cluster_mn == (2, 1)
    assert _plan().scratch_workspace_bytes() == 0


# ---- fp8 accumulation mode and the per-fusion plan defaults (metadata only)
def test_fp8_fast_accum_picks_the_tile():
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    for fast, pingpong, tile in ((False, False, (128, 192)), (False, True, (64, 128)), (True, False, (128, 256)), (True, True, (64, 256))):
        p = _fp8_plan(fast_accum=fast, pingpong=pingpong)
        assert p.check_support()
        cfg = p._make_config()
        assert (cfg.tile_mn, cfg.fast_accum, cfg.pingpong) == (tile, fast, pingpong)
    # the expert tile override (the benchmark's A/B of FP8_PROMOTED_TILE_N), validated on metadata
    assert _fp8_plan(tile_mn=(128, 128)).check_support()
    with pytest.raises(ValueError, match="N <= 192"):
        _fp8_plan(tile_mn=(128, 256)).check_support()
    with pytest.raises(ValueError, match="must be"):
        _fp8_plan(tile_mn=(128, 192), pingpong=True).check_support()
    p = _fp8_plan()
    p.check_support()
    assert p._make_config().promotion_interval == 1
    p = _fp8_plan(promotion_interval=2)
    p.check_support()
    assert p._make_config().promotion_interval == 2
    with pytest.raises(ValueError, match="promotion_interval"):
        _fp8_plan(promotion_interval=0).check_support()
    # 16-bit operands: fast_accum means nothing and stays out of the compile key
    p = _plan(fast_accum=True)
    p.check_support()
    assert p._make_config().fast_accum is False and p._make_config().tile_mn == (128, 256) and p._make_config().promotion_interval == 1
    # fp8 swiglu needs 256-wide tiles: only with fast_accum=True
    a, b = _desc((300, 256), dtype=E4M3, name="a"), _desc((256, 512), (1, 256), dtype=E4M3, name="b")
    with pytest.raises(NotImplementedError, match="fast_accum=True"):
        _plan(a=a, b=b, d=_desc((300, 256), name="d"), swiglu="interleaved").check_support()
    assert _plan(a=a, b=b, d=_desc((300, 256), name="d"), swiglu="interleaved", fast_accum=True).check_support()


def test_fusion_defaults_apply_where_the_plan_takes_them(monkeypatch):
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense import api

    m, n = 300, 512
    bias = _desc((n,), name="bias")
    aux = _desc((m, n), name="aux")
    # the defaults set from the H200 run: cooperative with the staged bias / pre-activation
    p = _plan(bias=bias, activation="gelu_tanh")
    p.check_support()
    assert (p.pingpong, p.stage_bias, p.stage_aux) == (False, True, False)
    p = _plan(aux=aux, dsrelu=True)
    p.check_support()
    assert (p.pingpong, p.stage_bias, p.stage_aux) == (False, False, True)
    p = _plan()
    p.check_support()
    assert (p.pingpong, p.stage_bias, p.stage_aux) == (False, False, False)  # plain: nothing to stage
    assert api.fusion_of(activation="gelu_tanh", has_bias=True) == "gelu"
    assert api.fusion_of(swiglu="halves", amax=True) == "swiglu" and api.fusion_of(has_bias=True) == "bias"
    flipped = {k: {o: True for o in v} for k, v in api.FUSION_DEFAULTS.items()}
    monkeypatch.setattr(api, "FUSION_DEFAULTS", flipped)
    p = _plan(bias=bias, activation="gelu_tanh")
    p.check_support()
    assert (p.pingpong, p.stage_bias) == (True, True) and p._make_config().tile_mn == (64, 256)
    p = _plan(aux=aux, dsrelu=True)
    p.check_support()
    assert (p.pingpong, p.stage_bias, p.stage_aux) == (True, False, True)  # no bias to stage
    p = _plan(aux=_desc((m, n), dtype="float32", name="aux"), dsrelu=True)
    p.check_support()
    assert p.stage_aux is False  # aux not in d's dtype: the default is not applied (never a decline)
    p = _plan(bias=bias, split_k=2)
    p.check_support()
    assert (p.pingpong, p.stage_bias) == (False, False)  # neither combines with split-K
    p = _plan(bias=bias, activation="gelu_tanh", pingpong=False, stage_bias=False)  # explicit values win
    p.check_support()
    assert (p.pingpong, p.stage_bias) == (False, False)


# ---- tile / cluster / swizzle schedule (cudnn.gemm.dense.schedule; metadata only)
def test_schedule_model_choices():
    from cudnn.gemm.dense.schedule import choose_swizzle, choose_tile, wave_traffic

    # squares and shapes whose 128 x 256 tiles fill their waves keep the default tile and cluster
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096), (4096, 4096, 14336), (16384, 28672, 8192)):
        c = choose_tile(m, n, k)
        assert (c.tile_mn, c.cluster_mn, c.swizzle) == ((128, 256), (2, 1), 1), (m, n, k, c)
    # Qwen3-32B down, M = 2048: 320 tiles = 2.42 waves of 132 at 128 x 256; 368 = 2.79 waves of 7/8 the work at 128 x 224
    c = choose_tile(2048, 5120, 25600)
    assert (c.tile_mn, c.cluster_mn, c.waves) == ((128, 224), (2, 1), 3)
    # decode-sized problems are not modelled (split-K's territory)
    assert choose_tile(16, 5120, 25600).tile_mn == (128, 256)
    # an explicit cluster is kept
    assert choose_tile(2048, 5120, 25600, clusters=((1, 1),)).cluster_mn == (1, 1)
    # L2: A of 16384 x 4096 bf16 (128 MB) is re-read every N column without swizzle; 8-wide bands cut a wave's traffic
    assert wave_traffic(16384, 14336, (128, 256), (2, 1), 8, 132) * 2 < wave_traffic(16384, 14336, (128, 256), (2, 1), 1, 132)
    assert choose_swizzle(16384, 14336, 4096, (128, 256), (2, 1)) == 8
    assert choose_swizzle(2048, 14336, 4096, (128, 256), (2, 1)) == 1  # A (16 MB) stays in L2
    assert choose_swizzle(16384, 25600, 5120, (128, 256), (2, 1)) == 4  # 100 N tiles: 8 does not divide, 4 does
    assert choose_tile(16384, 14336, 4096, l2=True).swizzle == 8 and choose_tile(16384, 14336, 4096).swizzle == 1
    # schedule "auto": from N alone (M = None), as for an M spanning a wave: the widest band dividing the N clusters
    assert choose_swizzle(None, 14336, 4096, (128, 256), (2, 1)) == 8  # 56 N tiles
    assert choose_swizzle(None, 5120, 25600, (128, 256), (2, 1)) == 4  # 20 N tiles
    assert choose_swizzle(None, 768, 256, (128, 256), (2, 1)) == 1  # 3 N tiles: no band divides


def test_schedule_switch_applies_where_the_tile_is_free(monkeypatch):
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense import api

    m, n, k = 2048, 5120, 25600
    wb = _desc((k, n), (1, k), name="b")  # w.t()

    def cfg(**kw):
        p = _plan(m=m, n=n, k=k, b=kw.pop("b", wb), **kw)
        assert p.check_support()
        return p._make_config()

    fixed = cfg(schedule="fixed")
    assert (fixed.tile_mn, fixed.cluster_mn, fixed.swizzle) == ((128, 256), (2, 1), 1)
    # "auto": the swizzle from N alone, one configuration (one compiled kernel) for every M (Rule 4)
    auto = cfg(schedule="auto")
    assert (auto.tile_mn, auto.cluster_mn, auto.swizzle) == ((128, 256), (2, 1), 4)
    for m2 in (1, 77, 2040, 16384):
        p = _plan(m=m2, n=n, k=k, b=wb, schedule="auto")
        assert p.check_support() and p._make_config() == auto, m2
    # the default ("auto2", test_auto2_* below): at this M (2048) the set's second tile, 128 x 224
    assert api.TILE_SCHEDULE == "auto2" and cfg().tile_mn == (128, 224)
    monkeypatch.setattr(api, "TILE_SCHEDULE", "auto")
    assert cfg(bias=_desc((n,), name="bias"), stage_bias=True).swizzle == 4  # fixed-tile plans too (SWIZZLE_FIXED_TILE_PLANS)
    monkeypatch.setattr(api, "TILE_SCHEDULE", "fixed")
    assert cfg() == fixed
    monkeypatch.undo()
    w = cfg(schedule="waves")
    assert (w.tile_mn, w.cluster_mn, w.swizzle, w.max_active_clusters) == ((128, 224), (2, 1), 1, 66)
    assert cfg(schedule="waves+l2").tile_mn == (128, 224)
    # the compile key holds the choice, never the extents (Rule 4): another M with the same choice, the same key
    p = _plan(m=m - 8, n=n, k=k, b=wb, schedule="waves")
    p.check_support()
    assert p._make_config() == w and "2048" not in repr(w) and "25600" not in repr(w)
    # the module switch is the default of schedule=None
    monkeypatch.setattr(api, "TILE_SCHEDULE", "waves")
    assert cfg() == w
    # plans whose tile is not free keep theirs
    assert cfg(pingpong=True).tile_mn == (64, 256)
    assert cfg(bias=_desc((n,), name="bias"), stage_bias=True).tile_mn == (128, 256)

    # ... and take the swizzle under "waves+l2" where A leaves L2 (M = 16384, K = 4096: 128 MB) only with the switch on
    def big():
        p = _plan(m=16384, n=14336, k=4096, b=_desc((4096, 14336), (1, 4096), name="b"), bias=_desc((14336,), name="bias"), schedule="waves+l2")
        assert p.check_support() and p.stage_bias and p._make_config().tile_mn == (128, 256)
        return p._make_config().swizzle

    assert big() > 1
    monkeypatch.setattr(api, "SWIZZLE_FIXED_TILE_PLANS", False)
    assert big() == 1
    monkeypatch.undo()
    # the schedule keeps the fixed tile for layouts it was not verified with (N-major B)
    assert cfg(b=_desc((k, n), (n, 1), name="b")).tile_mn == (128, 256)
    assert cfg(tile_mn=(128, 192)).tile_mn == (128, 192)
    assert cfg(cluster_mn=(1, 1)).cluster_mn == (1, 1)
    assert cfg(swizzle=2, schedule="waves+l2").swizzle == 2
    with pytest.raises(ValueError, match="schedule"):
        _plan(schedule="fastest").check_support()
    with pytest.raises(ValueError, match="tile_mn"):
        _plan(tile_mn=(128, 160)).check_support()


def test_epilogue_ab_options(monkeypatch):
    """aux_prefetch / aux_ldmatrix (staged dsrelu pre-activation) and gelu_fold (gelu_tanh): values checked, applied
    only where the plan takes them, None = the module defaults (api.AUX_PREFETCH / AUX_LDMATRIX / GELU_FOLD)."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense import api

    m, n = 300, 512
    aux = _desc((m, n), name="aux")
    bias = _desc((n,), name="bias")
    with pytest.raises(ValueError, match="aux_prefetch must be"):
        _plan(aux=aux, dsrelu=True, aux_prefetch=9).check_support()
    with pytest.raises(ValueError, match="stage_aux"):
        _plan(aux=aux, dsrelu=True, stage_aux=False, aux_prefetch=3).check_support()
    with pytest.raises(ValueError, match="stage_aux"):
        _plan(bias=bias, aux_ldmatrix=True).check_support()
    with pytest.raises(ValueError, match="gelu_fold"):
        _plan(bias=bias, activation="relu2", gelu_fold=True).check_support()
    p = _plan(aux=aux, dsrelu=True)
    p.check_support()
    cfg = p._make_config()
    assert (cfg.aux_prefetch, cfg.aux_ldmatrix, cfg.gelu_fold) == (8, True, False)  # the defaults since the H200 A/B
    p = _plan(aux=aux, dsrelu=True, aux_prefetch=1, aux_ldmatrix=False)
    p.check_support()
    cfg = p._make_config()
    assert (cfg.aux_prefetch, cfg.aux_ldmatrix) == (1, False)
    p = _plan(bias=bias, activation="gelu_tanh", gelu_fold=False)
    p.check_support()
    assert p._make_config().gelu_fold is False
    monkeypatch.setattr(api, "AUX_PREFETCH", 3)
    monkeypatch.setattr(api, "AUX_LDMATRIX", True)
    monkeypatch.setattr(api, "GELU_FOLD", True)
    p = _plan(aux=aux, dsrelu=True)
    p.check_support()
    cfg = p._make_config()
    assert (cfg.aux_prefetch, cfg.aux_ldmatrix, cfg.gelu_fold) == (3, True, False)
    p = _plan(aux=_desc((m, n), dtype="float32", name="aux"), dsrelu=True)  # not staged: the defaults do not apply
    p.check_support()
    cfg = p._make_config()
    assert (cfg.aux_prefetch, cfg.aux_ldmatrix) == (1, False)
    p = _plan(bias=bias, activation="gelu_tanh")
    p.check_support()
    assert p._make_config().gelu_fold is True
    p = _plan(bias=bias, activation="gelu_erf")
    p.check_support()
    assert p._make_config().gelu_fold is False


def test_auto2_tile_set_is_m_free_and_picks_per_m():
    """schedule "auto2": the compiled tile set comes from N and K only (Rule 4), each M picks one of it; the plan
    lists the other tile for compile() (so that another M, which may pick it, never compiles)."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense.schedule import choose_in_set, choose_tile_set

    # Qwen3-32B down (N = 5120): 128 x 224 is the second tile; M = 2048 takes it (3 waves of 7/8 the work instead of
    # 3 waves, the last 42% full), M = 16384 keeps 128 x 256 (the tile efficiency wins once the waves are many)
    tiles = choose_tile_set(5120, 25600)
    assert tiles == ((128, 256), (128, 224))
    assert choose_in_set(2048, 5120, 25600, 1, tiles).tile_mn == (128, 224)
    assert choose_in_set(16384, 5120, 25600, 1, tiles).tile_mn == (128, 256)
    assert choose_in_set(16, 5120, 25600, 1, tiles).tile_mn == (128, 256)  # decode: not modelled
    # the MLP shapes of the benchmark with M >= 2048 other than qwen3-32b M = 2048 keep the default tile
    for n, k in ((14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (4096, 4096), (8192, 8192)):
        ts = choose_tile_set(n, k)
        for m in (2048, 4096, 16384):
            assert choose_in_set(m, n, k, 1, ts).tile_mn == (128, 256), (m, n, k)

    m, n, k = 2048, 5120, 25600
    wb = _desc((k, n), (1, k), name="b")

    def plan(m_, **kw):
        p = _plan(m=m_, n=n, k=k, b=wb, schedule="auto2", **kw)
        assert p.check_support()
        return p

    p = plan(m)
    cfg = p._make_config()
    assert (cfg.tile_mn, cfg.cluster_mn, cfg.swizzle) == ((128, 224), (2, 1), 1)  # 23 N tiles: no band divides
    assert p._tile_set == (((128, 256), 4),)  # the default tile with "auto"'s swizzle, built by compile() too
    seen = set()
    for m2 in (1, 77, 512, 2048, 2040, 4096, 16384):
        q = plan(m2)
        c = q._make_config()
        seen.add(c)
        # every M's configuration is one of the same two (the set compile() builds), whatever M picks
        assert {c} | {replace_tile(c, t, s) for t, s in q._tile_set} == {cfg, replace_tile(cfg, (128, 256), 4)}, m2
        assert "2048" not in repr(c) and "25600" not in repr(c)
    assert len(seen) == 2
    # plans whose tile is not free fall back to "auto" (swizzle from N only, nothing more to compile): staged reads
    # without fused_auto2 (on by default since session 5: then they take the set like plain), or a fixed cluster
    q = plan(m, bias=_desc((n,), name="bias"), stage_bias=True, fused_auto2=False)
    assert q._make_config().tile_mn == (128, 256) and q._make_config().swizzle == 4 and q._tile_set == ()
    q = plan(m, bias=_desc((n,), name="bias"), stage_bias=True)
    assert q._make_config().tile_mn == (128, 224) and q._tile_set == p._tile_set
    q = plan(m, cluster_mn=(1, 1))
    assert q._make_config().tile_mn == (128, 256) and q._tile_set == ()


def replace_tile(cfg, tile, swizzle):
    from dataclasses import replace

    return replace(cfg, tile_mn=tile, swizzle=swizzle)


def test_amax_fast_and_swiglu_tanh_options(monkeypatch):
    """amax_fast / swiglu_tanh: values checked, applied only to amax / swiglu plans, None = api.AMAX_FAST / SWIGLU_TANH."""
    skip_unless_cutedsl(FLOOR, "cudnn.gemm")
    from cudnn.gemm.dense import api

    m, n = 300, 512
    amax = _desc((1,), dtype="float32", name="amax")
    with pytest.raises(ValueError, match="amax_fast"):
        _plan(amax_fast=True).check_support()
    with pytest.raises(ValueError, match="swiglu_tanh"):
        _plan(swiglu_tanh=True).check_support()
    p = _plan(amax=amax)
    p.check_support()
    assert p._make_config().amax_fast is False and api.AMAX_FAST is False  # the default until the H200 A/B
    p = _plan(amax=amax, amax_fast=True)
    p.check_support()
    assert p._make_config().amax_fast is True
    sw = dict(d=_desc((m, n // 2), name="d"), swiglu="interleaved")
    p = _plan(**sw)
    p.check_support()
    assert p._make_config().swiglu_tanh is False and api.SWIGLU_TANH is False
    p = _plan(**sw, swiglu_tanh=True)
    p.check_support()
    assert p._make_config().swiglu_tanh is True
    monkeypatch.setattr(api, "AMAX_FAST", True)
    monkeypatch.setattr(api, "SWIGLU_TANH", True)
    p = _plan(amax=amax)
    p.check_support()
    assert p._make_config().amax_fast is True
    p = _plan()
    p.check_support()
    cfg = p._make_config()
    assert (cfg.amax_fast, cfg.swiglu_tanh) == (False, False)  # plans without amax / swiglu are untouched
    p = _plan(**sw)
    p.check_support()
    assert p._make_config().swiglu_tanh is True
