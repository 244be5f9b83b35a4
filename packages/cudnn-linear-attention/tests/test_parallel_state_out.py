"""The fused state pass + output of the chunk-parallel delta-rule forward (issue #7, session 8; the state-pass key's
``fuse_out``, the ``fso`` / ``fso-w2`` / ``fso-s2`` variants of ``_host/chunk_parallel.py::PARALLEL_VARIANTS``;
``kda/chunk_parallel_state_out_kernel.py``; ``fso-w2``: two consumer warpgroups per CTA over one stage ring,
``consumer_wgs`` = 2): two kernels (prep, state pass + output), no h / vnt in the workspace, no output-kernel launch;
and the plan-time fused default (``_host/chunk_parallel.py::default_fused_state_options``: ``FUSED_DEFAULT`` on since
the session-8 A/B, ``FUSED_VARIANT`` = ``fso-w2`` where the rule says the fused schedule wins; ``three``: the
three-kernel schedule whatever the rule says).

Compile-only tier (CPU, ``CUTE_DSL_ARCH=sm_90a``; ~15 s on 2 cores):

- the variants and key fields (off on the state key: the unfused key is unchanged), the routing and the ValueErrors (four
  stages at K = 128 do not fit, nor three with two warpgroups; ``fuse_out`` without TMA, ``row_scaled`` /
  ``consumer_wgs`` = 2 without ``fuse_out``, output options with the fused state pass), the two-launch schedule on both launch routes (argument for argument against the fused kernel's
  ``__call__`` signature: o, T and o's strides reach it, no output launch);
- the fused kernel built directly for KDA (one warpgroup, three stages; and at K = 64, v_slice 16, four stages, dense)
  and, with two warpgroups at two stages, for GDN (``row_scaled``) and KDA, at K = 128, v_slice 32, varlen with states:
  no spill (frame size 0), one cudnn symbol, the WGMMAs (per chunk Vn 8 + Qg S0^T 8 + state 2 x 4 + P Vn 4 at K =
  128), TMA loads only (no bulk store: h / vnt are not written), the stage's transaction count (the state pass's plus
  qg, p (, rf); two warpgroups: both U tiles), the out-of-order waits (``wgmma.wait_group 1``), the two-warpgroup
  synchronization (two 128-thread named barriers per chunk, one empty-mbarrier arrive per chunk, 256 threads);
- a GDN plan with ``fso`` compiles on the tvm-ffi and the DSL route to (prep, fused, None);
- the plan-time default (on; SM count monkeypatched, no GPU): H = 64 -> ``fso-w2``'s options (and a plan that
  compiles to two kernels), H = 16 -> the unfused ones on 132 SMs, fused on 64; the knobs (``parallel_fused``,
  ``parallel_state_stages``, a named variant, ``three``) override it; ``FUSED_DEFAULT`` monkeypatched off -> unfused
  at every H.

GPU tier (``@pytest.mark.gpu``; both families, K = 128; poisoned outputs, an all-ones workspace), each case for ``fso``
and ``fso-w2``: the varlen batch of ``_parallel_cases.LENGTHS`` (1-token, one-chunk, 65-token, empty, 24-chunk
sequences; GVA; initial and final states): o and the final state by the FlashAttention rule against the fp32 recurrence
and within twice the unfused (``three``) plan's error; a dense [2, 300] batch and one 4096-token sequence with states; o rows after
the last sequence, the 64 rows past T and o's pad channels untouched on both store paths (16-byte vectors; 2-byte stores
for an o whose head stride is not a multiple of 8, on the DSL launch route); no sync / allocation, capture replays; a
batch whose sequences start at token 16 (the ``three`` plan on the same layout first); ``fso-w2`` and ``fso-s2`` bitwise
``fso`` (o and final state: the same operations per column); the default plan at H = 64 (GVA over 32 q/k heads: 256
chains on an H200's 132 SMs) is the ``fso-w2`` plan (two kernels, o and final state bit for bit) and matches the
recurrence; the final state bitwise the unfused plan's (the same chain; last, so a rounding-only difference shows
alone).

Run: ``python -m pytest packages/cudnn-linear-attention/tests/test_parallel_state_out.py -m compile_only`` (CPU);
GPU: ``source ci/gpu_env.sh; python -m pytest packages/cudnn-linear-attention/tests/test_parallel_state_out.py -x -q``."""

from __future__ import annotations

import inspect
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402

FSO = {"state": {"fuse_out": True, "stages": 3}}
FSO_W2 = {"state": {"fuse_out": True, "stages": 2, "consumer_wgs": 2}}
FSO_S2 = {"state": {"fuse_out": True, "stages": 2}}
FSO_W2_STSM = {"state": {**FSO_W2["state"], "stmatrix": True}}  # the fused default since session 31 (bitwise fso-w2)
FUSED = ["fso", "fso-w2"]  # the GPU cases' fused variants


def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


# ---- compile-only tier -------------------------------------------------------------------------------------------


