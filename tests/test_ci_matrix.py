"""CI's runner (.ci/run_matrix.py): the tox matrix two envs at a time, one `large` env (a CUDA
build of torch, 5 to 7 GB) at a time, none started past the run's time limit. The envs' runs are
stand-ins here: what is tested is the scheduling."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runner():
    spec = importlib.util.spec_from_file_location("run_matrix", ROOT / ".ci" / "run_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stand_in_runs(matrix, seconds: float, failing=(), holds=None):
    """Replace `matrix.run` with a sleep that records how many envs, and large envs, ran at once.
    `holds` = (env, other): `env` runs until `other` has started (or 10 s have passed)."""
    lock = threading.Lock()
    started = {env: threading.Event() for env in matrix.waiting}
    seen = {"running": set(), "most": 0, "most_large": 0, "order": [], "held": None}

    def run(env, workdir, limit, checkout):
        with lock:
            seen["running"].add(env)
            seen["order"].append(env)
            seen["most"] = max(seen["most"], len(seen["running"]))
            seen["most_large"] = max(seen["most_large"], len(seen["running"] & matrix.large))
        started[env].set()
        if holds and env == holds[0]:
            seen["held"] = started[holds[1]].wait(timeout=10)
        time.sleep(seconds)
        with lock:
            seen["running"].discard(env)
        matrix.done(env, "FAILED" if env in failing else "ok", 1 if env in failing else 0)

    matrix.run = run
    matrix.copy = lambda target: target  # no copy of the checkout: nothing runs in it
    return seen


def _run_lanes(matrix):
    threads = [threading.Thread(target=matrix.lane, args=(n,)) for n in range(1, matrix.lanes + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a lane never ended"


def test_two_envs_run_at_once_but_never_two_large_ones(runner):
    envs = ["lint", "torch-floor", "torch27", "numpy", "torch-vgpu-floor", "jax", "torch-latest", "docs"]
    large = {"torch-floor", "torch27", "torch-vgpu-floor", "torch-latest"}
    matrix = runner.Matrix(envs, large, lanes=2)
    # torch-floor runs until numpy has started: torch27 and torch-vgpu-floor wait behind it, and
    # the other lane takes numpy past them rather than stay idle
    seen = _stand_in_runs(matrix, 0.01, holds=("torch-floor", "numpy"))
    _run_lanes(matrix)
    assert sorted(matrix.results) == sorted(envs) and all(bad == 0 for _, bad in matrix.results.values())
    assert seen["held"] is True and seen["most"] == 2 and seen["most_large"] == 1
    assert seen["order"].index("numpy") < seen["order"].index("torch27")


def test_one_lane_runs_the_envlist_in_order(runner):
    envs = ["lint", "torch-floor", "numpy", "torch27"]
    matrix = runner.Matrix(envs, {"torch-floor", "torch27"}, lanes=1)
    seen = _stand_in_runs(matrix, 0.0)
    _run_lanes(matrix)
    assert seen["order"] == envs and seen["most"] == 1


def test_no_env_starts_past_the_run_limit_and_those_left_fail_the_run(runner):
    matrix = runner.Matrix(["lint", "numpy", "docs"], set(), lanes=2)
    matrix.began -= runner.RUN_LIMIT  # the run's time is spent
    seen = _stand_in_runs(matrix, 0.0)
    _run_lanes(matrix)
    assert seen["order"] == []
    for env in ("lint", "numpy", "docs"):
        line, bad = matrix.results[env]
        assert line.startswith("NOT RUN") and f"of its {runner.RUN_LIMIT} left" in line and bad == 1


def test_a_failed_env_is_kept_as_failed(runner):
    matrix = runner.Matrix(["lint", "numpy"], set(), lanes=2)
    _stand_in_runs(matrix, 0.0, failing={"numpy"})
    _run_lanes(matrix)
    assert matrix.results["numpy"] == ("FAILED", 1) and matrix.results["lint"] == ("ok", 0)


def test_a_lane_copies_the_checkout_with_its_git_and_uncommitted_files_but_not_tox(runner, tmp_path, monkeypatch):
    """Each lane's tox builds the sdist in its own tree: two builds in one tree clash."""
    root = tmp_path / "checkout"
    for name in (".git/HEAD", ".tox/lane1/big", "devshim/__init__.py", "devshim/__pycache__/x.pyc", "new.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    monkeypatch.setattr(runner, "ROOT", root)
    copy = runner.copy_checkout(tmp_path / "lane")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == [
        ".git/HEAD", "devshim/__init__.py", "new.txt"]


def test_an_env_that_cannot_be_run_fails_and_the_lanes_go_on(runner):
    """A large env whose run raises must not leave the other lane waiting for it forever."""
    matrix = runner.Matrix(["torch-floor", "torch27", "numpy"], {"torch-floor", "torch27"}, lanes=2)
    seen = _stand_in_runs(matrix, 0.0)
    ran = matrix.run

    def run(env, workdir, limit, checkout):
        if env == "torch-floor":
            raise OSError("no space left on device")
        ran(env, workdir, limit, checkout)

    matrix.run = run
    _run_lanes(matrix)
    assert matrix.results["torch-floor"][1] == 1 and "no space left on device" in matrix.results["torch-floor"][0]
    assert matrix.results["torch27"] == ("ok", 0) and matrix.results["numpy"] == ("ok", 0)
    assert "torch27" in seen["order"]
