"""The KDA prep kernel's step-3 key fields (``kda/chunk_parallel_prep_kernel.py``, module docstring "Step-3 options"):
``narrow_ap`` (step 3 as m64n16 ``A^T`` / ``P^T`` WGMMAs: a quarter of its tensor work, the epilogue on every warp) and
``ref_table`` on top of it (K'_I and ``kd`` decays from a per-chunk table of reference-row ratios: about 40 % fewer
exps). Both are ON by default since session 6 (they passed this file's GPU tests as opt-ins in session 5; H200, T = 8k,
H = 16: prep 180.6 us against 202.0); the A/B baselines are opt-ins now, reached through ``set_parallel_options(plan,
{"prep": {...}})``: ``narrow_ap`` alone (``KN``, variant ``kn``: ``ref_table`` off, and the solve and gate options
``tiled_solve`` / ``lean_gates``, default on too since session 6, off) and the session-5 kernel (``S5``, variant
``kp5``: all four off); both also turn off the session-8 staged stores (``staged_kd`` / ``staged_w``, default on since
the session-8 A/B; ``staged_kd`` needs ``ref_table``). GPU correctness and the compile-only build checks.

GPU tier (``gpu``): fresh random inputs, poisoned outputs and a poisoned workspace (all-ones bytes: NaN in bf16 and
fp32); o and the final state of the opt-in by the FlashAttention rule against the fp32 token-by-token recurrence
(``_parallel_cases.check``) and against the default parallel schedule (at most twice its error plus the rule's noise);
every workspace array the prep kernel writes (``w``, ``u``, ``kd``, ``qg``, ``p``, ``ge``; KDA writes no ``rf``)
against the default prep kernel's within bf16 rounding of the array's scale on every active chunk slot (the failure
message lists every array's error, so a wrong result points at the step that differs), and ``qg`` / ``ge`` (the element
pass's and step 1's, the same in all three kernels) bit for bit. The varlen batch has 1-token, one-chunk,
one-past-a-chunk, empty and long (24-chunk) sequences, GVA (4 value heads over 2 q/k heads) and initial / final
states; a dense batch and a 4096-token THD sequence (64 chunks) run on the default prep too.

Compile tier (``compile_only``, CPU with ``CUTE_DSL_ARCH=sm_90a``): the fields default on (the default key is the
``narrow_ap`` + ``ref_table`` kernel, with ``tiled_solve`` + ``lean_gates`` and the staged stores), ``ref_table`` alone
is a ValueError, GDN plans refuse the fields; the default and ``KN`` build at K = 128 (and the default at K = 64) with
the designed WGMMA shapes, 18 CTA barriers (+ the default's staged -Wm named barrier), no local memory and frame size 0,
under 85 % of the session-5 kernel's PTX instructions, and the default under half its ``ex2.approx``.
Four prep compiles, about 25 s on one core.

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_kda_prep_opts_gpu.py -q
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.compile_only import frame_sizes, kernel_symbols

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA  # noqa: E402
from _prep_cases import PREP_ARRAYS, skip_unless_kda_dsl  # noqa: E402
from _prep_cases import require_kda_gpu as _gpu  # noqa: E402

UNSTAGED = {"staged_kd": False, "staged_w": False}  # the session-8 staged stores (default on; staged_kd needs ref_table)
KN = {"prep": {"ref_table": False, "tiled_solve": False, "lean_gates": False, **UNSTAGED}}  # narrow_ap alone (variant kn)
S5 = {"prep": {"narrow_ap": False, "ref_table": False, "tiled_solve": False, "lean_gates": False, **UNSTAGED}}  # the session-5 kernel (kp5)


# ---- GPU tier --------------------------------------------------------------------------------------------------------


# Pruned to five ids (each compiles the default and the opt-in's prep kernel for its configuration; the state pass and
# the output kernel are shared per head dim): both head dims, L2 norm on and off, g in fp32 and bf16, both gate regimes
# (weak decay; fla's safe_gate range [-5, 0) where exp(G) underflows inside a chunk and the ratio table's factors are
# smallest), the default against narrow_ap alone and against the session-5 kernel.
@pytest.mark.gpu
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype, variant",
    [
        (128, True, "safe_gate", "float32", KN),
        (128, True, "weak", "float32", S5),
        (128, False, "safe_gate", "bfloat16", S5),
        (64, True, "safe_gate", "float32", S5),
        (64, False, "weak", "bfloat16", KN),
    ],
    ids=["d128-l2-strong-kn", "d128-l2-weak-s5", "d128-strong-bf16g-s5", "d64-l2-strong-s5", "d64-weak-bf16g-kn"],
)
def test_prep_option_matches_recurrence_default_schedule_and_default_workspace(D, l2norm, regime, g_dtype, variant):
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_prep_variant(KDA, variant, D, l2norm, regime, g_dtype, "float32", PREP_ARRAYS, ("qg", "ge"))


@pytest.mark.gpu
def test_prep_options_dense_batch_and_long_thd_sequence_with_narrow_state_pass():
    """The default prep (``narrow_ap`` + ``ref_table``) at K = 64 on a dense [B, L] batch (B = 2, L = 300: the dense
    slot table; no L2 norm, bf16 g), and the session-5 kernel (``S5``) with ``v32`` (the narrow state pass) at K = 128 on
    one 4096-token THD sequence (64 chunks through the state pass), no initial state: the FlashAttention rule against
    the fp32 recurrence."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_variant_dense_and_long_thd(KDA, None, 64, {**S5, "state": {"v_slice": 32}})


