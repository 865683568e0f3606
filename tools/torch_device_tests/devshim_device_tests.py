"""pytest plugin for measure.py: torch's device-generic tests on devshim's virtual GPUs.

Loaded with ``-p devshim_device_tests`` (this folder on PYTHONPATH). Importing it registers
the virtual GPUs (``DEVSHIM_VIRTUAL_DEVICES``) and devshim's test base with torch, before
pytest imports any test module or PyTorch's conftest.py; then it keeps a stable sample of the
tests (``--devshim-sample``, the same sample for the CPU and the virtual GPU twin of a test)
and writes every test's outcome to ``--devshim-results`` as JSON.
"""

from __future__ import annotations

import hashlib
import json
import re

import devshim as ds

ds.testing.torch_device_tests()  # before torch.testing._internal is imported by anything

_DEVICE_TOKEN = re.compile(r"(?<=_)(cpu|vgpu)(?=_|$)")
_CLASS_SUFFIX = re.compile(r"(CPU|PRIVATEUSE1|VGPU)$")


def sample_key(nodeid: str) -> str:
    """A test's id with its device left out: the CPU test and its virtual-GPU twin share it."""
    path, _, rest = nodeid.partition("::")
    cls, _, name = rest.rpartition("::")
    return f"{path}::{_CLASS_SUFFIX.sub('', cls)}::{_DEVICE_TOKEN.sub('DEVICE', name)}"


def pytest_addoption(parser) -> None:
    parser.addoption("--devshim-sample", type=float, default=1.0,
                     help="fraction of the tests to run, chosen by a hash of their device-free id")
    parser.addoption("--devshim-results", default=None, help="write each test's outcome here (JSON)")


def pytest_collection_modifyitems(config, items) -> None:
    fraction = config.getoption("--devshim-sample")
    if fraction >= 1.0:
        return
    keep = []
    for item in items:
        digest = hashlib.sha256(sample_key(item.nodeid).encode()).digest()
        if int.from_bytes(digest[:4], "big") / 2**32 < fraction:
            keep.append(item)
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


_results: dict = {}


def _reason(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = str(report.longrepr or "")
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return (lines[0][1:].strip() if lines else text.splitlines()[-1] if text else "")[:300]


def pytest_runtest_logreport(report) -> None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed") \
            or (report.when == "teardown" and report.outcome == "failed"):
        known = _results.get(report.nodeid)
        if known is None or known["outcome"] == "passed":
            _results[report.nodeid] = {"outcome": report.outcome, "reason": _reason(report),
                                       "seconds": round(report.duration, 3)}


def pytest_sessionfinish(session) -> None:
    path = session.config.getoption("--devshim-results")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(_results, out, indent=0, sort_keys=True)
