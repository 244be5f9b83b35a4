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
- a K-major (row-major ``a``) or M-major (``a.t()`` of a row-major tensor); b N-major (row-major ``b``)
  or K-major (``w.t()`` of an (N, K) weight); the non-unit stride of each, and batch strides, multiples of
  8 elements (16-byte TMA strides), 16-byte-aligned base addresses;
- d row-major with a 16-byte-aligned row stride (the wrapper pads the row stride for odd N and returns a
  view); c any strides; bias contiguous (N,) ("col") or (M,) ("row"), optionally with a leading L.
"""

from __future__ import annotations

import os
from dataclasses import replace

from cudnn.api_base import APIBase, TensorDesc, TupleDict, as_desc
from cudnn.datatypes import data_type

_AB_DTYPES = (data_type.BFLOAT16, data_type.HALF)
_NAMES = {data_type.BFLOAT16: "bfloat16", data_type.HALF: "float16", data_type.FLOAT: "float32"}
_INT32_MAX = 2**31 - 1
ACTIVATIONS = ("none", "relu", "relu2", "gelu_tanh", "gelu_erf")


def _major_2d(desc: TensorDesc, rows_dim: int, cols_dim: int):
    """('cols' | 'rows', leading stride): which mode of a matrix operand has unit stride, and the other's stride.

    A mode of extent 1 is never stepped, so its stride is free: it counts as unit (or is replaced by a
    16-byte-aligned placeholder when it is the leading stride)."""
    r, c = desc.shape[rows_dim], desc.shape[cols_dim]
    sr, sc = desc.stride[rows_dim], desc.stride[cols_dim]
    if sc == 1 or c == 1:
        return "cols", (sr if r > 1 else _round8(c))
    if sr == 1 or r == 1:
        return "rows", (sc if c > 1 else _round8(r))
    return None, None


def _round8(x: int) -> int:
    return (int(x) + 7) // 8 * 8


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
        cluster_mn: tuple = (2, 1),
        swizzle: int = 1,
        raster_along_m: bool = True,
    ):
        super().__init__()
        self.a, self.b, self.d = as_desc(a, "a"), as_desc(b, "b"), as_desc(d, "d")
        self.c, self.bias, self.aux, self.amax = as_desc(c, "c"), as_desc(bias, "bias"), as_desc(aux, "aux"), as_desc(amax, "amax")
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
        self._check_dtype(a, _AB_DTYPES, what)
        self._decline_if(b.dtype != a.dtype, f"{what}: {b.describe()} must have a's dtype {a.dtype.short} (mixed operands are not served)")
        self._decline_if(d.dtype != a.dtype, f"{what}: {d.describe()} must have the operands' dtype {a.dtype.short}")
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
        self._decline_if(d.stride[-1] != 1 and n_out > 1, f"{what}: {d.describe()} must be row-major (unit stride along N)")
        ldd = d.stride[-2] if m > 1 else _round8(n_out)
        for desc, ld_ in ((a, lda), (b, ldb), (d, ldd)):
            self._decline_if(ld_ % 8 != 0, f"{what}: {desc.describe()}: leading stride {ld_} is not a multiple of 8 elements (TMA needs 16-byte strides)")
            if desc.rank == 3 and desc.shape[0] > 1:
                self._decline_if(desc.stride[0] % 8 != 0, f"{what}: {desc.describe()}: batch stride is not a multiple of 8 elements (TMA)")
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
        for desc in (a, b, d, self.c, self.bias, self.aux):
            if desc is not None:
                self._decline_if(desc.span_elements() > _INT32_MAX, f"{what}: {desc.describe()} spans more than 2^31 elements (32-bit offsets)")
        require_cutedsl(what, CUTEDSL_MIN_VERSION)
        self._is_supported = True
        return True

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
        self._precompute_scalars()
        import torch

        self._torch_dtypes = {name: (getattr(torch, _NAMES[desc.dtype]) if desc is not None else None) for name, desc in self._descs().items()}

    def _descs(self):
        return {"a": self.a, "b": self.b, "d": self.d, "c": self.c, "bias": self.bias, "aux": self.aux, "amax": self.amax}

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
            bstride(a, _round8(self._lda * (m if self._a_major == "k" else k))),
            self._ldb,
            bstride(b, _round8(self._ldb * (n if self._b_major == "k" else k))),
            self._ldd,
            bstride(d, _round8(self._ldd * m)),
            c.stride[-2] if c is not None else 0,
            c.stride[-1] if c is not None else 0,
            bstride(c, 0),
            bias.stride[0] if bias is not None and bias.rank == 2 else 0,
            aux.stride[-2] if aux is not None else 0,
            bstride(aux, 0),
        ]
        del batched
        self._int_vals = tuple(int(v) for v in vals)
        self._int_args = tuple(Int32(v) for v in vals)

    def scratch_workspace_bytes(self) -> int:
        return 0

    # ------------------------------------------------------------------ launch
    def execute(self, a, b, d, *, c=None, bias=None, aux=None, amax=None, alpha=None, beta=None, current_stream=None):
        """Launch on ``current_stream`` (None: torch's current stream). Validates only (Rules 1-3)."""
        if self._compiled_kernel is None:
            raise RuntimeError("GemmSm90.execute() before compile()")
        what = "GemmSm90.execute"
        tensors = {"a": a, "b": b, "d": d, "c": c, "bias": bias, "aux": aux, "amax": amax}
        for name, desc in self._descs().items():
            t = tensors[name]
            if desc is None:
                if t is not None:
                    raise ValueError(f"{what}: {name} was passed but the plan was built without it (it would be ignored)")
            elif t is None or t.dtype is not self._torch_dtypes[name] or t.shape != desc.shape or t.stride() != desc.stride:
                self._check_tensor_matches(t, desc, what)  # raises with the full description
        for t, name in ((a, "a"), (b, "b"), (d, "d")):
            if t.data_ptr() % 16:
                raise ValueError(f"{what}: {name} address 0x{t.data_ptr():x} is not 16-byte aligned (TMA)")
        if not (a.device == b.device == d.device) or (self.a.device is not None and str(a.device) != self.a.device):
            raise ValueError(f"{what}: a, b, d are on {a.device}, {b.device}, {d.device}; the plan was built for {self.a.device}")
        from cudnn._torch_stream import launch_stream_handle, stream_context

        handle = launch_stream_handle(current_stream, a.device)
        if amax is not None:
            with stream_context(handle, a.device):
                amax.zero_()  # the promised reset: a 4-byte memset on the launch stream
        alpha = self.alpha if alpha is None else float(alpha)
        beta = self.beta if beta is None else float(beta)
        if self._tvm_ffi:
            self._compiled_kernel(
                a.data_ptr(),
                b.data_ptr(),
                d.data_ptr(),
                None if c is None else c.data_ptr(),
                None if bias is None else bias.data_ptr(),
                None if aux is None else aux.data_ptr(),
                None if amax is None else amax.data_ptr(),
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
            *self._int_args,
            Float32(alpha),
            Float32(beta),
            cuda.CUstream(handle),
        )
        return d


def _gmem():
    import cutlass.cute as cute

    return cute.AddressSpace.gmem


# ---------------------------------------------------------------------- wrappers
_PLANS: dict = {}


def _key_of(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def cached_plan(a, b, d, **kw) -> GemmSm90:
    """A compiled GemmSm90 for these tensors' metadata (shapes, strides, dtypes, devices) and flags."""
    tensors = {k: kw.get(k) for k in ("c", "bias", "aux", "amax")}
    flags = tuple(sorted((k, v) for k, v in kw.items() if k not in tensors))
    key = (_key_of(a), _key_of(b), _key_of(d), tuple((k, _key_of(v)) for k, v in tensors.items()), flags)
    plan = _PLANS.get(key)
    if plan is None:
        plan = GemmSm90(a, b, d, **kw)
        plan.compile()
        _PLANS[key] = plan
    return plan


def alloc_rows(lead: tuple, m: int, n: int, dtype, device):
    """An (\\*lead, m, n) row-major output whose row stride is padded to 8 elements (16-byte TMA rows)."""
    import torch

    ldn = _round8(n)
    full = torch.empty((*lead, m, ldn), dtype=dtype, device=device)
    return full[..., :n] if ldn != n else full


def run_gemm(a, b, *, n_out=None, out=None, stream=None, extra_out=None, **kw):
    """Shared body of every wrapper: allocate d (and nothing else) on the launch stream, plan, launch."""
    from cudnn._torch_stream import stream_context

    m, n = a.shape[-2], b.shape[-1]
    n_out = n if n_out is None else n_out
    lead = tuple(a.shape[:-2])
    if out is None:
        with stream_context(stream, a.device):
            out = alloc_rows(lead, m, n_out, a.dtype, a.device)
    tensors = {k: kw.pop(k) for k in ("c", "bias", "aux", "amax") if k in kw}
    alpha = kw.pop("alpha", 1.0)
    beta = kw.pop("beta", 1.0)
    plan = cached_plan(a, b, out, **{k: v for k, v in tensors.items() if v is not None}, **kw)
    plan.execute(a, b, out, **{k: v for k, v in tensors.items() if v is not None}, alpha=alpha, beta=beta, current_stream=stream)
    return out


def gemm(a, b, *, bias=None, c=None, alpha: float = 1.0, beta: float | None = None, out=None, bias_kind: str = "col", stream=None) -> TupleDict:
    """``d = alpha * (a @ b) + beta * c + bias`` on Hopper. Returns ``TupleDict(d=...)``.

    a: (M, K) or (L, M, K); b: (K, N) or (L, K, N) (row-major or ``w.t()``); bias: (N,) for
    ``bias_kind="col"`` or (M,) for ``"row"``; c: (M, N) (beta defaults to 1 when c is given);
    out: optional preallocated row-major d. ``stream``: a torch stream or raw handle (None: current).
    """
    d = run_gemm(a, b, out=out, stream=stream, bias=bias, c=c, alpha=alpha, beta=1.0 if beta is None else beta, bias_kind=bias_kind)
    return TupleDict(d=d)


__all__ = ["GemmSm90", "gemm", "cached_plan", "run_gemm"]
_ = replace  # dataclasses.replace kept for callers building variant configs
