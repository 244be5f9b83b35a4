"""The Kimi Delta Attention backward's chunk-parallel pass 1 (``plan.parallel_pass1 = True``, on by default since
session 10 and here set over ``_bwd_par_cases.SCHEDULE_BASE``, the serial schedule: the forward's chunk-parallel prep + state pass, then ``kda/bwd_states_parallel_kernel.py::KdaBwdStatesChunk``) in three tiers:

- CPU (no marker; torch + the DSL, no GPU): with every compiled kernel replaced by a recorder, ``execute`` launches the
  forward prep, the forward state pass, the chunk-parallel pass 1, pass 2 and pass 3 in that order, each with exactly
  the arguments its kernel's ``__call__`` declares; the forward's arrays lie in a workspace tail past the backward's
  (R2), pass 1 reads the forward's ``h`` array, passes 2-3 of an opt-in plan are cached under the default key (no
  second compile), and the default plan is unchanged (its parts, its workspace size). The Gated DeltaNet adapter
  raises ValueError for the option instead of ignoring it.
- compile-only (CPU, ``CUTE_DSL_ARCH=sm_90a``, ~5 s): the new kernel builds at K = 128 varlen with 36 WGMMA m64n64k16
  (A, P 8 + 8; U 4, Wm 8, Vn 8 in the runtime V-slice loop), no local memory, a zero ptxas frame, the cudnn symbol
  prefix (Rule 6), and its compile key is independent of the token total and sequence count (Rule 4).
- GPU (``@pytest.mark.gpu``): the opt-in's dq, dk, dv, dg, dbeta and d initial state against the fp32 token-by-token
  autograd reference within the FlashAttention rule (bound: twice the bf16 chunked reference's error), and against the
  default backward (bound: twice the default's error), on varlen batches with a 1-token, an empty and long sequences,
  with initial state and final-state gradient at K = 128, and a dense [B, L] batch at K = 64 without states; plus the R9
  check (no sync, no allocation across warm executes) of the opt-in path.

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_parallel_gpu.py`` (GPU host: about 60-90 s,
most of it the first compiles).
"""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_bwd_cases.py: --import-mode=importlib adds no test folder
import _bwd_par_cases as _par  # noqa: E402
from _bwd_cases import check_launch, declared, run_recorded  # noqa: E402

WHAT = "cudnn.linear_attention.kimi_delta_attention backward"


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", WHAT)
    pytest.importorskip("cutlass")


# -- CPU: the launches of the opt-in ------------------------------------------------------------------------------------
def _check_forward_launches(plan, ws, base_bytes, *, T, n, varlen, seq_len, D, with_h0, g):
    """The forward's prep and state-pass launches of an opt-in plan against their kernels' declared ``__call__``:
    extents, every forward array in the workspace tail, the same ``h`` for both; returns ``(extents, state args)``."""
    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS, ChunkParallelPrepLaunch
    from cudnn.linear_attention._host.chunk_parallel import parallel_extents
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

    fext = parallel_extents(T, n, seq_len, varlen)
    lo, hi = ws.data_ptr() + base_bytes, ws.data_ptr() + ws.numel()
    prep, fstate = plan._compiled_forward
    prep_args = dict(zip(declared(ChunkParallelPrepLaunch), prep.calls[0], strict=True))
    state_cls = KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=with_h0, has_final=False))
    state_args = dict(zip(declared(state_cls), fstate.calls[0], strict=True))
    for by in (prep_args, state_args):
        assert by["stream"] == "stream" and by["slots"] == fext.slots and by["chunks_per_seq"] == fext.chunks_per_seq and by["n_seqs"] == n
        for name in WS_ARRAYS:  # every forward array lies in the tail past the backward's own arrays
            assert lo <= int(by[name + "_ptr"]._pointer) < hi, name
    assert (state_args["h0_ptr"] is None) == (not with_h0) and state_args["ht_ptr"] is None
    assert int(prep_args["h_ptr"]._pointer) == int(state_args["h_ptr"]._pointer)
    assert prep_args["g_ptr"].dtype.__name__ == "Float32" and int(prep_args["g_ptr"]._pointer) == g.data_ptr()
    assert prep_args["qk_heads"] == plan.q.shape[-2] and prep_args["heads"] == plan.v.shape[-2]
    return fext, state_args


