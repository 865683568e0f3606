"""Helpers the test modules share (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap


def run_python(code: str, *args: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` (or ``python *args``) in a fresh interpreter whose only DEVSHIM_ variables are
    ``env``, importing the same devshim as this process (the installed one under tox)."""
    command, full_env = _python(code, args, env)
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout)


def start_python(code: str, *args: str, **env: str) -> subprocess.Popen:
    """``run_python``, started and not waited for: the caller communicates (with a timeout)."""
    command, full_env = _python(code, args, env)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)


def _python(code: str, args: tuple, env: dict) -> tuple:
    import devshim

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    home = os.path.dirname(os.path.dirname(os.path.abspath(devshim.__file__)))
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, full_env.get("PYTHONPATH")]))
    full_env.update(TF_CPP_MIN_LOG_LEVEL="2", **env)
    command = [sys.executable, "-c", textwrap.dedent(code)] if code else [sys.executable, *args]
    return command, full_env


class FakeGpu:
    """A stand-in framework's GPU device object, numbered like ``torch.device("cuda", i)``."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other) -> bool:
        return isinstance(other, FakeGpu) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("fakegpu", self.index))

    def __repr__(self) -> str:
        return f"gpu{self.index}"


class WithoutTensors:
    """Mixed into a stand-in Backend that has devices but no tensors: the tensor methods fail
    the test if devshim ever calls them."""

    def tensor_device(self, x):
        raise AssertionError("no tensors")

    def copy_to(self, x, native, non_blocking):
        raise AssertionError("no tensors")

    def tensor_to_numpy(self, x):
        raise AssertionError("no tensors")


class TwoGpuDevices(WithoutTensors):
    """Mixed into a stand-in Backend: a CPU and two GPUs, whose native devices are ("cpu", 0),
    ("gpu", 0), ("gpu", 1), and no tensors."""

    def is_tensor(self, x):
        return False

    def is_native_device(self, obj):
        return isinstance(obj, tuple) and len(obj) == 2 and obj[0] in ("cpu", "gpu")

    def accelerator_count(self):
        return 2

    def make_native_device(self, kind, index):
        return (kind, index)

    def describe(self, native):
        from devshim._device import Device

        return Device(native[0], native[1], native=native, backend=self.spec.name)


class InlineThread:
    """Stands in for threading.Thread: the target runs when the thread is started."""

    def __init__(self, target, name, daemon) -> None:
        self.target = target

    def start(self) -> None:
        self.target()

    def join(self) -> None:
        pass


def free_port() -> int:
    """A TCP port nobody listens on now, on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def last_json_lines(processes: list, timeout: int = 180) -> list:
    """Wait for each started process (``start_python``), check it succeeded, and return the
    JSON document on the last line of each one's output, in order. Whatever is still running
    when one fails or times out is killed."""
    found = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=timeout)
            assert process.returncode == 0, err
            found.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return found
