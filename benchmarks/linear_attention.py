"""cudnn.linear_attention benchmark: causal_conv1d forward / backward / decode update in GB/s, and the
Gated DeltaNet forward (chunked, K = V = 128) in milliseconds and GB/s of minimum traffic.

Providers, all on the same inputs in one process: ours (cudnn.linear_attention), ours replayed from a
CUDA graph (no host overhead), the adapter called directly with the DSL's launch entry ("adapter") and with the
tvm-ffi entry ("adapter+tvmffi": the launch-route A/B, forward and update), fla-core's Triton causal_conv1d when importable, and a torch F.conv1d
(cuDNN) baseline on the same [B, T, D] storage (dense cases only). Issue 7's forward A/B: "ours-slowhost" (the public op
with session 5's host path: DSL launch entry, custom-op dispatch, full per-call validation; ``ours`` has the tvm-ffi route,
the direct eager call and the memoized validation since session 6), and the forward's grid: ``ours`` runs the default
run grid (``grid_ctas`` None: 4 x SMs, 528 CTAs on an H200, each one contiguous token run), "ours-cta64" the public op
with the 64-token CTAs (``api.FWD_GRID_CTAS_DEFAULT = 0``: the default until session 6) and "ours-cta64+graph" that
kernel alone (the adapter with ``grid_ctas = 0``, replayed from a CUDA graph: compare with "ours+graph"); session 9's
"ours-pf<P>+graph" (P = 1, 2, 4, 8): the run grid with ``l2_prefetch = P`` (the CTA asks L2 for the token group P groups
ahead of its registers' next one, ``cp.async.bulk.prefetch.L2``), "ours-steady+graph" with ``steady = True`` (groups of
4 tokens inside one sequence skip the per-token sequence walk and history branches), "ours-steady-pf<P>+graph" both,
all kernel-only, and "ours-steady-pf2" the public op eager with both; "ours-chunk<C>+graph" (C = 8, 16,
32; dense and varlen cases): the run grid with ``chunk = C`` (CTA row j walks the C-token chunks j, j + n_runs, j + 2 n_runs,
... instead of one contiguous run; the default steady path), kernel-only, and "ours-runs+graph" with ``chunk = 0`` (one
contiguous run per CTA row: the dense default until session 15, when ``ours+graph`` became chunk 8 on dense cases);
"ours-final-fused+graph" / "ours-final-sep+graph" / "ours-final-tail+graph" / "ours-final-loop+graph" (session 28: the
fused final states after the token loop, ``final_tail``, and inside it) (the states cases only): the forward kernel writes the final states
(``final_fused = True``, the default since session 16) / the separate final-states kernel after it, kernel-only;
"ours-elemfinal+graph" (session 26, the states cases): the final states element by element (``final_contiguous =
False``; the default writes contiguous final states with vector stores), kernel-only; "ours-initonly+graph" /
"ours-finalonly+graph" (session 26, the states case only): only the initial states in / only
the final states out, kernel-only, next to the "fwd batch B16 T16k D4096" case (the same dense batch, no states; session
27: "fwd batch B512 T16k D4096" and "fwd varlen256 T16k D4096" beside their states cases); "ours-noseed+graph" /
"ours-seed-elem+graph" / "ours-seed+graph" (session 27, the dense states cases): without the seeded starts
(``seeded_starts = False``: a chunk that starts a sequence reads its initial state inside the token math), with them by
element loads (``initial_contiguous = False``), and with them whatever the sequence length (``seeded_starts = True``),
kernel-only;
"ours-warpwalk+graph" / "ours-chunk8-warpwalk+graph" (the varlen cases only): ``warp_walk = True`` (the warp walks
``cu_seqlens`` together: a window of entries in its lanes) on the contiguous runs / on chunk 8, kernel-only (the varlen
default without states since session 29: "ours-nowalk+graph" is the one before, ``warp_walk = False``);
"ours-upd-slowhost" the decode update with session
8's host path (custom-op dispatch, DSL entry, full validation; ``ours`` has session 9's direct call, tvm-ffi route and
memoized validation). ``--cases`` keeps named cases and ``--out``
names the table (conv1d only), e.g. ``conv1d --cases "fwd T16k D4096,fwd T8k D8192,fwd T32k D4096" --out
linear_attention_conv1d_s9``.
"copy" is the forward's ceiling under the same protocol: torch's device-to-device copy of x into y (the same bytes).
``conv1d --quick`` runs those forward shapes in 3 interleaved rounds (``linear_attention_quick.{md,csv,png}``).

Byte convention (minimum memory traffic, "effective"): forward reads x and writes y once
(2 * T * D * itemsize); backward reads x and dy and writes dx (3 * T * D * itemsize); update reads x,
writes out and reads and writes the state (B * D * (2 + 2 (W - 1)) * itemsize). Weights, bias and
metadata are not counted. Run:

    source ci/gpu_env.sh; python3 benchmarks/linear_attention.py      # writes docs/benchmarks/linear_attention.{md,csv,png}
    python3 benchmarks/linear_attention.py gdn                        # GDN only: docs/benchmarks/linear_attention_gdn.{md,csv,png}
    python3 benchmarks/linear_attention.py kda                        # KDA only: docs/benchmarks/linear_attention_kda.{md,csv,png}
    python3 benchmarks/linear_attention.py conv1d                     # conv1d only
    python3 benchmarks/linear_attention.py gdn --quick                # one shape (T 8k, H 16), < 60 s incl. compile / autotune
    python3 benchmarks/linear_attention.py kda --quick --providers ours,fla

Every (case, provider) prints a progress line as soon as it is built and warmed (the first call, which
includes our compile or fla's Triton autotuning, is timed and printed separately); the table is printed
at the end. ``--quick`` writes ``<name>_quick.{md,csv,png}`` so a smoke run never overwrites the full table.

GDN forward (issue 7's shapes: B = 1, T in {4k, 8k, 32k}, H in {16, 32, 64}, K = V = 128, plus a varlen mix of
64 sequences): providers ours (``cudnn.linear_attention.gdn.api.gated_delta_net``, eager), ours+graph (the
same call replayed from a CUDA graph), fla (fla-core's Triton ``chunk_gated_delta_rule``), fla+graph, and
ours-parallel(+graph): the adapter with the opt-in ``schedule="parallel"`` (the chunk-parallel kernels through a
caller workspace; KDA too: its prep kernel is the restructured one, ``kda/chunk_parallel_prep_kernel.py``; since
session 8 the default plan is prep + the fused state pass and output, ``fso-w2``, where the plan-time rule of
``_host/chunk_parallel.py::fused_schedule_wins`` picks it -- the H 64 cases on an H200 -- and the three kernels below
it; since session 31 those three with the output kernel beside the state pass, ``ovl-stsm``, and the fused pair
``fso-w2-stsm``), ours-par-op: the public op with ``schedule="parallel"`` (workspace allocated by the op), ours-parallel-s3
(three-stage state pass; the three-kernel schedule: the knob sets the rule aside), GDN's ours-parallel-pf (its prep
kernel's ``prefetch`` option), ours-parallel-2cta (its prep at two CTAs per SM) and ours-parallel-all (the three
combined), and ours-par-<name> for every named variant of ``_host/chunk_parallel.py::PARALLEL_VARIANTS`` whose prep
fields the family's prep key has (e.g. ours-par-three: the three kernels whatever the rule says; ours-par-kp7 /
ours-par-gdn-prep7: the prep without the session-8 staged stores; ours-par-fso: the one-warpgroup fused kernel). Same
inputs for all: bf16 q/k/v, fp32 g = logsigmoid(N(0,1)) / 8 and beta ~ U(0,1), q/k L2-normalised in the kernel,
no initial state, no final state. Byte convention (the minimum traffic: the roofline's numerator): q, k, v read
and o written once in bf16, g and beta read once in fp32: T H (2 K + 2 V) bf16 elements and 2 T H fp32 ones, counted as
``T * H * (2 * K * 2 + 2 * V * 2 + 8)``; the achieved fraction of the roofline is GB/s over the device's HBM
bandwidth (about 4.8 TB/s on an H200).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Case, Provider, Unsupported, capture, run_benchmark  # noqa: E402

WIDTH = 4


def _cases():
    cases = []
    for t, d in ((4096, 4096), (16384, 4096), (32768, 4096), (8192, 8192)):
        cases.append(Case(f"fwd T{t // 1024}k D{d}", {"op": "fwd", "t": t, "d": d, "varlen": False}, bytes=2 * t * d * 2))
    cases.append(Case("fwd varlen64 T32k D4096", {"op": "fwd", "t": 32768, "d": 4096, "varlen": True}, bytes=2 * 32768 * 4096 * 2))
    cases.append(Case("fwd varlen1tok T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": "ones"}, bytes=2 * 16384 * 4096 * 2))

    # the states cases: initial states in and final states out, [N, 4096, 3] bf16 each; since session 27 their bytes count
    # (read once, written once: 2 N D (W - 1) 2 more; before, left out: 0.8 / 25.2 / 12.6 MB of the 268 MB below)
    def states(n):
        return 2 * 16384 * 4096 * 2 + 2 * n * 4096 * (WIDTH - 1) * 2

    # dense [16, 1024, 4096]
    cases.append(Case("fwd states B16 T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": False, "batch": 16}, bytes=states(16)))
    # session 26: the states batch with 512 sequences of 32 tokens; session 27: 128 of 128 and 256 of 64 (where the seeded
    # starts' default length, ``FWD_SEEDED_MAX_LEN``, turns)
    for nb in (512, 128, 256):
        cases.append(Case(f"fwd states B{nb} T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": False, "batch": nb}, bytes=states(nb)))
    # session 26: 256 random lengths over T16k: serving's continuous-batching prefill with conv states
    cases.append(Case("fwd states varlen256 T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": 256, "states": True}, bytes=states(256)))
    # session 28: the same at 16, 64 and 1024 random lengths (1024, 256 and 16 tokens on average)
    for n in (16, 64, 1024):
        cases.append(Case(f"fwd states varlen{n} T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": n, "states": True}, bytes=states(n)))
    # the same batches without states (session 26: what the states cost, apart from the sequences; session 27: B512, varlen256)
    for nb in (16, 512):
        cases.append(
            Case(f"fwd batch B{nb} T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": False, "batch": nb, "states": False}, bytes=2 * 16384 * 4096 * 2)
        )
    # session 27: more, shorter random sequences over T16k (16 and 4 tokens on average): where a varlen call's per-call
    # choice between contiguous runs and chunks (``FWD_VARLEN_CHUNK_MIN_LEN``) turns
    for n in (256, 1024, 4096):
        cases.append(Case(f"fwd varlen{n} T16k D4096", {"op": "fwd", "t": 16384, "d": 4096, "varlen": n, "states": False}, bytes=2 * 16384 * 4096 * 2))
    for t, d in ((16384, 4096),):
        cases.append(Case(f"bwd T{t // 1024}k D{d}", {"op": "bwd", "t": t, "d": d, "varlen": False}, bytes=3 * t * d * 2))
    cases.append(Case("bwd varlen64 T32k D4096", {"op": "bwd", "t": 32768, "d": 4096, "varlen": True}, bytes=3 * 32768 * 4096 * 2))
    for b, d in ((64, 8192), (512, 8192)):
        cases.append(Case(f"update B{b} D{d}", {"op": "update", "b": b, "d": d}, bytes=b * d * (2 + 2 * (WIDTH - 1)) * 2))
    return cases


def _lengths(total, kind):
    import torch

    if kind == "ones":
        return [1] * total
    n = 64 if kind is True else kind  # True: 64 random lengths; an int: that many
    g = torch.Generator().manual_seed(0)
    cuts = sorted(torch.randperm(total - 1, generator=g)[: n - 1].add(1).tolist())
    return [b - a for a, b in zip([0] + cuts, cuts + [total], strict=True)]


def _inputs(case):
    import torch

    from cudnn_testing.data import cu_seqlens

    p = case.params
    torch.manual_seed(0)
    if p["op"] == "update":
        x = torch.randn(p["b"], p["d"], device="cuda", dtype=torch.bfloat16)
        state = torch.randn(p["b"], p["d"], WIDTH - 1, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(p["d"], WIDTH, device="cuda", dtype=torch.bfloat16)
        return dict(x=x, state=state, w=w, b=torch.randn(p["d"], device="cuda", dtype=torch.bfloat16))
    t, d = p["t"], p["d"]
    nb = p.get("batch", 1)
    x = torch.randn(nb, t // nb, d, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(d, WIDTH, device="cuda", dtype=torch.bfloat16) * 0.5
    b = torch.randn(d, device="cuda", dtype=torch.bfloat16)
    cu = cu_seqlens(_lengths(t, p["varlen"]), "cuda") if p["varlen"] else None
    out = dict(x=x, w=w, b=b, cu=cu, dy=torch.randn_like(x), init=None, final=None)
    if p.get("states", "batch" in p):  # the states cases: initial states in, final states out
        ns = cu.shape[0] - 1 if cu is not None else nb
        out["init"] = torch.randn(ns, d, WIDTH - 1, device="cuda", dtype=torch.bfloat16)
        out["final"] = torch.empty(ns, d, WIDTH - 1, device="cuda", dtype=torch.bfloat16)
    return out


def _grad_fn(fwd, inp):
    import torch

    x = inp["x"].requires_grad_()
    w = inp["w"].requires_grad_()
    b = inp["b"].requires_grad_()
    y = fwd(x, w, b)
    return lambda: torch.autograd.grad(y, (x, w, b), inp["dy"], retain_graph=True)


def _make_ours(case):
    from cudnn.linear_attention import causal_conv1d, causal_conv1d_update

    inp = _inputs(case)
    op = case.params["op"]
    if op == "update":
        return lambda: causal_conv1d_update(inp["x"], inp["state"], inp["w"], inp["b"], "silu")
    cu = inp["cu"]

    def fwd(x, w, b):
        if inp["init"] is not None:
            return causal_conv1d(x[0] if cu is not None else x, w, b, "silu", cu_seqlens=cu, initial_states=inp["init"], output_final_states=True)[0]
        return causal_conv1d(x[0] if cu is not None else x, w, b, "silu", cu_seqlens=cu)

    if op == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    inp["dy"] = inp["dy"][0] if cu is not None else inp["dy"]
    return _grad_fn(fwd, inp)


def _make_ours_graph(case):
    fn = _make_ours(case)
    if case.params["op"] == "bwd":
        raise Unsupported("autograd.grad is not graph-captured here")
    return _warm_and_capture(fn)


def _make_ours_adapter(tvm_ffi):
    """Launch-route A/B: the APIBase adapter called directly (no custom-op dispatch), with the DSL's own entry or the
    tvm-ffi one (``plan.tvm_ffi``); forward and decode update."""

    def make(case):
        from cudnn.linear_attention.conv1d.api import CausalConv1d, CausalConv1dUpdate

        inp = _inputs(case)
        op = case.params["op"]
        if op == "update":
            out = inp["x"].new_empty(inp["x"].shape)
            plan = CausalConv1dUpdate(inp["x"], inp["state"], inp["w"], out, inp["b"], activation="silu")
            plan.tvm_ffi = tvm_ffi
            plan.compile()
            return lambda: plan.execute(inp["x"], inp["state"], inp["w"], out, inp["b"])
        if op != "fwd":
            raise Unsupported("forward and update only")
        cu = inp["cu"]
        x = inp["x"][0] if cu is not None else inp["x"]
        y = x.new_empty(x.shape)
        plan = CausalConv1d(x, inp["w"], y, inp["b"], cu, inp["init"], inp["final"], activation="silu")
        plan.tvm_ffi = tvm_ffi
        plan.compile()
        return lambda: plan.execute(x, inp["w"], y, inp["b"], cu, inp["init"], inp["final"])

    return make


def _make_ours_op_options(tvm_ffi=True, fast=True, grid_ctas=None, steady=False, l2_prefetch=0):
    """The public ``causal_conv1d`` (eager) with the forward op's plan options set around each call
    (``torch_op.FWD_TVM_FFI``: launch route; ``fast``: the host fast paths ``torch_op.DIRECT_EAGER`` and
    ``api.FAST_HOST_DEFAULT``, both on by default since session 6; ``grid_ctas``: the forward's grid
    ``api.FWD_GRID_CTAS_DEFAULT``, None = the default run grid, 0 = the 64-token CTAs; ``steady`` / ``l2_prefetch``: the
    session-9 kernel options ``api.FWD_STEADY_DEFAULT`` / ``api.FWD_L2_PREFETCH_DEFAULT``). Forward only."""

    def make(case):
        if case.params["op"] != "fwd":
            raise Unsupported("forward option")
        from cudnn.linear_attention.conv1d import api, torch_op

        fn = _make_ours(case)

        names = ("FAST_HOST_DEFAULT", "FWD_GRID_CTAS_DEFAULT", "FWD_STEADY_DEFAULT", "FWD_L2_PREFETCH_DEFAULT")
        values = (fast, grid_ctas, steady, l2_prefetch)

        def call():
            saved = torch_op.FWD_TVM_FFI, torch_op.DIRECT_EAGER, [getattr(api, n) for n in names]
            torch_op.FWD_TVM_FFI, torch_op.DIRECT_EAGER = tvm_ffi, fast
            for n, v in zip(names, values, strict=True):
                setattr(api, n, v)
            try:
                return fn()
            finally:
                torch_op.FWD_TVM_FFI, torch_op.DIRECT_EAGER = saved[0], saved[1]
                for n, v in zip(names, saved[2], strict=True):
                    setattr(api, n, v)

        return call

    return make


def _make_ours_update_slowhost(case):
    """The public ``causal_conv1d_update`` with session 8's host path (custom-op dispatch, DSL launch entry, full
    validation per call: ``torch_op.UPDATE_DIRECT_EAGER`` / ``UPDATE_TVM_FFI`` / ``api.UPDATE_FAST_HOST_DEFAULT`` off);
    ``ours`` has session 9's (all three on). Update only."""
    if case.params["op"] != "update":
        raise Unsupported("update host-path A/B")
    from cudnn.linear_attention.conv1d import api, torch_op

    fn = _make_ours(case)
    names = ("UPDATE_DIRECT_EAGER", "UPDATE_TVM_FFI")

    def call():
        saved = [getattr(torch_op, n) for n in names], api.UPDATE_FAST_HOST_DEFAULT
        for n in names:
            setattr(torch_op, n, False)
        api.UPDATE_FAST_HOST_DEFAULT = False
        try:
            return fn()
        finally:
            for n, v in zip(names, saved[0], strict=True):
                setattr(torch_op, n, v)
            api.UPDATE_FAST_HOST_DEFAULT = saved[1]

    return call


