"""One place for CuTe DSL APIs that moved between the 4.6, 4.7 and 4.8 lanes (cached probes and shims).

Importing this module imports no ``cutlass``: every probe imports the DSL lazily, on first call, and is
cached for the life of the process. A feature is probed where a probe works (an attribute, a module, a
keyword in a signature); the version is compared only where no probe can tell (:data:`FEATURES` says
which). The lane-by-lane table these probes were written from is ``docs/dsl-lanes.md``.

    from cudnn import _compat
    kernel = _compat.name_kernel(kernel)             # Rule 6, or the Rule 7 version-naming error
    LayoutEnum = _compat.layout_enum()                 # cutlass.tensor_utils (4.8) or cutlass.utils (4.6/4.7)
    if not _compat.has_feature("tma_override_ops"):    # 4.8+ only
        raise _compat.feature_error("tma_override_ops", "GemmSm90 grouped path")
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .dsl_gate import CuteDslVersionError, cutedsl_requirement_error, cutedsl_state, cutedsl_too_old

#: The Rule 6 kernel-name prefix.
KERNEL_PREFIX = "cudnn"


def _resolve(path: str) -> Any:
    """Import the longest module prefix of a dotted ``path`` and walk the rest as attributes.

    Raises ImportError / AttributeError when it does not exist. Deprecation warnings raised by the
    lookup (the DSL warns on moved names) are swallowed: the probe asks whether it exists."""
    parts = path.split(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                if i == 1:
                    raise
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr)
            return obj
    raise ImportError(path)


def _exists(path: str) -> bool:
    try:
        _resolve(path)
        return True
    except (ImportError, AttributeError):
        return False


def _has_kwarg(path: str, kwarg: str) -> bool:
    try:
        return kwarg in inspect.signature(_resolve(path)).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


@dataclass(frozen=True)
class Feature:
    """A DSL capability: ``probe`` tells whether it is there; ``floor`` is the first lane that has it
    (the version compare used where the probe cannot run, and the version named in the error)."""

    description: str
    floor: str
    probe: Callable[[], bool] | None = None


def _probe_name_prefix() -> bool:
    import cutlass.cute as cute

    def _cudnn_probe_kernel():  # decorated only, never compiled
        pass

    kernel = cute.kernel(_cudnn_probe_kernel)
    setter = getattr(kernel, "set_name_prefix", None)
    if setter is None:
        return False
    try:
        return "remove_cutlass_symbol" in inspect.signature(setter).parameters
    except (TypeError, ValueError):
        return False


def _probe_tvm_ffi_export() -> bool:
    if importlib.util.find_spec("tvm_ffi") is None:
        return False
    try:
        base = _resolve("cutlass.cutlass_dsl.tvm_ffi_provider.TVMFFIJitCompiledFunctionBase")
    except (ImportError, AttributeError):
        return False
    return callable(getattr(base, "export_to_c", None)) and _has_kwarg("cutlass.cute.runtime.load_module", "enable_tvm_ffi")


#: Features whose presence differs between lanes, or that kernels depend on. Floors from docs/dsl-lanes.md.
FEATURES: dict[str, Feature] = {
    "name_prefix": Feature("@cute.kernel .set_name_prefix(name, remove_cutlass_symbol=...) (Rule 6)", "4.6.2", _probe_name_prefix),
    "fake_tensors": Feature(
        "cute.sym_int, cute.runtime.make_fake_compact_tensor, make_fake_stream (compile without a GPU)",
        "4.6.2",
        lambda: all(_exists(p) for p in ("cutlass.cute.sym_int", "cutlass.cute.runtime.make_fake_compact_tensor", "cutlass.cute.runtime.make_fake_stream")),
    ),
    "tvm_ffi_export": Feature(
        "cute.compile(options='--enable-tvm-ffi') + export_to_c + cute.runtime.load_module(enable_tvm_ffi=True)", "4.6.2", _probe_tvm_ffi_export
    ),
    "tensor_utils": Feature(
        "cutlass.tensor_utils (LayoutEnum, TensorMapUpdateMode moved out of cutlass.utils)", "4.8.0", lambda: _exists("cutlass.tensor_utils.LayoutEnum")
    ),
    "tma_override_ops": Feature(
        "cpasync.CopyBulkTensorTile{G2S,G2SMulticast,S2G}OverrideOp", "4.8.0", lambda: _exists("cutlass.cute.nvgpu.cpasync.CopyBulkTensorTileG2SOverrideOp")
    ),
    "tma_gather4": Feature(
        "cpasync.CopyBulkTensor2DGather4G2SOp / Scatter4S2GOp and make_tiled_tma_atom(gmem_coord_tensor=...)",
        "4.8.0",
        lambda: (
            _exists("cutlass.cute.nvgpu.cpasync.CopyBulkTensor2DGather4G2SOp")
            and _has_kwarg("cutlass.cute.nvgpu.cpasync.make_tiled_tma_atom", "gmem_coord_tensor")
        ),
    ),
    "packed_half_math": Feature(
        "cute.arch.{add,sub,fma}_packed_{bf16x2,f16x2}, exp2_packed_bf16x2, fma_bf16", "4.8.0", lambda: _exists("cutlass.cute.arch.fma_packed_bf16x2")
    ),
    "pipeline_empty": Feature(
        "cutlass.pipeline.PipelineEmpty / PerStagePipelineState / compute_k_tile", "4.8.0", lambda: _exists("cutlass.pipeline.PipelineEmpty")
    ),
    "tiled_tma_atom_C": Feature("cute.nvgpu.make_tiled_tma_atom_C", "4.8.0", lambda: _exists("cutlass.cute.nvgpu.make_tiled_tma_atom_C")),
    "cutlass_array": Feature("cutlass.Array, cutlass.GridConstant, cutlass.full / full_like", "4.7.1", lambda: _exists("cutlass.GridConstant")),
    "sparse_warp_mma": Feature("cute.nvgpu.warp.MmaF16BF16SparseOp", "4.8.0", lambda: _exists("cutlass.cute.nvgpu.warp.MmaF16BF16SparseOp")),
}

#: What the Hopper kernels of every family use (WGMMA, TMA, mbarrier pipelines, warp specialization).
#: Present in all four lanes (4.6.2, 4.7.1, 4.8.0, 4.8.1): docs/dsl-lanes.md.
HOPPER_APIS: tuple[str, ...] = (
    "cutlass.cute.nvgpu.warpgroup.MmaF16BF16Op",
    "cutlass.cute.nvgpu.warpgroup.MmaF8Op",
    "cutlass.cute.nvgpu.warpgroup.OperandSource",
    "cutlass.cute.nvgpu.warpgroup.SmemLayoutAtomKind",
    "cutlass.cute.nvgpu.warpgroup.make_smem_layout_atom",
    "cutlass.cute.nvgpu.warpgroup.fence",
    "cutlass.cute.nvgpu.warpgroup.commit_group",
    "cutlass.cute.nvgpu.warpgroup.wait_group",
    "cutlass.cute.nvgpu.OperandMajorMode",
    "cutlass.cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp",
    "cutlass.cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp",
    "cutlass.cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp",
    "cutlass.cute.nvgpu.cpasync.CopyReduceBulkTensorTileS2GOp",
    "cutlass.cute.nvgpu.cpasync.make_tiled_tma_atom",
    "cutlass.cute.nvgpu.cpasync.tma_partition",
    "cutlass.cute.nvgpu.cpasync.prefetch_descriptor",
    "cutlass.cute.nvgpu.cpasync.create_tma_multicast_mask",
    "cutlass.cute.nvgpu.warp.LdMatrix8x8x16bOp",
    "cutlass.cute.nvgpu.warp.StMatrix8x8x16bOp",
    "cutlass.pipeline.PipelineTmaAsync",
    "cutlass.pipeline.PipelineTmaMultiConsumersAsync",
    "cutlass.pipeline.PipelineAsync",
    "cutlass.pipeline.PipelineTmaStore",
    "cutlass.pipeline.PipelineCpAsync",
    "cutlass.pipeline.make_pipeline_state",
    "cutlass.pipeline.PipelineState",
    "cutlass.pipeline.PipelineUserType",
    "cutlass.pipeline.NamedBarrier",
    "cutlass.pipeline.CooperativeGroup",
    "cutlass.pipeline.Agent",
    "cutlass.pipeline.pipeline_init_arrive",
    "cutlass.pipeline.pipeline_init_wait",
    "cutlass.utils.hopper_helpers.make_smem_layout_a",
    "cutlass.utils.hopper_helpers.make_smem_layout_b",
    "cutlass.utils.hopper_helpers.make_smem_layout_epi",
    "cutlass.utils.hopper_helpers.get_smem_store_op",
    "cutlass.utils.hopper_helpers.make_trivial_tiled_mma",
    "cutlass.utils.HardwareInfo",
    "cutlass.utils.SmemAllocator",
    "cutlass.utils.StaticPersistentTileScheduler",
    "cutlass.utils.PersistentTileSchedulerParams",
    "cutlass.cute.arch.setmaxregister_increase",
    "cutlass.cute.arch.setmaxregister_decrease",
    "cutlass.cute.arch.warpgroup_reg_alloc",
    "cutlass.cute.arch.warpgroup_reg_dealloc",
    "cutlass.cute.arch.mbarrier_init",
    "cutlass.cute.arch.mbarrier_init_fence",
    "cutlass.cute.arch.mbarrier_arrive",
    "cutlass.cute.arch.mbarrier_arrive_and_expect_tx",
    "cutlass.cute.arch.mbarrier_wait",
    "cutlass.cute.arch.mbarrier_try_wait",
    "cutlass.cute.arch.elect_one",
    "cutlass.cute.arch.make_warp_uniform",
    "cutlass.cute.arch.fence_proxy",
    "cutlass.cute.arch.barrier",
    "cutlass.cute.arch.cp_async_bulk_commit_group",
    "cutlass.cute.arch.cp_async_bulk_wait_group",
    "cutlass.cute.arch.griddepcontrol_wait",
    "cutlass.cute.arch.griddepcontrol_launch_dependents",
    "cutlass.cute.arch.fma_packed_f32x2",
    "cutlass.cute.arch.mul_packed_f32x2",
    "cutlass.cute.arch.exp2",
    "cutlass.cute.make_rmem_tensor",
    "cutlass.cute.struct",
    "cutlass.range",
    "cutlass.range_constexpr",
    "cutlass.const_expr",
)


@functools.cache
def has_feature(name: str) -> bool:
    """Whether the installed DSL has feature ``name`` (a key of :data:`FEATURES`): probed, cached.

    False when no DSL is installed. Where the probe itself cannot run (it raises something other than
    a missing name), the installed version is compared with the feature's floor."""
    feature = FEATURES[name]
    if not cutedsl_state().installed:
        return False
    if feature.probe is not None:
        try:
            return bool(feature.probe())
        except (ImportError, AttributeError):
            return False
        except Exception:  # the probe could not run: fall back to the version
            pass
    return not cutedsl_too_old(feature.floor)


