"""Persistent, warp-specialized Hopper (sm_90a) GEMM with fused epilogues, in CuTe DSL.

Computes, for every batch ``l``::

    D[m, n, l] = epilogue(alpha * sum_k A[m, k, l] * B[n, k, l] (+ beta * C[m, n, l]) (+ bias))

- A is (M, K, L), K-major or M-major; B is (N, K, L), K-major or N-major (``a @ b`` with a torch ``b``
  of shape (K, N) is B = b.T: a row-major ``b`` is N-major, ``w.t()`` of an nn.Linear weight is K-major).
  Both majors are served natively by the TMA descriptors and the WGMMA smem descriptors.
- bf16 or fp16 operands (same dtype), fp32 accumulation, D in the operand dtype, row-major (N contiguous);
  or fp8 e4m3 / e5m2 operands (K-major) with per-tensor fp32 scales and a bf16 / fp16 / fp8 D.
- M, N, K need not be multiples of the tile: TMA zero-fills out-of-bounds loads and clips stores;
  per-element epilogue reads (C, bias, aux) are predicated on the true extents.
- Extents M, N, K, L and every leading/batch stride are runtime Int32 arguments: one compiled kernel
  serves every shape of a plan (Rule 4); the compile key is :class:`GemmSm90Config`.

Structure (one CTA = 3 warpgroups, 384 threads):
- warpgroup 0 is the producer: one warp issues TMA loads of A and B k-tiles into a ``ab_stage``-deep
  smem ring (``PipelineTmaAsync`` full/empty mbarriers); with a 2x1 cluster each B tile is multicast
  to both CTAs of the pair. Its registers are given back (setmaxnreg 40).
- warpgroups 1 and 2 are the consumers (cooperative 128 x 256 tile, 64 rows each): WGMMA straight from
  swizzled smem, one WGMMA batch in flight, releasing each stage as soon as it retires (setmaxnreg 232).
- both walk the same static persistent schedule (``_device.tile_scheduler``): a grid of one cluster
  per SM slot, tiles rasterized along M (clusters in flight share B tiles in L2).
- epilogue, on the consumers, per 128 x 32 sub-tile: fp32 accumulator registers -> affine part,
  activation, swiglu pairing, amax (``_device.epilogue``) -> convert -> ``stmatrix`` into a 4-deep smem
  ring -> TMA store by one warp, overlapped with the next sub-tile (``PipelineTmaStore``).

Options (compile-key fields): ``pingpong`` gives each consumer warpgroup its own (64, N) tiles, alternate tiles of
the CTA's schedule, its mainloop ordered after the other's by two 256-thread named barriers (ids 3, 4) so that
its full-barrier waits never run a ring trip ahead; fp8 operands without ``fast_accum`` promote the WGMMA's
reduced-precision partial sums into a second fp32 accumulator every k-tile (128 of K), which needs a tile of at
most 96 accumulators per thread ((128, 128) or (128, 192)). Epilogue A/B options: ``aux_prefetch`` = d > 1 issues the
staged pre-activation's first d sub-tiles before the tile's mainloop and sub-tile k + d after D's store of k (into the
buffer whose store has read shared memory: ``cp.async.bulk.wait_group.read ring - d``; d > 4 deepens D's ring to d);
``aux_ldmatrix`` reads it back with ldmatrix in stmatrix's register order (and folds dsrelu's 2 into alpha);
``gelu_fold`` evaluates gelu_tanh with folded constants; ``amax_fast`` drops amax's per-element bounds predicate (outputs
outside the problem are exactly 0; only a staged bias needs its other mode predicated) and keeps 4 running maxima;
``swiglu_tanh`` evaluates silu through one tanh.approx instead of ex2.approx + rcp.approx.

SwiGLU pairs accumulator column ``c`` with ``c + 128`` of the same 256-wide tile (both live in the same
thread's registers): B's gate and up columns are interleaved in blocks of 128 (``swiglu_halves`` turns
the two-halves layout into that order with a hierarchical TMA view, no copy), D has N / 2 columns.

Tests: ``pytest packages/cudnn-gemm/tests`` (compile-only on CPU; GPU tests on the GPU host through
ci/gpu_tests.sh). Benchmark: ``python benchmarks/gemm.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32

from .._device import epilogue as epi_ops
from .._device.tile_scheduler import make_scheduler

_DTYPES = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
    "float8_e4m3fn": cutlass.Float8E4M3FN,
    "float8_e5m2": cutlass.Float8E5M2,
}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")

#: Independent running maxima per thread of an ``amax_fast`` plan (combined once, after the last tile).
AMAX_WAYS = 4

#: Half-width of a SwiGLU tile: gate/up blocks of this many columns alternate in B's N order.
SWIGLU_BLOCK = 128


@dataclass(frozen=True)
class GemmSm90Config:
    """Everything the compiled kernel specializes on (the compile key, Rule 4): plan-time values only."""

    ab_dtype: str = "bfloat16"
    d_dtype: str = "bfloat16"
    a_major: str = "k"  # "k" | "m"
    b_major: str = "k"  # "k" | "n"
    tile_mn: tuple = (128, 256)
    cluster_mn: tuple = (2, 1)
    swizzle: int = 1
    raster_along_m: bool = True
    max_active_clusters: int = 66
    # epilogue
    activation: str = "none"  # see _device.epilogue.ACTIVATIONS
    has_c: bool = False
    c_dtype: str = "bfloat16"
    bias: str = "none"  # "none" | "n" (one per output column) | "m" (one per row)
    bias_dtype: str = "bfloat16"
    swiglu: bool = False
    swiglu_halves: bool = False  # B's N is [gate | up] halves instead of 128-blocks
    store_pre: bool = False  # write the pre-activation to aux (M, N)
    dsrelu: bool = False  # D = acc * 2 * relu(aux), aux (M, N) read
    aux_dtype: str = "bfloat16"
    amax: bool = False
    # ---- fp8 and split-K (plan-time; the defaults leave the bf16/fp16 kernel exactly as before)
    b_dtype: str = ""  # "" = ab_dtype; an fp8 A may take the other fp8 format for B (e4m3 x e5m2)
    scale_ab: bool = False  # D uses alpha * scale_a[0] * scale_b[0]: fp32 device scalars, read in the epilogue
    scale_d: bool = False  # D = cast(y * scale_d[0]) (fp8 output quantization); amax is taken before it
    split_k: int = 1  # > 1: fp32 partials into the caller's workspace, then splitk_reduce_sm90 (deterministic)
    stage_bias: bool = False  # bias of the tile staged once into shared memory (fp32) instead of per-element global reads
    stage_aux: bool = False  # dsrelu: the pre-activation sub-tiles arrive by TMA (one ahead) instead of per-element global reads
    pingpong: bool = False  # two consumer warpgroups on alternate (64, N) tiles: one's epilogue overlaps the other's mainloop
    fast_accum: bool = False  # fp8 only: keep the WGMMA's reduced-precision accumulation (no promotion to a second fp32 sum)
    promotion_interval: int = 1  # fp8 without fast_accum: k-tiles (128 of K each) between promotions into the fp32 sum
    # ---- epilogue A/B options (the defaults leave the verified kernel exactly as before)
    aux_prefetch: int = 1  # stage_aux: pre-activation sub-tiles in flight ahead of the epilogue; > 4 grows D's ring to that depth
    aux_ldmatrix: bool = False  # stage_aux: read the staged pre-activation with ldmatrix (stmatrix's layout) instead of per-element ld.shared
    gelu_fold: bool = False  # gelu_tanh as x/2 * (1 + tanh(x * (k + k c x^2))): 5 FP ops + one tanh.approx instead of 8 + one
    amax_fast: bool = False  # amax without the per-element bounds predicate (out-of-bounds outputs are exactly 0), 4 running maxima per thread
    swiglu_tanh: bool = False  # swiglu's silu(g) as h + h * tanh(h), h = g / 2: one tanh.approx instead of ex2.approx + rcp.approx


def epilogue_free(cfg: GemmSm90Config) -> GemmSm90Config:
    """The GEMM half of a split-K plan: raw fp32 partial sums, every epilogue step moved to the reduction."""
    return replace(
        cfg,
        d_dtype="float32",
        activation="none",
        has_c=False,
        bias="none",
        store_pre=False,
        dsrelu=False,
        amax=False,
        scale_ab=False,
        scale_d=False,
        stage_bias=False,
        stage_aux=False,
        aux_prefetch=1,
        aux_ldmatrix=False,
        gelu_fold=False,
        amax_fast=False,
    )


class GemmSm90Kernel:
    """The kernel class: ``__init__`` holds the plan (:class:`GemmSm90Config`), ``__call__`` launches."""

    def __init__(self, cfg: GemmSm90Config):
        if cfg.split_k > 1:
            cfg = epilogue_free(cfg)
        self.cfg = cfg
        self.ab_dtype = _DTYPES[cfg.ab_dtype]
        self.b_dtype = _DTYPES[cfg.b_dtype or cfg.ab_dtype]
        self.d_dtype = _DTYPES[cfg.d_dtype]
        self.c_dtype = _DTYPES[cfg.c_dtype]
        self.bias_dtype = _DTYPES[cfg.bias_dtype]
        self.aux_dtype = _DTYPES[cfg.aux_dtype]
        self.acc_dtype = cutlass.Float32
        self.tile_m, self.tile_n = cfg.tile_mn
        self.tile_k = 64 if self.ab_dtype.width == 16 else 128  # one 128-byte swizzle row of K either way
        self.tile_shape_mnk = (self.tile_m, self.tile_n, self.tile_k)
        self.cluster_shape_mn = tuple(cfg.cluster_mn)
        self.atom_layout_mnk = (2, 1, 1) if self.tile_m > 64 and self.tile_n >= 128 else (1, 1, 1)
        self.num_mma_warp_groups = math.prod(self.atom_layout_mnk)
        self.threads_per_wg = 128
        self.threads_per_cta = (1 + self.num_mma_warp_groups) * self.threads_per_wg
        if cfg.pingpong:
            # one warpgroup per (64, N) tile, two of them taking turns: the pipeline hands out k-tiles in tile
            # order, so their mainloops serialize and each epilogue runs under the other's mainloop
            if self.tile_m != 64 or self.num_mma_warp_groups != 1:
                raise ValueError(f"pingpong runs one 64-row tile per consumer warpgroup: tile_mn must be (64, N), got {cfg.tile_mn}")
            if cfg.split_k > 1:
                raise ValueError("pingpong does not combine with split_k")
            self.threads_per_cta = 3 * self.threads_per_wg
        self.epi_rings = 2 if cfg.pingpong else 1  # one D smem ring per consumer warpgroup
        self.num_mma_threads = self.num_mma_warp_groups * self.threads_per_wg
        self.load_warp_id = 0
        self.epi_store_warp_id = 4
        self.load_regs = 40
        self.mma_regs = 232
        self.smem_capacity = utils.get_smem_capacity_in_bytes("sm_90")
        self.buffer_align_bytes = 1024
        self.epi_stage = 4 if self.d_dtype.width <= 16 else 2  # fp32 partials (split-K): 16 KB per stage
        if not 1 <= cfg.aux_prefetch <= 8:
            raise ValueError(f"aux_prefetch must be 1..8 sub-tiles, got {cfg.aux_prefetch}")
        if (cfg.aux_prefetch > 1 or cfg.aux_ldmatrix) and not cfg.stage_aux:
            raise ValueError("aux_prefetch > 1 and aux_ldmatrix serve the staged dsrelu pre-activation: they need stage_aux")
        if cfg.gelu_fold and cfg.activation != "gelu_tanh":
            raise ValueError(f"gelu_fold serves activation 'gelu_tanh', got {cfg.activation!r}")
        if cfg.amax_fast and not cfg.amax:
            raise ValueError("amax_fast serves amax plans: it needs amax=True")
        if cfg.swiglu_tanh and not cfg.swiglu:
            raise ValueError("swiglu_tanh serves swiglu plans: it needs swiglu=True")
        if cfg.aux_prefetch > self.epi_stage:
            # the whole prefetch window lives in D's smem ring: deepen it (8 = a whole 128 x 256 tile, one mainloop stage less)
            self.epi_stage = cfg.aux_prefetch
        self.epi_sync_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)
        self.pingpong_bar_id = 3  # pingpong: named barriers 3, 4 order the two warpgroups' mainloops (1, 2: their epilogues)
        self.num_mcast_ctas_a = self.cluster_shape_mn[1]
        self.num_mcast_ctas_b = self.cluster_shape_mn[0]
        self.is_a_mcast = self.num_mcast_ctas_a > 1
        self.is_b_mcast = self.num_mcast_ctas_b > 1
        if cfg.split_k < 1:
            raise ValueError(f"split_k must be >= 1, got {cfg.split_k}")
        if self.ab_dtype.width == 8 and (cfg.a_major != "k" or cfg.b_major != "k"):
            raise ValueError("fp8 WGMMA reads A and B K-major from shared memory: a_major and b_major must be 'k'")
        # fp8 with promotion keeps a second fp32 accumulator: two of them must fit the 232 registers of a consumer
        # (96 + 96 at (128, 192) compiles without spills; 128 + 128 at (128, 256) cannot)
        self.fp8_promote = self.ab_dtype.width == 8 and not cfg.fast_accum
        acc_per_thread = self.tile_m * self.tile_n // (self.num_mma_warp_groups * self.threads_per_wg)
        if cfg.promotion_interval < 1:
            raise ValueError(f"promotion_interval must be >= 1 k-tile, got {cfg.promotion_interval}")
        if self.fp8_promote and acc_per_thread > 96:
            raise ValueError(
                f"fp8 with fast_accum=False keeps two fp32 accumulators ({2 * acc_per_thread} registers per thread for tile_mn="
                f"{cfg.tile_mn}): use a tile of at most 96 accumulators per thread: (128, 128), (128, 192), pingpong (64, 128), (64, 192)"
            )
        if cfg.stage_aux and not (cfg.dsrelu and cfg.aux_dtype == cfg.d_dtype and not cfg.swiglu):
            raise ValueError("stage_aux serves the dsrelu pre-activation read, with aux in D's dtype (it shares D's smem ring)")
        if cfg.swiglu and self.tile_n != 2 * SWIGLU_BLOCK:
            raise ValueError(f"swiglu needs a {2 * SWIGLU_BLOCK}-wide N tile, got {self.tile_n}")

    # ------------------------------------------------------------------------------------ host
    def _setup(self, a_layout, b_layout, d_layout):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.b_dtype,
            a_layout.sm90_mma_major_mode(),
            b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            self.atom_layout_mnk,
            tiler_mn=(64, self.tile_n),
        )
        self.cta_layout_mnk = cute.make_layout((*self.cluster_shape_mn, 1))
        self.epi_tile = (min(128, self.tile_m), 32) if self.atom_layout_mnk == (2, 1, 1) else (min(64, self.tile_m), 32)
        ab_bytes = (self.tile_m * self.ab_dtype.width + self.tile_n * self.b_dtype.width) * self.tile_k // 8
        epi_bytes = self.epi_tile[0] * self.epi_tile[1] * self.d_dtype.width // 8 * self.epi_stage * self.epi_rings
        self.ab_stage = (self.smem_capacity - 1024 - epi_bytes) // ab_bytes
        if self.ab_stage < 2:
            raise ValueError(f"the epilogue ring ({epi_bytes} bytes) leaves {self.ab_stage} mainloop stage(s) of {ab_bytes} bytes: need 2")
        self.a_smem_layout_staged = sm90_utils.make_smem_layout_a(a_layout, self.tile_shape_mnk, self.ab_dtype, self.ab_stage)
        self.b_smem_layout_staged = sm90_utils.make_smem_layout_b(b_layout, self.tile_shape_mnk, self.b_dtype, self.ab_stage)
        self.epi_smem_layout_staged = sm90_utils.make_smem_layout_epi(self.d_dtype, d_layout, self.epi_tile, self.epi_stage * self.epi_rings)

    @cute.jit
    def __call__(
        self,
        pA: cute.Pointer,
        pB: cute.Pointer,
        pD: cute.Pointer,
        pC,
        pBias,
        pAux,
        pAmax,
        pScaleA,
        pScaleB,
        pScaleD,
        m: Int32,
        n: Int32,
        k: Int32,
        l: Int32,  # noqa: E741
        lda: Int32,
        bsa: Int32,
        ldb: Int32,
        bsb: Int32,
        ldd: Int32,
        bsd: Int32,
        c_sm: Int32,
        c_sn: Int32,
        bsc: Int32,
        bs_bias: Int32,
        ldaux: Int32,
        bsaux: Int32,
        alpha: Float32,
        beta: Float32,
        stream: cuda.CUstream,
    ):
        cfg = self.cfg
        # ---- global tensors (layouts from runtime extents/strides; the unit stride is static for TMA)
        if cutlass.const_expr(cfg.a_major == "k"):
            mA = cute.make_tensor(pA, cute.make_layout((m, k, l), stride=(lda, 1, bsa)))
        else:
            mA = cute.make_tensor(pA, cute.make_layout((m, k, l), stride=(1, lda, bsa)))
        if cutlass.const_expr(cfg.swiglu_halves):
            # [gate | up] halves seen as 128-blocks interleaved: N = ((128, 2, N / 256)).
            half = n // 2
            nblk = n // (2 * SWIGLU_BLOCK)
            if cutlass.const_expr(cfg.b_major == "k"):
                mB = cute.make_tensor(pB, cute.make_layout(((SWIGLU_BLOCK, 2, nblk), k, l), stride=((ldb, half * ldb, SWIGLU_BLOCK * ldb), 1, bsb)))
            else:
                mB = cute.make_tensor(pB, cute.make_layout(((SWIGLU_BLOCK, 2, nblk), k, l), stride=((1, half, SWIGLU_BLOCK), ldb, bsb)))
        else:
            if cutlass.const_expr(cfg.b_major == "k"):
                mB = cute.make_tensor(pB, cute.make_layout((n, k, l), stride=(ldb, 1, bsb)))
            else:
                mB = cute.make_tensor(pB, cute.make_layout((n, k, l), stride=(1, ldb, bsb)))
        n_d = n
        if cutlass.const_expr(cfg.swiglu):
            n_d = n // 2
        mD = cute.make_tensor(pD, cute.make_layout((m, n_d, l), stride=(ldd, 1, bsd)))
        if cutlass.const_expr(cfg.split_k > 1):
            mD = cute.make_tensor(pD, cute.make_layout((m, n, l * cfg.split_k), stride=(ldd, 1, bsd)))
        mC = None
        if cutlass.const_expr(cfg.has_c):
            mC = cute.make_tensor(pC, cute.make_layout((m, n, l), stride=(c_sm, c_sn, bsc)))
        mBias = None
        if cutlass.const_expr(cfg.bias == "n"):
            mBias = cute.make_tensor(pBias, cute.make_layout((n, l), stride=(1, bs_bias)))
        if cutlass.const_expr(cfg.bias == "m"):
            mBias = cute.make_tensor(pBias, cute.make_layout((m, l), stride=(1, bs_bias)))
        mAux = None
        if cutlass.const_expr(cfg.store_pre or cfg.dsrelu):
            mAux = cute.make_tensor(pAux, cute.make_layout((m, n, l), stride=(ldaux, 1, bsaux)))

        # per-tensor fp32 scales: one-element device tensors, read by the consumers (never by the host)
        mScaleA = None
        mScaleB = None
        if cutlass.const_expr(cfg.scale_ab):
            mScaleA = cute.make_tensor(pScaleA, cute.make_layout(1))
            mScaleB = cute.make_tensor(pScaleB, cute.make_layout(1))
        mScaleD = None
        if cutlass.const_expr(cfg.scale_d):
            mScaleD = cute.make_tensor(pScaleD, cute.make_layout(1))

        a_layout = utils.LayoutEnum.from_tensor(mA)
        b_layout = (
            utils.LayoutEnum.from_tensor(mB)
            if cutlass.const_expr(not cfg.swiglu_halves)
            else (utils.LayoutEnum.ROW_MAJOR if cutlass.const_expr(cfg.b_major == "k") else utils.LayoutEnum.COL_MAJOR)
        )
        d_layout = utils.LayoutEnum.ROW_MAJOR
        self._setup(a_layout, b_layout, d_layout)

        a_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if self.is_a_mcast else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        b_op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp() if self.is_b_mcast else cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        tma_atom_a, tma_tensor_a = cute.nvgpu.cpasync.make_tiled_tma_atom(
            a_op,
            mA,
            cute.slice_(self.a_smem_layout_staged, (None, None, 0)),
            (self.tile_m, self.tile_k),
            num_multicast=self.num_mcast_ctas_a,
        )
        tma_atom_b, tma_tensor_b = cute.nvgpu.cpasync.make_tiled_tma_atom(
            b_op,
            mB,
            cute.slice_(self.b_smem_layout_staged, (None, None, 0)),
            (self.tile_n, self.tile_k),
            num_multicast=self.num_mcast_ctas_b,
        )
        tma_atom_d, tma_tensor_d = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(),
            mD,
            cute.slice_(self.epi_smem_layout_staged, (None, None, 0)),
            self.epi_tile,
        )

        tma_atom_aux = None
        tma_tensor_aux = None
        if cutlass.const_expr(cfg.stage_aux):
            # the pre-activation read of dsrelu, by 128 x 32 sub-tiles into D's own smem ring (same dtype and layout)
            tma_atom_aux, tma_tensor_aux = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(),
                mAux,
                cute.slice_(self.epi_smem_layout_staged, (None, None, 0)),
                self.epi_tile,
            )

        tiles_mnl = (cute.ceil_div(m, self.tile_m), cute.ceil_div(n, self.tile_n), l)
        if cutlass.const_expr(cfg.split_k > 1):
            # split-K: the scheduler's L walks (batch, split) pairs; D is the (M, N, L * split_k) fp32 partial stack
            tiles_mnl = (cute.ceil_div(m, self.tile_m), cute.ceil_div(n, self.tile_n), l * cfg.split_k)
        sched_params, grid = make_scheduler(tiles_mnl, self.cluster_shape_mn, cfg.swizzle, cfg.raster_along_m, cfg.max_active_clusters)

        @cute.struct
        class SharedStorage:  # noqa: N801
            mainloop_pipeline_array_ptr: cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.a_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815
            sD: cute.struct.Align[cute.struct.MemRange[self.d_dtype, cute.cosize(self.epi_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815

        self.shared_storage = SharedStorage
        if cutlass.const_expr(cfg.stage_bias or cfg.stage_aux):

            @cute.struct
            class SharedStorageBias:  # noqa: N801
                mainloop_pipeline_array_ptr: cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]
                aux_bar: cute.struct.MemRange[cutlass.Int64, self.epi_stage * self.epi_rings]
                sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.a_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815
                sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815
                sD: cute.struct.Align[cute.struct.MemRange[self.d_dtype, cute.cosize(self.epi_smem_layout_staged)], self.buffer_align_bytes]  # noqa: N815
                sBias: cute.struct.Align[cute.struct.MemRange[Float32, max(self.tile_m, self.tile_n) * self.epi_rings], 16]  # noqa: N815

            self.shared_storage = SharedStorageBias

        self.kernel(
            tma_atom_a,
            tma_tensor_a,
            tma_atom_b,
            tma_tensor_b,
            tma_atom_d,
            tma_tensor_d,
            tma_atom_aux,
            tma_tensor_aux,
            mC,
            mBias,
            mAux,
            pAmax,
            mScaleA,
            mScaleB,
            mScaleD,
            m,
            n,
            alpha,
            beta,
            self.tiled_mma,
            self.cta_layout_mnk,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            sched_params,
        ).launch(
            grid=grid,
            block=[self.threads_per_cta, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    # ---------------------------------------------------------------------------------- device
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mkl: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        mD_mnl: cute.Tensor,
        tma_atom_aux: cute.CopyAtom | None,
        mAuxTma: cute.Tensor | None,
        mC: cute.Tensor | None,
        mBias: cute.Tensor | None,
        mAux: cute.Tensor | None,
        pAmax,
        mScaleA: cute.Tensor | None,
        mScaleB: cute.Tensor | None,
        mScaleD: cute.Tensor | None,
        m: Int32,
        n: Int32,
        alpha: Float32,
        beta: Float32,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem_layout_staged: cute.ComposedLayout,
        b_smem_layout_staged: cute.ComposedLayout,
        epi_smem_layout_staged: cute.ComposedLayout,
        sched_params: utils.PersistentTileSchedulerParams,
    ):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())

        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_atom_d)

        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_mnk = cta_layout_mnk.get_flat_coord(cta_rank_in_cluster)
        a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=1)
        b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=0)
        a_mcast_mask = a_mcast_mask if self.is_a_mcast else 0
        b_mcast_mask = b_mcast_mask if self.is_b_mcast else 0
        a_smem_layout = cute.slice_(a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(b_smem_layout_staged, (None, None, 0))
        tma_copy_bytes = cute.size_in_bytes(self.ab_dtype, a_smem_layout) + cute.size_in_bytes(self.b_dtype, b_smem_layout)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # ---- mainloop pipeline: full barriers (TMA tx count) / empty barriers (consumer warps x mcast CTAs)
        mcast_size = self.num_mcast_ctas_a + self.num_mcast_ctas_b - 1
        consumer_arrive_cnt = mcast_size * self.num_mma_warp_groups * 4
        mainloop_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mainloop_pipeline_array_ptr.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrive_cnt),
            tx_count=tma_copy_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
        )
        if cutlass.const_expr(cfg.stage_aux):
            # one transaction barrier per buffer of D's smem ring (the aux sub-tile loads land there)
            aux_bar = storage.aux_bar.data_ptr()
            if warp_idx == 0:
                with cute.arch.elect_one():
                    for i in cutlass.range_constexpr(self.epi_stage * self.epi_rings):
                        cute.arch.mbarrier_init(aux_bar + i, 1)
            cute.arch.mbarrier_init_fence()
        if cute.size(self.cluster_shape_mn) > 1:
            cute.arch.cluster_arrive_relaxed()

        sA = storage.sA.get_tensor(a_smem_layout_staged.outer, swizzle=a_smem_layout_staged.inner)
        sB = storage.sB.get_tensor(b_smem_layout_staged.outer, swizzle=b_smem_layout_staged.inner)
        sD = storage.sD.get_tensor(epi_smem_layout_staged.outer, swizzle=epi_smem_layout_staged.inner)

        # (bM, bK, RestM, RestK, RestL) / (bN, bK, RestN, RestK, RestL)
        gA_mkl = cute.local_tile(mA_mkl, cute.slice_(self.tile_shape_mnk, (None, 0, None)), (None, None, None))
        gB_nkl = cute.local_tile(mB_nkl, cute.slice_(self.tile_shape_mnk, (0, None, None)), (None, None, None))
        # D tile: (bM, bN) or (bM, bN / 2) for swiglu
        d_tile_n = self.tile_n // 2 if cutlass.const_expr(cfg.swiglu) else self.tile_n
        gD_mnl = cute.local_tile(mD_mnl, (self.tile_m, d_tile_n), (None, None, None))

        a_cta_layout = cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape)
        tAsA, tAgA = cute.nvgpu.cpasync.tma_partition(
            tma_atom_a, cluster_coord_mnk[1], a_cta_layout, cute.group_modes(sA, 0, 2), cute.group_modes(gA_mkl, 0, 2)
        )
        b_cta_layout = cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape)
        tBsB, tBgB = cute.nvgpu.cpasync.tma_partition(
            tma_atom_b, cluster_coord_mnk[0], b_cta_layout, cute.group_modes(sB, 0, 2), cute.group_modes(gB_nkl, 0, 2)
        )

        warp_group_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        mma_wg_layout = cute.make_layout(self.num_mma_warp_groups, stride=self.threads_per_wg)
        if cutlass.const_expr(cfg.pingpong):
            thr_mma = tiled_mma.get_slice(0)  # both consumer warpgroups hold a whole (64, N) tile
        else:
            thr_mma = tiled_mma.get_slice(mma_wg_layout(warp_group_idx - 1))
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        cAcc = cute.make_identity_tensor((self.tile_m, self.tile_n))
        accumulators = cute.make_rmem_tensor(thr_mma.partition_C(cAcc).shape, self.acc_dtype)
        acc_slow = None
        if cutlass.const_expr(self.fp8_promote):
            acc_slow = cute.make_rmem_tensor(thr_mma.partition_C(cAcc).shape, self.acc_dtype)

        k_tile_cnt = cute.size(gA_mkl, mode=[3])
        k_per_split = k_tile_cnt
        if cutlass.const_expr(cfg.split_k > 1):
            k_per_split = (k_tile_cnt + cfg.split_k - 1) // cfg.split_k

        if cute.size(self.cluster_shape_mn) > 1:
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()

        is_dma_warp_group = warp_group_idx == 0
        if is_dma_warp_group:
            cute.arch.warpgroup_reg_dealloc(self.load_regs)

        # ======================================================= producer: TMA loads
        if warp_idx == self.load_warp_id:
            tile_sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
            work_tile = tile_sched.initial_work_tile_info()
            producer_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
            while work_tile.is_valid_tile:
                tile_coord_mnl = work_tile.tile_idx
                if cutlass.const_expr(cfg.split_k == 1):
                    tAgA_mkl = tAgA[(None, tile_coord_mnl[0], None, tile_coord_mnl[2])]
                    tBgB_nkl = tBgB[(None, tile_coord_mnl[1], None, tile_coord_mnl[2])]
                    producer_state.reset_count()
                    for _k_tile in range(k_tile_cnt):
                        mainloop_pipeline.producer_acquire(producer_state)
                        cute.copy(
                            tma_atom_a,
                            tAgA_mkl[(None, producer_state.count)],
                            tAsA[(None, producer_state.index)],
                            tma_bar_ptr=mainloop_pipeline.producer_get_barrier(producer_state),
                            mcast_mask=a_mcast_mask,
                        )
                        cute.copy(
                            tma_atom_b,
                            tBgB_nkl[(None, producer_state.count)],
                            tBsB[(None, producer_state.index)],
                            tma_bar_ptr=mainloop_pipeline.producer_get_barrier(producer_state),
                            mcast_mask=b_mcast_mask,
                        )
                        mainloop_pipeline.producer_commit(producer_state)
                        producer_state.advance()
                else:
                    # split-K: this work tile is (batch, split) = divmod(L coordinate, split_k), k tiles [k_begin, k_begin + k_cnt)
                    ab_l = tile_coord_mnl[2] // cfg.split_k
                    k_begin = (tile_coord_mnl[2] % cfg.split_k) * k_per_split
                    k_cnt = cutlass.max(cutlass.min(k_tile_cnt - k_begin, k_per_split), 0)
                    tAgA_mkl = tAgA[(None, tile_coord_mnl[0], None, ab_l)]
                    tBgB_nkl = tBgB[(None, tile_coord_mnl[1], None, ab_l)]
                    producer_state.reset_count()
                    for _k_tile in range(k_cnt):
                        mainloop_pipeline.producer_acquire(producer_state)
                        cute.copy(
                            tma_atom_a,
                            tAgA_mkl[(None, producer_state.count + k_begin)],
                            tAsA[(None, producer_state.index)],
                            tma_bar_ptr=mainloop_pipeline.producer_get_barrier(producer_state),
                            mcast_mask=a_mcast_mask,
                        )
                        cute.copy(
                            tma_atom_b,
                            tBgB_nkl[(None, producer_state.count + k_begin)],
                            tBsB[(None, producer_state.index)],
                            tma_bar_ptr=mainloop_pipeline.producer_get_barrier(producer_state),
                            mcast_mask=b_mcast_mask,
                        )
                        mainloop_pipeline.producer_commit(producer_state)
                        producer_state.advance()
                tile_sched.advance_to_next_work()
                work_tile = tile_sched.get_current_work()
            mainloop_pipeline.producer_tail(producer_state)

        # ======================================================= consumers: WGMMA + epilogue
        if not is_dma_warp_group:
            cute.arch.warpgroup_reg_alloc(self.mma_regs)
            tile_sched = utils.StaticPersistentTileScheduler.create(sched_params, cute.arch.block_idx(), cute.arch.grid_dim())
            work_tile = tile_sched.initial_work_tile_info()
            read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            epi_bar = self.epi_sync_barrier
            store_warp = self.epi_store_warp_id
            if cutlass.const_expr(cfg.pingpong):
                # warpgroup 2 starts one tile later (and past that tile's k-tiles); both then step two tiles
                wg_off = warp_group_idx - 1
                tile_sched.advance_to_next_work(advance_count=wg_off)
                work_tile = tile_sched.get_current_work()
                read_state.advance(k_tile_cnt * wg_off)
                release_state.advance(k_tile_cnt * wg_off)
                epi_bar = pipeline.NamedBarrier(barrier_id=warp_group_idx, num_threads=self.num_mma_threads)
                store_warp = warp_group_idx * 4
                # Mainloop turn-taking (bar.sync on my barrier by my 128 threads + bar.arrive by the other
                # warpgroup's 128). A warpgroup may only wait on the full barrier of its first k-tile once the
                # other has passed all of its own waits: the ring is ab_stage deep, so a wait issued earlier could
                # name a phase two fills ahead whose parity equals an already completed one, and pass on the
                # other warpgroup's data (then release a stage twice: the multi-tile launch failure of the
                # unordered version). Warpgroup 1 opens its own barrier for its first tile; the one arrive left
                # pending when the loops end is harmless (named barriers reset with the CTA).
                mma_turn = pipeline.NamedBarrier(barrier_id=self.pingpong_bar_id + wg_off, num_threads=2 * self.threads_per_wg)
                mma_turn_other = pipeline.NamedBarrier(barrier_id=self.pingpong_bar_id + 1 - wg_off, num_threads=2 * self.threads_per_wg)
                if wg_off == 0:
                    mma_turn.arrive()
            num_k_blocks = cute.size(tCrA, mode=[2])

            copy_atom_r2s = sm90_utils.sm90_get_smem_store_op(utils.LayoutEnum.ROW_MAJOR, elem_ty_d=self.d_dtype, elem_ty_acc=self.acc_dtype)
            copy_atom_d = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.d_dtype)
            tiled_copy_d_atom = cute.make_tiled_copy_C_atom(copy_atom_d, tiled_mma)
            tiled_copy_r2s = cute.make_tiled_copy_S(copy_atom_r2s, tiled_copy_d_atom)
            if cutlass.const_expr(cfg.pingpong):
                thr_copy_r2s = tiled_copy_r2s.get_slice(tidx % self.threads_per_wg)
            else:
                thr_copy_r2s = tiled_copy_r2s.get_slice(tidx - self.threads_per_wg)
            tRS_sD = thr_copy_r2s.partition_D(sD)
            tRS_rAcc = tiled_copy_r2s.retile(accumulators if cutlass.const_expr(not self.fp8_promote) else acc_slow)
            # (row, col) inside the CTA tile of every accumulator register of THIS thread: the slice is per
            # consumer thread (thr_mma above is per warpgroup: enough for the smem descriptors, not for C)
            if cutlass.const_expr(cfg.pingpong):
                tCcAcc = tiled_mma.get_slice(tidx % self.threads_per_wg).partition_C(cAcc)
            else:
                tCcAcc = tiled_mma.get_slice(tidx - self.threads_per_wg).partition_C(cAcc)
            tRS_cAcc = tiled_copy_r2s.retile(tCcAcc)
            rD_shape = cute.shape(thr_copy_r2s.partition_S(sD))
            tRS_rD = cute.make_rmem_tensor(rD_shape[:3], self.acc_dtype)
            tRS_rD_out = cute.make_rmem_tensor(rD_shape[:3], self.d_dtype)
            size_tRS_rD = cute.size(tRS_rD)
            if cutlass.const_expr(cfg.aux_ldmatrix):
                # the staged pre-activation back out of the ring with ldmatrix: the inverse of D's stmatrix, so register i of
                # tRS_rAux holds the element of tRS_rD[i] (16-byte row reads instead of 2-byte ld.shared per element)
                tiled_copy_s2r = cute.make_tiled_copy_S(cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(False, 4), self.aux_dtype), tiled_copy_d_atom)
                if cutlass.const_expr(cfg.pingpong):
                    thr_copy_s2r = tiled_copy_s2r.get_slice(tidx % self.threads_per_wg)
                else:
                    thr_copy_s2r = tiled_copy_s2r.get_slice(tidx - self.threads_per_wg)
                tSR_sAux = thr_copy_s2r.partition_S(sD)
                tRS_rAux = cute.make_rmem_tensor(rD_shape[:3], self.aux_dtype)
                tSR_rAux = tiled_copy_s2r.retile(tRS_rAux)

            k_pipe_mmas = 1
            prologue_mma_cnt = min(k_pipe_mmas, k_tile_cnt)
            tma_store_pipeline = pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stage,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads),
            )
            amax_run = Float32(0.0)
            if cutlass.const_expr(cfg.amax_fast):
                amax_parts = cute.make_rmem_tensor(cute.make_layout(AMAX_WAYS), Float32)
                amax_parts.fill(0.0)
            # per-tensor scales: device scalars read once per thread (fp8 dequantization folds into alpha)
            alpha_eff = alpha
            if cutlass.const_expr(cfg.scale_ab):
                alpha_eff = alpha * mScaleA[0] * mScaleB[0]
            if cutlass.const_expr(cfg.scale_d):
                d_scale = mScaleD[0]
            dsrelu_fold = cfg.aux_ldmatrix and not cfg.has_c and cfg.bias == "none"
            if cutlass.const_expr(dsrelu_fold):
                alpha2 = alpha_eff * Float32(2.0)  # dsrelu's factor 2 folded into alpha (exact: a power of two)
            if cutlass.const_expr(cfg.stage_bias):
                sBias = storage.sBias.get_tensor(cute.make_layout(max(self.tile_m, self.tile_n)))
                ctid = tidx - self.threads_per_wg
                if cutlass.const_expr(cfg.pingpong):  # one staged bias per consumer warpgroup
                    sBias = cute.make_tensor(
                        storage.sBias.data_ptr() + (warp_group_idx - 1) * max(self.tile_m, self.tile_n), cute.make_layout(max(self.tile_m, self.tile_n))
                    )
                    ctid = tidx % self.threads_per_wg
            if cutlass.const_expr(cfg.stage_aux):
                gAux_mnl = cute.local_tile(mAuxTma, (self.tile_m, self.tile_n), (None, None, None))
                aux_epi_num = (self.tile_m // self.epi_tile[0]) * (self.tile_n // self.epi_tile[1])
                aux_ring = 0  # first buffer (and barrier) of this warpgroup's ring
                aux_tiles_off = 0
                if cutlass.const_expr(cfg.pingpong):
                    aux_ring = (warp_group_idx - 1) * self.epi_stage
                    aux_tiles_off = 1  # the scheduler's offset advance counted one tile
                aux_bytes = cute.size_in_bytes(self.aux_dtype, cute.slice_(epi_smem_layout_staged, (None, None, 0)))

            while work_tile.is_valid_tile:
                tile_coord_mnl = work_tile.tile_idx
                gD_tile = gD_mnl[(None, None, tile_coord_mnl[0], tile_coord_mnl[1], tile_coord_mnl[2])]
                row0 = tile_coord_mnl[0] * self.tile_m
                col0 = tile_coord_mnl[1] * self.tile_n
                bidx_l = tile_coord_mnl[2]
                tile_k_cnt = k_tile_cnt
                tile_prologue = prologue_mma_cnt
                if cutlass.const_expr(cfg.split_k > 1):
                    k_begin = (tile_coord_mnl[2] % cfg.split_k) * k_per_split
                    tile_k_cnt = cutlass.max(cutlass.min(k_tile_cnt - k_begin, k_per_split), 0)
                    tile_prologue = cutlass.min(k_pipe_mmas, tile_k_cnt)
                if cutlass.const_expr(cfg.stage_bias):
                    # this tile's bias, in tile order, into shared memory (zeros outside the problem). The previous
                    # tile's epilogue ended on a consumer barrier, so nobody still reads sBias.
                    if cutlass.const_expr(cfg.bias == "n"):
                        for j in cutlass.range_constexpr((self.tile_n + self.num_mma_threads - 1) // self.num_mma_threads):
                            tc = ctid + j * self.num_mma_threads
                            if tc < self.tile_n:
                                bv = Float32(0.0)
                                if col0 + tc < n:
                                    bn = col0 + tc
                                    if cutlass.const_expr(cfg.swiglu_halves):
                                        bn = col0 // 2 + tc
                                        if tc >= SWIGLU_BLOCK:
                                            bn = n // 2 + col0 // 2 + tc - SWIGLU_BLOCK
                                    bv = mBias[bn, bidx_l].to(Float32)
                                sBias[tc] = bv
                    if cutlass.const_expr(cfg.bias == "m"):
                        for j in cutlass.range_constexpr((self.tile_m + self.num_mma_threads - 1) // self.num_mma_threads):
                            tr = ctid + j * self.num_mma_threads
                            if tr < self.tile_m:
                                bv = Float32(0.0)
                                if row0 + tr < m:
                                    bv = mBias[row0 + tr, bidx_l].to(Float32)
                                sBias[tr] = bv
                    epi_bar.arrive_and_wait()
                if cutlass.const_expr(cfg.stage_aux):
                    # prefetch this tile's first aux sub-tile behind the mainloop, into the D ring buffer its
                    # D sub-tile will use (free: the store warp's last producer_acquire retired its old store)
                    gAux_epi = cute.zipped_divide(gAux_mnl[(None, None, tile_coord_mnl[0], tile_coord_mnl[1], tile_coord_mnl[2])], self.epi_tile)
                    bSG_sAux, bSG_gAux = cute.nvgpu.cpasync.tma_partition(tma_atom_aux, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gAux_epi)
                    aux_epi_layout = cute.make_layout(gAux_epi.shape[1], stride=(gAux_epi.shape[1][1], 1))
                    if warp_idx == store_warp:
                        if cutlass.const_expr(cfg.aux_prefetch == 1):
                            aux_buf0 = aux_ring + ((tile_sched.num_tiles_executed - aux_tiles_off) * aux_epi_num) % self.epi_stage
                            with cute.arch.elect_one():
                                cute.arch.mbarrier_arrive_and_expect_tx(aux_bar + aux_buf0, aux_bytes)
                            cute.copy(
                                tma_atom_aux,
                                bSG_gAux[(None, aux_epi_layout.get_hier_coord(0))],
                                bSG_sAux[(None, aux_buf0)],
                                tma_bar_ptr=aux_bar + aux_buf0,
                            )
                        else:
                            # the first aux_prefetch sub-tiles, before the mainloop: their buffers held the previous tile's
                            # last D sub-tiles, so the stores issued from them must have read shared memory (the ring is
                            # epi_stage deep: at most epi_stage - aux_prefetch later stores may still be pending)
                            cute.arch.cp_async_bulk_wait_group(self.epi_stage - cfg.aux_prefetch, read=True)
                            aux_base = (tile_sched.num_tiles_executed - aux_tiles_off) * aux_epi_num
                            for j in cutlass.range_constexpr(min(cfg.aux_prefetch, aux_epi_num)):
                                aux_bj = aux_ring + (aux_base + j) % self.epi_stage
                                with cute.arch.elect_one():
                                    cute.arch.mbarrier_arrive_and_expect_tx(aux_bar + aux_bj, aux_bytes)
                                cute.copy(
                                    tma_atom_aux,
                                    bSG_gAux[(None, aux_epi_layout.get_hier_coord(j))],
                                    bSG_sAux[(None, aux_bj)],
                                    tma_bar_ptr=aux_bar + aux_bj,
                                )

                # ---- mainloop
                if cutlass.const_expr(cfg.pingpong):
                    mma_turn.arrive_and_wait()  # my turn: the other warpgroup has issued its whole mainloop
                read_state.reset_count()
                release_state.reset_count()
                accumulators.fill(0.0)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                cute.nvgpu.warpgroup.fence()
                if cutlass.const_expr(self.fp8_promote):
                    # fp8 WGMMA adds into its fp32 registers with reduced precision (the "fast accumulation" of
                    # cuBLAS's use_fast_accum=True): every promotion_interval k-tiles (1: 4 WGMMA k-blocks, K = 128)
                    # the partial sum is added to a full-precision fp32 accumulator and restarted from zero. The
                    # drain (wait_group 0) per promotion is the price; the TMA ring keeps loading meanwhile.
                    acc_slow.fill(0.0)
                    if cutlass.const_expr(cfg.promotion_interval > 1):
                        # groups of P k-tiles: inside a group one WGMMA batch stays in flight (wait_group 1, release the
                        # previous stage), the group's last batch is drained (wait_group 0), both stages still held
                        # are released and the partial sum is promoted
                        for _k_group in range(tile_k_cnt // cfg.promotion_interval):
                            for j in cutlass.range_constexpr(cfg.promotion_interval):
                                mainloop_pipeline.consumer_wait(read_state)
                                cute.nvgpu.warpgroup.fence()
                                for kb in cutlass.range_constexpr(num_k_blocks):
                                    kc = (None, None, kb, read_state.index)
                                    cute.gemm(tiled_mma, accumulators, tCrA[kc], tCrB[kc], accumulators)
                                cute.nvgpu.warpgroup.commit_group()
                                read_state.advance()
                                if cutlass.const_expr(j + 1 < cfg.promotion_interval):
                                    cute.nvgpu.warpgroup.wait_group(1)
                                    if cutlass.const_expr(j > 0):
                                        mainloop_pipeline.consumer_release(release_state)
                                        release_state.advance()
                                else:
                                    cute.nvgpu.warpgroup.wait_group(0)
                                    for _r in cutlass.range_constexpr(2):
                                        mainloop_pipeline.consumer_release(release_state)
                                        release_state.advance()
                                    acc_slow.store(acc_slow.load() + accumulators.load())
                                    accumulators.fill(0.0)
                    # one k-tile per promotion (all of them when promotion_interval is 1, else the remainder)
                    rem_k_cnt = tile_k_cnt
                    if cutlass.const_expr(cfg.promotion_interval > 1):
                        rem_k_cnt = tile_k_cnt % cfg.promotion_interval
                    for _k_tile in range(rem_k_cnt):
                        mainloop_pipeline.consumer_wait(read_state)
                        cute.nvgpu.warpgroup.fence()
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            kc = (None, None, kb, read_state.index)
                            cute.gemm(tiled_mma, accumulators, tCrA[kc], tCrB[kc], accumulators)
                        cute.nvgpu.warpgroup.commit_group()
                        cute.nvgpu.warpgroup.wait_group(0)
                        mainloop_pipeline.consumer_release(release_state)
                        release_state.advance()
                        read_state.advance()
                        acc_slow.store(acc_slow.load() + accumulators.load())
                        accumulators.fill(0.0)
                    if cutlass.const_expr(cfg.pingpong):
                        mma_turn_other.arrive()  # every full-barrier wait of this tile is behind me: the other's turn
                else:
                    for _k_tile in range(tile_prologue):
                        mainloop_pipeline.consumer_wait(read_state)
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            kc = (None, None, kb, read_state.index)
                            cute.gemm(tiled_mma, accumulators, tCrA[kc], tCrB[kc], accumulators)
                        cute.nvgpu.warpgroup.commit_group()
                        read_state.advance()
                    for _k_tile in range(tile_prologue, tile_k_cnt):
                        mainloop_pipeline.consumer_wait(read_state)
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            kc = (None, None, kb, read_state.index)
                            cute.gemm(tiled_mma, accumulators, tCrA[kc], tCrB[kc], accumulators)
                        cute.nvgpu.warpgroup.commit_group()
                        cute.nvgpu.warpgroup.wait_group(k_pipe_mmas)
                        mainloop_pipeline.consumer_release(release_state)
                        release_state.advance()
                        read_state.advance()
                    if cutlass.const_expr(cfg.pingpong):
                        mma_turn_other.arrive()  # every full-barrier wait of this tile is behind me: the other's turn
                    cute.nvgpu.warpgroup.wait_group(0)
                    for _k_tile in range(tile_prologue):
                        mainloop_pipeline.consumer_release(release_state)
                        release_state.advance()

                # ---- epilogue
                gD_epi = cute.zipped_divide(gD_tile, self.epi_tile)
                bSG_sD, bSG_gD = cute.nvgpu.cpasync.tma_partition(tma_atom_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi)
                epi_tile_num = cute.size(gD_epi, mode=[1])
                epi_tile_shape = gD_epi.shape[1]
                epi_tile_layout = cute.make_layout(epi_tile_shape, stride=(epi_tile_shape[1], 1))
                # sub-tiles of the accumulator between a gate value and its up value (swiglu)
                up_offset = epi_tile_num * size_tRS_rD
                num_prev_epi_tiles = tile_sched.num_tiles_executed * epi_tile_num
                if cutlass.const_expr(cfg.pingpong):
                    num_prev_epi_tiles = (tile_sched.num_tiles_executed - 1) * epi_tile_num  # its own tiles (the offset advance counted one)
                for epi_idx in cutlass.range_constexpr(epi_tile_num):
                    if cutlass.const_expr(cfg.stage_aux):
                        aux_g = num_prev_epi_tiles + epi_idx
                        aux_buf = aux_ring + aux_g % self.epi_stage
                        cute.arch.mbarrier_wait(aux_bar + aux_buf, (aux_g // self.epi_stage) % 2)
                        if cutlass.const_expr(cfg.aux_ldmatrix):
                            cute.copy(tiled_copy_s2r, tSR_sAux[(None, None, None, aux_buf)], tSR_rAux)
                    for epi_v in cutlass.range_constexpr(size_tRS_rD):
                        ai = epi_idx * size_tRS_rD + epi_v
                        crd = tRS_cAcc[ai]
                        gm = row0 + crd[0]
                        gn = col0 + crd[1]
                        in_bounds = (gm < m) & (gn < n)
                        # column of x in the caller's N order (bias, aux): differs only for swiglu halves
                        xn = gn
                        if cutlass.const_expr(cfg.swiglu_halves):
                            xn = col0 // 2 + crd[1]
                        x = tRS_rAcc[ai] * alpha_eff
                        if cutlass.const_expr(cfg.has_c):
                            if in_bounds:
                                x = x + beta * mC[gm, gn, bidx_l].to(Float32)
                        if cutlass.const_expr(cfg.stage_bias):
                            if cutlass.const_expr(cfg.bias == "n"):
                                x = x + sBias[crd[1]]
                            if cutlass.const_expr(cfg.bias == "m"):
                                x = x + sBias[crd[0]]
                        else:
                            if cutlass.const_expr(cfg.bias == "n"):
                                if in_bounds:
                                    x = x + mBias[xn, bidx_l].to(Float32)
                            if cutlass.const_expr(cfg.bias == "m"):
                                if in_bounds:
                                    x = x + mBias[gm, bidx_l].to(Float32)
                        if cutlass.const_expr(cfg.store_pre):
                            if in_bounds:
                                mAux[gm, xn, bidx_l] = x.to(self.aux_dtype)
                        if cutlass.const_expr(cfg.gelu_fold):
                            y = epi_ops.gelu_tanh_folded(x)
                        else:
                            y = epi_ops.activation(x, cfg.activation)
                        if cutlass.const_expr(cfg.dsrelu):
                            if cutlass.const_expr(cfg.aux_ldmatrix):
                                pre = tRS_rAux[epi_v].to(Float32)  # ldmatrix put this element's pre-activation in register epi_v
                            elif cutlass.const_expr(cfg.stage_aux):
                                # TMA zero-filled the sub-tile outside the problem: no predicate
                                pre = sD[crd[0] % self.epi_tile[0], crd[1] % self.epi_tile[1], aux_buf].to(Float32)
                            else:
                                pre = Float32(0.0)
                                if in_bounds:
                                    pre = mAux[gm, gn, bidx_l].to(Float32)
                            if cutlass.const_expr(dsrelu_fold):
                                y = epi_ops.relu_times(tRS_rAcc[ai] * alpha2, pre)  # (2 alpha acc) relu(pre): same bits, one op less
                            else:
                                y = epi_ops.dsrelu(x, pre)
                        if cutlass.const_expr(cfg.swiglu):
                            ui = ai + up_offset
                            ucrd = tRS_cAcc[ui]
                            ugn = col0 + ucrd[1]
                            up_in = (gm < m) & (ugn < n)
                            un = ugn
                            if cutlass.const_expr(cfg.swiglu_halves):
                                un = n // 2 + col0 // 2 + ucrd[1] - SWIGLU_BLOCK
                            u = tRS_rAcc[ui] * alpha_eff
                            if cutlass.const_expr(cfg.stage_bias):
                                if cutlass.const_expr(cfg.bias == "n"):
                                    u = u + sBias[ucrd[1]]
                                if cutlass.const_expr(cfg.bias == "m"):
                                    u = u + sBias[crd[0]]
                            else:
                                if cutlass.const_expr(cfg.bias == "n"):
                                    if up_in:
                                        u = u + mBias[un, bidx_l].to(Float32)
                                if cutlass.const_expr(cfg.bias == "m"):
                                    if up_in:
                                        u = u + mBias[gm, bidx_l].to(Float32)
                            if cutlass.const_expr(cfg.store_pre):
                                if up_in:
                                    mAux[gm, un, bidx_l] = u.to(self.aux_dtype)
                            if cutlass.const_expr(cfg.swiglu_tanh):
                                y = epi_ops.silu_mul_tanh(x, u)
                            else:
                                y = epi_ops.silu_mul(x, u)
                        if cutlass.const_expr(cfg.amax):
                            if cutlass.const_expr(cfg.amax_fast):
                                # no bounds predicate: outside the problem the accumulator is exactly 0 (TMA zero-fills A and B),
                                # C, bias and aux reads are predicated (0) and every activation maps 0 to 0, so |y| = 0 there;
                                # except a staged bias, which covers the whole tile along its own mode: predicate the other one
                                ay = cute.math.absf(y)
                                if cutlass.const_expr(cfg.stage_bias and cfg.bias == "n"):
                                    if gm >= m:
                                        ay = Float32(0.0)
                                if cutlass.const_expr(cfg.stage_bias and cfg.bias == "m"):
                                    if gn >= n:
                                        ay = Float32(0.0)
                                # AMAX_WAYS independent running maxima: dependency chains a quarter as long
                                amax_parts[epi_v % AMAX_WAYS] = cute.arch.fmax(amax_parts[epi_v % AMAX_WAYS], ay)
                            else:
                                if in_bounds:
                                    amax_run = cute.arch.fmax(amax_run, cute.math.absf(y))
                        if cutlass.const_expr(cfg.scale_d):
                            y = y * d_scale
                        tRS_rD[epi_v] = y
                    tRS_rD_out.store(tRS_rD.load().to(self.d_dtype))
                    if cutlass.const_expr(cfg.stage_aux):
                        epi_bar.arrive_and_wait()  # all aux reads of this buffer are done before D overwrites it
                    epi_buffer = (num_prev_epi_tiles + epi_idx) % cute.size(tRS_sD, mode=[3])
                    if cutlass.const_expr(cfg.pingpong):
                        epi_buffer = (warp_group_idx - 1) * self.epi_stage + (num_prev_epi_tiles + epi_idx) % self.epi_stage
                    cute.copy(tiled_copy_r2s, tRS_rD_out, tRS_sD[(None, None, None, epi_buffer)])
                    cute.arch.fence_proxy("async.shared", space="cta")
                    epi_bar.arrive_and_wait()
                    gmem_coord = epi_tile_layout.get_hier_coord(epi_idx)
                    if warp_idx == store_warp:
                        cute.copy(tma_atom_d, bSG_sD[(None, epi_buffer)], bSG_gD[(None, gmem_coord)])
                        tma_store_pipeline.producer_commit()
                        tma_store_pipeline.producer_acquire()
                        if cutlass.const_expr(cfg.stage_aux and cfg.aux_prefetch == 1 and epi_idx + 1 < aux_epi_num):
                            # the next sub-tile's aux into the next ring buffer, which the acquire above just freed
                            aux_nb = aux_ring + (num_prev_epi_tiles + epi_idx + 1) % self.epi_stage
                            with cute.arch.elect_one():
                                cute.arch.mbarrier_arrive_and_expect_tx(aux_bar + aux_nb, aux_bytes)
                            cute.copy(
                                tma_atom_aux,
                                bSG_gAux[(None, aux_epi_layout.get_hier_coord(epi_idx + 1))],
                                bSG_sAux[(None, aux_nb)],
                                tma_bar_ptr=aux_bar + aux_nb,
                            )
                        if cutlass.const_expr(cfg.stage_aux and cfg.aux_prefetch > 1 and epi_idx + cfg.aux_prefetch < aux_epi_num):
                            # sub-tile epi_idx + aux_prefetch into the buffer of sub-tile epi_idx + aux_prefetch - epi_stage,
                            # whose store is the (epi_stage - aux_prefetch + 1)-th newest: wait until it has read shared memory
                            cute.arch.cp_async_bulk_wait_group(self.epi_stage - cfg.aux_prefetch, read=True)
                            aux_nb = aux_ring + (num_prev_epi_tiles + epi_idx + cfg.aux_prefetch) % self.epi_stage
                            with cute.arch.elect_one():
                                cute.arch.mbarrier_arrive_and_expect_tx(aux_bar + aux_nb, aux_bytes)
                            cute.copy(
                                tma_atom_aux,
                                bSG_gAux[(None, aux_epi_layout.get_hier_coord(epi_idx + cfg.aux_prefetch))],
                                bSG_sAux[(None, aux_nb)],
                                tma_bar_ptr=aux_bar + aux_nb,
                            )
                    epi_bar.arrive_and_wait()

                if cutlass.const_expr(cfg.pingpong):
                    tile_sched.advance_to_next_work(advance_count=2)
                    read_state.advance(k_tile_cnt)  # past the other warpgroup's tile
                    release_state.advance(k_tile_cnt)
                else:
                    tile_sched.advance_to_next_work()
                work_tile = tile_sched.get_current_work()

            if cutlass.const_expr(cfg.amax):
                if cutlass.const_expr(cfg.amax_fast):
                    for j in cutlass.range_constexpr(AMAX_WAYS):
                        amax_run = cute.arch.fmax(amax_run, amax_parts[j])
                amax_run = cute.arch.warp_reduction_max(amax_run)
                if cute.arch.lane_idx() == 0:
                    cute.arch.atomic_fmax(pAmax, amax_run, sign_bit=False)
            tma_store_pipeline.producer_tail()

    kernel.set_name_prefix("cudnn", remove_cutlass_symbol=True)


def fake_args(cfg: GemmSm90Config):
    """Placeholder launch arguments for ``cute.compile`` (no GPU, no storage): pointers at address 0
    (never dereferenced at compile time) or None for compiled-out operands, runtime scalars as zeros."""
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    if cfg.split_k > 1:
        cfg = epilogue_free(cfg)
    gmem = cute.AddressSpace.gmem
    pA = make_ptr(_DTYPES[cfg.ab_dtype], 0, gmem, assumed_align=16)
    pB = make_ptr(_DTYPES[cfg.b_dtype or cfg.ab_dtype], 0, gmem, assumed_align=16)
    pD = make_ptr(_DTYPES[cfg.d_dtype], 0, gmem, assumed_align=16)

    def elem_ptr(name):
        dt = _DTYPES[name]
        return make_ptr(dt, 0, gmem, assumed_align=dt.width // 8)

    pC = elem_ptr(cfg.c_dtype) if cfg.has_c else None
    pBias = elem_ptr(cfg.bias_dtype) if cfg.bias != "none" else None
    pAux = elem_ptr(cfg.aux_dtype) if (cfg.store_pre or cfg.dsrelu) else None
    pAmax = make_ptr(cutlass.Float32, 0, gmem, assumed_align=4) if cfg.amax else None
    pScaleA = make_ptr(cutlass.Float32, 0, gmem, assumed_align=4) if cfg.scale_ab else None
    pScaleB = make_ptr(cutlass.Float32, 0, gmem, assumed_align=4) if cfg.scale_ab else None
    pScaleD = make_ptr(cutlass.Float32, 0, gmem, assumed_align=4) if cfg.scale_d else None
    ints = [Int32(0)] * 16
    return (pA, pB, pD, pC, pBias, pAux, pAmax, pScaleA, pScaleB, pScaleD, *ints, Float32(1.0), Float32(0.0), make_fake_stream())


def compile_kernel(cfg: GemmSm90Config, options: str | None = None, tvm_ffi: bool = False):
    """``cute.compile`` the kernel for ``cfg`` (callers cache it through cudnn.kernel_cache).

    ``tvm_ffi``: compile the tvm-ffi entry (pointers, Int32 extents and the stream handle are then passed
    as plain Python ints, a few microseconds per launch instead of the generic argument marshalling).
    ``options`` are extra DSL flags, e.g. ``"--keep-ptx --dump-dir=DIR"`` (compile-only tests)."""
    flags = " ".join(x for x in (options, "--enable-tvm-ffi" if tvm_ffi else None) if x)
    if flags:
        return cute.compile(GemmSm90Kernel(cfg), *fake_args(cfg), options=flags)
    return cute.compile(GemmSm90Kernel(cfg), *fake_args(cfg))


def pointer_dtype(torch_dtype):
    """The cutlass element type of a torch dtype (execute-time pointer construction)."""
    import torch

    return {
        torch.bfloat16: cutlass.BFloat16,
        torch.float16: cutlass.Float16,
        torch.float32: cutlass.Float32,
        torch.float8_e4m3fn: cutlass.Float8E4M3FN,
        torch.float8_e5m2: cutlass.Float8E5M2,
    }[torch_dtype]
