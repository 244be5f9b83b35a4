"""The graph-API engine ``sdpa_fwd_sm90``: metadata-level mapping and declines (CPU), and a GPU run through
``cudnn.pygraph`` compared with the reference engine (same caller code for both engines, Rule 9)."""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

cudnn = pytest.importorskip("cudnn")
BF16 = cudnn.data_type.BFLOAT16
B, H, HK, S, D = 2, 8, 2, 300, 128


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _graph(handle=None, bias=False, **sdpa_kw):
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT, handle=handle)

    def bshd(name, h):
        return g.tensor(name=name, dim=[B, h, S, D], stride=[S * h * D, D, h * D, 1], data_type=BF16)

    q, k, v = bshd("q", H), bshd("k", HK), bshd("v", HK)
    if bias:
        sdpa_kw["bias"] = g.tensor(name="bias", dim=[1, 1, S, S], stride=[S * S, S * S, S, 1], data_type=BF16)
    o, stats = g.sdpa(q, k, v, generate_stats=True, **sdpa_kw)
    o.set_output(True).set_dim([B, H, S, D]).set_stride([S * H * D, D, H * D, 1])
    stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.validate()
    return g, (q, k, v, o, stats)


def test_engine_maps_masks_scale_and_stats():
    from cudnn.sdpa.engines import SdpaFwdSm90Engine

    g, _ = _graph(attn_scale=0.125, use_causal_mask_bottom_right=True, sliding_window_length=64)
    adapter, uids, scale_uid, scale = SdpaFwdSm90Engine()._adapter(g)
    assert adapter.key.mask_right and adapter.key.mask_left and adapter.key.bottom_right and adapter.key.has_lse
    assert adapter._mask_window == (63, 0)  # keys j > i - 64  <=>  j >= i - 63
    assert scale == 0.125 and scale_uid is None and uids["stats"] is not None


def test_engine_declines_bias_by_name():
    from cudnn.sdpa.engines import SdpaFwdSm90Engine

    g, _ = _graph(bias=True)
    with pytest.raises(NotImplementedError, match="bias"):
        SdpaFwdSm90Engine().check_support(g)


@pytest.mark.gpu
def test_graph_execute_matches_reference_engine():
    torch = pytest.importorskip("torch")
    skip_unless_sm90()
    handle = cudnn.create_handle()
    outs = {}
    for engine in ("sdpa_fwd_sm90", "reference"):
        g, (q, k, v, o, stats) = _graph(handle, attn_scale=0.1, use_causal_mask=True)
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A], engines=[engine])
        g.build_plans()
        torch.manual_seed(0)
        xq = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        xk = torch.randn(B, S, HK, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        xv = torch.randn(B, S, HK, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        xo = torch.full((B, S, H, D), float("nan"), device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        xs = torch.full((B, H, S, 1), float("nan"), device="cuda")
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        g.execute({q: xq, k: xk, v: xv, o: xo, stats: xs}, ws, handle=handle)
        torch.cuda.synchronize()
        outs[engine] = (xo.float(), xs)
    (o1, s1), (o2, s2) = outs["sdpa_fwd_sm90"], outs["reference"]
    assert (o1 - o2).abs().max().item() < 3e-2
    assert (s1 - s2).abs().max().item() < 1e-3
