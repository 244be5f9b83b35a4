"""The delta-rule backwards' chunk-parallel pass 2 (opt-in ``plan.parallel_pass2 = True``, requires ``parallel_pass1``):
the per-chunk precompute (``kda/`` / ``gdn/bwd_dstates_parallel_kernel.py``) and the narrow reverse state chain
(``_device/dstates_parallel.py::DeltaRuleBwdDStatesChain``), in four tiers:

- CPU math (torch only): the split of the reverse recurrence -- per-chunk operands on 64-row zero-padded chunks, then
  the chain on the TRANSPOSED state gradient in 32-row V slices with the kernels' bf16 roundings -- against the serial
  pass 2 of the chunked reference (``cudnn_testing.reference_linear_attention``), KDA and GDN decays, varlen with a
  1-token sequence and a final-state gradient: in fp32 equal up to reassociation, with the bf16 roundings within a few
  bf16 ulps.
- CPU launches (torch + the DSL, no GPU): with every compiled kernel a recorder, ``execute`` launches the forward's prep
  and state pass, pass 1, the precompute, the chain, pass 3 (and GDN's GVA reduction) in that order, each with exactly
  the arguments its ``__call__`` declares; the precompute's arrays lie in a workspace tail past the forward's (R2) and
  the precompute and the chain get the same ones; passes 1 and 3 of the opt-in plan are cached under the
  ``parallel_pass1`` plan's keys; ``parallel_pass2`` without ``parallel_pass1`` (and GDN's without ``store_tm``) is a
  ValueError naming both.
- compile-only (``CUTE_DSL_ARCH=sm_90a``): both families' precompute and the shared chain build at K = 128 varlen with
  their WGMMA counts, the chain with TMA, no local memory, a zero ptxas frame, the cudnn symbol prefix (Rule 6), and
  the compile key is independent of the token total and sequence count (Rule 4); the precompute's ``kdn`` as 16-byte
  vector stores (8 per thread at K = 128, session 10).
- GPU (``@pytest.mark.gpu``): the opt-in's dq, dk, dv, dg, dbeta and d initial state against the fp32 token-by-token
  reference within the FlashAttention rule (bound: twice the bf16 chunked reference's error) and against the default
  backward (twice the default's error; the default differs in pass 2 only: chunk-parallel pass 1, ``dp_split_hilo``): KDA varlen (1-token, empty, multi-chunk sequences, both states, K = 128) and
  dense K = 64 without states; GDN varlen with GVA and the in-kernel L2 norm, both states, K = 128; plus R9 (no sync,
  no allocation across warm executes); the precompute's 16-byte ``kdn`` stores (``KDN_STORE_VEC``) bitwise the
  session-9 2-byte element stores (the same plan's precompute re-run as the ``KDN_STORE_VEC = False`` kernel over the
  re-poisoned ``kdn`` leaves the whole workspace bitwise unchanged; both families, varlen K = 128).

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_p2.py`` (GPU host: ``-k p2``).
"""

from __future__ import annotations

import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_bwd_cases.py: --import-mode=importlib adds no test folder
import _bwd_par_cases as _par  # noqa: E402

WHAT = "cudnn.linear_attention backward (parallel_pass2)"


# -- CPU: the math of the split -----------------------------------------------------------------------------------------
def _chunk_operands(q, k, g, beta, do, c0, c1, sc, per_key, rnd):
    """One chunk [c0, c1) of one sequence, zero-padded to 64 rows as the kernels see it: the serial pass 2's operands
    (the chunked reference's formulas) ``(kd, p, wm, qs, do, ge)``; q, k, do [H, C, D] rows, g [H, C, K] or [H, C]."""
    C, pad = c1 - c0, 64 - (c1 - c0)

    def rows(x):  # [T, H, ...] -> [H, 64, ...] zero past the chunk's end
        x = x[c0:c1].transpose(0, 1)
        return torch.cat([x, torch.zeros(x.shape[0], pad, *x.shape[2:])], 1)

    cq, ck, cdo, cb = rows(q), rows(k), rnd(rows(do)), rows(beta)[..., None]
    cg = rows(g) if per_key else rows(g)[..., None].expand(-1, -1, q.shape[-1])
    G = torch.cumsum(cg, 1)  # [H, 64, K]; rows past the end repeat G's last valid row
    diff = G[:, :, None, :] - G[:, None, :, :]
    lower_eq = torch.tril(torch.ones(64, 64, dtype=torch.bool))
    dec = torch.where(lower_eq[None, :, :, None], diff, torch.full_like(diff, -float("inf"))).exp()
    A = torch.tril(cb * torch.einsum("hic,hjc,hijc->hij", ck, ck, dec), diagonal=-1)
    eye = torch.eye(64).expand_as(A)
    Tm = rnd(torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True))
    eg = G.exp()
    wm = rnd(Tm @ rnd(cb * ck * eg))
    p = rnd(torch.einsum("hic,hjc,hijc->hij", cq, ck, dec) * sc)
    gl = G[:, -1:, :]
    return rnd(ck * (gl - G).exp()), p, wm, rnd(cq * eg * sc), cdo, gl[:, 0].exp(), C


