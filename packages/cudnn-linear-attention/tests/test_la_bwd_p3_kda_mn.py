"""The KDA backward's pass 3 version 2 with MN-major operands (``KdaBwdKey.mn_operands``, ``plan.mn_operands``; the
default since session 29, ``kda/bwd_api.py::MN_OPERANDS_DEFAULT``, after the GPU A/B below): ``kda/chunk_bwd_v2_kernel.py`` reads
dVn^T, S0^T, dS1^T, Tm^T, dTm^T, dWm^T, ``(beta dA)^T``, dP~^T and the decay-split operands in place through MN-major
WGMMA descriptors of row-major tiles (GDN's session-11 option: ``test_la_bwd_p3_gdn.py``). Tiers:

- compile-only (``CUTE_DSL_ARCH=sm_90a``): with ``mn_operands`` the same 88 (K = 128) / 64 (K = 64) WGMMA behind the
  same 8 waits as v2, A read MN-major in 24 of them and B in 60 / 48, the transposed copies' 2-byte shared stores gone
  (K = 128: 1087 -> 192 in the PTX), 256 threads, named barriers, no local memory, zero ptxas frames, and where a ptxas
  is installed no C7520 WGMMA serialization and no spill;
- CPU: a pass-3-only compile-key field (the other passes' cache keys are the default plan's), refused without
  ``grads_v2`` (ValueError at ``compile_key``), left unset it follows ``MN_OPERANDS_DEFAULT`` where ``grads_v2`` holds,
  and a flip after ``compile()`` is refused at ``execute``;
- GPU A/B on one workspace: the plan with ``mn_operands = False`` (pass 3 v2 with the transposed copies) runs with its pass 3 wrapped so that, after v2 writes the plan's
  outputs, v2 with ``mn_operands`` runs on the SAME arguments into poisoned buffers of its own: dq, dk, dv bitwise equal
  (same products, operand values and accumulation order), dg, dbeta up to fp32 reassociation of the float atomics, all
  five by the FlashAttention rule against the fp32 reference; varlen K = 128 with both states and dense K = 64, hard
  gates; and one ``mn_operands`` plan end to end (varlen K = 128 with states) against the reference.

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_p3_kda_mn.py -s`` (GPU host: ``-m gpu``).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _p3_cases  # noqa: E402  (the shared pass-3 v2 test machinery, imported by folder)

WHAT = "cudnn.linear_attention.kimi_delta_attention backward (pass 3 v2, mn_operands)"


def _dsl():
    _p3_cases.dsl(WHAT)


def _key(D, varlen, states, mn):
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdKey

    return KdaBwdKey(head_dim=D, g_dtype="Float32", beta_dtype="Float32", varlen=varlen, has_initial=states, has_dfinal=states, grads_v2=True, mn_operands=mn)


def _b16_stores(text: str) -> int:
    return len(re.findall(r"st\.shared\.[bu]16\b", text))


# -- compile-only -----------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_p3_mn_compiles_k128_with_mn_major_operands(tmp_path):
    """K = 128 varlen with both states (``dp_split_hilo``): v2 and v2 with ``mn_operands``. The same 88 WGMMA behind 8
    waits; with the option A is MN-major in 24 k-steps (dUb 4, X 4, dKb 4, cols(dP~, Q) hi + lo 8, cols(beta dA, K) 4)
    and B in 60 (those, dWm 8, dO S0 8, B1's rows hi + lo 8, B2's rows 4, dkd 8); the 2-byte shared stores left are the
    accumulator epilogues' (dWm, dTm, X, dA, beta dA, dP~: 6 x 32 per thread)."""
    _dsl()
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import build_grads_v2

    text, names = _p3_cases.build_ptx(lambda: build_grads_v2(_key(128, True, True, False)), tmp_path / "v2")
    _p3_cases.check_v2_ptx(text, names, tmp_path / "v2", "KdaBwdGradsV2", n_wgmma=88, n_waits=8, wg_barrier=r"%r\d+")
    assert _p3_cases.wgmma_trans(text) == (0, 0)  # every operand K-major (the transposed copies)
    text_mn, names_mn = _p3_cases.build_ptx(lambda: build_grads_v2(_key(128, True, True, True)), tmp_path / "mn")
    _p3_cases.check_v2_ptx(text_mn, names_mn, tmp_path / "mn", "KdaBwdGradsV2", n_wgmma=88, n_waits=8, wg_barrier=r"%r\d+")
    assert _p3_cases.wgmma_trans(text_mn) == (24, 60)
    b16 = (_b16_stores(text), _b16_stores(text_mn))
    print(f"\nst.shared.b16 (K = 128): v2 {b16[0]}, mn_operands {b16[1]}")
    assert b16[1] <= 6 * 32 and b16[0] - b16[1] >= 800, b16


