"""Compile-only tier of the attention backward (CPU, CUTE_DSL_ARCH=sm_90a): the three kernels build for each
configuration family, the main kernel's PTX really uses WGMMA, TMA loads and stores and fp32 atomics, every symbol
carries the ``cudnn`` prefix, and a second plan that differs only in extents is a kernel-cache hit (Rule 4).
Kept small: 3 configurations of ~4 s each plus one PTX dump."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import kernel_symbols, symbol_violations
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.compile_only


@pytest.fixture(autouse=True)
def _floor():
    skip_unless_cutedsl("4.8.0", "cudnn.sdpa backward")


def test_ptx_has_wgmma_tma_atomics_and_cudnn_symbols(tmp_path):
    # In a subprocess: the DSL keeps dumping artifacts for the rest of a process once CUTE_DSL_KEEP was seen.
    code = (
        "from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey; from cudnn.sdpa.bwd.kernel_sm90 import compile_sdpa_bwd_main; "
        "from cudnn.sdpa.bwd.kernel_prepost_sm90 import compile_sdpa_bwd_pre, compile_sdpa_bwd_post; "
        "key = SdpaBwdKey('bf16', 128, 128, 1, True, False, False, False, False, False, False); "
        "compile_sdpa_bwd_main(key); compile_sdpa_bwd_pre(key); compile_sdpa_bwd_post(key)"
    )
    env = dict(os.environ, CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(tmp_path))
    files = glob.glob(os.path.join(str(tmp_path), "**", "*.ptx"), recursive=True)
    main = "\n".join(open(f).read() for f in files if "SdpaBwdKernelSm90" in f)
    allptx = "\n".join(open(f).read() for f in files)
    assert "wgmma.mma_async" in main
    assert "cp.async.bulk.tensor" in main  # TMA loads of Q, K, V, dO
    assert "global.shared::cta" in main  # TMA stores of dK, dV
    assert "atom.global.add.v2.f32" in main  # dQ accumulation: 8-byte vector fp32 reductions
    assert "setmaxnreg" in main  # warp specialization
    assert "st.local" not in main and "ld.local" not in main  # no register spills to local memory in the PTX
    syms = kernel_symbols(allptx)
    assert len(syms) == 3 and not symbol_violations(syms), syms


# One compile per configuration family: dtype x head dim x masks x GQA.
CONFIGS = [
    ("bf16", 128, 128, 4, True, False, False, False, False, False, False),  # causal top-left, GQA 4
    ("fp16", 64, 64, 1, False, False, False, True, False, False, False),  # no mask, LSE in log2 units
    ("bf16", 96, 96, 2, True, True, True, False, False, False, False),  # sliding window, bottom-right
    ("bf16", 128, 128, 4, True, False, True, False, True, True, True),  # THD varlen + sinks + deterministic
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c[0]}-d{c[1]}-g{c[3]}-r{int(c[4])}l{int(c[5])}br{int(c[6])}")
def test_compiles(cfg):
    from cudnn.sdpa.bwd.kernel_key import SdpaBwdKey
    from cudnn.sdpa.bwd.kernel_prepost_sm90 import compile_sdpa_bwd_post, compile_sdpa_bwd_pre
    from cudnn.sdpa.bwd.kernel_sm90 import compile_sdpa_bwd_main

    key = SdpaBwdKey(*cfg)
    assert compile_sdpa_bwd_main(key) is not None
    assert compile_sdpa_bwd_pre(key) is not None
    assert compile_sdpa_bwd_post(key) is not None


def test_new_extents_are_a_cache_hit():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    def plan(b, h, hk, sq, sk):
        q = TensorDesc.contiguous((b, h, sq, 128), "bfloat16", "q")
        kv = TensorDesc.contiguous((b, hk, sk, 128), "bfloat16", "k")
        lse = TensorDesc.contiguous((b, h, sq), "float32", "lse")
        p = SdpaBwdSm90(q, kv, kv, q, q, lse, is_causal=True)
        p.compile()
        return p

    first = plan(2, 8, 2, 1000, 3000)
    misses = kernel_cache.stats.misses
    second = plan(9, 16, 4, 17, 123457)
    assert kernel_cache.stats.misses == misses, "new extents recompiled the backward (Rule 4)"
    assert second._compiled_kernel is first._compiled_kernel


def test_thd_token_totals_are_a_cache_hit():
    from cudnn.kernel_cache import kernel_cache
    from cudnn.sdpa.bwd.api import SdpaBwdSm90

    def plan(t_q, t_kv, batch):
        q = TensorDesc.contiguous((t_q, 8, 64), "bfloat16", "q")
        kv = TensorDesc.contiguous((t_kv, 2, 64), "bfloat16", "k")
        cu = TensorDesc.contiguous((batch + 1,), "int32", "cu_seqlens_q")
        lse = TensorDesc.contiguous((8, t_q), "float32", "lse")
        p = SdpaBwdSm90(q, kv, kv, q, q, lse, is_causal=True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=t_q, max_seqlen_kv=t_kv)
        p.compile()
        return p

    first = plan(1000, 3000, 3)
    misses = kernel_cache.stats.misses
    second = plan(17, 123457, 9)
    assert kernel_cache.stats.misses == misses, "a new token total recompiled the THD backward (Rule 4)"
    assert second._compiled_kernel is first._compiled_kernel


@pytest.mark.parametrize("cfg", ["causal", "noncausal", "d64", "sinks-det"])
def test_tvm_ffi_entries_parse_the_launch_arguments(cfg):
    """With apache-tvm-ffi (the default launch entry since session 12) each of the three tvm-ffi entries accepts the
    arguments ``_launch`` builds (int addresses, None, ints, stride tuples, floats, a raw stream handle): on this
    GPU-less machine every call gets past the argument check and fails only at the launch (the CUDA driver), never
    with a TypeError. CPU tensors stand in for the operands, so it never runs where a GPU exists."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("launches on CPU addresses: the GPU host runs execute() itself (test_sdpa_bwd_gpu.py)")
    from cudnn._compat import tvm_ffi_available
    from cudnn.sdpa.bwd.api import SdpaBwdSm90, _launch

    if not tvm_ffi_available():
        pytest.skip("apache-tvm-ffi is not installed: the DSL's generic entry is used")
    d = 64 if cfg == "d64" else 128
    B, H, S = 2, 4, 300
    q = torch.empty(B, S, H, d, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.empty(B, S, H, d, dtype=torch.bfloat16).transpose(1, 2)
    lse = torch.empty(B, H, S)
    sinks = torch.empty(H) if cfg == "sinks-det" else None
    plan = SdpaBwdSm90(q, k, k, q, q, lse, q, k, k, is_causal=cfg != "noncausal", sinks=sinks, deterministic=cfg == "sinks-det")
    plan.compile()
    assert plan._tvm_ffi and all(type(e).__name__ == "Function" for e in plan._entries)
    n = plan.scratch_workspace_bytes()
    big = torch.empty(n + 256, dtype=torch.uint8)
    off = (-big.data_ptr()) % 256
    errors = []

    def recorder(i):
        def call(*args):
            try:
                plan._entries[i](*args)
            except Exception as exc:  # the launch itself must be what fails
                errors.append((i, type(exc).__name__, str(exc)))

        return call

    _launch(
        tuple(recorder(i) for i in range(3)), plan.key, q, k, k, q, q, lse, q, k, k, sinks, None if sinks is None else torch.empty(H),
        None, None, None, None, big[off : off + n], plan._mask_window, None, 0, False, True,
    )  # fmt: skip
    assert [e[0] for e in errors] == [0, 1, 2], errors
    for i, kind, msg in errors:
        assert kind == "RuntimeError" and "driver" in msg.lower(), (i, kind, msg[:300])