def _serial_pass2(ops, dht, rnd):
    """The chunked reference's pass 2 (reverse over the chunks ``ops``): ``(dS1 per chunk, dVn per chunk, dS0)``."""
    ds = dht.clone()
    ds1s, dvns = [None] * len(ops), [None] * len(ops)
    for idx in reversed(range(len(ops))):
        kd, p, wm, qs, do, ge, _ = ops[idx]
        ds_op = rnd(ds)
        ds1s[idx] = ds_op
        dvn = rnd(p.transpose(-1, -2) @ do + kd @ ds_op.transpose(-1, -2))
        dvns[idx] = dvn
        ds = ds * ge[:, None, :] + do.transpose(-1, -2) @ qs - dvn.transpose(-1, -2) @ wm
    return ds1s, dvns, ds


def _chain_pass2(ops, dht, rnd, vw=32):
    """The split: per chunk the precompute (kdn, dvl = P^T dO in fp32, wmt, qst, dot, ge), then the chain on dS^T
    [H, K, V] in ``vw``-row V slices, newest chunk first, with the kernels' roundings (bf16 dS1 and dVn operands, -dVn
    rounded as bf16 then negated)."""
    pre = [(kd, p.transpose(-1, -2) @ do, wm.transpose(-1, -2), qs.transpose(-1, -2), do.transpose(-1, -2), ge) for kd, p, wm, qs, do, ge, _ in ops]
    dst = dht.transpose(-1, -2).clone()  # [H, K, V]
    V = dst.shape[-1]
    ds1s, dvns = [None] * len(ops), [None] * len(ops)
    for idx in reversed(range(len(ops))):
        kdn, dvl, wmt, qst, dot, ge = pre[idx]
        ds1 = rnd(dst).transpose(-1, -2).clone()  # [H, V, K]: ws_dh
        ds1s[idx] = ds1
        dvn = torch.empty_like(dvl)
        for v0 in range(0, V, vw):
            vs = slice(v0, v0 + vw)
            dvn[:, :, vs] = rnd(dvl[:, :, vs] + kdn @ ds1[:, vs, :].transpose(-1, -2))
            dst[:, :, vs] = ge[:, :, None] * dst[:, :, vs] + qst @ dot[:, vs, :].transpose(-1, -2) + wmt @ (-dvn[:, :, vs])
        dvns[idx] = dvn
    return ds1s, dvns, dst.transpose(-1, -2)


