"""The framework-neutral `Device` and the parser for device specification strings.

This module sits below the backend registry and never imports it. What only the
registry can answer (which framework a native device object belongs to, and the
native object behind a `Device`) comes through a resolver the registry installs
when it is first built (`install_resolver`).
"""

from __future__ import annotations

from collections import namedtuple

from devshim.errors import BackendError, InvalidDeviceError

__all__ = [
    "Device", "ParsedSpec", "parse_spec", "register_platform", "install_resolver", "describe_native",
    "ACCEPTED_SPECS", "KINDS",
]

#: Device kinds: the host, the backend's accelerator, and data-less devices (torch "meta").
KINDS = ("cpu", "gpu", "meta")

ACCEPTED_SPECS = (
    '"cpu", "gpu", "gpu:1", an accelerator platform name such as "cuda", "cuda:1", "mps", '
    '"xpu:0" or "tpu:0", "meta", '
    'TensorFlow names such as "/GPU:1" or "/job:localhost/replica:0/task:0/device:GPU:1", '
    'MXNet names such as "gpu(1)", a native device object of an installed framework, '
    "or a devshim.Device"
)

# Accelerator platform names a spec may use instead of "gpu". devshim calls every
# accelerator "gpu"; a backend refuses a platform its machine does not have.
_PLATFORMS = {"cuda", "mps", "xpu", "mtia", "tpu", "npu", "hpu"}
_cache: dict = {}  # spec string -> ParsedSpec; the same few strings come back call after call
_CACHE_LIMIT = 1024


class _NoRegistry:
    """The resolver until the registry installs its own: no framework's devices are known."""

    __slots__ = ()

    def describe(self, obj):
        return obj if isinstance(obj, Device) else None

    def native(self, device):
        raise BackendError(
            f"{device!r} names the {device.backend} backend, which devshim has not loaded in this "
            f"process yet. Ask for the device through devshim (ds.device('{device}'), ds.try_gpu()) "
            f"first, or pass the spec string '{device}'."
        )


_resolver = _NoRegistry()


def install_resolver(resolver) -> None:
    """Let Devices ask the backend registry about native devices.

    `resolver.describe(obj)` is the `Device` for any loaded framework's device
    object (None for anything else); `resolver.native(device)` the native
    object behind a `Device`. The registry installs itself here when first built.

    Example:
        >>> install_resolver(registry_resolver)
    """
    global _resolver
    _resolver = resolver


def describe_native(obj):
    """The `Device` a loaded framework's device object describes, or None.

    Example:
        >>> describe_native(torch.device("cpu"))
        Device('cpu:0', backend='torch')
    """
    return _resolver.describe(obj)


class ParsedSpec(namedtuple("ParsedSpec", ("kind", "index", "platform"))):
    """`(kind, index, platform)` read from a spec string; `platform` is the
    accelerator name the spec used ("cuda", "mps", ...), or None.

    Example:
        >>> parse_spec("cuda:1")
        ParsedSpec(kind='gpu', index=1, platform='cuda')
    """

    __slots__ = ()  # (its field `index` shadows tuple.index on purpose)


def register_platform(name: str) -> None:
    """Accept `name` (and `name:i`) in spec strings as an accelerator platform.

    Backends call this for accelerators known only at run time, such as a
    PyTorch out-of-tree device renamed from `privateuse1`.

    Example:
        >>> register_platform("npu")
        >>> parse_spec("npu:1")
        ParsedSpec(kind='gpu', index=1, platform='npu')
    """
    _PLATFORMS.add(name.lower())
    _cache.clear()


def parse_spec(spec: str) -> ParsedSpec:
    """Read a device string into `(kind, index, platform)`.

    Accepts `"cpu"`, `"gpu"`, `"gpu:1"`, `"gpu(1)"`, platform names
    (`"cuda:1"`, `"mps"`), `"meta"`, and TensorFlow's
    `"/job:localhost/replica:0/task:0/device:GPU:1"` forms, in any case.

    Example:
        >>> parse_spec("cuda:1")
        ParsedSpec(kind='gpu', index=1, platform='cuda')
    """
    try:
        return _cache[spec]
    except (KeyError, TypeError):
        pass
    if not isinstance(spec, str):
        raise InvalidDeviceError(f"A device specification string was expected, not {type(spec).__name__}.")
    parsed = _parse(str(spec))
    if parsed is None:
        raise InvalidDeviceError(
            f"Cannot read device specification {spec!r}. Accepted forms: {ACCEPTED_SPECS}."
        )
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[spec] = parsed
    return parsed


