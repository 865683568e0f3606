"""tools/gpu_check.py, the project's check on a GPU machine, run here as it runs there: its
passes, the work they share out, its summary and its exit status. (On a machine without a GPU it
checks the CPU; what it finds on a GPU is in docs/contributing.md.)"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import devshim as ds

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_check.py"
#: A test of each backend's harness, and a test marked `same_in_every_pass`.
HARNESS_TEST = "tests/test_array_module.py::test_each_framework_gets_its_array_module"
ONCE_TEST = "tests/test_launcher.py::test_devshim_info_says_which_process_this_is_under_a_launcher"


def _load_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load_check()


def _run_check(tmp_path, *arguments, timeout=600):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *arguments],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_passes_that_run_at_once_share_the_workers_by_their_weight():
    plain = [("torch", 0), ("jax", 0), ("cupy", 0), ("numpy", 0)]
    shares = gpu_check._worker_shares(plain, 16, 6)
    assert shares[("torch", 0)] > shares[("jax", 0)] == shares[("numpy", 0)] > shares[("cupy", 0)] >= 1
    assert abs(sum(shares.values()) - 16) <= 1
    # taking turns, each pass has the workers of its turn; a single pass, all of them
    assert set(gpu_check._worker_shares(plain, 16, 2).values()) == {8}
    assert gpu_check._worker_shares([("numpy", 0)], 2, 6) == {("numpy", 0): 2}
    # a pass on virtual GPUs (a part of the suite) weighs 1, as JAX's plain pass does
    with_virtual = gpu_check._worker_shares(plain + [("jax", 4)], 16, 6)
    assert with_virtual[("jax", 4)] == with_virtual[("jax", 0)]


def test_a_selection_file_names_files_and_ids_for_every_pass_or_one(tmp_path):
    chosen = tmp_path / "select.txt"
    chosen.write_text("# what the last check did not reach\ntests/test_memory.py\n"
                      "torch: tests/test_torch.py::test_x  # torch's alone\njax: tests/test_jax.py\n")
    assert gpu_check._selected(str(chosen), "torch") == ["tests/test_memory.py", "tests/test_torch.py::test_x"]
    assert gpu_check._selected(str(chosen), "numpy") == ["tests/test_memory.py"]


@pytest.mark.skipif(all(importlib.util.find_spec(module) for module, _, _ in gpu_check.SUITE_NEEDS),
                    reason="this Python has every package the suite needs (the check refuses only without them)")
def test_without_the_suites_packages_the_check_names_them_and_how_to_bring_them(tmp_path):
    done = _run_check(tmp_path, "--backends", "numpy", "--no-virtual", "--no-bench", timeout=120)
    assert done.returncode == 1
    assert "pip download --no-deps --only-binary=:all:" in done.stdout and "--wheels wheels" in done.stdout
    assert "result: FAILED" in (tmp_path / "out" / "summary.md").read_text()


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
