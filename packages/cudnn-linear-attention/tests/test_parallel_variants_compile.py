"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the chunk-parallel forward's named variants
(``_host/chunk_parallel.py::PARALLEL_VARIANTS``, set by ``set_parallel_options``; all KDA): the two-warpgroup prep kernel
(``kda/chunk_parallel_prep_wg2_kernel.py``, ``KdaParallelPrepKey.warpgroups = 2``) and the restructured one
(``kda/chunk_parallel_prep_tc_kernel.py``). One compile of the ``wg2fx`` plan and one of ``tc`` (K = 128, varlen,
states, L2 norm) plus the ``tc`` prep at K = 64; the default keys are checked to be unchanged (so the default PTX is:
the variants are other modules behind other keys), and GDN, whose prep key has none of the variants' fields, declines
them with a ValueError."""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


def _plan(T=1000, N=5, D=128, H=4, Hk=2, fam=KDA):
    from cudnn.api_base import TensorDesc

    qk = TensorDesc.contiguous((T, Hk, D), "bfloat16", "q")
    v = TensorDesc.contiguous((T, H, D), "bfloat16", "v")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    return fam.adapter_class()(
        qk,
        qk,
        v,
        TensorDesc.contiguous(fam.gate_shape((T,), H, D), "float32", "g"),
        TensorDesc.contiguous((T, H), "float32", "beta"),
        v,
        use_qk_l2norm_in_kernel=True,
        initial_state=st,
        final_state=st,
        cu_seqlens=TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens"),
        schedule="parallel",
    )


def _ptx_of(tmp_path, part):
    import glob

    (text,) = [open(f).read() for f in glob.glob(os.path.join(str(tmp_path), "**", f"*{part}*.ptx"), recursive=True)]
    return text


def test_two_warpgroup_prep_builds_and_never_spills(tmp_path):
    """``wg2fx``: the prep kernel is the two-warpgroup module (256 threads: ``.reqntid 256``; warpgroup 0's solve on
    named barrier 1 of 128 threads; K = 128: 4 x (8 + 8) + 8 + 8 = 80 m64n64k16 WGMMAs as the default; the per-element
    decays by ex2.approx, only exp(G_C) by the precise expf); no local memory, no spill, the cudnn prefix on every
    symbol; a second plan with other extents reuses the artifacts."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

    plan = _plan()
    set_parallel_options(plan, "wg2fx")
    plan.check_support()
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert all(n.startswith("cudnn_") and "cutlass" not in n.lower() for n in names), names
    assert sum("chunk_parallel_prep_wg2" in n for n in names) == 1, names
    prep = _ptx_of(tmp_path, "chunk_parallel_prep_wg2")
    assert ".reqntid 256, 1, 1" in prep
    assert prep.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == 80
    assert len(re.findall(r"bar\.sync\s+1, 128;", prep)) == 7  # the solve's barriers: 1 + 2 per block row
    assert prep.count("fma.rm.f32") <= 2 and prep.count("ex2.approx") >= 400
    assert prep.count("ld.global.b32") >= 32 and prep.count("ld.global.b16") <= 2  # fp32 g by 32-bit loads (bound 4-byte aligned)
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path))

    misses = kernel_cache.stats.misses
    other = _plan(123457, 77)
    set_parallel_options(other, "wg2fx")
    other.compile()
    assert kernel_cache.stats.misses == misses and other._compiled_parallel == plan._compiled_parallel


def test_variant_keys_default_off_and_bad_combinations_raise():
    """The variant key fields default to the verified kernels (so the default plans' keys and PTX are unchanged); an
    unknown variant name, two warpgroups with ``parallel_prefetch``, a variant on GDN (its prep key has no
    ``warpgroups``) and a state-pass field the key does not have are ValueErrors at compile (before any build)."""
    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    pk = KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    assert pk.warpgroups == 1 and not pk.fast_exp and not pk.restructured
    assert KimiDeltaAttentionParallelPrep.for_key(pk) is KimiDeltaAttentionParallelPrep
    assert set(PARALLEL_VARIANTS) == {"wg2", "wg2fx", "wg2fx-s3", "tc", "tc-s3", "v32", "v16", "tc-v32", "tc-v16"}
    with pytest.raises(ValueError, match="parallel variant 'nope'"):
        set_parallel_options(_plan(), "nope")
    with pytest.raises(ValueError, match="takes neither"):
        p = _plan()
        set_parallel_options(p, "wg2")
        p.parallel_prefetch = True
        p.compile()
    with pytest.raises(ValueError, match=r"\['warpgroups'\] are not available for this family \(GdnParallelPrepKey\)"):
        p = _plan(fam=GDN)
        set_parallel_options(p, "wg2")
        p.compile()
    with pytest.raises(ValueError, match=r"\['reg_operands'\] are not available for this family \(KdaParallelStateKey\)"):
        p = _plan()
        set_parallel_options(p, {"state": {"reg_operands": True}})
        p.compile()


