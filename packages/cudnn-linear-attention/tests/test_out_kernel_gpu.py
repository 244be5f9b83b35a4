"""The chunk-parallel forward's output kernels, both families (KDA; GDN = ``row_scaled``): the default since session 6
(``KdaParallelOutKey.v_wide``: ``kda/chunk_parallel_out_persistent_kernel.py``, one CTA per (chunk, head) over the
whole V), against the session-5 kernel (``v_wide = False``: ``kda/chunk_parallel_out_kernel.py``,
the ``out-base`` variant).

GPU tier: the ``out-base`` plan (``schedule="parallel"``) runs once and fills its workspace (qg, p, h, vnt, rf) and its
output; then each output kernel under test -- keyed and ``cute.compile``d directly, exactly as
``_host/chunk_parallel.py::compile_parallel`` builds it -- is launched on that same workspace into a fresh poisoned
``o``. They change only where and when the same operations happen, so their output must equal the session-5 kernel's
bit for bit (and is also held to the FlashAttention tolerance against the fp32 token-by-token recurrence:
``_parallel_cases.py``). Both epilogues: 16-byte stores (``o`` 16-byte aligned
with strides of 8 elements) and the 2-byte fallback (an ``o`` whose head stride is D + 1). End to end, the default plan
equals the ``out-base`` plan bit for bit.

Compile-only tier (CPU, ``CUTE_DSL_ARCH=sm_90a``): the default key routes to the V-wide kernel and ``v_wide = False``
to the session-5 one; the default builds with no local memory (frame size 0), its WGMMAs and both store paths in the
PTX, the cudnn prefix.

    ci/gpu_tests.sh packages/cudnn-linear-attention/tests/test_out_kernel_gpu.py
"""

from __future__ import annotations

import os
import re
import sys

import pytest

from cudnn_testing.markers import skip_unless_sm90

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/_*_cases.py: --import-mode=importlib adds no test folder
from _delta_rule_cases import GDN, KDA, frame_sizes, skip_unless_family_dsl  # noqa: E402

_COMPILED: dict = {}


def _compile_out(key):
    """The output kernel ``key`` routes to, compiled from placeholder pointers as ``compile_parallel`` does (memoized
    per key in this module: each variant is its own artifact)."""
    hit = _COMPILED.get(key)
    if hit is None:
        import cuda.bindings.driver as cuda
        import cutlass.cute as cute
        from cutlass import Int32, Int64

        from cudnn.linear_attention._host.chunk_parallel import fake_workspace_pointers
        from cudnn.linear_attention._host.launch import fake_gmem_ptr as fp
        from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KimiDeltaAttentionParallelOut

        kernel_t = KimiDeltaAttentionParallelOut.for_key(key)
        ptrs = (fp("BFloat16", 2), fp("Int32", 4) if key.varlen else None, *fake_workspace_pointers())
        hit = _COMPILED[key] = cute.compile(kernel_t(key), *ptrs, *[Int32(8)] * 6, (Int64(8), Int64(8)), cuda.CUstream(0))
    return hit


# -- GPU tier ----------------------------------------------------------------------------------------------------


def _default_run(fam, q, k, v, g, beta, h0, cu, l2norm, o):
    """The ``out-base`` parallel plan's execute into ``o`` (the session-5 output kernel; final state requested):
    returns its workspace."""
    import torch

    from cudnn.linear_attention._host.chunk_parallel import set_parallel_options
    from cudnn_testing.data import poison

    n = (cu.shape[0] - 1) if cu is not None else (q.shape[0] if q.dim() == 4 else 1)
    ht = poison(torch.empty(n, v.shape[-2], v.shape[-1], q.shape[-1], device="cuda"))
    plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=l2norm, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
    set_parallel_options(plan, "out-base")
    plan.compile()
    ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
    plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
    return ws


def _variant_out(fam, fields, ws, q, v, cu, o):
    """Launch the output kernel of ``KdaParallelOutKey(**fields)`` on the default plan's workspace ``ws`` into ``o``
    (the launch of ``_host/chunk_parallel.py::launch_parallel``)."""
    from cudnn.datatypes import data_type
    from cudnn.linear_attention._host.chunk_parallel import parallel_extents, workspace_bytes, workspace_pointers
    from cudnn.linear_attention._host.launch import gmem_ptr, launch_stream
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey

    T = q.shape[0] if q.dim() == 3 else q.shape[0] * q.shape[1]
    if cu is not None:
        n, L = cu.shape[0] - 1, 0
    elif q.dim() == 4:
        n, L = q.shape[0], q.shape[1]
    else:
        n, L = 1, q.shape[0]
    heads, d = v.shape[-2], q.shape[-1]
    ext = parallel_extents(T, n, L, cu is not None)
    ws_ptrs = workspace_pointers(ws, workspace_bytes(ext.slots, heads, d), "test_out_kernel", q.device, ext.slots, heads, d)
    key = KdaParallelOutKey(head_dim=d, varlen=cu is not None, row_scaled=not fam.gate_per_key, **fields)
    kernel = _compile_out(key)
    strides = (int(o.stride(-3)), int(o.stride(-2)))
    kernel(
        gmem_ptr(o, data_type.BFLOAT16, 2),
        gmem_ptr(cu, data_type.INT32, 4),
        *ws_ptrs,
        T,
        n,
        L,
        ext.chunks_per_seq,
        ext.slots,
        heads,
        strides,
        launch_stream(None, q.device),
    )


