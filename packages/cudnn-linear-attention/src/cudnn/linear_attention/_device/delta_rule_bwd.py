"""Device blocks shared by the gated-delta-rule backward kernels (Gated DeltaNet, Kimi Delta Attention): ``@cute.jit``
helpers only (inlined at trace time; each kernel's PTX is what it was with the block written out in place).

- :func:`state_to_workspace`: the state slice S[v0:v0+64, :] (``nh`` fp32 64 x 64 accumulators) -> bf16
  ``ws[slot0 + ci, head, v0:v0+64, :]`` (pass 1's chunk states, pass 2's state gradients; read back by the later passes).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Int32

from .delta_rule import BV


@cute.jit
def state_to_workspace(mWs: cute.Tensor, acc_s: list, c64: cute.Tensor, slot0: Int32, ci: Int32, head: Int32, v0: Int32, nh: cutlass.Constexpr[int]):
    """``mWs[slot0 + ci, head, v0 + r, h * 64 + c] = bf16(acc_s[h][(r, c)])`` for this thread's accumulator elements
    (chunk ``ci`` of the sequence whose slots start at ``slot0``; the slot is formed per element, as the kernels did
    inline, so the PTX keeps its instruction order)."""
    for h in cutlass.range_constexpr(nh):
        for i in cutlass.range_constexpr(cute.size(acc_s[h])):
            rc = c64[i]
            mWs[slot0 + ci, head, v0 + rc[0], h * BV + rc[1]] = acc_s[h][i].to(BFloat16)
