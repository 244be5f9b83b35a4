"""Shared machinery of the delta-rule backward's pass-3 version-2 tests (``grads_v2``: ``test_la_bwd_p3.py``, KDA;
``test_la_bwd_p3_gdn.py``, GDN): the DSL skip, the compile-only PTX checks (WGMMA / wait counts, CTA size, named
barriers, no local memory, zero ptxas frames, no C7520 serialization or spill where a ptxas is installed), the GPU A/B's
stand-in pass 3 (:class:`AB`) and its CPU check, the ``grads_v2`` key-field check, one A/B backward, the v1 / v2 / fp32
reference comparisons and the per-kernel timing. No tests here (no ``test_`` prefix); the test modules import it by the
folder they put on ``sys.path``. Every helper asserts what the test it came from asserted.
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

OUT_NAMES = ("dq", "dk", "dv", "dg", "dbeta")


def wgmma_trans(text: str) -> tuple[int, int]:
    """WGMMA instructions of ``text`` with A / B read MN-major (their imm-trans-a / imm-trans-b operands, the last two, 1)."""
    tails = re.findall(r"wgmma\.mma_async[^;]*,\s*([01]),\s*([01]);", text)
    return sum(a == "1" for a, _ in tails), sum(b == "1" for _, b in tails)


def dsl(what: str) -> None:
    """Skip below the family's DSL floor or without ``cutlass``."""
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", what)
    pytest.importorskip("cutlass")


# -- compile-only -----------------------------------------------------------------------------------------------------
def build_ptx(build, where):
    """``(ptx text, kernel symbols)`` of ``build()`` with its PTX and cubin kept under ``where``."""
    from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

    with keep_artifacts(where) as ptx:
        build()
        text = ptx()
    return text, kernel_symbols(text)


def check_v2_ptx(text: str, names: list, where, cls_name: str, n_wgmma: int, n_waits: int, wg_barrier: str) -> None:
    """The v2 kernel's PTX: one ``cudnn_`` symbol of ``cls_name`` (Rule 6), ``n_wgmma`` WGMMA m64n64k16 and no other,
    ``n_waits`` wait points, 256 threads, the warpgroup-local named barrier (``wg_barrier``: its id operand, a regex),
    B1's loads under the dA chain (barrier 3 on 256 threads), no local memory, zero ptxas frames, and where a ptxas is
    installed no C7520 WGMMA serialization and no spill."""
    from cudnn_testing.compile_only import frame_sizes

    assert len(names) == 1 and names[0].startswith("cudnn_") and cls_name in names[0], names
    assert text.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16") == n_wgmma == text.count("wgmma.mma_async")
    waits = len(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+0;", text))
    assert waits == n_waits, waits
    assert ".reqntid 256, 1, 1" in text
    assert re.search(rf"bar\.sync\s+{wg_barrier}, 128;", text), "warpgroup-local named barriers (id 1 + warpgroup)"
    assert re.search(r"barrier\.arrive\s+3, 256;", text) and re.search(r"bar\.sync\s+3, 256;", text), "B1's loads under the dA chain"
    assert "ld.local" not in text and "st.local" not in text
    assert all(f == 0 for f in frame_sizes(where)), frame_sizes(where)
    ptxas = shutil.which("ptxas")
    if ptxas:  # where a ptxas is installed: the WGMMAs in warpgroup branches stay asynchronous (no C7520), no spill
        src = where / "v2.ptx"
        src.write_text(text)
        info = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(where / "v2.cubin")], capture_output=True, text=True)
        log = info.stdout + info.stderr
        if info.returncode == 0:  # (a ptxas too old for this PTX says nothing about the kernel)
            assert "C7520" not in log and "0 bytes spill stores" in log, log[-2000:]


# -- CPU --------------------------------------------------------------------------------------------------------------
class AB:
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


