"""GPU correctness of the Gated DeltaNet forward (cudnn.linear_attention.gdn) against the fp32 token-by-token
recurrence, on fresh random inputs with poisoned outputs.

Tolerance (the FlashAttention rule, shared/cudnn_testing/tolerance.py): with ``ref`` the fp32 recurrence and
``lowp`` ``gated_delta_net_chunked_lowp_ref`` (the chunked algorithm rounded to bf16 exactly where the kernel
and fla round: normalised q/k, Tm, beta K exp G, beta V, -Wm, the state operand, Vn, P, K exp(G_C - G), o),

    max|ours - ref| <= 2 * max|lowp - ref| + 1e-3 * max|ref|

The first term is the error a correct bf16 chunked kernel cannot avoid, doubled for fp32 accumulation-order
differences (WGMMA vs torch matmul) that are amplified through the carried state; the second keeps the bound
meaningful when the baseline error happens to be tiny (1e-3 relative is an eighth of a bf16 ulp). A wrong
mask, transpose, decay or a missed chunk moves o by O(max|ref|), far outside it. Final states are fp32 and
checked by the same rule against the recurrence's.

Inputs keep the recurrence contractive: k is unit-norm when the kernel does not normalise it (fla's tests do
the same), g = logsigmoid(N(0,1)) / 8, beta ~ U(0, 1)."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, check_adapter_execute_rebinds_new_totals  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.gated_delta_net")


def _inputs(T, H, Hk, D, l2norm, n_seqs, g_dtype=torch.float32, beta_dtype=torch.float32, batch=None):
    import torch.nn.functional as F

    lead = (T,) if batch is None else (batch, T)
    q = torch.randn(*lead, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(*lead, Hk, D, device="cuda")
    k = (k if l2norm else F.normalize(k, dim=-1)).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    g = (F.logsigmoid(torch.randn(*lead, H, device="cuda")) / 8).to(g_dtype)
    beta = torch.rand(*lead, H, device="cuda").to(beta_dtype)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5
    return q, k, v, g, beta, h0


def _refs(q, k, v, g, beta, h0, l2norm, cu, batched=False):
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_lowp_ref, gated_delta_rule_recurrent_ref

    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(initial_state=h0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu)
    ref_o, ref_s = gated_delta_rule_recurrent_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    low_o, low_s = gated_delta_net_chunked_lowp_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    if not batched:
        ref_o, low_o = ref_o[0], low_o[0]
    return ref_o, ref_s, low_o, low_s


def _check(out, ref, lowp, name):
    from cudnn_testing.tolerance import assert_close_fa

    assert_close_fa(out, ref, lowp, name=name, factor=2.0, noise=1e-3 * ref.abs().max().item())


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("l2norm", [False, True])
def test_varlen_matches_recurrence(D, l2norm):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences in one packed batch,
    GVA (4 v heads over 2 q/k heads), initial and final states."""
    from cudnn.linear_attention.gdn.api import gated_delta_net
    from cudnn_testing.data import cu_seqlens, poison

    lengths = [1, 64, 65, 0, 700, 3, 128]
    T, H, Hk = sum(lengths), 4, 2
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(T, H, Hk, D, l2norm, len(lengths))
    o = poison(torch.empty_like(v))
    res = gated_delta_net(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, output_final_state=True, cu_seqlens=cu, out=o)
    out, fin = res
    assert out is o and res["final_state"] is fin
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, l2norm, cu)
    _check(out, ref_o, low_o, "o")
    _check(fin, ref_s, low_s, "final_state")
    assert torch.equal(fin[3], h0[3])  # an empty sequence passes its state through untouched


def test_long_single_sequence_no_initial_state():
    """4096 tokens (64 chunks of state carried on chip), default scale, no initial state, THD without cu_seqlens."""
    from cudnn.linear_attention.gdn.api import gated_delta_net

    T, H, D = 4096, 2, 128
    q, k, v, g, beta, _ = _inputs(T, H, H, D, True, 1)
    out, fin = gated_delta_net(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, None, True, None)
    _check(out, ref_o, low_o, "o")
    _check(fin, ref_s, low_s, "final_state")


