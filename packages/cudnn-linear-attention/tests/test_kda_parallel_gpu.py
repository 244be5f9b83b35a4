"""GPU tier of the chunk-parallel Kimi Delta Attention forward (``schedule="parallel"``): correctness against the fp32
token-by-token recurrence (FlashAttention rule) and against the serial kernel (at most twice its error: the prep
kernel, ``kda/chunk_parallel_prep_kernel.py``, computes the WY terms with ``ex2.approx`` decays and another solve
order, so the schedules agree to rounding, not bit for bit), fresh random inputs, poisoned outputs; the execute
path's no-sync / no-allocation / graph-capture properties with a caller workspace; the state-pass variants
(``_host/chunk_parallel.py::PARALLEL_VARIANTS``). Bodies and the tolerance rule: ``_parallel_cases.py``."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
import _parallel_cases as cases  # noqa: E402
from _delta_rule_cases import KDA  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


# Pruned to four ids (each compiles the parallel plan and the serial kernel for its configuration): both head dims,
# both g dtypes, with and without the in-kernel L2 norm, both gate regimes.
@pytest.mark.parametrize(
    "D, l2norm, regime, g_dtype",
    [
        (128, True, "safe_gate", torch.float32),
        (128, False, "weak", torch.bfloat16),
        (64, True, "weak", torch.float32),
        (64, False, "safe_gate", torch.bfloat16),
    ],
    ids=["d128-l2-safe", "d128-weak-bf16g", "d64-l2-weak", "d64-safe-bf16g"],
)
def test_varlen_matches_recurrence_and_serial_schedule(D, l2norm, regime, g_dtype):
    """The varlen batch (1-token, one-chunk, one-past, empty, long sequences; GVA 4 over 2 heads; initial and final
    states), g in ``g_dtype``: the FlashAttention rule against the fp32 token-by-token recurrence
    (``_parallel_cases.check``), and against the serial schedule: the parallel error is at most twice the serial
    kernel's (plus the rule's noise), so a regression of the prep kernel shows even where the lowp reference is loose.
    The empty sequence passes its state through exactly."""
    from cudnn_testing.data import cu_seqlens
    from cudnn_testing.tolerance import assert_close_fa

    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(KDA, (sum(cases.LENGTHS),), 4, 2, D, l2norm, len(cases.LENGTHS), regime)
    g = g.to(g_dtype)
    o, ht = cases.run(KDA, "parallel", q, k, v, g, beta, h0, cu, l2norm)
    o_ser, ht_ser = cases.run(KDA, "serial", q, k, v, g, beta, h0, cu, l2norm)
    ref_o, ref_s, low_o, low_s = cases.refs(KDA, q, k, v, g, beta, h0, l2norm, cu, False)
    cases.check(o, ref_o, low_o, "o")
    cases.check(ht, ref_s, low_s, "final_state")
    assert_close_fa(o, ref_o, o_ser, name="o parallel vs serial", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(ht, ref_s, ht_ser, name="final_state parallel vs serial", factor=2.0, noise=1e-3 * ref_s.abs().max().item())
    assert torch.equal(ht[3], h0[3])


def test_dense_batch_and_thd_without_initial_state():
    cases.check_dense_batch_and_thd_without_initial_state(KDA)


def test_one_plan_rebinds_new_totals_with_a_workspace_per_batch():
    cases.check_one_plan_rebinds_new_totals(KDA)


@pytest.mark.detector
def test_execute_never_syncs_or_allocates_and_replays_under_capture():
    cases.check_execute_never_syncs_or_allocates_and_replays_under_capture(KDA)


@pytest.mark.parametrize(
    "opts, D, l2norm, g_dtype",
    [
        ({"parallel_state_stages": 3}, 128, True, torch.float32),
        ({"parallel_state_stages": 3}, 64, False, torch.bfloat16),
    ],
    ids=["stages3-d128", "stages3-d64-bf16g"],
)
def test_tuning_options_are_bitwise_the_default_parallel_schedule(opts, D, l2norm, g_dtype):
    """KDA's one remaining knob, ``parallel_state_stages = 3`` (the state pass fetches two chunks ahead), changes only
    when things happen: bitwise the default parallel schedule. (The prep knobs are gone: ``test_kda_parallel_support.py``
    checks that setting them raises.)"""
    cases.check_options_bitwise_equal_to_default(KDA, opts, D, l2norm, g_dtype)


# -- other state passes against the default (TMA, four stages, 32-row slices): the session-5 one (``state-base``: cp.async,
# two stages) and 16-row slices (``KdaParallelStateKey.v_slice``, ``kda/chunk_parallel_state_narrow_kernel.py``; the
# state slice held transposed, 32 / 16 value rows per CTA, grid [N, H, V / v_slice]) ------------------------------------


def _state_pass_arrays(ws, slots, heads, d):
    """The state pass's workspace arrays ``(vnt, h)`` of ``ws`` as [slots, heads, ...] float views."""
    from cudnn.linear_attention._host.chunk_parallel import _ARRAYS
    from cudnn.workspace import ws_align

    out, offset = {}, 0
    for name, size, per in _ARRAYS:
        nbytes = slots * heads * per(d) * size
        if name in ("vnt", "h"):
            out[name] = ws[offset : offset + nbytes].view(torch.bfloat16).view(slots, heads, -1).float()
        offset += ws_align(nbytes)
    return out["vnt"], out["h"]


