"""Device blocks of the backward's pass 3 version 2 (two warpgroups per CTA), shared by ``kda/chunk_bwd_v2_kernel.py``
(``KdaBwdGradsV2``) and ``gdn/chunk_bwd_v2_kernel.py`` (``GdnBwdGradsV2``): ``@cute.jit`` helpers only (inlined at
trace time: each kernel's PTX is what it was with the block written out in place; moved here from the KDA kernel in
session 10 with its PTX byte-identical).

- :func:`wg_sync`, :func:`wg_ready`: a warpgroup's named barrier (ids 1, 2), with the async-proxy fence before it;
- :func:`issue`, :func:`commit_wait`: one product issued into the current WGMMA group / the group committed and waited
  (several products, one wait point);
- :func:`tile_at`: a swizzled bf16 [64, 64] (or [64, D]) tile at an 8 KiB-multiple offset of a shared field (a
  warpgroup's key-channel block as a RUNTIME offset: one copy of the code serves both warpgroups);
- :func:`rows_load`, :func:`rows_store`: 64 token rows of a [T, H, D] bf16 tensor to registers (16-byte loads), then to
  shared memory at hand-swizzled addresses (16-byte stores; optionally transposed);
- :func:`state_t_to_smem`: a bf16 workspace state [V, K] transposed into shared memory (16-byte loads in batches), with
  the optional per-key-channel ``<dS1, S0>``;
- :func:`row_sums_add`, :func:`col_sums_add`: row / column sums of an m64n64 accumulator into shared memory by warp
  butterfly shuffles and one shared atomic per row / column and warp;
- :func:`load_a0`: warpgroup 0's phase-A loads (dVn, dVn^T, V, Tm, Tm^T);
- :func:`dwm_dv_block`: channel block ``h`` of ``dWm = -dVn S0`` and ``dV = beta Tm^T dVn`` (+ dbeta's row sums), one
  WGMMA group (both families: the decay does not enter these products);
- :class:`GradsV2Launch`: the host side of both v2 kernel classes (``delta_rule_bwd.GradsLaunch``, the launch every
  pass-3 class shares, on 256 threads with v2's state views; ``compile_fake``: the compile from fake pointers).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Int64, const_expr
from cutlass.cute.nvgpu import warpgroup

from .delta_rule import BV, CHUNK, SOLVE_BLOCK, THREADS, VEC
from .delta_rule_bwd import GradsLaunch, tm_row_load, tm_row_store

THREADS2 = 2 * THREADS  # two warpgroups
TILE = CHUNK * BV  # elements of one [64, 64] bf16 tile (8 KiB)


@cute.jit
def wg_sync(wgi: Int32):
    """Named barrier of warpgroup ``wgi`` alone (ids 1, 2; id 0 is the CTA barrier)."""
    cute.arch.barrier(barrier_id=1 + wgi, number_of_threads=THREADS)


@cute.jit
def wg_ready(wgi: Int32):
    """This warpgroup's generic-proxy shared writes become visible to its next WGMMA."""
    cute.arch.fence_view_async_shared()
    wg_sync(wgi)


@cute.jit
def issue(tiled_mma: cute.TiledMma, acc: cute.Tensor, tCrA: cute.Tensor, tCrB: cute.Tensor, zero_init: cutlass.Constexpr[bool]):
    """``acc (+)= A @ B`` over every k-block, issued only: the caller fences before (``warpgroup.fence``), commits and
    waits after, so several products run as one WGMMA group."""
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for kb in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(atom, acc, tCrA[None, None, kb], tCrB[None, None, kb], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)


@cute.jit
def commit_wait():
    warpgroup.commit_group()
    warpgroup.wait_group(0)


@cute.jit
def tile_at(base: cute.Pointer, offset: Int32, layout: cute.ComposedLayout):
    """A swizzled bf16 tile ``layout`` at ``offset`` elements past ``base`` (a 1024-byte aligned field; ``offset`` a
    multiple of 4096 elements, 8 KiB: the swizzle pattern is the field's)."""
    return cute.make_tensor(cute.recast_ptr(base + cute.assume(offset, divby=TILE), layout.inner, dtype=BFloat16), layout.outer)


@cute.jit
def rows_load(gX: cute.Tensor, t0: Int32, eos: Int32, head: Int32, tidx: Int32, D: cutlass.Constexpr[int]):
    """This thread's half row of rows ``t0 .. t0 + 63`` of ``gX`` (16-byte loads; row ``tidx // 2``, half ``tidx % 2``;
    a row past ``eos`` reads the last row, :func:`rows_store` zeroes it) as a bf16 register tile [8, D / 16]."""
    NV = D // 2 // VEC
    row = tidx // 2
    half = tidx % 2
    t_row = min(t0 + row, eos - 1)
    rbuf = cute.make_rmem_tensor(cute.make_layout((VEC, NV)), BFloat16)
    for vj in cutlass.range_constexpr(NV):
        cute.autovec_copy(gX[(None, None, None), (t_row, head, half * NV + vj)], rbuf[None, vj])
    return rbuf


