"""Shared helpers of the delta-rule backward's chunk-parallel opt-in tests (``parallel_pass1``, ``parallel_pass2``,
``fold_prep_tm``: ``test_la_bwd_parallel_gpu.py``, ``test_la_bwd_p2.py``, ``test_la_bwd_fold.py``): the DSL skip, a
spying kernel wrapper, the GPU inputs of both families, the varlen / dense case extents, one backward on poisoned
outputs, the fp32 / bf16 references, the FlashAttention-rule comparison and the R9 check. No tests here (no ``test_``
prefix); the test modules import it by the folder they put on ``sys.path``. CPU launch tests: :func:`cpu_plan` (plan
inputs and a plan factory) and :class:`Ordered` / :func:`record_forward_in_order` (the launch order across the forward's
and the backward's kernels, over ``_bwd_cases.run_recorded``).
"""

from __future__ import annotations

import importlib

import _bwd_cases
import pytest

torch = pytest.importorskip("torch")

GRAD_NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


def dsl(what: str) -> None:
    """Skip below the family's DSL floor or without ``cutlass``."""
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", what)
    pytest.importorskip("cutlass")


def gpu_ready(what: str | None = None) -> None:
    """A GPU test's skips: :func:`dsl` (when ``what`` names the family), then no sm_90 GPU."""
    from cudnn_testing.markers import skip_unless_sm90

    if what is not None:
        dsl(what)
    skip_unless_sm90()


class Spy:
    """Wraps a compiled kernel: records its arguments, then launches it."""

    def __init__(self, fn):
        self.fn = fn
        self.args = None

    def __call__(self, *a):
        self.args = a
        return self.fn(*a)


class Ordered(_bwd_cases.Recorder):
    """A recorder that also logs its name into the shared ``log`` (launch order across the forward's and backward's)."""

    log: list = []

    def __call__(self, *a):
        Ordered.log.append(self.name)
        super().__call__(*a)


def record_forward_in_order(monkeypatch, plan):
    """The forward's prep and state pass of ``plan`` as :class:`Ordered` recorders named ``prep`` / ``fstate``, the
    backward's recorders of ``_bwd_cases.run_recorded`` too; ``Ordered.log`` emptied."""
    Ordered.log = []
    plan._compiled_forward = (Ordered("prep"), Ordered("fstate"))
    monkeypatch.setattr(_bwd_cases, "Recorder", Ordered)


def run_in_order_refusing_a_flip(monkeypatch, plan, parts, eargs, flag):
    """``_bwd_cases.run_recorded`` of a :func:`record_forward_in_order` plan: the outputs are the execute arguments, the
    launch order is the forward's prep and state pass then ``parts``; the opt-in ``flag`` flipped after compile makes
    ``execute`` refuse (rather than launch another plan's kernels), then it is restored. Returns the workspace."""
    out, ws = _bwd_cases.run_recorded(monkeypatch, plan, parts, *eargs)
    assert out[0] is eargs[6] and out[5] is eargs[12]
    assert Ordered.log == ["prep", "fstate", *parts]
    setattr(plan, flag, False)
    with pytest.raises(ValueError, match=f"{flag} was changed after compile"):
        plan.execute(*eargs, workspace=ws)
    setattr(plan, flag, True)
    return ws


#: The schedule knobs ``cpu_plan`` plans start from (all off: the serial passes 1-2, pass 1b by recomputation, pass 3
#: version 1); the defaults turn them all on (``_host/delta_rule_bwd_api.py``, ``kda/bwd_api.py``, ``gdn/bwd_api.py``).
SCHEDULE_BASE = {"parallel_pass1": False, "parallel_pass2": False, "fold_prep_tm": False, "grads_v2": False}


