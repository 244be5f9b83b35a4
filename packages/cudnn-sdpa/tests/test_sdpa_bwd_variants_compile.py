"""CPU tier of the backward main kernel's schedule variants (cudnn.sdpa.bwd.kernel_key.TUNING_FIELDS): the private
``_tuning`` switch maps onto the compile key (and is part of it), bad combinations are refused, and one compile with
every variant on emits what each variant is for (compile-only, CUTE_DSL_ARCH=sm_90a): TMA reduce-adds instead of
fp32 atomics (dq_tma), bulk copies of the lse / dpsum rows (stats_tma), two barriers less per query block (ds2);
dq_bulk + dq_writer's one bulk reduce-add per warpgroup (one main and one postprocess compile) and its accumulator
order, traced on the CPU (~15 s, no compile). Kept small: one main-kernel compile (~4 s) per variant test plus the
default one it is compared with."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.markers import skip_unless_cutedsl


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")  # check_support declines below the family's runtime floor


def _descs():
    q = TensorDesc.contiguous((2, 8, 300, 128), "bfloat16", "q")
    kv = TensorDesc.contiguous((2, 2, 257, 128), "bfloat16", "k")
    lse = TensorDesc.contiguous((2, 8, 300), "float32", "lse")
    return q, kv, kv, q, q, lse


def test_tuning_sets_the_key_fields_and_an_empty_tuning_is_the_first_schedule():
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    base = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=())
    base.check_support()
    assert (base.key.dq_tma, base.key.stats_tma, base.key.ds_double_buffer) == (False, False, False)
    tuned = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=("dq_tma", "stats_tma", "ds2", "prepost"))
    tuned.check_support()
    assert (tuned.key.dq_tma, tuned.key.stats_tma, tuned.key.ds_double_buffer, tuned.key.prepost_vec) == (True, True, True, True)
    assert tuned.key != base.key and hash(tuned.key) != hash(base.key)  # a variant is its own kernel-cache entry


def test_unknown_tuning_and_dq_tma_with_deterministic_are_refused():
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    with pytest.raises(ValueError, match="unknown _tuning"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_atomics_off",)).check_support()
    for gone in ("mrot", "msel"):  # session 5's opt-ins lost on the H200 (docs/benchmarks/sdpa_bwd_writer.md) and are gone
        with pytest.raises(ValueError, match="unknown _tuning"):
            SdpaBwdSm90(*_descs(), _tuning=("dq_bulk", "stats_tma", "ds2", "prepost", gone)).check_support()
    with pytest.raises(ValueError, match="deterministic"):
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("dq_tma",)).check_support()
    with pytest.raises(ValueError, match="split_d combines"):
        SdpaBwdSm90(*_descs(), _tuning=("split_d", "dq_tma")).check_support()
    # dq_bulk replaces dq_tma's reduce-add (another accumulator order) and has no deterministic mode; dq_writer is a
    # schedule of dq_bulk's reduce-adds
    with pytest.raises(ValueError, match="dq_bulk excludes"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_bulk", "dq_tma")).check_support()
    with pytest.raises(ValueError, match="dq_bulk excludes"):
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("dq_bulk",)).check_support()
    with pytest.raises(ValueError, match="dq_writer is a schedule of dq_bulk"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_writer", "stats_tma")).check_support()
    bulk = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost"))
    assert bulk.check_support() and bulk.key.dq_bulk and bulk.key.dq_writer and not bulk.key.dq_tma
    # the variants that keep the atomic dQ path keep the deterministic mode
    plan = SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("stats_tma", "ds2", "prepost"))
    assert plan.check_support()


def _dump(tmp_path, key: str, kernel: str, build: str = "kernel_sm90 import compile_sdpa_bwd_main as f", keep: str = "ptx") -> str:
    """Compile ``SdpaBwdKey(<key>)`` with ``build`` in a subprocess (the DSL keeps dumping artifacts for the rest of a
    process once CUTE_DSL_KEEP was seen) and return the one dumped PTX whose name holds ``kernel``; ``keep="ptx,cubin"``
    also leaves the cubin in ``tmp_path`` (for frame_sizes)."""
    code = f"from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey; from cudnn.sdpa.bwd.{build}; f(SdpaBwdKey({key}))"
    os.makedirs(str(tmp_path), exist_ok=True)  # the DSL writes nothing into a missing dump directory
    env = dict(os.environ, CUTE_DSL_KEEP=keep, CUTE_DSL_DUMP_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tmp_path))
    texts = []
    for root, _, files in os.walk(str(tmp_path)):
        texts += [open(os.path.join(root, f)).read() for f in files if f.endswith(".ptx") and kernel in f]
    assert len(texts) == 1
    return texts[0]


def _ptx(
    tmp_path, extra: str, kernel: str = "SdpaBwdKernelSm90", build: str = "kernel_sm90 import compile_sdpa_bwd_main as f", key_head: str = "'bf16', 128, 128, 4"
) -> str:
    return _dump(tmp_path, f"{key_head}, True, False, False, False, False, False, False{extra}", kernel, build)


def _ptxas_c7512(tmp_path, kernel: str):
    """Whether the host ptxas (``ptxas -arch=sm_90a -v`` on the one dumped PTX whose name holds ``kernel``) reports
    C7512, "wgmma.mma_async instructions are serialized"; None when no host ptxas takes the DSL's PTX (e.g. an older
    CUDA than the DSL's)."""
    import shutil

    exe = shutil.which("ptxas")
    paths = [os.path.join(r, f) for r, _, fs in os.walk(str(tmp_path)) for f in fs if f.endswith(".ptx") and kernel in f]
    if exe is None or len(paths) != 1:
        return None
    host_out = os.path.join(str(tmp_path), "host_ptxas.out")  # not *.cubin: frame_sizes reads those
    out = subprocess.run([exe, "-arch=sm_90a", "-v", paths[0], "-o", host_out], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return "C7512" in out.stdout + out.stderr


def _assert_host_ptxas_clean(tmp_path):
    """The one PTX dumped under ``tmp_path`` through the host ``ptxas -v`` (sm_90a): no note about WGMMA serialization
    or warpgroup waits (C75xx) and no spill; skips (saying the check did not run) without a host ptxas that takes it."""
    import shutil

    exe = shutil.which("ptxas")
    paths = [os.path.join(r, f) for r, _, fs in os.walk(str(tmp_path)) for f in fs if f.endswith(".ptx")]
    if exe is None or len(paths) != 1:
        pytest.skip("no host ptxas: the ptxas-notes check did not run")
    out = subprocess.run([exe, "-arch=sm_90a", "-v", paths[0], "-o", os.path.join(str(tmp_path), "host_ptxas.out")], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("the host ptxas does not take the DSL's PTX: the ptxas-notes check did not run")
    text = out.stdout + out.stderr
    assert not re.search(r"C75\d\d", text), text[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in text


@pytest.mark.compile_only
def test_all_variants_ptx_uses_tma_reduce_bulk_stats_and_fewer_barriers(tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    base = _ptx(tmp_path / "base", "")
    tuned = _ptx(tmp_path / "tuned", ", dq_tma=True, stats_tma=True, ds_double_buffer=True")
    # dq_tma: TMA reduce-adds of the fp32 dQ partial replace every register atomic
    assert "cp.reduce.async.bulk.tensor" in tuned and ".add." in tuned
    assert "atom.global.add" not in tuned and "red.global.add" not in tuned
    assert "atom.global.add.v2.f32" in base
    # stats_tma: the lse / dpsum rows arrive by bulk copy on the pipeline's mbarrier; no per-thread global loads left
    assert tuned.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
    assert "ld.global" not in tuned and "ld.global" in base
    # ds2 drops the "dS^T free" barrier of both query-block loops; dq_tma adds one per-warpgroup barrier to each
    assert len(re.findall(r"\bbar\.sync\b", tuned)) == len(re.findall(r"\bbar\.sync\b", base))
    assert "wgmma.mma_async" in tuned and "st.local" not in tuned and "ld.local" not in tuned
    assert re.search(r"\.entry cudnn_", tuned)


@pytest.mark.compile_only
def test_dq_bulk_ptx_adds_each_warpgroup_partial_with_one_bulk_reduce(tmp_path):
    """dq_bulk (+ dq_writer): the fp32 dQ partial goes to shared memory with 16-byte stores and into the
    fragment-ordered accumulator with ONE non-tensor bulk reduce-add per warpgroup and query block, issued by the
    writer warp (named-barrier arrivals, no bulk-group wait left in the consumers' loop); the postprocess reads that
    order with 16-byte loads."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _ptx(tmp_path / "main", ", dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True")
    bulk = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"
    # the writer loop, unrolled over the two consumer warpgroups: one reduce-add each
    assert ptx.count(bulk) == 2, ptx.count(bulk)
    assert "cp.reduce.async.bulk.tensor" not in ptx and "atom.global.add" not in ptx and "red.global.add" not in ptx
    assert "st.shared.v4.b32" in ptx  # the fragment, 16 bytes per store
    # consumers arrive on DQ_FULL (one per query-block loop), the writer on DQ_EMPTY (once per warpgroup)
    assert len(re.findall(r"\bbar\.arrive\b", ptx)) == 4  # named barriers (mbarrier arrives are barrier.arrive.*)
    # bulk-group waits: the writer's two (one per warpgroup) and its final one, and the dK / dV epilogue's store
    assert ptx.count("cp.async.bulk.wait_group.read") == 4
    assert "wgmma.mma_async" in ptx and "st.local" not in ptx and "ld.local" not in ptx
    post = _ptx(tmp_path / "post", ", dq_bulk=True", "SdpaBwdPostprocessSm90", "kernel_prepost_sm90 import compile_sdpa_bwd_post as f")
    # the postprocess: 16-byte accumulator loads; the fragment's pairs go to the shared-memory staging tile (64 4-byte
    # stores: 128 rows x 128 columns / 128 threads / 2), dQ leaves as 16-byte row chunks (16 per thread), no 4-byte
    # pair stores to global memory (half a sector per row and warp instruction: session 12's profile)
    assert "ld.global.v4" in post
    assert post.count("st.shared.b32") == 64 and post.count("ld.shared.v4.b32") == 16 and post.count("bar.sync") == 1
    assert post.count("st.global.v4.b32") == 16 and not re.search(r"st\.global\.(b16|u16|b32)", post)


@pytest.mark.compile_only
def test_prepost_variant_ptx_is_vectorized_with_shuffled_row_sums(tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    build = "kernel_prepost_sm90 import compile_sdpa_bwd_pre as f"
    base = _ptx(tmp_path / "base", "", "SdpaBwdPreprocessSm90", build)
    tuned = _ptx(tmp_path / "tuned", ", prepost_vec=True", "SdpaBwdPreprocessSm90", build)
    assert "shfl.sync.bfly" in tuned and "shfl.sync" not in base  # the dO . O sum is split over 4 lanes
    assert "ld.global.v4" in tuned and "st.global.v4" in tuned  # 16-byte loads of O / dO, 16-byte zeroing of dQ_accum


@pytest.mark.compile_only
def test_prepost_mlp_preprocess_issues_every_load_before_its_first_store(tmp_path):
    """mlp: the four passes' O / dO chunks (2 x 4 x 4 16-byte loads at d128) and LSE words are all loaded before the
    first store (without it each pass's loads wait behind the previous pass's lse_log2 / dpsum stores); no spill."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    build = "kernel_prepost_sm90 import compile_sdpa_bwd_pre as f"
    for extra, loads_first in ((", prepost_vec=True", 8), (", prepost_vec=True, prepost_mlp=True", 32)):
        ptx = _ptx(tmp_path / str(loads_first), extra, "SdpaBwdPreprocessSm90", build)
        head = ptx[: ptx.index("st.global")]
        assert head.count("ld.global.v4") == loads_first and ptx.count("ld.global.v4") == 32
        assert "st.local" not in ptx and "ld.local" not in ptx
    with pytest.raises(ValueError, match="prepost_mlp"):
        from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey

        SdpaBwdKey("bf16", 128, 128, 4, True, False, False, False, False, False, False, prepost_mlp=True)


@pytest.mark.compile_only
def test_prepost_mlp_postprocess_converts_one_fragment_block_per_cta(tmp_path):
    """mlp + dq_bulk: a 64-row staging tile (half of the default's 128 rows: half the shared-memory stores, row loads
    and 16-byte accumulator loads and dQ stores per thread) and the same single barrier."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    build = "kernel_prepost_sm90 import compile_sdpa_bwd_post as f"
    post = _ptx(tmp_path / "mlp", ", dq_bulk=True, prepost_vec=True, prepost_mlp=True", "SdpaBwdPostprocessSm90", build)
    assert post.count("st.shared.b32") == 32 and post.count("ld.shared.v4.b32") == 8 and post.count("bar.sync") == 1
    assert post.count("st.global.v4.b32") == 8 and post.count("ld.global.v4") == 16  # 64 x 128 fp32 / 128 threads


def test_head_dim_256_is_served_only_by_the_split_d_variant():
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    q = TensorDesc.contiguous((1, 4, 256, 256), "bfloat16", "q")
    lse = TensorDesc.contiguous((1, 4, 256), "float32", "lse")
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse, _tuning=("ds2",)).check_support()
    plan = SdpaBwdSm90(q, q, q, q, q, lse, is_causal=True, _tuning=("split_d",))
    assert plan.check_support() and plan.key.split_d and plan.key.head_dim == 256


def test_d192_dv128_is_served_by_the_split_d_kernel_deterministic_too_and_other_pairs_are_declined(monkeypatch):
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    def descs(d, dv):
        q, k = TensorDesc.contiguous((2, 8, 300, d), "bfloat16", "q"), TensorDesc.contiguous((2, 2, 257, d), "bfloat16", "k")
        v, o = TensorDesc.contiguous((2, 2, 257, dv), "bfloat16", "v"), TensorDesc.contiguous((2, 8, 300, dv), "bfloat16", "o")
        return q, k, v, o, o, TensorDesc.contiguous((2, 8, 300), "float32", "lse")

    plan = SdpaBwdSm90(*descs(192, 128), is_causal=True)  # D192_TUNING: the 96-key kernel
    assert plan.check_support() and plan.key.tile_n96 and not plan.key.split_d and (plan.key.head_dim, plan.key.head_dim_v) == (192, 128)
    assert plan.key.dq_bulk and plan.key.dq_writer and plan.key.stats_tma and plan.key.prepost_vec and plan.key.ds_double_buffer
    splitd = SdpaBwdSm90(*descs(192, 128), is_causal=True, _tuning=("split_d", "dq_bulk", "dq_writer", "ds2", "prepost"))
    assert splitd.check_support() and splitd.key.split_d and splitd.key.ds_double_buffer and not splitd.key.tile_n96  # still served
    det = SdpaBwdSm90(*descs(192, 128), deterministic=True)  # the atomic dQ path in the turn counters' order
    assert det.check_support() and det.key.split_d and det.key.deterministic and det.key.ds_double_buffer and not det.key.dq_bulk
    with pytest.raises(ValueError, match="dkv_rs"):
        SdpaBwdSm90(*descs(192, 128), _tuning=("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs")).check_support()
    for bad in ((128, 64), (192, 192), (256, 128)):
        with pytest.raises(NotImplementedError, match=f"head dim {bad[0]} with value head dim {bad[1]}"):
            SdpaBwdSm90(*descs(*bad)).check_support()
    monkeypatch.setattr(api, "D192_TUNING", None)
    with pytest.raises(NotImplementedError, match="head dim 192 with value head dim 128"):
        SdpaBwdSm90(*descs(192, 128)).check_support()


@pytest.mark.compile_only
@pytest.mark.parametrize("deterministic", [False, True])
def test_split_d_d192_dv128_ptx_splits_both_head_dims(tmp_path, deterministic):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    head = f"'bf16', 192, 128, 2, True, False, False, False, False, False, {deterministic}"
    ptx = _dump(tmp_path, f"{head}, split_d=True, ds_double_buffer=True", "SdpaBwdSplitDKernelSm90")
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    # S^T / dP^T: 32 queries per warpgroup; dK: 96 of D = 192 per warpgroup; dV: 64 of D_v = 128; dQ: 48 per GEMM
    assert shapes == {"m64n32k16", "m64n96k16", "m64n64k16", "m64n48k16"}, shapes
    assert "atom.global.add.v2.f32" in ptx and "cp.async.bulk.tensor" in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx
    assert re.search(r"\.entry cudnn_", ptx)
    assert ("fence.acq_rel.gpu" in ptx) == deterministic  # the turn counters' fences


@pytest.mark.compile_only
def test_split_d_d256_deterministic_compiles_without_spills(tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, "'bf16', 256, 256, 2, True, False, False, False, False, False, True, split_d=True, ds_double_buffer=True", "SdpaBwdSplitDKernelSm90")
    assert "fence.acq_rel.gpu" in ptx and "atom.global.add.v2.f32" in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx


@pytest.mark.compile_only
def test_split_d_d256_ptx_splits_the_head_dim_over_the_warpgroups(tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _ptx(tmp_path, ", split_d=True", kernel="SdpaBwdSplitDKernelSm90", key_head="'bf16', 256, 256, 2")
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    # S^T / dP^T: 32 queries per warpgroup; dK / dV: half of D = 128 per warpgroup; dQ: a quarter of D = 64 per GEMM
    assert shapes == {"m64n32k16", "m64n128k16", "m64n64k16"}, shapes
    assert "atom.global.add.v2.f32" in ptx and "stmatrix" in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx
    assert re.search(r"\.entry cudnn_", ptx)  # the inherited kernel body keeps the cudnn prefix


def test_default_tuning_constants_drive_plans_built_without_tuning(monkeypatch):
    """DEFAULT_TUNING / D256_TUNING are how the defaults get flipped after the GPU A/B: a plan with no ``_tuning``
    takes them (the dQ reduce-add variants dropped for deterministic plans), an explicit ``_tuning`` wins; D256_TUNING = None declines
    head dim 256."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    # the defaults since the H200 A/B (docs/benchmarks/sdpa_bwd_quick.md); mlp in every one since session 18 (sdpa_bwd_s18_mlpab.md)
    assert api.DEFAULT_TUNING == ("dq_bulk", "stats_tma", "ds2", "prepost", "mlp")
    # d256 since the session-5 H200 A/B (docs/benchmarks/sdpa_bwd_d256.md, "ours-splitdr")
    assert api.D256_TUNING == ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "mlp", "sdpwg", "dkvrs", "dkvearly")
    plan = SdpaBwdSm90(*_descs(), is_causal=True)  # causal: CAUSAL_TUNING (dq_writer too)
    plan.check_support()
    # dqfs since session 20 (sdpa_bwd_s20_dqfs.md, sdpa_bwd_s20_dqfs_all.md)
    assert api.CAUSAL_TUNING == ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "mlp", "dqfs")
    assert plan.key.dq_bulk and plan.key.dq_writer and not plan.key.dq_tma and plan.key.stats_tma and plan.key.ds_double_buffer and plan.key.prepost_vec
    assert plan.key.prepost_mlp and plan.key.dq_first_store
    det = SdpaBwdSm90(*_descs(), is_causal=True, deterministic=True)  # deterministic: no reduce-add variants, no dqfs
    det.check_support()
    assert not (det.key.dq_bulk or det.key.dq_writer or det.key.dq_first_store)
    # d128 non-causal dense, no window / sinks: D128_NONCAUSAL_TUNING since the session-9 H200 A/B (sdpa_bwd_m80b.md)
    assert api.D128_NONCAUSAL_TUNING == ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "mlp", "m80", "pack1")
    full = SdpaBwdSm90(*_descs())
    full.check_support()
    assert full.key.tile_m80 and full.key.dq_bulk and full.key.dq_writer and full.key.pack_once and full.key.stats_tma and not full.key.dq_tma
    windowed = SdpaBwdSm90(*_descs(), window_size=(64, 64))  # other non-causal masks: DEFAULT_TUNING
    windowed.check_support()
    assert windowed.key.dq_bulk and not windowed.key.dq_writer and not windowed.key.tile_m80 and windowed.key.stats_tma and windowed.key.ds_double_buffer
    monkeypatch.setattr(api, "D128_NONCAUSAL_TUNING", None)  # None: DEFAULT_TUNING
    full = SdpaBwdSm90(*_descs())
    full.check_support()
    assert full.key.dq_bulk and not full.key.dq_writer and not full.key.tile_m80 and full.key.stats_tma and full.key.ds_double_buffer and full.key.prepost_vec
    det = SdpaBwdSm90(*_descs(), is_causal=True, deterministic=True)
    det.check_support()
    assert not (det.key.dq_tma or det.key.dq_bulk or det.key.dq_writer) and det.key.stats_tma and det.key.deterministic and det.key.prepost_mlp
    explicit = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=())
    explicit.check_support()
    assert not (explicit.key.dq_tma or explicit.key.stats_tma or explicit.key.ds_double_buffer or explicit.key.prepost_vec or explicit.key.prepost_mlp)
    q = TensorDesc.contiguous((1, 4, 256, 256), "bfloat16", "q")
    lse = TensorDesc.contiguous((1, 4, 256), "float32", "lse")
    wide = SdpaBwdSm90(q, q, q, q, q, lse)
    wide.check_support()
    assert wide.key.split_d and wide.key.ds_double_buffer and wide.key.dq_bulk and wide.key.dq_writer and wide.key.sdp_wg and wide.key.dkv_rs
    assert not (wide.key.dq_tma or wide.key.stats_tma)
    wide_det = SdpaBwdSm90(q, q, q, q, q, lse, deterministic=True)  # SPLIT_D_DETERMINISTIC_TUNING
    wide_det.check_support()
    assert wide_det.key.split_d and wide_det.key.deterministic and not (wide_det.key.dq_bulk or wide_det.key.sdp_wg)
    monkeypatch.setattr(api, "D256_TUNING", None)
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse).check_support()
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse, deterministic=True).check_support()


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
@pytest.mark.parametrize("d", [96])  # 6 groups of 4 per thread: the irregular case; d128 meets it on the GPU
def test_dq_bulk_fragment_order_is_one_bijection_shared_by_main_kernel_and_postprocess(d):
    """dq_bulk's accumulator order (kernel_key.DQ_BULK_ROWS), traced on the CPU from the very objects both kernels use
    (the main kernel's dQ MMA and fragment copy): over the 256 consumer threads the fragment's shared-memory / global
    offsets cover the 64 x D block exactly once, each warpgroup's contiguous half holds only its own threads' values
    (one bulk reduce-add per warpgroup), the register order the main kernel stores in is the one the postprocess loads
    into, and registers 2i, 2i + 1 are adjacent columns of one row (the postprocess's paired stores)."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import DQ_BULK_ROWS, SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    plan = SdpaBwdKernelSm90(SdpaBwdKey("bf16", d, d, 1, False, False, False, True, False, False, False, dq_bulk=True))
    half = DQ_BULK_ROWS * d // plan.num_consumer_wg
    owner, coord, bad = {}, set(), []

    @cute.jit
    def trace():
        tiled_mma_dQ = plan._tiled_mmas()[3]
        tiled_copy = plan._dq_bulk_copy()
        cC = cute.make_identity_tensor((DQ_BULK_ROWS, d))
        cS = cute.make_identity_tensor((half, plan.num_consumer_wg))
        for vt in cutlass.range_constexpr(plan.num_consumer_wg * plan.threads_per_wg):
            tCc = tiled_mma_dQ.get_slice(vt).partition_C(cC)  # what register p holds (the accumulator is compact)
            tSs = tiled_copy.get_slice(vt).partition_D(cS)  # where the fragment copy puts element crd
            stored = cute.make_layout(tSs.shape)  # main kernel: register p -> element idx2crd(p)
            loaded = cute.make_rmem_tensor_like(tSs, cutlass.Float32)  # postprocess: element crd -> register
            if cutlass.const_expr(str(stored) != str(loaded.layout) or cute.size(tSs) != cute.size(tCc)):
                bad.append((vt, str(stored), str(loaded.layout)))
            for p in cutlass.range_constexpr(cute.size(tCc)):
                s = tSs[cute.idx2crd(p, tSs.shape)]
                off = s[0] + s[1] * half
                owner[off] = vt
                coord.add((tCc[p][0], tCc[p][1]))
                if cutlass.const_expr(p % 2 == 0):
                    if cutlass.const_expr(tCc[p + 1][0] != tCc[p][0] or tCc[p + 1][1] != tCc[p][1] + 1):
                        bad.append((vt, p))

    trace()
    assert not bad, bad[:4]
    assert sorted(owner) == list(range(DQ_BULK_ROWS * d)) and len(coord) == DQ_BULK_ROWS * d
    assert all(off // half == vt // plan.threads_per_wg for off, vt in owner.items())


def test_l2_group_dq_is_a_launch_argument_that_halves_the_d128_head_groups():
    """The plan's private ``_l2_group_dq`` (benchmarks/sdpa_bwd.py ``ours-l2dq``) changes only the main kernel's
    ``group_heads`` launch argument (Q, dO and the fp32 dQ accumulator within 16 MiB instead of Q and dO): the
    compile key, hence the kernels, are the same, and the default sizing is unchanged."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, _group_heads

    plan = SdpaBwdSm90(*_descs(), is_causal=True)
    alt = SdpaBwdSm90(*_descs(), is_causal=True, _l2_group_dq=True)
    plan.check_support()
    alt.check_support()
    assert alt.key == plan.key and alt._l2_group_dq and not plan._l2_group_dq
    q = TensorDesc.contiguous((2, 16, 8192, 128), "bfloat16", "q")
    lse = TensorDesc.contiguous((2, 16, 8192), "float32", "lse")
    d128 = SdpaBwdSm90(q, q, q, q, q, lse)
    d128.check_support()
    # 8192 rows x (128 + 128) x 2 bytes = 4 MiB of Q and dO per head; + 8192 x 128 x 4 = 4 MiB of dQ accumulator
    assert _group_heads(d128.key, 8192) == 4 and _group_heads(d128.key, 8192, True) == 2


