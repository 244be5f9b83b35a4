"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a) of the chunk-parallel forward's named variants
(``_host/chunk_parallel.py::PARALLEL_VARIANTS``, set by ``set_parallel_options``): the state-pass variants ``v32`` /
``v16`` (the narrow-slice state pass, ``kda/chunk_parallel_state_narrow_kernel.py``) and ``s3`` (three stages), which
both families take (the state pass is family-agnostic), the output and prep variants, and the key fields: KDA's prep key
lost the session-4 kernels' fields in the session-5 fold (they are ValueErrors) and has the opt-ins ``narrow_ap`` /
``ref_table``. Two direct state-pass compiles (K = 128 varlen with states, K = 64 dense); the
rest is key and routing checks (no compile)."""

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


def test_variant_table_and_key_fields():
    """The variant table holds the state-pass variants only; KDA's prep key is the plan-time base fields (no tuning
    options), so a prep field on a KDA plan is a ValueError at compile (before any build), as is an unknown variant
    name or an unknown state-pass field; GDN's prep key keeps its options (``prefetch``), reachable by a dict."""
    from dataclasses import fields

    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey

    state_only = {"v32", "v16", "v64", "s3", "s4", "tma", "tma-s3", "tma-st", "tma-st-s3", "tma-st-s4"}
    assert set(PARALLEL_VARIANTS) == state_only | {"ow", "oper", "owp", "gtc", "gtc3", "gtc3-owp", "kn", "knt", "knt-best"}
    assert all(set(PARALLEL_VARIANTS[v]) == {"state"} for v in state_only)
    assert all(set(PARALLEL_VARIANTS[v]) == {"out"} for v in ("ow", "oper", "owp")) and set(PARALLEL_VARIANTS["gtc"]) == {"prep"}
    assert [f.name for f in fields(KdaParallelPrepKey)] == ["head_dim", "g_dtype", "beta_dtype", "l2norm", "varlen", "narrow_ap", "ref_table"]
    with pytest.raises(ValueError, match="parallel variant 'tc'"):
        set_parallel_options(_plan(), "tc")
    for field in ("fast_exp", "warpgroups", "prefetch", "two_per_sm", "restructured"):
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
    assert _plan(fam=GDN)._g_align() == 2 and _plan()._g_align() == 4  # KDA's prep reads an fp32 g by 32-bit loads


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
    """``v_slice`` 32 / 16 route to the narrow kernel, an unbuilt width is a ValueError; ``v32`` /
    ``s3`` put their field on the state key of a KDA plan, and GDN (whose state pass is this family-agnostic kernel)
    takes ``v16`` too."""
    from _delta_rule_cases import GDN

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
    from cudnn.linear_attention.kda.chunk_parallel_state_narrow_kernel import KimiDeltaAttentionParallelStateNarrow

    base = dict(head_dim=128, varlen=True, has_initial=True, has_final=True)
    for vw in (32, 16):
        assert KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=vw)) is KimiDeltaAttentionParallelStateNarrow
    with pytest.raises(ValueError, match="v_slice=48"):
        KimiDeltaAttentionParallelState.for_key(KdaParallelStateKey(**base, v_slice=48))
    for fam, variant, opts in ((KDA, "v32", {"v_slice": 32}), (KDA, "s3", {"stages": 3}), (GDN, "v16", {"v_slice": 16})):
        plan = _plan(fam=fam)
        set_parallel_options(plan, variant)
        assert plan._state_options() == opts, (variant, plan._state_options())
    assert _plan()._state_options() == {}
