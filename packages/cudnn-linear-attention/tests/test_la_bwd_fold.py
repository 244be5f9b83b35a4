"""The KDA backward's opt-in ``plan.fold_prep_tm`` (``KdaBwdKey.fold_prep_tm``, requires ``parallel_pass1``): the
forward prep of pass 1a compiled with ``KdaParallelPrepKey.bwd_tm`` (bf16 ``Tm`` into its ``qg`` tiles) and pass 1b as
``kda/bwd_states_parallel_kernel.py::KdaBwdStatesFold`` (layout copies of the forward's ``h``, ``Tm``, ``p``, ``vnt``
into ``ws_h``, ``ws_tm``, ``ws_p``, ``ws_vn``) instead of ``KdaBwdStatesChunk``. Tiers:

- CPU launches (torch + the DSL, no GPU): with every compiled kernel a recorder, ``execute`` launches the forward's
  prep and state pass, the fold kernel, passes 2 and 3 in that order; the fold kernel gets exactly its declared
  arguments -- the forward state pass's ``h`` and ``vnt``, the prep's ``qg`` (Tm) and ``p``, and the backward arrays
  passes 2-3 read; the forward prep is compiled with ``bwd_tm`` (and only under ``fold_prep_tm``); passes 2-3 reuse the
  non-fold plan's artifacts (cache keys); ``fold_prep_tm`` without ``parallel_pass1`` and a flip after ``compile()`` are
  ValueErrors.
- compile-only (``CUTE_DSL_ARCH=sm_90a``): the fold kernel at K = 128 varlen (16-byte global loads / stores only, no
  WGMMA, one barrier, no local memory, frame 0, the cudnn prefix) and the ``bwd_tm`` prep (the default's 80 WGMMAs, no
  local memory, frame 0).
- GPU (``@pytest.mark.gpu``): (1) the copies are bitwise the forward's arrays at every live chunk (slot remap, Vn^T ->
  token rows), every forward array but ``qg`` is bitwise the non-fold plan's (``bwd_tm`` changes nothing else), ``ws_h``
  bitwise the non-fold pass 1b's, ``Tm`` / ``P`` / ``Vn`` within rounding of it; (2) dq, dk, dv, dg, dbeta, d initial
  state of the fold plan (with ``parallel_pass2``) against the fp32 token-by-token reference within the FlashAttention
  rule (twice the bf16 chunked reference's error) and against the ``parallel_pass1 + parallel_pass2`` plan; (3) R9.

GDN (``GdnBwdKey.fold_prep_tm``, requires ``parallel_pass1`` and ``store_tm``; ``GdnParallelPrepKey.bwd_tm``,
``gdn/bwd_states_parallel_kernel.py::GdnBwdStatesFold``: copies of ``h``, ``Tm``, ``vnt``; GDN has no ``P`` array): the
same three tiers (``test_gdn_fold_*``; the CPU launch test also with GVA, the GPU cases with GVA and the in-kernel L2
norm) plus the prep key's refusals (``bwd_tm`` without ``restructured``; a forward variant naming it).

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_fold.py`` (GPU host: ``-k fold``).
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_bwd_cases.py: --import-mode=importlib adds no test folder

WHAT = "cudnn.linear_attention KDA backward (fold_prep_tm)"


def _dsl():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", WHAT)
    pytest.importorskip("cutlass")


class _Ordered:
    log: list = []

    def __init__(self, name):
        self.name = name
        self.calls = []

    def __call__(self, *a):
        _Ordered.log.append(self.name)
        self.calls.append(a)


def _plan(T, H, D, n, varlen, with_h0, with_dht):
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    lead = (T,) if varlen else (2, T // 2)
    q = torch.randn(*lead, H, D).to(torch.bfloat16)
    g = torch.randn(*lead, H, D)
    beta = torch.randn(*lead, H)
    h0 = torch.randn(n, H, D, D) if with_h0 else None
    dh0 = torch.empty_like(h0) if with_h0 else None
    dht = torch.randn(n, H, D, D) if with_dht else None
    cu = torch.tensor([0, 50, 51, 51, T], dtype=torch.int32) if varlen else None  # an empty and a 1-token sequence
    dq, dk, dv, dg, db = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q), torch.empty_like(g), torch.empty_like(beta)
    args = (q, q, q, g, beta, q, dq, dk, dv, dg, db)
    kw = dict(initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)

    def make(p1, p2, fold):
        plan = KimiDeltaAttentionBwdSm90(*args, **kw)
        plan.parallel_pass1, plan.parallel_pass2, plan.fold_prep_tm = p1, p2, fold
        plan.check_support()
        return plan

    return make, (*args, h0, dh0, dht, cu)


# -- CPU: launches, keys, errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("varlen,with_h0,with_dht,p2", [(True, True, True, True), (False, False, False, False)])
def test_fold_launches_in_order_with_declared_arguments(monkeypatch, varlen, with_h0, with_dht, p2):
    _dsl()
    import _bwd_cases

    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS, ChunkParallelPrepLaunch
    from cudnn.linear_attention.kda import bwd_api
    from cudnn.linear_attention.kda.bwd_states_parallel_kernel import KdaBwdStatesFold
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

    assert (WS_ARRAYS.index("qg"), WS_ARRAYS.index("p"), WS_ARRAYS.index("vnt"), WS_ARRAYS.index("h")) == (
        bwd_api.FWD_QG,
        bwd_api.FWD_P,
        bwd_api.FWD_VNT,
        bwd_api.FWD_H,
    )
    T, H, D = 200, 4, 64
    n = 4 if varlen else 2
    make, eargs = _plan(T, H, D, n, varlen, with_h0, with_dht)
    base, plan = make(True, p2, False), make(True, p2, True)
    key, bkey = plan.compile_key(), base.compile_key()
    assert key.fold_prep_tm and not bkey.fold_prep_tm
    parts, bparts = bwd_api._parts(key), bwd_api._parts(bkey)
    assert parts == ("states_fold", *bparts[1:]) and bparts[0] == "states_par"
    for part in bparts[1:]:  # passes 2 and 3: the non-fold plan's artifacts
        assert plan._cache_key(part, key) == base._cache_key(part, bkey), part
    fkey = plan._cache_key("states_fold", key)
    assert fkey.fold_prep_tm and fkey.parallel_pass1 and not fkey.parallel_pass2 and fkey.dp_split_hilo
    assert plan._pass1_prep_options() == {"bwd_tm": True} and base._pass1_prep_options() == {}
    assert plan.scratch_workspace_bytes() == base.scratch_workspace_bytes()  # the same arrays: no new workspace

    _Ordered.log = []
    plan._compiled_forward = (_Ordered("prep"), _Ordered("fstate"))
    plan._compiled_fold_prep_tm = True
    plan._compiled_parallel_pass2 = p2
    monkeypatch.setattr(_bwd_cases, "Recorder", _Ordered)
    out, ws = _bwd_cases.run_recorded(monkeypatch, plan, parts, *eargs)
    assert out[0] is eargs[6] and out[5] is eargs[12]
    assert _Ordered.log == ["prep", "fstate", *parts]
    plan.fold_prep_tm = False  # flipped after compile: execute refuses rather than launching another plan's kernels
    with pytest.raises(ValueError, match="fold_prep_tm was changed after compile"):
        plan.execute(*eargs, workspace=ws)
    plan.fold_prep_tm = True

    recs = {r.name: r for r in plan._compiled_kernel}
    fold_args = recs["states_fold"].calls[0]
    names = _bwd_cases.declared(KdaBwdStatesFold)
    assert len(fold_args) == len(names) and fold_args[-1] == "stream"
    fold = dict(zip(names, fold_args, strict=True))
    prep, fstate = plan._compiled_forward
    prep_args = dict(zip(_bwd_cases.declared(ChunkParallelPrepLaunch), prep.calls[0], strict=True))
    state_cls = KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=with_h0, has_final=False))
    state_args = dict(zip(_bwd_cases.declared(state_cls), fstate.calls[0], strict=True))
    addr = lambda a: int(a._pointer)  # noqa: E731
    assert addr(fold["fh_ptr"]) == addr(state_args["h_ptr"]) and addr(fold["fvnt_ptr"]) == addr(state_args["vnt_ptr"])
    assert addr(fold["ftm_ptr"]) == addr(prep_args["qg_ptr"]) and addr(fold["fp_ptr"]) == addr(prep_args["p_ptr"])
    seq_len = 0 if varlen else T // 2
    assert (fold["cu_ptr"] is None) == (not varlen)
    if varlen:
        assert addr(fold["cu_ptr"]) == eargs[-1].data_ptr()
    assert fold["T"] == T and fold["n_seqs"] == n and fold["seq_len"] == seq_len and fold["heads"] == H
    assert fold["slots"] == n + T // 64 + 1 and fold["fslots"] == prep_args["slots"] and fold["chunks_per_seq"] == prep_args["chunks_per_seq"]
    lo, hi = ws.data_ptr(), ws.data_ptr() + bwd_api.workspace_bytes(T, n, H, D)  # the backward's own arrays (before the tails)
    for name in ("wsh_ptr", "wsvn_ptr", "wstm_ptr", "wsp_ptr"):
        assert lo <= addr(fold[name]) < hi, name
    grads = recs["grads"].calls[0]
    gby = dict(zip(_bwd_cases.declared(_grads_cls()), grads, strict=True))
    for name in ("wsh_ptr", "wsvn_ptr", "wstm_ptr"):  # pass 3 reads what the fold writes
        assert addr(gby[name]) == addr(fold[name]), name
    second = recs["dstates_prep" if p2 else "dstates"].calls[0]
    names2 = _bwd_cases.declared(_dstates_cls(p2))
    sby = dict(zip(names2, second, strict=True))
    assert addr(sby["wstm_ptr"]) == addr(fold["wstm_ptr"]) and addr(sby["wsp_ptr"]) == addr(fold["wsp_ptr"])  # pass 2 too


def _grads_cls():
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads

    return KdaBwdGrads


def _dstates_cls(p2):
    if p2:
        from cudnn.linear_attention.kda.bwd_dstates_parallel_kernel import KdaBwdDStatesPrep

        return KdaBwdDStatesPrep
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdDStates

    return KdaBwdDStates


def test_fold_compiles_the_prep_with_bwd_tm_only_when_set(monkeypatch):
    _dsl()
    from cudnn.linear_attention._host import chunk_parallel

    seen = []

    def fake(*a, **kw):
        seen.append(kw["prep_options"])
        return ("prep", "state", "out")

    monkeypatch.setattr(chunk_parallel, "compile_parallel", fake)
    make, _ = _plan(200, 4, 64, 4, True, False, False)
    for fold in (True, False):
        plan = make(True, False, fold)
        plan._compile_forward_pass1()
        assert plan._compiled_forward == ("prep", "state")
    assert seen == [{"bwd_tm": True}, {}]


def test_fold_requires_parallel_pass1():
    _dsl()
    make, _ = _plan(200, 4, 64, 2, False, False, False)
    with pytest.raises(ValueError, match="fold_prep_tm requires parallel_pass1"):
        make(False, False, True).compile_key()


# -- compile-only -------------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_fold_kernel_compiles_to_vector_copies_without_local_memory(tmp_path):
    _dsl()
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.kda import bwd_api
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols

    def plan(T, N, D=128, H=4):
        x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
        g = TensorDesc.contiguous((T, H, D), "float32", "g")
        beta = TensorDesc.contiguous((T, H), "float32", "beta")
        st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
        cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
        p = bwd_api.KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu)
        p.parallel_pass1 = p.parallel_pass2 = p.fold_prep_tm = True
        p.check_support()
        return p

    key = plan(1000, 5).compile_key()
    assert key.fold_prep_tm and key.varlen and key.head_dim == 128
    assert plan(123457, 77).compile_key() == key  # Rule 4
    with keep_artifacts(tmp_path) as ptx:
        bwd_api.build_kernel("states_fold", key)()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "KdaBwdStatesFold" in names[0], names
    # K = 128 per thread: Vn^T 8 + h 16 + Tm 4 + P 4 16-byte loads; h 16 + Tm 4 + P 4 + Vn rows 8 16-byte stores
    assert text.count("ld.global.v4") == 32 and text.count("st.global.v4") == 32, (text.count("ld.global.v4"), text.count("st.global.v4"))
    assert "wgmma" not in text and len([ln for ln in text.splitlines() if "bar.sync" in ln]) == 1
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)


@pytest.mark.compile_only
def test_bwd_tm_prep_keeps_the_default_products_and_no_local_memory(tmp_path):
    """The ``bwd_tm`` prep at K = 128: the default's 80 WGMMAs (m64n16 A / P blocks, m64n64 U / -Wm), qg's four 16-byte
    stores per thread replaced by Tm's (two chunks x zero / value sites), no local memory, frame 0. (Its default-key PTX
    is byte-identical to the kernel before the option: checked by dumping both, session 10 report.)"""
    _dsl()
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols

    key = KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=True, bwd_tm=True)
    ptrs = [fp("BFloat16", 16)] * 3 + [fp("Float32", 4), fp("Float32", 2), fp("Int32", 4)]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(
            KimiDeltaAttentionParallelPrep(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0)
        )
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_"), names
    assert text.count("wgmma.mma_async") == 80
    assert text.count("st.global.v4") == 16  # kd 4 + -Wm 8 (staged) + Tm 4 (qg's 4 gone)
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)


# -- GPU ------------------------------------------------------------------------------------------------------------------
class _Spy:
    """Wraps a compiled kernel: records its arguments, then launches it."""

    def __init__(self, fn):
        self.fn = fn
        self.args = None

    def __call__(self, *a):
        self.args = a
        return self.fn(*a)


def _kda_inputs(lead, H, D, n_seqs, with_h0, with_dht):
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


def _backward(fold, p2, q, k, v, g, beta, do, h0, dht, cu, spy=False):
    """(grads dict, plan, workspace, args) of one ``parallel_pass1`` backward (``fold``: with ``fold_prep_tm``; ``p2``:
    with ``parallel_pass2``) on poisoned outputs; ``spy``: pass 1b and the forward prep / state pass record their
    arguments (``plan._spies``)."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison

    dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
    dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.parallel_pass1, plan.parallel_pass2, plan.fold_prep_tm = True, p2, fold
    plan.compile()
    if spy:
        spies = (_Spy(plan._compiled_forward[0]), _Spy(plan._compiled_forward[1]), _Spy(plan._compiled_kernel[0]))
        plan._compiled_forward = spies[:2]
        plan._compiled_kernel = (spies[2], *plan._compiled_kernel[1:])
        plan._spies = spies
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    ws.fill_(0xFF)  # poisoned workspace (bf16 / fp32 NaN patterns)
    args = (q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu)
    plan.execute(*args, workspace=ws)
    return dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta, dh0=dh0), plan, ws