def check_ab_swaps_only_the_outputs(monkeypatch, plan, q, g, beta, outs, v1_cls, v2_cls) -> None:
    """CPU (recorders, no GPU): :class:`AB` calls v1 with the plan's arguments and v2 with the same arguments except
    dq, dk, dv, dg, dbeta, which point at its own buffers; ``v1_cls`` and ``v2_cls`` declare the same ``__call__``.
    ``plan``: checked, on CPU tensors ``q`` (q, k, v, dO), ``g``, ``beta`` and outputs ``outs``, the serial pass 1."""
    import _bwd_cases

    from cudnn.linear_attention._host import delta_rule_bwd_api

    names = list(inspect.signature(v1_cls.__call__).parameters)[1:]
    assert names == list(inspect.signature(v2_cls.__call__).parameters)[1:]
    assert names[12:17] == ["dq_ptr", "dk_ptr", "dv_ptr", "dg_ptr", "dbeta_ptr"]
    mine = dict(zip(OUT_NAMES, (torch.empty_like(t) for t in (q, q, q, g, beta)), strict=True))
    v1, v2 = _bwd_cases.Recorder("v1"), _bwd_cases.Recorder("v2")
    ab = AB(v1, v2, mine)
    plan._compiled_kernel = (*[_bwd_cases.Recorder(p) for p in plan._parts(plan.compile_key())[:-1]], ab)
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


def check_grads_v2_is_a_pass3_key_field(monkeypatch, bwd_api, v2_module, base, opt) -> None:
    """CPU: ``opt`` (``base`` with ``grads_v2 = True``, both checked) has another compile key, but only pass 3's cache
    key differs (passes 1-2 share the default plan's artifacts), and ``bwd_api.build_kernel("grads", key)`` dispatches
    to ``v2_module.build_grads_v2``."""
    kb, ko = base.compile_key(), opt.compile_key()
    assert not kb.grads_v2 and ko.grads_v2 and replace(ko, grads_v2=False) == kb
    parts = base._parts(kb)
    assert parts == opt._parts(ko) and parts[-1] == "grads"
    for part in parts[:-1]:
        assert opt._cache_key(part, ko) == base._cache_key(part, kb), part
    assert opt._cache_key("grads", ko) != base._cache_key("grads", kb) and opt._cache_key("grads", ko).grads_v2
    seen = []
    monkeypatch.setattr(v2_module, "build_grads_v2", lambda key: seen.append(key) or "v2")
    assert bwd_api.build_kernel("grads", ko)() == "v2" and seen == [ko]


# -- GPU ----------------------------------------------------------------------------------------------------------------
def case_extents(layout: str, lens):
    """``(cu_seqlens, lead shape, sequences)`` of a GPU case: ``"varlen"`` (``lens``: the sequences' lengths, packed
    [T, ...] with int32 ``cu_seqlens`` on the GPU) or ``"dense"`` (``lens``: (B, T), no ``cu_seqlens``)."""
    if layout == "varlen":
        T = sum(lens)
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
        return cu, (T,), len(lens)
    return None, tuple(lens), lens[0]


def ref_args(tensors, batched: bool) -> list:
    """The references' inputs: ``tensors`` as they are (dense [B, T, ...]) or with a batch of one (varlen [T, ...])."""
    return [t if batched else t[None] for t in tensors]


def v2_kernel(bwd_api, plan, key):
    """v2 for the plan's pass-3 key with ``grads_v2`` set, through the kernel cache under the key a ``grads_v2`` plan
    compiles (so an end-to-end test reuses the artifact)."""
    from cudnn.kernel_cache import kernel_cache

    k2 = replace(key, grads_v2=True)
    return kernel_cache.get_or_compile(("grads", plan._cache_key("grads", k2)), bwd_api.build_kernel("grads", k2), family=bwd_api.FAMILY)


def poisoned_outs(q, k, v, g, beta) -> dict:
    """Poisoned dq, dk, dv, dg, dbeta shaped as q, k, v, g, beta."""
    from cudnn_testing.data import poison

    return {n: poison(torch.empty_like(t)) for n, t in zip(OUT_NAMES, (q, k, v, g, beta), strict=True)}


def ab_backward(bwd_api, make_plan, inputs, h0, dht, cu, **v2_options):
    """``(v1 grads, v2 grads)`` of one backward (``make_plan(outs, dh0)``: the plan on the inputs ``q, k, v, g, beta,
    dO``; after ``compile()`` the caller's plan-key checks come back through ``ab_backward.key``) whose pass 3 is
    :class:`AB`: v1 (the plan's ``grads_v2`` set False here) writes the plan's outputs, v2 (its key with
    ``v2_options``, e.g. GDN's ``mn_operands=True``) the second poisoned set from the same arguments."""
    from cudnn_testing.data import poison

    o1, o2 = poisoned_outs(*inputs[:5]), poisoned_outs(*inputs[:5])
    dh0 = poison(torch.empty_like(h0)) if h0 is not None else None
    plan = make_plan(o1, dh0)
    plan.grads_v2 = False  # the plan's own pass 3 is version 1 (v2 is the default since sessions 10 / 11)
    plan.compile()
    key = plan.compile_key()
    assert not key.grads_v2
    v2 = v2_kernel(bwd_api, plan, replace(key, **v2_options))
    ab = AB(plan._compiled_kernel[-1], v2, o2)
    plan._compiled_kernel = (*plan._compiled_kernel[:-1], ab)
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(*inputs, *o1.values(), h0, dh0, dht, cu, workspace=ws)
    torch.cuda.synchronize()
    assert ab.calls == 1
    return key, o1, o2


