"""NumPy's device contract: one device, the host CPU.

The native device is the string `"cpu"`, which NumPy 2's `device=`
arguments accept (`np.ones(2, device=ds.cpu())`). NumPy cannot present
virtual devices: every array lives in the same host memory, so "distinct"
devices would be a fiction, and devshim refuses rather than fake them.

NumPy has no GPU, and a NumPy array is every framework's input: sent to another
framework's device, it becomes that framework's tensor there, new storage, as
`jax.device_put` and `torch.tensor(x, device=...)` do. A framework's own
device object (`torch.device`, a JAX `Device`, a `cupy.cuda.Device`, ...)
names that framework, on the CPU as on a GPU; a GPU spec (`"gpu:1"`) names the
selected backend's GPU, and under the numpy and cupy backends CuPy's, NumPy's
*accelerator partner* (as Chainer's `to_gpu`). Host specs (`"cpu"`, NumPy's
own device) keep a NumPy array. Everything else about NumPy stays host-only:
`ds.gpu(backend="numpy")` still refuses. docs/tensors.md has the whole table.
"""

from __future__ import annotations

from operator import methodcaller

from devshim import settings
from devshim.backends.base import Backend, DeviceTable
from devshim.backends.numpy import SPEC
from devshim._device import Device, describe_native, parse_spec
from devshim.errors import BackendError, DeviceUnavailableError, DevshimError

HOST = "cpu"
_CPU = Device("cpu", 0, native=HOST, backend="numpy")
_copy = methodcaller("copy")


class Landing:
    """Where a NumPy array sent to another framework's device goes: that framework's adapter and
    native device (what `NumpyBackend.target` resolves such a device to). The copy there is a
    tensor of that framework.

    Example:
        >>> ds.get_backend("numpy").target(torch.device("cpu"))
        Landing(torch, device(type='cpu'))
    """

    __slots__ = ("adapter", "native")

    def __init__(self, adapter, native) -> None:
        self.adapter, self.native = adapter, native

    def __repr__(self) -> str:
        return f"Landing({self.adapter.name}, {self.native!r})"


