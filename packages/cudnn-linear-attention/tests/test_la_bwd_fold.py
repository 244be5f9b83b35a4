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
import _bwd_par_cases as _par  # noqa: E402

WHAT = "cudnn.linear_attention KDA backward (fold_prep_tm)"


def _plan(T, H, D, n, varlen, with_h0, with_dht, family="kda", gva=False):
    """``(make(p1, p2, fold, store_tm=True), execute args)`` of the CPU launch tests (``_bwd_par_cases.cpu_plan``)."""
    make, eargs = _par.cpu_plan(family, T, H, D, n, varlen, with_h0, with_dht, gva=gva)
    return (lambda p1, p2, fold, store_tm=True: make(store_tm, parallel_pass1=p1, parallel_pass2=p2, fold_prep_tm=fold)), eargs


# -- CPU: launches, keys, errors ----------------------------------------------------------------------------------------
def _check_fold_launches(monkeypatch, family, varlen, with_h0, with_dht, p2, gva=False):
    """The CPU launch check of both families' ``fold_prep_tm`` plans (module docstring, first tier): keys and parts,
    launch order, the fold kernel's declared arguments against the forward's and the later passes' arrays."""
    _par.dsl(WHAT)
    import importlib

    import _bwd_cases

    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS, ChunkParallelPrepLaunch
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

    kda = family == "kda"
    bwd_api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    kernels = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_states_parallel_kernel")
    fold_cls = kernels.KdaBwdStatesFold if kda else kernels.GdnBwdStatesFold
    fwd = ("qg", "p", "vnt", "h") if kda else ("qg", "vnt", "h")  # GDN's backward has no P array
    assert tuple(WS_ARRAYS.index(a) for a in fwd) == tuple(getattr(bwd_api, f"FWD_{a.upper()}") for a in fwd)
    T, H, D = 200, 4, 64
    n = 4 if varlen else 2
    make, eargs = _plan(T, H, D, n, varlen, with_h0, with_dht, family, gva)
    base, plan = make(True, p2, False), make(True, p2, True)
    key, bkey = plan.compile_key(), base.compile_key()
    assert key.fold_prep_tm and not bkey.fold_prep_tm
    parts, bparts = bwd_api._parts(key), bwd_api._parts(bkey)
    assert parts == ("states_fold", *bparts[1:]) and bparts[0] == "states_par"
    if not kda:
        assert parts[-1] == ("qk_reduce" if gva else "grads")
    for part in bparts[1:]:  # passes 2, 3 (4): the non-fold plan's artifacts
        assert plan._cache_key(part, key) == base._cache_key(part, bkey), part
    fkey = plan._cache_key("states_fold", key)
    assert fkey.fold_prep_tm and fkey.parallel_pass1 and not fkey.parallel_pass2 and (fkey.dp_split_hilo if kda else fkey.store_tm)
    if not kda:
        assert plan._cache_key("states_par", key) == base._cache_key("states_par", bkey)  # the non-fold pass 1b's key is untouched
    assert plan._pass1_prep_options() == {"bwd_tm": True} and base._pass1_prep_options() == {}
    assert plan.scratch_workspace_bytes() == base.scratch_workspace_bytes()  # the same arrays: no new workspace

    _par.record_forward_in_order(monkeypatch, plan)
    plan._compiled_fold_prep_tm = True
    plan._compiled_parallel_pass2 = p2
    ws = _par.run_in_order_refusing_a_flip(monkeypatch, plan, parts, eargs, "fold_prep_tm")

    recs = {r.name: r for r in plan._compiled_kernel}
    fold_args = recs["states_fold"].calls[0]
    names = _bwd_cases.declared(fold_cls)
    assert len(fold_args) == len(names) and fold_args[-1] == "stream"
    fold = dict(zip(names, fold_args, strict=True))
    prep, fstate = plan._compiled_forward
    prep_args = dict(zip(_bwd_cases.declared(ChunkParallelPrepLaunch), prep.calls[0], strict=True))
    state_cls = KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=with_h0, has_final=False))
    state_args = dict(zip(_bwd_cases.declared(state_cls), fstate.calls[0], strict=True))
    addr = lambda a: int(a._pointer)  # noqa: E731
    assert addr(fold["fh_ptr"]) == addr(state_args["h_ptr"]) and addr(fold["fvnt_ptr"]) == addr(state_args["vnt_ptr"])
    assert addr(fold["ftm_ptr"]) == addr(prep_args["qg_ptr"])
    if kda:
        assert addr(fold["fp_ptr"]) == addr(prep_args["p_ptr"])
    seq_len = 0 if varlen else T // 2
    assert (fold["cu_ptr"] is None) == (not varlen)
    if varlen:
        assert addr(fold["cu_ptr"]) == eargs[-1].data_ptr()
    assert fold["T"] == T and fold["n_seqs"] == n and fold["seq_len"] == seq_len and fold["heads"] == H
    assert fold["slots"] == n + T // 64 + 1 and fold["fslots"] == prep_args["slots"] and fold["chunks_per_seq"] == prep_args["chunks_per_seq"]
    own = bwd_api.workspace_bytes(T, n, H, D) if kda else bwd_api.workspace_bytes(T, n, H, D, True, gva)
    lo, hi = ws.data_ptr(), ws.data_ptr() + own  # the backward's own arrays (before the tails)
    ws_names = ("wsh_ptr", "wsvn_ptr", "wstm_ptr", "wsp_ptr") if kda else ("wsh_ptr", "wsvn_ptr", "wstm_ptr")
    for name in ws_names:
        assert lo <= addr(fold[name]) < hi, name
    gby = dict(zip(_bwd_cases.declared(_grads_cls(family)), recs["grads"].calls[0], strict=True))
    for name in ("wsh_ptr", "wsvn_ptr", "wstm_ptr"):  # pass 3 reads what the fold writes
        assert addr(gby[name]) == addr(fold[name]), name
    sby = dict(zip(_bwd_cases.declared(_dstates_cls(family, p2)), recs["dstates_prep" if p2 else "dstates"].calls[0], strict=True))
    for name in ws_names[2:]:  # pass 2 too: Tm (and P)
        assert addr(sby[name]) == addr(fold[name]), name