def _view(ws, ptr, dtype, shape):
    """The workspace bytes at cute pointer ``ptr`` as a torch tensor of ``shape``."""
    off = int(ptr._pointer) - ws.data_ptr()
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dtype).element_size()
    assert 0 <= off and off + n * size <= ws.numel()
    return ws[off : off + n * size].view(dtype).view(*shape)


def _chunks(lens_or_dense, varlen):
    """(fslot, bslot, t0, n_valid) of every live chunk (the forward's and the backward's slot conventions)."""
    out = []
    if varlen:
        bos = 0
        for n, L in enumerate(lens_or_dense):
            for ci in range(-(-L // 64)):
                out.append((bos // 64 + n + ci, n + bos // 64 + ci, bos + 64 * ci, min(64, L - 64 * ci)))
            bos += L
    else:
        B, L = lens_or_dense
        cps = -(-L // 64)
        for n in range(B):
            bos = n * L
            for ci in range(cps):
                out.append((n * cps + ci, n + bos // 64 + ci, bos + 64 * ci, min(64, L - 64 * ci)))
    return out


def _pass1_arrays(plan, ws, T, n, H, D):
    """(forward arrays by name, backward pass-1 arrays by name) of a spied plan's workspace."""
    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS

    prep, fstate, states = plan._spies
    nf = len(WS_ARRAYS)
    fwd_ptrs = prep.args[6 : 6 + nf]  # q, k, v, g, beta, cu, then the workspace arrays (ChunkParallelPrepLaunch)
    fslots = prep.args[6 + nf + 4]
    bf, f32 = torch.bfloat16, torch.float32
    shapes = dict(
        w=(bf, (64, D)), u=(f32, (64, D)), kd=(bf, (64 * D,)), qg=(bf, (64 * D,)), p=(bf, (64, 64)), ge=(f32, (D,)), vnt=(bf, (D, 64)), h=(bf, (D, D))
    )
    fwd = {name: _view(ws, ptr, shapes[name][0], (fslots, H, *shapes[name][1])) for name, ptr in zip(WS_ARRAYS, fwd_ptrs, strict=True) if name in shapes}
    a = states.args  # KdaBwdStatesFold: cu, 4 forward arrays, then ws_h, ws_vn, ws_tm, ws_p; KdaBwdStatesChunk: 7 inputs, then the same
    wsh, wsvn, wstm, wsp = a[5:9] if plan.fold_prep_tm else a[7:11]
    slots = n + T // 64 + 1
    bwd = dict(
        h=_view(ws, wsh, bf, (slots, H, D, D)),
        vn=_view(ws, wsvn, bf, (T, H, D)),
        tm=_view(ws, wstm, bf, (slots, H, 64, 64)),
        p=_view(ws, wsp, bf, (slots, H, 64, 64)),
    )
    return fwd, bwd


_FOLD_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True, True), ("dense", (2, 257), 64, False, False)]


def _case(layout, lens, D, with_h0, with_dht, H=4):
    if layout == "varlen":
        T = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        lead, n = (T,), len(lens)
    else:
        cu, lead, n = None, tuple(lens), lens[0]
        T = lens[0] * lens[1]
    return T, cu, lead, n, _kda_inputs(lead, H, D, n, with_h0, with_dht)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_h0,with_dht", _FOLD_CASES)
def test_fold_pass1_arrays_are_the_forward_arrays(layout, lens, D, with_h0, with_dht):
    """Bitwise copies of the forward's arrays at every live chunk; the forward's other arrays bitwise the non-fold plan's
    (``bwd_tm`` changes only qg); ``ws_h`` bitwise and ``Tm`` / ``P`` / ``Vn`` within rounding of ``KdaBwdStatesChunk``'s."""
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    H = 4
    torch.manual_seed(len(lens) * 100 + D)
    T, cu, _, n, (q, k, v, g, beta, do, h0, dht) = _case(layout, lens, D, with_h0, with_dht, H)
    _, fplan, fws = _backward(True, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    _, bplan, bws = _backward(False, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    torch.cuda.synchronize()
    ffwd, fbwd = _pass1_arrays(fplan, fws, T, n, H, D)
    bfwd, bbwd = _pass1_arrays(bplan, bws, T, n, H, D)
    chunks = _chunks(lens, layout == "varlen")
    for name in ("w", "u", "kd", "p", "ge", "vnt", "h"):  # bwd_tm changes qg only; the state pass is the same
        for fs, _, _, _ in chunks:
            assert torch.equal(ffwd[name][fs], bfwd[name][fs]), (name, fs)
    for fs, bs, t0, nv in chunks:
        assert torch.equal(fbwd["h"][bs], ffwd["h"][fs]), ("h", fs)
        assert torch.equal(fbwd["tm"][bs], ffwd["qg"][fs][:, : 64 * 64].reshape(H, 64, 64)), ("tm", fs)
        assert torch.equal(fbwd["p"][bs], ffwd["p"][fs]), ("p", fs)
        assert torch.equal(fbwd["vn"][t0 : t0 + nv], ffwd["vnt"][fs][..., :nv].permute(2, 0, 1)), ("vn", fs)
        assert torch.equal(fbwd["h"][bs], bbwd["h"][bs]), ("h vs KdaBwdStatesChunk", fs)
        # Tm is unit lower triangular (|entries| <= ~1 for these gates); P and Vn to the bf16 roundings of two operation orders
        for name in ("tm", "p"):  # the rows of live tokens (rows past the end: identity / zero rows either way)
            ref, got = bbwd[name][bs][:, :nv], fbwd[name][bs][:, :nv]
            err = (got.float() - ref.float()).abs().max().item()
            assert err <= 2e-2 * max(ref.float().abs().max().item(), 1.0), (name, fs, err)
        ref, got = bbwd["vn"][t0 : t0 + nv].float(), fbwd["vn"][t0 : t0 + nv].float()
        err = (got - ref).abs().max().item()
        assert err <= 3e-2 * max(ref.abs().max().item(), 1.0), ("vn", fs, err)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_h0,with_dht", _FOLD_CASES)
def test_kda_fold_matches_reference_and_p2(layout, lens, D, with_h0, with_dht):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    skip_unless_sm90()
    torch.manual_seed(len(lens) * 1000 + D + 7)
    T, cu, _, _, (q, k, v, g, beta, do, h0, dht) = _case(layout, lens, D, with_h0, with_dht)
    got, _, _ = _backward(True, True, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _ = _backward(False, True, q, k, v, g, beta, do, h0, dht, cu)
    torch.cuda.synchronize()
    batched = layout == "dense"
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = [add(t) for t in (q, k, v, g, beta, do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if got[name] is None:
            continue
        r = ref[name]
        out = got[name] if batched or name == "dh0" else got[name][None]
        dflt = base[name] if batched or name == "dh0" else base[name][None]
        noise = 2e-3 * r.abs().max().item()
        assert_close_fa(out, r, low[name], name=f"{layout} {name} (fold_prep_tm vs bf16 chunked ref)", factor=2.0, noise=noise)
        assert_close_fa(out, r, dflt, name=f"{layout} {name} (fold_prep_tm vs parallel_pass1 + parallel_pass2)", factor=2.0, noise=noise)


@pytest.mark.gpu
def test_fold_execute_allocates_nothing_and_never_synchronizes():
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    q, k, v, g, beta, do, h0, dht = _kda_inputs((2, 200), 2, 64, 2, False, False)
    _, plan, ws = _backward(True, True, q, k, v, g, beta, do, h0, dht, None)
    args = (q, k, v, g, beta, do, *(torch.empty_like(t) for t in (q, k, v, g, beta)), None, None, None, None)
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


# == GDN ===============================================================================================================
def _gdn_plan(T, H, D, n, varlen, with_h0, with_dht, gva=False):
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    lead = (T,) if varlen else (2, T // 2)
    Hk = H // 2 if gva else H
    q = torch.randn(*lead, Hk, D).to(torch.bfloat16)
    v = torch.randn(*lead, H, D).to(torch.bfloat16)
    g = torch.randn(*lead, H)
    beta = torch.randn(*lead, H)
    h0 = torch.randn(n, H, D, D) if with_h0 else None
    dh0 = torch.empty_like(h0) if with_h0 else None
    dht = torch.randn(n, H, D, D) if with_dht else None
    cu = torch.tensor([0, 50, 51, 51, T], dtype=torch.int32) if varlen else None  # an empty and a 1-token sequence
    dq, dk, dv, dg, db = torch.empty_like(q), torch.empty_like(q), torch.empty_like(v), torch.empty_like(g), torch.empty_like(beta)
    args = (q, q, v, g, beta, v, dq, dk, dv, dg, db)
    kw = dict(initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)

    def make(p1, p2, fold, store_tm=True):
        plan = GatedDeltaNetBwdSm90(*args, **kw)
        plan.store_tm = store_tm
        plan.parallel_pass1, plan.parallel_pass2, plan.fold_prep_tm = p1, p2, fold
        plan.check_support()
        return plan

    return make, (*args, h0, dh0, dht, cu)


# -- CPU: launches, keys, errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("varlen,with_h0,with_dht,p2,gva", [(True, True, True, True, True), (False, False, False, False, False)])
def test_gdn_fold_launches_in_order_with_declared_arguments(monkeypatch, varlen, with_h0, with_dht, p2, gva):
    _dsl()
    import _bwd_cases

    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS, ChunkParallelPrepLaunch
    from cudnn.linear_attention.gdn import bwd_api
    from cudnn.linear_attention.gdn.bwd_states_parallel_kernel import GdnBwdStatesFold
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

    assert (WS_ARRAYS.index("qg"), WS_ARRAYS.index("vnt"), WS_ARRAYS.index("h")) == (bwd_api.FWD_QG, bwd_api.FWD_VNT, bwd_api.FWD_H)
    T, H, D = 200, 4, 64
    n = 4 if varlen else 2
    make, eargs = _gdn_plan(T, H, D, n, varlen, with_h0, with_dht, gva)
    base, plan = make(True, p2, False), make(True, p2, True)
    key, bkey = plan.compile_key(), base.compile_key()
    assert key.fold_prep_tm and not bkey.fold_prep_tm
    parts, bparts = bwd_api._parts(key), bwd_api._parts(bkey)
    assert parts == ("states_fold", *bparts[1:]) and bparts[0] == "states_par"
    assert parts[-1] == ("qk_reduce" if gva else "grads")
    for part in bparts[1:]:  # passes 2, 3 (4): the non-fold plan's artifacts
        assert plan._cache_key(part, key) == base._cache_key(part, bkey), part
    fkey = plan._cache_key("states_fold", key)
    assert fkey.fold_prep_tm and fkey.parallel_pass1 and not fkey.parallel_pass2 and fkey.store_tm
    assert plan._cache_key("states_par", key) == base._cache_key("states_par", bkey)  # the non-fold pass 1b's key is untouched
    assert plan._pass1_prep_options() == {"bwd_tm": True} and base._pass1_prep_options() == {}
    assert plan.scratch_workspace_bytes() == base.scratch_workspace_bytes()  # the same arrays: no new workspace

    _Ordered.log = []
    plan._compiled_forward = (_Ordered("prep"), _Ordered("fstate"))
    plan._compiled_fold_prep_tm = True
    plan._compiled_parallel_pass2 = p2
    monkeypatch.setattr(_bwd_cases, "Recorder", _Ordered)
    out, ws = _bwd_cases.run_recorded(monkeypatch, plan, parts, *eargs)
    assert out[0] is eargs[6] and out[5] is eargs[12]
    assert _Ordered.log == ["prep", "fstate", *parts]
    plan.fold_prep_tm = False  # flipped after compile: execute refuses rather than launching another plan's kernels
    with pytest.raises(ValueError, match="fold_prep_tm was changed after compile"):
        plan.execute(*eargs, workspace=ws)
    plan.fold_prep_tm = True

    recs = {r.name: r for r in plan._compiled_kernel}
    fold_args = recs["states_fold"].calls[0]
    names = _bwd_cases.declared(GdnBwdStatesFold)
    assert len(fold_args) == len(names) and fold_args[-1] == "stream"
    fold = dict(zip(names, fold_args, strict=True))
    prep, fstate = plan._compiled_forward
    prep_args = dict(zip(_bwd_cases.declared(ChunkParallelPrepLaunch), prep.calls[0], strict=True))
    state_cls = KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=with_h0, has_final=False))
    state_args = dict(zip(_bwd_cases.declared(state_cls), fstate.calls[0], strict=True))
    addr = lambda a: int(a._pointer)  # noqa: E731
    assert addr(fold["fh_ptr"]) == addr(state_args["h_ptr"]) and addr(fold["fvnt_ptr"]) == addr(state_args["vnt_ptr"])
    assert addr(fold["ftm_ptr"]) == addr(prep_args["qg_ptr"])
    seq_len = 0 if varlen else T // 2
    assert (fold["cu_ptr"] is None) == (not varlen)
    if varlen:
        assert addr(fold["cu_ptr"]) == eargs[-1].data_ptr()
    assert fold["T"] == T and fold["n_seqs"] == n and fold["seq_len"] == seq_len and fold["heads"] == H
    assert fold["slots"] == n + T // 64 + 1 and fold["fslots"] == prep_args["slots"] and fold["chunks_per_seq"] == prep_args["chunks_per_seq"]
    lo, hi = ws.data_ptr(), ws.data_ptr() + bwd_api.workspace_bytes(T, n, H, D, True, gva)  # the backward's own arrays (before the tails)
    for name in ("wsh_ptr", "wsvn_ptr", "wstm_ptr"):
        assert lo <= addr(fold[name]) < hi, name
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads

    gby = dict(zip(_bwd_cases.declared(GdnBwdGrads), recs["grads"].calls[0], strict=True))
    for name in ("wsh_ptr", "wsvn_ptr", "wstm_ptr"):  # pass 3 reads what the fold writes
        assert addr(gby[name]) == addr(fold[name]), name
    from cudnn.linear_attention.gdn.bwd_dstates_parallel_kernel import GdnBwdDStatesPrep
    from cudnn.linear_attention.gdn.bwd_states_kernel import GdnBwdDStates

    second = GdnBwdDStatesPrep if p2 else GdnBwdDStates
    sby = dict(zip(_bwd_cases.declared(second), recs["dstates_prep" if p2 else "dstates"].calls[0], strict=True))
    assert addr(sby["wstm_ptr"]) == addr(fold["wstm_ptr"])  # pass 2 too


def test_gdn_fold_compiles_the_prep_with_bwd_tm_only_when_set(monkeypatch):
    _dsl()
    from cudnn.linear_attention._host import chunk_parallel

    seen = []

    def fake(*a, **kw):
        seen.append(kw["prep_options"])
        return ("prep", "state", "out")

    monkeypatch.setattr(chunk_parallel, "compile_parallel", fake)
    make, _ = _gdn_plan(200, 4, 64, 4, True, False, False)
    for fold in (True, False):
        plan = make(True, False, fold)
        plan._compile_forward_pass1()
        assert plan._compiled_forward == ("prep", "state")
    assert seen == [{"bwd_tm": True}, {}]


def test_gdn_fold_requires_parallel_pass1_and_store_tm():
    _dsl()
    make, _ = _gdn_plan(200, 4, 64, 2, False, False, False)
    with pytest.raises(ValueError, match="fold_prep_tm requires parallel_pass1"):
        make(False, False, True).compile_key()
    with pytest.raises(ValueError, match="fold_prep_tm requires store_tm"):
        make(True, False, True, store_tm=False).compile_key()
    assert not make(True, False, False, store_tm=False).compile_key().fold_prep_tm  # the non-fold plans are unchanged


def test_gdn_fold_prep_key_refusals():
    """``bwd_tm`` builds only on the restructured prep kernel, and no forward variant may name it (the forward's output
    kernel reads ``qg``)."""
    _dsl()
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.gdn.chunk_parallel_prep_tc_kernel import GatedDeltaNetParallelPrepTc

    base = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=True)
    assert GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, bwd_tm=True)) is GatedDeltaNetParallelPrepTc
    assert not GdnParallelPrepKey(**base).bwd_tm  # default off: the default key (and PTX) unchanged
    with pytest.raises(ValueError, match="bwd_tm=True needs restructured=True"):
        GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**base, restructured=False, tc_ctas_per_sm=2, staged_w=False, bwd_tm=True))
    with pytest.raises(ValueError, match="bwd_tm"):
        set_parallel_options(GatedDeltaNetFwdSm90, {"prep": {"bwd_tm": True}})


# -- compile-only -------------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_gdn_fold_kernel_compiles_to_vector_copies_without_local_memory(tmp_path):
    _dsl()
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.gdn import bwd_api
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols

    def plan(T, N, D=128, H=4):
        x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
        g = TensorDesc.contiguous((T, H), "float32", "g")
        st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
        cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
        p = bwd_api.GatedDeltaNetBwdSm90(x, x, x, g, g, x, x, x, x, g, g, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu)
        p.parallel_pass1 = p.parallel_pass2 = p.fold_prep_tm = True
        p.check_support()
        return p

    key = plan(1000, 5).compile_key()
    assert key.fold_prep_tm and key.varlen and key.head_dim == 128 and key.store_tm
    assert plan(123457, 77).compile_key() == key  # Rule 4
    with keep_artifacts(tmp_path) as ptx:
        bwd_api.build_kernel("states_fold", key)()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "GdnBwdStatesFold" in names[0], names
    # K = 128 per thread: Vn^T 8 + h 16 + Tm 4 16-byte loads; h 16 + Tm 4 + Vn rows 8 16-byte stores (no P: GDN has none)
    assert text.count("ld.global.v4") == 28 and text.count("st.global.v4") == 28, (text.count("ld.global.v4"), text.count("st.global.v4"))
    assert text.count("st.global") == 28  # nothing but the vector copies
    assert "wgmma" not in text and len([ln for ln in text.splitlines() if "bar.sync" in ln]) == 1
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)


@pytest.mark.compile_only
def test_gdn_bwd_tm_prep_keeps_the_default_products_and_no_local_memory(tmp_path):
    """The ``bwd_tm`` GDN prep (restructured, three CTAs per SM) at K = 128: the default's 32 WGMMAs, qg's four 16-byte
    stores per thread replaced by Tm's (two chunks x zero / value sites): 12 16-byte stores as the default's, 127 global
    stores in all; no local memory, frame 0. (Its default-key PTX is byte-identical to the kernel before the option, K = 64
    and 128: checked by dumping both, session 10 report.)"""
    _dsl()
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols

    key = GdnParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=True, bwd_tm=True)
    cls = GatedDeltaNetParallelPrep.for_key(key)
    ptrs = [fp("BFloat16", 16)] * 3 + [fp("Float32", 2), fp("Float32", 2), fp("Int32", 4)]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(cls(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0))
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "GatedDeltaNetParallelPrepTc" in names[0], names
    assert text.count("wgmma.mma_async") == 32
    assert text.count("st.global.v4") == 12 and text.count("st.global") == 127, (text.count("st.global.v4"), text.count("st.global"))
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)


# -- GPU ------------------------------------------------------------------------------------------------------------------
def _gdn_inputs(lead, H, Hk, D, n_seqs, with_h0, with_dht):
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


def _gdn_backward(fold, p2, q, k, v, g, beta, do, h0, dht, cu, spy=False, l2norm=True):
    """As :func:`_backward`, for the GDN backward (``use_qk_l2norm_in_kernel=l2norm``)."""
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90
    from cudnn_testing.data import poison

    dq, dk, dv = (poison(torch.empty_like(t)) for t in (q, k, v))
    dg, dbeta = poison(torch.empty_like(g)), poison(torch.empty_like(beta))
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = GatedDeltaNetBwdSm90(
        q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm_in_kernel=l2norm
    )
    plan.parallel_pass1, plan.parallel_pass2, plan.fold_prep_tm = True, p2, fold
    plan.compile()
    if spy:
        spies = (_Spy(plan._compiled_forward[0]), _Spy(plan._compiled_forward[1]), _Spy(plan._compiled_kernel[0]))
        plan._compiled_forward = spies[:2]
        plan._compiled_kernel = (spies[2], *plan._compiled_kernel[1:])
        plan._spies = spies
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    ws.fill_(0xFF)  # poisoned workspace (bf16 / fp32 NaN patterns)
    args = (q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu)
    plan.execute(*args, workspace=ws)
    return dict(dq=dq, dk=dk, dv=dv, dg=dg, dbeta=dbeta, dh0=dh0), plan, ws


def _gdn_pass1_arrays(plan, ws, T, n, H, D):
    """(forward arrays by name, backward pass-1 arrays by name) of a spied GDN plan's workspace."""
    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS

    prep, fstate, states = plan._spies
    nf = len(WS_ARRAYS)
    fwd_ptrs = prep.args[6 : 6 + nf]  # q, k, v, g, beta, cu, then the workspace arrays (ChunkParallelPrepLaunch)
    fslots = prep.args[6 + nf + 4]
    bf, f32 = torch.bfloat16, torch.float32
    shapes = dict(
        w=(bf, (64, D)),
        u=(f32, (64, D)),
        kd=(bf, (64 * D,)),
        qg=(bf, (64 * D,)),
        p=(bf, (64, 64)),
        ge=(f32, (D,)),
        vnt=(bf, (D, 64)),
        h=(bf, (D, D)),
        rf=(f32, (64,)),
    )
    fwd = {name: _view(ws, ptr, shapes[name][0], (fslots, H, *shapes[name][1])) for name, ptr in zip(WS_ARRAYS, fwd_ptrs, strict=True)}
    a = states.args  # GdnBwdStatesFold: cu, 3 forward arrays, then ws_h, ws_vn, ws_tm; GdnBwdStatesChunk: k, v, g, beta, cu, h, then the same
    wsh, wsvn, wstm = a[4:7] if plan.fold_prep_tm else a[6:9]
    slots = n + T // 64 + 1
    bwd = dict(h=_view(ws, wsh, bf, (slots, H, D, D)), vn=_view(ws, wsvn, bf, (T, H, D)), tm=_view(ws, wstm, bf, (slots, H, 64, 64)))
    return fwd, bwd


#: varlen K = 128 with GVA (4 value heads over 2 q/k heads), both states; dense K = 64 without states (both: L2 norm)
_GDN_FOLD_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, 2, True, True), ("dense", (2, 257), 64, 4, False, False)]


