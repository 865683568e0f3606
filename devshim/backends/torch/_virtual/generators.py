"""Random numbers on virtual GPUs, as on CUDA: one default generator per device, and
`torch.Generator(device="vgpu:i")`.

Each virtual GPU has its own default generator (`torch.vgpu.default_generators[i]`),
seeded by `torch.manual_seed` (through `torch.vgpu.manual_seed_all`, which torch
calls) and read and set by `torch.vgpu.get_rng_state`/`set_rng_state`, so drawing on
`vgpu:1` does not move the CPU's stream or `vgpu:0`'s, and a seeded run draws the same
numbers every time. A virtual GPU computes on the host, so each of its generators is a CPU
generator underneath (its state is a CPU generator's); devshim knows it as a virtual GPU's
by its address (`Generator._cdata`), because torch hands the operations a generator
object of its own, not the one the caller made.

An operation that draws (torch tags it `nondeterministic_seeded`) on a virtual GPU gets
that device's generator: passed as its `generator` argument when it has one and the
caller gave none, else (dropout, `randn` without a generator) by running it with the
CPU's default generator holding the device's state for the call. A generator the caller
passes must be a virtual GPU's, as CUDA wants a CUDA generator.

`torch.Generator` itself is a class of torch's C extension, which creates only the
generators of devices registered in C++; `install()` puts a subclass in its place whose
constructor hands out a `VirtualGenerator` for a virtual GPU and torch's own generator
for any other device (`isinstance(g, torch.Generator)` holds for both).

Example:
    >>> g = torch.Generator(device="vgpu:1").manual_seed(0)
    >>> torch.randn(2, generator=g, device="vgpu:1").device
    device(type='vgpu', index=1)
"""

from __future__ import annotations

import threading
import weakref

import torch

from devshim.backends.torch import _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual.count import device_count

__all__ = ["VirtualGenerator", "default_generator", "run_seeded", "install", "DEVICE_MODULE_FUNCTIONS"]

_CGenerator = _internals.C_GENERATOR.get()  # the C extension's generator class (torch.Generator)
_CPU_GENERATOR = torch.default_generator    # the CPU's default generator

_CPU = torch.device("cpu")
_virtual_by_address: dict = {}   # Generator._cdata -> the virtual GPU it belongs to
_defaults: list = []             # default generator of vgpu:i, made on first use
_defaults_lock = threading.Lock()
_swap_lock = threading.RLock()   # one borrowing of the CPU's default generator at a time


class VirtualGenerator(_CGenerator):
    """A random number generator of a virtual GPU (what `torch.Generator(device="vgpu:i")`
    gives): `device` is `vgpu:i`; the numbers are a CPU generator's.

    Example:
        >>> VirtualGenerator("vgpu:1").device
        device(type='vgpu', index=1)
    """

    def __new__(cls, device=VIRTUAL_TYPE):
        self = super().__new__(cls, device=_CPU)
        device = torch.device(device)
        self._virtual_device = torch.device(VIRTUAL_TYPE, device.index or 0)
        address = self._cdata
        _virtual_by_address[address] = self._virtual_device
        weakref.finalize(self, _virtual_by_address.pop, address, None)
        return self

    def __init__(self, device=VIRTUAL_TYPE) -> None:
        pass  # __new__ made it

    @property
    def device(self):
        return self._virtual_device

    def clone_state(self):
        twin = VirtualGenerator(self._virtual_device)
        twin.set_state(self.get_state())
        return twin

    def __reduce__(self):
        return (VirtualGenerator, (str(self._virtual_device),), _CGenerator.__reduce__(self)[2])

    def __repr__(self) -> str:
        return f"<torch.Generator device='{self._virtual_device}' (devshim virtual GPU)>"


def default_generator(device) -> VirtualGenerator:
    """The default generator of virtual GPU `device` (a torch.device or an index)."""
    index = device if isinstance(device, int) else (device.index or 0)
    try:
        return _defaults[index]
    except IndexError:
        with _defaults_lock:
            while len(_defaults) <= index:
                _defaults.append(VirtualGenerator(torch.device(VIRTUAL_TYPE, len(_defaults))))
        return _defaults[index]