def _launch_group_heads(q, lse, **kw) -> int:
    """The main kernel's ``group_heads`` launch scalar of a plan on CPU tensors ``q`` (as every operand) and ``lse``:
    :func:`_derive`'s launch arguments as execute's validation computes them, no kernel."""
    import torch

    from cudnn.sdpa.bwd import api

    plan = api.SdpaBwdSm90(q, q, q, q, q, lse, q, q, q, **kw)
    plan.check_support()
    n = plan.scratch_workspace_bytes()
    raw = torch.empty(n + 256, dtype=torch.uint8)
    ws = raw[(-raw.data_ptr()) % 128 :][:n]  # Workspace.over wants 128-byte alignment
    entry = api._derive(plan.key, q, q, q, q, q, lse, q, q, q, None, None, None, None, ws, plan._mask_window, None, False, plan._group_heads_arg)
    return entry[3][7]  # main's launch scalars: b, h, hk, sq, sk, grid_k, s_pad, group_heads, ...


def test_full_group_heads_orders_only_unmasked_dense_plans(monkeypatch):
    """``api.FULL_GROUP_HEADS`` (the main kernel's (kv head, batch) pairs per L2 group for unmasked dense plans) reaches
    the ``group_heads`` launch argument of a non-causal plan only; a causal plan keeps the budget-sized groups (its
    long key blocks first), and the private ``_group_heads`` overrides either way (0: the budget). Host-side: the
    launch arguments from :func:`_derive` (as execute's validation calls it) on CPU tensors, no kernel."""
    import torch

    from cudnn.sdpa.bwd import api

    b, h, s, d = 2, 16, 4096, 128
    q = torch.empty(b, h, s, d, dtype=torch.bfloat16)
    lse = torch.empty(b, h, s, dtype=torch.float32)

    def group_heads(causal, **kw):
        return _launch_group_heads(q, lse, is_causal=causal, **kw)

    budget = 8  # Q and dO: 4096 rows x (128 + 128) x 2 bytes = 2 MiB a head; 16 MiB / 2 MiB
    monkeypatch.setattr(api, "FULL_GROUP_HEADS", None)
    assert group_heads(False) == budget and group_heads(True) == budget
    monkeypatch.setattr(api, "FULL_GROUP_HEADS", 1)
    assert group_heads(False) == 1 and group_heads(True) == budget
    assert group_heads(False, _group_heads=0) == budget and group_heads(True, _group_heads=2) == 2
    with pytest.raises(ValueError, match="_group_heads"):
        api.SdpaBwdSm90(q, q, q, q, q, lse, q, q, q, _group_heads=-1)


def test_short_d64_causal_plans_take_the_full_order():
    """``api.SHORT_D64_CAUSAL_ROWS``: causal dense plans at D = 64 with at most that many query rows launch in
    FULL_GROUP_HEADS' order (session 18's A/B); longer ones, d128, and windowed d64 plans keep the budget groups."""
    import torch

    from cudnn.sdpa.bwd import api

    def group_heads(s, d, **kw):
        return _launch_group_heads(torch.empty(16, 32, s, d, dtype=torch.bfloat16), torch.empty(16, 32, s, dtype=torch.float32), **kw)

    assert api.SHORT_D64_CAUSAL_ROWS == 1024
    assert group_heads(1024, 64, is_causal=True) == 1 and group_heads(1000, 64, is_causal=True, causal_bottom_right=True) == 1
    assert group_heads(2048, 64, is_causal=True) > 1  # s2k: the budget (16 MiB / 512 KiB of Q + dO a head)
    assert group_heads(1024, 128, is_causal=True) > 1 and group_heads(1024, 64, window_size=(128, 0)) > 1


def test_grouped_heads_divides_the_pairs_within_half_the_budget():
    """``g3d`` (grouped_grid)'s host rule: the budget's group size where it divides the (kv head, batch) pairs, else the
    largest divisor at least half of it, else the budget's size (the kernel then decodes its 1-D block id)."""
    from cudnn.sdpa._device.tile_scheduler import SingleTileScheduler

    grouped = SingleTileScheduler.grouped_heads
    assert [grouped(g, 256) for g in (1, 8, 64, 256)] == [1, 8, 64, 256]  # powers of two: unchanged
    assert grouped(8, 36) == 6 and grouped(64, 96) == 48 and grouped(10, 36) == 9  # the largest divisor >= g / 2
    assert grouped(8, 7) == 7 and grouped(64, 13) == 13  # no more pairs than the budget: one group of them all
    assert grouped(8, 13) == 8 and grouped(16, 34) == 16  # no divisor in [g / 2, g]: unchanged (the 1-D decode)


def test_grouped_grid_tuning_launches_a_dividing_group():
    """``g3d`` sets grouped_grid (its own kernel-cache entry) and the causal plan's launch scalar ``group_heads`` becomes
    a divisor of the (kv head, batch) pairs: 2 x 6 pairs at a budget of 8 -> 6. Host-side, as in the test above."""
    import torch

    from cudnn.sdpa.bwd import api

    b, h, s, d = 2, 6, 4096, 128
    q = torch.empty(b, h, s, d, dtype=torch.bfloat16)
    lse = torch.empty(b, h, s, dtype=torch.float32)

    def group_heads(tuning):
        plan = api.SdpaBwdSm90(q, q, q, q, q, lse, q, q, q, is_causal=True, _tuning=tuning)
        assert plan.check_support()
        n = plan.scratch_workspace_bytes()
        raw = torch.empty(n + 256, dtype=torch.uint8)
        ws = raw[(-raw.data_ptr()) % 128 :][:n]
        entry = api._derive(plan.key, q, q, q, q, q, lse, q, q, q, None, None, None, None, ws, plan._mask_window, None, False, plan._group_heads_arg)
        return plan.key, entry[3][7]

    base = api._default_tuning(d, d, False, True, False)  # a masked plan's default: no persistent grid (it refuses g3d)
    key, g = group_heads(base)
    key3, g3 = group_heads(base + ("g3d",))
    assert not key.grouped_grid and key3.grouped_grid and key3 != key
    assert g == 8 and g3 == 6


