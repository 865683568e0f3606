"""CuPy's harness: what devshim's tests ask of CuPy itself (how many GPUs it sees, how a fresh
interpreter makes an array, its array module). The conformance suite does not run it yet
(``conformance_skip``): CuPy's CPU is NumPy's, its host partner, so a "CuPy tensor on the CPU" is
a NumPy array, which the suite's ``tensor(values, device)`` does not provide for."""

from __future__ import annotations

import cupy
import numpy

from devshim_conformance import Harness


class CupyHarness(Harness):
    name = "cupy"
    conformance_skip = ("CuPy's CPU is NumPy's (its host partner): the suite's tensor(values, ds.cpu()) would be a "
                        "NumPy array, which its contract does not provide for; NumPy's pass covers those")
    first_tensor_code = "import cupy; x = cupy.ones(4)"
    host_arrays = False

    def tensor(self, values, device=None, dtype=None):
        """A CuPy array on GPU ``device`` (a ``cupy.cuda.Device``; default: the current one), or
        on the CPU (the string "cpu", as devshim names CuPy's host) a NumPy array, CuPy's host form."""
        if isinstance(device, str):
            return numpy.array(values, dtype=dtype)
        if device is None:
            return cupy.array(values, dtype=dtype)
        with device:
            return cupy.array(values, dtype=dtype)

    def array_module(self):
        return cupy

    def gpu_count(self):
        try:
            return cupy.cuda.runtime.getDeviceCount()
        except cupy.cuda.runtime.CUDARuntimeError:  # no driver
            return 0


HARNESS = CupyHarness()
