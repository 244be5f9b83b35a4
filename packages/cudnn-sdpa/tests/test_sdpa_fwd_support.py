"""check_support on TensorDescs (no GPU, no compile): what is declined, with which message."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl


def _desc(shape, dtype="bfloat16", name="t", perm=None):
    d = TensorDesc.contiguous(shape, dtype, name)
    if perm is None:
        return d
    stored = TensorDesc.contiguous([shape[p] for p in perm], dtype, name)
    stride = [0] * len(shape)
    for pos, dim in enumerate(perm):
        stride[dim] = stored.stride[pos]
    return TensorDesc(tuple(shape), tuple(stride), d.dtype, name)


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def _plan(**kw):
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    q = kw.pop("q", _desc((2, 8, 300, 128), name="q"))
    k = kw.pop("k", _desc((2, 2, 257, 128), name="k"))
    v = kw.pop("v", _desc((2, 2, 257, 128), name="v"))
    return SdpaFwdSm90(q, k, v, **kw)


def test_accepts_bshd_and_bhsd_gqa():
    bshd = (0, 2, 1, 3)
    plan = _plan(
        q=_desc((2, 8, 300, 128), name="q", perm=bshd), k=_desc((2, 2, 257, 128), name="k", perm=bshd), v=_desc((2, 2, 257, 128), name="v"), is_causal=True
    )
    assert plan.check_support()
    assert plan.key.qhead_per_kvhead == 4 and plan.key.mask_right and not plan.key.varlen


def test_plan_key_has_no_extents():
    a, b = _plan(), _plan(q=_desc((3, 8, 4000, 128), name="q"), k=_desc((3, 2, 17, 128), name="k"), v=_desc((3, 2, 17, 128), name="v"))
    a.check_support(), b.check_support()
    assert a.key == b.key


@pytest.mark.parametrize(
    "kw, match",
    [
        (  # paged KV: a page size that neither tiles the key tile nor is a multiple of it
            dict(
                k=_desc((8, 24, 2, 128), name="k"),
                v=_desc((8, 24, 2, 128), name="v"),
                page_table=_desc((2, 4), "int32", "page_table"),
                cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"),
            ),
            "page_size 24 is neither a multiple of the key tile",
        ),
        (  # paged KV with THD queries
            dict(
                q=_desc((300, 8, 128), name="q"),
                k=_desc((8, 128, 2, 128), name="k"),
                v=_desc((8, 128, 2, 128), name="v"),
                page_table=_desc((2, 4), "int32", "page_table"),
                cu_seqlens_q=_desc((3,), "int32", "cu_seqlens_q"),
                cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"),
            ),
            "THD queries",
        ),
        (
            dict(
                cu_seqlens_q=_desc((3,), "int32", "cu_seqlens_q"),
                split_kv=True,
                q=_desc((300, 8, 128), name="q"),
                k=_desc((257, 2, 128), name="k"),
                v=_desc((257, 2, 128), name="v"),
                cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"),
            ),
            "split_kv serves dense",
        ),  # fmt: skip
        (dict(q=_desc((2, 8, 300, 80), name="q"), k=_desc((2, 2, 257, 80), name="k"), v=_desc((2, 2, 257, 80), name="v")), "head dim 80"),
        (dict(q=_desc((2, 8, 300, 128), "float32", "q")), "float32|dtype"),
        (dict(q=TensorDesc((2, 8, 300, 128), (8 * 300 * 128, 300 * 128, 128, 2), "bfloat16", "q")), "unit stride"),
        (dict(q=TensorDesc((2, 8, 300, 128), (8 * 300 * 132, 300 * 132, 132, 1), "bfloat16", "q")), "16 bytes"),
        (dict(v=_desc((2, 2, 257, 256), name="v")), "value head dim"),
    ],
)
def test_declines_with_named_tensor(kw, match):
    with pytest.raises(NotImplementedError, match=match):
        _plan(**kw).check_support()


def test_malformed_values_raise_value_error():
    with pytest.raises(ValueError, match="multiple"):
        _plan(k=_desc((2, 3, 257, 128), name="k"), v=_desc((2, 3, 257, 128), name="v")).check_support()
    with pytest.raises(ValueError, match="window_size"):
        _plan(window_size=(-5, 0))


def test_varlen_needs_both_cu_seqlens():
    q, k = _desc((100, 8, 64), name="q"), _desc((90, 8, 64), name="k")
    with pytest.raises(ValueError, match="cu_seqlens"):
        _plan(q=q, k=k, v=k, cu_seqlens_q=_desc((5,), "int32", "cu_seqlens_q")).check_support()


def test_api_module_imports_no_cutlass():
    import subprocess
    import sys

    code = (
        "import sys; from cudnn.api_base import TensorDesc; from cudnn.sdpa.fwd.api import SdpaFwdSm90; "
        "d=TensorDesc.contiguous((1,2,8,64),'bfloat16','q'); SdpaFwdSm90(d,d,d).check_support(); "
        "assert 'cutlass' not in sys.modules and 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith(('cutlass','torch')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_paged_and_split_plans():
    pools = dict(k=_desc((8, 256, 2, 128), name="k"), v=_desc((8, 256, 2, 128), name="v"))
    plan = _plan(**pools, page_table=_desc((2, 4), "int32", "page_table"), cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"), split_kv=True)
    assert plan.check_support()
    assert plan.key.page_size == 256 and plan.key.split_kv and not plan.key.varlen and plan.key.qhead_per_kvhead == 4
    assert plan.scratch_workspace_bytes() > 0
    with pytest.raises(ValueError, match="needs cu_seqlens_kv"):
        _plan(**pools, page_table=_desc((2, 4), "int32", "page_table")).check_support()
    with pytest.raises(ValueError, match="B = 2 rows"):
        _plan(**pools, page_table=_desc((3, 4), "int32", "page_table"), cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv")).check_support()
    strided = TensorDesc((8, 256, 2, 128), (2 * 512 * 128, 2 * 128, 128, 1), "bfloat16", "k")  # pages with gaps between them
    with pytest.raises(NotImplementedError, match="consecutive token rows"):
        _plan(k=strided, v=pools["v"], page_table=_desc((2, 4), "int32", "page_table"), cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv")).check_support()
    assert _plan().scratch_workspace_bytes() == 0


def test_kv_stages_knob_is_checked_against_shared_memory():
    plan = _plan(kv_stages=3)
    assert plan.check_support() and plan.key.kv_stages == 3
    p0 = _plan()
    p0.check_support()
    assert p0.key.kv_stages == 0  # default: tile_config's depth, the same compile key as before the knob existed
    big = dict(q=_desc((2, 8, 300, 256), name="q"), k=_desc((2, 2, 257, 256), name="k"), v=_desc((2, 2, 257, 256), name="v"))
    with pytest.raises(NotImplementedError, match="shared memory"):
        _plan(**big, kv_stages=3).check_support()
    with pytest.raises(ValueError, match="kv_stages"):
        _plan(kv_stages=7).check_support()


def test_small_pages_are_served_within_limits():
    """Pages shorter than the key tile: served when a multiple of 8 rows divides the tile into at most 16 pages (vLLM /
    SGLang sizes 16 / 32 / 64 at D = 128); page 8 at D = 64 (tile 192: 24 pages per block) is declined."""
    meta = dict(page_table=_desc((2, 4), "int32", "page_table"), cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"))
    for ps in (16, 32, 64):
        plan = _plan(k=_desc((8, ps, 2, 128), name="k"), v=_desc((8, ps, 2, 128), name="v"), **meta)
        assert plan.check_support() and plan.key.page_size == ps
    q64 = _desc((2, 8, 1, 64), name="q")
    with pytest.raises(NotImplementedError, match="page_size 8 is neither"):
        _plan(q=q64, k=_desc((8, 8, 2, 64), name="k"), v=_desc((8, 8, 2, 64), name="v"), **meta).check_support()
    assert _plan(q=q64, k=_desc((8, 16, 2, 64), name="k"), v=_desc((8, 16, 2, 64), name="v"), **meta).check_support()


def test_prefill_options_tile_n_packed_cvt_persistent():
    """The prefill knobs: defaults (packed_cvt on, persistent off except dense causal d = 128, causal keeps
    tile_config's tile); tile_n is validated and checked against shared memory (and implies packed_cvt); persistent
    serves dense and THD plans (no paging, split-KV or pack-GQA)."""
    p0 = _plan(is_causal=True, window_size=(64, 0))  # a sliding window: not the causal d = 128 persistent default
    assert p0.check_support()
    assert (p0.key.tile_n, p0.key.packed_cvt, p0.key.persistent) == (0, True, False)
    plan = _plan(tile_n=176)
    assert plan.check_support() and plan.key.tile_n == 176 and plan.key.packed_cvt
    explicit = _plan(tile_n=176, packed_cvt=False)  # an explicit False is honoured
    assert explicit.check_support() and explicit.key.packed_cvt is False
    for bad in (100, 48, 272, "176"):
        with pytest.raises(ValueError, match="tile_n"):
            _plan(tile_n=bad).check_support()
    big = dict(q=_desc((2, 8, 300, 256), name="q"), k=_desc((2, 2, 257, 256), name="k"), v=_desc((2, 2, 257, 256), name="v"))
    with pytest.raises(NotImplementedError, match="shared memory"):
        _plan(**big, tile_n=176).check_support()
    pers = _plan(is_causal=True, persistent=True, packed_cvt=True)
    assert pers.check_support() and pers.key.persistent and pers.key.packed_cvt
    thd = dict(
        q=_desc((900, 8, 128), name="q"),
        k=_desc((900, 2, 128), name="k"),
        v=_desc((900, 2, 128), name="v"),
        cu_seqlens_q=_desc((4,), "int32", "cu_seqlens_q"),
        cu_seqlens_kv=_desc((4,), "int32", "cu_seqlens_kv"),
        max_seqlen_q=500,
        max_seqlen_kv=500,
    )
    pv = _plan(**thd, is_causal=True, persistent=True, varlen_lpt=True)  # THD: tiles past a sequence's end are skipped in-loop
    assert pv.check_support() and pv.key.persistent and pv.key.varlen_lpt
    assert _plan(**thd, tile_n=176).check_support()  # a tuned key tile serves THD varlen
    lpt = _plan(**thd, is_causal=True, varlen_lpt=True)
    assert lpt.check_support() and lpt.key.varlen_lpt
    with pytest.raises(ValueError, match="varlen_lpt is a THD varlen option"):
        _plan(varlen_lpt=True).check_support()
    with pytest.raises(NotImplementedError, match="persistent serves dense"):
        _plan(split_kv=True, persistent=True).check_support()
    with pytest.raises(NotImplementedError, match="persistent serves dense"):
        _plan(q=_desc((2, 8, 1, 128), name="q"), persistent=True).check_support()  # decode: pack-GQA tile
    pools = dict(k=_desc((8, 256, 2, 128), name="k"), v=_desc((8, 256, 2, 128), name="v"))
    meta = dict(page_table=_desc((2, 4), "int32", "page_table"), cu_seqlens_kv=_desc((3,), "int32", "cu_seqlens_kv"))
    with pytest.raises(NotImplementedError, match="tile_n is not served with paged KV"):
        _plan(**pools, **meta, tile_n=176).check_support()


def test_causal_d128_persistent_pairs_default(monkeypatch):
    """PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT: a dense causal d = 128 plan that leaves persistent / persistent_pairs unset
    takes the persistent grid with paired query blocks (and MASK_R2P_DEFAULT's keep masks); a window's left edge, THD
    varlen, another head dim, non-causal, decode (pack-GQA) or an explicit choice keeps the one-tile grid."""
    from cudnn.sdpa.fwd import api

    assert api.PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT and api.MASK_R2P_DEFAULT  # the defaults since the session-6 H200 A/B
    plan = _plan(is_causal=True)
    assert plan.check_support()
    key = plan.key
    assert (key.persistent, key.persistent_pairs, key.mask_r2p, key.ragged_tail) == (True, True, True, True)
    thd = dict(q=_desc((900, 8, 128), name="q"), k=_desc((900, 2, 128), name="k"), v=_desc((900, 2, 128), name="v"))
    thd.update(cu_seqlens_q=_desc((4,), "int32", "cu_seqlens_q"), cu_seqlens_kv=_desc((4,), "int32", "cu_seqlens_kv"), max_seqlen_q=500, max_seqlen_kv=500)
    d256 = dict(q=_desc((2, 8, 300, 256), name="q"), k=_desc((2, 2, 257, 256), name="k"), v=_desc((2, 2, 257, 256), name="v"))
    nc = _plan()  # non-causal: PERSISTENT_NONCAUSAL_D128_DEFAULT's grid, no pairs (test_noncausal_d128_persistent_default)
    assert nc.check_support() and not nc.key.persistent_pairs
    for kw in (dict(is_causal=True, window_size=(64, 0)), dict(is_causal=True, **thd), dict(is_causal=True, **d256),
               dict(is_causal=True, persistent=False), dict(is_causal=True, q=_desc((2, 8, 1, 128), name="q"))):  # fmt: skip
        plan = _plan(**kw)
        assert plan.check_support() and not plan.key.persistent and not plan.key.persistent_pairs, kw
    d64 = dict(q=_desc((2, 8, 300, 64), name="q"), k=_desc((2, 2, 257, 64), name="k"), v=_desc((2, 2, 257, 64), name="v"))
    p64 = _plan(is_causal=True, **d64)  # head dims <= 64 keep the branch per score (mask_r2p lost there)
    assert p64.check_support() and not p64.key.mask_r2p and _plan(is_causal=True, mask_r2p=True, **d64).check_support()
    explicit = _plan(is_causal=True, persistent=True, persistent_pairs=False)
    assert explicit.check_support() and explicit.key.persistent and not explicit.key.persistent_pairs
    monkeypatch.setattr(api, "PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT", False)
    off = _plan(is_causal=True)
    assert off.check_support() and not off.key.persistent


def test_noncausal_d128_persistent_default(monkeypatch):
    """PERSISTENT_NONCAUSAL_D128_DEFAULT: an unmasked dense d = 128 plan that leaves persistent and tile_n unset takes the
    persistent grid (no pairs) with tile_config's 128-row key tile; THD varlen, a window, causal, decode (pack-GQA),
    kv_stages or an explicit persistent / tile_n keeps the earlier choice (persistent=False: TILE_N_NONCAUSAL_D128_DEFAULT;
    persistent=True: the 128-row tile)."""
    from cudnn.sdpa.fwd import api

    assert api.PERSISTENT_NONCAUSAL_D128_DEFAULT  # the default since the session-21 H200 A/B
    plan = _plan()
    assert plan.check_support()
    assert (plan.key.persistent, plan.key.persistent_pairs, plan.key.tile_n, plan.key.ragged_tail) == (True, False, 0, True)
    assert (plan.key.q_stages, plan.key.wg_epilogue) == (2, True)  # Q_STAGES_DEFAULT, WG_EPILOGUE_DEFAULT
    gqa_bshd = _plan(q=_desc((2, 8, 300, 128), name="q", perm=(0, 2, 1, 3)))
    assert gqa_bshd.check_support() and gqa_bshd.key.persistent
    thd = dict(q=_desc((900, 8, 128), name="q"), k=_desc((900, 2, 128), name="k"), v=_desc((900, 2, 128), name="v"))
    thd.update(cu_seqlens_q=_desc((4,), "int32", "cu_seqlens_q"), cu_seqlens_kv=_desc((4,), "int32", "cu_seqlens_kv"), max_seqlen_q=500, max_seqlen_kv=500)
    for kw in (thd, dict(window_size=(64, 64)), dict(kv_stages=3), dict(q=_desc((2, 8, 1, 128), name="q")), dict(split_kv=True)):
        p = _plan(**kw)
        assert p.check_support() and not p.key.persistent, kw
    off = _plan(persistent=False)
    assert off.check_support() and not off.key.persistent and off.key.tile_n == api.TILE_N_NONCAUSAL_D128_DEFAULT
    pn = _plan(tile_n=192)
    assert pn.check_support() and not pn.key.persistent and pn.key.tile_n == 192
    pp = _plan(persistent=True)  # an explicit persistent plan keeps the 128-row tile too (O in its own tile)
    assert pp.check_support() and pp.key.persistent and pp.key.tile_n == 0
    pc = _plan(is_causal=True)
    assert pc.check_support() and pc.key.persistent_pairs  # causal: PERSISTENT_PAIRS_CAUSAL_D128_DEFAULT
    monkeypatch.setattr(api, "PERSISTENT_NONCAUSAL_D128_DEFAULT", False)
    p0 = _plan()
    assert p0.check_support() and not p0.key.persistent and p0.key.tile_n == api.TILE_N_NONCAUSAL_D128_DEFAULT


def test_q_stages_and_wg_epilogue_scope(monkeypatch):
    """q_stages=2 and wg_epilogue (the persistent tile transition): defaults on the persistent d = 128 plans (causal pairs and
    non-causal; THD varlen takes q_stages only), opt-in elsewhere; declined where O has no own tile beside the Q buffers
    (the one-tile grid, d = 256, d = 128 with a 192-row key tile), naming the option; bad values are ValueErrors."""
    from cudnn.sdpa.fwd import api

    assert api.Q_STAGES_DEFAULT == 2 and api.WG_EPILOGUE_DEFAULT
    causal = _plan(is_causal=True)
    assert causal.check_support() and (causal.key.q_stages, causal.key.wg_epilogue) == (2, True)
    thd = dict(q=_desc((900, 8, 128), name="q"), k=_desc((900, 2, 128), name="k"), v=_desc((900, 2, 128), name="v"))
    thd.update(cu_seqlens_q=_desc((4,), "int32", "cu_seqlens_q"), cu_seqlens_kv=_desc((4,), "int32", "cu_seqlens_kv"), max_seqlen_q=500, max_seqlen_kv=500)
    pthd = _plan(**thd, persistent=True)
    assert pthd.check_support() and (pthd.key.q_stages, pthd.key.wg_epilogue) == (2, False)
    d64 = dict(q=_desc((2, 8, 300, 64), name="q"), k=_desc((2, 2, 257, 64), name="k"), v=_desc((2, 2, 257, 64), name="v"))
    p64 = _plan(**d64, persistent=True)  # not measured at d = 64: opt-in
    assert p64.check_support() and (p64.key.q_stages, p64.key.wg_epilogue) == (0, False)
    o64 = _plan(**d64, persistent=True, q_stages=2, wg_epilogue=True)
    assert o64.check_support() and (o64.key.q_stages, o64.key.wg_epilogue) == (2, True)
    one = _plan(persistent=False)
    assert one.check_support() and (one.key.q_stages, one.key.wg_epilogue) == (0, False)
    d256 = dict(q=_desc((2, 8, 300, 256), name="q"), k=_desc((2, 2, 257, 256), name="k"), v=_desc((2, 2, 257, 256), name="v"))
    for kw in (dict(persistent=False), dict(persistent=True, tile_n=192), dict(persistent=True, **d256)):
        for opt in (dict(q_stages=2), dict(wg_epilogue=True)):
            with pytest.raises(NotImplementedError, match=next(iter(opt))):
                _plan(**kw, **opt).check_support()
    with pytest.raises(NotImplementedError, match="wg_epilogue"):
        _plan(**thd, persistent=True, wg_epilogue=True).check_support()
    for bad in (dict(q_stages=3), dict(q_stages=True), dict(wg_epilogue=1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _plan(**bad).check_support()
    monkeypatch.setattr(api, "Q_STAGES_DEFAULT", 1)
    monkeypatch.setattr(api, "WG_EPILOGUE_DEFAULT", False)
    off = _plan()
    assert off.check_support() and (off.key.q_stages, off.key.wg_epilogue) == (0, False)


def test_pinned_desc_scope(monkeypatch):
    """pinned_desc (the key-block loop's S GEMM from pinned descriptor low words): opt-in (PINNED_DESC_DEFAULT off until
    an A/B), served on prefill plans with head dim 64 or 128 (persistent or not), declined naming the option for d = 256
    (a 64-byte-swizzled K tile) and pack-GQA decode; switched on, the default reaches persistent d = 128 plans only."""
    from cudnn.sdpa.fwd import api

    def key(**kw):
        p = _plan(**kw)
        assert p.check_support(), kw
        return p.key

    assert not api.PINNED_DESC_DEFAULT and not key().pinned_desc
    d64 = dict(q=_desc((2, 8, 300, 64), name="q"), k=_desc((2, 2, 257, 64), name="k"), v=_desc((2, 2, 257, 64), name="v"))
    for kw in (dict(), dict(persistent=False), dict(is_causal=True), d64):
        assert key(**kw, pinned_desc=True).pinned_desc, kw
    d256 = dict(q=_desc((2, 8, 300, 256), name="q"), k=_desc((2, 2, 257, 256), name="k"), v=_desc((2, 2, 257, 256), name="v"))
    decode = dict(q=_desc((2, 8, 1, 128), name="q"))  # S_q = 1 with GQA 4: pack-GQA
    for kw in (d256, decode):
        with pytest.raises(NotImplementedError, match="pinned_desc"):
            _plan(**kw, pinned_desc=True).check_support()
    monkeypatch.setattr(api, "PINNED_DESC_DEFAULT", True)
    assert key().pinned_desc and not key(persistent=False).pinned_desc and not key(**d64).pinned_desc


def test_kv_multicast_scope(monkeypatch):
    """kv_multicast (clusters of two CTAs sharing K / V by TMA multicast): opt-in (KV_MULTICAST_DEFAULT off until an A/B),
    served on persistent dense plans with no causal or window mask (d = 128, d = 64 with persistent=True, GQA); declined
    naming the option where the two query blocks of a cluster would see different key blocks (causal, sliding window,
    THD varlen, persistent_pairs) or there is no persistent grid (one-tile, pack-GQA decode); a non-bool is a ValueError."""
    from cudnn.sdpa.fwd import api

    def key(**kw):
        p = _plan(**kw)
        assert p.check_support(), kw
        return p.key

    assert not api.KV_MULTICAST_DEFAULT and not key().kv_multicast
    d64 = dict(q=_desc((2, 8, 300, 64), name="q"), k=_desc((2, 2, 257, 64), name="k"), v=_desc((2, 2, 257, 64), name="v"), persistent=True)
    for kw in (dict(), d64, dict(pinned_desc=True)):
        assert key(**kw, kv_multicast=True).kv_multicast, kw
    cu = _desc((3,), "int32", "cu_seqlens")
    thd = dict(q=_desc((600, 8, 128), name="q"), k=_desc((600, 2, 128), name="k"), v=_desc((600, 2, 128), name="v"), persistent=True)
    thd.update(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=300, max_seqlen_kv=300)
    decode = dict(q=_desc((2, 8, 1, 128), name="q"))  # S_q = 1 with GQA 4: pack-GQA
    for kw in (dict(is_causal=True), dict(window_size=(64, 0)), dict(persistent=False), dict(persistent=True, persistent_pairs=True), thd, decode):
        with pytest.raises(NotImplementedError, match="kv_multicast"):
            _plan(**kw, kv_multicast=True).check_support()
    with pytest.raises(ValueError, match="kv_multicast"):
        _plan(kv_multicast=1).check_support()
    monkeypatch.setattr(api, "KV_MULTICAST_DEFAULT", True)
    assert key().kv_multicast and not key(is_causal=True).kv_multicast and not key(persistent=False).kv_multicast


def test_noncausal_d128_tile_default_switch(monkeypatch):
    """TILE_N_NONCAUSAL_D128_DEFAULT (the one-line flip after the A/B): 0 keeps tile_config's tile; nonzero applies to
    unmasked dense d = 128 plans only (with packed_cvt), never to causal ones or to an explicit tile_n. Since session 21
    such a plan is persistent with the 128-row tile unless persistent=False or PERSISTENT_NONCAUSAL_D128_DEFAULT is off."""
    from cudnn.sdpa.fwd import api

    assert api.TILE_N_NONCAUSAL_D128_DEFAULT == 192  # the default since the H200 A/B
    monkeypatch.setattr(api, "PERSISTENT_NONCAUSAL_D128_DEFAULT", False)
    monkeypatch.setattr(api, "TILE_N_NONCAUSAL_D128_DEFAULT", 0)
    p0 = _plan()
    p0.check_support()
    assert p0.key.tile_n == 0
    monkeypatch.setattr(api, "TILE_N_NONCAUSAL_D128_DEFAULT", 176)
    p1 = _plan()
    p1.check_support()
    assert p1.key.tile_n == 176 and p1.key.packed_cvt
    pc = _plan(is_causal=True)
    pc.check_support()
    assert pc.key.tile_n == 0
    pe = _plan(tile_n=192)
    pe.check_support()
    assert pe.key.tile_n == 192