@pytest.mark.compile_only
def test_fso_variants_keys_routing_and_value_errors():
    """``fso`` / ``fso-w2`` / ``fso-s2`` set ``fuse_out`` (three stages; two warpgroups at two stages; two stages); the
    new state key fields default off (``consumer_wgs`` 1); ``for_key`` routes ``fuse_out`` to the fused kernel and
    declines four stages at K = 128 and three with two warpgroups (the shared memory), ``fuse_out`` without TMA,
    ``row_scaled`` / ``consumer_wgs`` = 2 without ``fuse_out`` and ``consumer_wgs`` outside 1, 2; ``compile_parallel``
    declines output options with the fused state pass (before any build)."""
    _dsl()
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, compile_parallel, set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrow
    from cudnn.linear_attention.kda.chunk_parallel_state_out_kernel import SMEM_LIMIT, KimiDeltaAttentionParallelStateOut, smem_bytes

    assert PARALLEL_VARIANTS["fso"] == FSO and PARALLEL_VARIANTS["fso-w2"] == FSO_W2 and PARALLEL_VARIANTS["fso-s2"] == FSO_S2
    assert "ub16" not in PARALLEL_VARIANTS and "fso-ub16" not in PARALLEL_VARIANTS  # session 8: lost, removed
    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    sk = KdaParallelStateKey(**base)
    assert not sk.fuse_out and not sk.row_scaled and sk.consumer_wgs == 1 and not hasattr(sk, "u_bf16")
    route = KimiDeltaAttentionParallelState.for_key
    assert route(sk) is KimiDeltaAttentionParallelStateNarrow
    for kw in ({}, {"row_scaled": True}, {"v_slice": 16}, {"v_slice": 16, "consumer_wgs": 2}):
        assert route(KdaParallelStateKey(**base, fuse_out=True, stages=3, **kw)) is KimiDeltaAttentionParallelStateOut
    assert route(KdaParallelStateKey(**base, **FSO_W2["state"], row_scaled=True)) is KimiDeltaAttentionParallelStateOut
    assert route(KdaParallelStateKey(**base, fuse_out=True, stages=2, v_slice=64)) is KimiDeltaAttentionParallelStateOut
    assert (
        route(KdaParallelStateKey(head_dim=64, varlen=False, has_initial=False, has_final=True, fuse_out=True, v_slice=16))
        is KimiDeltaAttentionParallelStateOut
    )
    # K = 128, v_slice 32, three stages: ~210 KB; four stages do not fit; nor three at v_slice 64, nor three with two
    # warpgroups (~73 KB per stage + 32 KB: two stages, ~188 KB)
    assert smem_bytes(KdaParallelStateKey(**base, fuse_out=True, stages=3)) <= SMEM_LIMIT
    assert smem_bytes(KdaParallelStateKey(**base, **FSO_W2["state"])) <= SMEM_LIMIT
    for kw in ({"stages": 4}, {"stages": 3, "v_slice": 64}, {"stages": 3, "consumer_wgs": 2}, {"stages": 2, "v_slice": 64, "consumer_wgs": 2}):
        with pytest.raises(ValueError, match="shared memory"):
            route(KdaParallelStateKey(**base, fuse_out=True, **kw))
    with pytest.raises(ValueError, match="fuse_out=True needs tma=True"):
        route(KdaParallelStateKey(**base, fuse_out=True, stages=2, tma=False, tma_store=False))
    with pytest.raises(ValueError, match="row_scaled=True needs fuse_out=True"):
        route(KdaParallelStateKey(**base, row_scaled=True))
    with pytest.raises(ValueError, match="consumer_wgs=2 needs fuse_out=True"):
        route(KdaParallelStateKey(**base, consumer_wgs=2))
    for wgs in (0, 3, 4):
        with pytest.raises(ValueError, match=f"consumer_wgs={wgs}; accepted 1 or 2"):
            route(KdaParallelStateKey(**base, fuse_out=True, stages=2, consumer_wgs=wgs))

    for fam in (KDA, GDN):
        for name, want in (("fso", FSO), ("fso-w2", FSO_W2), ("fso-s2", FSO_S2)):
            p = compile_varlen_plan(fam, 1000, 5, schedule="parallel")
            set_parallel_options(p, name)
            assert p._state_options() == want["state"] and p._out_options() == {} and p.parallel_fused is False
    misses = kernel_cache.stats.misses
    with pytest.raises(ValueError, match=r"output key options \['v_wide'\] have no kernel"):
        p = compile_varlen_plan(GDN, 1000, 5, schedule="parallel")
        compile_parallel(
            p._parallel_kernel_classes(), "x", 128, "Float32", "Float32", True, True, True, True, row_scaled=True,
            state_options={"fuse_out": True, "stages": 3}, out_options={"v_wide": False},
        )  # fmt: skip
    assert kernel_cache.stats.misses == misses


class _Rec:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, *args):
        self.log.append((self.name, args))