def test_m80_is_a_dense_d128_dq_tma_schedule_and_dq_writer_also_serves_dq_tma():
    """``m80`` (query blocks of 80 rows, dQ^T through a 128-byte-swizzled TMA reduce-add) needs dq_tma (or, since
    session 9, dq_bulk: test_m80_bulk_*) and dense D = D_v = 128; anything else is refused (ValueError), never silently
    run at 64 rows. dq_writer now also schedules dq_tma's reduce-adds."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    m80 = ("dq_tma", "stats_tma", "ds2", "prepost", "m80")
    plan = SdpaBwdSm90(*_descs(), _tuning=m80)
    assert plan.check_support() and plan.key.tile_m80 and plan.key.dq_tma and not plan.key.dq_bulk
    assert SdpaBwdKernelSm90(plan.key).tile_m == 80
    base = SdpaBwdSm90(*_descs(), _tuning=m80[:-1])
    base.check_support()
    assert SdpaBwdKernelSm90(base.key).tile_m == 64 and base.key != plan.key
    for bad in (("m80",), ("stats_tma", "ds2", "m80")):  # m80 takes dq_tma or (session 9) dq_bulk: never the atomics
        with pytest.raises(ValueError, match="tile_m80"):
            SdpaBwdSm90(*_descs(), _tuning=bad).check_support()
    q = TensorDesc.contiguous((2, 4, 300, 64), "bfloat16", "q")
    lse = TensorDesc.contiguous((2, 4, 300), "float32", "lse")
    with pytest.raises(ValueError, match="tile_m80"):
        SdpaBwdSm90(q, q, q, q, q, lse, _tuning=m80).check_support()
    with pytest.raises(ValueError, match="tile_m80|deterministic"):
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=m80).check_support()
    tq = TensorDesc.contiguous((600, 8, 128), "bfloat16", "q")
    tk = TensorDesc.contiguous((514, 2, 128), "bfloat16", "k")
    cu = TensorDesc.contiguous((3,), "int32", "cu_seqlens_q")
    thd = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=300, max_seqlen_kv=257)
    with pytest.raises(ValueError, match="tile_m80"):
        SdpaBwdSm90(tq, tk, tk, tq, tq, TensorDesc.contiguous((8, 600), "float32", "lse"), _tuning=m80, **thd).check_support()
    tmaw = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=("dq_tma", "dq_writer", "stats_tma"))
    assert tmaw.check_support() and tmaw.key.dq_tma and tmaw.key.dq_writer and not tmaw.key.dq_bulk
    # dqt: m80's dQ^T staging at 64 rows (D = 128; varlen allowed); m80 implies it
    dqt = SdpaBwdSm90(*_descs(), _tuning=("dq_tma", "dqt"))
    assert dqt.check_support() and dqt.key.dq_t128 and SdpaBwdKernelSm90(dqt.key).tile_m == 64 and SdpaBwdKernelSm90(dqt.key).dq_t
    assert SdpaBwdKernelSm90(plan.key).dq_t and not SdpaBwdKernelSm90(base.key).dq_t
    for bad, descs in ((("dqt",), _descs()), (("dq_tma", "dqt", "m80"), _descs()), (("dq_tma", "dqt"), (q, q, q, q, q, lse))):
        with pytest.raises(ValueError, match="dq_t128"):
            SdpaBwdSm90(*descs, _tuning=bad).check_support()


@pytest.mark.compile_only
def test_m80_writer_ptx_has_80_row_wgmmas_and_128_byte_tma_reduce_adds_from_the_writer_warp(tmp_path):
    """m80 + dq_writer: S^T / dP^T / dQ^T are m64n80 WGMMAs (dK / dV m64n128 over K = 80), the fp32 dQ^T partial is
    staged with scalar shared stores and added by the writer warp's TMA reduce-adds (two 80 x 32 boxes of 128-byte rows
    per warpgroup), no atomics, the lse / dpsum rows still arrive by bulk copy."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _ptx(tmp_path, ", dq_tma=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, tile_m80=True")
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx))
    assert shapes == {"m64n80k16", "m64n128k16"}, shapes
    # the writer loop, unrolled over the two consumer warpgroups: two boxes (32 of the 64 columns) each
    assert ptx.count("cp.reduce.async.bulk.tensor") == 4, ptx.count("cp.reduce.async.bulk.tensor")
    assert "atom.global.add" not in ptx and "red.global.add" not in ptx and "ld.global" not in ptx
    assert "st.shared.b32" in ptx and len(re.findall(r"\bbar\.arrive\b", ptx)) >= 4
    assert ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2
    assert re.search(r"\.entry cudnn_", ptx)


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
@pytest.mark.parametrize("option", ["tile_m80", "dq_t128"])
def test_m80_dq_transposed_staging_hits_every_swizzled_element_once(option):
    """m80's dQ^T staging (SdpaBwdKernelSm90.consumer_operands): each fragment element is stored at the unswizzled
    offset plus one of four thread-constant shifts (by the element's class e % 4, from ``m80_stage_shift``). Traced on the CPU over the 256
    consumer threads from the kernel's own dQ MMA and buffer layout: that address equals the 128-byte swizzle (on byte
    addresses, as the swizzled pointer and the TMA apply it) of the element's (query, head dim) slot, and the 80 x 128
    slots are each written once (64 x 128 with dq_t128, the same staging at 64 rows)."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    plan = SdpaBwdKernelSm90(SdpaBwdKey("bf16", 128, 128, 1, False, False, False, True, False, False, False, dq_tma=True, **{option: True}))
    D, tm = plan.head_dim, plan.tile_m
    seen, bad = set(), []

    def compare(coords, shifts, lin_t, outer):
        for e, (d, q) in enumerate(coords):
            lin = outer((q, d % (D // 2), d // (D // 2)))
            want = ((4 * lin) ^ ((((4 * lin) >> 7) & 7) << 4)) // 4  # S<3,4,3> on the byte address
            seen.add(want)
            if lin_t((d, q)) + shifts[e % 4] != want:
                bad.append((d, q))

    @cute.jit
    def trace():
        sdQ = plan._dq_smem_layout()
        outer = cute.make_layout(sdQ.outer.shape, stride=sdQ.outer.stride)
        lin_t = cute.composition(cute.group_modes(outer, 1, 3), cute.make_layout((D, tm), stride=(tm, 1)))
        tiled_mma_dQ = plan._tiled_mmas()[3]
        for t in cutlass.range_constexpr(plan.num_mma_threads):
            c = tiled_mma_dQ.get_slice(t).partition_C(cute.make_identity_tensor((D, tm)))
            shifts = [plan.m80_stage_shift(c[e][0], c[e][1]) for e in range(4)]  # the kernel's own four shifts
            compare([c[e] for e in range(cute.size(c))], shifts, lin_t, outer)

    assert tm == (80 if option == "tile_m80" else 64) and plan.dq_t
    trace()
    assert not bad, bad[:4]
    assert seen == set(range(tm * D))


# ---------------------------------------------------------------------------------------------------------------------
# session 9 (issue #6): m80 + dq_bulk (80-row fragment-ordered dQ^T blocks by bulk reduce-add) with pack1

M80B = ("dq_bulk", "stats_tma", "ds2", "prepost", "m80", "pack1")
M80BW = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m80", "pack1")


def test_m80_bulk_is_a_dense_d128_schedule_with_whole_80_row_blocks_of_scratch():
    """m80 + dq_bulk (with or without the writer warp) is accepted for dense D = D_v = 128, causal or not, GQA; its
    scratch rows are S_q rounded up to whole 80-row blocks, then to the 128-row pre/postprocess tile (so a last block
    lies inside its head's scratch), and only its workspace grows; varlen, deterministic, d64 and dsk are refused."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, workspace_bytes_for
    from cudnn.sdpa.bwd.kernel_key import M80_BULK_ROWS, m80_bulk, padded_rows
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    assert M80_BULK_ROWS == 80 and padded_rows(1000) == 1024 and padded_rows(1000, 80) == 1152
    assert padded_rows(4096, 80) == 4224 and padded_rows(8192, 80) == 8320 and padded_rows(77, 80) == 128 and padded_rows(0, 80) == 0
    for causal in (False, True):
        for tuning in (M80B, M80BW):
            plan = SdpaBwdSm90(*_descs(), is_causal=causal, _tuning=tuning)
            assert plan.check_support() and plan.key.tile_m80 and plan.key.dq_bulk and not plan.key.dq_tma and m80_bulk(plan.key)
            assert SdpaBwdKernelSm90(plan.key).tile_m == 80 and plan.key.qhead_per_kvhead == 4
    q = _descs()[0]
    bulk = SdpaBwdSm90(*_descs(), _tuning=M80B)
    bulk.check_support()
    tma = SdpaBwdSm90(*_descs(), _tuning=("dq_tma", "stats_tma", "ds2", "prepost", "m80"))
    tma.check_support()
    assert not m80_bulk(tma.key)
    # S_q = 300: 4 blocks of 80 = 320 rows, 384 padded rows either way; S_q = 1000: 1152 padded rows instead of 1024
    q1k = TensorDesc.contiguous((2, 8, 1000, 128), "bfloat16", "q")
    kv = TensorDesc.contiguous((2, 2, 257, 128), "bfloat16", "k")
    lse1k = TensorDesc.contiguous((2, 8, 1000), "float32", "lse")
    b1k = SdpaBwdSm90(q1k, kv, kv, q1k, q1k, lse1k, _tuning=M80B)
    d1k = SdpaBwdSm90(q1k, kv, kv, q1k, q1k, lse1k, _tuning=("dq_bulk", "stats_tma", "ds2", "prepost"))
    assert workspace_bytes_for(b1k, q1k) > workspace_bytes_for(d1k, q1k)
    assert workspace_bytes_for(bulk, q) == workspace_bytes_for(tma, q)
    q64 = TensorDesc.contiguous((2, 4, 300, 64), "bfloat16", "q")
    lse64 = TensorDesc.contiguous((2, 4, 300), "float32", "lse")
    with pytest.raises(ValueError, match="tile_m80"):
        SdpaBwdSm90(q64, q64, q64, q64, q64, lse64, _tuning=M80B).check_support()
    with pytest.raises(ValueError, match="dq_bulk excludes|tile_m80"):
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=M80B).check_support()
    with pytest.raises(ValueError, match="ds_kmajor"):
        SdpaBwdSm90(*_descs(), _tuning=M80B + ("dsk",)).check_support()
    tq = TensorDesc.contiguous((600, 8, 128), "bfloat16", "q")
    tk = TensorDesc.contiguous((514, 2, 128), "bfloat16", "k")
    cu = TensorDesc.contiguous((3,), "int32", "cu_seqlens_q")
    thd = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=300, max_seqlen_kv=257)
    with pytest.raises(ValueError, match="tile_m80.*varlen"):
        SdpaBwdSm90(tq, tk, tk, tq, tq, TensorDesc.contiguous((8, 600), "float32", "lse"), _tuning=M80BW, **thd).check_support()


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
def test_m80_bulk_fragment_order_is_one_bijection_shared_by_main_kernel_and_postprocess():
    """m80 + dq_bulk's accumulator order (kernel_key.M80_BULK_ROWS), traced on the CPU (no compile) from the objects
    both kernels use (the main kernel's dQ^T MMA and fragment copy): over the 256 consumer threads the fragment's
    offsets cover the 80 x 128 block exactly once, each warpgroup's contiguous 80 x 64 half holds only its own threads'
    values (its half of the head dim: one 20 KiB bulk reduce-add per warpgroup), ten 16-byte groups per thread, and the
    register order the main kernel stores in is the one the postprocess loads into."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import M80_BULK_ROWS, SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    d = 128
    plan = SdpaBwdKernelSm90(SdpaBwdKey("bf16", d, d, 1, True, False, False, False, False, False, False, dq_bulk=True, tile_m80=True, pack_once=True))
    assert plan.tile_m == M80_BULK_ROWS and plan.dq_t
    half = M80_BULK_ROWS * d // plan.num_consumer_wg
    owner, coord, bad = {}, set(), []

    @cute.jit
    def trace():
        tiled_mma_dQ = plan._dq_order_mma()  # dQ^T: (head dim, queries)
        tiled_copy = plan._dq_bulk_copy()
        cC = cute.make_identity_tensor((d, M80_BULK_ROWS))
        cS = cute.make_identity_tensor((half, plan.num_consumer_wg))
        for vt in cutlass.range_constexpr(plan.num_consumer_wg * plan.threads_per_wg):
            tCc = tiled_mma_dQ.get_slice(vt).partition_C(cC)
            tSs = tiled_copy.get_slice(vt).partition_D(cS)
            stored = cute.make_layout(tSs.shape)
            loaded = cute.make_rmem_tensor_like(tSs, cutlass.Float32)
            if cutlass.const_expr(str(stored) != str(loaded.layout) or cute.size(tSs) != cute.size(tCc) or cute.size(tCc) != 40):
                bad.append((vt, str(stored), str(loaded.layout)))
            for p in cutlass.range_constexpr(cute.size(tCc)):
                s = tSs[cute.idx2crd(p, tSs.shape)]
                owner[s[0] + s[1] * half] = (vt, tCc[p][0])
                coord.add((tCc[p][0], tCc[p][1]))

    trace()
    assert not bad, bad[:4]
    assert sorted(owner) == list(range(M80_BULK_ROWS * d)) and len(coord) == M80_BULK_ROWS * d
    # warpgroup w's half: its own threads, its half of the head dim
    assert all(off // half == vt // plan.threads_per_wg == hd // (d // 2) for off, (vt, hd) in owner.items())


#: (key, bulk reduce-adds in the PTX): causal GQA with the writer warp (its loop unrolled over the two warpgroups),
#: non-causal from the consumers (one per warpgroup in each of the three query-block loops)
M80B_KEYS = [
    ("'bf16', 128, 128, 4, True, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, prepost_vec=True, tile_m80=True, pack_once=True", 2),
    ("'bf16', 128, 128, 1, False, False, False, False, False, False, False, dq_bulk=True, stats_tma=True, ds_double_buffer=True, prepost_vec=True, tile_m80=True, pack_once=True", 3),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,bulk", M80B_KEYS, ids=["causal-gqa-writer", "noncausal"])
def test_m80_bulk_ptx_runs_n80_wgmmas_one_bulk_reduce_per_warpgroup_unserialized_without_spills(tmp_path, key, bulk):
    """One compile each: S^T / dP^T / dQ^T as m64n80k16 WGMMAs, dK / dV m64n128k16; each warpgroup's dQ^T fragment to
    shared memory as ten 16-byte stores and added by one bulk reduce-add (no TMA reduce, no atomics); no local memory,
    a zero frame in the DSL's cubin; the Rule 6 symbol; and (where a host ptxas takes the PTX) no C75xx note and no
    spill: without pack1 ptxas serializes every WGMMA of this kernel (C7512, insufficient registers)."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, key, "SdpaBwdKernelSm90", keep="ptx,cubin")
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)) == {"m64n80k16", "m64n128k16"}
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == bulk
    assert "cp.reduce.async.bulk.tensor" not in ptx and "atom.global.add" not in ptx and "red.global.add" not in ptx
    assert ptx.count("st.shared.v4.f32") + ptx.count("st.shared.v4.b32") >= 10
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    assert re.search(r"\.entry cudnn_", ptx)
    _assert_host_ptxas_clean(tmp_path)


@pytest.mark.compile_only
def test_m80_bulk_postprocess_compiles_walking_80_row_blocks(tmp_path):
    """The postprocess of m80 + dq_bulk compiles (one 80-row block per CTA, 16-byte coalesced accumulator loads, the
    dQ^T fragment's elements stored one by one into the shared-memory staging tile, then 16-byte row chunks to dQ: 80
    rows x 16 chunks / 128 threads = 10 per thread) with the Rule 6 symbol and no local memory."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    key = M80B_KEYS[0][0]
    ptx = _dump(tmp_path, key, "Postprocess", build="kernel_prepost_sm90 import compile_sdpa_bwd_post as f")
    assert re.search(r"\.entry cudnn_", ptx) and "st.local" not in ptx
    assert ptx.count("ld.global.v4.f32") + ptx.count("ld.global.v4.b32") >= 20  # ten 16-byte groups per warpgroup
    assert ptx.count("st.shared.b16") == 80 and ptx.count("ld.shared.v4.b32") == 10
    assert ptx.count("st.global.v4.b32") == 10 and not re.search(r"st\.global\.(b16|u16|b32)", ptx)


# ---------------------------------------------------------------------------------------------------------------------
# d256 (issue #6): split_d + dq_bulk (FA4's dQ path), sdpwg, dkvrs (the default, D256_TUNING)


def _d256_descs():
    q = TensorDesc.contiguous((2, 8, 300, 256), "bfloat16", "q")
    kv = TensorDesc.contiguous((2, 2, 257, 256), "bfloat16", "k")
    lse = TensorDesc.contiguous((2, 8, 300), "float32", "lse")
    return q, kv, kv, q, q, lse


def test_d256_bulk_tunings_set_their_key_fields_and_bad_combinations_are_refused():
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_splitd_sm90 import split_d_kernel_class

    plan = SdpaBwdSm90(*_d256_descs(), is_causal=True, _tuning=("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs"))
    assert plan.check_support()
    k = plan.key
    assert k.split_d and k.dq_bulk and k.dq_writer and k.ds_double_buffer and k.sdp_wg and k.dkv_rs and not k.dq_tma
    bulk = SdpaBwdSm90(*_d256_descs(), is_causal=True, _tuning=("split_d", "dq_bulk", "dq_writer", "ds2", "prepost"))
    assert bulk.check_support() and not bulk.key.dkv_rs and bulk.key != k  # a variant is its own kernel-cache entry
    with pytest.raises(ValueError, match="unknown _tuning"):  # session 4's cluster variants lost on the H200 and are gone
        SdpaBwdSm90(*_d256_descs(), _tuning=("split_d", "dq_bulk", "ds2", "cluster2")).check_support()
    with pytest.raises(ValueError, match="unknown _tuning"):
        SdpaBwdSm90(*_d256_descs(), _tuning=("split_d", "dq_bulk", "dq_writer", "ds2", "dqpair")).check_support()
    with pytest.raises(ValueError, match="sdp_wg"):
        SdpaBwdSm90(*_d256_descs(), _tuning=("split_d", "dq_bulk", "sdpwg")).check_support()  # needs ds2's buffer pair
    with pytest.raises(ValueError, match="dkv_rs"):
        SdpaBwdSm90(*_d256_descs(), _tuning=("split_d", "dq_bulk", "ds2", "dkvrs")).check_support()  # needs sdpwg
    wg = SdpaBwdSm90(*_d256_descs(), _tuning=("split_d", "dq_bulk", "ds2", "sdpwg"))
    assert wg.check_support() and wg.key.sdp_wg and not wg.key.dq_writer
    with pytest.raises(ValueError, match="split_d \\+ dq_bulk"):
        SdpaBwdSm90(*_descs(), _tuning=("split_d", "dq_bulk")).check_support()  # d128
    # one construction site serves every split-D variant: the class follows the key (the postprocess's plan too)
    head = ("bf16", 256, 256, 1, False, False, False, True, False, False, False)
    names = [split_d_kernel_class(SdpaBwdKey(*head, split_d=True, **kw)).__name__ for kw in ({}, {"dq_bulk": True})]
    assert names == ["SdpaBwdSplitDKernelSm90", "SdpaBwdSplitDBulkKernelSm90"]
    bulk_key = SdpaBwdKey(*head, split_d=True, dq_bulk=True)
    bulk_plan = split_d_kernel_class(bulk_key)(bulk_key)
    assert bulk_plan.num_stages == 1 and (bulk_plan.tile_m, bulk_plan.tile_n) == (64, 64)


@pytest.mark.compile_only
def test_d256_sdpwg_ptx_runs_s_and_dp_as_64x64_wgmmas_on_one_warpgroup_each(tmp_path):
    """One compile of sdpwg (causal, the writer warp): S^T and dP^T as 64 x 64 WGMMAs (16 k-steps each, per query-block
    loop), no 64 x 32 left, P^T read back by warpgroup 2 (ldmatrix) after warpgroup 1's "P^T ready" arrive (named
    barrier 8: arrive on one side, sync on the other), no local memory."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    key = "'bf16', 256, 256, 1, True, False, False, True, False, False, False, split_d=True, dq_bulk=True, dq_writer=True, ds_double_buffer=True, sdp_wg=True"
    ptx = _dump(tmp_path, key, "SdpaBwdSplitDBulkKernelSm90", keep="ptx,cubin")
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert set(shapes) == {"m64n64k16", "m64n128k16"} and shapes.count("m64n64k16") == 2 * 32, set(shapes)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert len(re.findall(r"bar\.arrive 8, 256", ptx)) == 2 and len(re.findall(r"bar\.sync\s+8, 256", ptx)) == 2
    assert "multicast::cluster" not in ptx and ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 2
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


