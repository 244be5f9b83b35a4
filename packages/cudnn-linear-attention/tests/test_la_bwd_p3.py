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

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_la_bwd_p3.py -s`` (GPU host: ``-k p3``).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

WHAT = "cudnn.linear_attention.kimi_delta_attention backward (pass 3 v2)"


def _dsl():
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", WHAT)
    pytest.importorskip("cutlass")


def _key(D, varlen, states, hilo=True):
    from cudnn.linear_attention.kda.bwd_states_kernel import KdaBwdKey

    return KdaBwdKey(head_dim=D, g_dtype="Float32", beta_dtype="Float32", varlen=varlen, has_initial=states, has_dfinal=states, dp_split_hilo=hilo)


# -- compile-only -----------------------------------------------------------------------------------------------------
@pytest.mark.compile_only
def test_p3_v2_compiles_with_wgmma_two_warpgroups_and_no_local_memory(tmp_path):
    _dsl()
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import build_grads_v2
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols

    with keep_artifacts(tmp_path) as ptx:
        build_grads_v2(_key(128, True, True))
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "KdaBwdGradsV2" in names[0], names
    # one copy of the B1 / B2 code serves both warpgroups (their key-channel block a runtime value): phase A 36 (dWm 8,
    # dUb 4, dTm 16, X 4, dA 4), B1 24 (dO S0 8, dP~ 8, the row-block product hi + lo 8), B2 28 (rows 4, cols-Q hi + lo
    # 8, cols-K 4, dkd 8, dKb 4) = 88 (v1: 144, its two 64-channel blocks unrolled)
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 88 == text.count("wgmma.mma_async")
    # grouped waits: dWm + dUb, dTm's two, X, dA, dO S0 + dP~, the B1 block (hi + lo), B2's three, dkd + dKb = 8
    waits = len(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+0;", text))
    assert waits == 8, waits
    assert ".reqntid 256, 1, 1" in text
    assert re.search(r"bar\.sync\s+%r\d+, 128;", text), "warpgroup-local named barriers (id 1 + warpgroup)"
    assert re.search(r"barrier\.arrive\s+3, 256;", text) and re.search(r"bar\.sync\s+3, 256;", text), "B1's loads under the dA chain"
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path)), frame_sizes(tmp_path)
    ptxas = shutil.which("ptxas")
    if ptxas:  # where a ptxas is installed: the WGMMAs in warpgroup branches stay asynchronous (no C7520 serialization)
        src = tmp_path / "v2.ptx"
        src.write_text(text)
        info = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "v2.cubin")], capture_output=True, text=True)
        log = info.stdout + info.stderr
        if info.returncode == 0:  # (a ptxas too old for this PTX says nothing about the kernel)
            assert "C7520" not in log and "0 bytes spill stores" in log, log[-2000:]


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
    """v2 for the plan's pass-3 key with ``grads_v2`` set, through the kernel cache under the key a ``grads_v2`` plan
    compiles (so the end-to-end test below reuses the artifact)."""
    from dataclasses import replace

    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.kda import bwd_api

    k2 = replace(key, grads_v2=True)
    return kernel_cache.get_or_compile(("grads", plan._cache_key("grads", k2)), bwd_api.build_kernel("grads", k2), family=bwd_api.FAMILY)


class _AB:
    """Stands in for the plan's compiled pass 3: calls v1 with the plan's arguments, then v2 with the same arguments but
    its own (poisoned) output buffers (positions 12-16 of the declared argument list: dq, dk, dv, dg, dbeta)."""

    def __init__(self, v1, v2, outs):
        from cudnn.datatypes import data_type
        from cudnn.linear_attention._host.launch import gmem_ptr

        self.v1, self.v2, self.calls = v1, v2, 0
        bf, f32 = data_type.BFLOAT16, data_type.FLOAT
        self.ptrs = (
            gmem_ptr(outs["dq"], bf, 2),
            gmem_ptr(outs["dk"], bf, 2),
            gmem_ptr(outs["dv"], bf, 2),
            gmem_ptr(outs["dg"], f32, 4),
            gmem_ptr(outs["dbeta"], f32, 4),
        )

    def __call__(self, *args):
        self.v1(*args)
        self.v2(*args[:12], *self.ptrs, *args[17:])
        self.calls += 1


def _ab_backward(q, k, v, g, beta, do, h0, dht, cu):
    """``(v1 grads, v2 grads)`` of one default-plan backward whose pass 3 is :class:`_AB`."""
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison

    def outs():
        return dict(
            dq=poison(torch.empty_like(q)), dk=poison(torch.empty_like(k)), dv=poison(torch.empty_like(v)), dg=poison(torch.empty_like(g)),
            dbeta=poison(torch.empty_like(beta)),
        )  # fmt: skip

    o1, o2 = outs(), outs()
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, *o1.values(), initial_state=h0, dinitial_state=dh0, dfinal_state=dht, cu_seqlens=cu)
    plan.parallel_pass1 = True  # pass 3 reads the same arrays either way; the chunk-parallel pass 1 is the faster one
    plan.compile()
    key = plan.compile_key()
    assert key.parallel_pass1 and key.dp_split_hilo  # the plan the A/B is about (dp_split_hilo: the default)
    v2 = _v2(plan, key)
    ab = _AB(plan._compiled_kernel[-1], v2, o2)
    plan._compiled_kernel = (*plan._compiled_kernel[:-1], ab)
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, do, *o1.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    assert ab.calls == 1
    return o1, o2


