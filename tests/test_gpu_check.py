"""tools/gpu_check.py, the project's check on a GPU machine: its time limit held by every stage
and pass (queued or not, against slow fakes), each stage's failure failing the check, --backends
and --no-bench heard by every stage, the bench's footnotes kept, the passes' weights measured
from the outcome files it writes, the facts it reads from tox.ini, and the check itself run here
as it runs there. (On a machine without a GPU it checks the CPU; what it found on a GPU is in
docs/contributing.md.)

The stages are replaced by fakes where a test says so: small scripts that take the time and
exit with the status a test asks for, so that the check's own plumbing is what is tested. Those
tests do not depend on the backend: they run once, in the numpy env (DEVSHIM_BACKEND=numpy,
plain), as the README's commands do."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import devshim as ds
from devshim import settings
from devshim.backends import specs
from devshim.bench.table import format_table

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.py"
#: A test of each backend's harness, and a test marked `same_in_every_pass`.
HARNESS_TEST = "tests/test_array_module.py::test_each_framework_gets_its_array_module"
ONCE_TEST = "tests/test_launcher.py::test_devshim_info_says_which_process_this_is_under_a_launcher"


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


gpu_check = _load("gpu_check")
tox_facts = _load("tox_facts")
plugin = _load("gpu_check_plugin")

#: Once per CI run: in the numpy env (tox names it in TOX_ENV_NAME; outside tox, the numpy pass).
once = pytest.mark.skipif(
    os.environ.get("DEVSHIM_BACKEND") != "numpy" or bool(settings.virtual_device_count())
    or os.environ.get("TOX_ENV_NAME", "numpy") != "numpy",
    reason="the check's plumbing, tested with fake stages: the same everywhere, run once, in the numpy env")

#: A stage stand-in: `fake.py KIND SECONDS EXIT [--junitxml=PATH ...]` sleeps, prints what that
#: stage prints (a pytest pass writes its JUnit report and an outcome line), and exits.
FAKE = '''
import json, os, sys, time
kind, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
time.sleep(seconds)
if kind == "suite":
    report = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml="))
    failed = int(code != 0)
    cases = '<testcase classname="tests.test_fake" name="test_ok"/>' + (
        '<testcase classname="tests.test_fake" name="test_bad"><failure message="AssertionError: fake"/></testcase>'
        if failed else "")
    open(report, "w").write(f'<testsuite tests="{1 + failed}" failures="{failed}" errors="0" skipped="0">{cases}</testsuite>')
    with open(os.environ["GPU_CHECK_OUTCOMES"], "a") as f:
        f.write(json.dumps(["tests/test_fake.py::test_ok", "call", "passed", "", seconds]) + "\\n")
elif kind == "selftest":
    print("verdict: PASSED: fake" if code == 0 else "  FAIL guard  fake\\nverdict: FAILED: fake")
elif kind == "memory":
    print("== torch\\n   gpu:0: fake" + ("" if code == 0 else "   DIFFERS: in_use"))
elif kind == "bench":
    print(open(os.environ["FAKE_TABLE"]).read() if code == 0 else "")
    print("wrote rows.json")
    if code:
        print("Traceback: fake bench failure", file=sys.stderr)
sys.exit(code)
'''


def _marked_rows() -> list:
    """Rows carrying each mark, on a busy machine: their table has a line under it for each."""
    row = {"backend": "numpy", "device": "cpu:0", "n": 64, "seconds": 1e-3, "seconds_iqr": 1e-5,
           "noisy": False, "settled": True, "stalled": False, "busy": True}
    return [row, dict(row, noisy=True), dict(row, settled=False), dict(row, stalled=True, n=128)]


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """Every stage a fake (each quick and passing unless a test says otherwise: `fakes.set(stage,
    seconds, code)`); the commands each stage was given are kept in `fakes.calls`."""
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    table = tmp_path / "table.txt"
    from devshim.bench.experiments import experiments

    table.write_text("devshim bench matmul (numpy)\n" + format_table(experiments()["matmul"], _marked_rows()))
    monkeypatch.setenv("FAKE_TABLE", str(table))

    class Fakes:
        plan = {"suite": (0.1, 0), "selftest": (0.1, 0), "memory": (0.1, 0), "bench": (0.1, 0)}
        calls: dict = {"suite": [], "selftest": [], "memory": [], "bench": []}

        def set(self, stage, seconds, code=0):
            self.plan[stage] = (seconds, code)

        def command(self, stage, *given):
            self.calls[stage].append(given)
            seconds, code = self.plan[stage]
            return [sys.executable, str(script), stage, str(seconds), str(code)]

    found = Fakes()
    monkeypatch.setattr(gpu_check, "SUITE_NEEDS", ())
    monkeypatch.setattr(gpu_check, "FEWEST_SECONDS", 1)  # (fakes start in no time: short limits suffice)
    monkeypatch.setattr(gpu_check, "FEWEST_PASS_SECONDS", 1)
    monkeypatch.setattr(gpu_check, "memory_frameworks", lambda: tuple(specs()))
    monkeypatch.setattr(gpu_check, "suite_command",
                        lambda python, which, workers, args, report, selection, ignored:
                        found.command("suite", which, selection) + [f"--junitxml={report}"])
    monkeypatch.setattr(gpu_check, "selftest_command", lambda python, backends: found.command("selftest", *backends))
    monkeypatch.setattr(gpu_check, "memory_command",
                        lambda python, frameworks, out=None: found.command("memory", *frameworks))
    monkeypatch.setattr(gpu_check, "bench_command", lambda python, name, backend: found.command("bench", name, backend))
    return found


def _check(tmp_path, *arguments) -> tuple:
    """(exit status, summary text, seconds) of the check run in this process."""
    began = time.monotonic()
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--workers", "1", *arguments])
    return code, (tmp_path / "out" / "summary.md").read_text(), time.monotonic() - began


# ------------------------------------------------------------------ the time limit


@once
def test_a_slow_pass_is_stopped_at_the_time_limit_and_queued_passes_are_not_started(tmp_path, fakes, monkeypatch):
    """Three passes taking turns (--parallel 1), each a fake that takes a minute: the first is
    stopped at the check's limit, the two queued behind it are reported as not run, and the
    check ends within its limit, failed."""
    monkeypatch.setattr(gpu_check, "passes", lambda backends, no_virtual: [("numpy", 0), ("numpy", 2), ("numpy", 4)])
    fakes.set("suite", 60)
    code, summary, took = _check(tmp_path, "--backends", "numpy", "--no-bench", "--parallel", "1", "--time-limit", "5")
    assert took < 5 + 4, took
    assert code == 1 and "result: FAILED" in summary
    assert "- numpy: stopped at the time limit" in summary
    assert "- numpy on 2 virtual GPUs: not run (the time limit)" in summary
    assert "- numpy on 4 virtual GPUs: not run (the time limit)" in summary
    assert len(fakes.calls["suite"]) == 1  # the queued passes never started


@once
@pytest.mark.parametrize("stage", ["selftest", "memory", "bench"])
def test_every_other_stage_is_stopped_at_the_time_limit_too(tmp_path, fakes, stage):
    fakes.set(stage, 60)
    code, summary, took = _check(tmp_path, "--backends", "numpy", "--time-limit", "5", "--bench-time", "2")
    assert took < 5 + 4, (stage, took)
    assert code == 1 and "result: FAILED" in summary
    assert any(line.startswith("- ") and ("stopped" in line or "not run" in line) for line in
               summary.split("result: FAILED", 1)[1].splitlines()), summary


@once
def test_the_suite_leaves_the_bench_its_time(tmp_path, fakes, monkeypatch):
    """A pass that would run past the limit is stopped early enough for the bench to run in the
    seconds kept for it."""
    monkeypatch.setattr(gpu_check, "bench_runs", lambda python, backends, env: [("matmul", "numpy")])
    fakes.set("suite", 60)
    code, summary, took = _check(tmp_path, "--backends", "numpy", "--no-virtual", "--time-limit", "8",
                                 "--bench-time", "3")
    assert took < 8 + 4
    assert "### matmul on numpy: ok" in summary and "- numpy: stopped at the time limit" in summary


# ------------------------------------------------------------------ every stage's failure fails the check


@once
def test_with_every_stage_passing_the_check_passes(tmp_path, fakes, monkeypatch):
    monkeypatch.setattr(gpu_check, "bench_runs", lambda python, backends, env: [("matmul", "numpy")])
    code, summary, _ = _check(tmp_path, "--backends", "numpy")
    assert code == 0 and summary.rstrip().endswith("result: PASSED"), summary
    assert [len(fakes.calls[stage]) for stage in ("memory", "selftest", "suite", "bench")] == [1, 1, 1, 1]


@once
@pytest.mark.parametrize("stage, reason", [
    ("memory", "memory comparison: FAILED: a figure differs, or a framework failed"),
    ("selftest", "selftest: exit 1, verdict: FAILED: fake"),
    ("suite", "numpy: 1 failed, 0 errors (exit 1)"),
    ("bench", "bench matmul on numpy: FAILED (1)"),
])
def test_a_failing_stage_fails_the_check(tmp_path, fakes, monkeypatch, stage, reason):
    monkeypatch.setattr(gpu_check, "bench_runs", lambda python, backends, env: [("matmul", "numpy")])
    fakes.set(stage, 0.1, 1)
    code, summary, _ = _check(tmp_path, "--backends", "numpy")
    assert code == 1, summary
    assert summary.split("result: FAILED", 1)[1].strip().splitlines() == [f"- {reason}"]


@once
def test_the_memory_comparison_without_a_gpu_to_reach_fails_only_where_there_is_one(tmp_path, fakes, monkeypatch):
    fakes.set("memory", 0.1, 2)  # gpu_memory_check.py: no framework could run on a GPU
    monkeypatch.setattr(gpu_check, "_nvidia_gpus", lambda: ())
    code, summary, _ = _check(tmp_path, "--backends", "numpy", "--no-virtual", "--bench-time", "1")
    assert "no GPU here: nothing to compare" in summary and "memory comparison" not in summary.split("result:")[1]
    monkeypatch.setattr(gpu_check, "_nvidia_gpus", lambda: ("NVIDIA H200, 143771 MiB, 580.95",))
    code, summary, _ = _check(tmp_path, "--backends", "numpy", "--no-virtual", "--bench-time", "1")
    assert code == 1 and "- memory comparison: FAILED: no framework reached the GPU nvidia-smi lists" in summary


def test_the_memory_comparison_fails_when_a_frameworks_process_fails(monkeypatch, capsys):
    memory = _load("gpu_memory_check")
    failed = [{"framework": "torch", "error": "exit status 1: Segmentation fault"},
              {"framework": "jax", "skipped": "jax is not installed here"}]
    assert memory.report(failed) == 1 and "FAILED: exit status 1" in capsys.readouterr().out
    assert memory.report([failed[1]]) == 2  # nothing ran, nothing failed: no GPU to compare on


# ------------------------------------------------------------------ --backends and --no-bench


@once
def test_no_bench_leaves_out_every_measurement(tmp_path, fakes):
    code, summary, _ = _check(tmp_path, "--backends", "numpy", "--no-bench")
    assert code == 0, summary
    assert fakes.calls["memory"] == [] and fakes.calls["bench"] == []
    assert "## GPU memory" not in summary and "## devshim bench" not in summary


@once
def test_every_stage_checks_the_backends_asked_for_and_no_other(tmp_path, fakes, monkeypatch):
    """Every backend seen as installed; the check asked for two: each stage hears of those alone
    (the memory comparison of those it compares, the bench's per-backend experiments on each, an
    experiment of one framework only where it is asked for)."""
    asked = [name for name in specs() if specs()[name].has_module("ops")][:2]
    monkeypatch.setattr(gpu_check, "_installed", lambda name: True)
    monkeypatch.setattr(gpu_check, "memory_frameworks", lambda: tuple(asked[1:]) + ("another",))
    code, summary, _ = _check(tmp_path, "--backends", *asked, "--bench-time", "30", "--time-limit", "0")
    assert fakes.calls["selftest"] == [tuple(asked)]
    assert fakes.calls["memory"] == [tuple(asked[1:])]
    assert {which[0] for which, _ in fakes.calls["suite"]} == set(asked)
    benched = fakes.calls["bench"]
    from devshim.bench.experiments import experiments

    for name, experiment in experiments().items():
        runs = [backend for ran, backend in benched if ran == name]
        if experiment.per_backend:
            assert runs == [",".join(asked)], name
        else:
            assert runs == ([None] if experiment.framework in (None, *asked) else []), name


# ------------------------------------------------------------------ the summary


def test_the_summary_keeps_the_tables_and_every_line_under_them():
    from devshim.bench.experiments import experiments

    table = format_table(experiments()["matmul"], _marked_rows())
    printed = f"devshim bench matmul (numpy)\n{table}\nwrote rows.json\n"
    kept = gpu_check.bench_table(printed)
    assert kept == table.splitlines()
    under = [line for line in kept if not line.startswith("|")]
    assert [line[0] for line in under] == ["*", "+", "~"]  # each mark's line (and the stall's, not "busy")
    quiet_busy = [dict(_marked_rows()[0])]
    kept = gpu_check.bench_table(f"devshim bench matmul\n{format_table(experiments()['matmul'], quiet_busy)}\n")
    assert kept[-1].startswith("The machine was busy") and "held steady" in kept[-1]
    assert gpu_check.bench_table("devshim bench transfer (numpy)\nno device here: left out\n") == [
        "no device here: left out"]


@once
def test_the_bench_tables_in_the_summary_keep_their_footnotes(tmp_path, fakes, monkeypatch):
    monkeypatch.setattr(gpu_check, "bench_runs", lambda python, backends, env: [("matmul", "numpy")])
    code, summary, _ = _check(tmp_path, "--backends", "numpy", "--no-virtual")
    section = summary.split("### matmul on numpy: ok", 1)[1]
    for mark in ("* runs disagree", "+ warm-up did not settle", "~ runs stalled"):
        assert f"\n{mark}" in section, mark
    assert "wrote rows.json" not in section


# ------------------------------------------------------------------ the passes and their weights


def test_passes_that_run_at_once_share_the_workers_by_their_weight():
    plain = [("torch", 0), ("jax", 0), ("cupy", 0), ("numpy", 0)]
    weights = {("torch", 0): 170.0, ("jax", 0): 100.0, ("cupy", 0): 65.0, ("numpy", 0): 100.0}
    shares = gpu_check.worker_shares(plain, 16, 6, weights)
    assert shares[("torch", 0)] > shares[("jax", 0)] == shares[("numpy", 0)] > shares[("cupy", 0)] >= 1
    assert abs(sum(shares.values()) - 16) <= 1
    # taking turns, each pass has the workers of its turn; a single pass, all of them
    assert set(gpu_check.worker_shares(plain, 16, 2, weights).values()) == {8}
    assert gpu_check.worker_shares([("numpy", 0)], 2, 6, {("numpy", 0): 1.0}) == {("numpy", 0): 2}


def test_a_pass_never_measured_weighs_the_median_of_those_measured(tmp_path):
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"seconds": {"torch-0": 170.0, "jax-0": 100.0, "numpy-0": 90.0}}))
    found = gpu_check.pass_weights([("torch", 0), ("jax", 4)], weights)
    assert found == {("torch", 0): 170.0, ("jax", 4): 100.0}


def _outcomes(folder: Path, key: str, seconds: list) -> None:
    lines = [json.dumps([f"tests/test_x.py::test_{i}", "call", "passed", "", s]) for i, s in enumerate(seconds)]
    (folder / f"outcomes-{key}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_weights_are_measured_from_the_outcome_files_a_check_wrote(tmp_path, capsys):
    """`--update-weights OUT`: each finished pass weighs its tests' seconds there; one that did not
    finish keeps its weight, scaled as the measured ones moved."""
    out = tmp_path / "out"
    out.mkdir()
    _outcomes(out, "torch-0", [100.0, 40.5])
    _outcomes(out, "numpy-0", [30.0, 30.0])
    _outcomes(out, "jax-4", [5.0])
    (out / "passes.json").write_text(json.dumps({
        "torch-0": {"exit": 0, "seconds": 150.0, "complete": True},
        "numpy-0": {"exit": 1, "seconds": 70.0, "complete": True},
        "jax-4": {"exit": None, "seconds": 20.0, "complete": False}}))
    (out / "summary.md").write_text("# devshim GPU check (2026-12-01 10:00)\n\n- Python 3.12.3 (python), 16 CPUs\n"
                                    "- GPU: NVIDIA H200, 143771 MiB\n- frameworks: torch 2.11.0\n")
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"seconds": {"torch-0": 1.405, "numpy-0": 0.6, "jax-4": 0.25}}))
    assert gpu_check.main(["--update-weights", str(out), "--weights-file", str(weights)]) == 0
    written = json.loads(weights.read_text())
    assert written["seconds"] == {"jax-4": 25.0, "numpy-0": 60.0, "torch-0": 140.5}  # jax-4: 0.25 x 100
    assert "NVIDIA H200" in written["measured"] and "2026-12-01" in written["measured"]
    assert "jax-4: did not finish there" in capsys.readouterr().out
    (out / "passes.json").write_text(json.dumps({"jax-4": {"exit": None, "seconds": 20.0, "complete": False}}))
    assert gpu_check.main(["--update-weights", str(out), "--weights-file", str(weights)]) == 1


def test_a_pass_stopped_at_the_time_limit_weighs_at_least_what_it_ran(tmp_path):
    """The H200's check of 2026-11-28: only the virtual passes finished, and none of them had a
    weight before; the plain passes, stopped, had. Those weigh at least their seconds so far, or
    their old weight scaled by how far the stopped passes' seconds moved, whichever is more."""
    out = tmp_path / "out"
    out.mkdir()
    for key, seconds in {"torch-0": [835.0], "numpy-0": [475.0], "cupy-0": [367.0], "torch-2": [452.0]}.items():
        _outcomes(out, key, seconds)
    (out / "passes.json").write_text(json.dumps({
        "torch-0": {"exit": None, "seconds": 262.0, "complete": False},
        "numpy-0": {"exit": None, "seconds": 262.0, "complete": False},
        "cupy-0": {"exit": None, "seconds": 262.0, "complete": False},
        "torch-2": {"exit": 1, "seconds": 187.0, "complete": True}}))
    weights = tmp_path / "weights.json"
    weights.write_text(json.dumps({"seconds": {"torch-0": 1.7, "numpy-0": 1.0, "cupy-0": 0.65, "jax-0": 1.0}}))
    assert gpu_check.main(["--update-weights", str(out), "--weights-file", str(weights)]) == 0
    # The scale: the median of 835 / 1.7 = 491.2, 475 / 1.0 and 367 / 0.65 = 564.6 seconds a unit, at least.
    assert json.loads(weights.read_text())["seconds"] == {
        "torch-2": 452.0, "torch-0": 835.0, "numpy-0": 491.2, "cupy-0": 367.0, "jax-0": 491.2}


