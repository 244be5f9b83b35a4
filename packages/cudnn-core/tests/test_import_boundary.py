"""Rule: ``import cudnn`` needs neither torch, cutlass nor cuda-python; failures name what to install."""

from __future__ import annotations

import os
import textwrap

import pytest

from cudnn_testing.subproc import check_fresh, run_fresh

HEAVY = ("torch", "cutlass", "cuda", "tvm_ffi", "numpy")


def test_import_cudnn_pulls_in_nothing_heavy():
    out = check_fresh(
        """
        import sys, cudnn
        heavy = [m for m in ("torch", "cutlass", "cuda", "tvm_ffi") if m in sys.modules]
        print("HEAVY", heavy)
        print(cudnn.data_type.BFLOAT16, cudnn.__version__)
        """
    )
    assert "HEAVY []" in out


def test_import_cudnn_works_with_frameworks_absent():
    check_fresh(
        """
        import cudnn
        from cudnn.dsl_gate import cutedsl_state
        from cudnn.api_base import TensorDesc, TupleDict, APIBase
        from cudnn.workspace import ws_align
        d = TensorDesc.contiguous((2, 3), cudnn.data_type.HALF, "x")
        assert d.stride == (3, 1) and ws_align(1) == 128
        """,
        blocked=HEAVY,
    )


def test_dsl_gate_reads_metadata_without_importing_cutlass():
    out = check_fresh(
        """
        import sys
        from cudnn.dsl_gate import cutedsl_state, cutedsl_too_old
        s = cutedsl_state()
        print("STATE", s.version, cutedsl_too_old("0.0.1"), "cutlass" in sys.modules)
        """
    )
    assert out.strip().endswith("False")


def _synthetic_family(tmp_path, body: str, files: dict[str, str] | None = None) -> str:
    """A fake family wheel ``cudnn.fakefam`` in its own src tree (merged into the namespace via PYTHONPATH)."""
    pkg = tmp_path / "src" / "cudnn" / "fakefam"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    for name, text in (files or {}).items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return str(tmp_path / "src")


_FAMILY_INIT = """
from cudnn._lazy import resolve as _resolve
_LAZY = {"op": (".impl", "op"), "torch_op": (".torch_impl", "torch_op"), "kernel_op": (".impl", "op")}
_NEEDS_DSL = frozenset({"kernel_op"})
def __getattr__(name):
    return _resolve(__name__, name, _LAZY, "cudnn-fakefam", "FLOOR", _NEEDS_DSL)
"""


def test_namespace_merges_src_trees_on_pythonpath(tmp_path):
    src = _synthetic_family(tmp_path, _FAMILY_INIT.replace("FLOOR", "0.0"), {"impl.py": "def op():\n    return 42\n"})
    out = check_fresh("import cudnn.fakefam as f; print('VALUE', f.op())", extra_path=(src,))
    assert "VALUE 42" in out


def test_missing_framework_names_it(tmp_path):
    src = _synthetic_family(
        tmp_path, _FAMILY_INIT.replace("FLOOR", "0.0"), {"impl.py": "def op():\n    return 1\n", "torch_impl.py": "import torch\ntorch_op = 1\n"}
    )
    proc = run_fresh("import cudnn.fakefam as f; f.torch_op", blocked=("torch",), extra_path=(src,))
    assert proc.returncode != 0
    assert "ImportError: cudnn.fakefam.torch_op needs torch (pip install torch)" in proc.stderr


def test_missing_family_wheel_names_the_wheel():
    proc = run_fresh(
        """
        import cudnn
        try:
            cudnn.frost
        except ImportError as exc:
            print("ERR", exc)
        """,
        blocked=("cudnn.frost",),
    )
    assert "ERR cudnn.frost lives in the cudnn-frost wheel, which is not installed: pip install cudnn-frost" in proc.stdout, proc.stdout + proc.stderr


def test_too_old_dsl_names_both_versions(tmp_path):
    src = _synthetic_family(tmp_path, _FAMILY_INIT.replace("FLOOR", "999.0"), {"impl.py": "def op():\n    return 1\n"})
    proc = run_fresh(
        """
        import cudnn.fakefam as f
        assert f.op() == 1                      # metadata-only names import without the gate
        try:
            f.kernel_op
        except Exception as exc:
            print(type(exc).__name__, exc)
        """,
        extra_path=(src,),
    )
    assert "CuteDslVersionError" in proc.stdout, proc.stderr
    assert "needs nvidia-cutlass-dsl>=999.0" in proc.stdout


@pytest.mark.parametrize("family", ["sdpa", "gemm", "frost", "linear_attention"])
def test_family_package_import_is_light(family):
    """Importing a family package (metadata only) pulls in no torch, cutlass or cuda-python."""
    proc = run_fresh(
        f"""
        import sys, importlib
        try:
            importlib.import_module("cudnn.{family}")
        except ImportError as exc:
            print("ABSENT", exc); raise SystemExit(0)
        print("HEAVY", [m for m in ("torch", "cutlass", "cuda") if m in sys.modules])
        """
    )
    if "ABSENT" in proc.stdout:
        pytest.skip(f"cudnn.{family} is not installed in this lane")
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_wheel_layout_core_owns_namespace_init():
    """Family src trees never ship cudnn/__init__.py (cudnn-core owns it)."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    for wheel in ("cudnn-sdpa", "cudnn-gemm", "cudnn-frost", "cudnn-linear-attention"):
        init = os.path.join(root, wheel, "src", "cudnn", "__init__.py")
        if os.path.isdir(os.path.join(root, wheel)):
            assert not os.path.exists(init), f"{wheel} must not ship cudnn/__init__.py"
