"""CPU tier of the chunk-parallel forward schedule option (``schedule="parallel"``): plan-time validation and the
chunk-slot arithmetic the host sizes grids and the workspace with (no compile, no GPU)."""

from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, support_plan  # noqa: E402

from cudnn_testing.markers import skip_unless_cutedsl  # noqa: E402


@pytest.fixture
def floor():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention")  # check_support declines below the family's runtime floor


def test_default_schedule_is_serial_with_no_workspace_and_the_serial_key(floor):
    plan = support_plan(KDA)
    plan.check_support()
    assert plan.schedule == "serial"
    assert plan.scratch_workspace_bytes() == 0
    par = support_plan(KDA, schedule="parallel")
    par.check_support()
    assert par.compile_key() == plan.compile_key()  # the serial key is untouched by the option
    assert par.scratch_workspace_bytes() > 0


def test_unknown_schedule_is_a_value_error(floor):
    with pytest.raises(ValueError, match="schedule"):
        support_plan(KDA, schedule="fast").check_support()


def test_gdn_takes_the_option_with_its_serial_key_untouched(floor):
    plan = support_plan(GDN)
    plan.check_support()
    par = support_plan(GDN, schedule="parallel")
    par.check_support()
    assert par.compile_key() == plan.compile_key() and plan.scratch_workspace_bytes() == 0 < par.scratch_workspace_bytes()


def test_a_family_without_the_parallel_kernels_declines_the_option(floor):
    class NoParallel(KDA.adapter_class()):
        _parallel_schedule = False

    plan = support_plan(KDA, schedule="parallel")
    plan.__class__ = NoParallel
    with pytest.raises(NotImplementedError, match="parallel"):
        plan.check_support()


def _slot_chunk(cu, slot):
    """The kernels' slot -> (sequence, first token, token count) search (_device/chunk_parallel.py::slot_chunk)."""
    lo, hi = 0, len(cu) - 2
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if cu[mid] // 64 + mid <= slot:
            lo = mid
        else:
            hi = mid - 1
    bos, eos = cu[lo], cu[lo + 1]
    t0 = bos + (slot - (bos // 64 + lo)) * 64
    return lo, t0, min(eos - t0, 64)


def test_varlen_slots_cover_every_chunk_exactly_once_within_the_host_bound():
    """The host launches ``T // 64 + N`` slots (parallel_extents) and sizes the workspace for them: every chunk of
    every sequence (empty and 1-token sequences included) must own exactly one of those slots, and the kernels'
    search must map it back. A tighter bound or another base formula fails here."""
    from cudnn.linear_attention._host.chunk_parallel import parallel_extents

    rng = random.Random(7)
    for _ in range(300):
        lengths = [rng.choice([0, 1, 2, 63, 64, 65, 127, 128, 129, rng.randrange(1, 3000)]) for _ in range(rng.randrange(1, 12))]
        cu = [0]
        for n in lengths:
            cu.append(cu[-1] + n)
        ext = parallel_extents(cu[-1], len(lengths), 0, True)
        owned = {}
        for slot in range(ext.slots):
            seq, t0, n_valid = _slot_chunk(cu, slot)
            if n_valid > 0:
                assert (seq, t0) not in owned, (lengths, slot)
                owned[(seq, t0)] = slot
        expected = {(n, cu[n] + 64 * c) for n, ln in enumerate(lengths) for c in range(-(-ln // 64))}
        assert set(owned) == expected, lengths
        for n, ln in enumerate(lengths):  # the state pass addresses chunk c of sequence n as slot base_n + c
            for c in range(-(-ln // 64)):
                assert owned[(n, cu[n] + 64 * c)] == cu[n] // 64 + n + c


def test_dense_slots():
    from cudnn.linear_attention._host.chunk_parallel import parallel_extents

    assert parallel_extents(3 * 130, 3, 130, False).slots == 9
    assert parallel_extents(0, 2, 0, False).slots == 2  # L = 0: one idle slot per sequence, never a zero grid


@pytest.mark.parametrize("knob", ["parallel_prefetch", "parallel_prep_two_per_sm", "parallel_fast_exp"])
def test_removed_prep_knobs_raise_on_kda(floor, knob):
    """KDA's one prep kernel has no tuning options (session 5 removed ``prefetch`` / ``two_per_sm`` / ``fast_exp``):
    setting a former knob on a KDA plan is a ValueError at compile naming the knob, before anything is built (never
    silently ignored); the unset plan's prep options are empty. GDN keeps ``parallel_prefetch`` and
    ``parallel_prep_two_per_sm`` (options of its one-warpgroup prep kernel, which they select in place of the default
    restructured one); ``parallel_fast_exp`` is no family's."""
    plan = support_plan(KDA, schedule="parallel")
    assert plan._prep_options() == {}
    setattr(plan, knob, True)
    with pytest.raises(ValueError, match=rf"kimi_delta_attention: {knob} is not available for this family: its parallel prep kernel has no such option"):
        plan.compile()
    gdn = support_plan(GDN, schedule="parallel")
    setattr(gdn, knob, True)
    if knob == "parallel_fast_exp":
        with pytest.raises(ValueError, match=f"gated_delta_net: {knob} is not available"):
            gdn._prep_options()
    else:
        # the one-warpgroup kernel, which stages nothing (``staged_w`` is the restructured kernel's, default on)
        assert gdn._prep_options() == {
            knob.removeprefix("parallel_").removeprefix("prep_"): True,
            "restructured": False,
            "tc_ctas_per_sm": 2,
            "staged_w": False,
        }


def test_kda_binds_an_fp32_g_4_byte_aligned(floor):
    """The KDA prep kernel reads an fp32 ``g`` by 32-bit loads: the plan's ``g`` alignment is 4 for fp32 (execute checks
    the address) and 2 for bf16; GDN's stays 2 unless its prefetch option is on."""
    assert support_plan(KDA, schedule="parallel")._g_align() == 4
    assert support_plan(KDA, schedule="parallel", g_dtype="bfloat16")._g_align() == 2
    gdn = support_plan(GDN, schedule="parallel")
    assert gdn._g_align() == 2
    gdn.parallel_prefetch = True
    assert gdn._g_align() == 4
