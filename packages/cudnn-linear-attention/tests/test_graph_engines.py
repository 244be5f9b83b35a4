"""Graph-API engines ``gdn_fwd_sm90`` / ``kda_fwd_sm90`` (cudnn/linear_attention/engines.py).

CPU: the Router discovers both engines; the node-to-adapter mapping (ports, scale, L2 norm, states, cu_seqlens);
declines that name the attribute or tensor (device, compute type, head dim, dtypes, virtual outputs, int64
cu_seqlens); the Router's not-supported error carries them.
GPU (marked gpu): one graph-building function executed through the kernel engine and through the reference
engine (same caller code, Rule 9), compared by the FlashAttention rule with the bf16 chunked emulation as the
low-precision baseline; warm executes through the graph neither sync nor allocate.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

cudnn = pytest.importorskip("cudnn")
from cudnn.graph import router  # noqa: E402
from cudnn.graph.errors import cudnnGraphNotSupportedError  # noqa: E402

BF16, F32, I32, I64 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT, cudnn.data_type.INT32, cudnn.data_type.INT64
ENGINE = {"gdn": "gdn_fwd_sm90", "kda": "kda_fwd_sm90"}


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention graph engines")


def _graph(kind, T=260, n=5, hk=2, h=4, d=64, handle=None, io=BF16, q_dtype=BF16, cu_dtype=I32, state_dtype=F32, final=True, l2norm=False, **kw):
    """One gdn / kda node over THD tensors with cu_seqlens, an initial state and (``final``) the final state."""
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=F32, compute_data_type=F32, handle=handle)
    t = {
        "q": g.tensor(name="q", dim=[T, hk, d], data_type=q_dtype),
        "k": g.tensor(name="k", dim=[T, hk, d], data_type=q_dtype),
        "v": g.tensor(name="v", dim=[T, h, d], data_type=q_dtype),
        "g": g.tensor(name="g", dim=[T, h] if kind == "gdn" else [T, h, d], data_type=F32),
        "beta": g.tensor(name="beta", dim=[T, h], data_type=F32),
        "cu_seqlens": g.tensor(name="cu_seqlens", dim=[n + 1], data_type=cu_dtype),
        "initial_state": g.tensor(name="initial_state", dim=[n, h, d, d], data_type=state_dtype),
    }
    o, fs, _ = getattr(g, kind)(**t, output_final_state=final, use_qk_l2norm=l2norm, name=kind, **kw)
    o.set_output(True)
    if fs is not None:
        fs.set_output(True)
    t["O"], t["final_state"] = o, fs
    g.validate()
    return g, t


def _engine(kind):
    from cudnn.linear_attention.engines import GdnFwdSm90Engine, KdaFwdSm90Engine

    return GdnFwdSm90Engine() if kind == "gdn" else KdaFwdSm90Engine()


def test_router_discovers_both_engines():
    reg = router.discover(entry_points=False)
    assert "gdn_fwd_sm90" in reg and "kda_fwd_sm90" in reg, (reg.names(), reg.load_errors)


def test_router_check_support_imports_neither_torch_nor_cutlass():
    """Discovery and ``create_execution_plans`` of a gdn graph (the engine accepts it) stay metadata-only, in a fresh interpreter."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, cudnn\n"
        "D = cudnn.data_type\n"
        "g = cudnn.pygraph(io_data_type=D.BFLOAT16)\n"
        "t = lambda n, d, dt=D.BFLOAT16: g.tensor(name=n, dim=d, data_type=dt)\n"
        "o, fs, _ = g.gdn(t('q', [100, 2, 128]), t('k', [100, 2, 128]), t('v', [100, 4, 128]), t('g', [100, 4], D.FLOAT), t('beta', [100, 4], D.FLOAT),\n"
        "                 cu_seqlens=t('cu', [3], D.INT32), output_final_state=True)\n"
        "o.set_output(True); fs.set_output(True); g.validate(); g.build_operation_graph(); g.create_execution_plans()\n"
        "assert g.get_plan_names() == ['gdn_fwd_sm90'], g.get_declines()\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass'))\n"
        "assert not heavy, heavy[:5]\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_engine_maps_ports_and_attributes(kind):
    g, t = _graph(kind, l2norm=True, scale=0.25)
    adapter, uids = _engine(kind)._adapter(g)
    assert type(adapter).__name__ == ("GatedDeltaNetFwdSm90" if kind == "gdn" else "KimiDeltaAttentionFwdSm90")
    assert adapter.l2norm and adapter.scale == 0.25
    assert adapter.cu_seqlens.shape == (6,) and adapter.initial_state.shape == (5, 4, 64, 64) and adapter.final_state.shape == (5, 4, 64, 64)
    assert adapter.o.shape == (260, 4, 64) and adapter.g.shape == t["g"].dim
    for port in ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "O", "final_state"):
        assert uids[port] == t[port].uid, port

    g, t = _graph(kind, final=False)
    adapter, uids = _engine(kind)._adapter(g)
    assert adapter.final_state is None and uids.get("final_state") is None and adapter.scale == pytest.approx(64**-0.5)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(d=32), r"head dims K=32, V=32"),
        (dict(q_dtype=cudnn.data_type.HALF, io=cudnn.data_type.HALF), r"q .*dtype fp16; accepted: bf16"),
        (dict(cu_dtype=I64), r"cu_seqlens .*int32"),
        (dict(state_dtype=BF16), r"initial_state"),
        (dict(compute_data_type=cudnn.data_type.HALF), r"compute_data_type=HALF"),
        (dict(handle=cudnn.create_handle(device="cpu")), r"the graph is on cpu"),
    ],
    ids=["head_dim", "q_dtype", "cu_int64", "state_dtype", "compute_type", "cpu"],
)
def test_engine_declines_name_the_attribute(kind, kw, match):
    g, _ = _graph(kind, **kw)
    with pytest.raises(NotImplementedError, match=match) as info:
        _engine(kind).check_support(g)
    assert ENGINE[kind] in str(info.value)


