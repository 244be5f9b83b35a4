"""The GDN backward's pass 3 version 2 (``gdn/chunk_bwd_v2_kernel.py``, ``GdnBwdGradsV2``: two warpgroups per CTA,
grouped WGMMA waits; ``plan.grads_v2``, the default where ``store_tm`` holds since session 11), in four tiers (the KDA counterpart: ``test_la_bwd_p3.py``):

- compile-only (``CUTE_DSL_ARCH=sm_90a``, one K = 128 build of each version, ~20 s on 2 cores): v2 at K = 128 varlen
  with both states and the L2 norm (the chain-rule code included): 92 WGMMA m64n64k16 (one copy of the per-block code
  for both warpgroups; v1: 136) behind 7 wait points (v1: 23), 256 threads, warpgroup-local and cross-warpgroup named
  barriers, no local memory, a zero ptxas frame, the cudnn symbol prefix (Rule 6); it is the default plan's pass 3, and
  the same plan with ``grads_v2`` off builds v1 (``GdnBwdGrads``: 128 threads, 136 WGMMA);
- CPU: ``grads_v2`` is a pass-3-only compile-key field, ``build_kernel("grads")`` dispatches on it, left unset it
  follows ``store_tm``, set with ``store_tm=False`` it is refused (ValueError at ``compile_key``, never a silent v1), a flip after ``compile()`` is refused at ``execute``;
  the GPU A/B's stand-in hands v2 the plan's arguments with only the five output pointers replaced;
- GPU A/B on one workspace: the default plan with ``grads_v2 = False`` runs with its pass 3 (v1) wrapped so that, after v1 writes the plan's outputs,
  v2 runs on the SAME arguments (passes 1-2's workspace, same inputs) into poisoned buffers of its own. v2's dq, dk, dv
  must match v1's (same products, operands and roundings: bitwise expected without the L2-norm chain rule; the report
  line says) and dg, dbeta up to fp32 reassociation, and meet the FlashAttention rule against the fp32 token-by-token
  reference; cases: varlen with 1-token, empty, ragged multi-chunk sequences at K = 128 with both states, and dense K = 64
  with the in-kernel L2 norm (the chain rule on one warpgroup; K = 128's cross-warpgroup row dots: the end-to-end
  L2-norm case);
- ``mn_operands`` (opt-in, session 11): compile-only -- the same WGMMA count and waits, 20 of them with B read
  MN-major, 224 fewer 2-byte shared stores per thread than v2; CPU -- key field, refusal without ``grads_v2``, flip
  after compile; GPU -- the A/B and an end-to-end case with it (written in session 11, not yet run on a GPU);
- GPU end to end: ``plan.grads_v2 = True`` through ``execute`` (varlen K = 128: with states; with the L2 norm, its
  chain rule across the two warpgroups; GVA with the L2 norm), every gradient against the fp32 reference by the
  FlashAttention rule;
- GPU timing (prints only): per-kernel device times of the whole GDN backward at one sequence of T 8k, H 16, K = V =
  128 with both states (the A/B case's compile key) with v1 and with v2 as pass 3 (the benchmark's configuration, dense
  with the in-kernel L2 norm: ``benchmarks/linear_attention_bwd.py gdn --profile --providers ours,ours-v1``).

Shared machinery (PTX checks, the A/B stand-in, comparisons, timing): ``_p3_cases.py``.

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_p3_gdn.py -s``.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _p3_cases  # noqa: E402  (the shared pass-3 v2 test machinery, imported by folder)

WHAT = "cudnn.linear_attention.gated_delta_net backward (pass 3 v2)"


def _dsl():
    _p3_cases.dsl(WHAT)


def _desc_plan(D=128, T=1000, H=4, N=5, l2norm=False, states=True, varlen=True, qk_heads=None):
    """A metadata-only plan (TensorDescs; no torch tensors, no GPU)."""
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    xk = TensorDesc.contiguous((T, qk_heads or H, D), "bfloat16", "xk")
    gate = TensorDesc.contiguous((T, H), "float32", "gate")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state") if states else None
    cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens") if varlen else None
    return GatedDeltaNetBwdSm90(
        xk, xk, x, gate, gate, x, xk, xk, x, gate, gate,
        use_qk_l2norm_in_kernel=l2norm, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu,
    )  # fmt: skip


# -- compile-only -----------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_p3_v2_compiles_with_wgmma_two_warpgroups_and_no_local_memory(tmp_path):
    _dsl()
    from dataclasses import replace

    from cudnn.linear_attention.gdn import bwd_api

    plan = _desc_plan(l2norm=True)
    plan.grads_v2, plan.mn_operands = True, False  # v2 with the transposed copies (mn_operands below)
    plan.check_support()
    key = plan.compile_key()
    assert key.grads_v2 and not key.mn_operands and key.l2norm and key.store_tm and key.varlen and key.has_initial
    v2dir = tmp_path / "v2"
    text, names = _p3_cases.build_ptx(bwd_api.build_kernel("grads", key), v2dir)
    # one copy of the per-block code for both warpgroups (block index a runtime value): phase A dWm 8 + dUb 4, dTm 8 + 8,
    # X 4, X Tm^T 4 + K K^T 8; B1 dO S0 8 + dO Vn^T 8 + Q K^T 8, dP~ K 4; B2 dP~^T Q 4 + (B + B^T) K 4 + Vn dS1 8 +
    # Tm^T dWm 4 = 92 (v1: 136, its two 64-channel blocks unrolled)
    # grouped waits: dWm + dUb, dTm's two, X, X Tm^T + K K^T, B1's three, dP~ K, B2's four = 7 (v1: 23)
    _p3_cases.check_v2_ptx(text, names, v2dir, "GdnBwdGradsV2", n_wgmma=92, n_waits=7, wg_barrier=r"(%r\d+|1)")
    assert "shfl.sync.bfly" in text  # shuffle row / column sums and the L2 row norm

    assert _p3_cases.wgmma_trans(text) == (0, 0)  # every operand K-major (the transposed copies)

    # mn_operands: K^T, Q^T, dVn^T, dWm^T, S0^T, dS1^T, Tm^T, dP~^T read in place as MN-major operands and dTm stored
    # as it is -- the same 92 WGMMA behind 7 waits; B MN-major in 48 of them (-dVn S0 8, dUb 4, dP~ K 4, dO S0 8, X 4,
    # dP~^T Q 4, (B + B^T) K 4, Vn dS1 8, Tm^T dWm 4 k-steps), A as well in 16 (dUb, X, dP~^T Q, Tm^T dWm); the
    # transposed copies' 2-byte shared stores gone
    mn = replace(key, mn_operands=True)
    mndir = tmp_path / "mn"
    text_mn, names_mn = _p3_cases.build_ptx(bwd_api.build_kernel("grads", mn), mndir)
    _p3_cases.check_v2_ptx(text_mn, names_mn, mndir, "GdnBwdGradsV2", n_wgmma=92, n_waits=7, wg_barrier=r"(%r\d+|1)")
    assert _p3_cases.wgmma_trans(text_mn) == (16, 48)
    b16 = (text.count("st.shared.b16"), text_mn.count("st.shared.b16"))
    print(f"\nst.shared.b16: v2 {b16[0]}, mn_operands {b16[1]}")
    assert b16[0] - b16[1] >= 400, b16

    # v2 with mn_operands is the default (store_tm holds); the same plan with grads_v2 off builds pass 3 version 1, one
    # warpgroup, its products unrolled
    assert _desc_plan(l2norm=True).compile_key() == mn
    v1_key = replace(key, grads_v2=False)
    text1, names1 = _p3_cases.build_ptx(bwd_api.build_kernel("grads", v1_key), tmp_path / "v1")
    assert len(names1) == 1 and "GdnBwdGrads_" in names1[0] and "V2" not in names1[0], names1
    assert ".reqntid 128, 1, 1" in text1
    assert text1.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 136


# -- CPU --------------------------------------------------------------------------------------------------------------
def test_p3_grads_v2_is_a_pass3_key_field(monkeypatch):
    """CPU: ``plan.grads_v2 = True`` changes the compile key, but only pass 3's cache key (passes 1-2 share the default
    plan's artifacts), and ``build_kernel("grads", key)`` dispatches to ``chunk_bwd_v2_kernel.build_grads_v2``."""
    _dsl()
    from cudnn.linear_attention.gdn import bwd_api, chunk_bwd_v2_kernel

    def plan(v2):
        p = _desc_plan(l2norm=True, states=False, varlen=False, N=1)
        assert p.grads_v2 is True  # the default where store_tm holds
        p.grads_v2, p.mn_operands = v2, False  # the two keys differ in grads_v2 only
        p.check_support()
        return p

    _p3_cases.check_grads_v2_is_a_pass3_key_field(monkeypatch, bwd_api, chunk_bwd_v2_kernel, plan(False), plan(True))


