"""What this machine has, asked of each framework itself (never of devshim), so that a test's
expectations come from the machine: a CPU box, a GPU workstation, a lab image with CuPy.

Each framework is asked once per test process, in a fresh interpreter with no devshim variable
set and no virtual devices (so asking cannot start a GPU context in the test process, nor be
coloured by what a test registered).

Example:
    >>> from machine import real_gpus
    >>> real_gpus("torch")
    0
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys

# How each framework counts its accelerators, in its own words (prints one integer).
_COUNT = {
    "torch": """
import torch
count = torch.cuda.device_count()  # CUDA and ROCm; NVML or the runtime, never an error without a driver
if not count and hasattr(torch, "xpu") and torch.xpu.is_available():
    count = torch.xpu.device_count()
if not count and torch.backends.mps.is_available():
    count = 1
print(count)
""",
    "jax": "import jax; print(sum(d.platform != 'cpu' for d in jax.devices()))",
    "tensorflow": "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
    "mxnet": "import mxnet as mx; print(mx.context.num_gpus())",
    "cupy": """
import cupy
try:
    print(cupy.cuda.runtime.getDeviceCount())
except cupy.cuda.runtime.CUDARuntimeError:
    print(0)
""",
    "numpy": "print(0)",
}


@functools.lru_cache(maxsize=None)
def real_gpus(framework: str) -> int:
    """How many GPUs ``framework`` sees on this machine (0 when it is not installed)."""
    if framework != "numpy" and importlib.util.find_spec(framework) is None:
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", _COUNT[framework]], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"asking {framework} for its GPUs failed:\n{done.stderr}")
    return int(done.stdout.strip().splitlines()[-1])


def has_real_gpu(framework: str) -> bool:
    """Whether ``framework`` sees at least one GPU here."""
    return real_gpus(framework) > 0