def feature_error(name: str, what: str | None = None) -> CuteDslVersionError:
    """The Rule 7 error for a missing feature: names the installed and the required DSL versions."""
    feature = FEATURES[name]
    return cutedsl_requirement_error(what or feature.description, feature.floor)


def require_feature(name: str, what: str | None = None) -> None:
    """Raise :func:`feature_error` unless :func:`has_feature`."""
    if not has_feature(name):
        raise feature_error(name, what)


@functools.lru_cache(maxsize=1)
def missing_hopper_apis() -> tuple[str, ...]:
    """The entries of :data:`HOPPER_APIS` the installed DSL lacks (empty on every lane we run)."""
    return tuple(p for p in HOPPER_APIS if not _exists(p))


# --------------------------------------------------------------------------------------------------
# Rule 6: kernel naming


def has_name_prefix() -> bool:
    """Whether ``@cute.kernel`` functions have ``set_name_prefix(name, remove_cutlass_symbol=...)``."""
    return has_feature("name_prefix")


def name_kernel(kernel: Any, prefix: str = KERNEL_PREFIX) -> Any:
    """Apply Rule 6 to a ``@cute.kernel`` function: its PTX/cubin symbol becomes ``cudnn_kernel_<name>_...``
    with no ``cutlass`` component. Returns ``kernel`` (usable right after the definition, or as the outer
    decorator). Raises the Rule 7 version-naming error where the DSL cannot rename kernels."""
    setter = getattr(kernel, "set_name_prefix", None)
    if setter is None or not has_name_prefix():
        raise feature_error("name_prefix", f"naming kernel {getattr(kernel, '__name__', kernel)!r} (Rule 6: set_name_prefix)")
    setter(prefix, remove_cutlass_symbol=True)
    return kernel