def test_p3_grads_v2_refusals():
    """CPU: ``grads_v2`` set with ``store_tm=False`` is refused at ``compile_key`` (ValueError naming both), never a
    silent v1; left unset it follows ``store_tm`` (version 1 there); GVA and the L2 norm are accepted (v2 implements
    them)."""
    _dsl()
    p = _desc_plan()
    p.store_tm = False
    p.check_support()
    assert p.grads_v2 is False and not p.compile_key().grads_v2  # unset: follows store_tm
    p.grads_v2 = True
    with pytest.raises(ValueError, match=r"grads_v2 requires store_tm"):
        p.compile_key()
    for kw in (dict(l2norm=True), dict(qk_heads=2), dict(qk_heads=2, l2norm=True), dict(D=64)):
        ok = _desc_plan(**kw)
        ok.grads_v2 = True
        ok.check_support()
        assert ok.compile_key().grads_v2, kw


def test_p3_mn_operands_key_and_refusal():
    """CPU: ``plan.mn_operands`` (default where ``grads_v2`` holds, session 12) is a pass-3-only compile-key field
    (passes 1-2 and 4 share the artifacts of the plan without it), follows ``grads_v2`` when unset and is refused without it
    when set (ValueError at ``compile_key``); its flip after ``compile()``: ``test_p3_flip_after_compile_is_refused``."""
    _dsl()
    base, opt = _desc_plan(), _desc_plan()
    assert opt.mn_operands is True  # the default with grads_v2
    base.mn_operands = False
    for p in (base, opt):
        p.check_support()
    kb, ko = base.compile_key(), opt.compile_key()
    assert ko.mn_operands and ko.grads_v2 and not kb.mn_operands and kb.grads_v2
    for part in opt._parts(ko):
        same = opt._cache_key(part, ko) == base._cache_key(part, kb)
        assert same == (part != "grads"), part
    off = _desc_plan()
    off.grads_v2 = False
    assert off.mn_operands is False  # unset: follows grads_v2
    off.check_support()
    assert not off.compile_key().mn_operands
    off.mn_operands = True
    with pytest.raises(ValueError, match=r"mn_operands requires grads_v2"):
        off.compile_key()


