"""Whether this torch can carry virtual GPUs: its release, and the private torch names they rest on.

`check()` runs when the package is imported, before any of its modules touches torch's
internals: a torch older than the tested range, or one that lacks an internal listed in
`torch/_internals.py`'s `VIRTUAL_GPU_INTERNALS`, is refused by name (`BackendError`)
with nothing registered. `warn_if_newer()` warns once, as the device is registered, on a
torch newer than the tested range.

Example:
    >>> check()          # torch 2.10 to 2.15: nothing to say
"""

from __future__ import annotations

import warnings

import torch

from devshim import settings
from devshim.backends.probes import release
from devshim.backends.torch import _internals
from devshim.errors import BackendError, DevshimWarning

__all__ = ["TESTED", "check", "refuse", "warn_if_newer"]

#: The torch releases the virtual GPUs are tested on (tox envs torch-vgpu-floor, torch, torch-latest).
TESTED = ((2, 10), (2, 15))


def refuse(reason: str) -> BackendError:
    """The error that refuses virtual GPUs on this torch, for `reason`.

    Example:
        >>> raise refuse("torch.library.Library has no fallback()")
        Traceback (most recent call last):
        devshim.errors.BackendError: devshim cannot present virtual GPUs on this torch (...): ...
    """
    return BackendError(
        f"devshim cannot present virtual GPUs on this torch ({torch.__version__}): {reason}. "
        f"Unset {settings.VIRTUAL_DEVICES_VAR}, or use a torch release they are tested on "
        f"({_spelled()})."
    )


def check() -> None:
    """Refuse a torch older than the oldest tested, or one without an internal the virtual GPUs
    need (run as the package is imported).

    Example:
        >>> check()
    """
    if release("torch")[:2] < TESTED[0]:
        raise refuse(f"virtual GPUs need torch {_spelled()} (they use torch's Python device "
                     f"registration, which older releases lack or have in another form)")
    missing = _internals.missing_for_virtual_gpus()  # each missing one also warns, once, by name
    if missing:
        raise refuse(f"it lacks {'; '.join(missing)}, which the virtual GPUs rest on")


def warn_if_newer() -> None:
    """Warn (once: run as the `vgpu` device is registered) on a torch newer than the newest tested.

    Example:
        >>> warn_if_newer()  # torch 2.16: DevshimWarning "devshim's virtual GPUs are tested on ..."
    """
    newest = TESTED[1]
    if release("torch")[:2] > newest:
        warnings.warn(
            f"devshim's virtual GPUs are tested on torch {_spelled()}; this is torch {torch.__version__}. "
            f"They rest on private torch APIs that may have changed: if something fails deep inside "
            f"torch, test on torch {newest[0]}.{newest[1]} and report it.", DevshimWarning, stacklevel=5)


def _spelled() -> str:
    (oldest, newest) = TESTED
    return f"{oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}"
