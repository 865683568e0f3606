"""NumPy's device contract: one device, the host CPU.

The native device is the string ``"cpu"``, which NumPy 2's ``device=``
arguments accept (``np.ones(2, device=ds.cpu())``). NumPy cannot present
virtual devices: every array lives in the same host memory, so "distinct"
devices would be a fiction, and devshim refuses rather than fake them.

NumPy has no GPU, but it can have an *accelerator partner*: the installed
backend that names numpy as its host partner (CuPy). A NumPy array sent to a
GPU (``to_device(x, "gpu:1")``, or to a ``cupy.cuda.Device``) becomes that
backend's array there; the transfer is the partner's ``copy_to``. Everything
else about NumPy stays host-only: ``ds.gpu(backend="numpy")`` still refuses.
"""

from __future__ import annotations

from operator import methodcaller

from devshim import settings, transfer
from devshim.guard import marker
from devshim.backends.base import Backend, DeviceTable
from devshim.backends.numpy import SPEC
from devshim._device import Device
from devshim.errors import BackendError, DeviceUnavailableError

HOST = "cpu"
_CPU = Device("cpu", 0, native=HOST, backend="numpy")
_copy = methodcaller("copy")


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
        return self._partner_for(native).copy_to(x, native, non_blocking)

    def copier(self, native, non_blocking: bool):
        if native is HOST:
            return _copy  # x.copy(), with no Python frame of devshim's per leaf
        return self._partner_for(native).copier(native, non_blocking)

    # ------------------------------------------------------------ the accelerator partner

    def target(self, spec):
        """The host for host specs; for a GPU, the accelerator partner's device (CuPy's).

        ``device()`` stays host-only: only transfers of NumPy arrays reach the partner.
        """
        try:
            return self._targets[spec]
        except (KeyError, TypeError):
            pass
        try:
            native = self.device(spec)
        except (DeviceUnavailableError, BackendError) as refused:  # BackendError: virtual GPUs
            if not self._names_a_gpu(spec):
                raise
            partner = self._accelerator_partner()
            if partner is None or settings.virtual_device_count():
                raise self._no_such_gpu(spec, refused) from None
            native = partner.target(spec)
        if self._cacheable(spec):
            self._targets[spec] = native
            if native is HOST:
                self.device_table().targets[spec] = _CPU
        return native

    def _no_such_gpu(self, spec, refused) -> DeviceUnavailableError:
        """The error for a NumPy array sent to a GPU: when the GPU is another framework's
        device, the array has to become that framework's tensor (``ds.convert``) to go there."""
        owner, place = self._gpu_owner(spec)
        virtual = settings.virtual_device_count()
        partner = "" if virtual else ('; or install CuPy (pip install cupy-cuda12x, or pip install '
                                      '"devshim[cupy]" where devshim is installed), NumPy\'s GPU partner')
        if owner is None:  # no framework here has that GPU: say what was refused
            return DeviceUnavailableError(
                f"{refused} NumPy has no GPU of its own: its arrays live on the host only. To put one "
                f"on a framework's GPU, make it that framework's tensor there: ds.convert(x, 'torch', "
                f"device={place!r}), say{partner}; or keep it on the host with ds.cpu()."
            )
        return DeviceUnavailableError(
            f"x is a NumPy array, and NumPy has no GPU: its arrays live on the host only, and {place} is "
            f"a {'virtual ' if virtual else ''}GPU of {owner}. Make x a {owner} tensor on that device: "
            f"ds.convert(x, {owner!r}, device={place!r}){partner}; or keep it on the host with ds.cpu()."
        )

    def _gpu_owner(self, spec) -> tuple:
        """(the backend whose GPU ``spec`` is, or None when none has it; the GPU's name): a
        framework's own device object names its framework, a spec the selected backend."""
        from devshim._device import describe_native
        from devshim.backends.registry import load_backend
        from devshim.backends.selection import get_backend
        from devshim.errors import DevshimError

        described = spec if isinstance(spec, Device) else None if type(spec) is str else describe_native(spec)
        place = str(described) if described is not None else str(spec)
        owner = described.backend if described is not None and described.backend else get_backend().name
        if owner == self.name:
            return None, place
        try:
            load_backend(owner).device(spec if described is None or described.backend else place)
        except DevshimError:
            return None, place
        return owner, place

    def _accelerator_partner(self):
        from devshim.backends.registry import accelerator_partner

        return accelerator_partner(self.name)

    def _partner_for(self, native):
        partner = self._accelerator_partner()
        if partner is None or not (partner.is_loaded() and partner.is_native_device(native)):
            raise DeviceUnavailableError(
                f"NumPy arrays live on the host only, and {native!r} is not a device of NumPy's "
                f"accelerator partner. Use ds.cpu(), or a CuPy device (pip install cupy-cuda12x)."
            )
        return partner

    def _names_a_gpu(self, spec) -> bool:
        from devshim._device import describe_native as describe_native_device, parse_spec

        if isinstance(spec, Device):
            return spec.kind == "gpu"
        if type(spec) is str:
            return parse_spec(spec).kind == "gpu"
        described = describe_native_device(spec)
        return described is not None and described.kind == "gpu"

    def tensor_to_numpy(self, x):
        return self.fw.array(x, copy=True)

    def array_namespace(self, x):
        return self.fw  # numpy itself, as in Chainer (NumPy 2 is an array-API namespace too)

    def device_details(self) -> list:
        return [{"device": "cpu:0", "name": "host CPU"}]

    # The fast paths skip what cannot differ for NumPy: where an array lives.

    def copy_if_needed_fn(self):
        targets, resolve, copy_to, adapter = self._targets, self.target, self.copy_to, self
        copy = transfer.copy

        def copy_if_needed(x, device):
            try:
                native = targets[device]
            except (KeyError, TypeError):
                native = resolve(device)  # still checks that the device exists
            if native is HOST:
                return x
            if marker.watchers:  # a GPU of the accelerator partner: a real transfer
                return copy(adapter, x, native, False)
            return copy_to(x, native, False)

        return copy_if_needed
