"""The forward's launch path on the CPU, with the compiled kernel replaced by a recorder (no GPU, no compile):

- what execute() hands the kernel (addresses, extents, TMA strides, scale, window, stream) for dense BSHD / BHSD,
  GQA, LSE and THD varlen calls; the kernel's host signature is ``kernel_sm90.LAUNCH_SCALARS``;
- the validation memo: a repeated call skips the full check, a call with other strides or extents does not reuse a
  stale entry, and a malformed call still raises on the memo path;
- the plan cache of ``sdpa_fwd``: one plan per plan-relevant metadata, a hit does not rebuild;
- host time of the Python side of a prepared execute and of a cached sdpa_fwd (the GPU number comes from
  ``python benchmarks/sdpa_fwd.py --overhead``).

The stubs replace exactly four module functions of ``cudnn.sdpa.fwd.api``: ``_compiled`` (the kernel),
``_use_tvm_ffi`` (forced on: the production entry), ``_current_stream_handle`` (torch's current stream) and
``_require_cuda`` (CPU tensors stand in for CUDA ones).
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from cudnn_testing.host_timing import Sink, per_call_us  # noqa: E402
from cudnn_testing.markers import skip_unless_cutedsl  # noqa: E402


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


#: Positions in the kernel's argument list: 11 pointers, then LAUNCH_SCALARS (num_splits 8th, page_table_stride 9th,
#: then the 15 strides), then scale, window left / right, stream.
_P = 11
_SPLITS = _P + 7
_PT_STRIDE = _P + 8
_STRIDES = _P + 9


def _bshd(b, s, h, d, dtype=torch.bfloat16):
    return torch.randn(b, s, h, d, dtype=dtype).transpose(1, 2)  # (B, H, S, D) view of BSHD storage


def _span(shape, stride):
    return (max(abs(st) * max(sh, 1) for sh, st in zip(shape, stride, strict=False)) + 7) // 8 * 8


def test_dense_bshd_gqa_lse_arguments(api):
    from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey

    q, k, v = _bshd(2, 300, 8, 128), _bshd(2, 257, 2, 128), _bshd(2, 257, 2, 128)
    o = torch.empty_like(q)
    lse = torch.empty(2, 8, 300, dtype=torch.float32)
    plan = api.SdpaFwdSm90(q, k, v, o, lse, is_causal=True, scale=0.5)
    plan.compile()
    assert plan.key == SdpaFwdKey(
        "bf16",
        128,
        128,
        4,
        True,
        False,
        False,
        True,
        False,
        False,
        False,
        False,
        packed_cvt=True,
        ragged_tail=True,
        persistent=True,
        mask_r2p=True,
        persistent_pairs=True,
        spin_wait=True,
        wg_epilogue=True,
        q_stages=2,
    )  # dense causal d = 128: the persistent paired grid (PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT); SPIN_WAIT_DEFAULT;
    # WG_EPILOGUE_DEFAULT and Q_STAGES_DEFAULT
    plan.execute(q, k, v, o, lse, current_stream=7)
    (args,) = api._test_recorder.calls
    assert args[:11] == (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), None, None, None, None, None, None)
    from cudnn.sdpa.fwd.api import _group_heads

    scalars = args[_P:-4]
    assert scalars[:9] == (2, 8, 2, 300, 257, 300, _group_heads(plan.key, 257), plan._sm_count, 0)  # persistent: one CTA per SM
    strides = scalars[9:]
    assert strides == (
        *(q.stride(0), q.stride(1), q.stride(2)),
        *(k.stride(0), k.stride(1), k.stride(2)),
        *(v.stride(0), v.stride(1), v.stride(2)),
        *(o.stride(0), o.stride(1), o.stride(2)),
        *lse.stride(),
    )
    assert args[-4] == pytest.approx(0.5 * math.log2(math.e))
    assert args[-3:] == (0, 0, 7)  # window (causal folds right = 0), the caller's stream handle


def test_signature_matches_the_kernel(api):
    from cudnn_testing.markers import skip_unless_cutedsl

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward kernel module")
    from cudnn.sdpa.fwd.kernel_sm90 import LAUNCH_SCALARS

    q = _bshd(1, 64, 4, 64)
    plan = api.SdpaFwdSm90(q, q, q, torch.empty_like(q))
    plan.compile()
    plan.execute(q, q, q, torch.empty_like(q))
    (args,) = api._test_recorder.calls
    assert len(args) == _P + len(LAUNCH_SCALARS) + 4  # pointers, scalars, scale, window left/right, stream
    assert args[-1] == 0xABC0  # no stream given: torch's current stream on q's device
    assert args[-4] == pytest.approx(1 / math.sqrt(64) * math.log2(math.e))


def test_varlen_arguments_and_empty_problem(api):
    q = torch.randn(100, 8, 64, dtype=torch.float16)
    k = torch.randn(130, 2, 64, dtype=torch.float16)
    o = torch.empty_like(q)
    cu_q = torch.tensor([0, 40, 100], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 130], dtype=torch.int32)
    plan = api.SdpaFwdSm90(q, k, k, o, is_causal=True, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_k, max_seqlen_q=60, max_seqlen_kv=100)
    plan.compile()
    plan.execute(q, k, k, o, None, None, cu_q, cu_k, 60)
    (args,) = api._test_recorder.calls
    assert args[6:8] == (cu_q.data_ptr(), cu_k.data_ptr())
    assert args[_P : _P + 6] == (2, 8, 2, 100, 130, 60)  # token totals reach the kernel as runtime scalars
    assert args[_STRIDES : _STRIDES + 3] == (_span((1, 8, 100), (0, 64, 512)), 64, 512)  # THD batch stride: a placeholder span
    plan.execute(q, k, k, o, None, None, cu_q, cu_k, 0)  # max_seqlen_q = 0: nothing to launch
    assert len(api._test_recorder.calls) == 1


def test_memo_skips_revalidation_but_never_reuses_stale_arguments(api, monkeypatch):
    q, kv = _bshd(2, 128, 4, 128), _bshd(2, 128, 4, 128)
    o = torch.empty_like(q)
    plan = api.SdpaFwdSm90(q, kv, kv, o)
    plan.compile()
    real = api._validate
    seen = []
    monkeypatch.setattr(api, "_validate", lambda *a: seen.append(1) or real(*a))
    for _ in range(3):
        plan.execute(q, kv, kv, o)
    assert len(seen) == 1, "the repeated call re-ran the full validation"
    qc = q.contiguous()  # same shape, BHSD strides: new metadata, new arguments
    plan.execute(qc, kv, kv, o)
    assert len(seen) == 2
    a, b = api._test_recorder.calls[-2], api._test_recorder.calls[-1]
    assert a[_STRIDES : _STRIDES + 3] == q.stride()[:3] and b[_STRIDES : _STRIDES + 3] == qc.stride()[:3]
    with pytest.raises(ValueError, match="16-byte aligned"):  # alignment is checked on every call, memo or not
        plan.execute(torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape), kv, kv, o)
    with pytest.raises(ValueError, match="does not match the plan"):
        plan.execute(q.float(), kv, kv, o)
    with pytest.raises(ValueError, match="plan was built without lse"):
        plan.execute(q, kv, kv, o, torch.empty(2, 4, 128))


def test_sdpa_fwd_plan_cache_hits_and_allocates_in_q_order(api):
    q, kv = _bshd(2, 100, 4, 128), _bshd(2, 100, 4, 128)
    r1 = api.sdpa_fwd(q, kv, kv, is_causal=True, return_lse=True)
    r2 = api.sdpa_fwd(q, kv, kv, is_causal=True, return_lse=True)
    assert len(api._PLANS) == 1
    assert r1["o"].stride() == q.stride() and r2["lse"].shape == (2, 4, 100)
    q2, kv2 = _bshd(3, 77, 4, 128), _bshd(3, 900, 4, 128)  # other extents: same plan
    api.sdpa_fwd(q2, kv2, kv2, is_causal=True, return_lse=True)
    assert len(api._PLANS) == 1
    api.sdpa_fwd(q2, kv2, kv2, is_causal=False)  # other flags: a new plan
    assert len(api._PLANS) == 2
    assert len(api._test_recorder.calls) == 4


@pytest.mark.host_timing
def test_host_time_of_the_python_side(api):
    """Python side only (the kernel call is the recorder). Printed for the record; the bound is loose (shared CI cores)
    and catches a return to per-call validation or generic argument conversion (~100+ us), not a few microseconds."""
    q, kv = _bshd(1, 128, 4, 128), _bshd(1, 128, 4, 128)
    o = torch.empty_like(q)
    plan = api.SdpaFwdSm90(q, kv, kv, o)
    plan.compile()
    api._test_recorder.calls = Sink()
    t_exec = per_call_us(lambda: plan.execute(q, kv, kv, o))
    api.sdpa_fwd(q, kv, kv, out=o)
    t_wrap = per_call_us(lambda: api.sdpa_fwd(q, kv, kv, out=o))
    t_alloc = per_call_us(lambda: api.sdpa_fwd(q, kv, kv))
    print(f"\nhost (CPU, kernel stubbed): execute {t_exec:.2f} us, sdpa_fwd(out=) {t_wrap:.2f} us, sdpa_fwd (allocating o) {t_alloc:.2f} us")
    assert t_exec < 40 and t_wrap < 60


def test_split_kv_arguments_workspace_and_heuristic(api):
    """Split-KV plan: the partials' addresses are the workspace base and base + the partial-O bytes; the split count
    follows the heuristic (decode, B * H_kv tiles far below the SM count) or the caller; too small a workspace raises."""
    from cudnn.sdpa.fwd.kernel_key import split_workspace_bytes

    q, kv = _bshd(2, 1, 32, 128), _bshd(2, 8192, 8, 128)  # decode: pack-GQA, 2 * 8 = 16 tiles on 132 SMs
    o = torch.empty_like(q)
    plan = api.SdpaFwdSm90(q, kv, kv, o, split_kv=True)
    plan.compile()
    assert plan.key.split_kv and plan.key.pack_gqa
    splits = api.num_splits_for(plan.key, 2, 32, 8, 1, 8192, 132)
    assert splits == 8  # 132 // 16 = 8 splits of 8 key blocks each
    need = plan.workspace_bytes_for(2, 32, 1, 8, 8192)
    assert need == plan.scratch_workspace_bytes() == split_workspace_bytes(8, 2, 32, 1, 128)[1]
    ws = torch.empty(need + 128, dtype=torch.uint8)
    base = ws[(-ws.data_ptr()) % 128 :]  # 128-byte aligned view
    plan.execute(q, kv, kv, o, workspace=base)
    (args,) = api._test_recorder.calls
    o_bytes = split_workspace_bytes(8, 2, 32, 1, 128)[0]
    assert args[8:10] == (base.data_ptr(), base.data_ptr() + o_bytes)
    assert args[_SPLITS] == 8
    plan.execute(q, kv, kv, o, workspace=base, num_splits=3)
    assert api._test_recorder.calls[-1][_SPLITS] == 3  # 64 key blocks: 3 splits of 22, none empty
    with pytest.raises(ValueError, match="requires a .*-byte workspace"):
        plan.execute(q, kv, kv, o)
    with pytest.raises(ValueError, match="bytes but .* are required"):
        plan.execute(q, kv, kv, o, workspace=base[:64])
    dense = api.SdpaFwdSm90(q, kv, kv, o)
    dense.compile()
    with pytest.raises(ValueError, match="for split_kv plans"):
        dense.execute(q, kv, kv, o, workspace=base)


def test_split_heuristic_leaves_full_grids_alone(api):
    from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey

    key = SdpaFwdKey("bf16", 128, 128, 4, False, False, False, False, False, False, False, True, True)
    assert api.num_splits_for(key, 64, 32, 8, 1, 8192, 132) == 1  # 512 tiles already fill 132 SMs
    assert api.num_splits_for(key, 1, 32, 8, 1, 8192, 132) == 16  # 8 tiles: 16 splits of 4 blocks
    assert api.num_splits_for(key, 1, 32, 8, 1, 300, 132) == 1  # 3 key blocks: not worth splitting
    assert api.num_splits_for(key, 1, 32, 8, 1, 8192, 132, requested=1000) == 64  # clamped to MAX_SPLITS and the blocks


def test_sdpa_fwd_num_splits_routes_to_a_split_plan(api, monkeypatch):
    real = api._alloc_workspace

    def aligned(*a):  # the CPU allocator does not give the CUDA caching allocator's 512-byte alignment
        ws = real(*a)
        buf = torch.empty(ws.numel() + 128, dtype=torch.uint8)
        return buf[(-buf.data_ptr()) % 128 :][: ws.numel()]

    monkeypatch.setattr(api, "_alloc_workspace", aligned)
    q, kv = _bshd(1, 1, 32, 128), _bshd(1, 4096, 8, 128)
    api.sdpa_fwd(q, kv, kv)  # default: the unsplit plan
    api.sdpa_fwd(q, kv, kv, num_splits=0)  # auto: 8 tiles -> split
    assert sorted(p.key.split_kv for p in api._PLANS.values()) == [False, True]
    last = api._test_recorder.calls[-1]
    assert last[8] is not None and last[_SPLITS] > 1


def _pool(pages, page_size, hk, d, dtype=torch.bfloat16):
    return torch.randn(pages, page_size, hk, d, dtype=dtype)


def test_paged_arguments(api):
    """Paged KV: K/V pools are one batch of pages * page_size rows (batch stride a placeholder span), the page table's
    address and row stride reach the kernel, cu_seqlens_kv gives per-batch KV lengths."""
    q = _bshd(3, 1, 16, 128)
    k, v = _pool(40, 256, 4, 128), _pool(40, 256, 4, 128)
    o = torch.empty_like(q)
    pt = torch.randperm(40, dtype=torch.int32)[:36].view(3, 12)
    cu = torch.tensor([0, 1000, 1500, 3072], dtype=torch.int32)
    plan = api.SdpaFwdSm90(q, k, v, o, is_causal=True, causal_bottom_right=True, cu_seqlens_kv=cu, page_table=pt)
    plan.compile()
    assert plan.key.page_size == 256 and plan.key.pack_gqa and not plan.key.varlen
    plan.execute(q, k, v, o, None, None, None, cu, page_table=pt)
    (args,) = api._test_recorder.calls
    assert args[6:11] == (None, cu.data_ptr(), None, None, pt.data_ptr())
    assert args[_P : _P + 6] == (3, 16, 4, 1, 40 * 256, 1)  # seqlen_k: the pool's rows
    assert args[_PT_STRIDE] == 12
    ks = args[_STRIDES + 3 : _STRIDES + 6]
    assert ks[1:] == (k.stride(2), k.stride(1))
    with pytest.raises(ValueError, match="page_table must match"):
        plan.execute(q, k, v, o, None, None, None, cu)
    with pytest.raises(ValueError, match="page_size 256"):
        plan.execute(q, k[:, :128], v[:, :128], o, None, None, None, cu, page_table=pt)


def test_paged_split_decode_workspace(api):
    q = _bshd(2, 1, 32, 128)
    k, v = _pool(64, 128, 8, 128), _pool(64, 128, 8, 128)
    pt = torch.arange(64, dtype=torch.int32).flip(0).view(2, 32)
    cu = torch.tensor([0, 4000, 4096], dtype=torch.int32)
    plan = api.SdpaFwdSm90(q, k, v, torch.empty_like(q), cu_seqlens_kv=cu, page_table=pt, split_kv=True)
    plan.compile()
    # the heuristic sees the longest possible KV (32 pages of 128) and 2 * 8 = 16 tiles: 8 splits
    assert plan.scratch_workspace_bytes() == plan.workspace_bytes_for(2, 32, 1, 8, 32 * 128)
    ws = torch.empty(plan.scratch_workspace_bytes() + 128, dtype=torch.uint8)
    ws = ws[(-ws.data_ptr()) % 128 :]
    plan.execute(q, k, v, torch.empty_like(q), None, None, None, cu, workspace=ws, page_table=pt)
    assert api._test_recorder.calls[-1][_SPLITS] == 8


def test_sdpa_fwd_paged_routes(api):
    q = _bshd(2, 1, 32, 128)
    k, v = _pool(16, 128, 8, 128), _pool(16, 128, 8, 128)
    pt = torch.arange(16, dtype=torch.int32).view(2, 8)
    cu = torch.tensor([0, 1000, 1024], dtype=torch.int32)
    res = api.sdpa_fwd(q, k, v, page_table=pt, cu_seqlens_kv=cu, is_causal=True, causal_bottom_right=True)
    assert res["o"].shape == q.shape
    (plan,) = api._PLANS.values()
    assert plan.key.page_size == 128 and plan.key.qhead_per_kvhead == 4
    assert api._test_recorder.calls[-1][10] == pt.data_ptr()


def test_page_prefetch_is_a_paged_key_field(api):
    """page_prefetch (the decode plan under A/B) is a compile-key field of paged plans, off by default, and a ValueError
    on a plan with contiguous K/V (where it would silently mean nothing)."""
    q = _bshd(2, 1, 32, 128)
    k, v = _pool(16, 128, 8, 128), _pool(16, 128, 8, 128)
    pt = torch.arange(16, dtype=torch.int32).view(2, 8)
    cu = torch.tensor([0, 1000, 1024], dtype=torch.int32)
    default = api.SdpaFwdSm90(q, k, v, torch.empty_like(q), cu_seqlens_kv=cu, page_table=pt)
    default.check_support()
    on = api.SdpaFwdSm90(q, k, v, torch.empty_like(q), cu_seqlens_kv=cu, page_table=pt, page_prefetch=True)
    on.compile()
    assert default.key.page_prefetch == api.PAGE_PREFETCH_DEFAULT and on.key.page_prefetch
    off = api.SdpaFwdSm90(q, k, v, torch.empty_like(q), cu_seqlens_kv=cu, page_table=pt, page_prefetch=False)
    off.check_support()
    assert not off.key.page_prefetch and off.key != on.key
    on.execute(q, k, v, torch.empty_like(q), None, None, None, cu, page_table=pt)
    assert api._test_recorder.calls[-1][10] == pt.data_ptr()
    kv = _bshd(2, 1024, 8, 128)
    with pytest.raises(ValueError, match="page_prefetch is a paged-KV option"):
        api.SdpaFwdSm90(q, kv, kv, page_prefetch=True).check_support()


def test_prebuilt_fast_path_follows_metadata_scale_and_operands(api):
    """The memoized call with no optional operand launches prebuilt arguments; alternating metadata, a per-call scale
    and a call with LSE each get their own (never the previous call's) arguments, and errors still raise."""
    q, kv = _bshd(2, 128, 4, 128), _bshd(2, 128, 4, 128)
    qc = q.contiguous()
    o = torch.empty_like(q)
    plan = api.SdpaFwdSm90(q, kv, kv, o)
    plan.compile()
    rec = api._test_recorder.calls
    for x in (q, qc, q, qc):
        plan.execute(x, kv, kv, o)
        assert rec[-1][:4] == (x.data_ptr(), kv.data_ptr(), kv.data_ptr(), o.data_ptr())
        assert rec[-1][4:11] == (None,) * 7
        assert rec[-1][_STRIDES : _STRIDES + 3] == x.stride()[:3]
        assert rec[-1][-4] == pytest.approx(1 / math.sqrt(128) * math.log2(math.e))
    plan.execute(q, kv, kv, o, scale=0.25)
    assert rec[-1][-4] == pytest.approx(0.25 * math.log2(math.e))
    plan.execute(q, kv, kv, o, current_stream=5)
    assert rec[-1][-1] == 5 and rec[-2][-1] == 0xABC0
    with pytest.raises(ValueError, match="plan was built without lse"):
        plan.execute(q, kv, kv, o, torch.empty(2, 4, 128))
    with pytest.raises(ValueError, match="does not match the plan"):
        plan.execute(q, kv, kv, o.float())
    with pytest.raises(ValueError, match="16-byte aligned"):
        plan.execute(q, kv, kv, torch.empty(o.numel() + 1, dtype=o.dtype)[1:].view(o.shape))
    n = len(rec)
    plan.execute(qc, kv, kv, o)  # still served after the failures, from the memo
    assert len(rec) == n + 1 and rec[-1][0] == qc.data_ptr()


def test_tile_m64_key_and_declines(api):
    """tile_m64 is a key field (off by default) served for dense and paged plans; THD varlen and a pack-GQA head ratio
    that does not divide 64 are declined, naming the tensor."""
    q, kv = _bshd(2, 1, 32, 128), _bshd(2, 4096, 8, 128)
    plan = api.SdpaFwdSm90(q, kv, kv, torch.empty_like(q), tile_m64=True)
    plan.compile()
    assert plan.key.tile_m64 and plan.key.pack_gqa
    default = api.SdpaFwdSm90(q, kv, kv, tile_m64=False)
    default.check_support()
    assert not default.key.tile_m64
    auto = api.SdpaFwdSm90(q, kv, kv)  # None: the decode default (pack-GQA, 1 x 4 packed rows fit 64)
    auto.check_support()
    assert auto.key.tile_m64 == api.TILE_M64_DECODE_DEFAULT
    auto_prefill = api.SdpaFwdSm90(_bshd(2, 300, 32, 128), kv, kv)  # no pack-GQA: never chosen by default
    auto_prefill.check_support()
    assert not auto_prefill.key.tile_m64
    tq = torch.randn(100, 8, 64, dtype=torch.float16)
    cu = torch.tensor([0, 40, 100], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="tile_m64 serves dense or paged"):
        api.SdpaFwdSm90(tq, tq, tq, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=60, max_seqlen_kv=60, tile_m64=True).check_support()
    q128, kv1 = _bshd(1, 1, 128, 64), _bshd(1, 256, 1, 64)  # G = 128: packs into a 128-row tile, not a 64-row one
    with pytest.raises(NotImplementedError, match="tile_m64"):
        api.SdpaFwdSm90(q128, kv1, kv1, tile_m64=True).check_support()
    # the split heuristic counts 64-row tiles: 1 query row x G = 4 per tile either way, so the same splits here
    assert api.num_splits_for(plan.key, 2, 32, 8, 1, 4096) == api.num_splits_for(default.key, 2, 32, 8, 1, 4096)
    qp, kvp = _bshd(1, 256, 8, 128), _bshd(1, 4096, 8, 128)  # 256 query rows: 4 tiles of 64 vs 2 of 128 per head
    m64, m128 = api.SdpaFwdSm90(qp, kvp, kvp, tile_m64=True), api.SdpaFwdSm90(qp, kvp, kvp)
    m64.check_support(), m128.check_support()
    assert api.num_splits_for(m64.key, 1, 8, 8, 256, 4096) == 4 and api.num_splits_for(m128.key, 1, 8, 8, 256, 4096) == 8


def test_varlen_compact_key_and_declines(api):
    """varlen_compact is a THD key field (VARLEN_COMPACT_DEFAULT for None: on since the session-4 A/B, with varlen_tma_o);
    on a dense plan it is a ValueError, with persistent or varlen_lpt it is declined; the launch arguments are those of a
    plan without it."""
    q = torch.randn(100, 8, 64, dtype=torch.float16)
    o = torch.empty_like(q)
    cu = torch.tensor([0, 40, 100], dtype=torch.int32)
    thd = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=60, max_seqlen_kv=60)
    plan = api.SdpaFwdSm90(q, q, q, o, is_causal=True, varlen_compact=True, varlen_tma_o=False, **thd)
    plan.compile()
    assert plan.key.varlen_compact and not plan.key.persistent
    auto = api.SdpaFwdSm90(q, q, q, o, is_causal=True, varlen_compact=False, varlen_tma_o=False, **thd)
    auto.compile()
    assert not auto.key.varlen_compact
    default = api.SdpaFwdSm90(q, q, q, o, is_causal=True, **thd)
    default.check_support()
    assert api.VARLEN_COMPACT_DEFAULT and api.VARLEN_TMA_O_DEFAULT and default.key.varlen_compact and default.key.varlen_tma_o
    pers = api.SdpaFwdSm90(q, q, q, o, persistent=True, **thd)  # the defaults stand aside on a persistent grid
    pers.check_support()
    assert pers.key.persistent and not (pers.key.varlen_compact or pers.key.varlen_tma_o)
    plan.execute(q, q, q, o, None, None, cu, cu, 60)
    auto.execute(q, q, q, o, None, None, cu, cu, 60)
    a, b = api._test_recorder.calls
    assert a == b  # same ABI and scalars: the compact grid is derived in the kernel's host function from T_q and B
    with pytest.raises(ValueError, match="varlen_compact is a THD varlen option"):
        api.SdpaFwdSm90(_bshd(1, 128, 4, 64), _bshd(1, 128, 4, 64), _bshd(1, 128, 4, 64), varlen_compact=True).check_support()
    for other in (dict(persistent=True), dict(varlen_lpt=True)):
        with pytest.raises(NotImplementedError, match="varlen_compact"):
            api.SdpaFwdSm90(q, q, q, o, varlen_compact=True, **other, **thd).check_support()
    both = api.SdpaFwdSm90(q, q, q, o, varlen_compact=True, varlen_tma_o=True, **thd)
    both.check_support()
    assert both.key.varlen_compact and both.key.varlen_tma_o and not plan.key.varlen_tma_o
    with pytest.raises(ValueError, match="varlen_tma_o is a THD varlen option"):
        api.SdpaFwdSm90(_bshd(1, 128, 4, 64), _bshd(1, 128, 4, 64), _bshd(1, 128, 4, 64), varlen_tma_o=True).check_support()
    with pytest.raises(NotImplementedError, match="varlen_tma_o"):
        api.SdpaFwdSm90(q, q, q, o, varlen_tma_o=True, persistent=True, **thd).check_support()