@pytest.mark.parametrize("varlen,with_h0,with_dht,p2", [(True, True, True, True), (False, False, False, False)])
def test_fold_launches_in_order_with_declared_arguments(monkeypatch, varlen, with_h0, with_dht, p2):
    _check_fold_launches(monkeypatch, "kda", varlen, with_h0, with_dht, p2)


def _grads_cls(family):
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads

    return KdaBwdGrads if family == "kda" else GdnBwdGrads


def _dstates_cls(family, p2):
    from cudnn.linear_attention.gdn.bwd_dstates_parallel_kernel import GdnBwdDStatesPrep
    from cudnn.linear_attention.gdn.bwd_states_kernel import GdnBwdDStates
    from cudnn.linear_attention.kda.bwd_dstates_parallel_kernel import KdaBwdDStatesPrep
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdDStates

    if family == "kda":
        return KdaBwdDStatesPrep if p2 else KdaBwdDStates
    return GdnBwdDStatesPrep if p2 else GdnBwdDStates


def _check_prep_bwd_tm(monkeypatch, family):
    """``fold_prep_tm`` compiles the forward prep with ``bwd_tm`` and only then."""
    _par.dsl(WHAT)
    from cudnn.linear_attention._host import chunk_parallel

    seen = []

    def fake(*a, **kw):
        seen.append(kw["prep_options"])
        return ("prep", "state", "out")

    monkeypatch.setattr(chunk_parallel, "compile_parallel", fake)
    make, _ = _plan(200, 4, 64, 4, True, False, False, family)
    for fold in (True, False):
        plan = make(True, False, fold)
        plan._compile_forward_pass1()
        assert plan._compiled_forward == ("prep", "state")
    assert seen == [{"bwd_tm": True}, {}]


def test_fold_compiles_the_prep_with_bwd_tm_only_when_set(monkeypatch):
    _check_prep_bwd_tm(monkeypatch, "kda")


def test_fold_requires_parallel_pass1():
    _par.dsl(WHAT)
    make, _ = _plan(200, 4, 64, 2, False, False, False)
    with pytest.raises(ValueError, match="fold_prep_tm requires parallel_pass1"):
        make(False, False, True).compile_key()


# -- compile-only -------------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_fold_kernel_compiles_to_vector_copies_without_local_memory(tmp_path):
    _par.dsl(WHAT)
    key, text = _par.compile_part(tmp_path, "kda", "states_fold", parallel_pass1=True, parallel_pass2=True, fold_prep_tm=True)
    assert key.fold_prep_tm and key.varlen and key.head_dim == 128
    _par.assert_one_kernel(text, "KdaBwdStatesFold")
    # K = 128 per thread: Vn^T 8 + h 16 + Tm 4 + P 4 16-byte loads; h 16 + Tm 4 + P 4 + Vn rows 8 16-byte stores
    assert text.count("ld.global.v4") == 32 and text.count("st.global.v4") == 32, (text.count("ld.global.v4"), text.count("st.global.v4"))
    assert "wgmma" not in text and len([ln for ln in text.splitlines() if "bar.sync" in ln]) == 1
    _par.assert_no_local_memory(text, tmp_path)


