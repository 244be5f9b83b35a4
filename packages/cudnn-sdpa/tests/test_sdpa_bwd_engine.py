"""The graph-API engine ``sdpa_bwd_sm90`` (cudnn/sdpa/bwd/engine.py): metadata-level mapping of an
``sdpa_backward`` node onto SdpaBwdSm90 and its declines, on the CPU."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl

cudnn = pytest.importorskip("cudnn")
BF16 = cudnn.data_type.BFLOAT16
B, H, HK, S, D = 2, 8, 2, 300, 128


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def _graph(bias=False, **kw):
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)

    def bshd(name, h):
        return g.tensor(name=name, dim=[B, h, S, D], stride=[S * h * D, D, h * D, 1], data_type=BF16)

    q, k, v, o, do = bshd("q", H), bshd("k", HK), bshd("v", HK), bshd("o", H), bshd("dO", H)
    stats = g.tensor(name="stats", dim=[B, H, S, 1], stride=[H * S, S, 1, 1], data_type=cudnn.data_type.FLOAT)
    if bias:
        kw["bias"] = g.tensor(name="bias", dim=[1, 1, S, S], stride=[S * S, S * S, S, 1], data_type=BF16)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, **kw)
    for t, h in ((dq, H), (dk, HK), (dv, HK)):
        t.set_output(True).set_dim([B, h, S, D]).set_stride([S * h * D, D, h * D, 1])
    g.validate()
    return g


def test_engine_maps_masks_scale_and_workspace():
    from cudnn.sdpa.bwd.engine import SdpaBwdSm90Engine

    g = _graph(attn_scale=0.125, use_causal_mask_bottom_right=True, sliding_window_length=64)
    adapter, uids, scale_uid, scale = SdpaBwdSm90Engine()._adapter(g)
    assert adapter.key.mask_right and adapter.key.mask_left and adapter.key.bottom_right and adapter.key.qhead_per_kvhead == 4
    assert adapter._mask_window == (63, 0)  # keys j > i - 64  <=>  j >= i - 63 (the forward engine's mapping)
    assert scale == 0.125 and scale_uid is None and set(uids) == {"q", "k", "v", "o", "dO", "stats", "dQ", "dK", "dV"}
    assert adapter.scratch_workspace_bytes() > 0


def test_engine_declines_bias_by_name_and_maps_determinism():
    from cudnn.sdpa.bwd.engine import SdpaBwdSm90Engine

    with pytest.raises(NotImplementedError, match="bias"):
        SdpaBwdSm90Engine().check_support(_graph(bias=True))
    adapter, *_ = SdpaBwdSm90Engine()._adapter(_graph(use_deterministic_algorithm=True))
    assert adapter.key.deterministic