@pytest.mark.parametrize("per_key", [True, False], ids=["kda", "gdn"])
@pytest.mark.parametrize("lowp", [False, True], ids=["fp32", "bf16"])
def test_p2_split_matches_serial_pass2_cpu(per_key, lowp):
    torch.manual_seed(3 + per_key)
    H, D = 2, 64
    lens = [1, 150, 64, 0, 70]
    T = sum(lens)
    q = torch.randn(T, H, D).bfloat16().float()
    k = torch.nn.functional.normalize(torch.randn(T, H, D), dim=-1).bfloat16().float()
    do = torch.randn(T, H, D)
    g = -5.0 * torch.sigmoid(torch.randn(T, H, D)) if per_key else torch.nn.functional.logsigmoid(torch.randn(T, H)) / 8
    beta = torch.rand(T, H)
    sc = 1.0 / math.sqrt(D)
    rnd = (lambda x: x.bfloat16().float()) if lowp else (lambda x: x)
    dhts = torch.randn(len(lens), H, D, D)
    if not lowp:  # d initial_state of the library's chunked reference itself (pass 2's output), fp32
        from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, kimi_delta_attention_chunked_bwd_ref

        refbwd = kimi_delta_attention_chunked_bwd_ref if per_key else gated_delta_net_chunked_bwd_ref
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
        v = torch.randn(T, H, D)
        full = refbwd(*(t[None] for t in (q, k, v, g, beta, do)), scale=sc, initial_state=torch.zeros(len(lens), H, D, D), dfinal_state=dhts, cu_seqlens=cu)
    bos = 0
    for n, L in enumerate(lens):
        ops = [
            _chunk_operands(q[bos : bos + L], k[bos : bos + L], g[bos : bos + L], beta[bos : bos + L], do[bos : bos + L], c0, min(c0 + 64, L), sc, per_key, rnd)
            for c0 in range(0, L, 64)
        ]
        dht = dhts[n]
        ref = _serial_pass2(ops, dht, rnd)
        got = _chain_pass2(ops, dht, rnd)
        if not lowp:
            torch.testing.assert_close(got[2], full["dh0"][n], atol=2e-5 * full["dh0"][n].abs().max().item(), rtol=0)
        scale = ref[2].abs().max().item()
        tol = (4e-3 if lowp else 2e-5) * scale
        torch.testing.assert_close(got[2], ref[2], atol=tol, rtol=0, msg=lambda m, n=n: f"dS0 of sequence {n}: {m}")
        for idx, (_, _, _, _, _, _, C) in enumerate(ops):
            s1 = ref[0][idx].abs().max().item()
            torch.testing.assert_close(got[0][idx], ref[0][idx], atol=(4e-3 if lowp else 2e-5) * s1, rtol=0)
            s2 = ref[1][idx][:, :C].abs().max().item()  # rows past the sequence's end are never written
            torch.testing.assert_close(got[1][idx][:, :C], ref[1][idx][:, :C], atol=(8e-3 if lowp else 2e-5) * s2, rtol=0)
        bos += L


# -- CPU: launches --------------------------------------------------------------------------------------------------
def _plan(family, T, H, D, n, varlen, with_h0, with_dht, gva=False, store_tm=True):
    make, eargs = _par.cpu_plan(family, T, H, D, n, varlen, with_h0, with_dht, gva=gva)
    return (lambda p1, p2: make(store_tm, parallel_pass1=p1, parallel_pass2=p2)), eargs


