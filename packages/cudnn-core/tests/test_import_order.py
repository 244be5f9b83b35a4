"""test_ops_callable_exports_survive_import_order: every lazily exported callable stays a callable
whatever is imported first (fresh interpreters, both orders, every family installed in this lane)."""

from __future__ import annotations

import textwrap

import pytest

from cudnn_testing.subproc import run_fresh

PACKAGES = ["cudnn", "cudnn.sdpa", "cudnn.gemm", "cudnn.frost", "cudnn.linear_attention"]


def _run(package: str, order: str, extra_path=()):
    code = f"""
    import importlib, sys
    sys.path.insert(0, {repr(__import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "..", "shared"))})
    try:
        importlib.import_module({package!r})
    except ImportError as exc:
        print("ABSENT", exc); raise SystemExit(0)
    from cudnn_testing.exports import check_exports_survive_import_order
    problems = check_exports_survive_import_order({package!r}, {order!r})
    print("PROBLEMS", problems)
    """
    return run_fresh(textwrap.dedent(code), extra_path=extra_path)


@pytest.mark.detector
@pytest.mark.parametrize("order", ["modules-first", "symbols-first"])
@pytest.mark.parametrize("package", PACKAGES)
def test_ops_callable_exports_survive_import_order(package, order):
    proc = _run(package, order)
    if "ABSENT" in proc.stdout:
        pytest.skip(f"{package} not installed in this lane")
    assert "PROBLEMS []" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.detector
def test_detector_catches_planted_name_collision(tmp_path):
    """Planted violation: a family exports ``op`` and also has a subpackage named ``op``."""
    pkg = tmp_path / "src" / "cudnn" / "fakefam"
    (pkg / "op").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from cudnn._lazy import resolve as _resolve\n"
        "_LAZY = {'op': ('.op.api', 'op')}\n"
        "def __getattr__(name):\n    return _resolve(__name__, name, _LAZY, 'cudnn-fakefam')\n"
    )
    (pkg / "op" / "__init__.py").write_text("")
    (pkg / "op" / "api.py").write_text("def op():\n    return 1\n")
    proc = _run("cudnn.fakefam", "modules-first", extra_path=(str(tmp_path / "src"),))
    assert "cudnn.fakefam.op is the module cudnn.fakefam.op" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves(package):
    """No stub names: every entry of a lazy table resolves where its wheel is installed (a DSL below the
    family's runtime floor may decline with the version-naming error instead)."""
    code = f"""
    import importlib, sys
    sys.path.insert(0, {repr(__import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "..", "shared"))})
    try:
        pkg = importlib.import_module({package!r})
    except ImportError as exc:
        print("ABSENT", exc); raise SystemExit(0)
    from cudnn import CuteDslVersionError
    from cudnn_testing.exports import lazy_table
    bad = []
    for name in lazy_table(pkg):
        try:
            getattr(pkg, name)
        except CuteDslVersionError:
            pass
        except ImportError as exc:
            wheel_missing = "which is not installed" in str(exc)
            if not wheel_missing:
                bad.append(f"{{name}}: {{type(exc).__name__}}: {{exc}}")
    print("BAD", bad)
    """
    proc = run_fresh(textwrap.dedent(code))
    if "ABSENT" in proc.stdout:
        pytest.skip(f"{package} not installed in this lane")
    assert "BAD []" in proc.stdout, proc.stdout + proc.stderr