def test_the_weights_file_gives_each_plain_pass_a_weight():
    written = json.loads(gpu_check.WEIGHTS.read_text())
    assert written["measured"] and written["seconds"]
    assert set(written["seconds"]) <= {gpu_check.pass_key((name, virtual)) for name in specs()
                                       for virtual in (0, gpu_check.VIRTUAL.get(name, 0))}


@once
def test_the_check_writes_what_the_weights_are_measured_from(tmp_path, fakes, monkeypatch):
    fakes.set("suite", 0.5)
    code, _, _ = _check(tmp_path, "--backends", "numpy", "--no-bench")
    out = tmp_path / "out"
    ended = json.loads((out / "passes.json").read_text())
    assert ended["numpy-0"]["complete"] is True and ended["numpy-0"]["exit"] == 0
    assert (out / "outcomes-numpy-0.jsonl").exists()
    weights = tmp_path / "weights.json"
    assert gpu_check.main(["--update-weights", str(out), "--weights-file", str(weights)]) == 0
    assert json.loads(weights.read_text())["seconds"]["numpy-0"] == 0.5


def test_a_selection_file_names_files_and_ids_for_every_pass_or_one(tmp_path):
    chosen = tmp_path / "select.txt"
    chosen.write_text("# what the last check did not reach\ntests/test_memory.py\n"
                      "torch: tests/test_torch.py::test_x  # torch's alone\njax: tests/test_jax.py\n")
    assert gpu_check.selected(str(chosen), "torch") == ["tests/test_memory.py", "tests/test_torch.py::test_x"]
    assert gpu_check.selected(str(chosen), "numpy") == ["tests/test_memory.py"]