def _make_ours_kernel_variant(**fields):
    """Kernel A/B: the forward adapter (tvm-ffi entry) with plan options set (``grid_ctas = 0``: the 64-token CTAs;
    ``steady``, ``l2_prefetch``, ``chunk``; options left out keep their defaults, resolved by ``compile_key()``: the
    default chunk only where valid), replayed from a CUDA graph, so the column is kernel time (compare with ``ours+graph``)."""

    def make(case, keep_init=True, keep_final=True):
        from cudnn.linear_attention.conv1d.api import CausalConv1d

        if case.params["op"] != "fwd":
            raise Unsupported("forward-only kernel variant")
        inp = _inputs(case)
        cu = inp["cu"]
        x = inp["x"][0] if cu is not None else inp["x"]
        y = x.new_empty(x.shape)
        init = inp["init"] if keep_init else None
        final = inp["final"] if keep_final else None
        plan = CausalConv1d(x, inp["w"], y, inp["b"], cu, init, final, activation="silu")
        plan.tvm_ffi = True
        for name, value in fields.items():
            setattr(plan, name, value)
        plan.check_support()
        plan.compile()
        return _graphed(lambda case: lambda: plan.execute(x, inp["w"], y, inp["b"], cu, init, final))(case)

    return make


def _make_ours_warp_walk_variant(**fields):
    """Warp-walk A/B (``warp_walk``): :func:`_make_ours_kernel_variant` with ``warp_walk = True`` and ``fields`` (e.g.
    ``chunk = 8``) on the varlen cases only (dense plans have no ``cu_seqlens`` walk)."""
    variant = _make_ours_kernel_variant(warp_walk=True, **fields)

    def make(case):
        if not case.params.get("varlen"):
            raise Unsupported("warp-walk A/B: the varlen cases only")
        return variant(case)

    return make


