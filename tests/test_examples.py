"""The examples run as users would run them: a fresh interpreter per example and framework."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers import run_python

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Virtual GPUs where the framework has them, so the multi-device paths really run.
VIRTUAL = {"torch": "2", "tensorflow": "2", "mxnet": "2"}


def run_example(name: str, backend: str, **env: str):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed in this environment")
    if VIRTUAL.get(backend):
        env.setdefault("DEVSHIM_VIRTUAL_DEVICES", VIRTUAL[backend])
    result = run_python("", str(EXAMPLES / name), DEVSHIM_BACKEND=backend, timeout=240, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("variables", [{"DEVSHIM_VIRTUAL_DEVICES": "0"}, {"DEVSHIM_DEVICE": "cpu"}, {}],
                         ids=["as-is", "DEVSHIM_DEVICE=cpu", "DEVSHIM_VIRTUAL_DEVICES=2"])
def test_d2l_gpus_torch_example_runs(variables):
    out = run_example("d2l_gpus_torch.py", "torch", **variables)
    assert "Y + Z =" in out and "weight on" in out
    if "DEVSHIM_DEVICE" not in variables and variables.get("DEVSHIM_VIRTUAL_DEVICES") != "0":
        assert "X on gpu:0 | Y on gpu:1" in out and "device='vgpu:1'" in out
        assert "caught: Tensors are on different devices" in out


@pytest.mark.parametrize("backend", sorted(VIRTUAL))
def test_place_model_example(backend):
    out = run_example("place_model.py", backend)
    placed, output = out.splitlines()
    assert placed.startswith(f"{backend}: the model's parameters are on ")
    assert output.split()[5].rstrip(",") == placed.split()[-1]  # the output is where the parameters are


@pytest.mark.parametrize("backend", sorted(VIRTUAL))
def test_model_parallel_example_under_a_disallowing_guard(backend):
    out = run_example("model_parallel.py", backend, DEVSHIM_TRANSFER_GUARD="disallow")
    assert f"{backend}: the split model's output equals the single-device model's: True" in out
    assert f"{backend}: and so do the gradients, which flowed back across the copies: True" in out
    if VIRTUAL[backend]:
        assert f"{backend}: first stage on gpu:0 and gpu:1" in out


@pytest.mark.parametrize("backend", sorted(VIRTUAL))
def test_data_parallel_example_under_a_disallowing_guard(backend):
    out = run_example("data_parallel.py", backend, DEVSHIM_TRANSFER_GUARD="disallow")
    assert f"{backend}: every replica's weights equal the single-device step's: True" in out
    if VIRTUAL[backend]:
        assert "shards of [5, 4] on ['gpu:0', 'gpu:1']" in out


@pytest.mark.parametrize("hide_gpus", [False, True], ids=["as-is", "DEVSHIM_DEVICE=cpu"])
def test_generic_softplus_example_runs_on_every_installed_framework(hide_gpus):
    import devshim as ds

    env = {"DEVSHIM_DEVICE": "cpu"} if hide_gpus else {}
    result = run_python("", str(EXAMPLES / "generic_softplus.py"), timeout=300, **env)
    assert result.returncode == 0, result.stderr
    printed = [line.split()[0] for line in result.stdout.splitlines()]
    expected = [name for name in ("numpy", "torch", "jax", "tensorflow", "mxnet")
                if name in ds.available_backends()]
    if "cupy" in ds.available_backends() and ds.num_gpus(backend="cupy"):
        expected.append("cupy")
    assert printed == expected