def _check_variants(fam, variants, q, k, v, g, beta, h0, cu, l2norm, batched, make_o=None):
    """Every variant's ``o`` == the session-5 kernel's, bit for bit; all within the tolerance of the fp32 recurrence."""
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import poison

    make_o = make_o or (lambda: torch.empty_like(v))
    o_def = poison(make_o())
    ws = _default_run(fam, q, k, v, g, beta, h0, cu, l2norm, o_def)
    outs = []
    for fields in variants:
        o = poison(make_o())
        _variant_out(fam, fields, ws, q, v, cu, o)
        outs.append(o)
    torch.cuda.synchronize()
    ref_o, _, low_o, _ = cases.refs(fam, q, k, v, g, beta, h0, l2norm, cu, batched)
    cases.check(o_def, ref_o, low_o, "o out-base")
    assert torch.isfinite(o_def.float()).all()
    for fields, o in zip(variants, outs, strict=True):
        d = (o.float() - o_def.float()).abs().max().item()
        assert torch.equal(o, o_def), f"{fields}: max |variant - out-base| = {d}"
        cases.check(o, ref_o, low_o, f"o {fields}")


@pytest.fixture
def _gpu_fam():
    skip_unless_sm90()
    pytest.importorskip("torch")

    def use(fam):
        skip_unless_family_dsl(fam)
        return fam

    return use


DEFAULT = {}  # v_wide (the key's default)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "fam, D, l2norm, variants",
    [
        (KDA, 128, True, (DEFAULT,)),
        (KDA, 64, False, (DEFAULT,)),
        (GDN, 128, True, (DEFAULT,)),
        (GDN, 64, False, (DEFAULT,)),
    ],
    ids=["kda-d128", "kda-d64", "gdn-d128", "gdn-d64"],
)
def test_variants_bitwise_equal_default_on_varlen(_gpu_fam, fam, D, l2norm, variants):
    """Varlen: 1-token, one-chunk, one-past-a-chunk, empty and long (24 chunks) sequences packed, GVA (4 v heads over
    2 q/k heads), an initial state; 16-byte epilogue."""
    import _parallel_cases as cases

    from cudnn_testing.data import cu_seqlens

    fam = _gpu_fam(fam)
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, D, l2norm, len(cases.LENGTHS), "safe_gate")
    _check_variants(fam, variants, q, k, v, g, beta, h0, cu, l2norm, False)


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_variants_bitwise_equal_default_dense_and_long_thd(_gpu_fam, fam):
    """Dense [B = 2, L = 300, H, D] (the dense chunk-slot table, a partial last chunk per sequence) and one 4096-token
    THD sequence (64 chunks), no initial state, K = 128."""
    import _parallel_cases as cases

    fam = _gpu_fam(fam)
    q, k, v, g, beta, _ = cases.inputs(fam, (2, 300), 2, 2, 128, True, 2)
    _check_variants(fam, (DEFAULT,), q, k, v, g, beta, None, None, True, True)
    q, k, v, g, beta, _ = cases.inputs(fam, (4096,), 2, 2, 128, True, 1)
    _check_variants(fam, (DEFAULT,), q, k, v, g, beta, None, None, True, False)


@pytest.mark.gpu
def test_unaligned_output_takes_the_two_byte_stores(_gpu_fam):
    """``o`` a [T, H, D] view of [T, H, D + 1] storage (head stride D + 1: no 16-byte rows): the variant's in-kernel
    check picks the session-5 kernel's 2-byte stores; still bitwise that kernel (which writes the same view)."""
    import _parallel_cases as cases
    import torch

    from cudnn_testing.data import cu_seqlens

    fam = _gpu_fam(KDA)
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "safe_gate")
    T, H, D = v.shape

    def make_o():
        return torch.empty(T, H, D + 1, dtype=torch.bfloat16, device="cuda")[..., :D]

    _check_variants(fam, (DEFAULT,), q, k, v, g, beta, h0, cu, True, False, make_o)


