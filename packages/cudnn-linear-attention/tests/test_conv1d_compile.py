"""Compile-only tier (CPU, CUTE_DSL_ARCH=sm_90a): the three causal_conv1d kernels build from the plan alone,
carry the cudnn symbol prefix (Rule 6), really use 16-byte vector loads and stores, and a second plan
with another token total is a kernel-cache hit (Rule 4). The forward's default grid is the run grid (``grid_ctas``
None: 4 x the SMs, 528 without a GPU) and builds ``kernel_runs`` with 16-byte loads and stores;
``grid_ctas = 0`` builds the 64-token kernel; the opt-in variants (``l2_prefetch``, ``steady``, ``chunk``) build and
validate; the fused final states (``final_fused``, the default with final states) build as one kernel per grid; the warp
walk (``warp_walk``) emits ballots and shuffles within its measured frames. Kept small: the ``-k chunk`` tests are eight compiles, about 20 s."""

from __future__ import annotations

import pytest

from cudnn.api_base import TensorDesc
from cudnn_testing.compile_only import frame_sizes, keep_artifacts, kernel_symbols, sass_instructions
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.compile_only


@pytest.fixture(autouse=True)
def _dsl():
    skip_unless_cutedsl("4.8.0", "cudnn.linear_attention.causal_conv1d")
    pytest.importorskip("cutlass")


def _fwd_plan(T, N, **kw):
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((T, 512), "bfloat16", "x")
    st = TensorDesc.contiguous((N, 512, 3), "bfloat16", "states")
    return CausalConv1d(
        x,
        TensorDesc.contiguous((512, 4), "bfloat16", "weight"),
        x,
        TensorDesc.contiguous((512,), "bfloat16", "bias"),
        TensorDesc.contiguous((N + 1,), "int32", "cu"),
        st,
        st,
        "silu",
        **kw,
    )


def _kernel_body(text, names, part):
    """The PTX of the kernel whose symbol contains ``part`` (up to the next entry)."""
    body = text[text.index(".entry " + next(n for n in names if part in n)) :]
    return body[: body.find(".entry ", 1)] if ".entry " in body[1:] else body


def test_forward_64_token_kernel_compiles_with_prefix_and_vector_access(tmp_path):
    """``plan.grid_ctas = 0``: the 64-token CTAs (``kernel``) next to the final-states kernel."""
    import re

    from cudnn.kernel_cache import kernel_cache

    plan = _fwd_plan(1000, 5)
    plan.grid_ctas = 0
    plan.check_support()
    assert plan.compile_key().grid_ctas == 0
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)  # build it here, under the dump
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 2 and all(n.startswith("cudnn_") for n in names), names
    assert not any("kernel_runs" in n for n in names) and any(re.search(r"cudnn_kernel_kernel_[^r]", n) for n in names), names
    assert "ld.global.v4" in text and "st.global.v4" in text
    assert ".local" not in text  # the register window never spills to local memory
    assert "cp.async" not in text  # x reaches the registers by plain 16-byte loads (register double buffer)

    misses = kernel_cache.stats.misses
    other = _fwd_plan(123457, 77)  # another token total and sequence count: same artifact
    other.grid_ctas = 0
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_kernel is plan._compiled_kernel


def test_backward_and_update_compile(tmp_path):
    from cudnn.linear_attention.conv1d.api import CausalConv1dBackward, CausalConv1dUpdate

    x = TensorDesc.contiguous((300, 256), "bfloat16", "x")
    w = TensorDesc.contiguous((256, 3), "float32", "weight")
    st = TensorDesc.contiguous((4, 256, 2), "bfloat16", "states")
    bwd = CausalConv1dBackward(
        x,
        w,
        x,
        x,
        w,
        TensorDesc.contiguous((256,), "float32"),
        TensorDesc.contiguous((256,), "float32"),
        TensorDesc.contiguous((5,), "int32", "cu"),
        st,
        st,
        "silu",
    )
    upd = CausalConv1dUpdate(
        TensorDesc.contiguous((8, 256), "bfloat16", "x"),
        TensorDesc.contiguous((16, 256, 2), "float32", "conv_state"),
        w,
        TensorDesc.contiguous((8, 256), "bfloat16", "out"),
        conv_state_indices=TensorDesc.contiguous((8,), "int32"),
        activation=None,
    )
    with keep_artifacts(tmp_path) as ptx:
        bwd.compile()
        upd.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert names and all(n.startswith("cudnn_") for n in names), names