def cpu_plan(family, T, H, D, n, varlen, with_h0, with_dht, gva=False):
    """CPU launch-test inputs: ``(make, execute args)``; ``make(store_tm=True, **options)`` builds a checked plan of
    ``family`` (``"kda"`` / ``"gdn"``; GDN: ``store_tm`` set) with the plan attributes ``options`` set in order over
    :data:`SCHEDULE_BASE` (the serial schedule: each test names the schedule knobs it turns on, whatever the defaults).
    Varlen batches: 4 sequences with an empty and a 1-token one; dense: 2 x T / 2; GVA: H / 2 q/k heads."""
    lead = (T,) if varlen else (2, T // 2)
    Hk = H // 2 if gva else H
    q = torch.randn(*lead, Hk, D).to(torch.bfloat16)
    v = torch.randn(*lead, H, D).to(torch.bfloat16)
    g = torch.randn(*lead, H, D) if family == "kda" else torch.randn(*lead, H)
    beta = torch.randn(*lead, H)
    h0 = torch.randn(n, H, D, D) if with_h0 else None
    dh0 = torch.empty_like(h0) if with_h0 else None
    dht = torch.randn(n, H, D, D) if with_dht else None
    cu = torch.tensor([0, 50, 51, 51, T], dtype=torch.int32) if varlen else None  # an empty and a 1-token sequence
    dq, dk, dv, dg, db = torch.empty_like(q), torch.empty_like(q), torch.empty_like(v), torch.empty_like(g), torch.empty_like(beta)
    args = (q, q, v, g, beta, v, dq, dk, dv, dg, db)
    kw = dict(initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    cls = api.KimiDeltaAttentionBwdSm90 if family == "kda" else api.GatedDeltaNetBwdSm90

    def make(store_tm=True, **options):
        plan = cls(*args, **kw)
        if family == "gdn":
            plan.store_tm = store_tm
        for name, value in {**SCHEDULE_BASE, **options}.items():
            setattr(plan, name, value)
        plan.check_support()
        return plan

    return make, (*args, h0, dh0, dht, cu)


def desc_plan(family, T, N, D=128, H=4, **options):
    """A checked metadata-only plan of ``family`` for the compile-only tests: varlen, ``N`` sequences over ``T`` tokens,
    K = V = ``D``, ``H`` heads, both states, fp32 gates; the plan attributes ``options`` set in order."""
    from cudnn.api_base import TensorDesc

    api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    cls = api.KimiDeltaAttentionBwdSm90 if family == "kda" else api.GatedDeltaNetBwdSm90
    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    g = TensorDesc.contiguous((T, H, D) if family == "kda" else (T, H), "float32", "g")
    beta = TensorDesc.contiguous((T, H), "float32", "beta")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
    p = cls(x, x, x, g, beta, x, x, x, x, g, beta, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu)
    for name, value in options.items():
        setattr(p, name, value)
    p.check_support()
    return p


def compile_part(tmp_path, family, part, **options):
    """``(key, PTX)`` of the plan part ``part`` (``bwd_api.build_kernel``, not through the cache) of a
    :func:`desc_plan` of 1000 tokens / 5 sequences with ``options``, dumped under ``tmp_path``; asserts Rule 4 first (the
    same key at 123457 tokens / 77 sequences)."""
    from cudnn_testing.compile_only import keep_artifacts

    api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    key = desc_plan(family, 1000, 5, **options).compile_key()
    assert desc_plan(family, 123457, 77, **options).compile_key() == key  # Rule 4
    with keep_artifacts(tmp_path) as ptx:
        api.build_kernel(part, key)()
        text = ptx()
    return key, text


def assert_one_kernel(text, name=""):
    """The PTX holds one kernel, its symbol with the cudnn prefix (Rule 6) and containing ``name``."""
    from cudnn_testing.compile_only import kernel_symbols

    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and name in names[0], names


def assert_no_local_memory(text, tmp_path):
    """No local-memory loads / stores in the PTX and every dumped cubin's frame 0."""
    from cudnn_testing.compile_only import frame_sizes

    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)


def kda_inputs(lead, H, D, n_seqs, with_h0, with_dht):
    """KDA's GPU inputs: q, k (L2-normalised), v, dO bf16 [*lead, H, D]; g in fla's safe-gate range (the decay split's
    hard regime), beta in [0, 1); h0 (x 0.5), dht [n_seqs, H, D, D] or None."""
    import torch.nn.functional as F

    q = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    k = F.normalize(torch.randn(*lead, H, D, device="cuda"), dim=-1).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    g = -5.0 * torch.sigmoid(torch.randn(*lead, H, D, device="cuda"))  # fla's safe-gate range
    beta = torch.rand(*lead, H, device="cuda")
    do = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5 if with_h0 else None
    dht = torch.randn(n_seqs, H, D, D, device="cuda") if with_dht else None
    return q, k, v, g, beta, do, h0, dht


def gdn_inputs(lead, H, Hk, D, n_seqs, with_h0, with_dht):
    """GDN's GPU inputs: q, k bf16 [*lead, Hk, D] (GVA when Hk < H), v, dO [*lead, H, D]; g = logsigmoid / 8 [*lead, H],
    beta in [0, 1); h0 (x 0.5), dht [n_seqs, H, D, D] or None."""
    import torch.nn.functional as F

    q = torch.randn(*lead, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(*lead, Hk, D, device="cuda").to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(*lead, H, device="cuda")) / 8
    beta = torch.rand(*lead, H, device="cuda")
    do = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5 if with_h0 else None
    dht = torch.randn(n_seqs, H, D, D, device="cuda") if with_dht else None
    return q, k, v, g, beta, do, h0, dht


def case_extents(layout, lens):
    """``(T, cu_seqlens or None, lead shape, sequences)`` of a GPU case: ``"varlen"`` sequence lengths ``lens`` (packed,
    int32 cumulative lengths on the GPU) or ``"dense"`` ``lens = (B, L)``."""
    if layout == "varlen":
        T = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        return T, cu, (T,), len(lens)
    return lens[0] * lens[1], None, tuple(lens), lens[0]


def backward(cls, q, k, v, g, beta, do, h0, dht, cu, *, options: dict, spy=False, fill=False, **opts):
    """``(grads dict, plan, workspace, execute args)`` of one backward of plan class ``cls`` (``opts``: its constructor
    keywords) with poisoned outputs; ``options``: plan attributes set (in order) before ``compile()``; ``spy``: the
    forward prep / state pass and the first backward kernel (pass 1b) record their arguments (``plan._spies``);
    ``fill``: the workspace poisoned with 0xFF bytes (bf16 / fp32 NaN patterns) before the execute."""
    from cudnn_testing.data import poison

    dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
    dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = cls(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu, **opts)
    for name, value in options.items():
        setattr(plan, name, value)
    plan.compile()
    if spy:
        spies = (Spy(plan._compiled_forward[0]), Spy(plan._compiled_forward[1]), Spy(plan._compiled_kernel[0]))
        plan._compiled_forward = spies[:2]
        plan._compiled_kernel = (spies[2], *plan._compiled_kernel[1:])
        plan._spies = spies
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    if fill:
        ws.fill_(0xFF)
    args = (q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu)
    plan.execute(*args, workspace=ws)
    return dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta, dh0=dh0), plan, ws, args