@cute.jit
def rows_store(rbuf: cute.Tensor, pX: cute.Pointer, pXT: cute.Pointer | None, t0: Int32, eos: Int32, tidx: Int32, D: cutlass.Constexpr[int]):
    """:func:`rows_load`'s half row into the ``k_major_smem_layout(64, D)`` tile at ``pX`` by 16-byte stores at
    hand-swizzled addresses (8-channel chunk ``c`` of row ``t`` at ``(c // 64) 4096 + 64 t + ((c % 64) ^ ((t % 8) << 3))``)
    and, with ``pXT``, transposed into the [d % 64, token, d // 64] tiles there (``k_major_smem_layout(64, 64, D / 64)``:
    (c, t, b) at ``b 4096 + 64 c + (t ^ ((c % 8) << 3))``; element stores). Together ``_device.delta_rule_bwd.
    rows_to_smem`` (modes 0 and 2). Not fenced."""
    HALF = D // 2
    NV = HALF // VEC
    row = tidx // 2
    half = tidx % 2
    if t0 + row >= eos:  # rows past the sequence's end are zero
        rbuf.fill(0.0)
    sw = (row % 8) * VEC
    for vj in cutlass.range_constexpr(NV):
        c = half * HALF + vj * VEC
        off = (c // BV) * TILE + row * BV + ((c % BV) ^ sw)
        cute.autovec_copy(rbuf[None, vj], cute.make_tensor(pX + cute.assume(off, divby=VEC), cute.make_layout((VEC,))))
    if const_expr(pXT is not None):
        mXT = cute.make_tensor(pXT, cute.make_layout((CHUNK * D,)))
        for vj in cutlass.range_constexpr(NV):
            for e in cutlass.range_constexpr(VEC):
                col = half * HALF + vj * VEC + e
                mXT[(col // BV) * TILE + (col % BV) * CHUNK + (row ^ (e * VEC))] = rbuf[e, vj]


@cute.jit
def state_t_to_smem(
    gWs: cute.Tensor, gWs2: cute.Tensor | None, pT: cute.Pointer, sExtra: cute.Tensor | None, slot: Int32, head: Int32, tid: Int32,
    nt: cutlass.Constexpr[int], D: cutlass.Constexpr[int], mn: cutlass.Constexpr[bool] = False,
):  # fmt: skip
    """A bf16 workspace state ``ws[slot, head]`` [V, K] (``gWs``: 16-byte vectors along K) transposed into the tile at
    ``pT`` [K % 64, V, K // 64] (``k_major_smem_layout(64, D, D / 64)``, swizzle by hand) by ``nt`` threads (``tid`` 0..nt-1): every 16-byte load of a batch issued before its stores (v1
    walked the state one 2-byte element at a time, 8 loads in flight). A warp's vectors are 4 consecutive K-vectors x 8
    consecutive rows (64-byte row segments; 4-way store conflicts). With ``mn`` (GDN's ``mn_operands``) the state is
    stored as it is, [V, K] (``k_major_smem_layout(D, D)``: 64-channel column blocks of D rows), one 16-byte store per
    vector: read through MN-major views it is the same B operand. With ``gWs2`` (dS1): ``<dS1, S0>`` per key channel
    added to ``sExtra`` (fp32 partial sums over this thread's rows, then one shared atomic per channel and thread;
    ``nt`` = 128 keeps a thread's K-vector fixed). Not fenced."""
    assert gWs2 is None or nt == THREADS, "the <dS1, S0> partial sums need a fixed K-vector per thread"
    nkv = D // VEC
    npt = D * nkv // nt
    mT = cute.make_tensor(pT, cute.make_layout((CHUNK * D,)))
    batch = min(npt, 8)
    kq = nkv // 4
    kv = Int32(0)
    dotp = cute.make_rmem_tensor(cute.make_layout((VEC,)), Float32)
    if const_expr(gWs2 is not None):
        for e in cutlass.range_constexpr(VEC):
            dotp[e] = Float32(0.0)
    for bb in cutlass.range_constexpr(npt // batch):
        buf = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, batch)), BFloat16)
        buf2 = cute.make_rmem_tensor(cute.make_layout((1, 1, 1, VEC, batch)), BFloat16)
        for b in cutlass.range_constexpr(batch):
            n = tid + nt * (bb * batch + b)
            rest = n // 32
            kv = (rest % kq) * 4 + n % 4
            v = (rest // kq) * 8 + (n // 4) % 8
            cute.autovec_copy(gWs[(None, None, None, None), (slot, head, v, kv)], buf[None, None, None, None, b])
            if const_expr(gWs2 is not None):
                cute.autovec_copy(gWs2[(None, None, None, None), (slot, head, v, kv)], buf2[None, None, None, None, b])
        for b in cutlass.range_constexpr(batch):
            n = tid + nt * (bb * batch + b)
            rest = n // 32
            kv = (rest % kq) * 4 + n % 4
            v = (rest // kq) * 8 + (n // 4) % 8
            if const_expr(mn):  # (v, k) at (k // 64) 64 D + 64 v + ((k % 64) ^ (v % 8) 8): the vector's 8 channels at once
                off = (kv // VEC) * (BV * D) + v * BV + ((kv % VEC) ^ (v % VEC)) * VEC
                cute.autovec_copy(buf[0, 0, 0, None, b], cute.make_tensor(pT + cute.assume(off, divby=VEC), cute.make_layout((VEC,))))
            for e in cutlass.range_constexpr(VEC):
                kc = kv * VEC + e  # (k, v) of the state at (k // 64) 64 D + (v // 64) 4096 + 64 (k % 64) + ((v % 64) ^ (k % 8) 8)
                s_val = buf[0, 0, 0, e, b]
                if const_expr(not mn):
                    mT[(kc // BV) * (CHUNK * D) + (v // BV) * TILE + (kc % BV) * CHUNK + ((v % BV) ^ (e * VEC))] = s_val
                if const_expr(gWs2 is not None):
                    dotp[e] = dotp[e] + s_val.to(Float32) * buf2[0, 0, 0, e, b].to(Float32)
    if const_expr(gWs2 is not None):
        for e in cutlass.range_constexpr(VEC):
            cute.arch.atomic_add(sExtra.iterator + (kv * VEC + e), dotp[e])


@cute.jit
def row_sums_add(sDst: cute.Tensor, rs: cute.Tensor, c64: cute.Tensor):
    """``sDst[row] += rs[k]`` summed over the 4 lanes sharing the row (the m64 accumulator: element ``i`` of a thread lies
    in row ``c64[i][0]``, the thread's two rows for ``(i // 2) % 2`` = 0, 1, shared by lanes ``4 q .. 4 q + 3``): two
    butterfly shuffles, then one shared atomic per row from the lane holding column 0 (v1: one atomic per element)."""
    for k in cutlass.range_constexpr(2):
        v = rs[k]
        v = v + cute.arch.shuffle_sync_bfly(v, offset=1)
        v = v + cute.arch.shuffle_sync_bfly(v, offset=2)
        if c64[0][1] == 0:
            cute.arch.atomic_add(sDst.iterator + c64[2 * k][0], v)


@cute.jit
def col_sums_add(sDst: cute.Tensor, cs: cute.Tensor, c64: cute.Tensor, c_off: Int32):
    """``sDst[c_off + col] += cs[m]`` summed over the warp's 16 rows (the thread's 16 columns ``m = i % 2 + 2 (i // 4)``,
    shared by lanes of equal ``lane % 4``): three butterfly shuffles, then one shared atomic per column from the lanes of
    row ``16 w`` (v1: one atomic per element)."""
    for m in cutlass.range_constexpr(16):
        v = cs[m]
        v = v + cute.arch.shuffle_sync_bfly(v, offset=4)
        v = v + cute.arch.shuffle_sync_bfly(v, offset=8)
        v = v + cute.arch.shuffle_sync_bfly(v, offset=16)
        if c64[0][0] % SOLVE_BLOCK == 0:
            cute.arch.atomic_add(sDst.iterator + (c_off + c64[(m % 2) + 4 * (m // 2)][1]), v)


@cute.jit
def load_a0(gDvn, gV, gWsTm, pDvn, pDvnT, pV, sTm, sTmT, t0: Int32, eos: Int32, head: Int32, slot: Int32, ltid: Int32, D: cutlass.Constexpr[int]):
    """Warpgroup 0's phase-A loads: dVn (row-major and, unless ``pDvnT`` is None, transposed), V, Tm and Tm^T; every
    global load issued before the first store (both families' phase A). Not fenced."""
    dvn = rows_load(gDvn, t0, eos, head, ltid, D)
    vv = rows_load(gV, t0, eos, head, ltid, D)
    row = ltid // 2
    half = ltid % 2
    tbuf = tm_row_load(gWsTm, slot, head, row, half)
    rows_store(dvn, pDvn, pDvnT, t0, eos, ltid, D)
    rows_store(vv, pV, None, t0, eos, ltid, D)
    tm_row_store(tbuf, sTm, sTmT, row, half)


@cute.jit
def dwm_dv_block(
    mma, acc_a, acc_d, dvn_A, s0t_Bh, tmt_A, dvnt_Bh, sDwm, sDwmT, sDBr, sV, sBeta, mDv, c64, t0: Int32, n_valid: Int32, head: Int32, h: Int32,
    mma_dwm=None, mma_dub=None,
):  # fmt: skip
    """Channel block ``h`` of ``dWm = -dVn S0`` (-> ``sDwm`` and, unless None, ``sDwmT``) and ``dUb = Tm^T dVn``
    (``dV = beta dUb`` -> ``mDv``, ``rowsum(dUb V)`` -> ``sDBr``), one WGMMA group; ``mma_dwm`` / ``mma_dub`` (None:
    ``mma``) the tiled MMAs of the two products (GDN's ``mn_operands``: ``s0t_Bh``, ``tmt_A``, ``dvnt_Bh`` MN-major
    views of S0, Tm, dVn). Not fenced."""
    mma_w, mma_u = mma, mma
    if const_expr(mma_dwm is not None):
        mma_w = mma_dwm
    if const_expr(mma_dub is not None):
        mma_u = mma_dub
    warpgroup.fence()
    issue(mma_w, acc_a, dvn_A, s0t_Bh, True)
    issue(mma_u, acc_d, tmt_A, dvnt_Bh, True)
    commit_wait()
    for i in cutlass.range_constexpr(cute.size(acc_a)):
        rc = c64[i]
        w = (-acc_a[i]).to(BFloat16)
        sDwm[rc[0], h * BV + rc[1]] = w
        if const_expr(sDwmT is not None):
            sDwmT[rc[1], rc[0], h] = w
    rs = cute.make_rmem_tensor(cute.make_layout((2,)), Float32)
    rs.fill(0.0)
    mDv0 = cute.domain_offset((t0, head, 0), mDv)  # the chunk's first token and this head
    for i in cutlass.range_constexpr(cute.size(acc_d)):
        rc = c64[i]
        rs[(i // 2) % 2] = rs[(i // 2) % 2] + acc_d[i] * sV[rc[0], h * BV + rc[1]].to(Float32)
        if rc[0] < n_valid:
            mDv0[rc[0], 0, h * BV + rc[1]] = (acc_d[i] * sBeta[rc[0]]).to(mDv.element_type)
    row_sums_add(sDBr, rs, c64)


class GradsV2Launch(GradsLaunch):
    """Host side of the pass-3 v2 kernel classes (``kda/chunk_bwd_v2_kernel.KdaBwdGradsV2``,
    ``gdn/chunk_bwd_v2_kernel.GdnBwdGradsV2``): :class:`~.delta_rule_bwd.GradsLaunch` (v1's argument list and views;
    states as 16-byte vectors of a slot stride declared a multiple of D * D, Tm as 16-byte vectors) on two warpgroups.
    A family sets ``PER_KEY_GATE`` and defines ``shared_storage`` and the ``@cute.kernel`` ``kernel``."""

    CTA_THREADS = THREADS2

    def compile_fake(self, gva_partials: bool = False):
        """The ``cute.compile`` of this kernel from fake pointers (the argument list of ``{kda,gdn}/bwd_api.py``'s
        ``build_kernel("grads", key)``; Rule 4: runtime extents are call arguments). ``gva_partials``: dq, dk are fp32
        [T, H, K] workspace partials (GDN's GVA), else bf16 outputs."""
        from .._host.launch import fake_gmem_ptr

        key = self.key
        bf = lambda: fake_gmem_ptr("BFloat16", 16)  # noqa: E731
        cu = fake_gmem_ptr("Int32", 4) if key.varlen else None
        gp, bp = fake_gmem_ptr(key.g_dtype, 2), fake_gmem_ptr(key.beta_dtype, 2)
        st = (Int64(8), Int64(8))
        dqk = fake_gmem_ptr("Float32", 16) if gva_partials else fake_gmem_ptr("BFloat16", 2)
        outs = [dqk, dqk, fake_gmem_ptr("BFloat16", 2)] + [fake_gmem_ptr("Float32", 4)] * 2
        return cute.compile(
            self, bf(), bf(), bf(), bf(), gp, bp, cu, bf(), bf(), bf(), bf(), bf(), *outs, *[Int32(8)] * 7, Float32(1.0), *[st] * 7, cuda.CUstream(0)
        )
