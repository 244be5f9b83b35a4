"""Kimi Delta Attention backward: the APIBase adapter :class:`KimiDeltaAttentionBwdSm90` (not exported yet: GPU validation pending).

Gradients of ``o`` (and of the final state) of :class:`cudnn.linear_attention.kda.api.KimiDeltaAttentionFwdSm90` with
respect to q, k, v, g (per key channel), beta and the initial state, by the chunked backward (chunk 64) in three launches
on one stream (``bwd_states_kernel.py``: pass 1 chunk states, ``Tm`` and ``P``, pass 2 state gradients;
``chunk_bwd_kernel.py``: pass 3 intra-chunk gradients; the math is
``shared/cudnn_testing/reference_linear_attention.py::kimi_delta_attention_chunked_bwd_ref``).

``KimiDeltaAttentionBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, *, scale=None, use_qk_l2norm_in_kernel=False,
initial_state=None, dinitial_state=None, dfinal_state=None, cu_seqlens=None)``:

- inputs as the forward (q, k [T, Hk, K]; v, do [T, H, V]; bf16, unit channel stride, token / head strides multiples
  of 8 elements, 16-byte aligned; g [T, H, K] and beta [T, H] contiguous fp32 or bf16; ``cu_seqlens`` int32 [N + 1]; a
  dense [B, L, H, D] batch is the equal-length case); ``dfinal_state`` fp32 [N, H, V, K] (None: zero);
- outputs: dq, dk, dv bf16 of q's / v's shape (unit channel stride, 8-aligned token / head strides), dg fp32 of g's
  shape and dbeta fp32 of beta's shape, contiguous; ``dinitial_state`` fp32 [N, H, V, K] contiguous (required exactly
  when ``initial_state`` is given);
- this first version declines (NotImplementedError, Rule 2) ``use_qk_l2norm_in_kernel=True`` and GVA (Hk != H);
- workspace (recipe R2, from the caller): ``workspace_bytes(T, N, H, D)`` bytes holding the bf16 chunk states and
  state gradients [N + T // 64 + 1, H, V, K], the bf16 new values and their gradients [T, H, V] and the bf16 ``Tm`` and
  ``P`` [N + T // 64 + 1, H, 64, 64] of every chunk; ``scratch_workspace_bytes()`` is that for the plan's own T and N.

Plan-time (compile key ``bwd_states_kernel.KdaBwdKey``, Rule 4): K, g / beta dtypes, varlen, initial-state and
final-state-gradient flags, the ``parallel_pass1`` / ``dp_split_hilo`` / ``grads_v2`` / ``mn_operands`` switches. Runtime: T, N, B, L, H, Hk, strides, scale, the chunk-group count of pass 3 (from T, N, H on
the host). ``execute`` validates metadata, carves the workspace and launches; it never converts, allocates,
synchronizes or reads device memory (Rules 1-3, 8). Imports neither torch nor cutlass at import time.

The host code shared with the GDN backward (constructor, ``check_support``, workspace size, compile, ``execute`` up to
the launches) is ``_host/delta_rule_bwd_api.py::DeltaRuleBwdSm90``; this module holds what differs (compile key, declines,
workspace tail, the kernels' argument order in ``_launch``, ``build_kernel``).

The default schedule (session 10: GPU suites and detectors green with it): ``parallel_pass1``, ``parallel_pass2``,
``fold_prep_tm`` and ``grads_v2`` on; ``parallel_pass2`` / ``fold_prep_tm`` left unset follow their
requirements (``_host/delta_rule_bwd_api.py``), so ``parallel_pass1 = False`` alone gives the serial schedule.

``plan.parallel_pass1`` (default True; set before ``compile()``;
compile-key field ``KdaBwdKey.parallel_pass1``): pass 1 as three chunk-parallel launches -- the forward's prep and state pass (``_host/chunk_parallel.py``'s kernels,
the forward's compile artifacts) into a tail of the workspace (``forward_workspace_bytes(T, N, H, D)`` more bytes,
which ``scratch_workspace_bytes()`` then includes), then ``bwd_states_parallel_kernel.KdaBwdStatesChunk``
(Tm, P, Vn and the chunk states in the serial pass 1's arrays); passes 2 and 3 unchanged. Needs an fp32 ``g`` 4-byte
aligned (the forward prep's 32-bit loads; execute raises ValueError otherwise; every fp32 torch tensor is). False: the
serial pass 1 (``KdaBwdStates``) and the smaller workspace.

``plan.parallel_pass2`` (default True where its requirements hold; before ``compile()``; ``KdaBwdKey.parallel_pass2``; requires ``parallel_pass1``,
ValueError otherwise): pass 2 as two launches -- ``bwd_dstates_parallel_kernel.KdaBwdDStatesPrep`` (the reverse chain's
operands, one CTA per chunk and head, from pass 1's ``Tm`` / ``P``) and the narrow reverse state chain
``_device/dstates_parallel.DeltaRuleBwdDStatesChain`` (grid [N, H, V / 32], TMA-fed), writing pass 2's ``ws_dh``,
``ws_dvn`` and ``d initial_state``; ``dstates_workspace_bytes(T, N, H, D)`` more workspace (after the forward's tail).
False: the serial form.

``plan.dp_split_hilo`` (default True since session 9: GPU tests passed, session 9 call 1; set before ``compile()``;
compile-key field ``KdaBwdKey.dp_split_hilo``, read by pass 3 only): pass 3 multiplies the two dP~ products, rows(dP~, K) and cols(dP~, Q), with their decay-split B operand as
a bf16 hi + lo pair (two WGMMAs into one accumulator). With one bf16 operand (False, the original kernel) the two
products are rounded differently, so the chunk-sum cancellation of ``Q rows(dP~, K) - K cols(dP~, Q)`` inside dG leaves
a rounding residue that the reverse cumsum accumulates: dg missed the FA rule 3-7x under fla's safe-gate range
(g = -5 sigmoid(N(0, 1))), dq / dk ~2x (issue #7; CPU emulation: docs/linear-attention.md, "KDA dg accuracy under hard
gates"). False: session 6's pass 3 (one bf16 operand; byte-identical PTX to it).

``plan.fold_prep_tm`` (default True where its requirements hold; before ``compile()``; ``KdaBwdKey.fold_prep_tm``; requires
``parallel_pass1``, ValueError otherwise): the forward prep of pass 1a is compiled with ``KdaParallelPrepKey.bwd_tm``
(it also writes bf16 ``Tm`` into its ``qg`` tiles, which the backward never reads otherwise) and pass 1b is
``bwd_states_parallel_kernel.KdaBwdStatesFold`` (layout copies of ``h``, ``Tm``, ``p``, ``vnt`` into ``ws_h``,
``ws_tm``, ``ws_p``, ``ws_vn``) instead of ``KdaBwdStatesChunk`` (which recomputes A, P, the solve and Vn). Same
launches and workspace; ``ws_h`` bitwise, ``Tm`` / ``P`` / ``Vn`` equal up to rounding (the forward prep's operation
order). False: pass 1b recomputes (``KdaBwdStatesChunk``).

``plan.grads_v2`` (default True since session 10, ``GRADS_V2_DEFAULT``: pass 3 1827 vs 5064 us at T 8k H 16; session
9, issue #7; before ``compile()``; ``KdaBwdKey.grads_v2``, read by pass 3 only): pass 3 as ``chunk_bwd_v2_kernel.KdaBwdGradsV2`` -- two warpgroups per CTA, one copy of
the per-channel-block code, grouped WGMMA waits -- with v1's arguments, workspace arrays, outputs and roundings (passes
1-2 and the workspace unchanged). False: pass 3 version 1 (``chunk_bwd_kernel.KdaBwdGrads``).

``plan.mn_operands`` (the default where ``grads_v2`` holds since session 29, ``MN_OPERANDS_DEFAULT``: H200, T 8k H 16,
pass 3 1584.8 vs 1801.6 us, the backward 2.518 vs 2.792 ms, dq / dk / dv bitwise the transposed copies'; before ``compile()``; ``KdaBwdKey.mn_operands``, read by pass 3 only; set True without ``grads_v2``:
ValueError at ``compile_key``): pass 3 version 2 reads dVn^T, S0^T, dS1^T, Tm^T, dTm^T, dWm^T, ``(beta dA)^T``, dP~^T
and the decay-split operands as MN-major WGMMA operands of row-major tiles (GDN's ``mn_operands``, see
``gdn/bwd_api.py``): no transposed 2-byte shared-memory copies; the states stored as loaded and the split operands by
16-byte stores. Same products, operand values and accumulation order as v2 (dq, dk, dv expected bitwise equal).

Contract (Rule 3, unchecked on device): the forward's (``cu_seqlens`` well formed; any 8 consecutive per-channel log
decays sum to more than -80).
"""