@pytest.mark.parametrize("varlen,with_h0,with_dht", [(True, True, True), (False, False, False)])
def test_parallel_pass1_launches_forward_then_backward_with_declared_arguments(monkeypatch, varlen, with_h0, with_dht):
    from cudnn.linear_attention._device.chunk_parallel import WS_ARRAYS
    from cudnn.linear_attention.kda import bwd_api
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdDStates
    from cudnn.linear_attention.kda.bwd_states_parallel_kernel import KdaBwdStatesChunk
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads

    assert WS_ARRAYS.index("h") == bwd_api.FWD_H
    T, H, D = 200, 4, 64
    n = 4 if varlen else 2
    make, eargs = _par.cpu_plan("kda", T, H, D, n, varlen, with_h0, with_dht)
    g, dq, dg, dh0 = eargs[3], eargs[6], eargs[9], eargs[12]
    default, plan = make(), make(parallel_pass1=True)  # ``default``: the serial schedule (SCHEDULE_BASE)
    key = plan.compile_key()
    assert key.parallel_pass1 and not default.compile_key().parallel_pass1
    assert bwd_api._parts(default.compile_key()) == ("states", "dstates", "grads")  # the serial plan is unchanged
    parts = bwd_api._parts(key)
    assert parts == ("states_par", "dstates", "grads")
    assert plan._cache_key("dstates", key) == default.compile_key() == plan._cache_key("grads", key)
    base_bytes = bwd_api.workspace_bytes(T, n, H, D)
    assert default.scratch_workspace_bytes() == base_bytes
    assert plan.scratch_workspace_bytes() == base_bytes + bwd_api.forward_workspace_bytes(T, n, H, D)

    _par.record_forward_in_order(monkeypatch, plan)  # run_recorded's backward recorders log too
    out, ws = run_recorded(monkeypatch, plan, parts, *eargs)
    assert out[0] is dq and out[3] is dg and out[5] is dh0
    assert _par.Ordered.log == ["prep", "fstate", "states_par", "dstates", "grads"]
    plan.parallel_pass1 = False  # flipped after compile: execute refuses rather than launching another plan's kernels
    with pytest.raises(ValueError, match="parallel_pass1 was changed after compile"):
        plan.execute(*eargs, workspace=ws)
    plan.parallel_pass1 = True

    seq_len = 0 if varlen else T // 2
    fext, state_args = _check_forward_launches(plan, ws, base_bytes, T=T, n=n, varlen=varlen, seq_len=seq_len, D=D, with_h0=with_h0, g=g)

    classes = {"states_par": KdaBwdStatesChunk, "dstates": KdaBwdDStates, "grads": KdaBwdGrads}
    seen = {}
    for rec in plan._compiled_kernel:
        by = check_launch(rec, classes[rec.name], ws, T=T, n=n, H=H, Hk=H, varlen=varlen, seq_len=seq_len, with_h0=with_h0, with_dht=with_dht)
        for name in ("wstm_ptr", "wsp_ptr", "wsh_ptr", "wsdh_ptr", "wsvn_ptr", "wsdvn_ptr"):
            if name in by:
                assert int(by[name]._pointer) < ws.data_ptr() + base_bytes, (rec.name, name)  # the backward's arrays stay before the tail
                seen.setdefault(name, int(by[name]._pointer))
                assert seen[name] == int(by[name]._pointer), (rec.name, name)
        if rec.name == "states_par":
            assert int(by["fh_ptr"]._pointer) == int(state_args["h_ptr"]._pointer)  # pass 1 reads the forward's h
            assert by["fslots"] == fext.slots and by["chunks_per_seq"] == fext.chunks_per_seq
    assert len(set(seen.values())) == len(seen) == 6


