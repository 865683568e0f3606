"""The suite's own order and selection (tests/conftest.py): tests that register torch's virtual
GPUs run last where torch has a real GPU, and a test that would do the same work in each pass of
tools/gpu_check.py runs in one of them alone."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import conftest
import machine

TESTS = os.path.dirname(os.path.abspath(__file__))


class _Item:
    def __init__(self, name, fixtures=(), marked=False, path="tests/test_other.py"):
        self.name, self.fixturenames, self.marked, self.fspath = name, list(fixtures), marked, path

    def get_closest_marker(self, name):
        return object() if self.marked and name == conftest.TORCH_VIRTUAL_MARK else None


def _items():
    return [_Item("a"), _Item("registers", fixtures=["vgpu"]), _Item("b"), _Item("marked", marked=True),
            _Item("its_file", path="tests/test_torch_virtual_like_cuda.py"), _Item("c")]


def test_tests_that_register_torch_virtual_gpus_run_last_where_torch_has_a_real_gpu(monkeypatch):
    monkeypatch.setattr(conftest, "VIRTUAL", False)
    monkeypatch.delenv(conftest.PASSES_VAR, raising=False)
    for gpus, order in ((1, ["a", "b", "c", "registers", "marked", "its_file"]),
                        (0, ["a", "registers", "b", "marked", "its_file", "c"])):
        monkeypatch.setattr(machine, "real_gpus", lambda framework, gpus=gpus: gpus)
        items = _items()
        conftest.pytest_collection_modifyitems(None, items)
        assert [item.name for item in items] == order, gpus


def test_in_a_pass_on_virtual_gpus_the_order_stays(monkeypatch):
    monkeypatch.setattr(conftest, "VIRTUAL", True)  # that pass registered them at start-up
    monkeypatch.setattr(machine, "real_gpus", lambda framework: 1)
    items = _items()
    conftest.pytest_collection_modifyitems(None, items)
    assert [item.name for item in items] == ["a", "registers", "b", "marked", "its_file", "c"]


ONE_RUN = """
import pytest


@pytest.fixture(params=["numpy", "torch"])
def harness(request):   # as tests/conftest.py's: a test per backend, each selecting its own
    return request.param


@pytest.mark.same_in_every_pass
@pytest.mark.parametrize("case", range(8))
def test_once(case):
    pass


def test_each():
    pass


def test_harness(harness):
    pass
"""


def _run_pass(tmp_path, backend: str, passes: str) -> set:
    """The tests that ran (passed) in a pass selecting `backend`, with `passes` making the run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])),
               DEVSHIM_BACKEND=backend, **{conftest.PASSES_VAR: passes})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "-p", "conftest",
         "--rootdir", str(tmp_path), str(tmp_path / "test_one_run.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {line.split("::")[1].split(" ")[0] for line in done.stdout.splitlines() if line.endswith("PASSED")
           or " PASSED " in line}
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert all(f"pass ({conftest.PASSES_VAR})" in line for line in skipped), skipped
    return ran


def test_in_one_run_of_several_passes_each_such_test_runs_in_one_pass_alone(tmp_path):
    (tmp_path / "test_one_run.py").write_text(ONE_RUN)
    every = {"test_each", "test_harness[numpy]", "test_harness[torch]"} | {f"test_once[{i}]" for i in range(8)}
    numpy, torch = (_run_pass(tmp_path, backend, "numpy,torch") for backend in ("numpy", "torch"))
    assert numpy | torch == every and numpy & torch == {"test_each"}
    assert "test_harness[numpy]" in numpy and "test_harness[torch]" in torch
    assert numpy - {"test_each", "test_harness[numpy]"} and torch - {"test_each", "test_harness[torch]"}  # spread
    # without the variable, or in a pass that is not one of the run's, every test runs
    assert _run_pass(tmp_path, "numpy", "") == every
    assert _run_pass(tmp_path, "jax", "numpy,torch") == every


def test_the_pass_owning_a_test_comes_from_its_harness_then_its_mark():
    class Item:
        def __init__(self, harness=None, marked=False, nodeid="tests/test_x.py::test_y"):
            self.callspec = types.SimpleNamespace(params={"harness": harness}) if harness else None
            self.marked, self.nodeid = marked, nodeid

        def get_closest_marker(self, name):
            return object() if self.marked and name == conftest.SAME_IN_EVERY_PASS else None

    assert conftest.owning_pass(Item(harness="jax"), ["torch", "jax"]) == "jax"
    assert conftest.owning_pass(Item(harness="tensorflow"), ["torch", "jax"]) is None  # no pass of its own
    assert conftest.owning_pass(Item(), ["torch", "jax"]) is None
    owner = conftest.owning_pass(Item(marked=True), ["torch", "jax"])
    assert owner in ("torch", "jax") and owner == conftest.owning_pass(Item(marked=True), ["torch", "jax"])