@pytest.mark.compile_only
def test_fused_schedule_launches_two_kernels_with_the_fused_signature():
    """``launch_parallel`` and ``launch_parallel_ffi`` with ``out`` None: the prep launch as the three-kernel schedule's,
    then ONE state launch whose arguments bind to the fused kernel's ``__call__`` parameters by position: o at
    ``o_ptr``, the workspace arrays in carve order, T at ``T``, o's strides at ``o_strides``; no third launch. The
    three-kernel schedule still launches three (and ``launch_prep_state``, the backward's pass 1, the plain two)."""
    _dsl()  # the kernel module (its signature) needs the family's DSL floor
    from cudnn.linear_attention._host.chunk_parallel import ParallelExtents, launch_parallel, launch_parallel_ffi, launch_prep_state
    from cudnn.linear_attention.kda.chunk_parallel_state_out_kernel import KimiDeltaAttentionParallelStateOut

    names = list(inspect.signature(KimiDeltaAttentionParallelStateOut.__call__).parameters)[1:]
    ext = ParallelExtents(3, 0, 1, 20)
    ws = [f"ws{i}" for i in range(9)]
    strides = [(1, 2), (3, 4), (5, 6), (7, 8)]
    ptrs = dict(q="q", k="k", v="v", g="g", beta="beta", o="o", cu="cu", h0="h0", ht="ht")
    for route in ("dsl", "ffi"):
        log = []
        kernels = (_Rec("prep", log), _Rec("state", log), None)
        if route == "dsl":
            launch_parallel(kernels, ptrs, ws, ext, 1000, 4, 2, 0.5, strides, "stream")
        else:
            addrs = tuple(ptrs[n] for n in ("q", "k", "v", "g", "beta", "o", "cu", "h0", "ht"))
            launch_parallel_ffi(kernels, addrs, ws, ext, 1000, 4, 2, 0.5, strides, "stream")
        assert [n for n, _ in log] == ["prep", "state"], route
        bound = dict(zip(names, log[1][1], strict=True))
        assert (bound["cu_ptr"], bound["h0_ptr"], bound["ht_ptr"], bound["o_ptr"]) == ("cu", "h0", "ht", "o"), route
        assert [bound[n] for n in names[4:13]] == ws and names[4] == "w_ptr" and names[12] == "rf_ptr"
        assert (bound["T"], bound["n_seqs"], bound["seq_len"], bound["chunks_per_seq"], bound["slots"], bound["heads"]) == (1000, 3, 0, 1, 20, 4)
        assert bound["o_strides"] == (7, 8) and bound["stream"] == "stream", route
        assert log[0][1][:6] == ("q", "k", "v", "g", "beta", "cu") and log[0][1][-4:] == ((1, 2), (3, 4), (5, 6), "stream")
    log = []
    launch_parallel((_Rec("prep", log), _Rec("state", log), _Rec("out", log)), ptrs, ws, ext, 1000, 4, 2, 0.5, strides, "stream")
    assert [n for n, _ in log] == ["prep", "state", "out"] and len(log[1][1]) == 3 + 9 + 6
    log = []
    launch_prep_state(_Rec("prep", log), _Rec("state", log), ptrs, ws, ext, 1000, 4, 2, 0.5, strides[:3], "stream")
    assert [n for n, _ in log] == ["prep", "state"] and log[1][1] == ("cu", "h0", "ht", *ws, 3, 0, 1, 20, 4, "stream")


def _compile_fused(key, tmp_path) -> str:
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KimiDeltaAttentionParallelState
    from cudnn_testing.compile_only import keep_artifacts

    ptrs = [fp("Int32", 4) if key.varlen else None, fp("Float32", 4) if key.has_initial else None, fp("Float32", 4) if key.has_final else None]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(
            KimiDeltaAttentionParallelState.for_key(key)(key),
            *ptrs,
            fp("BFloat16", 2),
            *fake_workspace_pointers(),
            *[Int32(8)] * 6,
            (Int64(8), Int64(8)),
            cuda.CUstream(0),
        )
        return ptx()


@pytest.mark.compile_only
@pytest.mark.parametrize(
    "row_scaled, wgs",
    # KDA with one warpgroup (the fso kernel), GDN (row factors) and KDA with two (fso-w2): each code path built once at
    # the benchmarked shape
    [(False, 1), (True, 2), (False, 2)],
    ids=["kda", "gdn-w2", "kda-w2"],
)
def test_fused_kernel_builds_without_spills_with_wgmma_and_tma_loads_only(row_scaled, wgs, tmp_path):
    """K = 128, v_slice 32, varlen with states (three stages with one warpgroup, two with two): no spill, one cudnn
    symbol, 28 m64n32k16 WGMMAs per chunk and warpgroup (x stages unrolled), TMA loads and no bulk (h / vnt) store, the
    stage's transaction bytes = the state pass's (-Wm, kd, U of every warpgroup, exp(G_C)) + qg 16 KB + p 8 KB (+ rf
    256 B), the waits of the overlapped groups; two warpgroups: 256 threads, per chunk two named 128-thread barriers
    (no CTA barrier in the loop: one ``bar.sync 0``, the prologue's) and one empty-mbarrier arrive, one empty wait per
    refill; then (one warpgroup) K = 64, v_slice 16, four stages, dense, final state only: no spill."""
    from cudnn_testing.compile_only import assert_cudnn_symbols

    _dsl()
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    stages = 3 if wgs == 1 else 2
    key = KdaParallelStateKey(
        head_dim=128, varlen=True, has_initial=True, has_final=True, fuse_out=True, stages=stages, row_scaled=row_scaled, consumer_wgs=wgs
    )
    ptx = _compile_fused(key, tmp_path / "k128")
    assert len(assert_cudnn_symbols(ptx)) == 1 and "state_out_kernel" in assert_cudnn_symbols(ptx)[0]
    assert "ld.local" not in ptx and "st.local" not in ptx
    sizes = frame_sizes(tmp_path / "k128")
    assert sizes and all(f == 0 for f in sizes), sizes
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)
    assert mma == ["m64n32k16"] * (28 * stages), (len(mma), set(mma))
    bulk = re.findall(r"cp\.async\.bulk\.tensor\.\dd\.([a-z:_]+)\.([a-z:_]+)", ptx)
    assert bulk and all(dst.startswith("shared") and src == "global" for dst, src in bulk), set(bulk)  # loads only: no h / vnt store
    # per fetch: -Wm 2, kd 2, U 1 per warpgroup, exp(G_C), qg 2, p (, rf); fetch sites: stages - 1 prologue + stages in the loop
    assert len(bulk) == (2 * stages - 1) * (8 + wgs + (1 if row_scaled else 0)), len(bulk)
    assert "cp.async.bulk.commit_group" not in ptx
    tx = 2 * 64 * 128 * 2 + 64 * 32 * 4 * wgs + 128 * 4 + 64 * 128 * 2 + 64 * 64 * 2 + (64 * 4 if row_scaled else 0)
    assert tx == {(False, 1): 66048, (True, 2): 74496, (False, 2): 74240}[(row_scaled, wgs)]
    assert re.search(rf"\b{tx}\b", ptx), f"transaction count {tx} not in the PTX"
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d)", ptx)
    assert waits.count("0") == stages and waits.count("1") == (3 if row_scaled else 2) * stages, waits
    assert ptx.count("cvt.f32.bf16") == 0  # U is fp32 (session 7's bf16 U removed)
    assert re.search(rf"\.reqntid {128 * wgs}, 1, 1", ptx)
    named = re.findall(r"bar\.sync\s+%r\d+, 128;", ptx)
    assert len(named) == (2 * stages if wgs > 1 else 0), named
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == (1 if wgs > 1 else 1 + 2 * stages)
    assert len(re.findall(r"mbarrier\.arrive\.shared\.b64", ptx)) == (stages if wgs > 1 else 0)
    if wgs == 1:
        key = KdaParallelStateKey(head_dim=64, varlen=False, has_initial=False, has_final=True, fuse_out=True, v_slice=16, row_scaled=row_scaled)
        ptx = _compile_fused(key, tmp_path / "k64")
        assert "ld.local" not in ptx and "st.local" not in ptx and "cp.async.bulk.tensor" in ptx
        sizes = frame_sizes(tmp_path / "k64")
        assert sizes and all(f == 0 for f in sizes), sizes


