"""The KDA backward's pass 3 version 2 (``kda/chunk_bwd_v2_kernel.py``, ``KdaBwdGradsV2``: two warpgroups per CTA,
grouped WGMMA waits; opt-in), in four tiers:

- compile-only (``CUTE_DSL_ARCH=sm_90a``): v2 builds at K = 128 varlen with both states and ``dp_split_hilo``: 88
  WGMMA m64n64k16 in the PTX (one copy of the per-channel-block code for both warpgroups; v1 unrolls both blocks, 144)
  behind 8 wait points (v1: 23), 256 threads, warpgroup-local named barriers, no local memory, a zero ptxas frame, the
  cudnn symbol prefix (Rule 6);
- CPU (recorders): the GPU A/B's stand-in pass 3 hands v2 the plan's arguments with only the five output pointers
  replaced (v1 and v2 declare the same ``__call__``);
- GPU A/B on one workspace: a plan with the chunk-parallel pass 1 (and the default ``dp_split_hilo``) runs with its pass 3 wrapped so
  that, after v1 writes the plan's outputs, v2 runs on the SAME arguments (passes 1-2's workspace, same inputs) into
  poisoned buffers of its own. v2's dq, dk, dv, dg, dbeta must match v1's (same products, operands and roundings; only
  the float-atomic order of the dbeta / dg sums differs) and meet the FlashAttention rule against the fp32
  token-by-token reference (bound: twice the bf16 chunked reference's error, and twice v1's); cases: varlen with
  1-token, empty, ragged multi-chunk sequences at K = 128 with both states, and dense K = 64 without states, both
  under fla's safe-gate range g = -5 sigmoid(N(0, 1)) (hard gates);
- GPU timing (prints only): per-kernel device times (torch profiler) of the whole KDA backward (chunk-parallel passes 1
  and 2) at one sequence of T 8k, H 16, K = V = 128 with v1 and with v2 as pass 3.

Shared machinery (PTX checks, the A/B stand-in, comparisons, timing): ``_p3_cases.py``.

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_p3.py -s`` (GPU host: ``-k p3``).
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _p3_cases  # noqa: E402  (the shared pass-3 v2 test machinery, imported by folder)

WHAT = "cudnn.linear_attention.kimi_delta_attention backward (pass 3 v2)"


def _dsl():
    _p3_cases.dsl(WHAT)


def _key(D, varlen, states, hilo=True):
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdKey

    return KdaBwdKey(head_dim=D, g_dtype="Float32", beta_dtype="Float32", varlen=varlen, has_initial=states, has_dfinal=states, dp_split_hilo=hilo)


# -- compile-only -----------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_p3_v2_compiles_with_wgmma_two_warpgroups_and_no_local_memory(tmp_path):
    _dsl()
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import build_grads_v2

    text, names = _p3_cases.build_ptx(lambda: build_grads_v2(_key(128, True, True)), tmp_path)
    # one copy of the B1 / B2 code serves both warpgroups (their key-channel block a runtime value): phase A 36 (dWm 8,
    # dUb 4, dTm 16, X 4, dA 4), B1 24 (dO S0 8, dP~ 8, the row-block product hi + lo 8), B2 28 (rows 4, cols-Q hi + lo
    # 8, cols-K 4, dkd 8, dKb 4) = 88 (v1: 144, its two 64-channel blocks unrolled)
    # grouped waits: dWm + dUb, dTm's two, X, dA, dO S0 + dP~, the B1 block (hi + lo), B2's three, dkd + dKb = 8
    _p3_cases.check_v2_ptx(text, names, tmp_path, "KdaBwdGradsV2", n_wgmma=88, n_waits=8, wg_barrier=r"%r\d+")


# -- GPU ----------------------------------------------------------------------------------------------------------------
def _inputs(lead, H, D, n_seqs, with_states, regime):
    import torch.nn.functional as F

    q = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    k = F.normalize(torch.randn(*lead, H, D, device="cuda"), dim=-1).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    x = torch.randn(*lead, H, D, device="cuda")
    g = -5.0 * torch.sigmoid(x) if regime == "hard" else F.logsigmoid(x) / 8  # hard: fla's safe-gate range
    beta = torch.rand(*lead, H, device="cuda")
    do = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5 if with_states else None
    dht = torch.randn(n_seqs, H, D, D, device="cuda") if with_states else None
    return q, k, v, g, beta, do, h0, dht


def _v2(plan, key):
    from cudnn.linear_attention.kda import bwd_api

    return _p3_cases.v2_kernel(bwd_api, plan, key)


def _ab_backward(q, k, v, g, beta, do, h0, dht, cu):
    """``(v1 grads, v2 grads)`` of one chunk-parallel-pass-1 plan's backward whose pass 3 is ``_p3_cases.AB``."""
    from cudnn.linear_attention.kda import bwd_api

    def make_plan(outs, dh0):
        plan = bwd_api.KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, *outs.values(), initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
        plan.parallel_pass1 = True  # pass 3 reads the same arrays either way; the chunk-parallel pass 1 is the faster one
        return plan

    key, o1, o2 = _p3_cases.ab_backward(bwd_api, make_plan, (q, k, v, g, beta, do), h0, dht, cu)
    assert key.parallel_pass1 and key.dp_split_hilo  # the plan the A/B is about (dp_split_hilo: the default)
    return o1, o2


