"""Kimi Delta Attention forward, chunk-parallel schedule, kernel 1 of 3 (prep): everything of a chunk that does not
depend on the state, for every chunk of every sequence at once. sm_90a, CuTe DSL, WGMMA, 256 threads (two
warpgroups), two CTAs per SM.

The chunked algorithm and its notation are those of ``chunk_fwd_kernel.py`` (the serial schedule): per chunk of
C = 64 tokens with in-chunk cumulative per-channel log decays ``G`` and incoming state ``S0``::

    Tm = (I + A)^-1        Wm = Tm (beta K exp(G))        U = Tm (beta V)        Vn = U - Wm S0^T
    O  = (scale Q exp(G)) S0^T + P Vn        S1 = S0 Diag(exp(G_C)) + Vn^T (K exp(G_C - G))

This kernel computes, per (chunk slot, head), the state-independent operands and writes them to the caller's
workspace (``_device/chunk_parallel.py`` documents the slots and the arrays): ``-Wm`` and ``(K exp(G_C - G))^T``
(bf16), ``U`` (fp32), ``scale Q exp(G)`` and ``P`` (bf16), ``exp(G_C)`` (fp32, by the precise expf). Kernel 2
(``chunk_parallel_state_kernel.py``) runs the recurrence, kernel 3 (``chunk_parallel_out_kernel.py``) the outputs.
It keeps the serial kernel's decay split (reference rows 16 I + 8) and blocked solve, but not its operation order:
per-element decays by ``ex2.approx`` of log2 gates, beta folded into the inverse's columns, another fp32
accumulation order in the solve. Outputs equal the serial schedule's up to rounding, not bit for bit (tests hold
them to the FlashAttention rule against the fp32 recurrence and to twice the serial kernel's error).

Why this shape (it replaced, in session 5, the one-warpgroup kernel that followed the serial kernel step by step
and its two-warpgroup variants: 1220 us, and 727 us with approximate exps, vs 203 us at T = 8k, H = 16, K = 128 on
the H200; ``docs/linear-attention.md``). Those kernels spent
their instructions on per-element scalar work (five decayed copies stored element by element into swizzled shared
memory, two of them transposed; K'_I formation with a branch per element; a SIMT solve by one warpgroup in dependent
shared-memory chains) at 4-8 warps per SM. Here:

1. gates: g [64, K] is read once (one thread per (channel, token range)), prefix-summed in registers (each range
   locally, then the earlier ranges' totals added), and stored as ``G log2(e)`` (every later decay is one
   ``ex2.approx``: no per-exp multiply); the reference rows 16 I + 8 and the last row go to a small table.
2. one pass per thread over (row = tid / 4, four 16-byte chunks of 8 channels): q, k loaded by 16-byte vectors, the
   L2 norm over the row by two shuffles, three exps per element (``exp2(G - G_ref)``, ``exp2(G)``,
   ``exp2(G_C - G)``) shared by q and k, and every bf16 result written 16 bytes at a time (``st.shared.v4``,
   conflict-free: the chunk order alternates parity with the row, against the 128-byte swizzle): Q' and K' (the A
   operands of step 3), K exp(G) (the B operand of W, row-major: no transposed store), ``scale Q exp(G)`` to the
   workspace, and ``(K exp(G_C - G))^T`` to the workspace straight from registers. This thread's G and k stay in
   registers for step 3.
3. per 16-row block I: K'_I = K exp(G_r - G) for the rows that can be nonzero only (rows <= 16 I + 15; the rows
   after were zeroed once in step 2), from registers; warpgroup 0 forms A = K' K'_I^T, warpgroup 1 P = Q' K'_I^T
   (WGMMA). V is then fetched by cp.async into the dead K'_I tile while the solve runs.
4. ``T = (I + A)^-1`` in fp32 by all 256 threads: the four diagonal 16 x 16 blocks by forward substitution with
   the column in registers (64 threads, fully unrolled, A read by broadcast), then the off-diagonal blocks band by
   band, ``T[I, J] = -T[I, I] sum_{K=J}^{I-1} A[I, K] T[K, J]`` (every band's blocks at once: one output element per
   thread and block, six barriers); then ``bf16(T Diag(beta))`` (beta folded into the inverse's columns).
5. WGMMA with MN-major B operands read straight from the row-major tiles: warpgroup 0 ``U = (T Diag(beta)) V``,
   warpgroup 1 ``-Wm = -(T Diag(beta)) (K exp(G))``.

Shared memory (K = 128, about 102 KB): G, later A (fp32, rows 16-byte aligned); Q' | K' | K'_I, later T, the
solve's band scratch, T Diag(beta) and V; K exp(G); small tables. Grid ``[slots, H]`` (slots = ``T // 64 + N``
varlen, ``N ceil(L / 64)`` dense; idle slots exit), 256 threads, two CTAs per SM (``MIN_BLOCKS``: ptxas keeps it at
124 registers, no spill). An fp32 ``g`` is read by 32-bit loads: the adapter binds it 4-byte aligned and ``execute``
checks the address. Runtime extents and strides are kernel arguments (Rule 4).

Step-3 options, ON by default since session 6 (``KdaParallelPrepKey.narrow_ap`` / ``ref_table``; H200, T = 8k,
H = 16: 180.6 us against 202.0 for the session-5 kernel; both passed ``tests/test_kda_prep_opts_gpu.py``). The
session-5 kernel that steps 1-4 above describe (m64n64 A / P, K'_I by one exp per element) stays reachable as
``{"prep": {"narrow_ap": False, "ref_table": False, "tiled_solve": False, "lean_gates": False}}`` (variant ``kp5``) for
the A/B; values differ from it by fp32 / bf16 rounding only:

- ``narrow_ap``: step 3 computes the block's transposes, ``A^T[j, i] = K'_I[j] . K'[i]`` and ``P^T[j, i] = K'_I[j] .
  Q'[i]`` for the 16 rows i of block I, as m64n16 WGMMAs (K'_I the M = 64 A operand, the block's 16 rows of K' / Q' the
  N = 16 B operand, read in place: 2 KB-aligned slices of the swizzled tiles), instead of m64n64 products of which only
  block I's 16 rows were kept: a quarter of step 3's tensor work (64 m64n16k16 instead of 64 m64n64k16 at K = 128), the
  masked epilogue on all four warps of each warpgroup (8 elements each instead of 32 on one warp), and no zeroed K'_I
  rows (the rows past block I reach masked outputs only). P is stored element by element (its transposed accumulator
  has no adjacent columns). About 19 % fewer SASS instructions (5.3K -> 4.3K at K = 128).
- ``ref_table`` (with ``narrow_ap``): every decay of K'_I from one exp per element. The element pass keeps
  ``K exp2(ref_rb - G)`` (fp32, its row block's reference; replacing G and K in registers) and step 3 multiplies it
  by ``exp2(ref_I - ref_rb)`` from a per-chunk table of reference-row ratios ``exp2(ref_a - ref_b)``, b < a
  (``[10, K]`` fp32, 5 KB at K = 128; a = 4 is the last row: ``exp(G_C - G)`` of ``kd`` the same way). The table is
  formed in step 1 from each range's partial sums at the reference rows (the same fp32 values as the reference rows),
  no extra barrier. Exps per element and chunk: 3 + 10 / (256 / K) instead of 3 + 2.5 (K'_I) -- about 40 % fewer
  MUFU operations. A product of two factors underflows where the direct exp would not only when the ratio is below
  2^-126 (flushed) and the row factor above 1: a loss below 2^-126 exp(the decay of the 7 tokens after the reference),
  negligible for ``g >= -5`` (fla's ``safe_gate`` range) and at most about e^-7 at the contract's bound (module
  ``api.py``: 8 tokens sum to more than -80).

Both keep 256 threads, two CTAs per SM, 18 barriers and no spill (ptxas: 128 registers; the kernel sits at the cap,
so register-heavy edits here must recheck frame size 0: ``tests/test_kda_prep_opts_gpu.py -m compile_only``).

Where the time goes (the session-6 first default, ``kp6``: without the solve and gate options below; K = 128, T = 8k,
H = 16: 2048 CTAs, 264 resident (2 per SM, by registers: 256 threads x 128 = the whole register file; smem about 107 KB
each), 7.8 waves, so about 23 us per CTA lifetime for 180 us).
Per CTA, from the sm_90a SASS (DSL 4.8.1 ptxas, static counts weighted by the warps that execute each part): about
24K warp instructions -- step 1 (g loads, prefix sums, sG stores; 20 %, 600 instructions per thread of which about
270 are the 64-bit address / clamp arithmetic of the 32 g loads), step 1b (the ratio table, 11 %), the element pass
(29 %: 3 MUFU, 9 FMUL and 3 bf16 packs per element), step 3 (four K'_I formations + 16 m64n16k16 per warpgroup +
masked epilogues, 16 %), the solve (20 %, 2/3 of it the band products), step 5 (U / W WGMMAs and 64 fragment stores per
thread, 7 %) -- and about 5.5K shared-memory wavefronts plus about 1.8K cycles of WGMMA operand reads, of which the
band solve's scalar LDS (two loads per FMA: A row broadcast, T column) are about half. At 2 CTAs x 24K warp
instructions per SM and wave the issue floor is about 7 us per wave (about 55 us in all) and the shared-memory floor
about 8 us per wave: the measured 23 us is latency (18 CTA barriers with unbalanced phases -- the diagonal solve on 2
of 8 warps, K'_I formation on 2-8 warps, the A / P epilogues on one warpgroup each --, the dependent global loads at the
start: cu_seqlens, then q / k / g) stacked on those two pipes. The memory floor of the prep is 73.8 us.

Solve and gate options, ON by default since session 6 (``KdaParallelPrepKey.tiled_solve`` / ``lean_gates``; H200,
T = 8k, H = 16, per-kernel profiler, ``docs/benchmarks/linear_attention_kda_prep.md``: prep 174.9 us with both against
182.8 for the session-6 first default (steps 1 and 4 above), 178.5 with ``tiled_solve`` alone; the session-5 kernel
205.9). Each leaves every output BITWISE equal to the kernel without it (the same fp32 operations in the same order:
``tests/test_kda_prep_speed_gpu.py`` passed on the H200). The session-6 first default stays reachable as
``{"prep": {"tiled_solve": False, "lean_gates": False}}`` (variant ``kp6``, the A/B baseline):

- ``tiled_solve``: the solve's off-diagonal bands on a 1 x 4 register tile per thread (:func:`solve_inverse_256_tiled`:
  a thread owns one row and four columns of a 16 x 16 block, 64 threads per block, 192 / 128 / 64 threads in bands
  1 / 2 / 3), A, T and Y read by 16-byte vectors: per 16 FMAs 5 shared-memory wavefronts instead of about 20; scalar
  ``ld.shared`` 267 -> 11, band-solve warp instructions about 4.9K -> 3.0K per CTA, wavefronts about 2.7K -> 0.7K.
  Measured: -4.3 us.
- ``lean_gates`` (needs ``tiled_solve``: alone, ptxas spills 8 bytes at the 128-register cap): step 1's g loads from
  one base pointer (``domain_offset``) and a 32-bit token stride, predicated on the row being in the chunk (no clamp to
  the last row, no select): about 3 SASS instructions per load instead of 9, 224 fewer per thread (1.8K warp
  instructions per CTA, 7 %), and the last g load issued about 400 instructions earlier. Measured: -3.6 us more.

Both compile at K = 64 and 128 to frame size 0 with 256 threads, two CTAs per SM, the WGMMAs and 18 barriers of the
kernel without them (``tests/test_kda_prep_speed_gpu.py -m compile_only``; GPU: the same file, bitwise against
``kp6``). Removed after the A/B: ``pack_round`` (q / k rounded to bf16 two at a time by ``cvt.rn.bf16x2.f32``: 183.2
against 182.8 us, no gain).

Staged kd and W (session 8, issue #7; ``KdaParallelPrepKey.staged_kd`` / ``staged_w``, default ON since the session-8
A/B: H200, T = 32k, H = 64: prep 2270.5 vs 2587.8 us; T = 8k, H = 16: 153.8 vs 175.0,
docs/benchmarks/linear_attention_kernels_s8_*.md; variant ``kp7`` turns both off). Nsight Compute of the default at T = 8k, H = 16: global stores use
19.6 of 32 bytes per sector, L1 LSU wavefronts 72 % busy. Two of the scattered store streams go through shared memory:

- ``staged_kd`` (needs ``ref_table``): ``(K exp(G_C - G))^T`` was 8 2-byte global stores per 16-byte chunk, 32 per
  thread (each warp store: 4 channel rows x 16 bytes, half sectors). Now the element pass keeps kd in registers (bf16,
  16 registers), step 3 block 0 (after its first barrier: every read of G is done) stores it, transposed, into G's dead
  tail (after A: bytes 17 KB - 33 KB at K = 128, exactly the 16 KB tile; 8 KB more shared memory at K = 64) with an XOR
  swizzle of the 16-byte token chunk by ``(channel / 16) % 8`` (:func:`kd_chunk_to_stage`: a warp store's four channel
  rows land in four bank groups, conflict-free), and after step 3 every thread copies 16-byte chunks to the workspace
  (:func:`kd_stage_to_workspace`: a warp writes four whole 128-byte channel rows per store; the stores drain during the
  solve). Per thread at K = 128: 32 2-byte global stores -> 32 2-byte shared stores + 4 16-byte loads + 4 16-byte
  global stores. No barrier added. (Computing kd in step 3 from the ``ref_table`` registers instead made ptxas spill 16-24
  bytes at the 128-register cap, as did any variant that took the kd products out of the element pass.)
- ``staged_w`` (needs ``staged_kd``: alone ptxas spills 24 bytes at K = 128): warpgroup 1 stores ``-Wm`` from its
  accumulators as bf16 pairs into the G / A region (free after the solve; :func:`acc_to_stage`, 16-byte chunk XOR row:
  conflict-free), one named barrier of its 128 threads, then 16-byte copies to the workspace (:func:`stage_to_gmem`: 4
  whole 128-byte row segments per warp store): 32 4-byte global stores (half sectors) -> 32 4-byte shared stores + 8
  16-byte loads + 8 16-byte global stores per thread. U keeps its fragment stores (8 bytes per lane, full sectors).

Both are bitwise the default (the same products, rounded once), keep 256 threads, two CTAs per SM, the 18 CTA barriers
(+ warpgroup 1's named barrier) and frame size 0 at K = 64 and 128 (``tests/test_kda_prep_staged_gpu.py -m
compile_only``). Not addressed here: P's 32 2-byte stores, qg's half-sector 16-byte stores (the element order that keeps
the swizzled shared stores conflict-free), the load side (TMA loads, a persistent CTA with a two-deep input ring) and
the barrier stalls.

Backward-only ``bwd_tm`` (session 10, issue #7; ``KdaParallelPrepKey.bwd_tm``, default off: the default kernel's PTX
is byte-identical). The KDA backward's opt-in ``fold_prep_tm`` (``kda/bwd_states_parallel_kernel.py``) runs this kernel
and the state pass as its pass 1a and no output kernel, so ``qg`` is never read there. With ``bwd_tm`` step 2 does not
write ``qg`` and step 4c writes ``bf16(T)`` -- the unit lower ``Tm = (I + A)^-1`` before the beta fold, zero above the
diagonal blocks -- row-major [64, 64] into the first 64 * 64 elements of the slot's ``qg`` tile (16-byte stores from
the same ``sT`` reads as ``T Diag(beta)``; 8 KB written per chunk and head instead of qg's 2 * 64 * K bytes). Every
other output is bitwise the default kernel's (the same instructions). A forward plan must never set it (its output
kernel reads ``qg``).

Tests: ``tests/test_kda_parallel_gpu.py`` (GPU), compile-only ``tests/test_kda_parallel_compile.py -k kda``; the
step-3 options: ``tests/test_kda_prep_opts_gpu.py``; the solve and gate options: ``tests/test_kda_prep_speed_gpu.py``;
the staged stores: ``tests/test_kda_prep_staged_gpu.py``; per-kernel time: ``benchmarks/linear_attention_kernels.py
--family kda --variants parallel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .._device.chunk_parallel import (
    ChunkParallelPrepLaunch,
    acc_to_gmem,
    cp_async_v_row_chunks,
    element_chunk,
    kd_chunk_to_workspace,
    load_qk_row_chunks,
    row_qk_scales,
    slot_chunk,
    solve_diagonal_blocks,
    solve_inverse_256,
    transpose_view,
)
from .._device.delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC, k_major_smem_layout, make_mma_n64
from .._device.delta_rule import smem_ready as _smem_ready
from .._device.delta_rule import wgmma as _wgmma
from .chunk_fwd_kernel import REF_OFFSET
from .chunk_parallel_prep_staged import acc_to_stage, kd_chunk_to_stage, kd_stage_to_workspace, stage_to_gmem


@dataclass(frozen=True)
class KdaParallelPrepKey:
    """Compile key of the prep kernel (Rule 4): the plan-time base fields, then the kernel options (module docstring),
    all on by default since session 6: the step-3 options ``narrow_ap`` / ``ref_table`` and the solve and gate options
    ``lean_gates`` / ``tiled_solve`` (each combination its own artifact; the ones turned off are the A/B baselines)."""

    head_dim: int
    g_dtype: str
    beta_dtype: str
    l2norm: bool
    varlen: bool
    #: default on since session 6 (module docstring, "Step-3 options"): step 3 as ``A^T`` / ``P^T`` m64n16 WGMMAs, a
    #: quarter of the tensor work; ``narrow_ap=False, ref_table=False`` is the session-5 kernel (kept for the A/B)
    narrow_ap: bool = True
    #: default on since session 6, needs ``narrow_ap``: K'_I and ``(K exp(G_C - G))^T`` from a table of reference-row decay ratios
    ref_table: bool = True
    #: default on since session 6 (module docstring, "Solve and gate options"), needs ``tiled_solve``: step 1's g loads from
    #: one base pointer, predicated; bitwise the kernel without it
    lean_gates: bool = True
    #: default on since session 6: the solve's off-diagonal bands on a 1 x 4 register tile per thread (16-byte shared
    #: reads); bitwise the kernel without it (``tiled_solve=False, lean_gates=False``: the session-6 first default, ``kp6``)
    tiled_solve: bool = True
    #: Default on since session 8 (module docstring, "Staged kd and W"), needs ``ref_table``: ``(K exp(G_C - G))^T``
    #: staged in shared memory (swizzled, conflict-free) and written to the workspace by coalesced 16-byte stores (whole
    #: 128-byte channel rows per warp) instead of 2-byte scattered stores from registers; bitwise the kernel without it
    staged_kd: bool = True
    #: Default on since session 8 (module docstring, "Staged kd and W"), needs ``staged_kd`` (alone ptxas spills): ``-Wm``
    #: (bf16) staged from the accumulator in shared memory (G / A region, swizzled, conflict-free) and written by warpgroup
    #: 1 by coalesced 16-byte stores instead of 4-byte fragment stores (half sectors); bitwise the kernel without it
    staged_w: bool = True
    #: Backward-only, default off (module docstring, "Backward-only bwd_tm"): no ``qg``; bf16 ``Tm`` [64, 64] in the first
    #: 64 * 64 elements of the slot's ``qg`` tile instead (the KDA backward's ``fold_prep_tm``). Never for a forward plan
    bwd_tm: bool = False


WARPGROUPS = 2
NTHREADS = WARPGROUPS * THREADS
MIN_BLOCKS = 2  # two CTAs (16 warps) per SM: about 102 KB of shared memory each at K = 128, registers capped at 128
LOG2E = 1.4426950408889634
A_STRIDE = CHUNK + 4  # fp32 rows of A and T: 16-byte aligned (vector reads of T)
NREF = CHUNK // SOLVE_BLOCK + 1  # reference rows 16 I + 8 (I = 0..3) and the chunk's last row (G_C)
NFAC = NREF * (NREF - 1) // 2  # ref_table: exp2(ref_a - ref_b) for b < a (a = NB: the last row, G_C), row p = a (a - 1) / 2 + b
FAC_C = (NREF - 1) * (NREF - 2) // 2  # ref_table: first row of exp2(G_C - ref_b)
T_BYTES = CHUNK * A_STRIDE * 4
Y_BYTES = (CHUNK // SOLVE_BLOCK - 1) * SOLVE_BLOCK * SOLVE_BLOCK * 4
TM_OFF = 20 * 1024  # byte offset of T Diag(beta) (bf16, swizzled) in the Q' | K' | K'_I region, after T and Y
assert T_BYTES + Y_BYTES <= TM_OFF


Q4 = 4  # tiled_solve: output columns per thread (one 16-byte fp32 vector)
NBLK = CHUNK // SOLVE_BLOCK  # 16-row blocks of a chunk
KD_STAGE_OFF = CHUNK * A_STRIDE  # staged_kd: fp32 offset of the staged kd tile in the G / A region (after A)
W_BARRIER = 1  # staged_w: the named barrier of warpgroup 1 (0 is the CTA barrier)


def _g_floats(d: int, staged_kd: bool) -> int:
    """fp32 elements of the G / A region: G [64, d + 4]; with ``staged_kd`` at least A [64, 68] and the staged bf16 kd
    tile [d, 64] after it (K = 128: the same 33 KB, the kd tile in G's dead tail; K = 64: 8 KB more)."""
    n = CHUNK * (d + 4)
    if staged_kd:
        n = max(n, KD_STAGE_OFF + d * CHUNK // 2)
    return n


@cute.jit
def solve_inverse_256_tiled(sA: cute.Tensor, sT: cute.Tensor, sY: cute.Tensor, tidx: Int32):
    """``T = (I + A)^-1`` as :func:`.._device.chunk_parallel.solve_inverse_256` computes it (the same diagonal blocks,
    the same bands, every fp32 sum in the same order: bitwise the same ``T``), with the off-diagonal blocks on a 1 x 4
    register tile: a thread owns row ``ri`` and columns ``4 q .. 4 q + 3`` of block pair ``blk`` of the band (64 threads
    per 16 x 16 block, ``NBLK - band`` blocks: 192 / 128 / 64 threads in bands 1 / 2 / 3), and reads A / T / Y by 16-byte
    vectors (A: 8 rows of a warp 272 bytes apart, conflict-free; T and Y rows: one 64-byte broadcast). Per 16 FMAs: 5
    shared-memory wavefronts instead of about 20 (the untiled band solve is about 55 % of the kernel's shared-memory
    wavefronts). Starts after the caller's barrier publishing ``sA``; ends with a barrier. The blocks above the
    diagonal blocks are not written."""
    solve_diagonal_blocks(sA, sT, tidx)
    NQ = SOLVE_BLOCK // Q4  # 16-byte column quads of a block
    blk = tidx // (SOLVE_BLOCK * NQ)  # the band's block pair (I = blk + band, J = blk)
    ri = (tidx % (SOLVE_BLOCK * NQ)) // NQ
    q = tidx % NQ
    sAq = cute.zipped_divide(sA, (1, Q4))
    sTq = cute.zipped_divide(sT, (1, Q4))
    sYq = cute.zipped_divide(sY, (1, 1, Q4))
    ra = cute.make_rmem_tensor(cute.make_layout((1, Q4)), Float32)
    rb = cute.make_rmem_tensor(cute.make_layout((1, Q4)), Float32)
    acc = cute.make_rmem_tensor(cute.make_layout((1, Q4)), Float32)
    for band in cutlass.range_constexpr(1, NBLK):
        bI = blk + band
        if blk < NBLK - band:  # warp-uniform (64 threads per block pair)
            for c in cutlass.range_constexpr(Q4):
                acc[0, c] = Float32(0.0)
            # Y[I, J] = sum_{kk = 16 J}^{16 I - 1} A[I, kk] T[kk, J]: kk ascending, as the untiled solve
            for k4 in cutlass.range_constexpr(band * NQ):
                ra.store(sAq[(None, None), (bI * SOLVE_BLOCK + ri, blk * NQ + k4)].load())
                for e in cutlass.range_constexpr(Q4):
                    rb.store(sTq[(None, None), (blk * SOLVE_BLOCK + k4 * Q4 + e, blk * NQ + q)].load())
                    for c in cutlass.range_constexpr(Q4):
                        acc[0, c] = acc[0, c] + ra[0, e] * rb[0, c]
            sYq[(None, None, None), (blk, ri, q)].store(acc.load().reshape((1, 1, Q4)))
        cute.arch.sync_threads()
        if blk < NBLK - band:
            for c in cutlass.range_constexpr(Q4):
                acc[0, c] = Float32(0.0)
            # T[I, J] = -T[I, I] Y[I, J]: mm ascending, as the untiled solve
            for m4 in cutlass.range_constexpr(NQ):
                ra.store(sTq[(None, None), (bI * SOLVE_BLOCK + ri, bI * NQ + m4)].load())
                for e in cutlass.range_constexpr(Q4):
                    rb.store(sYq[(None, None, None), (blk, m4 * Q4 + e, q)].load().reshape((1, Q4)))
                    for c in cutlass.range_constexpr(Q4):
                        acc[0, c] = acc[0, c] + ra[0, e] * rb[0, c]
            for c in cutlass.range_constexpr(Q4):
                acc[0, c] = -acc[0, c]
            sTq[(None, None), (bI * SOLVE_BLOCK + ri, blk * NQ + q)].store(acc.load())
        cute.arch.sync_threads()


def _table_storage(l_ck, d, pad, g_floats):
    """The shared-memory struct of ``ref_table`` (host side, trace time): the default's fields, then the ratio table
    ``exp2(ref_a - ref_b)`` [NFAC, d] fp32 (5 KB at K = 128: about 107 KB in all, still two CTAs per SM). The step-1
    partial sums at the reference rows live in the K'_I tile (dead until step 3 with ``narrow_ap``)."""
    tile = cute.cosize(l_ck)

    def f32(n, align=16):
        return cute.struct.Align[cute.struct.MemRange[Float32, n], align]

    def bf16(n):
        return cute.struct.Align[cute.struct.MemRange[BFloat16, n], 1024]

    fields = {  # evaluated annotations (this module defers annotations)
        "smem_g": f32(g_floats, 1024),
        "smem_qr": bf16(tile),
        "smem_w": bf16(tile),
        "smem_kr": bf16(tile),
        "smem_pad": bf16(pad // 2),
        "smem_ke": bf16(tile),
        "smem_ref": f32(NREF * d),
        "smem_tot": f32(NTHREADS),
        "smem_beta": f32(CHUNK),
        "smem_fac": f32(NFAC * d),
    }
    return cute.struct(type("KdaPrepTableStorage", (), {"__annotations__": fields}))


class KimiDeltaAttentionParallelPrep(ChunkParallelPrepLaunch):
    """Kernel 1 of the chunk-parallel KDA forward: ``__init__`` holds the compile key, ``__call__``
    (:class:`ChunkParallelPrepLaunch`: g per key channel) builds the views, ``launch`` launches."""

    GATE_PER_KEY = True

    def __init__(self, key: KdaParallelPrepKey):
        assert key.head_dim in (64, 128)
        if key.ref_table and not key.narrow_ap:
            raise ValueError(
                "KdaParallelPrepKey: ref_table=True needs narrow_ap=True (alone it leaves ptxas at the 128-register cap with a spill); accepted: "
                "both (the default), {'ref_table': False} (narrow_ap alone), {'narrow_ap': False, 'ref_table': False} (the session-5 step 3; the "
                "session-5 kernel with {'tiled_solve': False, 'lean_gates': False} too)"
            )
        if key.lean_gates and not key.tiled_solve:
            raise ValueError(
                "KdaParallelPrepKey: lean_gates=True needs tiled_solve=True (alone ptxas spills 8 bytes at the 128-register cap); accepted: "
                "both (the default), {'lean_gates': False} (tiled_solve alone), {'tiled_solve': False, 'lean_gates': False} (the session-6 first default)"
            )
        if key.staged_kd and not key.ref_table:
            raise ValueError(
                "KdaParallelPrepKey: staged_kd=True needs ref_table=True (kd is formed from the ref_table element pass); accepted: "
                "ref_table=True (the default), or ref_table=False with {'staged_kd': False, 'staged_w': False} (variant 'kn' / 'kp5')"
            )
        if key.staged_w and not key.staged_kd:
            raise ValueError(
                "KdaParallelPrepKey: staged_w=True needs staged_kd=True (alone, ptxas spills 24 bytes at the 128-register cap at K = 128); accepted: "
                "both (the default), {'staged_w': False} (staged kd alone) or {'staged_kd': False, 'staged_w': False} (variant 'kp7')"
            )
        self.key = key
        self.D = key.head_dim

    @cute.jit
    def launch(self, views: tuple, extents: tuple, scale: Float32, stream: cuda.CUstream):
        """Shared memory, grid and launch of ``kernel`` (``views``, ``extents``: :class:`ChunkParallelPrepLaunch`)."""
        D = self.D
        gQ, gK, gV, mG, mB, mCu, ws = views
        n_seqs, seq_len, chunks_per_seq, slots, heads, qk_heads = extents

        mma_n64 = make_mma_n64()  # A = K' K'_I^T, P = Q' K'_I^T: both operands K-major
        mma_mn = sm90_utils.make_trivial_tiled_mma(  # U, W: B (V, K exp G) read MN-major from the row-major tiles
            BFloat16, BFloat16, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(64, 64)
        )
        l_ck = k_major_smem_layout(CHUNK, D)  # [tokens, K]: Q', K', K'_I, K exp(G), V
        l_cc = k_major_smem_layout(CHUNK, CHUNK)  # T Diag(beta)
        tile_bytes = cute.cosize(l_ck) * 2
        v_off = 2 * tile_bytes if D == 128 else TM_OFF + 8 * 1024  # V over K'_I (K = 128) or after T Diag(beta)
        pad = max(v_off + tile_bytes - 3 * tile_bytes, 1024)  # the region after K'_I that V (K = 64) reaches into

        @cute.struct
        class SharedStorage:
            smem_g: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK * (D + 4)], 1024]  # G log2(e), then A
            smem_qr: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]  # Q', then T | Y | Tm
            smem_w: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]  # K'
            smem_kr: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]  # K'_I, then V
            smem_pad: cute.struct.Align[cute.struct.MemRange[BFloat16, pad // 2], 1024]
            smem_ke: cute.struct.Align[cute.struct.MemRange[BFloat16, cute.cosize(l_ck)], 1024]  # K exp(G)
            smem_ref: cute.struct.Align[cute.struct.MemRange[Float32, NREF * D], 16]
            smem_tot: cute.struct.Align[cute.struct.MemRange[Float32, NTHREADS], 16]
            smem_beta: cute.struct.Align[cute.struct.MemRange[Float32, CHUNK], 16]

        storage_class = SharedStorage
        if const_expr(self.key.ref_table):
            storage_class = _table_storage(l_ck, D, pad, _g_floats(D, self.key.staged_kd))
        self.kernel(
            gQ, gK, gV, mG, mB, mCu, ws, n_seqs, seq_len, chunks_per_seq, heads, qk_heads, scale, mma_n64, mma_mn, l_ck, l_cc, v_off, storage_class
        ).launch(
            grid=[slots, heads, 1],
            block=[NTHREADS, 1, 1],
            smem=storage_class.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=MIN_BLOCKS,
            preferred_smem_carveout=100,  # the maximum carveout: room for two CTAs (and no device query at compile time)
        )

    @cute.kernel
    def kernel(
        self,
        gQ: cute.Tensor,
        gK: cute.Tensor,
        gV: cute.Tensor,
        mG: cute.Tensor,
        mB: cute.Tensor,
        mCu: cute.Tensor | None,
        ws: tuple,
        n_seqs: Int32,
        seq_len: Int32,
        chunks_per_seq: Int32,
        heads: Int32,
        qk_heads: Int32,
        scale: Float32,
        mma_n64: cute.TiledMma,
        mma_mn: cute.TiledMma,
        l_ck: cute.ComposedLayout,
        l_cc: cute.ComposedLayout,
        v_off: cutlass.Constexpr,
        SharedStorage: cutlass.Constexpr,
    ):
        D = self.D
        NM = D // 32  # 16-byte chunks of a row per thread (four threads per row)
        NH = D // BV
        PARTS = NTHREADS // D  # step 1: token ranges per key channel
        SPAN = CHUNK // PARTS
        NB = CHUNK // SOLVE_BLOCK
        mW, mU, mKD, mQG, mP, mGE, _, _, _ = ws
        tidx, _, _ = cute.arch.thread_idx()
        slot, head, _ = cute.arch.block_idx()
        hk = head // (heads // qk_heads)
        _, t0, n_valid = slot_chunk(mCu, slot, n_seqs, seq_len, chunks_per_seq, self.key.varlen)
        wg = cute.arch.make_warp_uniform(tidx // THREADS)
        wq = cute.arch.make_warp_uniform((tidx % THREADS) // 32)  # warp in the warpgroup
        lt = tidx % THREADS

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sG = storage.smem_g.get_tensor(cute.make_layout((CHUNK, D), stride=(D + 4, 1)))
        sA = storage.smem_g.get_tensor(cute.make_layout((CHUNK, CHUNK), stride=(A_STRIDE, 1)))  # over G, from step 3
        sQr = storage.smem_qr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sW = storage.smem_w.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKR = storage.smem_kr.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        sKE = storage.smem_ke.get_tensor(l_ck.outer, swizzle=l_ck.inner)
        region = storage.smem_qr.data_ptr()  # Q' | K' | K'_I | pad: dead after step 3
        scratch = cute.recast_ptr(region, dtype=Float32)
        sT = cute.make_tensor(scratch, cute.make_layout((CHUNK, CHUNK), stride=(A_STRIDE, 1)))
        sY = cute.make_tensor(
            scratch + CHUNK * A_STRIDE, cute.make_layout((NB - 1, SOLVE_BLOCK, SOLVE_BLOCK), stride=(SOLVE_BLOCK * SOLVE_BLOCK, SOLVE_BLOCK, 1))
        )
        sTm = cute.make_tensor(cute.recast_ptr(region + TM_OFF // 2, l_cc.inner, dtype=BFloat16), l_cc.outer)
        sV = cute.make_tensor(cute.recast_ptr(region + v_off // 2, l_ck.inner, dtype=BFloat16), l_ck.outer)
        sRef = storage.smem_ref.get_tensor(cute.make_layout((NREF, D), stride=(D, 1)))
        sTot = storage.smem_tot.get_tensor(cute.make_layout((PARTS, D), stride=(D, 1)))
        sBeta = storage.smem_beta.get_tensor(cute.make_layout((CHUNK,)))
        if const_expr(self.key.staged_w):  # bf16 [D / 64][64 * 64] at the start of the G / A region (step 5; acc_to_stage's swizzle)
            sWst = cute.make_tensor(cute.recast_ptr(storage.smem_g.data_ptr(), dtype=BFloat16), cute.make_layout((D * CHUNK,)))
        if const_expr(self.key.staged_kd):  # bf16 [D * 64] after A in the G / A region (kd_chunk_to_stage's swizzle)
            sKD = cute.make_tensor(cute.recast_ptr(storage.smem_g.data_ptr() + KD_STAGE_OFF, dtype=BFloat16), cute.make_layout((D * CHUNK,)))

        # 16-byte views: [rows, chunks of 8 channels]
        sGv = cute.zipped_divide(sG, (1, VEC))
        sRefv = cute.zipped_divide(sRef, (1, VEC))
        sQrv = cute.zipped_divide(sQr, (1, VEC))
        sWv = cute.zipped_divide(sW, (1, VEC))
        sKRv = cute.zipped_divide(sKR, (1, VEC))
        sKEv = cute.zipped_divide(sKE, (1, VEC))
        sVv = cute.zipped_divide(sV, (1, VEC))
        sTv = cute.zipped_divide(sT, (1, VEC))
        sTmv = cute.zipped_divide(sTm, (1, VEC))
        sBetav = cute.zipped_divide(sBeta, (VEC,))

        wg64 = mma_n64.get_slice(0)
        kl_A = wg64.make_fragment_A(wg64.partition_A(sW))
        qr_A = wg64.make_fragment_A(wg64.partition_A(sQr))
        kr_B = wg64.make_fragment_B(wg64.partition_B(sKR))
        acc = cute.make_rmem_tensor(wg64.partition_shape_C((CHUNK, CHUNK)), Float32)
        c64 = mma_n64.get_slice(lt).partition_C(cute.make_identity_tensor((CHUNK, CHUNK)))

        row = tidx // 4  # steps 2, 3 and 4c: four threads per row, lanes 4r..4r+3 of one warp
        j4 = tidx % 4
        if n_valid > 0:  # idle slots (past their sequence's last chunk) do nothing
            last = t0 + n_valid - 1
            t_row = min(t0 + row, last)
            # this thread's q / k chunks (rows past the end re-read the last row and are zeroed by keep): in flight
            # during step 1
            qbuf, kbuf = load_qk_row_chunks(gQ, gK, t_row, hk, j4, NM)

            # ---- 1. g -> G log2(e) (per-range prefix sums in registers), reference rows, beta, exp(G_C) ---------------
            gcol = tidx % D
            part = tidx // D
            gbuf = cute.make_rmem_tensor(cute.make_layout((SPAN,)), Float32)
            cum = Float32(0.0)
            if const_expr(self.key.lean_gates):
                # one base pointer for the range and a 32-bit token stride (heads x K elements: offsets within one range
                # stay below 2^31 for any head count under 2^17); rows past the chunk are not read (predicated loads: no
                # clamp, no select, about 3 instead of 9 SASS instructions per load)
                g_first = cute.domain_offset((t0 + part * SPAN, head, gcol), mG)
                g_span = cute.make_tensor(g_first.iterator, cute.make_layout((SPAN,), stride=(heads * D,)))
                g_rows = n_valid - part * SPAN  # rows of this range inside the chunk (may be <= 0)
                for j in cutlass.range_constexpr(SPAN):
                    gj = Float32(0.0)
                    if j < g_rows:
                        gj = g_span[j].to(Float32)
                    cum = cum + gj
                    gbuf[j] = cum
            else:
                for j in cutlass.range_constexpr(SPAN):
                    gbuf[j] = mG[min(t0 + part * SPAN + j, last), head, gcol].to(Float32)
                for j in cutlass.range_constexpr(SPAN):
                    gj = gbuf[j]
                    if part * SPAN + j >= n_valid:
                        gj = Float32(0.0)
                    cum = cum + gj
                    gbuf[j] = cum
            sTot[part, gcol] = cum
            if const_expr(self.key.ref_table):  # this range's partial sums at its reference rows (step 1b), in the K'_I tile
                sLoc = cute.make_tensor(cute.recast_ptr(storage.smem_kr.data_ptr(), dtype=Float32), cute.make_layout((NREF, D), stride=(D, 1)))
                for j in cutlass.range_constexpr(SPAN):
                    if const_expr(j % SOLVE_BLOCK == REF_OFFSET):
                        sLoc[(part * SPAN + j) // SOLVE_BLOCK, gcol] = gbuf[j]
                if part == PARTS - 1:
                    sLoc[NB, gcol] = gbuf[SPAN - 1]
            if tidx < CHUNK:
                bv = Float32(0.0)
                b_ld = mB[min(t0 + tidx, last), head].to(Float32)
                if tidx < n_valid:
                    bv = b_ld
                sBeta[tidx] = bv
            cute.arch.sync_threads()
            base = Float32(0.0)
            for p in cutlass.range_constexpr(PARTS - 1):
                if p < part:
                    base = base + sTot[p, gcol]
            for j in cutlass.range_constexpr(SPAN):
                gl = (base + gbuf[j]) * LOG2E
                sG[part * SPAN + j, gcol] = gl
                if const_expr(j % SOLVE_BLOCK == REF_OFFSET):
                    sRef[(part * SPAN + j) // SOLVE_BLOCK, gcol] = gl
            if part == PARTS - 1:
                sRef[NB, gcol] = (base + gbuf[SPAN - 1]) * LOG2E
                mGE[slot, head, gcol] = cute.math.exp(base + gbuf[SPAN - 1])  # the state pass's exp(G_C): precise
            if const_expr(self.key.ref_table):
                # 1b. every reference row of this channel (the same fp32 values as sRef), then this thread's share of the
                # ratios exp2(ref_a - ref_b), b < a (<= 1: G decreases)
                sFac = storage.smem_fac.get_tensor(cute.make_layout((NFAC, D), stride=(D, 1)))
                refs = cute.make_rmem_tensor(cute.make_layout((NREF,)), Float32)
                for r in cutlass.range_constexpr(NREF):
                    owner = (r * SOLVE_BLOCK + REF_OFFSET) // SPAN  # the range holding reference row r
                    if const_expr(r == NB):
                        owner = PARTS - 1
                    rb_base = Float32(0.0)
                    for p in cutlass.range_constexpr(owner):
                        rb_base = rb_base + sTot[p, gcol]
                    refs[r] = (rb_base + sLoc[r, gcol]) * LOG2E
                for a in cutlass.range_constexpr(1, NREF):
                    for b in cutlass.range_constexpr(a):
                        # every range of the channel writes the same value (one store each would need a branch per entry, and
                        # with it ptxas spills at the register cap)
                        sFac[a * (a - 1) // 2 + b, gcol] = cute.math.exp2(refs[a] - refs[b], fastmath=True)
            cute.arch.sync_threads()

            # ---- 2. one pass over this thread's 4 x 8 elements of its row ------------------------------------------
            inv_q, inv_k = row_qk_scales(qbuf, kbuf, row, n_valid, NM, self.key.l2norm)
            if const_expr(self.key.ref_table):
                sFacv = cute.zipped_divide(storage.smem_fac.get_tensor(cute.make_layout((NFAC, D), stride=(D, 1))), (1, VEC))
                kikeep = cute.make_rmem_tensor(cute.make_layout((1, VEC, NM)), Float32)  # K exp2(ref_rb - G) (step 3)
                if const_expr(self.key.staged_kd):
                    kdkeep = cute.make_rmem_tensor(cute.make_layout((1, VEC, NM)), BFloat16)  # kd of this thread's elements
            else:
                gkeep = cute.make_rmem_tensor(cute.make_layout((1, VEC, NM)), Float32)  # G of this thread's elements (step 3)
                kkeep = cute.make_rmem_tensor(cute.make_layout((1, VEC, NM)), BFloat16)  # bf16 K (normalised, masked)
            obuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            kdbuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            gQGv = cute.zipped_divide(mQG[slot, head, None, None], (1, VEC))
            zero8 = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            zero8.fill(0.0)
            rblk = row // SOLVE_BLOCK
            for m in cutlass.range_constexpr(NM):
                ch = element_chunk(j4, m)
                g = sGv[(None, None), (row, ch)].load()
                e_ref = cute.math.exp2(g - sRefv[(None, None), (rblk, ch)].load(), fastmath=True)
                e_g = cute.math.exp2(g, fastmath=True)
                if const_expr(self.key.ref_table):  # exp2(G_C - G) = exp2(G_C - ref_rb) exp2(ref_rb - G)
                    e_inv = cute.math.exp2(sRefv[(None, None), (rblk, ch)].load() - g, fastmath=True)
                else:
                    e_c = cute.math.exp2(sRefv[(None, None), (NB, ch)].load() - g, fastmath=True)
                qn = (qbuf[None, None, None, m].load().reshape((1, VEC)).to(Float32) * inv_q).to(BFloat16).to(Float32)
                kb = (kbuf[None, None, None, m].load().reshape((1, VEC)).to(Float32) * inv_k).to(BFloat16)
                kn = kb.to(Float32)
                sQrv[(None, None), (row, ch)].store((qn * e_ref).to(BFloat16))
                sWv[(None, None), (row, ch)].store((kn * e_ref).to(BFloat16))
                sKEv[(None, None), (row, ch)].store((kn * e_g).to(BFloat16))
                if const_expr(not self.key.bwd_tm):  # bwd_tm: the qg tile carries Tm (step 4c)
                    obuf.store((qn * (e_g * scale)).to(BFloat16))
                    cute.autovec_copy(obuf, gQGv[(None, None), (row, ch)])
                if const_expr(self.key.ref_table):
                    ki = kn * e_inv
                    kikeep[None, None, m].store(ki)
                    if const_expr(self.key.staged_kd):  # kept in registers (bf16) until step 3 may overwrite G's tail
                        kdkeep[None, None, m].store((ki * sFacv[(None, None), (FAC_C + rblk, ch)].load()).to(BFloat16))
                    else:
                        kdbuf.store((ki * sFacv[(None, None), (FAC_C + rblk, ch)].load()).to(BFloat16))
                else:
                    kdbuf.store((kn * e_c).to(BFloat16))
                if const_expr(not self.key.staged_kd):
                    kd_chunk_to_workspace(mKD, kdbuf, slot, head, row, ch)  # (K exp(G_C - G))^T: [channel % 64, token, channel / 64]
                if const_expr(not self.key.ref_table):
                    gkeep[None, None, m].store(g)
                    kkeep[None, None, m].store(kb)
                if const_expr(not self.key.narrow_ap):  # narrow_ap: rows past block I only reach masked outputs
                    if row >= SOLVE_BLOCK:  # K'_I rows after block I stay zero (block I writes rows <= 16 I + 15 only)
                        cute.autovec_copy(zero8, sKRv[(None, None), (row, ch)])

            # ---- 3. by 16-row blocks: K'_I (live rows), then A (warpgroup 0) and P (warpgroup 1) at once ----------
            if const_expr(self.key.narrow_ap):  # A^T = K'_I K'_bi^T, P^T = K'_I Q'_bi^T: m64n16 (rows: key tokens j)
                mma_n16 = sm90_utils.make_trivial_tiled_mma(
                    BFloat16, BFloat16, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, Float32, atom_layout_mnk=(1, 1, 1), tiler_mn=(64, 16)
                )
                wg16 = mma_n16.get_slice(0)
                kr_A16 = wg16.make_fragment_A(wg16.partition_A(sKR))
                acc16 = cute.make_rmem_tensor(wg16.partition_shape_C((CHUNK, SOLVE_BLOCK)), Float32)
                c16 = mma_n16.get_slice(lt).partition_C(cute.make_identity_tensor((CHUNK, SOLVE_BLOCK)))
            for bi in cutlass.range_constexpr(NB):
                if row < (bi + 1) * SOLVE_BLOCK:
                    for m in cutlass.range_constexpr(NM):
                        ch = element_chunk(j4, m)
                        if const_expr(self.key.ref_table):  # K exp2(ref_bi - G) = (K exp2(ref_rb - G)) exp2(ref_bi - ref_rb)
                            ki = kikeep[None, None, m].load()
                            if const_expr(bi == 0):
                                sKRv[(None, None), (row, ch)].store(ki.to(BFloat16))
                            else:
                                if rblk == bi:
                                    sKRv[(None, None), (row, ch)].store(ki.to(BFloat16))
                                else:
                                    sKRv[(None, None), (row, ch)].store((ki * sFacv[(None, None), (bi * (bi - 1) // 2 + rblk, ch)].load()).to(BFloat16))
                        else:
                            e_r = cute.math.exp2(sRefv[(None, None), (bi, ch)].load() - gkeep[None, None, m].load(), fastmath=True)
                            sKRv[(None, None), (row, ch)].store((kkeep[None, None, m].load().to(Float32) * e_r).to(BFloat16))
                _smem_ready()
                if const_expr(self.key.staged_kd and bi == 0):
                    # kd (formed in step 2, kept as bf16 in registers) into the staged tile in G's tail: every read of G (step
                    # 2) is behind the barrier above; before the WGMMA, so that its accumulator is not live (128-register cap)
                    for m in cutlass.range_constexpr(NM):
                        ch = element_chunk(j4, m)
                        kdbuf.store(kdkeep[None, None, m].load())
                        kd_chunk_to_stage(sKD, kdbuf, row, ch)
                if const_expr(self.key.narrow_ap):
                    # every warp holds 16 key rows j of the 16 query rows of block bi: the masks are selects, all warps store
                    if wg == 0:
                        kb_B = wg16.make_fragment_B(wg16.partition_B(cute.local_tile(sW, (SOLVE_BLOCK, D), (bi, 0))))
                        _wgmma(mma_n16, acc16, kr_A16, kb_B, True)
                        for i in cutlass.range_constexpr(cute.size(acc16)):
                            jc = c16[i]
                            ir = bi * SOLVE_BLOCK + jc[1]
                            a_val = acc16[i] * sBeta[ir]
                            if ir <= jc[0]:
                                a_val = Float32(0.0)
                            sA[ir, jc[0]] = a_val
                    else:
                        qb_B = wg16.make_fragment_B(wg16.partition_B(cute.local_tile(sQr, (SOLVE_BLOCK, D), (bi, 0))))
                        _wgmma(mma_n16, acc16, kr_A16, qb_B, True)
                        for i in cutlass.range_constexpr(cute.size(acc16)):
                            jc = c16[i]
                            ir = bi * SOLVE_BLOCK + jc[1]
                            p_val = acc16[i] * scale
                            if ir < jc[0]:
                                p_val = Float32(0.0)
                            mP[slot, head, ir, jc[0]] = p_val.to(BFloat16)
                else:
                    # the m64 accumulator's rows 16 w .. 16 w + 15 live in warp w of the warpgroup: block bi's rows are warp
                    # bi's (one warp-uniform branch; the triangle masks are selects)
                    if wg == 0:
                        _wgmma(mma_n64, acc, kl_A, kr_B, True)
                        if wq == bi:
                            for i in cutlass.range_constexpr(cute.size(acc)):
                                rc = c64[i]
                                a_val = acc[i] * sBeta[rc[0]]
                                if rc[0] <= rc[1]:
                                    a_val = Float32(0.0)
                                sA[rc[0], rc[1]] = a_val
                    else:
                        _wgmma(mma_n64, acc, qr_A, kr_B, True)
                        if wq == bi:
                            for i in cutlass.range_constexpr(cute.size(acc)):
                                rc = c64[i]
                                p_val = acc[i] * scale
                                if rc[0] < rc[1]:
                                    p_val = Float32(0.0)
                                mP[slot, head, rc[0], rc[1]] = p_val.to(BFloat16)
                cute.arch.sync_threads()

            # V -> shared (over K'_I) by cp.async, in flight during the solve (rows past the end: the last row; beta = 0)
            cp_async_v_row_chunks(gV, sVv, t_row, head, row, j4, NM)
            if const_expr(self.key.staged_kd):  # the staged kd (published by block 0's closing barrier): stores in flight during the solve
                kd_stage_to_workspace(sKD, mKD, slot, head, tidx, D)

            # ---- 4. T = (I + A)^-1: diagonal blocks in registers, then the off-diagonal blocks band by band -----------
            if const_expr(self.key.tiled_solve):
                solve_inverse_256_tiled(sA, sT, sY, tidx)
            else:
                solve_inverse_256(sA, sT, sY, tidx)

            # ---- 4c. T Diag(beta) -> bf16 (zero above the diagonal blocks) --------------------------------------------
            tmbuf = cute.make_rmem_tensor(cute.make_layout((1, VEC)), BFloat16)
            if const_expr(self.key.bwd_tm):  # Tm [64, 64] row-major over the slot's qg tile (the backward's fold_prep_tm)
                gTmv = cute.zipped_divide(cute.make_tensor(mQG[slot, head, None, None].iterator, cute.make_layout((CHUNK, CHUNK), stride=(CHUNK, 1))), (1, VEC))
            for s in cutlass.range_constexpr(CHUNK * CHUNK // (NTHREADS * VEC)):
                ch = 2 * j4 + s
                if ch // 2 > row // SOLVE_BLOCK:
                    cute.autovec_copy(zero8, sTmv[(None, None), (row, ch)])
                    if const_expr(self.key.bwd_tm):
                        cute.autovec_copy(zero8, gTmv[(None, None), (row, ch)])
                else:
                    if const_expr(self.key.bwd_tm):  # bf16(T) (the backward's Tm) -> the qg tile, from the same fp32 read
                        t8 = sTv[(None, None), (row, ch)].load()
                        tmbuf.store(t8.to(BFloat16))
                        cute.autovec_copy(tmbuf, gTmv[(None, None), (row, ch)])
                        tmbuf.store((t8 * sBetav[None, ch].load().reshape((1, VEC))).to(BFloat16))
                    else:
                        tmbuf.store((sTv[(None, None), (row, ch)].load() * sBetav[None, ch].load().reshape((1, VEC))).to(BFloat16))
                    cute.autovec_copy(tmbuf, sTmv[(None, None), (row, ch)])
            cute.arch.cp_async_wait_group(0)
            _smem_ready()

            # ---- 5. warpgroup 0: U = (T Diag(beta)) V (fp32); warpgroup 1: -Wm = -(T Diag(beta)) (K exp G) (bf16) ------
            wgmn = mma_mn.get_slice(0)
            tm_A = wgmn.make_fragment_A(wgmn.partition_A(sTm))
            if wg == 0:
                sVt = transpose_view(sV)
                for vb in cutlass.range_constexpr(NH):
                    v_B = wgmn.make_fragment_B(wgmn.partition_B(cute.local_tile(sVt, (BV, CHUNK), (vb, 0))))
                    _wgmma(mma_mn, acc, tm_A, v_B, True)
                    acc_to_gmem(cute.local_tile(mU[slot, head, None, None], (CHUNK, BV), (0, vb)), acc, c64, False, False)
            else:
                sKEt = transpose_view(sKE)
                for h in cutlass.range_constexpr(NH):
                    ke_B = wgmn.make_fragment_B(wgmn.partition_B(cute.local_tile(sKEt, (BV, CHUNK), (h, 0))))
                    _wgmma(mma_mn, acc, tm_A, ke_B, True)
                    if const_expr(self.key.staged_w):  # G / A region, free since the barrier before step 5: [64, 64] bf16 per h
                        acc_to_stage(acc, c64, cute.make_tensor(sWst.iterator + h * CHUNK * BV, cute.make_layout((CHUNK * BV,))), True)
                    else:
                        acc_to_gmem(cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)), acc, c64, True, False)
                if const_expr(self.key.staged_w):
                    cute.arch.barrier(barrier_id=W_BARRIER, number_of_threads=THREADS)  # warpgroup 1 only
                    for h in cutlass.range_constexpr(NH):
                        stage_to_gmem(
                            cute.make_tensor(sWst.iterator + h * CHUNK * BV, cute.make_layout((CHUNK * BV,))),
                            cute.local_tile(mW[slot, head, None, None], (CHUNK, BV), (0, h)),
                            lt,
                        )

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)
