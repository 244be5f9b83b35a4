"""Flash attention backward for Hopper (sm_90a), warp-specialized, in CuTe DSL: the main kernel.

Given Q, K, V, dO and the scratch written by the preprocess (``lse_log2 = LSE * log2 e`` and
``dpsum = rowsum(dO * O)``, see kernel_prepost_sm90.py), computes for one key block of ``tile_n`` keys::

    S^T  = K Q^T                      P^T  = exp2(S^T * scale * log2 e - lse_log2)   (masked entries: 0)
    dP^T = V dO^T                     dS^T = P^T * (dP^T - dpsum)
    dV  += P^T dO                     dK  += dS^T Q            (dK scaled by ``scale`` at the end)
    dQ_accum[query block] += dS K     (fp32 atomics into the workspace; the postprocess scales and converts)

walking every query block that sees the key block (per the causal / window mask) of every query head that shares
this key/value head (GQA / MQA: dK and dV are reduced over the group inside the CTA, no atomics, deterministic).

Layouts: Q (B, H, S_q, D), K (B, H_kv, S_kv, D), V (B, H_kv, S_kv, D_v), dO (B, H, S_q, D_v), dK/dV like K/V;
any strides with a unit-stride head dim (multiples of 16 bytes elsewhere) encoded in the TMA descriptors, so
BSHD and BHSD are both read and written natively. Every extent is a runtime argument.

Structure (one CTA = one key block of one (batch, kv head); 3 warpgroups):

- warpgroup 0, warp 0: producer. TMA loads K and V once, then Q and dO of each query block into a
  ``num_stages`` ring (``PipelineTmaAsync``);
- warpgroups 1 and 2: consumers, 64 keys each. S^T and dP^T as SS WGMMA (K / V the A operand, Q / dO the B
  operand, so P^T and dS^T land in registers in the A-operand layout of the dV and dK GEMMs, which run as RS
  WGMMA); dS^T goes to shared memory once (stmatrix) and both warpgroups read it for dQ = dS K (each warpgroup
  one half of the head dim), accumulated with fp32 atomics into the workspace;
- epilogue: dK and dV converted, written to shared memory (reusing K's and V's buffers) and TMA-stored.

Schedule variants, each a compile-key field (default off; the default compiles to the verified PTX): ``dq_tma``
(each warpgroup stages its fp32 dQ partial in shared memory and its first warp adds it into the accumulator with
TMA reduce-adds, no register atomics), ``dq_bulk`` (the same staging in MMA-fragment order, 16-byte stores, and
ONE contiguous non-tensor bulk reduce-add per warpgroup into a fragment-ordered accumulator; with ``dq_writer`` a
warp of the producer warpgroup issues those, handshaking with each consumer warpgroup through two named barriers),
``stats_tma`` (the producer bulk-copies the block's lse_log2 / dpsum rows into
shared memory on Q's / dO's barrier), ``ds_double_buffer`` (two dS^T buffers, one barrier less per query block),
``tile_m80`` (with dq_tma, D = 128, dense: FA3 / FA4's d128 query blocks of 80 rows; dQ^T = K^T dS^T, since 80 rows
are no multiple of the 64-row WGMMA, staged through a 128-byte swizzle for two 128-byte-row TMA boxes per warpgroup;
a last block past the 128-row scratch padding takes the masked path with its rows past S_q masked; dq_writer may issue
dq_tma's reduce-adds too) and ``dq_t128`` (the same dQ^T staging at 64 rows, to A/B the staging apart from the tile).

``tile_m128`` (m128; D = D_v = 64 only): query blocks of 128 rows, FA3's / FA4's d64 configuration (kBlockM = kBlockN =
128, S^T / dP^T swapped with each warpgroup owning 64 keys, dK / dV split by keys, two Q / dO stages, two dS stages =
our ds2; their dQ splits the 128 rows over the warpgroups, ours keeps the head-dim split so dq_bulk's accumulator order
and the postprocess are unchanged). Per query block each barrier, the dS^T round trip, the dQ reduce-adds and the
lse / dpsum loads serve twice the rows, and S^T / dP^T are m64n128k16 WGMMAs. Register budget of a consumer thread
(240 by setmaxnreg): S^T and dP^T 64 fp32 each (64 keys x 128 queries per warpgroup), dK and dV 32 each (64 x 64), dQ 32
(128 x 32), P^T and dS^T 32 each (bf16 pairs); to stay under it, each column's lse_log2 / dpsum is read where it is used
from the rows stats_tma staged in shared memory (the key requires stats_tma: 64 registers less than m64's per-block
arrays at 32 columns a thread; global reads at the point of use spill in the windowed kernel) and P^T is converted only
after dS^T is formed (at the dS^T formation S^T, dP^T, dK, dV = 192 live). Shared memory (bf16): the Q and dO rings
2 x 128 x 64 each (32 KiB each), K and V 16 KiB each, dS^T 128 x 128 = 32 KiB (64 KiB with ds2), the fp32 dQ staging
of dq_tma / dq_bulk 32 KiB, stats_tma's rows 2 KiB: 194 KiB with every variant, under the 227 KiB. The 128-row scratch
padding (PREPOST_ROWS, per sequence for varlen) is a multiple of the tile, so a last partial block reads only rows the
preprocess initialized (lse_log2 = +inf past S_q: P^T = dS^T = 0). dq_bulk stages each warpgroup's fragment as two
64-row fragment-ordered blocks (two bulk reduce-adds per warpgroup, from the dq_writer warp: the consumers issuing them
spill 8 bytes at 128 rows, so the key requires the writer). Not served: deterministic (the turn counters count 64-row
blocks), m80, dqt, split_d.

Instruction-overhead variants (session 8, issue #6; opt-in key fields, default PTX byte-identical): ``pack_once``
(pack1: P^T / dS^T converted by one inline cvt per register pair; LLVM otherwise re-forms dS^T's conversions for the dK
WGMMA after the branches behind its stmatrix), ``ds_kmajor`` (dsk: dS kept K-major, queries x keys, written by
transposed stmatrix at one base address plus immediates, read by dQ = dS K as a K-major A operand), ``dq_rows``
(dqrows, m128 + dq_bulk: dQ's 128 rows split over the warpgroups, m64n64k16 WGMMAs, one whole 64-row fragment-ordered
block and one bulk reduce-add per warpgroup, the accumulator order unchanged) and ``stats_vec4`` (stats4, any of the
64 / 80 / 128-row blocks: lse_log2 / dpsum rows stored permuted by the preprocess so a thread's four columns are one
16-byte load).

m80 bulk (session 9, issue #6; ``tile_m80`` + ``dq_bulk``, D = D_v = 128, dense): FA3 / FA4's d128 query blocks of 80 rows
with dq_bulk's dQ path instead of dq_tma's: each warpgroup's 64 x 80 dQ^T fragment (its half of the head dim, 40
registers) staged in fragment order (ten 16-byte stores) and added by one 20 KiB bulk reduce-add (from the consumers or
the dq_writer warp) into 80-row fragment-ordered accumulator blocks (kernel_key.M80_BULK_ROWS); the scratch rows are
S_q rounded up to whole 80-row blocks and then to PREPOST_ROWS (kernel_key.padded_rows), the preprocess covers every
padded row and the postprocess walks 80-row blocks. With pack_once ptxas keeps every WGMMA asynchronous (no C7512, no
spill, causal and not, with or without the writer); without it the kernel's WGMMAs are serialized (insufficient
registers), as m80 with dq_tma's staging is.

Fixed-cost variants (notes/bwd_fixed_cost.md A / B; opt-in key fields, default PTX byte-identical): ``spin_wait``
(spin: the consumers' full-barrier waits, K / V in ``begin_key_block`` and Q / dO in every ``step``, including split_d's,
split_d bulk's and n96's, spin on a hint-less ``mbarrier.try_wait`` instead of sleeping: ``_device/pipeline.consumer_wait``,
the forward's mechanism) and ``kv_with_q`` (kvq: FA4's prologue, K issued on the CTA's first Q stage's barrier and V on its
first dO stage's, each with an ``mbarrier.expect_tx`` of its bytes before the stage's producer arrival; the consumers'
K / V wait is dropped, the first S^T waits for K + Q0 only and the first dP^T for V + dO0; not split_d) and ``pdl``
(Programmatic Dependent Launch, every main kernel: launched with ``use_pdl``, the producer issues K / V, then
``griddepcontrol.wait``s for the preprocess before Q / dO and the stats rows; every other warp waits before its first
read of the preprocess's scratch; the consumers trigger the postprocess's launch after the epilogue) and ``kv_prefetch``
(kvpf, dense, not split_d: with its CTA's last Q / dO load the producer TMA-prefetches into L2 the K / V of the tile
``blockIdx.x + resident_ctas``, the launch argument the host sets to the SM count).

Tests: packages/cudnn-sdpa/tests/test_sdpa_bwd_*.py. Benchmark: benchmarks/sdpa_bwd.py.
"""

from __future__ import annotations

import enum
import math
from types import SimpleNamespace

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cutlass_dsl import dsl_user_op

from .._device.kernel_plan import DTYPES, WarpSpecializedPlanSm90, fake_gmem_ptr
from .._device.mask_bwd import MaskInfoBwd
from .._device.mma_sm90 import acc_view_as_a, acc_view_mn, transpose_view, wgmma
from .._device.pipeline import consumer_release, consumer_state, consumer_wait, make_tma_pipeline, prefetch_tma_descriptors, producer_state
from .._device.seqlen import cu_seqlens_tensors, sequence_extents
from .._device.tile_scheduler import SingleTileScheduler
from .dq_first_store import flag_mark_done, flag_ticket, flag_wait_done, flags_tensor, store_bulk_f32
from .kernel_key import DQ_BULK_ROWS, M80_BULK_ROWS, PREPOST_ROWS, SdpaBwdKey, dq_flag_index, dq_flags_offset, tile_config


@dsl_user_op
def reduce_add_bulk_f32(gmem_ptr: cute.Pointer, smem_ptr: cute.Pointer, num_bytes: int, *, loc=None, ip=None):
    """``cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32``: add ``num_bytes`` (a multiple of 16; both
    addresses 16-byte aligned) of fp32 from shared memory into global memory, asynchronously, in the issuing thread's
    bulk group (commit / wait it with cp_async_bulk_commit_group / cp_async_bulk_wait_group). The DSL has no copy atom
    for the non-tensor bulk reduction, hence one line of PTX; one thread issues it."""
    llvm.inline_asm(
        None,
        [gmem_ptr.toint(loc=loc, ip=ip).ir_value(), smem_ptr.toint(loc=loc, ip=ip).ir_value(), Int32(num_bytes).ir_value(loc=loc, ip=ip)],
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], $2;",
        "l,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def cvt_pack_f32x2(a: Float32, b: Float32, fp16: bool, *, loc=None, ip=None) -> Int32:
    """``cvt.rn.{bf16,f16}x2.f32``: two fp32 values rounded to one 32-bit register of 16-bit halves (``a`` in the low
    half, the element order of a register fragment). Inline, so LLVM keeps it where it is written (pack_once)."""
    kind = "f16x2" if fp16 else "bf16x2"
    return Int32(
        llvm.inline_asm(
            Int32.mlir_type,
            [Float32(a).ir_value(loc=loc, ip=ip), Float32(b).ir_value(loc=loc, ip=ip)],
            f"cvt.rn.{kind}.f32 $0, $2, $1;",
            "=r,f,f",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
        )
    )


class NamedBarrierBwd(enum.IntEnum):
    EPILOGUE = 1  # consumers: dK / dV written to shared memory
    PDS = 2  # consumers: dS^T in shared memory is free / written
    DQ_TURN = 3  # consumers (deterministic): this CTA's turn to add into a query block's dQ / its adds are done
    DQ_FULL_WG1 = 4  # dq_tma / dq_bulk: consumer warpgroup 1 wrote its dQ partial to shared memory (warpgroup 2: DQ_FULL_WG1 + 1)
    DQ_EMPTY_WG1 = 6  # dq_writer: consumer warpgroup 1's dQ buffer was read by its last reduce-add (warpgroup 2: + 1)