from __future__ import annotations

from cudnn.datatypes import data_type

from .._host.delta_rule_bwd_api import (
    CHUNK,
    FWD_H,
    DeltaRuleBwdSm90,
    ScheduleKnob,
    build_dstates_chain,
    chunk_groups,
    dstates_workspace_bytes,
    forward_workspace_bytes,
)
from .._host.delta_rule_bwd_api import workspace_bytes as _workspace_bytes
from .._host.launch import fake_gmem_ptr as _fake_ptr
from .._host.launch import gmem_ptr as _ptr

FWD_QG, FWD_P, FWD_VNT = 3, 4, 6  # fold_prep_tm: indices of qg (Tm with bwd_tm), p, vnt among the forward's workspace arrays

#: Default of ``plan.grads_v2`` (module docstring).
GRADS_V2_DEFAULT = True
#: Default of ``plan.mn_operands`` where ``grads_v2`` holds (module docstring; session 29).
MN_OPERANDS_DEFAULT = True

CUTEDSL_FLOOR = "4.8.0"
FAMILY = "linear_attention.kda_bwd"
__all__ = [
    "CHUNK",
    "FAMILY",
    "FWD_H",
    "KimiDeltaAttentionBwdSm90",
    "build_kernel",
    "chunk_groups",
    "dstates_workspace_bytes",
    "forward_workspace_bytes",
    "workspace_bytes",
]


