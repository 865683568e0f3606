"""Per-framework test helpers for the conformance suite.

The conformance tests are written once against the ``Harness`` interface;
each backend supplies one small subclass in ``harnesses/<backend>_harness.py``.
Which backends exist comes from devshim's registry, so a new backend package
plus its harness joins the suite with no list to edit. A harness is only
imported when its framework is installed, so the suite runs in every tox env
and skips, with a reason, the frameworks that env does not have.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

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
    #: whether the framework has a data-less "meta" device.
    has_meta: bool = False

    def real_gpu(self, index: int) -> Any:
        """The framework's own object for real GPU ``index`` (None: it has no GPU objects)."""
        return None

    #: whether an op may run with inputs on two devices (TensorFlow copies, MXNet ignores
    #: context ids); PyTorch and JAX refuse such ops themselves.
    runs_mixed_ops: bool = True
    #: whether devshim's guard reports mixed-device ops (False: left to the framework's refusal)
    guard_sees_ops: bool = True

    # ---- models (for the placement conformance tests); None from mlp(): no model support

    def mlp(self, sizes: Sequence[int] = (4, 8, 3), seed: int = 0) -> Any:
        """A small MLP (linear, ReLU, linear) on the CPU, weights drawn from NumPy with ``seed``."""
        return None

    def forward(self, model: Any, x: Any) -> Any:
        return model(x)

    def grads(self, model: Any, x: Any, y: Any) -> list:
        """Gradients of sum((model(x) - y) ** 2) w.r.t. the parameters, as framework tensors on
        the parameters' devices, in parameter order."""
        raise NotImplementedError

    def param_values(self, model: Any) -> list:
        """The parameters as NumPy arrays, in parameter order."""
        raise NotImplementedError

    def sgd_step(self, model: Any, grads: list, lr: float) -> Any:
        """p -= lr * g for each parameter and gradient (gradients already on the parameter's device);
        returns the model (a new one where parameters are immutable, as JAX's)."""
        raise NotImplementedError

    def run_on(self, device: Any, fn: Callable[[], Any]) -> Any:
        """``fn()`` placed on ``device`` the framework's way (TensorFlow: a device scope)."""
        return fn()

    def host_reads(self) -> list:
        """(how the code reads it, read(x)) for each implicit host read the guard must see;
        ``x`` is 0-d."""
        return []

    def tensor(self, values: Any, device: Any = None, dtype: Optional[str] = None) -> Any:
        """A tensor holding ``values`` on native ``device`` (default: the framework's default)."""
        raise NotImplementedError

    #: the keyword by which ``ds.array_module(x)``'s creation functions take a device ("device",
    #: MXNet 1.9's "ctx"), or None where the namespace takes none (TensorFlow's: a device scope).
    namespace_device_keyword: Optional[str] = "device"

    def placements(self, device: Any) -> list:
        """(how the code says it, make()) for each of the framework's own calls that take a device,
        each making a small float tensor on ``device`` (``ds.device_of`` of a tensor must go in)."""
        return []

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

    def custom_gradient(self, forward: Callable[..., Any], backward: Callable[..., Any]) -> Optional[Callable[..., Any]]:
        """``forward`` (inputs -> one output) with ``backward`` ((*inputs, grad) -> one gradient
        per input) as the framework's own custom-gradient function; None without autodiff."""
        return None

    #: whether the framework differentiates its custom-gradient functions a second time (MXNet's
    #: ``autograd.Function`` backward is opaque to its autograd).
    custom_second_order: bool = True

    def stop_gradient(self, x: Any) -> Any:
        """``x`` as a value the framework's autodiff does not differentiate through."""
        return x

    def cast(self, x: Any, dtype: str) -> Any:
        """``x`` converted to ``dtype`` (a NumPy name) by the framework's own op (recorded by its
        autodiff)."""
        raise NotImplementedError

    def gather_rows(self, weight: Any, rows: Sequence[int]) -> Any:
        """``weight[rows]`` (a 2-D ``weight``) the way whose gradient is the framework's sparse
        kind, where it has one (torch ``F.embedding(sparse=True)``, TensorFlow ``tf.gather``'s
        ``IndexedSlices``, MXNet ``row_sparse``); a plain gather elsewhere."""
        return weight[np.asarray(rows)]

    #: a regular expression for the framework's own refusal of a custom backward that returns more
    #: gradients than its function has inputs (Chainer's "invalid number of gradients" case)
    wrong_gradient_count: str = ""
    #: whether the framework raises a custom backward's error for a 0-size input (MXNet 1.9 prints it,
    #: goes on, and fails the next custom backward of the process)
    runs_backward_of_empty: bool = True

    def identity(self, count: int) -> Optional[Callable[..., Any]]:
        """The framework's own custom-gradient identity of ``count`` inputs and as many outputs (one
        tensor for one), whose backward passes each output's gradient on (zeros for an output that
        got none); None without autodiff."""
        return None

    def views(self) -> list:
        """(how the code says it, view(x)) for the outputs Chainer's closure form must read as they
        were: the input itself and views of its memory, for a 2-D ``x``."""
        return [("x", lambda x: x), ("x.T", lambda x: x.T), ("x.reshape(-1)", lambda x: x.reshape(-1)),
                ("x[0]", lambda x: x[0])]

    def in_place_kind(self, x: Any) -> Any:
        """``x`` as a tensor the framework can change in place (a ``tf.Variable``), or None where it
        has none (JAX)."""
        return x

    def special_kind(self, x: Any) -> Any:
        """A copy of ``x`` as the framework's other kind of input a check must keep (a torch
        ``nn.Parameter``, a ``tf.Variable``, an MXNet classic ``nd`` array); ``x`` where it has none."""
        return x

    def out_of_memory(self) -> Optional[BaseException]:
        """The framework's own out-of-memory error, made by the framework where that is cheap (an
        allocation far past any machine's memory), else built as the framework builds it."""
        return None


def backends_with_harness() -> List[str]:
    """Every registered backend that has a harness module here, in registry order."""
    from devshim.backends import specs

    return [name for name in specs() if importlib.util.find_spec(f"harnesses.{name}_harness") is not None]


def installed_backends() -> List[str]:
    from devshim.backends import specs

    return [name for name in backends_with_harness() if specs()[name].is_installed()]


def load_harness(name: str) -> Harness:
    return importlib.import_module(f"harnesses.{name}_harness").HARNESS