def references(family, q, k, v, g, beta, do, h0, dht, cu, batched, **kw):
    """``(fp32 token-by-token reference, bf16 chunked reference)`` gradients (``batched``: dense inputs as they are,
    else packed varlen inputs with a batch of 1); ``kw``: extra reference keywords (GDN: ``use_qk_l2norm``)."""
    from cudnn_testing import reference_linear_attention as refs

    name = "kimi_delta_attention" if family == "kda" else "gated_delta_net"
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, **kw)
    refargs = [add(t) for t in (q, k, v, g, beta, do)]
    ref = getattr(refs, f"{name}_recurrent_bwd_ref")(*refargs, **kw)
    low = getattr(refs, f"{name}_chunked_bwd_ref")(*refargs, dtype=torch.bfloat16, **kw)
    return ref, low


def compare(got, base, ref, low, batched, prefix, what, base_what):
    """Every gradient of ``got`` (None ones skipped) within the FlashAttention rule (factor 2, noise 2e-3 of the
    reference's max) of the fp32 reference against the bf16 chunked reference's error and against ``base``'s (another
    plan's); assertion names ``f"{prefix}{grad} ({what} vs ...)"``."""
    from cudnn_testing.tolerance import assert_close_fa

    for name in GRAD_NAMES:
        if got[name] is None:
            continue
        r = ref[name]
        out = got[name] if batched or name == "dh0" else got[name][None]
        dflt = base[name] if batched or name == "dh0" else base[name][None]
        noise = 2e-3 * r.abs().max().item()
        assert_close_fa(out, r, low[name], name=f"{prefix}{name} ({what} vs bf16 chunked ref)", factor=2.0, noise=noise)
        assert_close_fa(out, r, dflt, name=f"{prefix}{name} ({what} vs {base_what})", factor=2.0, noise=noise)


def check_grads(family, got, base, inputs, cu, batched, prefix, what, base_what, **kw):
    """After a device sync, :func:`compare` ``got`` / ``base`` against :func:`references` of ``inputs`` (q, k, v, g,
    beta, dO, h0, dht)."""
    torch.cuda.synchronize()
    ref, low = references(family, *inputs, cu, batched, **kw)
    compare(got, base, ref, low, batched, prefix, what, base_what)


def assert_r9(plan, ws, args):
    """R9: three warm executes neither synchronize (sync debug mode "error") nor allocate."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            plan.execute(*args, workspace=ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    torch.cuda.synchronize()