def test_a_backends_own_test_files_are_those_that_skip_without_its_framework_or_bear_its_name():
    owned = gpu_check.own_files()
    assert set(owned) == set(specs())
    for name, files in owned.items():
        for path in files:
            stem = Path(path).stem
            assert stem.startswith(f"test_{name}") or specs()[name].import_name in gpu_check.skips_without(ROOT / path)
    every = [path for files in owned.values() for path in files]
    assert len(every) == len(set(every))  # each file has one owner
    assert "tests/test_memory.py" not in every  # a file of every backend's


def test_the_plugin_keeps_a_tests_id_file_class_or_name_and_writes_one_line_per_report():
    wanted = {"tests/test_a.py::test_x", "tests/test_b.py"}
    assert plugin.wanted_by("tests/test_a.py::test_x[torch]", wanted)
    assert plugin.wanted_by("tests/test_b.py::Case::test_y", wanted)
    assert not plugin.wanted_by("tests/test_a.py::test_y", wanted)

    class Report:
        nodeid, when, outcome, duration, failed = "tests/test_a.py::test_x", "call", "failed", 1.234, True
        longrepr = "Traceback\n  ...\nAssertionError: " + "x" * 300

    line = json.loads(plugin.outcome_line(Report()))
    assert line[:3] == ["tests/test_a.py::test_x", "call", "failed"] and line[4] == 1.23
    assert line[3].startswith("AssertionError: ") and len(line[3]) == plugin.MESSAGE_CHARS