def test_p3_ab_wrapper_swaps_only_the_outputs(monkeypatch):
    """CPU (recorders, no GPU): the A/B stand-in of the GPU test calls v1 with the plan's arguments and v2 with the same
    arguments except dq, dk, dv, dg, dbeta, which point at its own buffers; v1 and v2 declare the same ``__call__``."""
    _dsl()
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import KdaBwdGradsV2

    T, H, D = 130, 2, 64
    q = torch.randn(T, H, D).to(torch.bfloat16)
    g, beta = torch.randn(T, H, D), torch.rand(T, H)
    outs = [torch.empty_like(t) for t in (q, q, q, g, beta)]
    plan = KimiDeltaAttentionBwdSm90(q, q, q, g, beta, q, *outs)
    plan.parallel_pass1 = False  # the serial pass 1: no forward artifacts to stand in for
    plan.check_support()
    _p3_cases.check_ab_swaps_only_the_outputs(monkeypatch, plan, q, g, beta, outs, KdaBwdGrads, KdaBwdGradsV2)


def test_p3_grads_v2_is_a_pass3_key_field(monkeypatch):
    """CPU: ``plan.grads_v2 = True`` changes the compile key, but only pass 3's cache key (passes 1-2 share the default
    plan's artifacts), and ``build_kernel("grads", key)`` dispatches to ``chunk_bwd_v2_kernel.build_grads_v2``."""
    _dsl()
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.kda import bwd_api, chunk_bwd_v2_kernel

    def plan(v2):
        x = TensorDesc.contiguous((1000, 4, 128), "bfloat16", "x")
        g = TensorDesc.contiguous((1000, 4, 128), "float32", "g")
        beta = TensorDesc.contiguous((1000, 4), "float32", "beta")
        p = bwd_api.KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta)
        p.grads_v2, p.mn_operands = v2, False  # the two keys differ in grads_v2 only
        p.check_support()
        return p

    _p3_cases.check_grads_v2_is_a_pass3_key_field(monkeypatch, bwd_api, chunk_bwd_v2_kernel, plan(False), plan(True))


_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True), ("dense", (2, 257), 64, False)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_states", _CASES, ids=["varlen-k128-states", "dense-k64"])
def test_p3_v2_matches_v1_and_reference(layout, lens, D, with_states):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(11 + D + len(lens))
    H = 4
    cu, lead, n = _p3_cases.case_extents(layout, lens)
    q, k, v, g, beta, do, h0, dht = _inputs(lead, H, D, n, with_states, "hard")
    v1, v2 = _ab_backward(q, k, v, g, beta, do, h0, dht, cu)
    batched = layout == "dense"
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = _p3_cases.ref_args((q, k, v, g, beta, do), batched)
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    # same products and roundings: equal up to fp32 reassociation of the float atomics and one bf16 ulp of the stores
    report = _p3_cases.compare_v1_v2(v1, v2, ref, low, batched, layout)
    print(f"\n[p3 v2 {layout} K={D}] " + report)


@pytest.mark.gpu
def test_p3_grads_v2_plan_matches_reference():
    """``plan.grads_v2 = True`` end to end (the adapter's launch switch): the varlen K = 128 case with both states under
    hard gates, every gradient (d initial_state included) against the fp32 reference by the FlashAttention rule."""
    _dsl()
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref

    skip_unless_sm90()
    torch.manual_seed(23)
    lens, H, D = [1, 0, 700, 64, 130, 0], 4, 128
    T = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, len(lens), True, "hard")
    got = _p3_cases.poisoned_outs(q, k, v, g, beta)
    dh0 = poison(torch.empty_like(h0))
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, *got.values(), initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.parallel_pass1 = True  # the A/B case's pass-1 artifacts
    plan.grads_v2 = True
    plan.compile()
    assert plan.compile_key().grads_v2
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, *got.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    got["dh0"] = dh0
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = [t[None] for t in (q, k, v, g, beta, do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    _p3_cases.check_plan_against_reference(got, ref, low)


@pytest.mark.gpu
def test_p3_v2_timing_t8k_h16():
    """Per-kernel device times (torch profiler, 10 calls) of the whole KDA backward at one sequence of T 8k, H 16,
    K = V = 128 (varlen with both states: the K = 128 A/B case's pass-1 and pass-3 artifacts), chunk-parallel passes 1
    and 2, with v1 and with v2 as pass 3. Prints; asserts only that both ran."""
    _dsl()
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.markers import skip_unless_sm90

    skip_unless_sm90()
    torch.manual_seed(0)
    T, H, D = 8192, 16, 128
    # one varlen sequence with both states: the compile key of the A/B test's K = 128 case (its artifacts are reused)
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, 1, True, "hard")
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    dh0 = torch.empty_like(h0)
    outs = [torch.empty_like(t) for t in (q, k, v, g, beta)]
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, *outs, initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.parallel_pass1 = True  # the fastest backward of the tree otherwise: chunk-parallel passes 1 and 2 (both opt-in)
    plan.parallel_pass2 = True
    plan.grads_v2 = False  # pass 3 version 1 in the plan (v2 is the default): the A/B's baseline
    plan.compile()
    v2 = _v2(plan, plan.compile_key())
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")

    def run():
        plan.execute(q, k, v, g, beta, do, *outs, h0, dh0, dht, cu, workspace=ws)

    res = _p3_cases.time_v1_v2(plan, v2, run, f"KDA backward T{T} H{H} K{D} (varlen N=1, states)")
    assert res["v1"] > 0 and res["v2"] > 0