@pytest.mark.compile_only
def test_bwd_tm_prep_keeps_the_default_products_and_no_local_memory(tmp_path):
    """The ``bwd_tm`` prep at K = 128: the default's 80 WGMMAs (m64n16 A / P blocks, m64n64 U / -Wm), qg's four 16-byte
    stores per thread replaced by Tm's (two chunks x zero / value sites), no local memory, frame 0. (Its default-key PTX
    is byte-identical to the kernel before the option: checked by dumping both, session 10 report.)"""
    _par.dsl(WHAT)
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep
    from cudnn_testing.compile_only import keep_artifacts

    key = KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=True, bwd_tm=True)
    ptrs = [fp("BFloat16", 16)] * 3 + [fp("Float32", 4), fp("Float32", 2), fp("Int32", 4)]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(
            KimiDeltaAttentionParallelPrep(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0)
        )
        text = ptx()
    _par.assert_one_kernel(text)
    assert text.count("wgmma.mma_async") == 80
    assert text.count("st.global.v4") == 16  # kd 4 + -Wm 8 (staged) + Tm 4 (qg's 4 gone)
    _par.assert_no_local_memory(text, tmp_path)


# -- GPU ------------------------------------------------------------------------------------------------------------------
def _backward(fold, p2, q, k, v, g, beta, do, h0, dht, cu, spy=False):
    """(grads dict, plan, workspace) of one ``parallel_pass1`` backward (``fold``: with ``fold_prep_tm``; ``p2``: with
    ``parallel_pass2``) on poisoned outputs and a poisoned workspace (bf16 / fp32 NaN patterns); ``spy``: pass 1b and the
    forward prep / state pass record their arguments (``plan._spies``)."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    options = dict(parallel_pass1=True, parallel_pass2=p2, fold_prep_tm=fold)
    grads, plan, ws, _ = _par.backward(KimiDeltaAttentionBwdSm90, q, k, v, g, beta, do, h0, dht, cu, options=options, spy=spy, fill=True)
    return grads, plan, ws


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


def _pass1_arrays(plan, ws, T, n, H, D, family="kda"):
    """(forward arrays by name, backward pass-1 arrays by name) of a spied plan's workspace (GDN: ``rf`` too, no ``P``)."""
    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS

    kda = family == "kda"
    prep, fstate, states = plan._spies
    nf = len(WS_ARRAYS)
    fwd_ptrs = prep.args[6 : 6 + nf]  # q, k, v, g, beta, cu, then the workspace arrays (ChunkParallelPrepLaunch)
    fslots = prep.args[6 + nf + 4]
    bf, f32 = torch.bfloat16, torch.float32
    shapes = dict(
        w=(bf, (64, D)), u=(f32, (64, D)), kd=(bf, (64 * D,)), qg=(bf, (64 * D,)), p=(bf, (64, 64)), ge=(f32, (D,)), vnt=(bf, (D, 64)), h=(bf, (D, D))
    )
    if not kda:
        shapes["rf"] = (f32, (64,))
    fwd = {name: _view(ws, ptr, shapes[name][0], (fslots, H, *shapes[name][1])) for name, ptr in zip(WS_ARRAYS, fwd_ptrs, strict=True) if name in shapes}
    a = states.args
    if kda:  # KdaBwdStatesFold: cu, 4 forward arrays, then ws_h, ws_vn, ws_tm, ws_p; KdaBwdStatesChunk: 7 inputs, then the same
        wsh, wsvn, wstm, wsp = a[5:9] if plan.fold_prep_tm else a[7:11]
    else:  # GdnBwdStatesFold: cu, 3 forward arrays, then ws_h, ws_vn, ws_tm; GdnBwdStatesChunk: k, v, g, beta, cu, h, then the same
        wsh, wsvn, wstm = a[4:7] if plan.fold_prep_tm else a[6:9]
    slots = n + T // 64 + 1
    bwd = dict(h=_view(ws, wsh, bf, (slots, H, D, D)), vn=_view(ws, wsvn, bf, (T, H, D)), tm=_view(ws, wstm, bf, (slots, H, 64, 64)))
    if kda:
        bwd["p"] = _view(ws, wsp, bf, (slots, H, 64, 64))
    return fwd, bwd


