"""Gated DeltaNet backward: the APIBase adapter :class:`GatedDeltaNetBwdSm90` (not exported yet: GPU validation pending).

Gradients of ``o`` (and of the final state) of :class:`cudnn.linear_attention.gdn.api.GatedDeltaNetFwdSm90` with
respect to q, k, v, g, beta and the initial state, by the chunked backward (chunk 64) in three launches (four with
GVA) on one stream (``bwd_states_kernel.py``: pass 1 chunk states, pass 2 state gradients; ``chunk_bwd_kernel.py``: pass 3
intra-chunk gradients; the math is ``shared/cudnn_testing/reference_linear_attention.py::gated_delta_net_chunked_bwd_ref``).

``GatedDeltaNetBwdSm90(q, k, v, g, beta, do, dq, dk, dv, dg, dbeta, *, scale=None, use_qk_l2norm_in_kernel=False,
initial_state=None, dinitial_state=None, dfinal_state=None, cu_seqlens=None)``:

- inputs as the forward (q, k [T, Hk, K]; v, do [T, H, V]; bf16, unit channel stride, token / head strides multiples
  of 8 elements, 16-byte aligned; g, beta [T, H] contiguous fp32 or bf16; ``cu_seqlens`` int32 [N + 1]; a dense
  [B, L, H, D] batch is the equal-length case); ``dfinal_state`` fp32 [N, H, V, K] the gradient of the final state
  (None: zero);
- outputs: dq, dk, dv bf16 of q's / v's shape (unit channel stride, any 8-aligned token / head strides), dg, dbeta
  fp32 [T, H] contiguous, ``dinitial_state`` fp32 [N, H, V, K] contiguous (required exactly when ``initial_state``
  is given);
- ``use_qk_l2norm_in_kernel`` as the forward's (the gradients are with respect to the raw q, k);
- GVA head sharing (q/k with Hk heads, v with H = m Hk): pass 3 writes fp32 per-value-head dq / dk partials to the
  workspace and a fourth launch (``bwd_qk_reduce_kernel.py``) sums the m partials of every q/k head;
- workspace (recipe R2, from the caller): ``workspace_bytes(T, N, H, D, store_tm, gva)`` bytes, 128-byte aligned,
  holding the bf16 chunk states and state gradients [N + T // 64 + 1, H, V, K], the bf16 new values and their
  gradients [T, H, V], (``store_tm``, the default) the bf16 Tm [N + T // 64 + 1, H, 64, 64] of every chunk and (GVA)
  the fp32 dq / dk partials [T, H, K]; ``scratch_workspace_bytes()`` is that for the plan's own T and N.

Plan-time (compile key ``bwd_states_kernel.GdnBwdKey``, Rule 4): K, g / beta dtypes, varlen, initial-state and
final-state-gradient flags, L2 norm, GVA (Hk != H), ``store_tm`` (A/B knob, default True). Runtime: T, N, B, L, H, Hk,
strides, scale, the chunk-group count of pass 3 (from T, N, H on the host, never from device data). ``execute`` validates metadata, carves the workspace and launches; it never
converts, allocates, synchronizes or reads device memory (Rules 1-3, 8). Imports neither torch nor cutlass at
import time.

The default schedule (session 10: GPU suites and detectors green with it): ``parallel_pass1``, ``parallel_pass2``,
``fold_prep_tm`` on; ``parallel_pass2`` / ``fold_prep_tm`` left unset follow their
requirements (``_host/delta_rule_bwd_api.py``), so ``parallel_pass1 = False`` alone gives the serial schedule.

``plan.parallel_pass1`` (default True; set before ``compile()``;
``GdnBwdKey.parallel_pass1``): pass 1 as three chunk-parallel launches -- the forward's chunk-parallel prep and state pass (its compile artifacts) into a workspace tail
(``forward_workspace_bytes(T, N, H, D)`` more bytes, included by ``scratch_workspace_bytes()``), then
``bwd_states_parallel_kernel.GdnBwdStatesChunk`` (Vn, Tm and the chunk states in the serial pass 1's arrays); passes 2-4
unchanged (design note: ``kda/bwd_states_parallel_kernel.py``). False: the serial pass 1 (``GdnBwdStates``) and the
smaller workspace.

``plan.parallel_pass2`` (default True where its requirements hold; before ``compile()``; ``GdnBwdKey.parallel_pass2``; requires ``parallel_pass1``
and ``store_tm``, ValueError otherwise): pass 2 as two launches -- ``bwd_dstates_parallel_kernel.GdnBwdDStatesPrep``
(the reverse chain's operands, one CTA per chunk and head) and the narrow reverse state chain
``_device/dstates_parallel.DeltaRuleBwdDStatesChain`` (grid [N, H, V / 32], TMA-fed), writing pass 2's ``ws_dh``,
``ws_dvn`` and ``d initial_state``; ``dstates_workspace_bytes(T, N, H, D)`` more workspace (after the forward's tail).
False: the serial form.

``plan.fold_prep_tm`` (default True where its requirements hold; before ``compile()``; ``GdnBwdKey.fold_prep_tm``; requires
``parallel_pass1`` and ``store_tm``, ValueError otherwise): the forward prep of pass 1a is compiled with
``GdnParallelPrepKey.bwd_tm`` (it also writes bf16 ``Tm`` into its ``qg`` tiles, which the backward never reads
otherwise) and pass 1b is ``bwd_states_parallel_kernel.GdnBwdStatesFold`` (layout copies of ``h``, ``Tm``, ``vnt`` into
``ws_h``, ``ws_tm``, ``ws_vn``) instead of ``GdnBwdStatesChunk`` (which recomputes A, the solve and Vn). Same launches
and workspace; ``ws_h`` bitwise, ``Tm`` / ``Vn`` equal up to rounding (the forward prep's operation order). False:
pass 1b recomputes.

``plan.grads_v2`` (default True where ``store_tm`` holds since session 11, ``GRADS_V2_DEFAULT``: pass 3 940 vs 4118 us
at T 8k H 16, the backward 1669 vs 4847 us; left unset with ``store_tm=False`` it follows to version 1; before
``compile()``; ``GdnBwdKey.grads_v2``, read by pass 3 only; set True with ``store_tm=False``: ``compile_key`` raises
ValueError, never a silent v1): pass 3 as ``chunk_bwd_v2_kernel.GdnBwdGradsV2`` -- two warpgroups per CTA, one copy of
the per-channel-block code, grouped WGMMA waits -- with v1's arguments, workspace arrays, outputs and roundings (passes
1-2 and the workspace unchanged). False: pass 3 version 1 (``chunk_bwd_kernel.GdnBwdGrads``).

``plan.mn_operands`` (default True where ``grads_v2`` holds since session 12, ``MN_OPERANDS_DEFAULT``; before
``compile()``; ``GdnBwdKey.mn_operands``, read by pass 3 only; set True without ``grads_v2``: ValueError at
``compile_key``): pass 3 version 2 reads K^T, Q^T, dVn^T, dWm^T, S0^T, dS1^T, Tm^T and dP~^T as MN-major WGMMA
operands of the row-major tiles (the 128-byte-swizzled [rows, 64] tile is the canonical MN-major layout when the
contraction runs over its rows) instead of writing transposed copies (``chunk_bwd_v2_kernel.py``: 2-byte shared stores
716 -> 236 in the PTX at K = 128, 40 KiB less shared memory, 224 registers instead of 241). Same products, operands
and roundings: dq / dk / dv bitwise equal to v1's on the H200 (``tests/test_la_bwd_p3_gdn.py``); pass 3 890 vs 940 us
at T 8k H 16, the backward 1621 vs 1685 us (session 12, ``docs/benchmarks/la_bwd_s12/``). False: v2 with transposed
copies.

The host code shared with the KDA backward (constructor, ``check_support``, workspace size, compile, ``execute`` up to
the launches) is ``_host/delta_rule_bwd_api.py::DeltaRuleBwdSm90``; this module holds what differs (compile key, declines,
workspace tail, the kernels' argument order in ``_launch``, ``build_kernel``).
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

FWD_QG, FWD_VNT = 3, 6  # fold_prep_tm: indices of qg (Tm with bwd_tm) and vnt among the forward's workspace arrays

#: Default of ``plan.grads_v2`` where ``store_tm`` holds (module docstring).
GRADS_V2_DEFAULT = True
#: Default of ``plan.mn_operands`` where ``grads_v2`` holds (module docstring).
MN_OPERANDS_DEFAULT = True

CUTEDSL_FLOOR = "4.8.0"
FAMILY = "linear_attention.gdn_bwd"
__all__ = [
    "CHUNK",
    "FAMILY",
    "FWD_H",
    "GatedDeltaNetBwdSm90",
    "build_kernel",
    "chunk_groups",
    "dstates_workspace_bytes",
    "forward_workspace_bytes",
    "workspace_bytes",
]


def workspace_bytes(T: int, N: int, H: int, D: int, store_tm: bool = True, gva: bool = False) -> int:
    """Workspace of one backward: two bf16 [N + T // 64 + 1, H, D, D] chunk-state arrays, two bf16 [T, H, D], with
    ``store_tm`` the bf16 [N + T // 64 + 1, H, 64, 64] Tm of every chunk, and with ``gva`` two fp32 [T, H, D] dq / dk
    partials."""
    return _workspace_bytes(T, N, H, D, 1 if store_tm else 0, gva)


class GatedDeltaNetBwdSm90(DeltaRuleBwdSm90):
    """Chunked Gated DeltaNet backward on sm_90a (three launches). Tensors may be torch tensors or TensorDescs."""

    _public = "gated_delta_net"
    _name = "GatedDeltaNetBwdSm90"
    _family = FAMILY
    _compiled_fold_prep_tm = None
    #: Pass 3 version 2 (module docstring, "grads_v2"; set before compile(), a compile-key field read by pass 3 only;
    #: unset: ``GRADS_V2_DEFAULT`` where ``store_tm`` holds, else version 1).
    grads_v2 = ScheduleKnob(lambda: GRADS_V2_DEFAULT, ready="_grads_v2_ready")
    _compiled_grads_v2 = None
    #: Pass 3 v2 with MN-major operands in place of transposed copies (module docstring, "mn_operands"; set before
    #: compile(), a compile-key field read by pass 3 only; unset: ``MN_OPERANDS_DEFAULT`` where ``grads_v2`` holds).
    mn_operands = ScheduleKnob(lambda: MN_OPERANDS_DEFAULT, ready="_mn_operands_ready")
    _compiled_mn_operands = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: Tuning / A-B knob (part of the compile key): pass 1 stores Tm in the workspace for passes 2 and 3 (True), or
        #: each pass recomputes K K^T and the triangular solve (False: less workspace, two more solves). Set before compile().
        self.store_tm = True

    def _schedule_ready(self) -> bool:
        return bool(self.parallel_pass1) and bool(self.store_tm)

    def _grads_v2_ready(self) -> bool:
        return bool(self.store_tm)  # pass 3 v2 reads pass 1's Tm (no in-kernel solve)

    def _mn_operands_ready(self) -> bool:
        return bool(self.grads_v2)  # an option of pass 3 version 2

    def _forward_class(self):
        from .api import GatedDeltaNetFwdSm90

        return GatedDeltaNetFwdSm90

    def _workspace_bytes(self, T: int, N: int, H: int, D: int) -> int:
        base = workspace_bytes(T, N, H, D, bool(self.store_tm), self.q.shape[-2] != self.v.shape[-2])
        base += forward_workspace_bytes(T, N, H, D) if self.parallel_pass1 else 0
        return base + (dstates_workspace_bytes(T, N, H, D) if self.parallel_pass2 else 0)

    def compile_key(self):
        from .bwd_states_kernel import GdnBwdKey

        fields = self._key_fields()  # ValueError: parallel_pass2 without parallel_pass1
        if self.parallel_pass2 and not self.store_tm:
            raise ValueError(f"{self._name}: parallel_pass2 requires store_tm (its precompute reads pass 1's Tm)")
        if self.fold_prep_tm and not self.parallel_pass1:  # fold_prep_tm: pass 1b copies the chunk-parallel pass 1a's arrays
            raise ValueError(f"{self._name}: fold_prep_tm requires parallel_pass1 (set plan.parallel_pass1 = True as well)")
        if self.fold_prep_tm and not self.store_tm:  # fold_prep_tm: its point is the Tm copy into ws_tm
            raise ValueError(f"{self._name}: fold_prep_tm requires store_tm (it copies the forward prep's Tm into ws_tm)")
        if self.grads_v2 and not self.store_tm:  # grads_v2: pass 3 v2 reads pass 1's Tm (no in-kernel solve)
            raise ValueError(f"{self._name}: grads_v2 requires store_tm (pass 3 v2 reads pass 1's Tm); set plan.grads_v2 = False for store_tm=False")
        if self.mn_operands and not self.grads_v2:  # mn_operands: an option of pass 3 version 2
            raise ValueError(f"{self._name}: mn_operands requires grads_v2 (it is an option of pass 3 version 2)")
        return GdnBwdKey(
            store_tm=bool(self.store_tm),
            parallel_pass1=bool(self.parallel_pass1),
            parallel_pass2=bool(self.parallel_pass2),
            fold_prep_tm=bool(self.fold_prep_tm),
            grads_v2=bool(self.grads_v2),
            mn_operands=bool(self.mn_operands),
            **fields,
        )

    def _parts(self, key) -> tuple[str, ...]:
        return _parts(key)

    def _cache_key(self, part: str, key):
        """Passes 2-4 read no ``parallel_pass1``, passes 1, 3, 4 no ``parallel_pass2``: those fields are set to their
        defaults in the part's cache key, so a plan that differs from the default in them reuses the default plan's
        artifacts for the passes that do not read them."""
        from dataclasses import replace

        if part != "states_fold":  # fold_prep_tm: read by pass 1b's fold kernel only
            key = replace(key, fold_prep_tm=False)
        if part != "grads":  # grads_v2, mn_operands: read by pass 3 only
            key = replace(key, grads_v2=False, mn_operands=False)
        if part in ("dstates_prep", "dstates_chain"):
            return key
        key = replace(key, parallel_pass2=False)
        if part in ("states_par", "states", "states_fold"):
            return key
        return replace(key, parallel_pass1=False)

    def compile(self) -> None:
        """The backward's passes (``_parts``) and, with ``parallel_pass1``, the forward's chunk-parallel prep and state
        pass (the forward's own compile keys and cache family)."""
        super().compile()
        self._compile_forward_pass1()
        self._compiled_fold_prep_tm = bool(self.fold_prep_tm)
        self._compiled_grads_v2 = bool(self.grads_v2)
        self._compiled_mn_operands = bool(self.mn_operands)

    def _pass1_prep_options(self) -> dict:
        return {"bwd_tm": True} if self.fold_prep_tm else {}  # fold_prep_tm: the prep also writes Tm (into qg)

    def _build_kernel(self, part: str, key):
        return build_kernel(part, key)

    def _launch(self, kernels, ws, t: dict, strides: dict, ext: tuple, stream_of) -> None:
        """Pass 1 (states), pass 2 (dstates), pass 3 (grads) and, with GVA, the dq / dk reduction, in each kernel's
        declared argument order; the workspace past the shared arrays: Tm (``store_tm``), the GVA fp32 partials."""
        T, n_seqs, seq_len, H, Hk, slots = ext
        if self._compiled_fold_prep_tm is not None and bool(self.fold_prep_tm) != self._compiled_fold_prep_tm:
            raise ValueError(f"{self._name}.execute: fold_prep_tm was changed after compile(); call compile() again")
        if self._compiled_grads_v2 is not None and bool(self.grads_v2) != self._compiled_grads_v2:
            raise ValueError(f"{self._name}.execute: grads_v2 was changed after compile(); call compile() again")
        if self._compiled_mn_operands is not None and bool(self.mn_operands) != self._compiled_mn_operands:
            raise ValueError(f"{self._name}.execute: mn_operands was changed after compile(); call compile() again")
        D = int(t["q"].shape[-1])
        q, k, v, g, beta, do, dq, dk = (t[n] for n in ("q", "k", "v", "g", "beta", "do", "dq", "dk"))
        store_tm, gva = bool(self.store_tm), Hk != H
        ws_tm = _ptr(ws.take(slots * H * CHUNK * CHUNK, "bfloat16"), data_type.BFLOAT16, 16) if store_tm else None
        if gva:  # pass 3 writes fp32 per-value-head dq / dk partials, pass 4 sums them into dq, dk
            ws_dq, ws_dk = ws.take(max(T, 1) * H * D, "float32"), ws.take(max(T, 1) * H * D, "float32")
            dq_out, dk_out = _ptr(ws_dq, data_type.FLOAT, 16), _ptr(ws_dk, data_type.FLOAT, 16)
            dq_st = dk_st = (H * D, D)
        else:
            dq_out, dk_out = _ptr(dq, data_type.BFLOAT16, 2), _ptr(dk, data_type.BFLOAT16, 2)
            dq_st, dk_st = strides["dq"], strides["dk"]
        parallel = self._compiled_forward is not None
        if parallel:  # the forward's workspace arrays (after the family's own), carved and checked before any launch
            fext, fwd_ptrs, g_align = self._carve_forward_pass1(ws, t, ext)
        p2 = self._carve_dstates_pass2(ws, ext) if self._compiled_parallel_pass2 else None  # parallel_pass2's arrays: last
        stream = stream_of()
        bf, f32, i32 = data_type.BFLOAT16, data_type.FLOAT, data_type.INT32
        cu = _ptr(t["cu_seqlens"], i32, 4)
        gp, bp = _ptr(g, self.g.dtype, 2), _ptr(beta, self.beta.dtype, 2)
        ws_h, ws_dh, ws_vn, ws_dvn = (_ptr(t[n], bf, 16) for n in ("ws_h", "ws_dh", "ws_vn", "ws_dvn"))
        if p2 is not None:  # (states_par, dstates_prep, dstates_chain, grads[, qk_reduce])
            states, dstates, grads = kernels[0], kernels[1:3], kernels[3]
            kernels = (*kernels[:1], None, *kernels[3:])  # the GVA reduction stays at index 3
        else:
            states, dstates, grads = kernels[:3]
        sc = float(self.scale)
        if parallel and self._compiled_fold_prep_tm:  # fold_prep_tm: pass 1b copies the forward's h, Tm (qg), vnt
            self._launch_forward_pass1(fext, fwd_ptrs, g_align, t, strides, ext, stream)
            states(
                cu, fwd_ptrs[FWD_H], fwd_ptrs[FWD_QG], fwd_ptrs[FWD_VNT], ws_h, ws_vn, ws_tm,
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, slots, stream,
            )  # fmt: skip
        elif parallel:
            self._launch_forward_pass1(fext, fwd_ptrs, g_align, t, strides, ext, stream)
            states(
                _ptr(k, bf, 16), _ptr(v, bf, 16), gp, bp, cu, fwd_ptrs[FWD_H], ws_h, ws_vn, ws_tm,
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, Hk, slots, strides["k"], strides["v"], stream,
            )  # fmt: skip
        else:
            states(
                _ptr(k, bf, 16), _ptr(v, bf, 16), gp, bp, cu, _ptr(t["initial_state"], f32, 4), ws_h, ws_vn, ws_tm,
                T, n_seqs, seq_len, H, Hk, slots, strides["k"], strides["v"], stream,
            )  # fmt: skip
        if p2 is not None:  # pass 2 chunk-parallel: the operands' precompute, then the reverse chain
            prep, chain = dstates
            prep(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(do, bf, 16), gp, bp, cu, ws_tm, *(_ptr(a, f32 if a.dtype.itemsize == 4 else bf, 128) for a in p2),
                T, n_seqs, seq_len, fext.chunks_per_seq, fext.slots, H, Hk, slots, sc, strides["q"], strides["k"], strides["do"], stream,
            )  # fmt: skip
            self._launch_dstates_chain(chain, p2, t, ext, stream)
        else:
            dstates(
                _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(do, bf, 16), gp, bp, cu, _ptr(t["dfinal_state"], f32, 4), _ptr(t["dinitial_state"], f32, 4),
                ws_dh, ws_dvn, ws_tm, T, n_seqs, seq_len, H, Hk, slots, sc, strides["q"], strides["k"], strides["do"], stream,
            )  # fmt: skip
        grads(
            _ptr(q, bf, 16), _ptr(k, bf, 16), _ptr(v, bf, 16), _ptr(do, bf, 16), gp, bp, cu, ws_h, ws_dh, ws_vn, ws_dvn, ws_tm,
            dq_out, dk_out, _ptr(t["dv"], bf, 2), _ptr(t["dg"], f32, 4), _ptr(t["dbeta"], f32, 4),
            T, n_seqs, seq_len, H, Hk, slots, chunk_groups(T, n_seqs, H), sc,
            strides["q"], strides["k"], strides["v"], strides["do"], dq_st, dk_st, strides["dv"], stream,
        )  # fmt: skip
        if gva:
            kernels[3](
                _ptr(q, bf, 2), _ptr(k, bf, 2), _ptr(ws_dq, f32, 16), _ptr(ws_dk, f32, 16), _ptr(dq, bf, 2), _ptr(dk, bf, 2),
                T, H, Hk, strides["q"], strides["k"], strides["dq"], strides["dk"], stream,
            )  # fmt: skip


def _parts(key) -> tuple[str, ...]:
    """The backward's launches of a plan: three passes, and the GVA reduction (``parallel_pass1``: pass 1 is
    ``states_par``, after the forward's prep and state pass, which ``compile`` adds)."""
    first = "states_fold" if key.fold_prep_tm else ("states_par" if key.parallel_pass1 else "states")  # fold_prep_tm: pass 1b by copies
    second = ("dstates_prep", "dstates_chain") if key.parallel_pass2 else ("dstates",)
    return (first, *second, "grads", "qk_reduce") if key.gva else (first, *second, "grads")


def build_kernel(part: str, key):
    """The ``cute.compile`` of one backward pass from fake pointers and runtime-extent placeholders (Rule 4)."""

    def build():
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Float32, Int32, Int64

        bf = lambda: _fake_ptr("BFloat16", 16)  # noqa: E731
        cu = _fake_ptr("Int32", 4) if key.varlen else None
        gp, bp = _fake_ptr(key.g_dtype, 2), _fake_ptr(key.beta_dtype, 2)
        tm = _fake_ptr("BFloat16", 16) if key.store_tm else None
        st = (Int64(8), Int64(8))
        if part == "states":
            from .bwd_states_kernel import GdnBwdStates

            h0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(GdnBwdStates(key), bf(), bf(), gp, bp, cu, h0, bf(), bf(), tm, *[Int32(8)] * 6, st, st, cuda.CUstream(0))
        if part == "states_par":
            from .bwd_states_parallel_kernel import GdnBwdStatesChunk

            fwd_h = _fake_ptr("BFloat16", 128)  # the forward's h array: 128-byte aligned (chunk_parallel.workspace_pointers)
            return cute.compile(GdnBwdStatesChunk(key), bf(), bf(), gp, bp, cu, fwd_h, bf(), bf(), tm, *[Int32(8)] * 8, st, st, cuda.CUstream(0))
        if part == "states_fold":  # fold_prep_tm: the forward's h, Tm (qg), vnt -> the backward's arrays
            from .bwd_states_parallel_kernel import GdnBwdStatesFold

            f128 = _fake_ptr("BFloat16", 128)  # the forward's arrays: 128-byte aligned (chunk_parallel.workspace_pointers)
            return cute.compile(GdnBwdStatesFold(key), cu, f128, f128, f128, bf(), bf(), bf(), *[Int32(8)] * 7, cuda.CUstream(0))
        if part == "dstates_prep":
            from .bwd_dstates_parallel_kernel import GdnBwdDStatesPrep

            b128, f128 = _fake_ptr("BFloat16", 128), _fake_ptr("Float32", 128)  # parallel_pass2's arrays: workspace pieces
            return cute.compile(
                GdnBwdDStatesPrep(key), bf(), bf(), bf(), gp, bp, cu, tm, b128, f128, b128, b128, b128, f128,
                *[Int32(8)] * 8, Float32(1.0), st, st, st, cuda.CUstream(0),
            )  # fmt: skip
        if part == "dstates_chain":
            return build_dstates_chain(key)
        if part == "dstates":
            from .bwd_states_kernel import GdnBwdDStates

            dht = _fake_ptr("Float32", 4) if key.has_dfinal else None
            dh0 = _fake_ptr("Float32", 4) if key.has_initial else None
            return cute.compile(
                GdnBwdDStates(key), bf(), bf(), bf(), gp, bp, cu, dht, dh0, bf(), bf(), tm, *[Int32(8)] * 6, Float32(1.0), st, st, st, cuda.CUstream(0)
            )
        if part == "qk_reduce":
            from .bwd_qk_reduce_kernel import GdnBwdQkReduce

            b2, f16 = _fake_ptr("BFloat16", 2), _fake_ptr("Float32", 16)
            return cute.compile(GdnBwdQkReduce(key), b2, b2, f16, f16, b2, b2, *[Int32(8)] * 3, *[st] * 4, cuda.CUstream(0))
        if key.grads_v2:  # pass 3 version 2 (the default with store_tm): v1's argument list
            from .chunk_bwd_v2_kernel import build_grads_v2

            return build_grads_v2(key)
        from .chunk_bwd_kernel import GdnBwdGrads

        dqk = _fake_ptr("Float32", 16) if key.gva else _fake_ptr("BFloat16", 2)  # GVA: fp32 partials in the workspace
        outs = [dqk, dqk, _fake_ptr("BFloat16", 2)] + [_fake_ptr("Float32", 4)] * 2
        return cute.compile(
            GdnBwdGrads(key), bf(), bf(), bf(), bf(), gp, bp, cu, bf(), bf(), bf(), bf(), tm, *outs, *[Int32(8)] * 7, Float32(1.0), *[st] * 7, cuda.CUstream(0)
        )

    return build
