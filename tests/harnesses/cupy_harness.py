"""CuPy's harness: what devshim's tests ask of CuPy itself (how many GPUs it sees, how a fresh
interpreter makes an array, its array module). The conformance suite does not run it yet
(``conformance_skip``): CuPy's CPU is NumPy's, its host partner, so a "CuPy tensor on the CPU" is
a NumPy array, which the suite's ``tensor(values, device)`` does not provide for."""

from __future__ import annotations

import cupy

from devshim_conformance import Harness


class CupyHarness(Harness):
    name = "cupy"
    conformance_skip = ("CuPy's CPU is NumPy's (its host partner): the suite's tensor(values, ds.cpu()) would be a "
                        "NumPy array, which its contract does not provide for; NumPy's pass covers those")
    first_tensor_code = "import cupy; x = cupy.ones(4)"

    def array_module(self):
        return cupy

    def gpu_count(self):
        try:
            return cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError:  # no driver
            return 0


HARNESS = CupyHarness()
