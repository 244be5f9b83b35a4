"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the kernel builds for each configuration family, its PTX really
uses WGMMA and TMA, its symbol carries the ``cudnn`` prefix, and a THD plan is a kernel-cache hit when the token
totals change (Rule 4). Kept small: ~10 compiles of 1-3 s each."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import kernel_symbols
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.compile_only


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa forward")


def test_ptx_has_wgmma_tma_and_cudnn_symbol(tmp_path):
    # In a subprocess: the DSL keeps dumping artifacts for the rest of a process once CUTE_DSL_KEEP was seen.
    code = (
        "from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey; from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd; "
        "compile_sdpa_fwd(SdpaFwdKey('bf16', 128, 128, 1, True, False, False, True, False, False, False))"
    )
    env = dict(os.environ, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tmp_path))
    ptx = "\n".join(open(f).read() for f in glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True))
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA loads
    assert "global.shared::cta" in ptx  # TMA store of O
    assert "setmaxnreg" in ptx  # warp specialization
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms


# One compile per configuration family: dtype x head dims x masks x GQA x LSE/sinks x varlen.
CONFIGS = [
    ("bf16", 64, 64, 1, False, False, False, False, False, False, False),
    ("fp16", 96, 96, 2, True, False, True, True, False, False, False),
    ("bf16", 128, 128, 8, True, True, True, True, True, True, False),
    ("bf16", 192, 128, 1, True, False, False, True, False, False, False),
    ("fp16", 256, 256, 1, False, False, False, True, False, True, False),
    ("bf16", 128, 128, 4, True, False, True, True, False, False, True),
    ("bf16", 128, 128, 4, True, True, True, True, False, True, False, True),  # pack-GQA
    ("bf16", 128, 128, 4, False, False, False, True, False, True, False, True, True),  # split-KV decode (+ combine kernel)
    ("bf16", 128, 128, 4, True, False, True, True, False, False, False, True, True, 256),  # paged KV (page 256) + split-KV
    ("fp16", 128, 128, 1, True, False, True, False, False, False, False, False, False, 128),  # paged KV prefill
    ("bf16", 128, 128, 8, True, False, True, True, False, True, False, True, True, 128, 0, True),  # paged decode, page-table prefetch
    ("bf16", 128, 128, 4, True, False, True, True, False, True, False, True, True, 256, 0, True, True),  # + 64-row tile, one consumer WG
    ("bf16", 128, 128, 4, True, False, True, True, False, True, False, True, False, 16, 0),  # page 16 < key tile: one TMA per page
    ("bf16", 128, 128, 2, False, False, False, True, False, False, False, False, False, 0, 0, False, False, 176, True),  # tile_n 176, packed cvt
    ("fp16", 128, 128, 1, True, False, True, True, False, True, False, False, False, 0, 0, False, False, 0, True, True),  # persistent, causal
    # THD varlen, compact grid (warp prefix-sum batch decode), causal bottom-right, LSE, sinks, GQA
    ("bf16", 128, 128, 4, True, False, True, True, False, True, True, False, False, 0, 0, False, False, 0, True, False, False, True),
    ("bf16", 64, 64, 1, True, False, False, True, False, False, False, False, False, 0, 0, False, False, 128, True, False, False, False, 192),  # 192 x 128
    # d = 256 causal with O rescaled under the next S GEMM
    ("bf16", 256, 256, 1, True, False, False, True, False, False, False, False, False, 0, 0, False, False, 0, True, False, False, False, 0, False, True),
]


@pytest.mark.parametrize(
    "cfg",
    CONFIGS,
    ids=lambda c: (
        f"{c[0]}-d{c[1]}x{c[2]}-g{c[3]}-r{int(c[4])}l{int(c[5])}-varlen{int(c[10])}-pack{int(len(c) > 11 and c[11])}-split{int(len(c) > 12 and c[12])}-page{c[13] if len(c) > 13 else 0}{'-prefetch' if len(c) > 15 and c[15] else ''}{'-m64' if len(c) > 16 and c[16] else ''}{f'-n{c[17]}' if len(c) > 17 and c[17] else ''}{'-cvt2' if len(c) > 18 and c[18] else ''}{'-persistent' if len(c) > 19 and c[19] else ''}{'-vcompact' if len(c) > 21 and c[21] else ''}{f'-m{c[22]}' if len(c) > 22 and c[22] else ''}{'-oearly' if len(c) > 24 and c[24] else ''}"
    ),
)
def test_compiles(cfg):
    from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd

    assert compile_sdpa_fwd(SdpaFwdKey(*cfg)) is not None