def test_tile_m192_key_and_declines(api):
    """tile_m=192 (three consumer warpgroups) is a key field for head dims <= 64, with a 128-row key tile unless
    tile_n is given; other head dims, paged KV and pack-GQA are declined (persistent only when asked for: the default
    persistent=True plan keeps 128 rows); other values are ValueErrors."""
    q = _bshd(2, 1000, 8, 64)
    plan = api.SdpaFwdSm90(q, q, q, torch.empty_like(q), tile_m=192)
    plan.compile()
    assert (plan.key.tile_m, plan.key.tile_n, plan.key.packed_cvt) == (192, 128, True)
    explicit = api.SdpaFwdSm90(q, q, q, tile_m=192, tile_n=96)
    explicit.check_support()
    assert (explicit.key.tile_m, explicit.key.tile_n) == (192, 96)
    default = api.SdpaFwdSm90(q, q, q)  # TILE_M192_D64_DEFAULT: 192 rows by default at head dim <= 64
    default.check_support()
    assert api.TILE_M192_D64_DEFAULT and (default.key.tile_m, default.key.tile_n) == (192, 128)
    m128 = api.SdpaFwdSm90(q, q, q, tile_m=128)
    assert m128.check_support() and m128.key.tile_m == 0
    for other in (dict(persistent=True), dict(tile_n=96)):  # a plan that cannot take it (or chose another key tile): 128 rows
        p_ = api.SdpaFwdSm90(q, q, q, **other)
        p_.check_support()
        assert p_.key.tile_m == 0, other
    wide = api.SdpaFwdSm90(_bshd(2, 1000, 8, 128), _bshd(2, 1000, 8, 128), _bshd(2, 1000, 8, 128))
    wide.check_support()
    assert wide.key.tile_m == 0
    assert api.num_splits_for(plan.key, 2, 8, 8, 1000, 1000, requested=1) == 1
    with pytest.raises(NotImplementedError, match="tile_m=192"):
        api.SdpaFwdSm90(_bshd(2, 1000, 8, 128), _bshd(2, 1000, 8, 128), _bshd(2, 1000, 8, 128), tile_m=192).check_support()
    pers = api.SdpaFwdSm90(q, q, q, tile_m=192, persistent=True)  # explicit: the 192-row tile on the persistent grid (session 21)
    assert pers.check_support() and (pers.key.tile_m, pers.key.persistent) == (192, True)
    with pytest.raises(NotImplementedError, match="tile_m=192"):
        api.SdpaFwdSm90(_bshd(2, 1, 8, 64), _bshd(2, 1000, 2, 64), _bshd(2, 1000, 2, 64), tile_m=192).check_support()  # pack-GQA decode
    with pytest.raises(ValueError, match="tile_m=256"):
        api.SdpaFwdSm90(q, q, q, tile_m=256).check_support()


def test_o_rescale_early_key(api):
    """o_rescale_early is a key field on any plan, dense or THD; None means O_RESCALE_EARLY_DEFAULT for d_v > 128."""
    q = _bshd(2, 300, 8, 256)
    on = api.SdpaFwdSm90(q, q, q, o_rescale_early=True)
    on.check_support()
    auto = api.SdpaFwdSm90(q, q, q)
    auto.check_support()
    assert on.key.o_rescale_early and auto.key.o_rescale_early == api.O_RESCALE_EARLY_DEFAULT
    off = api.SdpaFwdSm90(q, q, q, o_rescale_early=False)
    off.check_support()
    assert on.key == off.key.__class__(**{**off.key.__dict__, "o_rescale_early": True})  # the one field differs
    narrow = api.SdpaFwdSm90(_bshd(2, 300, 8, 128), _bshd(2, 300, 8, 128), _bshd(2, 300, 8, 128))
    narrow.check_support()
    assert not narrow.key.o_rescale_early  # d_v <= 128: the default leaves it off