def _on_states_cases(variant, what):
    """``variant`` on the states cases only (initial states in, final states out; the other cases declare no states)."""

    def make(case):
        if not case.params.get("states", "batch" in case.params):
            raise Unsupported(f"{what}: the states cases only")
        return variant(case)

    return make


def _make_ours_final_variant(fused):
    """Final-states A/B (``final_fused``): :func:`_make_ours_kernel_variant` with ``final_fused = fused``, states cases."""
    return _on_states_cases(_make_ours_kernel_variant(final_fused=fused), "final-states A/B")


def _make_ours_states_variant(init, final):
    """States A/B (session 26): :func:`_make_ours_kernel_variant` on the states case with only the initial states
    (``init``) or only the final states (``final``) declared, kernel-only: what each side costs (compare ours+graph, both,
    and the dense batch case, neither)."""
    variant = _make_ours_kernel_variant()

    def make(case):
        if not case.params.get("states", "batch" in case.params):
            raise Unsupported("states A/B: the states case only")
        return variant(case, keep_init=init, keep_final=final)

    return make


def _make_ours_seeded_variant(**fields):
    """Seeded-starts A/B (session 27, ``seeded_starts`` / ``initial_contiguous`` set by ``fields``):
    :func:`_make_ours_kernel_variant` on the dense states cases (dense chunks with initial states), kernel-only."""
    variant = _on_states_cases(_make_ours_kernel_variant(**fields), "seeded-starts A/B")

    def make(case):
        if case.params.get("varlen"):
            raise Unsupported("seeded-starts A/B: the dense states cases only")
        return variant(case)

    return make


