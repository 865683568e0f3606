"""`devshim info` and `python -m devshim`."""

from __future__ import annotations

import json

import numpy

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
    assert set(data["environment"]) == {"DEVSHIM_BACKEND", "DEVSHIM_DEVICE", "DEVSHIM_VIRTUAL_DEVICES"}


def test_python_dash_m_devshim_info_runs_and_explains_a_bad_backend():
    result = run_python("", "-m", "devshim", "info", DEVSHIM_BACKEND="caffe", timeout=180)
    assert result.returncode == 0, result.stderr
    assert "Unknown backend 'caffe'" in result.stdout


def test_no_command_prints_usage_and_fails():
    result = run_python("", "-m", "devshim", timeout=60)
    assert result.returncode == 2 and "usage: devshim" in result.stderr
