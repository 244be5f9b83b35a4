"""The chunk-parallel prep kernels' opt-in TMA loads (session 9, issue #7): ``KdaParallelPrepKey.tma_loads``
(``kda/chunk_parallel_prep_kernel.py``, module docstring "TMA loads") and ``GdnParallelPrepKey.tma_loads``
(``gdn/chunk_parallel_prep_tc_kernel.py``, "TMA loads"), both default OFF until the H200 A/B, reached by the variant
``prep-tma`` (``_host/chunk_parallel.py::PARALLEL_VARIANTS``). The chunk's q and k tiles come by
``cp.async.bulk.tensor`` (warp 0, one transaction mbarrier; ``_device/chunk_parallel_prep_tma.py``) instead of per-thread
16-byte loads, and each thread reads back the row the default's clamped load reads (``min(row, n_valid - 1)``): the
same bits into the same arithmetic, so the contract is BITWISE: the whole workspace (every prep array and the state
pass's, rows past a sequence's end and idle slots included), o and the final state equal the default plan's byte for
byte.

GPU tier (``gpu``): fresh random inputs, poisoned outputs and an all-ones (NaN) workspace. Per family: the varlen batch
of ``_parallel_cases.LENGTHS`` (1-token, one-chunk, one-past-a-chunk, empty and 24-chunk sequences: the TMA box of a
short chunk reaches into the next sequence's tokens; GVA 4 value heads over 2 q/k heads; initial and final states) at K
= 128 and a dense [2, 300] batch at K = 64 (the dense slot table; 300 is not a multiple of 64, so the last chunk's box
reaches into the next batch row and, for the last one, past T: TMA's zero fill), each against the default plan byte for
byte, and o / the final state by the FlashAttention rule against the fp32 recurrence.

Compile tier (``compile_only``, CPU, ``CUTE_DSL_ARCH=sm_90a``): the field defaults off and needs the default key
(ValueError otherwise); the KDA build at K = 128 (varlen, fp32 g, L2 norm) and K = 64 (dense, bf16 g) and the GDN build
at K = 128: one cudnn-prefixed kernel (Rule 6), the default's CTA shape (256 threads, 2 / 3 CTAs per SM), WGMMAs and
CTA barriers, exactly 2 K / 64 ``cp.async.bulk.tensor.3d`` loads (q and k, K / 64 boxes each) on an mbarrier, no 16-byte
global load left (the default's only ones are q / k: 2 K / 32), no local memory and frame size 0. Three prep compiles,
about 30 s on one core.

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_prep_tma.py -q
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import frame_sizes, kernel_symbols

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA  # noqa: E402
from _prep_cases import require_kda_gpu as _gpu  # noqa: E402
from _prep_cases import skip_unless_kda_dsl  # noqa: E402

VARIANT = "prep-tma"  # {"prep": {"tma_loads": True}}


# ---- GPU tier --------------------------------------------------------------------------------------------------------


def _bitwise(fam, q, k, v, g, beta, h0, cu, l2norm, slots, label):
    """The ``prep-tma`` plan against the default plan: o, the final state and the whole workspace byte for byte (the
    workspace starts as all-ones bytes in both: idle slots must stay so in both); ``slots``: the batch's chunk slots
    (the failure message names the workspace arrays that differ)."""
    import _parallel_cases as cases
    import torch

    from cudnn.linear_attention._host.chunk_parallel import _ARRAYS, workspace_offsets

    o0, s0, ws0 = cases.execute_variant(fam, None, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1, ws1 = cases.execute_variant(fam, VARIANT, q, k, v, g, beta, h0, cu, l2norm)
    ne = ws0 != ws1
    if ne.any():
        offs = workspace_offsets(slots, v.shape[-2], v.shape[-1])
        per = {name: int(ne[offs[i] : offs[i + 1]].sum().item()) for i, (name, _, _) in enumerate(_ARRAYS)}
        raise AssertionError(f"{label}: workspace bytes differ from the default's, per array: {per}")
    assert torch.equal(o0.view(torch.int16), o1.view(torch.int16)), f"{label}: o differs, max {(o0.float() - o1.float()).abs().max().item()}"
    assert torch.equal(s0.view(torch.int32), s1.view(torch.int32)), f"{label}: final state differs, max {(s0 - s1).abs().max().item()}"
    return o1, s1


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_tma_loads_varlen_bitwise_and_recurrence(family):
    """K = 128, L2 norm, fp32 g, the varlen batch with 1-token / empty / ragged sequences, GVA, initial and final
    states: byte for byte the default plan, and the FlashAttention rule against the fp32 recurrence."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    fam = KDA if family == "kda" else GDN
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "weak")
    o, s = _bitwise(fam, q, k, v, g, beta, h0, cu, True, sum(cases.LENGTHS) // 64 + len(cases.LENGTHS), f"{family} varlen K = 128")
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g.float(), beta, h0, True, cu, False)
    cases.check(o, ref_o, low_o, f"o {family} {VARIANT}")
    cases.check(s, ref_s, low_s, f"final_state {family} {VARIANT}")
    assert torch.equal(s[3], h0[3])  # the empty sequence passes its state through


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_tma_loads_dense_bitwise_and_recurrence(family):
    """K = 64, no L2 norm, bf16 g, a dense [2, 300] batch with initial and final states (the last chunk of each row has
    44 tokens: its box reads the next row's tokens, and past T TMA's zeros): byte for byte the default plan, and the
    FlashAttention rule against the fp32 recurrence."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases
    import torch

    fam = KDA if family == "kda" else GDN
    q, k, v, g, beta, h0 = cases.inputs(fam, (2, 300), 2, 2, 64, False, 2, "safe_gate")
    g = g.to(torch.bfloat16)
    o, s = _bitwise(fam, q, k, v, g, beta, h0, None, False, 2 * 5, f"{family} dense K = 64")  # 2 rows x ceil(300 / 64) slots
    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g.float(), beta, h0, False, None, True)
    cases.check(o, ref_o, low_o, f"o {family} {VARIANT} dense")
    cases.check(s, ref_s, low_s, f"final_state {family} {VARIANT} dense")


# ---- compile tier ----------------------------------------------------------------------------------------------------

BASE = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)
BASE64 = dict(head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False)


def _check_build(ptx: str, tmp_path, d: int, symbol: str, ctas: int, wgmmas: dict, barriers: int) -> None:
    names = kernel_symbols(ptx)
    assert len(names) == 1 and names[0].startswith("cudnn_") and symbol in names[0] and "cutlass" not in names[0].lower(), names
    assert ".reqntid 256, 1, 1" in ptx and f".minnctapersm {ctas}" in ptx
    for shape, n in wgmmas.items():
        assert ptx.count(f"wgmma.mma_async.sync.aligned.{shape}") == n, (shape, ptx.count(f"wgmma.mma_async.sync.aligned.{shape}"), n)
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == barriers
    tma = re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes", ptx)
    assert len(tma) == 2 * d // 64, len(tma)  # q and k, d / 64 boxes each
    assert len(re.findall(r"mbarrier\.try_wait", ptx)) >= 1 and "mbarrier.init" in ptx
    assert not re.findall(r"\bld\.global(\.nc)?\.v4", ptx)  # the default's q / k 16-byte loads are gone (v: cp.async)
    assert "ld.local" not in ptx and "st.local" not in ptx
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), frames


@pytest.mark.compile_only
def test_tma_loads_field_defaults_off_and_needs_the_default_key():
    """``tma_loads`` defaults to False in both prep keys; ``prep-tma`` is exactly the field; with a non-default key
    (KDA without ``staged_w``; GDN's one-warpgroup kernel, two CTAs per SM or without ``staged_w``) it is a ValueError."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    assert PARALLEL_VARIANTS[VARIANT] == {"prep": {"tma_loads": True}}
    assert not KdaParallelPrepKey(**BASE).tma_loads and not GdnParallelPrepKey(**BASE).tma_loads
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, tma_loads=True))  # accepted
    with pytest.raises(ValueError, match=r"tma_loads=True needs staged_w=True"):
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, staged_w=False, tma_loads=True))
    assert GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**BASE, tma_loads=True)).__name__ == "GatedDeltaNetParallelPrepTc"
    for bad in ({"tc_ctas_per_sm": 2}, {"staged_w": False}, {"restructured": False, "tc_ctas_per_sm": 2, "staged_w": False}):
        with pytest.raises(ValueError, match=r"tma_loads=True needs the restructured prep at three CTAs per SM"):
            GatedDeltaNetParallelPrep.for_key(GdnParallelPrepKey(**BASE, **bad, tma_loads=True))