_FOLD_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True, True), ("dense", (2, 257), 64, False, False)]


def _case(layout, lens, D, with_h0, with_dht, H=4):
    T, cu, lead, n = _par.case_extents(layout, lens)
    return T, cu, lead, n, _par.kda_inputs(lead, H, D, n, with_h0, with_dht)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_h0,with_dht", _FOLD_CASES)
def test_fold_pass1_arrays_are_the_forward_arrays(layout, lens, D, with_h0, with_dht):
    """Bitwise copies of the forward's arrays at every live chunk; the forward's other arrays bitwise the non-fold plan's
    (``bwd_tm`` changes only qg); ``ws_h`` bitwise and ``Tm`` / ``P`` / ``Vn`` within rounding of ``KdaBwdStatesChunk``'s."""
    _par.gpu_ready(WHAT)
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
    _par.gpu_ready(WHAT)
    torch.manual_seed(len(lens) * 1000 + D + 7)
    T, cu, _, _, (q, k, v, g, beta, do, h0, dht) = _case(layout, lens, D, with_h0, with_dht)
    got, _, _ = _backward(True, True, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _ = _backward(False, True, q, k, v, g, beta, do, h0, dht, cu)
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("kda", got, base, inputs, cu, layout == "dense", f"{layout} ", "fold_prep_tm", "parallel_pass1 + parallel_pass2")


@pytest.mark.gpu
def test_fold_execute_allocates_nothing_and_never_synchronizes():
    _par.gpu_ready(WHAT)
    q, k, v, g, beta, do, h0, dht = _par.kda_inputs((2, 200), 2, 64, 2, False, False)
    _, plan, ws = _backward(True, True, q, k, v, g, beta, do, h0, dht, None)
    args = (q, k, v, g, beta, do, *(torch.empty_like(t) for t in (q, k, v, g, beta)), None, None, None, None)
    _par.assert_r9(plan, ws, args)


# == GDN ===============================================================================================================
# -- CPU: launches, keys, errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("varlen,with_h0,with_dht,p2,gva", [(True, True, True, True, True), (False, False, False, False, False)])
def test_gdn_fold_launches_in_order_with_declared_arguments(monkeypatch, varlen, with_h0, with_dht, p2, gva):
    _check_fold_launches(monkeypatch, "gdn", varlen, with_h0, with_dht, p2, gva)


def test_gdn_fold_compiles_the_prep_with_bwd_tm_only_when_set(monkeypatch):
    _check_prep_bwd_tm(monkeypatch, "gdn")


def test_gdn_fold_requires_parallel_pass1_and_store_tm():
    _par.dsl(WHAT)
    make, _ = _plan(200, 4, 64, 2, False, False, False, "gdn")
    with pytest.raises(ValueError, match="fold_prep_tm requires parallel_pass1"):
        make(False, False, True).compile_key()
    with pytest.raises(ValueError, match="fold_prep_tm requires store_tm"):
        make(True, False, True, store_tm=False).compile_key()
    assert not make(True, False, False, store_tm=False).compile_key().fold_prep_tm  # the non-fold plans are unchanged


def test_gdn_fold_prep_key_refusals():
    """``bwd_tm`` builds only on the restructured prep kernel, and no forward variant may name it (the forward's output
    kernel reads ``qg``)."""
    _par.dsl(WHAT)
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
    _par.dsl(WHAT)
    key, text = _par.compile_part(tmp_path, "gdn", "states_fold", parallel_pass1=True, parallel_pass2=True, fold_prep_tm=True)
    assert key.fold_prep_tm and key.varlen and key.head_dim == 128 and key.store_tm
    _par.assert_one_kernel(text, "GdnBwdStatesFold")
    # K = 128 per thread: Vn^T 8 + h 16 + Tm 4 16-byte loads; h 16 + Tm 4 + Vn rows 8 16-byte stores (no P: GDN has none)
    assert text.count("ld.global.v4") == 28 and text.count("st.global.v4") == 28, (text.count("ld.global.v4"), text.count("st.global.v4"))
    assert text.count("st.global") == 28  # nothing but the vector copies
    assert "wgmma" not in text and len([ln for ln in text.splitlines() if "bar.sync" in ln]) == 1
    _par.assert_no_local_memory(text, tmp_path)


@pytest.mark.compile_only
def test_gdn_bwd_tm_prep_keeps_the_default_products_and_no_local_memory(tmp_path):
    """The ``bwd_tm`` GDN prep (restructured, three CTAs per SM) at K = 128: the default's 32 WGMMAs, qg's four 16-byte
    stores per thread replaced by Tm's (two chunks x zero / value sites): 12 16-byte stores as the default's, 127 global
    stores in all; no local memory, frame 0. (Its default-key PTX is byte-identical to the kernel before the option, K = 64
    and 128: checked by dumping both, session 10 report.)"""
    _par.dsl(WHAT)
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn_testing.compile_only import keep_artifacts

    key = GdnParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=False, varlen=True, bwd_tm=True)
    cls = GatedDeltaNetParallelPrep.for_key(key)
    ptrs = [fp("BFloat16", 16)] * 3 + [fp("Float32", 2), fp("Float32", 2), fp("Int32", 4)]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(cls(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0))
        text = ptx()
    _par.assert_one_kernel(text, "GatedDeltaNetParallelPrepTc")
    assert text.count("wgmma.mma_async") == 32
    assert text.count("st.global.v4") == 12 and text.count("st.global") == 127, (text.count("st.global.v4"), text.count("st.global"))
    _par.assert_no_local_memory(text, tmp_path)