def _cpu_plan(T=130, H=2, D=64):
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    q = torch.randn(T, H, D).to(torch.bfloat16)
    g, beta = torch.randn(T, H), torch.rand(T, H)
    outs = [torch.empty_like(t) for t in (q, q, q, g, beta)]
    plan = GatedDeltaNetBwdSm90(q, q, q, g, beta, q, *outs)
    plan.parallel_pass1 = False  # the serial pass 1: no forward artifacts to stand in for
    plan.check_support()
    return plan, q, g, beta, outs


def test_p3_ab_wrapper_swaps_only_the_outputs(monkeypatch):
    """CPU (recorders, no GPU): the A/B stand-in of the GPU test calls v1 with the plan's arguments and v2 with the same
    arguments except dq, dk, dv, dg, dbeta, which point at its own buffers; v1 and v2 declare the same ``__call__``."""
    _dsl()
    from cudnn.linear_attention.gdn.chunk_bwd_kernel import GdnBwdGrads
    from cudnn.linear_attention.gdn.chunk_bwd_v2_kernel import GdnBwdGradsV2

    plan, q, g, beta, outs = _cpu_plan()
    _p3_cases.check_ab_swaps_only_the_outputs(monkeypatch, plan, q, g, beta, outs, GdnBwdGrads, GdnBwdGradsV2)


