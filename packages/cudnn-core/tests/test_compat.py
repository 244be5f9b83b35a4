"""cudnn._compat: the DSL feature probes agree with docs/dsl-lanes.md on whatever lane runs them.

Every lane (4.6.2, 4.7.1, 4.8.0, 4.8.1) runs this file, so each feature's floor is checked against a real
DSL: a probe that says "present" below its floor, or "absent" at or above it, fails here.
"""

import subprocess
import sys
import warnings

import pytest
from packaging.version import Version

from cudnn import _compat
from cudnn.dsl_gate import CuteDslState, CuteDslVersionError, cutedsl_state


def _needs_dsl():
    if cutedsl_state().version is None:
        pytest.skip("nvidia-cutlass-dsl is not installed")


@pytest.fixture
def fresh_probes():
    _compat.has_feature.cache_clear()
    _compat.missing_hopper_apis.cache_clear()
    yield
    _compat.has_feature.cache_clear()
    _compat.missing_hopper_apis.cache_clear()


def test_importing_compat_imports_no_cutlass():
    code = "import sys, cudnn._compat, cudnn.kernel_cache; bad = [m for m in sys.modules if m.split('.')[0] in ('cutlass', 'torch', 'tvm_ffi')]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("name", sorted(_compat.FEATURES))
def test_feature_probe_matches_its_floor(name, fresh_probes):
    """The lane table, checked: a feature is present exactly from its floor on."""
    _needs_dsl()
    feature = _compat.FEATURES[name]
    if name == "tvm_ffi_export" and not _compat.tvm_ffi_available():
        assert not _compat.has_feature(name)
        return
    expected = Version(cutedsl_state().version) >= Version(feature.floor)
    assert _compat.has_feature(name) is expected, f"{name}: probe says {not expected} on DSL {cutedsl_state().version}, floor {feature.floor}"


def test_every_hopper_api_is_present(fresh_probes):
    _needs_dsl()
    assert _compat.missing_hopper_apis() == ()


def test_probe_sees_a_missing_name(fresh_probes, monkeypatch):
    monkeypatch.setitem(_compat.FEATURES, "_test_missing", _compat.Feature("x", "4.6.2", lambda: _compat._exists("cutlass.cute.no_such_api_anywhere")))
    monkeypatch.setattr(_compat, "cutedsl_state", lambda: CuteDslState("4.8.1", True))
    assert _compat.has_feature("_test_missing") is False


@pytest.mark.parametrize("installed, floor, expected", [("4.8.1", "4.8.0", True), ("4.7.1", "4.8.0", False)])
def test_version_compare_where_the_probe_cannot_run(fresh_probes, monkeypatch, installed, floor, expected):
    def broken_probe():
        raise RuntimeError("the probe itself cannot run here")

    monkeypatch.setitem(_compat.FEATURES, "_test_broken", _compat.Feature("x", floor, broken_probe))
    monkeypatch.setattr(_compat, "cutedsl_state", lambda: CuteDslState(installed, True))
    monkeypatch.setattr(_compat, "cutedsl_too_old", lambda f: Version(installed) < Version(f))
    assert _compat.has_feature("_test_broken") is expected


def test_no_dsl_means_no_feature(fresh_probes, monkeypatch):
    monkeypatch.setattr(_compat, "cutedsl_state", lambda: CuteDslState(None, False))
    assert not any(_compat.has_feature(n) for n in _compat.FEATURES)
    assert _compat.tvm_ffi_export_reason() == "nvidia-cutlass-dsl is not installed"


def test_feature_error_names_both_versions(monkeypatch):
    monkeypatch.setattr("cudnn.dsl_gate.cutedsl_state", lambda: CuteDslState("4.7.1", True))
    err = _compat.feature_error("tma_override_ops", "GemmSm90 grouped path")
    assert isinstance(err, CuteDslVersionError)
    assert "4.7.1" in str(err) and ">=4.8.0" in str(err) and "GemmSm90 grouped path" in str(err)


def test_name_kernel_raises_the_version_error_without_set_name_prefix(monkeypatch):
    def plain_function():
        pass

    with pytest.raises(CuteDslVersionError, match=r"plain_function.*Rule 6.*nvidia-cutlass-dsl>=4\.6\.2"):
        _compat.name_kernel(plain_function)


@pytest.mark.compile_only
def test_name_kernel_sets_the_rule6_options():
    _needs_dsl()
    import cutlass.cute as cute

    @cute.kernel
    def cudnn_compat_probe_kernel():
        pass

    assert _compat.has_name_prefix()
    calls = []
    real = cudnn_compat_probe_kernel.set_name_prefix
    cudnn_compat_probe_kernel.set_name_prefix = lambda name, **kw: (calls.append((name, kw)), real(name, **kw))
    assert _compat.name_kernel(cudnn_compat_probe_kernel) is cudnn_compat_probe_kernel
    assert calls == [("cudnn", {"remove_cutlass_symbol": True})]


def test_shims_return_the_moved_names_without_deprecation_warnings():
    _needs_dsl()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        layout = _compat.layout_enum()
        mode = _compat.tensormap_update_mode()
        major = _compat.operand_major_mode()
    assert hasattr(layout, "ROW_MAJOR") and hasattr(major, "K")
    assert len(list(mode)) >= 2
    assert _compat.make_fake_stream(use_tvm_ffi_env_stream=True) is not None


def test_tvm_ffi_reports():
    import importlib.util

    assert _compat.tvm_ffi_available() is (importlib.util.find_spec("tvm_ffi") is not None)
    reason = _compat.tvm_ffi_export_reason()
    assert (reason is None) is _compat.tvm_ffi_export_available()
    if not _compat.tvm_ffi_available() and cutedsl_state().version is not None:
        assert "apache-tvm-ffi" in reason


def test_compile_options():
    assert _compat.compile_options() == ""
    assert _compat.compile_options(tvm_ffi=True) == "--enable-tvm-ffi"
    assert _compat.compile_options(tvm_ffi=True, keep_ptx_dir="/tmp/x", extra="--lineinfo") == "--lineinfo --enable-tvm-ffi --keep-ptx --dump-dir /tmp/x"


def test_dsl_env_manager_is_live_after_import():
    _needs_dsl()
    import cutlass  # noqa: F401

    envar = _compat.dsl_env_manager()
    assert envar is not None and hasattr(envar, "keep_ptx") and hasattr(envar, "dump_dir")
