"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the chunk-parallel forward's named variants
(``_host/chunk_parallel.py::PARALLEL_VARIANTS``, set by ``set_parallel_options``): the session-5 baselines
``state-base`` / ``out-base`` / ``base`` (both families) and ``gdn-prep-base`` / ``gdn-base`` (GDN), KDA's prep
baselines, the session-8 ones (``kp7`` / ``gdn-prep7``: the prep without the staged stores, default on since the
session-8 A/B; ``three``: the three-kernel schedule), and the key fields: the session-6 defaults (TMA state pass at four
stages with TMA stores, the V-wide output kernel, GDN's restructured prep at three CTAs per SM), the session-8 staged
stores (``staged_kd`` / ``staged_w``), KDA's prep key (the session-4 kernels' fields are ValueErrors). Two
direct state-pass compiles (the cp.async baseline at K = 128 varlen with states, and v_slice 16 at K = 64 dense); the
rest is key and routing checks (no compile)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

pytestmark = pytest.mark.compile_only

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA, compile_varlen_plan, frame_sizes, skip_unless_family_dsl  # noqa: E402


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")


def _plan(T=1000, N=5, D=128, H=4, Hk=2, fam=KDA):
    return compile_varlen_plan(fam, T, N, D, H, Hk, schedule="parallel")


def test_variant_table_and_key_fields():
    """The variant table holds the session-5 baselines, KDA's prep baselines and the session-8 ones (the session-6 and
    session-8 winners are the key defaults, the losers are gone: an unknown name is a ValueError, ``kp8`` / ``kp8k`` /
    ``gsw`` too); the baselines are exactly the fields that differ from the defaults, every prep baseline with the
    session-8 staged stores off (``staged_kd`` needs ``ref_table``: ``kp5`` / ``kn`` could not build otherwise). KDA's
    prep key is the plan-time base fields plus its four session-6 options and the two staged stores (all on by default),
    so another prep field on a KDA plan (``pack_round`` too: removed) is a ValueError at compile (before any build), as
    is an unknown state-pass field and a variant of the other family (``gdn-prep-base`` / ``gdn-prep7`` on KDA, ``kp7``
    on GDN); GDN's prep key keeps its options (``prefetch``), reachable by a dict."""
    from dataclasses import fields

    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    assert set(PARALLEL_VARIANTS) == {
        "state-base",
        "out-base",
        "base",
        "gdn-prep-base",
        "gdn-base",
        "kp5",
        "kn",
        "kp6",
        "fso",
        "fso-w2",
        "fso-s2",
        "kp7",
        "gdn-prep7",
        "three",
        "ovl",
        "stsm",
        "ovl-stsm",
        "fso-w2-stsm",
    }
    sk = KdaParallelStateKey(head_dim=128, varlen=True, has_initial=True, has_final=True)
    ok = KdaParallelOutKey(head_dim=128, varlen=True)
    pk = GdnParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
    assert (sk.v_slice, sk.stages, sk.tma, sk.tma_store, ok.v_wide, pk.restructured, pk.tc_ctas_per_sm, pk.staged_w) == (32, 4, True, True, True, True, 3, True)
    assert PARALLEL_VARIANTS["state-base"] == {"state": {"tma": False, "tma_store": False, "stages": 2}}
    assert PARALLEL_VARIANTS["out-base"] == {"out": {"v_wide": False}} and PARALLEL_VARIANTS["gdn-prep-base"] == {
        "prep": {"restructured": False, "tc_ctas_per_sm": 2, "staged_w": False}  # the one-warpgroup kernel stages nothing
    }
    assert PARALLEL_VARIANTS["gdn-prep7"] == {"prep": {"restructured": True, "staged_w": False}} and PARALLEL_VARIANTS["three"] == {}
    assert PARALLEL_VARIANTS["base"] == {**PARALLEL_VARIANTS["state-base"], **PARALLEL_VARIANTS["out-base"]}
    assert PARALLEL_VARIANTS["gdn-base"] == {**PARALLEL_VARIANTS["base"], **PARALLEL_VARIANTS["gdn-prep-base"]}
    # the base fields, the four session-6 options, then the session-8 staged stores (the prep kernel's own tests:
    # ``test_kda_prep_staged_gpu.py``), then the backward-only ``bwd_tm``; session 7's ``u_bf16`` is gone
    names = [f.name for f in fields(KdaParallelPrepKey)]
    assert "u_bf16" not in names
    assert names == [
        "head_dim",
        "g_dtype",
        "beta_dtype",
        "l2norm",
        "varlen",
        "narrow_ap",
        "ref_table",
        "lean_gates",
        "tiled_solve",
        "staged_kd",
        "staged_w",
        "bwd_tm",  # session 9: the KDA backward's fold_prep_tm (Tm over qg; refused by set_parallel_options)
    ]
    # KDA's prep options all default on (session 6; the staged stores since session 8); kp5 turns every one off (the
    # session-5 kernel), kn all but narrow_ap, kp6 the solve and gate options and the staged stores (the session-6 first
    # default), kp7 the staged stores only (the session-7 default)
    opts, staged = names[5:9], names[9:11]
    assert all(getattr(KdaParallelPrepKey(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True), o) for o in opts + staged)
    unstaged = dict.fromkeys(staged, False)
    assert PARALLEL_VARIANTS["kp5"] == {"prep": {**dict.fromkeys(opts, False), **unstaged}}
    assert PARALLEL_VARIANTS["kn"] == {"prep": {**{o: False for o in opts if o != "narrow_ap"}, **unstaged}}
    assert PARALLEL_VARIANTS["kp6"] == {"prep": {"tiled_solve": False, "lean_gates": False, **unstaged}}
    assert PARALLEL_VARIANTS["kp7"] == {"prep": unstaged}
    for removed in ("tc", "v32", "s3", "tma-st-s4", "ow", "owp", "gtc3", "kts", "ktsl", "kpr", "kall", "kp8", "kp8k", "gsw"):
        with pytest.raises(ValueError, match=f"parallel variant '{removed}'"):
            set_parallel_options(_plan(), removed)
    for field in ("fast_exp", "warpgroups", "prefetch", "two_per_sm", "restructured", "pack_round"):
        p = _plan()
        set_parallel_options(p, {"prep": {field: True}})
        with pytest.raises(ValueError, match=rf"\['{field}'\] are not available for this family \(KdaParallelPrepKey\)"):
            p.compile()
    with pytest.raises(ValueError, match=r"\['reg_operands'\] are not available for this family \(KdaParallelStateKey\)"):
        p = _plan()
        set_parallel_options(p, {"state": {"reg_operands": True}})
        p.compile()
    p = _plan(fam=GDN)
    set_parallel_options(p, {"prep": {"prefetch": True}})
    assert p._prep_options() == {"prefetch": True} and p._g_align() == 4  # GDN's fp32 g at 4 bytes with prefetch only
    p = _plan(fam=GDN)
    set_parallel_options(p, "gdn-base")
    assert (p._prep_options(), p._state_options(), p._out_options()) == tuple(PARALLEL_VARIANTS["gdn-base"][k] for k in ("prep", "state", "out"))
    for variant, unknown in (("gdn-prep-base", "'restructured', 'tc_ctas_per_sm'"), ("gdn-prep7", "'restructured'")):
        with pytest.raises(ValueError, match=rf"\[{unknown}\] are not available for this family \(KdaParallelPrepKey\)"):
            p = _plan()
            set_parallel_options(p, variant)
            p.compile()
    p = _plan(fam=GDN)
    set_parallel_options(p, "kp7")
    with pytest.raises(ValueError, match=r"\['staged_kd'\] are not available for this family \(GdnParallelPrepKey\)"):
        p._prep_options()  # what a parallel plan's compile() asks first (``_g_align``), before any build
    assert _plan(fam=GDN)._g_align() == 2 and _plan()._g_align() == 4  # KDA's prep reads an fp32 g by 32-bit loads