def test_p3_ab_wrapper_swaps_only_the_outputs(monkeypatch):
    """CPU (recorders, no GPU): the A/B stand-in of the GPU test calls v1 with the plan's arguments and v2 with the same
    arguments except dq, dk, dv, dg, dbeta, which point at its own buffers; v1 and v2 declare the same ``__call__``."""
    _dsl()
    import inspect
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _bwd_cases

    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn.linear_attention.kda.chunk_bwd_kernel import KdaBwdGrads
    from cudnn.linear_attention.kda.chunk_bwd_v2_kernel import KdaBwdGradsV2

    names = list(inspect.signature(KdaBwdGrads.__call__).parameters)[1:]
    assert names == list(inspect.signature(KdaBwdGradsV2.__call__).parameters)[1:]
    assert names[12:17] == ["dq_ptr", "dk_ptr", "dv_ptr", "dg_ptr", "dbeta_ptr"]
    T, H, D = 130, 2, 64
    q = torch.randn(T, H, D).to(torch.bfloat16)
    g, beta = torch.randn(T, H, D), torch.rand(T, H)
    outs = [torch.empty_like(t) for t in (q, q, q, g, beta)]
    mine = dict(zip(("dq", "dk", "dv", "dg", "dbeta"), (torch.empty_like(t) for t in (q, q, q, g, beta)), strict=True))
    plan = KimiDeltaAttentionBwdSm90(q, q, q, g, beta, q, *outs)
    plan.parallel_pass1 = False  # the serial pass 1: no forward artifacts to stand in for
    plan.check_support()
    v1, v2 = _bwd_cases.Recorder("v1"), _bwd_cases.Recorder("v2")
    ab = _AB(v1, v2, mine)
    plan._compiled_kernel = (*[_bwd_cases.Recorder(p) for p in plan._parts(plan.compile_key())[:-1]], ab)
    from cudnn.linear_attention._host import delta_rule_bwd_api

    monkeypatch.setattr(delta_rule_bwd_api, "_stream", lambda s, d: "stream")
    raw = torch.empty(plan.scratch_workspace_bytes() + 128, dtype=torch.uint8)
    ws = raw[(-raw.data_ptr()) % 128 :][: plan.scratch_workspace_bytes()]
    plan.execute(q, q, q, g, beta, q, *outs, workspace=ws)
    assert ab.calls == 1 and len(v1.calls) == 1 and len(v2.calls) == 1
    a1, a2 = v1.calls[0], v2.calls[0]
    assert len(a1) == len(a2) == len(names)
    for i, name in enumerate(names):
        if 12 <= i < 17:
            assert int(a1[i]._pointer) == outs[i - 12].data_ptr(), name
            assert int(a2[i]._pointer) == list(mine.values())[i - 12].data_ptr(), name
        else:
            assert a1[i] is a2[i], name


def test_p3_grads_v2_is_a_pass3_key_field(monkeypatch):
    """CPU: ``plan.grads_v2 = True`` changes the compile key, but only pass 3's cache key (passes 1-2 share the default
    plan's artifacts), and ``build_kernel("grads", key)`` dispatches to ``chunk_bwd_v2_kernel.build_grads_v2``."""
    _dsl()
    from dataclasses import replace

    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.kda import bwd_api, chunk_bwd_v2_kernel

    def plan(v2):
        x = TensorDesc.contiguous((1000, 4, 128), "bfloat16", "x")
        g = TensorDesc.contiguous((1000, 4, 128), "float32", "g")
        beta = TensorDesc.contiguous((1000, 4), "float32", "beta")
        p = bwd_api.KimiDeltaAttentionBwdSm90(x, x, x, g, beta, x, x, x, x, g, beta)
        p.grads_v2 = v2
        p.check_support()
        return p

    base, opt = plan(False), plan(True)
    kb, ko = base.compile_key(), opt.compile_key()
    assert not kb.grads_v2 and ko.grads_v2 and replace(ko, grads_v2=False) == kb
    parts = base._parts(kb)
    assert parts == opt._parts(ko) and parts[-1] == "grads"
    for part in parts[:-1]:
        assert opt._cache_key(part, ko) == base._cache_key(part, kb), part
    assert opt._cache_key("grads", ko) != base._cache_key("grads", kb)
    seen = []
    monkeypatch.setattr(chunk_bwd_v2_kernel, "build_grads_v2", lambda key: seen.append(key) or "v2")
    assert bwd_api.build_kernel("grads", ko)() == "v2" and seen == [ko]


