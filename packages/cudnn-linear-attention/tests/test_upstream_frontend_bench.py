"""CPU checks of ``benchmarks/upstream_frontend.py`` (NVIDIA's cudnn frontend 1.32 as a column of the issue #7
linear-attention tables, timed in its own process) and of the harness's ``Measured`` hook. No GPU, no upstream wheel:

- the runner's argument parsing, and its case labels equal to the forward / backward benchmark files' own labels (the
  provider maps cells back by them, so a drift would empty the column);
- the JSON round trip: what the runner writes is what the provider's ``lookup`` turns into ``Measured`` / ``Unsupported``;
- ``run_benchmark`` records a ``Measured`` as is (never re-timed; note kept), with one and with several rounds;
- ``run_benchmark`` loads the GPU (``settle``) before a case's timed runs: once per case with several rounds, before
  each timed provider with one round, never for a case of ``Measured`` cells only; the table's convention says so;
- the provider: ``Unsupported`` with the reason when the bundle is missing (the table still prints), one runner per
  table, and the runner's process isolation (a stub upstream site, ``--dry-run``): the child imports the stub's
  ``cudnn``, never this project's, and refuses to run when this project's ``cudnn`` comes first on its path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(_ROOT, "benchmarks"))

import harness  # noqa: E402
import linear_attention as la_bench  # noqa: E402
import linear_attention_bwd as bwd_bench  # noqa: E402
import upstream_frontend as up  # noqa: E402


def test_runner_arguments():
    a = up.parse_args(["kda", "--cases", "8192x16, 32768x32v", "--json", "out.json"])
    assert (a.family, a.direction, a.specs, a.json, a.graph, a.plan_name, a.dry_run) == ("kda", "fwd", ["8192x16", "32768x32v"], "out.json", False, None, False)
    a = up.parse_args(["gdn", "--direction", "bwd", "--cases", "4096x64", "--json", "o", "--graph", "--plan-name", "kda_hopper"])
    assert (a.family, a.direction, a.specs, a.graph, a.plan_name) == ("gdn", "bwd", ["4096x64"], True, "kda_hopper")
    assert up.parse_spec("32768x32v") == {"t": 32768, "h": 32, "varlen": True}
    for bad in (["kda", "--cases", "8k16", "--json", "o"], ["kda", "--cases", ",", "--json", "o"], ["mamba", "--cases", "8192x16", "--json", "o"]):
        with pytest.raises(SystemExit):
            up.parse_args(bad)
    with pytest.raises(SystemExit):
        up.parse_args(["kda", "--cases", "8192x16"])  # --json is required


def test_case_labels_are_the_benchmark_files_labels():
    tables = [("kda", "fwd", la_bench._kda_cases(False)), ("gdn", "fwd", la_bench._gdn_cases())]
    tables += [(fam, "bwd", bwd_bench.cases(fam)) for fam in ("kda", "gdn")]
    for fam, direction, cases in tables:
        assert cases and any(c.params["varlen"] for c in cases)
        for c in cases:
            spec = up.case_spec(c)
            assert up.case_label(fam, direction, spec) == c.label
            assert up.make_case(fam, direction, spec).params == {k: c.params[k] for k in ("t", "h", "varlen")}


def test_json_round_trip(tmp_path):
    path = str(tmp_path / "up.json")
    written = {
        "upstream": "1.32.0",
        "ms": {"kda fwd T8k H16": 1.582},
        "failed": {"kda fwd T32k H64": "declined: cudnnGraphNotSupportedError: no engine"},
        "served_by": {"kda fwd T8k H16": "fwd kda_hopper_cuda"},
    }
    up._write(written, path)
    assert not os.path.exists(path + ".part")
    with open(path) as f:
        data = json.load(f)
    assert data == written
    cell = up.lookup(data, "kda", "fwd", "8192x16")
    assert isinstance(cell, harness.Measured) and cell.ms == 1.582
    assert "1.32.0" in cell.note and "kda_hopper_cuda" in cell.note and "own process" in cell.note
    with pytest.raises(harness.Unsupported, match="no engine"):
        up.lookup(data, "kda", "fwd", "32768x64")
    with pytest.raises(harness.Unsupported, match="did not report"):
        up.lookup(data, "kda", "fwd", "32768x32v")
    # the runner's reasons: an engine decline reads as one, anything else as an error
    not_supported = type("cudnnGraphNotSupportedError", (Exception,), {})
    assert up._reason(not_supported("no plan\n  for this graph")) == "declined: cudnnGraphNotSupportedError: no plan for this graph"
    assert up._reason(NotImplementedError("x")).startswith("declined: ") and up._reason(RuntimeError("y")) == "error: RuntimeError: y"


def test_run_benchmark_records_measured_as_is(tmp_path, monkeypatch):
    timed = []

    def fake_time_ms(fn, *a, **k):
        timed.append(fn)
        return 1.0

    monkeypatch.setattr(harness, "time_ms", fake_time_ms)
    cases = [harness.Case("c1", {}, bytes=4e6), harness.Case("c2", {}, bytes=4e6)]
    calls = []
    providers = [
        harness.Provider("ours", lambda case: lambda: calls.append(case.label)),
        harness.Provider("upstream", lambda case: harness.Measured({"c1": 3.0, "c2": 5.0}[case.label], f"note {case.label}")),
    ]
    for rounds in (1, 3):
        timed.clear()
        res = harness.run_benchmark(f"m{rounds}", cases, providers, convention="test", metric="ms", out_dir=str(tmp_path), rounds=rounds)
        by = {(r.case, r.provider): r for r in res}
        assert by[("c1", "upstream")].ms == 3.0 and by[("c2", "upstream")].ms == 5.0
        assert by[("c1", "upstream")].gbps == pytest.approx(4e6 / 3.0 / 1e6) and by[("c2", "upstream")].note == "note c2"
        assert by[("c1", "ours")].ms == 1.0 and by[("c1", "ours")].note == ""
        assert timed and not any(isinstance(fn, harness.Measured) for fn in timed)  # ours timed here, upstream never
        md = (tmp_path / f"m{rounds}.md").read_text()
        assert "| c1 | 1.0000 | 3.0000 | 3.00x |" in md and "c2 / upstream: note c2" in md
    assert harness.Measured(2.0)() is None  # a warm-up call on it (linear_attention.py::_progress) is harmless


def test_run_benchmark_settles_before_timing(tmp_path, monkeypatch):
    events = []
    monkeypatch.setattr(harness, "time_ms", lambda fn, *a, **k: events.append("time") or 1.0)
    monkeypatch.setattr(harness, "settle", lambda ms=0: events.append(f"settle {ms:g}"))
    cases = [harness.Case("c1", {}, bytes=4e6), harness.Case("c2", {}, bytes=4e6)]
    ours = harness.Provider("ours", lambda case: lambda: None)
    fa = harness.Provider("peer", lambda case: lambda: None)
    up_only = harness.Provider("upstream", lambda case: harness.Measured(3.0))
    harness.run_benchmark("s1", cases, [ours, fa, up_only], convention="x", metric="ms", out_dir=str(tmp_path), settle_ms=250)
    assert events == ["settle 250", "time", "settle 250", "time"] * 2  # one round: before each timed provider
    events.clear()
    harness.run_benchmark("s3", cases, [ours, fa, up_only], convention="x", metric="ms", out_dir=str(tmp_path), rounds=3, settle_ms=250)
    assert events == (["settle 250"] + ["time"] * 6) * 2  # several rounds: once per case, before its first round
    assert "timed after 250 ms of GPU load" in (tmp_path / "s3.md").read_text()
    events.clear()
    harness.run_benchmark("m", cases, [up_only], convention="x", metric="ms", out_dir=str(tmp_path), rounds=2, settle_ms=250)
    assert events == []  # nothing timed here: nothing to settle
    harness.run_benchmark("z", cases, [ours], convention="x", metric="ms", out_dir=str(tmp_path), settle_ms=0)
    assert "GPU load" not in (tmp_path / "z.md").read_text()


def test_provider_unsupported_when_bundle_missing(tmp_path, monkeypatch):
    def no_runner(*a, **k):
        raise AssertionError("no runner without a bundle")

    monkeypatch.setattr(up, "run_runner", no_runner)
    case = up.make_case("kda", "fwd", "8192x16")
    missing = tmp_path / "nowhere"
    monkeypatch.setenv(up.ENV_SITE, str(missing))
    p = up.upstream_provider("kda", "fwd", [case])
    assert p.name == "upstream" and p.available() is None
    with pytest.raises(harness.Unsupported, match="nowhere"):
        p.make(case)
    # the default site, no bundle to unpack: the reason names the pack step
    monkeypatch.delenv(up.ENV_SITE)
    monkeypatch.setattr(up, "DEFAULT_SITE", str(missing))
    monkeypatch.setattr(up, "BUNDLE_DIR", str(tmp_path / "no-bundle"))
    with pytest.raises(harness.Unsupported, match="pack --upstream"):
        p.make(case)
    # the table still prints, the reason in its notes
    monkeypatch.setattr(harness, "time_ms", lambda fn, *a, **k: 1.0)
    res = harness.run_benchmark("t", [case], [harness.Provider("ours", lambda c: lambda: None), p], convention="x", metric="ms", out_dir=str(tmp_path))
    assert [r.ms for r in res] == [1.0, None] and "unsupported: upstream bundle missing" in res[1].note
    assert "kda fwd T8k H16 / upstream: unsupported: upstream bundle missing" in (tmp_path / "t.md").read_text()
    with pytest.raises(ValueError):
        up.upstream_provider("mamba", "fwd")


def _stub_site(root):
    """A folder shaped like the unpacked upstream bundle: a ``cudnn`` package next to its dist-info."""
    site = root / "upstream_site"
    (site / "cudnn").mkdir(parents=True)
    (site / "cudnn" / "__init__.py").write_text('__version__ = "1.32.0-stub"\n')
    (site / "nvidia_cudnn_frontend-1.32.0.dist-info").mkdir()
    return site


def test_provider_runs_one_runner_per_table(tmp_path, monkeypatch):
    monkeypatch.setenv(up.ENV_SITE, str(_stub_site(tmp_path)))
    cases = [up.make_case("kda", "bwd", s) for s in ("8192x16", "32768x64", "32768x32v")]
    runs = []

    def fake_runner(family, direction, specs, **kw):
        runs.append((family, direction, list(specs), kw["graph"]))
        return {"upstream": "1.32.0", "ms": {up.case_label(family, direction, s): 1.0 + i for i, s in enumerate(specs)}, "failed": {}, "served_by": {}}

    monkeypatch.setattr(up, "run_runner", fake_runner)
    p = up.upstream_provider("kda", "bwd", cases, graph=True)
    assert p.name == "upstream+graph"
    assert [p.make(c).ms for c in cases] == [1.0, 2.0, 3.0]
    assert runs == [("kda", "bwd", ["8192x16", "32768x64", "32768x32v"], True)]
    assert p.make(up.make_case("kda", "bwd", "4096x16")).ms == 1.0  # a case outside the list: its own run
    assert len(runs) == 2 and runs[1][2] == ["4096x16"]


def _our_src_path():
    return os.pathsep.join(os.path.join(_ROOT, "packages", d, "src") for d in sorted(os.listdir(os.path.join(_ROOT, "packages"))))


def test_runner_process_sees_only_upstream(tmp_path, monkeypatch):
    site = _stub_site(tmp_path)
    monkeypatch.setenv("PYTHONPATH", _our_src_path() + os.pathsep + os.path.join(_ROOT, "shared"))
    env = up.child_env(str(site))
    parts = env["PYTHONPATH"].split(os.pathsep)
    assert parts[0] == str(site) and not any(os.path.isdir(os.path.join(p, "cudnn")) for p in parts[1:])
    assert env[up.ENV_SITE] == str(site)
    out = tmp_path / "dry.json"
    data = up.run_runner("kda", "fwd", ["8192x16", "32768x32v"], site=str(site), timeout=120, dry_run=True, out_path=str(out))
    assert data["cudnn_file"] == str(site / "cudnn" / "__init__.py") and data["upstream"] == "1.32.0-stub"
    assert data["failed"] == {"kda fwd T8k H16": "dry run: nothing timed", "kda fwd varlen64 T32k H32": "dry run: nothing timed"}
    with pytest.raises(harness.Unsupported, match="dry run"):
        up.lookup(data, "kda", "fwd", "8192x16")


def test_runner_refuses_this_projects_cudnn(tmp_path):
    """Run by hand with our src trees first on the path, the runner must refuse rather than time our cudnn."""
    env = dict(os.environ, PYTHONPATH=_our_src_path() + os.pathsep + str(_stub_site(tmp_path)))
    env.pop(up.ENV_SITE, None)
    out = tmp_path / "refused.json"
    script = os.path.join(_ROOT, "benchmarks", "upstream_frontend.py")
    done = subprocess.run(
        [sys.executable, script, "kda", "--cases", "8192x16", "--json", str(out), "--dry-run"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "must not see this project's cudnn" in done.stderr
    assert "must not see this project's cudnn" in json.loads(out.read_text())["failed"]["kda fwd T8k H16"]


def test_benchmark_input_helpers_import_no_cudnn(tmp_path):
    """The runner imports ``linear_attention`` / ``linear_attention_bwd`` for their input helpers next to upstream's
    ``cudnn``: neither may import a ``cudnn`` at module level (a poisoned one here must stay untouched)."""
    site = tmp_path / "poisoned"
    (site / "cudnn").mkdir(parents=True)
    (site / "cudnn" / "__init__.py").write_text('raise ImportError("module-level cudnn import in a benchmark file the runner uses")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.path.join(_ROOT, "benchmarks"), os.path.join(_ROOT, "shared")]))
    code = "import linear_attention, linear_attention_bwd, upstream_frontend, sys; assert 'cudnn' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