def test_thd_compile_is_a_cache_hit_when_token_totals_change():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.sdpa.fwd.api import SdpaFwdSm90

    def plan(t_q, t_kv, batch):
        q = TensorDesc.contiguous((t_q, 8, 64), "bfloat16", "q")
        kv = TensorDesc.contiguous((t_kv, 2, 64), "bfloat16", "k")
        cu = TensorDesc.contiguous((batch + 1,), "int32", "cu_seqlens_q")
        p = SdpaFwdSm90(q, kv, kv, is_causal=True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=t_q, max_seqlen_kv=t_kv)
        p.compile()
        return p

    first = plan(1000, 3000, 3)
    misses, hits = kernel_cache.stats.misses, kernel_cache.stats.hits
    second = plan(17, 123457, 9)
    assert kernel_cache.stats.misses == misses, "a new token total recompiled the THD kernel (Rule 4)"
    assert kernel_cache.stats.hits == hits + 1
    assert second._compiled_kernel is first._compiled_kernel


def test_split_kv_ptx_has_both_kernels_with_cudnn_symbols(tmp_path):
    """A split-KV plan is one artifact launching two kernels (attention with fp32 partial stores, then the combine)."""
    code = (
        "from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey; from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd; "
        "compile_sdpa_fwd(SdpaFwdKey('fp16', 64, 64, 1, True, False, True, True, False, False, False, False, True), tvm_ffi=True)"
    )
    env = dict(os.environ, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tmp_path))
    ptx = "\n".join(open(f).read() for f in glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True))
    syms = kernel_symbols(ptx)
    assert len(syms) == 2 and all(s.startswith("cudnn") for s in syms), syms
    assert any("combine" in s for s in syms), syms
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert re.search(r"st\.global(\.v[24])?\.(f32|b32)", ptx)  # the fp32 partials


@pytest.mark.parametrize(
    "fields, marks",
    [
        # varlen_compact: the tile comes from a warp prefix sum over cu_seqlens_q (shfl.up, ballot, popc)
        (dict(varlen=True, mask_right=True, varlen_compact=True), ("shfl.sync.up.b32", "vote.sync.ballot.b32", "popc.b32")),
        # tile_m=192: three consumer warpgroups at 160 registers, the producer at 32; 416 = 3 * 128 + the storing warp
        (dict(head_dim=64, head_dim_v=64, tile_m=192, tile_n=128), ("setmaxnreg.inc.sync.aligned.u32 \t160", "bar.arrive 1, 416")),
        # varlen_tma_o: the THD O leaves by a TMA store (a 4-d ragged view), no per-thread global stores of O
        (dict(varlen=True, mask_right=True, varlen_compact=True, varlen_tma_o=True), ("cp.async.bulk.tensor.4d.global.shared::cta",)),
    ],
    ids=["varlen_compact", "tile_m192", "varlen_tma_o"],
)
def test_new_prefill_options_ptx(tmp_path, fields, marks):
    """The opt-in prefill plans still use WGMMA and TMA loads, carry the ``cudnn`` symbol prefix, have no local memory,
    show the instructions that make the option, and compile (the DSL's own ptxas) without a stack frame or spills."""
    from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    base = dict(dtype="bf16", head_dim=128, head_dim_v=128, qhead_per_kvhead=1, mask_right=False, mask_left=False, bottom_right=False, has_lse=False,
                lse_log2=False, has_sinks=False, varlen=False, packed_cvt=True)  # fmt: skip
    key = SdpaFwdKey(**{**base, **fields})
    with keep_artifacts(tmp_path / "dump") as ptx_text:
        compile_sdpa_fwd(key)
        ptx = ptx_text()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert ".local" not in ptx
    for m in marks:
        assert m in ptx, m
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms
    frames = frame_sizes(tmp_path / "dump")
    assert frames and all(f == 0 for f in frames), frames  # ptxas spilled nothing to local memory