def test_no_final_state_and_bf16_gates_and_custom_scale():
    from cudnn.linear_attention.gdn.api import gated_delta_net
    from cudnn_testing.data import cu_seqlens
    from cudnn_testing.reference_linear_attention import gated_delta_net_chunked_lowp_ref, gated_delta_rule_recurrent_ref

    lengths = [200, 1, 77]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(sum(lengths), 2, 1, 128, True, 3, g_dtype=torch.bfloat16, beta_dtype=torch.bfloat16)
    out, fin = gated_delta_net(q, k, v, g, beta, scale=0.3, use_qk_l2norm_in_kernel=True, initial_state=h0, cu_seqlens=cu)
    assert fin is None
    torch.cuda.synchronize()
    kw = dict(scale=0.3, initial_state=h0, use_qk_l2norm=True, cu_seqlens=cu)
    ref_o, _ = gated_delta_rule_recurrent_ref(q[None], k[None], v[None], g[None], beta[None], **kw)
    low_o, _ = gated_delta_net_chunked_lowp_ref(q[None], k[None], v[None], g[None], beta[None], **kw)
    _check(out, ref_o[0], low_o[0], "o")


def test_dense_batch_equals_packed_and_strided_views_are_read_natively():
    """A dense [B, L, H, D] batch gives bit-identical results to the same tokens packed with cu_seqlens, and
    q/k/v read as column slices of one fused [B, L, H, 3D] projection give the same bits as contiguous copies."""
    from cudnn.linear_attention.gdn.api import gated_delta_net
    from cudnn_testing.data import cu_seqlens

    B, L, H, D = 3, 150, 2, 64
    fused = torch.randn(B, L, H, 3 * D, device="cuda").to(torch.bfloat16)
    q, k, v = fused[..., :D], fused[..., D : 2 * D], fused[..., 2 * D :]
    import torch.nn.functional as F

    g = F.logsigmoid(torch.randn(B, L, H, device="cuda")) / 8
    beta = torch.rand(B, L, H, device="cuda")
    h0 = torch.randn(B, H, D, D, device="cuda")
    dense_o, dense_s = gated_delta_net(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True)
    qc, kc, vc = (t.contiguous().view(1, B * L, H, D) for t in (q, k, v))
    cu = cu_seqlens([L] * B, "cuda")
    packed_o, packed_s = gated_delta_net(
        qc, kc, vc, g.reshape(1, B * L, H), beta.reshape(1, B * L, H), use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu
    )
    torch.cuda.synchronize()
    assert torch.equal(dense_o.reshape(1, B * L, H, D), packed_o)
    assert torch.equal(dense_s, packed_s)
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, True, None, batched=True)
    _check(dense_o, ref_o, low_o, "o")


def test_adapter_execute_rebinds_new_totals():
    """One adapter, executed on batches with other token totals and sequence counts (no re-plan)."""
    check_adapter_execute_rebinds_new_totals(GDN, _inputs, _refs, _check)


def test_column_solve_variant_matches_recurrence():
    """The plain one-thread-per-column triangular solve (``blocked_solve=False``) against the same rule, and within
    bf16 rounding of the default blocked solve on the same inputs."""
    from cudnn.linear_attention.gdn.api import GatedDeltaNetFwdSm90
    from cudnn_testing.data import cu_seqlens, poison

    lengths = [1, 190, 64]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(sum(lengths), 2, 2, 128, True, len(lengths))
    outs = []
    for blocked in (False, True):
        o, ht = poison(torch.empty_like(v)), poison(torch.empty_like(h0))
        plan = GatedDeltaNetFwdSm90(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu)
        plan.blocked_solve = blocked
        plan.compile()
        plan.execute(q, k, v, g, beta, o, h0, ht, cu)
        outs.append((o, ht))
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, True, cu)
    for o, ht in outs:
        _check(o, ref_o, low_o, "o")
        _check(ht, ref_s, low_s, "final_state")
