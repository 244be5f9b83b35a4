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