@pytest.mark.parametrize("knob", ["grads_v2", "mn_operands"])
def test_p3_flip_after_compile_is_refused(monkeypatch, knob):
    """CPU: ``grads_v2`` / ``mn_operands`` changed after ``compile()`` (the compiled pass 3 is another kernel) ->
    ValueError at ``execute``, before any launch."""
    _dsl()
    import _bwd_cases

    plan, q, g, beta, outs = _cpu_plan()
    parts = plan._parts(plan.compile_key())
    setattr(plan, f"_compiled_{knob}", False)  # as compile() records it
    setattr(plan, knob, True)
    with pytest.raises(ValueError, match=rf"{knob} was changed after compile"):
        _bwd_cases.run_recorded(monkeypatch, plan, parts, q, q, q, g, beta, q, *outs)
    assert all(not r.calls for r in plan._compiled_kernel)


# -- GPU ----------------------------------------------------------------------------------------------------------------
def _inputs(lead, H, D, n_seqs, with_states, l2norm, qk_heads=None):
    """``test_gdn_bwd_gpu.make_inputs`` (contractive: unit-norm k unless the kernel normalises, g = logsigmoid(N(0, 1)) / 8)."""
    from test_gdn_bwd_gpu import make_inputs

    return make_inputs(lead, H, D, n_seqs, with_states, with_states, l2norm=l2norm, qk_heads=qk_heads)


def _v2(plan, key):
    from cudnn.linear_attention.gdn import bwd_api

    return _p3_cases.v2_kernel(bwd_api, plan, key)


def _plan(q, k, v, g, beta, do, outs, h0, dh0, dht, cu, l2norm):
    from cudnn.linear_attention.gdn.bwd_api import GatedDeltaNetBwdSm90

    return GatedDeltaNetBwdSm90(
        q, k, v, g, beta, do, *outs.values(), use_qk_l2norm_in_kernel=l2norm, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu
    )


def _ab_backward(q, k, v, g, beta, do, h0, dht, cu, l2norm, mn=False):
    """``(v1 grads, v2 grads)`` of one default-plan backward whose pass 3 is ``_p3_cases.AB`` (``mn``: v2 with
    ``mn_operands``)."""
    from cudnn.linear_attention.gdn import bwd_api

    def make_plan(outs, dh0):
        return _plan(q, k, v, g, beta, do, outs, h0, dh0, dht, cu, l2norm)

    key, o1, o2 = _p3_cases.ab_backward(bwd_api, make_plan, (q, k, v, g, beta, do), h0, dht, cu, mn_operands=mn)
    assert not key.grads_v2 and key.store_tm and not key.gva  # the default plan with pass 3 v1 (ab_backward sets it)
    return o1, o2


_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True, False), ("dense", (2, 257), 64, False, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("mn", [False, True], ids=["v2", "v2-mn"])
@pytest.mark.parametrize("layout,lens,D,with_states,l2norm", _CASES, ids=["varlen-k128-states", "dense-k64-l2norm"])
def test_p3_v2_matches_v1_and_reference(layout, lens, D, with_states, l2norm, mn):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(17 + D + len(lens))
    H = 4
    cu, lead, n = _p3_cases.case_extents(layout, lens)
    q, k, v, g, beta, do, h0, dht = _inputs(lead, H, D, n, with_states, l2norm)
    v1, v2 = _ab_backward(q, k, v, g, beta, do, h0, dht, cu, l2norm, mn)
    batched = layout == "dense"
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm=l2norm)
    refargs = _p3_cases.ref_args((q, k, v, g, beta, do), batched)
    ref = gated_delta_net_recurrent_bwd_ref(*refargs, **kw)
    low = gated_delta_net_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    # dv (and dq, dk without the L2 norm): same products, operands, roundings: bitwise (but -0 / +0); the rest up to fp32
    # reassociation of the row / column sums (dg, dbeta) and of the chain rule's row dots (dq, dk)
    report = _p3_cases.compare_v1_v2(v1, v2, ref, low, batched, layout, bitwise=lambda name: name == "dv" or (name in ("dq", "dk") and not l2norm))
    print(f"\n[gdn p3 v2 {layout} K={D} l2norm={l2norm} mn_operands={mn}] " + report)


