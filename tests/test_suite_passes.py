"""The suite's own order and selection (tests/conftest.py): tests that register torch's virtual
GPUs run last where torch has a real GPU, and a test that does the same work whatever backend
is selected runs in one pass of tools/gpu_check.py alone."""

from __future__ import annotations

import os
import subprocess
import sys

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
    monkeypatch.delenv(conftest.ONE_PASS_VAR, raising=False)
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


def test_a_test_the_same_in_every_pass_runs_in_the_named_pass_alone(tmp_path):
    (tmp_path / "test_once.py").write_text(
        "import pytest\n\n\n@pytest.mark.same_in_every_pass\ndef test_once():\n    pass\n\n\ndef test_each():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])), DEVSHIM_BACKEND="numpy")
    for one, expected in (("numpy", "2 passed"), ("torch", "1 passed, 1 skipped"), ("", "2 passed")):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "conftest",
             "--rootdir", str(tmp_path), str(tmp_path / "test_once.py")],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**env, conftest.ONE_PASS_VAR: one})
        assert expected in done.stdout, (one, done.stdout + done.stderr)
        if one == "torch":
            assert "it runs in the torch pass (DEVSHIM_TEST_ONE_PASS)" in done.stdout