def test_varlen_compact_order_covers_every_tile_once():
    """The host mirror of the compact THD decode (the device code's rounds of 31 batches, prefix sums, ballot and L2
    sections, lane by lane): every real (m_block, head, batch) exactly once, invalid CTAs only at the end of the grid,
    and with a causal mask each sequence's sections run their m-blocks longest-first."""
    import random

    from cudnn.sdpa.fwd.varlen_schedule import varlen_tile_reference

    rng = random.Random(0)
    cases = [([512, 1024, 3000, 4096, 2048, 777, 4927], 16, 128, True)]
    for _ in range(60):
        b = rng.choice([1, 2, 5, 31, 32, 33, 62, 63, 64, 70])
        lens = [rng.choice([0, 1, 5, 127, 128, 129, 300, 1000]) for _ in range(b)]
        lens[0] = max(lens[0], 1)
        cases.append((lens, rng.choice([1, 3, 8, 16, 20]), rng.choice([64, 128, 192]), rng.random() < 0.5))
    for b, heads in ((124, 2), (125, 2), (130, 1), (260, 1)):  # a step of 4 rounds and more: the skip loop
        lens = [rng.choice([0, 1, 100, 128, 129, 300]) for _ in range(b)]
        cases.append((lens, heads, 128, True))
    for lens, heads, tile_m, causal in cases:
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        got = varlen_tile_reference(cu, heads, tile_m, 128, 128, 128, causal)
        valid = [t for t in got if t is not None]
        want = {(m, h, b) for b, n in enumerate(lens) for m in range(-(-n // tile_m)) for h in range(heads)}
        assert len(valid) == len(set(valid)) == len(want) and set(valid) == want, (lens, heads, tile_m)
        assert all(t is None for t in got[len(valid) :]), "an invalid CTA before a real tile"
        assert len(got) - len(valid) <= len(lens) * heads
        if causal:  # per (batch, head): m-blocks in dispatch order are descending
            seen = {}
            for m, h, b in valid:
                assert seen.get((b, h), m + 1) > m
                seen[(b, h)] = m


def test_ragged_tail_widths_and_plan_option():
    """``ragged_tail``'s compiled S GEMM widths per key tile (at most three, the tile last), and the plan option reaching
    the key: None = RAGGED_TAIL_DEFAULT (on for prefill plans since session 5), a non-bool a ValueError (metadata only, no
    compile)."""
    from cudnn.sdpa.fwd import api
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_key import ragged_tail_widths

    assert ragged_tail_widths(192) == (64, 128, 192)
    assert ragged_tail_widths(176) == (64, 128, 176)
    assert ragged_tail_widths(128) == (64, 128)
    assert ragged_tail_widths(80) == (64, 80)
    assert ragged_tail_widths(64) == (64,)
    q = TensorDesc.contiguous((2, 8, 4096, 128), "bfloat16", "q")
    assert api.RAGGED_TAIL_DEFAULT is True
    for opt, want in ((True, True), (False, False), (None, True)):
        p = SdpaFwdSm90(q, q, q, ragged_tail=opt)
        assert p.check_support() and p.key.ragged_tail is want
    with pytest.raises(ValueError, match="ragged_tail"):
        SdpaFwdSm90(q, q, q, ragged_tail=1).check_support()


def test_ragged_tail_ptx_has_the_narrow_wgmma(tmp_path):
    """``ragged_tail`` on the d = 128 non-causal plan (key tile 192: widths 64 / 128 / 192): the first block's S GEMM is
    also issued at N = 64 (m64n64k16: the default plan's S GEMMs are all n192, its PV GEMMs n128), and the kernel
    compiles with no stack frame (no spills); TMA, the ``cudnn`` symbol prefix, no local memory."""
    from cudnn.sdpa.fwd.kernel_key import SdpaFwdKey
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    key = SdpaFwdKey("bf16", 128, 128, 1, False, False, False, True, False, False, False, tile_n=192, packed_cvt=True, ragged_tail=True)
    with keep_artifacts(tmp_path / "dump") as ptx_text:
        compile_sdpa_fwd(key)
        ptx = ptx_text()
    for n in (64, 128, 192):
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16" in ptx, n
    assert "cp.async.bulk.tensor" in ptx and ".local" not in ptx
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms
    frames = frame_sizes(tmp_path / "dump")
    assert frames and all(f == 0 for f in frames), frames


def test_ragged_tail_causal_combination_compiles_with_no_frame(tmp_path):
    """The causal combination under A/B (benchmarks/sdpa_fwd.py --quick, ours-tail-pairs-r2p): ``ragged_tail`` with
    ``mask_r2p``, ``persistent`` and ``persistent_pairs`` on the d = 128 causal plan with LSE is accepted by check_support
    (no option declines another) and compiles with no stack frame (no spills); the narrow first-block S GEMM (n64) is
    there next to the tile's (n128), TMA in and out, the ``cudnn`` symbol prefix, no local memory."""
    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    q = TensorDesc.contiguous((2, 8, 4096, 128), "bfloat16", "q")
    lse = TensorDesc.contiguous((2, 8, 4096), "float32", "lse")
    plan = SdpaFwdSm90(q, q, q, None, lse, is_causal=True, ragged_tail=True, mask_r2p=True, persistent=True, persistent_pairs=True)
    assert plan.check_support()
    key = plan.key
    assert (key.ragged_tail, key.mask_r2p, key.persistent, key.persistent_pairs, key.mask_right, key.has_lse) == (True,) * 6
    with keep_artifacts(tmp_path / "dump") as ptx_text:
        compile_sdpa_fwd(key)
        ptx = ptx_text()
    for n in (64, 128):
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k16" in ptx, n
    assert "cp.async.bulk.tensor" in ptx and "global.shared::cta" in ptx and ".local" not in ptx
    syms = kernel_symbols(ptx)
    assert syms and all(s.startswith("cudnn") for s in syms), syms
    frames = frame_sizes(tmp_path / "dump")
    assert frames and all(f == 0 for f in frames), frames


def test_l2_group_mb_is_a_launch_scalar_not_a_key_field(api):
    """``l2_group_mb`` (host only) sizes the L2 groups of the causal / window tile order: the plan's key (the compiled
    kernel) is the default's, and the group_heads launch scalar is what the budget holds (d = 256, S_kv = 2048: 2 MiB of
    K/V per (head, batch) pair: 4 pairs per 8 MiB group (the default), 16 per 32 MiB); a plan with no mask keeps 1 (m-block
    fastest); values outside [1, 1024] MiB raise ValueError. No GPU, no compile (the launch recorder)."""
    torch = pytest.importorskip("torch")

    def group_of(causal, **kw):
        q = torch.empty(2, 2048, 8, 256, dtype=torch.bfloat16).transpose(1, 2)
        o = torch.empty_like(q)
        plan = api.SdpaFwdSm90(q, q, q, o, is_causal=causal, **kw)
        plan.compile()
        api._test_recorder.calls.clear()
        plan.execute(q, q, q, o)
        (args,) = api._test_recorder.calls
        return plan.key, args[11 + 6]  # 11 pointers, then LAUNCH_SCALARS: group_heads is the 7th

    key_def, g_def = group_of(True)
    key_8, g_8 = group_of(True, l2_group_mb=8)
    assert key_8 == key_def, "l2_group_mb must not reach the compile key (the same kernel)"
    assert (g_def, g_8) == (api.L2_GROUP_MB_WIDE_DEFAULT // 2, 4)  # 2 MiB per pair (the d = 256 default: 32 MiB, 16 pairs)
    assert group_of(True, l2_group_mb=1)[1] == 1
    assert group_of(False, l2_group_mb=32)[1] == 1
    for bad in (0, 2048, 1.5, True, "32"):
        with pytest.raises(ValueError, match="l2_group_mb"):
            api.SdpaFwdSm90(TensorDesc.contiguous((2, 8, 256, 256), "bfloat16", "q"), *[TensorDesc.contiguous((2, 8, 256, 256), "bfloat16", "k")] * 2,
                            is_causal=True, l2_group_mb=bad).check_support()  # fmt: skip


#: The DSL wait's PTX (cute.arch.mbarrier_wait: a retry loop with a 10 ms suspend-time hint, which ptxas lowers to
#: TRYWAIT + NANOSLEEP.SYNCS 0x989680 + PHASECHK) and the spin's (cute.arch.mbarrier_try_wait: no hint, TRYWAIT alone).
_HINTED_WAIT = re.compile(r"mbarrier\.try_wait\.parity\.shared\.b64 \w+, \[[^\]]+\], [^,;]+, 10000000;")
_SPIN_WAIT = re.compile(r"mbarrier\.try_wait\.parity\.acquire\.cta\.shared::cta\.b64 %p\d+, \[[^\]]+\], [^,;]+;")


@pytest.mark.parametrize(
    "d, causal, fields",
    [(128, False, dict(spin_wait=True)), (128, True, dict(spin_wait=True, spin_wait_producer=True)), (64, False, dict(spin_wait=True))],
    ids=["d128-spin", "d128c-spin-producer", "d64-spin"],
)
def test_spin_wait_ptx(tmp_path, d, causal, fields):
    """``spin_wait`` / ``spin_wait_producer`` on the default plans (d = 128 non-causal: the persistent grid at key tile 128
    since session 21, ragged_tail; d = 128 causal: persistent pairs; d = 64: tile_m 192): the waits they cover become hint-less ``mbarrier.try_wait`` spins
    (consumers: Q, K, V full; producer: the empty slots), no stack frame. With both on, the one hinted wait left is the
    ragged_tail first block's own wait, reached after the spin has seen that phase complete. The default plan has
    ``spin_wait`` on (SPIN_WAIT_DEFAULT) and the producer's waits hinted; with ``spin_wait=False`` (d = 128 non-causal)
    every wait is the DSL's hinted form."""
    import dataclasses

    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    q = TensorDesc.contiguous((2, 4096, 16, d), "bfloat16", "q")
    plan = SdpaFwdSm90(q, q, q, is_causal=causal)
    assert plan.check_support() and plan.key.spin_wait and not plan.key.spin_wait_producer
    key = dataclasses.replace(plan.key, **fields)
    with keep_artifacts(tmp_path / "spin") as ptx_text:
        compile_sdpa_fwd(key)
        ptx = ptx_text()
    hinted, spins = len(_HINTED_WAIT.findall(ptx)), len(_SPIN_WAIT.findall(ptx))
    assert spins >= 2 * 3, (hinted, spins)  # Q, K, V waits at least, each a try_wait and its retry
    if key.spin_wait_producer:
        assert hinted <= 1, hinted
    frames = frame_sizes(tmp_path / "spin")
    assert frames and all(f == 0 for f in frames), frames
    if d == 128 and not causal:
        with keep_artifacts(tmp_path / "default") as ptx_text:
            compile_sdpa_fwd(dataclasses.replace(plan.key, spin_wait=False))
            ptx_def = ptx_text()
        hinted_def = len(_HINTED_WAIT.findall(ptx_def))
        assert not _SPIN_WAIT.findall(ptx_def) and hinted_def > hinted, (hinted_def, hinted)
        assert "mbarrier.try_wait" not in _HINTED_WAIT.sub("", ptx_def)  # with the option off every wait is the DSL's hinted form


_WG_BARRIER = re.compile(r"bar\.(?:sync|arrive)\s+%r\d+, (128|160);")


@pytest.mark.parametrize("causal", [False, True], ids=["d128", "d128-causal"])
def test_persistent_d128_tile_transition_ptx(tmp_path, causal):
    """The persistent d = 128 defaults (session 21: ``q_stages=2``, ``wg_epilogue``): each consumer warpgroup's O store
    is synchronized by its own named barrier (a runtime id, 128 then 160 threads: the warpgroup, then + its storing
    warp) and never by the CTA-wide epilogue barrier of 256 + 32 threads; the storing warp waits for its bulk store's
    read twice (at its next epilogue and before the CTA exits); no stack frame, no local memory. Without the two
    options (same plan otherwise) the CTA-wide barrier is back and the per-warpgroup ones are gone."""
    import dataclasses

    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    q = TensorDesc.contiguous((2, 4096, 16, 128), "bfloat16", "q")
    plan = SdpaFwdSm90(q, q, q, is_causal=causal)
    assert plan.check_support()
    key = plan.key
    assert (key.persistent, key.tile_n, key.q_stages, key.wg_epilogue) == (True, 0, 2, True)
    with keep_artifacts(tmp_path / "wg") as ptx_text:
        compile_sdpa_fwd(key)
        ptx = ptx_text()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx and ".local" not in ptx
    assert set(_WG_BARRIER.findall(ptx)) == {"128", "160"}, _WG_BARRIER.findall(ptx)
    assert "bar.arrive 1, 288;" not in ptx
    assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read\s+0;", ptx)) >= 2
    frames = frame_sizes(tmp_path / "wg")
    assert frames and all(f == 0 for f in frames), frames
    with keep_artifacts(tmp_path / "cta") as ptx_text:
        compile_sdpa_fwd(dataclasses.replace(key, q_stages=0, wg_epilogue=False))
        ptx_cta = ptx_text()
    assert not _WG_BARRIER.findall(ptx_cta) and "bar.arrive 1, 288;" in ptx_cta


def test_kv_multicast_ptx(tmp_path):
    """kv_multicast: the K / V loads are TMA multicasts into the cluster (one per K / V issue site), the consumers' stage
    releases reach the peer CTA's empty barriers (``mbarrier.arrive.shared::cluster`` through ``mapa``), and the CTA
    meets its peer at a cluster barrier after the barrier init and before it exits; no stack frame. The plan without it
    has none of these."""
    import dataclasses

    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    q = TensorDesc.contiguous((2, 4096, 16, 128), "bfloat16", "q")
    plan = SdpaFwdSm90(q, q, q, kv_multicast=True)
    assert plan.check_support() and plan.key.kv_multicast
    mcast = re.compile(r"cp\.async\.bulk\.tensor\.4d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes\.multicast::cluster")
    with keep_artifacts(tmp_path / "mc") as ptx_text:
        compile_sdpa_fwd(plan.key)
        ptx = ptx_text()
    assert len(mcast.findall(ptx)) >= 4, len(mcast.findall(ptx))
    assert "mbarrier.arrive.shared::cluster.b64" in ptx and "mapa.shared::cluster" in ptx
    assert ptx.count("barrier.cluster.wait") >= 2 and ".local" not in ptx
    frames = frame_sizes(tmp_path / "mc")
    assert frames and all(f == 0 for f in frames), frames
    with keep_artifacts(tmp_path / "def") as ptx_text:
        compile_sdpa_fwd(dataclasses.replace(plan.key, kv_multicast=False))
        ptx_def = ptx_text()
    assert not mcast.findall(ptx_def) and "barrier.cluster" not in ptx_def and "mapa" not in ptx_def


def test_pinned_desc_ptx(tmp_path):
    """pinned_desc: the key-block loop's GEMMs are issued from the WGMMA asm of _device/wgmma_desc.py (descriptors as
    operands, scale-d an immediate: the S GEMM's 8 k-blocks and the PV GEMM's 8 at d = 128), from descriptors pinned once
    per tile (a warp shuffle of both words: Q's 8 k-blocks, K's and V's stage 0); the kernel keeps its WGMMA count and
    compiles with no stack frame; the plan without it has neither form."""
    import dataclasses

    from cudnn.sdpa.fwd.api import SdpaFwdSm90
    from cudnn.sdpa.fwd.kernel_sm90 import compile_sdpa_fwd
    from cudnn_testing.compile_only import frame_sizes, keep_artifacts

    q = TensorDesc.contiguous((2, 4096, 16, 128), "bfloat16", "q")
    plan = SdpaFwdSm90(q, q, q, pinned_desc=True)
    assert plan.check_support() and plan.key.pinned_desc
    ss = re.compile(r"wgmma\.mma_async[^;]*\}, %rd\d+, %rd\d+, [01], 1, 1, 0, 0;")
    rs = re.compile(r"wgmma\.mma_async[^;]*\}, %rd\d+, 1, 1, 1, 1;")
    pins = re.compile(r"shfl\.sync\.idx\.b32 hi, hi, 0, 31, -1;")
    with keep_artifacts(tmp_path / "pin") as ptx_text:
        compile_sdpa_fwd(plan.key)
        ptx = ptx_text()
    assert len(ss.findall(ptx)) >= 8 and len(rs.findall(ptx)) >= 8 and len(pins.findall(ptx)) >= 10, (ss.findall(ptx)[:1], len(pins.findall(ptx)))
    assert ".local" not in ptx
    frames = frame_sizes(tmp_path / "pin")
    assert frames and all(f == 0 for f in frames), frames
    with keep_artifacts(tmp_path / "def") as ptx_text:
        compile_sdpa_fwd(dataclasses.replace(plan.key, pinned_desc=False))
        ptx_def = ptx_text()
    assert not ss.findall(ptx_def) and not rs.findall(ptx_def) and not pins.findall(ptx_def)
    assert ptx.count("wgmma.mma_async") == ptx_def.count("wgmma.mma_async")