def test_d256_sdpwg_p_round_trip_reads_back_each_register_from_where_it_was_stored():
    """sdpwg: warpgroup 2 reads P^T back with ldmatrix through the same C-layout tiled copy warpgroup 1 stored it with
    (stmatrix): for every traced thread the two partitions of the P^T / dS^T buffers and the two retilings of the
    accumulator are the same layouts, so register i of warpgroup 2's P is warpgroup 1's register i (traced on the
    CPU, no compile)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.nvgpu import warp

    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_splitd_sm90 import split_d_kernel_class

    key = SdpaBwdKey("bf16", 256, 256, 1, False, False, False, True, False, False, False, split_d=True, dq_bulk=True, ds_double_buffer=True, sdp_wg=True)
    plan = split_d_kernel_class(key)(key)
    bad, seen = [], []

    @cute.jit
    def trace():
        mma = plan._tiled_mmas()[0]
        s = cute.make_tensor(cute.make_ptr(plan.dtype, 0, cute.AddressSpace.smem, assumed_align=1024), plan._ds_layout().outer)
        st = cute.make_tiled_copy_C(cute.make_copy_atom(warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), plan.dtype), mma)
        ld = cute.make_tiled_copy_C(cute.make_copy_atom(warp.LdMatrix8x8x16bOp(transpose=False, num_matrices=4), plan.dtype), mma)
        acc = cute.make_rmem_tensor(mma.get_slice(0).partition_shape_C((plan.tile_n, plan.tile_m)), cutlass.Float32)
        for t in cutlass.range_constexpr(0, plan.threads_per_wg, 7):
            seen.append(t)
            a, b = st.get_slice(t).partition_D(s), ld.get_slice(t).partition_S(s)
            ra, rb = st.get_slice(t).retile(acc), ld.get_slice(t).retile(acc)
            if cutlass.const_expr(str(a.layout) != str(b.layout) or str(ra.layout) != str(rb.layout)):
                bad.append((t, str(a.layout), str(b.layout)))

    trace()
    assert len(seen) == 19 and not bad, bad[:2]


@pytest.mark.compile_only
def test_d256_dkvrs_ptx_runs_dv_and_dk_as_register_sourced_64x256_wgmmas(tmp_path):
    """One compile of sdpwg + dkvrs (GQA 2, causal, varlen: the predicated dK / dV stores of the epilogue's override):
    dV and dK as 64 x 256 WGMMAs with A from registers (four A registers, one B descriptor), 4 k-steps each per
    query-block loop; S^T / dP^T 64 x 64; dQ 64 x 128 (SS: two descriptors); no local memory."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    key = (
        "'bf16', 256, 256, 2, True, False, False, True, False, True, False, split_d=True, dq_bulk=True, dq_writer=True, "
        "ds_double_buffer=True, sdp_wg=True, dkv_rs=True"
    )
    ptx = _dump(tmp_path, key, "SdpaBwdSplitDBulkKernelSm90", keep="ptx,cubin")
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert {n: shapes.count(n) for n in set(shapes)} == {"m64n64k16": 64, "m64n256k16": 16, "m64n128k16": 8}
    rs = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16[^;]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p", ptx)
    assert len(rs) == 16  # every 64 x 256 WGMMA takes A from registers
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    assert _rs_b_descriptor_constants(ptx) == RS_B_DESCRIPTOR_CONSTANTS
    # the RS GEMMs issued from the two sides of the warpgroup branch: ptxas serializes every WGMMA of the kernel (the
    # positive control of dkvearly's check below; in the DSL's own cubin: a wait after each of the 88 HGMMAs)
    serialized = _ptxas_c7512(tmp_path, "SplitDBulk")
    if serialized is None:
        pytest.skip("no host ptxas that takes the DSL's PTX: the WGMMA serialization check did not run")
    assert serialized


#: The constants the 64 x 256 RS WGMMAs' B descriptors (dO^T / Q^T) add to the shifted base address, per k-step: the
#: layout bits (128-byte swizzle, 1024-byte stride) and the k-step's 256-byte advance (16 in descriptor units).
RS_B_DESCRIPTOR_CONSTANTS = {4611686293338849280 + 128 * k for k in range(4)}


def _rs_b_descriptor_constants(ptx: str) -> set[int]:
    """For every m64n256k16 WGMMA with A from registers: the constant its B descriptor register was formed with
    (``or.b64`` / ``add.s64`` of a base and a literal)."""
    consts = set()
    for reg in re.findall(r"m64n256k16[^;]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, (%rd\d+), p", ptx):
        consts |= {int(c) for c in re.findall(r"(?:or\.b64|add\.s64)\s+" + re.escape(reg) + r", %rd\d+, (\d+);", ptx)}
    return consts


@pytest.mark.compile_only
def test_d256_dkvearly_ptx_issues_both_rs_gemms_from_one_site_and_ptxas_keeps_wgmma_async(tmp_path):
    """One compile of dkvrs + dkvearly (GQA 2, causal, varlen): the two warpgroups' 64 x 256 RS WGMMAs (dV / dK) come
    from ONE call site (4 k-steps per query-block loop: 8, where dkvrs has 16 from its two branches), issued before
    the dS^T barrier; Q / dO released per warpgroup (4 consumer releases per loop instead of 2); no local memory; and
    ptxas keeps the WGMMAs asynchronous (no C7512, which the dkvrs kernel above gets)."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    key = (
        "'bf16', 256, 256, 2, True, False, False, True, False, True, False, split_d=True, dq_bulk=True, dq_writer=True, "
        "ds_double_buffer=True, sdp_wg=True, dkv_rs=True, dkv_early=True"
    )
    ptx = _dump(tmp_path, key, "SdpaBwdSplitDBulkKernelSm90", keep="ptx,cubin")
    # the point of the single RS call site: ptxas keeps the WGMMAs asynchronous (checked first: a planted second call
    # site fails here, not only on the counts below)
    serialized = _ptxas_c7512(tmp_path, "SplitDBulk")
    assert serialized is not True, "ptxas serializes the WGMMAs (C7512)"
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert {n: shapes.count(n) for n in set(shapes)} == {"m64n64k16": 64, "m64n256k16": 8, "m64n128k16": 8}
    rs = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n256k16[^;]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p", ptx)
    assert len(rs) == 8
    # B (dO^T for warpgroup 1, Q^T for 2: sQ's fragment shifted by the warpgroup) carries dkv_rs's descriptor bits
    assert _rs_b_descriptor_constants(ptx) == RS_B_DESCRIPTOR_CONSTANTS
    # per query-block loop the RS group is committed before the dS^T barrier (named barrier 2) and dQ after it
    body = ptx[ptx.index("m64n256k16") :]
    assert body.index("m64n256k16") < body.index("bar.sync \t2, 256") < body.index("m64n128k16")
    assert len(re.findall(r"bar\.arrive 8, 256", ptx)) == 2 and len(re.findall(r"bar\.sync\s+8, 256", ptx)) == 2
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    assert re.search(r"\.entry cudnn_", ptx)
    if serialized is None:
        pytest.skip("no host ptxas that takes the DSL's PTX: the WGMMA serialization check did not run")


# ---------------------------------------------------------------------------------------------------------------------
# m128 (issue #6, session 8): 128-row query blocks at D = D_v = 64 (FA3 / FA4's d64 tile), opt-in


M128W = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128")


def _d64_descs(h=8, hk=2, s=1000):
    q = TensorDesc.contiguous((2, h, s, 64), "bfloat16", "q")
    kv = TensorDesc.contiguous((2, hk, s, 64), "bfloat16", "k")
    lse = TensorDesc.contiguous((2, h, s), "float32", "lse")
    return q, kv, kv, q, q, lse


def test_m128_is_a_d64_schedule_and_what_it_cannot_serve_is_refused(monkeypatch):
    """``m128`` sets tile_m128 (its own kernel-cache entry, tile_m = 128) at D = D_v = 64 with any dQ path (atomics,
    dq_tma, dq_bulk + dq_writer) and stats_tma; refused with a ValueError naming m128: other head dims, deterministic
    (its turn counters count 64-row blocks), no stats_tma or dq_bulk without the writer warp (each spills), m80 / dqt. A plan built without
    ``_tuning`` takes D64_TUNING (m128 and the instruction variants since the session-8 A/B; None: 64-row blocks)."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    plan = SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=M128W)
    assert plan.check_support() and plan.key.tile_m128 and plan.key.dq_bulk and plan.key.dq_writer
    assert SdpaBwdKernelSm90(plan.key).tile_m == 128
    base = SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=M128W[:-1])
    base.check_support()
    assert base.key != plan.key and SdpaBwdKernelSm90(base.key).tile_m == 64
    for tuning in (("stats_tma", "m128"), ("dq_tma", "stats_tma", "ds2", "prepost", "m128"), ("dq_tma", "dq_writer", "stats_tma", "m128")):
        assert SdpaBwdSm90(*_d64_descs(), _tuning=tuning).check_support()
    with pytest.raises(ValueError, match="m128"):
        SdpaBwdSm90(*_descs(), _tuning=("stats_tma", "m128")).check_support()  # d128
    with pytest.raises(ValueError, match="takes stats_tma"):
        SdpaBwdSm90(*_d64_descs(), _tuning=("ds2", "m128")).check_support()
    with pytest.raises(ValueError, match="deterministic"):
        SdpaBwdSm90(*_d64_descs(), deterministic=True, _tuning=("stats_tma", "m128")).check_support()
    with pytest.raises(ValueError, match="takes dq_writer"):
        SdpaBwdSm90(*_d64_descs(), _tuning=("dq_bulk", "stats_tma", "m128")).check_support()
    with pytest.raises(ValueError, match="m128"):
        SdpaBwdSm90(*_d64_descs(), _tuning=("dq_tma", "dqt", "stats_tma", "m128")).check_support()
    default = SdpaBwdSm90(*_d64_descs(), is_causal=True)
    default.check_support()
    assert api.D64_TUNING is not None and "m128" in api.D64_TUNING
    assert default.key.tile_m128 and default.key.pack_once and default.key.dq_rows and default._tuning == api.D64_TUNING
    monkeypatch.setattr(api, "D64_TUNING", None)
    unset = SdpaBwdSm90(*_d64_descs(), is_causal=True)
    unset.check_support()
    assert not unset.key.tile_m128 and unset._tuning == api.CAUSAL_TUNING
    monkeypatch.setattr(api, "D64_TUNING", M128W)
    flipped = SdpaBwdSm90(*_d64_descs())
    flipped.check_support()
    assert flipped.key.tile_m128 and flipped._tuning == M128W + ("pers",)  # a plain non-causal d64 plan: PERSISTENT_SCOPE
    det = SdpaBwdSm90(*_d64_descs(), deterministic=True)  # deterministic plans keep 64-row blocks
    det.check_support()
    assert not det.key.tile_m128 and det.key.deterministic
    d128 = SdpaBwdSm90(*_descs())
    d128.check_support()
    assert not d128.key.tile_m128


#: (key, bulk reduce-adds in the PTX): causal GQA varlen with the default-like dq_bulk + dq_writer schedule (the writer
#: loop unrolled over 2 warpgroups x 2 64-row halves); non-causal GQA dense with dq_tma from the consumers.
M128_KEYS = [
    ("'bf16', 64, 64, 4, True, False, False, True, False, True, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, tile_m128=True", 4),
    ("'bf16', 64, 64, 2, False, False, False, True, False, False, False, dq_tma=True, stats_tma=True, ds_double_buffer=True, tile_m128=True", 0),
]