def test_engine_declines_a_virtual_output_and_the_router_reports_it():
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32)
    q, k = g.tensor(name="q", dim=[64, 2, 64]), g.tensor(name="k", dim=[64, 2, 64])
    v = g.tensor(name="v", dim=[64, 2, 64])
    gate, beta = g.tensor(name="g", dim=[64, 2, 64], data_type=F32), g.tensor(name="beta", dim=[64, 2], data_type=F32)
    o, fs, _ = g.kda(q, k, v, gate, beta, output_final_state=True)
    o.set_output(True)  # final_state stays virtual
    g.validate()
    with pytest.raises(NotImplementedError, match=r"output final_state .*must be a graph output"):
        _engine("kda").check_support(g)

    g, _ = _graph("kda", d=32)
    g.build_operation_graph()
    with pytest.raises(cudnnGraphNotSupportedError, match=r"kda_fwd_sm90: .*head dims K=32"):
        g.create_execution_plans([cudnn.heur_mode.A])


@pytest.mark.compile_only
def test_graph_build_plan_compiles_and_other_totals_are_cache_hits():
    """``build_plans`` through ``kda_fwd_sm90`` compiles the adapter's kernels for sm_90a on the CPU (the default
    schedule's: the three chunk-parallel kernels since session 5), and a graph with other token / sequence totals builds
    without compiling (Rule 4 through the graph path)."""
    pytest.importorskip("cutlass")
    from cudnn.kernel_cache import kernel_cache

    def build(T, n):
        g, _ = _graph("kda", T=T, n=n, d=128, l2norm=True)
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A], engines=["kda_fwd_sm90"])
        g.build_plans()
        return g

    from cudnn.linear_attention._host.chunk_parallel import DEFAULT_SCHEDULE

    g = build(1000, 3)
    ws = g.get_workspace_size()  # the parallel schedule (the default since session 5) carves the graph's workspace
    assert g.get_plan_names() == ["kda_fwd_sm90"] and (ws > 0 if DEFAULT_SCHEDULE == "parallel" else ws == 0), ws
    with kernel_cache.watch() as w:
        build(77, 9)
    assert w.builds == 0, w.report()


# -- GPU ------------------------------------------------------------------------------------------------------
LENGTHS = [1, 64, 65, 0, 130]  # 1-token, one chunk, one past a chunk, empty, multi-chunk


def _inputs(kind, torch, d=64, h=4, hk=2):
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    T = sum(LENGTHS)
    q = torch.randn(T, hk, d, device="cuda").bfloat16()
    k = F.normalize(torch.randn(T, hk, d, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(T, h, d, device="cuda").bfloat16()
    gate = F.logsigmoid(torch.randn(*((T, h) if kind == "gdn" else (T, h, d)), device="cuda")) / 8
    beta = torch.rand(T, h, device="cuda")
    s0 = torch.randn(len(LENGTHS), h, d, d, device="cuda") * 0.5
    return {"q": q, "k": k, "v": v, "g": gate, "beta": beta, "cu_seqlens": cu_seqlens(LENGTHS, "cuda"), "initial_state": s0}


def _run(kind, engine, x, handle):
    """The same caller code for every engine: build, bind fresh poisoned outputs, execute on the handle's stream."""
    import torch

    from cudnn_testing.data import poison

    g, t = _graph(kind, T=sum(LENGTHS), n=len(LENGTHS), handle=handle)
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A], engines=[engine])
    g.build_plans()
    assert g.get_plan_names() == [engine]
    o = poison(torch.empty(tuple(t["O"].dim), device="cuda", dtype=torch.bfloat16))
    fs = poison(torch.empty(tuple(t["final_state"].dim), device="cuda"))
    pack = {t[p]: x[p] for p in x}
    pack[t["O"]], pack[t["final_state"]] = o, fs
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()
    return g, pack, ws, o, fs


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_graph_kernel_engine_matches_reference_engine(kind):
    torch = pytest.importorskip("torch")
    skip_unless_sm90()
    from cudnn_testing import detectors
    from cudnn_testing import reference_linear_attention as ref
    from cudnn_testing.tolerance import assert_close_fa

    handle = cudnn.create_handle()
    x = _inputs(kind, torch)
    g_k, pack, ws, o_k, fs_k = _run(kind, ENGINE[kind], x, handle)
    _, _, _, o_r, fs_r = _run(kind, "reference", x, handle)
    lowp = ref.gated_delta_net_chunked_lowp_ref if kind == "gdn" else ref.kimi_delta_attention_chunked_lowp_ref
    add = {p: x[p][None] for p in ("q", "k", "v", "g", "beta")}
    low_o, low_s = lowp(**add, initial_state=x["initial_state"], output_final_state=True, cu_seqlens=x["cu_seqlens"])
    noise = 1e-3 * o_r.float().abs().max().item()
    assert_close_fa(o_k, o_r.float(), low_o[0], name=f"{kind} O", factor=2.0, noise=noise)
    assert_close_fa(fs_k, fs_r, low_s, name=f"{kind} final_state", factor=2.0, noise=1e-3 * fs_r.abs().max().item())
    assert torch.equal(fs_k[3], x["initial_state"][3])  # the empty sequence passes its state through
    detectors.assert_no_sync_no_alloc(lambda: g_k.execute(pack, ws, handle=handle), repeats=3)