_CASES = [("varlen", [1, 0, 700, 64, 130, 0], 128, True), ("dense", (2, 257), 64, False)]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,lens,D,with_states", _CASES, ids=["varlen-k128-states", "dense-k64"])
def test_p3_v2_matches_v1_and_reference(layout, lens, D, with_states):
    _dsl()
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    skip_unless_sm90()
    torch.manual_seed(11 + D + len(lens))
    H = 4
    if layout == "varlen":
        T = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        lead, n = (T,), len(lens)
    else:
        cu, lead, n = None, tuple(lens), lens[0]
    q, k, v, g, beta, do, h0, dht = _inputs(lead, H, D, n, with_states, "hard")
    v1, v2 = _ab_backward(q, k, v, g, beta, do, h0, dht, cu)
    batched = layout == "dense"
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, dfinal_state=dht, cu_seqlens=cu)
    refargs = [add(t) for t in (q, k, v, g, beta, do)]
    ref = kimi_delta_attention_recurrent_bwd_ref(*refargs, **kw)
    low = kimi_delta_attention_chunked_bwd_ref(*refargs, dtype=torch.bfloat16, **kw)
    report = []
    for name in ("dq", "dk", "dv", "dg", "dbeta"):
        a, b = v1[name].float(), v2[name].float()
        assert torch.isfinite(b).all(), f"{name}: v2 left non-finite values (poison not overwritten?)"
        diff = (a - b).abs().max().item()
        scale = a.abs().max().item()
        report.append(f"{name} max|v2-v1| {diff:.3e} (max|v1| {scale:.3e}, bitwise {torch.equal(v1[name], v2[name])})")
        # same products and roundings: equal up to fp32 reassociation of the float atomics and one bf16 ulp of the stores
        assert diff <= 8e-3 * scale + 1e-6, f"{layout} {name}: v2 differs from v1 by {diff:.3e} (max|v1| {scale:.3e})"
        r = ref[name]
        out = v2[name] if batched else v2[name][None]
        base = v1[name] if batched else v1[name][None]
        noise = 2e-3 * r.abs().max().item()
        assert_close_fa(out, r, low[name], name=f"{layout} {name} (v2 vs bf16 chunked ref)", factor=2.0, noise=noise)
        assert_close_fa(out, r, base, name=f"{layout} {name} (v2 vs v1)", factor=2.0, noise=noise)
    print(f"\n[p3 v2 {layout} K={D}] " + "; ".join(report))


@pytest.mark.gpu
def test_p3_grads_v2_plan_matches_reference():
    """``plan.grads_v2 = True`` end to end (the adapter's launch switch): the varlen K = 128 case with both states under
    hard gates, every gradient (d initial_state included) against the fp32 reference by the FlashAttention rule."""
    _dsl()
    from cudnn.linear_attention.kda.bwd_api import KimiDeltaAttentionBwdSm90
    from cudnn_testing.data import poison
    from cudnn_testing.markers import skip_unless_sm90
    from cudnn_testing.reference_linear_attention import kimi_delta_attention_chunked_bwd_ref, kimi_delta_attention_recurrent_bwd_ref
    from cudnn_testing.tolerance import assert_close_fa

    skip_unless_sm90()
    torch.manual_seed(23)
    lens, H, D = [1, 0, 700, 64, 130, 0], 4, 128
    T = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v, g, beta, do, h0, dht = _inputs((T,), H, D, len(lens), True, "hard")
    got = dict(dq=torch.empty_like(q), dk=torch.empty_like(k), dv=torch.empty_like(v), dg=torch.empty_like(g), dbeta=torch.empty_like(beta))
    got = {n: poison(t) for n, t in got.items()}
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
    for name, out in got.items():
        r = ref[name]
        assert_close_fa(out if name == "dh0" else out[None], r, low[name], name=f"grads_v2 plan {name}", factor=2.0, noise=2e-3 * r.abs().max().item())


@pytest.mark.gpu
def test_p3_v2_timing_t8k_h16():
    """Per-kernel device times (torch profiler, 10 calls) of the whole KDA backward at one sequence of T 8k, H 16,
    K = V = 128 (varlen with both states: the K = 128 A/B case's pass-1 and pass-3 artifacts), chunk-parallel passes 1
    and 2, with v1 and with v2 as pass 3. Prints; asserts only that both ran."""
    _dsl()
    from torch.profiler import ProfilerActivity, profile

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
    plan.compile()
    key = plan.compile_key()
    v1 = plan._compiled_kernel
    v2 = _v2(plan, key)
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    res = {}
    for tag, kernels in (("v1", v1), ("v2", (*v1[:-1], v2))):
        plan._compiled_kernel = kernels

        def fn():
            plan.execute(q, k, v, g, beta, do, *outs, h0, dh0, dht, cu, workspace=ws)

        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
        rows = sorted(((e.device_time_total / 10, e.key) for e in pr.key_averages() if e.device_time_total > 0), reverse=True)
        res[tag] = sum(r[0] for r in rows)
        print(f"\n== KDA backward T{T} H{H} K{D} (varlen N=1, states), pass 3 {tag}: {res[tag]:.1f} us per call")
        for t, name in rows[:8]:
            print(f"   {t:9.1f} us  {name[:120]}")
    plan._compiled_kernel = v1
    assert res["v1"] > 0 and res["v2"] > 0