# -- the state pass (``kda/chunk_parallel_state_narrow_kernel.py``): the cp.async baseline and another slice width --------


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


@pytest.mark.parametrize("v_slice, D, varlen", [(32, 128, True), (16, 64, False)], ids=["base-v32-d128-varlen-states", "base-v16-d64-dense"])
def test_cp_async_state_pass_builds_without_spills(v_slice, D, varlen, tmp_path):
    """The session-5 state pass (``state-base``: cp.async, two stages), at 32 and 16 rows: one 128-thread kernel with
    the cudnn prefix, its MMAs all m64n{v_slice}k16 (per chunk D / 16 for Vn = U - Wm S0^T and D / 64 x 4 for S^T +=
    kd Vn; the chunk loop unrolled over its two stages: 2 x (D / 16 + D / 16)), seven CTA barriers, no TMA, no local
    memory and frame size 0 (nothing spilled). The default (TMA) build: ``test_state_pass_gpu.py::test_state_pass_compile_only``."""
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey

    base = PARALLEL_VARIANTS["state-base"]["state"]
    key = KdaParallelStateKey(head_dim=D, varlen=varlen, has_initial=varlen, has_final=varlen, v_slice=v_slice, **base)
    text = _compile_state(key, tmp_path)
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "chunk_parallel_state_narrow" in names[0], names
    assert ".reqntid 128, 1, 1" in text
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.bf16\.bf16", text)
    assert mma == [f"m64n{v_slice}k16"] * (2 * (D // 16 + D // 16)), mma
    assert len(re.findall(r"bar\.sync\s+0;", text)) == 7 and "cp.async.bulk" not in text and "mbarrier" not in text
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(tmp_path))


def test_state_pass_keys_route_and_plans_take_them():
    """``v_slice`` 32 / 16 route to the narrow kernel, an unbuilt width is a ValueError; ``state-base`` puts its fields
    on the state key of a KDA plan and of a GDN plan (whose state pass is this family-agnostic kernel); the adapters'
    ``parallel_state_stages`` is the key's stage count: the default 4 leaves the key alone, 2 and 3 set exactly that
    count (on the default TMA kernel), anything else is a ValueError."""
    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import STAGES, KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrow

    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    for vw in (32, 16):
        assert KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=vw)) is KimiDeltaAttentionParallelStateNarrow
    with pytest.raises(ValueError, match="v_slice=48"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=48))
    for fam in (KDA, GDN):
        plan = _plan(fam=fam)
        set_parallel_options(plan, "state-base")
        assert plan._state_options() == {"tma": False, "tma_store": False, "stages": 2}, plan._state_options()
    plan = _plan()
    assert STAGES == 4 and plan.parallel_state_stages == 4 and plan._state_options() == {}
    for stages in (2, 3):
        plan.parallel_state_stages = stages
        assert plan._state_options() == {"stages": stages}
        assert KdaParallelStateKey(**base, **plan._state_options()).tma  # the default data movement at that many stages
    for bad in (1, 5):
        plan.parallel_state_stages = bad
        with pytest.raises(ValueError, match=f"parallel_state_stages={bad}; accepted 2, 3 or 4"):
            plan._state_options()