@pytest.mark.parametrize("gva,varlen,with_h0,with_dht,store_tm", [(False, True, True, True, True), (True, False, False, False, False)])
def test_gdn_parallel_pass1_launches_forward_then_backward_with_declared_arguments(monkeypatch, gva, varlen, with_h0, with_dht, store_tm):

    from cudnn.linear_attention.gdn import bwd_api
    from cudnn.linear_attention.gdn.bwd_qk_reduce_kernel import GdnBwdQkReduce
    from cudnn.linear_attention.gdn.bwd_states_kernel import GdnBwdDStates
    from cudnn.linear_attention.gdn.bwd_states_parallel_kernel import GdnBwdStatesChunk
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads

    T, H, D = 200, 4, 64
    Hk = 2 if gva else H
    n = 4 if varlen else 2
    make, eargs = _par.cpu_plan("gdn", T, H, D, n, varlen, with_h0, with_dht, gva=gva)
    g, dq, dh0 = eargs[3], eargs[6], eargs[12]
    default, plan = make(store_tm), make(store_tm, parallel_pass1=True)
    key = plan.compile_key()
    tail = ("qk_reduce",) if gva else ()
    assert bwd_api._parts(default.compile_key()) == ("states", "dstates", "grads", *tail)
    parts = bwd_api._parts(key)
    assert parts == ("states_par", "dstates", "grads", *tail)
    assert all(plan._cache_key(p, key) == default.compile_key() for p in parts[1:])
    base_bytes = default.scratch_workspace_bytes()
    assert plan.scratch_workspace_bytes() == base_bytes + bwd_api.forward_workspace_bytes(T, n, H, D)

    _par.record_forward_in_order(monkeypatch, plan)
    out, ws = run_recorded(monkeypatch, plan, parts, *eargs)
    assert out[0] is dq and out[5] is dh0
    assert _par.Ordered.log == ["prep", "fstate", *parts]
    seq_len = 0 if varlen else T // 2
    fext, state_args = _check_forward_launches(plan, ws, base_bytes, T=T, n=n, varlen=varlen, seq_len=seq_len, D=D, with_h0=with_h0, g=g)
    classes = {"states_par": GdnBwdStatesChunk, "dstates": GdnBwdDStates, "grads": GdnBwdGrads, "qk_reduce": GdnBwdQkReduce}
    tm = set()
    for rec in plan._compiled_kernel:
        by = check_launch(rec, classes[rec.name], ws, T=T, n=n, H=H, Hk=Hk, varlen=varlen, seq_len=seq_len, with_h0=with_h0, with_dht=with_dht)
        if "wstm_ptr" in by:
            assert (by["wstm_ptr"] is None) == (not store_tm), rec.name
            tm.add(None if by["wstm_ptr"] is None else int(by["wstm_ptr"]._pointer))
        if rec.name == "states_par":
            assert int(by["fh_ptr"]._pointer) == int(state_args["h_ptr"]._pointer)  # pass 1 reads the forward's h
            assert by["fslots"] == fext.slots and by["chunks_per_seq"] == fext.chunks_per_seq
            assert int(by["wsh_ptr"]._pointer) < ws.data_ptr() + base_bytes
    assert len(tm) == 1  # passes 1-3 share one Tm array (or none)


# -- compile-only -----------------------------------------------------------------------------------------------------
#: WGMMA m64n64k16 in the PTX at K = V = 128 (the V-slice loop is a runtime loop: one copy): KDA A, P 8 + 8, U 4,
#: Wm 8, Vn 8; GDN K K^T 8, U 4, Wm 8, Vn 8.
_WGMMA_128 = {"kda": 36, "gdn": 28}


@pytest.mark.compile_only
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_parallel_pass1_kernel_compiles_with_wgmma_and_no_local_memory(tmp_path, family):
    key, text = _par.compile_part(tmp_path, family, "states_par", parallel_pass1=True)
    assert key.parallel_pass1 and key.varlen and key.head_dim == 128
    _par.assert_one_kernel(text, "KdaBwdStatesChunk" if family == "kda" else "GdnBwdStatesChunk")
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == _WGMMA_128[family]
    assert "ld.global.v4" in text and "st.global.v4" in text  # the S0 copy by 16-byte vectors
    _par.assert_no_local_memory(text, tmp_path)