@pytest.mark.parametrize(
    "family,varlen,with_h0,with_dht,gva",
    [("kda", True, True, True, False), ("kda", False, False, False, False), ("gdn", True, True, True, True), ("gdn", False, False, True, False)],
)
def test_p2_launches_in_order_with_declared_arguments(monkeypatch, family, varlen, with_h0, with_dht, gva):
    _par.dsl(WHAT)
    import importlib

    import _bwd_cases

    from cudnn.linear_attention._device.dstates_parallel import DeltaRuleBwdDStatesChain
    from cudnn.linear_attention._host import delta_rule_bwd_api as host

    api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    prep_mod = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_dstates_parallel_kernel")
    prep_cls = prep_mod.KdaBwdDStatesPrep if family == "kda" else prep_mod.GdnBwdDStatesPrep
    T, H, D = 200, 4, 64
    n = 4 if varlen else 2
    make, eargs = _plan(family, T, H, D, n, varlen, with_h0, with_dht, gva=gva)
    p1, plan = make(True, False), make(True, True)
    key = plan.compile_key()
    assert key.parallel_pass2 and key.parallel_pass1 and not p1.compile_key().parallel_pass2
    parts = api._parts(key)
    tail = ("qk_reduce",) if gva else ()
    assert parts == ("states_par", "dstates_prep", "dstates_chain", "grads", *tail)
    assert api._parts(p1.compile_key()) == ("states_par", "dstates", "grads", *tail)  # the pass-1 opt-in is unchanged
    for part in ("states_par", "grads", *tail):  # passes 1, 3 (4): the parallel_pass1 plan's artifacts
        assert plan._cache_key(part, key) == p1._cache_key(part, p1.compile_key()), part
    assert plan._cache_key("dstates_prep", key).parallel_pass2 and plan._cache_key("dstates_chain", key).parallel_pass2
    base = p1.scratch_workspace_bytes()
    assert plan.scratch_workspace_bytes() == base + host.dstates_workspace_bytes(T, n, H, D)

    _par.record_forward_in_order(monkeypatch, plan)
    plan._compiled_parallel_pass2 = True  # compile() is replaced by the recorders
    ws = _par.run_in_order_refusing_a_flip(monkeypatch, plan, parts, eargs, "parallel_pass2")

    recs = {r.name: r for r in plan._compiled_kernel}
    seq_len = 0 if varlen else T // 2
    Hk = H // 2 if gva else H
    prep = _bwd_cases.check_launch(recs["dstates_prep"], prep_cls, ws, T=T, n=n, H=H, Hk=Hk, varlen=varlen, seq_len=seq_len, with_h0=with_h0, with_dht=with_dht)
    names = _bwd_cases.declared(DeltaRuleBwdDStatesChain)
    chain_args = recs["dstates_chain"].calls[0]
    assert len(chain_args) == len(names) and chain_args[-1] == "stream"
    chain = dict(zip(names, chain_args, strict=True))
    assert (chain["cu_ptr"] is None) == (not varlen) and (chain["dht_ptr"] is None) == (not with_dht) and (chain["dh0_ptr"] is None) == (not with_h0)
    assert chain["T"] == T and chain["n_seqs"] == n and chain["seq_len"] == seq_len and chain["heads"] == H and chain["slots"] == n + T // 64 + 1
    lo, end = ws.data_ptr() + base, ws.data_ptr() + ws.numel()
    addrs = []
    for name, _, _ in host.P2_ARRAYS:  # the precompute's arrays: in the tail past everything else, shared by both launches
        a = int(prep[name + "_ptr"]._pointer)
        assert a == int(chain[name + "_ptr"]._pointer) and lo <= a < end and a % 128 == 0, name
        addrs.append(a)
    assert addrs == sorted(addrs) and len(set(addrs)) == len(addrs)
    if chain["dh0_ptr"] is not None:
        assert int(chain["dh0_ptr"]._pointer) == eargs[12].data_ptr()
    grads = recs["grads"].calls[0]
    gnames = _bwd_cases.declared(_grads_cls(family))
    gby = dict(zip(gnames, grads, strict=True))
    for name in ("wsdh_ptr", "wsdvn_ptr"):  # pass 3 reads what the chain writes
        assert int(gby[name]._pointer) == int(chain[name]._pointer), name
    assert int(prep["wstm_ptr"]._pointer) == int(gby["wstm_ptr"]._pointer)
    if family == "kda":
        from cudnn.linear_attention.kda.bwd_states_parallel_kernel import KdaBwdStatesChunk

        states = dict(zip(_bwd_cases.declared(KdaBwdStatesChunk), recs["states_par"].calls[0], strict=True))
        assert int(prep["wsp_ptr"]._pointer) == int(states["wsp_ptr"]._pointer)  # P from the chunk-parallel pass 1


def _grads_cls(family):
    if family == "kda":
        from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads

        return KdaBwdGrads
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads

    return GdnBwdGrads


@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_p2_requires_parallel_pass1(family):
    _par.dsl(WHAT)
    make, _ = _plan(family, 200, 4, 64, 2, False, False, False)
    plan = make(False, True)
    with pytest.raises(ValueError, match="parallel_pass2 requires parallel_pass1"):
        plan.compile_key()
    if family == "gdn":
        make, _ = _plan(family, 200, 4, 64, 2, False, False, False, store_tm=False)
        with pytest.raises(ValueError, match="parallel_pass2 requires store_tm"):
            make(True, True).compile_key()


