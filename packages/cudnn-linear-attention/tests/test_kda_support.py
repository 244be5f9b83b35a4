"""CPU tier for the Kimi Delta Attention adapter: metadata-only check_support (no cutlass or torch import),
accept / decline / ValueError cases (per-channel g [T, H, K]), and a compile key free of runtime extents (Rule 4)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA, support_plan  # noqa: E402


def _plan(*args, **kw):
    return support_plan(KDA, *args, **kw)


def _dsl_ok():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


def test_accepts_and_keys_on_plan_time_values_only():
    _dsl_ok()
    a, b = _plan(T=300, N=3), _plan(T=99999, N=1000)
    assert a.check_support() and b.check_support()
    assert a.compile_key() == b.compile_key()
    assert a.scale == pytest.approx(128**-0.5)
    assert _plan(D=64, g_dtype="bfloat16", use_qk_l2norm_in_kernel=True).check_support()
    assert _plan(state=False, cu=False).compile_key() != a.compile_key()


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(D=96), NotImplementedError, "K = V"),
        (dict(q_dtype="float16"), NotImplementedError, "dtype"),
        (dict(g_dtype="float16"), NotImplementedError, "dtype"),
        (dict(g_shape=(300, 4)), ValueError, "key channel"),  # a GDN-style per-head gate is not KDA's
        (dict(H=3, Hk=2), ValueError, "multiple"),
        (dict(q=TensorDesc((300, 2, 128), (512, 128, 2), "bfloat16", "q")), NotImplementedError, "unit channel stride"),
        (dict(q=TensorDesc((300, 2, 128), (260, 130, 1), "bfloat16", "q")), NotImplementedError, "multiples of 8"),
    ],
)
def test_declines_and_value_errors(kw, exc, match):
    _dsl_ok()
    with pytest.raises(exc, match=match):
        _plan(**kw).check_support()


def test_declines_strided_gate():
    _dsl_ok()
    from cudnn.linear_attention.kda.api import KimiDeltaAttentionFwdSm90

    qk = TensorDesc.contiguous((10, 1, 64), "bfloat16", "q")
    g = TensorDesc((10, 1, 64), (128, 128, 1), "float32", "g")  # every other token of a [20, 1, 64] tensor
    beta = TensorDesc.contiguous((10, 1), "float32", "beta")
    with pytest.raises(NotImplementedError, match="contiguous"):
        KimiDeltaAttentionFwdSm90(qk, qk, qk, g, beta, qk).check_support()


def test_check_support_imports_no_cutlass():
    code = (
        "import sys\n"
        "from cudnn.api_base import TensorDesc\n"
        "from cudnn.linear_attention.kda.api import KimiDeltaAttentionFwdSm90\n"
        "x = TensorDesc.contiguous((100, 2, 64), 'bfloat16', 'x'); g = TensorDesc.contiguous((100, 2, 64), 'float32', 'g')\n"
        "b = TensorDesc.contiguous((100, 2), 'float32', 'b')\n"
        "try:\n"
        "    KimiDeltaAttentionFwdSm90(x, x, x, g, b, x).check_support()\n"
        "except NotImplementedError:\n"
        "    pass  # a lane below the DSL floor declines by version, which is also fine here\n"
        "assert 'cutlass' not in sys.modules, 'check_support imported cutlass'\n"
        "assert 'torch' not in sys.modules, 'check_support imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=None)


def test_exported_through_the_lazy_tables():
    import cudnn
    import cudnn.linear_attention as la

    for name in ("gated_delta_net", "kimi_delta_attention", "GatedDeltaNetFwdSm90", "KimiDeltaAttentionFwdSm90"):
        assert name in la.__all__, name
    for name in ("gated_delta_net", "kimi_delta_attention"):
        assert name in cudnn._LAZY_OPTIONAL_IMPORTS, name
