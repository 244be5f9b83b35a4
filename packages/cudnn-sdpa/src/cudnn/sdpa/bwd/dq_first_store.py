"""dq_first_store's device protocol (SdpaBwdKey.dq_first_store): the dQ accumulator's blocks are never zeroed.

Each query block (batch, head; 64, 80 or 128 rows) has an int32 flag in the workspace (the one of the 64 scratch rows it
starts in: kernel_key.dq_flag_index), zeroed by the preprocess. The dq_writer warp
of every CTA that adds into the block takes a ticket (:func:`flag_ticket`: ``atom.add`` 1, the old value back) before
its consumers hand the block over. Ticket 0 bulk-stores its partial (:func:`store_bulk_f32`) and, once the stores have
completed, adds :data:`DONE` to the flag with release semantics (:func:`flag_mark_done`); any other ticket waits until
the flag carries DONE (:func:`flag_wait_done`, acquire) and then reduce-adds. The first arrival is running when the others
wait (it took its ticket first and waits on nothing but its own consumers), so no wait can close a cycle. The
postprocess reads the flag too: 0 means no key block reached the block, whose dQ is then 0.

One line of PTX each: the DSL has no non-tensor bulk copy, no scoped acquire load or release reduction and no async-
proxy fence for global memory.
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Int32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

from .kernel_key import SEM_ROWS

#: Added to a block's flag once the first arrival's bulk stores have completed (tickets count in the bits below).
DONE = 1 << 30


def flags_tensor(flags_ptr: cute.Pointer, seqlen_pad, heads, batch):
    """The flags as an int32 (S_pad / SEM_ROWS, heads, batch) tensor from ``flags_ptr`` (the layout of the deterministic
    turn counters; index a block's row with kernel_key.dq_flag_index)."""
    ns = seqlen_pad // SEM_ROWS
    return cute.make_tensor(flags_ptr, cute.make_layout((ns, heads, batch), stride=(1, ns, ns * heads)))


def _asm(result, args, text: str, constraints: str):
    return llvm.inline_asm(result, args, text, constraints, has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT)


@dsl_user_op
def store_bulk_f32(gmem_ptr: cute.Pointer, smem_ptr: cute.Pointer, num_bytes: int, *, loc=None, ip=None):
    """``cp.async.bulk.global.shared::cta.bulk_group``: copy ``num_bytes`` (a multiple of 16, both addresses 16-byte
    aligned) from shared to global memory in the issuing thread's bulk group (the plain-store twin of
    kernel_sm90.reduce_add_bulk_f32)."""
    args = [gmem_ptr.toint(loc=loc, ip=ip).ir_value(), smem_ptr.toint(loc=loc, ip=ip).ir_value(), Int32(num_bytes).ir_value(loc=loc, ip=ip)]
    _asm(None, args, "cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], $2;", "l,r,r")


@dsl_user_op
def flag_ticket(flag_ptr: cute.Pointer, *, loc=None, ip=None) -> Int32:
    """``atom.relaxed.gpu.global.add.s32`` 1 on the block's flag: this arrival's ticket (0: the first)."""
    return Int32(_asm(Int32.mlir_type, [flag_ptr.toint(loc=loc, ip=ip).ir_value()], "atom.relaxed.gpu.global.add.s32 $0, [$1], 1;", "=r,l"))


@dsl_user_op
def flag_load_acquire(flag_ptr: cute.Pointer, *, loc=None, ip=None) -> Int32:
    """``ld.acquire.gpu.global.b32`` of the block's flag."""
    return Int32(_asm(Int32.mlir_type, [flag_ptr.toint(loc=loc, ip=ip).ir_value()], "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l"))


@dsl_user_op
def fence_proxy_async_global(*, loc=None, ip=None):
    """``fence.proxy.async.global``: order this thread's generic-proxy accesses to global memory with its async-proxy
    ones (the bulk copies)."""
    _asm(None, [], "fence.proxy.async.global;", "")


@dsl_user_op
def flag_mark_done(flag_ptr: cute.Pointer, *, loc=None, ip=None):
    """After ``cp.async.bulk.wait_group 0`` of the issuing thread: its bulk stores are complete; an async-proxy fence,
    then ``red.release.gpu.global.add.s32`` DONE on the block's flag."""
    fence_proxy_async_global(loc=loc, ip=ip)
    _asm(None, [flag_ptr.toint(loc=loc, ip=ip).ir_value()], f"red.release.gpu.global.add.s32 [$0], {DONE};", "l")


@cute.jit
def flag_wait_done(flag_ptr: cute.Pointer):
    """Every lane of the warp polls the block's flag (one load a round) until it carries DONE, then fences the async
    proxy: the reduce-adds issued next see the first arrival's completed stores."""
    seen = flag_load_acquire(flag_ptr)
    while seen & DONE == 0:
        seen = flag_load_acquire(flag_ptr)
    fence_proxy_async_global()