class SdpaBwdKernelSm90(WarpSpecializedPlanSm90):
    """The main backward kernel: ``__init__`` holds the plan (the compile key), ``__call__`` prepares the launch."""

    def __init__(self, key: SdpaBwdKey):
        super().__init__(key)
        self.tile_m, self.tile_n, self.num_stages = tile_config(key.head_dim, key.head_dim_v)
        if key.tile_m80:
            self.tile_m = 80  # FA3 / FA4's d128 query block: each block's fixed costs spread over 25% more rows
        if key.tile_m128:
            self.tile_m = 128  # FA3's d64 query block: twice the rows per block's fixed costs, N = 128 S^T / dP^T WGMMAs

    @property
    def tile_readers(self) -> int:
        """persistent: threads that read each posted tile (the consumers and the dq_writer warp), the arrival count of
        the mailbox's empty barrier."""
        return self.num_mma_threads + (32 if self.key.dq_writer else 0)

    @property
    def dq_t(self) -> bool:
        """dQ computed transposed (dQ^T = K^T dS^T, the head dim split over the warpgroups) and staged through the
        128-byte swizzle for dq_tma's reduce-add: m80's (80 rows are no multiple of the 64-row WGMMA), or dq_t128's at
        64 rows (the same staging and 128-byte-row TMA boxes without the tile change, for the A/B)."""
        return bool(self.key.tile_m80 or self.key.dq_t128)

    @property
    def stats_at_use(self) -> bool:
        """Each column's lse_log2 / dpsum read where it is used, not into registers per query block (m80: 20 columns
        a thread, 40 registers less; m128: 32 columns, 64 registers less)."""
        return bool(self.key.tile_m80 or self.key.tile_m128)

    def _ds_layout(self):
        """dS^T (keys, queries), queries contiguous; ``num_stages`` buffers (indexed like Q's stage) with ds_double_buffer.
        ds_kmajor: dS (queries, keys), keys contiguous."""
        if self.key.ds_kmajor:
            if self.key.ds_double_buffer:
                return self._smem_layout(self.tile_m, self.tile_n, self.num_stages)
            return self._smem_layout(self.tile_m, self.tile_n)
        if self.key.ds_double_buffer:
            return self._smem_layout(self.tile_n, self.tile_m, self.num_stages)
        return self._smem_layout(self.tile_n, self.tile_m)

    def _dq_smem_layout(self):
        """dq_tma: the fp32 dQ partial of one query block, (tile_m, D / 2, warpgroup): per warpgroup, column blocks of
        8 fp32 (32 bytes, one TMA box each) with the 32-byte swizzle. The swizzle reads only row bits, so every 8-byte
        store of a thread's accumulator fragment is one base register plus an immediate (wider swizzles made the
        compiler keep 16 hoisted addresses live across the loop, and spill), and a warp's stores stay conflict-free."""
        half = self.head_dim // self.num_consumer_wg
        if self.dq_t:
            # dq_t (m80 / dq_t128): the transposed fragment's scalar stores (rows 2 apart per warp instruction) are
            # conflict-free only under the 128-byte swizzle; consumer_operands applies it per class of the fragment
            atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, Float32)
            if str(atom.inner) != "S<3,4,3>" or tuple(atom.outer.shape) != (8, 32):
                raise NotImplementedError(f"dq_t: unexpected 128-byte swizzle atom {atom} of the fp32 dQ buffer")
            return cute.tile_to_shape(atom, (self.tile_m, half, self.num_consumer_wg), order=(0, 1, 2))
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW32, Float32)
        if str(atom.inner) != "S<1,4,3>":  # the thread-constant swizzle shift in mma() relies on it
            raise NotImplementedError(f"dq_tma: unexpected 32-byte swizzle {atom.inner} of the fp32 dQ buffer")
        return cute.tile_to_shape(atom, (self.tile_m, half, self.num_consumer_wg), order=(0, 1, 2))

    def _dq_bulk_layout(self):
        """dq_bulk: the fp32 dQ partial of one query block in MMA-fragment order, (tile_m * D / 2, warpgroup), plain
        (see kernel_key.DQ_BULK_ROWS): each warpgroup's half is one contiguous bulk reduce-add. m128: (64 * D / 2,
        warpgroup, 2): each 64-row half of the block is one fragment-ordered accumulator block (the dQ MMA's second
        M-atom holds rows 64..127 in the first one's register order), so a warpgroup issues one reduce-add per half."""
        nwg = self.num_consumer_wg
        if self.tile_m == 2 * DQ_BULK_ROWS and self.key.tile_m128:
            return cute.make_layout((DQ_BULK_ROWS * self.head_dim // nwg, nwg, 2))
        if self.tile_m == M80_BULK_ROWS and self.key.tile_m80:
            # m80 + dq_bulk: each warpgroup's 64 x 80 dQ^T fragment (its half of the head dim), 40 registers a thread
            return cute.make_layout((self.tile_m * self.head_dim // nwg, nwg))
        if self.tile_m != DQ_BULK_ROWS:
            raise NotImplementedError(f"dq_bulk: the fragment-ordered accumulator assumes tile_m = {DQ_BULK_ROWS}, got {self.tile_m}")
        return cute.make_layout((self.tile_m * self.head_dim // nwg, nwg))

    def _dq_rows_layout(self):
        """dq_rows: the m128 staging buffer (``_dq_bulk_layout``: (64 D / 2, warpgroup, half)) as the consumers' fragment
        copy sees it, the last two modes swapped: the thread's warpgroup mode picks 64-row block w (the buffer's
        (None, 0, w) slice, ``2 * 64 D / 2`` floats), the copy's repeat mode the block's halves."""
        return cute.select(self._dq_bulk_layout(), mode=[0, 2, 1])

    def _dq_bulk_copy(self):
        """dq_bulk: the tiled copy of a consumer thread's dQ accumulator into (or, in the postprocess, out of) the
        fragment order: thread ``t`` of warpgroup ``w`` moves 16-byte groups at ``w * half + 512 k + 4 t``."""
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), Float32, num_bits_per_copy=128)
        return cute.make_tiled_copy_tv(atom, cute.make_layout((self.threads_per_wg, self.num_consumer_wg)), cute.make_layout(4))

    def _tiled_mmas(self):
        """The (S^T / dP^T, dK, dV, dQ) tiled MMAs of the consumers (host-side construction)."""
        D, Dv = self.head_dim, self.head_dim_v
        K_MAJOR, MN_MAJOR = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
        # S^T = K Q^T and dP^T = V dO^T: M = keys (64 per consumer warpgroup), N = queries.
        tiled_mma_SdP = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, K_MAJOR, Float32, atom_layout_mnk=(self.tile_n // 64, 1, 1), tiler_mn=(64, self.tile_m)
        )
        # dK += dS^T Q and dV += P^T dO: A from registers, B = Q^T / dO^T (MN-major views of sQ / sdO).
        tiled_mma_dK = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(self.tile_n // 64, 1, 1), tiler_mn=(64, D),
            a_source=warpgroup.OperandSource.RMEM,
        )  # fmt: skip
        tiled_mma_dV = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(self.tile_n // 64, 1, 1), tiler_mn=(64, Dv),
            a_source=warpgroup.OperandSource.RMEM,
        )  # fmt: skip
        if self.dq_t:
            # dQ^T = K^T dS^T (m80: tile_m = 80 is no multiple of the 64-row WGMMA): A = K^T, B = dS^T viewed (queries,
            # keys), both MN-major; M = the head dim, split over the warpgroups.
            tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1), tiler_mn=(64, self.tile_m)
            )
            return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ
        if self.key.dq_rows:
            # dq_rows (m128): dQ = dS K with the 128 rows split over the warpgroups, each the whole head dim (64 x D)
            tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, K_MAJOR if self.key.ds_kmajor else MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1),
                tiler_mn=(64, D),
            )  # fmt: skip
            return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ
        # dQ = dS K: A = dS (MN-major view of sdS^T), B = K^T (MN-major view of sK); the head dim is split over the warpgroups.
        if self.key.ds_kmajor:
            # ds_kmajor: A = sdS itself (keys contiguous: K-major)
            tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, K_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, self.num_consumer_wg, 1), tiler_mn=(64, D // self.num_consumer_wg)
            )
            return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ
        tiled_mma_dQ = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, self.num_consumer_wg, 1), tiler_mn=(64, D // self.num_consumer_wg)
        )
        return tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ

    def _dq_order_mma(self):
        """The dQ MMA whose fragment defines dq_bulk's accumulator order (the postprocess reads it): the main kernel's,
        except under dq_rows, whose row-split 64 x D fragments stage the order of the head-dim-split MMA (a 64 x D
        fragment's registers 16..31 are the second half's 0..15), which is returned then."""
        if self.key.dq_rows:
            MN_MAJOR = warpgroup.OperandMajorMode.MN
            return sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, MN_MAJOR, MN_MAJOR, Float32, atom_layout_mnk=(1, self.num_consumer_wg, 1),
                tiler_mn=(64, self.head_dim // self.num_consumer_wg),
            )  # fmt: skip
        return self._tiled_mmas()[3]

    def _k_atom_cols(self) -> int:
        """Columns of the swizzle atom of sK: dQ = dS K reads K^T split over the warpgroups along D, so the atom must
        divide D / 2 (dq_rows: each warpgroup reads all of K^T, the atom spans D)."""
        if self.key.dq_rows:
            return self.head_dim
        return self.head_dim // self.num_consumer_wg

    def _q_do_atom_cols(self) -> tuple[int | None, int | None]:
        """Columns of the swizzle atoms of sQ and sdO (None: the whole head dim): the dK / dV GEMMs read them whole here."""
        return None, None

    def _dkv_smem_view(self, s):
        """The view of sK / sV (keys, head dim) in the dK / dV accumulators' (M, N) coordinates, which the epilogue's
        stmatrix writes through: the buffer itself here (M = keys)."""
        return s

    def _shared_storage(self, sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout):
        """The CTA's shared memory (host-side construction of a ``cute.struct``): the verified layout, then the
        variants' extra buffers at the end (dQ partial, lse_log2 / dpsum stages)."""
        fields = {
            "mbar_q": cute.struct.MemRange[cutlass.Int64, self.num_stages * 2],
            "mbar_do": cute.struct.MemRange[cutlass.Int64, self.num_stages * 2],
            "mbar_kv": cute.struct.MemRange[cutlass.Int64, 2],
            "smem_q": cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024],
            "smem_do": cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sdO_layout)], 1024],
            "smem_k": cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sK_layout)], 1024],
            "smem_v": cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sV_layout)], 1024],
            "smem_ds": cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sdS_layout)], 1024],
        }
        if self.key.dq_tma or self.key.dq_bulk:
            fields["smem_dq"] = cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(sdQ_layout)], 1024]
        if self.key.stats_tma:
            fields["smem_lse"] = cute.struct.Align[cute.struct.MemRange[Float32, self.tile_m * self.num_stages], 128]
            fields["smem_dpsum"] = cute.struct.Align[cute.struct.MemRange[Float32, self.tile_m * self.num_stages], 128]
        if self.key.persistent:  # the tile mailbox: (full, empty) mbarriers and the posted tile index
            fields["mbar_tile"] = cute.struct.MemRange[cutlass.Int64, 2]
            fields["tile_slot"] = cute.struct.Align[cute.struct.MemRange[Int32, 4], 16]
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    # ------------------------------------------------------------------------------------------------
    # host side
    # ------------------------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        do_ptr: cute.Pointer,
        dk_ptr: cute.Pointer,
        dv_ptr: cute.Pointer,
        lse2_ptr: cute.Pointer,
        dpsum_ptr: cute.Pointer,
        dqacc_ptr: cute.Pointer,
        sem_ptr: cute.Pointer | None,  # deterministic: int32 turn counters (B, H, S_pad / tile_m), zeroed by the preprocess
        cu_q_ptr: cute.Pointer | None,  # THD varlen: int32 cumulative lengths (B + 1)
        cu_k_ptr: cute.Pointer | None,
        batch: Int32,
        heads: Int32,
        heads_kv: Int32,
        seqlen_q: Int32,  # S_q (dense) or T_q (varlen: total query tokens)
        seqlen_k: Int32,  # S_kv or T_kv
        max_seqlen_k: Int32,  # grid extent along keys (= S_kv for dense)
        seqlen_pad: Int32,  # rows of the per-(batch, head) scratch (a multiple of PREPOST_ROWS; varlen: of all sequences)
        group_heads: Int32,  # (kv head, batch) pairs per L2 group of the tile order
        resident_ctas: Int32,  # kv_prefetch, persistent: CTAs resident at once (SM count x 1); unused otherwise
        q_strides: tuple[Int64, Int64, Int64],  # (batch, head, seq) in elements
        k_strides: tuple[Int64, Int64, Int64],
        v_strides: tuple[Int64, Int64, Int64],
        do_strides: tuple[Int64, Int64, Int64],
        dk_strides: tuple[Int64, Int64, Int64],
        dv_strides: tuple[Int64, Int64, Int64],
        scale_log2: Float32,
        scale: Float32,
        window_left: Int32,
        window_right: Int32,
        stream: cuda.CUstream,
    ):
        D, Dv = self.head_dim, self.head_dim_v
        div = 128 // self.dtype.width

        def strides(s):
            return tuple(cute.assume(x, divby=div) for x in s)

        qs, ks, vs, dos = strides(q_strides), strides(k_strides), strides(v_strides), strides(do_strides)
        dks, dvs = strides(dk_strides), strides(dv_strides)
        sp = cute.assume(seqlen_pad, divby=PREPOST_ROWS)
        # varlen: one "batch" of packed tokens; each CTA offsets by its sequence's start (cu_seqlens) on the device.
        bt = batch if const_expr(not self.key.varlen) else Int32(1)
        mQ = cute.make_tensor(q_ptr, cute.make_layout((seqlen_q, D, heads, bt), stride=(qs[2], 1, qs[1], qs[0])))
        mK = cute.make_tensor(k_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(ks[2], 1, ks[1], ks[0])))
        mV = cute.make_tensor(v_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(vs[2], 1, vs[1], vs[0])))
        mdO = cute.make_tensor(do_ptr, cute.make_layout((seqlen_q, Dv, heads, bt), stride=(dos[2], 1, dos[1], dos[0])))
        mdK = cute.make_tensor(dk_ptr, cute.make_layout((seqlen_k, D, heads_kv, bt), stride=(dks[2], 1, dks[1], dks[0])))
        mdV = cute.make_tensor(dv_ptr, cute.make_layout((seqlen_k, Dv, heads_kv, bt), stride=(dvs[2], 1, dvs[1], dvs[0])))
        mLSE2 = cute.make_tensor(lse2_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mDpsum = cute.make_tensor(dpsum_ptr, cute.make_layout((sp, heads, bt), stride=(1, sp, sp * heads)))
        mdQacc = cute.make_tensor(dqacc_ptr, cute.make_layout((sp, D, heads, bt), stride=(D, 1, sp * D, sp * D * heads)))
        mSem = None
        if const_expr(self.key.deterministic):
            ns = sp // self.tile_m
            mSem = cute.make_tensor(sem_ptr, cute.make_layout((ns, heads, bt), stride=(1, ns, ns * heads)))
        if const_expr(self.key.persistent):
            mSem = cute.make_tensor(sem_ptr, cute.make_layout((1,)))  # the tile counter (zeroed by the preprocess)
        mFlags = None
        if const_expr(self.key.dq_first_store):  # one first-store flag per 64 scratch rows (zeroed by the preprocess)
            mFlags = flags_tensor(sem_ptr + dq_flags_offset(self.key.persistent), sp, heads, bt)
        mCuQ, mCuK = cu_seqlens_tensors(cu_q_ptr, cu_k_ptr, batch, self.key.varlen)

        tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ = self._tiled_mmas()
        q_cols, do_cols = self._q_do_atom_cols()
        sQ_layout = self._smem_layout(self.tile_m, D, self.num_stages, atom_cols=q_cols)
        sdO_layout = self._smem_layout(self.tile_m, Dv, self.num_stages, atom_cols=do_cols)
        sK_layout = self._smem_layout(self.tile_n, D, atom_cols=self._k_atom_cols())
        sV_layout = self._smem_layout(self.tile_n, Dv)
        sdS_layout = self._ds_layout()  # dS^T: (keys, queries), queries contiguous
        sdQ_layout = None
        tma_atom_dQ, tma_dQacc = None, None
        if const_expr(self.key.dq_tma):
            sdQ_layout = self._dq_smem_layout()
            tma_atom_dQ, tma_dQacc = cpasync.make_tiled_tma_atom(
                cpasync.CopyReduceBulkTensorTileS2GOp(), mdQacc, cute.select(sdQ_layout, mode=[0, 1]), (self.tile_m, D // self.num_consumer_wg)
            )
        if const_expr(self.key.dq_bulk):
            sdQ_layout = self._dq_bulk_layout()
        SharedStorage = self._shared_storage(sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout)

        g2s, s2g = cpasync.CopyBulkTensorTileG2SOp(), cpasync.CopyBulkTensorTileS2GOp()
        tma_atom_Q, tma_Q = cpasync.make_tiled_tma_atom(g2s, mQ, cute.select(sQ_layout, mode=[0, 1]), (self.tile_m, D))
        tma_atom_dO, tma_dO = cpasync.make_tiled_tma_atom(g2s, mdO, cute.select(sdO_layout, mode=[0, 1]), (self.tile_m, Dv))
        tma_atom_K, tma_K = cpasync.make_tiled_tma_atom(g2s, mK, sK_layout, (self.tile_n, D))
        tma_atom_V, tma_V = cpasync.make_tiled_tma_atom(g2s, mV, sV_layout, (self.tile_n, Dv))
        tma_atom_dK, tma_dK = cpasync.make_tiled_tma_atom(s2g, mdK, sK_layout, (self.tile_n, D))
        tma_atom_dV, tma_dV = cpasync.make_tiled_tma_atom(s2g, mdV, sV_layout, (self.tile_n, Dv))
        tx_q = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        tx_do = cute.size_in_bytes(self.dtype, cute.select(sdO_layout, mode=[0, 1]))
        tx_kv = cute.size_in_bytes(self.dtype, sK_layout) + cute.size_in_bytes(self.dtype, sV_layout)
        if const_expr(self.key.stats_tma):
            tx_q += self.tile_m * 4  # + lse_log2 rows
            tx_do += self.tile_m * 4  # + dpsum rows

        num_n_blocks = (max_seqlen_k + self.tile_n - 1) // self.tile_n
        grid = SingleTileScheduler.grid(
            num_n_blocks, heads_kv, batch, group_heads, self.key.grouped_grid
        )  # 3-D when group_heads = 1 (grouped_grid: or divides)
        if const_expr(self.key.persistent):  # at most one CTA per SM, each walking tiles (roles_persistent)
            grid = (cutlass.min(num_n_blocks * heads_kv * batch, resident_ctas), 1, 1)
        self.kernel(
            tma_Q, tma_K, tma_V, tma_dO, tma_dK, tma_dV, mdK, mdV, mLSE2, mDpsum, mdQacc, tma_dQacc, mSem, mFlags, mCuQ, mCuK,
            tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, tma_atom_dQ,
            seqlen_q, seqlen_k, num_n_blocks, heads_kv, batch, group_heads, resident_ctas if const_expr(self.key.kv_prefetch or self.key.persistent) else None,
            scale_log2, scale, window_left, window_right, sQ_layout, sdO_layout, sK_layout, sV_layout, sdS_layout, sdQ_layout,
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ,
            tx_q, tx_do, tx_kv, SharedStorage,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], smem=SharedStorage.size_in_bytes(), stream=stream, min_blocks_per_mp=1, use_pdl=self.key.pdl)  # fmt: skip

    # ------------------------------------------------------------------------------------------------
    # device side
    # ------------------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mdK_tma: cute.Tensor,
        mdV_tma: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        mSem: cute.Tensor | None,
        mFlags: cute.Tensor | None,
        mCuQ: cute.Tensor | None,
        mCuK: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        tma_atom_dQ: cute.CopyAtom | None,
        seqlen_q_static: Int32,
        seqlen_k_static: Int32,
        num_n_blocks: Int32,
        num_heads_kv: Int32,
        num_batch: Int32,
        group_heads: Int32,
        resident_ctas: Int32 | None,
        scale_log2: Float32,
        scale: Float32,
        window_left: Int32,
        window_right: Int32,
        sQ_layout: cute.ComposedLayout,
        sdO_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        sdS_layout: cute.ComposedLayout,
        sdQ_layout: cute.ComposedLayout | cute.Layout | None,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        tx_q: cutlass.Constexpr[int],
        tx_do: cutlass.Constexpr[int],
        tx_kv: cutlass.Constexpr[int],
        SharedStorage: cutlass.Constexpr,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        prefetch_tma_descriptors(warp_idx, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, tma_atom_dQ)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        num_consumer_warps = self.num_mma_threads // 32
        pipeline_q = make_tma_pipeline(storage.mbar_q.data_ptr(), self.num_stages, num_consumer_warps, tx_q)
        pipeline_do = make_tma_pipeline(storage.mbar_do.data_ptr(), self.num_stages, num_consumer_warps, tx_do)
        pipeline_kv = make_tma_pipeline(storage.mbar_kv.data_ptr(), 1, num_consumer_warps, tx_kv)
        mailbox = None
        if const_expr(self.key.persistent):
            mailbox = (storage.mbar_tile.data_ptr(), storage.tile_slot.get_tensor(cute.make_layout((4,))))
            if warp_idx == 0:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_init(mailbox[0], 1)  # full: the producer's post
                    cute.arch.mbarrier_init(mailbox[0] + 1, self.tile_readers)  # empty: every reading thread
        cute.arch.mbarrier_init_fence()

        sQ = storage.smem_q.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sdO = storage.smem_do.get_tensor(sdO_layout.outer, swizzle=sdO_layout.inner)
        sK = storage.smem_k.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.smem_v.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        sdSt = storage.smem_ds.get_tensor(sdS_layout.outer, swizzle=sdS_layout.inner)
        # variants' buffers (None when compiled out)
        sdQ, sdQ_lin, sLSE, sDpsum = None, None, None, None
        if const_expr(self.key.dq_tma):
            sdQ = storage.smem_dq.get_tensor(sdQ_layout.outer, swizzle=sdQ_layout.inner)
            sdQ_lin = storage.smem_dq.get_tensor(sdQ_layout.outer)  # the same buffer, unswizzled offsets
        if const_expr(self.key.dq_bulk):
            sdQ = storage.smem_dq.get_tensor(sdQ_layout)  # fragment order, no swizzle
            sdQ_lin = sdQ
        if const_expr(self.key.stats_tma):
            sLSE = storage.smem_lse.get_tensor(cute.make_layout((self.tile_m, self.num_stages)))
            sDpsum = storage.smem_dpsum.get_tensor(cute.make_layout((self.tile_m, self.num_stages)))

        # Longest first is the natural order for causal top-left: key block 0 sees every query block.
        n_block, head_kv, batch = SingleTileScheduler(num_n_blocks, num_heads_kv, num_batch, group_heads, False, grouped_grid=self.key.grouped_grid).tile()
        kv_next = None
        if const_expr(self.key.kv_prefetch):
            kv_next = (num_n_blocks, num_heads_kv, num_batch, group_heads, resident_ctas)
        # Per-sequence extents and offsets (varlen reads them from cu_seqlens on the device). ``pad_q`` is the
        # sequence's first row in the scratch: its padded rows never overlap the next sequence's.
        seqlen_q, seqlen_k, offset_q, offset_k = sequence_extents(mCuQ, mCuK, batch, seqlen_q_static, seqlen_k_static, self.key.varlen)
        pad_q = Int32(0)
        batch_t = batch
        if const_expr(self.key.varlen):
            pad_q = (offset_q + batch * PREPOST_ROWS) // PREPOST_ROWS * PREPOST_ROWS
            batch_t = Int32(0)
        mask_offset = Int32(0)
        if const_expr(self.key.bottom_right):
            mask_offset = seqlen_k - seqlen_q
        mask = MaskInfoBwd(self.tile_m, self.tile_n, self.key.mask_right, self.key.mask_left, seqlen_q, seqlen_k, mask_offset, window_left, window_right)
        m_block_min, m_block_max = mask.m_block_range(n_block)

        cute.arch.sync_threads()  # mbarrier init visible to every warp

        if const_expr(self.key.persistent):
            staging = self.dkv_staging(storage.smem_ds.data_ptr(), sdS_layout, sK_layout, sV_layout)
            self.roles_persistent(
                mQ, mK, mV, mdO, mdK_tma, mdV_tma, mLSE2, mDpsum, mdQacc, mdQacc_tma, mSem, sQ, sK, sV, sdO, sdSt, sdQ, sdQ_lin, sLSE, sDpsum,
                tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, tma_atom_dQ, pipeline_q, pipeline_do, pipeline_kv,
                tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, scale_log2, scale, mask, mailbox,
                (num_n_blocks, num_heads_kv, num_batch, group_heads), staging, mFlags,
            )  # fmt: skip
        elif const_expr(not self.key.varlen):
            self.roles(
                mQ, mK, mV, mdO, mdK_tma, mdV_tma, mLSE2, mDpsum, mdQacc, mdQacc_tma, mSem, sQ, sK, sV, sdO, sdSt, sdQ, sdQ_lin, sLSE, sDpsum,
                tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, tma_atom_dQ, pipeline_q, pipeline_do, pipeline_kv,
                tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, scale_log2, scale, mask, n_block, head_kv, batch_t,
                offset_q, offset_k, pad_q, m_block_min, m_block_max, kv_next, mFlags,
            )  # fmt: skip
        else:
            if n_block * self.tile_n < seqlen_k:  # key blocks past this sequence's end do nothing
                self.roles(
                    mQ, mK, mV, mdO, mdK, mdV, mLSE2, mDpsum, mdQacc, mdQacc_tma, mSem, sQ, sK, sV, sdO, sdSt, sdQ, sdQ_lin, sLSE, sDpsum,
                    tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO, tma_atom_dK, tma_atom_dV, tma_atom_dQ, pipeline_q, pipeline_do, pipeline_kv,
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, scale_log2, scale, mask, n_block, head_kv, batch_t,
                    offset_q, offset_k, pad_q, m_block_min, m_block_max, None, mFlags,
                )  # fmt: skip
            if const_expr(self.key.pdl):
                if n_block * self.tile_n >= seqlen_k:
                    cute.arch.griddepcontrol_wait()  # pdl: no CTA completes before the preprocess did (the postprocess waits on this grid only)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def roles(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        mSem: cute.Tensor | None,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sdSt: cute.Tensor,
        sdQ: cute.Tensor | None,
        sdQ_lin: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        tma_atom_dQ: cute.CopyAtom | None,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        scale_log2: Float32,
        scale: Float32,
        mask: MaskInfoBwd,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_q: Int32,
        offset_k: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
        kv_next=None,
        mFlags: cute.Tensor | None = None,
    ):
        """Warp roles: the producer warp and the two consumer warpgroups (``mdK`` / ``mdV`` are the TMA tensors for
        dense plans, the plain global tensors for varlen ones)."""
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.num_producer_regs)
            if warp_idx == 0:
                self.load(
                    mQ, mK, mV, mdO, mLSE2, mDpsum, sQ, sK, sV, sdO, sLSE, sDpsum, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO,
                    pipeline_q, pipeline_do, pipeline_kv, n_block, head_kv, batch, offset_q, offset_k, pad_q, m_block_min, m_block_max, kv_next,
                )  # fmt: skip
            if const_expr(self.key.dq_writer):
                if warp_idx == 1:
                    if const_expr(self.key.pdl):
                        cute.arch.griddepcontrol_wait()  # pdl: the preprocess zeroed the dQ accumulator
                    self.dq_writer_loop(mLSE2, mDpsum, mdQacc, mdQacc_tma, sdQ, tma_atom_dQ, head_kv, batch, pad_q, m_block_min, m_block_max, mFlags)
        else:
            cute.arch.setmaxregister_increase(self.num_mma_regs)
            if const_expr(self.key.pdl):
                # pdl: lse_log2 / dpsum, the dQ accumulator and the turn counters are the preprocess's
                cute.arch.griddepcontrol_wait()
            tidx = cute.arch.thread_idx()[0] - self.threads_per_wg
            self.mma(
                tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, mdK, mdV, mLSE2, mDpsum, mdQacc, mdQacc_tma, mSem,
                sQ, sK, sV, sdO, sdSt, sdQ, sdQ_lin, sLSE, sDpsum, tma_atom_dK, tma_atom_dV, tma_atom_dQ, pipeline_q, pipeline_do, pipeline_kv,
                tidx, scale_log2, scale, mask, n_block, head_kv, batch, offset_k, pad_q, m_block_min, m_block_max,
            )  # fmt: skip
            if const_expr(self.key.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # pdl: the postprocess may launch (it waits for this grid)

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)

    @cute.jit
    def roles_persistent(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        mCounter: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sdSt: cute.Tensor,
        sdQ: cute.Tensor | None,
        sdQ_lin: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        tma_atom_dQ: cute.CopyAtom | None,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        scale_log2: Float32,
        scale: Float32,
        mask: MaskInfoBwd,
        mailbox,
        tiles: tuple[Int32, Int32, Int32, Int32],
        staging,
        mFlags: cute.Tensor | None = None,
    ):
        """persistent (dense): the warp roles of :meth:`roles`, each walking the CTA's tiles. The producer warp owns the
        walk: the CTA's block index first, then ``atomicAdd(counter, 1) + grid size`` (:meth:`next_tile`), each tile
        posted to the mailbox (:meth:`post_tile`) before its loads; the consumers and the dq_writer warp read each post
        (:meth:`read_tile`) and stop at the first index past the last tile, which the producer posts last. The pipeline
        states carry over tiles (:meth:`load`, :meth:`mma`); the dense mask is the same for every tile. ``tiles``: the
        tile scheduler's (key blocks, kv heads, batch, group_heads); ``staging``: :meth:`dkv_staging`'s."""
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        total = tiles[0] * tiles[1] * tiles[2]
        zero = Int32(0)
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.num_producer_regs)
            if warp_idx == 0:
                state, kv_state = producer_state(self.num_stages), producer_state(1)
                phase = Int32(1)  # the empty barrier's parity to wait for: a fresh barrier's preceding phase counts as done
                tile = Int32(cute.arch.block_idx()[0])
                while tile < total:
                    self.post_tile(mailbox, tile, phase)
                    phase = phase ^ 1
                    n_block, head_kv, batch, m_block_min, m_block_max = self.tile_work(tiles, tile, mask)
                    state, kv_state = self.load(
                        mQ, mK, mV, mdO, mLSE2, mDpsum, sQ, sK, sV, sdO, sLSE, sDpsum, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_dO,
                        pipeline_q, pipeline_do, pipeline_kv, n_block, head_kv, batch, zero, zero, zero, m_block_min, m_block_max, None,
                        state, kv_state,
                    )  # fmt: skip
                    tile = self.next_tile(mCounter)
                self.post_tile(mailbox, tile, phase)  # past the last tile: the readers stop
            if const_expr(self.key.dq_writer):
                if warp_idx == 1:
                    phase = Int32(0)
                    tile = self.read_tile(mailbox, phase)
                    while tile < total:
                        phase = phase ^ 1
                        n_block, head_kv, batch, m_block_min, m_block_max = self.tile_work(tiles, tile, mask)
                        self.dq_writer_loop(mLSE2, mDpsum, mdQacc, mdQacc_tma, sdQ, tma_atom_dQ, head_kv, batch, zero, m_block_min, m_block_max, mFlags)
                        tile = self.read_tile(mailbox, phase)
        else:
            cute.arch.setmaxregister_increase(self.num_mma_regs)
            tidx = cute.arch.thread_idx()[0] - self.threads_per_wg
            state, kv_state = consumer_state(self.num_stages), consumer_state(1)
            phase = Int32(0)
            tile = self.read_tile(mailbox, phase)
            while tile < total:
                phase = phase ^ 1
                n_block, head_kv, batch, m_block_min, m_block_max = self.tile_work(tiles, tile, mask)
                state, kv_state = self.mma(
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, mdK, mdV, mLSE2, mDpsum, mdQacc, mdQacc_tma, None,
                    sQ, sK, sV, sdO, sdSt, sdQ, sdQ_lin, sLSE, sDpsum, tma_atom_dK, tma_atom_dV, tma_atom_dQ, pipeline_q, pipeline_do, pipeline_kv,
                    tidx, scale_log2, scale, mask, n_block, head_kv, batch, zero, zero, m_block_min, m_block_max, state, kv_state, staging,
                )  # fmt: skip
                tile = self.read_tile(mailbox, phase)

    def dkv_staging(self, ds_ptr: cute.Pointer, sdS_layout, sK_layout, sV_layout):
        """persistent: where the epilogue stages dK / dV for their TMA stores: the dS^T buffers (free once every
        consumer is past its last dQ GEMM), so the tile's K / V stage is released right after its last query block and
        the next tile's K / V load under the epilogue. ``(sdK, sdV, one_round)``: views with sK's / sV's layouts (the
        TMA atoms'); ``one_round``: both fit side by side (else dV is staged after dK's store has read the buffer)."""
        ds, k, v = cute.cosize(sdS_layout.outer), cute.cosize(sK_layout.outer), cute.cosize(sV_layout.outer)
        assert ds >= max(k, v), "persistent: the dS^T buffers hold dK / dV"
        one_round = ds >= k + v
        sdK = cute.make_tensor(cute.recast_ptr(ds_ptr, sK_layout.inner, dtype=self.dtype), sK_layout.outer)
        sdV = cute.make_tensor(cute.recast_ptr(ds_ptr + (k if one_round else 0), sV_layout.inner, dtype=self.dtype), sV_layout.outer)
        return sdK, sdV, one_round

    @cute.jit
    def tile_work(self, tiles, tile: Int32, mask: MaskInfoBwd):
        """persistent: ``(n_block, head_kv, batch, m_block_min, m_block_max)`` of linear tile ``tile`` (the order of the
        non-persistent grid: :meth:`SingleTileScheduler.tile_at`)."""
        n_block, head_kv, batch = SingleTileScheduler(tiles[0], tiles[1], tiles[2], tiles[3], False).tile_at(tile)
        m_block_min, m_block_max = mask.m_block_range(n_block)
        return n_block, head_kv, batch, m_block_min, m_block_max

    @cute.jit
    def next_tile(self, mCounter: cute.Tensor) -> Int32:
        """persistent, producer warp: the CTA's next tile, ``atomicAdd(counter, 1)`` (lane 0's, broadcast) plus the grid
        size (the first ``grid size`` tiles are the CTAs' block indices)."""
        ticket = Int32(0)
        if cute.arch.lane_idx() == 0:
            ticket = cute.arch.atomic_add(mCounter.iterator, Int32(1))
        return cute.arch.shuffle_sync(ticket, 0) + Int32(cute.arch.grid_dim()[0])

    @cute.jit
    def post_tile(self, mailbox, tile: Int32, phase: Int32):
        """persistent, producer warp: once every reader has read the previous post (the empty barrier's ``phase``), one
        lane writes ``tile`` to the slot and arrives on the full barrier (release: the slot is visible to its waiters)."""
        cute.arch.mbarrier_wait(mailbox[0] + 1, phase)
        with cute.arch.elect_one():
            mailbox[1][0] = tile
            cute.arch.mbarrier_arrive(mailbox[0])

    @cute.jit
    def read_tile(self, mailbox, phase: Int32) -> Int32:
        """persistent, every reading thread: wait for the post of ``phase``, read the slot, arrive on the empty barrier."""
        cute.arch.mbarrier_wait(mailbox[0], phase)
        tile = mailbox[1][0]
        cute.arch.mbarrier_arrive(mailbox[0] + 1)
        return tile

    @cute.jit
    def load(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mdO: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_Q: cute.CopyAtom,
        tma_atom_K: cute.CopyAtom,
        tma_atom_V: cute.CopyAtom,
        tma_atom_dO: cute.CopyAtom,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_q: Int32,
        offset_k: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
        kv_next=None,
        state=None,
        kv_state=None,
    ):
        """Producer warp: K and V once, then (Q, dO) of every query block of every query head of the group (with
        stats_tma also the block's lse_log2 / dpsum rows, on Q's / dO's barrier of the same stage). kv_with_q: K on the
        first Q stage's barrier and V on the first dO stage's (the CTA's first query block of its first head only), not
        on pipeline_kv; a key block without query blocks loads neither. pdl: ``griddepcontrol.wait`` (for the
        preprocess's lse_log2 / dpsum) right after K / V are issued (kv_with_q: after K). kv_prefetch (``kv_next`` =
        (the tile scheduler's arguments, resident CTAs)): with the CTA's last Q / dO load, L2 prefetches of the K / V of the
        tile ``resident CTAs`` ahead (:meth:`prefetch_next_kv`). persistent: ``state`` / ``kv_state`` are the producer's
        Q / dO ring and K / V stage states carried over the CTA's tiles, returned advanced."""
        D, Dv = self.head_dim, self.head_dim_v
        mK_cur = mK[None, None, head_kv, batch]
        mV_cur = mV[None, None, head_kv, batch]
        if const_expr(self.key.varlen):
            mK_cur = cute.domain_offset((offset_k, 0), mK_cur)
            mV_cur = cute.domain_offset((offset_k, 0), mV_cur)
        gK = cute.local_tile(mK_cur, (self.tile_n, D), (n_block, 0))
        gV = cute.local_tile(mV_cur, (self.tile_n, Dv), (n_block, 0))
        tKsK, tKgK = cpasync.tma_partition(tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2))
        tVsV, tVgV = cpasync.tma_partition(tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2))
        kvq = self.key.kv_with_q
        if const_expr(not kvq):
            if const_expr(kv_state is None):
                kv_state = producer_state(1)
            pipeline_kv.producer_acquire(kv_state)
            cute.copy(tma_atom_K, tKgK, tKsK, tma_bar_ptr=pipeline_kv.producer_get_barrier(kv_state))
            cute.copy(tma_atom_V, tVgV, tVsV, tma_bar_ptr=pipeline_kv.producer_get_barrier(kv_state))
            if const_expr(self.key.persistent):
                kv_state.advance()
            if const_expr(self.key.pdl):
                cute.arch.griddepcontrol_wait()  # pdl: K / V (inputs) in flight before the wait for the preprocess
        # kv_with_q: K's / V's transaction bytes (the whole TMA box, as the hardware counts it, zero fill included)
        tx_k = self.tile_n * D * self.dtype.width // 8
        tx_v = self.tile_n * Dv * self.dtype.width // 8

        if const_expr(state is None):
            state = producer_state(self.num_stages)
        stats_atom = None
        if const_expr(self.key.stats_tma):
            stats_atom = cute.make_copy_atom(cpasync.CopyBulkG2SOp(), Float32)
        num_m = cutlass.max(m_block_max - m_block_min, 0)
        G = self.key.qhead_per_kvhead
        for g in cutlass.range(G, unroll=1):
            head = head_kv * G + g
            mQ_cur = mQ[None, None, head, batch]
            mdO_cur = mdO[None, None, head, batch]
            if const_expr(self.key.varlen):
                mQ_cur = cute.domain_offset((offset_q, 0), mQ_cur)
                mdO_cur = cute.domain_offset((offset_q, 0), mdO_cur)
            gQ = cute.local_tile(mQ_cur, (self.tile_m, D), (None, 0))
            gdO = cute.local_tile(mdO_cur, (self.tile_m, Dv), (None, 0))
            tQsQ, tQgQ = cpasync.tma_partition(tma_atom_Q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2))
            tdOsdO, tdOgdO = cpasync.tma_partition(tma_atom_dO, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2))
            gLSE, gDpsum = None, None
            if const_expr(self.key.stats_tma):
                mLSE2_cur = mLSE2[None, head, batch]
                mDpsum_cur = mDpsum[None, head, batch]
                if const_expr(self.key.varlen):
                    mLSE2_cur = cute.domain_offset((pad_q,), mLSE2_cur)
                    mDpsum_cur = cute.domain_offset((pad_q,), mDpsum_cur)
                gLSE = cute.local_tile(mLSE2_cur, (self.tile_m,), (None,))
                gDpsum = cute.local_tile(mDpsum_cur, (self.tile_m,), (None,))
            for i in cutlass.range(num_m, unroll=1):
                m_block = m_block_min + i
                if const_expr(self.key.dkv_early):
                    # dkv_early (split-D, no stats_tma): dO is freed first (warpgroup 2's dP^T and warpgroup 1's early
                    # dV read it; Q waits for warpgroup 2's dK), so its load goes first
                    pipeline_do.producer_acquire(state)
                    cute.copy(tma_atom_dO, tdOgdO[None, m_block], tdOsdO[None, state.index], tma_bar_ptr=pipeline_do.producer_get_barrier(state))
                if const_expr(kvq):
                    if g + i == 0:
                        # kv_with_q: K rides on the CTA's first Q stage (FA4's order K, Q0, V, dO0). The stage is in its
                        # first phase (free) and its one producer arrival is still pending (producer_acquire below), so
                        # the phase cannot complete on K's bytes alone, whenever K lands
                        with cute.arch.elect_one():
                            cute.arch.mbarrier_expect_tx(pipeline_q.producer_get_barrier(state), tx_k)
                        cute.copy(tma_atom_K, tKgK, tKsK, tma_bar_ptr=pipeline_q.producer_get_barrier(state))
                        if const_expr(self.key.pdl):
                            cute.arch.griddepcontrol_wait()  # pdl: K in flight before the wait for the preprocess
                pipeline_q.producer_acquire(state)
                cute.copy(tma_atom_Q, tQgQ[None, m_block], tQsQ[None, state.index], tma_bar_ptr=pipeline_q.producer_get_barrier(state))
                if const_expr(self.key.stats_tma):
                    # the scratch rows are padded to PREPOST_ROWS, so a whole block of rows is always in bounds
                    with cute.arch.elect_one():
                        cute.copy(stats_atom, gLSE[None, m_block], sLSE[None, state.index], mbar_ptr=pipeline_q.producer_get_barrier(state))
                if const_expr(not self.key.dkv_early):
                    if const_expr(kvq):
                        if g + i == 0:
                            # kv_with_q: V rides on the CTA's first dO stage (the same argument)
                            with cute.arch.elect_one():
                                cute.arch.mbarrier_expect_tx(pipeline_do.producer_get_barrier(state), tx_v)
                            cute.copy(tma_atom_V, tVgV, tVsV, tma_bar_ptr=pipeline_do.producer_get_barrier(state))
                    pipeline_do.producer_acquire(state)
                    cute.copy(tma_atom_dO, tdOgdO[None, m_block], tdOsdO[None, state.index], tma_bar_ptr=pipeline_do.producer_get_barrier(state))
                if const_expr(self.key.stats_tma):
                    with cute.arch.elect_one():
                        cute.copy(stats_atom, gDpsum[None, m_block], sDpsum[None, state.index], mbar_ptr=pipeline_do.producer_get_barrier(state))
                if const_expr(kv_next is not None):
                    if g == G - 1 and i == num_m - 1:  # the CTA's last load
                        self.prefetch_next_kv(mK, mV, sK, sV, tma_atom_K, tma_atom_V, kv_next)
                state.advance()
        return state, kv_state

    @cute.jit
    def prefetch_next_kv(self, mK: cute.Tensor, mV: cute.Tensor, sK: cute.Tensor, sV: cute.Tensor, tma_atom_K, tma_atom_V, kv_next):
        """kv_prefetch: TMA L2 prefetches of the K / V tile of linear block ``blockIdx.x + resident`` (the CTA that
        takes this SM's slot in the next wave, CTAs being dispatched in linear order), decoded as the kernel decodes its
        own (``kv_next`` = (key blocks, kv heads, batch, group_heads, resident)); nothing past the grid (dense only)."""
        num_n_blocks, num_heads_kv, num_batch, group_heads, resident = kv_next
        lin = SingleTileScheduler.linear_id() + resident
        if lin < num_n_blocks * num_heads_kv * num_batch:
            n_next, head_next, batch_next = SingleTileScheduler(num_n_blocks, num_heads_kv, num_batch, group_heads, False).tile_at(lin)
            gK = cute.local_tile(mK[None, None, head_next, batch_next], (self.tile_n, self.head_dim), (n_next, 0))
            gV = cute.local_tile(mV[None, None, head_next, batch_next], (self.tile_n, self.head_dim_v), (n_next, 0))
            _, tKgK = cpasync.tma_partition(tma_atom_K, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2))
            _, tVgV = cpasync.tma_partition(tma_atom_V, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2))
            with cute.arch.elect_one():  # one issue per warp (cute.prefetch elects no lane itself)
                cute.prefetch(tma_atom_K, tKgK)
                cute.prefetch(tma_atom_V, tVgV)

    @cute.jit
    def dq_writer_loop(
        self,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        sdQ: cute.Tensor,
        tma_atom_dQ: cute.CopyAtom | None,
        head_kv: Int32,
        batch: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
        mFlags: cute.Tensor | None = None,
    ):
        """dq_writer (warp 1): for every query block the consumers walk (the producer's count and order), per consumer
        warpgroup: once its previous reduce-add has read the buffer, arrive on DQ_EMPTY; then wait for DQ_FULL and add
        the buffer into the accumulator: dq_bulk, one bulk reduce-add (one elected thread) into the fragment-ordered
        block; dq_tma, the warpgroup's TMA reduce-add of its half of the head dim (as the consumers issue it without
        the writer). dq_first_store (``mFlags``): the block's ticket first (dq_first_store.py); ticket 0 bulk-stores
        both halves and marks the flag done once they completed, any other ticket waits for that mark and reduce-adds;
        lane 0 issues, waits and marks."""
        nwg = self.num_consumer_wg
        nthr = self.threads_per_wg + 32
        half = self.tile_m * self.head_dim // nwg
        num_m = cutlass.max(m_block_max - m_block_min, 0)
        G = self.key.qhead_per_kvhead
        for g in cutlass.range(G, unroll=1):
            _, _, mdQacc_cur = self.head_scratch(mLSE2, mDpsum, mdQacc, head_kv * G + g, batch, pad_q)
            mdQacc_tma_cur = None
            if const_expr(self.key.dq_tma):
                mdQacc_tma_cur = mdQacc_tma[None, None, head_kv * G + g, batch]
                if const_expr(self.key.varlen):
                    mdQacc_tma_cur = cute.domain_offset((pad_q, 0), mdQacc_tma_cur)
            for i in cutlass.range(num_m, unroll=1):
                gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block_min + i, 0))
                for w in cutlass.range_constexpr(nwg):
                    cute.arch.cp_async_bulk_wait_group(nwg - 1 - w, read=True)  # warpgroup w's last reduce-add read it
                    cute.arch.barrier_arrive(barrier_id=int(NamedBarrierBwd.DQ_EMPTY_WG1) + w, number_of_threads=nthr)
                if const_expr(self.key.dq_first_store):
                    self.dq_first_store_block(mFlags, mdQacc_cur, sdQ, head_kv * G + g, batch, pad_q, m_block_min + i, nthr)
                else:
                    for w in cutlass.range_constexpr(nwg):
                        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + w, number_of_threads=nthr)
                        if const_expr(self.key.dq_tma):
                            gdQ_w = cute.local_tile(mdQacc_tma_cur, (self.tile_m, self.head_dim // nwg), (m_block_min + i, w))
                            tdQsdQ_w, tdQgdQ_w = cpasync.tma_partition(
                                tma_atom_dQ, 0, cute.make_layout(1), cute.group_modes(sdQ[None, None, w], 0, 2), cute.group_modes(gdQ_w, 0, 2)
                            )
                            cute.copy(tma_atom_dQ, tdQsdQ_w, tdQgdQ_w)
                        elif const_expr(self.key.tile_m128):
                            self.dq_bulk_reduce_m128(mdQacc_cur, sdQ, m_block_min + i, w)
                        else:
                            with cute.arch.elect_one():
                                reduce_add_bulk_f32(gdQ.iterator + w * half, sdQ[None, w].iterator, half * 4)
                        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # the last reduce-adds have read sdQ before the CTA exits

    @cute.jit
    def dq_first_store_block(
        self, mFlags: cute.Tensor, mdQacc_cur: cute.Tensor, sdQ: cute.Tensor, head: Int32, batch: Int32, pad_q: Int32, m_block: Int32, nthr: int
    ):
        """dq_writer_loop's block under dq_first_store: the ticket (lane 0's, broadcast) while the consumers still compute
        the block (its flag: the one of the 64 scratch rows it starts in, kernel_key.dq_flag_index; varlen: from the
        sequence's first scratch row ``pad_q``); a later arrival waits for the first one's done mark;
        then per consumer warpgroup, after its DQ_FULL, lane 0 stores (ticket 0) or reduce-adds (others) what
        :meth:`dq_bulk_issue` covers; ticket 0 then waits for its stores to complete and marks the flag done."""
        lane = cute.arch.lane_idx()
        flag_ptr = mFlags[None, head, batch].iterator + dq_flag_index(pad_q + m_block * self.tile_m)
        ticket = Int32(0)
        if lane == 0:
            ticket = flag_ticket(flag_ptr)
        ticket = cute.arch.shuffle_sync(ticket, 0)
        if ticket != 0:
            flag_wait_done(flag_ptr)
        for w in cutlass.range_constexpr(self.num_consumer_wg):
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + w, number_of_threads=nthr)
            if lane == 0:
                self.dq_bulk_issue(mdQacc_cur, sdQ, m_block, w, ticket == 0)
            cute.arch.cp_async_bulk_commit_group()
        if ticket == 0:
            if lane == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=False)  # the stores are complete (writes, not just their reads)
                flag_mark_done(flag_ptr)

    @cute.jit
    def dq_bulk_issue(self, mdQacc_cur: cute.Tensor, sdQ: cute.Tensor, m_block: Int32, w: int, store):
        """dq_first_store, one thread: warpgroup ``w``'s staged part of query block ``m_block`` into the fragment-ordered
        accumulator, bulk-stored (``store``: the block's first arrival) or reduce-added: its half of the head dim
        (64 / 80 rows), or at m128 its whole 64-row block (dq_rows) or its half of both."""
        gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block, 0))
        if const_expr(self.key.tile_m128):
            half = DQ_BULK_ROWS * self.head_dim // self.num_consumer_wg
            if const_expr(self.key.dq_rows):
                self.bulk_store_or_add(gdQ.iterator + w * (2 * half), sdQ[None, 0, w].iterator, 2 * half * 4, store)
            else:
                for h in cutlass.range_constexpr(2):
                    self.bulk_store_or_add(gdQ.iterator + (h * DQ_BULK_ROWS * self.head_dim + w * half), sdQ[None, w, h].iterator, half * 4, store)
        else:
            half = self.tile_m * self.head_dim // self.num_consumer_wg
            self.bulk_store_or_add(gdQ.iterator + w * half, sdQ[None, w].iterator, half * 4, store)

    @cute.jit
    def bulk_store_or_add(self, gmem: cute.Pointer, smem: cute.Pointer, num_bytes: int, store):
        """One non-tensor bulk copy of ``num_bytes`` fp32 from shared to global memory: a store or a reduce-add."""
        if store:
            store_bulk_f32(gmem, smem, num_bytes)
        else:
            reduce_add_bulk_f32(gmem, smem, num_bytes)

    @cute.jit
    def mma(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        mLSE2: cute.Tensor,
        mDpsum: cute.Tensor,
        mdQacc: cute.Tensor,
        mdQacc_tma: cute.Tensor | None,
        mSem: cute.Tensor | None,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sdSt: cute.Tensor,
        sdQ: cute.Tensor | None,
        sdQ_lin: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        tma_atom_dQ: cute.CopyAtom | None,
        pipeline_q,
        pipeline_do,
        pipeline_kv,
        tidx: Int32,
        scale_log2: Float32,
        scale: Float32,
        mask: MaskInfoBwd,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_k: Int32,
        pad_q: Int32,
        m_block_min: Int32,
        m_block_max: Int32,
        state=None,
        kv_state=None,
        staging=None,
    ):
        """Consumer warpgroups: for each query head of the kv head, the query blocks crossing the right (causal)
        boundary, then the unmasked ones, then those crossing the left one (``step`` each), then the dK / dV epilogue.
        The schedule is two hooks: ``consumer_operands`` (fragments, accumulators) and ``step`` (one query block);
        the split_d kernel overrides both. persistent: ``state`` / ``kv_state`` are the consumers' Q / dO ring and K / V
        stage states carried over the CTA's tiles, returned advanced; the K / V stage is released after the last query
        block (each warp past its last GEMM), since the epilogue stages dK / dV in ``staging`` (:meth:`dkv_staging`),
        not over sK / sV."""
        ops = self.consumer_operands(tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, sQ, sK, sV, sdO, sdSt, sdQ_lin, tidx)
        state, m_mid1, m_mid2 = self.begin_key_block(ops.acc_dK, ops.acc_dV, pipeline_kv, mask, n_block, m_block_min, m_block_max, state, kv_state)
        G = self.key.qhead_per_kvhead
        for g in cutlass.range(G, unroll=1):
            head = head_kv * G + g
            mLSE2_cur, mDpsum_cur, mdQacc_cur = self.head_scratch(mLSE2, mDpsum, mdQacc, head, batch, pad_q)
            mSem_cur = None
            if const_expr(self.key.deterministic):
                mSem_cur = mSem[None, head, batch]
            mdQacc_tma_cur = None
            if const_expr(self.key.dq_tma):
                mdQacc_tma_cur = mdQacc_tma[None, None, head, batch]
                if const_expr(self.key.varlen):
                    mdQacc_tma_cur = cute.domain_offset((pad_q, 0), mdQacc_tma_cur)
            if const_expr(self.key.varlen and self.key.deterministic):
                mSem_cur = cute.domain_offset((pad_q // self.tile_m,), mSem_cur)
            for i in cutlass.range(cutlass.max(m_mid1 - m_block_min, 0), unroll=1):
                state = self.step(
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, ops, mLSE2_cur, mDpsum_cur, mdQacc_cur, mSem_cur, mdQacc_tma_cur,
                    sLSE, sDpsum, sdQ, tma_atom_dQ, tidx, pipeline_q, pipeline_do, state, scale_log2, mask, m_block_min + i, n_block, True,
                )  # fmt: skip
            for i in cutlass.range(cutlass.max(m_mid2 - m_mid1, 0), unroll=1):
                state = self.step(
                    tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, ops, mLSE2_cur, mDpsum_cur, mdQacc_cur, mSem_cur, mdQacc_tma_cur,
                    sLSE, sDpsum, sdQ, tma_atom_dQ, tidx, pipeline_q, pipeline_do, state, scale_log2, mask, m_mid1 + i, n_block, False,
                )  # fmt: skip
            if const_expr(self.key.mask_left or self.key.tile_m80):
                for i in cutlass.range(cutlass.max(m_block_max - m_mid2, 0), unroll=1):
                    state = self.step(
                        tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, ops, mLSE2_cur, mDpsum_cur, mdQacc_cur, mSem_cur, mdQacc_tma_cur,
                        sLSE, sDpsum, sdQ, tma_atom_dQ, tidx, pipeline_q, pipeline_do, state, scale_log2, mask, m_mid2 + i, n_block, True,
                    )  # fmt: skip

        if const_expr((self.key.dq_tma or self.key.dq_bulk) and not self.key.dq_writer):
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)  # the last reduce-add has read sdQ
        if const_expr(staging is not None):
            pipeline_kv.consumer_release(kv_state)  # this warp is past its last GEMM reading sK / sV
            kv_state.advance()

        # ---------------------------------------------------------------------------------- epilogue
        self.epilogue_dkv(
            ops.acc_dK, ops.acc_dV, ops.smem_copy_atom, tiled_mma_dK, tiled_mma_dV, sK, sV, mdK, mdV, tma_atom_dK, tma_atom_dV, mask, scale,
            n_block, head_kv, batch, offset_k, tidx, staging,
        )  # fmt: skip
        return state, kv_state

    @cute.jit
    def consumer_operands(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        sdSt: cute.Tensor,
        sdQ_lin: cute.Tensor | None,
        tidx: Int32,
    ):
        """The consumer's operands of :meth:`step`, as a record (a trace-time namespace): GEMM fragments (P^T and dS^T
        are A operands from registers), accumulators, the dS^T stmatrix and, with dq_tma, its dQ fragment in shared
        memory; ``acc_dK``, ``acc_dV`` and ``smem_copy_atom`` are what :meth:`mma` itself reads."""
        D = self.head_dim
        wg_idx, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, thr_mma_dQ, wg_mma_SdP, tSrK, tSrQ, tdPrV, tdPrdO = self.consumer_slices(
            tiled_mma_SdP, tiled_mma_dK, tiled_mma_dV, tiled_mma_dQ, sQ, sK, sV, sdO, tidx
        )
        tdVrdOt = wg_mma_dV.make_fragment_B(wg_mma_dV.partition_B(transpose_view(sdO)))
        tdKrQt = wg_mma_dK.make_fragment_B(wg_mma_dK.partition_B(transpose_view(sQ)))
        if const_expr(self.dq_t):
            # dQ^T = K^T dS^T: A = K^T (head dim, keys), B = dS^T viewed (queries, keys)
            tdQrdS = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(transpose_view(sdSt)))
            tdQrKt = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(transpose_view(sK)))
        elif const_expr(self.key.ds_kmajor):
            tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(sdSt))  # sdSt holds dS (queries, keys)
            tdQrKt = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(transpose_view(sK)))
        else:
            tdQrdS = wg_mma_dQ.make_fragment_A(wg_mma_dQ.partition_A(transpose_view(sdSt)))
            tdQrKt = wg_mma_dQ.make_fragment_B(wg_mma_dQ.partition_B(transpose_view(sK)))
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, tScS_mn, rLSE, rDpsum = self.consumer_accumulators(
            wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, D
        )
        smem_copy_atom, smem_thr_copy_dS, tdSsdS = self.ds_smem_copy(tiled_mma_SdP, sdSt, tidx)
        ds_copy_atom = smem_copy_atom
        if const_expr(self.key.ds_kmajor):
            # dS (queries, keys): the S^T-layout fragment goes through the transposed stmatrix into its (keys, queries) view
            ds_copy_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=True, num_matrices=4), self.dtype)
            smem_thr_copy_dS = cute.make_tiled_copy_C(ds_copy_atom, tiled_mma_SdP).get_slice(tidx)
            tdSsdS = smem_thr_copy_dS.partition_D(transpose_view(sdSt))
        # dq_tma: this thread's dQ fragment in the (tile_m, (D / 2, warpgroup)) shared-memory buffer. The 32-byte
        # swizzle (byte bit 4 ^= byte bit 7, i.e. element bit 2 ^= element bit 5) reads a row bit (row % 8 >= 4) and a
        # column bit (col % 8 >= 4) that are the same for every element of a thread's fragment (rows r, r + 8; columns
        # 8 j + 2 (lane % 4) + {0, 1}): apply it once, as a constant shift of the unswizzled view, so each store is
        # one base register plus an immediate.
        tdQsdQ = None
        if const_expr(self.key.dq_tma and self.dq_t):
            # dq_t (m80 / dq_t128): this thread's dQ^T fragment (head dim, queries) in the (tile_m, (D / 2, warpgroup))
            # buffer, unswizzled, then the 128-byte swizzle (byte bits 4-6 ^= bits 7-9: the column c in a 32-float block has its bits 2-4
            # XORed with row % 8). A fragment element's row (query) mod 8 and column mod 32 depend only on its class
            # e % 4 (adjacent query, head-dim row + 8) and the thread, so each class is one thread-constant shift of
            # the unswizzled view: four base addresses, every store one of them plus an immediate.
            lin_t = cute.composition(cute.group_modes(sdQ_lin, 1, 3), cute.make_layout((D, self.tile_m), stride=(self.tile_m, 1)))
            tdQ_lin = thr_mma_dQ.partition_C(lin_t)
            tdQcdQ = thr_mma_dQ.partition_C(cute.make_identity_tensor((D, self.tile_m)))
            tdQsdQ = []
            for e in cutlass.range_constexpr(4):
                d_e, q_e = tdQcdQ[e]
                tdQsdQ.append(cute.make_tensor(tdQ_lin.iterator + self.m80_stage_shift(d_e, q_e), tdQ_lin.layout))
        elif const_expr(self.key.dq_tma):
            row0, col0 = thr_mma_dQ.partition_C(cute.make_identity_tensor((self.tile_m, D)))[0]
            flip = (row0 % 8) // 4
            bit2 = (col0 % 8) // 4
            tdQ_lin = thr_mma_dQ.partition_C(cute.group_modes(sdQ_lin, 1, 3))
            tdQsdQ = cute.make_tensor(tdQ_lin.iterator + 4 * ((bit2 ^ flip) - bit2), tdQ_lin.layout)
        if const_expr(self.key.dq_bulk and self.key.dq_rows):
            # dq_rows: warpgroup w stages the whole 64-row block w of the query block (sdQ_lin's (64 D / 2, warpgroup,
            # half) buffer seen with its last two modes swapped: the thread's warpgroup picks the block, its registers
            # 16..31 the block's second half), in the same fragment order
            sdQ_rows = cute.make_tensor(sdQ_lin.iterator, self._dq_rows_layout())
            tdQsdQ = self._dq_bulk_copy().get_slice(tidx).partition_D(sdQ_rows)
        elif const_expr(self.key.dq_bulk):
            # dq_bulk: this thread's 16-byte groups in the fragment-ordered buffer (sdQ_lin is the plain buffer)
            tdQsdQ = self._dq_bulk_copy().get_slice(tidx).partition_D(sdQ_lin)
        return SimpleNamespace(
            wg_idx=wg_idx, thr_mma_dQ=thr_mma_dQ, acc_S=acc_S, acc_dP=acc_dP, acc_dK=acc_dK, acc_dV=acc_dV, acc_dQ=acc_dQ, rP=rP, rdS=rdS,
            rLSE=rLSE, rDpsum=rDpsum, tSrK=tSrK, tSrQ=tSrQ, tdPrV=tdPrV, tdPrdO=tdPrdO, tdVrdOt=tdVrdOt, tdKrQt=tdKrQt, tdQrdS=tdQrdS,
            tdQrKt=tdQrKt, smem_copy_atom=smem_copy_atom, smem_thr_copy_dS=smem_thr_copy_dS, tdSsdS=tdSsdS, tScS_mn=tScS_mn, tdQsdQ=tdQsdQ,
            ds_copy_atom=ds_copy_atom,
        )  # fmt: skip

    @cute.jit
    def m80_stage_shift(self, d, q):
        """dq_t (m80 / dq_t128): the swizzled minus the unswizzled fp32 offset of dQ^T element (head dim ``d``, query
        ``q``) in the staging buffer (``_dq_smem_layout``: rows of 32 floats, 128-byte swizzle: element bits 2-4 ^= bits 5-7, i.e.
        the column in its 32-float block XORed with 4 * (q % 8))."""
        col = d % 32
        return (col ^ ((q % 8) * 4)) - col

    @cute.jit
    def consumer_slices(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        sQ: cute.Tensor,
        sK: cute.Tensor,
        sV: cute.Tensor,
        sdO: cute.Tensor,
        tidx: Int32,
    ):
        """A consumer thread's view of the MMAs: (its warpgroup, the warpgroup slices of the dK / dV / dQ MMAs, the
        thread slices of the S^T / dP^T and dQ MMAs, the warpgroup slice of the S^T / dP^T MMA and its shared-memory
        operands K, Q (S^T = K Q^T) and V, dO (dP^T = V dO^T))."""
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        wg_layout = cute.make_layout(self.num_consumer_wg, stride=self.threads_per_wg)
        wg_mma_SdP = tiled_mma_SdP.get_slice(wg_layout(wg_idx))
        wg_mma_dK = tiled_mma_dK.get_slice(wg_layout(wg_idx))
        wg_mma_dV = tiled_mma_dV.get_slice(wg_layout(wg_idx))
        wg_mma_dQ = tiled_mma_dQ.get_slice(wg_layout(wg_idx))
        thr_mma_SdP = tiled_mma_SdP.get_slice(tidx)
        thr_mma_dQ = tiled_mma_dQ.get_slice(tidx)

        tSrK = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sK))
        tSrQ = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sQ))
        tdPrV = wg_mma_SdP.make_fragment_A(wg_mma_SdP.partition_A(sV))
        tdPrdO = wg_mma_SdP.make_fragment_B(wg_mma_SdP.partition_B(sdO))
        return wg_idx, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, thr_mma_dQ, wg_mma_SdP, tSrK, tSrQ, tdPrV, tdPrdO

    @cute.jit
    def consumer_accumulators(self, wg_mma_SdP, wg_mma_dK, wg_mma_dV, wg_mma_dQ, thr_mma_SdP, dq_cols: cutlass.Constexpr[int]):
        """The consumer's register tensors: fp32 accumulators S^T, dP^T, dK, dV and dQ (``dq_cols`` columns of the
        head dim per dQ GEMM), P^T and dS^T in the element type, the (key, query) coordinates of its S^T elements
        (its queries are the columns) and its columns' lse_log2 / dpsum."""
        D, Dv = self.head_dim, self.head_dim_v
        acc_S = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_n, self.tile_m)), Float32)
        acc_dP = cute.make_rmem_tensor(wg_mma_SdP.partition_shape_C((self.tile_n, self.tile_m)), Float32)
        acc_dK = cute.make_rmem_tensor(wg_mma_dK.partition_shape_C((self.tile_n, D)), Float32)
        acc_dV = cute.make_rmem_tensor(wg_mma_dV.partition_shape_C((self.tile_n, Dv)), Float32)
        if const_expr(self.dq_t):
            acc_dQ = cute.make_rmem_tensor(wg_mma_dQ.partition_shape_C((D, self.tile_m)), Float32)  # dQ^T
        else:
            acc_dQ = cute.make_rmem_tensor(wg_mma_dQ.partition_shape_C((self.tile_m, dq_cols)), Float32)
        rP = cute.make_rmem_tensor_like(acc_S, self.dtype)
        rdS = cute.make_rmem_tensor_like(acc_dP, self.dtype)

        cS = cute.make_identity_tensor((self.tile_n, self.tile_m))
        tScS_mn = acc_view_mn(thr_mma_SdP.partition_C(cS))
        num_cols = cute.size(tScS_mn, mode=[1])
        rLSE = cute.make_rmem_tensor(num_cols, Float32)
        rDpsum = cute.make_rmem_tensor(num_cols, Float32)
        return acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, tScS_mn, rLSE, rDpsum

    @cute.jit
    def ds_smem_copy(self, tiled_mma_SdP: cute.TiledMma, sdS: cute.Tensor, tidx: Int32):
        """(stmatrix atom, this thread's slice of it in the S^T / dP^T accumulator layout, its destinations in the
        dS^T (split_d: P^T / dS^T) shared-memory buffers)."""
        smem_copy_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
        smem_thr_copy = cute.make_tiled_copy_C(smem_copy_atom, tiled_mma_SdP).get_slice(tidx)
        return smem_copy_atom, smem_thr_copy, smem_thr_copy.partition_D(sdS)

    @cute.jit
    def begin_key_block(
        self, acc_dK: cute.Tensor, acc_dV: cute.Tensor, pipeline_kv, mask: MaskInfoBwd, n_block: Int32, m_block_min: Int32, m_block_max: Int32,
        state=None, kv_state=None,
    ):  # fmt: skip
        """Zero dK / dV, wait for K and V, and split the query blocks ``[m_block_min, m_block_max)`` at the mask:
        returns (the consumers' Q / dO pipeline state, m_mid1, m_mid2): blocks below m_mid1 cross the right (causal)
        boundary, those from m_mid2 the left one, those between are unmasked. persistent: ``state`` / ``kv_state`` are
        the carried states (fresh ones otherwise)."""
        acc_dK.fill(0.0)
        acc_dV.fill(0.0)
        if const_expr(not self.key.kv_with_q):
            # (kv_with_q: the first query block's Q / dO waits cover K / V; a key block with none loads neither)
            if const_expr(kv_state is None):
                kv_state = consumer_state(1)
            consumer_wait(pipeline_kv, kv_state, self.key.spin_wait)

        if const_expr(state is None):
            state = consumer_state(self.num_stages)
        m_mid1 = cutlass.min(mask.m_block_min_unmasked(n_block, m_block_min), m_block_max)
        m_mid2 = cutlass.max(cutlass.min(mask.m_block_max_unmasked(n_block, m_block_max), m_block_max), m_mid1)
        if (n_block + 1) * self.tile_n > mask.seqlen_k:
            # A partial last key block: every query block takes the masked path (keys past S_kv would otherwise
            # score 0 against TMA's zero fill, and exp2(0 - lse) need not be small).
            m_mid1 = m_block_max
            m_mid2 = m_block_max
        if const_expr(self.key.tile_m80):
            # a partial last query block takes the masked path (its rows past S_q are masked, see step)
            m_mid2 = cutlass.max(cutlass.min(m_mid2, mask.seqlen_q // self.tile_m), m_mid1)
        return state, m_mid1, m_mid2

    @cute.jit
    def head_scratch(self, mLSE2: cute.Tensor, mDpsum: cute.Tensor, mdQacc: cute.Tensor, head: Int32, batch: Int32, pad_q: Int32):
        """Query head ``head``'s lse_log2, dpsum and dQ accumulator (varlen: from the sequence's first scratch row
        ``pad_q``)."""
        mLSE2_cur = mLSE2[None, head, batch]
        mDpsum_cur = mDpsum[None, head, batch]
        mdQacc_cur = mdQacc[None, None, head, batch]
        if const_expr(self.key.varlen):
            mLSE2_cur = cute.domain_offset((pad_q,), mLSE2_cur)
            mDpsum_cur = cute.domain_offset((pad_q,), mDpsum_cur)
            mdQacc_cur = cute.domain_offset((pad_q, 0), mdQacc_cur)
        return mLSE2_cur, mDpsum_cur, mdQacc_cur

    @cute.jit
    def epilogue_dkv(
        self,
        acc_dK: cute.Tensor,
        acc_dV: cute.Tensor,
        smem_copy_atom: cute.CopyAtom,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        sK: cute.Tensor,
        sV: cute.Tensor,
        mdK: cute.Tensor,
        mdV: cute.Tensor,
        tma_atom_dK: cute.CopyAtom,
        tma_atom_dV: cute.CopyAtom,
        mask: MaskInfoBwd,
        scale: Float32,
        n_block: Int32,
        head_kv: Int32,
        batch: Int32,
        offset_k: Int32,
        tidx: Int32,
        staging=None,
    ):
        """dK (scaled) and dV converted, written to shared memory over K's and V's buffers (stmatrix, in the layout
        of ``tiled_mma_dK`` / ``tiled_mma_dV``) and stored: TMA for dense plans, predicated rows for varlen. persistent
        (``staging`` = :meth:`dkv_staging`'s views over the dS^T buffers): staged there instead, dV after dK's store has
        read the buffer when both do not fit; every consumer leaves once the last store has read it (the next tile's
        first dS^T goes there)."""
        D, Dv = self.head_dim, self.head_dim_v
        acc_dK.store(acc_dK.load() * scale)
        rdK = cute.make_rmem_tensor_like(acc_dK, self.dtype)
        rdK.store(acc_dK.load().to(self.dtype))
        rdV = cute.make_rmem_tensor_like(acc_dV, self.dtype)
        rdV.store(acc_dV.load().to(self.dtype))
        # Every consumer is past its last GEMM reading sK / sV: reuse them for dK / dV.
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
        thr_copy_dK = cute.make_tiled_copy_C(smem_copy_atom, tiled_mma_dK).get_slice(tidx)
        thr_copy_dV = cute.make_tiled_copy_C(smem_copy_atom, tiled_mma_dV).get_slice(tidx)
        if const_expr(staging is not None):
            sdK, sdV, one_round = staging
            gdK_st = cute.local_tile(mdK[None, None, head_kv, batch], (self.tile_n, D), (n_block, 0))
            gdV_st = cute.local_tile(mdV[None, None, head_kv, batch], (self.tile_n, Dv), (n_block, 0))
            rounds = (((rdK, thr_copy_dK, sdK, tma_atom_dK, gdK_st), (rdV, thr_copy_dV, sdV, tma_atom_dV, gdV_st)),)
            if const_expr(not one_round):
                rounds = (rounds[0][:1], rounds[0][1:])
            for r in cutlass.range_constexpr(len(rounds)):
                if const_expr(r > 0):  # the previous round's store has read the buffer
                    cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
                for rg, thr_copy, sD, _, _ in rounds[r]:
                    cute.copy(smem_copy_atom, thr_copy.retile(rg), thr_copy.partition_D(sD))
                cute.arch.fence_view_async_shared()
                cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
                if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 4:
                    for _, _, sD, atom, gD in rounds[r]:
                        tSs, tSg = cpasync.tma_partition(atom, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), cute.group_modes(gD, 0, 2))
                        cute.copy(atom, tSs, tSg)
                    cute.arch.cp_async_bulk_commit_group()
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
            return
        cute.copy(smem_copy_atom, thr_copy_dK.retile(rdK), thr_copy_dK.partition_D(self._dkv_smem_view(sK)))
        cute.copy(smem_copy_atom, thr_copy_dV.retile(rdV), thr_copy_dV.partition_D(self._dkv_smem_view(sV)))
        if const_expr(not self.key.varlen):
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 4:
                gdK = cute.local_tile(mdK[None, None, head_kv, batch], (self.tile_n, D), (n_block, 0))
                gdV = cute.local_tile(mdV[None, None, head_kv, batch], (self.tile_n, Dv), (n_block, 0))
                tdKsdK, tdKgdK = cpasync.tma_partition(tma_atom_dK, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gdK, 0, 2))
                tdVsdV, tdVgdV = cpasync.tma_partition(tma_atom_dV, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gdV, 0, 2))
                cute.copy(tma_atom_dK, tdKsdK, tdKgdK)
                cute.copy(tma_atom_dV, tdVsdV, tdVgdV)
                cute.arch.cp_async_bulk_commit_group()
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        else:
            # varlen: predicated 16-byte stores, so no row of the next sequence is touched
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.EPILOGUE), number_of_threads=self.num_mma_threads)
            rows_left = mask.seqlen_k - n_block * self.tile_n
            self.store_rows(cute.domain_offset((offset_k, 0), mdK[None, None, head_kv, batch]), sK, rows_left, n_block, tidx, D)
            self.store_rows(cute.domain_offset((offset_k, 0), mdV[None, None, head_kv, batch]), sV, rows_left, n_block, tidx, Dv)

    @cute.jit
    def store_rows(self, mD: cute.Tensor, sD: cute.Tensor, rows_left: Int32, n_block: Int32, tidx: Int32, head_dim: cutlass.Constexpr[int]):
        """Copy the first ``rows_left`` rows of the (tile_n, head_dim) shared-memory tile ``sD`` to key block
        ``n_block`` of ``mD`` with 16-byte vector stores (consumer threads)."""
        vec = 128 // self.dtype.width
        cols = head_dim // vec
        rows_per_pass = 1 << int(math.log2(self.num_mma_threads // cols))
        copy_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)
        thr_layout = cute.make_ordered_layout((rows_per_pass, cols), order=(1, 0))
        tiled_copy = cute.make_tiled_copy_tv(copy_atom, thr_layout, cute.make_layout((1, vec)))
        if tidx < rows_per_pass * cols:
            thr_copy = tiled_copy.get_slice(tidx)
            gD = cute.local_tile(mD, (self.tile_n, head_dim), (n_block, 0))
            tS = thr_copy.partition_S(sD)
            tG = thr_copy.partition_D(gD)
            tC = thr_copy.partition_S(cute.make_identity_tensor((self.tile_n, head_dim)))
            tR = cute.make_rmem_tensor_like(tS, self.dtype)
            cute.autovec_copy(tS, tR)
            for rm in cutlass.range_constexpr(cute.size(tR.shape[1])):
                if tC[0, rm, 0][0] < rows_left:
                    cute.copy(tiled_copy, tR[None, rm, None], tG[None, rm, None])

    @cute.jit
    def stats_word(self, sStat: cute.Tensor, idx: Int32, tScS_mn: cute.Tensor, i: cutlass.Constexpr[int], preloaded: cute.Tensor | None):
        """stats_vec4: the 16-byte word of lse_log2 / dpsum (``sStat`` at stage ``idx``) for this thread's S^T columns
        4 i .. 4 i + 3: a slice of ``preloaded`` (stats_early: :meth:`stats_words`), else loaded now."""
        if const_expr(preloaded is not None):
            return cute.local_tile(preloaded, (4,), (i,))
        word = cute.make_rmem_tensor((4,), Float32)
        cute.autovec_copy(cute.local_tile(sStat[None, idx], (4,), (4 * i + tScS_mn[0, 0][1] // 2,)), word)
        return word

    @cute.jit
    def stats_words(self, sStat: cute.Tensor, idx: Int32, tScS_mn: cute.Tensor) -> cute.Tensor:
        """stats_early: every stats_vec4 word of this thread's S^T columns, loaded into registers now."""
        n_words = cute.size(tScS_mn, mode=[1]) // 4
        words = cute.make_rmem_tensor((4 * n_words,), Float32)
        for i in cutlass.range_constexpr(n_words):
            cute.autovec_copy(cute.local_tile(sStat[None, idx], (4,), (4 * i + tScS_mn[0, 0][1] // 2,)), cute.local_tile(words, (4,), (i,)))
        return words

    @cute.jit
    def step(
        self,
        tiled_mma_SdP: cute.TiledMma,
        tiled_mma_dK: cute.TiledMma,
        tiled_mma_dV: cute.TiledMma,
        tiled_mma_dQ: cute.TiledMma,
        ops,
        mLSE2_cur: cute.Tensor,
        mDpsum_cur: cute.Tensor,
        mdQacc_cur: cute.Tensor,
        mSem_cur: cute.Tensor | None,
        mdQacc_tma_cur: cute.Tensor | None,
        sLSE: cute.Tensor | None,
        sDpsum: cute.Tensor | None,
        sdQ: cute.Tensor | None,
        tma_atom_dQ: cute.CopyAtom | None,
        tidx: Int32,
        pipeline_q,
        pipeline_do,
        state,
        scale_log2: Float32,
        mask: MaskInfoBwd,
        m_block: Int32,
        n_block: Int32,
        masked: cutlass.Constexpr[bool],
    ):
        """One query block: S^T, dP^T (SS), P^T, dS^T (registers), dV (RS), dQ (SS, atomics), dK (RS); ``ops``: the
        record of :meth:`consumer_operands`."""
        o = ops
        acc_S, acc_dP, acc_dK, acc_dV, acc_dQ, rP, rdS, rLSE, rDpsum = o.acc_S, o.acc_dP, o.acc_dK, o.acc_dV, o.acc_dQ, o.rP, o.rdS, o.rLSE, o.rDpsum
        tSrK, tSrQ, tdPrV, tdPrdO, tdVrdOt, tdKrQt, tdQrdS, tdQrKt = o.tSrK, o.tSrQ, o.tdPrV, o.tdPrdO, o.tdVrdOt, o.tdKrQt, o.tdQrdS, o.tdQrKt
        ds_copy_atom, smem_thr_copy_dS, tdSsdS, tScS_mn, tdQsdQ = o.ds_copy_atom, o.smem_thr_copy_dS, o.tdSsdS, o.tScS_mn, o.tdQsdQ
        thr_mma_dQ, wg_idx = o.thr_mma_dQ, o.wg_idx
        idx = state.index
        row0 = m_block * self.tile_m
        consumer_wait(pipeline_q, state, self.key.spin_wait)
        wgmma(tiled_mma_SdP, acc_S, tSrK, tSrQ[None, None, None, idx], zero_init=True, wg_wait=-1)
        rL_all = None
        if const_expr(self.key.stats_early):  # this block's lse_log2 words while the S^T GEMM runs
            rL_all = self.stats_words(sLSE, idx, tScS_mn)
        if const_expr(self.stats_at_use or self.key.stats_vec4):
            pass  # m80 / m128 read each column's lse_log2 / dpsum where it is used (20 / 32 columns a thread); stats_vec4 by words
        elif const_expr(self.key.stats_tma):
            for c in cutlass.range_constexpr(cute.size(rLSE)):
                rLSE[c] = sLSE[tScS_mn[0, c][1], idx]
        else:
            for c in cutlass.range_constexpr(cute.size(rLSE)):
                rLSE[c] = mLSE2_cur[row0 + tScS_mn[0, c][1]]
        consumer_wait(pipeline_do, state, self.key.spin_wait)
        wgmma(tiled_mma_SdP, acc_dP, tdPrV, tdPrdO[None, None, None, idx], zero_init=True, wg_wait=1)
        if const_expr(masked):
            # m80: a last query block of 80 rows may end past the scratch's padded rows (a multiple of 128, not of 80),
            # where lse_log2 / dpsum are another head's rows: its rows past S_q are masked (P = 0, so dS = 0 too)
            mask.apply_transposed(acc_S, tScS_mn, m_block, n_block, mask_seqlen=True, mask_rows=self.key.tile_m80)
        acc_S_mn = acc_view_mn(acc_S)
        if const_expr(self.key.stats_vec4):
            # stats_vec4: the rows were stored permuted (kernel_key.stats_perm_row), so columns 4 i .. 4 i + 3
            # of this thread (queries 16 i + 2 l + {0, 1} and 16 i + 8 + 2 l + {0, 1}, l = lane % 4) are one 16-byte word
            for i in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1]) // 4):
                rL = self.stats_word(sLSE, idx, tScS_mn, i, rL_all)
                for cc in cutlass.range_constexpr(4):
                    for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
                        acc_S_mn[r, 4 * i + cc] = cute.math.exp2(acc_S_mn[r, 4 * i + cc] * scale_log2 - rL[cc], fastmath=True)
        elif const_expr(self.stats_at_use):
            for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                lse_c = sLSE[tScS_mn[0, c][1], idx] if const_expr(self.key.stats_tma) else mLSE2_cur[row0 + tScS_mn[0, c][1]]
                for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
                    acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c] * scale_log2 - lse_c, fastmath=True)
        else:
            for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
                for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                    acc_S_mn[r, c] = cute.math.exp2(acc_S_mn[r, c] * scale_log2 - rLSE[c], fastmath=True)
        if const_expr(self.stats_at_use or self.key.stats_vec4):
            pass
        elif const_expr(self.key.stats_tma):
            for c in cutlass.range_constexpr(cute.size(rDpsum)):
                rDpsum[c] = sDpsum[tScS_mn[0, c][1], idx]
        else:
            for c in cutlass.range_constexpr(cute.size(rDpsum)):
                rDpsum[c] = mDpsum_cur[row0 + tScS_mn[0, c][1]]
        if const_expr(not self.key.tile_m128):
            if const_expr(self.key.pack_once):
                self.pack_pairs(acc_S, rP)
            else:
                rP.store(acc_S.load().to(self.dtype))
        rD_all = None
        if const_expr(self.key.stats_early):  # this block's dpsum words before the wait for dP^T
            rD_all = self.stats_words(sDpsum, idx, tScS_mn)
        warpgroup.wait_group(0)
        acc_dP_mn = acc_view_mn(acc_dP)
        if const_expr(self.key.stats_vec4):
            for i in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1]) // 4):
                rD = self.stats_word(sDpsum, idx, tScS_mn, i, rD_all)
                for cc in cutlass.range_constexpr(4):
                    for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
                        acc_dP_mn[r, 4 * i + cc] = acc_S_mn[r, 4 * i + cc] * (acc_dP_mn[r, 4 * i + cc] - rD[cc])
        elif const_expr(self.stats_at_use):
            for c in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1])):
                dpsum_c = sDpsum[tScS_mn[0, c][1], idx] if const_expr(self.key.stats_tma) else mDpsum_cur[row0 + tScS_mn[0, c][1]]
                for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
                    acc_dP_mn[r, c] = acc_S_mn[r, c] * (acc_dP_mn[r, c] - dpsum_c)
        else:
            for r in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[0])):
                for c in cutlass.range_constexpr(cute.size(acc_dP_mn, mode=[1])):
                    acc_dP_mn[r, c] = acc_S_mn[r, c] * (acc_dP_mn[r, c] - rDpsum[c])
        if const_expr(self.key.tile_m128):
            # m128: P^T converted once dS^T is formed (S^T and dP^T are 64 fp32 registers each: P^T's 32 more live
            # next to both spilled at 128 rows)
            if const_expr(self.key.pack_once):
                self.pack_pairs(acc_S, rP)
            else:
                rP.store(acc_S.load().to(self.dtype))
        if const_expr(self.key.pack_once):
            self.pack_pairs(acc_dP, rdS)
        else:
            rdS.store(acc_dP.load().to(self.dtype))

        if const_expr(not self.key.ds_double_buffer):
            # dS^T to shared memory once both warpgroups are done reading the previous block's.
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
            cute.copy(ds_copy_atom, smem_thr_copy_dS.retile(rdS), tdSsdS)
        else:
            # Buffer ``idx`` was last read by the dQ GEMM two blocks ago, which both warpgroups finished before
            # passing the previous block's barrier below: no "free" barrier needed.
            cute.copy(ds_copy_atom, smem_thr_copy_dS.retile(rdS), tdSsdS[None, None, None, idx])
        wgmma(tiled_mma_dV, acc_dV, acc_view_as_a(rP), tdVrdOt[None, None, None, idx], zero_init=False, wg_wait=-1)
        cute.arch.fence_view_async_shared()
        if const_expr((self.key.dq_tma or self.key.dq_bulk) and not self.key.dq_writer):
            # The previous block's reduce-add has read this warpgroup's dQ buffer before anyone passes this barrier.
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.PDS), number_of_threads=self.num_mma_threads)
        if const_expr(self.dq_t):
            # dQ^T = K^T dS^T
            if const_expr(not self.key.ds_double_buffer):
                wgmma(tiled_mma_dQ, acc_dQ, tdQrKt, tdQrdS, zero_init=True, wg_wait=1)
            else:
                wgmma(tiled_mma_dQ, acc_dQ, tdQrKt, tdQrdS[None, None, None, idx], zero_init=True, wg_wait=1)
        elif const_expr(not self.key.ds_double_buffer):
            wgmma(tiled_mma_dQ, acc_dQ, tdQrdS, tdQrKt, zero_init=True, wg_wait=1)
        else:
            wgmma(tiled_mma_dQ, acc_dQ, tdQrdS[None, None, None, idx], tdQrKt, zero_init=True, wg_wait=1)
        consumer_release(pipeline_do, state, self.key.elect_release)
        wgmma(tiled_mma_dK, acc_dK, acc_view_as_a(rdS), tdKrQt[None, None, None, idx], zero_init=False, wg_wait=1)

        if const_expr(self.key.dq_tma and self.key.dq_writer):
            # the writer warp (dq_writer_loop) frees the buffer and issues the TMA reduce-add: wait, store, signal
            nthr = self.threads_per_wg + 32
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_EMPTY_WG1) + wg_idx, number_of_threads=nthr)
            if const_expr(self.dq_t):
                for e in cutlass.range_constexpr(cute.size(acc_dQ)):
                    tdQsdQ[e % 4][e] = acc_dQ[e]
            else:
                cute.autovec_copy(acc_dQ, tdQsdQ)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier_arrive(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + wg_idx, number_of_threads=nthr)
        elif const_expr(self.key.dq_tma):
            # dQ_accum[query block] += dS K: the fragment to shared memory, then one TMA reduce-add per warpgroup
            # (its half of the head dim) issued by the warpgroup's first warp; the scratch rows are padded.
            if const_expr(self.dq_t):
                for e in cutlass.range_constexpr(cute.size(acc_dQ)):
                    tdQsdQ[e % 4][e] = acc_dQ[e]  # class e % 4's base (consumer_operands) plus an immediate
            else:
                cute.autovec_copy(acc_dQ, tdQsdQ)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + wg_idx, number_of_threads=self.threads_per_wg)
            if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                half = self.head_dim // self.num_consumer_wg
                gdQ = cute.local_tile(mdQacc_tma_cur, (self.tile_m, half), (m_block, wg_idx))
                tdQsdQ_wg, tdQgdQ_wg = cpasync.tma_partition(
                    tma_atom_dQ, 0, cute.make_layout(1), cute.group_modes(sdQ[None, None, wg_idx], 0, 2), cute.group_modes(gdQ, 0, 2)
                )
                cute.copy(tma_atom_dQ, tdQsdQ_wg, tdQgdQ_wg)
                cute.arch.cp_async_bulk_commit_group()
        elif const_expr(self.key.dq_bulk):
            # dQ_accum[query block] += dS K: the fragment to shared memory in its own order (16-byte stores), then one
            # contiguous bulk reduce-add per warpgroup into the fragment-ordered block (kernel_key.DQ_BULK_ROWS),
            # issued by one thread of the warpgroup's first warp (dq_writer: of the writer warp); the scratch rows are padded.
            if const_expr(self.key.dq_writer):
                self.dq_stage_for_writer(cute.make_tensor(acc_dQ.iterator, cute.make_layout(tdQsdQ.shape)), tdQsdQ, wg_idx)
            else:
                cute.autovec_copy(cute.make_tensor(acc_dQ.iterator, cute.make_layout(tdQsdQ.shape)), tdQsdQ)
                cute.arch.fence_view_async_shared()
                cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + wg_idx, number_of_threads=self.threads_per_wg)
                if cute.arch.make_warp_uniform(cute.arch.warp_idx()) % 4 == 0:
                    if const_expr(self.key.tile_m128):
                        self.dq_bulk_reduce_m128(mdQacc_cur, sdQ, m_block, wg_idx)
                    else:
                        half = self.tile_m * self.head_dim // self.num_consumer_wg
                        gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block, 0))
                        with cute.arch.elect_one():
                            reduce_add_bulk_f32(gdQ.iterator + wg_idx * half, sdQ[None, wg_idx].iterator, half * 4)
                    cute.arch.cp_async_bulk_commit_group()
        else:
            self.dq_atomics(thr_mma_dQ, acc_dQ, mdQacc_cur, mSem_cur, mask, tidx, m_block, n_block)
        warpgroup.wait_group(0)
        consumer_release(pipeline_q, state, self.key.elect_release)
        state.advance()
        return state

    @cute.jit
    def dq_stage_for_writer(self, acc_flat: cute.Tensor, tdQsdQ: cute.Tensor, wg_idx: Int32):
        """dq_bulk + dq_writer: once the writer warp (dq_writer_loop) freed this warpgroup's staging buffer, store the
        fragment (16-byte groups) and signal the writer, which issues the buffer's bulk reduce-add."""
        nthr = self.threads_per_wg + 32
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_EMPTY_WG1) + wg_idx, number_of_threads=nthr)
        cute.autovec_copy(acc_flat, tdQsdQ)
        cute.arch.fence_view_async_shared()
        cute.arch.barrier_arrive(barrier_id=int(NamedBarrierBwd.DQ_FULL_WG1) + wg_idx, number_of_threads=nthr)

    @cute.jit
    def pack_pairs(self, src: cute.Tensor, dst: cute.Tensor):
        """pack_once: ``dst`` (16-bit, the layout of the fp32 accumulator ``src``) = ``src`` rounded, one inline
        ``cvt.rn`` per pair of adjacent elements (both accumulator layouts hold elements 2i, 2i + 1 in one 32-bit
        register of ``dst``, the register order of the stmatrix and of the RS WGMMA's A operand)."""
        dst32 = cute.recast_tensor(dst, Int32)
        fp16 = self.dtype == cutlass.Float16
        for i in cutlass.range_constexpr(cute.size(dst32)):
            dst32[i] = cvt_pack_f32x2(src[2 * i], src[2 * i + 1], fp16)

    @cute.jit
    def dq_bulk_reduce_m128(self, mdQacc_cur: cute.Tensor, sdQ: cute.Tensor, m_block: Int32, w):
        """dq_bulk at m128 (one elected thread): warpgroup ``w``'s two 64-row halves of query block ``m_block`` added
        into fragment-ordered accumulator blocks ``2 m_block`` and ``2 m_block + 1`` (one bulk reduce-add each, in the
        caller's bulk group)."""
        half = DQ_BULK_ROWS * self.head_dim // self.num_consumer_wg
        gdQ = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block, 0))
        if const_expr(self.key.dq_rows):
            # dq_rows: warpgroup w staged the whole block 2 m_block + w (its 64 rows): one 16 KiB reduce-add
            with cute.arch.elect_one():
                reduce_add_bulk_f32(gdQ.iterator + w * (2 * half), sdQ[None, 0, w].iterator, 2 * half * 4)
        else:
            with cute.arch.elect_one():
                for h in cutlass.range_constexpr(2):
                    # block 2 m_block + h of the fragment-ordered accumulator: rows [64 h, 64 h + 64) of this block's bytes
                    reduce_add_bulk_f32(gdQ.iterator + (h * DQ_BULK_ROWS * self.head_dim + w * half), sdQ[None, w, h].iterator, half * 4)

    @cute.jit
    def dq_atomics(
        self,
        thr_mma_dQ,
        acc_dQ: cute.Tensor,
        mdQacc_cur: cute.Tensor,
        mSem_cur: cute.Tensor | None,
        mask: MaskInfoBwd,
        tidx: Int32,
        m_block: Int32,
        n_block: Int32,
    ):
        """dQ_accum[query block] += dS K with fp32 atomics from registers (the scratch rows are padded, so no bounds
        check); deterministic: in ascending key-block order through the block's turn counter."""
        gdQacc = cute.local_tile(mdQacc_cur, (self.tile_m, self.head_dim), (m_block, 0))
        tdQgdQ = thr_mma_dQ.partition_C(gdQacc)
        sem_ptr = None
        if const_expr(self.key.deterministic):
            sem_ptr = self.dq_turn_wait(mSem_cur, mask, tidx, m_block, n_block)
        pair = cute.make_rmem_tensor((2,), Float32)
        for i in cutlass.range_constexpr(cute.size(acc_dQ) // 2):
            # elements 2i and 2i + 1 are adjacent columns of one row: one 8-byte vector reduction
            pair[0] = acc_dQ[2 * i]
            pair[1] = acc_dQ[2 * i + 1]
            cute.arch.atomic_add(tdQgdQ.iterator + tdQgdQ.layout(2 * i), pair.load())
        if const_expr(self.key.deterministic):
            self.dq_turn_done(sem_ptr, tidx)

    @cute.jit
    def dq_turn_wait(self, mSem_cur: cute.Tensor, mask: MaskInfoBwd, tidx: Int32, m_block: Int32, n_block: Int32):
        """deterministic: wait until the query block's turn counter reaches this key block (the key blocks that see a
        query block add into its dQ in ascending order); returns the counter's pointer for :meth:`dq_turn_done`."""
        turn = n_block - mask.n_block_min_for(m_block)
        sem_ptr = mSem_cur.iterator + m_block
        if tidx == 0:
            cur = cute.arch.atomic_add(sem_ptr, Int32(0), scope="gpu")
            while cur != turn:
                cur = cute.arch.atomic_add(sem_ptr, Int32(0), scope="gpu")
            cute.arch.fence_acq_rel_gpu()
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_TURN), number_of_threads=self.num_mma_threads)
        return sem_ptr

    @cute.jit
    def dq_turn_done(self, sem_ptr: cute.Pointer, tidx: Int32):
        """deterministic: every consumer thread's dQ adds are visible GPU-wide, then the next key block's turn."""
        cute.arch.fence_acq_rel_gpu()
        cute.arch.barrier(barrier_id=int(NamedBarrierBwd.DQ_TURN), number_of_threads=self.num_mma_threads)
        if tidx == 0:
            cute.arch.atomic_add(sem_ptr, Int32(1), scope="gpu")