# -- compile-only -----------------------------------------------------------------------------------------------------
#: WGMMA in the PTX at K = V = 128, varlen with both states: the precompute m64n64k16 (Wm^T 8, P^T dO 4 in the runtime V
#: loop; GDN + Q K^T 8), the chain m64n32k16 (per chunk dVn 8, dS0 2 x (4 + 4); the 3-stage ring unrolled: x 3).
_P2_WGMMA_128 = {("kda", "dstates_prep"): ("m64n64k16", 12), ("gdn", "dstates_prep"): ("m64n64k16", 20), ("kda", "dstates_chain"): ("m64n32k16", 72)}


@pytest.mark.compile_only
@pytest.mark.parametrize("family,part", [("kda", "dstates_prep"), ("gdn", "dstates_prep"), ("kda", "dstates_chain")])
def test_p2_kernels_compile_with_wgmma_and_no_local_memory(tmp_path, family, part):
    _par.dsl(WHAT)
    key, text = _par.compile_part(tmp_path, family, part, parallel_pass1=True, parallel_pass2=True)
    assert key.parallel_pass2 and key.varlen and key.head_dim == 128
    kernel = {"dstates_chain": "DeltaRuleBwdDStatesChain", "dstates_prep": "KdaBwdDStatesPrep" if family == "kda" else "GdnBwdDStatesPrep"}[part]
    _par.assert_one_kernel(text, kernel)
    shape, count = _P2_WGMMA_128[(family, part)]
    assert text.count(f"wgmma.mma_async.sync.aligned.{shape}.f32.bf16.bf16") == count == text.count("wgmma.mma_async")
    if part == "dstates_prep":  # kdn by 16-byte vectors (K = 128: 8 per thread; KDN_STORE_VEC), the only vector stores
        assert text.count("st.global.v4.b32") == 8 == text.count("st.global.v4"), text.count("st.global.v4")
    if part == "dstates_chain":  # six operands by TMA (kdn, wmt, qst: 2 boxes each at K = 128; dvl, dO^T, ge), 5 fetch sites
        assert text.count("cp.async.bulk.tensor") == 45 and "mbarrier.try_wait" in text
    _par.assert_no_local_memory(text, tmp_path)


# -- GPU ----------------------------------------------------------------------------------------------------------------
def _backward(cls, mode, q, k, v, g, beta, do, h0, dht, cu, **opts):
    """(grads dict, plan, workspace, args) of one backward with poisoned outputs; ``mode`` 0 the ``parallel_pass1`` plan
    (chunk-parallel pass 1, serial pass 2), 2 with ``parallel_pass2`` too: the two differ in pass 2 only."""
    options = dict(parallel_pass1=True, parallel_pass2=mode == 2)  # opt-in; parallel_pass2 requires parallel_pass1
    return _par.backward(cls, q, k, v, g, beta, do, h0, dht, cu, options=options, **opts)