# --------------------------------------------------------------------------------------------------
# tvm-ffi


def tvm_ffi_available() -> bool:
    """``apache-tvm-ffi`` is importable (checked without importing it)."""
    return importlib.util.find_spec("tvm_ffi") is not None


def tvm_ffi_version() -> str | None:
    try:
        return importlib.metadata.version("apache-tvm-ffi")
    except importlib.metadata.PackageNotFoundError:
        return None


def tvm_ffi_export_available() -> bool:
    """A tvm-ffi compiled function can be exported to an object file and loaded back (the disk cache)."""
    return tvm_ffi_available() and has_feature("tvm_ffi_export")


def tvm_ffi_export_reason() -> str | None:
    """Why :func:`tvm_ffi_export_available` is False (None when it is True)."""
    if not cutedsl_state().installed:
        return "nvidia-cutlass-dsl is not installed"
    if not tvm_ffi_available():
        return "apache-tvm-ffi is not installed (pip install apache-tvm-ffi)"
    if not has_feature("tvm_ffi_export"):
        return f"nvidia-cutlass-dsl {cutedsl_state().version} has no tvm-ffi export_to_c / load_module(enable_tvm_ffi=True)"
    return None


TVM_FFI_OPTION = "--enable-tvm-ffi"


def compile_options(*, tvm_ffi: bool = False, keep_ptx_dir: str | None = None, extra: str = "") -> str:
    """A ``cute.compile(..., options=...)`` string; the flags are spelled the same in every lane.

    ``keep_ptx_dir`` dumps PTX there at compile time (unlike ``CUTE_DSL_KEEP``, which the DSL reads
    once, when it is imported)."""
    parts = [extra] if extra else []
    if tvm_ffi:
        parts.append(TVM_FFI_OPTION)
    if keep_ptx_dir:
        parts.append(f"--keep-ptx --dump-dir {keep_ptx_dir}")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------------
