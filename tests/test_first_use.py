"""First use from many threads at once: fresh interpreters in which 32 threads make their first
devshim calls together, on the backend this test run selects (each tox env's own).

Everything devshim loads on first use (its modules, the backend table, adapters, each tensor
type's fast paths) must reach every thread whole: a data loader's workers or a server's
request threads make their first calls together. ``FIRST_USE_PROCESSES=50`` runs more
interpreters (the check that it holds in a row).
"""

from __future__ import annotations

import os

import pytest

import devshim as ds
from devshim_conformance import backends_with_harness, load_harness
from helpers import run_python

PROCESSES = int(os.environ.get("FIRST_USE_PROCESSES", "3"))
THREADS = 32

_RACE = """
import os, sys, threading
{make}
import numpy as np
import devshim as ds  # loads none of devshim's modules: the threads below load them

a = np.ones(4)
barrier = threading.Barrier({threads})
failures = []


def first_calls(i):
    barrier.wait()
    kind = i % 4
    if kind == 0:
        out = ds.to_device(x, ds.device_of(x))  # (to "cpu" a CuPy array would become NumPy's)
        assert type(out) is type(x) and out is not x, out
    elif kind == 1:
        with ds.use_backend("numpy"):
            out = ds.to_device(a, "cpu")
        assert type(out) is np.ndarray and out is not a, out
    elif kind == 2:
        out = ds.to_device({{"x": x, "a": a}}, "cpu")
        assert sorted(out) == ["a", "x"] and out["x"] is not x and out["a"] is not a, out
    else:
        assert ds.copy_if_needed(x, ds.device_of(x)) is x
        assert ds.same_device(x, a) == (ds.neutral_device(x).kind == "cpu")


def thread(i):
    try:
        first_calls(i)
    except BaseException as err:
        failures.append(f"thread {{i}}: {{err!r}}")


threads = [threading.Thread(target=thread, args=(i,), daemon=True) for i in range({threads})]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
stuck = sum(t.is_alive() for t in threads)
print(f"{{len(failures)}} failed, {{stuck}} stuck")
for failure in failures[:3]:
    print(failure)
sys.stdout.flush()
os._exit(1 if failures or stuck else 0)
"""


def test_thirty_two_threads_making_their_first_calls_at_once_all_succeed():
    name = ds.get_backend().name
    # How a fresh interpreter makes a small tensor without calling devshim: the harness's code (a
    # harness module may itself call devshim when imported).
    make = load_harness(name).first_tensor_code if name in backends_with_harness() else None
    if make is None:
        pytest.skip(f"the {name} backend's harness says no way to make its tensor in a fresh interpreter")
    code = _RACE.format(make=make, threads=THREADS)
    for run in range(PROCESSES):
        result = run_python(code, DEVSHIM_BACKEND=name)
        assert result.returncode == 0, f"process {run + 1} of {PROCESSES} on {name}:\n{result.stdout}{result.stderr}"
        assert result.stdout.startswith("0 failed, 0 stuck"), result.stdout