def test_tvm_ffi_launch_route_builds_a_separate_positional_entry():
    """``plan.tvm_ffi = True``: the update and forward kernels compile with ``--enable-tvm-ffi`` into their own cache
    entries, and execute() gets the raw positional ``tvm_ffi.Function`` (ints and a raw stream handle, no DSL
    argument conversion). The default route is the DSL's own entry (no ``_entry``) unless ``CUDNN_LA_TVM_FFI=1``."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    from cudnn.linear_attention.conv1d.api import CausalConv1dUpdate

    def upd():
        return CausalConv1dUpdate(
            TensorDesc.contiguous((8, 256), "bfloat16", "x"),
            TensorDesc.contiguous((16, 256, 3), "bfloat16", "conv_state"),
            TensorDesc.contiguous((256, 4), "bfloat16", "weight"),
            TensorDesc.contiguous((8, 256), "bfloat16", "out"),
            TensorDesc.contiguous((256,), "bfloat16", "bias"),
            activation="silu",
        )

    plain, fast = upd(), upd()
    plain.tvm_ffi, fast.tvm_ffi = False, True
    plain.compile()
    fast.compile()
    assert plain._entry is None
    assert fast._compiled_kernel is not plain._compiled_kernel
    assert isinstance(fast._entry, tvm_ffi.Function)
    assert fast._entry is not fast._compiled_kernel  # the raw function, not the DSL wrapper

    fwd = _fwd_plan(1000, 3)
    fwd.tvm_ffi = True
    fwd.compile()
    assert fwd._entry is not None and fwd._entry is not fwd._compiled_kernel


def test_forward_default_run_grid_compiles_to_16_byte_accesses(tmp_path):
    """A varlen plan with initial and final states (bf16, W = 4; ``grid_ctas`` None): the run grid with 4 x the SM count
    (528 where no GPU is visible); with ``final_fused`` inside the token loop (``final_tail = False``; the varlen default
    writes them after the loop since session 28) writing the final states itself, one ``cudnn_`` symbol; x and the halo
    come in by ``ld.global.v4``, y leaves by plain ``st.global.v4`` (no cache hint), no cp.async, no
    local memory in the PTX; ptxas at the 128-register cap: no frame since the session-26 contiguous final states' vector
    stores (24 bytes before; 16 before the session-25 ``shift_always`` default, 0 before the fused final states and the
    2-byte state pointers). The separate pair
    (``final_fused = False``, which the fused plan also prepares for overlapping state buffers): the run kernel next to
    the final-states kernel, frames 0 and 0 (8 and 0 before ``shift_always``). Another token total and sequence count is
    a kernel-cache hit (Rule 4)."""
    import dataclasses
    import re

    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d import api

    plan = _fwd_plan(1000, 5)
    assert plan.grid_ctas is None and api.FWD_GRID_CTAS_DEFAULT is None
    plan.check_support()
    default_key = plan.compile_key()
    assert default_key.final_tail and default_key.final_fused  # the varlen default since session 28: the fused tail
    plan.final_tail = False  # the fused final states inside the token loop, as measured below
    key = plan.compile_key()
    assert key.final_fused and key.has_init and key.has_final and key == dataclasses.replace(default_key, final_tail=False)
    sep = _fwd_plan(1000, 5)
    sep.final_fused = False
    sep.check_support()
    assert sep.compile_key() == dataclasses.replace(key, final_fused=False)
    kernel_cache._entries.pop(("linear_attention.conv1d", sep.compile_key()), None)
    with keep_artifacts(tmp_path / "sep") as ptx:
        sep.compile()
        names = kernel_symbols(ptx())
    assert len(names) == 2 and all(n.startswith("cudnn_") for n in names) and any("final_kernel" in n for n in names), names
    assert sorted(frame_sizes(tmp_path / "sep")) == [0, 0], frame_sizes(tmp_path / "sep")
    assert sep._sep is None
    assert key.grid_ctas == api._default_grid_ctas(None) > 0
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        assert key.grid_ctas == 528  # 4 x an H200's 132 SMs, the fallback where no CUDA device is known
    kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
    with keep_artifacts(tmp_path / "fused") as ptx:
        plan.compile()  # the separate pair comes from the cache: only the fused kernel is built here
        text = ptx()
    assert plan._sep[0] is sep._compiled_kernel
    names = kernel_symbols(text)
    assert len(names) == 1 and all(n.startswith("cudnn_") for n in names), names
    assert any("kernel_runs" in n for n in names) and not any(re.search(r"cudnn_kernel_kernel_[^r]", n) for n in names), names
    wide = set(re.findall(r"\b(ld|st)\.global((?:\.\w+)*)", _kernel_body(text, names, "kernel_runs")))
    assert ("ld", ".v4.b32") in wide and ("st", ".v4.b32") in wide, wide
    assert not [a for a in wide if a[0] == "st" and ".cs" in a[1]], wide  # no evict-first stores (removed in session 6)
    assert "cp.async" not in text and ".local" not in text
    assert frame_sizes(tmp_path / "fused") == [0]

    misses = kernel_cache.stats.misses
    other = _fwd_plan(123457, 77)  # another token total and sequence count: same artifact
    other.final_tail = False
    other.compile()
    assert kernel_cache.stats.misses == misses
    assert other._compiled_kernel is plan._compiled_kernel


def test_forward_l2_prefetch_variant_emits_bulk_prefetch_and_validates(tmp_path):
    """``plan.l2_prefetch = 2`` (opt-in, session 9): the run-grid kernel asks L2 for token groups ahead with
    ``cp.async.bulk.prefetch.L2.global`` (absent from the default, ``l2_prefetch`` 0) and keeps its 16-byte loads and
    stores; dense bf16 without states (the benchmark's key) within an 8-byte frame (a loop counter; 0 with
    ``shift_always = False``, the default until session 25: the option runs on contiguous runs, not the dense default's
    chunks). Malformed values raise ValueError
    at compile(): negative, non-int, bool, more than 128 tokens ahead, or with the 64-token CTAs (``grid_ctas = 0``)."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((2, 4096, 512), "bfloat16", "x")
    plan = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((512,), "bfloat16", "bias"), activation="silu")
    assert plan.l2_prefetch == 0
    plan.check_support()
    assert plan.compile_key().l2_prefetch == 0
    plan.l2_prefetch = 2
    key = plan.compile_key()
    assert key.l2_prefetch == 2 and key.grid_ctas > 0
    kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and "kernel_runs" in names[0] and names[0].startswith("cudnn_"), names
    assert text.count("cp.async.bulk.prefetch.L2.global") >= 2, "prologue and loop prefetches"
    assert "ld.global.v4" in text and "st.global.v4" in text and ".local" not in text
    assert frame_sizes(tmp_path) == [8]
    for bad, grid in ((-1, None), (1.5, None), (True, None), (33, None), (2, 0)):
        plan.l2_prefetch, plan.grid_ctas = bad, grid
        with pytest.raises(ValueError, match="l2_prefetch"):
            plan.compile()


