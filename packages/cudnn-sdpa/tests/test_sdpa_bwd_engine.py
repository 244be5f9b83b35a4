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


@pytest.mark.gpu
def test_graph_execute_matches_reference_engine():
    """Same caller code for both engines (Rule 9): the kernel engine and the reference engine agree."""
    torch = pytest.importorskip("torch")
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    from cudnn.graph.router import default_registry
    from cudnn.sdpa.bwd.engine import SdpaBwdSm90Engine

    registry = default_registry()
    if "sdpa_bwd_sm90" not in {getattr(e, "name", None) for e in getattr(registry, "_engines", {}).values()}:
        registry.add(SdpaBwdSm90Engine())  # until cudnn/sdpa/engines.py registers it
    handle = cudnn.create_handle()
    torch.manual_seed(0)
    from cudnn_testing.reference_attention import attention_ref

    xs = {n: torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for n, h in (("q", H), ("k", HK), ("v", HK), ("dO", H))}
    o, lse = attention_ref(xs["q"], xs["k"], xs["v"], is_causal=True, scale=0.1)  # the forward's o and stats (the reference engine recomputes them)
    xs["o"] = torch.empty(B, S, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2).copy_(o)
    xs["stats"] = lse.float().unsqueeze(-1).contiguous()
    outs = {}
    for engine in ("sdpa_bwd_sm90", "reference"):
        g = _graph(attn_scale=0.1, use_causal_mask=True)
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A], engines=[engine])
        g.build_plans()
        tensors = {t.name: t for t in (*g.inputs(), *g.outputs())}
        grads = {n: torch.full((B, S, h, D), float("nan"), device="cuda", dtype=torch.bfloat16).transpose(1, 2) for n, h in (("dQ", H), ("dK", HK), ("dV", HK))}
        pack = {tensors[n]: x for n, x in xs.items() if n in tensors}
        pack.update({t: grads[t.name.rpartition("::")[2]] for t in g.outputs() if t.name.rpartition("::")[2] in grads})
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        g.execute(pack, ws, handle=handle)
        torch.cuda.synchronize()
        outs[engine] = {n: x.float() for n, x in grads.items()}
    for n in ("dQ", "dK", "dV"):
        a, b = outs["sdpa_bwd_sm90"][n], outs["reference"][n]
        assert torch.isfinite(a).all(), n
        assert (a - b).abs().max().item() <= 3e-2 * max(1.0, b.abs().max().item()), n