def check_narrow_state_pass(fam, variant, D, l2norm, regime, g_dtype=torch.float32, stages=None):
    """``variant`` (a narrow state pass) on the varlen batch (1-token, one-chunk, empty, long sequences; GVA 4 over 2
    heads; initial and final states), three ways:

    1. the state pass's workspace arrays (``h`` = the state entering each chunk, ``vnt`` = Vn^T) equal the default
       plan's within bf16 rounding on every active slot (a wrong slice / transposition shows here, by array);
    2. o and the final state by the FlashAttention rule against the fp32 token-by-token recurrence;
    3. o and the final state against the default parallel schedule: the variant's error is at most twice the
       default's plus the rule's noise (bitwise equality is expected often but not claimed: the MMAs accumulate in
       another order). The empty sequence passes its state through exactly.

    ``stages``: the adapter's ``parallel_state_stages`` for both plans."""
    from cudnn.linear_attention._host.chunk_parallel import CHUNK, set_parallel_options
    from cudnn_testing.data import cu_seqlens, poison
    from cudnn_testing.tolerance import assert_close_fa

    H = 4
    lengths = LENGTHS_NARROW
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(lengths),), H, 2, D, l2norm, len(lengths), regime)
    g = g.to(g_dtype)
    runs = []
    for name in ("", variant):
        o, ht = poison(torch.empty_like(v)), poison(torch.empty_like(h0))
        plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
        if stages is not None:
            plan.parallel_state_stages = stages
        if name:
            set_parallel_options(plan, name)
        plan.compile()
        ws = torch.full((plan.scratch_workspace_bytes(),), 0xFF, dtype=torch.uint8, device="cuda")  # all-ones bytes: NaN in bf16 and fp32
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
        torch.cuda.synchronize()
        runs.append((o, ht, ws))
    (o0, s0, ws0), (o1, s1, ws1) = runs

    slots = sum(lengths) // CHUNK + len(lengths)
    active, bos = [], 0
    for n, length in enumerate(lengths):  # the varlen slot table of _device/chunk_parallel.py
        base = bos // CHUNK + n
        active += list(range(base, base + -(-length // CHUNK)))
        bos += length
    idx = torch.tensor(active, device="cuda")
    report, bad = [], []
    for name, a, b in zip(("vnt", "h"), _state_pass_arrays(ws0, slots, H, D), _state_pass_arrays(ws1, slots, H, D), strict=True):
        a, b = a[idx], b[idx]
        err = (a - b).abs().max().item()
        tol = 2e-2 * a.abs().max().item() + 1e-6
        report.append(f"{name}: max|{variant} - default| {err:.3e} (tolerance {tol:.3e})")
        if not (torch.isfinite(b).all() and err <= tol):
            bad.append(name)
    assert not bad, f"{variant}: state-pass arrays {bad} differ from the default state pass's: " + "; ".join(report)

    ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, False)
    cases.check(o1, ref_o, low_o, f"o {variant}")
    cases.check(s1, ref_s, low_s, f"final_state {variant}")
    assert_close_fa(o1, ref_o, o0, name=f"o {variant} vs default", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(s1, ref_s, s0, name=f"final_state {variant} vs default", factor=2.0, noise=1e-3 * ref_s.abs().max().item())
    assert torch.equal(s1[3], h0[3])


def check_narrow_state_pass_dense_long(fam, variant):
    """``variant`` (a state-pass variant) on a dense [B, L] batch (B = 2, L = 300) and one 4096-token THD sequence (64 chunks through the
    state pass), no initial state, K = 128: the FlashAttention rule against the fp32 recurrence."""
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

    for lead, batched in (((2, 300), True), ((4096,), False)):
        q, k, v, g, beta, _ = cases.inputs(fam, lead, 2, 2, 128, True, lead[0] if batched else 1, "safe_gate")
        o = torch.full_like(v, float("nan"))
        n = lead[0] if batched else 1
        ht = torch.full((n, 2, 128, 128), float("nan"), device="cuda")
        plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, final_state=ht, schedule="parallel")
        set_parallel_options(plan, variant)
        plan.compile()
        ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
        plan.execute(q, k, v, g, beta, o, None, ht, None, workspace=ws)
        torch.cuda.synchronize()
        ref_o, ref_s, low_o, low_s = cases.refs(fam, q, k, v, g, beta, None, True, None, batched)
        cases.check(o, ref_o, low_o, f"o {variant} {lead}")
        cases.check(ht, ref_s, low_s, f"final_state {variant} {lead}")


LENGTHS_NARROW = cases.LENGTHS  # 1-token, one chunk, one past, empty (index 3), long (1500 tokens: 24 chunks), ...


V16_BASE = {"state": {"v_slice": 16, "tma": False, "tma_store": False, "stages": 2}}  # 16 rows, cp.async, two stages
CPASYNC = {"state": {"tma": False, "tma_store": False}}  # the cp.async state pass at the plan's parallel_state_stages


# Pruned (each id compiles the default plan and the variant): the session-5 state pass (``state-base``: 32 rows,
# cp.async, two stages) and 16-row slices against the default (TMA, four stages), both head dims, both g dtypes, with
# and without L2 norm; one id with three stages on both plans (the cp.async variant and the TMA default).
@pytest.mark.parametrize(
    "variant, D, l2norm, regime, g_dtype, stages",
    [
        ("state-base", 128, True, "safe_gate", torch.float32, None),
        ("state-base", 64, False, "weak", torch.bfloat16, None),
        (V16_BASE, 128, False, "weak", torch.float32, None),
        (V16_BASE, 64, True, "safe_gate", torch.float32, None),
        (CPASYNC, 128, True, "weak", torch.float32, 3),
    ],
    ids=["base-d128", "base-d64-bf16g", "v16-base-d128", "v16-base-d64", "cpasync-s3-d128"],
)
def test_narrow_state_pass_matches_recurrence_and_default(variant, D, l2norm, regime, g_dtype, stages):
    check_narrow_state_pass(KDA, variant, D, l2norm, regime, g_dtype, stages)


@pytest.mark.parametrize("variant", ["state-base", V16_BASE, {"state": {"stages": 3}}], ids=["base", "v16-base", "s3"])
def test_state_pass_variants_dense_long_sequence(variant):
    check_narrow_state_pass_dense_long(KDA, variant)


@pytest.mark.detector
def test_narrow_state_pass_execute_never_syncs_or_allocates_and_replays_under_capture():
    """The ``state-base`` plan's execute (the cp.async state pass): no host sync, no allocation (three executes), and a
    CUDA-graph replay equal to eager."""
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing import detectors
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 700, 64, 300]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(KDA, (sum(lengths),), 4, 2, 128, True, len(lengths))
    o = torch.empty_like(v)
    ht = torch.empty_like(h0)
    plan = KDA.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    set_parallel_options(plan, "state-base")
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    args = (q, k, v, g, beta, o, h0, ht, cu)
    plan.execute(*args, workspace=ws)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args, workspace=ws), repeats=3)
    detectors.assert_capture_matches_eager(lambda: plan(*args, workspace=ws), [o, ht])