# shims for names that moved


def layout_enum() -> Any:
    """``LayoutEnum``: ``cutlass.tensor_utils`` from 4.8 (``cutlass.utils`` warns there), ``cutlass.utils`` before."""
    if has_feature("tensor_utils"):
        return _resolve("cutlass.tensor_utils.LayoutEnum")
    return _resolve("cutlass.utils.LayoutEnum")


def tensormap_update_mode() -> Any:
    """``TensorMapUpdateMode``: ``cutlass.tensor_utils`` from 4.8, ``cutlass.utils`` before."""
    if has_feature("tensor_utils"):
        return _resolve("cutlass.tensor_utils.TensorMapUpdateMode")
    return _resolve("cutlass.utils.TensorMapUpdateMode")


def operand_major_mode() -> Any:
    """``cute.nvgpu.OperandMajorMode`` (``warpgroup.OperandMajorMode`` is deprecated in every lane)."""
    return _resolve("cutlass.cute.nvgpu.OperandMajorMode")


def make_fake_stream(*, use_tvm_ffi_env_stream: bool = False) -> Any:
    """``cute.runtime.make_fake_stream`` (same signature in every lane; here so call sites need no DSL probe)."""
    from cutlass.cute.runtime import make_fake_stream as _make

    return _make(use_tvm_ffi_env_stream=use_tvm_ffi_env_stream)


def dsl_env_manager() -> Any:
    """The live CuTe DSL environment settings (``CUTE_DSL_*`` are read once, when cutlass is imported).
    None when cutlass is not imported yet (then setting the environment variables is enough)."""
    import sys

    if "cutlass" not in sys.modules:
        return None
    try:
        dsl_cls = _resolve("cutlass.cutlass_dsl.CuTeDSL")
        return dsl_cls._get_dsl().envar
    except Exception:
        return None
