"""GPU tests of the second round of epilogue A/B options and the "auto2" schedule (run with -k epi2 or the file):

- ``amax_fast`` (api.AMAX_FAST): amax without the per-element bounds predicate, 4 running maxima per thread. Max is
  exact and order-free, so amax and D must equal the predicated plan's bit for bit; the out-of-bounds detector builds
  inputs whose only large |y| would come from rows (columns) outside the problem under a staged bias, the one case
  that still needs a predicate.
- ``swiglu_tanh`` (api.SWIGLU_TANH): silu through one tanh.approx; within the FA tolerance of the fp32 reference and
  close to the default kernel.
- schedule "auto2": a new M never compiles, including an M that picks the plan's second tile.

Ground truth fp32 torch (cudnn_testing.reference_gemm), FlashAttention tolerance, poisoned outputs.
"""

from __future__ import annotations

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90
from cudnn_testing.reference_gemm import reference
from cudnn_testing.tolerance import assert_close_fa

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.gemm")


def _ab(m, n, k, batch=None):
    lead = () if batch is None else (batch,)
    s = k**-0.25
    a = (torch.randn(*lead, m, k, device="cuda") * s).to(torch.bfloat16)
    b = (torch.randn(*lead, n, k, device="cuda") * s).to(torch.bfloat16).transpose(-1, -2)  # w.t(): K-major
    return a, b


def _poisoned(m, n, lead=()):
    from cudnn.gemm.dense.api import alloc_rows

    return alloc_rows(lead, m, n, torch.bfloat16, "cuda").fill_(float("nan"))


def _amax_poison():
    return torch.full((1,), float("nan"), device="cuda", dtype=torch.float32)  # execute resets it (the plan's memset)