def workspace_bytes(T: int, N: int, H: int, D: int) -> int:
    """Workspace of one backward: two bf16 [N + T // 64 + 1, H, D, D] chunk-state arrays, two bf16 [T, H, D] and two
    bf16 [N + T // 64 + 1, H, 64, 64] (Tm, P)."""
    return _workspace_bytes(T, N, H, D, 2)


class KimiDeltaAttentionBwdSm90(DeltaRuleBwdSm90):
    """Chunked Kimi Delta Attention backward on sm_90a (three launches). Tensors may be torch tensors or TensorDescs."""

    _public = "kimi_delta_attention"
    _name = "KimiDeltaAttentionBwdSm90"
    _family = FAMILY
    _gate_per_key = True
    #: Pass 3's dP~ products with hi + lo decay-split operands (module docstring; set before compile(), a compile-key field;
    #: the default since session 9).
    dp_split_hilo = True
    _compiled_dp_split_hilo = None
    _compiled_fold_prep_tm = None
    #: Pass 3 version 2 (module docstring, "grads_v2"; set before compile(), a compile-key field read by pass 3 only;
    #: the default since session 10).
    grads_v2 = GRADS_V2_DEFAULT
    _compiled_grads_v2 = None
    #: Pass 3 v2 with MN-major operands in place of transposed copies (module docstring, "mn_operands"; set before
    #: compile(), a compile-key field read by pass 3 only; unset: ``MN_OPERANDS_DEFAULT`` where ``grads_v2`` holds).
    mn_operands = ScheduleKnob(lambda: MN_OPERANDS_DEFAULT, ready="_mn_operands_ready")
    _compiled_mn_operands = None

    def _mn_operands_ready(self) -> bool:
        return bool(self.grads_v2)  # an option of pass 3 version 2

    def _forward_class(self):
        from .api import KimiDeltaAttentionFwdSm90

        return KimiDeltaAttentionFwdSm90

    def _declines(self, what: str) -> None:
        q, v = self.q, self.v
        self._decline_if(self.l2norm, f"{what}: use_qk_l2norm_in_kernel=True is not implemented in this version (normalise q, k outside)")
        self._decline_if(q.shape[-2] != v.shape[-2], f"{what}: GVA (q/k heads {q.shape[-2]} != v heads {v.shape[-2]}) is not implemented in this version")

    def _workspace_bytes(self, T: int, N: int, H: int, D: int) -> int:
        n = workspace_bytes(T, N, H, D)
        if self.parallel_pass1:
            n += forward_workspace_bytes(T, N, H, D)
        if self.parallel_pass2:
            n += dstates_workspace_bytes(T, N, H, D)
        return n

    def compile_key(self):
        from .bwd_states_kernel import KdaBwdKey

        fields = self._key_fields()  # ValueError: parallel_pass2 without parallel_pass1
        if self.fold_prep_tm and not self.parallel_pass1:  # fold_prep_tm: pass 1b copies the chunk-parallel pass 1a's arrays
            raise ValueError(f"{self._name}: fold_prep_tm requires parallel_pass1 (set plan.parallel_pass1 = True as well)")
        if self.mn_operands and not self.grads_v2:  # mn_operands: an option of pass 3 version 2
            raise ValueError(f"{self._name}: mn_operands requires grads_v2 (it is an option of pass 3 version 2)")
        return KdaBwdKey(
            parallel_pass1=bool(self.parallel_pass1),
            dp_split_hilo=bool(self.dp_split_hilo),
            parallel_pass2=bool(self.parallel_pass2),
            fold_prep_tm=bool(self.fold_prep_tm),
            grads_v2=bool(self.grads_v2),
            mn_operands=bool(self.mn_operands),
            **fields,
        )

    def _parts(self, key) -> tuple[str, ...]:
        return _parts(key)

    def _cache_key(self, part: str, key):
        """Passes 2 and 3 read no ``parallel_pass1``, passes 1 and 2 no ``dp_split_hilo``, passes 1 and 3 no
        ``parallel_pass2``: those fields are set to their defaults in the part's cache key, so a plan that differs from the
        default in them reuses the default plan's artifacts for the passes that do not read them."""
        from dataclasses import replace

        if part != "states_fold":  # fold_prep_tm: read by pass 1b's fold kernel only
            key = replace(key, fold_prep_tm=False)
        if part != "grads":  # dp_split_hilo, grads_v2, mn_operands: read by pass 3 only
            key = replace(key, dp_split_hilo=True, grads_v2=False, mn_operands=False)
        if part in ("dstates_prep", "dstates_chain"):
            return key
        key = replace(key, parallel_pass2=False)
        if part in ("states_par", "states", "states_fold"):
            return key
        return replace(key, parallel_pass1=False)

    def compile(self) -> None:
        """The backward's passes (``_parts``) and, with ``parallel_pass1``, the forward's chunk-parallel prep and state
        pass (the forward's own compile keys and cache family: one artifact for both directions)."""
        super().compile()
        self._compile_forward_pass1()
        self._compiled_dp_split_hilo = bool(self.dp_split_hilo)
        self._compiled_fold_prep_tm = bool(self.fold_prep_tm)
        self._compiled_grads_v2 = bool(self.grads_v2)
        self._compiled_mn_operands = bool(self.mn_operands)

    def _pass1_prep_options(self) -> dict:
        return {"bwd_tm": True} if self.fold_prep_tm else {}  # fold_prep_tm: the prep also writes Tm (into qg)

    def _pass1_g_align(self) -> int:
        return _fwd_g_align(self.g.dtype)

    def _build_kernel(self, part: str, key):
        return build_kernel(part, key)

    def _launch(self, kernels, ws, t: dict, strides: dict, ext: tuple, stream_of) -> None:
        """Pass 1 (states, Tm, P), pass 2 (dstates), pass 3 (grads) in each kernel's declared argument order; the
        workspace past the shared arrays: Tm, P."""
        T, n_seqs, seq_len, H, Hk, slots = ext
        if self._compiled_dp_split_hilo is not None and bool(self.dp_split_hilo) != self._compiled_dp_split_hilo:
            raise ValueError(f"{self._name}.execute: dp_split_hilo was changed after compile(); call compile() again")
        if self._compiled_fold_prep_tm is not None and bool(self.fold_prep_tm) != self._compiled_fold_prep_tm:
            raise ValueError(f"{self._name}.execute: fold_prep_tm was changed after compile(); call compile() again")
        if self._compiled_grads_v2 is not None and bool(self.grads_v2) != self._compiled_grads_v2:
            raise ValueError(f"{self._name}.execute: grads_v2 was changed after compile(); call compile() again")
        if self._compiled_mn_operands is not None and bool(self.mn_operands) != self._compiled_mn_operands:
            raise ValueError(f"{self._name}.execute: mn_operands was changed after compile(); call compile() again")
        q, k, v, do = (t[n] for n in ("q", "k", "v", "do"))
        ws_tm = ws.take(slots * H * CHUNK * CHUNK, "bfloat16")
        ws_p = ws.take(slots * H * CHUNK * CHUNK, "bfloat16")
        parallel = self._compiled_forward is not None
        if parallel:  # the forward's workspace arrays, carved and checked before any launch
            fext, fwd_ptrs, g_align = self._carve_forward_pass1(ws, t, ext)
        p2 = self._carve_dstates_pass2(ws, ext) if self._compiled_parallel_pass2 else None  # parallel_pass2's arrays: last
        stream = stream_of()
        bf, f32, i32 = data_type.BFLOAT16, data_type.FLOAT, data_type.INT32
        cu = _ptr(t["cu_seqlens"], i32, 4)
        gp, bp = _ptr(t["g"], self.g.dtype, 2), _ptr(t["beta"], self.beta.dtype, 2)
        tm, p = _ptr(ws_tm, bf, 16), _ptr(ws_p, bf, 16)
        ws_h, ws_dh, ws_vn, ws_dvn = (_ptr(t[n], bf, 16) for n in ("ws_h", "ws_dh", "ws_vn", "ws_dvn"))
        if len(kernels) == 4:  # parallel_pass2: (states_par, dstates_prep, dstates_chain, grads)
            states, grads, dstates = kernels[0], kernels[3], kernels[1:3]
        else:
            states, dstates, grads = kernels
        sc = float(self.scale)
        if parallel and self._compiled_fold_prep_tm:  # fold_prep_tm: pass 1b copies the forward's h, Tm (qg), p, vnt
            self._launch_forward_pass1(fext, fwd_ptrs, g_align, t, strides, ext, stream)
            states(
                cu, fwd_ptrs[FWD_H], fwd_ptrs[FWD_QG], fwd_ptrs[FWD_P], fwd_ptrs[FWD_VNT], ws_h, ws_vn, tm, p,
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, slots, stream,
            )  # fmt: skip
        elif parallel:
            self._launch_forward_pass1(fext, fwd_ptrs, g_align, t, strides, ext, stream)
            states(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), gp, bp, cu, fwd_ptrs[FWD_H], ws_h, ws_vn, tm, p,
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, Hk, slots, sc, strides["q"], strides["k"], strides["v"], stream,
            )  # fmt: skip
        else:
            states(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), gp, bp, cu, _ptr(t["initial_state"], f32, 4), ws_h, ws_vn, tm, p,
                T, n_seqs, seq_len, H, Hk, slots, sc, strides["q"], strides["k"], strides["v"], stream,
            )  # fmt: skip
        if p2 is not None:  # pass 2 chunk-parallel: the operands' precompute, then the reverse chain
            prep, chain = dstates
            prep(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(do, bf, 16), gp, bp, cu, tm, p, *(_ptr(a, f32 if a.dtype.itemsize == 4 else bf, 128) for a in p2),
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, Hk, slots, sc, strides["q"], strides["k"], strides["do"], stream,
            )  # fmt: skip
            self._launch_dstates_chain(chain, p2, t, ext, stream)
        else:
            dstates(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(do, bf, 16), gp, bp, cu, _ptr(t["dfinal_state"], f32, 4), _ptr(t["dinitial_state"], f32, 4),
                ws_dh, ws_dvn, tm, p, T, n_seqs, seq_len, H, Hk, slots, sc, strides["q"], strides["k"], strides["do"], stream,
            )  # fmt: skip
        grads(
            _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), _ptr(do, bf, 16), gp, bp, cu, ws_h, ws_dh, ws_vn, ws_dvn, tm,
            _ptr(t["dq"], bf, 2), _ptr(t["dk"], bf, 2), _ptr(t["dv"], bf, 2), _ptr(t["dg"], f32, 4), _ptr(t["dbeta"], f32, 4),
            T, n_seqs, seq_len, H, Hk, slots, chunk_groups(T, n_seqs, H), sc,
            strides["q"], strides["k"], strides["v"], strides["do"], strides["dq"], strides["dk"], strides["dv"], stream,
        )  # fmt: skip


