"""Gated DeltaNet forward: the APIBase adapter :class:`GatedDeltaNetFwdSm90` and the public :func:`gated_delta_net`.

Semantics (state ``S`` [V, K] fp32 per sequence and head; ``a_t = exp(g_t)``, ``g`` the log decay)::

    S_t = a_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T        o_t = S_t (scale q_t)

as fla's ``chunk_gated_delta_rule`` (chunk 64), with q/k optionally L2-normalised in the kernel
(``x * rsqrt(sum x^2 + 1e-6)``) and GVA head sharing (q/k with ``Hk`` heads, v/g/beta/o with ``H = m Hk``;
value head ``h`` reads q/k head ``h // m``). Kernel: ``chunk_fwd_kernel.py`` (sm_90a, WGMMA).

Layouts (THD): q, k [T, Hk, K] / v, o [T, H, V] packed with ``cu_seqlens`` int32 [N + 1]; a dense batch
[B, L, H, D] is the equal-length case (``cu_seqlens`` None), and [1, T, H, D] with ``cu_seqlens`` is
packed THD as fla takes it. q/k/v/o bf16 with unit channel stride; q/k/v token and head strides multiples
of 8 elements and 16-byte aligned bases (16-byte loads; a column slice of a fused projection is read
natively); g, beta [T, H] (or [B, L, H]) contiguous, fp32 or bf16;
``initial_state`` / final state fp32 [N, H, V, K] contiguous (fla's ``h`` is [N, H, K, V]: its transpose).
K = V in {64, 128}.

Plan-time (the compile key, Rule 4): K, g / beta dtypes, L2-norm, varlen, initial / final state flags, and
the triangular-solve variant (``blocked_solve``, a tuning / test knob).
Runtime (kernel arguments): T, N, B, L, H, Hk, every stride and ``scale``; one compiled artifact serves every
batch. ``execute`` validates metadata and launches: it never converts, copies, allocates, synchronizes or
reads device memory (Rules 1-3), and launches on ``current_stream`` (torch's current stream when None).

Contract the kernel cannot check without a device read (Rule 3): ``cu_seqlens`` starts at 0, ends at T and
is non-decreasing; ``g`` is a log decay (g <= 0): every exponent the kernel forms (exp(G_i - G_j) for i >= j,
exp(G_i), exp(G_C - G_i) within a chunk) is then <= 1, so nothing overflows.

Validation, compile and execute are the shared ``_host/delta_rule_api.py::DeltaRuleFwdSm90``; this module sets what
is the family's own (gate shape, compile key, kernel class, cache family). It imports neither torch nor cutlass
at import time; ``check_support`` is metadata-only.
Exported as ``cudnn.linear_attention.gated_delta_net`` and ``GatedDeltaNetFwdSm90`` (GPU-validated on an H200).
"""

from __future__ import annotations

from .._host.chunk_parallel import DEFAULT_SCHEDULE
from .._host.delta_rule_api import CUTEDSL_FLOOR, HEAD_DIMS, DeltaRuleFwdSm90, delta_rule_forward, delta_rule_public

__all__ = ["CUTEDSL_FLOOR", "FAMILY", "HEAD_DIMS", "GatedDeltaNetFwdSm90", "gated_delta_net"]

FAMILY = "linear_attention.gdn"