# -- GPU ------------------------------------------------------------------------------------------------------------------
def _gdn_backward(fold, p2, q, k, v, g, beta, do, h0, dht, cu, spy=False, l2norm=True):
    """As :func:`_backward`, for the GDN backward (``use_qk_l2norm_in_kernel=l2norm``)."""
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    options = dict(parallel_pass1=True, parallel_pass2=p2, fold_prep_tm=fold)
    grads, plan, ws, _ = _par.backward(
        GatedDeltaNetBwdSm90, q, k, v, g, beta, do, h0, dht, cu, options=options, spy=spy, fill=True, use_qk_l2norm_in_kernel=l2norm
    )
    return grads, plan, ws


#: varlen K = 128 with GVA (4 value heads over 2 q/k heads), both states; dense K = 64 without states (both: L2 norm)
_GDN_FOLD_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, 2, True, True), ("dense", (2, 257), 64, 4, False, False)]


def _gdn_case(layout, lens, D, Hk, with_h0, with_dht, H=4):
    T, cu, lead, n = _par.case_extents(layout, lens)
    return T, cu, n, _par.gdn_inputs(lead, H, Hk, D, n, with_h0, with_dht)


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,Hk,with_h0,with_dht", _GDN_FOLD_CASES)
def test_gdn_fold_pass1_arrays_are_the_forward_arrays(layout, lens, D, Hk, with_h0, with_dht):
    """Bitwise copies of the forward's arrays at every live chunk; the forward's other arrays bitwise the non-fold plan's
    (``bwd_tm`` changes only qg); ``ws_h`` bitwise and ``Tm`` / ``Vn`` within rounding of ``GdnBwdStatesChunk``'s."""
    _par.gpu_ready(WHAT)
    H = 4
    torch.manual_seed(len(lens) * 100 + D + 3)
    T, cu, n, (q, k, v, g, beta, do, h0, dht) = _gdn_case(layout, lens, D, Hk, with_h0, with_dht, H)
    _, fplan, fws = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    _, bplan, bws = _gdn_backward(False, True, q, k, v, g, beta, do, h0, dht, cu, spy=True)
    torch.cuda.synchronize()
    ffwd, fbwd = _pass1_arrays(fplan, fws, T, n, H, D, "gdn")
    bfwd, bbwd = _pass1_arrays(bplan, bws, T, n, H, D, "gdn")
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
    _par.gpu_ready(WHAT)
    torch.manual_seed(len(lens) * 1000 + D + 11)
    T, cu, _, (q, k, v, g, beta, do, h0, dht) = _gdn_case(layout, lens, D, Hk, with_h0, with_dht)
    got, _, _ = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _ = _gdn_backward(False, True, q, k, v, g, beta, do, h0, dht, cu)
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("gdn", got, base, inputs, cu, layout == "dense", f"gdn {layout} ", "fold_prep_tm", "parallel_pass1 + parallel_pass2", use_qk_l2norm=True)


@pytest.mark.gpu
def test_gdn_fold_execute_allocates_nothing_and_never_synchronizes():
    _par.gpu_ready(WHAT)
    q, k, v, g, beta, do, h0, dht = _par.gdn_inputs((2, 257), 4, 4, 64, 2, False, False)  # the dense GPU case's plan: no new compile
    _, plan, ws = _gdn_backward(True, True, q, k, v, g, beta, do, h0, dht, None)
    args = (q, k, v, g, beta, do, *(torch.empty_like(t) for t in (q, k, v, g, beta)), None, None, None, None)
    _par.assert_r9(plan, ws, args)