_E2E = [(128, True, False, None, False), (128, False, True, None, False), (128, False, True, 2, False), (128, True, True, 2, True)]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "D,with_states,l2norm,qk_heads,mn", _E2E, ids=["varlen-k128-states", "varlen-k128-l2norm", "varlen-k128-gva-l2norm", "varlen-k128-states-gva-l2norm-mn"]
)
def test_p3_grads_v2_plan_matches_reference(D, with_states, l2norm, qk_heads, mn):
    """``plan.grads_v2 = True`` end to end (the adapter's launch switch): varlen with 1-token, empty and ragged sequences,
    every gradient (d initial_state included) against the fp32 reference by the FlashAttention rule; the L2-norm case
    runs the chain rule in v2 (the two warpgroups' row dots meeting in shared memory), the GVA case pass 4 (the fp32
    per-value-head partials' sum and the L2-norm chain rule there); the last case with ``mn_operands`` (states, GVA and
    the L2 norm at once)."""
    _dsl()
    from cudnn_testing.data import poison
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_bwd_ref, gated_delta_net_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(29 + (qk_heads or 0))
    lens, H = [1, 0, 700, 64, 130, 0], 4
    T = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, len(lens), with_states, l2norm, qk_heads)
    got = _p3_cases.poisoned_outs(q, k, v, g, beta)
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = _plan(q, k, v, g, beta, do, got, h0, dh0, dht, cu, l2norm)
    plan.grads_v2 = True
    plan.mn_operands = mn
    plan.compile()
    key = plan.compile_key()
    assert key.grads_v2 and key.gva == (qk_heads is not None) and key.mn_operands == mn
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, *got.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    if dh0 is not None:
        got["dh0"] = dh0
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu, use_qk_l2norm=l2norm)
    refargs = [t[None] for t in (q, k, v, g, beta, do)]
    ref = gated_delta_net_recurrent_bwd_ref(*refargs, **kw)
    low = gated_delta_net_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    _p3_cases.check_plan_against_reference(got, ref, low)


@pytest.mark.gpu
def test_p3_v2_timing_t8k_h16():
    """Per-kernel device times (torch profiler, 10 calls) of the whole GDN backward at one sequence of T 8k, H 16,
    K = V = 128 (varlen with both states: the K = 128 A/B case's compile key, so its artifacts are reused), the default
    schedule, with v1 and with v2 as pass 3. Prints; asserts only that both ran. (The benchmark's configuration -- dense,
    in-kernel L2 norm, no states -- is ``benchmarks/linear_attention_bwd.py gdn --profile --providers ours,ours-v1``.)"""
    _dsl()

    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    torch.manual_seed(0)
    T, H, D = 8192, 16, 128
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, 1, True, False)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    dh0 = torch.empty_like(h0)
    outs = {n: torch.empty_like(t) for n, t in (("dq", q), ("dk", k), ("dv", v), ("dg", g), ("dbeta", beta))}
    plan = _plan(q, k, v, g, beta, do, outs, h0, dh0, dht, cu, False)
    plan.grads_v2 = False  # pass 3 version 1 in the plan (v2 is the default): the A/B's baseline
    plan.compile()
    v2 = _v2(plan, plan.compile_key())
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")

    def run():
        plan.execute(q, k, v, g, beta, do, *outs.values(), h0, dh0, dht, cu, workspace=ws)

    res = _p3_cases.time_v1_v2(plan, v2, run, f"GDN backward T{T} H{H} K{D} (varlen N=1, states)")
    assert res["v1"] > 0 and res["v2"] > 0
