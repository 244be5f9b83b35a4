"""causal_conv1d forward, bulk-copy variant (``Conv1dFwdKey.bulk_stages`` > 0, opt-in): x staged through shared memory.

The run grid of :mod:`.fwd_kernel` (``kernel_runs``: CTA row ``j`` walks the ``j``-th of ``n_runs`` contiguous token
runs of one 128-vector channel block) with the loads of x moved off the registers: one producer warp (warp 4, one lane)
streams the run's token rows into a ring of ``bulk_stages`` shared-memory stages of ``group`` tokens each, one
``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`` per token row (the CTA's 2 KB of the row, fewer in
a partial channel block), completing on the stage's transaction mbarrier ("full"). The 128 compute threads wait on it
(parity = the stage's fill count), read their 16-byte channel slices with ``ld.shared.v4``, arrive on the stage's
"empty" mbarrier (128 arrivals free the stage for the producer's next fill), and run exactly the default kernel's
per-token math (:func:`.fwd_kernel.token_output` / ``token_output_steady`` / ``group_output``, the W - 1 halo in
registers, 16-byte ``st.global.v4`` stores of y): bitwise the default's outputs.

Why: the register kernel keeps at most 2 x ``group`` 16-byte loads per thread in flight (~32 KB per SM at 4 CTAs);
memory latency x bandwidth per SM asks for ~36 KB. Here the bytes in flight per CTA are the ring, ``bulk_stages x group x
2 KB`` (64 KB at 4 x 8), without registers to hold them; the CTAs per SM follow from the shared memory the ring takes
(``Conv1dFwdKey.min_ctas_per_sm``, set by the adapter).

Measured (session 10, H200, kernel-only): 8 stages x 4 rows ties the register kernel (3387-3420 GB/s at 64M elements,
3609 at 134M); fewer, larger stages are slower (4 x 8 ~2300, 2 x 8 ~1030). So bytes in flight are not the forward's limit.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from .._device.channels import channel_vectors, load_taps
from .._device.sequences import locate_sequence
from .fwd_kernel import THREADS, CausalConv1dFwd, Conv1dFwdKey, group_output, token_output_steady, vector_copy, vector_store

#: One producer warp after the 128 compute threads.
PRODUCER_THREADS = 32
#: Bytes of one staged token row: 128 threads x 16 bytes, whatever the dtype.
ROW_BYTES = THREADS * 16


def bulk_smem_bytes(stages: int, group: int) -> int:
    """Shared memory of one CTA of the bulk variant: the ring plus its 2 x stages mbarriers (8 bytes each)."""
    return stages * group * ROW_BYTES + 2 * stages * 8 + 128


@dsl_user_op
def bulk_copy_g2s(smem_dst: cute.Pointer, gmem_src: cute.Pointer, num_bytes: Int32, mbar: cute.Pointer, *, loc=None, ip=None):
    """``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], bytes, [mbar]``: a 1D bulk copy
    of ``num_bytes`` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory whose completion
    counts ``num_bytes`` of transactions on the mbarrier ``mbar`` (no 1D bulk-copy wrapper on the DSL 4.8.0 floor, hence
    one line of PTX, as :func:`.fwd_kernel.prefetch_l2_bulk`)."""
    llvm.inline_asm(
        None,
        [
            smem_dst.toint(loc=loc, ip=ip).ir_value(),
            gmem_src.toint(loc=loc, ip=ip).ir_value(),
            Int32(num_bytes).ir_value(loc=loc, ip=ip),
            mbar.toint(loc=loc, ip=ip).ir_value(),
        ],
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
        "r,l,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@cute.jit
def spin_wait(mbar: cute.Pointer, phase: Int32):
    """Wait for phase ``phase`` of the mbarrier ``mbar`` by spinning on ``mbarrier.try_wait.parity`` without a
    suspend-time hint. The DSL's ``cute.arch.mbarrier_wait`` emits the hinted form (10 ms), which ptxas lowers to a
    ``NANOSLEEP`` loop: measured on the H200 it left this ring's stages idle (2 stages x 8 rows: ~1 TB/s). The pattern
    of cudnn.sdpa._device.pipeline.mbarrier_spin_wait."""
    done = cute.arch.mbarrier_try_wait(mbar, phase)
    while not done:
        done = cute.arch.mbarrier_try_wait(mbar, phase)


class CausalConv1dFwdBulk(CausalConv1dFwd):
    """:class:`.fwd_kernel.CausalConv1dFwd` with ``kernel_bulk`` as its token kernel (the final-states kernel is shared)."""

    def __init__(self, key: Conv1dFwdKey):
        super().__init__(key)
        assert key.bulk_stages >= 2 and key.grid_ctas > 0 and key.l2_prefetch == 0, key
        self.stages = key.bulk_stages

    @cute.jit
    def __call__(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        final_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        fin_sn: Int32,
        fin_sd: Int32,
        fin_sj: Int32,
        stream: cuda.CUstream,
    ):
        dv_total = D // self.vec
        grid_x = (dv_total + THREADS - 1) // THREADS
        n_runs = cutlass.max(cutlass.min(self.key.grid_ctas // grid_x, (T + self.bt - 1) // self.bt), 1)
        self.kernel_bulk(x_ptr, w_ptr, b_ptr, y_ptr, cu_ptr, init_ptr, T, D, sx, sy, seq_arg, n_seqs, init_sn, init_sd, init_sj, n_runs).launch(
            grid=[grid_x, n_runs, 1],
            block=[THREADS + PRODUCER_THREADS, 1, 1],
            smem=bulk_smem_bytes(self.stages, self.group),
            stream=stream,
            min_blocks_per_mp=self.key.min_ctas_per_sm,
            preferred_smem_carveout=100,  # the ring wants the SM's shared memory (percent of the unified L1 / smem)
        )
        if const_expr(self.key.has_final):
            self.final_kernel(x_ptr, cu_ptr, init_ptr, final_ptr, T, D, sx, seq_arg, n_seqs, init_sn, init_sd, init_sj, fin_sn, fin_sd, fin_sj).launch(
                grid=[grid_x, n_seqs + 1, 1], block=[THREADS, 1, 1], stream=stream
            )  # +1: valid for N == 0, guarded

    @cute.kernel
    def kernel_bulk(
        self,
        x_ptr: cute.Pointer,
        w_ptr: cute.Pointer,
        b_ptr: cute.Pointer | None,
        y_ptr: cute.Pointer,
        cu_ptr: cute.Pointer | None,
        init_ptr: cute.Pointer | None,
        T: Int32,
        D: Int32,
        sx: Int32,
        sy: Int32,
        seq_arg: Int32,
        n_seqs: Int32,
        init_sn: Int32,
        init_sd: Int32,
        init_sj: Int32,
        n_runs: Int32,
    ):
        """The run grid's CTA with x staged through a ``bulk_stages``-deep shared-memory ring (module docstring): group
        ``g`` (tokens ``t0 + g * group ...`` of the run) lives in stage ``g % bulk_stages`` during its fill number
        ``g // bulk_stages``; the producer waits for the stage's previous fill to be read (empty mbarrier, 128 arrivals),
        the compute threads for the fill's bytes (full mbarrier, transaction count)."""
        W = self.W
        VEC = self.vec
        U = self.group
        S = self.stages
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, _ = cute.arch.block_idx()
        base = T // n_runs
        rem = T - base * n_runs
        t0 = bidy * base + cutlass.min(bidy, rem)
        run = base
        if bidy < rem:
            run = run + 1
        cdv = bidx * THREADS  # the CTA's first channel vector
        n_groups = (run + U - 1) // U

        smem = cutlass.utils.SmemAllocator()
        # ring[i, k, u, s]: element i of channel vector cdv + k of token t0 + (fill * S + s) * U + u
        ring = smem.allocate_tensor(self.dtype, cute.make_layout((VEC, THREADS, U, S)), byte_alignment=128)
        mbar = smem.allocate_array(Int64, num_elems=2 * S)  # [0, S): full (bytes landed); [S, 2S): empty (stage read)
        if tidx == 0:
            for s in cutlass.range_constexpr(S):
                cute.arch.mbarrier_init(mbar + s, 1)
                cute.arch.mbarrier_init(mbar + S + s, THREADS)
        cute.arch.mbarrier_init_fence()
        cute.arch.barrier()

        if run > 0:
            if tidx >= THREADS:
                # producer: one lane issues every token row's bulk copy, a stage ahead of the readers by up to S fills
                if tidx == THREADS:
                    row_bytes = cutlass.min(D // VEC - cdv, THREADS) * 16
                    gX = channel_vectors(x_ptr, T, D, sx, VEC)
                    for g in cutlass.range(n_groups, unroll=1):
                        s = g % S
                        if g >= S:
                            spin_wait(mbar + S + s, (g // S - 1) % 2)
                        cnt = cutlass.min(run - g * U, U)
                        cute.arch.mbarrier_arrive_and_expect_tx(mbar + s, cnt * row_bytes)
                        for u in cutlass.range_constexpr(U):
                            if u < cnt:
                                bulk_copy_g2s(ring[None, 0, u, s].iterator, gX[(None, None), (t0 + g * U + u, cdv)].iterator, row_bytes, mbar + s)
            else:
                dv = cdv + tidx
                valid = dv < D // VEC
                d0 = dv * VEC
                gX = channel_vectors(x_ptr, T, D, sx, VEC)
                gY = channel_vectors(y_ptr, T, D, sy, VEC)
                g2r = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), self.dtype, num_bits_per_copy=128)  # ld.global.v4
                r2g = cute.make_copy_atom(cute.nvgpu.CopyR2GOp(), self.dtype, num_bits_per_copy=128)  # st.global.v4
                s2r = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)  # ld.shared.v4

                # the W - 1 halo tokens before the run (raw; zero before token 0), the taps, the sequence of t0
                halo = cute.make_rmem_tensor(cute.make_layout((VEC, W - 1, 1)), self.dtype)
                for k in cutlass.range_constexpr(W - 1):
                    for i in cutlass.range_constexpr(VEC):
                        halo[i, k, 0] = self.dtype(0.0)
                if valid:
                    for k in cutlass.range_constexpr(W - 1):
                        if t0 - (W - 1) + k >= 0:
                            vector_copy(g2r, gX, halo, t0 - (W - 1) + k, dv, k, 0, VEC)
                d_taps = cutlass.min(d0, D - VEC)  # an idle thread of a partial block reads valid taps, unused
                rW, rB = load_taps(w_ptr, b_ptr, D, d_taps, W, VEC)
                n, bos, nxt = locate_sequence(cu_ptr, t0, n_seqs, seq_arg, self.key.varlen)

                # win[k] holds x[t - (W - 1) + k] while token t is processed; the prologue fills x[t0 - W + k], k >= 1.
                win = cute.make_rmem_tensor((W, VEC), cutlass.Float32)
                for i in cutlass.range_constexpr(VEC):
                    win[0, i] = cutlass.Float32(0.0)
                for k in cutlass.range_constexpr(W - 1):
                    for i in cutlass.range_constexpr(VEC):
                        win[k + 1, i] = halo[i, k, 0].to(cutlass.Float32)

                xb = cute.make_rmem_tensor(cute.make_layout((VEC, U, 1)), self.dtype)
                yg = cute.make_rmem_tensor(cute.make_layout((VEC, U)), self.dtype)
                acc = cute.make_rmem_tensor((VEC,), cutlass.Float32)
                for g in cutlass.range(n_groups, unroll=1):
                    s = g % S
                    rg = g * U
                    spin_wait(mbar + s, (g // S) % 2)
                    for u in cutlass.range_constexpr(U):
                        src = cute.make_tensor(ring[None, tidx, u, s].iterator, cute.make_layout((VEC,)))
                        dst = cute.make_tensor(xb[None, u, 0].iterator, cute.make_layout((VEC,)))
                        cute.copy(s2r, src, dst)
                    cute.arch.mbarrier_arrive(mbar + S + s)  # this thread is done with the stage's fill
                    if valid:
                        if const_expr(self.key.steady):
                            tg = t0 + rg
                            if rg + U <= run and tg + U <= nxt and tg - bos >= W - 1:
                                for u in cutlass.range_constexpr(U):
                                    token_output_steady(win, xb[None, u, 0], yg[None, u], acc, rW, rB, W, VEC, self.key.silu)
                                    vector_store(r2g, yg, gY, tg + u, dv, u, VEC)
                            else:
                                n, bos, nxt = group_output(
                                    win, xb, yg, acc, rW, rB, r2g, gY, cu_ptr, init_ptr, t0, rg, run, n, bos, nxt, n_seqs, seq_arg, d0, dv, D,
                                    init_sn, init_sd, init_sj, 0, U, W, VEC, self.key.varlen, self.key.has_init, self.key.silu,
                                )  # fmt: skip
                        else:
                            n, bos, nxt = group_output(
                                win, xb, yg, acc, rW, rB, r2g, gY, cu_ptr, init_ptr, t0, rg, run, n, bos, nxt, n_seqs, seq_arg, d0, dv, D,
                                init_sn, init_sd, init_sj, 0, U, W, VEC, self.key.varlen, self.key.has_init, self.key.silu,
                            )  # fmt: skip

    kernel_bulk.set_name_prefix("cudnn", remove_cutlass_symbol=True)