def run_seeded(plan, host_args: list, host_kwargs: dict, device):
    """Run `plan`'s host kernel, which draws random numbers, with virtual GPU `device`'s
    generator: the one the caller passed (it must be a virtual GPU's, as CUDA wants a CUDA
    generator), else the device's default one."""
    where = plan.generator
    if where is None:
        return _run_borrowing_cpu_generator(plan, host_args, host_kwargs, device)
    position, name = where
    given = host_args[position] if position < len(host_args) else host_kwargs.get(name)
    if given is None:
        if position < len(host_args):
            host_args[position] = default_generator(device)
        else:
            host_kwargs[name] = default_generator(device)
    elif given._cdata not in _virtual_by_address:  # a CPU generator, not a virtual GPU's
        raise RuntimeError(
            f"Expected a '{VIRTUAL_TYPE}' device type for generator but found '{given.device.type}' "
            f"({plan.func} draws on {device}, a devshim virtual GPU, which wants a generator of a "
            f"virtual GPU as CUDA wants a CUDA one: torch.Generator(device={str(device)!r}).)"
        )
    return plan.kernel(*host_args, **host_kwargs)


def _run_borrowing_cpu_generator(plan, host_args, host_kwargs, device):
    """An operation with no generator argument (dropout, `randn` without one) draws from the
    CPU's default generator: give it the device's state for the call, then take it back."""
    own = default_generator(device)
    with _swap_lock:
        saved = _CPU_GENERATOR.get_state()
        _CPU_GENERATOR.set_state(own.get_state())
        try:
            return plan.kernel(*host_args, **host_kwargs)
        finally:
            own.set_state(_CPU_GENERATOR.get_state())
            _CPU_GENERATOR.set_state(saved)


# ------------------------------------------------------------ torch.vgpu's random functions


def _device_index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    return torch.device(device).index or 0


def get_rng_state(device=VIRTUAL_TYPE):
    """The random number generator state of a virtual GPU, as a ByteTensor."""
    return default_generator(_device_index(device)).get_state()


def get_rng_state_all() -> list:
    """The random number generator states of every virtual GPU."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device=VIRTUAL_TYPE) -> None:
    """Set the random number generator state of a virtual GPU."""
    default_generator(_device_index(device)).set_state(new_state.clone())


def set_rng_state_all(new_states) -> None:
    """Set the random number generator state of every virtual GPU."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed) -> None:
    """Seed the current virtual GPU's generator (`vgpu:0`: there is no other current device)."""
    default_generator(0).manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    """Seed every virtual GPU's generator (`torch.manual_seed` calls this)."""
    for index in range(max(device_count(), len(_defaults))):
        default_generator(index).manual_seed(int(seed))


def seed() -> None:
    """Seed the current virtual GPU's generator with a random number."""
    default_generator(0).seed()


def seed_all() -> None:
    """Seed every virtual GPU's generator with one random number."""
    manual_seed_all(default_generator(0).seed())


def initial_seed() -> int:
    """The current virtual GPU's initial seed."""
    return default_generator(0).initial_seed()


#: What `torch.vgpu` offers, as `torch.cuda` does.
DEVICE_MODULE_FUNCTIONS = {function.__name__: function for function in (
    get_rng_state, get_rng_state_all, set_rng_state, set_rng_state_all, manual_seed, manual_seed_all, seed,
    seed_all, initial_seed)}


def module_getattr(name: str):
    """`torch.vgpu.default_generators`: one per virtual GPU presented now."""
    if name == "default_generators":
        return tuple(default_generator(index) for index in range(device_count()))
    raise AttributeError(f"module 'torch.{VIRTUAL_TYPE}' has no attribute {name!r}")


# ------------------------------------------------------------ torch.Generator


class _GeneratorType(type(_CGenerator)):
    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, _CGenerator)

    def __subclasscheck__(cls, subclass) -> bool:
        return issubclass(subclass, _CGenerator)


class Generator(_CGenerator, metaclass=_GeneratorType):
    """`torch.Generator` while virtual GPUs are installed: torch's own generator for a CPU
    (or any other) device, a `VirtualGenerator` for a virtual GPU."""

    def __new__(cls, device=_CPU):
        if device is not None and torch.device(device).type == VIRTUAL_TYPE:
            return VirtualGenerator(device)
        return _CGenerator(device=device if device is not None else _CPU)


def install() -> None:
    """Make `torch.Generator(device="vgpu:i")` give a virtual GPU's generator."""
    if torch.Generator is _CGenerator:
        torch.Generator = Generator