@pytest.mark.compile_only
def test_tma_loads_builds_with_tma_and_without_spills(tmp_path):
    """KDA at K = 128 (varlen, fp32 g, L2 norm) and K = 64 (dense, bf16 g), GDN at K = 128 (varlen): ``_check_build``
    (TMA loads of q / k on an mbarrier, no 16-byte global load, the default's WGMMAs, CTA barriers and CTA shape, frame
    size 0)."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    import _parallel_cases as cases

    from cudnn.linear_attention.gdn.chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    for name, base in (("kda128", BASE), ("kda64", BASE64)):
        key = KdaParallelPrepKey(**base, tma_loads=True)
        d = base["head_dim"]
        ptx = cases.compile_prep_ptx(KimiDeltaAttentionParallelPrep, key, tmp_path / name, 4 if key.g_dtype == "Float32" else 2)
        _check_build(ptx, tmp_path / name, d, "kdachunk_parallel_prep", 2, {"m64n16k16": d // 2, "m64n64k16": d // 8}, 18)
    key = GdnParallelPrepKey(**BASE, tma_loads=True)
    ptx = cases.compile_prep_ptx(GatedDeltaNetParallelPrep.for_key(key), key, tmp_path / "gdn128")
    _check_build(ptx, tmp_path / "gdn128", 128, "chunk_parallel_prep_tc", 3, {"m64n64k16": 32}, 11)
