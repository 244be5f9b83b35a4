"""CPU tier of the backward main kernel's schedule variants (cudnn.sdpa.bwd.kernel_key.TUNING_FIELDS): the private
``_tuning`` switch maps onto the compile key (and is part of it), bad combinations are refused, and one compile with
every variant on emits what each variant is for (compile-only, CUTE_DSL_ARCH=sm_90a): TMA reduce-adds instead of
fp32 atomics (dq_tma), bulk copies of the lse / dpsum rows (stats_tma), two barriers less per query block (ds2).
Kept small: one main-kernel compile (~4 s) plus the default one it is compared with."""

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
    with pytest.raises(ValueError, match="deterministic"):
        SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("dq_tma",)).check_support()
    with pytest.raises(ValueError, match="split_d combines"):
        SdpaBwdSm90(*_descs(), _tuning=("split_d", "dq_tma")).check_support()
    # the variants that keep the atomic dQ path keep the deterministic mode
    plan = SdpaBwdSm90(*_descs(), deterministic=True, _tuning=("stats_tma", "ds2", "prepost"))
    assert plan.check_support()


def _ptx(
    tmp_path, extra: str, kernel: str = "SdpaBwdKernelSm90", build: str = "kernel_sm90 import compile_sdpa_bwd_main as f", key_head: str = "'bf16', 128, 128, 4"
) -> str:
    # In a subprocess: the DSL keeps dumping artifacts for the rest of a process once CUTE_DSL_KEEP was seen.
    code = (
        f"from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey; from cudnn.sdpa.bwd.{build}; "
        f"f(SdpaBwdKey({key_head}, True, False, False, False, False, False, False{extra}))"
    )
    os.makedirs(str(tmp_path), exist_ok=True)  # the DSL writes nothing into a missing dump directory
    env = dict(os.environ, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tmp_path))
    texts = []
    for root, _, files in os.walk(str(tmp_path)):
        texts += [open(os.path.join(root, f)).read() for f in files if f.endswith(".ptx") and kernel in f]
    assert len(texts) == 1
    return texts[0]


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
def test_prepost_variant_ptx_is_vectorized_with_shuffled_row_sums(tmp_path):
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")
    build = "kernel_prepost_sm90 import compile_sdpa_bwd_pre as f"
    base = _ptx(tmp_path / "base", "", "SdpaBwdPreprocessSm90", build)
    tuned = _ptx(tmp_path / "tuned", ", prepost_vec=True", "SdpaBwdPreprocessSm90", build)
    assert "shfl.sync.bfly" in tuned and "shfl.sync" not in base  # the dO . O sum is split over 4 lanes
    assert "ld.global.v4" in tuned and "st.global.v4" in tuned  # 16-byte loads of O / dO, 16-byte zeroing of dQ_accum


def test_head_dim_256_is_served_only_by_the_split_d_variant():
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    q = TensorDesc.contiguous((1, 4, 256, 256), "bfloat16", "q")
    lse = TensorDesc.contiguous((1, 4, 256), "float32", "lse")
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse, _tuning=("ds2",)).check_support()
    plan = SdpaBwdSm90(q, q, q, q, q, lse, is_causal=True, _tuning=("split_d",))
    assert plan.check_support() and plan.key.split_d and plan.key.head_dim == 256


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
    takes them (dq_tma dropped for deterministic plans), an explicit ``_tuning`` wins; D256_TUNING = None declines
    head dim 256."""
    from cudnn.sdpa.bwd import api
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    # the defaults since the H200 A/B (docs/benchmarks/sdpa_bwd_quick.md)
    assert api.DEFAULT_TUNING == ("dq_tma", "stats_tma", "ds2", "prepost") and api.D256_TUNING == ("split_d", "ds2", "prepost")
    plan = SdpaBwdSm90(*_descs(), is_causal=True)
    plan.check_support()
    assert plan.key.dq_tma and plan.key.stats_tma and plan.key.ds_double_buffer and plan.key.prepost_vec
    det = SdpaBwdSm90(*_descs(), is_causal=True, deterministic=True)
    det.check_support()
    assert not det.key.dq_tma and det.key.stats_tma and det.key.deterministic
    explicit = SdpaBwdSm90(*_descs(), is_causal=True, _tuning=())
    explicit.check_support()
    assert not (explicit.key.dq_tma or explicit.key.stats_tma or explicit.key.ds_double_buffer or explicit.key.prepost_vec)
    q = TensorDesc.contiguous((1, 4, 256, 256), "bfloat16", "q")
    lse = TensorDesc.contiguous((1, 4, 256), "float32", "lse")
    wide = SdpaBwdSm90(q, q, q, q, q, lse)
    wide.check_support()
    assert wide.key.split_d and wide.key.ds_double_buffer and not wide.key.dq_tma
    monkeypatch.setattr(api, "D256_TUNING", None)
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse).check_support()
    with pytest.raises(NotImplementedError, match="head dim 256"):
        SdpaBwdSm90(q, q, q, q, q, lse, deterministic=True).check_support()
