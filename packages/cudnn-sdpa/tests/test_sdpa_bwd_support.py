"""check_support of the attention backward on TensorDescs (no GPU, no storage): what it accepts, what it declines
(NotImplementedError naming the tensor) and what it rejects as malformed (ValueError)."""

from __future__ import annotations

import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl


@pytest.fixture(autouse=True)
def _floor(request):
    if "below_the_dsl_floor" not in request.node.name:
        skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def _descs(b=2, h=8, hk=2, sq=300, sk=257, d=128, dtype="bfloat16", bshd=False):
    def t(shape, name, dt=dtype):
        if bshd and len(shape) == 4:
            bb, hh, ss, dd = shape
            c = TensorDesc.contiguous((bb, ss, hh, dd), dt, name)
            return TensorDesc((bb, hh, ss, dd), (c.stride[0], c.stride[2], c.stride[1], 1), dt, name)
        return TensorDesc.contiguous(shape, dt, name)

    q, k, v = t((b, h, sq, d), "q"), t((b, hk, sk, d), "k"), t((b, hk, sk, d), "v")
    return q, k, v, t((b, h, sq, d), "o"), t((b, h, sq, d), "do"), TensorDesc.contiguous((b, h, sq), "float32", "lse")


def _plan(*args, **kw):
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    return SdpaBwdSm90(*args, **kw)


@pytest.mark.parametrize("bshd", [False, True])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_accepts_dense_layouts_and_head_dims(d, bshd):
    p = _plan(*_descs(d=d, bshd=bshd), is_causal=True)
    assert p.check_support()
    assert p.key.head_dim == d and p.key.qhead_per_kvhead == 4
    assert p.scratch_workspace_bytes() > 0


def test_metadata_only_check_in_a_fresh_process():
    import os
    import subprocess

    code = (
        "import sys; from cudnn.api_base import TensorDesc as T; from cudnn.sdpa import SdpaBwdSm90; "
        "q=T.contiguous((1,2,64,64),'bfloat16','q'); l=T.contiguous((1,2,64),'float32','lse'); "
        "SdpaBwdSm90(q,q,q,q,q,l).check_support(); assert 'cutlass' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))


def test_declines_paged_kv_naming_it():
    with pytest.raises(NotImplementedError, match="page_table"):
        _plan(*_descs(), page_table=TensorDesc.contiguous((2, 4), "int32", "page_table")).check_support()


def test_declines_head_dim_256_and_bad_strides_naming_the_tensor(monkeypatch):
    from cudnn.sdpa.bwd import api

    p = _plan(*_descs(d=256))  # served by the split-D kernel (D256_TUNING)
    assert p.check_support() and p.key.split_d
    monkeypatch.setattr(api, "D256_TUNING", None)
    with pytest.raises(NotImplementedError, match="head dim 256"):
        _plan(*_descs(d=256)).check_support()
    monkeypatch.undo()
    q, k, v, o, do, lse = _descs()
    bad = TensorDesc(do.shape, (do.stride[0], do.stride[1], 129, 1), do.dtype, "do")
    with pytest.raises(NotImplementedError, match=r"do \(shape"):
        _plan(q, k, v, o, bad, lse).check_support()
    fp32 = TensorDesc.contiguous(q.shape, "float32", "q")
    with pytest.raises(NotImplementedError, match="dtype"):
        _plan(fp32, k, v, o, do, lse).check_support()


def test_rejects_malformed_shapes():
    q, k, v, o, do, lse = _descs()
    with pytest.raises(ValueError, match="lse"):
        _plan(q, k, v, o, do, TensorDesc.contiguous((2, 8, 301), "float32", "lse")).check_support()
    with pytest.raises(ValueError, match="multiple"):
        _plan(*_descs(h=6, hk=4)).check_support()


def test_sinks_are_a_plan_time_flag_with_their_own_workspace():
    plain = _plan(*_descs())
    sunk = _plan(*_descs(), sinks=TensorDesc.contiguous((8,), "float32", "sinks"))
    assert plain.check_support() and sunk.check_support()
    assert sunk.key.has_sinks and not plain.key.has_sinks
    assert sunk.scratch_workspace_bytes() > plain.scratch_workspace_bytes()
    with pytest.raises(NotImplementedError, match="sinks"):
        _plan(*_descs(), sinks=TensorDesc.contiguous((4,), "float32", "sinks")).check_support()


def test_deterministic_is_a_plan_time_flag_with_turn_counters_in_the_workspace():
    plain, det = _plan(*_descs()), _plan(*_descs(), deterministic=True)
    assert plain.check_support() and det.check_support()
    assert det.key.deterministic and not plain.key.deterministic and det.key != plain.key
    assert det.scratch_workspace_bytes() > plain.scratch_workspace_bytes()


def _thd(t_q=1000, t_kv=3000, batch=3, h=8, hk=2, d=128):
    q = TensorDesc.contiguous((t_q, h, d), "bfloat16", "q")
    kv = TensorDesc.contiguous((t_kv, hk, d), "bfloat16", "k")
    cu = TensorDesc.contiguous((batch + 1,), "int32", "cu_seqlens_q")
    lse = TensorDesc.contiguous((h, t_q), "float32", "lse")
    return (q, kv, kv, q, q, lse), dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=t_q, max_seqlen_kv=t_kv)


def test_thd_varlen_is_accepted_and_its_workspace_covers_padded_sequences():
    args, kw = _thd()
    p = _plan(*args, is_causal=True, **kw)
    assert p.check_support() and p.key.varlen
    # every sequence padded to 128 rows: (T_q + B * 128) rounded up, per head
    assert p.scratch_workspace_bytes() >= 8 * (1000 + 3 * 128) * (4 + 4 + 4 * 128)


def test_thd_varlen_rejects_half_declared_and_dense_lse():
    args, kw = _thd()
    with pytest.raises(ValueError, match="cu_seqlens"):
        _plan(*args, cu_seqlens_q=kw["cu_seqlens_q"]).check_support()
    q, k, v, o, do, _ = args
    with pytest.raises(ValueError, match="lse"):
        _plan(q, k, v, o, do, TensorDesc.contiguous((1, 8, 1000), "float32", "lse"), **kw).check_support()


def test_declines_below_the_dsl_floor_naming_both_versions(monkeypatch):
    """Rule 7: on a DSL below the family floor, check_support declines with the version-naming error."""
    from cudnn import dsl_gate

    monkeypatch.setattr(dsl_gate, "cutedsl_state", lambda: dsl_gate.CuteDslState(version="4.6.2", importable=True))
    with pytest.raises(NotImplementedError, match=r"needs nvidia-cutlass-dsl>=4\.8\.0, but 4\.6\.2 is installed"):
        _plan(*_descs()).check_support()