# -- GPU ----------------------------------------------------------------------------------------------------------------
def _backward(parallel, q, k, v, g, beta, do, h0, dht, cu):
    """(grads dict, plan, workspace, tensors) of one backward with poisoned outputs. ``dp_split_hilo``: pass 3's dP~
    products with hi + lo split operands (opt-in, test_kda_bwd_gpu.py::test_hard_gate_*): without them dg misses the
    rule on the dense K = 64 case for the default pass 1 and the parallel one alike (session 8's probe)."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    options = dict(parallel_pass1=parallel, dp_split_hilo=True)
    return _par.backward(KimiDeltaAttentionBwdSm90, q, k, v, g, beta, do, h0, dht, cu, options=options)


_GPU_CASES = [
    # (sequence lengths / dense lead, D, initial state, final-state gradient): pruned to two so the GPU run stays near a
    # minute (every case compiles the default plan, the forward's three kernels and the new one): together they cover
    # what the opt-in's host and kernel paths split on -- the varlen / dense slot conventions (dense: the backward's
    # slots differ from the forward's), K = 128 / 64 (two / one V slices in the loop), initial state in / out (the
    # forward state pass's h0), and 1-token, empty (also last) and multi-chunk sequences.
    ("varlen", [1, 0, 700, 64, 130, 0], 128, True, True),
    ("dense", (2, 257), 64, False, False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_h0,with_dht", _GPU_CASES)
def test_parallel_pass1_matches_reference_and_default(layout, lens, D, with_h0, with_dht):
    _par.gpu_ready()
    torch.manual_seed(len(lens) * 1000 + D)
    H = 4
    _, cu, lead, n = _par.case_extents(layout, lens)
    q, k, v, g, beta, do, h0, dht = _par.kda_inputs(lead, H, D, n, with_h0, with_dht)
    got, _, _, _ = _backward(True, q, k, v, g, beta, do, h0, dht, cu)
    base, _, _, _ = _backward(False, q, k, v, g, beta, do, h0, dht, cu)
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("kda", got, base, inputs, cu, layout == "dense", "", "parallel_pass1", "default backward")


@pytest.mark.gpu
def test_gdn_parallel_pass1_matches_reference_and_default():
    """Gated DeltaNet: varlen with 1-token, empty and multi-chunk sequences, both states, K = 128, GVA (4 value heads
    over 2 q/k heads) and the in-kernel L2 norm: the forward prep's GVA / norm paths feed pass 1 here."""
    _par.gpu_ready()
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    torch.manual_seed(7)
    lens, H, Hk, D = [1, 0, 700, 64, 130, 0], 4, 2, 128
    _, cu, lead, n = _par.case_extents("varlen", lens)
    q, k, v, g, beta, do, h0, dht = _par.gdn_inputs(lead, H, Hk, D, n, True, True)
    got = {}
    for parallel in (True, False):
        got[parallel], _, _, _ = _par.backward(
            GatedDeltaNetBwdSm90, q, k, v, g, beta, do, h0, dht, cu, options=dict(parallel_pass1=parallel), use_qk_l2norm_in_kernel=True
        )
    inputs = (q, k, v, g, beta, do, h0, dht)
    _par.check_grads("gdn", got[True], got[False], inputs, cu, False, "gdn ", "parallel_pass1", "default backward", use_qk_l2norm=True)


@pytest.mark.gpu
def test_parallel_pass1_execute_allocates_nothing_and_never_synchronizes():
    _par.gpu_ready()
    q, k, v, g, beta, do, h0, dht = _par.kda_inputs((2, 200), 2, 64, 2, False, False)  # the second GPU case's plan: no new compile
    _, plan, ws, args = _backward(True, q, k, v, g, beta, do, h0, dht, None)
    _par.assert_r9(plan, ws, args)
