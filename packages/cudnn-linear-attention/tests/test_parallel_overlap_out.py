"""The chunk-parallel forward's output kernel beside the state pass (session 30, opt-in: the ``ovl`` variant,
``KdaParallelStateKey.signal_out`` with ``KdaParallelOutKey.wait_slices``), both families, through the adapters'
``schedule="parallel"``:

- CPU: the keys' refusals, the variant, the workspace's ready flags (carved after the arrays);
- compile-only: the state pass zeroes its flags, lets the next grid launch (``griddepcontrol.launch_dependents``) and
  sets each chunk's flag by a relaxed GPU-scope store once the chunk's TMA stores completed (no fence in the chunk
  loop); the output kernel polls them with relaxed GPU-scope loads, then one fence; the default keys' PTX has none;
- GPU: o and the final state bitwise the default plan's (the same kernels' arithmetic) on the varlen batch (1-token,
  one-chunk, empty and 24-chunk sequences; GVA; h0 / ht), K = 128 and 64, both launch routes (the DSL entry and
  tvm-ffi), a dense batch and one long sequence, repeated executes into poisoned outputs; the execute detectors (no
  sync, no allocation, CUDA-graph replay equal to eager).

Run: ``source ci/gpu_env.sh; ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_parallel_overlap_out.py -q``."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, frame_sizes, skip_unless_family_dsl  # noqa: E402


def _gpu():
    from cudnn_testing.markers import skip_unless_sm90

    pytest.importorskip("torch")
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


def test_keys_variant_and_workspace():
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, READY_FLAG_ROWS, ready_flags_offset, workspace_bytes
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey, KimiDeltaAttentionParallelOut
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.workspace import ws_align

    assert PARALLEL_VARIANTS["ovl"] == {"state": {"signal_out": True}}
    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    assert KdaParallelStateKey(**base).signal_out is False and KdaParallelOutKey(head_dim=128, varlen=True).wait_slices == 0
    from cudnn.linear_attention.kda.chunk_parallel_out_persistent_kernel import KimiDeltaAttentionParallelOutPersistentWait
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrowSignal

    # the signalling / waiting keys get their own entry classes (one more pointer): the default entries keep their signature
    assert KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, signal_out=True)) is KimiDeltaAttentionParallelStateNarrowSignal
    assert KimiDeltaAttentionParallelOut.for_key(KdaParallelOutKey(head_dim=128, varlen=True, wait_slices=4)) is KimiDeltaAttentionParallelOutPersistentWait
    for bad in ({"tma": False, "tma_store": False}, {"tma_store": False}, {"fuse_out": True, "stages": 3}):
        with pytest.raises(ValueError, match="signal_out=True needs"):
            KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, signal_out=True, **bad))
    with pytest.raises(ValueError, match="wait_slices needs v_wide=True"):
        KimiDeltaAttentionParallelOut.for_key(KdaParallelOutKey(head_dim=128, varlen=True, v_wide=False, wait_slices=4))
    slots, heads, d = 130, 16, 128
    flags = ready_flags_offset(slots, heads, d)
    assert flags % 128 == 0 and workspace_bytes(slots, heads, d) == flags + ws_align(slots * heads * (d // READY_FLAG_ROWS) * 4)


def test_overlap_is_the_default_of_the_three_kernels(monkeypatch):
    """``parallel_overlap`` (default ``OVERLAP_DEFAULT``, on since session 31): a plan whose state pass is the three
    kernels' takes ``PARALLEL_VARIANTS[OVERLAP_VARIANT]`` (``ovl-stsm``) on top of its own state options (also at a
    non-default stage count); none where the plan is the fused pair (H = 64 on 132 SMs: no output kernel), with the knob
    off, or after ``set_parallel_options`` (a variant is exactly what it names); a non-bool value is a ValueError."""
    pytest.importorskip("cutlass")
    from _delta_rule_cases import compile_varlen_plan

    from cudnn.linear_attention._host import chunk_parallel as cp

    ovl = {"signal_out": True, "stmatrix": True}
    assert cp.OVERLAP_DEFAULT is True and cp.OVERLAP_VARIANT == "ovl-stsm" and cp.PARALLEL_VARIANTS["ovl-stsm"] == {"state": ovl}
    monkeypatch.setattr(cp, "device_sm_count", lambda device: 132)
    for fam in (KDA, GDN):
        p = compile_varlen_plan(fam, 1000, 5, 128, 16, 2, schedule="parallel")
        assert p.parallel_overlap is True and p._state_options() == {} and p._overlap_options({}) == ovl
        p.parallel_state_stages = 3
        assert p._overlap_options(p._state_options()) == ovl
        fused = compile_varlen_plan(fam, 1000, 5, 128, 64, 32, schedule="parallel")
        assert fused._state_options()["fuse_out"] and fused._overlap_options(fused._state_options()) == {}
        p = compile_varlen_plan(fam, 1000, 5, 128, 16, 2, schedule="parallel")
        p.parallel_overlap = False
        assert p._overlap_options({}) == {}
        for variant in ("three", "ovl"):
            p = compile_varlen_plan(fam, 1000, 5, 128, 16, 2, schedule="parallel")
            cp.set_parallel_options(p, variant)
            assert p.parallel_overlap is False and p._overlap_options(p._state_options()) == {}
    p.parallel_overlap = "yes"
    with pytest.raises(ValueError, match="parallel_overlap='yes'; accepted True or False"):
        p._overlap_options({})


@pytest.mark.compile_only
def test_compile_only_flags_protocol(tmp_path):
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey, KimiDeltaAttentionParallelOut
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

    texts = {}
    for sig in (False, True):
        key = KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True, signal_out=sig)
        ptrs = [fp("Int32", 4), fp("Float32", 4), fp("Float32", 4)]
        with keep_artifacts(tmp_path / f"state{sig}") as ptx:
            rdy = [fp("Int32", 128)] if sig else []
            cute.compile(KimiDeltaAttentionParallelState.for_key(key)(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0), *rdy)
            texts["state", sig] = ptx()
        okey = KdaParallelOutKey(head_dim=128, varlen=True, wait_slices=4 if sig else 0)
        with keep_artifacts(tmp_path / f"out{sig}") as ptx:
            args = [fp("BFloat16", 2), fp("Int32", 4), *fake_workspace_pointers(), *[Int32(8)] * 6, (Int64(8), Int64(8)), cuda.CUstream(0)]
            cute.compile(KimiDeltaAttentionParallelOut.for_key(okey)(okey), *args, *([fp("Int32", 128)] if sig else []))
            texts["out", sig] = ptx()
        for kind in ("state", "out"):
            names = kernel_symbols(texts[kind, sig])
            assert len(names) == 1 and names[0].startswith("cudnn_"), names
            assert all(f == 0 for f in frame_sizes(tmp_path / f"{kind}{sig}"))
    s1, o1 = texts["state", True], texts["out", True]
    stages = 4  # the default key's loop, unrolled over its stages: one flag per chunk, the last two after the loop
    assert s1.count("griddepcontrol.launch_dependents") == 1 and s1.count("st.relaxed.gpu") == stages + 2
    # no GPU-scope fence inside the chunk loop (session 30: a release store there cost 56-100 us at T 8k H 16): one
    # after the flags' zeroing, one after the final state
    assert s1.count("fence.acq_rel.gpu") == 2 and "st.release" not in s1 and "fence.proxy.async.global" not in s1
    assert o1.count("ld.relaxed.gpu") == 4 and o1.count("fence.acq_rel.gpu") == 1  # the four 32-row slices of (slot, head)
    for t in (texts["state", False], texts["out", False]):
        assert "griddepcontrol" not in t and "st.relaxed" not in t and "ld.relaxed" not in t


def _run(fam, variant, q, k, v, g, beta, h0, cu, l2norm, tvm_ffi=False, repeats=1):
    """``(o, final_state)`` after ``repeats`` executes of one plan (each into freshly poisoned outputs, on one
    workspace whose ready flags the previous execute left set)."""
    import torch

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing.data import poison

    o = poison(torch.empty_like(v))
    n = (cu.shape[0] - 1) if cu is not None else (q.shape[0] if q.dim() == 4 else 1)
    ht = poison(torch.empty(n, v.shape[-2], v.shape[-1], q.shape[-1], device="cuda"))
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    plan.tvm_ffi = tvm_ffi
    if variant:
        set_parallel_options(plan, variant)
    plan.compile()
    ws = torch.full((plan.scratch_workspace_bytes(),), 1, dtype=torch.uint8, device="cuda")  # flags start non-zero
    for _ in range(repeats):
        o.copy_(poison(torch.empty_like(o)))
        ht.copy_(poison(torch.empty_like(ht)))
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    return o, ht


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fam, D, l2norm, tvm_ffi",
    [(KDA, 128, True, False), (GDN, 128, False, False), (KDA, 64, False, True), (GDN, 128, True, True)],
    ids=["kda-d128-dsl", "gdn-d128-dsl", "kda-d64-ffi", "gdn-d128-ffi"],
)
def test_overlap_is_bitwise_the_default_varlen(fam, D, l2norm, tvm_ffi):
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    _gpu()
    if tvm_ffi:
        from cudnn.linear_attention._host.launch import tvm_ffi_available

        if not tvm_ffi_available():
            pytest.skip("apache-tvm-ffi is not importable")
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, D, l2norm, len(cases.LENGTHS), "safe_gate")
    o0, s0 = _run(fam, "three", q, k, v, g, beta, h0, cu, l2norm, tvm_ffi)
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, False)
    for variant in ("ovl", "ovl-stsm", None):  # None: the default plan (ovl-stsm since session 31)
        o1, s1 = _run(fam, variant, q, k, v, g, beta, h0, cu, l2norm, tvm_ffi, repeats=3)
        cases.check(o1, ref_o, low_o, f"o {variant}")
        do = (o0.float() - o1.float()).abs().max().item()
        ds = (s0 - s1).abs().max().item()
        assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{variant or 'the default plan'} vs three: max |diff| o {do}, final_state {ds}"


@pytest.mark.gpu
def test_overlap_dense_batch_and_long_sequence():
    """A dense [B, L] batch (B = 2, L = 300) and one 8192-token THD sequence (128 chunks, H = 16: the shape the option
    is for), no initial state: bitwise the default plan, executes repeated on one workspace."""
    import _parallel_cases as cases
    import torch

    _gpu()
    for lead, hv, hk, batched in (((2, 300), 2, 2, True), ((8192,), 16, 16, False)):
        q, k, v, g, beta, _ = cases.inputs(KDA, lead, hv, hk, 128, True, lead[0] if batched else 1, "safe_gate")
        o0, s0 = _run(KDA, "three", q, k, v, g, beta, None, None, True)
        for variant in ("ovl", "ovl-stsm", None):
            o1, s1 = _run(KDA, variant, q, k, v, g, beta, None, None, True, repeats=3)
            assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{lead}: {variant} differs from the default"


@pytest.mark.gpu
@pytest.mark.detector
def test_overlap_execute_never_syncs_or_allocates_and_replays_under_capture():
    import _parallel_cases as cases

    _gpu()
    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(GDN, "ovl")
