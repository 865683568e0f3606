"""`devshim info` and `python -m devshim`."""

from __future__ import annotations

import contextlib
import json
import re

import numpy
import pytest

import devshim as ds
from devshim import cli
from devshim.backends import specs
from helpers import run_python


def test_info_reports_backend_reason_frameworks_capabilities_and_devices(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    backend = ds.get_backend().name
    assert f"backend: {backend}" in out
    assert "frameworks:" in out and "capabilities:" in out and "devices:" in out
    assert f"numpy       {numpy.__version__}" in out
    assert "numpy       cpu:0" in out
    heading = next(line for line in out.splitlines() if "virtual devices" in line)
    assert heading.split()[:4] == ["devices", "ops", "guard", "model"]


def test_the_capability_table_follows_the_modules_each_backend_has(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for entry in data["frameworks"]:
        spec = specs()[entry["name"]]
        capabilities = entry["capabilities"]
        assert capabilities["devices"] is True  # core.py: every backend has it
        for name, module in (("ops", "ops"), ("guard", "guard"), ("model", "model")):
            assert capabilities[name] == spec.has_module(module)
        assert capabilities["virtual devices"] == spec.virtual_devices


def test_info_json_is_machine_readable(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [fw["name"] for fw in data["frameworks"]]
    assert names == list(specs())
    numpy_entry = next(fw for fw in data["frameworks"] if fw["name"] == "numpy")
    assert numpy_entry["status"] == "ok" and numpy_entry["devices"][0]["device"] == "cpu:0"
    assert set(data["environment"]) == {"DEVSHIM_BACKEND", "DEVSHIM_DEVICE", "DEVSHIM_VIRTUAL_DEVICES",
                                        "DEVSHIM_TRANSFER_GUARD", "DEVSHIM_VIRTUAL_MEMORY"}
    assert all("in_use" in entry for fw in data["frameworks"] for entry in fw.get("memory", []))
    assert data["problems"] == []


@pytest.mark.same_in_every_pass  # a fresh interpreter with its own DEVSHIM_BACKEND
def test_python_dash_m_devshim_info_fails_on_a_misspelt_backend_and_says_which():
    result = run_python("", "-m", "devshim", "info", DEVSHIM_BACKEND="pytroch", timeout=180)
    assert result.returncode == 2, result.stderr
    assert "DEVSHIM_BACKEND: Unknown backend 'pytroch'" in result.stdout
    assert "devshim: error: DEVSHIM_BACKEND" in result.stderr
    assert "frameworks:" in result.stdout  # the rest is still reported


def set_even_if_refused(setenv, variable: str, value: str) -> None:
    """Set a variable; once a backend's guard is running, reloading a bad guard level raises at
    once (a fresh `devshim info` process reads it first in collect_info)."""
    with contextlib.suppress(ds.InvalidGuardLevelError):
        setenv(variable, value)


@pytest.mark.parametrize("variable, value, says", [
    ("DEVSHIM_BACKEND", "pytroch", "Unknown backend 'pytroch'"),
    ("DEVSHIM_VIRTUAL_DEVICES", "two", "must be a non-negative whole number"),
    ("DEVSHIM_VIRTUAL_DEVICES", "-1", "must be a non-negative whole number"),
    ("DEVSHIM_TRANSFER_GUARD", "strict", "is not a transfer-guard level"),
    ("DEVSHIM_DEVICE", "tpu", "is not understood"),
    ("LOCAL_RANK", "first", "is not a whole number"),
])
def test_info_exits_2_on_a_setting_devshim_cannot_use_and_names_only_that_one(setenv, capsys, variable, value,
                                                                              says):
    set_even_if_refused(setenv, variable, value)
    assert cli.main(["info"]) == 2
    captured = capsys.readouterr()
    named = "launcher variables" if variable == "LOCAL_RANK" else variable
    problems = captured.out.split("settings devshim cannot use")[1].split("\n\n")[0].splitlines()[1:]
    assert len(problems) == 1 and problems[0].startswith(f"  {named}: ") and says in problems[0]
    assert captured.err.startswith(f"devshim: error: {named}: ")


def test_info_json_lists_each_problem_and_says_them_on_stderr(setenv, capsys):
    set_even_if_refused(setenv, "DEVSHIM_TRANSFER_GUARD", "strict")
    set_even_if_refused(setenv, "DEVSHIM_VIRTUAL_DEVICES", "two")
    assert cli.main(["info", "--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [p["setting"] for p in data["problems"]] == ["DEVSHIM_VIRTUAL_DEVICES", "DEVSHIM_TRANSFER_GUARD"]
    assert captured.err.count("devshim: error:") == 2


def test_info_fails_when_the_backend_asked_for_is_not_installed(setenv, capsys):
    missing = next((s for s in specs().values() if not s.is_installed()), None)
    if missing is None:
        pytest.skip("every framework is installed here")
    setenv("DEVSHIM_BACKEND", missing.name)
    assert cli.main(["info"]) == 2
    out = capsys.readouterr().out
    assert f"DEVSHIM_BACKEND='{missing.name}' asks for {missing.title}, which is not installed" in out
    # the package itself, or its variant this kind of machine needs (tensorflow[and-cuda] beside an NVIDIA GPU)
    assert re.search(rf'pip install "?{re.escape(missing.distributions[0])}\b', out), out


def test_no_command_prints_usage_and_fails():
    result = run_python("", "-m", "devshim", timeout=60)
    assert result.returncode == 2 and "usage: devshim" in result.stderr
