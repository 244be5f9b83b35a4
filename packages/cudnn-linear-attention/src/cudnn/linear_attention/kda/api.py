"""Kimi Delta Attention forward: the APIBase adapter :class:`KimiDeltaAttentionFwdSm90` and the public
:func:`kimi_delta_attention`.

Semantics (state ``S`` [V, K] fp32 per sequence and head; ``g`` [.., H, K] per-key-channel log decays)::

    S_t = S_{t-1} Diag(exp(g_t)) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale q_t)

as fla's ``chunk_kda`` (chunk 64) with ``g`` the precomputed log decay (fla's ``use_gate_in_kernel=False``),
q/k optionally L2-normalised in the kernel (``x * rsqrt(sum x^2 + 1e-6)``) and GVA head sharing (q/k with
``Hk`` heads, v/g/beta/o with ``H = m Hk``). Kernel: ``chunk_fwd_kernel.py`` (sm_90a, WGMMA);
the opt-in ``schedule="parallel"`` plan option runs ``chunk_parallel_{prep,state,out}_kernel.py`` instead (outputs
equal to the serial schedule's up to rounding: the prep kernel computes the WY terms in another order).

Layouts (THD): q, k [T, Hk, K] / v, o [T, H, V] packed with ``cu_seqlens`` int32 [N + 1]; a dense batch
[B, L, H, D] is the equal-length case (``cu_seqlens`` None), and [1, T, H, D] with ``cu_seqlens`` is
packed THD as fla takes it. q/k/v/o bf16 with unit channel stride; q/k/v token and head strides multiples
of 8 elements and 16-byte aligned bases; g [T, H, K] (or [B, L, H, K]) and beta [T, H] (or [B, L, H])
contiguous, fp32 or bf16; ``initial_state`` / final state fp32 [N, H, V, K] contiguous (fla's ``h`` is
[N, H, K, V]: its transpose). K = V in {64, 128}.

Plan-time (the compile key, Rule 4): K, g / beta dtypes, L2-norm, varlen, initial / final state flags.
Runtime (kernel arguments): T, N, B, L, H, Hk, every stride and ``scale``. ``execute`` validates metadata and
launches: it never converts, copies, allocates, synchronizes or reads device memory (Rules 1-3).

Contract the kernel cannot check without a device read (Rule 3): ``cu_seqlens`` starts at 0, ends at T and
is non-decreasing; ``g`` is a log decay (g <= 0) and any 8 consecutive tokens' log decays of a channel sum to
more than -80 (g >= -10 per token is enough; fla's ``safe_gate`` range [-5, 0) is inside it): the kernel
splits the in-chunk decay around a reference token per 16-token block (chunk_fwd_kernel.py), and those
factors then stay finite.

Validation, compile and execute are the shared ``_host/delta_rule_api.py::DeltaRuleFwdSm90``; this module sets what
is the family's own (gate shape, compile key, kernel class, cache family). It imports neither torch nor cutlass
at import time; ``check_support`` is metadata-only.
"""

from __future__ import annotations

from cudnn.datatypes import data_type

from .._host.chunk_parallel import DEFAULT_SCHEDULE
from .._host.delta_rule_api import CUTEDSL_FLOOR, HEAD_DIMS, DeltaRuleFwdSm90, delta_rule_forward, delta_rule_public

__all__ = ["CUTEDSL_FLOOR", "FAMILY", "HEAD_DIMS", "KimiDeltaAttentionFwdSm90", "kimi_delta_attention"]

FAMILY = "linear_attention.kda"