@pytest.mark.gpu
@pytest.mark.detector
def test_prep_options_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The ``narrow_ap``-alone plan (``KN``, opt-in) executes with no host sync, no allocation (three executes), and a
    CUDA-graph replay equal to eager (the default prep's own: ``test_kda_parallel_gpu.py``)."""
    _gpu()
    pytest.importorskip("torch")
    import _parallel_cases as cases

    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA, KN)


# ---- compile tier ----------------------------------------------------------------------------------------------------

BASE = dict(head_dim=128, g_dtype="Float32", beta_dtype="Float32", l2norm=True, varlen=True)


def _compile_prep(key, tmp_path):
    """PTX text of the prep kernel of ``key``, built directly (not through the kernel cache), dumped under ``tmp_path``
    (an fp32 ``g`` 4-byte aligned, as the adapter binds it)."""
    import _parallel_cases as cases

    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KimiDeltaAttentionParallelPrep

    return cases.compile_prep_ptx(KimiDeltaAttentionParallelPrep, key, tmp_path, 4 if key.g_dtype == "Float32" else 2)


def _instructions(ptx: str) -> int:
    import _parallel_cases as cases

    return cases.ptx_instructions(ptx)


def _check_option_ptx(ptx: str, tmp_path, d: int, staged: bool) -> None:
    """The narrow_ap kernels' shape at head dim ``d`` (the default, and narrow_ap alone): one cudnn-prefixed kernel, 256 threads at two CTAs per SM; step 3 as
    4 blocks x 2 x D / 16 m64n16k16 WGMMAs (K-major) and step 5's 2 x 4 x D / 64 m64n64k16 with B MN-major; the same
    18 CTA barriers as the session-5 kernel; no 16-bit shared stores but, with the session-8 staged stores
    (``staged``: the default), exactly theirs (D / 4 2-byte kd elements, D / 4 bf16 pairs of -Wm) and their one named
    barrier (``test_kda_prep_staged_gpu.py``); V by D / 32 cp.async; no local memory, frame size 0."""
    names = kernel_symbols(ptx)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "kdachunk_parallel_prep" in names[0] and "cutlass" not in names[0].lower(), names
    assert ".reqntid 256, 1, 1" in ptx and ".minnctapersm 2" in ptx
    n16 = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n16k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", ptx)
    n64 = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16[^;]*p, 1,\s*1, 0, (\d);", ptx)
    assert len(n16) == d // 2 and set(n16) == {"0"}, n16  # A^T, P^T: both operands K-major
    assert len(n64) == d // 8 and set(n64) == {"1"}, n64  # U, W: B MN-major
    assert ptx.count("wgmma.mma_async") == d // 2 + d // 8
    assert len(re.findall(r"bar\.sync\s+0;", ptx)) == 18
    assert len(re.findall(r"bar\.sync\s+[1-9]", ptx)) == len(re.findall(r"bar\.sync\s+1,\s*128;", ptx)) == (1 if staged else 0)
    assert len(re.findall(r"\bst\.shared\.b16\s", ptx)) == len(re.findall(r"\bst\.shared\.v2\.b16\s", ptx)) == (d // 4 if staged else 0)
    assert "st.shared.u16" not in ptx and ptx.count("cp.async.cg.shared.global") == d // 32
    assert "ld.local" not in ptx and "st.local" not in ptx
    frames = frame_sizes(tmp_path)
    assert frames and all(f == 0 for f in frames), frames


@pytest.mark.compile_only
def test_prep_option_fields_default_on_and_reach_the_plan():
    """``narrow_ap`` / ``ref_table`` default to True since session 6 (the default key is the kernel with both; the solve and
    gate options after them default to True as well: ``test_kda_prep_speed_gpu.py``); ``ref_table`` without ``narrow_ap`` is a
    ValueError naming the accepted combinations; a KDA plan takes the opt-outs through ``set_parallel_options``
    (``_prep_options``), a GDN plan refuses the fields (its prep key has no such fields) when its compile first asks for
    its prep options, before building anything."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from dataclasses import fields

    from _delta_rule_cases import compile_varlen_plan

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS, set_parallel_options
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep

    assert PARALLEL_VARIANTS["kn"] == KN and PARALLEL_VARIANTS["kp5"] == S5  # this file's baselines are the named variants
    assert [f.name for f in fields(KdaParallelPrepKey)][: len(BASE) + 2] == [*BASE, "narrow_ap", "ref_table"]
    key = KdaParallelPrepKey(**BASE)
    assert key.narrow_ap and key.ref_table and key == KdaParallelPrepKey(**BASE, narrow_ap=True, ref_table=True)
    with pytest.raises(ValueError, match="ref_table=True needs narrow_ap=True"):
        KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, narrow_ap=False))
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, narrow_ap=False, ref_table=False, **UNSTAGED))  # accepted: the session-5 kernel
    KimiDeltaAttentionParallelPrep(KdaParallelPrepKey(**BASE, **KN["prep"]))  # accepted: narrow_ap alone
    plan = compile_varlen_plan(KDA, 1000, 5)
    set_parallel_options(plan, S5)
    assert plan._prep_options() == S5["prep"]
    gdn = compile_varlen_plan(GDN, 1000, 5)
    set_parallel_options(gdn, {"prep": {"ref_table": False}})
    with pytest.raises(ValueError, match=r"\['ref_table'\] are not available for this family \(GdnParallelPrepKey\)"):
        gdn._prep_options()  # what a parallel plan's compile() asks first (``_g_align``), before any build


@pytest.mark.compile_only
def test_prep_options_build_without_spills_with_fewer_instructions_and_exps(tmp_path):
    """K = 128 (varlen, fp32 g / beta, L2 norm): the default (``narrow_ap`` + ``ref_table``, with ``tiled_solve`` +
    ``lean_gates``) and ``narrow_ap`` alone (``KN``) each build with the designed shape (``_check_option_ptx``) and under
    85 % of the session-5 kernel's PTX instructions (sm_90a, DSL 4.8.1: 4202 (4054 without the solve and gate options:
    the tiled solve is unrolled) and 4174 against 5133); ``narrow_ap`` alone keeps the session-5 exps (its element pass is
    that kernel's), and the default has under half of them (107 against 225 ``ex2.approx``: the K'_I decays come from the
    ratio table). The default at K = 64 (dense, bf16 g, no L2 norm) builds the same way."""
    skip_unless_kda_dsl()
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.kda.chunk_parallel_prep_kernel import KdaParallelPrepKey

    s5 = _compile_prep(KdaParallelPrepKey(**BASE, **S5["prep"]), tmp_path / "s5")
    kn = _compile_prep(KdaParallelPrepKey(**BASE, **KN["prep"]), tmp_path / "kn")
    _check_option_ptx(kn, tmp_path / "kn", 128, staged=False)
    default = _compile_prep(KdaParallelPrepKey(**BASE), tmp_path / "default")
    _check_option_ptx(default, tmp_path / "default", 128, staged=True)
    n_s5 = _instructions(s5)
    assert 0 < _instructions(kn) < 0.85 * n_s5 and 0 < _instructions(default) < 0.85 * n_s5, (_instructions(kn), _instructions(default), n_s5)
    ex2 = s5.count("ex2.approx")
    assert kn.count("ex2.approx") == ex2 and 0 < default.count("ex2.approx") < ex2 / 2, (kn.count("ex2.approx"), default.count("ex2.approx"), ex2)

    key64 = KdaParallelPrepKey(head_dim=64, g_dtype="BFloat16", beta_dtype="Float32", l2norm=False, varlen=False)
    _check_option_ptx(_compile_prep(key64, tmp_path / "d64"), tmp_path / "d64", 64, staged=True)
