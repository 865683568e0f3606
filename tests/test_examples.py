"""The examples run as users would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("variables", [{}, {"DEVSHIM_DEVICE": "cpu"}, {"DEVSHIM_VIRTUAL_DEVICES": "2"}],
                         ids=["as-is", "DEVSHIM_DEVICE=cpu", "DEVSHIM_VIRTUAL_DEVICES=2"])
def test_d2l_gpus_torch_example_runs(variables):
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.update(variables)
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "d2l_gpus_torch.py")],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "Y + Z =" in result.stdout and "weight on" in result.stdout
    if variables.get("DEVSHIM_VIRTUAL_DEVICES"):
        assert "X on gpu:0 | Y on gpu:1" in result.stdout and "device='vgpu:1'" in result.stdout
        assert "caught: Tensors are on different devices" in result.stdout