@pytest.mark.compile_only
def test_p3_mn_compiles_k64_dense(tmp_path):
    """K = 64 dense without states (one channel block: warpgroup 1 only loads): 64 WGMMA behind 8 waits, A MN-major in
    24 k-steps and B in 48, the same epilogue-only 2-byte shared stores."""
    _dsl()
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import build_grads_v2

    text, names = _p3_cases.build_ptx(lambda: build_grads_v2(_key(64, False, False, True)), tmp_path)
    _p3_cases.check_v2_ptx(text, names, tmp_path, "KdaBwdGradsV2", n_wgmma=64, n_waits=8, wg_barrier=r"%r\d+")
    assert _p3_cases.wgmma_trans(text) == (24, 48)
    assert _b16_stores(text) <= 6 * 32, _b16_stores(text)


# -- CPU --------------------------------------------------------------------------------------------------------------
def _desc_plan(D=128, T=1000, H=4, N=5):
    """A metadata-only plan (TensorDescs; no torch tensors, no GPU), varlen with both states."""
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    x = TensorDesc.contiguous((T, H, D), "bfloat16", "x")
    g = TensorDesc.contiguous((T, H, D), "float32", "g")
    beta = TensorDesc.contiguous((T, H), "float32", "beta")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    cu = TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens")
    return KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta, initial_state=st, dinitial_state=st, dfinal_state=st, cu_seqlens=cu)


def test_p3_mn_operands_key_and_refusal(monkeypatch):
    """CPU: ``plan.mn_operands`` is a pass-3-only compile-key field (every other pass's cache key is the default plan's),
    ``build_kernel("grads", key)`` builds v2 from it, unset it follows ``MN_OPERANDS_DEFAULT`` where ``grads_v2`` holds
    (True since session 29), and set without ``grads_v2`` it is refused (ValueError at ``compile_key``, never a silent v1)."""
    _dsl()
    from cudnn.linear_attention.kda import bwd_api, chunk_bwd_v2_kernel

    base, opt = _desc_plan(), _desc_plan()
    assert opt.mn_operands is True and bwd_api.MN_OPERANDS_DEFAULT is True  # the default since the session-29 GPU A/B
    base.mn_operands = False
    for p in (base, opt):
        p.check_support()
    kb, ko = base.compile_key(), opt.compile_key()
    assert ko.mn_operands and ko.grads_v2 and not kb.mn_operands and kb.grads_v2 and replace(ko, mn_operands=False) == kb
    parts = opt._parts(ko)
    assert parts == base._parts(kb) and parts[-1] == "grads"
    for part in parts:
        same = opt._cache_key(part, ko) == base._cache_key(part, kb)
        assert same == (part != "grads"), part
    seen = []
    monkeypatch.setattr(chunk_bwd_v2_kernel, "build_grads_v2", lambda key: seen.append(key) or "v2")
    assert bwd_api.build_kernel("grads", ko)() == "v2" and seen == [ko]

    on = _desc_plan()  # unset: follows grads_v2
    assert on.mn_operands is True
    on.grads_v2 = False
    assert on.mn_operands is False
    on.check_support()
    assert not on.compile_key().mn_operands
    monkeypatch.setattr(bwd_api, "MN_OPERANDS_DEFAULT", False)  # the default off: unset means off with grads_v2 too
    assert _desc_plan().mn_operands is False

    off = _desc_plan()
    off.grads_v2 = False
    off.mn_operands = True
    off.check_support()
    with pytest.raises(ValueError, match=r"mn_operands requires grads_v2"):
        off.compile_key()


