"""The release table in docs/supported-versions.md is the sweep's results file written out, and
it describes the code of this checkout (issue 47): a change to `devshim/` leaves the table stale
until `python tools/version_sweep.py --stale` runs again."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def sweep_tool():
    pytest.importorskip("packaging", reason="tools/version_sweep.py reads versions with packaging")
    if "version_sweep" not in sys.modules:
        spec = importlib.util.spec_from_file_location("version_sweep", ROOT / "tools" / "version_sweep.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["version_sweep"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["version_sweep"]


def test_the_docs_table_is_the_results_file_written_out():
    sweep = sweep_tool()
    doc = sweep.DOC.read_text()
    written = doc.split(sweep.START, 1)[1].split(sweep.END, 1)[0].strip("\n")
    assert written == sweep.table(sweep.load_results()), (
        "docs/supported-versions.md's table differs from tools/version_sweep_results.json: "
        "run python tools/version_sweep.py --table")


def test_the_table_says_the_code_and_machine_its_rows_describe():
    sweep = sweep_tool()
    results = sweep.load_results()
    first_line = sweep.table(results).splitlines()[0]
    commits = {row["commit"] for row in results.values()}
    assert all(f"`{commit}`" in first_line for commit in commits), first_line
    assert all(row.get("machine") and row.get("devshim_tree") for row in results.values()), (
        [key for key, row in results.items() if not row.get("machine") or not row.get("devshim_tree")])
    assert f"({len(results)} releases, {sum(row['seconds'] for row in results.values())} s of runs in all)" in first_line


def test_every_row_describes_the_devshim_code_of_this_checkout():
    """One `devshim/` tree for every row, and it is HEAD's: the table speaks of this code."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): the rows' code cannot be compared")
    sweep = sweep_tool()
    head = subprocess.run(["git", "rev-parse", "HEAD:devshim"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip(f"git cannot name HEAD's devshim/ tree here: {head.stderr.strip()}")
    stale = {key: row.get("commit") for key, row in sweep.load_results().items()
             if row.get("devshim_tree") != head.stdout.strip()}
    assert not stale, (
        f"{len(stale)} rows of the release table were swept on other devshim/ code than HEAD's "
        f"(e.g. {sorted(stale.items())[:3]}): run python tools/version_sweep.py --stale "
        "--lanes 6 (about 80 minutes on a 2-core machine) and commit the results file and the docs")


def test_every_framework_range_is_covered_from_floor_to_newest():
    sweep = sweep_tool()
    results = sweep.load_results()
    for name, (floor, newest) in sweep.declared_ranges().items():
        swept = {row["release"] for row in results.values() if row["framework"] == name}
        assert floor in swept and newest in swept, (name, floor, newest, sorted(swept))
    assert all(row["result"] == "passed" for row in results.values()), (
        [key for key, row in results.items() if row["result"] != "passed"])


def test_the_rotation_takes_the_releases_tox_does_not_pin_in_turn():
    sweep = sweep_tool()
    releases = [sweep.Release(sweep.FRAMEWORKS["torch"], v) for v in ("2.4.1", "2.5.1", "2.6.0", "2.13.0")]
    pinned = sweep.pinned_by_tox()
    assert "torch==2.13.0" in pinned and "torch==2.4.1" in pinned
    turns = [[r.version for r in sweep.rotation(releases, pinned, turn)][0] for turn in range(4)]
    assert turns == ["2.5.1", "2.6.0", "2.5.1", "2.6.0"]
    assert sweep.rotation(releases[:1], {"torch==2.4.1"}, 7) == []


def test_lanes_share_the_releases_out_by_the_seconds_each_took():
    sweep = sweep_tool()
    recorded = {f"numpy=={v}": {"seconds": s} for v, s in (("2.0.2", 540), ("2.1.3", 439), ("2.2.6", 380),
                                                           ("2.3.5", 513), ("2.4.6", 516))}
    releases = [sweep.Release(sweep.FRAMEWORKS["numpy"], key.split("==")[1]) for key in recorded]
    never_run = sweep.Release(sweep.FRAMEWORKS["numpy"], "2.5.5")  # counted as the median, 513 s
    shared = sweep.lanes([*releases, never_run], recorded, 3)
    assert sorted(r.key for lane in shared for r in lane) == sorted([*recorded, never_run.key])
    times = [sum(recorded.get(r.key, {"seconds": 513})["seconds"] for r in lane) for lane in shared]
    assert len(shared) == 3 and max(times) - min(times) <= 540, times
    assert len(sweep.lanes(releases[:2], recorded, 6)) == 2 and sweep.lanes([], recorded, 6) == []


LANE = '''
import json, os, sys
path, keys = sys.argv[1], sys.argv[2:]
rows = json.load(open(path)) if os.path.exists(path) else {}  # as the tool does: its file, resumed
rows |= {key: {"framework": key.split("==")[0], "release": key.split("==")[1], "commit": "abc", "devshim_tree": "t",
              "date": "2026-11-29", "machine": "a test", "plain": {"passed": 3, "failed": 0, "skipped": 1},
              "result": "failed" if key.endswith("2.2.6") else "passed", "seconds": 1} for key in keys}
json.dump(rows, open(path, "w"))
'''


def test_a_sweep_in_lanes_merges_every_lanes_results_into_the_file_and_the_table(tmp_path, monkeypatch, capsys):
    """`--lanes`: each lane is a process of the tool recording into its own file (an earlier run's
    file there is not taken); the sweep merges each into the results file, beside the rows recorded
    before, and writes the table from them. Too many lanes for the machine's cores is said on stderr."""
    import argparse
    import json

    sweep = sweep_tool()
    results_file, doc = tmp_path / "results.json", tmp_path / "supported-versions.md"
    earlier = {"numpy==1.23.5": {"framework": "numpy", "release": "1.23.5", "commit": "old", "devshim_tree": "t",
                                 "date": "2026-11-28", "machine": "a test", "result": "passed", "seconds": 9,
                                 "plain": {"passed": 1, "failed": 0, "skipped": 0}}}
    results_file.write_text(json.dumps(earlier))
    doc.write_text(f"# versions\n{sweep.START}\n{sweep.END}\nafter\n")
    monkeypatch.setattr(sweep, "RESULTS", results_file)
    monkeypatch.setattr(sweep, "DOC", doc)
    monkeypatch.setattr(sweep, "lane_command", lambda keys, workdir, results, limit: [
        sys.executable, "-c", LANE, str(results), *keys])
    monkeypatch.setattr(sweep.os, "cpu_count", lambda: 1)
    releases = [sweep.Release(sweep.FRAMEWORKS["numpy"], v) for v in ("2.0.2", "2.1.3", "2.2.6", "2.3.5")]
    args = argparse.Namespace(lanes=4, workdir=tmp_path / "work", cache_limit_gb=8.0)
    stale = tmp_path / "work" / "lane0" / "results.json"  # an earlier sweep's lane 0, with a row of its own
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"numpy==1.26.4": dict(earlier["numpy==1.23.5"], release="1.26.4")}))
    assert sweep.run_lanes(args, releases, sweep.load_results(), stagger=0.01) == 1  # 2.2.6 failed in its lane
    merged = sweep.load_results()
    assert sorted(merged) == sorted(["numpy==1.23.5", *(r.key for r in releases)])
    assert merged["numpy==1.23.5"]["commit"] == "old" and merged["numpy==2.1.3"]["result"] == "passed"
    assert doc.read_text().split(sweep.START)[1].split(sweep.END)[0].strip("\n") == sweep.table(merged)
    out, err = capsys.readouterr()
    assert "4 lanes on 1 CPU cores" in err and "use --lanes 3 or fewer" in err
    assert "sweep: numpy==2.2.6 failed in 1 s" in out and (tmp_path / "work" / "lane3" / "sweep.log").exists()