def test_forward_steady_variant_compiles_and_validates(tmp_path):
    """``plan.steady = True`` (the default since session 9; with ``l2_prefetch = 2`` as the benchmark's combined column): the run
    grid builds with the steady-group path, 16-byte loads and stores, an 8-byte frame (dense bf16, the benchmark's key, on
    contiguous runs; 0 with ``shift_always = False``), and
    its PTX differs from the default's; fp32 varlen with states builds too. Malformed values raise ValueError."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((2, 4096, 512), "bfloat16", "x")
    plan = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((512,), "bfloat16", "bias"), activation="silu")
    assert plan.steady is None  # FWD_STEADY_DEFAULT (True since the session-9 A/B) on the run grid
    plan.check_support()
    assert plan.compile_key().steady is True
    plan.grid_ctas = 0  # the 64-token grid has no steady path: the default leaves it off there
    assert plan.compile_key().steady is False
    plan.grid_ctas, plan.steady = None, False
    assert plan.compile_key().steady is False
    plan.steady, plan.l2_prefetch = True, 2
    key = plan.compile_key()
    assert key.steady is True and key.l2_prefetch == 2
    kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
    with keep_artifacts(tmp_path / "steady") as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and "kernel_runs" in names[0] and names[0].startswith("cudnn_"), names
    assert "ld.global.v4" in text and "st.global.v4" in text and ".local" not in text
    assert text.count("cp.async.bulk.prefetch.L2.global") >= 2
    assert frame_sizes(tmp_path / "steady") == [8]

    xf = TensorDesc.contiguous((1000, 256), "float32", "x")
    st = TensorDesc.contiguous((5, 256, 2), "float32", "states")
    fp32 = CausalConv1d(xf, TensorDesc.contiguous((256, 3), "float32", "weight"), xf, None, TensorDesc.contiguous((6,), "int32", "cu"), st, st, "silu")
    fp32.steady = True
    fp32.compile()
    for bad, grid in (("yes", None), (1, None), (True, 0)):
        plan.steady, plan.l2_prefetch, plan.grid_ctas = bad, 0, grid
        with pytest.raises(ValueError, match="steady"):
            plan.compile()


@pytest.mark.parametrize(("chunk", "bf16_frame"), [(8, 0), (16, 16)])
def test_forward_chunk_variant_compiles_without_a_frame(tmp_path, chunk, bf16_frame):
    """``plan.chunk = C`` (chunk-interleaved runs, ``Conv1dFwdKey.chunk``; 8 the dense default): the dense run grid builds
    ``kernel_runs`` with the chunk walk, 16-byte loads and stores and no frame at the default chunk 8 (the next chunk's
    halo is fetched into the registers its last group frees, so nothing spills at 128 registers): bf16 W = 4 SiLU with
    bias (the benchmark's key) and fp32 W = 2 without bias; chunk 16 at bf16 has a 16-byte frame since the session-25
    ``shift_always`` default (0 without it); its PTX differs from the default's (``chunk`` 0)."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    assert api.FWD_CHUNK_DEFAULT == 8
    for dt, D, W, bias, act in (("bfloat16", 512, 4, True, "silu"), ("float32", 256, 2, False, None)):
        x = TensorDesc.contiguous((3, 1000, D), dt, "x")
        b = TensorDesc.contiguous((D,), dt, "bias") if bias else None
        plan = CausalConv1d(x, TensorDesc.contiguous((D, W), dt, "weight"), x, b, activation=act)
        assert plan.chunk is None
        plan.check_support()
        assert plan.compile_key().chunk == 8  # the dense run grid's default
        plan.chunk = chunk
        key = plan.compile_key()
        assert key.chunk == chunk and key.grid_ctas > 0 and key.steady is True
        kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
        out = tmp_path / f"{dt}-{chunk}"
        with keep_artifacts(out) as ptx:
            plan.compile()
            text = ptx()
        names = kernel_symbols(text)
        assert len(names) == 1 and "kernel_runs" in names[0] and names[0].startswith("cudnn_"), names
        assert "ld.global.v4" in text and "st.global.v4" in text and ".local" not in text
        assert frame_sizes(out) == [bf16_frame if dt == "bfloat16" else 0]
        plan.chunk = 0
        kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
        with keep_artifacts(tmp_path / f"{dt}-default") as ptx0:
            plan.compile()
            assert ptx0() != text


def test_forward_chunk_validation():
    """``plan.chunk`` must be None / 0 or an int C > 0, a multiple of 2 * ``group`` (8) tokens, on the run grid of a dense
    plan without ``l2_prefetch``: anything else raises ValueError naming the option at compile(), before any build."""
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((2, 4096, 512), "bfloat16", "x")
    dense = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((512,), "bfloat16", "bias"), activation="silu")
    dense.check_support()
    for bad, grid, pf in ((4, None, 0), (12, None, 0), (-8, None, 0), (8.0, None, 0), (True, None, 0), (8, 0, 0), (16, None, 2)):
        dense.chunk, dense.grid_ctas, dense.l2_prefetch = bad, grid, pf
        with pytest.raises(ValueError, match="chunk"):
            dense.compile()
    varlen = _fwd_plan(1000, 5)
    varlen.check_support()
    varlen.chunk = 12
    with pytest.raises(ValueError, match="chunk"):
        varlen.compile()
    varlen.chunk, varlen.grid_ctas = 8, 0
    with pytest.raises(ValueError, match="chunk"):
        varlen.compile()


def test_forward_chunk_default_resolution():
    """``plan.chunk = None`` resolves to ``FWD_CHUNK_DEFAULT`` (8) on a dense plan's run grid, to ``FWD_CHUNK_VARLEN_DEFAULT``
    on a varlen one's, and to 0 where chunks are invalid (the 64-token grid, ``l2_prefetch``); an explicit value is kept."""
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    x = TensorDesc.contiguous((2, 4096, 512), "bfloat16", "x")
    dense = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, activation="silu")
    dense.check_support()
    assert dense.compile_key().chunk == api.FWD_CHUNK_DEFAULT == 8
    for grid, pf in ((0, 0), (None, 2), (64, 1)):
        dense.grid_ctas, dense.l2_prefetch = grid, pf
        assert dense.compile_key().chunk == 0, (grid, pf)
    dense.grid_ctas, dense.l2_prefetch, dense.chunk = 64, 0, 16
    assert dense.compile_key().chunk == 16
    dense.chunk = 0
    assert dense.compile_key().chunk == 0
    varlen = _fwd_plan(1000, 5)
    varlen.check_support()
    assert varlen.compile_key().chunk == api.FWD_CHUNK_VARLEN_DEFAULT
    varlen.chunk = 8
    assert varlen.compile_key().chunk == 8
    varlen.grid_ctas = 0
    varlen.chunk = None
    assert varlen.compile_key().chunk == 0