def _fla_available():
    try:
        import fla.modules.causal_conv1d  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"fla not importable: {type(exc).__name__}: {exc}"[:200]
    return None


def _make_fla(case):
    from fla.modules.causal_conv1d import causal_conv1d, causal_conv1d_update

    inp = _inputs(case)
    op = case.params["op"]
    if op == "update":
        # fla's cache is [B, D, W] (it keeps the current token too)
        import torch

        cache = torch.randn(inp["x"].shape[0], inp["x"].shape[1], WIDTH, device="cuda", dtype=torch.bfloat16)
        return lambda: causal_conv1d_update(inp["x"], cache, weight=inp["w"], bias=inp["b"], activation="silu")
    if case.params.get("states", "batch" in case.params):
        raise Unsupported("states case: ours only (the conv1d chunk A/B)")
    cu = inp["cu"]
    cu64 = cu.long() if cu is not None else None

    def fwd(x, w, b):
        return causal_conv1d(x, w, b, activation="silu", cu_seqlens=cu64, backend="triton")[0]

    if op == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    return _grad_fn(fwd, inp)


def _make_copy(case):
    """The forward's memory ceiling under the same protocol: torch's device-to-device copy of x into a preallocated y (the
    same bytes: x read, y written once; L2 cleared before each run as for every provider). Forward only."""
    if case.params["op"] != "fwd":
        raise Unsupported("forward only: the copy ceiling")
    inp = _inputs(case)
    x = inp["x"]
    y = x.new_empty(x.shape)
    return lambda: y.copy_(x)


def _make_torch(case):
    import torch.nn.functional as F

    if case.params["op"] == "update" or case.params.get("varlen") or "batch" in case.params:
        raise Unsupported("F.conv1d has no varlen or rolling-state form")
    inp = _inputs(case)
    t = case.params["t"]

    def fwd(x, w, b):
        return F.silu(F.conv1d(x.transpose(1, 2), w[:, None, :], b, padding=WIDTH - 1, groups=w.shape[0])[..., :t]).transpose(1, 2)

    if case.params["op"] == "fwd":
        return lambda: fwd(inp["x"], inp["w"], inp["b"])
    return _grad_fn(fwd, inp)


GDN_D = 128


