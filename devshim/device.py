"""The framework-neutral ``Device`` and the parser for device specification strings."""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple, Optional

from devshim.errors import InvalidDeviceError

__all__ = ["Device", "parse_spec", "ACCEPTED_SPECS"]

ACCEPTED_SPECS = (
    '"cpu", "gpu", "gpu:1", "cuda", "cuda:1", "mps", '
    'TensorFlow names such as "/GPU:1" or "/job:localhost/replica:0/task:0/device:GPU:1", '
    'MXNet names such as "gpu(1)", a native device object of an installed framework, '
    "or a devshim.Device"
)

# "cuda" and "mps" are the accelerator's platform names; devshim calls every accelerator "gpu".
_PLATFORM_KIND = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "mps": "gpu"}
_SPEC = re.compile(r"^(cpu|gpu|cuda|mps)(?::(\d+)|\((\d+)\))?$")


class ParsedSpec(NamedTuple):
    kind: str
    index: int
    platform: Optional[str]  # "cuda"/"mps" when the spec named one, else None


@functools.lru_cache(maxsize=256)  # specs repeat: the same few strings, call after call
def parse_spec(spec: str) -> ParsedSpec:
    """Read a device string into ``(kind, index, platform)``.

    Example:
        >>> parse_spec("cuda:1")
        ParsedSpec(kind='gpu', index=1, platform='cuda')
    """
    text = spec.strip().lower()
    if text.startswith("/"):
        # TensorFlow: "/GPU:0", "/device:GPU:0", "/job:x/replica:0/task:0/device:GPU:0"
        text = text.rsplit("/", 1)[-1]
        if text.startswith("device:"):
            text = text[len("device:"):]
    match = _SPEC.match(text)
    if match is None:
        raise InvalidDeviceError(
            f"Cannot read device specification {spec!r}. Accepted forms: {ACCEPTED_SPECS}."
        )
    platform, index, paren_index = match.groups()
    number = index if index is not None else paren_index
    return ParsedSpec(
        kind=_PLATFORM_KIND[platform],
        index=int(number) if number is not None else 0,
        platform=platform if platform in ("cuda", "mps") else None,
    )


class Device:
    """Where a tensor lives, the same way for every framework.

    ``kind`` is ``"cpu"`` or ``"gpu"`` (the backend's accelerator: CUDA, ROCm,
    MPS, or a virtual device), ``index`` its number, ``native`` the framework's
    own device object, ``backend`` the adapter that made it, and ``virtual``
    whether it is a virtual accelerator backed by host memory. ``platform``
    says what is behind it: ``"cpu"``, ``"cuda"``, ``"mps"``, or ``"host"``
    for a virtual device.

    A Device equals another Device on the same hardware (whatever the
    framework), the native device it wraps, and any spec string naming the
    same place.

    Example:
        >>> d = ds.device_of(torch.ones(2))
        >>> str(d), d == "cpu", d == torch.device("cpu")
        ('cpu:0', True, True)
    """

    __slots__ = ("kind", "index", "native", "backend", "virtual", "platform")

    def __init__(
        self,
        kind: str,
        index: int = 0,
        *,
        native: Any = None,
        backend: Optional[str] = None,
        virtual: bool = False,
        platform: Optional[str] = None,
    ) -> None:
        if kind not in ("cpu", "gpu"):
            raise InvalidDeviceError(f"Device kind must be 'cpu' or 'gpu', not {kind!r}.")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise InvalidDeviceError(f"Device index must be a non-negative int, not {index!r}.")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "native", native)
        object.__setattr__(self, "backend", backend)
        object.__setattr__(self, "virtual", bool(virtual))
        object.__setattr__(self, "platform", platform or ("host" if virtual else kind))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("devshim.Device is immutable")

    @property
    def _key(self) -> tuple:
        return (self.kind, self.index, self.virtual)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Device):
            return self._key == other._key
        if type(other) is str:  # str subclasses are native devices (TensorFlow's): described below
            try:
                parsed = parse_spec(other)
            except InvalidDeviceError:
                return False
            return (self.kind, self.index) == (parsed.kind, parsed.index)
        from devshim.backends import describe_native_device  # late: backends import this module

        described = describe_native_device(other)
        if described is None:
            return NotImplemented
        return self._key == described._key

    def __ne__(self, other: Any) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._key)

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}"

    def __repr__(self) -> str:
        extra = f", backend={self.backend!r}" if self.backend else ""
        if self.virtual:
            extra += ", virtual=True"
        return f"Device('{self}'{extra})"

    def __reduce__(self):
        # Pickle the neutral description only; the native object may not be picklable.
        return (_rebuild, (self.kind, self.index, self.backend, self.virtual, self.platform))


def _rebuild(kind, index, backend, virtual, platform) -> Device:
    return Device(kind, index, backend=backend, virtual=virtual, platform=platform)
