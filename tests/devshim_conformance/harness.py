"""The harness: what the conformance suite needs to know about one framework, in the framework's
own calls, and how the suite finds each backend's harness.

A backend's harness is one subclass of `Harness` and its instance, ``HARNESS``, in a module found
by the backend's name: the module an installed distribution names under the ``devshim.harnesses``
entry point (``mine = "devshim_mine.harness"``), else ``harnesses.<name>_harness`` on ``sys.path``
(devshim's own backends: tests/harnesses/). A harness is only imported when its framework is
installed, so the suite skips, with a reason, the frameworks an environment does not have.

Example:
    >>> from devshim_conformance import load_harness
    >>> load_harness("numpy").tensor([1.0, 2.0])
    array([1., 2.])
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import pytest

import devshim as ds

#: The entry-point group through which an installed distribution names its backend's harness.
HARNESS_GROUP = "devshim.harnesses"


class Harness:
    """What the conformance suite needs to know about one framework.

    Tensors are made from and read back to NumPy through the framework's own
    calls (never through devshim), so the suite checks devshim against the
    framework rather than against itself.
    """

    name: str
    #: why the conformance suite does not run this harness (None: it does); its facts still serve
    #: devshim's other tests.
    conformance_skip: Optional[str] = None
    #: dtype names (NumPy spelling, plus "bfloat16") this framework has.
    dtypes: Sequence[str]
    has_autograd: bool = True
    #: whether tensors can be mutated in place (TensorFlow's cannot).
    mutable: bool = True
    #: whether the framework has a data-less "meta" device.
    has_meta: bool = False
    #: whether the framework has arrays on the host (CuPy's live on GPUs: its host arrays are
    #: NumPy's, and ds.convert of a host tensor to it needs device=).
    host_arrays: bool = True

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
        ``x`` is 0-d. ``how`` names the read in failure messages only: the guard's own words for
        it are the guard's (the suite checks that its error and report agree)."""
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

    # ---- what tests outside the contract ask of the framework, each in its own words

    def array_module(self) -> Any:
        """The module ``ds.array_module`` answers for this framework's arrays (None: it has none,
        and ``ds.array_module`` refuses them)."""
        return None

    #: code a fresh interpreter runs to make ``x``, a small tensor of the framework, with its own
    #: calls and before devshim loads anything (tests/test_first_use.py).
    first_tensor_code: Optional[str] = None

    def gpu_count(self) -> int:
        """How many GPUs the framework sees, asked of the framework itself (never of devshim); run in
        a fresh interpreter with no devshim variable set (tests/machine.py)."""
        return 0

    #: code that starts the framework's devices where it fixes them when it starts (TensorFlow, JAX:
    #: virtual devices cannot be added afterwards), None where it can add them at any time.
    starts_devices_code: Optional[str] = None

    def on_host(self, array: np.ndarray) -> Any:
        """A tensor of the framework on the CPU holding ``array``'s values, in storage that is
        ``array``'s own where the framework takes a host buffer in place (tests/test_convert.py
        reads sharing from addresses); None where it has no array of that dtype on the CPU."""
        return None

    def address(self, x: Any) -> int:
        """The address of ``x``'s first element, read with the framework's own API."""
        raise NotImplementedError


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> dict:
    from importlib import metadata

    found = metadata.entry_points()
    chosen = found.select(group=group) if hasattr(found, "select") else found.get(group, ())  # Python 3.9
    return {entry.name: entry.value for entry in chosen}


def harness_module(name: str) -> Optional[str]:
    """The module holding backend ``name``'s harness, or None where it has none here."""
    declared = _entry_points(HARNESS_GROUP).get(name)
    if declared is not None:
        return declared
    try:
        found = importlib.util.find_spec(f"harnesses.{name}_harness")
    except ImportError:  # no harnesses package on sys.path
        found = None
    return None if found is None else f"harnesses.{name}_harness"


def backends_with_harness() -> List[str]:
    """Every registered backend that has a harness, in registry order."""
    return [name for name in ds.backends.specs() if harness_module(name) is not None]


def installed_backends() -> List[str]:
    """The backends with a harness whose framework is installed here."""
    return [name for name in backends_with_harness() if ds.backends.specs()[name].is_installed()]


def load_harness(name: str) -> Harness:
    """Backend ``name``'s harness (its module's ``HARNESS``, or the object its entry point names)."""
    module_name, _, attribute = harness_module(name).partition(":")
    return getattr(importlib.import_module(module_name.strip()), attribute.strip() or "HARNESS")


def gpus_reachable(backend: str) -> int:
    """How many GPUs ``to_device`` can send a tensor of ``backend`` to, with that backend selected:
    its own; for a host framework's arrays, those of its accelerator partner (NumPy's: CuPy; none on
    virtual GPUs)."""
    own = ds.num_gpus(backend=backend)
    partner = ds.backends.accelerator_partner(backend)
    if own or partner is None or ds.settings.virtual_device_count():
        return own
    return ds.num_gpus(backend=partner.name)


def require_module(name: str, module: str, why: str) -> None:
    """Skip the calling test, saying why, where backend ``name``'s folder has no ``module``.py and
    what the test checks needs it (test_contract_optional_modules.py checks what such a backend
    does instead: it refuses, naming the module)."""
    if not ds.backends.specs()[name].has_module(module):
        pytest.skip(f"{name} has no {module}.py: {why}")