def _gdn_bytes(t, h, d=GDN_D):
    return t * h * (2 * d * 2 + 2 * d * 2 + 8)


def _gdn_cases():
    cases = []
    for t in (4096, 8192, 32768):
        for h in (16, 32, 64):
            cases.append(Case(f"gdn fwd T{t // 1024}k H{h}", {"t": t, "h": h, "varlen": False}, bytes=_gdn_bytes(t, h)))
    cases.append(Case("gdn fwd varlen64 T32k H32", {"t": 32768, "h": 32, "varlen": True}, bytes=_gdn_bytes(32768, 32)))
    return cases


def _kda_gate(shape):
    """Per-channel log decays in fla's safe-gate range [-5, 0): ``-5 * sigmoid(N(0, 1))`` (fla's ``lower_bound=-5`` form)."""
    import torch

    return -5.0 * torch.sigmoid(torch.randn(*shape, device="cuda"))


def _delta_rule_inputs(case, per_key_gate):
    """Seed 0: q, k, v [1, T, H, 128] bf16; g fp32, GDN ``logsigmoid(N(0, 1)) / 8`` [1, T, H] or KDA ``_kda_gate``
    [1, T, H, K] (``per_key_gate``); beta U(0, 1) [1, T, H]; ``cu_seqlens`` of 64-ish sequences when varlen."""
    import torch
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    p = case.params
    torch.manual_seed(0)
    t, h, d = p["t"], p["h"], GDN_D
    q = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, t, h, d, device="cuda", dtype=torch.bfloat16)
    g = _kda_gate((1, t, h, d)) if per_key_gate else F.logsigmoid(torch.randn(1, t, h, device="cuda")) / 8
    beta = torch.rand(1, t, h, device="cuda")
    cu = cu_seqlens(_lengths(t, True), "cuda") if p["varlen"] else None
    return dict(q=q, k=k, v=v, g=g, beta=beta, cu=cu)


