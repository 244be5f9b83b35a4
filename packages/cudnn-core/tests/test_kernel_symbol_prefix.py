"""Rule 6 detector: compiled kernels are named ``cudnn_...`` and carry no ``cutlass`` component.

A tiny real kernel is compiled for sm_90a with PTX kept (``cudnn_testing.compile_only``) and its ``.entry``
symbols are read back. Families assert the same on their own kernels::

    from cudnn_testing.compile_only import assert_cudnn_symbols, compile_ptx
    assert_cudnn_symbols(compile_ptx(lambda: kernel_sm90.compile_kernel(cfg), tmp_path))

Seen failing: with the naming call removed from the tiny kernel, ``test_tiny_kernel_symbols_carry_the_cudnn_prefix``
fails with "1 kernel symbol(s) break Rule 6 ... kernel_cutlass_cudnn_tiny_scale_kernel_..." (and
``test_detector_rejects_an_unnamed_kernel`` keeps that planted violation as a permanent check).
"""

import pytest

from cudnn_testing.compile_only import PREFIX, assert_cudnn_symbols, compile_ptx, kernel_symbols, symbol_violations, tiny_kernel
from cudnn_testing.markers import skip_unless_cutedsl

pytestmark = pytest.mark.detector


def test_symbol_rules_on_text():
    ptx = ".visible .entry cudnn_kernel_gemm_sm90_0(\n.param .u64 p)\n.entry kernel_cutlass_gemm_0(\n"
    assert kernel_symbols(ptx) == ["cudnn_kernel_gemm_sm90_0", "kernel_cutlass_gemm_0"]
    assert symbol_violations(kernel_symbols(ptx)) == ["kernel_cutlass_gemm_0"]
    assert symbol_violations(["cudnn_cutlass_kernel_x_0", "cudnnx_kernel"]) == ["cudnn_cutlass_kernel_x_0", "cudnnx_kernel"]
    with pytest.raises(AssertionError, match="no .entry kernel"):
        assert_cudnn_symbols("// empty module\n")


@pytest.mark.compile_only
def test_tiny_kernel_symbols_carry_the_cudnn_prefix(tmp_path):
    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    ptx = compile_ptx(tiny_kernel(named=True), tmp_path)
    symbols = assert_cudnn_symbols(ptx)
    assert len(symbols) == 1 and symbols[0].startswith(f"{PREFIX}_kernel_cudnn_tiny_scale_kernel")
    assert ".target sm_90a" in ptx


@pytest.mark.compile_only
def test_compat_name_kernel_gives_the_same_names(tmp_path):
    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    from cudnn._compat import name_kernel

    symbols = assert_cudnn_symbols(compile_ptx(tiny_kernel(named=True, name_with=name_kernel), tmp_path))
    assert symbols[0].startswith(f"{PREFIX}_kernel_cudnn_tiny_scale_kernel")


@pytest.mark.compile_only
def test_detector_rejects_an_unnamed_kernel(tmp_path):
    """The planted violation, kept: without set_name_prefix the DSL names the kernel kernel_cutlass_..."""
    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    ptx = compile_ptx(tiny_kernel(named=False), tmp_path)
    (symbol,) = kernel_symbols(ptx)
    assert symbol.startswith("kernel_cutlass_")
    with pytest.raises(AssertionError, match="break Rule 6"):
        assert_cudnn_symbols(ptx)


@pytest.mark.compile_only
def test_keep_artifacts_stops_dumping_when_it_exits(tmp_path, monkeypatch):
    """``cute.compile`` reuses one CompileOptions object whose keep flags the DSL turns on but never off: without
    the restore in keep_artifacts every later compile of the process dumped PTX/cubin into the working directory
    (seen: dozens of cutlass___call___*.ptx files in the repository root after a test run)."""
    skip_unless_cutedsl("4.6.2", "the tiny test kernel")
    monkeypatch.chdir(tmp_path)
    compile_ptx(tiny_kernel(named=True), tmp_path / "kept")
    tiny_kernel(named=True)()  # a later compile, outside keep_artifacts
    assert [p.name for p in tmp_path.iterdir() if p.suffix in (".ptx", ".cubin")] == []