class NumpyBackend(Backend):
    """NumPy arrays and scalars, on the host.

    Example:
        >>> ds.device_of(np.ones(2))
        Device('cpu:0', backend='numpy')
    """

    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self._table = None  # made once NumPy is imported: its values say "cpu" in .device (NumPy 2.1)

    def device_table(self):
        table = self._table
        if table is None:
            # One table for every NumPy type, arrays and scalars (np.float32(1), np.ones(3).sum()).
            if hasattr(self.fw.generic, "device"):  # NumPy 2.1 and later: both say "cpu"
                table = DeviceTable("device", exact=True, attribute_is_native=True, home=_CPU)
                table[HOST] = _CPU
            else:  # NumPy 1 has no device query, and NumPy 2.0's scalars none: all are on the host
                table = DeviceTable("__class__")
            self._table = table
        return table

    def is_tensor(self, x) -> bool:
        np = self.fw
        return isinstance(x, (np.ndarray, np.generic))

    def is_tensor_type(self, kind: type):
        np = self.fw
        return issubclass(kind, (np.ndarray, np.generic))

    def is_native_device(self, obj) -> bool:
        return False  # "cpu" is a plain string, read by the spec parser

    def accelerator_count(self) -> int:
        return 0

    def make_native_device(self, kind: str, index: int):
        if kind == "meta":
            raise self._no_meta()
        if kind != "cpu" or index != 0:
            raise DeviceUnavailableError(
                f"NumPy arrays live on the host only; {kind}:{index} does not exist there. "
                f"Pick a GPU framework with DEVSHIM_BACKEND, or use ds.cpu()."
            )
        return HOST

    def describe(self, native) -> Device:
        return _CPU

    def tensor_device(self, x) -> Device:
        table = self.device_table()
        if table.attr == "__class__":
            table[type(x)] = _CPU
        return _CPU

    def same_place(self, x, native) -> bool:
        return native is HOST  # every array is on the host; a partner's device is elsewhere

    def copy_to(self, x, native, non_blocking: bool):
        if native is HOST:
            return x.copy()
        return self._land(x, native)

    def copier(self, native, non_blocking: bool):
        if native is HOST:
            return _copy  # x.copy(), with no Python frame of devshim's per leaf
        land = self._land
        return lambda x: land(x, native)

    # ------------------------------------------------------------ other frameworks' devices

    def target(self, spec):
        """The host for host specs; for another framework's device, a `Landing` there.

        A framework's own device object (`torch.device`, a JAX `Device`, a TensorFlow device,
        an MXNet `Context`, a `cupy.cuda.Device`), or a `ds.Device` of that framework, is
        where the array becomes that framework's tensor, on the CPU as on a GPU. A GPU spec
        (`"gpu:1"`, `"cuda:0"`) names the selected backend's GPU (CuPy's under the numpy and
        cupy backends, as Chainer's `to_gpu`). `device()` stays host-only.
        """
        try:
            return self._targets[spec]
        except (KeyError, TypeError):
            pass
        owner = self._owner_of(spec)
        if owner is None:
            if self._names_a_gpu(spec):  # resolved anew each call: it depends on the selected backend
                owner = self._gpu_framework(spec)
                return Landing(owner, owner.target(spec))
            native = self.device(spec)  # the host, or the error saying what does not exist
        else:
            native = Landing(owner, owner.target(spec))
        if self._cacheable(spec):
            self._targets[spec] = native
            if native is HOST:
                self.device_table().targets[spec] = _CPU
        return native

    def _owner_of(self, spec):
        """The adapter of the framework whose device object (or `ds.Device`) `spec` is, when
        that framework is not NumPy; None for NumPy's own and for spec strings."""
        if type(spec) is str:
            return None
        from devshim.backends.registry import load_backend

        described = spec if isinstance(spec, Device) else describe_native(spec)
        if described is None or not described.backend or described.backend == self.name:
            return None
        return load_backend(described.backend)

    def _gpu_framework(self, spec):
        """The framework whose GPU a spec names for a NumPy array: the selected backend's, or under
        the numpy and cupy backends NumPy's accelerator partner (CuPy); an error naming what to do
        when there is none."""
        from devshim.backends.registry import accelerator_partner, specs
        from devshim.backends.selection import get_backend

        selected = get_backend()
        if selected.name != self.name and selected.spec.host_partner != self.name:
            return selected
        partner = accelerator_partner(self.name)
        virtual = settings.virtual_device_count()
        if partner is not None and not virtual:
            return partner
        raise self._no_gpu(spec, selected.name, virtual, specs())

    def _no_gpu(self, spec, selected: str, virtual: int, every: dict) -> DeviceUnavailableError:
        """Why a NumPy array cannot go to the GPU `spec` names, and what to do: the frameworks
        with virtual GPUs and NumPy's accelerator partner (CuPy), as the registry has them."""
        place = str(spec) if type(spec) is str else f"{spec.kind}:{spec.index}"
        gpu = [other for other in every.values() if other.virtual_devices]
        partner = next((other for other in every.values() if other.host_partner == self.name), None)
        where = also = ""
        if partner is not None:
            where = f": under the {self.name} and {partner.name} backends a GPU is {partner.title}'s"
            also = (f" Virtual GPUs ({settings.VIRTUAL_DEVICES_VAR}={virtual}) are the GPUs of "
                    f"{', '.join(other.title for other in gpu)}, not {partner.title}'s." if virtual else
                    f" Install {partner.title} ({partner.install_hint()}) to get {partner.title} arrays there, as "
                    f"Chainer's to_gpu does.")
        other = gpu[0].name if gpu else "<framework>"
        return DeviceUnavailableError(
            f"{place} was asked for a NumPy array under the {selected} backend, and NumPy has no GPU{where}.{also} "
            f"Or make x a tensor of a GPU framework there: ds.convert(x, {other!r}, device={place!r}), or select "
            f"that framework (DEVSHIM_BACKEND={other}) and to_device makes one; or keep x on the host with ds.cpu()."
        )

    def _names_a_gpu(self, spec) -> bool:
        if isinstance(spec, Device):
            return spec.kind == "gpu"
        if isinstance(spec, str):  # spec strings, and str subclasses that are no framework's device
            try:
                return parse_spec(str(spec)).kind == "gpu"
            except DevshimError:
                return False  # the host check says what is wrong with it
        return False

    def _land(self, x, landing):
        """`x`'s values as a new tensor of `landing`'s framework on its device (through the
        framework's `interop.from_host`, which takes a fresh array in native byte order)."""
        from devshim.backends.registry import interop

        owner = landing.adapter
        if owner.spec.host_partner == self.name:  # its host arrays are NumPy's: its copy takes them (CuPy)
            return owner.copy_to(x, landing.native, False)
        array = self.fw.array(x, dtype=x.dtype.newbyteorder("="), copy=True)  # in native byte order
        maker = interop(owner.name)
        if maker is None:
            raise BackendError(
                f"The {owner.name} backend has no interop.py, so a NumPy array cannot become its tensor "
                f"on {landing.native!r}. Make the tensor with the framework's own constructor."
            )
        return maker.from_host(owner, array, landing.native)

    def tensor_to_numpy(self, x):
        return self.fw.array(x, copy=True)

    def array_namespace(self, x):
        return self.fw  # numpy itself, as in Chainer (NumPy 2 is an array-API namespace too)

    def device_details(self) -> list:
        return [{"device": "cpu:0", "name": "host CPU"}]
