"""Kimi Delta Attention backward, pass 3, version 2 (opt-in ``KdaBwdKey.grads_v2``): the contract of
``chunk_bwd_kernel.KdaBwdGrads`` -- the same launch arguments, workspace arrays (S0, dS1, Vn, dVn, Tm of passes 1-2),
outputs, products, bf16 operand roundings and per-element formulas (see that module's docstring for the math) -- on TWO
warpgroups per CTA (256 threads), with a third less code.

Diagnosis (Nsight Compute of v1, KDA T 8k H 16, session 9): one CTA per SM (~217 KiB of shared memory) of ONE warpgroup,
so 1 warp per scheduler; issue active 10 %; of the stall samples 32 % "no instruction" (v1 is ~30,300 straight-line SASS
instructions, ~480 KB, streamed through the instruction cache once per chunk: every epilogue and decay-split loop fully
unrolled, both 64-channel blocks unrolled), 19 % wait, 15 % short scoreboard (shared memory, MUFU), 10 % long
scoreboard (global loads: a 2-byte-per-access state transpose with 8 loads in flight, a serial reverse cumsum through
global memory), 7 % barrier.

v2 (same shared-memory footprint class: one more 8 KiB tile, ~226 KiB at K = 128, still one CTA per SM):

- warpgroup w owns key-channel block w (K = 128) in the per-block work (dWm / dUb in phase A, B1, B2), the block index a
  RUNTIME value: one copy of that code serves both warpgroups (88 WGMMA instructions in the PTX against v1's 144; SASS
  ~15,300 instructions against ~30,300) and both run it at the same time; their decay-split operand tiles sit at
  ``r + (2 j + w) 8 KiB`` in one region ``r``; warpgroup-local named barriers (ids 1, 2) order a warpgroup's operand
  writes and its WGMMAs;
- phase A: the K rows by all 256 threads; warpgroup 0 loads dVn / V / Tm (every load issued before the first store)
  while warpgroup 1 computes the gates (64 loads in flight) and loads ``S0^T`` with ``<dS1, S0>`` (16-byte loads); the
  serial ``dTm -> X -> dA`` chain runs on warpgroup 0 while warpgroup 1 loads Q, then B1's K, Vn and dO into registers
  and stores them as soon as the chain's first products have read the tiles they replace (named barrier 3: warpgroup 0
  arrives, warpgroup 1 waits), so B1 starts with its operands in place;
- products that do not depend on each other are one WGMMA group waited once (dWm + dUb; dTm's two; dO S0 + dP~; B2's
  rows(dA, K), cols(dP~, Q) hi + lo, cols(beta dA, K); dkd + dKb): 8 wait points in the PTX against v1's 23;
- B2's three decay-split operands of a row block in one pass (:func:`_split3`: shared gate loads, K row and
  ``exp(G - G_r)``; a warp's 16 tokens take one of three paths); the split operands' and row loaders' shared-memory
  accesses with the 128-byte swizzle applied by hand (16-byte vector loads and stores, one instruction per element
  store; v1 recomputed the swizzle of every 2-byte access); a row block's epilogue on its one warp under one
  warp-uniform test (``warp == bi``: the rows v1 tested per element), overlapping the other warps' next operand writes;
- dbeta's and ``sum dkd K`` 's shared sums: register partials, warp butterfly shuffles, one atomic per row / column and
  warp (v1: one shared float atomic per element); dg's reverse cumsum loads its 64 values before the first add.

Numerics: every product, operand and bf16 rounding is v1's (the split operands' expressions are v1's, so the same bits);
only fp32 summation orders differ (``<dS1, S0>``, the dbeta and ``sum dkd K`` partial sums), so dq, dk, dv are expected
bitwise equal to v1's and dg, dbeta equal up to fp32 reassociation (``tests/test_la_bwd_p3.py`` checks both against v1
on the same workspace and against the fp32 reference). At K = 64 (one channel block) warpgroup 1 only loads in phase A
and waits in B1 / B2: correct, gains only from the rest.

``mn_operands`` (key field; the plan default since session 29, ``kda/bwd_api.py::MN_OPERANDS_DEFAULT``: H200, T 8k H 16,
1584.8 vs 1801.6 us; GDN's session-11 option, see
``gdn/chunk_bwd_v2_kernel.py``): no transposed copy is written. WGMMA reads bf16 operands MN-major from shared memory,
and a 128-byte-swizzled row-major [rows, 64] tile is the canonical MN-major layout of a contraction over its rows, so
dVn^T, Tm^T, dWm^T, dP~^T, ``(beta dA)^T`` and dTm^T are ``_device.chunk_parallel.transpose_view`` s of dVn, Tm, dWm,
dP~, ``beta dA`` and dTm (the last three stored row-major from their accumulators), S0 / dS1 are stored as loaded ([V,
K], one 16-byte store per vector: ``state_t_to_smem``'s ``mn`` form), Tm by 16-byte stores (:func:`_load_a0_mn`), and
the decay-split operands (``K exp(G_r - G)``, ``Q exp(G - G_r)`` hi + lo, ``K exp(G - G_r)``) row-major [tokens,
channels] as computed, 16-byte stores (:func:`_split_operand`'s ``mn`` form, :func:`_split3_rm`; the transposed form
needs one 2-byte store per element). Two more tiled MMAs (B MN-major; A and B MN-major). Tiles: Tm in c1 (it lives
through B2), dWm in x5, dP~ in c6; r's tiles 0-2 are idle in phase A and tile 7 in B1. Same products, operand values
and accumulation order as v2 (dq, dk, dv expected bitwise equal; ``tests/test_la_bwd_p3_kda_mn.py``). PTX at K = 128
varlen with states: the same 88 WGMMA behind 8 waits (A MN-major in 24, B in 60), 2-byte shared stores 1087 -> 192
(the accumulator epilogues' left), 17,734 -> 15,606 instructions; ptxas 231 registers (v2: 254), no spill, zero frame,
no C7520; the same shared-memory footprint. The default plan's PTX is byte-identical with the option added.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import transpose_view
from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, k_major_smem_layout, make_mma_n64, row_guard
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .._device.delta_rule_bwd import bwd_cta, grads_chunk, smem_struct, tm_row_load
from .._device.delta_rule_bwd_v2 import THREADS2, TILE, GradsV2Launch
from .._device.delta_rule_bwd_v2 import col_sums_add as _col_sums_add
from .._device.delta_rule_bwd_v2 import commit_wait as _commit_wait
from .._device.delta_rule_bwd_v2 import dwm_dv_block as _dwm_dv_block
from .._device.delta_rule_bwd_v2 import issue as _issue
from .._device.delta_rule_bwd_v2 import load_a0 as _load_a0
from .._device.delta_rule_bwd_v2 import row_sums_add as _row_sums_add
from .._device.delta_rule_bwd_v2 import rows_load as _rows_load
from .._device.delta_rule_bwd_v2 import rows_store as _rows_store
from .._device.delta_rule_bwd_v2 import state_t_to_smem as _state_t_to_smem
from .._device.delta_rule_bwd_v2 import tile_at as _tile_at
from .._device.delta_rule_bwd_v2 import wg_ready as _wg_ready
from .._device.delta_rule_bwd_v2 import wg_sync as _wg_sync
from .bwd_states_kernel import REF_OFFSET, KdaBwdKey

BAR_OPERANDS_FREE = 3  # named barrier: warpgroup 0 arrives after the dTm products, warpgroup 1 waits (ids 1, 2: per warpgroup)


@cute.jit
def _split_operand(
    pX: cute.Pointer, sGc: cute.Tensor, pOut: cute.Pointer, pLo: cute.Pointer | None, h: Int32, bi: Int32, tidx: Int32, after: cutlass.Constexpr[bool],
    D: cutlass.Constexpr[int], mn: cutlass.Constexpr[bool] = False,
):  # fmt: skip
    """``chunk_bwd_kernel._split_operand`` (the same operand, values and roundings) with the channel block ``h`` a
    runtime value (one copy of the code serves both warpgroups) and the 128-byte swizzle of the shared tiles applied by
    hand: ``pX`` the raw address of a [64 tokens, D] tile (``k_major_smem_layout(64, D)``: element (t, c) at
    ``(c // 64) 4096 + 64 t + ((c % 64) ^ ((t % 8) << 3))``), ``pOut`` / ``pLo`` of [64 channels, 64 tokens] tiles
    (element (c, t) at ``64 c + (t ^ ((c % 8) << 3))``). A thread's 32 channels are 4 16-byte vectors of its token row
    (one address each; v1 swizzled every 2-byte access), its stores one instruction each. With ``mn`` (``mn_operands``)
    the operand is stored as it is computed, [64 tokens, 64 channels] (element (t, c) at ``64 t + (c ^ ((t % 8) << 3))``,
    read through an MN-major view): a thread's 32 channels are 4 16-byte stores per output."""
    tok = tidx // 2
    c0 = (tidx % 2) * (BV // 2)
    r = bi * SOLVE_BLOCK + REF_OFFSET
    live = tok < (bi + 1) * SOLVE_BLOCK
    if const_expr(after):
        live = tok >= bi * SOLVE_BLOCK
    mOut = cute.make_tensor(pOut, cute.make_layout((TILE,)))
    sw = (tok % 8) * VEC  # the row's 16-byte-chunk xor, in elements
    if live:  # one branch per thread (v1: one per element)
        xbuf = cute.make_rmem_tensor(cute.make_layout((VEC, BV // 2 // VEC)), BFloat16)
        for q in cutlass.range_constexpr(BV // 2 // VEC):
            off = h * TILE + tok * BV + ((c0 + q * VEC) ^ sw)
            src = cute.make_tensor(pX + cute.assume(off, divby=VEC), cute.make_layout((VEC,)))
            cute.autovec_copy(src, xbuf[None, q])
        if const_expr(mn):  # row-major: the values of one 16-byte vector, then its store
            for q in cutlass.range_constexpr(BV // 2 // VEC):
                hb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
                lb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
                for e in cutlass.range_constexpr(VEC):
                    ch = h * BV + c0 + q * VEC + e
                    d = sGc[r, ch] - sGc[tok, ch]
                    if const_expr(after):
                        d = -d
                    val = xbuf[e, q].to(Float32) * cute.math.exp(d)
                    hi = val.to(BFloat16)
                    hb[e] = hi
                    if const_expr(pLo is not None):
                        lb[e] = (val - hi.to(Float32)).to(BFloat16)
                o = tok * BV + ((c0 + q * VEC) ^ sw)
                _vec_store(hb, pOut, o)
                if const_expr(pLo is not None):
                    _vec_store(lb, pLo, o)
        else:
            for j in cutlass.range_constexpr(BV // 2):
                ch = h * BV + c0 + j
                d = sGc[r, ch] - sGc[tok, ch]
                if const_expr(after):
                    d = -d
                val = xbuf[j % VEC, j // VEC].to(Float32) * cute.math.exp(d)
                hi = val.to(BFloat16)
                o = (c0 + j) * BV + (tok ^ ((j % 8) * VEC))
                mOut[o] = hi
                if const_expr(pLo is not None):
                    mLo = cute.make_tensor(pLo, cute.make_layout((TILE,)))
                    mLo[o] = (val - hi.to(Float32)).to(BFloat16)
    else:
        if const_expr(mn):
            zb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
            zb.fill(0.0)
            for q in cutlass.range_constexpr(BV // 2 // VEC):
                o = tok * BV + ((c0 + q * VEC) ^ sw)
                _vec_store(zb, pOut, o)
                if const_expr(pLo is not None):
                    _vec_store(zb, pLo, o)
        else:
            for j in cutlass.range_constexpr(BV // 2):
                o = (c0 + j) * BV + (tok ^ ((j % 8) * VEC))
                mOut[o] = BFloat16(0.0)
                if const_expr(pLo is not None):
                    mLo = cute.make_tensor(pLo, cute.make_layout((TILE,)))
                    mLo[o] = BFloat16(0.0)


@cute.jit
def _kq_rows(pK: cute.Pointer, pQ: cute.Pointer, h: Int32, tok: Int32, c0: Int32, sw: Int32):
    """The thread's 32 channels of token row ``tok`` of the K and Q tiles (channel block ``h``, 128-byte swizzle ``sw``
    by hand), four 16-byte loads each: the inputs of :func:`_split3` / :func:`_split3_rm`."""
    kbuf = cute.make_rmem_tensor(cute.make_layout((VEC, BV // 2 // VEC)), BFloat16)
    qbuf = cute.make_rmem_tensor(cute.make_layout((VEC, BV // 2 // VEC)), BFloat16)
    for q in cutlass.range_constexpr(BV // 2 // VEC):
        off = h * TILE + tok * BV + ((c0 + q * VEC) ^ sw)
        cute.autovec_copy(cute.make_tensor(pK + cute.assume(off, divby=VEC), cute.make_layout((VEC,))), kbuf[None, q])
        cute.autovec_copy(cute.make_tensor(pQ + cute.assume(off, divby=VEC), cute.make_layout((VEC,))), qbuf[None, q])
    return kbuf, qbuf


@cute.jit
def _split3(
    pK: cute.Pointer, pQ: cute.Pointer, sGc: cute.Tensor, pRow: cute.Pointer, pColQ: cute.Pointer, pColK: cute.Pointer, pLo: cute.Pointer | None,
    h: Int32, bi: Int32, tidx: Int32,
):  # fmt: skip
    """B2's three decay-split operands of row block ``bi`` in one pass, each equal to :func:`_split_operand`'s (the same
    expressions, so the same bits): ``K exp(G_r - G)`` (rows, tokens < 16 (bi + 1)) -> ``pRow``, ``Q exp(G - G_r)``
    (cols, tokens >= 16 bi; with ``pLo`` its lo half) -> ``pColQ`` and ``K exp(G - G_r)`` -> ``pColK``. One pass shares the
    gate loads, the K row and ``exp(G - G_r)`` between the operands; a warp's 16 tokens lie in one 16-token block, so each
    warp takes one of three branch-free paths (the block's own: both exps; earlier blocks: rows only; later: cols only)."""
    tok = tidx // 2
    c0 = (tidx % 2) * (BV // 2)
    r = bi * SOLVE_BLOCK + REF_OFFSET
    blk = tok // SOLVE_BLOCK
    mRow = cute.make_tensor(pRow, cute.make_layout((TILE,)))
    mColQ = cute.make_tensor(pColQ, cute.make_layout((TILE,)))
    mColK = cute.make_tensor(pColK, cute.make_layout((TILE,)))
    sw = (tok % 8) * VEC
    kbuf, qbuf = _kq_rows(pK, pQ, h, tok, c0, sw)
    if blk == bi:  # rows and cols live
        for j in cutlass.range_constexpr(BV // 2):
            ch = h * BV + c0 + j
            d = sGc[r, ch] - sGc[tok, ch]
            kf = kbuf[j % VEC, j // VEC].to(Float32)
            ec = cute.math.exp(-d)
            o = (c0 + j) * BV + (tok ^ ((j % 8) * VEC))
            mRow[o] = (kf * cute.math.exp(d)).to(BFloat16)
            cq = qbuf[j % VEC, j // VEC].to(Float32) * ec
            cqh = cq.to(BFloat16)
            mColQ[o] = cqh
            if const_expr(pLo is not None):
                mLo = cute.make_tensor(pLo, cute.make_layout((TILE,)))
                mLo[o] = (cq - cqh.to(Float32)).to(BFloat16)
            mColK[o] = (kf * ec).to(BFloat16)
    else:
        if blk < bi:  # rows only
            for j in cutlass.range_constexpr(BV // 2):
                ch = h * BV + c0 + j
                d = sGc[r, ch] - sGc[tok, ch]
                o = (c0 + j) * BV + (tok ^ ((j % 8) * VEC))
                mRow[o] = (kbuf[j % VEC, j // VEC].to(Float32) * cute.math.exp(d)).to(BFloat16)
                mColQ[o] = BFloat16(0.0)
                if const_expr(pLo is not None):
                    mLo = cute.make_tensor(pLo, cute.make_layout((TILE,)))
                    mLo[o] = BFloat16(0.0)
                mColK[o] = BFloat16(0.0)
        else:  # cols only
            for j in cutlass.range_constexpr(BV // 2):
                ch = h * BV + c0 + j
                d = sGc[r, ch] - sGc[tok, ch]
                ec = cute.math.exp(-d)
                o = (c0 + j) * BV + (tok ^ ((j % 8) * VEC))
                mRow[o] = BFloat16(0.0)
                cq = qbuf[j % VEC, j // VEC].to(Float32) * ec
                cqh = cq.to(BFloat16)
                mColQ[o] = cqh
                if const_expr(pLo is not None):
                    mLo = cute.make_tensor(pLo, cute.make_layout((TILE,)))
                    mLo[o] = (cq - cqh.to(Float32)).to(BFloat16)
                mColK[o] = (kbuf[j % VEC, j // VEC].to(Float32) * ec).to(BFloat16)


@cute.jit
def _split3_rm(
    pK: cute.Pointer, pQ: cute.Pointer, sGc: cute.Tensor, pRow: cute.Pointer, pColQ: cute.Pointer, pColK: cute.Pointer, pLo: cute.Pointer | None,
    h: Int32, bi: Int32, tidx: Int32,
):  # fmt: skip
    """:func:`_split3` with ``mn_operands``: the same operands and values (the same expressions), stored as they are
    computed, [64 tokens, 64 channels] (element (t, c) at ``64 t + (c ^ ((t % 8) << 3))``; read through MN-major views):
    each output one 16-byte store per 8 channels (:func:`_split3`: one 2-byte store per element, transposed)."""
    tok = tidx // 2
    c0 = (tidx % 2) * (BV // 2)
    r = bi * SOLVE_BLOCK + REF_OFFSET
    blk = tok // SOLVE_BLOCK
    sw = (tok % 8) * VEC
    kbuf, qbuf = _kq_rows(pK, pQ, h, tok, c0, sw)
    zb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    zb.fill(0.0)
    rb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    qb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    lb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    kb = cute.make_rmem_tensor(cute.make_layout((VEC,)), BFloat16)
    if blk == bi:  # rows and cols live
        for q in cutlass.range_constexpr(BV // 2 // VEC):
            for e in cutlass.range_constexpr(VEC):
                ch = h * BV + c0 + q * VEC + e
                d = sGc[r, ch] - sGc[tok, ch]
                kf = kbuf[e, q].to(Float32)
                ec = cute.math.exp(-d)
                rb[e] = (kf * cute.math.exp(d)).to(BFloat16)
                cq = qbuf[e, q].to(Float32) * ec
                cqh = cq.to(BFloat16)
                qb[e] = cqh
                if const_expr(pLo is not None):
                    lb[e] = (cq - cqh.to(Float32)).to(BFloat16)
                kb[e] = (kf * ec).to(BFloat16)
            o = tok * BV + ((c0 + q * VEC) ^ sw)
            _vec_store(rb, pRow, o)
            _vec_store(qb, pColQ, o)
            if const_expr(pLo is not None):
                _vec_store(lb, pLo, o)
            _vec_store(kb, pColK, o)
    else:
        if blk < bi:  # rows only
            for q in cutlass.range_constexpr(BV // 2 // VEC):
                for e in cutlass.range_constexpr(VEC):
                    ch = h * BV + c0 + q * VEC + e
                    d = sGc[r, ch] - sGc[tok, ch]
                    rb[e] = (kbuf[e, q].to(Float32) * cute.math.exp(d)).to(BFloat16)
                o = tok * BV + ((c0 + q * VEC) ^ sw)
                _vec_store(rb, pRow, o)
                _vec_store(zb, pColQ, o)
                if const_expr(pLo is not None):
                    _vec_store(zb, pLo, o)
                _vec_store(zb, pColK, o)
        else:  # cols only
            for q in cutlass.range_constexpr(BV // 2 // VEC):
                for e in cutlass.range_constexpr(VEC):
                    ch = h * BV + c0 + q * VEC + e
                    d = sGc[r, ch] - sGc[tok, ch]
                    ec = cute.math.exp(-d)
                    cq = qbuf[e, q].to(Float32) * ec
                    cqh = cq.to(BFloat16)
                    qb[e] = cqh
                    if const_expr(pLo is not None):
                        lb[e] = (cq - cqh.to(Float32)).to(BFloat16)
                    kb[e] = (kbuf[e, q].to(Float32) * ec).to(BFloat16)
                o = tok * BV + ((c0 + q * VEC) ^ sw)
                _vec_store(zb, pRow, o)
                _vec_store(qb, pColQ, o)
                if const_expr(pLo is not None):
                    _vec_store(lb, pLo, o)
                _vec_store(kb, pColK, o)


@cute.jit
def _vec_store(buf: cute.Tensor, p: cute.Pointer, off: Int32):
    """A bf16 register vector of 8 -> shared memory at ``p + off`` (``off`` a multiple of 8: one 16-byte store)."""
    cute.autovec_copy(buf, cute.make_tensor(p + cute.assume(off, divby=VEC), cute.make_layout((VEC,))))


@cute.jit
def _gates(
    mG: cute.Tensor, mB: cute.Tensor, sGc: cute.Tensor, sBeta: cute.Tensor, t0: Int32, n_valid: Int32, head: Int32, ltid: Int32, d: cutlass.Constexpr[int]
):
    """``_device.delta_rule.chunk_gates`` (per key channel) without its barrier, for one warpgroup (``ltid`` 0..127)."""
    if ltid < d:
        col = cute.slice_(cute.domain_offset((t0, head, ltid), mG), (None, 0, 0))  # this channel's gates from token t0
        gbuf = cute.make_rmem_tensor(cute.make_layout((CHUNK,)), Float32)
        for j in cutlass.range_constexpr(CHUNK):  # all 64 loads in flight (v1: 16 at a time)
            gj = Float32(0.0)
            if j < n_valid:
                gj = col[j].to(Float32)
            gbuf[j] = gj
        cum = Float32(0.0)
        for j in cutlass.range_constexpr(CHUNK):
            cum = cum + gbuf[j]
            sGc[j, ltid] = cum
    if ltid < CHUNK:
        bv = Float32(0.0)
        if ltid < n_valid:
            bv = mB[t0 + ltid, head].to(Float32)
        sBeta[ltid] = bv


@cute.jit
def _load_a1(
    mG, mB, gWsH, gWsDh, sGc, sBeta, pS0T, sExtra, t0: Int32, n_valid: Int32, head: Int32, slot: Int32, ltid: Int32, D: cutlass.Constexpr[int],
    mn: cutlass.Constexpr[bool] = False,
):  # fmt: skip
    """Warpgroup 1's phase-A loads: the gates (``_gates``), S0^T (with ``mn``: S0 as it is, [V, K]) and ``<dS1, S0>``
    per key channel into ``sExtra`` (zeroed at the previous iteration's end). Not fenced."""
    _gates(mG, mB, sGc, sBeta, t0, n_valid, head, ltid, D)
    _state_t_to_smem(gWsH, gWsDh, pS0T, sExtra, slot, head, ltid, THREADS, D, mn)


@cute.jit
def _load_a0_mn(gDvn, gV, gWsTm, pDvn, pV, pTm, t0: Int32, eos: Int32, head: Int32, slot: Int32, ltid: Int32, D: cutlass.Constexpr[int]):
    """Warpgroup 0's phase-A loads with ``mn_operands`` (``_device.delta_rule_bwd_v2.load_a0`` without its transposed
    copies): dVn and V row-major, Tm row-major into the [64, 64] tile at ``pTm`` by 16-byte stores at hand-swizzled
    addresses (``load_a0``: 2-byte stores of Tm and Tm^T); every global load issued before the first store. Not fenced."""
    dvn = _rows_load(gDvn, t0, eos, head, ltid, D)
    vv = _rows_load(gV, t0, eos, head, ltid, D)
    row = ltid // 2
    half = ltid % 2
    tbuf = tm_row_load(gWsTm, slot, head, row, half)
    _rows_store(dvn, pDvn, None, t0, eos, ltid, D)
    _rows_store(vv, pV, None, t0, eos, ltid, D)
    for vj in cutlass.range_constexpr(CHUNK // 2 // VEC):
        c = half * (CHUNK // 2) + vj * VEC
        _vec_store(tbuf[0, 0, 0, None, vj], pTm, row * CHUNK + (c ^ ((row % 8) * VEC)))


@cute.jit
def _da_chain(
    mma, mma_tt, acc_a, acc_b, dvn_A, v_B, dwm_A, kbg_B, tmt_A, dtmt_B, x_A, tm_B, sDTmT, sX, sDA, sBT, sBeta, c64, wgi: Int32,
    mn: cutlass.Constexpr[bool] = False,
):  # fmt: skip
    """Warpgroup 0: ``dTm = (dVn V^T) beta_j + dWm (beta exp(G) K)^T`` (one WGMMA group) -> ``sDTmT``; ``X = Tm^T dTm``
    -> ``sX``; ``dA = -strictly_lower(X Tm^T)`` -> ``sDA``, ``(beta dA)^T`` -> ``sBT``. Arrives on ``BAR_OPERANDS_FREE``
    once the dTm products have read their operands (warpgroup 1 then stores B1's K, Vn, dO over them). Not fenced at
    the end. With ``mn`` (``mn_operands``) dTm and ``beta dA`` are stored as they are (``sDTmT`` holds dTm, ``sBT``
    ``beta dA``; read through MN-major views) and ``X`` is ``mma_tt`` 's (``tmt_A``, ``dtmt_B`` MN-major views of Tm,
    dTm)."""
    warpgroup.fence()
    _issue(mma, acc_a, dvn_A, v_B, True)
    _issue(mma, acc_b, dwm_A, kbg_B, True)
    _commit_wait()
    # dVn, V, dWm, beta exp(G) K have been read: warpgroup 1 may overwrite x0, x3 and r's V tiles (K, Vn, dO)
    cute.arch.barrier_arrive(barrier_id=BAR_OPERANDS_FREE, number_of_threads=THREADS2, aligned=False)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        if const_expr(mn):
            sDTmT[rc[0], rc[1]] = (acc_a[i] * sBeta[rc[1]] + acc_b[i]).to(BFloat16)
        else:
            sDTmT[rc[1], rc[0]] = (acc_a[i] * sBeta[rc[1]] + acc_b[i]).to(BFloat16)
    _wg_ready(wgi)
    _wgmma(mma_tt, acc_a, tmt_A, dtmt_B, True)  # X = Tm^T dTm
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        sX[rc[0], rc[1]] = acc_a[i].to(BFloat16)
    _wg_ready(wgi)
    _wgmma(mma, acc_a, x_A, tm_B, True)  # X Tm^T; dA = -strictly_lower(.)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        da = Float32(0.0)
        if rc[0] > rc[1]:
            da = -acc_a[i]
        sDA[rc[0], rc[1]] = da.to(BFloat16)
        if const_expr(mn):
            sBT[rc[0], rc[1]] = (da * sBeta[rc[0]]).to(BFloat16)
        else:
            sBT[rc[1], rc[0]] = (da * sBeta[rc[0]]).to(BFloat16)


@cute.jit
def _b1_products(mma, acc_a, acc_b, do_A, s0t_Bh, vn_B, sDP, sDPT, c64, scale: Float32, wgi: Int32, mma_t=None):
    """``acc_b = dO S0`` (this warpgroup's channel block) and ``dP~ = scale lower_eq(dO Vn^T)`` in one WGMMA group on
    both warpgroups (no branch between WGMMAs: ptxas would insert an arrive), warpgroup 0 storing dP~ to bf16 ``sDP`` and
    (unless None: ``mn_operands`` reads dP~^T in place) ``sDPT``. ``mma_t`` (None: ``mma``): the tiled MMA of ``dO S0``
    (with ``mn_operands`` ``s0t_Bh`` is an MN-major view of S0). Not fenced."""
    mma_s = mma
    if const_expr(mma_t is not None):
        mma_s = mma_t
    warpgroup.fence()
    _issue(mma_s, acc_b, do_A, s0t_Bh, True)
    _issue(mma, acc_a, do_A, vn_B, True)  # both warpgroups (no branch between WGMMAs); warpgroup 0 stores it
    _commit_wait()
    if wgi == 0:
        for i in cutlass.range_constexpr(cute.size(acc_a)):
            rc = c64[i]
            dp = Float32(0.0)
            if rc[0] >= rc[1]:
                dp = acc_a[i] * scale
            dpb = dp.to(BFloat16)
            sDP[rc[0], rc[1]] = dpb
            if const_expr(sDPT is not None):
                sDPT[rc[1], rc[0]] = dpb


@cute.jit
def _b1_block(
    mma,
    acc_a,
    acc_b,
    dp_A,
    row_B,
    lo_B,
    pK,
    sQ,
    sGc,
    pRow,
    pLo,
    mDq,
    mDg,
    c64,
    t0: Int32,
    n_valid: Int32,
    head: Int32,
    scale: Float32,
    wgi: Int32,
    ltid: Int32,
    h: Int32,
    D: cutlass.Constexpr[int],
    mn: cutlass.Constexpr[bool] = False,
):
    """Channel block ``h`` of ``dQ = scale exp(G) (dO S0) + rows(dP~, K)`` (``acc_b`` holds ``dO S0``) -> ``mDq`` and
    ``dG = Q dQ`` -> ``mDg``, on warpgroup ``wgi`` with its own operand tiles (raw addresses ``pRow``, ``pLo``; ``pK`` the K tile's).
    With ``mn`` (``mn_operands``) the split operands are stored row-major and ``row_B``, ``lo_B`` are MN-major views
    (``mma`` then the tiled MMA with B MN-major)."""
    for i in cutlass.range_constexpr(cute.size(acc_b)):
        rc = c64[i]
        acc_b[i] = acc_b[i] * (scale * cute.math.exp(sGc[rc[0], h * BV + rc[1]]))
    for bi in cutlass.range(CHUNK // SOLVE_BLOCK, unroll=1):  # + rows(dP~, K), block bi's rows
        _split_operand(pK, sGc, pRow, pLo, h, bi, ltid, False, D, mn)
        _wg_ready(wgi)
        warpgroup.fence()
        if const_expr(pLo is not None):
            _issue(mma, acc_a, dp_A, lo_B, True)
            _issue(mma, acc_a, dp_A, row_B, False)
        else:
            _issue(mma, acc_a, dp_A, row_B, True)
        _commit_wait()
        _wg_sync(wgi)  # every warp's wait has returned: the operand tiles may be rewritten (the next row block)
        r_blk = bi * SOLVE_BLOCK + REF_OFFSET
        if ltid // 32 == bi:  # the warp whose 16 accumulator rows are block bi (v1: the same test per element); it
            for i in cutlass.range_constexpr(cute.size(acc_a)):  # overlaps the other warps' next operand writes
                rc = c64[i]
                ch = h * BV + rc[1]
                acc_b[i] = acc_b[i] + acc_a[i] * cute.math.exp(sGc[rc[0], ch] - sGc[r_blk, ch])
    mDq0 = cute.domain_offset((t0, head, 0), mDq)  # the chunk's first token and this head
    mDg0 = cute.domain_offset((t0, head, 0), mDg)
    for i in cutlass.range_constexpr(cute.size(acc_b)):
        rc = c64[i]
        if rc[0] < n_valid:
            ch = h * BV + rc[1]
            mDq0[rc[0], 0, ch] = acc_b[i].to(mDq.element_type)
            mDg0[rc[0], 0, ch] = acc_b[i] * sQ[rc[0], ch].to(Float32)


@cute.jit
def _b2_block(
    mma, acc_a, acc_b, acc_c, acc_d, acc_e, da_A, dpt_A, bt_A, vn_A, tmt_A, row_B, colq_B, colk_B, lo_B, ds1t_Bh, dwmt_Bh,
    sK, pK, pQ, sGc, sBeta, pRow, pColQ, pColK, pLo, sDBr, sKdSum, mDk, mDg, c64, t0: Int32, n_valid: Int32, head: Int32, wgi: Int32, ltid: Int32,
    h: Int32, D: cutlass.Constexpr[int], mma_tt=None, mn: cutlass.Constexpr[bool] = False,
):  # fmt: skip
    """Channel block ``h`` of dK (-> ``mDk``) and dG's second part (``mDg`` read-modify-written), dbeta's ``rowsum(K Y)``
    (-> ``sDBr``) and ``sum_j dkd K exp(G_C - G)`` (-> ``sKdSum``), on warpgroup ``wgi`` with its own operand tiles;
    per row block the three products are one WGMMA group, then ``dkd`` and ``dKb`` one more. With ``mn``
    (``mn_operands``) the split operands are stored row-major (:func:`_split3_rm`) and every B operand is an MN-major
    view: ``mma`` is then the tiled MMA with B MN-major (A dA, Vn), ``mma_tt`` (None: ``mma``) the one with A MN-major
    as well (``dpt_A``, ``bt_A``, ``tmt_A``: views of dP~, ``beta dA``, Tm)."""
    mma2 = mma
    if const_expr(mma_tt is not None):
        mma2 = mma_tt
    for i in cutlass.range_constexpr(cute.size(acc_b)):
        acc_b[i] = Float32(0.0)  # dK
        acc_c[i] = Float32(0.0)  # Y = R + exp(G) dKb
    for bi in cutlass.range(CHUNK // SOLVE_BLOCK, unroll=1):
        if const_expr(mn):
            _split3_rm(pK, pQ, sGc, pRow, pColQ, pColK, pLo, h, bi, ltid)
        else:
            _split3(pK, pQ, sGc, pRow, pColQ, pColK, pLo, h, bi, ltid)
        _wg_ready(wgi)
        warpgroup.fence()
        _issue(mma, acc_a, da_A, row_B, True)  # R = rows(dA, K)
        if const_expr(pLo is not None):  # cols(dP~, Q), hi + lo with dp_split_hilo
            _issue(mma2, acc_d, dpt_A, lo_B, True)
            _issue(mma2, acc_d, dpt_A, colq_B, False)
        else:
            _issue(mma2, acc_d, dpt_A, colq_B, True)
        _issue(mma2, acc_e, bt_A, colk_B, True)  # cols(beta dA, K)
        _commit_wait()
        _wg_sync(wgi)  # every warp's wait has returned: the operand tiles may be rewritten (the next row block)
        r_blk = bi * SOLVE_BLOCK + REF_OFFSET
        if ltid // 32 == bi:  # the warp whose 16 accumulator rows are block bi (v1: the same test per element); it
            # overlaps the other warps' next operand writes (its own next split is the cheap rows-only path)
            for i in cutlass.range_constexpr(cute.size(acc_a)):
                rc = c64[i]
                ch = h * BV + rc[1]
                rv = acc_a[i] * cute.math.exp(sGc[rc[0], ch] - sGc[r_blk, ch])
                acc_c[i] = acc_c[i] + rv
                acc_b[i] = acc_b[i] + rv * sBeta[rc[0]]
            for i in cutlass.range_constexpr(cute.size(acc_d)):
                rc = c64[i]
                ch = h * BV + rc[1]
                acc_b[i] = acc_b[i] + acc_d[i] * cute.math.exp(sGc[r_blk, ch] - sGc[rc[0], ch])
            for i in cutlass.range_constexpr(cute.size(acc_e)):
                rc = c64[i]
                ch = h * BV + rc[1]
                acc_b[i] = acc_b[i] + acc_e[i] * cute.math.exp(sGc[r_blk, ch] - sGc[rc[0], ch])
    warpgroup.fence()
    _issue(mma, acc_a, vn_A, ds1t_Bh, True)  # dkd = Vn dS1
    _issue(mma2, acc_d, tmt_A, dwmt_Bh, True)  # dKb = Tm^T dWm
    _commit_wait()
    cs = cute.make_rmem_tensor(cute.make_layout((16,)), Float32)
    cs.fill(0.0)
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        ch = h * BV + rc[1]
        kdec = cute.math.exp(sGc[CHUNK - 1, ch] - sGc[rc[0], ch])
        acc_b[i] = acc_b[i] + acc_a[i] * kdec
        m = i % 2 + 2 * (i // 4)
        cs[m] = cs[m] + acc_a[i] * kdec * sK[rc[0], ch].to(Float32)
    _col_sums_add(sKdSum, cs, c64, h * BV)
    rs = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs.fill(0.0)
    mDk0 = cute.domain_offset((t0, head, 0), mDk)  # the chunk's first token and this head
    mDg0 = cute.domain_offset((t0, head, 0), mDg)
    for i in cutlass.range_constexpr(cute.size(acc_d)):
        rc = c64[i]
        r = rc[0]
        ch = h * BV + rc[1]
        eg = cute.math.exp(sGc[r, ch])
        y = acc_c[i] + acc_d[i] * eg
        kv = sK[r, ch].to(Float32)
        dk = acc_b[i] + acc_d[i] * (sBeta[r] * eg)
        rs[(i // 2) % 2] = rs[(i // 2) % 2] + kv * y
        if r < n_valid:
            mDk0[r, 0, ch] = dk.to(mDk.element_type)
            mDg0[r, 0, ch] = mDg0[r, 0, ch] - kv * dk + Float32(2.0) * sBeta[r] * kv * y
    _row_sums_add(sDBr, rs, c64)


@cute.jit
def _dg_cumsum(mDg, sGc, sExtra, sKdSum, t0: Int32, n_valid: Int32, head: Int32, ch: Int32):
    """dg of channel ``ch`` = the reverse cumsum of its per-element dG over the chunk plus the dG_C terms
    (``exp(G_C) <dS1, S0> + sum_j dkd K exp(G_C - G)``), v1's order of additions; its 64 loads issue before the first
    add. Then ``sExtra[ch] = 0`` for the next chunk (the caller's barrier follows)."""
    col = cute.slice_(cute.domain_offset((t0, head, ch), mDg), (None, 0, 0))  # this channel's column from token t0
    vals = cute.make_rmem_tensor(cute.make_layout((CHUNK,)), Float32)
    for r in cutlass.range_constexpr(CHUNK):
        x = Float32(0.0)
        if r < n_valid:
            x = col[r]
        vals[r] = x
    run = cute.math.exp(sGc[CHUNK - 1, ch]) * sExtra[ch] + sKdSum[ch]
    for rr in cutlass.range_constexpr(CHUNK):
        r = CHUNK - 1 - rr
        if r < n_valid:
            run = run + vals[r]
            col[r] = run
    sExtra[ch] = Float32(0.0)


class KdaBwdGradsV2(GradsV2Launch):
    """Pass 3 v2: dq, dk, dv, dg, dbeta of every chunk on two warpgroups per CTA (same launch arguments as v1)."""

    PER_KEY_GATE = True

    def __init__(self, key: KdaBwdKey):
        super().__init__(key)
        assert not key.l2norm and not key.gva, "KDA backward: no in-kernel L2 norm, no GVA (declined by the adapter)"

    def shared_storage(self, l_ck, l_kc, l_kv, l_cc):
        """The shared-memory struct (host side, built in ``GradsLaunch.__call__``; see the kernel for the tiles' use):
        x0, x1, x3 [C, D], x5 [D % 64, C, D // 64], y0 [K, V], c1, c4, c5, c6 [C, C], r (eight [64, 64] tiles), then the
        fp32 arrays. With ``mn_operands`` the same struct (x5 then holds dWm [C, D], y0 the states [V, K])."""
        D = self.D
        tiles = dict(x0=l_ck, x1=l_ck, x3=l_ck, x5=l_kc, y0=l_kv, c1=l_cc, c4=l_cc, c5=l_cc, c6=l_cc, r=cute.make_layout((8 * TILE,)))
        return smem_struct(tiles, dict(gc=CHUNK * (D + 1), beta=CHUNK, dbr=CHUNK, extra=D, kdsum=D))

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        gDo: cute.Tensor,
        gVn: cute.Tensor,
        gDvn: cute.Tensor,
        gWsH: cute.Tensor,
        gWsDh: cute.Tensor,
        gWsTm: cute.Tensor,
        mDq: cute.Tensor,
        mDk: cute.Tensor,
        mDv: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mDg: cute.Tensor,
        mDb: cute.Tensor,
        mCu: cute.Tensor | None,
        seq_len: Int32,
        group: Int32,
        z_split: Int32,
        scale: Float32,
        mma: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_kc: cute.ComposedLayout,
        l_kv: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NH = D // BV
        HILO = self.key.dp_split_hilo
        MN = self.key.mn_operands  # transposed operands read in place through MN-major views (no transposed copies)
        tidx, seq, head, zc, hk, _, bos, eos, n_chunks, slot0 = bwd_cta(mCu, seq_len, group, self.key.varlen)
        # this thread's warpgroup, marked warp-uniform (the `if wgi ...` branches are warpgroup-uniform). ptxas serializes
        # every WGMMA of the kernel (C7520) when one is issued under a branch it takes for divergent: keep WGMMA groups
        # branch-free inside (``_b1_products``); the compile-only test runs ptxas -v where one is installed
        wgi = cute.arch.make_warp_uniform(tidx // THREADS)
        ltid = tidx % THREADS  # its thread in the warpgroup

        smem = cutlass.utils.SmemAllocator()
        st = smem.allocate(SharedStorage)
        # this warpgroup's key-channel block in B1 / B2 (K = 64: warpgroup 1 idles there); NOT from the uniform `wgi`: the
        # tile addresses derived from a uniform value cost ptxas ~80 spilled registers
        hw = (tidx // THREADS) % NH
        # x0: dVn (A) | K        x1: dVn^T | Q        x3: beta exp(G) K | Vn        x5: dWm^T        y0: S0^T | dS1^T
        # c1: Tm^T   c4: dA   c5: (beta dA)^T   c6: dP~^T
        # r, eight [64, 64] tiles: phase A  [dWm (0, 1 at K = 128) | Tm 2 | dTm^T 3 | - 4 | V (5, 6 at K = 128) | X 7];
        # B1 [- | - | - | - | dO (5, 6) | dP~ 7] and warpgroup w's lo half 0 + w, rows operand 2 + w;
        # B2: warpgroup w's lo half 0 + w, rows operand 2 + w, cols-Q operand 4 + w, cols-K operand 6 + w
        # MN (mn_operands): x1 Q only; x5 dWm; y0 S0 | dS1 as stored ([V, K]); c1 Tm; c5 beta dA; c6 dP~; r 3 dTm; r 0-2
        # idle in phase A, 7 in B1; the split operands row-major [tokens, channels]; transposes are MN-major views
        r0 = st.r.data_ptr()
        if const_expr(not MN):
            sDvn = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sK = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sQ = st.x1.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sKbg = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sVn = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sDwmT = st.x5.get_tensor(l_kc.outer, swizzle=l_kc.inner)
            sTmT = st.c1.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sDA = st.c4.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sBT = st.c5.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sDPT = st.c6.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sDwm = _tile_at(r0, Int32(0), l_ck)
            sTm = _tile_at(r0, Int32(2 * TILE), l_cc)
            sDTmT = _tile_at(r0, Int32(3 * TILE), l_cc)
            sV = _tile_at(r0, Int32(5 * TILE), l_ck)
            sDo = _tile_at(r0, Int32(5 * TILE), l_ck)
            sX = _tile_at(r0, Int32(7 * TILE), l_cc)
            sDP = _tile_at(r0, Int32(7 * TILE), l_cc)
            sLoW = _tile_at(r0, hw * TILE, l_cc)  # this warpgroup's operand tiles
            sRowW = _tile_at(r0, (2 + hw) * TILE, l_cc)
            sColQW = _tile_at(r0, (4 + hw) * TILE, l_cc)
            sColKW = _tile_at(r0, (6 + hw) * TILE, l_cc)
            sS0TW = _tile_at(st.y0.data_ptr(), hw * (CHUNK * D), l_ck)  # S0^T / dS1^T of this warpgroup's key channels
            sDvnTW = _tile_at(st.x1.data_ptr(), hw * TILE, l_cc)  # dVn^T of this warpgroup's value channels
            sDwmTW = _tile_at(st.x5.data_ptr(), hw * TILE, l_cc)  # dWm^T of this warpgroup's key channels
        else:  # mn_operands: x5 dWm (A -> B2), c1 Tm (all), c5 beta dA, c6 dP~ (B1 -> B2), r 3 dTm; no transposed copies
            sDvn = st.x0.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sK = sDvn
            sQ = st.x1.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sKbg = st.x3.get_tensor(l_ck.outer, swizzle=l_ck.inner)
            sVn = sKbg
            sDwmT, sTmT, sDPT = None, None, None
            sTm = st.c1.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sDA = st.c4.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sBT = st.c5.get_tensor(l_cc.outer, swizzle=l_cc.inner)  # beta dA (row-major; its transpose read in place)
            sDP = st.c6.get_tensor(l_cc.outer, swizzle=l_cc.inner)
            sDwm = _tile_at(st.x5.data_ptr(), Int32(0), l_ck)
            sDTmT = _tile_at(r0, Int32(3 * TILE), l_cc)  # dTm (row-major)
            sV = _tile_at(r0, Int32(5 * TILE), l_ck)
            sDo = sV
            sX = _tile_at(r0, Int32(7 * TILE), l_cc)
            sLoW = _tile_at(r0, hw * TILE, l_cc)  # this warpgroup's operand tiles (row-major [tokens, channels])
            sRowW = _tile_at(r0, (2 + hw) * TILE, l_cc)
            sColQW = _tile_at(r0, (4 + hw) * TILE, l_cc)
            sColKW = _tile_at(r0, (6 + hw) * TILE, l_cc)
        sGc = st.gc.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 1, 1)))
        sBeta = st.beta.get_tensor(cute.make_layout((CHUNK,)))
        sDBr = st.dbr.get_tensor(cute.make_layout((CHUNK,)))
        sExtra = st.extra.get_tensor(cute.make_layout((D,)))  # <dS1, S0> per key channel
        sKdSum = st.kdsum.get_tensor(cute.make_layout((D,)))  # sum_j dkd_j k_j exp(G_C - G_j) per key channel

        wg = mma.get_slice(0)
        mma_t, mma_tt = mma, mma  # the tiled MMAs of the products with B (and A) read MN-major: mma itself without MN
        if const_expr(not MN):
            dvn_A = wg.make_fragment_A(wg.partition_A(sDvn))
            tmt_A = wg.make_fragment_A(wg.partition_A(sTmT))
            tm_B = wg.make_fragment_B(wg.partition_B(sTm))
            v_B = wg.make_fragment_B(wg.partition_B(sV))
            dwm_A = wg.make_fragment_A(wg.partition_A(sDwm))
            kbg_B = wg.make_fragment_B(wg.partition_B(sKbg))
            dtmt_B = wg.make_fragment_B(wg.partition_B(sDTmT))
            x_A = wg.make_fragment_A(wg.partition_A(sX))
            do_A = wg.make_fragment_A(wg.partition_A(sDo))
            vn_B = wg.make_fragment_B(wg.partition_B(sVn))
            vn_A = wg.make_fragment_A(wg.partition_A(sVn))
            dp_A = wg.make_fragment_A(wg.partition_A(sDP))
            dpt_A = wg.make_fragment_A(wg.partition_A(sDPT))
            da_A = wg.make_fragment_A(wg.partition_A(sDA))
            bt_A = wg.make_fragment_A(wg.partition_A(sBT))
            s0tw_B = wg.make_fragment_B(wg.partition_B(sS0TW))
            dvntw_B = wg.make_fragment_B(wg.partition_B(sDvnTW))
            dwmtw_B = wg.make_fragment_B(wg.partition_B(sDwmTW))
            row_B = wg.make_fragment_B(wg.partition_B(sRowW))
            colq_B = wg.make_fragment_B(wg.partition_B(sColQW))
            colk_B = wg.make_fragment_B(wg.partition_B(sColKW))
            lo_B = wg.make_fragment_B(wg.partition_B(sLoW))
        else:  # B MN-major (mma_t), A and B MN-major (mma_tt): views of the row-major tiles
            mma_t = make_mma_n64(b_mn=True)
            mma_tt = make_mma_n64(a_mn=True, b_mn=True)
            wgt = mma_t.get_slice(0)
            wgtt = mma_tt.get_slice(0)
            dvn_A = wg.make_fragment_A(wg.partition_A(sDvn))
            tm_B = wg.make_fragment_B(wg.partition_B(sTm))
            v_B = wg.make_fragment_B(wg.partition_B(sV))
            dwm_A = wg.make_fragment_A(wg.partition_A(sDwm))
            kbg_B = wg.make_fragment_B(wg.partition_B(sKbg))
            x_A = wg.make_fragment_A(wg.partition_A(sX))
            do_A = wg.make_fragment_A(wg.partition_A(sDo))
            vn_B = wg.make_fragment_B(wg.partition_B(sVn))
            vn_A = wg.make_fragment_A(wg.partition_A(sVn))
            dp_A = wg.make_fragment_A(wg.partition_A(sDP))
            da_A = wg.make_fragment_A(wg.partition_A(sDA))
            tmt_A = wgtt.make_fragment_A(wgtt.partition_A(transpose_view(sTm)))  # Tm^T, dP~^T, (beta dA)^T in place
            dpt_A = wgtt.make_fragment_A(wgtt.partition_A(transpose_view(sDP)))
            bt_A = wgtt.make_fragment_A(wgtt.partition_A(transpose_view(sBT)))
            dtmt_B = wgtt.make_fragment_B(wgtt.partition_B(transpose_view(sDTmT)))  # dTm^T
            # S0 / dS1 stored [V, K] (state_t_to_smem's mn form): this warpgroup's 64 key channels, all V rows
            s0tw_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(_tile_at(st.y0.data_ptr(), hw * (BV * D), k_major_smem_layout(D, BV)))))
            dvntw_B = wgtt.make_fragment_B(wgtt.partition_B(transpose_view(_tile_at(st.x0.data_ptr(), hw * TILE, l_cc))))  # dVn^T
            dwmtw_B = wgtt.make_fragment_B(wgtt.partition_B(transpose_view(_tile_at(st.x5.data_ptr(), hw * TILE, l_cc))))  # dWm^T
            row_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(sRowW)))
            colq_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(sColQW)))
            colk_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(sColKW)))
            lo_B = wgt.make_fragment_B(wgt.partition_B(transpose_view(sLoW)))
        pK = st.x0.data_ptr()  # raw (unswizzled) tile addresses: x0 (dVn, K), x1 (Q), x3 (Vn), r's V / dO
        pQ = st.x1.data_ptr()
        pVn = st.x3.data_ptr()
        pY0 = st.y0.data_ptr()
        pV = r0 + 5 * TILE
        pRowW = r0 + cute.assume((2 + hw) * TILE, divby=TILE)
        pColQW = r0 + cute.assume((4 + hw) * TILE, divby=TILE)
        pColKW = r0 + cute.assume((6 + hw) * TILE, divby=TILE)
        pLoH = None
        if const_expr(HILO):
            pLoH = r0 + cute.assume(hw * TILE, divby=TILE)
        acc_a = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_b = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_c = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_d = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        acc_e = cute.make_rmem_tensor(wg.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma.get_slice(ltid).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        krow = tidx // 4  # the K loader: four threads per row, D / 4 channels each
        kq = tidx % 4
        NQ = D // 4 // VEC
        if tidx < D:
            sExtra[tidx] = Float32(0.0)  # later chunks: zeroed by _dg_cumsum
        cute.arch.sync_threads()
        for ci in range(zc, n_chunks, z_split):
            t0, n_valid, slot = grads_chunk(bos, eos, slot0, ci)
            if tidx < CHUNK:
                sDBr[tidx] = Float32(0.0)
            if tidx < D:
                sKdSum[tidx] = Float32(0.0)

            # ================= phase A: loads; dWm, dV, dTm, dA =================================================
            kbuf = cute.make_rmem_tensor(cute.make_layout((1, 1, VEC, NQ)), BFloat16)
            t_rowk, keepk = row_guard(t0, krow, n_valid, eos)
            for vj in cutlass.range_constexpr(NQ):
                cute.autovec_copy(gK[(None, None, None), (t_rowk, hk, kq * NQ + vj)], kbuf[None, None, None, vj])
            if wgi == 0:
                if const_expr(MN):
                    _load_a0_mn(gDvn, gV, gWsTm, pK, pV, st.c1.data_ptr(), t0, eos, head, slot, ltid, D)
                else:
                    _load_a0(gDvn, gV, gWsTm, pK, pQ, pV, sTm, sTmT, t0, eos, head, slot, ltid, D)
            else:
                _load_a1(mG, mB, gWsH, gWsDh, sGc, sBeta, pY0, sExtra, t0, n_valid, head, slot, ltid, D, MN)
            cute.arch.sync_threads()  # sGc, sBeta published to the K loader
            kb_row = keepk * sBeta[krow]
            kout = cute.make_rmem_tensor(cute.make_layout((VEC, NQ)), BFloat16)
            for vj in cutlass.range_constexpr(NQ):
                for e in cutlass.range_constexpr(VEC):
                    col = kq * (D // 4) + vj * VEC + e
                    kn = kbuf[0, 0, e, vj].to(Float32)
                    kout[e, vj] = (kn * (kb_row * cute.math.exp(sGc[krow, col]))).to(BFloat16)
            for vj in cutlass.range_constexpr(NQ):  # 16-byte stores at the hand-swizzled address (as _rows_store)
                c = kq * (D // 4) + vj * VEC
                off = (c // BV) * TILE + krow * BV + ((c % BV) ^ ((krow % 8) * VEC))
                cute.autovec_copy(kout[None, vj], cute.make_tensor(pVn + cute.assume(off, divby=VEC), cute.make_layout((VEC,))))
            _smem_ready()
            if wgi < NH:  # dWm, dV: channel block hw on warpgroup hw
                _dwm_dv_block(mma, acc_a, acc_d, dvn_A, s0tw_B, tmt_A, dvntw_B, sDwm, sDwmT, sDBr, sV, sBeta, mDv, c64, t0, n_valid, head, hw, mma_t, mma_tt)
            _smem_ready()  # sDwm, sDwmT of every block
            if wgi == 0:
                _da_chain(mma, mma_tt, acc_a, acc_b, dvn_A, v_B, dwm_A, kbg_B, tmt_A, dtmt_B, x_A, tm_B, sDTmT, sX, sDA, sBT, sBeta, c64, wgi, MN)
            else:  # B1's loads under warpgroup 0's chain
                _rows_store(_rows_load(gQ, t0, eos, hk, ltid, D), pQ, None, t0, eos, ltid, D)  # x1: dVn^T's readers finished above
                kk = _rows_load(gK, t0, eos, hk, ltid, D)
                vn = _rows_load(gVn, t0, eos, head, ltid, D)
                dd = _rows_load(gDo, t0, eos, head, ltid, D)
                cute.arch.barrier(barrier_id=BAR_OPERANDS_FREE, number_of_threads=THREADS2)  # the dTm products' operands are read
                _rows_store(kk, pK, None, t0, eos, ltid, D)
                _rows_store(vn, pVn, None, t0, eos, ltid, D)
                _rows_store(dd, pV, None, t0, eos, ltid, D)
            _smem_ready()  # dA, (beta dA)^T and B1's K, Q, Vn, dO published; every phase-A reader of r has completed

            # ================= phase B1: dP~, dQ (and dG = Q dQ to dg) ===========================================
            if wgi < NH:
                _b1_products(mma, acc_a, acc_b, do_A, s0tw_B, vn_B, sDP, sDPT, c64, scale, wgi, mma_t)
            _smem_ready()  # sDP, sDPT
            if wgi < NH:
                _b1_block(mma_t, acc_a, acc_b, dp_A, row_B, lo_B, pK, sQ, sGc, pRowW, pLoH, mDq, mDg, c64, t0, n_valid, head, scale, wgi, ltid, hw, D, MN)
            cute.arch.sync_threads()  # every reader of S0^T, dO and dP~ has completed

            # ================= phase B2: dK, dg, dbeta =========================================================
            _state_t_to_smem(gWsDh, None, pY0, None, slot, head, tidx, THREADS2, D, MN)  # dS1^T over S0^T (MN: dS1 over S0)
            _smem_ready()
            if wgi < NH:
                _b2_block(
                    mma_t, acc_a, acc_b, acc_c, acc_d, acc_e, da_A, dpt_A, bt_A, vn_A, tmt_A, row_B, colq_B, colk_B, lo_B, s0tw_B, dwmtw_B,
                    sK, pK, pQ, sGc, sBeta, pRowW, pColQW, pColKW, pLoH, sDBr, sKdSum, mDk, mDg, c64, t0, n_valid, head, wgi, ltid, hw, D, mma_tt, MN,
                )  # fmt: skip
            cute.arch.sync_threads()  # dg's per-element values (this CTA's global writes) and sExtra, sDBr, sKdSum complete

            # ---- dg = reverse cumsum over the chunk per key channel, with the dG_C terms; dbeta -------------------
            if tidx < D:
                _dg_cumsum(mDg, sGc, sExtra, sKdSum, t0, n_valid, head, tidx)
            if tidx < n_valid:
                mDb[t0 + tidx, head] = sDBr[tidx]
            cute.arch.sync_threads()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


def build_grads_v2(key: KdaBwdKey):
    """The ``cute.compile`` of :class:`KdaBwdGradsV2` from fake pointers (``GradsV2Launch.compile_fake``)."""
    return KdaBwdGradsV2(key).compile_fake()
