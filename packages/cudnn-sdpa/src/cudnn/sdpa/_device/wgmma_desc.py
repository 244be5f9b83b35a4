"""WGMMA issued from shared-memory descriptors the kernel holds itself (``SdpaFwdKey.pinned_desc``).

``cute.gemm`` on a shared-memory fragment rebuilds each operand's 64-bit descriptor from the smem pointer at every
issue. In the persistent forward with its ragged first block, NVVM rematerializes that chain inside the key-block loop:
per S GEMM two descriptor bases (shift, mask, or) and per k-block two 64-bit adds split into carry pairs with the high
word reloaded, 72 more SASS instructions per step than the one-tile kernel (sdpa_s21/sass_step_loop.txt), which ncu
counts as issue stalls of the other warpgroup's softmax (docs/benchmarks/sdpa_s22/).

Here the descriptors are computed once per tile and pinned (:func:`pin`: both words through a warp shuffle inside one
asm block, which NVVM cannot rematerialize): Q's for every k-block (loop-invariant, held as the one-tile kernel holds
them), K's and V's for stage 0, to which a step adds the stage's and the k-block's static offsets (a 64-bit add with
an immediate: one uniform-datapath instruction); the WGMMA's own asm takes the descriptors.

Contract: 16-bit operands in 128-byte-swizzled shared memory; the SS form (:func:`wgmma_ss_pinned`, S = Q K^T) takes
K-major A and B (the forward's Q and K at head dim 64 / 128), the RS form (:func:`wgmma_rs_pinned`, O += P V) a
register A and an MN-major B (V); the accumulator is one warpgroup's fp32 ``((2, 2, N/8), 1, 1)`` fragment; both are
issued with the same fence / commit / wait protocol as :func:`mma_sm90.wgmma`.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import warpgroup
from cutlass.cutlass_dsl import dsl_user_op

#: High word of a K-major 128-byte-swizzle descriptor: stride byte offset 1024 B (64 units), layout type 1 (bits 62-63).
DESC_HI_SW128 = (1 << 30) | 64


def _asm(result, args, text: str, constraints: str):
    return llvm.inline_asm(result, args, text, constraints, has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@dsl_user_op
def pin(x: Int64, *, loc=None, ip=None) -> Int64:
    """A warp-uniform 64-bit value behind an asm block (both words through ``shfl.sync.idx`` from lane 0): computed
    here once per tile and kept live, never rematerialized by NVVM at its uses inside the loop."""
    text = "{\n.reg .b32 lo, hi;\nmov.b64 {lo, hi}, $1;\nshfl.sync.idx.b32 lo, lo, 0, 31, -1;\nshfl.sync.idx.b32 hi, hi, 0, 31, -1;\nmov.b64 $0, {lo, hi};\n}"
    return Int64(_asm(Int64.mlir_type, [Int64(x).ir_value(loc=loc, ip=ip)], text, "=l,l"))


@dsl_user_op
def desc(smem_tensor: cute.Tensor, lbo: int = 1, *, loc=None, ip=None) -> Int64:
    """The 64-bit descriptor of the 128-byte-swizzled smem tile starting at ``smem_tensor``'s iterator: the start
    address in 16-byte units (14 bits), the leading byte offset ``lbo`` (16-byte units; 1 for K-major operands, the
    distance between 64-element column blocks for MN-major ones) and the high word :data:`DESC_HI_SW128`."""
    addr = Int32(smem_tensor.iterator.toint(loc=loc, ip=ip))
    lo = ((addr & 0x3FFFF) >> 4) | (lbo << 16)
    return Int64(lo) | Int64(DESC_HI_SW128 << 32)


def k_offsets(frag: cute.Tensor) -> list[int]:
    """Static descriptor offsets (16-byte units) of each k-block of a cute WGMMA smem fragment ``(1, 1, K, ...)``."""
    return [cute.crd2idx((0, 0, k) + (0,) * (cute.rank(frag.layout) - 3), frag.layout) for k in range(cute.size(frag, mode=[2]))]


def _store(acc: cute.Tensor, vals) -> None:
    """The accumulator's registers from the WGMMA asm's results (a trace-time loop: no DSL loop construct)."""
    for i, v in enumerate(vals):
        acc[i] = v


@dsl_user_op
def _wgmma_ss(acc_vals, desc_a: Int64, desc_b: Int64, scale_d: int, n: int, ab: str, *, loc=None, ip=None):
    regs = len(acc_vals)
    f32 = Float32.mlir_type
    d = ", ".join(f"${i}" for i in range(regs))
    text = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{d}}}, ${2 * regs}, ${2 * regs + 1}, {scale_d}, 1, 1, 0, 0;"
    constraints = ",".join(["=f"] * regs + [str(i) for i in range(regs)] + ["l", "l"])
    args = [v.ir_value(loc=loc, ip=ip) for v in acc_vals] + [Int64(desc_a).ir_value(loc=loc, ip=ip), Int64(desc_b).ir_value(loc=loc, ip=ip)]
    out = _asm(llvm.StructType.get_literal([f32] * regs), args, text, constraints)
    return [Float32(llvm.extractvalue(f32, out, [i], loc=loc, ip=ip)) for i in range(regs)]


@dsl_user_op
def _wgmma_rs(acc_vals, a_regs, desc_b: Int64, n: int, ab: str, *, loc=None, ip=None):
    regs = len(acc_vals)
    f32 = Float32.mlir_type
    d = ", ".join(f"${i}" for i in range(regs))
    a = ", ".join(f"${2 * regs + i}" for i in range(4))
    text = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab} {{{d}}}, {{{a}}}, ${2 * regs + 4}, 1, 1, 1, 1;"
    constraints = ",".join(["=f"] * regs + [str(i) for i in range(regs)] + ["r"] * 4 + ["l"])
    args = [v.ir_value(loc=loc, ip=ip) for v in acc_vals] + [Int32(r).ir_value(loc=loc, ip=ip) for r in a_regs]
    args.append(Int64(desc_b).ir_value(loc=loc, ip=ip))
    out = _asm(llvm.StructType.get_literal([f32] * regs), args, text, constraints)
    return [Float32(llvm.extractvalue(f32, out, [i], loc=loc, ip=ip)) for i in range(regs)]


@cute.jit
def wgmma_rs_pinned(
    acc: cute.Tensor,
    tCrA: cute.Tensor,
    desc_b: Int64,
    offs_b: cutlass.Constexpr,
    n: cutlass.Constexpr[int],
    ab: cutlass.Constexpr[str],
    wg_wait: cutlass.Constexpr[int] = 0,
):
    """acc += A @ B^T-view with A a 16-bit register fragment ``((2, 2, 2), 1, K)`` (its k-blocks as four 32-bit
    registers each, the WGMMA's a0..a3 order) and B an MN-major 128-byte-swizzled operand (``imm-trans-b``) from the
    pinned descriptor ``desc_b`` (``offs_b``: the static offsets of its k-blocks, at least as many as A has); commits one
    WGMMA group and waits until ``wg_wait`` remain (-1: no wait)."""
    warpgroup.fence()
    a32 = cute.recast_tensor(tCrA, Int32)
    vals = [acc[i] for i in range(cute.size(acc))]
    for k in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        a_k = a32[None, None, k]
        vals = _wgmma_rs(vals, [a_k[i] for i in range(4)], desc_b + offs_b[k], n, ab)
    _store(acc, vals)
    warpgroup.commit_group()
    if const_expr(wg_wait >= 0):
        warpgroup.wait_group(wg_wait)


@cute.jit
def wgmma_ss_pinned(
    acc: cute.Tensor,
    descs_a,
    desc_b: Int64,
    offs_b: cutlass.Constexpr,
    n: cutlass.Constexpr[int],
    ab: cutlass.Constexpr[str],
    zero_init: cutlass.Constexpr[bool] = False,
    wg_wait: cutlass.Constexpr[int] = 0,
):
    """acc (+)= A @ B over the k-blocks: A's descriptor of each k-block in ``descs_a`` (pinned, loop-invariant), B's
    from the pinned ``desc_b`` plus the static offsets ``offs_b``; commits one WGMMA group and waits until ``wg_wait``
    remain (-1: no wait)."""
    warpgroup.fence()
    vals = [acc[i] for i in range(cute.size(acc))]
    for k in cutlass.range_constexpr(len(descs_a)):
        vals = _wgmma_ss(vals, descs_a[k], desc_b + offs_b[k], 0 if const_expr(zero_init and k == 0) else 1, n, ab)
    _store(acc, vals)
    warpgroup.commit_group()
    if const_expr(wg_wait >= 0):
        warpgroup.wait_group(wg_wait)
