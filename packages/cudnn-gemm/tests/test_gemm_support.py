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