HUNG = '''
import time

def test_hangs():
    time.sleep(60)
'''
WATCHDOG = '''
import faulthandler, os, sys

def pytest_configure(config):  # as tests/conftest.py's watchdog: stderr before pytest's capture takes fd 2
    global stderr
    stderr = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")

def pytest_runtest_call(item):
    faulthandler.dump_traceback_later(1, exit=True, file=stderr)
'''


def test_a_run_the_hung_test_watchdog_ended_names_the_test_it_stopped(tmp_path):
    """The suite's watchdog ends a run without a JUnit report, its stacks on stderr: the sweep
    records the test it stopped, not the dump's last line."""
    sweep = sweep_tool()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_hang.py").write_text(HUNG)
    (tmp_path / "tests" / "conftest.py").write_text(WATCHDOG)
    venv = Path(sys.executable).parent.parent
    counts = sweep.run_pytest(venv, tmp_path, ["tests/test_hang.py"], dict(os.environ), tmp_path / "report.xml")
    assert counts["exit"] == 1 and counts["failed"] == 1 and counts["seconds"] < 50
    assert counts["failures"] == ["pytest exit 1: the hung-test watchdog stopped it in tests/test_hang.py:5 test_hangs"]
    assert sweep.stopped_tests("pytest exit 1\nTraceback (most recent call last):\n") == []