def test_the_plugin_writes_each_failures_traceback_as_it_happens(tmp_path, monkeypatch):
    """pytest prints tracebacks at the end of a run: a pass stopped at its time limit keeps them
    only through the failures file (the first check on an H200 lost every one of its 34 plain
    failures' tracebacks that way)."""
    outcomes, failures = tmp_path / "outcomes.jsonl", tmp_path / "failures.txt"
    monkeypatch.setenv("GPU_CHECK_OUTCOMES", str(outcomes))
    monkeypatch.setenv("GPU_CHECK_FAILURES", str(failures))
    monkeypatch.setattr(plugin, "_WORKER", [False])

    class Report:
        nodeid, when, duration = "tests/test_a.py::test_x", "call", 0.5
        outcome, failed = "failed", True
        longrepr = "\n".join(f"line {i}" for i in range(200)) + "\nAssertionError: no"

    class Passed(Report):
        outcome, failed, longrepr = "passed", False, None

    plugin.pytest_runtest_logreport(Passed())
    assert outcomes.exists() and not failures.exists()  # a pass is an outcome, not a failure
    plugin.pytest_runtest_logreport(Report())
    text = failures.read_text().splitlines()
    assert text[0] == "######## tests/test_a.py::test_x (call)" and text[-2:] == ["AssertionError: no", ""]
    assert len(text) == 1 + plugin.FAILURE_LINES + 1 and text[1] == f"line {200 - plugin.FAILURE_LINES + 1}"
    assert len(outcomes.read_text().splitlines()) == 2  # both reports' outcome lines, as before
    monkeypatch.setattr(plugin, "_WORKER", [True])  # an xdist worker: its controller writes
    plugin.pytest_runtest_logreport(Report())
    assert len(failures.read_text().splitlines()) == len(text)