def test_tc_prep_builds_vectorized_without_spills_at_two_ctas_per_sm(tmp_path):
    """``tc`` (``kda/chunk_parallel_prep_tc_kernel.py``, routed by ``KdaParallelPrepKey.restructured``): 256 threads
    at two CTAs per SM (``.minnctapersm 2``: registers capped at 128) with no local memory; K = 128: 4 x (8 + 8) K-major
    m64n64k16 WGMMAs (A, P) + 2 x (4 + 4) with the B operand MN-major (U = (T Diag(beta)) V, W: no transposed stores);
    every bf16 tile written 16 bytes at a time (``st.shared.v4``, no 16-bit shared stores), every per-element decay
    one ``ex2.approx`` (3 x 32 in the element pass + 4 x 32 for K'_I: log2 gates, no per-exp multiply), V by four
    16-byte cp.async per thread; 18 CTA barriers (2 gates, 2 per row block, 1 + 6 solve, 1 before U / W) and none
    named. The default key still builds the default module."""
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep
    from cudnn.linear_attention.kda.chunk_parallel_prep_tc_kernel import KimiDeltaAttentionParallelPrepTc

    key = KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True, warpgroups=2, fast_exp=True, restructured=True)
    assert isinstance(KimiDeltaAttentionParallelPrep.for_key(key)(key), KimiDeltaAttentionParallelPrepTc)
    plan = _plan()
    set_parallel_options(plan, "tc")
    plan.check_support()
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert sum("chunk_parallel_prep_tc" in n for n in names) == 1 and all(n.startswith("cudnn_") for n in names), names
    prep = _ptx_of(tmp_path, "chunk_parallel_prep_tc")
    assert ".reqntid 256, 1, 1" in prep and ".minnctapersm 2" in prep
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", prep)
    assert len(mma) == 80 == prep.count("wgmma.mma_async") and mma.count("1") == 16, mma
    assert prep.count("st.shared.v4.b32") >= 36 and "st.shared.b16" not in prep and "st.shared.u16" not in prep
    assert prep.count("ex2.approx.ftz.f32") >= 224 and prep.count("cp.async.cg.shared.global") == 4
    assert len(re.findall(r"bar\.sync\s+0;", prep)) == 18 and not re.findall(r"bar\.sync\s+[1-9]", prep)
    assert "ld.local" not in text and "st.local" not in text and all(f == 0 for f in frame_sizes(tmp_path))

    # K = 64, dense, bf16 g, no L2 norm (V past T Diag(beta) instead of over K'_I): the prep kernel alone
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp

    key64 = KdaParallelPrepKey(
        head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False, warpgroups=2, fast_exp=True, restructured=True
    )
    ptrs = [fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 2), fp("Float32", 2), None]
    d64 = tmp_path / "d64"
    with keep_artifacts(d64) as ptx64:
        cute.compile(
            KimiDeltaAttentionParallelPrep.for_key(key64)(key64),
            *ptrs,
            *fake_workspace_pointers(),
            *[Int32(8)] * 7,
            Float32(1.0),
            *[(Int64(8), Int64(8))] * 3,
            cuda.CUstream(0),
        )
        text64 = ptx64()
    assert text64.count("wgmma.mma_async") == 40 and text64.count("cp.async.cg.shared.global") == 2 and "st.shared.b16" not in text64
    assert "ld.local" not in text64 and all(f == 0 for f in frame_sizes(d64))


# -- the narrow state pass (``v32`` / ``v16``: ``KdaParallelStateKey.v_slice``, ``kda/chunk_parallel_state_narrow_kernel.py``)


def _compile_state(key, tmp_path):
    """PTX text of the state-pass kernel ``key`` routes to, built directly (not through the kernel cache)."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Int32

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KimiDeltaAttentionParallelState

    ptrs = [fp("Int32", 4) if key.varlen else None, fp("Float32", 4) if key.has_initial else None, fp("Float32", 4) if key.has_final else None]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(KimiDeltaAttentionParallelState.for_key(key)(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 5, cuda.CUstream(0))
        return ptx()


@pytest.mark.parametrize("v_slice, D, varlen", [(32, 128, True), (16, 64, False)], ids=["v32-d128-varlen-states", "v16-d64-dense"])
def test_narrow_state_pass_builds_without_spills(v_slice, D, varlen, tmp_path):
    """The narrow state pass: one 128-thread kernel with the cudnn prefix, its MMAs all m64n{v_slice}k16 (per chunk
    D / 16 for Vn = U - Wm S0^T and D / 64 x 4 for S^T += kd Vn; the chunk loop unrolled over its two stages:
    2 x (D / 16 + D / 16)), the default's seven CTA barriers, no local memory and frame size 0 (nothing spilled)."""
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    key = KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=varlen, has_final=varlen, v_slice=v_slice)
    text = _compile_state(key, tmp_path)
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "chunk_parallel_state_narrow" in names[0], names
    assert ".reqntid 128, 1, 1" in text
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.bf16\.bf16", text)
    assert mma == [f"m64n{v_slice}k16"] * (2 * (D // 16 + D // 16)), mma
    assert len(re.findall(r"bar\.sync\s+0;", text)) == 7
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path))


def test_narrow_state_pass_keys_route_and_plans_take_them():
    """``v_slice`` defaults to 64 (the verified kernel class: default keys and PTX unchanged), 32 / 16 route to the
    narrow kernel, anything else is a ValueError; ``v32`` / ``tc-v32`` put the field on the state key of a KDA plan,
    and GDN (whose state pass is this family-agnostic kernel) takes ``v16`` too."""
    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrow

    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    assert KdaParallelStateKey(**base).v_slice == 64
    assert KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base)) is KimiDeltaAttentionParallelState
    for vw in (32, 16):
        assert KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=vw)) is KimiDeltaAttentionParallelStateNarrow
    with pytest.raises(ValueError, match="v_slice=48"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=48))
    assert {"v32", "v16", "tc-v32", "tc-v16"} <= set(PARALLEL_VARIANTS)
    for fam, variant, vw in ((KDA, "v32", 32), (KDA, "tc-v32", 32), (GDN, "v16", 16)):
        plan = _plan(fam=fam)
        set_parallel_options(plan, variant)
        assert plan._state_options() == {"v_slice": vw}, (variant, plan._state_options())
    assert _plan()._state_options() == {}
