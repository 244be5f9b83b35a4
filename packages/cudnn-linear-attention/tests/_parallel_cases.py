"""GPU test helpers of the chunk-parallel forward schedule (``schedule="parallel"``), shared by
``test_kda_parallel_gpu.py`` and ``test_gdn_parallel_gpu.py``: inputs, references, the tolerance check, one-shot
adapter runs and the test bodies, per family (``_delta_rule_cases.KDA`` / ``GDN``).

Tolerance: the FlashAttention rule of test_kda_gpu.py / test_gdn_gpu.py (``max|ours - ref| <= 2 max|lowp - ref| +
1e-3 max|ref|``, ``ref`` the fp32 token-by-token recurrence, ``lowp`` the family's chunked reference rounded to bf16
where the serial kernel rounds). Against the serial kernel: GDN's three kernels compute every operand by the same
operations in the same order (prep = the serial kernel's steps 1-5 without the state, state pass = its steps 5 and 7,
output kernel = its step 6; U stays fp32 through the workspace), so its ``o`` and final state are expected to be
bitwise equal (``check_bitwise_equal_to_serial``; a rounding-only difference shows as that test alone failing). KDA's
prep kernel computes the WY terms in another order (``ex2.approx`` decays, beta folded into the inverse): KDA is held
to twice the serial kernel's error instead (``test_kda_parallel_gpu.py``).

The opt-in kernel variants' tests (``test_kda_prep_opts_gpu.py``, ``test_gdn_prep_tc_gpu.py``, ``test_state_pass_gpu.py``)
share the rest: one execute of a plan with ``set_parallel_options`` and a poisoned workspace (:func:`execute_variant`),
the prep kernel's workspace arrays against the default prep kernel's (:func:`assert_prep_arrays_close`), the variant
test bodies, and the compile tier's prep build and PTX instruction count.

Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import torch

LENGTHS = [1, 64, 65, 0, 700, 3, 128, 1500]  # 1-token, one chunk, one past, empty, long (24 chunks), ...


def inputs(fam, lead, H, Hk, D, l2norm, n_seqs, regime="weak"):
    import torch.nn.functional as F

    q = torch.randn(*lead, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(*lead, Hk, D, device="cuda")
    k = (k if l2norm else F.normalize(k, dim=-1)).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    x = torch.randn(*fam.gate_shape(lead, H, D), device="cuda")
    g = F.logsigmoid(x) / 8 if regime == "weak" else -5.0 * torch.sigmoid(x)
    beta = torch.rand(*lead, H, device="cuda")
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5
    return q, k, v, g, beta, h0


def refs(fam, q, k, v, g, beta, h0, l2norm, cu, batched):
    from cudnn_testing import reference_linear_attention as R

    lowp_ref = R.kimi_delta_attention_chunked_lowp_ref if fam.gate_per_key else R.gated_delta_net_chunked_lowp_ref
    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu)
    ref_o, ref_s = R.gated_delta_rule_recurrent_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    low_o, low_s = lowp_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    if not batched:
        ref_o, low_o = ref_o[0], low_o[0]
    return ref_o, ref_s, low_o, low_s


def check(out, ref, lowp, name):
    from cudnn_testing.tolerance import assert_close_fa

    assert_close_fa(out, ref, lowp, name=name, factor=2.0, noise=1e-3 * ref.abs().max().item())


def run(fam, schedule, q, k, v, g, beta, h0, cu, l2norm, final=True, knobs=None, variant=None):
    """``(o, final_state)`` of one adapter execute (poisoned outputs; workspace sized for this batch); ``knobs``:
    adapter tuning attributes set before compile (``parallel_state_stages``, GDN's ``parallel_prefetch``, ...);
    ``variant``: a ``set_parallel_options`` name or dict (parallel schedule only)."""
    from cudnn_testing.data import poison

    o = poison(torch.empty_like(v))
    n = (cu.shape[0] - 1) if cu is not None else (q.shape[0] if q.dim() == 4 else 1)
    ht = poison(torch.empty(n, v.shape[-2], v.shape[-1], q.shape[-1], device="cuda")) if final else None
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule=schedule)
    for name, value in (knobs or {}).items():
        setattr(plan, name, value)
    if variant:
        from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

        set_parallel_options(plan, variant)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda") if schedule == "parallel" else None
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    return o, ht


def check_varlen_matches_recurrence(fam, D, l2norm, regime, knobs=None):
    """1-token, one-chunk, one-past-a-chunk, empty and long sequences in one packed batch, GVA (4 v heads over 2 q/k
    heads), initial and final states; an empty sequence passes its state through. ``knobs``: adapter tuning attributes."""
    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(LENGTHS, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(LENGTHS),), 4, 2, D, l2norm, len(LENGTHS), regime)
    o, ht = run(fam, "parallel", q, k, v, g, beta, h0, cu, l2norm, knobs=knobs)
    ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g, beta, h0, l2norm, cu, False)
    check(o, ref_o, low_o, "o")
    check(ht, ref_s, low_s, "final_state")
    assert torch.equal(ht[3], h0[3])


def check_bitwise_equal_to_serial(fam, D, l2norm, regime, variant=None):
    """The parallel plan (``variant``: a ``set_parallel_options`` name, e.g. GDN's ``gdn-prep-base``, whose prep kernel
    forms every operand as the serial kernel does, with the default state pass and output kernel) equal to the serial
    kernel bit for bit on the varlen batch."""
    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(LENGTHS, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(LENGTHS),), 4, 2, D, l2norm, len(LENGTHS), regime)
    o_par, ht_par = run(fam, "parallel", q, k, v, g, beta, h0, cu, l2norm, variant=variant)
    o_ser, ht_ser = run(fam, "serial", q, k, v, g, beta, h0, cu, l2norm)
    do = (o_par.float() - o_ser.float()).abs().max().item()
    ds = (ht_par - ht_ser).abs().max().item()
    assert torch.equal(o_par, o_ser) and torch.equal(ht_par, ht_ser), f"max |parallel - serial|: o {do}, final_state {ds}"


def check_dense_batch_and_thd_without_initial_state(fam):
    """Dense [B, L, H, D] (B = 2, L = 300: the dense chunk-slot table), and a long THD sequence without cu_seqlens
    (4096 tokens, 64 chunks through the state pass); final state only."""
    q, k, v, g, beta, _ = inputs(fam, (2, 300), 2, 2, 128, True, 2)
    o, ht = run(fam, "parallel", q, k, v, g, beta, None, None, True)
    ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g, beta, None, True, None, True)
    check(o, ref_o, low_o, "o dense")
    check(ht, ref_s, low_s, "final_state dense")
    q, k, v, g, beta, _ = inputs(fam, (4096,), 2, 2, 128, True, 1)
    o, ht = run(fam, "parallel", q, k, v, g, beta, None, None, True)
    ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g, beta, None, True, None, False)
    check(o, ref_o, low_o, "o thd")
    check(ht, ref_s, low_s, "final_state thd")


def check_one_plan_rebinds_new_totals(fam):
    """One adapter, batches with other token totals and sequence counts (no re-plan); the workspace is sized per batch
    by ``scratch_workspace_bytes(T, N)``."""
    from cudnn_testing.data import cu_seqlens, poison

    H, D = 2, 128

    def batch(lengths):
        q, k, v, g, beta, h0 = inputs(fam, (sum(lengths),), H, H, D, True, len(lengths))
        return q, k, v, g, beta, poison(torch.empty_like(v)), h0, poison(torch.empty_like(h0)), cu_seqlens(lengths, "cuda")

    first = batch([100, 30])
    plan = fam.adapter_class()(*first[:6], use_qk_l2norm_in_kernel=True, initial_state=first[6], final_state=first[7], cu_seqlens=first[8], schedule="parallel")
    plan.compile()
    for lengths in ([100, 30], [1, 1, 1, 513], [64] * 9):
        q, k, v, g, beta, o, h0, ht, cu = batch(lengths)
        ws = torch.empty(plan.scratch_workspace_bytes(sum(lengths), len(lengths)), dtype=torch.uint8, device="cuda")
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
        torch.cuda.synchronize()
        ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g, beta, h0, True, cu, False)
        check(o, ref_o, low_o, f"o {lengths}")
        check(ht, ref_s, low_s, f"final_state {lengths}")


def check_execute_never_syncs_or_allocates_and_replays_under_capture(fam, variant=None):
    """The parallel plan (``variant``: a ``set_parallel_options`` dict, None = the default) executes with no host sync,
    no allocation (three executes), and a CUDA-graph replay equal to eager (K = 128, varlen, GVA, h0 / ht)."""
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing import detectors
    from cudnn_testing.data import cu_seqlens

    lengths = [1, 700, 64, 300]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(lengths),), 4, 2, 128, True, len(lengths))
    o = torch.empty_like(v)
    ht = torch.empty_like(h0)
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    if variant:
        set_parallel_options(plan, variant)
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    args = (q, k, v, g, beta, o, h0, ht, cu)
    plan.execute(*args, workspace=ws)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args, workspace=ws), repeats=3)
    detectors.assert_capture_matches_eager(lambda: plan(*args, workspace=ws), [o, ht])


def check_options_bitwise_equal_to_default(fam, opts, D, l2norm, g_dtype, baseline=None):
    """The parallel schedule's tuning knobs (adapter attributes ``opts``: GDN's ``parallel_prefetch`` -- the prep kernel
    issues every global read of a chunk at once --, ``parallel_state_stages`` = 3 -- the state pass fetches two chunks
    ahead --, GDN's ``parallel_prep_two_per_sm`` -- its prep kernel at two CTAs per SM, the solve's scratch over Q / P)
    change only when and where things happen: o and the final state equal the default parallel schedule's bit for bit on
    the varlen batch (1-token, empty, long sequences; GVA; initial and final states), g in ``g_dtype``. ``baseline``: a
    ``set_parallel_options`` name the reference plan takes (GDN's prep knobs select the one-warpgroup prep kernel:
    their reference is ``gdn-prep-base``), None = the default plan."""
    from cudnn_testing.data import cu_seqlens, poison

    cu = cu_seqlens(LENGTHS, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(LENGTHS),), 4, 2, D, l2norm, len(LENGTHS), "safe_gate")
    g = g.to(g_dtype)
    outs = []
    for knobs in ({}, opts):
        o = poison(torch.empty_like(v))
        ht = poison(torch.empty_like(h0))
        plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
        for name, value in knobs.items():
            setattr(plan, name, value)
        if baseline and not knobs:
            from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

            set_parallel_options(plan, baseline)
        plan.compile()
        ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
        torch.cuda.synchronize()
        outs.append((o, ht))
    (o0, s0), (o1, s1) = outs
    assert torch.isfinite(o0.float()).all() and torch.isfinite(s0).all()
    do = (o0.float() - o1.float()).abs().max().item()
    ds = (s0 - s1).abs().max().item()
    assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{opts}: max |option - default|: o {do}, final_state {ds}"


# ---- opt-in kernel variants: one execute, the prep workspace arrays, the variant test bodies ------------------------


def execute_variant(fam, variant, q, k, v, g, beta, h0, cu, l2norm, final=True):
    """``(o, final_state, workspace)`` of one parallel-schedule execute (``variant``: a ``set_parallel_options`` dict,
    None = the default plan); poisoned outputs and a workspace of all-ones bytes (NaN in bf16 and fp32) sized for the
    batch."""
    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing.data import poison

    o = poison(torch.empty_like(v))
    n = (cu.shape[0] - 1) if cu is not None else (q.shape[0] if q.dim() == 4 else 1)
    ht = poison(torch.empty(n, v.shape[-2], v.shape[-1], q.shape[-1], device="cuda")) if final else None
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    if variant:
        set_parallel_options(plan, variant)
    plan.compile()
    ws = torch.full((plan.scratch_workspace_bytes(),), 0xFF, dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    torch.cuda.synchronize()
    return o, ht, ws


def prep_arrays(ws, slots, heads, d, names):
    """The workspace arrays ``names`` of ``ws`` as {name: [slots, heads, n] fp32}."""
    from cudnn.linear_attention._host.chunk_parallel import _ARRAYS
    from cudnn.workspace import ws_align

    out, offset = {}, 0
    for name, size, per in _ARRAYS:
        nbytes = slots * heads * per(d) * size
        if name in names:
            dt = torch.bfloat16 if size == 2 else torch.float32
            out[name] = ws[offset : offset + nbytes].view(dt).view(slots, heads, -1).float()
        offset += ws_align(nbytes)
    return out


def active_slots(lengths):
    """The varlen chunk slots that hold a chunk (``_device/chunk_parallel.py``: sequence n owns bos // 64 + n on)."""
    active, bos = [], 0
    for n, length in enumerate(lengths):
        base = bos // 64 + n
        active += list(range(base, base + -(-length // 64)))
        bos += length
    return active


def assert_prep_arrays_close(ws_default, ws_opt, lengths, heads, d, names, bitwise=(), label="option"):
    """Every prep array ``names`` of ``ws_opt`` within 2 % of the default's scale on the active slots of the varlen
    batch ``lengths``, those in ``bitwise`` bit for bit; the failure message lists every array's error."""
    slots = sum(lengths) // 64 + len(lengths)
    idx = torch.tensor(active_slots(lengths), device="cuda")
    a_all, b_all = prep_arrays(ws_default, slots, heads, d, names), prep_arrays(ws_opt, slots, heads, d, names)
    report, bad = [], []
    for name in names:
        a, b = a_all[name][idx], b_all[name][idx]
        err = (a - b).abs().max().item()
        tol = 0.0 if name in bitwise else 2e-2 * a.abs().max().item() + 1e-6
        report.append(f"{name}: max|{label} - default| {err:.3e} (tolerance {tol:.3e}, max|default| {a.abs().max().item():.3e})")
        if not (torch.isfinite(a).all() and torch.isfinite(b).all() and err <= tol):
            bad.append(name)
    assert not bad, f"{label} prep arrays {bad} differ from the default prep kernel's: " + "; ".join(report)


def check_prep_variant(fam, variant, D, l2norm, regime, g_dtype, beta_dtype, names, bitwise=(), label="option", baseline=None):
    """The prep-kernel ``variant`` on the varlen batch (1-token, empty, long sequences; GVA; h0 / ht; g / beta in
    ``g_dtype`` / ``beta_dtype``): its workspace arrays against the default prep kernel's
    (:func:`assert_prep_arrays_close`), o and the final state by the FlashAttention rule against the fp32 recurrence
    and within twice the default schedule's error; the empty sequence passes its state through. ``baseline``: the
    reference plan's ``set_parallel_options`` variant (GDN: ``gdn-prep-base``, the one-warpgroup prep kernel, since
    the default is the restructured one), None = the default plan."""
    from cudnn_testing.data import cu_seqlens
    from cudnn_testing.tolerance import assert_close_fa

    cu = cu_seqlens(LENGTHS, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(LENGTHS),), 4, 2, D, l2norm, len(LENGTHS), regime)
    g, beta = g.to(getattr(torch, g_dtype)), beta.to(getattr(torch, beta_dtype))
    o0, s0, ws0 = execute_variant(fam, baseline, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1, ws1 = execute_variant(fam, variant, q, k, v, g, beta, h0, cu, l2norm)
    assert_prep_arrays_close(ws0, ws1, LENGTHS, 4, D, names, bitwise, label)
    ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g.float(), beta.float(), h0, l2norm, cu, False)
    check(o1, ref_o, low_o, f"o {variant}")
    check(s1, ref_s, low_s, f"final_state {variant}")
    assert_close_fa(o1, ref_o, o0, name=f"o {variant} vs default", factor=2.0, noise=1e-3 * ref_o.abs().max().item())
    assert_close_fa(s1, ref_s, s0, name=f"final_state {variant} vs default", factor=2.0, noise=1e-3 * ref_s.abs().max().item())
    assert torch.equal(s1[3], h0[3])  # the empty sequence passes its state through


def check_prep_bitwise(fam, baseline, variant, D, l2norm, regime, g_dtype, names, label):
    """The plan of ``variant`` against the plan of ``baseline`` (``set_parallel_options`` variants; None = the default
    plan) on the varlen batch (1-token, empty, long sequences; GVA; h0 / ht; g in ``g_dtype``): the prep arrays
    ``names`` and o and the final state bit for bit; ``variant``'s o and final state by the FlashAttention rule against
    the fp32 recurrence; the empty sequence passes its state through. ``label`` names the pair in the messages."""
    from cudnn_testing.data import cu_seqlens

    cu = cu_seqlens(LENGTHS, "cuda")
    q, k, v, g, beta, h0 = inputs(fam, (sum(LENGTHS),), 4, 2, D, l2norm, len(LENGTHS), regime)
    g = g.to(getattr(torch, g_dtype))
    o0, s0, ws0 = execute_variant(fam, baseline, q, k, v, g, beta, h0, cu, l2norm)
    o1, s1, ws1 = execute_variant(fam, variant, q, k, v, g, beta, h0, cu, l2norm)
    assert_prep_arrays_close(ws0, ws1, LENGTHS, 4, D, names, names, label=label)
    do = (o0.float() - o1.float()).abs().max().item()
    ds = (s0 - s1).abs().max().item()
    assert torch.equal(o0, o1) and torch.equal(s0, s1), f"{label}: max |difference|: o {do}, final_state {ds}"
    ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g.float(), beta, h0, l2norm, cu, False)
    check(o1, ref_o, low_o, f"o {label}")
    check(s1, ref_s, low_s, f"final_state {label}")
    assert torch.equal(s1[3], h0[3])  # the empty sequence passes its state through


def check_variant_dense_and_long_thd(fam, dense_variant, dense_d, long_variant):
    """``dense_variant`` at K = ``dense_d`` on a dense [B, L] batch (B = 2, L = 300: the dense slot table; no L2 norm,
    bf16 g), and ``long_variant`` at K = 128 on one 4096-token THD sequence (64 chunks through the state pass, L2 norm),
    no initial state: the FlashAttention rule against the fp32 recurrence."""
    for lead, batched, variant, D, l2norm in (((2, 300), True, dense_variant, dense_d, False), ((4096,), False, long_variant, 128, True)):
        q, k, v, g, beta, _ = inputs(fam, lead, 2, 2, D, l2norm, lead[0] if batched else 1, "safe_gate")
        if not l2norm:
            g = g.to(torch.bfloat16)
        o, ht, _ = execute_variant(fam, variant, q, k, v, g, beta, None, None, l2norm)
        ref_o, ref_s, low_o, low_s = refs(fam, q, k, v, g.float(), beta, None, l2norm, None, batched)
        check(o, ref_o, low_o, f"o {variant} {lead}")
        check(ht, ref_s, low_s, f"final_state {variant} {lead}")


# ---- compile tier (CPU, CUTE_DSL_ARCH=sm_90a) -----------------------------------------------------------------------


def compile_prep_ptx(kernel_t, key, tmp_path, g_align=2):
    """PTX text of the prep kernel class ``kernel_t`` built for ``key`` directly (not through the kernel cache, as
    ``_host/chunk_parallel.py::compile_parallel`` builds it; ``g`` assumed ``g_align``-byte aligned), dumped under
    ``tmp_path``."""
    import cuda.bindings.driver as cuda
    import cutlass.cute as cute
    from cutlass import Float32, Int32, Int64

    from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
    from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
    from cudnn_testing.compile_only import keep_artifacts

    ptrs = [fp("BFloat16", 16), fp("BFloat16", 16), fp("BFloat16", 16), fp(key.g_dtype, g_align), fp(key.beta_dtype, 2), fp("Int32", 4) if key.varlen else None]
    with keep_artifacts(tmp_path) as ptx:
        cute.compile(kernel_t(key), *ptrs, *fake_workspace_pointers(), *[Int32(8)] * 7, Float32(1.0), *[(Int64(8), Int64(8))] * 3, cuda.CUstream(0))
        return ptx()


def ptx_instructions(ptx: str) -> int:
    """PTX instruction lines (``op ...;``, not labels, directives or braces)."""
    import re

    return sum(1 for line in ptx.splitlines() if re.match(r"\s*(@!?%p\d+\s+)?[a-z][\w.]*\s.*;\s*$", line))
