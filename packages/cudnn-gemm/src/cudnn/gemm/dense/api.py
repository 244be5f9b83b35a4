"""``GemmSm90``: the APIBase adapter of the dense Hopper GEMM, and the plain ``gemm`` wrapper.

    D = epilogue(alpha * (a @ b) [+ beta * c] [+ bias])      a: (M, K) or (L, M, K),  b: (K, N) or (L, K, N)

The adapter is built from tensors or :class:`cudnn.api_base.TensorDesc` (metadata only: ``check_support``
imports neither torch nor cutlass); ``compile`` fetches the kernel from ``cudnn.kernel_cache`` keyed by a
:class:`~cudnn.gemm.dense.kernel_sm90.GemmSm90Config` of plan-time values (dtypes, majors, epilogue flags,
SM count) and never by M, N, K, L or strides, which reach the kernel as runtime scalars (Rule 4);
``execute`` validates that the tensors match the plan, then launches: no conversion, allocation, copy or
sync (Rules 1-3). The one extra launch a plan can promise is ``gemm_amax``'s reset of its 4-byte amax
output, issued on the launch stream (Rule 5).

What it serves natively (anything else is declined with NotImplementedError, never copied, Rule 2):
- a, b bf16 or fp16 (same dtype); d in that dtype; fp32 accumulation;
- or a, b fp8 (e4m3 / e5m2, the two may differ), both K-major (row-major ``a``, ``w.t()`` of an (N, K)
  weight: Hopper fp8 WGMMA reads only K-major operands), with optional per-tensor fp32 scales ``scale_a``,
  ``scale_b`` (one-element device tensors, read in the epilogue, never by the host) and ``scale_d``
  (D = cast(y * scale_d), for fp8 outputs); d bf16, fp16, e4m3 or e5m2;
- a K-major (row-major ``a``) or M-major (``a.t()`` of a row-major tensor); b N-major (row-major ``b``)
  or K-major (``w.t()`` of an (N, K) weight); the non-unit stride of each, and batch strides, multiples of
  8 elements (16-byte TMA strides), 16-byte-aligned base addresses;
- d row-major with a 16-byte-aligned row stride (the wrapper pads the row stride for odd N and returns a
  view); c any strides; bias contiguous (N,) ("col") or (M,) ("row"), optionally with a leading L.

Plan-time performance options (the defaults are the configuration verified on the H200):
- ``split_k=S`` (S > 1): the K loop is cut in S slices that write fp32 partials into the caller's workspace
  (``scratch_workspace_bytes()``, recipe R2), then a second launch sums them in a fixed order (deterministic)
  and runs the epilogue (alpha, fp8 scales, bias, activation). For small-M (decode) shapes. C, stored
  pre-activations, dsrelu, swiglu and amax are declined with split-K.
- ``stage_bias=True``: each tile's bias is staged once into shared memory (fp32) instead of being read from
  global memory per accumulator element.
- ``stage_aux=True`` (dsrelu): the pre-activation arrives by TMA, one 128 x 32 sub-tile ahead, into the D
  store ring (aux must have d's dtype and a 16-byte-aligned row stride and base), instead of per-element reads.
- ``pingpong=True``: 64 x 256 tiles, one per consumer warpgroup, the two warpgroups taking turns, so one's
  epilogue runs while the other's mainloop keeps the tensor cores busy (each has its own D smem ring and
  named barrier, staged bias and aux barriers; two more named barriers order their mainloops). Not with split_k.
- ``aux_prefetch`` (1..8), ``aux_ldmatrix`` (stage_aux plans), ``gelu_fold`` (gelu_tanh plans), ``amax_fast`` (amax
  plans) and ``swiglu_tanh`` (swiglu plans): epilogue A/B options, None = :data:`AUX_PREFETCH` / :data:`AUX_LDMATRIX` /
  :data:`GELU_FOLD` / :data:`AMAX_FAST` / :data:`SWIGLU_TANH` (see there).
- ``pingpong``, ``stage_bias``, ``stage_aux`` left as None take the per-fusion default of
  :data:`FUSION_DEFAULTS` (the one place to flip them after a GPU run), where the plan can take it.
- ``schedule``: None (:data:`TILE_SCHEDULE`), "auto", "fixed", "waves", "waves+l2" or "auto2": how the tile, cluster and
  scheduler swizzle are chosen. "auto" (default) chooses from N and K only, so a new M never compiles (Rule 4);
  "waves" / "waves+l2" also model M (for plans whose M never changes: one kernel per distinct choice); "auto2" compiles
  two tiles chosen from N and K and lets each M pick one (M-free like "auto"): see
  :data:`TILE_SCHEDULE` and :mod:`cudnn.gemm.dense.schedule`.
- ``fast_accum`` (fp8 only, like ``torch._scaled_mm(use_fast_accum=...)``): False (default) adds the fp8
  WGMMA's partial sums into a second fp32 accumulator every 128 of K (the WGMMA accumulates fp8 products with
  reduced precision), on 128 x 128 tiles (64 x 128 with pingpong) so that both accumulators fit the registers;
  True keeps the WGMMA's own accumulation on 128 x 256 tiles (faster, about 1e-3 relative error at K ~ 1000).
- ``fused_auto2`` / ``aux_keep_stages`` (None = :data:`FUSED_AUTO2`, on, / :data:`AUX_KEEP_STAGES`, off):
  staged-read fused plans take the plain plan's "auto2" tile set; dsrelu's pre-activation prefetch is sized so that
  it costs no mainloop stage (:mod:`cudnn.gemm.dense.fused_schedule`).
"""

from __future__ import annotations

import os
from dataclasses import replace

from cudnn.api_base import APIBase, TensorDesc, TupleDict, as_desc
from cudnn.datatypes import data_type

_AB_DTYPES = (data_type.BFLOAT16, data_type.HALF)
_FP8 = (data_type.FP8_E4M3, data_type.FP8_E5M2)
_FP8_OUT = (data_type.BFLOAT16, data_type.HALF, data_type.FP8_E4M3, data_type.FP8_E5M2)
_NAMES = {
    data_type.BFLOAT16: "bfloat16",
    data_type.HALF: "float16",
    data_type.FLOAT: "float32",
    data_type.FP8_E4M3: "float8_e4m3fn",
    data_type.FP8_E5M2: "float8_e5m2",
}
_ITEMSIZE = {data_type.BFLOAT16: 2, data_type.HALF: 2, data_type.FLOAT: 4, data_type.FP8_E4M3: 1, data_type.FP8_E5M2: 1}
_INT32_MAX = 2**31 - 1
ACTIVATIONS = ("none", "relu", "relu2", "gelu_tanh", "gelu_erf")

#: Per-fusion plan defaults for the options a caller leaves as None. The one place to flip a default after a
#: GPU run: benchmarks/gemm.py's ``gemm_pingpong`` table times every fusion on the cooperative and pingpong
#: kernels, with and without the staged reads, next to our plain GEMM. A default is applied only where the
#: plan can take it (stage_bias needs a bias, stage_aux a dsrelu aux in d's dtype with 16-byte rows, pingpong
#: no split-K); the fusion of a plan is :func:`fusion_of`. Set from the H200 run of 2026-11-29 (gemm_pingpong, llama3-8b
#: up M=16384): the cooperative kernel with staged reads was the fastest variant of every fusion; pingpong lost.
FUSION_DEFAULTS: dict[str, dict[str, bool]] = {
    "plain": {"pingpong": False},
    "bias": {"pingpong": False, "stage_bias": True},
    "srelu": {"pingpong": False, "stage_bias": True},
    "gelu": {"pingpong": False, "stage_bias": True},
    "swiglu": {"pingpong": False, "stage_bias": True},
    "amax": {"pingpong": False, "stage_bias": True},
    "dsrelu": {"pingpong": False, "stage_bias": False, "stage_aux": True},
}


