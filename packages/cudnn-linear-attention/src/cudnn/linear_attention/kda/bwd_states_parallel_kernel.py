"""Kimi Delta Attention backward, pass 1 chunk-parallel (``plan.parallel_pass1``, the default since session 10; sm_90a,
CuTe DSL, WGMMA), and the design note for making passes 1 and 2 of both delta-rule backwards chunk-parallel (pass 2:
implemented in session 9 as ``plan.parallel_pass2`` (the default since session 10), ``_device/dstates_parallel.py``).

What this kernel does
=====================

:class:`KdaBwdStatesChunk` is pass 1 of the KDA backward (``bwd_states_kernel.py::KdaBwdStates``) with the serial state
chain taken out: one CTA per (forward chunk slot, head) instead of one per (sequence, head, 64-row V slice).
The state entering each chunk, ``S0``, is not recomputed: the forward's chunk-parallel prep + narrow state pass
(``kda/chunk_parallel_{prep,state}_kernel.py``, launched by ``kda/bwd_api.py`` into a tail of the backward's workspace)
already write every chunk's ``S0`` as bf16 [V, K] to their ``h`` array (``_device/chunk_parallel.py``: [slots, H, D, D],
forward slot convention). Per chunk, this kernel then does exactly the serial pass 1's per-chunk work without the
update ``S1 = ...``:

- ``S0`` (bf16, forward ``h[fslot, head, v0:v0+64, :]``) -> shared ``sS`` and -> the backward's ``ws_h[slot]`` (a bf16
  copy: the backward's slot convention is ``n + bos // 64 + ci`` for dense batches too, the forward's ``n ceil(L / 64) +
  ci`` there; varlen they coincide);
- ``A``, ``P`` (16-row decay-split blocks), ``Tm = (I + A)^-1`` once per chunk, then per 64-row V slice (the
  serial pass's CTA split, here a loop) ``U``, ``-Wm``, ``Vn = U - Wm S0^T``; writes ``Vn`` -> ``ws_vn``, ``Tm`` ->
  ``ws_tm``, ``P`` -> ``ws_p``: the same arrays, layouts and bf16 roundings as the serial pass 1, so passes 2 and 3
  run unchanged.

The values differ from the serial pass 1's by rounding only: the forward's state pass builds ``S`` from its own bf16
``Vn^T`` and ``(K exp(G_C - G))^T`` tiles (ex2-based decays), the serial pass from its in-register ``Vn``.
Grid [T // 64 + N (varlen) or N ceil(L / 64) (dense), H]; an idle slot (past its sequence's last chunk) exits. The
first grid [slots, H, V / 64] (A / P / solve once per V slice) is kept out of the tree in
/work/notes/la_bwd_wip/bwd_states_parallel_kernel_vslice_grid.py for an A/B if the loop loses.

Analysis (measure-free; H200, T = 8192, H = 16, K = V = 128, bf16; 128 chunks per head)
======================================================================================

Per chunk, pass 1 (serial today, one CTA per (seq, head, V/64): 32 CTAs on 132 SMs, 128 chunks deep):

1. gates: cumulative ``G`` [64, K], ``beta`` -- independent of the state;
2. q, k, v rows, decayed copies ``Q exp(G - G_r)``, ``K exp(G - G_r)``, ``(beta K exp G)^T``, ``(beta V)^T`` -- independent;
3. ``A`` and ``P`` by four 16-row decay-split blocks (16 WGMMA 64x64x128) -- independent;
4. ``Tm = (I + A)^-1`` (blocked forward substitution: the longest latency of the chunk) -- independent;
5. ``U = Tm (beta V)``, ``-Wm = -Tm (beta K exp G)`` (12 WGMMA) -- independent;
6. ``Vn = U - Wm S0^T`` (8 WGMMA) -- needs ``S0``: ON THE CHAIN;
7. ``S1 = S0 Diag(exp G_C) + Vn^T (K exp(G_C - G))`` (8 WGMMA) -- THE CHAIN.

Only 6-7 (16 of 44 WGMMAs, no solve) depend on the previous chunk; today 1-5 ride the chain too, 128 times in a row,
and the V-slice split runs 1-5 twice per chunk. Per chunk, pass 2 (reverse, the same grid):

1. gates, ``(beta exp(G) K)^T``, ``K exp(G_C - G)``, ``(scale exp(G) Q)^T``, dO^T -- independent;
2. ``Tm``, ``P^T`` reloaded from pass 1 -- independent;
3. ``Wm^T = (Tm (beta exp(G) K))^T`` (8 WGMMA) -- independent;
4. ``dVn = P^T dO + (K exp(G_C - G)) dS1^T`` -- the ``P^T dO`` half (4 WGMMA) is independent, the ``Kd dS1^T`` half
   (8) needs ``dS1``: ON THE CHAIN;
5. ``dS0 = dS1 Diag(exp G_C) + dO^T (scale exp(G) Q) - dVn^T Wm`` -- the ``dO^T Qs`` term (8) is independent, the rest
   (8) is THE CHAIN.

fla's decomposition (chunk_kda_bwd / chunk_gated_delta_rule_bwd): (a) recompute ``w, u`` per chunk in parallel and
``h`` by the forward's state kernel (the chain is only ``S1 = S0 decay + Vn^T Kd`` with ``Vn = U - W S0^T``; ``v_new``
is stored by it); (b) ``dh`` by a reverse state kernel whose per-chunk chain is ``dS0 = dS1 decay + (Qs^T dO)^T -
dVn^T W`` with ``dVn = dVn_local + Kd dS1^T`` where ``dVn_local = P^T dO`` is precomputed in parallel (chunk_bwd_dv_local)
-- the reverse pass holds per chunk only ``Kd``, ``Qs``, ``W`` tiles plus ``dO`` and ``dVn_local``, all precomputed;
(c) dq / dk / dw / dg in parallel per chunk, then ``dk, dv, dbeta, dg`` through the WY transform (prepare_wy_repr_bwd),
in parallel. The chain of (a) and (b) is 16 WGMMAs + a few elementwise ops per chunk, V split into slices for width.

Decomposition for our backward, with time estimates from our forward's measured kernels (prep 175-183 us for all
(chunk, head) pairs, narrow state pass 113 us, output 47 us; the serial passes' per-chunk latency: 17.25 ms over 128
chunks is ~135 us per chunk for passes 1-3, i.e. ~65 us per chunk and serial pass: one 128-thread CTA, no prefetch,
every step waited for):

- P1a = forward prep (175-183 us) + forward narrow state pass (113 us): ``S0`` of every chunk (bf16 ``h``), ``-Wm``,
  ``U``, ``Kd^T``, ``Qg``, ``P``, ``exp G_C``. ~0.29 ms.
- P1b = this kernel: ``Tm``, ``P``, ``Vn`` -> the backward's layouts. It redoes steps 1-5 (the forward prep's work,
  ~180 us there at two 256-thread CTAs per SM) with the serial pass's 128-thread per-chunk code at one CTA per SM
  (~190 KiB shared): 2048 CTAs = 15.5 waves of one chunk's latency, est. 0.5-1.5 ms (the range is that latency,
  unmeasured per pass). Next: fold ``Tm`` (and a token-major ``Vn``) stores into a backward-only option of the
  forward prep kernel (its owner's file) so P1b shrinks to the ``h`` / ``Vn`` layout copies: pass 1 -> ~0.35 ms.
- P2 = reverse state pass, narrow like the forward's (grid [N, H, V/32], TMA-fed 4-stage ring): precompute per chunk,
  in parallel, ``Wm`` (= the forward's ``-w``), ``Kd`` (forward ``kd``), ``Qs`` (forward ``qg``), ``dVn_local = P^T dO``
  (a new small parallel kernel, ~50 us, or folded into P1b); the chain per chunk is then ``dVn = dVn_local + Kd dS1^T``,
  ``dS0 = dS1 decay + dO^T Qs - dVn^T Wm``: the forward state pass's shape (two 64 x 64 x K products + one) with one more
  operand stream (dO): est. 1.3x its 113 us = ~0.15 ms, writing ``dS1`` (ws_dh) and ``dVn`` (ws_dvn). Session 9 built
  it (``parallel_pass2``, the default since session 10): the precompute is ``{kda,gdn}/bwd_dstates_parallel_kernel.py`` (its own arrays,
  transposed where the chain's WGMMAs want them K-major, from the serial pass 2's expressions, rather than the forward's
  ``w`` / ``kd`` / ``qg``, which are laid out for the forward's products), the chain ``_device/dstates_parallel.py``.
- P3 (today, chunk-parallel, unchanged). Its time is not in the quick table; the serial passes are ~16 of the 17.25 ms.

Estimated backward after both: 0.29 + 0.5-1.5 (~0.06 after the fold) + 0.15 + P3 -> ~0.5-2 ms + P3 (KDA), vs fla
2.23 ms; GDN the same shape with its 133 us prep. With this opt-in alone (pass 2 still serial, ~8 ms):
~0.3 + 0.5-1.5 + 8 + P3: roughly half of today's 17.25 ms. Meeting issue #7's 0.74 ms needs P3 near 0.2 ms and the P1b fold.

fold_prep_tm (the default since session 10, ``plan.fold_prep_tm`` / ``KdaBwdKey.fold_prep_tm``, requires ``parallel_pass1``)
===================================================================================================================

The "Next" of P1b above, done as copies: everything P1b computes, P1a already computed (the forward prep: ``A``, ``P``,
the solve; the state pass: ``Vn`` of every chunk, its ``vnt``), except that the prep folds ``beta`` into ``T`` before
rounding and never stores it. With ``fold_prep_tm`` the backward compiles the forward prep with the backward-only key
field ``KdaParallelPrepKey.bwd_tm`` (``chunk_parallel_prep_kernel.py``: it skips ``qg`` -- read by the forward's output
kernel only, which the backward does not launch -- and writes ``bf16(T)`` there, row-major [64, 64]; default off,
default PTX byte-identical) and runs :class:`KdaBwdStatesFold` as pass 1b: one 128-thread CTA per (forward chunk slot,
head), no arithmetic -- ``h`` -> ``ws_h``, ``Tm`` -> ``ws_tm``, ``p`` -> ``ws_p`` (16-byte vector copies, slot remap
only) and ``vnt`` [D, 64] -> shared -> ``ws_vn`` token rows (the transpose), the rows of live tokens only. Per CTA
at K = 128: 64 KiB read, 64 KiB written; T 8k H 16: 2048 CTAs, ~270 MB, est. 0.08-0.12 ms against the recomputing
kernel's 1.245 ms (H200, session 9). Same launches, same workspace (no new array: ``Tm`` rides in ``qg``).
Numerics: ``ws_h`` is bitwise the non-fold path's (the same forward arrays), the copies are bitwise the forward's
arrays; ``Tm``, ``P``, ``Vn`` are the forward prep's / state pass's roundings (ex2-based decays, its solve's fp32
order, ``Vn`` from its fp32 ``U`` and bf16 ``-Wm``) instead of this kernel's recomputation: equal up to rounding, and
``Vn`` is now exactly the ``Vn`` the forward's state chain (hence ``ws_h``) was built from. Passes 2-3 unchanged.

Layouts (as ``bwd_states_kernel.py``): q, k [T, Hk, K], v [T, H, V] bf16, unit channel stride, token / head strides
multiples of 8 elements; g [T, H, K] and beta [T, H] contiguous fp32 or bf16; ``cu_seqlens`` int32 [N + 1]. K = V in
{64, 128}. Runtime extents are kernel arguments (Rule 4); the compile key is ``bwd_states_kernel.KdaBwdKey`` (its
``parallel_pass1`` field selects this kernel in ``kda/bwd_api.py``; the kernel reads no other field than the serial one).

Tests: ``tests/test_la_bwd_parallel_gpu.py`` (GPU: the opt-in against the fp32 reference and the default; compile-only:
this kernel builds with WGMMA and no local memory). Benchmark: ``benchmarks/linear_attention_bwd.py kda --quick
--providers ours,ours-p1,fla``.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64

from .._device import delta_rule_bwd as bwd
from .._device.delta_rule import (
    BV,
    SOLVE_BLOCK,
    THREADS,
    DeltaRuleKernel,
    chunk_gates,
    make_accumulators,
)
from .._device.delta_rule_bwd import forward_state_to_smem_and_workspace, state_views_aligned  # noqa: F401  (re-exported)
from .bwd_states_kernel import REF_OFFSET, a_p_tm_to_workspace, decayed_qk_rows, states_shared_storage, states_smem

__all__ = [
    "KdaBwdStatesChunk",
    "KdaBwdStatesFold",
    "forward_state_to_smem_and_workspace",
    "state_views_aligned",
]  # the latter two: moved to _device.delta_rule_bwd


class KdaBwdStatesChunk(DeltaRuleKernel):
    """Pass 1, chunk-parallel: ``S0`` (from the forward's ``h``) -> ``ws_h``, ``Vn`` -> ``ws_vn``, ``Tm`` -> ``ws_tm``,
    ``P`` -> ``ws_p``; one CTA per (forward chunk slot, head), looping the V slices."""

    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        g_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        fh_ptr: cute.Pointer,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer,
        wsp_ptr: cute.Pointer,
        T: Int32,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        fslots: Int32,
        heads: Int32,
        qk_heads: Int32,
        slots: Int32,
        scale: Float32,
        q_strides: tuple[Int64, Int64],
        k_strides: tuple[Int64, Int64],
        v_strides: tuple[Int64, Int64],
        stream: cuda.CUstream,
    ):
        D = self.D
        gQ, gK, gV = bwd.vec_views(D, q_ptr, k_ptr, v_ptr, T, heads, qk_heads, q_strides, k_strides, v_strides)
        mG, mB = bwd.gate_views(g_ptr, beta_ptr, T, heads, D, True)
        mCu, gFH, gWsH = bwd.chunk_pass1_views(cu_ptr, fh_ptr, wsh_ptr, n_seqs, fslots, slots, heads, D, self.key.varlen)
        mWsVn = bwd.token_views(wsvn_ptr, T, heads, D)
        mWsTm = bwd.cc_views(wstm_ptr, slots, heads)
        mWsP = bwd.cc_views(wsp_ptr, slots, heads)
        mma, l_ck, l_kc, l_cc = bwd.states_layouts(D)

        SharedStorage = states_shared_storage(l_ck, l_kc, l_cc, D)

        self.kernel(
            gQ, gK, gV, mG, mB, mCu, gFH, gWsH, mWsVn, mWsTm, mWsP, n_seqs, seq_len, chunks_per_seq, heads // qk_heads, scale,
            mma, l_ck, l_kc, l_cc, SharedStorage,
        ).launch(
            grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1
        )  # fmt: skip

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        gFH: cute.Tensor,
        gWsH: cute.Tensor,
        mWsVn: cute.Tensor,
        mWsTm: cute.Tensor,
        mWsP: cute.Tensor,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        group: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        HALF = D // 2
        NH = D // BV
        tidx, fslot, head, hk, seq, t0, n_valid = bwd.chunk_cta(mCu, n_seqs, seq_len, chunks_per_seq, group, self.key.varlen)

        sQr, sK, sW, sKR, sS, sKT, sTm, sVT, sVnT, sA, sT, sM, sGc, sBeta = states_smem(SharedStorage, l_ck, l_kc, l_cc, D)

        if n_valid > 0:  # an idle slot (past its sequence's last chunk) exits; uniform per CTA
            eos, slot = bwd.chunk_slot(mCu, seq, seq_len, t0, n_valid, self.key.varlen)  # the backward's slot (passes 2-3)

            wg = mma.get_slice(0)
            kl_A = wg.make_fragment_A(wg.partition_A(sW))
            qr_A = wg.make_fragment_A(wg.partition_A(sQr))
            kr_B = wg.make_fragment_B(wg.partition_B(sKR))
            kt_B, u_A, u_B, vn_A, s0_B, su_A = bwd.states_fragments(wg, sKT, sTm, sVT, sW, sS, sVnT)
            acc_a, acc_b, acc_s, c64 = make_accumulators(mma, wg, tidx, NH)
            chunk_gates(mG, mB, None, sGc, sBeta, t0, n_valid, head, tidx, D, True)

            # ---- q, k, v rows to shared (zero past eos), decayed copies (the serial pass 1's block) ----------------
            row = tidx // 2
            half = tidx % 2
            rref = (row // SOLVE_BLOCK) * SOLVE_BLOCK + REF_OFFSET
            t_row, keep, b_row, _ = decayed_qk_rows(
                gQ, gK, None, sGc, sBeta, sQr, sK, sW, sKT, t0, eos, n_valid, row, half, rref, hk, head, 0, self.key.l2norm, D
            )

            # ---- A and P by 16-row blocks, Tm = (I + A)^-1; P, Tm -> ws_p, ws_tm ---------------------------------
            a_p_tm_to_workspace(
                mma, acc_a, kl_A, qr_A, kr_B, sK, sKR, sGc, sBeta, sA, sT, sM, sTm, mWsP, mWsTm, c64, slot, 0, head, row, half, tidx, scale, None, HALF
            )

            # ---- U, -Wm, Vn = U - Wm S0^T -> ws_vn ---------------------------------------------------------------
            # per 64-row V slice (the state-dependent part): S0 slice, (beta V)^T slice, U, -Wm, Vn = U - Wm S0^T
            bwd.vslices_to_workspace(
                mma, acc_a, acc_b, u_A, u_B, kt_B, vn_A, s0_B, gFH, gWsH, gV, sS, sVT, sW, sVnT, mWsVn, c64, fslot, slot, t0, n_valid, t_row, row, half,
                keep, b_row, head, tidx, D,
            )  # fmt: skip

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


# ---- fold_prep_tm: pass 1b as layout copies of the forward prep's / state pass's arrays --------------------------------
def fold_views(ftm_ptr, fp_ptr, fvnt_ptr, wstm_ptr, wsp_ptr, wsvn_ptr, T, fslots, slots, heads, D):
    """``fold_prep_tm``'s arrays as 16-byte vectors (host side of :class:`KdaBwdStatesFold`): the forward's ``Tm`` (over
    its ``qg`` tiles: [fslots, H, 64, 64] with the ``qg`` slot / head strides), ``p`` [fslots, H, 64, 64], ``vnt``
    [fslots, H, D, 64]; the backward's ``ws_tm``, ``ws_p`` [slots, H, 64, 64], ``ws_vn`` [T, H, D]
    (``_device.delta_rule_bwd.fold_views`` plus the ``p`` pair)."""
    gFTm, gFVnt, gWsTm, gWsVn = bwd.fold_views(ftm_ptr, fvnt_ptr, wstm_ptr, wsvn_ptr, T, fslots, slots, heads, D)
    return gFTm, bwd.fold_cc_vectors(fp_ptr, fslots, heads), gFVnt, gWsTm, bwd.fold_cc_vectors(wsp_ptr, slots, heads), gWsVn


class KdaBwdStatesFold(bwd.StatesFoldKernel):
    """Pass 1b under ``fold_prep_tm`` (the default since session 10) (``KdaBwdKey.fold_prep_tm``, requires ``parallel_pass1``): no arithmetic,
    one CTA per (forward chunk slot, head) copying what the forward's prep (``KdaParallelPrepKey.bwd_tm``) and state
    pass already wrote into the backward's slots and layouts -- ``h`` -> ``ws_h`` (bitwise), ``Tm`` (over the prep's
    ``qg`` tile) -> ``ws_tm``, ``p`` -> ``ws_p``, ``Vn^T`` (``vnt``, the Vn the forward's state chain used) -> ``ws_vn``
    rows ``t0 .. t0 + n_valid - 1`` (through shared memory: a [D, 64] tile read by 16-byte vectors, rows gathered
    per token; the body is ``_device.delta_rule_bwd.fold_chunk``, shared with GDN's fold). Module docstring,
    "fold_prep_tm"."""

    @cute.jit
    def __call__(
        self,
        cu_ptr: cute.Pointer | None,
        fh_ptr: cute.Pointer,
        ftm_ptr: cute.Pointer,
        fp_ptr: cute.Pointer,
        fvnt_ptr: cute.Pointer,
        wsh_ptr: cute.Pointer,
        wsvn_ptr: cute.Pointer,
        wstm_ptr: cute.Pointer,
        wsp_ptr: cute.Pointer,
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
        views = fold_views(ftm_ptr, fp_ptr, fvnt_ptr, wstm_ptr, wsp_ptr, wsvn_ptr, T, fslots, slots, heads, D)
        SharedStorage = bwd.fold_shared_storage(D)

        self.kernel(mCu, gFH, gWsH, views, n_seqs, seq_len, chunks_per_seq, SharedStorage).launch(
            grid=[fslots, heads, 1], block=[THREADS, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream
        )
