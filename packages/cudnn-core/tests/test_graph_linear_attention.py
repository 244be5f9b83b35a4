"""``gdn`` / ``kda`` graph nodes: building, validation errors, and the reference engine against the fp32
recurrence of shared/cudnn_testing/reference_linear_attention.py (CPU).

That recurrence is written independently of the engine (one Python loop per sequence, lengths read to the host);
the engine's walks the packed tokens with device-side sequence ids. Layouts: THD varlen (1-token, empty and long
sequences, initial state), dense [B, L, H, D], GVA heads, L2 norm, explicit scale.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import cudnn  # noqa: E402
from cudnn.graph import GraphValidationError  # noqa: E402
from cudnn_testing.reference_linear_attention import gated_delta_rule_recurrent_ref  # noqa: E402

BF16, F32, I32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT, cudnn.data_type.INT32
CPU = cudnn.create_handle(device="cpu")


def _graph():
    return cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32, handle=CPU)


def _tensors(kind, lead, hk, h, kdim, vdim, n=None, varlen=False, state=False):
    """Declared inputs of one node: q, k, v, g, beta (+ cu_seqlens, initial_state)."""
    gr = _graph()
    t = {
        "q": gr.tensor(name="q", dim=[*lead, hk, kdim], data_type=BF16),
        "k": gr.tensor(name="k", dim=[*lead, hk, kdim], data_type=BF16),
        "v": gr.tensor(name="v", dim=[*lead, h, vdim], data_type=BF16),
        "g": gr.tensor(name="g", dim=[*lead, h] if kind == "gdn" else [*lead, h, kdim], data_type=F32),
        "beta": gr.tensor(name="beta", dim=[*lead, h], data_type=F32),
    }
    if varlen:
        t["cu_seqlens"] = gr.tensor(name="cu_seqlens", dim=[n + 1], data_type=I32)
    if state:
        t["initial_state"] = gr.tensor(name="initial_state", dim=[n, h, vdim, kdim], data_type=F32)
    return gr, t


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_node_infers_outputs_and_attrs(kind):
    gr, t = _tensors(kind, (100,), 2, 4, 32, 48, n=3, varlen=True, state=True)
    o, fs, checkpoints = getattr(gr, kind)(**t, output_final_state=True, use_qk_l2norm=True, name="la")
    assert checkpoints is None
    o.set_output(True)
    fs.set_output(True)
    gr.validate()
    node = gr.nodes[0]
    assert node.kind == kind and set(node.outputs) == {"O", "final_state"}
    assert o.dim == (100, 4, 48) and o.data_type is BF16
    assert fs.dim == (3, 4, 48, 32) and fs.data_type is F32
    assert node.attrs["scale_value"] == pytest.approx(1 / math.sqrt(32)) and node.attrs["scale"] is None
    assert node.attrs["use_qk_l2norm"] and node.attrs["n_seqs"] == 3

    gr, t = _tensors(kind, (2, 16), 2, 2, 64, 64)
    o, fs, _ = getattr(gr, kind)(**t, scale=0.5)
    assert fs is None
    o.set_output(True)
    gr.validate()
    assert o.dim == (2, 16, 2, 64) and gr.nodes[0].attrs["scale_value"] == 0.5 and gr.nodes[0].attrs["n_seqs"] == 2


def _expect(kind, match, mutate=None, build=None, **kw):
    gr, t = _tensors(kind, (50,), 2, 4, 32, 32, n=2, varlen=True, state=True)
    if mutate:
        mutate(gr, t)
    with pytest.raises(GraphValidationError, match=match):
        o, *_ = getattr(gr, kind)(**t, **kw)
        o.set_output(True)
        gr.validate()


def _swap(port, dim, dtype=None):
    def mutate(gr, t):
        t[port] = gr.tensor(name=port, dim=dim, data_type=dtype or t[port].data_type)

    return mutate


def test_validation_errors_name_the_tensor_or_attribute():
    _expect("kda", r"k .*must have the dim of q", _swap("k", [50, 2, 64]))
    _expect("kda", r"multiple of q/k heads", _swap("v", [50, 3, 32]))
    _expect("kda", r"g .*must have dim \(50, 4, 32\).*key channel", _swap("g", [50, 4]))  # a gdn-shaped g on a kda node
    _expect("gdn", r"g .*must have dim \(50, 4\)", _swap("g", [50, 4, 32]))
    _expect("gdn", r"beta .*must have dim", _swap("beta", [50, 2]))
    _expect("gdn", r"q, k, v must share one dtype", _swap("v", [50, 4, 32], F32))
    _expect("gdn", r"cu_seqlens .*must be \[N \+ 1\]", _swap("cu_seqlens", [2, 1]))
    _expect("gdn", r"initial_state .*must have dim \(2, 4, 32, 32\)", _swap("initial_state", [2, 4, 32, 16]))
    _expect("gdn", r"scale must be a finite float", scale=float("inf"))
    _expect("gdn", r"output_final_state must be a bool", output_final_state=1)
    _expect("gdn", r"checkpoint_every_n_tokens=64: state checkpoints are not produced", checkpoint_every_n_tokens=64)

    gr, t = _tensors("gdn", (2, 16), 2, 2, 64, 64)
    t["cu_seqlens"] = gr.tensor(name="cu_seqlens", dim=[3], data_type=I32)
    o, *_ = gr.gdn(**t)
    o.set_output(True)
    with pytest.raises(GraphValidationError, match=r"with cu_seqlens .*\[1, T, Hk, K\]"):
        gr.validate()


def _run(kind, lengths, hk, h, kdim, vdim, *, dense_batch=None, state=True, l2norm=False, scale=None, final=True):
    """One node through the reference engine on CPU; returns (O, final_state, the torch inputs)."""
    gen = torch.Generator().manual_seed(hash((kind, tuple(lengths), hk, h, l2norm)) % 2**31)
    if dense_batch is None:
        lead, n = (sum(lengths),), len(lengths)
    else:
        lead, n = (dense_batch, lengths[0]), dense_batch
    q = torch.randn(*lead, hk, kdim, generator=gen).bfloat16()
    k = (torch.randn(*lead, hk, kdim, generator=gen) / (1 if l2norm else math.sqrt(kdim))).bfloat16()
    v = torch.randn(*lead, h, vdim, generator=gen).bfloat16()
    gshape = (*lead, h) if kind == "gdn" else (*lead, h, kdim)
    g = torch.nn.functional.logsigmoid(torch.randn(gshape, generator=gen) + 2.0)
    beta = torch.sigmoid(torch.randn(*lead, h, generator=gen))
    x = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    if dense_batch is None:
        x["cu_seqlens"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    if state:
        x["initial_state"] = torch.randn(n, h, vdim, kdim, generator=gen) * 0.3
    gr = _graph()
    t = {name: gr.tensor_like(val, name=name) for name, val in x.items()}
    o, fs, _ = getattr(gr, kind)(**t, scale=scale, output_final_state=final, use_qk_l2norm=l2norm)
    o.set_output(True)
    if final:
        fs.set_output(True)
    gr.build()
    assert gr.get_plan_names() == ["reference"]
    out = torch.full(tuple(o.dim), float("nan"), dtype=torch.bfloat16)
    pack = {t[name]: val for name, val in x.items()}
    pack[o] = out
    fin = None
    if final:
        fin = torch.full(tuple(fs.dim), float("nan"))
        pack[fs] = fin
    gr.execute(pack, None, handle=CPU)
    return out, fin, x


def _recurrence(kind, x, dense, **kw):
    """The shared fp32 recurrence on [B, T, ...] tensors."""
    lift = (lambda t: t) if dense else (lambda t: t.unsqueeze(0))
    o, fs = gated_delta_rule_recurrent_ref(
        lift(x["q"]),
        lift(x["k"]),
        lift(x["v"]),
        lift(x["g"]),
        lift(x["beta"]),
        initial_state=x.get("initial_state"),
        cu_seqlens=x.get("cu_seqlens"),
        output_final_state=True,
        **kw,
    )
    return (o if dense else o[0]), fs


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    "case",
    [
        dict(lengths=[1, 70, 0, 5, 130], hk=2, h=4, kdim=32, vdim=32),  # 1-token, empty and multi-chunk sequences, GVA
        dict(lengths=[33, 1], hk=3, h=3, kdim=16, vdim=24, l2norm=True, scale=0.3),  # K != V, L2 norm, explicit scale
        dict(lengths=[40], hk=1, h=2, kdim=16, vdim=16, dense_batch=3, state=False),  # dense [B, L, H, D], no initial state
    ],
    ids=["varlen", "l2norm", "dense"],
)
def test_reference_engine_matches_the_recurrence(kind, case):
    case = dict(case)
    dense = case.get("dense_batch") is not None
    out, fin, x = _run(kind, **case)
    o_ref, s_ref = _recurrence(kind, x, dense, scale=case.get("scale"), use_qk_l2norm=case.get("l2norm", False))
    assert not out.isnan().any() and not fin.isnan().any()
    torch.testing.assert_close(out.float(), o_ref, atol=2e-2 * o_ref.abs().max().item(), rtol=2e-2)  # O is rounded to bf16
    torch.testing.assert_close(fin, s_ref, atol=1e-4, rtol=1e-4)


def test_reference_engine_without_final_state_writes_only_o():
    out, fin, x = _run("kda", [20, 9], 2, 2, 16, 16, final=False)
    assert fin is None and not out.isnan().any()
    o_ref, _ = _recurrence("kda", x, False)
    torch.testing.assert_close(out.float(), o_ref, atol=2e-2 * o_ref.abs().max().item(), rtol=2e-2)