#: N of the tile of fp8 plans with promotion (fast_accum=False): 128 (m64n128k32; verified first) or 192
#: (m64n192k32, 96 + 96 accumulator registers, no spills). benchmarks/gemm.py's gemm_fp8 table times both
#: ("ours" and "ours_n128"); 192 was faster on the H200 (2026-11-29: e4m3 8192^3 1215 vs 1081 TFLOP/s); both are
#: checked by test_gemm_fp8_gpu.py::test_fp8_promoted_tile_widths.
FP8_PROMOTED_TILE_N = 192
#: k-tiles (128 of K each) between two promotions of fp8 plans with fast_accum=False: 1 (CUTLASS's and
#: DeepSeek-V3's 128) drains the WGMMAs every k-tile; 2 keeps one batch in flight inside each pair. The gemm_fp8
#: table times 2 as "ours_p2"; flip here only if the accuracy tests pass with it too.
FP8_PROMOTION_INTERVAL = 1

#: Tile / cluster / swizzle choice of plans that leave ``schedule`` as None (:mod:`cudnn.gemm.dense.schedule`):
#: "auto" = (128, 256) tiles, 2x1 cluster, and the scheduler swizzle chosen from N alone (the band width that cuts
#: a wave's L2 traffic where M spans a wave; where M is smaller a wave covers whole bands): no extent but N and K
#: reaches the compile key, so a new M (the token count) never compiles (Rule 4; test_gemm_detectors.py);
#: "fixed" = (128, 256), 2x1, no swizzle (the configuration verified first);
#: "waves" = the tile and cluster with the best predicted time (waves x per-tile cost) among (128, 256 | 224 | 192 |
#: 128) x (2x1 | 1x1), from M, N, K, L; "waves+l2" = that, plus the swizzle where A (M x K) does not stay in L2.
#: "waves" / "waves+l2" derive the choice from M: opt-ins for plans whose M is fixed (training), one compiled kernel
#: per distinct choice. The swizzle applies to cooperative 16-bit plans without split-K or an explicit tile_mn /
#: swizzle; the tile choice of "waves" only to those without swiglu or staged reads, with K-major A and B (the
#: layouts its tiles were verified with). benchmarks/gemm.py's ``gemm`` table times "auto" ("ours"), "waves+l2"
#: ("ours_m") and "fixed" ("ours_fixed") next to cuBLAS (docs/benchmarks/gemm.md, gemm_schedule.md).
#: "auto2" (the default since session 4's H200 tables, M-free like "auto"): the plan compiles the default tile and one second width chosen from N and K
#: (:func:`~cudnn.gemm.dense.schedule.choose_tile_set`: the width that saves the most predicted time over a grid of M),
#: and each M takes the faster of the two by the model (:func:`~cudnn.gemm.dense.schedule.choose_in_set`); the swizzle is
#: N's, per tile. Two kernels per (N, K) instead of one, both built by compile(), so a new M still never compiles.
#: On the MLP shapes with M >= 2048 it differs from "auto" only at qwen3-32b M = 2048 (128 x 224 there). Timed as
#: "ours_auto2" in benchmarks/gemm.py's ``gemm`` table: qwen3-32b down M = 2048 at 665.7 vs 638.8 TFLOP/s (cuBLAS 708.3)
#: in docs/benchmarks/gemm.md, 693.8 / 675.4 vs 682.3 / 631.1 in gemm_epi2.md; the other rows run the same kernel.
TILE_SCHEDULE = "auto2"
SCHEDULES = ("auto", "fixed", "waves", "waves+l2", "auto2")
#: Under "auto" and "waves+l2", also give the scheduler swizzle to cooperative 16-bit plans whose tile is fixed
#: (staged reads, swiglu). On since 2026-11-29: bit-identical to the unswizzled plans on the H200
#: (test_gemm_options_gpu.py) and the fusions at 0.92-1.08x our plain GEMM with it (docs/benchmarks/gemm_fusions_ab.md).
SWIZZLE_FIXED_TILE_PLANS = True

#: Epilogue options of plans that leave them as None. Defaults since 2026-11-29 (H200): dsrelu with the whole staged
#: pre-activation tile prefetched and read by ldmatrix (688.5 vs 636.4 TFLOP/s, D bit-identical to the one-ahead
#: per-element kernel), gelu_tanh folded (684.5 vs 671.7, within one bf16 ulp-ish of the textbook form):
#: docs/benchmarks/gemm_fusions_ab.md ("ours_epi8", "ours_epi3"), test_gemm_options_gpu.py -k epi_.
#: AUX_PREFETCH: stage_aux (dsrelu) pre-activation sub-tiles (128 x 32) in flight by TMA ahead of the epilogue, the
#: first ones issued before the tile's mainloop: 1 (one ahead), 3 (same smem), 8 (the whole 128 x 256 tile lands
#: during the mainloop; D's smem ring grows to 8 stages, one mainloop stage less).
AUX_PREFETCH = 8
#: AUX_LDMATRIX: read the staged pre-activation with ldmatrix (the inverse of D's stmatrix: 16-byte rows) instead of
#: per-element 2-byte ld.shared with swizzled addresses.
AUX_LDMATRIX = True
#: GELU_FOLD: gelu_tanh with its constants folded, 5 fp32 ops + one tanh.approx per element instead of 8 + one.
GELU_FOLD = True
#: AMAX_FAST: amax without the per-element bounds predicate (outside the problem every output is exactly 0; a staged
#: bias needs only its other mode predicated) and kept as 4 running maxima per thread: SASS of the 128 x 256 tile,
#: per thread, 1.2 instructions per output over plain (FMNMX) instead of 3.6 (FMNMX, FSEL, ISETP, VIADD, IMAD);
#: over a staged bias 2.4 instead of 3.4. Same value (max is exact and order-free). Timed as "ours_epi2" in gemm_fusions.
AMAX_FAST = False
#: SWIGLU_TANH: silu(g) = h * tanh(h) + h, h = g / 2: one MUFU (tanh.approx) per output instead of two (ex2.approx,
#: rcp.approx), 3 fp32 ops instead of 5. Approximation-level differences (like GELU_FOLD). Timed as "ours_epi2".
SWIGLU_TANH = False

#: FUSED_AUTO2 (on since session 5; issue #5): give staged-read fused plans (stage_bias / stage_aux: every fusion wrapper
#: called with a bias, and dsrelu) the "auto2" tile set and per-M pick of the plain plan of the same problem, instead of
#: "auto"'s 128 x 256 at every M. K-major A and B, not swiglu (its gate/up pairing needs 256-wide tiles), not pingpong /
#: fp8 / split-K / an explicit tile or cluster (as for plain plans). The M = 2048 qwen3-32b cells of gemm_fusions_mlp ran
#: 128 x 256 (3 full waves) where plain ran 128 x 224 (3 waves of 7/8): :mod:`cudnn.gemm.dense.fused_schedule`.
#: Timed as "ours_fa2" in benchmarks/gemm.py's ``gemm_fusions_down`` table (session 5, H200, fused / plain in two
#: repeats: dsrelu 1.02x / 0.99x, srelu 1.02x / 1.02x, amax 1.07x / 0.99x, bias qwen3-32b up 0.99x / 1.05x, where the
#: session-4 plans ran 0.98x / 0.94x, 0.99x / 0.94x, 0.96x / 0.95x, 0.95x / 1.04x); checked by test_gemm_options_gpu.py
#: -k fused_auto2. ``fused_auto2=False`` builds the session-4 plans.
FUSED_AUTO2 = True
#: AUX_KEEP_STAGES (opt-in, off): stage_aux (dsrelu) plans that leave aux_prefetch as None prefetch only as deep as the D
#: ring can grow without costing a mainloop stage of their tile (4 at 128 x 256, 6 at 128 x 224; AUX_PREFETCH = 8 leaves
#: 3 stages instead of 4). Timed as "ours_fa2k" (with FUSED_AUTO2) in ``gemm_fusions_down``.
AUX_KEEP_STAGES = False