def _parse(spec: str):
    text = spec.strip().lower()
    if text.startswith("/"):
        # TensorFlow: "/GPU:0", "/device:GPU:0", "/job:x/replica:0/task:0/device:GPU:0"
        text = text.rsplit("/", 1)[-1]
        if text.startswith("device:"):
            text = text[len("device:"):]
    name, index = text, "0"
    if text.endswith(")"):
        name, paren, index = text[:-1].partition("(")
        if not paren:
            return None
    elif ":" in text:
        name, _, index = text.partition(":")
    if not index.isdigit() or not index.isascii() or not name:
        return None
    number = int(index)
    if name in ("cpu", "gpu"):
        return ParsedSpec(name, number, None)
    if name == "meta":
        return ParsedSpec("meta", 0, None) if number == 0 else None
    if name in _PLATFORMS:
        return ParsedSpec("gpu", number, name)
    return None


class Device:
    """Where a tensor lives, the same way for every framework.

    `kind` is `"cpu"`, `"gpu"` (the backend's accelerator: CUDA, ROCm,
    MPS, XPU, TPU, ... or a virtual device) or `"meta"` (a device that holds
    no data, such as torch's). `index` is its number, `native` the
    framework's own device object, `backend` the adapter that made it,
    `virtual` whether it is a virtual accelerator backed by host memory, and
    `platform` what is behind it: `"cpu"`, `"cuda"`, `"mps"`,
    `"xpu"`, ... or `"host"` for a virtual device.

    What compares equal:

    - two Devices with the same `(kind, index, virtual)`, whatever their
      backend or platform: a torch tensor and a NumPy array on the host are on
      the same device;
    - a Device and any spec string naming the same kind and index
      (`"gpu:0"`, `"gpu"`, `"cuda:0"`, `"/GPU:0"`);
    - a Device and a native device object of a loaded framework that describes
      to an equal Device (`torch.device("cuda", 0)`).

    `hash(d) == hash(str(d))`: equal Devices hash alike, and so do a Device
    and its canonical string `str(d)` (`"gpu:0"`), so either finds the
    other in a dict or set. Other spellings that compare equal (`"cuda"`,
    a native object) hash differently, as they must: key dicts by Device or
    by `str(d)`. Comparing with anything else is False, never an error.

    A Device is immutable; `copy.copy` and `copy.deepcopy` return it
    itself. Pickling keeps everything but the native object, which the
    restored Device gets back from its backend the first time `native` is read.

    Example:
        >>> d = ds.device_of(torch.ones(2))
        >>> str(d), d == "cpu", d == torch.device("cpu"), hash(d) == hash("cpu:0")
        ('cpu:0', True, True, True)
    """

    __slots__ = ("kind", "index", "backend", "virtual", "platform", "_native", "_text", "_key")

    def __init__(self, kind: str, index: int = 0, *, native=None, backend=None, virtual: bool = False,
                 platform=None) -> None:
        if kind not in KINDS:
            raise InvalidDeviceError(f"Device kind must be one of {', '.join(KINDS)}, not {kind!r}.")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise InvalidDeviceError(f"Device index must be a non-negative int, not {index!r}.")
        if kind == "meta" and index != 0:
            raise InvalidDeviceError(f"The data-less 'meta' device has one index, 0, not {index}.")
        virtual = bool(virtual)
        platform = platform or ("host" if virtual else kind)
        values = (kind, index, backend, virtual, platform, native, f"{kind}:{index}", (kind, index, virtual))
        for name, value in zip(self.__slots__, values):  # (slots, in that order)
            object.__setattr__(self, name, value)

    @property
    def native(self):
        """The framework's own device object (rebuilt by the backend after unpickling).

        Example:
            >>> ds.device_of(torch.ones(2)).native
            device(type='cpu')
        """
        native = self._native
        if native is None and self.backend is not None:
            native = _resolver.native(self)
            object.__setattr__(self, "_native", native)
        return native

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("devshim.Device is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("devshim.Device is immutable")

    def __eq__(self, other) -> bool:
        if isinstance(other, Device):
            return self._key == other._key
        try:
            if type(other) is not str:
                described = _resolver.describe(other)
                if described is not None:
                    return self._key == described._key
            if isinstance(other, str):  # a str, or a str subclass that is no framework's device: a spec
                try:
                    parsed = parse_spec(str(other))
                except InvalidDeviceError:
                    return False
                return (self.kind, self.index) == (parsed[0], parsed[1])
        except Exception:  # comparing must never raise, whatever `other` does
            return NotImplemented
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._text)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        extra = f", backend={self.backend!r}" if self.backend else ""
        if self.virtual:
            extra += ", virtual=True"
        return f"Device('{self._text}'{extra})"

    def __deepcopy__(self, memo=None) -> "Device":
        return self

    __copy__ = __deepcopy__

    def __reduce__(self):
        # The native object may not be picklable; the backend rebuilds it on demand. The
        # registry's rebuild (found by name when unpickling) makes sure it is there to ask.
        rebuild = getattr(_resolver, "rebuild", _rebuild)
        return (rebuild, (self.kind, self.index, self.backend, self.virtual, self.platform))


def _rebuild(kind, index, backend, virtual, platform) -> Device:
    return Device(kind, index, backend=backend, virtual=virtual, platform=platform)