@pytest.mark.gpu
@pytest.mark.parametrize("fam", [KDA, GDN], ids=["kda", "gdn"])
def test_default_plan_is_bitwise_the_out_base_plan(_gpu_fam, fam):
    """End to end: the default plan (V-wide output kernel) gives the ``out-base`` plan's (the session-5 output kernel)
    ``o`` and final state bit for bit (varlen batch, GVA, K = 128), and ``set_parallel_options`` reaches the key."""
    import _parallel_cases as cases
    import torch

    from cudnn.linear_attention._host import chunk_parallel as host
    from cudnn_testing.data import cu_seqlens, poison

    fam = _gpu_fam(fam)
    cu = cu_seqlens(cases.LENGTHS, "cuda")
    q, k, v, g, beta, h0 = cases.inputs(fam, (sum(cases.LENGTHS),), 4, 2, 128, True, len(cases.LENGTHS), "safe_gate")
    outs = []
    for variant in (None, "out-base"):
        o = poison(torch.empty_like(v))
        ht = poison(torch.empty_like(h0))
        plan = fam.adapter_class()(q, k, v, g, beta, o, use_qk_l2norm_in_kernel=True, initial_state=h0, final_state=ht, cu_seqlens=cu, schedule="parallel")
        if variant:
            host.set_parallel_options(plan, variant)
            assert plan._out_options() == {"v_wide": False}
        plan.compile()
        ws = torch.empty(plan.scratch_workspace_bytes(), dtype=torch.uint8, device="cuda")
        plan.execute(q, k, v, g, beta, o, h0, ht, cu, workspace=ws)
        outs.append((o, ht))
    torch.cuda.synchronize()
    (o0, s0), (o1, s1) = outs
    assert torch.isfinite(o0.float()).all() and torch.equal(o0, o1) and torch.equal(s0, s1)


# -- compile-only tier -------------------------------------------------------------------------------------------


@pytest.mark.compile_only
def test_default_key_routes_to_the_v_wide_kernel():
    """The default key is ``v_wide`` (session 6) and routes to the V-wide module; ``v_wide = False`` (``out-base``)
    routes to the session-5 kernel; the session-5 ``persistent`` field is gone (it lost on the H200)."""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    from dataclasses import fields

    from cudnn.linear_attention._host.chunk_parallel import PARALLEL_VARIANTS
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey, KimiDeltaAttentionParallelOut
    from cudnn.linear_attention.kda.chunk_parallel_out_persistent_kernel import KimiDeltaAttentionParallelOutPersistent, ctas_per_sm

    key = KdaParallelOutKey(head_dim=128, varlen=True)
    assert key.v_wide and KimiDeltaAttentionParallelOut.for_key(key) is KimiDeltaAttentionParallelOutPersistent
    assert ctas_per_sm(key) == 3 and ctas_per_sm(KdaParallelOutKey(head_dim=64, varlen=True)) == 4  # 74 KB / 33 KB per CTA
    base = KdaParallelOutKey(head_dim=128, varlen=True, **PARALLEL_VARIANTS["out-base"]["out"])
    assert KimiDeltaAttentionParallelOut.for_key(base) is KimiDeltaAttentionParallelOut
    assert [f.name for f in fields(KdaParallelOutKey)] == ["head_dim", "varlen", "row_scaled", "v_wide", "wait_slices"]


@pytest.mark.compile_only
@pytest.mark.parametrize(
    "D, varlen, row_scaled, fields, mma, cp_async",
    [
        (128, True, True, {}, 24, 36 + 1),  # the default: one item per CTA, one stage (+ rf: row_scaled)
    ],
    ids=["default-d128-varlen-rowscaled"],
)
def test_output_kernel_builds_without_spills(D, varlen, row_scaled, fields, mma, cp_async, tmp_path):
    """One 128-thread kernel with the cudnn prefix, its MMAs all m64n64k16 (per V block 8 (K = 128) for Q S0^T plus 4
    for P Vn), cp.async of 16 bytes for every operand, the 16-byte
    output stores (``st.global.v4``, ``ld.shared.v4``) and the 2-byte fallback, no local memory, frame size 0."""
    skip_unless_family_dsl(KDA)
    pytest.importorskip("cutlass")
    from cudnn.linear_attention.kda.chunk_parallel_out_kernel import KdaParallelOutKey
    from cudnn_testing.compile_only import keep_artifacts, kernel_symbols

    key = KdaParallelOutKey(head_dim=D, varlen=varlen, row_scaled=row_scaled, **fields)
    _COMPILED.pop(key, None)
    with keep_artifacts(tmp_path) as ptx:
        _compile_out(key)
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "chunk_parallel_out_persistent" in names[0], names
    assert ".reqntid 128, 1, 1" in text
    assert re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.bf16\.bf16", text) == ["m64n64k16"] * mma
    assert text.count("cp.async.cg.shared.global") == cp_async
    assert text.count("st.global.v4.b32") > 0 and text.count("ld.shared.v4.b32") > 0 and text.count("st.global.b16") > 0
    assert "ld.local" not in text and "st.local" not in text and all(f == 0 for f in frame_sizes(tmp_path))
