"""Device pieces shared by the sdpa forward and backward kernels (sm_90a, CuTe DSL).

- :mod:`.mma_sm90`: WGMMA issue helpers and accumulator layout views (acc -> (M, N), acc -> A operand).
- :mod:`.softmax`: the online softmax in fp32 with exp2 and a folded scale, sinks, LSE.
- :mod:`.mask`: sequence-length, causal (top-left / bottom-right) and sliding-window masks, n-block ranges;
  :mod:`.mask_bwd`: the same mask (a subclass) seen from a key block: m-block ranges, transposed S^T tiles.
- :mod:`.seqlen`: per-sequence extents and token offsets of a tile (dense, or THD varlen from cu_seqlens).
- :mod:`.kernel_plan`: the plan half of both warp-specialized kernel classes (dtype, threads, registers, smem layouts).
- :mod:`.tile_scheduler`: which (m_block, head, batch) a CTA works on (longest-first for causal).
- :mod:`.pipeline`: named barriers and TMA pipeline construction.

Every function that emits device code is a ``@cute.jit`` (never a plain Python helper: only decorated
functions are AST-transformed). Nothing here imports torch.
"""