def _gdn_case(layout, lens, D, Hk, with_h0, with_dht, H=4):
    if layout == "varlen":
        T = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        lead, n = (T,), len(lens)
    else:
        cu, lead, n = None, tuple(lens), lens[0]
        T = lens[0] * lens[1]
    return T, cu, n, _gdn_inputs(lead, H, Hk, D, n, with_h0, with_dht)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,Hk,with_h0,with_dht", _GDN_FOLD_CASES)
def test_gdn_fold_pass1_arrays_are_the_forward_arrays(layout, lens, D, Hk, with_h0, with_dht):
    """Bitwise copies of the forward's arrays at every live chunk; the forward's other arrays bitwise the non-fold plan's
    (``bwd_tm`` changes only qg); ``ws_h`` bitwise and ``Tm`` / ``Vn`` within rounding of ``GdnBwdStatesChunk``'s."""
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    H = 4
    torch.manual_seed(len(lens) * 100 + D + 3)
    T, cu, n, (q, k, v, g, beta, do, h0, dht) = _gdn_case(layout, lens, D, Hk, with_h0, with_dht, H)
    _, fplan, fws = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    _, bplan, bws = _gdn_backward(False, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    torch.cuda.synchronize()
    ffwd, fbwd = _gdn_pass1_arrays(fplan, fws, T, n, H, D)
    bfwd, bbwd = _gdn_pass1_arrays(bplan, bws, T, n, H, D)
    chunks = _chunks(lens, layout == "varlen")
    for name in ("w", "u", "kd", "p", "ge", "vnt", "h", "rf"):  # bwd_tm changes qg only; the state pass is the same
        for fs, _, _, _ in chunks:
            assert torch.equal(ffwd[name][fs], bfwd[name][fs]), (name, fs)
    for fs, bs, t0, nv in chunks:
        tm = ffwd["qg"][fs][:, : 64 * 64].reshape(H, 64, 64).float()
        assert torch.equal(torch.diagonal(tm, dim1=-2, dim2=-1), torch.ones(H, 64, device="cuda")), ("Tm unit diagonal", fs)
        assert torch.equal(torch.triu(tm, 1), torch.zeros_like(tm)), ("Tm lower", fs)
        assert torch.equal(fbwd["h"][bs], ffwd["h"][fs]), ("h", fs)
        assert torch.equal(fbwd["tm"][bs], ffwd["qg"][fs][:, : 64 * 64].reshape(H, 64, 64)), ("tm", fs)
        assert torch.equal(fbwd["vn"][t0 : t0 + nv], ffwd["vnt"][fs][..., :nv].permute(2, 0, 1)), ("vn", fs)
        assert torch.equal(fbwd["h"][bs], bbwd["h"][bs]), ("h vs GdnBwdStatesChunk", fs)
        ref, got = bbwd["tm"][bs][:, :nv].float(), fbwd["tm"][bs][:, :nv].float()  # rows of live tokens
        err = (got - ref).abs().max().item()
        assert err <= 2e-2 * max(ref.abs().max().item(), 1.0), ("tm", fs, err)
        ref, got = bbwd["vn"][t0 : t0 + nv].float(), fbwd["vn"][t0 : t0 + nv].float()
        err = (got - ref).abs().max().item()
        assert err <= 3e-2 * max(ref.abs().max().item(), 1.0), ("vn", fs, err)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,Hk,with_h0,with_dht", _GDN_FOLD_CASES)
def test_gdn_fold_matches_reference_and_p2(layout, lens, D, Hk, with_h0, with_dht):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    skip_unless_sm90()
    torch.manual_seed(len(lens) * 1000 + D + 11)
    T, cu, _, (q, k, v, g, beta, do, h0, dht) = _gdn_case(layout, lens, D, Hk, with_h0, with_dht)
    got, _, _ = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _ = _gdn_backward(False, True, q, k, v, g, beta, do, h0, dht, cu)
    torch.cuda.synchronize()
    batched = layout == "dense"
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm=True)
    refargs = [add(t) for t in (q, k, v, g, beta, do)]
    ref = gated_delta_net_recurrent_bwd_ref(*refargs, **kw)
    low = gated_delta_net_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    for name in ("dq", "dk", "dv", "dg", "dbeta", "dh0"):
        if got[name] is None:
            continue
        r = ref[name]
        out = got[name] if batched or name == "dh0" else got[name][None]
        dflt = base[name] if batched or name == "dh0" else base[name][None]
        noise = 2e-3 * r.abs().max().item()
        assert_close_fa(out, r, low[name], name=f"gdn {layout} {name} (fold_prep_tm vs bf16 chunked ref)", factor=2.0, noise=noise)
        assert_close_fa(out, r, dflt, name=f"gdn {layout} {name} (fold_prep_tm vs parallel_pass1 + parallel_pass2)", factor=2.0, noise=noise)


@pytest.mark.gpu
def test_gdn_fold_execute_allocates_nothing_and_never_synchronizes():
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    q, k, v, g, beta, do, h0, dht = _gdn_inputs((2, 257), 4, 4, 64, 2, False, False)  # the dense GPU case's plan: no new compile
    _, plan, ws = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, None)
    args = (q, k, v, g, beta, do, *(torch.empty_like(t) for t in (q, k, v, g, beta)), None, None, None, None)
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
