"""GPU correctness of the Kimi Delta Attention forward (cudnn.linear_attention.kda) against the fp32 token-by-token
recurrence, on fresh random inputs with poisoned outputs.

Tolerance (the FlashAttention rule, shared/cudnn_testing/tolerance.py): with ``ref`` the fp32 recurrence and
``lowp`` ``kimi_delta_attention_chunked_lowp_ref`` (the chunked algorithm rounded to bf16 exactly where the kernel
rounds: normalised q/k, the decay-split operands, Tm, beta K exp G, beta V, -Wm, the state operand, Vn, P,
scale Q exp G, K exp(G_C - G), o),

    max|ours - ref| <= 2 * max|lowp - ref| + 1e-3 * max|ref|

(the GDN tests' rule and reasoning). Final states are fp32 and checked by the same rule. When fla-core is
importable, fla's ``chunk_kda`` on the same inputs is a second baseline: ``max|ours - ref| <= 2 max|fla - ref|``.

Gates: per-channel log decays in two regimes: weak (``logsigmoid(N(0,1)) / 8``: long memory, the state carries
information across many chunks) and fla's safe-gate range ``-5 sigmoid(N(0,1))`` in [-5, 0) (strong decay: the
kernel's decay-split factors reach exp(40) inside a 16-token block). k is unit-norm when the kernel does not
normalise it, beta ~ U(0, 1)."""

from __future__ import annotations

import os
import sys

import pytest

from cudnn_testing.markers import skip_unless_cutedsl, skip_unless_sm90

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_delta_rule_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import KDA, check_adapter_execute_rebinds_new_totals  # noqa: E402


@pytest.fixture(autouse=True)
def _gpu():
    skip_unless_sm90()
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.kimi_delta_attention")


def _gate(shape, regime):
    import torch.nn.functional as F

    x = torch.randn(*shape, device="cuda")
    return F.logsigmoid(x) / 8 if regime == "weak" else -5.0 * torch.sigmoid(x)


def _inputs(T, H, Hk, D, l2norm, n_seqs, g_dtype=torch.float32, beta_dtype=torch.float32, batch=None, regime="weak"):
    import torch.nn.functional as F

    lead = (T,) if batch is None else (batch, T)
    q = torch.randn(*lead, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(*lead, Hk, D, device="cuda")
    k = (k if l2norm else F.normalize(k, dim=-1)).to(torch.bfloat16)
    v = torch.randn(*lead, H, D, device="cuda").to(torch.bfloat16)
    g = _gate((*lead, H, D), regime).to(g_dtype)
    beta = torch.rand(*lead, H, device="cuda").to(beta_dtype)
    h0 = torch.randn(n_seqs, H, D, D, device="cuda") * 0.5
    return q, k, v, g, beta, h0


def _refs(q, k, v, g, beta, h0, l2norm, cu, batched=False, scale=None):
    from cudnn_testing.reference_linear_attention import gated_delta_rule_recurrent_ref, kimi_delta_attention_chunked_lowp_ref

    add = (lambda t: t) if batched else (lambda t: t[None])
    kw = dict(scale=scale, initial_state=h0, output_final_state=True, use_qk_l2norm=l2norm, cu_seqlens=cu)
    ref_o, ref_s = gated_delta_rule_recurrent_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    low_o, low_s = kimi_delta_attention_chunked_lowp_ref(add(q), add(k), add(v), add(g), add(beta), **kw)
    if not batched:
        ref_o, low_o = ref_o[0], low_o[0]
    return ref_o, ref_s, low_o, low_s


def _check(out, ref, lowp, name):
    from cudnn_testing.tolerance import assert_close_fa

    assert_close_fa(out, ref, lowp, name=name, factor=2.0, noise=1e-3 * ref.abs().max().item())


# Two kernel builds (K 64 without L2 norm, K 128 with it: the other two pairings add no new code path), each under
# both gate regimes (a runtime property, no new build).
@pytest.mark.parametrize("D, l2norm", [(64, False), (128, True)])
@pytest.mark.parametrize("regime", ["weak", "safe_gate"])
def test_varlen_matches_recurrence(D, l2norm, regime):
    """1-token, exactly-one-chunk, one-past-a-chunk, empty and multi-chunk sequences in one packed batch,
    GVA (4 v heads over 2 q/k heads), initial and final states."""
    from cudnn.linear_attention import kimi_delta_attention
    from cudnn_testing.data import cu_seqlens, poison

    lengths = [1, 64, 65, 0, 700, 3, 128]
    T, H, Hk = sum(lengths), 4, 2
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(T, H, Hk, D, l2norm, len(lengths), regime=regime)
    o = poison(torch.empty_like(v))
    res = kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, output_final_state=True, cu_seqlens=cu, out=o)
    out, fin = res
    assert out is o and res["final_state"] is fin
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, l2norm, cu)
    _check(out, ref_o, low_o, "o")
    _check(fin, ref_s, low_s, "final_state")
    assert torch.equal(fin[3], h0[3])  # an empty sequence passes its state through untouched