class KimiDeltaAttentionFwdSm90(DeltaRuleFwdSm90):
    """Chunked Kimi Delta Attention forward on sm_90a. Tensors may be torch tensors or TensorDescs.

    ``KimiDeltaAttentionFwdSm90(q, k, v, g, beta, o, scale=None, use_qk_l2norm_in_kernel=False,
    initial_state=None, final_state=None, cu_seqlens=None, schedule="serial")``; ``execute`` takes the same
    tensors (token extents, sequence count and, for a dense batch, B and L may differ from the plan's).
    ``schedule="parallel"`` (opt-in) runs the three chunk-parallel kernels and needs
    ``scratch_workspace_bytes(T, N)`` of workspace passed as ``execute(..., workspace=buffer)``.
    """

    _public = "kimi_delta_attention"
    _family = FAMILY
    _gate_per_key = True
    _parallel_schedule = True  # schedule="parallel": chunk_parallel_{prep,state,out}_kernel.py
    # No prep knobs (parallel_prefetch / parallel_prep_two_per_sm / parallel_fast_exp raise a ValueError at compile; the
    # one prep kernel already runs two CTAs per SM, exp2 decays); its key fields (narrow_ap, ref_table, tiled_solve,
    # lean_gates: all on by default since session 6) are reached through set_parallel_options.

    def _g_align(self) -> int:
        """The prep kernel reads an fp32 ``g`` by 32-bit loads: bound 4-byte aligned (execute checks the address)."""
        return 4 if self.g.dtype == data_type.FLOAT else 2

    def compile_key(self):
        from .chunk_fwd_kernel import KdaFwdKey

        return KdaFwdKey(**self._key_fields())

    @classmethod
    def _kernel_class(cls):
        from .chunk_fwd_kernel import KimiDeltaAttentionChunkFwd

        return KimiDeltaAttentionChunkFwd

    @classmethod
    def _parallel_kernel_classes(cls):
        from .chunk_parallel_out_kernel import KdaParallelOutKey, KimiDeltaAttentionParallelOut
        from .chunk_parallel_prep_kernel import KdaParallelPrepKey, KimiDeltaAttentionParallelPrep
        from .chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState

        return (
            (KdaParallelPrepKey, KimiDeltaAttentionParallelPrep),
            (KdaParallelStateKey, KimiDeltaAttentionParallelState),
            (KdaParallelOutKey, KimiDeltaAttentionParallelOut),
        )


_PLANS: dict = {}


def _forward(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out=None, schedule=DEFAULT_SCHEDULE):
    """``(o, final_state or None)``: outputs allocated on torch's current stream (``o`` contiguous with v's shape and dtype
    unless ``out`` supplies it), the cached plan of this metadata signature and ``schedule``, its launches on that stream. The real
    implementation of ``torch.ops.cudnn_linear_attention.kimi_delta_attention_fwd`` and of the ``out=`` form."""
    return delta_rule_forward(
        KimiDeltaAttentionFwdSm90, _PLANS, q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out, schedule
    )


def _load_op():
    from .torch_op import kimi_delta_attention_fwd

    return kimi_delta_attention_fwd


def kimi_delta_attention(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale: float | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    initial_state=None,
    output_final_state: bool = False,
    cu_seqlens=None,
    out=None,
    schedule: str = DEFAULT_SCHEDULE,
):
    """Chunked Kimi Delta Attention forward (fla ``chunk_kda`` semantics with a precomputed log decay), sm_90a.

    ``q``, ``k`` [T, Hk, K] or [B, L, Hk, K]; ``v`` [.., H, V]; ``g`` [.., H, K] per-channel log decays and
    ``beta`` [.., H], fp32 or bf16; ``cu_seqlens`` int32 [N + 1] for packed varlen (then B must be 1);
    ``initial_state`` fp32 [N, H, V, K].
    Returns ``TupleDict(o=..., final_state=...)`` (unpacks as ``o, final_state``), with ``final_state`` fp32
    [N, H, V, K] when ``output_final_state`` else None. Launches on torch's current stream.

    Runs as the torch custom op ``torch.ops.cudnn_linear_attention.kimi_delta_attention_fwd`` (fake implementation included:
    torch.compile traces it, fullgraph); a plain eager call (no autograd record needed, no tracing or dispatch mode, CUDA
    tensors) runs the op's body directly (``_host/delta_rule_api.py::DIRECT_EAGER``: the same plan, outputs and errors,
    without the custom-op dispatch), on the tvm-ffi launch route with memoized validation. Differentiable: its autograd runs the chunked backward kernels
    (``torch.ops.cudnn_linear_attention.*_bwd``). For KDA, in-kernel L2 norm and GVA are not served by the
    backward: the forward call raises NotImplementedError when an input requires grad. ``out`` supplies ``o`` and takes
    the forward-only path outside the op (eager; refused with NotImplementedError when an input requires grad).

    ``schedule``: ``"parallel"`` (the default, ``_host/chunk_parallel.py::DEFAULT_SCHEDULE``: three chunk-parallel
    kernels, prep / state pass / output; the op allocates
    their workspace on torch's current stream through the caching allocator, so eager, torch.compile and CUDA-graph
    capture all work) or ``"serial"`` (one kernel, one CTA per sequence, head and 64-wide V slice walking the chunks in
    order). Both give the same outputs up to rounding (the parallel prep kernel uses ``ex2.approx``
    decays and another solve order: FlashAttention-rule tests against the fp32 recurrence); the backward does not
    depend on it.
    """
    return delta_rule_public(
        "kimi_delta_attention",
        _forward,
        _load_op,
        q,
        k,
        v,
        g,
        beta,
        scale,
        use_qk_l2norm_in_kernel,
        initial_state,
        output_final_state,
        cu_seqlens,
        out,
        schedule,
    )