def test_the_checkout_in_use_declares_pyprojects_extras(tmp_path):
    """The suite reads devshim's extras from the installed metadata (the hello's install line);
    the check's stand-in for an editable install declares them as pip's would."""
    tomllib = pytest.importorskip("tomllib")
    env = gpu_check._checkout_in_use(tmp_path, None)
    info = next((tmp_path / "site").glob("devshim-*.dist-info"))
    declared = [line.split(": ", 1)[1] for line in (info / "METADATA").read_text().splitlines()
                if line.startswith("Provides-Extra: ")]
    with open(ROOT / "pyproject.toml", "rb") as handle:
        assert declared == list(tomllib.load(handle)["project"]["optional-dependencies"]) and declared
    assert str(tmp_path / "site") in env["PYTHONPATH"].split(os.pathsep)


# ------------------------------------------------------------------ facts written once, in tox.ini


def test_virtual_gpus_and_pinned_releases_are_written_once_in_tox_ini_and_read_by_the_tools():
    """Every backend with virtual devices has its count in its tox env (the virtual pass); the GPU
    check's and the release sweep's counts, and the packages the check names, are tox.ini's."""
    sweep = _load("version_sweep")
    for name, spec in specs().items():
        count = tox_facts.virtual_devices(name)
        if spec.virtual_devices:
            assert count >= 2, f"tox.ini's [testenv:{name}] has no virtual-GPU pass"
            assert gpu_check.VIRTUAL[name] == count
        else:
            assert name not in gpu_check.VIRTUAL
        if name in sweep.FRAMEWORKS:
            assert sweep.FRAMEWORKS[name].virtual == count, name
    pins = tox_facts.pins("torch")
    named = {dist.split("==")[0]: dist.split("==")[1] for _, dist, _ in gpu_check.SUITE_NEEDS if "==" in dist}
    assert named and all(pins[dist] == version for dist, version in named.items())
    ranges = sweep.declared_ranges()
    for name, (_, newest) in ranges.items():
        if name in specs():
            assert newest in {pins_env.get(sweep.FRAMEWORKS[name].package) for pins_env in
                              map(tox_facts.pins, tox_facts.envs())}, name