def test_long_single_sequence_no_initial_state():
    """2048 tokens (32 chunks of state carried on chip), default scale, no initial state, THD without cu_seqlens."""
    from cudnn.linear_attention import kimi_delta_attention

    T, H, D = 2048, 2, 128
    q, k, v, g, beta, _ = _inputs(T, H, H, D, True, 1)
    out, fin = kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, None, True, None)
    _check(out, ref_o, low_o, "o")
    _check(fin, ref_s, low_s, "final_state")


# bf16 g (the per-channel gate read as bf16) and bf16 beta; the fp32 pairs are covered above.
@pytest.mark.parametrize("g_dtype, beta_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)])
def test_gate_dtypes_no_final_state_custom_scale(g_dtype, beta_dtype):
    from cudnn.linear_attention import kimi_delta_attention
    from cudnn_testing.data import cu_seqlens

    lengths = [200, 1, 77]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(sum(lengths), 2, 1, 128, True, 3, g_dtype=g_dtype, beta_dtype=beta_dtype, regime="safe_gate")
    out, fin = kimi_delta_attention(q, k, v, g, beta, scale=0.3, use_qk_l2norm_in_kernel=True, initial_state=h0, cu_seqlens=cu)
    assert fin is None
    torch.cuda.synchronize()
    ref_o, _, low_o, _ = _refs(q, k, v, g, beta, h0, True, cu, scale=0.3)
    _check(out, ref_o, low_o, "o")


def test_dense_batch_equals_packed_and_strided_views_are_read_natively():
    """A dense [B, L, H, D] batch gives bit-identical results to the same tokens packed with cu_seqlens, and
    q/k/v read as column slices of one fused [B, L, H, 3D] projection give the same bits as contiguous copies."""
    from cudnn.linear_attention import kimi_delta_attention
    from cudnn_testing.data import cu_seqlens

    B, L, H, D = 3, 150, 2, 64
    fused = torch.randn(B, L, H, 3 * D, device="cuda").to(torch.bfloat16)
    q, k, v = fused[..., :D], fused[..., D : 2 * D], fused[..., 2 * D :]
    g = _gate((B, L, H, D), "weak")
    beta = torch.rand(B, L, H, device="cuda")
    h0 = torch.randn(B, H, D, D, device="cuda")
    dense_o, dense_s = kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True)
    qc, kc, vc = (t.contiguous().view(1, B * L, H, D) for t in (q, k, v))
    cu = cu_seqlens([L] * B, "cuda")
    packed_o, packed_s = kimi_delta_attention(
        qc, kc, vc, g.reshape(1, B * L, H, D), beta.reshape(1, B * L, H), use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu
    )
    torch.cuda.synchronize()
    assert torch.equal(dense_o.reshape(1, B * L, H, D), packed_o)
    assert torch.equal(dense_s, packed_s)
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, True, None, batched=True)
    _check(dense_o, ref_o, low_o, "o")
    _check(dense_s, ref_s, low_s, "final_state")


def test_adapter_execute_rebinds_new_totals():
    """One adapter, executed on batches with other token totals and sequence counts (no re-plan)."""
    check_adapter_execute_rebinds_new_totals(KDA, _inputs, _refs, _check)


def test_matches_fla_chunk_kda_as_second_baseline():
    """fla-core's chunk_kda on the same inputs (its state is [N, H, K, V]: our transpose) implements the same semantics
    (it is within bf16 noise of the fp32 recurrence), and ours is within twice the larger of fla's and the bf16
    emulation's error."""
    fla_kda = pytest.importorskip("fla.ops.kda")
    from cudnn.linear_attention import kimi_delta_attention
    from cudnn_testing.data import cu_seqlens

    lengths = [300, 1, 64, 200]
    cu = cu_seqlens(lengths, "cuda")
    q, k, v, g, beta, h0 = _inputs(sum(lengths), 4, 4, 128, True, len(lengths), regime="safe_gate")
    ours, ours_s = kimi_delta_attention(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    fla_o, fla_s = fla_kda.chunk_kda(
        q[None],
        k[None],
        v[None],
        g[None],
        beta[None],
        initial_state=h0.transpose(-1, -2).contiguous(),
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        cu_seqlens=cu.long(),
    )
    torch.cuda.synchronize()
    ref_o, ref_s, low_o, low_s = _refs(q, k, v, g, beta, h0, True, cu)
    for name, out, fla, ref, low in (("o", ours, fla_o[0], ref_o, low_o), ("final_state", ours_s, fla_s.transpose(-1, -2), ref_s, low_s)):
        scale = ref.abs().max().item()
        err_fla = (fla.float() - ref).abs().max().item()
        err_low = (low.float() - ref).abs().max().item()
        err = (out.float() - ref).abs().max().item()
        assert err_fla <= 0.05 * scale, f"{name}: fla differs from the recurrence by {err_fla:.3g} (max|ref| {scale:.3g}): semantics mismatch"
        assert err <= 2 * max(err_fla, err_low) + 1e-3 * scale, f"{name}: ours {err:.3g}, fla {err_fla:.3g}, bf16 emulation {err_low:.3g}"