def compile_entry(tvm_ffi: bool, *args):
    """``cute.compile(*args)``, with ``tvm_ffi`` the tvm-ffi entry (``--enable-tvm-ffi``): its launch takes pointers as
    Python ints (``tensor.data_ptr()``) or None, extents and strides as ints (strides as tuples), scales as floats and
    the stream as a raw handle, a few microseconds per launch where the DSL's generic entry converts every argument in
    Python (session 12, H200: ~400 us of host time per backward call of three launches). Same device code."""
    if tvm_ffi:
        return cute.compile(*args, options="--enable-tvm-ffi")
    return cute.compile(*args)


def main_kernel_class(key: SdpaBwdKey) -> type:
    """The main kernel's class for ``key``: the 96-key kernel (tile_n96), a split-D one (split_d) or this module's.
    Used by both construction sites (compile_sdpa_bwd_main and the postprocess's plan of the dQ accumulator order)."""
    if key.tile_n96:
        from .kernel_n96_sm90 import SdpaBwdN96KernelSm90

        return SdpaBwdN96KernelSm90
    if key.split_d:
        from .kernel_splitd_sm90 import split_d_kernel_class

        return split_d_kernel_class(key)
    return SdpaBwdKernelSm90


def compile_sdpa_bwd_main(key: SdpaBwdKey, tvm_ffi: bool = False):
    """cute.compile the main kernel for ``key`` from placeholder pointers and runtime extents (no GPU needed);
    ``tvm_ffi``: the tvm-ffi entry (:func:`compile_entry`)."""
    dtype = DTYPES[key.dtype]
    ptr = fake_gmem_ptr
    zero = Int32(0)
    strides = (Int64(0), Int64(0), Int64(0))
    return compile_entry(
        tvm_ffi,
        main_kernel_class(key)(key),
        ptr(dtype), ptr(dtype), ptr(dtype), ptr(dtype), ptr(dtype), ptr(dtype),
        ptr(Float32), ptr(Float32), ptr(Float32), ptr(Int32) if key.deterministic or key.persistent or key.dq_first_store else None,
        ptr(Int32, 4) if key.varlen else None, ptr(Int32, 4) if key.varlen else None,
        zero, zero, zero, zero, zero, zero, Int32(PREPOST_ROWS), Int32(1), Int32(1),
        strides, strides, strides, strides, strides, strides,
        Float32(1.0), Float32(1.0), zero, zero, cuda.CUstream(0),
    )  # fmt: skip
