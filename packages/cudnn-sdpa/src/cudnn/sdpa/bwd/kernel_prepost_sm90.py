"""The backward's two small kernels around the main one (sm_90a, CuTe DSL).

Preprocess, one thread per query row (``PREPOST_ROWS`` rows per CTA, grid (S_pad / rows, H, B)):

    dpsum[b, h, i]    = sum_d dO[b, h, i, d] * O[b, h, i, d]              (fp32; 0 for padded rows)
    lse_log2[b, h, i] = LSE[b, h, i] * log2(e)   (or LSE when the forward saved it in base 2)
                        +inf where LSE = -inf (a fully masked row) and for padded rows, so P = exp2(.. - lse) = 0
    dq_accum[b, h, i, :] = 0                                             (every row of the block, coalesced)

Postprocess, one thread per query row: ``dQ[b, h, i, :] = scale * dq_accum[b, h, i, :]`` in the output dtype.

With the ``prepost_vec`` compile-key variant both kernels give each row four adjacent threads instead (a warp
instruction then covers 8 rows x 64 contiguous bytes instead of 32 rows x 16 bytes, 512 bytes apart), with the dO . O
sum finished by lane shuffles; the results are the same, only the access pattern changes.

With the ``dq_bulk`` compile-key variant the accumulator holds every 64-row query block in the main kernel's
MMA-fragment order (kernel_key.DQ_BULK_ROWS): the postprocess then plays each consumer thread of the main kernel,
reads its 16-byte groups (coalesced) and writes its (row, column) pairs, scaled and converted, into a shared-memory
staging tile of the block's rows (``stage_layout``: rows padded by 16 bytes, so the fragment's pair stores and the row
reads are free of bank conflicts); after a CTA barrier every thread copies 16-byte row chunks of the tile to dQ, a warp
covering whole 256-byte rows (session 12, issue #6: the pairs stored straight from the fragment wrote 16 bytes per row
per warp instruction, half a sector; H200 profile at 16k tokens, d 128: 77 -> 51-55 us, FA4's 49; d 64 83 -> 51). The
``prepost_vec`` row split does not apply to dQ then; the preprocess is unchanged, its zeroing does not depend on the
order.

With ``tile_m80`` + ``dq_bulk`` (m80 bulk, dense only) the accumulator holds 80-row blocks in the order of the main
kernel's transposed dQ^T fragment (kernel_key.M80_BULK_ROWS) and the scratch rows are padded to whole 80-row blocks
(kernel_key.padded_rows): the preprocess then covers every padded row (grid S_pad / PREPOST_ROWS, so the rows of a last
block past S_q are zeroed and their lse_log2 is +inf) and the postprocess walks 80-row blocks (grid ceil(S_q / 80)),
each thread playing the consumer thread of the same index in each warpgroup (its dQ^T elements are single elements of
dQ: scalar stores into the staging tile, then the same coalesced row copy).

With the ``prepost_mlp`` compile-key variant (with ``prepost_vec``; in every default tuning since session 18) the
preprocess loads all four passes' O / dO chunks and LSE words before its first store (a row past the sequence's end
reads the last row; its results are discarded), so a CTA waits for one memory round trip instead of four (H200 ncu at
d128 s1k causal: 69% of DRAM bandwidth at 40 registers, 12 CTAs per SM and 1.29 waves before; 96 registers after), and
with ``dq_bulk`` (not m80) a postprocess CTA converts one 64-row fragment block (``cta_rows``): a 17 KB staging tile, so
12 CTAs fit an SM where the 128-row tile's 35 KB fit 6. H200 profile: preprocess 76.5 -> 71.3 us, postprocess 56.0 ->
51.0 us (FA4's 68.2 / 48.7; docs/benchmarks/sdpa_bwd_s18_mlp_kernels.md).

With the ``pdl`` compile-key variant (Programmatic Dependent Launch) both are launched with ``use_pdl``: the
preprocess waits (``griddepcontrol.wait``) before its first load and lets the main kernel launch once its loads are
issued (``griddepcontrol.launch_dependents``, before the dQ accumulator's zeroing); the postprocess waits before its
first read.

Layouts: O / dO / dQ are rank-4 (B, H, S, D) with any 16-byte-multiple strides and a unit-stride head dim; LSE
is fp32 (B, H, S) with any strides; the scratch (lse_log2, dpsum, dq_accum) is the compact workspace layout of
:func:`cudnn.sdpa.bwd.kernel_key.workspace_layout`. Every extent is a runtime argument.
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr

from .._device.kernel_plan import DTYPES
from .._device.kernel_plan import fake_gmem_ptr as _ptr
from .dq_first_store import flags_tensor
from .kernel_key import DQ_BULK_ROWS, M80_BULK_ROWS, PREPOST_ROWS, SEM_ROWS, SdpaBwdKey, dq_flag_index, dq_flags_offset, m80_bulk, stats_perm_row
from .kernel_sm90 import compile_entry, main_kernel_class

LOG2_E = math.log2(math.e)
#: prepost_vec: adjacent threads per query row (each head dim served, 64 / 96 / 128, splits into 16-byte chunks by 4).
ROW_THREADS = 4
#: dq_bulk postprocess: elements of padding per staging-tile row (16 bytes at 16-bit dtypes; ``stage_layout``).
STAGE_PAD = 8


def stage_layout(rows: int, head_dim: int) -> cute.Layout:
    """The dq_bulk postprocess's shared-memory staging tile, (rows, head dim) row-major with rows ``head_dim +
    STAGE_PAD`` elements apart: a row starts 16 bytes (4 banks) after the previous one's bank, so the 8 rows x 4
    threads of a fragment pair store (and the 8 rows x 4 pairs of m80's transposed element stores) fall in distinct
    banks, and 8 adjacent threads reading one row's 16-byte chunks cover 128 contiguous bytes."""
    return cute.make_layout((rows, head_dim), stride=(head_dim + STAGE_PAD, 1))


class SdpaBwdPreprocessSm90:
    """dO . O row sums, LSE to the scaled log2 domain, and a zeroed dQ accumulator."""

    def __init__(self, key: SdpaBwdKey):
        self.key = key
        self.dtype = DTYPES[key.dtype]
        self.head_dim = key.head_dim
        self.head_dim_v = key.head_dim_v

    @cute.jit
    def __call__(
        self,
        o_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        lse2_ptr: cute.Pointer,
        dpsum_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        sinks_ptr: cute.Pointer | None,
        dsink_part_ptr: cute.Pointer | None,
        sem_ptr: cute.Pointer | None,
        cu_q_ptr: cute.Pointer | None,
        batch: Int32,
        heads: Int32,
        seqlen_q: Int32,  # S_q (dense) or T_q (varlen)
        max_seqlen_q: Int32,  # grid extent along queries (= S_q for dense)
        seqlen_pad: Int32,
        o_strides: tuple[Int64, Int64, Int64],
        do_strides: tuple[Int64, Int64, Int64],
        lse_strides: tuple[Int64, Int64, Int64],
        stream: cuda.CUstream,
    ):
        div = 128 // self.dtype.width
        os_ = tuple(cute.assume(x, divby=div) for x in o_strides)
        dos = tuple(cute.assume(x, divby=div) for x in do_strides)
        Dv, D = self.head_dim_v, self.head_dim
        sp = cute.assume(seqlen_pad, divby=PREPOST_ROWS)
        bt = batch if const_expr(not self.key.varlen) else Int32(1)
        mO = cute.make_tensor(o_ptr, cute.make_layout((seqlen_q, Dv, heads, bt), stride=(os_[2], 1, os_[1], os_[0])))
        mdO = cute.make_tensor(do_ptr, cute.make_layout((seqlen_q, Dv, heads, bt), stride=(dos[2], 1, dos[1], dos[0])))
        mLSE = cute.make_tensor(lse_ptr, cute.make_layout((seqlen_q, heads, bt), stride=(lse_strides[2], lse_strides[1], lse_strides[0])))
        mLSE2 = cute.make_tensor(lse2_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mDpsum = cute.make_tensor(dpsum_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mdQacc = cute.make_tensor(dqacc_ptr, cute.make_layout((sp, D, heads, bt), stride=(D, 1, sp * D, sp * D * heads)))
        mSinks, mPart = None, None
        if const_expr(self.key.has_sinks):
            mSinks = cute.make_tensor(sinks_ptr, cute.make_layout((heads,)))
            nw = sp // 32
            mPart = cute.make_tensor(dsink_part_ptr, cute.make_layout((nw, heads, bt), stride=(1, nw, nw * heads)))
        mSem = None
        if const_expr(self.key.deterministic):
            ns = sp // SEM_ROWS
            mSem = cute.make_tensor(sem_ptr, cute.make_layout((ns, heads, bt), stride=(1, ns, ns * heads)))
        elif const_expr(self.key.persistent):
            mSem = cute.make_tensor(sem_ptr, cute.make_layout((1,)))  # the persistent main kernel's tile counter
        mFlags = None
        if const_expr(self.key.dq_first_store):  # the main kernel's first-store flags (dq_first_store.py): 0 before it runs
            mFlags = flags_tensor(sem_ptr + dq_flags_offset(self.key.persistent), sp, heads, bt)
        mCuQ = None
        if const_expr(self.key.varlen):
            mCuQ = cute.make_tensor(cu_q_ptr, cute.make_layout((batch + 1,)))
        grid = ((max_seqlen_q + PREPOST_ROWS - 1) // PREPOST_ROWS, heads, batch)
        if const_expr(m80_bulk(self.key)):
            # m80 bulk (dense): every padded row, so a last 80-row block past S_q's 128-row padding is initialized too
            grid = (sp // PREPOST_ROWS, heads, batch)
        self.kernel(mO, mdO, mLSE, mLSE2, mDpsum, mdQacc, mSinks, mPart, mSem, mFlags, mCuQ, seqlen_q).launch(
            grid=grid, block=[PREPOST_ROWS, 1, 1], stream=stream, use_pdl=self.key.pdl
        )

    @cute.kernel
    def kernel(
        self,
        mO: cute.Tensor,
        mdO: cute.Tensor,
        mLSE: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mSinks: cute.Tensor | None,
        mPart: cute.Tensor | None,
        mSem: cute.Tensor | None,
        mFlags: cute.Tensor | None,
        mCuQ: cute.Tensor | None,
        seqlen_q: Int32,
    ):
        m_block, head, batch = cute.arch.block_idx()
        if const_expr(self.key.pdl):
            cute.arch.griddepcontrol_wait()  # pdl: O / dO / LSE are the previous kernels' (launched early under use_pdl)
        if const_expr(self.key.persistent):
            # the persistent main kernel draws its tiles from this counter (SdpaBwdKey.persistent): 0 before it runs
            if m_block + head + batch == 0:
                if cute.arch.thread_idx()[0] == 0:
                    mSem[0] = Int32(0)
            mSem = None
        if const_expr(mFlags is not None):
            mSem = mFlags  # zero_semaphores zeroes the block's flags; no dQ accumulator to zero
        if const_expr(mCuQ is None):
            self.rows(mO, mdO, mLSE, mLSE2, mDpsum, mdQacc, mSinks, mPart, mSem, m_block, head, batch, seqlen_q, Int32(0), Int32(0))
        else:
            offset, seqlen, pad = varlen_rows(mCuQ, batch)
            if m_block * PREPOST_ROWS < seqlen:
                self.rows(mO, mdO, mLSE, mLSE2, mDpsum, mdQacc, mSinks, mPart, mSem, m_block, head, Int32(0), seqlen, offset, pad)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def rows(
        self,
        mO: cute.Tensor,
        mdO: cute.Tensor,
        mLSE: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mSinks: cute.Tensor | None,
        mPart: cute.Tensor | None,
        mSem: cute.Tensor | None,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        offset: Int32,
        pad: Int32,
    ):
        """The block's rows: local row ``i`` reads token ``offset + i`` and writes scratch row ``pad + i``. One thread
        per row; with ``prepost_vec`` ``ROW_THREADS`` adjacent threads per row, warp ``w`` owning the block's rows
        ``32 w .. 32 w + 31`` (so the per-warp sink partials keep their layout), 8 per pass."""
        tidx, _, _ = cute.arch.thread_idx()
        if const_expr(not self.key.prepost_vec):
            local = m_block * PREPOST_ROWS + tidx
            row = offset + local
            srow = pad + local
            self.zero_semaphores(mSem, m_block, head, batch, pad, tidx)
            dot, lse2 = self.row_dot_lse(mO, mdO, mLSE, local, row, head, batch, seqlen_q, 0, 1)
            if const_expr(self.key.stats_vec4):
                mLSE2[stats_perm_row(srow), head, batch] = lse2
                mDpsum[stats_perm_row(srow), head, batch] = dot
            else:
                mLSE2[srow, head, batch] = lse2
                mDpsum[srow, head, batch] = dot
            if const_expr(mSinks is not None):
                # d loss / d sink[h] = -sum_i P_sink[i] * dpsum[i], with P_sink[i] = exp(sink - LSE[i]); one partial per warp.
                contrib = Float32(0.0)
                if local < seqlen_q:
                    contrib = -cute.math.exp2(Float32(mSinks[head]) * LOG2_E - lse2, fastmath=True) * dot
                wsum = cute.arch.warp_reduction_sum(contrib)
                if tidx % 32 == 0:
                    mPart[(pad + m_block * PREPOST_ROWS) // 32 + tidx // 32, head, batch] = wsum
            if const_expr(self.key.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # pdl: loads issued; the main kernel may launch (it waits for this grid)
            if const_expr(not self.key.dq_first_store):
                self.zero_accumulator(mdQacc, m_block, head, batch, pad, tidx)
        else:
            warp_i, lane = tidx // 32, tidx % 32
            sub = lane % ROW_THREADS
            self.zero_semaphores(mSem, m_block, head, batch, pad, tidx)
            contrib = Float32(0.0)
            first_local = m_block * PREPOST_ROWS + warp_i * 32 + lane // ROW_THREADS  # the thread's row of pass 0
            loaded = None
            if const_expr(self.key.prepost_mlp):
                loaded = self.load_passes(mO, mdO, mLSE, first_local, offset, head, batch, seqlen_q, sub)
            for p in cutlass.range_constexpr(ROW_THREADS):  # 32 rows a warp, 32 / ROW_THREADS a pass
                local = first_local + p * (32 // ROW_THREADS)
                row = offset + local
                srow = pad + local
                if const_expr(loaded is not None):
                    dot, lse2 = self.pass_dot_lse(loaded, p, local, seqlen_q)
                else:
                    dot, lse2 = self.row_dot_lse(mO, mdO, mLSE, local, row, head, batch, seqlen_q, sub, ROW_THREADS)
                dot = cute.arch.warp_reduction_sum(dot, threads_in_group=ROW_THREADS)
                if sub == 0:
                    if const_expr(self.key.stats_vec4):
                        mLSE2[stats_perm_row(srow), head, batch] = lse2
                        mDpsum[stats_perm_row(srow), head, batch] = dot
                    else:
                        mLSE2[srow, head, batch] = lse2
                        mDpsum[srow, head, batch] = dot
                    if const_expr(mSinks is not None):
                        if local < seqlen_q:
                            contrib = contrib - cute.math.exp2(Float32(mSinks[head]) * LOG2_E - lse2, fastmath=True) * dot
            if const_expr(mSinks is not None):
                wsum = cute.arch.warp_reduction_sum(contrib)
                if lane == 0:
                    mPart[(pad + m_block * PREPOST_ROWS) // 32 + warp_i, head, batch] = wsum
            if const_expr(self.key.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # pdl: loads issued; the main kernel may launch (it waits for this grid)
            if const_expr(not self.key.dq_first_store):
                self.zero_accumulator(mdQacc, m_block, head, batch, pad, tidx)

    @cute.jit
    def zero_accumulator(self, mdQacc: cute.Tensor, m_block: Int32, head: Int32, batch: Int32, pad: Int32, tidx: Int32):
        """dq_accum rows ``pad + m_block * PREPOST_ROWS ..`` + PREPOST_ROWS = 0 (every row of the block, past the
        sequence's end too: the main kernel adds into them), as one contiguous range of 16-byte chunks: chunk ``j`` of
        the block is row ``j // (D / 4)``, columns ``4 (j % (D / 4))``; thread ``tidx`` writes the chunks ``tidx, tidx +
        PREPOST_ROWS, ...``, so a warp instruction covers 512 contiguous bytes (session 12: the rows were zeroed by the
        row's own threads, 64 bytes of 8 rows or 16 bytes of 32 rows per warp instruction; the H200 profile measured
        the preprocess the same either way, 76-81 us at 16k tokens, d 128: one place for both row splits)."""
        cpr = self.head_dim // 4  # 16-byte fp32 chunks per row
        zeros = cute.make_rmem_tensor((4,), Float32)
        zeros.fill(0.0)
        for k in cutlass.range_constexpr(cpr):  # PREPOST_ROWS * cpr chunks, PREPOST_ROWS threads
            j = k * PREPOST_ROWS + tidx
            r = j // cpr
            srow = pad + m_block * PREPOST_ROWS + r
            cute.autovec_copy(zeros, cute.local_tile(mdQacc[srow, None, head, batch], (4,), (j - r * cpr,)))

    @cute.jit
    def zero_semaphores(self, mSem: cute.Tensor | None, m_block: Int32, head: Int32, batch: Int32, pad: Int32, tidx: Int32):
        """Deterministic dQ: the main kernel's turn counters of the block's rows start at 0 (first threads); dq_first_store:
        its first-store flags (the same layout)."""
        if const_expr(mSem is not None):
            if tidx < PREPOST_ROWS // SEM_ROWS:
                mSem[(pad + m_block * PREPOST_ROWS) // SEM_ROWS + tidx, head, batch] = Int32(0)

    @cute.jit
    def row_dot_lse(
        self,
        mO: cute.Tensor,
        mdO: cute.Tensor,
        mLSE: cute.Tensor,
        local: Int32,
        row: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        first,
        step: cutlass.Constexpr[int],
    ):
        """(this thread's part of dO . O, lse_log2) of token ``row``: 16-byte chunks ``first``, ``first + step``, ...
        of the head dim (``first`` an int or the thread's lane in its row group); (0, +inf) for rows past
        ``seqlen_q`` (``local``: the row in its sequence) and for a fully masked row's LSE (-inf)."""
        vec = 128 // self.dtype.width
        dot = Float32(0.0)
        lse2 = Float32.inf
        if local < seqlen_q:
            gO = mO[row, None, head, batch]
            gdO = mdO[row, None, head, batch]
            for i in cutlass.range_constexpr(self.head_dim_v // vec // step):
                rO = cute.make_rmem_tensor((vec,), self.dtype)
                rdO = cute.make_rmem_tensor((vec,), self.dtype)
                cute.autovec_copy(cute.local_tile(gO, (vec,), (i * step + first,)), rO)
                cute.autovec_copy(cute.local_tile(gdO, (vec,), (i * step + first,)), rdO)
                dot = dot + chunk_dot(rO, rdO)
            lse2 = self.lse_log2(Float32(mLSE[row, head, batch]))
        return dot, lse2

    @cute.jit
    def load_passes(
        self, mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, first_local: Int32, offset: Int32, head: Int32, batch: Int32, seqlen_q: Int32, sub: Int32
    ):
        """prepost_mlp: every O / dO chunk and LSE word of the thread's ``ROW_THREADS`` passes (pass ``p``: row
        ``first_local + p * 32 / ROW_THREADS``, chunks ``sub``, ``sub + ROW_THREADS``, ...) in registers, loaded before
        anything is stored (no load waits behind a pass's stores); a row past ``seqlen_q`` reads the sequence's last
        row (``pass_dot_lse`` discards it), so the loads need no branch. Returns (O chunks, dO chunks, LSE words),
        indexed (element, chunk, pass) and (pass,)."""
        vec = 128 // self.dtype.width
        chunks = self.head_dim_v // vec // ROW_THREADS
        rO = cute.make_rmem_tensor((vec, chunks, ROW_THREADS), self.dtype)
        rdO = cute.make_rmem_tensor((vec, chunks, ROW_THREADS), self.dtype)
        rLSE = cute.make_rmem_tensor((ROW_THREADS,), Float32)
        for p in cutlass.range_constexpr(ROW_THREADS):
            row = offset + cutlass.min(first_local + p * (32 // ROW_THREADS), seqlen_q - 1)
            gO = mO[row, None, head, batch]
            gdO = mdO[row, None, head, batch]
            for i in cutlass.range_constexpr(chunks):
                cute.autovec_copy(cute.local_tile(gO, (vec,), (i * ROW_THREADS + sub,)), rO[None, i, p])
                cute.autovec_copy(cute.local_tile(gdO, (vec,), (i * ROW_THREADS + sub,)), rdO[None, i, p])
            rLSE[p] = Float32(mLSE[row, head, batch])
        return rO, rdO, rLSE

    @cute.jit
    def pass_dot_lse(self, loaded, p: cutlass.Constexpr[int], local: Int32, seqlen_q: Int32):
        """prepost_mlp: ``row_dot_lse``'s (part of dO . O, lse_log2) from pass ``p`` of ``load_passes``."""
        rO, rdO, rLSE = loaded
        dot = Float32(0.0)
        for i in cutlass.range_constexpr(cute.size(rO, mode=[1])):
            dot = dot + chunk_dot(rO[None, i, p], rdO[None, i, p])
        lse2 = self.lse_log2(rLSE[p])
        if local >= seqlen_q:
            dot = Float32(0.0)
            lse2 = Float32.inf
        return dot, lse2

    @cute.jit
    def lse_log2(self, lse: Float32) -> Float32:
        """The saved LSE in the scaled log2 domain; +inf for a fully masked row (LSE = -inf), so its P is 0."""
        lse2 = lse
        if const_expr(not self.key.lse_log2):
            lse2 = lse * LOG2_E
        if lse == -Float32.inf:
            lse2 = Float32.inf
        return lse2


class SdpaBwdPostprocessSm90:
    """dQ = scale * dq_accum, converted to the output dtype and written through dQ's strides."""

    def __init__(self, key: SdpaBwdKey):
        self.key = key
        self.dtype = DTYPES[key.dtype]
        self.head_dim = key.head_dim
        # dq_bulk: the main kernel's plan, whose dQ MMA and fragment copy define the accumulator's order
        self.main_plan = None
        if key.dq_bulk:  # split_d / tile_n96: their dQ MMA's fragment order, the same as the parent's
            self.main_plan = main_kernel_class(key)(key)
        if self.main_plan is not None and (self.main_plan.threads_per_wg != PREPOST_ROWS or PREPOST_ROWS % DQ_BULK_ROWS):
            # rows_fragment: thread t of a postprocess CTA plays thread t of each consumer warpgroup
            raise NotImplementedError(f"dq_bulk: the postprocess needs {PREPOST_ROWS} = warpgroup threads, a multiple of {DQ_BULK_ROWS} rows")

    @cute.jit
    def __call__(
        self,
        dqacc_ptr: cute.Pointer,
        dq_ptr: cute.Pointer,
        dsink_part_ptr: cute.Pointer | None,
        dsinks_ptr: cute.Pointer | None,
        flags_ptr: cute.Pointer | None,  # dq_first_store: the main kernel's first-store flags (0: no key block reached the block)
        cu_q_ptr: cute.Pointer | None,
        batch: Int32,
        heads: Int32,
        seqlen_q: Int32,  # S_q (dense) or T_q (varlen)
        max_seqlen_q: Int32,  # grid extent along queries (= S_q for dense)
        seqlen_pad: Int32,
        dq_strides: tuple[Int64, Int64, Int64],
        scale: Float32,
        stream: cuda.CUstream,
    ):
        div = 128 // self.dtype.width
        dqs = tuple(cute.assume(x, divby=div) for x in dq_strides)
        D = self.head_dim
        sp = cute.assume(seqlen_pad, divby=PREPOST_ROWS)
        bt = batch if const_expr(not self.key.varlen) else Int32(1)
        mdQacc = cute.make_tensor(dqacc_ptr, cute.make_layout((sp, D, heads, bt), stride=(D, 1, sp * D, sp * D * heads)))
        mdQ = cute.make_tensor(dq_ptr, cute.make_layout((seqlen_q, D, heads, bt), stride=(dqs[2], 1, dqs[1], dqs[0])))
        mPart, mdSinks = None, None
        if const_expr(self.key.has_sinks):
            nw = sp // 32
            mPart = cute.make_tensor(dsink_part_ptr, cute.make_layout((nw, heads, bt), stride=(1, nw, nw * heads)))
            mdSinks = cute.make_tensor(dsinks_ptr, cute.make_layout((heads,)))
        mCuQ = None
        if const_expr(self.key.varlen):
            mCuQ = cute.make_tensor(cu_q_ptr, cute.make_layout((batch + 1,)))
        mFlags = None
        if const_expr(self.key.dq_first_store):
            mFlags = flags_tensor(flags_ptr, sp, heads, bt)
        rows = self.cta_rows()
        grid = ((max_seqlen_q + rows - 1) // rows, heads, batch)
        smem_bytes = 0
        if const_expr(self.main_plan is not None):  # dq_bulk: the staging tile (stage_layout)
            smem_bytes = cute.cosize(stage_layout(rows, D)) * self.dtype.width // 8 + 16
        self.kernel(mdQacc, mdQ, mPart, mdSinks, mFlags, mCuQ, batch, seqlen_q, scale).launch(
            grid=grid, block=[PREPOST_ROWS, 1, 1], smem=smem_bytes, stream=stream, use_pdl=self.key.pdl
        )

    def cta_rows(self) -> int:
        """Query rows of one CTA (dq_bulk: the staging tile's height): 80 with m80 bulk (one block), 64 with dq_bulk +
        prepost_mlp (one fragment block), else PREPOST_ROWS (one a thread, or ROW_THREADS threads a row)."""
        if m80_bulk(self.key):
            return M80_BULK_ROWS
        return DQ_BULK_ROWS if self.key.dq_bulk and self.key.prepost_mlp else PREPOST_ROWS

    @cute.kernel
    def kernel(
        self,
        mdQacc: cute.Tensor,
        mdQ: cute.Tensor,
        mPart: cute.Tensor | None,
        mdSinks: cute.Tensor | None,
        mFlags: cute.Tensor | None,
        mCuQ: cute.Tensor | None,
        num_batch: Int32,
        seqlen_q: Int32,
        scale: Float32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head, batch = cute.arch.block_idx()
        if const_expr(self.key.pdl):
            cute.arch.griddepcontrol_wait()  # pdl: the dQ accumulator and the sink partials (launched before the main kernel ends)
        if const_expr(mPart is not None):
            # dsinks[h]: warp 0 of the CTA (m_block 0, batch 0) of each head sums the preprocess's partials (fixed order).
            if m_block == 0 and batch == 0 and tidx < 32:
                acc = Float32(0.0)
                if const_expr(mCuQ is None):
                    nw = cute.size(mPart, mode=[0])
                    for b in cutlass.range(num_batch, unroll=1):
                        for j in cutlass.range((nw + 31 - tidx) // 32, unroll=1):
                            acc = acc + mPart[tidx + 32 * j, head, b]
                else:
                    for b in cutlass.range(num_batch, unroll=1):
                        off = mCuQ[b]
                        nw = (mCuQ[b + 1] - off + PREPOST_ROWS - 1) // PREPOST_ROWS * (PREPOST_ROWS // 32)
                        first = (off + b * PREPOST_ROWS) // PREPOST_ROWS * (PREPOST_ROWS // 32)
                        for j in cutlass.range((nw + 31 - tidx) // 32, unroll=1):
                            acc = acc + mPart[first + tidx + 32 * j, head, 0]
                acc = cute.arch.warp_reduction_sum(acc)
                if tidx == 0:
                    mdSinks[head] = acc
        if const_expr(mCuQ is None):
            self.rows(mdQacc, mdQ, m_block, head, batch, seqlen_q, Int32(0), Int32(0), scale, mFlags)
        else:
            offset, seqlen, pad = varlen_rows(mCuQ, batch)
            if m_block * self.cta_rows() < seqlen:
                self.rows(mdQacc, mdQ, m_block, head, Int32(0), seqlen, offset, pad, scale, mFlags)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def rows(
        self,
        mdQacc: cute.Tensor,
        mdQ: cute.Tensor,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        offset: Int32,
        pad: Int32,
        scale: Float32,
        mFlags: cute.Tensor | None = None,
    ):
        """The block's rows: scratch row ``pad + i`` becomes token ``offset + i`` of dQ. One thread per row (16-byte
        stores); with ``prepost_vec`` ``ROW_THREADS`` adjacent threads per row (16-byte fp32 loads, 8-byte stores of 4
        converted elements)."""
        tidx, _, _ = cute.arch.thread_idx()
        sStage = None
        if const_expr(self.main_plan is not None):  # dq_bulk: fragment -> staging tile -> coalesced rows
            smem = cutlass.utils.SmemAllocator()
            sStage = smem.allocate_tensor(self.dtype, stage_layout(self.cta_rows(), self.head_dim), byte_alignment=16)
        if const_expr(m80_bulk(self.key)):
            self.rows_fragment_m80(mdQacc, mdQ, sStage, m_block, head, batch, seqlen_q, scale, tidx, mFlags)
        elif const_expr(self.key.dq_bulk):
            self.rows_fragment(mdQacc, mdQ, sStage, m_block, head, batch, seqlen_q, offset, pad, scale, tidx, mFlags)
        elif const_expr(not self.key.prepost_vec):
            local = m_block * PREPOST_ROWS + tidx
            self.scale_row(mdQacc, mdQ, local, head, batch, seqlen_q, offset, pad, scale, 128 // self.dtype.width, 0, 1)
        else:
            warp_i, lane = tidx // 32, tidx % 32
            sub = lane % ROW_THREADS
            for p in cutlass.range_constexpr(32 * ROW_THREADS // 32):
                local = m_block * PREPOST_ROWS + warp_i * 32 + p * (32 // ROW_THREADS) + lane // ROW_THREADS
                self.scale_row(mdQacc, mdQ, local, head, batch, seqlen_q, offset, pad, scale, 4, sub, ROW_THREADS)

    @cute.jit
    def rows_fragment(
        self,
        mdQacc: cute.Tensor,
        mdQ: cute.Tensor,
        sStage: cute.Tensor,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        offset: Int32,
        pad: Int32,
        scale: Float32,
        tidx: Int32,
        mFlags: cute.Tensor | None = None,
    ):
        """dq_bulk: the CTA's ``cta_rows()`` rows are fragment-ordered blocks of 64; thread ``tidx`` plays
        consumer thread ``tidx`` of each consumer warpgroup of the main kernel: it loads that thread's 16-byte groups
        (the main kernel's fragment copy, coalesced) and stores its accumulator pairs (adjacent columns of one row)
        scaled and converted at their (row, column) from the main kernel's dQ MMA partition into the staging tile
        ``sStage``; then ``store_rows`` (nothing past ``seqlen_q``). dq_first_store (``mFlags``): a block whose flag is 0
        (no key block reached it: its accumulator was never written) is stored as 0."""
        D = self.head_dim
        plan = self.main_plan
        nwg = plan.num_consumer_wg
        tiled_mma_dQ = plan._dq_order_mma()
        tiled_copy = plan._dq_bulk_copy()
        gAcc_head = mdQacc[None, None, head, batch]
        gdQ_head = mdQ[None, None, head, batch]
        if const_expr(self.key.varlen):
            gAcc_head = cute.domain_offset((pad, 0), gAcc_head)
            gdQ_head = cute.domain_offset((offset, 0), gdQ_head)
        blocks = self.cta_rows() // DQ_BULK_ROWS
        for c in cutlass.range_constexpr(blocks):
            blk = m_block * blocks + c
            gAccBlk = cute.local_tile(gAcc_head, (DQ_BULK_ROWS, D), (blk, 0))
            chunk = cute.make_tensor(gAccBlk.iterator, cute.make_layout((DQ_BULK_ROWS * D // nwg, nwg)))
            sBlk = cute.local_tile(sStage, (DQ_BULK_ROWS, D), (c, 0))
            reached = None
            if const_expr(mFlags is not None):  # the main kernel's flag of the tile_m-row block holding this 64-row block
                reached = mFlags[dq_flag_index(pad + blk * DQ_BULK_ROWS // plan.tile_m * plan.tile_m), head, batch] != 0
            for w in cutlass.range_constexpr(nwg):
                vt = w * plan.threads_per_wg + tidx
                tAg = tiled_copy.get_slice(vt).partition_S(chunk)
                rAcc = cute.make_rmem_tensor_like(tAg, Float32)
                cute.autovec_copy(tAg, rAcc)
                if const_expr(reached is not None):
                    if not reached:
                        rAcc.fill(0.0)
                rFlat = cute.make_tensor(rAcc.iterator, cute.make_layout(cute.size(rAcc)))
                tCs = tiled_mma_dQ.get_slice(vt).partition_C(sBlk)
                pair = cute.make_rmem_tensor((2,), Float32)
                for i in cutlass.range_constexpr(cute.size(rFlat) // 2):
                    # elements 2i and 2i + 1 are adjacent columns of one row (the accumulator's layout)
                    pair[0] = rFlat[2 * i] * scale
                    pair[1] = rFlat[2 * i + 1] * scale
                    dst = cute.make_tensor(tCs.iterator + tCs.layout(2 * i), cute.make_layout(2))
                    dst.store(pair.load().to(self.dtype))
        self.store_rows(sStage, gdQ_head, m_block * self.cta_rows(), seqlen_q, tidx)

    @cute.jit
    def rows_fragment_m80(
        self,
        mdQacc: cute.Tensor,
        mdQ: cute.Tensor,
        sStage: cute.Tensor,
        m_block: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        scale: Float32,
        tidx: Int32,
        mFlags: cute.Tensor | None = None,
    ):
        """m80 + dq_bulk (dense): 80-row block ``m_block``; thread ``tidx`` plays consumer thread ``tidx`` of each
        consumer warpgroup: loads that thread's ten 16-byte groups of dQ^T (the main kernel's fragment copy, coalesced)
        and stores each element scaled and converted at its (query, head dim) from the main kernel's dQ^T MMA partition
        into the staging tile ``sStage``; then ``store_rows`` (nothing past ``seqlen_q``). dq_first_store (``mFlags``): 0
        where the block's flag is 0."""
        D, R = self.head_dim, M80_BULK_ROWS
        plan = self.main_plan
        nwg = plan.num_consumer_wg
        tiled_mma_dQ = plan._dq_order_mma()  # dQ^T = K^T dS^T: (head dim, queries), the head dim split over the warpgroups
        tiled_copy = plan._dq_bulk_copy()
        gAccBlk = cute.local_tile(mdQacc[None, None, head, batch], (R, D), (m_block, 0))
        chunk = cute.make_tensor(gAccBlk.iterator, cute.make_layout((R * D // nwg, nwg)))
        sStage_t = cute.make_tensor(sStage.iterator, cute.select(sStage.layout, mode=[1, 0]))  # (head dim, queries)
        reached = None
        if const_expr(mFlags is not None):
            reached = mFlags[dq_flag_index(m_block * R), head, batch] != 0
        for w in cutlass.range_constexpr(nwg):
            vt = w * plan.threads_per_wg + tidx
            tAg = tiled_copy.get_slice(vt).partition_S(chunk)
            rAcc = cute.make_rmem_tensor_like(tAg, Float32)
            cute.autovec_copy(tAg, rAcc)
            if const_expr(reached is not None):
                if not reached:
                    rAcc.fill(0.0)
            rFlat = cute.make_tensor(rAcc.iterator, cute.make_layout(cute.size(rAcc)))
            tCs = tiled_mma_dQ.get_slice(vt).partition_C(sStage_t)
            one = cute.make_rmem_tensor((1,), Float32)
            for i in cutlass.range_constexpr(cute.size(rFlat)):
                one[0] = rFlat[i] * scale
                dst = cute.make_tensor(tCs.iterator + tCs.layout(i), cute.make_layout(1))
                dst.store(one.load().to(self.dtype))
        self.store_rows(sStage, mdQ[None, None, head, batch], m_block * R, seqlen_q, tidx)

    @cute.jit
    def store_rows(self, sStage: cute.Tensor, gdQ: cute.Tensor, row0: Int32, seqlen_q: Int32, tidx: Int32):
        """dq_bulk: after a CTA barrier (every thread's fragment is in ``sStage``), rows ``row0 + r`` of ``gdQ`` (a head's
        (queries, head dim)) = staging row ``r``, for ``row0 + r < seqlen_q``: thread ``tidx`` copies the 16-byte chunks
        ``tidx, tidx + PREPOST_ROWS, ...`` of the tile in row-major chunk order (8 adjacent threads: 128 contiguous
        bytes of one row)."""
        rows, D = cute.size(sStage, mode=[0]), self.head_dim
        vec = 128 // self.dtype.width
        chunks = D // vec
        assert rows * chunks % PREPOST_ROWS == 0, (rows, D)
        cute.arch.barrier()
        for it in cutlass.range_constexpr(rows * chunks // PREPOST_ROWS):
            idx = it * PREPOST_ROWS + tidx
            r = idx // chunks
            c = idx - r * chunks
            if row0 + r < seqlen_q:
                cute.autovec_copy(cute.local_tile(sStage[r, None], (vec,), (c,)), cute.local_tile(gdQ[row0 + r, None], (vec,), (c,)))

    @cute.jit
    def scale_row(
        self,
        mdQacc: cute.Tensor,
        mdQ: cute.Tensor,
        local: Int32,
        head: Int32,
        batch: Int32,
        seqlen_q: Int32,
        offset: Int32,
        pad: Int32,
        scale: Float32,
        width: cutlass.Constexpr[int],
        first,
        step: cutlass.Constexpr[int],
    ):
        """dQ row ``offset + local`` = ``scale`` * scratch row ``pad + local`` (nothing past ``seqlen_q``), over the
        ``width``-element chunks ``first``, ``first + step``, ... of the head dim."""
        if local < seqlen_q:
            gAcc = mdQacc[pad + local, None, head, batch]
            gdQ = mdQ[offset + local, None, head, batch]
            for i in cutlass.range_constexpr(self.head_dim // width // step):
                rAcc = cute.make_rmem_tensor((width,), Float32)
                cute.autovec_copy(cute.local_tile(gAcc, (width,), (i * step + first,)), rAcc)
                rdQ = cute.make_rmem_tensor((width,), self.dtype)
                rdQ.store((rAcc.load() * scale).to(self.dtype))
                cute.autovec_copy(rdQ, cute.local_tile(gdQ, (width,), (i * step + first,)))


@cute.jit
def chunk_dot(a: cute.Tensor, b: cute.Tensor) -> Float32:
    """sum_k a[k] * b[k] of two register chunks, in fp32."""
    return (a.load().to(Float32) * b.load().to(Float32)).reduce(cute.ReductionOp.ADD, Float32(0.0), 0)


@cute.jit
def varlen_rows(mCuQ: cute.Tensor, batch: Int32):
    """THD varlen: (first token, length, first scratch row) of sequence ``batch``; its scratch rows start at a
    PREPOST_ROWS-aligned offset, so the padded rows of one sequence never overlap the next."""
    offset = mCuQ[batch]
    seqlen = mCuQ[batch + 1] - offset
    pad = (offset + batch * PREPOST_ROWS) // PREPOST_ROWS * PREPOST_ROWS
    return offset, seqlen, pad


def compile_sdpa_bwd_pre(key: SdpaBwdKey, tvm_ffi: bool = False):
    """cute.compile the preprocess for ``key`` (no GPU needed); ``tvm_ffi``: the tvm-ffi entry (see
    :func:`cudnn.sdpa.bwd.kernel_sm90.compile_sdpa_bwd_main`)."""
    dtype = DTYPES[key.dtype]
    zero = Int32(0)
    strides = (Int64(0), Int64(0), Int64(0))
    return compile_entry(
        tvm_ffi,
        SdpaBwdPreprocessSm90(key),
        _ptr(dtype), _ptr(dtype), _ptr(Float32, 4), _ptr(Float32), _ptr(Float32), _ptr(Float32),
        _ptr(Float32, 4) if key.has_sinks else None, _ptr(Float32) if key.has_sinks else None,
        _ptr(Int32) if key.deterministic or key.persistent or key.dq_first_store else None, _ptr(Int32, 4) if key.varlen else None,
        zero, zero, zero, zero, Int32(PREPOST_ROWS), strides, strides, strides, cuda.CUstream(0),
    )  # fmt: skip


def compile_sdpa_bwd_post(key: SdpaBwdKey, tvm_ffi: bool = False):
    """cute.compile the postprocess for ``key`` (no GPU needed); ``tvm_ffi``: the tvm-ffi entry."""
    dtype = DTYPES[key.dtype]
    zero = Int32(0)
    strides = (Int64(0), Int64(0), Int64(0))
    return compile_entry(
        tvm_ffi, SdpaBwdPostprocessSm90(key), _ptr(Float32), _ptr(dtype),
        _ptr(Float32) if key.has_sinks else None, _ptr(Float32, 4) if key.has_sinks else None,
        _ptr(Int32) if key.dq_first_store else None, _ptr(Int32, 4) if key.varlen else None,
        zero, zero, zero, zero, Int32(PREPOST_ROWS), strides, Float32(1.0), cuda.CUstream(0),
    )  # fmt: skip
