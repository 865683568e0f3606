"""`devshim info` and `python -m devshim`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import devshim as ds
from devshim import cli


def test_info_reports_backend_reason_frameworks_and_devices(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    backend = ds.get_backend().name
    assert f"backend: {backend}" in out
    assert "frameworks:" in out and "devices:" in out
    assert f"numpy       {np_version()}" in out
    assert "numpy       cpu:0" in out


def np_version():
    import numpy

    return numpy.__version__


def test_info_json_is_machine_readable(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [fw["name"] for fw in data["frameworks"]]
    assert names == ["torch", "tensorflow", "mxnet", "jax", "numpy"]
    numpy_entry = data["frameworks"][-1]
    assert numpy_entry["status"] == "ok" and numpy_entry["devices"][0]["device"] == "cpu:0"
    assert set(data["environment"]) == {"DEVSHIM_BACKEND", "DEVSHIM_DEVICE", "DEVSHIM_VIRTUAL_DEVICES"}


def test_python_dash_m_devshim_info_runs_and_explains_a_bad_backend():
    env = dict(os.environ, DEVSHIM_BACKEND="caffe")
    result = subprocess.run(
        [sys.executable, "-m", "devshim", "info"], capture_output=True, text=True, env=env, timeout=180
    )
    assert result.returncode == 0, result.stderr
    assert "Unknown backend 'caffe'" in result.stdout


def test_no_command_prints_usage_and_fails():
    result = subprocess.run([sys.executable, "-m", "devshim"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: devshim" in result.stderr