@pytest.mark.compile_only
def test_fso_plan_compiles_two_kernels_on_both_routes():
    """A GDN plan with ``fso`` (the fused key takes ``row_scaled`` from the family) compiles to (prep, fused state pass,
    None) on the DSL route and, where apache-tvm-ffi imports, on the tvm-ffi route (entries (prep, state, None))."""
    _dsl()
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention._host.delta_rule_api import _tvm_ffi_available

    for tvm in (False, True) if _tvm_ffi_available() else (False,):
        p = compile_varlen_plan(GDN, 1000, 5, schedule="parallel")
        set_parallel_options(p, "fso")
        p.tvm_ffi = tvm
        p.compile()
        prep, state, out = p._compiled_parallel
        assert prep is not None and state is not None and out is None
        if tvm:
            assert len(p._entries) == 3 and p._entries[2] is None and p._entries[1] is not None


@pytest.mark.compile_only
def test_plan_time_fused_default_rule(monkeypatch):
    """The adapters' parallel plan and the fused default (``_host/chunk_parallel.py``): on (``FUSED_DEFAULT``, since the
    session-8 A/B) with ``FUSED_VARIANT`` = ``fso-w2-stsm`` (session 31); the rule ``H * V / v_slice >= SMs`` from plan-time values only
    -- 132 SMs: H = 64 (V = 128: 256 chains) fused (``fso-w2-stsm``'s options; another ``FUSED_VARIANT``'s when that is the
    variant), H = 16 (64 chains) unfused; 64 SMs: H = 16 fused; the knobs override it (``parallel_fused`` False / True,
    a non-default ``parallel_state_stages``, a named variant, ``three``: no option at all), ``parallel_fused=True`` with
    other stages and a non-bool value are ValueErrors; ``FUSED_DEFAULT`` monkeypatched off: unfused at every H (what a
    plan got before the flip); an H = 64 GDN plan (``FUSED_VARIANT`` set to ``fso``: the ``fso`` plan test's key, a cache
    hit) compiles to two kernels."""
    _dsl()
    from cudnn.linear_attention._host import chunk_parallel as cp
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

    def plan(fam=KDA, H=64):
        return compile_varlen_plan(fam, 1000, 5, 128, H, 2, schedule="parallel")

    assert cp.FUSED_DEFAULT is True and cp.FUSED_VARIANT == "fso-w2-stsm" and cp.PARALLEL_VARIANTS[cp.FUSED_VARIANT] == FSO_W2_STSM
    assert cp.fused_schedule_wins(64, 128, 132) and not cp.fused_schedule_wins(16, 128, 132) and cp.fused_schedule_wins(16, 128, 64)
    assert not cp.fused_schedule_wins(32, 128, 132) and cp.fused_schedule_wins(33, 128, 132) and not cp.fused_schedule_wins(64, 64, 132)

    monkeypatch.setattr(cp, "device_sm_count", lambda device: 132)
    fso = FSO_W2_STSM["state"]
    for fam in (KDA, GDN):
        assert plan(fam, 64)._state_options() == fso and plan(fam, 16)._state_options() == {} and plan(fam, 128)._state_options() == fso
    p = plan(H=64)
    p.parallel_fused = False
    assert p._state_options() == {}
    p = plan(H=16)
    p.parallel_fused = True
    assert p._state_options() == fso
    p = plan(H=64)
    p.parallel_state_stages = 3
    assert p._state_options() == {"stages": 3}  # the unfused state pass's A/B knob: the rule stands aside
    p.parallel_fused = True
    with pytest.raises(ValueError, match="parallel_fused=True sets the fused kernel's own stages"):
        p._state_options()
    p = plan(H=64)
    p.parallel_fused = "yes"
    with pytest.raises(ValueError, match="parallel_fused='yes'; accepted None, True or False"):
        p._state_options()
    p = plan(H=64)
    set_parallel_options(p, "state-base")
    assert p._state_options() == cp.PARALLEL_VARIANTS["state-base"]["state"]  # a variant is exactly what it names
    for fam in (KDA, GDN):
        p = plan(fam, 64)
        set_parallel_options(p, "three")  # the three-kernel schedule where the rule picks the fused one
        assert p.parallel_fused is False and (p._prep_options(), p._state_options(), p._out_options()) == ({}, {}, {})
    monkeypatch.setattr(cp, "device_sm_count", lambda device: 64)
    assert plan(H=16)._state_options() == fso
    monkeypatch.setattr(cp, "device_sm_count", lambda device: 132)
    monkeypatch.setattr(cp, "FUSED_VARIANT", "fso")
    assert plan(H=64)._state_options() == FSO["state"]
    p = plan(GDN, 64)
    p.tvm_ffi = False
    p.compile()
    prep, state, out = p._compiled_parallel
    assert prep is not None and state is not None and out is None
    monkeypatch.setattr(cp, "FUSED_DEFAULT", False)  # the unfused path: every H, every SM count
    for H in (16, 64, 128):
        assert plan(H=H)._state_options() == {} and plan(GDN, H)._state_options() == {}
    monkeypatch.setattr(cp, "device_sm_count", lambda device: 64)
    assert plan(H=16)._state_options() == {}
    p = plan(H=16)
    p.parallel_fused = True  # the knob still forces it
    assert p._state_options() == FSO["state"]


