"""Gated DeltaNet backward, pass 1 chunk-parallel (``plan.parallel_pass1``, the default since session 10; sm_90a, CuTe DSL, WGMMA).

:class:`GdnBwdStatesChunk` is pass 1 of the GDN backward (``bwd_states_kernel.py::GdnBwdStates``) with the serial state
chain taken out, as ``kda/bwd_states_parallel_kernel.py`` (the design note and the analysis of both backwards) does for
KDA: the forward's chunk-parallel prep (``gdn/chunk_parallel_prep_tc_kernel.py``) and narrow state pass, launched by
``gdn/bwd_api.py`` into a tail of the backward's workspace, write every chunk's entering state ``S0`` (bf16 [V, K],
the forward's ``h``); then one CTA per (forward chunk slot, head), looping the 64-row V slices, does the serial pass 1's
per-chunk work without the state update:

- ``A = beta K K^T * exp(G_r - G_c)`` (strictly lower), ``Tm = (I + A)^-1`` once per chunk -> ``ws_tm`` (``store_tm``);
- per V slice: ``S0`` (forward ``h``) -> shared and -> the backward's ``ws_h[slot]``, ``(beta V)^T``, ``U``, ``-Wm``,
  ``Vn = U - Wm S0^T`` -> ``ws_vn``: the serial pass 1's arrays, layouts and bf16 roundings, so passes 2-4 run
  unchanged (GVA and the in-kernel L2 norm included: the forward prep serves both).

Grid [T // 64 + N (varlen) or N ceil(L / 64) (dense), H]; an idle slot exits. The backward's slot of a chunk is
``n + bos // 64 + ci`` (the forward's for varlen batches, not for dense ones). Layouts as ``bwd_states_kernel.py``; the
compile key is ``bwd_states_kernel.GdnBwdKey`` (``parallel_pass1`` selects this kernel in ``gdn/bwd_api.py``).
Tests: ``tests/test_la_bwd_parallel_gpu.py``.

fold_prep_tm (the default since session 10, ``plan.fold_prep_tm`` / ``GdnBwdKey.fold_prep_tm``; requires ``parallel_pass1`` and
``store_tm``): KDA's fold (``kda/bwd_states_parallel_kernel.py``, "fold_prep_tm") for GDN. Everything
:class:`GdnBwdStatesChunk` computes, pass 1a already computed (the forward prep: ``A``, the solve; the state pass: ``Vn``
of every chunk, its ``vnt``), except that the prep folds ``beta`` (and ``beta exp(G)``) into ``T`` before rounding and
never stores ``T``. With ``fold_prep_tm`` the backward compiles the forward prep with ``GdnParallelPrepKey.bwd_tm``
(``chunk_parallel_prep_tc_kernel.py``: no ``qg``, ``bf16(T)`` row-major [64, 64] in its place; default off, default PTX
byte-identical) and runs :class:`GdnBwdStatesFold` as pass 1b: one 128-thread CTA per (forward chunk slot, head), no
arithmetic -- ``h`` -> ``ws_h``, ``Tm`` -> ``ws_tm`` (16-byte vector copies, slot remap only) and ``vnt`` [D, 64] ->
shared -> ``ws_vn`` token rows (the transpose), the rows of live tokens only. GDN's backward has no ``P`` array (its
passes 2-3 recompute P from q, k and the gates), so unlike KDA's fold there is no ``p`` copy. Per CTA at K = 128:
~56 KiB read, ~56 KiB written (T 8k H 16: 2048 CTAs, ~235 MB, est. 0.07-0.10 ms against ``GdnBwdStatesChunk``'s 0.515
ms, H200 session 9). Same launches and workspace (no new array: ``Tm`` rides in ``qg``). Numerics: ``ws_h`` bitwise the
non-fold path's (the same forward ``h``); ``Tm`` and ``Vn`` are the forward prep's / state pass's roundings (its
256-thread band solve, ex2-based decays; ``Vn`` from its fp32 ``U`` and bf16 ``-Wm``) instead of this module's
recomputation: equal up to rounding, and ``Vn`` is exactly the one the forward's state chain (hence ``ws_h``) used.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr

from .._device import delta_rule_bwd as bwd
from .._device.delta_rule import (
    BV,
    THREADS,
    DeltaRuleKernel,
    chunk_gates,
    make_accumulators,
)
from .bwd_states_kernel import a_tm_to_workspace, scaled_k_rows, states_shared_storage, states_smem

__all__ = ["GdnBwdStatesChunk", "GdnBwdStatesFold"]


class GdnBwdStatesChunk(DeltaRuleKernel):
    """Pass 1, chunk-parallel: ``S0`` (from the forward's ``h``) -> ``ws_h``, ``Vn`` -> ``ws_vn``, ``Tm`` -> ``ws_tm``
    (``store_tm``); one CTA per (forward chunk slot, head), looping the V slices."""

    @cute.jit
    def __call__(
        self,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        fh_ptr: cute.Pointer,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer | None,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        fslots: Int32,
        heads: Int32,
        qk_heads: Int32,  # Hk (q, k); H % Hk == 0
        slots: Int32,
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        _, gK, gV = bwd.vec_views(D, k_ptr, k_ptr, v_ptr, T, heads, qk_heads, k_strides, k_strides, v_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, False)
        mCu, gFH, gWsH = bwd.chunk_pass1_views(cu_ptr, fh_ptr, wsh_ptr, n_seqs, fslots, slots, heads, D, self.key.varlen)
        mWsVn = bwd.token_views(wsvn_ptr, T, heads, D)
        mWsTm = None
        if const_expr(self.key.store_tm):
            mWsTm = bwd.cc_views(wstm_ptr, slots, heads)
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        SharedStorage = states_shared_storage(l_ck, l_kc, l_cc)

        self.kernel(
            gK, gV, mG, mB, mCu, gFH, gWsH, mWsVn, mWsTm, n_seqs, seq_len, chunks_per_seq, heads // qk_heads, mma, l_ck, l_kc, l_cc, SharedStorage
        ).launch(grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    @cute.kernel
    def kernel(
        self,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        gFH: cute.Tensor,
        gWsH: cute.Tensor,
        mWsVn: cute.Tensor,
        mWsTm: cute.Tensor | None,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        group: Int32,  # v heads per q/k head
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        tidx, fslot, head, hk, seq, t0, n_valid = bwd.chunk_cta(mCu, n_seqs, seq_len, chunks_per_seq, group, self.key.varlen)

        sK, sW, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sG, sGc, sBeta = states_smem(SharedStorage, l_ck, l_kc, l_cc)

        if n_valid > 0:  # an idle slot (past its sequence's last chunk) exits; uniform per CTA
            eos, slot = bwd.chunk_slot(mCu, seq, seq_len, t0, n_valid, self.key.varlen)  # the backward's slot (passes 2-3)

            wg = mma.get_slice(0)
            kk_A = wg.make_fragment_A(wg.partition_A(sK))
            kk_B = wg.make_fragment_B(wg.partition_B(sK))
            kt_B, u_A, u_B, vn_A, s0_B, su_A = bwd.states_fragments(wg, sKT, sTm, sVT, sW, sS, sVnT)
            acc_a, acc_b, acc_s, c64 = make_accumulators(mma, wg, tidx, NH)
            chunk_gates(mG, mB, sG, sGc, sBeta, t0, n_valid, head, tidx, D, False)

            # ---- k rows to shared (zero past eos), optional L2 norm, (beta exp(G) K)^T (the serial pass 1's block) -----
            row = tidx // 2
            half = tidx % 2
            t_row, keep, _, b_row = scaled_k_rows(gK, None, sGc, sBeta, sK, sKT, sVT, t0, eos, n_valid, row, half, hk, head, 0, self.key.l2norm, D)

            # ---- A, Tm = (I + A)^-1 -> ws_tm ---------------------------------------------------------------------------
            a_tm_to_workspace(mma, acc_a, kk_A, kk_B, sGc, sBeta, sA, sT, sM, sTm, mWsTm, c64, slot, 0, head, tidx, None, self.key.store_tm)

            # ---- per 64-row V slice (the state-dependent part): S0, (beta V)^T, U, -Wm, Vn = U - Wm S0^T -> ws_vn -------
            bwd.vslices_to_workspace(
                mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, gFH, gWsH, gV, sS, sVT, sW, sVnT, mWsVn, c64, fslot, slot, t0, n_valid, t_row, row, half,
                keep, b_row, head, tidx, D,
            )  # fmt: skip

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


# ---- fold_prep_tm: pass 1b as layout copies of the forward prep's / state pass's arrays --------------------------------
class GdnBwdStatesFold(bwd.StatesFoldKernel):
    """Pass 1b under ``fold_prep_tm`` (the default since session 10) (``GdnBwdKey.fold_prep_tm``, requires ``parallel_pass1`` and
    ``store_tm``): no arithmetic, one CTA per (forward chunk slot, head) copying what the forward's prep
    (``GdnParallelPrepKey.bwd_tm``) and state pass already wrote into the backward's slots and layouts -- ``h`` ->
    ``ws_h`` (bitwise), ``Tm`` (over the prep's ``qg`` tile) -> ``ws_tm``, ``Vn^T`` (``vnt``, the Vn the forward's state
    chain used) -> ``ws_vn`` rows ``t0 .. t0 + n_valid - 1`` (through shared memory: a [D, 64] tile read by 16-byte
    vectors, rows gathered per token; the body is ``_device.delta_rule_bwd.fold_chunk``, shared with KDA's fold). Module docstring, "fold_prep_tm"."""

    @cute.jit
    def __call__(
        self,
        cu_ptr: cute.Pointer | None,
        fh_ptr: cute.Pointer,
        ftm_ptr: cute.Pointer,
        fvnt_ptr: cute.Pointer,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        fslots: Int32,
        heads: Int32,
        slots: Int32,
        stream: cuda.CUstream,
    ):
        D = self.D
        mCu, gFH, gWsH = bwd.chunk_pass1_views(cu_ptr, fh_ptr, wsh_ptr, n_seqs, fslots, slots, heads, D, self.key.varlen)
        views = bwd.fold_views(ftm_ptr, fvnt_ptr, wstm_ptr, wsvn_ptr, T, fslots, slots, heads, D)
        SharedStorage = bwd.fold_shared_storage(D)

        self.kernel(mCu, gFH, gWsH, views, n_seqs, seq_len, chunks_per_seq, SharedStorage).launch(
            grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream
        )
