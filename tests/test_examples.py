"""The examples run as users would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("hide_gpus", [False, True], ids=["as-is", "DEVSHIM_DEVICE=cpu"])
def test_d2l_gpus_torch_example_runs(hide_gpus):
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    if hide_gpus:
        env["DEVSHIM_DEVICE"] = "cpu"
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "d2l_gpus_torch.py")],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "Y + Z =" in result.stdout and "weight on" in result.stdout


@pytest.mark.parametrize("hide_gpus", [False, True], ids=["as-is", "DEVSHIM_DEVICE=cpu"])
def test_generic_softplus_example_runs_on_every_installed_framework(hide_gpus):
    import devshim as ds

    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    if hide_gpus:
        env["DEVSHIM_DEVICE"] = "cpu"
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "generic_softplus.py")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines()]
    expected = [name for name in ("numpy", "torch", "jax", "tensorflow", "mxnet")
                if name in ds.available_backends()]
    if "cupy" in ds.available_backends() and ds.num_gpus(backend="cupy"):
        expected.append("cupy")
    assert printed == expected
