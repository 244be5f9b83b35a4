"""CPU tier for the Gated DeltaNet adapter: metadata-only check_support (no cutlass import), accept / decline /
ValueError cases, a compile key free of runtime extents (Rule 4), and the fp32 emulation of the kernel's
algorithm (shared reference) agreeing with the chunked and recurrent references."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, support_plan  # noqa: E402


def _plan(*args, **kw):
    return support_plan(GDN, *args, **kw)


def _dsl_ok():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")


def test_accepts_and_keys_on_plan_time_values_only():
    _dsl_ok()
    a, b = _plan(T=300, N=3), _plan(T=99999, N=1000)
    assert a.check_support() and b.check_support()
    assert a.compile_key() == b.compile_key()
    assert a.scale == pytest.approx(128**-0.5)
    assert _plan(D=64, g_dtype="bfloat16", use_qk_l2norm_in_kernel=True).check_support()


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        (dict(D=96), NotImplementedError, "K = V"),
        (dict(q_dtype="float16"), NotImplementedError, "dtype"),
        (dict(g_dtype="float16"), NotImplementedError, "dtype"),
        (dict(H=3, Hk=2), ValueError, "multiple"),
        (dict(q=TensorDesc((300, 2, 128), (512, 128, 2), "bfloat16", "q")), NotImplementedError, "unit channel stride"),
        (dict(q=TensorDesc((300, 2, 128), (260, 130, 1), "bfloat16", "q")), NotImplementedError, "multiples of 8"),
    ],
)
def test_declines_and_value_errors(kw, exc, match):
    _dsl_ok()
    with pytest.raises(exc, match=match):
        _plan(**kw).check_support()


def test_declines_int64_cu_seqlens_and_strided_state():
    _dsl_ok()
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    qk = TensorDesc.contiguous((10, 1, 64), "bfloat16", "q")
    v = TensorDesc.contiguous((10, 1, 64), "bfloat16", "v")
    gate = TensorDesc.contiguous((10, 1), "float32", "g")
    with pytest.raises(NotImplementedError, match="int32"):
        GatedDeltaNetFwdSm90(qk, qk, v, gate, gate, v, cu_seqlens=TensorDesc.contiguous((3,), "int64", "cu")).check_support()
    fla_state = TensorDesc((1, 1, 64, 64), (4096, 4096, 1, 64), "float32", "initial_state")  # fla's [K, V] transposed view
    with pytest.raises(NotImplementedError, match="contiguous"):
        GatedDeltaNetFwdSm90(qk, qk, v, gate, gate, v, initial_state=fla_state).check_support()


def test_check_support_imports_no_cutlass():
    code = (
        "import sys\n"
        "from cudnn.api_base import TensorDesc\n"
        "from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90\n"
        "x = TensorDesc.contiguous((100, 2, 64), 'bfloat16', 'x'); gate = TensorDesc.contiguous((100, 2), 'float32', 'g')\n"
        "try:\n"
        "    GatedDeltaNetFwdSm90(x, x, x, gate, gate, x).check_support()\n"
        "except NotImplementedError:\n"
        "    pass  # a lane below the DSL floor declines by version, which is also fine here\n"
        "assert 'cutlass' not in sys.modules, 'check_support imported cutlass'\n"
        "assert 'torch' not in sys.modules, 'check_support imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=None)


def test_kernel_algorithm_emulation_matches_references():
    """The reference that mirrors the kernel's steps (rounding off) equals the chunked reference, and with bf16
    rounding stays close to the fp32 recurrence: the algebra the kernel implements is the recurrence."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_lowp_ref, gated_delta_rule_chunked_ref, gated_delta_rule_recurrent_ref

    g0 = torch.Generator().manual_seed(7)
    lengths = [1, 130, 64, 0, 70]
    T, H, Hk, D = sum(lengths), 4, 2, 32
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(1, T, Hk, D, generator=g0).bfloat16()
    k = F.normalize(torch.randn(1, T, Hk, D, generator=g0), dim=-1).bfloat16()
    v = torch.randn(1, T, H, D, generator=g0).bfloat16()
    g = F.logsigmoid(torch.randn(1, T, H, generator=g0)) / 8
    beta = torch.rand(1, T, H, generator=g0)
    h0 = torch.randn(len(lengths), H, D, D, generator=g0)
    for l2 in (False, True):
        kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm=l2, cu_seqlens=cu, scale=0.2)
        o_c, s_c = gated_delta_rule_chunked_ref(q, k, v, g, beta, **kw)
        o_e, s_e = gated_delta_net_chunked_lowp_ref(q, k, v, g, beta, dtype=torch.float32, **kw)
        torch.testing.assert_close(o_e, o_c, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(s_e, s_c, rtol=1e-4, atol=1e-4)
        o_r, s_r = gated_delta_rule_recurrent_ref(q, k, v, g, beta, **kw)
        o_b, s_b = gated_delta_net_chunked_lowp_ref(q, k, v, g, beta, **kw)
        assert o_b.dtype == torch.bfloat16
        assert (o_b.float() - o_r).abs().max() <= 0.02 * o_r.abs().max()
        assert (s_b - s_r).abs().max() <= 0.02 * s_r.abs().max()