# ---- GPU tier ----------------------------------------------------------------------------------------------------


def _gpu(fam):
    from cudnn_testing.markers import skip_unless_sm90

    pytest.importorskip("torch")
    skip_unless_sm90()
    skip_unless_family_dsl(fam)


def test_per_call_plan_compiles_both_schedules(monkeypatch):
    """The per-call default (``PER_CALL_DEFAULT``): where the rule keeps the three kernels for one sequence, the default
    plan also compiles the fused pair (prep + ``fso-w2``'s state pass + output) at plan time, with the same prep (a
    kernel-cache hit), and launches it for calls of at least ``fused_min_sequences`` sequences (the rule
    ``N * H * V / 32 >= SMs`` with the call's N; 132 SMs: 3 at H = 16, 2 at H = 32, 1 at H = 64). One schedule for every
    call where the fused pair is already the plan's (H = 64), where a knob fixes it (``parallel_fused`` True / False, a
    non-default ``parallel_state_stages``, a named variant) and with ``PER_CALL_DEFAULT`` off."""
    _dsl()
    from cudnn.linear_attention._host import chunk_parallel as cp
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

    monkeypatch.setattr(cp, "device_sm_count", lambda device: 132)
    assert cp.PER_CALL_DEFAULT is True
    assert [cp.fused_min_sequences(h, 128, None) for h in (16, 32, 33, 64, 128)] == [3, 2, 1, 1, 1]
    assert cp.fused_schedule_wins(16, 128, 132, sequences=3) and not cp.fused_schedule_wins(16, 128, 132, sequences=2)
    for fam in (KDA, GDN):
        p = compile_varlen_plan(fam, 1000, 5, 128, 16, 2, schedule="parallel")
        p.tvm_ffi = False
        assert p._state_options() == {} and p._many_state_options() == FSO_W2_STSM["state"]
        p.compile()
        assert p._compiled_parallel[2] is not None and p._compiled_parallel_many[2] is None  # three kernels / fused pair
        assert p._compiled_parallel[0] is p._compiled_parallel_many[0]  # one prep kernel (a kernel-cache hit)
        assert p._fused_min_seqs == 3
    one = compile_varlen_plan(KDA, 1000, 5, 128, 64, 2, schedule="parallel")
    assert one._state_options() == FSO_W2_STSM["state"] and one._many_state_options() is None  # H = 64: fused for every call
    for knobs in ({"parallel_fused": False}, {"parallel_fused": True}, {"parallel_state_stages": 3}):
        p = compile_varlen_plan(KDA, 1000, 5, 128, 16, 2, schedule="parallel")
        for name, value in knobs.items():
            setattr(p, name, value)
        assert p._many_state_options() is None, knobs
    p = compile_varlen_plan(KDA, 1000, 5, 128, 16, 2, schedule="parallel")
    set_parallel_options(p, "state-base")
    assert p._many_state_options() is None  # a variant is exactly what it names
    p = compile_varlen_plan(KDA, 1000, 5, 128, 16, 2, schedule="parallel")
    p.tvm_ffi = False
    monkeypatch.setattr(cp, "PER_CALL_DEFAULT", False)
    assert p._many_state_options() is None
    p.compile()
    assert p._compiled_parallel_many is None
    p.parallel_fused = "per_call"  # the session-23 opt-in value: the default now
    with pytest.raises(ValueError, match="parallel_fused='per_call'; accepted None, True or False"):
        p._state_options()


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_per_call_plan_launches_by_sequence_count_with_no_compile(fam):
    """The default plan at H = 16 (64 chains per sequence on an H200: the fused pair from 3 sequences) run on a
    one-sequence batch and on an eight-sequence batch after its compile: no kernel-cache build at either call (Rule 4),
    and each output and final state equals the fixed plan's of that side bit for bit (the three kernels for one
    sequence, ``fso-w2`` for eight) and matches the fp32 recurrence."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention._host import chunk_parallel as cp
    from cudnn_testing.data import cu_seqlens, poison

    H = 16
    if cp.fused_min_sequences(H, 128, "cuda") not in range(2, 9):
        pytest.skip(f"{cp.device_sm_count('cuda')} SMs: one and eight sequences are not on both sides of the rule at H = {H}")
    batches = ([700], [100, 1, 64, 300, 65, 200, 17, 129])
    inputs = []
    for lengths in batches:
        cu = cu_seqlens(lengths, "cuda")
        inputs.append((cu, *cases.inputs(fam, (sum(lengths),), H, H // 2, 128, True, len(lengths), "weak")))
    cu0, q0, k0, v0, g0, b0, h00 = inputs[0]
    o0 = torch.empty_like(v0)
    plan = fam.adapter_class()(
        q0, k0, v0, g0, b0, o0, use_qk_l2norm_in_kernel=True, initial_state=h00, final_state=torch.empty_like(h00), cu_seqlens=cu0, schedule="parallel"
    )
    assert plan.parallel_fused is None  # the default plan
    plan.compile()
    assert plan._compiled_parallel_many is not None
    for (cu, q, k, v, g, beta, h0), fixed in zip(inputs, ("three", "fso-w2"), strict=True):
        o, ht = poison(torch.empty_like(v)), poison(torch.empty_like(h0))
        ws = torch.full((plan.scratch_workspace_bytes(q.shape[0], cu.shape[0] - 1),), 0xFF, dtype=torch.uint8, device="cuda")
        with kernel_cache.watch() as w:
            plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
        torch.cuda.synchronize()
        assert w.builds == 0, w.report()
        o1, s1, _ = cases.execute_variant(fam, fixed, q, k, v, g, beta, h0, cu, True)
        assert torch.equal(o, o1) and torch.equal(ht, s1), f"N = {cu.shape[0] - 1}: not the {fixed} plan's outputs"
        ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, True, cu, False)
        cases.check(o, ref_o, low_o, f"o per call N = {cu.shape[0] - 1}")
        cases.check(ht, ref_s, low_s, f"final_state per call N = {cu.shape[0] - 1}")


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
@pytest.mark.parametrize("variant", FUSED)
def test_fso_varlen_matches_recurrence_and_the_unfused_plan(fam, variant):
    """Varlen batch (``_parallel_cases.LENGTHS``: 1-token, one-chunk, 65-token, empty, 24-chunk sequences), GVA (4 v
    heads over 2 q/k heads), K = 128, initial and final states, poisoned outputs and an all-ones workspace: o and the
    final state by the FlashAttention rule against the fp32 recurrence and within twice the unfused (``three``) plan's
    error; the empty sequence passes its state through."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens
    from cudnn_testing.tolerance import assert_close_fa

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "weak")
    o0, s0, _ = cases.execute_variant(fam, "three", q, k, v, g, beta, h0, cu, True)
    o1, s1, _ = cases.execute_variant(fam, variant, q, k, v, g, beta, h0, cu, True)
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, True, cu, False)
    cases.check(o0, ref_o, low_o, "o three")
    cases.check(o1, ref_o, low_o, f"o {variant}")
    cases.check(s1, ref_s, low_s, f"final_state {variant}")
    assert_close_fa(o1, ref_o, o0, name=f"o {variant} vs unfused", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(s1, ref_s, s0, name=f"final_state {variant} vs unfused", factor=2.0, noise=1e-3 * ref_s.abs().max().item())
    assert torch.equal(s1[3], h0[3])


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
@pytest.mark.parametrize("variant", FUSED)
def test_fso_dense_batch_and_long_sequence_match_recurrence(fam, variant):
    """``fso`` / ``fso-w2`` on a dense [2, 300] batch (the dense slot table; 300 = 4 chunks + 44 tokens) and on one 4096-token
    sequence without cu_seqlens (64 chunks through the fused loop, every stage refilled 21 times), both with initial and
    final states (one compiled plan for both): the FlashAttention rule against the fp32 recurrence."""
    _gpu(fam)
    import _parallel_cases as cases

    for lead, batched in (((2, 300), True), ((4096,), False)):
        q, k, v, g, beta, h0 = cases.inputs(fam, lead, 2, 2, 128, True, lead[0] if batched else 1, "weak")
        o, ht, _ = cases.execute_variant(fam, variant, q, k, v, g, beta, h0, None, True)
        ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, True, None, batched)
        cases.check(o, ref_o, low_o, f"o {variant} {lead}")
        cases.check(ht, ref_s, low_s, f"final_state {variant} {lead}")