def compare_v1_v2(v1: dict, v2: dict, ref: dict, low: dict, batched: bool, what: str, bitwise=lambda name: False) -> str:
    """v2's five gradients against v1's (finite: the poison overwritten; ``bitwise(name)``: max |v2 - v1| == 0 (but
    -0 / +0), else within 8e-3 max|v1| (fp32 reassociation of the sums)) and by the FlashAttention rule (factor 2,
    noise 2e-3 max|ref|) against the fp32 reference ``ref`` with the bf16 chunked reference ``low`` and with v1 as the
    low-precision baselines. Returns the report line."""
    from cudnn_testing.tolerance import assert_close_fa

    report = []
    for name in OUT_NAMES:
        a, b = v1[name].float(), v2[name].float()
        assert torch.isfinite(b).all(), f"{name}: v2 left non-finite values (poison not overwritten?)"
        diff = (a - b).abs().max().item()
        scale = a.abs().max().item()
        report.append(f"{name} max|v2-v1| {diff:.3e} (max|v1| {scale:.3e}, bitwise {torch.equal(v1[name], v2[name])})")
        if bitwise(name):  # same products, operands, roundings
            assert diff == 0.0, f"{what} {name}: v2 differs from v1 by {diff:.3e} (max|v1| {scale:.3e})"
        else:  # fp32 reassociation of the float atomics / row and column sums, one bf16 ulp of the stores
            assert diff <= 8e-3 * scale + 1e-6, f"{what} {name}: v2 differs from v1 by {diff:.3e} (max|v1| {scale:.3e})"
        r = ref[name]
        out = v2[name] if batched else v2[name][None]
        base = v1[name] if batched else v1[name][None]
        noise = 2e-3 * r.abs().max().item()
        assert_close_fa(out, r, low[name], name=f"{what} {name} (v2 vs bf16 chunked ref)", factor=2.0, noise=noise)
        assert_close_fa(out, r, base, name=f"{what} {name} (v2 vs v1)", factor=2.0, noise=noise)
    return "; ".join(report)


def check_plan_against_reference(got: dict, ref: dict, low: dict) -> None:
    """A ``grads_v2`` plan's varlen gradients (``dh0`` unbatched, the others [T, ...]) against the fp32 reference by the
    FlashAttention rule (factor 2, noise 2e-3 max|ref|, the bf16 chunked reference as the baseline)."""
    from cudnn_testing.tolerance import assert_close_fa

    for name, out in got.items():
        r = ref[name]
        assert_close_fa(out if name == "dh0" else out[None], r, low[name], name=f"grads_v2 plan {name}", factor=2.0, noise=2e-3 * r.abs().max().item())


def time_v1_v2(plan, v2, run, title: str) -> dict:
    """Per-kernel device times (torch profiler, 10 calls after 3 warm-ups) of ``run()`` (one backward of the compiled
    ``plan``) with v1 and with ``v2`` as pass 3; prints them and returns ``{"v1": us, "v2": us}`` per call (the plan's
    v1 restored; the plan compiled with ``grads_v2 = False``, its own pass 3 version 1)."""
    from torch.profiler import ProfilerActivity, profile

    assert not plan.compile_key().grads_v2, "time_v1_v2: compile the plan with grads_v2 = False (v2 is the default)"
    v1 = plan._compiled_kernel
    res = {}
    for tag, kernels in (("v1", v1), ("v2", (*v1[:-1], v2))):
        plan._compiled_kernel = kernels
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as pr:
            for _ in range(10):
                run()
            torch.cuda.synchronize()
        rows = sorted(((e.device_time_total / 10, e.key) for e in pr.key_averages() if e.device_time_total > 0), reverse=True)
        res[tag] = sum(r[0] for r in rows)
        print(f"\n== {title}, pass 3 {tag}: {res[tag]:.1f} us per call")
        for t, name in rows[:8]:
            print(f"   {t:9.1f} us  {name[:120]}")
    plan._compiled_kernel = v1
    return res