def test_p3_mn_flip_after_compile_is_refused(monkeypatch):
    """CPU: ``mn_operands`` changed after ``compile()`` (the compiled pass 3 is another kernel) -> ValueError at
    ``execute``, before any launch."""
    _dsl()
    import _bwd_cases

    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90

    T, H, D = 130, 2, 64
    q = torch.randn(T, H, D).to(torch.bfloat16)
    g, beta = torch.randn(T, H, D), torch.rand(T, H)
    outs = [torch.empty_like(t) for t in (q, q, q, g, beta)]
    plan = KimiDeltaAttentionBwdSm90(q, q, q, g, beta, q, *outs)
    plan.parallel_pass1 = False  # the serial pass 1: no forward artifacts to stand in for
    plan.check_support()
    parts = plan._parts(plan.compile_key())
    plan._compiled_mn_operands = False  # as compile() records it
    plan.mn_operands = True
    with pytest.raises(ValueError, match=r"mn_operands was changed after compile"):
        _bwd_cases.run_recorded(monkeypatch, plan, parts, q, q, q, g, beta, q, *outs)
    assert all(not r.calls for r in plan._compiled_kernel)


# -- GPU ----------------------------------------------------------------------------------------------------------------
def _inputs(lead, H, D, n_seqs, with_states):
    """``test_la_bwd_p3._inputs`` under fla's safe-gate range (hard gates)."""
    from test_la_bwd_p3 import _inputs as p3_inputs

    return p3_inputs(lead, H, D, n_seqs, with_states, "hard")


def _ab_v2_mn(q, k, v, g, beta, do, h0, dht, cu):
    """``(v2 grads, v2-with-mn_operands grads)`` of one backward plan with ``mn_operands = False`` whose pass 3 is wrapped
    by ``_p3_cases.AB``: v2 writes the plan's outputs, v2 with ``mn_operands`` a second poisoned set from the same
    arguments (passes 1-2's workspace, same inputs)."""
    from cudnn.linear_attention.kda import bwd_api
    from cudnn_testing.data import poison

    inputs = (q, k, v, g, beta, do)
    o1, o2 = _p3_cases.poisoned_outs(*inputs[:5]), _p3_cases.poisoned_outs(*inputs[:5])
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = bwd_api.KimiDeltaAttentionBwdSm90(*inputs, *o1.values(), initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.mn_operands = False  # pass 3 v2 with the transposed copies (the default until session 29)
    plan.compile()
    key = plan.compile_key()
    assert key.grads_v2 and not key.mn_operands and key.dp_split_hilo and key.parallel_pass1  # the default plan but mn_operands
    mn = _p3_cases.v2_kernel(bwd_api, plan, replace(key, mn_operands=True))
    ab = _p3_cases.AB(plan._compiled_kernel[-1], mn, o2)
    plan._compiled_kernel = (*plan._compiled_kernel[:-1], ab)
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(*inputs, *o1.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    assert ab.calls == 1
    return o1, o2


_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True), ("dense", (2, 257), 64, False)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_states", _CASES, ids=["varlen-k128-states", "dense-k64"])
def test_p3_mn_matches_v2_and_reference(layout, lens, D, with_states):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(31 + D + len(lens))
    H = 4
    cu, lead, n = _p3_cases.case_extents(layout, lens)
    q, k, v, g, beta, do, h0, dht = _inputs(lead, H, D, n, with_states)
    v2, mn = _ab_v2_mn(q, k, v, g, beta, do, h0, dht, cu)
    batched = layout == "dense"
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = _p3_cases.ref_args((q, k, v, g, beta, do), batched)
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    # dq, dk, dv: same products, operand values and accumulation order: bitwise (but -0 / +0); dg, dbeta up to the
    # float-atomic order of their shared sums ("v1" in the report line is the default v2, "v2" the mn_operands kernel)
    report = _p3_cases.compare_v1_v2(v2, mn, ref, low, batched, layout, bitwise=lambda name: name in ("dq", "dk", "dv"))
    print(f"\n[kda p3 v2 vs v2-mn {layout} K={D}] " + report)


@pytest.mark.gpu
def test_p3_mn_plan_matches_reference():
    """``plan.mn_operands = True`` end to end (the adapter's launch switch): varlen K = 128 with 1-token, empty and ragged
    sequences and both states under hard gates, every gradient (d initial_state included) against the fp32 reference by
    the FlashAttention rule."""
    _dsl()
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(37)
    lens, H, D = [1, 0, 700, 64, 130, 0], 4, 128
    T = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, len(lens), True)
    got = _p3_cases.poisoned_outs(q, k, v, g, beta)
    dh0 = poison(torch.empty_like(h0))
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, *got.values(), initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.mn_operands = True
    plan.compile()
    assert plan.compile_key().mn_operands and plan.compile_key().grads_v2
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, *got.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    got["dh0"] = dh0
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = [t[None] for t in (q, k, v, g, beta, do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    _p3_cases.check_plan_against_reference(got, ref, low)