class GatedDeltaNetFwdSm90(DeltaRuleFwdSm90):
    """Chunked Gated DeltaNet forward on sm_90a. Tensors may be torch tensors or TensorDescs.

    ``GatedDeltaNetFwdSm90(q, k, v, g, beta, o, scale=None, use_qk_l2norm_in_kernel=False,
    initial_state=None, final_state=None, cu_seqlens=None, schedule="serial")``; ``execute`` takes the same
    tensors (token extents, sequence count and, for a dense batch, B and L may differ from the plan's).
    ``schedule="parallel"`` (opt-in) runs the three chunk-parallel kernels and needs
    ``scratch_workspace_bytes(T, N)`` of workspace passed as ``execute(..., workspace=buffer)``.
    """

    _public = "gated_delta_net"
    _family = FAMILY
    _gate_per_key = False
    _parallel_schedule = True  # schedule="parallel": chunk_parallel_prep_kernel.py + kda/chunk_parallel_{state,out}_kernel.py
    _prep_prefetch = True  # GdnParallelPrepKey.prefetch (parallel_prefetch)
    _prep_two_per_sm = True  # GdnParallelPrepKey.two_per_sm (parallel_prep_two_per_sm)

    def __init__(
        self, q, k, v, g, beta, o, *, scale=None, use_qk_l2norm_in_kernel=False, initial_state=None, final_state=None, cu_seqlens=None, schedule="serial"
    ):
        super().__init__(
            q,
            k,
            v,
            g,
            beta,
            o,
            scale=scale,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            initial_state=initial_state,
            final_state=final_state,
            cu_seqlens=cu_seqlens,
            schedule=schedule,
        )
        #: Tuning / test knob (part of the compile key): the blocked 16 x 16 triangular solve (True) or the
        #: plain one-thread-per-column solve (False). Set before compile(). Serial schedule only (the parallel
        #: schedule always solves by blocks).
        self.blocked_solve = True

    def compile_key(self):
        from .chunk_fwd_kernel import GdnFwdKey

        return GdnFwdKey(**self._key_fields(), blocked_solve=bool(self.blocked_solve))

    @classmethod
    def _kernel_class(cls):
        from .chunk_fwd_kernel import GatedDeltaNetChunkFwd

        return GatedDeltaNetChunkFwd

    @classmethod
    def _parallel_kernel_classes(cls):
        from ..kda.chunk_parallel_out_kernel import KdaParallelOutKey, KimiDeltaAttentionParallelOut
        from ..kda.chunk_parallel_state_kernel import KdaParallelStateKey, KimiDeltaAttentionParallelState
        from .chunk_parallel_prep_kernel import GatedDeltaNetParallelPrep, GdnParallelPrepKey

        # The state pass and the output kernel are family-agnostic (per-channel exp(G_C); row-scaled output for GDN).
        return (
            (GdnParallelPrepKey, GatedDeltaNetParallelPrep),
            (KdaParallelStateKey, KimiDeltaAttentionParallelState),
            (KdaParallelOutKey, KimiDeltaAttentionParallelOut),
        )


_PLANS: dict = {}


def _forward(q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out=None, schedule=DEFAULT_SCHEDULE):
    """``(o, final_state or None)``: outputs allocated on torch's current stream (``o`` contiguous with v's shape and dtype
    unless ``out`` supplies it), the cached plan of this metadata signature and ``schedule``, its launches on that stream. The real
    implementation of ``torch.ops.cudnn_linear_attention.gated_delta_net_fwd`` and of the ``out=`` form."""
    return delta_rule_forward(
        GatedDeltaNetFwdSm90, _PLANS, q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out, schedule
    )


def _load_op():
    from .torch_op import gated_delta_net_fwd

    return gated_delta_net_fwd


def gated_delta_net(
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
    """Chunked Gated DeltaNet forward (fla ``chunk_gated_delta_rule`` semantics), sm_90a.

    ``q``, ``k`` [T, Hk, K] or [B, L, Hk, K]; ``v`` [.., H, V]; ``g`` (log decay), ``beta`` [.., H] fp32 or
    bf16; ``cu_seqlens`` int32 [N + 1] for packed varlen (then B must be 1); ``initial_state`` fp32
    [N, H, V, K].
    Returns ``TupleDict(o=..., final_state=...)`` (unpacks as ``o, final_state``), with ``final_state`` fp32
    [N, H, V, K] when ``output_final_state`` else None. Launches on torch's current stream.

    Runs as the torch custom op ``torch.ops.cudnn_linear_attention.gated_delta_net_fwd`` (fake implementation included:
    torch.compile traces it, fullgraph); a plain eager call (no autograd record needed, no tracing or dispatch mode, CUDA
    tensors) runs the op's body directly (``_host/delta_rule_api.py::DIRECT_EAGER``: the same plan, outputs and errors,
    without the custom-op dispatch), on the tvm-ffi launch route with memoized validation. Differentiable: its autograd runs the chunked backward kernels
    (``torch.ops.cudnn_linear_attention.*_bwd``). ``out`` supplies ``o`` and takes
    the forward-only path outside the op (eager; refused with NotImplementedError when an input requires grad).

    ``schedule``: ``"parallel"`` (the default, ``_host/chunk_parallel.py::DEFAULT_SCHEDULE``: three chunk-parallel
    kernels, prep / state pass / output; the op allocates
    their workspace on torch's current stream through the caching allocator, so eager, torch.compile and CUDA-graph
    capture all work) or ``"serial"`` (one kernel, one CTA per sequence, head and 64-wide V slice walking the chunks in
    order). Both give the same outputs (bitwise on the GPU tests); the backward does not depend on it.
    """
    return delta_rule_public(
        "gated_delta_net", _forward, _load_op, q, k, v, g, beta, scale, use_qk_l2norm_in_kernel, initial_state, output_final_state, cu_seqlens, out, schedule
    )