_KDA_GPU_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True, True), ("dense", (2, 257), 64, False, False)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_h0,with_dht", _KDA_GPU_CASES)
def test_kda_p2_matches_reference_and_default(layout, lens, D, with_h0, with_dht):
    _par.gpu_ready(WHAT)
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    torch.manual_seed(len(lens) * 1000 + D + 1)
    H = 4
    _, cu, lead, n = _par.case_extents(layout, lens)
    q, k, v, g, beta, do, h0, dht = _par.kda_inputs(lead, H, D, n, with_h0, with_dht)
    got, _, _, _ = _backward(KimiDeltaAttentionBwdSm90, 2, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _, _ = _backward(KimiDeltaAttentionBwdSm90, 0, q, k, v, g, beta, do, h0, dht, cu)
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("kda", got, base, inputs, cu, layout == "dense", "kda ", "parallel_pass2", "default backward")


@pytest.mark.gpu
def test_gdn_p2_matches_reference_and_default():
    """Varlen with 1-token, empty and multi-chunk sequences, both states, K = 128, GVA (4 value heads over 2 q/k heads)
    and the in-kernel L2 norm."""
    _par.gpu_ready(WHAT)
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    torch.manual_seed(17)
    lens, H, Hk, D = [1, 0, 700, 64, 130, 0], 4, 2, 128
    _, cu, lead, n = _par.case_extents("varlen", lens)
    q, k, v, g, beta, do, h0, dht = _par.gdn_inputs(lead, H, Hk, D, n, True, True)
    opts = dict(use_qk_l2norm_in_kernel=True)
    got, _, _, _ = _backward(GatedDeltaNetBwdSm90, 2, q, k, v, g, beta, do, h0, dht, cu, **opts)
    base, _, _, _ = _backward(GatedDeltaNetBwdSm90, 0, q, k, v, g, beta, do, h0, dht, cu, **opts)
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("gdn", got, base, inputs, cu, False, "gdn ", "parallel_pass2", "default backward", use_qk_l2norm=True)


@pytest.mark.gpu
def test_p2_execute_allocates_nothing_and_never_synchronizes():
    _par.gpu_ready(WHAT)
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    q, k, v, g, beta, do, h0, dht = _par.kda_inputs((2, 200), 2, 64, 2, False, False)  # the dense GPU case's plan: no new compile
    _, plan, ws, args = _backward(KimiDeltaAttentionBwdSm90, 2, q, k, v, g, beta, do, h0, dht, None)
    _par.assert_r9(plan, ws, args)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_p2_kdn_vector_stores_bitwise_the_element_stores(monkeypatch, family):
    """The precompute's ``kdn`` by 16-byte stores (``KDN_STORE_VEC``, session 10) against the session-9 2-byte element
    stores (``KDN_STORE_VEC = False``: that kernel's PTX is byte-identical to the one before the change): after a
    ``parallel_pass2`` backward, ``kdn`` is re-poisoned and the precompute re-run with the element-store kernel on the
    same arguments; the whole workspace must come back bitwise (same addresses written, same bits). The plans are the
    other GPU tests' (KDA varlen K = 128 with both states; GDN the same with GVA and the L2 norm)."""
    _par.gpu_ready(WHAT)
    import importlib

    import _bwd_cases

    api = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_api")
    prep_mod = importlib.import_module(f"cudnn.linear_attention.{family}.bwd_dstates_parallel_kernel")
    name = "KdaBwdDStatesPrep" if family == "kda" else "GdnBwdDStatesPrep"
    prep_cls = getattr(prep_mod, name)
    cls = api.KimiDeltaAttentionBwdSm90 if family == "kda" else api.GatedDeltaNetBwdSm90
    torch.manual_seed(23)
    lens, H, D = [1, 0, 700, 64, 130, 0], 4, 128
    T, n = sum(lens), len(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v, g, beta, do, h0, dht = _par.kda_inputs((T,), H, D, n, True, True)
    opts = {}
    if family == "gdn":  # the plan of test_gdn_p2_matches_reference_and_default (GVA, L2 norm): its compiles are reused
        q, k, g, opts = q[:, :2].contiguous(), k[:, :2].contiguous(), g[..., 0].contiguous() / 8, dict(use_qk_l2norm_in_kernel=True)
    dq, dk, dv, dg, dbeta, dh0 = (torch.empty_like(t) for t in (q, k, v, g, beta, h0))
    plan = cls(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu, **opts)
    plan.parallel_pass1 = plan.parallel_pass2 = True
    plan.compile()
    parts = api._parts(plan.compile_key())
    i = parts.index("dstates_prep")
    spy = _par.Spy(plan._compiled_kernel[i])
    plan._compiled_kernel = (*plan._compiled_kernel[:i], spy, *plan._compiled_kernel[i + 1 :])
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    ws.fill_(0xFF)
    plan.execute(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, h0, dh0, dht, cu, workspace=ws)

    class ElementStores(prep_cls):
        KDN_STORE_VEC = False

    monkeypatch.setattr(prep_mod, name, ElementStores)  # build_kernel imports the class at call time
    old = api.build_kernel("dstates_prep", plan._cache_key("dstates_prep", plan.compile_key()))()  # not through the cache
    torch.cuda.synchronize()
    args = dict(zip(_bwd_cases.declared(prep_cls), spy.args, strict=True))
    slots = n + T // 64 + 1
    off = int(args["kdn_ptr"]._pointer) - ws.data_ptr()
    kdn = ws[off : off + slots * H * 64 * D * 2]
    assert (kdn != 0xFF).any()  # the new kernel wrote kdn
    snap = ws.clone()
    kdn.fill_(0xFF)
    old(*spy.args)
    torch.cuda.synchronize()
    assert torch.equal(ws, snap), int((ws != snap).sum())