def test_the_facts_come_from_the_lines_tox_runs(tmp_path):
    assert tox_facts.virtual_devices("no-such-env") == 0 and tox_facts.pins("no-such-env") == {}
    with pytest.raises(KeyError, match="pins no nothing-here"):
        tox_facts.pinned("torch", "nothing-here")
    assert tox_facts.envs()[0] == "lint" and "numpy" in tox_facts.envs()


# ------------------------------------------------------------------ the check itself, here


def _run_check(tmp_path, *arguments, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *arguments],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.skipif(all(importlib.util.find_spec(module) for module, _, _ in gpu_check.SUITE_NEEDS),
                    reason="this Python has every package the suite needs (the check refuses only without them)")
def test_without_the_suites_packages_the_check_names_them_and_how_to_bring_them(tmp_path):
    done = _run_check(tmp_path, "--backends", "numpy", "--no-virtual", "--no-bench", timeout=120)
    assert done.returncode == 1
    assert "pip download --no-deps --only-binary=:all:" in done.stdout and "--wheels wheels" in done.stdout
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "result: FAILED" in summary and "the suite's packages are missing" in summary


@pytest.mark.same_in_every_pass  # a check of its own, in fresh interpreters
def test_the_passes_of_one_run_each_run_a_shared_test_once(tmp_path):
    passes = [name for name in ("torch", "jax", "numpy") if name in ds.available_backends()]
    lacking = [dist for module, dist, _ in gpu_check.SUITE_NEEDS if importlib.util.find_spec(module) is None]
    if len(passes) < 2 or lacking:
        pytest.skip(f"needs two of torch, jax and numpy (here: {passes}) and the suite's packages "
                    f"(lacking: {lacking or 'none'}) in this Python")
    (tmp_path / "select.txt").write_text(f"{HARNESS_TEST}\n{ONCE_TEST}\n")
    done = _run_check(tmp_path, "--backends", *passes, "--no-virtual", "--no-bench",
                      "--select", str(tmp_path / "select.txt"))
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary + done.stderr
    assert "verdict: PASSED" in summary and summary.rstrip().endswith("result: PASSED")
    ran = {}  # node id -> the passes it ran in
    for name in passes:
        for line in (tmp_path / "out" / f"outcomes-{name}-0.jsonl").read_text().splitlines():
            nodeid, when, outcome, *_ = json.loads(line)
            if when == "call":
                assert outcome == "passed", (name, nodeid)
                ran.setdefault(nodeid, []).append(name)
    for name in passes:  # each backend's harness test in its own pass alone
        assert ran[f"{HARNESS_TEST}[{name}]"] == [name]
    assert len(ran[ONCE_TEST]) == 1
    for name in passes:
        assert f"| {name} | " in summary


@once
def test_the_virtual_passes_leave_out_files_the_plain_passes_run_once():
    """A file marked `same_in_every_pass` as a whole (fresh interpreters that name their own
    backend and virtual GPUs) does the same work in a virtual pass as in the plain pass that runs
    it: on the H200, the examples' tests took 287 s of the JAX virtual pass and 258 s of torch's."""
    import ast

    def marked_whole(path: Path) -> bool:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                return "same_in_every_pass" in ast.unparse(node.value)
        return False

    files = [path for entry in gpu_check.VIRTUAL_TESTS for path in
             (sorted((ROOT / entry).rglob("test_*.py")) if (ROOT / entry).is_dir() else [ROOT / entry])]
    assert files and all(path.exists() for path in files)
    assert [path.name for path in files if marked_whole(path)] == []
    assert marked_whole(ROOT / "tests" / "test_examples.py")  # the one it left out


def test_the_checks_short_bench_gives_every_experiment_its_sizes_and_they_are_accepted():
    from devshim.bench.experiments import experiments

    assert set(gpu_check.BENCH_ARGS) == set(experiments())
    for name, arguments in gpu_check.BENCH_ARGS.items():
        command = gpu_check.bench_command(sys.executable, name, None)
        assert command[command.index("--min-run-time") + 1] == gpu_check.BENCH_MIN_RUN_TIME
        assert command[len(command) - len(arguments):] == arguments
        flags = {option.flag for option in experiments()[name].options}
        assert {word for word in arguments if word.startswith("--")} <= flags, (name, arguments)


def test_devshim_bench_takes_several_backends_separated_by_commas():
    """What the check's bench runs use: one run of an experiment on the backends checked."""
    import argparse

    from devshim import bench
    from devshim.bench.experiments import experiments

    installed = [name for name in ds.available_backends() if specs()[name].has_module("ops")]
    named = argparse.Namespace(backend=" , ".join(installed + installed[:1]))
    assert bench._backends_for(named, experiments()["matmul"]) == installed
    with pytest.raises(ds.DevshimError, match="pytroch"):
        bench._backends_for(argparse.Namespace(backend="numpy,pytroch"), experiments()["matmul"])