def _padded_run(fam, variant, lengths, head, tail, o_pad, tvm_ffi):
    """One ``variant`` execute (``variant`` None: the default plan; ``three``: the three-kernel plan) on a varlen batch laid out with ``head`` tokens before
    the first sequence and ``tail`` after the last (cu_seqlens from ``head``), o inside a poisoned buffer with ``o_pad``
    extra channels per head (4: a head stride that is not a multiple of 8, the 2-byte store path) and 64 poisoned rows
    past T; ``tvm_ffi`` None: the plan's default launch route. Returns (o rows of the sequences, (the o rows before /
    after them), (the rows past T, the pad channels), the final state, the compact inputs of the sequences)."""
    import _parallel_cases as cases
    import torch

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing.data import poison

    total = sum(lengths)
    T = head + total + tail
    H, D = 4, 128
    q, k, v, g, beta, h0 = cases.inputs(fam, (T,), H, 2, D, True, len(lengths), "weak")
    cu = torch.tensor([head] + [head + sum(lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32, device="cuda")
    buf = poison(torch.empty(T + 64, H, D + o_pad, dtype=torch.bfloat16, device="cuda"))
    o = buf[:T, :, :D]
    ht = poison(torch.empty_like(h0))
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    if variant:
        set_parallel_options(plan, variant)
    if tvm_ffi is not None:
        plan.tvm_ffi = tvm_ffi
    plan.compile()
    ws = torch.full((plan.scratch_workspace_bytes(),), 0xFF, dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    sl = slice(head, head + total)
    compact = (q[sl], k[sl], v[sl], g[sl], beta[sl], h0)
    return o[sl], (o[:head], o[head + total :]), (buf[T:], buf[:T, :, D:]), ht, compact


def _check_padded(fam, lengths, run, label):
    """The poisoned rows / channels of a :func:`_padded_run` still NaN; the sequences' rows and the final state by the
    FlashAttention rule against the fp32 recurrence."""
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    o, (before, after), (past_t, pad), ht, (q, k, v, g, beta, h0) = run
    assert bool(torch.isnan(before.float()).all()) and bool(torch.isnan(after.float()).all()), f"{label}: o rows outside the sequences written"
    assert bool(torch.isnan(past_t.float()).all()), f"{label}: o storage past T written"
    assert pad.numel() == 0 or bool(torch.isnan(pad.float()).all()), f"{label}: o's pad channels written"
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, True, cu_seqlens(lengths, "cuda"), False)
    cases.check(o, ref_o, low_o, f"o {label}")
    cases.check(ht, ref_s, low_s, f"final_state {label}")
    assert torch.equal(ht[lengths.index(0)], h0[lengths.index(0)]), f"{label}: the empty sequence's state"


PADDED_LENGTHS = [1, 65, 0, 190]  # a 1-token, a one-past-a-chunk, an empty and a non-multiple-of-64 sequence


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
@pytest.mark.parametrize("variant", FUSED)
def test_fso_writes_only_the_rows_of_its_sequences(fam, variant):
    """``fso`` / ``fso-w2`` on a varlen batch that ends 40 tokens before T (lengths 1, 65, 0, 190), o inside a poisoned buffer: the
    o rows after the last sequence, the 64 rows past T and the pad channels stay poisoned (NaN); the sequences' rows match
    the fp32 recurrence. Both store paths: 16-byte vectors (compact o, the default launch route: tvm-ffi where
    importable) and 2-byte stores (o's head stride D + 4, on the DSL launch route)."""
    _gpu(fam)
    for o_pad, tvm in ((0, None), (4, False)):
        run = _padded_run(fam, variant, PADDED_LENGTHS, 0, 40, o_pad, tvm)
        _check_padded(fam, PADDED_LENGTHS, run, f"{variant} o_pad {o_pad} tvm_ffi {tvm}")


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("variant", FUSED)
def test_fso_execute_never_syncs_or_allocates_and_replays_under_capture(variant):
    """The ``fso`` / ``fso-w2`` plan (GDN: the row factors too; the host path is the family-agnostic one): no host sync, no allocation
    over three executes, a CUDA-graph replay equal to eager."""
    _gpu(GDN)
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(GDN, variant=variant)


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_fso_leaves_a_poisoned_head_gap_untouched(fam):
    """The sequences start at token 16 (cu_seqlens[0] = 16) and end 40 tokens before T: the fused plan's o rows before
    and after them stay poisoned and its sequences' rows match the recurrence. The three-kernel plan (``three``) runs the
    same layout first, so a failure names which schedule mishandles a batch that does not start at token 0."""
    _gpu(fam)
    _check_padded(fam, PADDED_LENGTHS, _padded_run(fam, "three", PADDED_LENGTHS, 16, 40, 0, None), "three-kernel plan, head gap 16")
    for variant in FUSED:
        _check_padded(fam, PADDED_LENGTHS, _padded_run(fam, variant, PADDED_LENGTHS, 16, 40, 0, None), f"{variant}, head gap 16")


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_fso_w2_and_s2_are_fso_bit_for_bit(fam):
    """``fso-w2`` (two warpgroups over one stage ring) and ``fso-s2`` (two stages) run every column's chain and output
    with the same operations on the same operands as ``fso``: o and the final state equal bit for bit on the varlen
    batch (a lost stage release or a warpgroup reading the other's tiles shows here first)."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "weak")
    o0, s0, _ = cases.execute_variant(fam, "fso", q, k, v, g, beta, h0, cu, True)
    for variant in ("fso-w2", "fso-s2"):
        o1, s1, _ = cases.execute_variant(fam, variant, q, k, v, g, beta, h0, cu, True)
        assert torch.equal(o0, o1), f"{variant}: max |o - fso o| {(o0.float() - o1.float()).abs().max().item()}"
        assert torch.equal(s0, s1), f"{variant}: max |final state - fso's| {(s0 - s1).abs().max().item()}"


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_default_plan_at_h64_is_the_fused_schedule(fam):
    """The plan-time default on the device: at H = 64 (GVA over 32 q/k heads, K = V = 128: 256 chains, at least the
    SM count of an H200) the default plan takes ``FUSED_VARIANT``'s state options (``fso-w2-stsm``), compiles to two kernels,
    and its o and final state equal the ``fso-w2`` plan's bit for bit and match the fp32 recurrence (varlen batch of
    ``_parallel_cases.LENGTHS`` with initial and final states)."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn.linear_attention._host import chunk_parallel as cp
    from cudnn_testing.data import cu_seqlens, poison

    H = 64
    if not cp.fused_schedule_wins(H, 128, cp.device_sm_count("cuda")):
        pytest.skip(f"{cp.device_sm_count('cuda')} SMs: the rule keeps the three kernels at H = {H}")
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), H, H // 2, 128, True, len(cases.LENGTHS), "weak")
    o, ht = poison(torch.empty_like(v)), poison(torch.empty_like(h0))
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    assert plan._state_options() == cp.PARALLEL_VARIANTS[cp.FUSED_VARIANT]["state"] == FSO_W2_STSM["state"]
    plan.compile()
    assert plan._compiled_parallel[2] is None  # no output kernel: the fused state pass writes o
    ws = torch.full((plan.scratch_workspace_bytes(),), 0xFF, dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    o1, s1, _ = cases.execute_variant(fam, "fso-w2", q, k, v, g, beta, h0, cu, True)
    assert torch.equal(o, o1) and torch.equal(ht, s1), "the default plan at H = 64 is not the fso-w2 plan"
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, True, cu, False)
    cases.check(o, ref_o, low_o, "o default H 64")
    cases.check(ht, ref_s, low_s, "final_state default H 64")


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_fso_final_state_is_the_unfused_plans_bit_for_bit(fam):
    """The fused kernel runs the state pass's chain unchanged (the same WGMMAs on the same operands in the same order;
    only the waits moved): the final state of ``fso`` and ``fso-w2`` equals the three-kernel (``three``) plan's bit for
    bit on the varlen batch. (Last in the file: a rounding-only difference shows as this test alone failing.)"""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "weak")
    _, s0, _ = cases.execute_variant(fam, "three", q, k, v, g, beta, h0, cu, True)
    for variant in FUSED:
        _, s1, _ = cases.execute_variant(fam, variant, q, k, v, g, beta, h0, cu, True)
        assert torch.equal(s0, s1), f"{variant}: max |fused - unfused| final state {(s0 - s1).abs().max().item()}"


