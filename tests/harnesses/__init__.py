"""Per-framework test helpers for the conformance suite.

The conformance tests are written once against the ``Harness`` interface;
each framework supplies one small subclass in its own module here, listed in
``HARNESS_MODULES``. A harness is only imported when its framework is
installed, so the suite runs in every tox env and skips, with a reason, the
frameworks that env does not have.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

# backend name -> (framework module checked with find_spec, harness module)
HARNESS_MODULES = {
    "numpy": ("numpy", "harnesses.numpy_harness"),
    "torch": ("torch", "harnesses.torch_harness"),
    "tensorflow": ("tensorflow", "harnesses.tensorflow_harness"),
    "mxnet": ("mxnet", "harnesses.mxnet_harness"),
}


class Harness:
    """What the conformance suite needs to know about one framework.

    Tensors are made from and read back to NumPy through the framework's own
    calls (never through devshim), so the suite checks devshim against the
    framework rather than against itself.
    """

    name: str
    #: dtype names (NumPy spelling, plus "bfloat16") this framework has.
    dtypes: Sequence[str]
    has_autograd: bool = True
    #: whether tensors can be mutated in place (TensorFlow's cannot).
    mutable: bool = True

    def tensor(self, values: Any, device: Any = None, dtype: Optional[str] = None) -> Any:
        """A tensor holding ``values`` on native ``device`` (default: the framework's default)."""
        raise NotImplementedError

    def from_bits(self, raw: bytes, shape: tuple, dtype: str, device: Any = None) -> Any:
        """A tensor whose memory is exactly ``raw`` read as ``dtype`` of ``shape``."""
        raise NotImplementedError

    def bits(self, x: Any) -> bytes:
        """The raw bytes of ``x``'s values in C order."""
        raise NotImplementedError

    def values(self, x: Any) -> np.ndarray:
        """``x``'s values as a NumPy array (a framework call, not devshim's)."""
        raise NotImplementedError

    def dtype_name(self, x: Any) -> str:
        raise NotImplementedError

    def shape(self, x: Any) -> tuple:
        return tuple(x.shape)

    def fill(self, x: Any, value: float) -> None:
        """Overwrite every element of ``x`` in place."""
        raise NotImplementedError

    def aliases(self, a: Any, b: Any) -> bool:
        """Whether ``a`` and ``b`` share memory."""
        raise NotImplementedError

    def strided(self, x: Any) -> Any:
        """A non-contiguous view of ``x`` (or ``x`` when its shape allows none)."""
        if len(self.shape(x)) >= 1 and self.shape(x)[-1] >= 2:
            return x[..., ::2]
        return x

    def grad_of_sum(self, fn: Callable[[Any], Any], values: Any, device: Any = None) -> np.ndarray:
        """d sum(fn(x)) / dx at ``values``, computed by the framework's autograd."""
        raise NotImplementedError

    def add(self, a: Any, b: Any) -> Any:
        return a + b


def installed_backends() -> List[str]:
    return [
        name for name, (module, _) in HARNESS_MODULES.items()
        if importlib.util.find_spec(module) is not None
    ]


def load_harness(name: str) -> Harness:
    module = importlib.import_module(HARNESS_MODULES[name][1])
    return module.HARNESS