def test_the_memory_comparison_shows_each_estimate_beside_its_measured_peak(capsys):
    """An estimate is a plan, not a reading: how far the measured peak is from it is shown (and
    marked outside 5%), never failed on; an estimate whose process failed fails the check."""
    memory = _load("gpu_memory_check")
    MiB = memory.MiB

    def estimate(ratio, **more):
        return {"step": "estimate: cnn with Adam, batch 512", "devshim": {"estimate": 100 * MiB},
                "framework": {"measured peak": None if ratio is None else int(ratio * 100 * MiB)}, "source": "",
                "how": "the allocator's peak", "ratio": ratio, **more}

    ran = {"framework": "jax", "device": "gpu:0", "records": [estimate(1.02), estimate(1.3), estimate(None)]}
    assert memory.report([ran]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "measured / estimate 1.020; measured: the allocator's peak" in lines[4]
    assert "measured / estimate 1.300 (outside 5%)" in lines[6] and "measured / estimate" not in lines[8]
    ran["records"].append(estimate(None, failed=True))
    assert memory.report([ran]) == 1 and "DIFFERS: its process failed" in capsys.readouterr().out


def test_the_docs_table_of_estimates_on_a_gpu_is_the_results_file_written_out():
    """docs/memory.md's figures of the estimate against a real GPU are the GPU check's results
    file (tools/gpu_estimates_results.json), as its memory stage wrote it, written out."""
    memory = _load("gpu_memory_check")
    document = json.loads((ROOT / "tools" / "gpu_estimates_results.json").read_text())
    assert memory.estimates_table(document) in (ROOT / "docs" / "memory.md").read_text()
    assert {row["framework"] for row in document["rows"]} == set(memory.ESTIMATED)


def test_the_estimates_results_file_is_made_from_the_comparisons_records():
    memory = _load("gpu_memory_check")
    MiB = memory.MiB
    record = {"step": "estimate: cnn with Adam, batch 512", "devshim": {"estimate": 100 * MiB},
              "framework": {"measured peak": 134 * MiB}, "source": "", "how": "the allocator's peak", "ratio": 1.34}
    unmeasured = dict(record, ratio=None, step="estimate: mlp with Adam, batch 64")
    other = {"step": "alloc a (64 MiB)", "devshim": {"in_use": 64 * MiB}, "framework": {"in_use": 64 * MiB}}
    rows = memory.estimate_rows([{"framework": "jax", "records": [other, record, unmeasured]}, {"framework": "torch"}])
    assert rows == [{"framework": "jax", "model": "cnn", "batch": 512, "estimate_mib": 100.0, "measured_mib": 134.0,
                     "ratio": 1.34, "measured_as": "the allocator's peak"}]
    document = dict(memory.estimates_document([{"framework": "jax", "records": [record]}]))
    assert document["rows"] == rows and document["devshim_tree"] and "| JAX | small CNN with Adam | 512 |" in (
        memory.estimates_table(document))
    changed = dict(record, step="estimate: cnn with Adam, batch 4096, cuDNN off", ratio=1.02)
    (row,) = memory.estimate_rows([{"framework": "torch", "records": [changed]}])
    assert (row["model"], row["batch"], row["variant"]) == ("cnn", 4096, "cuDNN off")
    assert "| PyTorch | small CNN with Adam, cuDNN off | 4096 | 100.0 | 134.0 | 1.020 |" in memory.estimates_table(
        dict(document, rows=[row]))


def test_the_estimates_run_at_once_each_in_its_own_process_jax_without_autotuning(monkeypatch):
    memory = _load("gpu_memory_check")
    monkeypatch.setattr(memory, "ESTIMATED", {"torch": (("mlp", 8), ("cnn", 4)), "jax": (("mlp", 16),)})
    monkeypatch.setattr(memory, "VARIANTS", {"torch": {"cuDNN off": (("mlp", 2),)},
                                             "jax": {memory.CUDA_ASYNC: (("mlp", 16),)}})
    calls = []

    def child(name, env, seconds, model, batch, *variant):
        calls.append((name, env.get("XLA_FLAGS"), model, batch, *variant))
        assert env.get("XLA_PYTHON_CLIENT_ALLOCATOR") == ("cuda_async" if variant == (memory.CUDA_ASYNC,) else None)
        if model == "cnn":
            return {"framework": name, "error": "exit status 1: CUDA error"}
        return {"step": memory._estimate_step(model, batch, *variant), "devshim": {"estimate": 1},
                "framework": {"measured peak": 1}, "source": "", "how": "the allocator's peak", "ratio": 1.0}

    monkeypatch.setattr(memory, "_measure_in_child", child)
    found = memory._estimates(["torch", "jax"], {"XLA_FLAGS": "--xla_dump_to=x"}, 60)
    assert sorted(calls) == [("jax", "--xla_dump_to=x " + memory.NO_AUTOTUNE, "mlp", "16"),
                             ("jax", "--xla_dump_to=x " + memory.NO_AUTOTUNE, "mlp", "16", memory.CUDA_ASYNC),
                             ("torch", "--xla_dump_to=x", "cnn", "4"), ("torch", "--xla_dump_to=x", "mlp", "2", "cuDNN off"),
                             ("torch", "--xla_dump_to=x", "mlp", "8")]
    assert [record["step"] for record in found["torch"]] == ["estimate: mlp with Adam, batch 8",
                                                              "estimate: cnn with Adam, batch 4",
                                                              "estimate: mlp with Adam, batch 2, cuDNN off"]
    assert found["torch"][1]["failed"] and "CUDA error" in found["torch"][1]["how"]
    assert [record["how"] for record in found["jax"]] == [
        f"the allocator's peak (XLA_FLAGS={memory.NO_AUTOTUNE})",
        f"the allocator's peak (XLA_FLAGS={memory.NO_AUTOTUNE}, XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async)"]


def test_a_jax_variant_runs_under_its_allocator_and_names_the_pools_fraction_once():
    """JAX's smaller steps are measured again with the pool preallocated (a twentieth of the GPU,
    as the check's processes share it) and with cudaMallocAsync. The fraction goes in the name the
    environment already uses: the CUDA plugin refuses both names at once."""
    memory = _load("gpu_memory_check")
    assert set(memory.VARIANTS["jax"]) == {memory.PREALLOCATED, memory.CUDA_ASYNC}
    off = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_FLAGS": memory.NO_AUTOTUNE}
    assert memory.variant_environment(off, memory.PREALLOCATED) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.05", "XLA_FLAGS": memory.NO_AUTOTUNE}
    newer = memory.variant_environment({"XLA_CLIENT_MEM_FRACTION": "0.9"}, memory.PREALLOCATED)
    assert newer == {"XLA_CLIENT_MEM_FRACTION": "0.05", "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}
    assert memory.variant_environment(off, memory.CUDA_ASYNC) == {**off, "XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"}
    assert memory.variant_environment(off, "") == memory.variant_environment(off, memory.CUDNN_OFF) == off


def test_a_jax_steps_first_run_is_measured_only_where_the_allocator_keeps_a_peak_it_raised():
    memory = _load("gpu_memory_check")
    MiB = memory.MiB
    rose = memory.first_run_rise({"bytes_in_use": 10 * MiB, "peak_bytes_in_use": 50 * MiB},
                                 {"bytes_in_use": 30 * MiB, "peak_bytes_in_use": 90 * MiB})
    assert rose == {"measured": 80 * MiB, "how": "peak_bytes_in_use after the first run, less bytes_in_use before it"}
    below = memory.first_run_rise({"bytes_in_use": 10 * MiB, "peak_bytes_in_use": 500 * MiB},
                                  {"bytes_in_use": 30 * MiB, "peak_bytes_in_use": 500 * MiB})
    assert below["measured"] is None and "the compilation's peak, 500.0 MiB, is above it" in below["how"]
    for stats in (None, {"bytes_in_use": 0}):
        kept_none = memory.first_run_rise(stats, stats)
        assert kept_none["measured"] is None and kept_none["how"].startswith("the allocator keeps no peak")


def test_where_the_peak_is_names_the_operation_at_the_peak_and_what_was_in_use_before_it(vgpu):
    """The GPU check runs each PyTorch step op by op to say where its peak is reached. On a virtual
    GPU, whose every storage devshim counts, the answer is a hand count: 1 MiB, then 2, then a
    concatenation of 2 MiB beside them, then the two freed; no operation takes scratch there."""
    torch = vgpu
    memory = _load("gpu_memory_check")
    MiB, gpu = memory.MiB, ds.gpu(0)

    def step():
        a = torch.ones(MiB // 4, device=gpu)
        b = a * 2
        c = torch.cat([a, b])
        del a, b
        return c.sum()

    where = memory.where_the_peak_is(ds, gpu, step)
    assert (where["at"], where["before"], where["peak"], where["scratch"]) == ("aten.cat.default", 2 * MiB, 4 * MiB, 0)
    assert where["most scratch"] == []


def test_where_the_peak_is_counts_what_an_operation_takes_and_gives_back_inside_it(vgpu):
    """An operation's scratch is its own peak above what was in use both before and after it (a
    kernel's workspace). devshim is given a kernel that takes 3 MiB inside the step's third
    operation (the concatenation): the peak is found there, 3 MiB above the tensors."""
    import contextlib
    import types

    torch = vgpu
    memory = _load("gpu_memory_check")
    MiB, gpu = memory.MiB, ds.gpu(0)
    calls = []

    @contextlib.contextmanager
    def memory_peak(device):
        with ds.memory_peak(device) as peak:
            seen = types.SimpleNamespace()
            yield seen
        calls.append(device)
        extra = 3 * MiB if len(calls) == 3 else 0
        seen.start, seen.end, seen.peak = peak.start, peak.end, peak.peak + extra

    with_workspace = types.SimpleNamespace(memory=ds.memory, memory_peak=memory_peak)

    def step():
        a = torch.ones(MiB // 4, device=gpu)
        b = a * 2
        return torch.cat([a, b, b]).sum()

    where = memory.where_the_peak_is(with_workspace, gpu, step)
    assert (where["at"], where["before"], where["peak"], where["scratch"]) == ("aten.cat.default", 2 * MiB,
                                                                               8 * MiB, 3 * MiB)
    assert where["most scratch"] == [{"op": "aten.cat.default", "calls": 1, "scratch": 3 * MiB}]
    line = memory.where_line(where)
    assert line == ("its peak, run op by op: 8.0 MiB, inside aten.cat.default (2.0 MiB in use before it, 3.0 MiB "
                    "scratch); most scratch: aten.cat.default 3.0 MiB (1 call)")
