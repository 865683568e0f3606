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
import os
import subprocess
import sys

# A fresh interpreter asks the backend's harness, which counts in the framework's own words.
_COUNT = "from devshim_conformance import load_harness; print(load_harness({name!r}).gpu_count())"
_TESTS = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=None)
def real_gpus(framework: str) -> int:
    """How many GPUs ``framework`` (a backend's name) sees on this machine (0 when it is not
    installed), asked of the framework by its harness (``Harness.gpu_count``)."""
    import devshim as ds

    spec = ds.backends.specs().get(framework)
    if spec is None or not spec.is_installed():
        return 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSHIM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_TESTS, env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    done = subprocess.run([sys.executable, "-c", _COUNT.format(name=framework)], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"asking {framework} for its GPUs failed:\n{done.stderr}")
    return int(done.stdout.strip().splitlines()[-1])


def has_real_gpu(framework: str) -> bool:
    """Whether ``framework`` sees at least one GPU here."""
    return real_gpus(framework) > 0