@pytest.mark.compile_only
@pytest.mark.parametrize("row_scaled", [False, True], ids=["kda", "gdn"])
def test_fused_stmatrix_compiles_bitwise_shaped(row_scaled, tmp_path):
    """``fso-w2-stsm`` (session 30): ``fso-w2`` with the per-chunk bf16 copies by ``stmatrix`` -- per chunk and warpgroup
    Vn^T (2, ``.trans``), S0 (4, ``.trans``) and the output tile (2) --, the only 2-byte shared stores left the initial
    state's; the same WGMMAs, no spill."""
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS

    _dsl()
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    opts = PARALLEL_VARIANTS["fso-w2-stsm"]["state"]
    assert opts == {**FSO_W2["state"], "stmatrix": True}
    texts = {}
    for sm in (False, True):
        key = KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True, row_scaled=row_scaled, **{**opts, "stmatrix": sm})
        texts[sm] = _compile_fused(key, tmp_path / str(sm))
        sizes = frame_sizes(tmp_path / str(sm))
        assert sizes and all(f == 0 for f in sizes), sizes
    t0, t1 = texts[False], texts[True]
    stages = opts["stages"]
    assert t1.count("stmatrix.sync.aligned.m8n8.x4.trans") == 6 * stages and t1.count("stmatrix.sync.aligned.m8n8.x4.shared") == 2 * stages
    assert t1.count("st.shared.b16") == 32 * 128 // 128  # load_state_t's initial copy only (32 rows x 128 channels / 128 threads)
    mma = r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)"
    assert re.findall(mma, t0) == re.findall(mma, t1)


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_fused_stmatrix_is_bitwise_fso_w2(fam):
    """``fso-w2-stsm`` equal to ``fso-w2`` bit for bit (o and the final state) on the varlen batch (1-token, one-chunk,
    65-token, empty, 24-chunk sequences; GVA; h0 / ht): the same values stored at the same addresses."""
    _gpu(fam)
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "weak")
    o0, s0, _ = cases.execute_variant(fam, "fso-w2", q, k, v, g, beta, h0, cu, True)
    o1, s1, _ = cases.execute_variant(fam, "fso-w2-stsm", q, k, v, g, beta, h0, cu, True)
    do = (o0.float() - o1.float()).abs().max().item()
    assert torch.equal(o0, o1) and torch.equal(s0, s1), f"fso-w2-stsm vs fso-w2: max |o diff| {do}, final_state {(s0 - s1).abs().max().item()}"