def _delta_rule_providers(family, public, per_key_gate, fla_module, fla_fn):
    """The providers of a gated-delta-rule forward: ours (``cudnn.linear_attention.<family>.api.<public>``) and fla's
    ``<fla_module>.<fla_fn>``, each eager and CUDA-graphed, on the same inputs, L2 norm in the kernel; and
    ``ours-slowhost``: the same public op with the session-7 host path off (``_host/delta_rule_api.py``'s
    ``DIRECT_EAGER``, ``FAST_HOST_DEFAULT``, ``TVM_FFI_DEFAULT`` False around each call: through the custom op, full
    validation, the DSL's launch entry), the A/B baseline of the eager host cost."""
    import importlib

    def make_ours(case):
        fn = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), public)
        i = _delta_rule_inputs(case, per_key_gate)
        return lambda: fn(i["q"], i["k"], i["v"], i["g"], i["beta"], use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"])

    def make_slowhost(case):
        from cudnn.linear_attention._host import delta_rule_api as dra

        fn = make_ours(case)
        names = ("DIRECT_EAGER", "FAST_HOST_DEFAULT", "TVM_FFI_DEFAULT")

        def call():
            saved = [getattr(dra, n) for n in names]
            for n in names:
                setattr(dra, n, False)
            try:
                return fn()
            finally:
                for n, value in zip(names, saved, strict=True):
                    setattr(dra, n, value)

        return call

    def fla_available():
        try:
            getattr(importlib.import_module(fla_module), fla_fn)
        except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
            return f"fla not importable: {type(exc).__name__}: {exc}"[:200]
        return None

    def make_fla(case):
        fn = getattr(importlib.import_module(fla_module), fla_fn)
        i = _delta_rule_inputs(case, per_key_gate)
        cu = i["cu"].long() if i["cu"] is not None else None
        return lambda: fn(i["q"], i["k"], i["v"], i["g"], i["beta"], use_qk_l2norm_in_kernel=True, cu_seqlens=cu)

    return [
        Provider("ours", make_ours),
        Provider("ours-slowhost", make_slowhost),
        Provider("ours+graph", _graphed(make_ours)),
        Provider("fla", make_fla, fla_available),
        Provider("fla+graph", _graphed(make_fla), fla_available),
    ]


def _warm_and_capture(fn):
    """``fn`` run once on a side stream, then captured (``harness.capture``: the replay keeps ``fn``'s tensors alive)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    return capture(fn)


def _graphed(make):
    def make_graph(case):
        return _warm_and_capture(make(case))

    return make_graph


def _progress(provider: Provider) -> Provider:
    """The provider with a progress line per case: build + first (warm-up) call timed on the host, printed at once
    (the harness prints its table only at the end; a slow compile or autotune shows here, not as silence)."""

    def make(case):
        import time

        import torch

        print(f"  {case.label:<28} {provider.name:<12} building ...", end="", flush=True)
        start = time.perf_counter()
        try:
            fn = provider.make(case)
            fn()
            torch.cuda.synchronize()
        except Exception as exc:
            print(f" {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            raise
        print(f" ready in {time.perf_counter() - start:.1f} s (build + first call)", flush=True)
        return fn

    return Provider(provider.name, make, provider.available)


def _args(argv):
    import argparse

    ap = argparse.ArgumentParser(description="cudnn.linear_attention benchmark")
    ap.add_argument("which", nargs="?", default="all", choices=["all", "conv1d", "gdn", "kda"])
    ap.add_argument("--quick", action="store_true", help="one or two shapes per op (T 8k, H 16): a smoke run well under a minute")
    ap.add_argument("--providers", default="", help="comma-separated provider names to keep (default: all)")
    ap.add_argument("--cases", default="", help="comma-separated case labels to keep, e.g. 'fwd T16k D4096,fwd T8k D8192' or 'kda fwd T8k H32' (default: all)")
    ap.add_argument(
        "--out", default="", help="output name under docs/benchmarks (default linear_attention[_gdn|_kda][_quick]), e.g. linear_attention_conv1d_s9"
    )
    return ap.parse_args(argv)


def _select(providers, names):
    keep = [n for n in names.split(",") if n]
    return [_progress(p) for p in providers if not keep or p.name in keep]


def _run(name, cases, providers, args, **kw):
    """GDN / KDA: ``--cases`` keeps the named cases (of the full grid), ``--out`` names the table."""
    out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
    if args.cases:
        keep = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = set(keep) - {c.label for c in cases}
        if unknown:
            raise SystemExit(f"--cases: unknown {sorted(unknown)}; known: {[c.label for c in cases]}")
        cases = [c for c in cases if c.label in keep]
    name = args.out or (f"{name}_quick" if args.quick else name)
    print(f"{name}: {len(cases)} cases", flush=True)
    run_benchmark(name, cases, _select(providers, args.providers), out_dir=out_dir, **kw)


def main_gdn(args):
    cases = _gdn_cases()
    if args.quick:
        cases = [c for c in cases if c.label == "gdn fwd T8k H16"]
    _run(
        "linear_attention_gdn",
        cases,
        _delta_rule_providers("gdn", "gated_delta_net", False, "fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
        + _parallel_providers("gdn", "GatedDeltaNetFwdSm90", False, "gated_delta_net"),
        args,
        convention="GDN forward, B=1, K=V=128, bf16 q/k/v, fp32 g/beta, L2 norm in kernel, no states; "
        "effective bytes T*H*(2*K*2 + 2*V*2 + 8) (q, k, v read, o written, g, beta read); roofline fraction = GB/s / HBM GB/s",
        metric="gbps",
        title="Gated DeltaNet forward (bf16, K=V=128)",
    )


def _kda_bytes(t, h, d=GDN_D):
    return t * h * (2 * d * 2 + 2 * d * 2 + 4 * d + 4)


def _kda_cases(quick):
    cases = []
    for t in (4096, 8192, 32768):  # the issue-7 grid: T 4k / 8k / 32k x H 16 / 32 / 64 (as GDN's)
        for h in (16, 32, 64):
            cases.append(Case(f"kda fwd T{t // 1024}k H{h}", {"t": t, "h": h, "varlen": False}, bytes=_kda_bytes(t, h)))
    cases.append(Case("kda fwd varlen64 T32k H32", {"t": 32768, "h": 32, "varlen": True}, bytes=_kda_bytes(32768, 32)))
    return [c for c in cases if c.label == "kda fwd T8k H16"] if quick else cases


def _parallel_providers(family, adapter, per_key_gate, public):
    """``ours-parallel`` (and ``+graph``): the family's adapter with the opt-in ``schedule="parallel"`` (the default
    plan: three chunk-parallel kernels, or prep + the fused state pass and output where the plan-time rule picks it),
    o and the workspace allocated once at build (R2), then ``execute`` per call;
    ``ours-par-op``: the public op with ``schedule="parallel"`` (the op allocates o and the workspace per call
    through the caching allocator); the adapter's tuning knobs (compile-key options, default off):
    ``ours-parallel-s3`` (``parallel_state_stages = 3``: the state pass fetches two chunks ahead) and, GDN only (KDA's
    prep kernel has no knobs), ``ours-parallel-pf`` (``parallel_prefetch``: the prep kernel issues every global read of
    a chunk at once), ``ours-parallel-2cta`` (``parallel_prep_two_per_sm``: the prep kernel at two CTAs per SM) and
    ``ours-parallel-all`` (prefetch, 3 stages, two CTAs per SM); ``ours-par-<name>``: the named variants
    (``_host/chunk_parallel.py::PARALLEL_VARIANTS``) the family's prep key takes."""
    import importlib

    def make_adapter(knobs, variant=None):
        def make(case):
            import torch

            cls = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), adapter)
            i = _delta_rule_inputs(case, per_key_gate)
            o = torch.empty_like(i["v"])
            plan = cls(i["q"], i["k"], i["v"], i["g"], i["beta"], o, use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"], schedule="parallel")
            for name, value in knobs.items():
                setattr(plan, name, value)
            if variant:
                from cudnn.linear_attention._host.chunk_parallel import set_parallel_options

                set_parallel_options(plan, variant)
            plan.compile()
            ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
            return lambda: plan.execute(i["q"], i["k"], i["v"], i["g"], i["beta"], o, None, None, i["cu"], workspace=ws)

        return make

    def make_op(case):
        fn = getattr(importlib.import_module(f"cudnn.linear_attention.{family}.api"), public)
        i = _delta_rule_inputs(case, per_key_gate)
        return lambda: fn(i["q"], i["k"], i["v"], i["g"], i["beta"], use_qk_l2norm_in_kernel=True, cu_seqlens=i["cu"], schedule="parallel")

    providers = [
        Provider("ours-parallel", make_adapter({})),
        Provider("ours-parallel+graph", _graphed(make_adapter({}))),
        Provider("ours-par-op", make_op),
        Provider("ours-parallel-s3", make_adapter({"parallel_state_stages": 3})),
    ]
    if not per_key_gate:  # GDN's prep knobs (KDA's prep kernel has none)
        providers.append(Provider("ours-parallel-pf", make_adapter({"parallel_prefetch": True})))
        providers.append(Provider("ours-parallel-2cta", make_adapter({"parallel_prep_two_per_sm": True})))
        providers.append(Provider("ours-parallel-all", make_adapter({"parallel_prefetch": True, "parallel_state_stages": 3, "parallel_prep_two_per_sm": True})))
    # every named variant whose prep fields the family's prep key has (``_host/chunk_parallel.py::PARALLEL_VARIANTS``;
    # the prep's session-6 and session-8 winners are the default, so ``ours-parallel+graph`` is their graphed number)
    from linear_attention_kernels import prep_key_fields

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS

    takes = {name for name, fields in PARALLEL_VARIANTS.items() if set(fields.get("prep", {})) <= prep_key_fields(family)}
    for variant in PARALLEL_VARIANTS:
        if variant in takes:
            providers.append(Provider(f"ours-par-{variant}", make_adapter({}, variant)))
    # session 30, kernel-only: the output kernel beside the state pass (``ovl``) and the state pass's copies by stmatrix
    # (``stsm``) against the three kernels one after the other (``three``); both (``ovl-stsm``) the default since session 31
    providers.append(Provider("ours-par-ovl+graph", _graphed(make_adapter({}, "ovl"))))
    providers.append(Provider("ours-par-three+graph", _graphed(make_adapter({}, "three"))))
    providers.append(Provider("ours-par-stsm+graph", _graphed(make_adapter({}, "stsm"))))  # the state pass's copies by stmatrix
    providers.append(Provider("ours-par-ovl-stsm+graph", _graphed(make_adapter({}, "ovl-stsm"))))  # both
    return providers


def main_kda(args):
    from upstream_frontend import upstream_provider

    cases = _kda_cases(args.quick)
    _run(
        "linear_attention_kda",
        cases,
        _delta_rule_providers("kda", "kimi_delta_attention", True, "fla.ops.kda", "chunk_kda")
        + _parallel_providers("kda", "KimiDeltaAttentionFwdSm90", True, "kimi_delta_attention")
        + [upstream_provider("kda", "fwd", cases), upstream_provider("kda", "fwd", cases, graph=True)],
        args,
        convention="KDA forward, B=1, K=V=128, bf16 q/k/v, fp32 per-channel g = -5 sigmoid(N(0,1)) and beta, L2 norm in kernel, no states; "
        "effective bytes T*H*(2*K*2 + 2*V*2 + 4*K + 4) (q, k, v read, o written, g [T,H,K], beta read); fla issue-7 reference: 609 us at T8k H16",
        metric="gbps",
        title="Kimi Delta Attention forward (bf16, K=V=128)",
    )


def main(args=None):
    """causal_conv1d (benchmarks/run_all.py calls this with no arguments: the full conv1d table)."""
    args = _args([]) if args is None else args
    providers = [
        Provider("ours", _make_ours),
        Provider("ours+graph", _make_ours_graph),
        # issue 7 A/B: session 5's host path (DSL entry, op dispatch, full validation), same kernel as ours
        Provider("ours-slowhost", _make_ours_op_options(tvm_ffi=False, fast=False)),
        # the forward's grid: ours = the run grid (default since session 6, 4 x SMs = 528 CTAs on an H200); cta64 = the
        # 64-token CTAs (grid_ctas = 0, the default until session 6), eager through the public op and kernel-only
        Provider("ours-cta64", _make_ours_op_options(grid_ctas=0)),
        Provider("ours-cta64+graph", _make_ours_kernel_variant(grid_ctas=0)),
        # session 9: the run grid with L2 prefetch P groups ahead (``l2_prefetch``, opt-in), kernel-only: compare ours+graph
        Provider("ours-pf1+graph", _make_ours_kernel_variant(l2_prefetch=1)),
        Provider("ours-pf2+graph", _make_ours_kernel_variant(l2_prefetch=2)),
        Provider("ours-pf4+graph", _make_ours_kernel_variant(l2_prefetch=4)),
        Provider("ours-pf8+graph", _make_ours_kernel_variant(l2_prefetch=8)),
        # session 9: the steady-group path (``steady``: no per-token sequence walk / history branches), alone and with
        # the L2 prefetch, kernel-only; and the public op eager with both (what flipping the two defaults would give)
        Provider("ours-steady+graph", _make_ours_kernel_variant(steady=True)),
        Provider("ours-steady-pf2+graph", _make_ours_kernel_variant(steady=True, l2_prefetch=2)),
        Provider("ours-steady-pf4+graph", _make_ours_kernel_variant(steady=True, l2_prefetch=4)),
        Provider("ours-steady-pf2", _make_ours_op_options(steady=True, l2_prefetch=2)),
        # chunk-interleaved runs (``chunk`` = C: CTA row j walks the C-token chunks j, j + n_runs, ...; dense and varlen,
        # with the default steady path), kernel-only; ours-runs+graph = contiguous runs (chunk 0, the dense default until
        # session 15; ours+graph has chunk 8 on dense cases since then, contiguous runs on varlen ones)
        Provider("ours-runs+graph", _make_ours_kernel_variant(chunk=0)),
        Provider("ours-chunk8+graph", _make_ours_kernel_variant(chunk=8)),
        Provider("ours-chunk16+graph", _make_ours_kernel_variant(chunk=16)),
        Provider("ours-chunk32+graph", _make_ours_kernel_variant(chunk=32)),
        # session 16, the states case: the forward kernel writes the final states (``final_fused``, the default) or the
        # separate final-states kernel runs after it (the default until session 16), kernel-only
        Provider("ours-final-fused+graph", _make_ours_final_variant(True)),
        Provider("ours-final-sep+graph", _make_ours_final_variant(False)),
        # session 28, the states cases: the fused final states as the run grid's tail (``final_tail``), kernel-only
        Provider("ours-final-tail+graph", _on_states_cases(_make_ours_kernel_variant(final_fused=True, final_tail=True), "final-states A/B")),
        Provider("ours-final-loop+graph", _on_states_cases(_make_ours_kernel_variant(final_fused=True, final_tail=False), "final-states A/B")),
        # session 29: a varlen plan without states at the varlen defaults before session 29 (``warp_walk = False``: contiguous
        # runs, chunk 8 per call from 32 tokens per sequence; ours+graph: the warp walk on chunk 8), kernel-only
        Provider("ours-nowalk+graph", _make_ours_kernel_variant(warp_walk=False)),
        # session 16, varlen cases: the warp walks cu_seqlens together (``warp_walk``: a window of entries in its lanes, a
        # ballot and two shuffles per token, a density guess then a 33-ary search per chunk), on the varlen default's
        # contiguous runs and on chunk 8 (compare ours+graph and ours-chunk8+graph), kernel-only
        Provider("ours-warpwalk+graph", _make_ours_warp_walk_variant()),
        Provider("ours-chunk8-warpwalk+graph", _make_ours_warp_walk_variant(chunk=8)),
        # session 25: the per-token path's window shift guarded by "inside the run" (``shift_always = False``, the
        # default until session 25: ptxas merges two register windows after every token), kernel-only; on the varlen
        # default's contiguous runs, on chunk 8 and with the warp walk (compare ours+graph, ours-chunk8+graph, ...)
        Provider("ours-noshift+graph", _make_ours_kernel_variant(shift_always=False)),
        Provider("ours-chunk8-noshift+graph", _make_ours_kernel_variant(chunk=8, shift_always=False)),
        Provider("ours-warpwalk-noshift+graph", _make_ours_warp_walk_variant(shift_always=False)),
        # session 25: a varlen run's first sequence by the binary search alone (``locate_guess = False``; the default on
        # varlen contiguous runs: the density guess first), kernel-only
        Provider("ours-noguess+graph", _make_ours_kernel_variant(locate_guess=False)),
        # session 26, the states cases: the final states element by element (``final_contiguous = False``; ours+graph writes
        # contiguous final states with vector stores), kernel-only
        Provider("ours-elemfinal+graph", _on_states_cases(_make_ours_kernel_variant(final_contiguous=False), "final-states layout A/B")),
        # session 26, the states case: only the initial states in / only the final states out, kernel-only (compare
        # ours+graph, both, and the "fwd batch" case, neither)
        Provider("ours-initonly+graph", _make_ours_states_variant(True, False)),
        Provider("ours-finalonly+graph", _make_ours_states_variant(False, True)),
        # session 27, the dense states cases: a chunk that starts a sequence takes its initial state as the halo
        # (``seeded_starts``, the default since session 27, with vector loads of contiguous initial states): without it, and
        # with it by element loads (``initial_contiguous = False``), kernel-only (compare ours+graph)
        Provider("ours-noseed+graph", _make_ours_seeded_variant(seeded_starts=False)),
        Provider("ours-seed+graph", _make_ours_seeded_variant(seeded_starts=True)),
        Provider("ours-seed-elem+graph", _make_ours_seeded_variant(initial_contiguous=False)),
        # session 9: the decode update with session 8's host path (ours: the direct call, tvm-ffi route and memo)
        Provider("ours-upd-slowhost", _make_ours_update_slowhost),
        Provider("adapter", _make_ours_adapter(False)),
        Provider("adapter+tvmffi", _make_ours_adapter(True)),
        Provider("fla", _make_fla, _fla_available),
        Provider("torch", _make_torch),
        Provider("copy", _make_copy),  # the ceiling: torch's D2D copy of the same bytes
    ]
    cases = _cases()
    if args.quick:  # issue 7's forward shapes: 16M, 67M (two), 134M elements dense, and 134M varlen
        keep = ("fwd T4k D4096", "fwd T16k D4096", "fwd T8k D8192", "fwd T32k D4096", "fwd varlen64 T32k D4096")
        cases = [c for c in cases if c.label in keep]
    if args.cases:
        keep = [c.strip() for c in args.cases.split(",") if c.strip()]
        cases = _cases() if not set(keep) <= {c.label for c in cases} else cases  # --quick keeps forward shapes only
        unknown = set(keep) - {c.label for c in cases}
        if unknown:
            raise SystemExit(f"--cases: unknown {sorted(unknown)}; known: {[c.label for c in cases]}")
        cases = [c for c in cases if c.label in keep]
    if args.out:  # the table under its own name (no _quick suffix added)
        out_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "benchmarks")
        print(f"{args.out}: {len(cases)} cases", flush=True)
        run_benchmark(
            args.out,
            cases,
            _select(providers, args.providers),
            out_dir=out_dir,
            convention="effective bytes: fwd 2*T*D*2 (x read, y written; the states cases + 2*N*D*(W-1)*2, initial states read and final states written, since session 27), bwd 3*T*D*2 (x, dy read, dx written), update B*D*(2+2(W-1))*2; bf16, W=4, SiLU, bias",
            metric="gbps",
            title="causal_conv1d (bf16, W=4, SiLU)",
            rounds=3 if args.quick else 1,
        )
        return
    _run(
        "linear_attention",
        cases,
        providers,
        args,
        convention="effective bytes: fwd 2*T*D*2 (x read, y written; the states cases + 2*N*D*(W-1)*2, initial states read and final states written, since session 27), bwd 3*T*D*2 (x, dy read, dx written), update B*D*(2+2(W-1))*2; bf16, W=4, SiLU, bias",
        metric="gbps",
        title="causal_conv1d (bf16, W=4, SiLU)",
        rounds=3 if args.quick else 1,  # the quick table is the issue-7 A/B: interleaved rounds, fastest per cell
    )


