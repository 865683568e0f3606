"""The release table in docs/supported-versions.md is the sweep's results file written out, and
it describes the code of this checkout (issue 47): a change to `devshim/` leaves the table stale
until `python tools/version_sweep.py --stale` runs again."""

from __future__ import annotations

import importlib.util
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
    assert f"({len(results)} releases)" in first_line


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
        "(about 90 minutes on a 2-core machine) and commit the results file and the docs")


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