def fusion_of(*, swiglu=None, dsrelu=False, amax=False, activation="none", has_bias=False) -> str:
    """The :data:`FUSION_DEFAULTS` key of a plan: swiglu > dsrelu > amax > activation (srelu, gelu) > bias > plain."""
    if swiglu is not None:
        return "swiglu"
    if dsrelu:
        return "dsrelu"
    if amax:
        return "amax"
    if activation == "relu2":
        return "srelu"
    if activation.startswith("gelu"):
        return "gelu"
    return "bias" if has_bias else "plain"


def _major_2d(desc: TensorDesc, rows_dim: int, cols_dim: int):
    """('cols' | 'rows', leading stride): which mode of a matrix operand has unit stride, and the other's stride.

    A mode of extent 1 is never stepped, so its stride is free: it counts as unit (or is replaced by a
    16-byte-aligned placeholder when it is the leading stride)."""
    r, c = desc.shape[rows_dim], desc.shape[cols_dim]
    sr, sc = desc.stride[rows_dim], desc.stride[cols_dim]
    al = _align_elems(desc.dtype)
    if sc == 1 or c == 1:
        return "cols", (sr if r > 1 else _round_up(c, al))
    if sr == 1 or r == 1:
        return "rows", (sc if c > 1 else _round_up(r, al))
    return None, None


def _round8(x: int) -> int:
    return (int(x) + 7) // 8 * 8


def _round_up(x: int, align: int) -> int:
    return (int(x) + align - 1) // align * align


def _align_elems(dtype) -> int:
    """Elements per 16 bytes (TMA stride granularity): 8 for bf16/fp16, 16 for fp8."""
    return 16 // _ITEMSIZE.get(dtype, 2)


def _sm_count(device: str | None) -> int:
    try:
        import torch

        if torch.cuda.is_available():
            dev = torch.device(device) if device and device.startswith("cuda") else torch.device("cuda", torch.cuda.current_device())
            return int(torch.cuda.get_device_properties(dev).multi_processor_count)
    except ImportError:
        pass
    return 132  # H200 / H100 SXM


