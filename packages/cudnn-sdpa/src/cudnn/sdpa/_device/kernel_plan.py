"""The plan half shared by the sdpa forward and backward kernel classes (sm_90a, CuTe DSL).

:class:`WarpSpecializedPlanSm90` holds what both warp-specialized attention kernels fix at plan time from their
compile key: element type, head dims, the thread and register split of one producer warpgroup plus
``num_consumer_wg`` consumer warpgroups, and the swizzled shared-memory layouts of 16-bit operand tiles. The
tile shapes come from each direction's own ``tile_config`` and are set by the subclass.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.utils import LayoutEnum

#: Compile-key dtype names to CuTe DSL element types.
DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}


class WarpSpecializedPlanSm90:
    """One producer warpgroup (warp 0 issues TMA) and ``num_consumer_wg`` consumer warpgroups of 128 threads.

    ``__init__(key)`` reads ``key.dtype``, ``key.head_dim`` and ``key.head_dim_v``; subclasses then set ``tile_m``,
    ``tile_n`` and ``num_stages`` from their tile table."""

    num_consumer_wg = 2
    threads_per_wg = 128

    def __init__(self, key):
        self.key = key
        self.dtype = DTYPES[key.dtype]
        self.head_dim = key.head_dim
        self.head_dim_v = key.head_dim_v
        self.num_mma_threads = self.num_consumer_wg * self.threads_per_wg
        self.num_threads = self.num_mma_threads + self.threads_per_wg
        self.num_mma_regs, self.num_producer_regs = 240, 24

    def _smem_layout(self, rows: int, cols: int, stages: int | None = None, atom_cols: int | None = None):
        """Row-major swizzled (rows, cols[, stages]) layout of ``self.dtype``; the swizzle atom is chosen for
        ``atom_cols`` columns (default ``cols``), e.g. a half of the head dim when two warpgroups split it."""
        kind = sm90_utils.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, self.dtype, atom_cols or cols)
        atom = warpgroup.make_smem_layout_atom(kind, self.dtype)
        if stages is None:
            return cute.tile_to_shape(atom, (rows, cols), order=(0, 1))
        return cute.tile_to_shape(atom, (rows, cols, stages), order=(0, 1, 2))


def fake_gmem_ptr(dtype, align: int = 16):
    """A placeholder global-memory pointer for ``cute.compile`` with no GPU (never dereferenced at compile time):
    what every sdpa ``compile_*`` function passes for the operands it compiles in."""
    from cutlass.cute.runtime import make_ptr

    return make_ptr(dtype, 16, cute.AddressSpace.gmem, assumed_align=align)