def _parts(key) -> tuple[str, ...]:
    """The backward's launches of a plan: three passes (``parallel_pass1``: pass 1 is ``states_par``, after the forward's
    prep and state pass, which ``compile`` adds; ``parallel_pass2``: pass 2 is ``dstates_prep`` + ``dstates_chain``)."""
    second = ("dstates_prep", "dstates_chain") if key.parallel_pass2 else ("dstates",)
    first = "states_fold" if key.fold_prep_tm else ("states_par" if key.parallel_pass1 else "states")  # fold_prep_tm: pass 1b by copies
    return (first, *second, "grads")


def _fwd_g_align(g_dtype) -> int:
    """The forward prep's ``g`` alignment (its ``_g_align``: 32-bit loads of an fp32 ``g``)."""
    return 4 if g_dtype == data_type.FLOAT else 2


def build_kernel(part: str, key):
    """The ``cute.compile`` of one backward pass from fake pointers and runtime-extent placeholders (Rule 4)."""

    def build():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Float32, Int32, Int64

        bf = lambda: _fake_ptr("BFloat16", 16)  # noqa: E731
        cu = _fake_ptr("Int32", 4) if key.varlen else None
        gp, bp = _fake_ptr(key.g_dtype, 2), _fake_ptr(key.beta_dtype, 2)
        st = (Int64(8), Int64(8))
        if part == "states":
            from .bwd_states_kernel import KdaBwdStates

            h0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(
                KdaBwdStates(key), bf(), bf(), bf(), gp, bp, cu, h0, bf(), bf(), bf(), bf(), *[Int32(8)] * 6, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        if part == "states_par":
            from .bwd_states_parallel_kernel import KdaBwdStatesChunk

            fwd_h = _fake_ptr("BFloat16", 128)  # the forward's h array: 128-byte aligned (chunk_parallel.workspace_pointers)

            return cute.compile(
                KdaBwdStatesChunk(key), bf(), bf(), bf(), gp, bp, cu, fwd_h, bf(), bf(), bf(), bf(), *[Int32(8)] * 8, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        if part == "states_fold":  # fold_prep_tm: the forward's h, Tm (qg), p, vnt -> the backward's arrays
            from .bwd_states_parallel_kernel import KdaBwdStatesFold

            f128 = _fake_ptr("BFloat16", 128)  # the forward's arrays: 128-byte aligned (chunk_parallel.workspace_pointers)
            return cute.compile(KdaBwdStatesFold(key), cu, f128, f128, f128, f128, bf(), bf(), bf(), bf(), *[Int32(8)] * 7, cuda.CUstream(0))
        if part == "dstates_prep":
            from .bwd_dstates_parallel_kernel import KdaBwdDStatesPrep

            b128, f128 = _fake_ptr("BFloat16", 128), _fake_ptr("Float32", 128)  # parallel_pass2's arrays: workspace pieces
            return cute.compile(
                KdaBwdDStatesPrep(key), bf(), bf(), bf(), gp, bp, cu, bf(), bf(), b128, f128, b128, b128, b128, f128,
                *[Int32(8)] * 8, Float32(1.0), st, st, st, cuda.CUstream(0),
            )  # fmt: skip
        if part == "dstates_chain":
            return build_dstates_chain(key)
        if part == "dstates":
            from .bwd_states_kernel import KdaBwdDStates

            dht = _fake_ptr("Float32", 4) if key.has_dfinal else None
            dh0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(
                KdaBwdDStates(key), bf(), bf(), bf(), gp, bp, cu, dht, dh0, bf(), bf(), bf(), bf(), *[Int32(8)] * 6, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        if key.grads_v2:  # pass 3 version 2 (the default): v1's argument list
            from .chunk_bwd_v2_kernel import build_grads_v2

            return build_grads_v2(key)
        from .chunk_bwd_kernel import KdaBwdGrads

        outs = [_fake_ptr("BFloat16", 2)] * 3 + [_fake_ptr("Float32", 4)] * 2
        return cute.compile(
            KdaBwdGrads(key),
            bf(),
            bf(),
            bf(),
            bf(),
            gp,
            bp,
            cu,
            bf(),
            bf(),
            bf(),
            bf(),
            bf(),
            *outs,
            *[Int32(8)] * 7,
            Float32(1.0),
            *[st] * 7,
            cuda.CUstream(0),
        )

    return build