@pytest.mark.compile_only
@pytest.mark.parametrize("key,bulk", M128_KEYS, ids=["causal-gqa-varlen-bulkw", "gqa-dq_tma"])
def test_m128_ptx_runs_n128_s_dp_wgmmas_without_spills(tmp_path, key, bulk):
    """One compile each: S^T / dP^T as m64n128k16 WGMMAs (4 k-steps each, per query-block loop), dK / dV m64n64k16 over
    the 128 queries (8 k-steps), dQ as two 64-row m64n32k16 atoms per warpgroup; dq_bulk's two reduce-adds per
    warpgroup; no local memory and a zero frame in the DSL's cubin; the Rule 6 symbol; and (where a host ptxas takes the
    PTX) no ptxas note about WGMMA serialization or warpgroup waits (C75xx)."""

    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, key, "SdpaBwdKernelSm90", keep="ptx,cubin")
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert {n: shapes.count(n) for n in set(shapes)} == {"m64n128k16": 16, "m64n64k16": 32, "m64n32k16": 32}
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == bulk
    if bulk == 0:
        assert "cp.reduce.async.bulk.tensor" in ptx and "atom.global.add" not in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    assert re.search(r"\.entry cudnn_", ptx)
    _assert_host_ptxas_clean(tmp_path)


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
def test_m128_dq_bulk_halves_are_the_64_row_fragment_order():
    """dq_bulk at m128, traced on the CPU (no compile) from the objects the kernel uses: for every consumer thread, its
    dQ register p of the 128-row block holds row r + 64 h, column c where register p - 16 h of the 64-row plan holds
    (r, c) (h = p // 16: the dQ MMA's second M-atom repeats the first's order 64 rows down), and the fragment copy puts
    it in half h of the staging buffer at the very offset the 64-row plan uses; so each half is one 64-row
    fragment-ordered block (kernel_key.DQ_BULK_ROWS) that the unchanged postprocess reads, and the halves cover the
    128 x 64 block exactly once."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    head = ("bf16", 64, 64, 1, False, False, False, True, False, False, False)
    p128 = SdpaBwdKernelSm90(SdpaBwdKey(*head, dq_bulk=True, dq_writer=True, stats_tma=True, tile_m128=True))
    p64 = SdpaBwdKernelSm90(SdpaBwdKey(*head, dq_bulk=True))
    bad, seen = [], set()

    @cute.jit
    def trace():
        mma128, mma64 = p128._tiled_mmas()[3], p64._tiled_mmas()[3]
        copy = p128._dq_bulk_copy()
        lay128, lay64 = p128._dq_bulk_layout(), p64._dq_bulk_layout()
        c128, c64 = cute.make_identity_tensor((128, 64)), cute.make_identity_tensor((64, 64))
        s128, s64 = cute.make_identity_tensor(lay128.shape), cute.make_identity_tensor(lay64.shape)
        for vt in cutlass.range_constexpr(p128.num_consumer_wg * p128.threads_per_wg):
            tC128, tC64 = mma128.get_slice(vt).partition_C(c128), mma64.get_slice(vt).partition_C(c64)
            tS128, tS64 = copy.get_slice(vt).partition_D(s128), copy.get_slice(vt).partition_D(s64)
            n = cute.size(tC64)
            if cutlass.const_expr(cute.size(tC128) != 2 * n or cute.size(tS128) != 2 * n):
                bad.append((vt, "sizes"))
            for p in cutlass.range_constexpr(2 * n):
                h = p // n
                r, c = tC128[p]
                r64, c64_ = tC64[p - h * n]
                s = tS128[cute.idx2crd(p, tS128.shape)]
                t = tS64[cute.idx2crd(p - h * n, tS64.shape)]
                if cutlass.const_expr(r != r64 + 64 * h or c != c64_ or s[2] != h or s[0] != t[0] or s[1] != t[1]):
                    bad.append((vt, p))
                seen.add((s[0], s[1], s[2]))

    trace()
    assert not bad, bad[:4]
    assert len(seen) == 128 * 64


# ---------------------------------------------------------------------------------------------------------------------
# Session 8 (issue #6): the main kernel's instruction overhead vs FA4. pack1 (pack_once): P^T / dS^T converted to 16 bits
# once (one inline cvt per register pair; LLVM re-formed dS^T's conversions for the dK WGMMA after the branches that
# follow its stmatrix); dsk (ds_kmajor): dS stored K-major through transposed stmatrix (one base address plus
# immediates per block); dqrows (dq_rows, with m128 + dq_bulk): dQ's 128 rows split over the warpgroups (m64n64k16
# instead of twice as many m64n32k16, one reduce-add per warpgroup).
PD = ("dq_bulk", "stats_tma", "ds2", "prepost", "pack1", "dsk")
M128X = ("dq_bulk", "dq_writer", "stats_tma", "ds2", "prepost", "m128", "pack1", "dsk", "dqrows", "stats4")


def test_pack1_dsk_dqrows_set_their_key_fields_and_bad_combinations_are_refused():
    """pack1 / dsk / dqrows / stats4 map onto pack_once / ds_kmajor / dq_rows / stats_vec4 (their own kernel-cache
    entries); dqrows is a schedule of m128 + dq_bulk, stats4 of stats_tma, dsk excludes m80 / dqt / split_d (their dQ^T reads
    dS^T), pack1 excludes split_d."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    plan = SdpaBwdSm90(*_descs(), _tuning=PD)
    assert plan.check_support() and plan.key.pack_once and plan.key.ds_kmajor and not plan.key.dq_rows
    base = SdpaBwdSm90(*_descs(), _tuning=PD[:4])
    base.check_support()
    assert base.key != plan.key and not (base.key.pack_once or base.key.ds_kmajor)
    m128 = SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=M128X)
    assert m128.check_support() and m128.key.dq_rows and m128.key.tile_m128 and m128.key.pack_once and m128.key.ds_kmajor and m128.key.stats_vec4
    s4 = SdpaBwdSm90(*_descs(), _tuning=PD + ("stats4",))  # 64-row blocks (session 20)
    assert s4.check_support() and s4.key.stats_vec4 and s4.key != plan.key
    with pytest.raises(ValueError, match="stats_vec4"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_bulk", "ds2", "prepost", "stats4")).check_support()  # no staged stats
    with pytest.raises(ValueError, match="dq_rows"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_bulk", "stats_tma", "dqrows")).check_support()  # 64-row blocks
    with pytest.raises(ValueError, match="dq_rows"):
        SdpaBwdSm90(*_d64_descs(), _tuning=("stats_tma", "m128", "dqrows")).check_support()  # atomics
    with pytest.raises(ValueError, match="ds_kmajor"):
        SdpaBwdSm90(*_descs(), _tuning=("dq_tma", "stats_tma", "m80", "dsk")).check_support()
    with pytest.raises(ValueError, match="pack_once"):
        SdpaBwdSm90(*_descs(), _tuning=("split_d", "prepost", "pack1")).check_support()


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
def test_dq_rows_stages_the_fragment_order_the_postprocess_reads():
    """dqrows, traced on the CPU (no compile) from the objects the kernel uses: consumer thread t of warpgroup w holds
    rows 64 w .. 64 w + 63 of the 128-row block (all 64 columns) and its fragment copy (over the staging buffer with its
    warpgroup and half modes swapped) puts each element in 64-row block w at the very offset where the 64-row plan (the
    order the unchanged postprocess reads, ``_dq_order_mma``) puts that (row, column): the two warpgroups cover the
    128 x 64 block exactly once, each its own contiguous 64-row block (one bulk reduce-add each)."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import DQ_BULK_ROWS, SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    head = ("bf16", 64, 64, 1, False, False, False, True, False, False, False)
    rows = SdpaBwdKernelSm90(SdpaBwdKey(*head, dq_bulk=True, dq_writer=True, stats_tma=True, tile_m128=True, dq_rows=True))
    p64 = SdpaBwdKernelSm90(SdpaBwdKey(*head, dq_bulk=True))
    half = DQ_BULK_ROWS * 64 // p64.num_consumer_wg
    order, placed, bad = {}, {}, []

    @cute.jit
    def trace():
        mma_rows, mma64 = rows._tiled_mmas()[3], p64._tiled_mmas()[3]
        copy = rows._dq_bulk_copy()
        view = rows._dq_rows_layout()  # the consumers' view of the staging buffer
        c128, c64 = cute.make_identity_tensor((128, 64)), cute.make_identity_tensor((64, 64))
        s_rows, s64 = cute.make_identity_tensor(view.shape), cute.make_identity_tensor((half, p64.num_consumer_wg))
        if cutlass.const_expr(str(rows._dq_order_mma()) != str(mma64)):
            bad.append("order mma")
        for vt in cutlass.range_constexpr(rows.num_consumer_wg * rows.threads_per_wg):
            tC64, tS64 = mma64.get_slice(vt).partition_C(c64), copy.get_slice(vt).partition_D(s64)
            for p in cutlass.range_constexpr(cute.size(tC64)):
                s = tS64[cute.idx2crd(p, tS64.shape)]
                order[(tC64[p][0], tC64[p][1])] = s[0] + s[1] * half
            tC, tS = mma_rows.get_slice(vt).partition_C(c128), copy.get_slice(vt).partition_D(s_rows)
            if cutlass.const_expr(cute.size(tC) != cute.size(tS)):
                bad.append((vt, "sizes"))
            for p in cutlass.range_constexpr(cute.size(tC)):
                r, c = tC[p]
                off = view(tS[cute.idx2crd(p, tS.shape)])  # the float the kernel stages register p at
                if cutlass.const_expr(off // (2 * half) != vt // rows.threads_per_wg or r // 64 != off // (2 * half)):
                    bad.append((vt, p, "block"))
                placed[(r, c)] = (off // (2 * half), off % (2 * half))

    trace()
    assert not bad, bad[:4]
    assert len(placed) == 128 * 64 and len(set(placed.values())) == 128 * 64
    assert all(order[(r % 64, c)] == off for (r, c), (blk, off) in placed.items())


#: (key, step loops, cvt per loop, stmatrix.trans per loop, wgmma shapes): d128 non-causal and causal GQA with the
#: case's default schedule + pack1 + dsk; d64 m128 with the writer warp + pack1 + dsk + dqrows, dense and causal varlen.
INSTR_KEYS = [
    ("'bf16', 128, 128, 1, False, False, False, False, False, False, False, dq_bulk=True, stats_tma=True, ds_double_buffer=True, pack_once=True, ds_kmajor=True",
     32, 4, {"m64n64k16": 48, "m64n128k16": 16}),
    ("'bf16', 128, 128, 4, True, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, pack_once=True, ds_kmajor=True",
     32, 4, {"m64n64k16": 48, "m64n128k16": 16}),
    ("'bf16', 64, 64, 1, False, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True",
     64, 8, {"m64n128k16": 16, "m64n64k16": 48}),
    ("'bf16', 64, 64, 4, True, False, False, True, False, True, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True",
     64, 8, {"m64n128k16": 16, "m64n64k16": 48}),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,cvt,sts,shapes", INSTR_KEYS, ids=["d128-pd", "d128-causal-gqa-pd", "d64-m128x", "d64-m128x-causal-varlen"])
def test_instruction_variants_ptx_convert_once_store_ds_transposed_and_do_not_spill(tmp_path, key, cvt, sts, shapes):
    """One compile each (two query-block loops: masked and unmasked): each loop converts P^T and dS^T once (``cvt``
    16-bit pairs: the tile's elements per thread; the default converts dS^T twice) plus the dK / dV epilogue's; dS goes
    to shared memory only by transposed stmatrix (``sts`` per loop; the untransposed ones are the epilogue's dK / dV);
    the WGMMA shapes (dqrows: dQ as m64n64k16, no m64n32k16) and one bulk reduce-add per warpgroup at m128; no local
    memory, a zero frame in the DSL's cubin and (where a host ptxas takes the PTX) no C75xx note, no spill."""

    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, key, "SdpaBwdKernelSm90", keep="ptx,cubin")
    d = 128 if "'bf16', 128" in key else 64
    epilogue = 2 * (64 * d // 128) // 2  # dK and dV: 64 x D per warpgroup, a pair per cvt
    assert ptx.count("cvt.rn.bf16x2.f32") == 2 * cvt + epilogue, ptx.count("cvt.rn.bf16x2.f32")
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 2 * sts
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * (64 * d // 128) // 8  # the epilogue's dK / dV
    found = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert {n: found.count(n) for n in set(found)} == shapes
    if "tile_m128" in key:
        assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 2  # one per warpgroup
        # stats_vec4: each loop's lse_log2 / dpsum reads are 16-byte words (8 + 8 per thread and block), no 8-byte ones;
        # varlen's predicated dK / dV stores read shared memory in 16-byte words too (128 x 64 bf16 each, 256 threads)
        varlen = key.split(", ")[9] == "True"
        assert ptx.count("ld.shared.v4.b32") == 2 * 16 + (2 * 128 * 64 * 2 // 16 // 256 if varlen else 0) and "ld.shared.v2.b32" not in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    _assert_host_ptxas_clean(tmp_path)


#: the d64 m128 key (the session-8 instruction variants), causal, no GQA, with and without stats_early (causal GQA with it
#: spills 48 bytes: the library's default rule leaves it off there)
STEARLY_HEAD = "'bf16', 64, 64, 1, True, False, False, False, False, False, False"
STEARLY_TAIL = (
    "dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True"
)


def test_stats_early_is_a_schedule_of_stats4():
    """``stearly`` maps onto stats_early (its own kernel-cache entry) and needs stats4 (a ValueError naming it)."""
    from cudnn.sdpa.bwd.api import D64_TUNING, SdpaBwdSm90

    plan = SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=D64_TUNING + ("stearly",))
    assert plan.check_support() and plan.key.stats_early and plan.key.stats_vec4
    base = SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=D64_TUNING)
    assert base.check_support() and not base.key.stats_early and base.key != plan.key
    with pytest.raises(ValueError, match="stats_early"):
        SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=tuple(t for t in D64_TUNING if t != "stats4") + ("stearly",)).check_support()


@pytest.mark.compile_only
@pytest.mark.parametrize("early", [False, True], ids=["default", "stearly"])
def test_stats_early_ptx_loads_the_words_before_each_wgmma_wait(tmp_path, early):
    """One compile each: with stats_early the first query-block step's eight lse_log2 words (16-byte loads) come before
    the wait for its S^T GEMM and its eight dpsum words before the wait for dP^T (the default, the planted contrast:
    none / only the lse words); 32 16-byte loads either way, no local memory, a zero frame."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, f"{STEARLY_HEAD}, {STEARLY_TAIL}{', stats_early=True' if early else ''}", "SdpaBwdKernelSm90", keep="ptx,cubin")
    lines = ptx.splitlines()
    loads = [i for i, ln in enumerate(lines) if "ld.shared.v4.b32" in ln or "ld.shared.v4.f32" in ln]
    waits = [(i, ln.split()[-1].rstrip(";")) for i, ln in enumerate(lines) if "wgmma.wait_group.sync.aligned" in ln]
    first_s = next(i for i, n in waits if n == "1")  # the first step: S^T issued, dP^T issued, wait for S^T
    first_dp = next(i for i, n in waits if n == "0" and i > first_s)
    before = (sum(i < first_s for i in loads), sum(i < first_dp for i in loads))
    assert before == ((8, 16) if early else (0, 8)), before
    assert len(loads) == 32
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


#: The d128 causal default's key (CAUSAL_TUNING + pers) for the 64-row stats4 test.
CAUSAL_PERS_HEAD = "'bf16', 128, 128, 1, True, False, False, False, False, False, False"
CAUSAL_PERS_TAIL = "dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, prepost_vec=True, prepost_mlp=True, persistent=True"


@pytest.mark.compile_only
@pytest.mark.parametrize("s4", [False, True], ids=["default", "stats4-stearly"])
def test_stats4_at_64_rows_ptx_loads_four_words_per_stat(tmp_path, s4):
    """One compile each (session 20): at the d128 causal default's 64-row blocks, stats4 + stearly reads a thread's 16
    lse_log2 columns as four 16-byte words before the wait for S^T and its dpsum columns as four more before the wait
    for dP^T, in each of the two step copies (masked, unmasked): 16 ``ld.shared.v4`` and no ``ld.shared.v2``; the
    default (the planted contrast) reads them as 32 8-byte pairs. No local memory, a zero frame (stats4 without stearly
    spills 24 bytes here: why the A/B pairs them)."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    extra = ", stats_vec4=True, stats_early=True" if s4 else ""
    ptx = _dump(tmp_path, f"{CAUSAL_PERS_HEAD}, {CAUSAL_PERS_TAIL}{extra}", "SdpaBwdKernelSm90", keep="ptx,cubin")
    lines = ptx.splitlines()
    v4 = [i for i, ln in enumerate(lines) if "ld.shared.v4" in ln]
    v2 = [i for i, ln in enumerate(lines) if "ld.shared.v2" in ln]
    waits = [(i, ln.split()[-1].rstrip(";")) for i, ln in enumerate(lines) if "wgmma.wait_group.sync.aligned" in ln]
    first_s = next(i for i, n in waits if n == "1")
    first_dp = next(i for i, n in waits if n == "0" and i > first_s)
    if s4:
        assert (len(v4), len(v2)) == (16, 0) and (sum(i < first_s for i in v4), sum(i < first_dp for i in v4)) == (4, 8)
    else:
        assert (len(v4), len(v2)) == (0, 32)
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


@pytest.mark.compile_only
def test_grouped_grid_ptx_adds_the_one_division_of_its_3d_branch(tmp_path):
    """One compile (the d64 m128 causal key with grouped_grid): the tile decode keeps the 1-D path's three signed
    divisions (the default key's PTX has exactly these three: seen, session 17) and adds the grouped 3-D grid's one
    (pair -> kv head, batch); both grid shapes are read at runtime (%nctaid.y / .z); no local memory, a zero frame."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, f"{STEARLY_HEAD}, {STEARLY_TAIL}, grouped_grid=True", "SdpaBwdKernelSm90", keep="ptx,cubin")
    assert len(re.findall(r"\bdiv\.s32\b", ptx)) == 4 and not re.findall(r"\b(div|rem)\.u32\b", ptx)
    assert "%nctaid.y" in ptx and "%nctaid.z" in ptx and "%ctaid.z" in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
def test_stats4_permutation_puts_each_threads_four_columns_in_one_16_byte_word():
    """stats4, traced on the CPU (no compile): kernel_key.stats_perm_row permutes every aligned 16-row group, and for
    every consumer thread of the m128 plan the query of its S^T column c (the lse_log2 / dpsum row the kernel needs) is
    stored at 16 (c // 4) + 4 l + c % 4 with l = (query of column 0) / 2: the 16-byte word the kernel loads for columns
    4 i .. 4 i + 3 (``local_tile(.., (4,), (4 i + l,))``)."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa._device.mma_sm90 import acc_view_mn
    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey, stats_perm_row
    from cudnn.sdpa.bwd.kernel_sm90 import SdpaBwdKernelSm90

    assert all(sorted(stats_perm_row(g * 16 + i) for i in range(16)) == list(range(g * 16, g * 16 + 16)) for g in range(8))
    head = ("bf16", 64, 64, 1, False, False, False, True, False, False, False)
    plan = SdpaBwdKernelSm90(SdpaBwdKey(*head, dq_bulk=True, dq_writer=True, stats_tma=True, tile_m128=True, stats_vec4=True))
    bad, seen = [], []

    @cute.jit
    def trace():
        mma = plan._tiled_mmas()[0]
        cS = cute.make_identity_tensor((plan.tile_n, plan.tile_m))
        for t in cutlass.range_constexpr(plan.num_consumer_wg * plan.threads_per_wg):
            tScS_mn = acc_view_mn(mma.get_slice(t).partition_C(cS))
            ncol = cute.size(tScS_mn, mode=[1])
            seen.append(ncol)
            q0 = tScS_mn[0, 0][1]
            for c in cutlass.range_constexpr(ncol):
                q = tScS_mn[0, c][1]
                if cutlass.const_expr(stats_perm_row(q) != 16 * (c // 4) + 4 * (q0 // 2) + c % 4):
                    bad.append((t, c, q))
                for r in cutlass.range_constexpr(cute.size(tScS_mn, mode=[0])):
                    if cutlass.const_expr(tScS_mn[r, c][1] != q):
                        bad.append((t, c, r))

    trace()
    assert not bad, bad[:4]
    assert seen and set(seen) == {32}


# ---------------------------------------------------------------------------------------------------------------------
# n96 (D = 192 / D_v = 128): FA4's 64 x 96 tile (kernel_n96_sm90.py), opt-in until the H200 A/B

N96 = ("dq_bulk", "dq_writer", "prepost", "n96")


def _d192_descs():
    q, k = TensorDesc.contiguous((2, 8, 300, 192), "bfloat16", "q"), TensorDesc.contiguous((2, 2, 257, 192), "bfloat16", "k")
    v, o = TensorDesc.contiguous((2, 2, 257, 128), "bfloat16", "v"), TensorDesc.contiguous((2, 8, 300, 128), "bfloat16", "o")
    return q, k, v, o, o, TensorDesc.contiguous((2, 8, 300), "float32", "lse")


def test_n96_is_a_d192_dv128_schedule_and_bad_combinations_are_refused():
    """``n96`` sets tile_n96 (its own kernel-cache entry) at D = 192 / D_v = 128 with dq_bulk + dq_writer (stats_tma and
    prepost optional), is D192_TUNING's kernel (with stats_tma and ds2, since the session-14 A/Bs), picks
    SdpaBwdN96KernelSm90 for the compile and the postprocess's plan, and refuses with a ValueError naming n96: other head
    dims, no writer warp, deterministic, split_d and the 64-wide kernels' variants (ds2 and pack1: see
    test_n96_takes_ds2_and_pack1_each_on_its_own_and_together)."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_n96_sm90 import SdpaBwdN96KernelSm90
    from cudnn.sdpa.bwd.kernel_prepost_sm90 import SdpaBwdPostprocessSm90
    from cudnn.sdpa.bwd.kernel_sm90 import main_kernel_class

    plan = SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=N96)
    assert plan.check_support() and plan.key.tile_n96 and plan.key.dq_bulk and plan.key.dq_writer and not plan.key.split_d
    default = SdpaBwdSm90(*_d192_descs(), is_causal=True)
    assert default.check_support() and default.key.tile_n96 and default.key.stats_tma and not plan.key.stats_tma and plan.key != default.key
    assert api.D192_TUNING == ("dq_bulk", "dq_writer", "stats_tma", "prepost", "mlp", "n96", "ds2")  # the session-14 H200 A/Bs' pick
    assert main_kernel_class(plan.key) is SdpaBwdN96KernelSm90
    assert type(SdpaBwdPostprocessSm90(plan.key).main_plan) is SdpaBwdN96KernelSm90
    kernel = SdpaBwdN96KernelSm90(plan.key)
    assert (kernel.tile_m, kernel.tile_n, kernel.num_stages) == (64, 96, 2)
    stats = SdpaBwdSm90(*_d192_descs(), window_size=(70, 33), _tuning=(*N96, "stats_tma"))
    assert stats.check_support() and stats.key.tile_n96 and stats.key.stats_tma
    for extra in (("split_d",), ("sdpwg",), ("m80",), ("dsk",), ("dq_tma",), ("m128",), ("dqrows",)):
        with pytest.raises(ValueError, match="n96"):
            SdpaBwdSm90(*_d192_descs(), _tuning=(*N96, *extra)).check_support()
    with pytest.raises(ValueError, match="n96.*dq_bulk \\+ dq_writer"):
        SdpaBwdSm90(*_d192_descs(), _tuning=("dq_bulk", "n96")).check_support()
    with pytest.raises(ValueError, match="deterministic"):
        SdpaBwdSm90(*_d192_descs(), deterministic=True, _tuning=N96).check_support()
    with pytest.raises(ValueError, match="n96.*serves"):
        SdpaBwdSm90(*_descs(), _tuning=N96).check_support()
    q = TensorDesc.contiguous((1, 4, 256, 256), "bfloat16", "q")
    with pytest.raises(NotImplementedError, match="head dim 256"):  # not served: the tuning admits 192 / 128 only
        SdpaBwdSm90(q, q, q, q, q, TensorDesc.contiguous((1, 4, 256), "float32", "lse"), _tuning=N96).check_support()


@pytest.mark.compile_only
@pytest.mark.filterwarnings("ignore:This static loop has")  # the 256 traced threads: a trace-time loop on purpose
def test_n96_fragments_match_the_mask_stats_p_ownership_and_dq_order_they_assume():
    """Traced on the CPU (no compile), for every consumer thread of the n96 plan: its S / dP element (r, c) is query
    ``row + t0[r, 0]``, key ``col + t0[0, c]`` (MaskInfo.apply's static offsets), one query per fragment row (the row's
    lse_log2 / dpsum), keys inside its warpgroup's 48 (P's buffer is warpgroup-private: one warpgroup barrier), every
    element of the 64 x 96 tile once; and the dQ MMA's C layout is split-D bulk's (dq_bulk's accumulator order, so the
    postprocess is unchanged)."""
    import cutlass
    import cutlass.cute as cute

    from cudnn.sdpa._device.mma_sm90 import acc_view_mn
    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_n96_sm90 import SdpaBwdN96KernelSm90
    from cudnn.sdpa.bwd.kernel_splitd_bulk_sm90 import SdpaBwdSplitDBulkKernelSm90

    head = ("bf16", 192, 128, 2, True, False, False, True, False, False, False)
    plan = SdpaBwdN96KernelSm90(SdpaBwdKey(*head, dq_bulk=True, dq_writer=True, tile_n96=True))
    splitd = SdpaBwdSplitDBulkKernelSm90(SdpaBwdKey(*head, split_d=True, dq_bulk=True, dq_writer=True, ds_double_buffer=True))
    bad, seen, layouts = [], set(), []

    @cute.jit
    def trace():
        mma = plan._tiled_mmas()[0]
        cS = cute.make_identity_tensor((plan.tile_m, plan.tile_n))
        t0 = acc_view_mn(mma.get_slice(0).partition_C(cS))
        for t in cutlass.range_constexpr(plan.num_consumer_wg * plan.threads_per_wg):
            tScS_mn = acc_view_mn(mma.get_slice(t).partition_C(cS))
            row, col, w = tScS_mn[0, 0][0], tScS_mn[0, 0][1], t // plan.threads_per_wg
            for r in cutlass.range_constexpr(cute.size(tScS_mn, mode=[0])):
                for c in cutlass.range_constexpr(cute.size(tScS_mn, mode=[1])):
                    q, k = tScS_mn[r, c]
                    seen.add((q, k))
                    if cutlass.const_expr(q != row + t0[r, 0][0] or k != col + t0[0, c][1] or q != tScS_mn[r, 0][0]):
                        bad.append((t, r, c))
                    if cutlass.const_expr(k // plan.keys_per_wg != w):
                        bad.append((t, "key", k))
        layouts.append((str(plan._dq_order_mma().tv_layout_C), str(splitd._dq_order_mma().tv_layout_C)))

    trace()
    assert not bad, bad[:4]
    assert len(seen) == plan.tile_m * plan.tile_n
    assert layouts and layouts[0][0] == layouts[0][1], layouts


#: (key, query-block loops): non-causal, causal (GQA 4), causal bottom-right fp16 with sinks, window (mask_left: a
#: third loop) varlen with stats_tma
N96_KEYS = [
    ("'bf16', 192, 128, 1, False, False, False, True, False, False, False", 2),
    ("'bf16', 192, 128, 4, True, False, False, True, False, False, False", 2),
    ("'fp16', 192, 128, 2, True, False, True, True, True, False, False, prepost_vec=True", 2),
    ("'bf16', 192, 128, 2, True, True, False, True, False, True, False, stats_tma=True", 3),
]  # fmt: skip


def _n96_ptx(tmp_path, key, loops):
    """Compile the n96 kernel of ``key`` and check what every n96 schedule shares: per query-block loop and warpgroup 40
    m64n48k16 WGMMAs (S 12, dP 8, dV^T 8, dK^T 12) and 6 m64n96k16 (dQ), P and dS by stmatrix (3 + 3 a loop), dK^T / dV^T
    by the transposed one (9 + 6), the writer warp's two bulk reduce-adds; returns the PTX."""
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, f"{key}, dq_bulk=True, dq_writer=True, tile_n96=True", "SdpaBwdN96KernelSm90", keep="ptx,cubin")
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16)", ptx)
    assert {n: shapes.count(n) for n in set(shapes)} == {"m64n48k16": 40 * loops, "m64n96k16": 6 * loops}
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 6 * loops
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 15
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 2
    return ptx


@pytest.mark.compile_only
@pytest.mark.parametrize("key,loops", N96_KEYS, ids=["noncausal", "causal-gqa4", "causal-br-fp16-sinks", "window-varlen-stats"])
def test_n96_ptx_runs_48_key_and_96_column_wgmmas_unserialized_without_spills(tmp_path, key, loops):
    """One compile each: per query-block loop and warpgroup 40 m64n48k16 WGMMAs (S 12, dP 8, dV^T 8, dK^T 12) and 6
    m64n96k16 (dQ); P and dS by stmatrix (3 + 3 a loop), dK^T / dV^T by the transposed one (9 + 6); the writer warp's two
    bulk reduce-adds; no local memory, a zero frame in the DSL's cubin; the Rule 6 symbol; and (where a host ptxas
    takes the PTX) no C75xx note (WGMMA serialization) and no spill."""
    from cudnn_testing.compile_only import frame_sizes

    ptx = _n96_ptx(tmp_path, key, loops)
    assert "atom.global.add" not in ptx and "red.global.add" not in ptx and "cp.reduce.async.bulk.tensor" not in ptx
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    assert re.search(r"\.entry cudnn_", ptx)
    _assert_host_ptxas_clean(tmp_path)


def test_n96_takes_ds2_and_pack1_each_on_its_own_and_together():
    """n96's opt-in follow-ups: ds2 (ds_double_buffer: a second dS buffer) and pack1 (pack_once) each set their field
    (their own kernel-cache entries), alone, together and with stats_tma; the rest of the 64-wide kernels' variants
    stay refused next to them."""
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    keys = set()
    for extra in ((), ("ds2",), ("pack1",), ("ds2", "pack1")):
        for stats in ((), ("stats_tma",)):
            plan = SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=(*N96, *stats, *extra))
            assert plan.check_support() and plan.key.tile_n96 and plan.key.stats_tma == bool(stats)
            assert plan.key.ds_double_buffer == ("ds2" in extra) and plan.key.pack_once == ("pack1" in extra)
            keys.add(plan.key)
    assert len(keys) == 8
    for extra in (("ds2", "dsk"), ("pack1", "sdpwg"), ("ds2", "pack1", "split_d")):
        with pytest.raises(ValueError, match="n96"):
            SdpaBwdSm90(*_d192_descs(), _tuning=(*N96, "stats_tma", *extra)).check_support()


#: n96's shared memory in bytes (mbarriers padded to 1 KiB, then Q 2 x 24, dO 2 x 16, K 36, V 24, P + dS 24 KiB (ds2:
#: + 12), fp32 dQ staging 48 KiB, stats_tma's rows 1 KiB), by (stats_tma, ds2); an sm90 CTA has 232,448
N96_SMEM = {(False, False): 218112, (True, False): 219136, (False, True): 230400, (True, True): 231424}


@pytest.mark.compile_only
@pytest.mark.parametrize("stats,ds2", list(N96_SMEM), ids=["n96", "n96-stats", "n96-ds2", "n96-stats-ds2"])
def test_n96_shared_memory_fits_an_sm90_cta_with_ds2(stats, ds2):
    """The SharedStorage the kernel launches with (the layouts of the parent's __call__, built on the CPU): ds2 adds one
    64 x 96 dS buffer (12 KiB) and leaves 1 KiB with stats_tma; printed for the record (pytest -s)."""
    import cutlass.cute as cute

    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_n96_sm90 import SMEM_LIMIT, SdpaBwdN96KernelSm90

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    head = ("bf16", 192, 128, 4, True, False, False, True, False, False, False)
    plan = SdpaBwdN96KernelSm90(SdpaBwdKey(*head, dq_bulk=True, dq_writer=True, tile_n96=True, stats_tma=stats, ds_double_buffer=ds2))
    got = []

    @cute.jit
    def trace():
        q_cols, do_cols = plan._q_do_atom_cols()
        sQ = plan._smem_layout(plan.tile_m, plan.head_dim, plan.num_stages, atom_cols=q_cols)
        sdO = plan._smem_layout(plan.tile_m, plan.head_dim_v, plan.num_stages, atom_cols=do_cols)
        sK = plan._smem_layout(plan.tile_n, plan.head_dim, atom_cols=plan._k_atom_cols())
        sV = plan._smem_layout(plan.tile_n, plan.head_dim_v)
        sPdS = plan._ds_layout()
        got.append((cute.cosize(sPdS), plan._shared_storage(sQ, sdO, sK, sV, sPdS, plan._dq_bulk_layout()).size_in_bytes()))

    trace()
    print(f"n96 stats_tma={stats} ds2={ds2}: P / dS {got[0][0] * 2} B, SharedStorage {got[0][1]} B of {SMEM_LIMIT}")
    assert got == [(64 * 96 * (3 if ds2 else 2), N96_SMEM[(stats, ds2)])]
    assert got[0][1] <= SMEM_LIMIT == 232448


#: (key, query-block loops, ds2, pack1): n96's follow-ups compiled causal GQA 4 (ds2), non-causal (pack1), windowed
#: varlen fp16 (both; mask_left: a third loop), all with stats_tma
N96_FOLLOWUP_KEYS = [
    ("'bf16', 192, 128, 4, True, False, False, True, False, False, False, stats_tma=True, prepost_vec=True, ds_double_buffer=True", 2, True, False),
    ("'bf16', 192, 128, 1, False, False, False, True, False, False, False, stats_tma=True, prepost_vec=True, pack_once=True", 2, False, True),
    ("'fp16', 192, 128, 2, True, True, False, True, False, True, False, stats_tma=True, ds_double_buffer=True, pack_once=True", 3, True, True),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,loops,ds2,pack1", N96_FOLLOWUP_KEYS, ids=["ds2-causal-gqa4", "pack1-noncausal", "ds2-pack1-window-varlen-fp16"])
def test_n96_ds2_drops_the_cta_ds_free_barrier_and_pack1_converts_inline(tmp_path, key, loops, ds2, pack1):
    """One compile each: the n96 WGMMAs (per loop and warpgroup 40 m64n48k16, 6 m64n96k16) and stmatrix counts unchanged;
    ds2: per loop ONE CTA-wide barrier of the consumers (``bar.sync 2, 256``: "dS written") instead of two, and two
    warpgroup barriers (128 threads: "P free", "P written") instead of one; pack1: 24 inline ``cvt.rn`` pairs per loop
    (12 for P, 12 for dS) and none without it; no local memory, a zero frame; no C75xx note, no spill (host ptxas)."""
    from cudnn_testing.compile_only import frame_sizes

    ptx = _n96_ptx(tmp_path, key, loops)
    assert len(re.findall(r"\bbar\.sync\s+2, 256;", ptx)) == (1 if ds2 else 2) * loops
    assert len(re.findall(r"\bbar\.sync\s+%r\d+, 128;", ptx)) == (2 if ds2 else 1) * loops
    kind = "f16x2" if "'fp16'" in key else "bf16x2"
    inline_cvt = len(re.findall(rf"// begin inline asm\s+cvt\.rn\.{kind}\.f32", ptx))
    assert inline_cvt == (24 * loops if pack1 else 0), inline_cvt
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]
    _assert_host_ptxas_clean(tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# Fixed-cost variants (notes/bwd_fixed_cost.md A / B): spin (spin_wait) and kvq (kv_with_q)
# ---------------------------------------------------------------------------------------------------------------
def test_spin_and_kvq_set_their_key_fields_and_kvq_refuses_split_d():
    """``spin`` / ``kvq`` set spin_wait / kv_with_q (default off: their own kernel-cache entries) on top of any default
    schedule (the d128 causal and d192 n96 ones here); kvq with split_d is refused with a ValueError naming kvq, spin is
    taken there."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS, SdpaBwdKey

    assert (TUNING_FIELDS["spin"], TUNING_FIELDS["kvq"]) == ("spin_wait", "kv_with_q")
    base = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING)
    base.check_support()
    assert (base.key.spin_wait, base.key.kv_with_q) == (False, False)
    for extra, fields in ((("spin",), (True, False)), (("kvq",), (False, True)), (("spin", "kvq"), (True, True))):
        plan = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + extra)
        assert plan.check_support() and (plan.key.spin_wait, plan.key.kv_with_q) == fields
        assert plan.key != base.key and plan.key.dq_writer
    n96 = SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=api.D192_TUNING + ("spin", "kvq"))
    assert n96.check_support() and n96.key.tile_n96 and n96.key.spin_wait and n96.key.kv_with_q
    split = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs", "dkvearly")
    assert SdpaBwdSm90(*_d256_descs(), _tuning=split + ("spin",)).check_support()
    with pytest.raises(ValueError, match="kv_with_q \\(kvq\\)"):
        SdpaBwdSm90(*_d256_descs(), _tuning=split + ("kvq",)).check_support()
    with pytest.raises(ValueError, match="kv_with_q \\(kvq\\)"):
        SdpaBwdKey("bf16", 128, 128, 1, False, False, False, False, False, False, False, split_d=True, kv_with_q=True)


#: hint-less (spinning) / hinted (sleeping: NANOSLEEP in SASS) full- or empty-barrier waits in the PTX
_SPIN_WAIT = "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64"
_HINTED_WAIT = re.compile(r"mbarrier\.try_wait\.parity\.shared\.b64 P1, \[[^\]]+\], [^,]+, 10000000;")


def _tx_bytes(ptx: str, op: str) -> list[int]:
    """The byte counts (in PTX order) of the ``op`` mbarrier instructions (``mbarrier.arrive.expect_tx.shared.b64`` or
    ``mbarrier.expect_tx.relaxed.cta.shared.b64``): each takes a register set by one ``mov.b32`` of an immediate."""
    out = []
    for reg in re.findall(re.escape(op) + r"\s+(?:%rd\d+, )?\[[^\]]+\], (%r\d+);", ptx):
        movs = re.findall(r"mov\.b32\s+" + re.escape(reg) + r", (\d+);", ptx)
        assert len(movs) == 1, (reg, movs)
        out.append(int(movs[0]))
    return out


_ARRIVE_TX = "mbarrier.arrive.expect_tx.shared.b64"
_EXPECT_TX = "mbarrier.expect_tx.relaxed.cta.shared.b64"
#: d128 causal, the case's default schedule (CAUSAL_TUNING): two query-block loops, 5 consumer waits (K / V, then Q and
#: dO per loop), 3 producer ones (the K / V slot, Q's and dO's)
_D128_CAUSAL_DEFAULT = (
    "'bf16', 128, 128, 1, True, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, prepost_vec=True"
)


@pytest.mark.compile_only
def test_spin_ptx_spins_on_every_consumer_wait_and_keeps_the_producers_hinted(tmp_path):
    """One compile (d128 causal default + spin): the 5 consumer full-barrier waits (K / V, Q and dO in each of the two
    query-block loops) are hint-less try_wait loops (2 try_waits each: first try, then the loop; ptxas emits no
    NANOSLEEP for them), the producer's 3 empty-barrier waits keep the hinted form; the loads are unchanged (one K / V
    arrive of 64 KiB, Q / dO + their stats rows); no local memory, a zero frame."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, _D128_CAUSAL_DEFAULT + ", spin_wait=True", "SdpaBwdKernelSm90", keep="ptx,cubin")
    assert ptx.count(_SPIN_WAIT) == 2 * 5
    assert len(_HINTED_WAIT.findall(ptx)) == 3  # the default: 8 (every wait hinted)
    assert _tx_bytes(ptx, _ARRIVE_TX) == [2 * 128 * 128 * 2, 64 * 128 * 2 + 64 * 4, 64 * 128 * 2 + 64 * 4]
    assert _EXPECT_TX not in ptx
    assert "griddepcontrol" not in ptx  # pdl off
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


#: (key, kernel class, K bytes, V bytes, Q stage bytes, dO stage bytes, consumer waits): kvq on the d128 causal default,
#: spin + kvq on the d64 default (m128, 128-row query blocks) and on the d192 n96 default (96 keys, GQA, varlen, window)
KVQ_KEYS = [
    (_D128_CAUSAL_DEFAULT + ", kv_with_q=True", "SdpaBwdKernelSm90", 128 * 128 * 2, 128 * 128 * 2, 64 * 128 * 2 + 256, 64 * 128 * 2 + 256, 4),
    ("'bf16', 64, 64, 1, False, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, "
     "prepost_vec=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True, spin_wait=True, kv_with_q=True",
     "SdpaBwdKernelSm90", 128 * 64 * 2, 128 * 64 * 2, 128 * 64 * 2 + 512, 128 * 64 * 2 + 512, 4),
    ("'bf16', 192, 128, 2, True, True, False, True, False, True, False, dq_bulk=True, dq_writer=True, stats_tma=True, prepost_vec=True, "
     "tile_n96=True, ds_double_buffer=True, spin_wait=True, kv_with_q=True",
     "SdpaBwdN96KernelSm90", 96 * 192 * 2, 96 * 128 * 2, 64 * 192 * 2 + 256, 64 * 128 * 2 + 256, 6),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,kernel,tx_k,tx_v,tx_q,tx_do,waits", KVQ_KEYS, ids=["d128-causal-kvq", "d64-m128-spinkvq", "d192-n96-window-varlen-spinkvq"])
def test_kvq_ptx_puts_k_and_v_on_the_first_q_and_do_stage_barriers(tmp_path, key, kernel, tx_k, tx_v, tx_q, tx_do, waits):
    """One compile each: the K / V barrier is gone (no arrive of K + V's bytes, no wait on it: 2 producer waits instead
    of 3, one consumer wait less); K's and V's bytes are added by two ``mbarrier.expect_tx`` (no arrive), each before
    the producer arrival of the Q / dO stage it rides on (K, Q0, V, dO0 in issue order), whose own arrivals keep Q's /
    dO's bytes plus the stats rows; with spin every consumer wait spins; no local memory, a zero frame."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, key, kernel, keep="ptx,cubin")
    assert _tx_bytes(ptx, _EXPECT_TX) == [tx_k, tx_v]
    assert _tx_bytes(ptx, _ARRIVE_TX) == [tx_q, tx_do]  # the default's first arrive, K + V's bytes, is gone
    order = [m.group(0) for m in re.finditer(re.escape(_EXPECT_TX) + "|" + re.escape(_ARRIVE_TX), ptx)]
    assert order == [_EXPECT_TX, _ARRIVE_TX, _EXPECT_TX, _ARRIVE_TX]
    spin = "spin_wait=True" in key
    assert len(_HINTED_WAIT.findall(ptx)) == 2 + (0 if spin else waits)
    assert ptx.count(_SPIN_WAIT) == (2 * waits if spin else 0)
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


#: (key, kernel class, consumer waits): spin on the split-D kernels, whose ``step`` overrides the 64-wide one's: the d256
#: default (split_d bulk with sdpwg + dkvrs + dkvearly: each warpgroup waits for Q and dO on its own, 4 a loop) and
#: the plain split_d kernel at d128; begin_key_block's K / V wait is the shared one
SPIN_SPLIT_D_KEYS = [
    ("'bf16', 256, 256, 1, True, False, False, False, False, False, False, split_d=True, dq_bulk=True, dq_writer=True, "
     "ds_double_buffer=True, prepost_vec=True, sdp_wg=True, dkv_rs=True, dkv_early=True, spin_wait=True", "SdpaBwdSplitDBulkKernelSm90", 9),
    ("'bf16', 128, 128, 1, True, False, False, False, False, False, False, split_d=True, prepost_vec=True, spin_wait=True", "SdpaBwdSplitDKernelSm90", 5),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,kernel,waits", SPIN_SPLIT_D_KEYS, ids=["d256-default-spin", "splitd-d128-spin"])
def test_spin_ptx_reaches_the_split_d_kernels_steps(tmp_path, key, kernel, waits):
    """One compile each: every consumer full-barrier wait spins (2 hint-less try_waits a wait), only the producer's 3
    empty-barrier waits keep the hinted form; no local memory, a zero frame."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    ptx = _dump(tmp_path, key, kernel, keep="ptx,cubin")
    assert ptx.count(_SPIN_WAIT) == 2 * waits
    assert len(_HINTED_WAIT.findall(ptx)) == 3
    assert "st.local" not in ptx and "ld.local" not in ptx and frame_sizes(tmp_path) == [0]


# ---------------------------------------------------------------------------------------------------------------
# Programmatic Dependent Launch (pdl): preprocess -> main -> postprocess overlap their launches
# ---------------------------------------------------------------------------------------------------------------
def test_pdl_sets_its_key_field_on_every_default_schedule():
    """``pdl`` sets SdpaBwdKey.pdl (default off: its own kernel-cache entry) on top of each default schedule (d128 causal
    and non-causal, d64, d192 n96, d256 split-D bulk), deterministic and varlen plans included, and with spin / kvq."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS

    assert TUNING_FIELDS["pdl"] == "pdl"
    base = SdpaBwdSm90(*_descs(), is_causal=True)
    base.check_support()
    assert not base.key.pdl
    plans = [
        SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + ("pdl",)),
        SdpaBwdSm90(*_descs(), _tuning=api.D128_NONCAUSAL_TUNING + ("pdl",)),
        SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + ("spin", "kvq", "pdl")),
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("stats_tma", "ds2", "prepost", "pdl")),
        SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=api.D64_TUNING + ("pdl",)),
        SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=api.D192_TUNING + ("pdl",)),
        SdpaBwdSm90(*_d256_descs(), _tuning=api.D256_TUNING + ("pdl",)),
        SdpaBwdSm90(*_d256_descs(), deterministic=True, _tuning=api.SPLIT_D_DETERMINISTIC_TUNING + ("pdl",)),
    ]
    for plan in plans:
        assert plan.check_support() and plan.key.pdl and plan.key != base.key


_GDC_WAIT = "griddepcontrol.wait;"
_GDC_LAUNCH = "griddepcontrol.launch_dependents;"
_G2S_TENSOR = re.compile(r"cp\.async\.bulk\.tensor\.\dd\.shared::cta\.global")
_STATS_BULK = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
#: (key, kernel class, griddepcontrol.wait count, K + V bytes): the defaults + pdl (d128 causal, d128 non-causal m80, d64
#: m128, d192 n96 with GQA, window and varlen, d256 split-D bulk), d128 causal + kvq + pdl (K's bytes only before the
#: wait) and a deterministic varlen plan (64-wide kernel, atomic dQ). Waits: the producer's, the writer warp's
#: (dq_writer), the consumers', a varlen CTA past its sequence's keys.
PDL_KEYS = [
    (_D128_CAUSAL_DEFAULT + ", pdl=True", "SdpaBwdKernelSm90", 3, 2 * 128 * 128 * 2),
    ("'bf16', 128, 128, 1, False, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, "
     "prepost_vec=True, tile_m80=True, pack_once=True, pdl=True", "SdpaBwdKernelSm90", 3, 2 * 128 * 128 * 2),
    ("'bf16', 64, 64, 1, False, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, "
     "prepost_vec=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True, pdl=True", "SdpaBwdKernelSm90", 3, 2 * 128 * 64 * 2),
    ("'bf16', 192, 128, 2, True, True, False, True, False, True, False, dq_bulk=True, dq_writer=True, stats_tma=True, prepost_vec=True, "
     "tile_n96=True, ds_double_buffer=True, pdl=True", "SdpaBwdN96KernelSm90", 4, 96 * (192 + 128) * 2),
    ("'bf16', 256, 256, 1, False, False, False, False, False, False, False, split_d=True, dq_bulk=True, dq_writer=True, "
     "ds_double_buffer=True, prepost_vec=True, sdp_wg=True, dkv_rs=True, dkv_early=True, pdl=True", "SdpaBwdSplitDBulkKernelSm90", 3, 2 * 64 * 256 * 2),
    (_D128_CAUSAL_DEFAULT + ", kv_with_q=True, pdl=True", "SdpaBwdKernelSm90", 3, 128 * 128 * 2),
    ("'bf16', 128, 128, 2, True, False, True, False, False, True, True, stats_tma=True, ds_double_buffer=True, prepost_vec=True, pdl=True",
     "SdpaBwdKernelSm90", 3, 2 * 128 * 128 * 2),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize(
    "key,kernel,waits,tx_kv", PDL_KEYS, ids=["d128-causal", "d128-noncausal-m80", "d64-m128", "d192-n96-varlen", "d256", "d128-causal-kvq", "d128-det-varlen"]
)
def test_pdl_ptx_waits_for_the_preprocess_after_k_and_v_are_issued(tmp_path, key, kernel, waits, tx_kv):
    """One compile each: ``griddepcontrol.wait`` once per waiting role; the producer's (the PTX's first) comes after
    K / V's TMA loads and their barrier's arrival (kvq: K's expect_tx and load only) and before any Q / dO / stats
    load; one ``griddepcontrol.launch_dependents`` (the consumers, after the epilogue: after the dK / dV TMA stores of
    dense plans); no local memory."""
    ptx = _dump(tmp_path, key, kernel)
    assert ptx.count(_GDC_WAIT) == waits
    assert ptx.count(_GDC_LAUNCH) == 1
    head, tail = ptx[: ptx.index(_GDC_WAIT)], ptx[ptx.index(_GDC_WAIT) :]
    assert _G2S_TENSOR.search(head) and _G2S_TENSOR.search(tail)  # K / V before the wait, Q / dO after it
    if "kv_with_q" in key:
        assert _tx_bytes(head, _EXPECT_TX) == [tx_kv] and _ARRIVE_TX not in head  # K only: Q0's arrival and V after the wait
    else:
        assert _tx_bytes(head, _ARRIVE_TX) == [tx_kv]  # the K / V barrier's arrival only
    assert _STATS_BULK not in head
    stores = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta", ptx)]
    if stores:  # dense: the dK / dV TMA stores precede the trigger
        assert max(stores) < ptx.index(_GDC_LAUNCH)
    assert "st.local" not in ptx and "ld.local" not in ptx


@pytest.mark.compile_only
@pytest.mark.parametrize("kernel", ["Preprocess", "Postprocess"])
def test_pdl_prepost_ptx_waits_first_and_the_preprocess_triggers_the_main_kernel(tmp_path, kernel):
    """d128 causal default + pdl: each small kernel waits once before its first global load; the preprocess triggers
    its dependents once (after its loads, before the dQ accumulator's zeroing stores); the postprocess does not. The
    default's kernels have neither instruction."""
    build = "kernel_prepost_sm90 import " + ("compile_sdpa_bwd_pre" if kernel == "Preprocess" else "compile_sdpa_bwd_post") + " as f"
    ptx = _dump(tmp_path / "pdl", _D128_CAUSAL_DEFAULT + ", pdl=True", kernel, build)
    assert ptx.count(_GDC_WAIT) == 1
    assert ptx.index(_GDC_WAIT) < ptx.index("ld.global")
    if kernel == "Preprocess":
        assert ptx.count(_GDC_LAUNCH) == 1
        assert ptx.rindex("ld.global") < ptx.index(_GDC_LAUNCH) < ptx.rindex("st.global")
    else:
        assert _GDC_LAUNCH not in ptx
    base = _dump(tmp_path / "base", _D128_CAUSAL_DEFAULT, kernel, build)
    assert "griddepcontrol" not in base


# ---------------------------------------------------------------------------------------------------------------
# kv_prefetch (kvpf): TMA L2 prefetch of the next wave's K / V (notes/bwd_fixed_cost.md C)
# ---------------------------------------------------------------------------------------------------------------
def test_kvpf_sets_its_key_field_and_refuses_varlen_and_split_d():
    """``kvpf`` sets kv_prefetch on the dense defaults (d128 causal, d64, d192 n96, with pdl too); varlen and split_d
    keys are refused with a ValueError naming kvpf (the d256 default plan too)."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS, SdpaBwdKey

    assert TUNING_FIELDS["kvpf"] == "kv_prefetch"
    for plan in (
        SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + ("kvpf",)),
        SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + ("pdl", "kvpf")),
        SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=api.D64_TUNING + ("kvpf",)),
        SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=api.D192_TUNING + ("kvpf",)),
    ):
        assert plan.check_support() and plan.key.kv_prefetch
    with pytest.raises(ValueError, match="kv_prefetch \\(kvpf\\)"):
        SdpaBwdSm90(*_d256_descs(), _tuning=api.D256_TUNING + ("kvpf",)).check_support()
    with pytest.raises(ValueError, match="kv_prefetch \\(kvpf\\)"):
        SdpaBwdKey("bf16", 128, 128, 1, False, False, False, False, False, True, False, stats_tma=True, kv_prefetch=True)


_L2_PREFETCH = re.compile(r"cp\.async\.bulk\.prefetch\.tensor\.\dd\.L2\.global")
#: (key, kernel class, K + V TMA boxes): kvpf on the d128 causal default (with pdl), the d64 m128 default and the d192 n96
#: default (dense, GQA, window)
KVPF_KEYS = [
    (_D128_CAUSAL_DEFAULT + ", pdl=True, kv_prefetch=True", "SdpaBwdKernelSm90", 4),
    ("'bf16', 64, 64, 1, False, False, False, False, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, ds_double_buffer=True, "
     "prepost_vec=True, tile_m128=True, pack_once=True, ds_kmajor=True, dq_rows=True, stats_vec4=True, kv_prefetch=True", "SdpaBwdKernelSm90", 2),
    ("'bf16', 192, 128, 2, True, True, False, True, False, False, False, dq_bulk=True, dq_writer=True, stats_tma=True, prepost_vec=True, "
     "tile_n96=True, ds_double_buffer=True, kv_prefetch=True", "SdpaBwdN96KernelSm90", None),
]  # fmt: skip


@pytest.mark.compile_only
@pytest.mark.parametrize("key,kernel,boxes", KVPF_KEYS, ids=["d128-causal-pdl", "d64-m128", "d192-n96"])
def test_kvpf_ptx_prefetches_the_next_waves_k_and_v_from_one_lane_after_the_last_load(tmp_path, key, kernel, boxes):
    """One compile each: one TMA L2 prefetch per K / V box (as many as the K / V loads' boxes), each under an
    ``elect.sync`` and after the producer's last Q / dO load in the PTX (its loop's tail); no local memory."""
    ptx = _dump(tmp_path, key, kernel)
    found = [m.start() for m in _L2_PREFETCH.finditer(ptx)]
    consumers = ptx.index("setmaxnreg.inc")  # the producer branch's text ends where the consumers' begins
    loads = [m.start() for m in _G2S_TENSOR.finditer(ptx) if m.start() < consumers]
    assert found and (boxes is None or len(found) == boxes)
    assert max(loads) < min(found) and max(found) < consumers  # the producer's last TMA instructions
    assert ptx.rfind("elect.sync", 0, min(found)) > max(loads)  # one lane issues them
    assert "st.local" not in ptx and "ld.local" not in ptx


def test_pers_sets_its_key_field_and_sizes_the_counter_slot():
    """``pers`` sets persistent on the dense defaults (d128 causal / non-causal m80, d64 m128); varlen, deterministic,
    split_d / n96 and the prologue / grid opt-ins it does not serve are refused naming pers; the workspace gains one
    128-byte slot (the tile counter) in the semaphore's place."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS, SdpaBwdKey, workspace_layout

    assert TUNING_FIELDS["pers"] == "persistent"
    for plan in (
        SdpaBwdSm90(*_descs(), is_causal=True, _tuning=api.CAUSAL_TUNING + ("pers",)),
        SdpaBwdSm90(*_descs(), _tuning=api.D128_NONCAUSAL_TUNING + ("pers",)),
        SdpaBwdSm90(*_d64_descs(), is_causal=True, _tuning=api.D64_TUNING + ("pers",)),
    ):
        assert plan.check_support() and plan.key.persistent
    with pytest.raises(ValueError, match="persistent \\(pers\\)"):
        SdpaBwdSm90(*_d256_descs(), _tuning=api.D256_TUNING + ("pers",)).check_support()
    with pytest.raises(ValueError, match="persistent \\(pers\\)"):
        SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=api.D192_TUNING + ("pers",)).check_support()
    head = ("bf16", 128, 128, 1, True, False, False, False, False, False)
    for bad in ("kv_with_q", "pdl", "kv_prefetch", "grouped_grid"):
        with pytest.raises(ValueError, match=f"persistent \\(pers\\).*{bad}"):
            SdpaBwdKey(*head, False, dq_bulk=True, persistent=True, **{bad: True})
    with pytest.raises(ValueError, match="persistent \\(pers\\).*varlen"):
        SdpaBwdKey("bf16", 128, 128, 1, True, False, False, False, False, True, False, dq_bulk=True, persistent=True)
    with pytest.raises(ValueError, match="persistent \\(pers\\).*deterministic"):
        SdpaBwdKey(*head, True, persistent=True)
    plain, pers = workspace_layout(2, 8, 300, 128), workspace_layout(2, 8, 300, 128, persistent=True)
    assert pers[:5] == plain[:5] and pers[5] == plain[5] + 128


def test_pers_joins_the_defaults_of_plain_plans_in_persistent_scope_only():
    """A plan built without ``_tuning`` runs the persistent grid exactly at api.PERSISTENT_SCOPE's (D, causal) pairs
    (d64 non-causal, d128 causal) when it is plain: dense, no window, no sinks, not deterministic; every other plan's
    default is the one before session 19."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    assert api.PERSISTENT_SCOPE == {(64, False), (128, True)}
    sinks = TensorDesc.contiguous((8,), "float32", "sinks")

    def thd(d):
        q, kv = TensorDesc.contiguous((1000, 8, d), "bfloat16", "q"), TensorDesc.contiguous((1000, 2, d), "bfloat16", "k")
        cu = TensorDesc.contiguous((4,), "int32", "cu_seqlens_q")
        return (q, kv, kv, q, q, TensorDesc.contiguous((8, 1000), "float32", "lse")), dict(
            cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=1000, max_seqlen_kv=1000
        )

    plans = {
        "d64": (SdpaBwdSm90(*_d64_descs()), True),
        "d64 causal": (SdpaBwdSm90(*_d64_descs(), is_causal=True), False),
        "d64 window": (SdpaBwdSm90(*_d64_descs(), window_size=(70, 33)), False),
        "d64 varlen": (SdpaBwdSm90(*thd(64)[0], **thd(64)[1]), False),
        "d128 causal": (SdpaBwdSm90(*_descs(), is_causal=True), True),
        "d128": (SdpaBwdSm90(*_descs()), False),
        "d128 causal sinks": (SdpaBwdSm90(*_descs(), is_causal=True, sinks=sinks), False),
        "d128 causal deterministic": (SdpaBwdSm90(*_descs(), is_causal=True, deterministic=True), False),
        "d128 causal varlen": (SdpaBwdSm90(*thd(128)[0], is_causal=True, **thd(128)[1]), False),
    }
    for name, (plan, pers) in plans.items():
        assert plan.check_support(), name
        assert plan.key.persistent == pers and ("pers" in plan._tuning) == pers, name
        before = tuple(t for t in plan._tuning if t != "pers")
        assert before in (api.D64_TUNING, api.CAUSAL_TUNING, api.D128_NONCAUSAL_TUNING, api.DEFAULT_TUNING) or plan.key.deterministic, name
    assert SdpaBwdSm90(*_d64_descs()).scratch_workspace_bytes() == SdpaBwdSm90(*_d64_descs(), _tuning=api.D64_TUNING).scratch_workspace_bytes() + 128


@pytest.mark.compile_only
@pytest.mark.parametrize(
    "key,readers",
    [
        (_D128_CAUSAL_DEFAULT + ", persistent=True", 288),
        ("'bf16', 128, 128, 1, False, False, False, False, False, False, False, dq_bulk=True, stats_tma=True, ds_double_buffer=True, "
         "prepost_vec=True, persistent=True", 256),
    ],
    ids=["d128-causal-writer", "d128-no-writer"],
)  # fmt: skip
def test_pers_ptx_draws_tiles_from_one_lane_and_posts_them_through_the_mailbox(tmp_path, key, readers):
    """One compile each: one ``atom.global.add`` (the producer's ticket, lane 0, broadcast by one shuffle); the mailbox's
    two barriers initialized with 1 and the readers' count (the consumers, and the dq_writer warp with it); no local
    memory in the PTX (ptxas spills a few per-tile values of the tile loop: the default keys' tests pin frame 0)."""
    ptx = _dump(tmp_path, key, "SdpaBwdKernelSm90")
    assert ptx.count("atom.global.add") == 1 and ptx.count("shfl.sync.idx") >= 1
    assert ptx.count("mbarrier.init") == 2 * 2 * 2 + 2 + 2  # Q / dO rings (2 stages, full + empty), K / V, the mailbox
    assert re.search(rf"mov\.(?:u|b)32\s+%r\d+, {readers};", ptx)  # the empty barrier's arrival count
    assert "st.local" not in ptx and "ld.local" not in ptx


@pytest.mark.compile_only
def test_pers_preprocess_zeroes_the_tile_counter_from_one_thread(tmp_path):
    """The preprocess of a persistent key stores one int32 zero (the counter) behind a block / thread check; the
    default preprocess has no such store."""
    build = "kernel_prepost_sm90 import compile_sdpa_bwd_pre as f"
    base = _ptx(tmp_path / "base", ", dq_bulk=True, prepost_vec=True", "SdpaBwdPreprocessSm90", build)
    pers = _ptx(tmp_path / "pers", ", dq_bulk=True, prepost_vec=True, persistent=True", "SdpaBwdPreprocessSm90", build)
    assert pers.count("st.global.u32") + pers.count("st.global.b32") == base.count("st.global.u32") + base.count("st.global.b32") + 1


# ---------------------------------------------------------------------------------------------------------------
# elr (elect_release, session 19): the step's Q / dO stage releases from the lane elect.sync picks
# ---------------------------------------------------------------------------------------------------------------
def test_elect_release_sets_its_key_field_and_refuses_split_d_and_n96():
    """``elr`` sets elect_release on top of the 64-wide kernel's defaults (with pers at d128 causal); the split-D and
    n96 kernels keep their own releases, so elr there is a ValueError naming it."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS

    assert TUNING_FIELDS["elr"] == "elect_release"
    base = SdpaBwdSm90(*_descs(), is_causal=True)
    base.check_support()
    plan = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=base._tuning + ("elr",))
    assert plan.check_support() and plan.key.elect_release and not base.key.elect_release and plan.key.persistent
    assert SdpaBwdSm90(*_d64_descs(), _tuning=api.D64_TUNING + ("elr",)).check_support()
    split = ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "sdpwg", "dkvrs", "dkvearly")
    with pytest.raises(ValueError, match="elect_release"):
        SdpaBwdSm90(*_d256_descs(), _tuning=split + ("elr",)).check_support()
    with pytest.raises(ValueError, match="elect_release"):
        SdpaBwdSm90(*_d192_descs(), is_causal=True, _tuning=api.D192_TUNING + ("elr",)).check_support()


@pytest.mark.compile_only
def test_elect_release_ptx_elects_the_four_step_releases(tmp_path):
    """Two compiles of the d128 causal default with pers: elr adds one ``elect.sync`` per Q / dO release of each of the
    two query-block loops (4); the empty-barrier arrives are as many as without it."""
    base = _dump(tmp_path / "base", _D128_CAUSAL_DEFAULT + ", persistent=True", "SdpaBwdKernelSm90")
    elr = _dump(tmp_path / "elr", _D128_CAUSAL_DEFAULT + ", persistent=True, elect_release=True", "SdpaBwdKernelSm90")
    assert elr.count("elect.sync") == base.count("elect.sync") + 4
    assert elr.count("mbarrier.arrive") == base.count("mbarrier.arrive")


# ---------------------------------------------------------------------------------------------------------------
# dqfs (dq_first_store, session 20): no zeroed dQ accumulator; the first dq_writer to reach a query block stores
# ---------------------------------------------------------------------------------------------------------------
def test_dq_first_store_sets_its_key_field_refuses_other_dq_paths_and_sizes_the_flags():
    """``dqfs`` sets dq_first_store on the dq_bulk + dq_writer schedules of the 64-wide kernel (the d128 causal default
    with or without pers, the m80 and m128 defaults, THD varlen plans); without the writer and with split_d it is a
    ValueError naming it. The workspace's semaphore slot grows by one int32 flag per 64 scratch
    rows, after the tile counter's 128 bytes when persistent; a block's flag is the one of the rows it starts in."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90
    from cudnn.sdpa.bwd.kernel_key import TUNING_FIELDS, dq_flag_index, dq_flags_offset, workspace_layout

    assert TUNING_FIELDS["dqfs"] == "dq_first_store"
    for tuning in (api.CAUSAL_TUNING + ("pers", "dqfs"), api.CAUSAL_TUNING + ("dqfs",)):
        plan = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=tuning)
        assert plan.check_support() and plan.key.dq_first_store and plan.key.persistent == ("pers" in tuning)
    assert SdpaBwdSm90(*_d64_descs(), _tuning=api.CAUSAL_TUNING + ("dqfs",)).check_support()
    assert SdpaBwdSm90(*_descs(), _tuning=api.D128_NONCAUSAL_TUNING + ("dqfs",)).check_support()  # m80
    assert SdpaBwdSm90(*_d64_descs(), _tuning=api.D64_TUNING + ("dqfs",)).check_support()  # m128 + dqrows
    for descs, tuning in (
        (_descs(), api.DEFAULT_TUNING + ("dqfs",)),  # no writer
        (_d256_descs(), ("split_d", "dq_bulk", "dq_writer", "ds2", "prepost", "dqfs")),
    ):
        with pytest.raises(ValueError, match="dq_first_store"):
            SdpaBwdSm90(*descs, _tuning=tuning).check_support()
    cu = TensorDesc.contiguous((4,), "int32", "cu_seqlens_q")
    q, kv = TensorDesc.contiguous((1000, 8, 128), "bfloat16", "q"), TensorDesc.contiguous((1000, 2, 128), "bfloat16", "k")
    thd = SdpaBwdSm90(
        q, kv, kv, q, q, TensorDesc.contiguous((8, 1000), "float32", "lse"), is_causal=True,
        cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=1000, max_seqlen_kv=1000,
    )  # fmt: skip
    assert thd.check_support() and thd.key.varlen and thd.key.dq_first_store  # CAUSAL_TUNING's, varlen too
    assert [dq_flag_index(r) for r in (0, 64, 80, 128, 160, 240, 256 + 128)] == [0, 1, 1, 2, 2, 3, 6]
    rows = 2 * 8 * 384  # B * H * S_pad (S = 300 padded to 3 x 128)
    plain, flags = workspace_layout(2, 8, 300, 128), workspace_layout(2, 8, 300, 128, dq_flags=True)
    both = workspace_layout(2, 8, 300, 128, persistent=True, dq_flags=True)
    assert flags[:5] == plain[:5] and flags[5] == plain[5] + 4 * rows // 64 and both[5] == flags[5] + 128
    assert (dq_flags_offset(False), dq_flags_offset(True)) == (0, 32)


@pytest.mark.compile_only
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "pers"])
def test_dq_first_store_ptx_takes_one_ticket_per_block_and_the_preprocess_zeroes_no_accumulator(tmp_path, persistent):
    """Compiles of the d128 causal default with and without dqfs (the planted contrast): the main kernel's dq_writer
    takes one ticket (``atom.relaxed.gpu``), polls the flag with ``ld.acquire.gpu``, issues per consumer warpgroup a bulk
    store (ticket 0) or a bulk reduce-add, and marks the flag once (``cp.async.bulk.wait_group 0``, an async-proxy fence,
    ``red.release.gpu``); none of it without dqfs. The preprocess writes no 16-byte zero chunks (the accumulator) and
    the postprocess reads one flag per 64-row block. No local memory, zero frames."""
    from cudnn_testing.compile_only import frame_sizes

    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    key = _D128_CAUSAL_DEFAULT + ", prepost_mlp=True" + (", persistent=True" if persistent else "")
    build_pre = "kernel_prepost_sm90 import compile_sdpa_bwd_pre as f"
    build_post = "kernel_prepost_sm90 import compile_sdpa_bwd_post as f"
    texts = {}
    for name, extra in (("base", ""), ("dqfs", ", dq_first_store=True")):
        d = tmp_path / name
        texts[name] = (
            _dump(d / "main", key + extra, "SdpaBwdKernelSm90", keep="ptx,cubin"),
            _dump(d / "pre", key + extra, "SdpaBwdPreprocessSm90", build_pre),
            _dump(d / "post", key + extra, "SdpaBwdPostprocessSm90", build_post),
        )
    (main0, pre0, post0), (main1, pre1, post1) = texts["base"], texts["dqfs"]
    for ins, n in (("atom.relaxed.gpu.global.add.s32", 1), ("red.release.gpu.global.add.s32", 1), ("cp.async.bulk.global.shared::cta", 2)):
        assert (main0.count(ins), main1.count(ins)) == (0, n), ins
    assert main1.count("ld.acquire.gpu.global") >= 1 and main0.count("ld.acquire") == 0
    assert main1.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == main0.count(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"
    )
    assert re.search(r"cp\.async\.bulk\.wait_group\s+0;", main1) and main1.count("fence.proxy.async.global") == 2
    assert pre0.count("st.global.v4") > 0 and pre1.count("st.global.v4") == 0
    loads = [len(re.findall(r"\bld\.global\.(?:u32|b32|s32)\b", p)) for p in (post0, post1)]
    assert loads[1] == loads[0] + 1, loads
    for name in ("base", "dqfs"):
        assert frame_sizes(tmp_path / name / "main") == [0]
    assert "st.local" not in main1 and "ld.local" not in main1