class GemmSm90(APIBase):
    """Dense Hopper GEMM with a fused epilogue.

    Args (tensors or TensorDescs):
        a: (M, K) or (L, M, K);  b: (K, N) or (L, K, N);  d: (M, N_out) or (L, M, N_out) output
           (N_out = N, or N / 2 for swiglu).
        c: optional (M, N) / (L, M, N) addend scaled by beta (not with swiglu).
        bias: optional (N,) / (L, N) for ``bias_kind="col"`` or (M,) / (L, M) for ``"row"``.
        aux: (M, N) / (L, M, N) row-major: written pre-activation when ``store_pre``; read as the
           forward pre-activation when ``dsrelu``.
        amax: (1,) fp32 output when ``amax=True``: max |D| over the valid outputs (before the cast).
        activation: "none" | "relu" | "relu2" | "gelu_tanh" | "gelu_erf" (plan-time).
        swiglu: None | "interleaved" (gate/up in alternating blocks of 128 columns) | "halves" ([gate | up]).
        alpha, beta: default runtime scalars (execute may override them without recompiling).
    """

    def __init__(
        self,
        a,
        b,
        d,
        *,
        c=None,
        bias=None,
        aux=None,
        amax=None,
        bias_kind: str = "col",
        activation: str = "none",
        swiglu: str | None = None,
        store_pre: bool = False,
        dsrelu: bool = False,
        alpha: float = 1.0,
        beta: float = 1.0,
        scale_a=None,
        scale_b=None,
        scale_d=None,
        split_k: int = 1,
        stage_bias: bool | None = None,
        stage_aux: bool | None = None,
        pingpong: bool | None = None,
        fast_accum: bool = False,
        tile_mn: tuple | None = None,
        promotion_interval: int | None = None,
        cluster_mn: tuple | None = None,
        swizzle: int | None = None,
        raster_along_m: bool = True,
        schedule: str | None = None,
        aux_prefetch: int | None = None,
        aux_ldmatrix: bool | None = None,
        gelu_fold: bool | None = None,
        amax_fast: bool | None = None,
        swiglu_tanh: bool | None = None,
        fused_auto2: bool | None = None,
        aux_keep_stages: bool | None = None,
    ):
        super().__init__()
        self.a, self.b, self.d = as_desc(a, "a"), as_desc(b, "b"), as_desc(d, "d")
        self.c, self.bias, self.aux, self.amax = as_desc(c, "c"), as_desc(bias, "bias"), as_desc(aux, "aux"), as_desc(amax, "amax")
        self.scale_a, self.scale_b, self.scale_d = as_desc(scale_a, "scale_a"), as_desc(scale_b, "scale_b"), as_desc(scale_d, "scale_d")
        self.split_k, self.fast_accum = split_k, bool(fast_accum)
        self._tile_override = None if tile_mn is None else tuple(tile_mn)  # expert A/B knob; None: tile_mn()
        self.promotion_interval = promotion_interval  # expert A/B knob; None: FP8_PROMOTION_INTERVAL
        # None: the per-fusion default (FUSION_DEFAULTS), resolved in check_support where the plan is known
        self.stage_bias = None if stage_bias is None else bool(stage_bias)
        self.stage_aux = None if stage_aux is None else bool(stage_aux)
        self.pingpong = None if pingpong is None else bool(pingpong)
        # epilogue A/B options; None: AUX_PREFETCH / AUX_LDMATRIX / GELU_FOLD where the plan can take them
        self.aux_prefetch, self.aux_ldmatrix, self.gelu_fold = aux_prefetch, aux_ldmatrix, gelu_fold
        self.amax_fast, self.swiglu_tanh = amax_fast, swiglu_tanh  # None: AMAX_FAST / SWIGLU_TANH where the plan can take them
        self._tile_set = ()  # "auto2": every (tile_mn, swizzle) compile() builds besides the plan's own
        self._auto2 = False  # "auto2" chose this plan's tile (from its (N, K) set)
        # FUSED_AUTO2 / AUX_KEEP_STAGES opt-ins (None: the api constants); _aux_prefetch_of: aux_prefetch per tile of the set
        self.fused_auto2, self.aux_keep_stages, self._aux_prefetch_of = fused_auto2, aux_keep_stages, {}
        # explicit cluster_mn / swizzle are kept; left as None, the schedule (TILE_SCHEDULE) may choose them
        self._cluster_explicit, self._swizzle_explicit = cluster_mn is not None, swizzle is not None
        self.schedule = schedule
        self._choice = None  # schedule.TileChoice once check_support resolved a non-fixed schedule for this plan
        if cluster_mn is None:  # a 2x1 multicast pair by default; split-K (decode, M ~ 1) runs single CTAs
            cluster_mn = (2, 1) if split_k == 1 else (1, 1)
        swizzle = 1 if swizzle is None else swizzle
        self.bias_kind, self.activation, self.swiglu = bias_kind, activation, swiglu
        self.store_pre, self.dsrelu, self.want_amax = bool(store_pre), bool(dsrelu), amax is not None
        self.alpha, self.beta = float(alpha), float(beta)
        self.cluster_mn, self.swizzle, self.raster_along_m = tuple(cluster_mn), int(swizzle), bool(raster_along_m)
        self.config = None
        self._launch = None

    # ------------------------------------------------------------------ plan
    def check_support(self) -> bool:
        from cudnn.dsl_gate import require_cutedsl

        from .. import CUTEDSL_MIN_VERSION

        a, b, d = self.a, self.b, self.d
        what = "GemmSm90"
        self._value_error_if(a is None or b is None or d is None, f"{what}: a, b and d are required")
        self._value_error_if(a.rank not in (2, 3) or b.rank not in (2, 3) or d.rank not in (2, 3), f"{what}: a, b, d must be rank 2 or 3")
        self._value_error_if(self.activation not in ACTIVATIONS, f"{what}: activation {self.activation!r} is not one of {ACTIVATIONS}")
        self._value_error_if(self.swiglu not in (None, "interleaved", "halves"), f"{what}: swiglu must be None, 'interleaved' or 'halves'")
        self._value_error_if(self.bias_kind not in ("col", "row"), f"{what}: bias_kind must be 'col' or 'row'")
        self._check_dtype(a, _AB_DTYPES + _FP8, what)
        fp8 = a.dtype in _FP8
        self._is_fp8 = fp8
        if fp8:
            self._decline_if(b.dtype not in _FP8, f"{what}: {b.describe()} must be fp8 (e4m3 or e5m2) like a {a.describe()}")
            self._decline_if(d.dtype not in _FP8_OUT, f"{what}: {d.describe()}: an fp8 GEMM writes bf16, fp16, e4m3 or e5m2")
        else:
            self._decline_if(b.dtype != a.dtype, f"{what}: {b.describe()} must have a's dtype {a.dtype.short} (mixed operands are not served)")
            self._decline_if(d.dtype != a.dtype, f"{what}: {d.describe()} must have the operands' dtype {a.dtype.short}")
        self._value_error_if(
            (self.scale_a is None) != (self.scale_b is None), f"{what}: scale_a and scale_b go together (pass both, or neither for unit scales)"
        )
        for sd in (self.scale_a, self.scale_b, self.scale_d):
            if sd is not None:
                self._decline_if(not fp8, f"{what}: per-tensor scale {sd.describe()} is served with fp8 operands only; a is {a.describe()}")
                self._value_error_if(sd.dtype != data_type.FLOAT or sd.numel() != 1, f"{what}: {sd.describe()} must be one float32 (a device scalar)")
        self._value_error_if(not isinstance(self.split_k, int) or self.split_k < 1, f"{what}: split_k must be an int >= 1, got {self.split_k!r}")
        # batched a, b, d: all rank 3 with one L, or all rank 2
        la = a.shape[0] if a.rank == 3 else 1
        lb = b.shape[0] if b.rank == 3 else 1
        ld = d.shape[0] if d.rank == 3 else 1
        self._value_error_if(
            not (a.rank == b.rank == d.rank),
            f"{what}: a, b, d must all be rank 2 or all rank 3 (got {a.rank}, {b.rank}, {d.rank}); flatten a batched a into rows for a shared b",
        )
        self._value_error_if(not (la == lb == ld), f"{what}: batch sizes differ: a {la}, b {lb}, d {ld}")
        m, k = a.shape[-2:]
        kb, n = b.shape[-2:]
        self._value_error_if(k != kb, f"{what}: a {a.shape} and b {b.shape} disagree on K")
        self._value_error_if(min(m, n, k) < 1, f"{what}: empty problem M={m} N={n} K={k}")
        n_out = n
        if self.swiglu is not None:
            self._decline_if(n % 256 != 0, f"{what}: swiglu needs N (gate + up columns) to be a multiple of 256, got N={n}")
            n_out = n // 2
            self._decline_if(self.c is not None, f"{what}: swiglu with a beta * c addend is not served")
            self._decline_if(self.dsrelu or self.activation != "none", f"{what}: swiglu does not combine with another activation")
        self._value_error_if(tuple(d.shape[-2:]) != (m, n_out), f"{what}: {d.describe()} must be ({m}, {n_out}) per batch")
        # majors (unit strides) and TMA stride alignment
        a_unit, lda = _major_2d(a, a.rank - 2, a.rank - 1)
        self._decline_if(a_unit is None, f"{what}: {a.describe()} needs a unit stride in M or K; other layouts are declined, not copied (Rule 2)")
        b_unit, ldb = _major_2d(b, b.rank - 2, b.rank - 1)
        self._decline_if(b_unit is None, f"{what}: {b.describe()} needs a unit stride in K or N; other layouts are declined, not copied (Rule 2)")
        self._a_major = "k" if a_unit == "cols" else "m"
        self._b_major = "n" if b_unit == "cols" else "k"
        if fp8:
            self._decline_if(
                self._a_major != "k",
                f"{what}: fp8 {a.describe()} is M-major (stride {a.stride}); Hopper fp8 WGMMA reads A K-major only: pass a row-major (M, K) a",
            )
            self._decline_if(
                self._b_major != "k",
                f"{what}: fp8 {b.describe()} is N-major (stride {b.stride}); Hopper fp8 WGMMA reads B K-major only: pass w.t() of an (N, K) weight",
            )
        self._decline_if(d.stride[-1] != 1 and n_out > 1, f"{what}: {d.describe()} must be row-major (unit stride along N)")
        ldd = d.stride[-2] if m > 1 else _round_up(n_out, _align_elems(d.dtype))
        for desc, ld_ in ((a, lda), (b, ldb), (d, ldd)):
            al = _align_elems(desc.dtype)
            self._decline_if(ld_ % al != 0, f"{what}: {desc.describe()}: leading stride {ld_} is not a multiple of {al} elements (TMA needs 16-byte strides)")
            if desc.rank == 3 and desc.shape[0] > 1:
                self._decline_if(desc.stride[0] % al != 0, f"{what}: {desc.describe()}: batch stride is not a multiple of {al} elements (TMA)")
        self._lda, self._ldb, self._ldd = lda, ldb, ldd
        self._m, self._n, self._k, self._l = m, n, k, la
        # epilogue operands
        if self.c is not None:
            self._check_dtype(self.c, _AB_DTYPES + (data_type.FLOAT,), what)
            self._value_error_if(tuple(self.c.shape[-2:]) != (m, n) or self.c.rank != a.rank, f"{what}: {self.c.describe()} must match d's shape")
        if self.bias is not None:
            self._check_dtype(self.bias, _AB_DTYPES + (data_type.FLOAT,), what)
            want = n if self.bias_kind == "col" else m
            ok = self.bias.shape[-1] == want and (self.bias.rank == 1 or (self.bias.rank == 2 and self.bias.shape[0] == la))
            self._value_error_if(not ok, f"{what}: {self.bias.describe()} must be ({want},) or ({la}, {want}) for a {self.bias_kind} bias")
            self._decline_if(self.bias.stride[-1] != 1 and want > 1, f"{what}: {self.bias.describe()} must be contiguous")
        needs_aux = self.store_pre or self.dsrelu
        self._value_error_if(needs_aux != (self.aux is not None), f"{what}: aux is required exactly when store_pre or dsrelu is set")
        if self.aux is not None:
            self._check_dtype(self.aux, _AB_DTYPES + (data_type.FLOAT,), what)
            self._value_error_if(tuple(self.aux.shape[-2:]) != (m, n) or self.aux.rank != a.rank, f"{what}: {self.aux.describe()} must be ({m}, {n}) per batch")
            self._decline_if(self.aux.stride[-1] != 1 and n > 1, f"{what}: {self.aux.describe()} must be row-major")
        if self.want_amax:
            self._value_error_if(self.amax.dtype != data_type.FLOAT or self.amax.numel() != 1, f"{what}: {self.amax.describe()} must be one float32")
        self._resolve_defaults(m)
        ap = self.aux_prefetch
        self._value_error_if(ap is not None and (not isinstance(ap, int) or not 1 <= ap <= 8), f"{what}: aux_prefetch must be an int in 1..8, got {ap!r}")
        self._value_error_if(
            (ap not in (None, 1) or bool(self.aux_ldmatrix)) and not self.stage_aux,
            f"{what}: aux_prefetch / aux_ldmatrix serve the staged dsrelu pre-activation (stage_aux), which this plan does not use",
        )
        self._value_error_if(bool(self.gelu_fold) and self.activation != "gelu_tanh", f"{what}: gelu_fold serves activation='gelu_tanh' only")
        self._value_error_if(bool(self.amax_fast) and not self.want_amax, f"{what}: amax_fast serves amax plans only (pass amax)")
        self._value_error_if(bool(self.swiglu_tanh) and self.swiglu is None, f"{what}: swiglu_tanh serves swiglu plans only")
        if fp8 and not self.fast_accum:
            self._decline_if(
                self.swiglu is not None,
                f"{what}: fp8 swiglu needs 256-wide tiles (gate and up halves), which leave no registers for the promoted "
                "fp32 accumulator: pass fast_accum=True",
            )
        pi = self.promotion_interval
        self._value_error_if(pi is not None and (not isinstance(pi, int) or pi < 1), f"{what}: promotion_interval must be an int >= 1, got {pi!r}")
        if self._tile_override is not None:
            tm, tn = self._tile_override
            # 224: the schedule's extra width (16-bit cooperative tiles only; compiled and PTX-checked there)
            ns = (128, 192, 224, 256) if not (fp8 or self.pingpong) else (128, 192, 256)
            self._value_error_if(
                tm != (64 if self.pingpong else 128) or tn not in ns,
                f"{what}: tile_mn={self._tile_override} must be ({64 if self.pingpong else 128}, {' | '.join(map(str, ns))})",
            )
            self._value_error_if(self.swiglu is not None and tn != 256, f"{what}: swiglu needs tile_mn N = 256")
            self._value_error_if(
                fp8 and not self.fast_accum and tm * tn // (128 if self.pingpong else 256) > 96,
                f"{what}: tile_mn={self._tile_override}: fp8 with promotion (fast_accum=False) keeps two fp32 accumulators; N <= 192",
            )
        self._value_error_if(self.stage_bias and self.bias is None, f"{what}: stage_bias=True needs a bias")
        self._value_error_if(self.stage_aux and not self.dsrelu, f"{what}: stage_aux=True serves the dsrelu pre-activation read only")
        self._decline_if(
            self.pingpong and self.split_k > 1,
            f"{what}: pingpong does not combine with split_k",
        )
        if self.stage_aux:
            aux = self.aux
            self._decline_if(aux.dtype != d.dtype, f"{what}: stage_aux needs {aux.describe()} in d's dtype {d.dtype.short} (it shares D's smem ring)")
            ldaux = aux.stride[-2] if m > 1 else _round8(n)
            self._decline_if(ldaux % 8 != 0, f"{what}: stage_aux: {aux.describe()} row stride is not a multiple of 8 elements (TMA)")
            if aux.rank == 3 and aux.shape[0] > 1:
                self._decline_if(aux.stride[0] % 8 != 0, f"{what}: stage_aux: {aux.describe()} batch stride is not a multiple of 8 elements (TMA)")
        if self.split_k > 1:
            for flag, name in (
                (self.c is not None, "a beta * c addend"),
                (needs_aux, "an aux tensor (store_pre / dsrelu)"),
                (self.swiglu is not None, "swiglu"),
                (self.want_amax, "amax"),
                (self.stage_bias, "stage_bias (the split-K epilogue runs in the reduction launch)"),
                (self.stage_aux, "stage_aux"),
            ):
                self._decline_if(flag, f"{what}: split_k={self.split_k} does not serve {name}; use split_k=1")
            ws_elems = self.split_k * la * m * ((n + 3) // 4 * 4)
            self._decline_if(ws_elems > _INT32_MAX, f"{what}: split_k={self.split_k} partials span {ws_elems} > 2^31 fp32 elements (32-bit offsets)")
        for desc in (a, b, d, self.c, self.bias, self.aux):
            if desc is not None:
                self._decline_if(desc.span_elements() > _INT32_MAX, f"{what}: {desc.describe()} spans more than 2^31 elements (32-bit offsets)")
        self._resolve_schedule(what)
        require_cutedsl(what, CUTEDSL_MIN_VERSION)
        self._is_supported = True
        return True

    def _resolve_schedule(self, what: str) -> None:
        """Apply the plan's schedule (``schedule`` or :data:`TILE_SCHEDULE`, see there): tile, cluster, swizzle.

        The swizzle: cooperative 16-bit plans without split-K or an explicit ``tile_mn`` / ``swizzle`` ("auto": from
        N; "waves+l2": from M, N, K). The tile and cluster ("waves", "waves+l2"): only where the tile is free (K-major
        A and B, no swiglu, no staged reads). An explicit ``cluster_mn`` or ``swizzle`` is kept as given."""
        sched = TILE_SCHEDULE if self.schedule is None else self.schedule
        self._value_error_if(sched not in SCHEDULES, f"{what}: schedule {sched!r} is not one of {SCHEDULES}")
        self._choice = None
        self._tile_set = ()
        self._auto2, self._aux_prefetch_of = False, {}
        self._keep_aux_stages((self.tile_mn(),))  # the plan's fixed tile; "auto2" below redoes it for its tile set
        if sched == "fixed":
            return
        from .schedule import MIN_EXTENT, choose_in_set, choose_swizzle, choose_tile, choose_tile_set

        sm = _sm_count(self.a.device)
        swizzled = not self._is_fp8 and not self.pingpong and self.split_k == 1 and self._tile_override is None
        free = swizzled and self._a_major == "k" and self._b_major == "k" and self.swiglu is None and not self.stage_bias and not self.stage_aux
        fused_auto2 = FUSED_AUTO2 if self.fused_auto2 is None else bool(self.fused_auto2)
        # FUSED_AUTO2: the staged reads do not constrain the tile (128 x 224 / 192 compile and run with them)
        staged_free = fused_auto2 and swizzled and self._a_major == "k" and self._b_major == "k" and self.swiglu is None
        if (free or staged_free) and sched == "auto2" and not self._cluster_explicit:
            # the tile set from N and K only (Rule 4), this M's pick among it; the swizzle is N's for each tile (as "auto")
            cl = tuple(self.cluster_mn)
            tiles = choose_tile_set(self._n, self._k, tile_k=64, sm_count=sm, cluster_mn=cl)

            def swz(tile):
                if self._swizzle_explicit:
                    return self.swizzle
                return choose_swizzle(None, self._n, self._k, tile, cl, sm_count=sm) if self._n >= MIN_EXTENT else 1

            choice = choose_in_set(self._m, self._n, self._k, self._l, tiles, tile_k=64, sm_count=sm, cluster_mn=cl)
            self._choice = choice._replace(swizzle=swz(choice.tile_mn))
            self.swizzle = self._choice.swizzle
            self._tile_set = tuple((t, swz(t)) for t in tiles if t != choice.tile_mn)
            self._auto2 = True
            self._keep_aux_stages(tiles)
            return
        if sched == "auto2":
            sched = "auto"  # a plan whose tile is not free (or whose cluster is explicit): "auto"'s swizzle only
        if free and sched != "auto":
            clusters = (tuple(self.cluster_mn),) if self._cluster_explicit else None
            choice = choose_tile(self._m, self._n, self._k, self._l, tile_k=64, sm_count=sm, l2=sched == "waves+l2", clusters=clusters)
            if self._swizzle_explicit:
                choice = choice._replace(swizzle=self.swizzle)
            self._choice = choice
            self.cluster_mn, self.swizzle = choice.cluster_mn, choice.swizzle
            return
        # the tile is the plan's; the scheduler's swizzle only reorders tiles (a fixed tile still walks them L2-friendly)
        if not swizzled or self._swizzle_explicit or sched == "waves" or not (free or SWIZZLE_FIXED_TILE_PLANS):
            return
        m = None if sched == "auto" else self._m  # "auto": never from M (Rule 4)
        if min(self._n, MIN_EXTENT if m is None else m) >= MIN_EXTENT:
            self.swizzle = choose_swizzle(m, self._n, self._k, self.tile_mn(), tuple(self.cluster_mn), sm_count=sm)

    def _keep_aux_stages(self, tiles) -> None:
        """AUX_KEEP_STAGES: the aux prefetch of each tile this plan may run (a stage_aux plan with aux_prefetch None)."""
        keep = AUX_KEEP_STAGES if self.aux_keep_stages is None else bool(self.aux_keep_stages)
        if keep and self.stage_aux and self.aux_prefetch is None and not self.pingpong:
            from .fused_schedule import stage_keeping_prefetch

            self._aux_prefetch_of = {t: stage_keeping_prefetch(t, AUX_PREFETCH) for t in tiles}

    def _resolve_defaults(self, m: int) -> None:
        """pingpong / stage_bias / stage_aux left as None take :data:`FUSION_DEFAULTS`, where this plan can take them."""
        dflt = FUSION_DEFAULTS.get(
            fusion_of(swiglu=self.swiglu, dsrelu=self.dsrelu, amax=self.want_amax, activation=self.activation, has_bias=self.bias is not None), {}
        )
        if self.pingpong is None:
            self.pingpong = bool(dflt.get("pingpong", False)) and self.split_k == 1
        if self.stage_bias is None:
            self.stage_bias = bool(dflt.get("stage_bias", False)) and self.bias is not None and self.split_k == 1
        if self.stage_aux is None:
            aux, ok = self.aux, False
            if self.dsrelu and aux is not None and aux.dtype == self.d.dtype and self.split_k == 1:
                ldaux = aux.stride[-2] if m > 1 else _round8(aux.shape[-1])
                ok = ldaux % 8 == 0 and (aux.rank == 2 or aux.shape[0] == 1 or aux.stride[0] % 8 == 0)
            self.stage_aux = bool(dflt.get("stage_aux", False)) and ok

    def tile_mn(self) -> tuple:
        """The CTA tile of this plan: (128, 256) cooperative, (64, 256) pingpong; fp8 with promotion (fast_accum=False)
        halves N so that its two fp32 accumulators fit the registers."""
        if self._tile_override is not None:
            return self._tile_override
        if self._choice is not None:
            return self._choice.tile_mn
        if self._is_fp8 and not self.fast_accum:
            return (64, 128) if self.pingpong else (128, FP8_PROMOTED_TILE_N)  # the pingpong A/B ran 64 x 128 only
        return (64, 256) if self.pingpong else (128, 256)

    def _make_config(self):
        from .kernel_sm90 import GemmSm90Config

        cs = self.cluster_mn[0] * self.cluster_mn[1]
        return GemmSm90Config(
            ab_dtype=_NAMES[self.a.dtype],
            d_dtype=_NAMES[self.d.dtype],
            a_major=self._a_major,
            b_major=self._b_major,
            cluster_mn=self.cluster_mn,
            swizzle=self.swizzle,
            raster_along_m=self.raster_along_m,
            max_active_clusters=_sm_count(self.a.device) // cs,
            activation=self.activation,
            has_c=self.c is not None,
            c_dtype=_NAMES[self.c.dtype] if self.c is not None else "bfloat16",
            bias={"col": "n", "row": "m"}[self.bias_kind] if self.bias is not None else "none",
            bias_dtype=_NAMES[self.bias.dtype] if self.bias is not None else "bfloat16",
            swiglu=self.swiglu is not None,
            swiglu_halves=self.swiglu == "halves",
            store_pre=self.store_pre,
            dsrelu=self.dsrelu,
            aux_dtype=_NAMES[self.aux.dtype] if self.aux is not None else "bfloat16",
            amax=self.want_amax,
            b_dtype=_NAMES[self.b.dtype] if self.b.dtype != self.a.dtype else "",
            scale_ab=self.scale_a is not None,
            scale_d=self.scale_d is not None,
            split_k=self.split_k,
            stage_bias=self.stage_bias,
            stage_aux=self.stage_aux,
            pingpong=self.pingpong,
            tile_mn=self.tile_mn(),
            aux_prefetch=(self._aux_prefetch_of.get(self.tile_mn(), AUX_PREFETCH) if self.aux_prefetch is None else self.aux_prefetch) if self.stage_aux else 1,
            aux_ldmatrix=bool(AUX_LDMATRIX if self.aux_ldmatrix is None else self.aux_ldmatrix) and bool(self.stage_aux),
            gelu_fold=bool(GELU_FOLD if self.gelu_fold is None else self.gelu_fold) and self.activation == "gelu_tanh",
            amax_fast=bool(AMAX_FAST if self.amax_fast is None else self.amax_fast) and self.want_amax and self.split_k == 1,
            swiglu_tanh=bool(SWIGLU_TANH if self.swiglu_tanh is None else self.swiglu_tanh) and self.swiglu is not None,
            fast_accum=self.fast_accum and self._is_fp8,  # irrelevant (and kept False) for 16-bit operands
            promotion_interval=(FP8_PROMOTION_INTERVAL if self.promotion_interval is None else self.promotion_interval)
            if self._is_fp8 and not self.fast_accum
            else 1,
        )

    def compile(self) -> None:
        self._ensure_support_checked()
        from cudnn._compat import tvm_ffi_available
        from cudnn.kernel_cache import kernel_cache

        from . import kernel_sm90

        self.config = self._make_config()
        # tvm-ffi entry when apache-tvm-ffi is installed (µs launches); CUDNN_GEMM_TVM_FFI=0 forces the DSL's own entry
        self._tvm_ffi = tvm_ffi_available() and os.environ.get("CUDNN_GEMM_TVM_FFI", "1") != "0"
        key = (self.config, "tvm-ffi" if self._tvm_ffi else "dsl")
        self._compiled_kernel = kernel_cache.get_or_compile(key, lambda: kernel_sm90.compile_kernel(self.config, tvm_ffi=self._tvm_ffi), family="gemm")
        for tile, swizzle in self._tile_set:
            # "auto2": the other tile of the plan's (N, K) set, so that another M (which may pick it) never compiles
            sib = replace(self.config, tile_mn=tile, swizzle=swizzle)
            if tile in self._aux_prefetch_of:  # AUX_KEEP_STAGES: that tile's own prefetch depth
                sib = replace(sib, aux_prefetch=self._aux_prefetch_of[tile])
            kernel_cache.get_or_compile((sib, key[1]), lambda sib=sib: kernel_sm90.compile_kernel(sib, tvm_ffi=self._tvm_ffi), family="gemm")
        self._compiled_reduce = None
        if self.split_k > 1:
            from . import splitk_reduce_sm90

            rkey = (self.config, "splitk-reduce", "tvm-ffi" if self._tvm_ffi else "dsl")
            self._compiled_reduce = kernel_cache.get_or_compile(
                rkey, lambda: splitk_reduce_sm90.compile_reduce(self.config, tvm_ffi=self._tvm_ffi), family="gemm"
            )
        self._precompute_scalars()
        import torch

        self._torch_dtypes = {name: (getattr(torch, _NAMES[desc.dtype]) if desc is not None else None) for name, desc in self._descs().items()}

    def _descs(self):
        return {
            "a": self.a,
            "b": self.b,
            "d": self.d,
            "c": self.c,
            "bias": self.bias,
            "aux": self.aux,
            "amax": self.amax,
            "scale_a": self.scale_a,
            "scale_b": self.scale_b,
            "scale_d": self.scale_d,
        }

    def _precompute_scalars(self):
        """Runtime Int32 arguments (extents and strides) of this plan, in the kernel's order."""
        from cutlass import Int32

        a, b, d, c, aux, bias = self.a, self.b, self.d, self.c, self.aux, self.bias
        batched = a.rank == 3

        def bstride(desc, fallback):
            return desc.stride[0] if desc is not None and desc.rank == 3 and desc.shape[0] > 1 else fallback

        m, n, k = self._m, self._n, self._k
        vals = [
            m,
            n,
            k,
            self._l,
            self._lda,
            bstride(a, _round_up(self._lda * (m if self._a_major == "k" else k), _align_elems(a.dtype))),
            self._ldb,
            bstride(b, _round_up(self._ldb * (n if self._b_major == "k" else k), _align_elems(b.dtype))),
            self._ldd,
            bstride(d, _round_up(self._ldd * m, _align_elems(d.dtype))),
            c.stride[-2] if c is not None else 0,
            c.stride[-1] if c is not None else 0,
            bstride(c, 0),
            bias.stride[0] if bias is not None and bias.rank == 2 else 0,
            aux.stride[-2] if aux is not None else 0,
            bstride(aux, 0),
        ]
        if self.stage_aux:  # a TMA descriptor over aux: 16-byte strides even for never-stepped modes
            vals[14] = aux.stride[-2] if m > 1 else _round8(n)
            vals[15] = bstride(aux, _round8(vals[14] * m))
        del batched
        self._int_vals = tuple(int(v) for v in vals)
        self._int_args = tuple(Int32(v) for v in vals)
        if self.split_k > 1:
            # the GEMM launch writes its fp32 partial stack (M, N, L * split_k) with row stride ldp instead of d;
            # the reduction reads it back and writes d
            ldp = (n + 3) // 4 * 4
            sv = list(vals)
            sv[8], sv[9] = ldp, m * ldp
            self._split_vals = tuple(int(v) for v in sv)
            self._split_args = tuple(Int32(v) for v in sv)
            rv = [m, n, self._l, ldp, self._ldd, vals[9], vals[13]]
            self._reduce_vals = tuple(int(v) for v in rv)
            self._reduce_args = tuple(Int32(v) for v in rv)

    def scratch_workspace_bytes(self) -> int:
        """fp32 split-K partials (split_k * L * M * round4(N) * 4 bytes); 0 without split-K."""
        if self.split_k <= 1:
            return 0
        from cudnn.workspace import ws_align

        return ws_align(self.split_k * self._l * self._m * ((self._n + 3) // 4 * 4) * 4)

    def get_workspace_size(self) -> int:
        return self.scratch_workspace_bytes()

    # ------------------------------------------------------------------ launch
    def execute(
        self,
        a,
        b,
        d,
        *,
        c=None,
        bias=None,
        aux=None,
        amax=None,
        scale_a=None,
        scale_b=None,
        scale_d=None,
        alpha=None,
        beta=None,
        workspace=None,
        current_stream=None,
    ):
        """Launch on ``current_stream`` (None: torch's current stream). Validates only (Rules 1-3).

        ``workspace``: a uint8 CUDA buffer of at least ``scratch_workspace_bytes()`` (split-K plans only)."""
        if self._compiled_kernel is None:
            raise RuntimeError("GemmSm90.execute() before compile()")
        what = "GemmSm90.execute"
        tensors = {"a": a, "b": b, "d": d, "c": c, "bias": bias, "aux": aux, "amax": amax, "scale_a": scale_a, "scale_b": scale_b, "scale_d": scale_d}
        for name, desc in self._descs().items():
            t = tensors[name]
            if desc is None:
                if t is not None:
                    raise ValueError(f"{what}: {name} was passed but the plan was built without it (it would be ignored)")
            elif t is None or t.dtype is not self._torch_dtypes[name] or t.shape != desc.shape or t.stride() != desc.stride:
                self._check_tensor_matches(t, desc, what)  # raises with the full description
        for t, name in ((a, "a"), (b, "b"), (d, "d"), (aux if self.stage_aux else None, "aux")):
            if t is not None and t.data_ptr() % 16:
                raise ValueError(f"{what}: {name} address 0x{t.data_ptr():x} is not 16-byte aligned (TMA)")
        if not (a.device == b.device == d.device) or (self.a.device is not None and str(a.device) != self.a.device):
            raise ValueError(f"{what}: a, b, d are on {a.device}, {b.device}, {d.device}; the plan was built for {self.a.device}")
        for t, name in ((scale_a, "scale_a"), (scale_b, "scale_b"), (scale_d, "scale_d")):
            if t is not None and t.device != a.device:
                raise ValueError(f"{what}: {name} is on {t.device}, the operands on {a.device}: scales are device scalars read by the kernel")
        from cudnn._torch_stream import launch_stream_handle, stream_context

        if self.split_k > 1:
            from cudnn.workspace import Workspace

            ws_ptr = Workspace.over(workspace, self.scratch_workspace_bytes(), "GemmSm90", device=a.device).data_ptr
        handle = launch_stream_handle(current_stream, a.device)
        if amax is not None:
            with stream_context(handle, a.device):
                amax.zero_()  # the promised reset: a 4-byte memset on the launch stream
        alpha = self.alpha if alpha is None else float(alpha)
        beta = self.beta if beta is None else float(beta)
        if self.split_k > 1:
            return self._execute_split(a, b, d, bias, scale_a, scale_b, scale_d, alpha, ws_ptr, handle)
        if self._tvm_ffi:
            self._compiled_kernel(
                a.data_ptr(),
                b.data_ptr(),
                d.data_ptr(),
                None if c is None else c.data_ptr(),
                None if bias is None else bias.data_ptr(),
                None if aux is None else aux.data_ptr(),
                None if amax is None else amax.data_ptr(),
                None if scale_a is None else scale_a.data_ptr(),
                None if scale_b is None else scale_b.data_ptr(),
                None if scale_d is None else scale_d.data_ptr(),
                *self._int_vals,
                alpha,
                beta,
                handle,
            )
            return d
        import cuda.bindings.driver as cuda
        from cutlass import Float32
        from cutlass.cute.runtime import make_ptr

        from .kernel_sm90 import pointer_dtype

        gmem = _gmem()

        def ptr(t, align):
            return None if t is None else make_ptr(pointer_dtype(t.dtype), t.data_ptr(), gmem, assumed_align=align)

        self._compiled_kernel(
            ptr(a, 16),
            ptr(b, 16),
            ptr(d, 16),
            ptr(c, c.element_size() if c is not None else 1),
            ptr(bias, bias.element_size() if bias is not None else 1),
            ptr(aux, aux.element_size() if aux is not None else 1),
            ptr(amax, 4),
            ptr(scale_a, 4),
            ptr(scale_b, 4),
            ptr(scale_d, 4),
            *self._int_args,
            Float32(alpha),
            Float32(beta),
            cuda.CUstream(handle),
        )
        return d

    def _execute_split(self, a, b, d, bias, scale_a, scale_b, scale_d, alpha, ws_ptr, handle):
        """The two launches a split-K plan promises: the GEMM into the fp32 partials, then the reduction."""

        def addr(t):
            return None if t is None else t.data_ptr()

        if self._tvm_ffi:
            self._compiled_kernel(a.data_ptr(), b.data_ptr(), ws_ptr, None, None, None, None, None, None, None, *self._split_vals, 1.0, 0.0, handle)
            self._compiled_reduce(ws_ptr, d.data_ptr(), addr(bias), addr(scale_a), addr(scale_b), addr(scale_d), *self._reduce_vals, alpha, handle)
            return d
        import cuda.bindings.driver as cuda
        from cutlass import Float32
        from cutlass.cute.runtime import make_ptr

        from .kernel_sm90 import pointer_dtype

        gmem = _gmem()

        def ptr(t, align):
            return None if t is None else make_ptr(pointer_dtype(t.dtype), t.data_ptr(), gmem, assumed_align=align)

        pw = make_ptr(Float32, ws_ptr, gmem, assumed_align=16)
        stream = cuda.CUstream(handle)
        self._compiled_kernel(ptr(a, 16), ptr(b, 16), pw, None, None, None, None, None, None, None, *self._split_args, Float32(1.0), Float32(0.0), stream)
        self._compiled_reduce(
            pw,
            ptr(d, d.element_size()),
            ptr(bias, bias.element_size() if bias is not None else 1),
            ptr(scale_a, 4),
            ptr(scale_b, 4),
            ptr(scale_d, 4),
            *self._reduce_args,
            Float32(alpha),
            stream,
        )
        return d


def _gmem():
    import cutlass.cute as cute

    return cute.AddressSpace.gmem


def split_k_for(m: int, n: int, k: int, sm_count: int = 132, tile_mn: tuple = (128, 256), tile_k: int = 64) -> int:
    """A split-K factor for a small-M problem (host arithmetic on plan-time extents; unverified heuristic).

    1 when the (M, N) tiles already fill half the SMs; otherwise enough K slices to fill them, each at
    least 4 k-tiles deep, at most 16."""
    tiles = -(-m // tile_mn[0]) * -(-n // tile_mn[1])
    if 2 * tiles >= sm_count:
        return 1
    k_tiles = -(-k // tile_k)
    return max(1, min(16, sm_count // tiles, k_tiles // 4))


# ---------------------------------------------------------------------- wrappers
_PLANS: dict = {}


def _key_of(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def cached_plan(a, b, d, **kw) -> GemmSm90:
    """A compiled GemmSm90 for these tensors' metadata (shapes, strides, dtypes, devices) and flags."""
    tensors = {k: kw.get(k) for k in ("c", "bias", "aux", "amax", "scale_a", "scale_b", "scale_d")}
    flags = tuple(sorted((k, v) for k, v in kw.items() if k not in tensors))
    key = (_key_of(a), _key_of(b), _key_of(d), tuple((k, _key_of(v)) for k, v in tensors.items()), flags)
    plan = _PLANS.get(key)
    if plan is None:
        plan = GemmSm90(a, b, d, **kw)
        plan.compile()
        _PLANS[key] = plan
    return plan


def alloc_rows(lead: tuple, m: int, n: int, dtype, device):
    """An (\\*lead, m, n) row-major output whose row stride is padded to 16 bytes (TMA rows): 8 elements of
    bf16/fp16, 16 of fp8."""
    import torch

    ldn = _round_up(n, 16 // dtype.itemsize)
    full = torch.empty((*lead, m, ldn), dtype=dtype, device=device)
    return full[..., :n] if ldn != n else full


def run_gemm(a, b, *, n_out=None, out=None, stream=None, extra_out=None, out_dtype=None, workspace=None, **kw):
    """Shared body of every wrapper: allocate d (and, for split-K, the workspace) on the launch stream, plan, launch.

    ``out_dtype``: d's dtype when ``out`` is None (default: the operands' dtype; bf16 for fp8 operands)."""
    import torch

    from cudnn._torch_stream import stream_context

    m, n = a.shape[-2], b.shape[-1]
    n_out = n if n_out is None else n_out
    lead = tuple(a.shape[:-2])
    if out is None:
        if out_dtype is None:
            out_dtype = torch.bfloat16 if a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else a.dtype
        with stream_context(stream, a.device):
            out = alloc_rows(lead, m, n_out, out_dtype, a.device)
    tensors = {k: kw.pop(k) for k in ("c", "bias", "aux", "amax", "scale_a", "scale_b", "scale_d") if k in kw}
    alpha = kw.pop("alpha", 1.0)
    beta = kw.pop("beta", 1.0)
    plan = cached_plan(a, b, out, **{k: v for k, v in tensors.items() if v is not None}, **kw)
    nbytes = plan.scratch_workspace_bytes()
    if nbytes and workspace is None:
        with stream_context(stream, a.device):
            workspace = torch.empty(nbytes, dtype=torch.uint8, device=a.device)
    plan.execute(
        a, b, out, **{k: v for k, v in tensors.items() if v is not None}, alpha=alpha, beta=beta, workspace=workspace if nbytes else None, current_stream=stream
    )
    return out


def gemm(
    a,
    b,
    *,
    bias=None,
    c=None,
    alpha: float = 1.0,
    beta: float | None = None,
    out=None,
    bias_kind: str = "col",
    scale_a=None,
    scale_b=None,
    scale_d=None,
    out_dtype=None,
    split_k: int = 1,
    fast_accum: bool = False,
    workspace=None,
    stream=None,
) -> TupleDict:
    """``d = alpha * scale_a * scale_b * (a @ b) + beta * c + bias`` (times ``scale_d``) on Hopper. Returns ``TupleDict(d=...)``.

    a: (M, K) or (L, M, K); b: (K, N) or (L, K, N) (row-major or ``w.t()``); bias: (N,) for
    ``bias_kind="col"`` or (M,) for ``"row"``; c: (M, N) (beta defaults to 1 when c is given);
    out: optional preallocated row-major d. ``stream``: a torch stream or raw handle (None: current).
    fp8: a and b float8_e4m3fn / float8_e5m2, both K-major (row-major a, ``w.t()`` of an (N, K) weight);
    ``scale_a``/``scale_b``: one-element fp32 CUDA tensors (dequantization scales, never read by the host);
    ``scale_d``: optional one-element fp32 output scale; ``out_dtype``: bf16 (default), fp16, e4m3 or e5m2.
    ``split_k``: K slices for small-M shapes (fp32 partials in ``workspace``, allocated here when None).
    ``fast_accum`` (fp8): True keeps the fp8 WGMMA's reduced-precision accumulation (faster, like
    ``torch._scaled_mm(use_fast_accum=True)``); False (default) promotes it into an fp32 sum every 128 of K.
    """
    kw = {}
    if split_k != 1:
        kw["split_k"] = split_k
    if fast_accum:
        kw["fast_accum"] = True
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b), ("scale_d", scale_d)):
        if t is not None:
            kw[name] = t
    d = run_gemm(
        a,
        b,
        out=out,
        stream=stream,
        bias=bias,
        c=c,
        alpha=alpha,
        beta=1.0 if beta is None else beta,
        bias_kind=bias_kind,
        out_dtype=out_dtype,
        workspace=workspace,
        **kw,
    )
    return TupleDict(d=d)


__all__ = [
    "AUX_KEEP_STAGES",
    "FP8_PROMOTED_TILE_N",
    "FP8_PROMOTION_INTERVAL",
    "FUSED_AUTO2",
    "FUSION_DEFAULTS",
    "SCHEDULES",
    "TILE_SCHEDULE",
    "GemmSm90",
    "cached_plan",
    "fusion_of",
    "gemm",
    "run_gemm",
    "split_k_for",
]
_ = replace  # dataclasses.replace kept for callers building variant configs