if __name__ == "__main__":
    _a = _args(sys.argv[1:])
    if _a.which in ("all", "conv1d"):
        main(_a)
    if _a.which in ("all", "gdn"):
        main_gdn(_a)
    if _a.which in ("all", "kda"):
        main_kda(_a)


def compile_check() -> list[str]:
    """Without a GPU: build causal_conv1d forward (varlen, SiLU, width 4) for sm_90a (benchmarks/run_all.py)."""
    from cudnn.api_base import TensorDesc
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((32768, 4096), "bfloat16", "x")
    st = TensorDesc.contiguous((64, 4096, 3), "bfloat16", "states")
    plan = CausalConv1d(
        x,
        TensorDesc.contiguous((4096, 4), "bfloat16", "weight"),
        x,
        TensorDesc.contiguous((4096,), "bfloat16", "bias"),
        TensorDesc.contiguous((65,), "int32", "cu_seqlens"),
        st,
        st,
        "silu",
    )
    plan.compile()
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90

    qk = TensorDesc.contiguous((32768, 32, GDN_D), "bfloat16", "q")
    gate = TensorDesc.contiguous((32768, 32), "float32", "g")
    gdn = GatedDeltaNetFwdSm90(qk, qk, qk, gate, gate, qk, use_qk_l2norm_in_kernel=True, cu_seqlens=TensorDesc.contiguous((65,), "int32", "cu_seqlens"))
    gdn.compile()
    from cudnn.linear_attention.kda.api import KimiDeltaAttentionFwdSm90

    kg = TensorDesc.contiguous((32768, 32, GDN_D), "float32", "g")
    kda = KimiDeltaAttentionFwdSm90(qk, qk, qk, kg, gate, qk, use_qk_l2norm_in_kernel=True, cu_seqlens=TensorDesc.contiguous((65,), "int32", "cu_seqlens"))
    kda.compile()
    return ["causal_conv1d fwd varlen silu w4", "gated_delta_net fwd varlen l2norm K=V=128", "kimi_delta_attention fwd varlen l2norm K=V=128"]
