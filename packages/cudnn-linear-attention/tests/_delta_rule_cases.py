"""Test helpers shared by the gated-delta-rule forward families (Gated DeltaNet ``test_gdn_*``, Kimi Delta
Attention ``test_kda_*``): the family descriptions, plan builders from TensorDescs (CPU tiers), the cubin
frame-size reader (compile tier), GPU batch builders and the GPU detector bodies (recipe R9).

Not a test module (no ``test_`` prefix): pytest's rootdir-relative import puts this folder on ``sys.path``, so the
test files import it as ``_delta_rule_cases``. What differs between the families is the gate: ``g`` [.., H]
(GDN, one log decay per token and head) or [.., H, K] (KDA, one per key channel).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import frame_sizes  # noqa: F401  (re-exported for the test files)


@dataclass(frozen=True)
class Family:
    public: str  # cudnn.linear_attention.<public>
    adapter: str  # the APIBase adapter class name
    api_module: str  # where the adapter and the public function live
    cache_family: str  # kernel_cache family of its compiled kernels
    gate_per_key: bool  # g [.., H, K] (True) or [.., H] (False)

    def api(self):
        return importlib.import_module(self.api_module)

    def adapter_class(self):
        return getattr(self.api(), self.adapter)

    def function(self):
        return getattr(self.api(), self.public)

    def gate_shape(self, lead: tuple, heads: int, head_dim: int) -> tuple:
        """The shape of ``g`` for token dims ``lead``."""
        return (*lead, heads, head_dim) if self.gate_per_key else (*lead, heads)


GDN = Family("gated_delta_net", "GatedDeltaNetFwdSm90", "cudnn.linear_attention.gdn.api", "linear_attention.gdn", False)
KDA = Family("kimi_delta_attention", "KimiDeltaAttentionFwdSm90", "cudnn.linear_attention.kda.api", "linear_attention.kda", True)

#: The module whose ``_stream`` every adapter's execute launches through (the planted-violation target).
EXECUTE_MODULE = "cudnn.linear_attention._host.delta_rule_api"


def skip_unless_family_dsl(fam: Family) -> None:
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", f"cudnn.linear_attention.{fam.public}")


# -- CPU tiers: plans from descriptors -----------------------------------------------------------------


def support_plan(fam: Family, T=300, H=4, Hk=2, D=128, N=3, *, q_dtype="bfloat16", g_dtype="float32", g_shape=None, q=None, state=True, cu=True, **kw):
    """A varlen (or THD without ``cu``) plan from contiguous descriptors; ``q`` / ``g_shape`` override one input."""
    q = q or TensorDesc.contiguous((T, Hk, D), q_dtype, "q")
    v = TensorDesc.contiguous((T, H, D), "bfloat16", "v")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state") if state else None
    return fam.adapter_class()(
        q,
        TensorDesc.contiguous(q.shape, q.dtype, "k"),
        v,
        TensorDesc.contiguous(g_shape or fam.gate_shape((T,), H, D), g_dtype, "g"),
        TensorDesc.contiguous((T, H), "float32", "beta"),
        v,
        initial_state=st,
        final_state=st,
        cu_seqlens=TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens") if cu else None,
        **kw,
    )


def compile_varlen_plan(fam: Family, T, N, D=128, H=4, Hk=2, **kw):
    """The compile tier's varlen plan: K = V = ``D``, L2 norm, initial and final states, fp32 gates; ``kw``: more adapter
    arguments (e.g. ``schedule="parallel"``)."""
    qk = TensorDesc.contiguous((T, Hk, D), "bfloat16", "q")
    v = TensorDesc.contiguous((T, H, D), "bfloat16", "v")
    st = TensorDesc.contiguous((N, H, D, D), "float32", "state")
    return fam.adapter_class()(
        qk,
        qk,
        v,
        TensorDesc.contiguous(fam.gate_shape((T,), H, D), "float32", "g"),
        TensorDesc.contiguous((T, H), "float32", "beta"),
        v,
        use_qk_l2norm_in_kernel=True,
        initial_state=st,
        final_state=st,
        cu_seqlens=TensorDesc.contiguous((N + 1,), "int32", "cu_seqlens"),
        **kw,
    )


# -- GPU detectors (recipe R9) ----------------------------------------------------------------------


def detector_batch(fam: Family, lengths, H=4, Hk=2, D=128, beta_dtype=None):
    """``(q, k, v, g, beta, o, h0, ht, cu_seqlens)`` on the GPU: a packed varlen batch of ``lengths``."""
    import torch
    import torch.nn.functional as F

    from cudnn_testing.data import cu_seqlens

    T = sum(lengths)
    q = torch.randn(T, Hk, D, device="cuda").to(torch.bfloat16)
    k = torch.randn(T, Hk, D, device="cuda").to(torch.bfloat16)
    v = torch.randn(T, H, D, device="cuda").to(torch.bfloat16)
    g = F.logsigmoid(torch.randn(*fam.gate_shape((T,), H, D), device="cuda")) / 8
    beta = torch.rand(T, H, device="cuda").to(beta_dtype or torch.float32)
    o = torch.empty_like(v)
    h0 = torch.randn(len(lengths), H, D, D, device="cuda")
    ht = torch.empty_like(h0)
    return q, k, v, g, beta, o, h0, ht, cu_seqlens(lengths, "cuda")


def detector_plan(fam: Family, args, **kw):
    q, k, v, g, beta, o, h0, ht, cu = args
    return fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, **kw)


def check_execute_no_sync_no_alloc(fam: Family) -> None:
    import torch

    from cudnn_testing import detectors

    args = detector_batch(fam, [1, 700, 64, 300])
    plan = detector_plan(fam, args)
    plan.compile()
    plan.execute(*args)
    torch.cuda.synchronize()
    detectors.assert_no_sync_no_alloc(lambda: plan.execute(*args), repeats=3)


def check_detectors_fail_on_planted_sync_and_allocation(fam: Family, monkeypatch) -> None:
    """Planted violations in the execute path (a host sync, an allocation, in the launch-stream lookup every execute
    makes): each detector must go red."""
    import torch

    from cudnn_testing.planted import assert_detectors_catch_planted_sync

    owner = importlib.import_module(EXECUTE_MODULE)
    args = detector_batch(fam, [200])
    plan = detector_plan(fam, args)
    plan.execute(*args)
    torch.cuda.synchronize()
    assert_detectors_catch_planted_sync(monkeypatch, owner, "_stream", lambda: plan.execute(*args))


def check_first_execute_under_capture_replays_like_eager(fam: Family) -> None:
    import torch

    from cudnn.kernel_cache import kernel_cache
    from cudnn_testing import detectors

    # bf16 beta: a configuration no other test of the family builds, so the kernel build itself runs inside the capture.
    args = detector_batch(fam, [1, 513, 64], beta_dtype=torch.bfloat16)
    plan = detector_plan(fam, args, scale=0.125)
    plan.check_support()
    kernel_cache._entries.pop((fam.cache_family, plan.compile_key()), None)
    o, ht = args[5], args[7]
    detectors.assert_capture_matches_eager(lambda: plan(*args), [o, ht])


def check_default_stream_handle_never_reaches_external_stream(fam: Family, monkeypatch) -> None:
    import torch

    from cudnn_testing import detectors

    args = detector_batch(fam, [300, 5])
    plan = detector_plan(fam, args)
    plan.compile()
    with detectors.external_stream_forbidden(monkeypatch):
        for handle in (0, 1, 2):
            plan.execute(*args, current_stream=handle)
    torch.cuda.synchronize()


def check_new_token_totals_are_cache_hits(fam: Family) -> None:
    import torch

    from cudnn.kernel_cache import kernel_cache

    fn = fam.function()

    def call(lengths):
        q, k, v, g, beta, _, h0, _, cu = detector_batch(fam, lengths)
        return fn(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, initial_state=h0, output_final_state=True, cu_seqlens=cu)

    call([1000])
    misses = kernel_cache.stats.misses
    for lengths in ([1, 2, 3], [5000, 1], [77] * 13):
        call(lengths)
    torch.cuda.synchronize()
    assert kernel_cache.stats.misses == misses


# -- GPU correctness ----------------------------------------------------------------------------------


def check_adapter_execute_rebinds_new_totals(fam: Family, inputs, refs, check) -> None:
    """One adapter, executed on batches with other token totals and sequence counts (no re-plan); ``inputs``,
    ``refs`` and ``check`` are the family test module's input builder, references and tolerance check."""
    import torch

    from cudnn_testing.data import cu_seqlens, poison

    H, D = 2, 128

    def batch(lengths):
        q, k, v, g, beta, h0 = inputs(sum(lengths), H, H, D, True, len(lengths))
        return q, k, v, g, beta, poison(torch.empty_like(v)), h0, torch.empty_like(h0), cu_seqlens(lengths, "cuda")

    first = batch([100, 30])
    plan = fam.adapter_class()(*first[:6], use_qk_l2norm_in_kernel=True, initial_state=first[6], final_state=first[7], cu_seqlens=first[8])
    plan.compile()
    for lengths in ([100, 30], [1, 1, 1, 513], [64] * 9):
        q, k, v, g, beta, o, h0, ht, cu = batch(lengths)
        plan.execute(q, k, v, g, beta, o, h0, ht, cu)
        torch.cuda.synchronize()
        ref_o, ref_s, low_o, low_s = refs(q, k, v, g, beta, h0, True, cu)
        check(o, ref_o, low_o, f"o {lengths}")
        check(ht, ref_s, low_s, f"final_state {lengths}")