@pytest.mark.parametrize("states", [True, False])
def test_forward_varlen_chunk_compiles_without_a_frame(tmp_path, states):
    """``plan.chunk = 8`` on a varlen plan (per chunk a binary search over ``cu_seqlens`` from the previous chunk's
    sequence, then the per-token walk): ``kernel_runs`` with 16-byte loads and stores and no local memory in the PTX,
    bf16 W = 4 SiLU with bias, with and without initial / final states; its PTX differs from ``chunk`` 0's. ptxas at the
    128-register cap (sm_90a): an 8-byte frame without states (the SASS spills only the CTA row's chunk count, the loop
    bound: one 4-byte local load per chunk), up to 56 bytes with them (as the dense chunk kernel with states); bounds."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    if states:
        plan = _fwd_plan(1000, 5)
    else:
        x = TensorDesc.contiguous((1000, 512), "bfloat16", "x")
        plan = CausalConv1d(
            x,
            TensorDesc.contiguous((512, 4), "bfloat16", "weight"),
            x,
            TensorDesc.contiguous((512,), "bfloat16", "bias"),
            TensorDesc.contiguous((6,), "int32", "cu"),
            activation="silu",
        )
    plan.check_support()
    plan.chunk = 8
    key = plan.compile_key()
    assert key.chunk == 8 and key.varlen and key.grid_ctas > 0 and key.steady is True
    kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
    out = tmp_path / "varlen-8"
    with keep_artifacts(out) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert any("kernel_runs" in n for n in names), names
    assert "ld.global.v4" in text and "st.global.v4" in text and ".local" not in text
    assert max(frame_sizes(out)) <= (56 if states else 8), frame_sizes(out)
    plan.chunk = 0
    kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
    with keep_artifacts(tmp_path / "varlen-0") as ptx0:
        plan.compile()
        assert ptx0() != text


#: (varlen, initial states, states dtype, grid_ctas, chunk, frame) of the fused final-states builds (``final_fused``, the default
#: with final states): dense final only and dense initial + final (the states benchmark's key) on the chunk-8 default,
#: varlen initial + final on its contiguous-runs default, varlen final only with fp32 states (x bf16) on chunk 8, and the
#: 64-token CTAs with fp32 states. ``frame``: ptxas's frame at the 128-register cap (sm_90a), measured in session 26 with
#: the contiguous final states' vector stores (``final_contiguous``); session 25, element by element: 0, 24, 24, 0, 8;
#: session 16, before ``shift_always``: 8, 32, 16, 8, 8.
FUSED_CASES = [
    (False, False, "bfloat16", None, None, 8),
    (False, True, "bfloat16", None, None, 24),
    (True, True, "bfloat16", None, None, 0),
    (True, False, "float32", None, 8, 0),
    (False, True, "float32", 0, None, 40),
]


@pytest.mark.parametrize(("varlen", "init", "sdt", "grid", "chunk", "frame"), FUSED_CASES)
def test_forward_fused_final_states_compile(tmp_path, varlen, init, sdt, grid, chunk, frame):
    """``final_fused`` (the default where final states are declared; varlen plans inside the token loop here, ``final_tail
    = False``): one ``cudnn_`` forward kernel and no final-states kernel, the final states stored element by element in their dtype (2-byte ``st.global.b16`` for bf16, never byte
    pairs: the state pointers are compiled for their dtype's alignment, which execute checks), within the frame above.
    With initial states the plan also holds the separate pair (``_sep``: the ``final_fused = False`` key) for calls whose
    final states overlap the initial states; without, none."""
    import dataclasses

    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, N = 512, 5
    if varlen:
        x, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((N + 1,), "int32", "cu")
    else:
        x, cu = TensorDesc.contiguous((N, 200, D), "bfloat16", "x"), None
    st = TensorDesc.contiguous((N, D, 3), sdt, "states")
    fin = TensorDesc.contiguous((N, D, 3), sdt, "final")

    def make(fused):
        p = CausalConv1d(
            x, TensorDesc.contiguous((D, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((D,), "bfloat16", "bias"), cu, st if init else None, fin, "silu"
        )
        p.grid_ctas, p.chunk, p.final_fused = grid, chunk, fused
        if varlen and grid != 0:
            p.final_tail = False  # the token loop's final states (the varlen default writes them as the tail)
        p.check_support()
        return p

    plan = make(None)
    key = plan.compile_key()
    assert key.final_fused is True and key.has_final and key.has_init == init
    twin = make(False)
    assert twin.compile_key() == dataclasses.replace(key, final_fused=False)
    twin.compile()
    kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
    with keep_artifacts(tmp_path) as ptx:
        plan.compile()
        text = ptx()
    names = kernel_symbols(text)
    assert len(names) == 1 and names[0].startswith("cudnn_") and "final_kernel" not in names[0], names
    scalar = "st.global.b16" if sdt == "bfloat16" else "st.global.b32"  # contiguous final states: vector stores only
    assert scalar not in text and "st.global.b8" not in text and "ld.global.v4" in text and ".local" not in text
    assert plan.compile_key().final_contiguous
    assert frame_sizes(tmp_path) == [frame], frame_sizes(tmp_path)
    if init:
        assert plan._sep is not None and plan._sep[0] is twin._compiled_kernel
    else:
        assert plan._sep is None


def test_forward_final_fused_option_values():
    """``plan.final_fused``: None resolves to ``FWD_FINAL_FUSED_DEFAULT`` (True) on a dense plan and to
    ``FWD_FINAL_FUSED_VARLEN_DEFAULT`` (True, session 28: as the tail) on a varlen plan where final states are declared,
    and to False elsewhere; explicit True / False are kept; True without final states, or a non-bool, raises ValueError naming
    the option at compile(), before any build."""
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    assert api.FWD_FINAL_FUSED_DEFAULT is True and api.FWD_FINAL_FUSED_VARLEN_DEFAULT is True
    plan = _fwd_plan(1000, 5)
    plan.check_support()
    assert plan.final_fused is None and plan.compile_key().final_fused is True  # varlen
    xd, sd = TensorDesc.contiguous((5, 200, 512), "bfloat16", "x"), TensorDesc.contiguous((5, 512, 3), "bfloat16", "states")
    dense = CausalConv1d(xd, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), xd, None, None, sd, sd, "silu")
    dense.check_support()
    assert dense.compile_key().final_fused is True
    plan.final_fused = True
    assert plan.compile_key().final_fused is True
    plan.final_fused = False
    assert plan.compile_key().final_fused is False
    x = TensorDesc.contiguous((2, 64, 512), "bfloat16", "x")
    bare = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, activation="silu")
    bare.check_support()
    assert bare.compile_key().final_fused is False
    for target, bad in ((bare, True), (plan, 1), (plan, "yes")):
        target.final_fused = bad
        with pytest.raises(ValueError, match="final_fused"):
            target.compile()


#: (chunk, states, frame, default frame) of the warp-walk builds (``warp_walk = True``; varlen bf16 W = 4 SiLU with bias):
#: contiguous runs and chunk 8, without states, initial only, final only and both (fused final states). ``frame``:
#: ptxas's frame at the 128-register cap (sm_90a), measured in session 26 (``shift_always``, and the contiguous final
#: states' vector stores) next to ``warp_walk = False``'s (the last field). Session 25, final states element by
#: element: final (8, 0), both (48, 24); session 16, before ``shift_always``: (0, 0), (16, 8), (8, 0), (0, 16), (16, 8),
#: (40, 40), (8, 8), (40, 40).
WARP_WALK_CASES = [
    (0, None, 0, 0),
    (0, "init", 8, 0),
    (0, "final", 0, 0),
    (0, "both", 0, 0),
    (8, None, 0, 0),
    (8, "init", 0, 0),
    (8, "final", 0, 0),
    (8, "both", 0, 0),
]


@pytest.mark.parametrize(("chunk", "states", "frame", "default_frame"), WARP_WALK_CASES)
def test_forward_warp_walk_compiles_with_ballots_and_shuffles(tmp_path, chunk, states, frame, default_frame):
    """``plan.warp_walk = True`` (varlen run grid: the warp walks ``cu_seqlens`` with a window of entries in its lanes):
    one ``cudnn_`` ``kernel_runs`` with ``vote.sync.ballot`` and ``shfl.sync.idx`` (absent from ``warp_walk = False``'s
    PTX), 16-byte loads and stores, no local memory in the PTX, ptxas's frame as measured (WARP_WALK_CASES), with and
    without initial / final states, on contiguous runs and chunk 8."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, N = 512, 5
    x, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((N + 1,), "int32", "cu")
    init = TensorDesc.contiguous((N, D, 3), "bfloat16", "init") if states in ("init", "both") else None
    fin = TensorDesc.contiguous((N, D, 3), "bfloat16", "final") if states in ("final", "both") else None
    texts = {}
    for walk in (False, True):
        plan = CausalConv1d(x, TensorDesc.contiguous((D, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((D,), "bfloat16", "bias"), cu, init, fin, "silu")
        plan.check_support()
        plan.chunk, plan.warp_walk = chunk, walk
        if fin is not None:  # the final states fused inside the token loop, as measured
            plan.final_fused, plan.final_tail = True, False
        key = plan.compile_key()
        assert key.warp_walk is walk and key.chunk == chunk and key.varlen and key.grid_ctas > 0, key
        if init is not None and fin is not None:  # the separate pair a fused plan also holds: built first, outside the dump
            twin = CausalConv1d(
                x, TensorDesc.contiguous((D, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((D,), "bfloat16", "bias"), cu, init, fin, "silu"
            )
            twin.chunk, twin.warp_walk, twin.final_fused = chunk, walk, False
            twin.compile()
        kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
        out = tmp_path / f"walk-{walk}"
        with keep_artifacts(out) as ptx:
            plan.compile()
            texts[walk] = ptx()
        names = kernel_symbols(texts[walk])
        runs = [n for n in names if "kernel_runs" in n]
        assert len(runs) == 1 and all(n.startswith("cudnn_") for n in names), names
        body = _kernel_body(texts[walk], names, "kernel_runs")
        assert "ld.global.v4" in body and "st.global.v4" in body and ".local" not in texts[walk]
        assert ("vote.sync.ballot" in body and "shfl.sync.idx" in body) is walk, walk
        assert max(frame_sizes(out)) == (frame if walk else default_frame), (walk, frame_sizes(out))


def test_forward_warp_walk_option_values():
    """``plan.warp_walk``: None resolves to ``FWD_WARP_WALK_DEFAULT`` on a varlen plan's run grid and to False on dense
    plans and the 64-token grid; explicit True / False are kept; True on a dense plan or the 64-token grid, or a non-bool,
    raises ValueError naming the option at compile(), before any build."""
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    assert api.FWD_WARP_WALK_DEFAULT is False  # off after the session-16 H200 A/B
    varlen = _fwd_plan(1000, 5)
    varlen.check_support()
    assert varlen.warp_walk is None and varlen.compile_key().warp_walk is api.FWD_WARP_WALK_DEFAULT
    varlen.warp_walk = True
    assert varlen.compile_key().warp_walk is True
    varlen.warp_walk, varlen.grid_ctas = None, 0
    assert varlen.compile_key().warp_walk is False
    x = TensorDesc.contiguous((2, 64, 512), "bfloat16", "x")
    dense = CausalConv1d(x, TensorDesc.contiguous((512, 4), "bfloat16", "weight"), x, activation="silu")
    dense.check_support()
    assert dense.compile_key().warp_walk is False
    for target, bad, grid in ((dense, True, None), (varlen, True, 0), (varlen, 1, None), (varlen, "yes", None)):
        target.warp_walk, target.grid_ctas = bad, grid
        with pytest.raises(ValueError, match="warp_walk"):
            target.compile()


def test_forward_stateless_varlen_walk_default():
    """A varlen plan without states left at ``chunk = None`` and ``warp_walk = None`` resolves to the warp walk on chunks
    of ``FWD_VARLEN_STATELESS_WALK_CHUNK`` (8) tokens, with no per-call key; either option set, a state tensor declared,
    the 64-token grid or ``l2_prefetch`` keep the other defaults (session 29)."""
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    assert api.FWD_VARLEN_STATELESS_WALK_CHUNK == 8
    x, w = TensorDesc.contiguous((1000, 512), "bfloat16", "x"), TensorDesc.contiguous((512, 4), "bfloat16", "weight")
    cu = TensorDesc.contiguous((6,), "int32", "cu")

    def plan(**opts):
        p = CausalConv1d(x, w, x, None, cu, None, None, "silu")
        for name, value in opts.items():
            setattr(p, name, value)
        p.check_support()
        return p, p.compile_key()

    p, key = plan()
    assert (key.chunk, key.warp_walk, key.locate_guess) == (8, True, False) and p.per_call_chunk_key(key) is None, key
    _, key = plan(chunk=0)
    assert (key.chunk, key.warp_walk) == (0, api.FWD_WARP_WALK_DEFAULT), key
    p, key = plan(warp_walk=False)
    assert (key.chunk, key.warp_walk) == (api.FWD_CHUNK_VARLEN_DEFAULT, False) and p.per_call_chunk_key(key).chunk == api.FWD_VARLEN_CHUNK_PER_CALL, key
    _, key = plan(warp_walk=True)
    assert (key.chunk, key.warp_walk) == (api.FWD_CHUNK_VARLEN_DEFAULT, True), key
    for opts in ({"grid_ctas": 0}, {"l2_prefetch": 2}):
        _, key = plan(**opts)
        assert key.chunk == 0 and key.warp_walk is False, (opts, key)
    states = _fwd_plan(1000, 5)
    states.check_support()
    key = states.compile_key()
    assert (key.chunk, key.warp_walk) == (api.FWD_CHUNK_VARLEN_DEFAULT, api.FWD_WARP_WALK_DEFAULT), key


#: (layout, chunk, SASS instructions saved at least) of the window-shift A/B (bf16 W = 4 SiLU with bias, no states):
#: varlen contiguous runs (measured 2200 -> 2000; chunk 0: a varlen plan at chunk None also compiles chunk 8), varlen chunk 8 (2400 -> 2272) and the dense chunk-8
#: default (2320 -> 2152)
SHIFT_CASES = [("varlen", 0, 150), ("varlen", 8, 100), ("dense", None, 120)]


@pytest.mark.parametrize(("layout", "chunk", "saved"), SHIFT_CASES)
def test_forward_shift_always_drops_the_window_merges(tmp_path, layout, chunk, saved):
    """``plan.shift_always`` (the default since session 25: a group on the per-token path shifts the register window for
    every token and only the sequence walk and the store ask "inside the run?"): the run kernel is at least ``saved`` SASS
    instructions shorter than the guarded shift's (``shift_always = False``: ptxas merged two register windows after
    every token, ~27 moves per token) with no larger frame, one ``cudnn_`` ``kernel_runs`` each, 16-byte loads and stores."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D = 512
    x = TensorDesc.contiguous((1000, D) if layout == "varlen" else (3, 1000, D), "bfloat16", "x")
    cu = TensorDesc.contiguous((6,), "int32", "cu") if layout == "varlen" else None
    counts, frames = {}, {}
    for shift in (False, True):
        plan = CausalConv1d(x, TensorDesc.contiguous((D, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((D,), "bfloat16", "bias"), cu, None, None, "silu")
        plan.check_support()
        plan.chunk, plan.shift_always = chunk, shift
        key = plan.compile_key()
        assert key.shift_always is shift and key.grid_ctas > 0, key
        kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
        out = tmp_path / f"shift-{shift}"
        with keep_artifacts(out) as ptx:
            plan.compile()
            text = ptx()
        names = kernel_symbols(text)
        assert len(names) == 1 and "kernel_runs" in names[0] and names[0].startswith("cudnn_"), names
        assert "ld.global.v4" in text and "st.global.v4" in text and ".local" not in text
        (counts[shift],) = sass_instructions(out).values()
        (frames[shift],) = frame_sizes(out)
    assert counts[False] - counts[True] >= saved, counts
    assert frames[True] <= frames[False], frames


def test_forward_shift_always_option_values():
    """``plan.shift_always``: None resolves to ``FWD_SHIFT_ALWAYS_DEFAULT`` (True) on the run grid and to False on the
    64-token grid (no per-token group path there); explicit True / False are kept; True on the 64-token grid, or a
    non-bool, raises ValueError naming the option at compile(), before any build."""
    from cudnn.linear_attention.conv1d import api

    assert api.FWD_SHIFT_ALWAYS_DEFAULT is True
    plan = _fwd_plan(1000, 5)
    plan.check_support()
    assert plan.shift_always is None and plan.compile_key().shift_always is True
    plan.shift_always = False
    assert plan.compile_key().shift_always is False
    plan.shift_always, plan.grid_ctas = None, 0
    assert plan.compile_key().shift_always is False
    for bad, grid in ((True, 0), (1, None), ("yes", None)):
        plan.shift_always, plan.grid_ctas = bad, grid
        with pytest.raises(ValueError, match="shift_always"):
            plan.compile()


def test_forward_locate_guess_option_values(tmp_path):
    """``plan.locate_guess``: None resolves to ``FWD_LOCATE_GUESS_DEFAULT`` on varlen contiguous runs without the warp walk,
    else False (dense, chunks, the warp walk, the 64-token grid); True elsewhere, or a non-bool, raises ValueError naming
    the option at compile(). True builds a different ``cudnn_`` run kernel with no frame."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D = 512
    x, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((6,), "int32", "cu")

    def make(cu_desc):
        p = CausalConv1d(
            x, TensorDesc.contiguous((D, 4), "bfloat16", "weight"), x, TensorDesc.contiguous((D,), "bfloat16", "bias"), cu_desc, None, None, "silu"
        )
        p.warp_walk = False  # contiguous runs (a stateless varlen plan's default is the walk on chunk 8)
        p.check_support()
        return p

    plan = make(cu)
    assert plan.locate_guess is None and plan.compile_key().locate_guess is api.FWD_LOCATE_GUESS_DEFAULT
    texts = {}
    for guess in (False, True):
        plan.locate_guess = guess
        kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
        with keep_artifacts(tmp_path / f"g{guess}") as ptx:
            plan.compile()
            texts[guess] = ptx()
        names = kernel_symbols(texts[guess])
        assert len(names) == 1 and names[0].startswith("cudnn_") and "kernel_runs" in names[0], names
        assert frame_sizes(tmp_path / f"g{guess}") == [0]
    assert texts[False] != texts[True]
    plan.locate_guess = None
    for field, value in (("chunk", 8), ("warp_walk", True), ("grid_ctas", 0)):
        setattr(plan, field, value)
        assert plan.compile_key().locate_guess is False, field
        plan.locate_guess = True
        with pytest.raises(ValueError, match="locate_guess"):
            plan.compile()
        plan.locate_guess = None
        setattr(plan, field, None)
    dense = make(None)
    assert dense.compile_key().locate_guess is False
    for target, bad in ((dense, True), (plan, 1), (plan, "yes")):
        target.locate_guess = bad
        with pytest.raises(ValueError, match="locate_guess"):
            target.compile()


def test_forward_final_contiguous_defaults_and_validates(tmp_path):
    """``plan.final_contiguous`` (session 26): None resolves to True when the declared final states are a contiguous
    [N, D, W - 1] (their pointer then compiled and checked at 16 bytes; the initial states' keep their dtype's size
    and any strides), to False for another final layout and without final states; explicit False is kept; True on a
    strided final layout, or a non-bool, raises ValueError naming the option at compile(). The contiguous build writes
    the final states with vector stores only (no 2-byte ``st.global.b16``), the element-wise build one element per store."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, N = 512, 5
    w, b = TensorDesc.contiguous((D, 4), "bfloat16", "weight"), TensorDesc.contiguous((D,), "bfloat16", "bias")
    x, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((N + 1,), "int32", "cu")
    st = TensorDesc.contiguous((N, D, 3), "bfloat16", "initial_states")
    view = TensorDesc((N, D, 3), (4 * D, 4, 1), st.dtype, "initial_states")
    fin = TensorDesc.contiguous((N, D, 3), "bfloat16", "final_states")
    fin_view = TensorDesc((N, D, 3), (4 * D, 4, 1), st.dtype, "final_states")

    def make(init, final, **fields):
        p = CausalConv1d(x, w, x, b, cu, init, final, "silu")
        for k, v in fields.items():
            setattr(p, k, v)
        p.check_support()
        return p

    assert make(st, fin).compile_key().final_contiguous is True and make(st, fin)._state_align() == (2, 16)
    assert make(view, fin).compile_key().final_contiguous is True
    assert make(None, fin).compile_key().final_contiguous is True
    assert make(st, fin_view).compile_key().final_contiguous is False and make(st, fin_view)._state_align() == (2, 2)
    assert make(st, None).compile_key().final_contiguous is False
    assert make(st, fin, final_contiguous=False).compile_key().final_contiguous is False
    texts = {}
    for contig in (True, False):
        plan = make(None, fin, final_contiguous=contig, final_tail=False)  # the token loop's stores
        key = plan.compile_key()
        kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
        with keep_artifacts(tmp_path / f"c{contig}") as ptx:
            plan.compile()
            texts[contig] = _kernel_body(ptx(), kernel_symbols(ptx()), "kernel_runs")
    assert "st.global.b16" not in texts[True] and "st.global.v4" in texts[True]
    assert "st.global.b16" in texts[False]
    for final, fields in ((fin_view, {"final_contiguous": True}), (fin, {"final_contiguous": 1}), (fin, {"final_contiguous": "yes"})):
        plan = make(st, final, **fields)
        with pytest.raises(ValueError, match="final_contiguous"):
            plan.compile()


def test_forward_seeded_starts_defaults_and_validates(tmp_path):
    """``plan.seeded_starts`` (session 27): None resolves to ``FWD_SEEDED_STARTS_DEFAULT`` on a dense chunked plan with the
    steady path and initial states of x's dtype whose sequences are at most ``FWD_SEEDED_MAX_LEN`` tokens, to False
    elsewhere (longer sequences, varlen, contiguous runs, no steady path, no initial states, fp32 states under bf16 x); True where it is not valid, or a non-bool, raises ValueError naming the option at
    compile(). ``plan.initial_contiguous``: None resolves to True on a seeded plan whose declared initial states are a
    contiguous [N, D, W - 1] (their pointer then compiled and checked at 16 bytes), False otherwise; True without
    seeded starts or on a strided layout raises ValueError. The seeded builds compile without local memory; the vector
    build reads the seeded halo with 16-byte loads (more ``ld.global.v4`` and fewer 2-byte loads than the element build)."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, N = 512, 5
    w, b = TensorDesc.contiguous((D, 4), "bfloat16", "weight"), TensorDesc.contiguous((D,), "bfloat16", "bias")
    x = TensorDesc.contiguous((N, 200, D), "bfloat16", "x")
    xv, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((N + 1,), "int32", "cu")
    st = TensorDesc.contiguous((N, D, 3), "bfloat16", "initial_states")
    st32 = TensorDesc.contiguous((N, D, 3), "float32", "initial_states")

    def make(x=x, cu=None, init=st, **fields):
        p = CausalConv1d(x, w, x, b, cu, init, None, "silu")
        for k, v in fields.items():
            setattr(p, k, v)
        p.check_support()
        return p

    short = TensorDesc.contiguous((N, api.FWD_SEEDED_MAX_LEN, D), "bfloat16", "x")
    assert make(x=short).compile_key().seeded_starts is api.FWD_SEEDED_STARTS_DEFAULT
    assert make().compile_key().seeded_starts is False  # 200 tokens per sequence: longer than FWD_SEEDED_MAX_LEN
    for plan in (make(x=xv, cu=cu), make(chunk=0), make(steady=False), make(init=None), make(init=st32)):
        assert plan.compile_key().seeded_starts is False
    assert make(seeded_starts=True).compile_key().seeded_starts is True
    assert make(seeded_starts=False).compile_key().seeded_starts is False
    view = TensorDesc((N, D, 3), (4 * D, 4, 1), st.dtype, "initial_states")
    assert make(seeded_starts=True).compile_key().init_contiguous is True and make(seeded_starts=True)._state_align() == (16, 2)
    assert make(seeded_starts=True, initial_contiguous=False).compile_key().init_contiguous is False
    assert make(init=view, seeded_starts=True).compile_key().init_contiguous is False and make(init=view, seeded_starts=True)._state_align() == (2, 2)
    assert make(seeded_starts=False).compile_key().init_contiguous is False and make(seeded_starts=False)._state_align() == (2, 2)
    for fields in ({"seeded_starts": False, "initial_contiguous": True}, {"init": view, "seeded_starts": True, "initial_contiguous": True}):
        with pytest.raises(ValueError, match="initial_contiguous"):
            make(**fields).compile()
    for fields in (
        {"x": xv, "cu": cu, "seeded_starts": True},
        {"chunk": 0, "seeded_starts": True},
        {"steady": False, "seeded_starts": True},
        {"init": None, "seeded_starts": True},
        {"init": st32, "seeded_starts": True},
        {"seeded_starts": 1},
    ):
        with pytest.raises(ValueError, match="seeded_starts"):
            make(**fields).compile()
    texts = {}
    for name, fields in (("vec", {"seeded_starts": True}), ("elem", {"seeded_starts": True, "initial_contiguous": False}), ("off", {"seeded_starts": False})):
        plan = make(**fields)
        kernel_cache._entries.pop(("linear_attention.conv1d", plan.compile_key()), None)
        with keep_artifacts(tmp_path / name) as ptx:
            plan.compile()
            texts[name] = _kernel_body(ptx(), kernel_symbols(ptx()), "kernel_runs")
    assert ".local" not in texts["vec"] and ".local" not in texts["elem"] and len({texts["vec"], texts["elem"], texts["off"]}) == 3
    counts = {k: (t.count("ld.global.v4"), t.count("ld.global.b16") + t.count("ld.global.u16")) for k, t in texts.items()}
    assert counts["vec"][0] > counts["elem"][0] and counts["vec"][1] < counts["elem"][1], counts


def test_forward_final_tail_defaults_and_validates(tmp_path):
    """``plan.final_tail`` (session 28): None resolves to ``FWD_FINAL_TAIL_VARLEN_DEFAULT`` (varlen) /
    ``FWD_FINAL_TAIL_DEFAULT`` (dense) on the run grid with fused final states and to False elsewhere (the 64-token grid,
    the separate final-states kernel, no final states); True there, or a non-bool, raises ValueError naming the option at compile(); the separate pair a plan with both state tensors also
    compiles never carries it, the per-call chunk key does. The tail builds (varlen contiguous runs and chunk 8) compile
    without local memory and without the token loop's final-states walk (fewer 16-byte stores in the loop than the
    loop-fused build: one ``final_state_of`` body after the loop)."""
    from cudnn.kernel_cache import kernel_cache
    from cudnn.linear_attention.conv1d import api
    from cudnn.linear_attention.conv1d.api import CausalConv1d

    D, N = 512, 5
    w, b = TensorDesc.contiguous((D, 4), "bfloat16", "weight"), TensorDesc.contiguous((D,), "bfloat16", "bias")
    xv, cu = TensorDesc.contiguous((1000, D), "bfloat16", "x"), TensorDesc.contiguous((N + 1,), "int32", "cu")
    st = TensorDesc.contiguous((N, D, 3), "bfloat16", "initial_states")
    fin = TensorDesc.contiguous((N, D, 3), "bfloat16", "final_states")

    def make(final=fin, **fields):
        p = CausalConv1d(xv, w, xv, b, cu, st, final, "silu")
        for k, v in fields.items():
            setattr(p, k, v)
        p.check_support()
        return p

    assert make().compile_key().final_tail is api.FWD_FINAL_TAIL_VARLEN_DEFAULT is api.FWD_FINAL_FUSED_VARLEN_DEFAULT is True
    xd = TensorDesc.contiguous((N, 200, D), "bfloat16", "x")
    dense = CausalConv1d(xd, w, xd, b, None, st, fin, "silu")
    dense.check_support()
    assert dense.compile_key().final_tail is api.FWD_FINAL_TAIL_DEFAULT is False
    for plan in (make(grid_ctas=0, final_fused=True), make(final_fused=False), make(final=None)):
        assert plan.compile_key().final_tail is False
    on = make(final_fused=True, final_tail=True)
    assert on.compile_key().final_tail and on.per_call_chunk_key(on.compile_key()).final_tail
    for fields in (
        {"grid_ctas": 0, "final_fused": True, "final_tail": True},
        {"final_fused": False, "final_tail": True},
        {"final": None, "final_tail": True},
        {"final_fused": True, "final_tail": 1},
    ):
        with pytest.raises(ValueError, match="final_tail"):
            make(**fields).compile()
    texts = {}
    for name, fields in (("loop", {"final_tail": False, "chunk": 0}), ("tail", {"final_tail": True, "chunk": 0}), ("tail8", {"final_tail": True, "chunk": 8})):
        plan = make(final_fused=True, **fields)
        key = plan.compile_key()
        kernel_cache._entries.pop(("linear_attention.conv1d", key), None)
        sa, fa = plan._state_align(key)
        ptrs = [("BFloat16", 16), ("BFloat16", 16), ("BFloat16", 16), ("BFloat16", 16), ("Int32", 4), ("BFloat16", sa), ("BFloat16", fa)]
        with keep_artifacts(tmp_path / name) as ptx:
            api._compile_cached(key, ".fwd_kernel", "CausalConv1dFwd", ptrs, 12, False)
            texts[name] = _kernel_body(ptx(), kernel_symbols(ptx()), "kernel_runs")
        assert frame_sizes(tmp_path / name) == [0], (name, frame_sizes(tmp_path / name))
    assert ".local" not in texts["tail"] and ".local" not in texts["tail8"] and texts["tail"] != texts["loop"]
    assert texts["tail"].count("st.global.v4") < texts["loop"].count("st.global.v4"), {k: t.count("st.global.v4") for k, t in texts.items()}
    on.compile()
    assert on._sep is not None and on._sep[0] is not on._compiled_kernel  # the pair's key: final_fused and final_tail off