# odd M and N (partial tiles in both modes), each bias kind staged and not, the activations, swiglu, pingpong, batched.
AMAX_CASES = [
    ("plain", (1031, 1000, 520), dict()),
    ("bias_n_staged_relu2", (1031, 1000, 520), dict(bias="col", stage_bias=True, activation="relu2")),
    ("bias_n_per_element_gelu_batched", (200, 1000, 136), dict(bias="col", stage_bias=False, activation="gelu_tanh", batch=3)),
    ("bias_m_staged", (777, 1000, 264), dict(bias="row", stage_bias=True)),
    ("swiglu_bias_staged", (300, 1024, 200), dict(bias="col", stage_bias=True, swiglu="interleaved")),
    ("pingpong_bias_staged", (333, 1000, 264), dict(bias="col", stage_bias=True, pingpong=True)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("what,shape,opts", AMAX_CASES, ids=lambda v: str(v))
def test_epi2_amax_fast_matches_predicated(what, shape, opts):
    from cudnn.gemm import GemmSm90

    opts = dict(opts)
    m, n, k = shape
    batch = opts.pop("batch", None)
    lead = () if batch is None else (batch,)
    a, b = _ab(m, n, k, batch=batch)
    tensors = {}
    bias_kind = opts.pop("bias", None)
    if bias_kind is not None:
        tensors["bias"] = torch.randn(n if bias_kind == "col" else m, device="cuda", dtype=torch.bfloat16)
        opts["bias_kind"] = bias_kind
    n_out = n // 2 if opts.get("swiglu") else n
    ref, _ = reference(a, b, bias=tensors.get("bias"), bias_kind=bias_kind or "col", activation=opts.get("activation", "none"), swiglu=opts.get("swiglu"))
    results = []
    for fast in (False, True):
        out, amax = _poisoned(m, n_out, lead=lead), _amax_poison()
        plan = GemmSm90(a, b, out, amax=amax, amax_fast=fast, **tensors, **opts)
        plan.compile()
        assert plan.config.amax_fast == fast
        plan.execute(a, b, out, amax=amax, **tensors)
        results.append((out, amax))
    (d0, amax0), (d1, amax1) = results
    assert torch.equal(d0, d1), f"{what}: amax_fast changed D (max {(d0.float() - d1.float()).abs().max().item():.3e})"
    assert torch.equal(amax0, amax1), f"{what}: amax_fast {amax1.item()} != predicated {amax0.item()}"
    want = ref.abs().max()
    assert torch.isclose(amax1[0], want, rtol=2e-2, atol=1e-3), f"{what}: amax {amax1.item()} vs fp32 reference {want.item()}"


@pytest.mark.gpu
@pytest.mark.detector
@pytest.mark.parametrize("bias_kind", ["col", "row"])
def test_epi2_amax_fast_ignores_outside_outputs(bias_kind):
    """A staged bias covers the whole tile along its own mode, so rows (col bias) / columns (row bias) outside the problem
    hold |act(bias)|: amax_fast must keep predicating that other mode. Inputs make acc = -bias inside the problem (plus
    1e-3 noise), so every valid |y| is ~1e-3 while an outside one would be ~|bias| ~ 1: a missing predicate is 1000x off."""
    from cudnn.gemm import GemmSm90

    m, n, k = 1031, 1000, 136  # 7 rows of the last 128-row tile and 24 columns of the last 256-column tile are outside
    noise = 1e-3
    a = (torch.randn(m, k, device="cuda") * noise).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda") * noise).to(torch.bfloat16).t()
    bias = (torch.rand(n if bias_kind == "col" else m, device="cuda") + 0.5).to(torch.bfloat16)
    if bias_kind == "col":  # acc[i, j] = a[i, 0] * b[0, j] + ... = -bias[j] + O(noise^2)
        a[:, 0] = -1.0
        b[0, :] = bias
    else:  # acc[i, j] = -bias[i]
        a[:, 0] = bias
        b[0, :] = -1.0
    ref, _ = reference(a, b, bias=bias, bias_kind=bias_kind)
    out, amax = _poisoned(m, n), _amax_poison()
    plan = GemmSm90(a, b, out, bias=bias, bias_kind=bias_kind, amax=amax, amax_fast=True, stage_bias=True)
    plan.compile()
    plan.execute(a, b, out, bias=bias, amax=amax)
    want = ref.abs().max()
    assert want.item() < 0.05, want.item()  # the construction: valid outputs are small
    assert amax.item() <= 2 * want.item() + 1e-3, f"amax {amax.item()} counted outputs outside the problem (valid max {want.item()})"
    assert amax.item() >= 0.5 * want.item(), f"amax {amax.item()} vs valid max {want.item()}"


# the first and last share one compiled kernel (same N, same flags): M = 1 runs the kernel of the odd-M case
SWIGLU_CASES = [((1031, 1024, 1000), "interleaved", True), ((4096, 4096, 512), "halves", False), ((1, 1024, 64), "interleaved", True)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,layout,with_bias", SWIGLU_CASES, ids=lambda v: str(v))
def test_epi2_swiglu_tanh_matches_reference(shape, layout, with_bias):
    """silu via tanh.approx: within the FA tolerance of the fp32 reference, and close to the default (ex2 + rcp) kernel."""
    from cudnn.gemm import GemmSm90

    m, n, k = shape
    a, b = _ab(m, n, k)
    tensors = {"bias": torch.randn(n, device="cuda", dtype=torch.bfloat16)} if with_bias else {}
    ref, _ = reference(a, b, bias=tensors.get("bias"), swiglu=layout)
    low, _ = reference(a, b, bias=tensors.get("bias"), swiglu=layout, lowp=True)
    outs = []
    for tanh in (False, True):
        out = _poisoned(m, n // 2)
        plan = GemmSm90(a, b, out, swiglu=layout, swiglu_tanh=tanh, **tensors)
        plan.compile()
        assert plan.config.swiglu_tanh == tanh
        plan.execute(a, b, out, **tensors)
        outs.append(out)
    assert_close_fa(outs[1], ref, low, name=f"swiglu_tanh {shape} {layout}")
    err0 = (outs[0].float() - ref).abs().max().item()
    err1 = (outs[1].float() - ref).abs().max().item()
    assert err1 <= 1.5 * err0 + 2e-3 * ref.abs().max().item(), f"swiglu_tanh max error {err1:.3e} vs default {err0:.3e}"


@pytest.mark.gpu
@pytest.mark.detector
def test_epi2_auto2_compile_cache_hit_when_m_changes():
    """schedule "auto2": compile() builds both tiles of the (N, K) set, so neither a new M nor an M that picks the other
    tile compiles (Rule 4). N = 5120: M = 512 and 2048 pick 128 x 224, M = 1, 77 and 4096 keep 128 x 256."""
    from cudnn.gemm import GemmSm90
    from cudnn.kernel_cache import kernel_cache

    n, k = 5120, 256

    def plan(m):
        a, b = _ab(m, n, k)
        d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        p = GemmSm90(a, b, d, schedule="auto2")
        p.compile()
        return p

    first = plan(4096)
    assert first.tile_mn() == (128, 256) and first._tile_set, "the plan must list the second tile for compile()"
    before = kernel_cache.stats.misses
    tiles = set()
    for m in (1, 77, 512, 2048):
        tiles.add(plan(m).tile_mn())
    assert tiles == {(128, 256), (128, 224)}, tiles  # the test exercises both kernels
    assert kernel_cache.stats.misses == before, "a new M compiled a kernel under schedule auto2 (Rule 4)"
