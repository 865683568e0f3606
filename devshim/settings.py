"""Every setting devshim reads, in one place.

Environment variables are parsed once, the first time a setting is needed
(never at import, never on every call), and again on `reload()`:

`DEVSHIM_BACKEND`          which framework functions without a tensor use.
`DEVSHIM_DEVICE`           `cpu` hides every accelerator; unset, `auto` or `gpu` does not.
`DEVSHIM_VIRTUAL_DEVICES`  N virtual accelerators backed by host memory (backends that can).
`DEVSHIM_TRANSFER_GUARD`   `log` or `disallow`: the process's transfer-guard level (default `allow`).
`DEVSHIM_VIRTUAL_MEMORY`   the size of each virtual GPU (`16GiB`, `64MiB`); unset: no size.

A launcher's variables are environment too, read here once like the others
(`launcher()`): torchrun's `LOCAL_RANK`, Open MPI's `OMPI_COMM_WORLD_*`,
Horovod's `HOROVOD_*`, TensorFlow's `TF_CONFIG` (the job as
`MultiWorkerMirroredStrategy` reads it) and Slurm's `SLURM_*` say which
process of a job this is, and the device-visibility variables
(`CUDA_VISIBLE_DEVICES` and kin) say whether the launcher gave it a device of
its own.

The backend chosen by a `use_backend` block lives in a ContextVar here
(`scoped_backend`), so a block in one thread or asyncio task never changes
what another sees; the transfer guard keeps its own in `devshim.guard.state`.

Example:
    >>> import os, devshim as ds
    >>> os.environ["DEVSHIM_DEVICE"] = "cpu"
    >>> ds.settings.reload()          # changes made after first use need a reload
    >>> ds.num_gpus()
    0
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional
from contextvars import ContextVar

from devshim.errors import (
    DevshimError, InvalidDeviceError, InvalidGuardLevelError, LauncherEnvironmentError, VirtualDeviceCountError,
    VirtualMemorySizeError,
)
from devshim.guard.levels import LEVELS as GUARD_LEVELS

__all__ = [
    "BACKEND_VAR", "DEVICE_VAR", "VIRTUAL_DEVICES_VAR", "TRANSFER_GUARD_VAR", "GUARD_LEVELS",
    "LAUNCHERS", "LAUNCHER_VARIABLES", "VISIBILITY_VARIABLES", "TF_CONFIG_VAR", "Launch",
    "requested_backend", "accelerators_hidden", "virtual_device_count", "virtual_devices_from_environment",
    "default_guard_level",
    "launcher", "set_virtual_devices", "reload", "on_change", "scoped_backend",
    "VIRTUAL_MEMORY_VAR", "virtual_memory", "set_virtual_memory", "parse_size",
]

BACKEND_VAR = "DEVSHIM_BACKEND"
DEVICE_VAR = "DEVSHIM_DEVICE"
VIRTUAL_DEVICES_VAR = "DEVSHIM_VIRTUAL_DEVICES"
TRANSFER_GUARD_VAR = "DEVSHIM_TRANSFER_GUARD"

#: The backend of the innermost `use_backend` block of this thread or task.
scoped_backend: ContextVar = ContextVar("devshim_backend", default=None)

# Parsed environment: parser -> value, or the exception (its parser raised it) to raise when it is used.
# A bad value only fails the functions that need it.
_parsed: dict = {}
_virtual_override = None  # set by ds.testing.virtual_devices(); wins over the environment
_listeners: list = []


def _parse_backend() -> object:
    return os.environ.get(BACKEND_VAR, "").strip() or None


def _parse_device() -> object:
    value = os.environ.get(DEVICE_VAR, "").strip().lower()
    if value in ("", "auto", "gpu"):
        return False
    if value == "cpu":
        return True
    raise InvalidDeviceError(
        f"{DEVICE_VAR}={os.environ[DEVICE_VAR]!r} is not understood. "
        f"Use {DEVICE_VAR}=cpu to hide accelerators, or unset it."
    )


def _whole(raw) -> int:
    """`int(raw)`, or -1 (a value every caller refuses) when `raw` is not a whole number."""
    try:
        return int(raw)
    except ValueError:
        return -1


def _parse_virtual() -> object:
    raw = os.environ.get(VIRTUAL_DEVICES_VAR, "").strip()
    count = _whole(raw or 0)
    if count == 0 and os.environ.get(VIRTUAL_MEMORY_VAR, "").strip():
        _warn_size_without_devices()
    if count < 0:
        raise VirtualDeviceCountError(
            f"{VIRTUAL_DEVICES_VAR}={raw!r} must be a non-negative whole number, e.g. "
            f"{VIRTUAL_DEVICES_VAR}=2 (0 up to the backend's maximum: torch takes at most 128)."
        )
    return count


def _parse_guard() -> object:
    raw = os.environ.get(TRANSFER_GUARD_VAR, "").strip()
    value = raw.lower() or "allow"
    if value not in GUARD_LEVELS:
        raise InvalidGuardLevelError(
            f"{TRANSFER_GUARD_VAR}={raw!r} is not a transfer-guard level. Valid levels: "
            f"{', '.join(GUARD_LEVELS)}; e.g. {TRANSFER_GUARD_VAR}=disallow, or unset it."
        )
    return value


# ------------------------------------------------------------------ launchers

#: The launchers devshim recognises, innermost first: (name, local-rank variable, rank
#: variable, world-size variable, local-world-size variable). The first whose local-rank
#: variable is set describes this process. Slurm comes last because everything started
#: inside an allocation inherits its variables: a batch script has SLURM_LOCALID=0, and so
#: does every rank that an `mpirun` or a `horovodrun` in that script starts.
#: Slurm's world size is the job step's task count (only `srun` sets it: a batch script
#: is one process), its local world size this node's entry of SLURM_STEP_TASKS_PER_NODE.
LAUNCHERS = (
    ("torchrun", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("horovod", "HOROVOD_LOCAL_RANK", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"),
    ("slurm", "SLURM_LOCALID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE"),
)
_SLURM_NODE_VAR = "SLURM_NODEID"
#: TensorFlow's description of a multi-worker job (JSON: the cluster's tasks and this one), as
#: `tf.distribute.MultiWorkerMirroredStrategy` reads it. It is read after Horovod's variables
#: and before Slurm's: a job described by TF_CONFIG may run inside a Slurm allocation.
TF_CONFIG_VAR = "TF_CONFIG"
#: Every variable `launcher()` reads.
LAUNCHER_VARIABLES = tuple(var for row in LAUNCHERS for var in row[1:]) + (_SLURM_NODE_VAR, TF_CONFIG_VAR)
#: TF_CONFIG's task types, in TensorFlow's order: the chief (when there is one) is worker 0 of
#: MultiWorkerMirroredStrategy, then the workers; parameter servers and the evaluator train nothing.
_TF_TASK_TYPES = ("chief", "worker", "ps", "evaluator")
_TF_TRAINING = ("chief", "worker")
#: Variables with which a launcher (or a user) chooses the accelerators a process sees:
#: CUDA's, ROCm's (HIP and ROCr), and Intel's Level Zero.
VISIBILITY_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                        "ZE_AFFINITY_MASK")


class _FieldRecord:
    """A record of the fields in its `__slots__`: equal when they are, unhashable, shown by them."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as __eq__ compares fields

    def __repr__(self) -> str:
        fields = ", ".join(f"{a}={getattr(self, a)!r}" for a in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Launch(_FieldRecord):
    """What the launcher that started this process says about it (`settings.launcher()`).

    `name`               "torchrun", "openmpi", "horovod", "tf_config" or "slurm" (a framework that
                           knows its job itself adds its own: "jax.distributed").
    `local_rank`         this process's rank on its machine, from `variable`.
    `rank`               its rank in the whole job (None when the launcher does not say).
    `world_size`         processes in the job (None when the launcher does not say).
    `local_world_size`   processes on this machine (None when the launcher does not say).
    `variable`           the variable the local rank came from ("LOCAL_RANK", ...).
    `given_one_device`   a visibility variable (`CUDA_VISIBLE_DEVICES`, ...) leaves this
                           process exactly one device: the launcher chose it.

    Example:
        >>> os.environ.update(LOCAL_RANK="1", RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
        >>> ds.settings.reload()
        >>> ds.settings.launcher().name, ds.settings.launcher().local_rank
        ('torchrun', 1)
    """

    __slots__ = ("name", "local_rank", "rank", "world_size", "local_world_size", "variable",
                 "given_one_device")

    def __init__(self, name, local_rank, rank, world_size, local_world_size, variable,
                 given_one_device=False) -> None:
        self.name, self.local_rank, self.rank = name, local_rank, rank
        self.world_size, self.local_world_size = world_size, local_world_size
        self.variable, self.given_one_device = variable, given_one_device

    @property
    def one_device_per_process(self) -> bool:
        """Whether this process is one of several, so it takes one device of its own.

        False for a job of one process (`srun -n 1`, a Slurm batch script,
        `torchrun --nproc_per_node 1` on one machine): that process keeps every device.
        """
        if self.world_size is None:
            return True  # the launcher does not say: assume it started several
        return self.world_size > 1 or (self.local_world_size or 1) > 1 or self.local_rank > 0

    @property
    def local_processes(self) -> int:
        """How many processes share this machine: the local world size, or at least `local_rank + 1`."""
        return max(self.local_world_size or 0, self.local_rank + 1)


def _whole_number(variable: str, launcher: str):
    """The value of `variable` as an int >= 0; None when unset or empty; an error when not a number."""
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    value = _whole(raw)
    if value < 0:
        raise LauncherEnvironmentError(
            f"{variable}={os.environ[variable]!r} is not a whole number, so devshim cannot tell which "
            f"process of the {launcher} job this is. {launcher} sets it to 0, 1, ...; fix it, or unset "
            f"it in a process that no launcher started."
        )
    return value


def _slurm_tasks_on_this_node(spec: str):
    """This node's entry of SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 tasks on nodes 0-2, 1 on node 3)."""
    try:
        node = int(os.environ.get(_SLURM_NODE_VAR, "0").strip() or 0)
        position = 0
        for part in spec.split(","):
            count, _, repeat = part.strip().partition("(x")
            times = int(repeat.rstrip(")")) if repeat else 1
            if node < position + times:
                return int(count)
            position += times
    except ValueError:
        pass
    return None  # a form devshim does not know: the local world size stays unknown


def _given_one_device() -> bool:
    for variable in VISIBILITY_VARIABLES:
        value = os.environ.get(variable)
        if value is not None:
            return len([entry for entry in value.split(",") if entry.strip()]) == 1
    return False


def _tf_config_error(problem: str) -> LauncherEnvironmentError:
    return LauncherEnvironmentError(
        f"{TF_CONFIG_VAR} {problem}, so devshim cannot tell which process of the job this is. "
        f"TensorFlow expects JSON such as {{\"cluster\": {{\"worker\": [\"host1:12345\", \"host2:12345\"]}}, "
        f"\"task\": {{\"type\": \"worker\", \"index\": 0}}}}; fix it, or unset it in a process that is not "
        f"one of a multi-worker job."
    )


def _tf_tasks(cluster: dict) -> list:
    """(type, index, host) of every task of a TF_CONFIG cluster, in TensorFlow's order."""
    tasks = []
    for kind in _TF_TASK_TYPES + tuple(sorted(set(cluster) - set(_TF_TASK_TYPES))):
        addresses = cluster.get(kind) or []
        if isinstance(addresses, dict):  # a sparse job: {"1": "host:port"}
            entries = sorted((int(index), address) for index, address in addresses.items())
        else:
            entries = list(enumerate(addresses))
        tasks.extend((kind, index, str(address).rsplit(":", 1)[0]) for index, address in entries)
    return tasks


def _parse_tf_config() -> object:
    """TF_CONFIG's job as a `Launch`: the rank among the training tasks (chief, then workers),
    the local rank among the tasks on this task's host; None when TF_CONFIG is unset."""
    raw = os.environ.get(TF_CONFIG_VAR, "").strip()
    if not raw:
        return None
    try:
        config = json.loads(raw)
        task, cluster = config.get("task") or {}, config.get("cluster") or {}
        me = (str(task["type"]), int(task.get("index", 0)))
        tasks = _tf_tasks(cluster)
    except (ValueError, TypeError, AttributeError, KeyError):
        raise _tf_config_error("is not the JSON TensorFlow expects, or its task has no type") from None
    hosts = {(kind, index): host for kind, index, host in tasks}
    if me not in hosts:
        raise _tf_config_error(f"names task {me[0]} {me[1]}, which is not in its cluster")
    training = [(kind, index) for kind, index, _ in tasks if kind in _TF_TRAINING]
    local = [(kind, index) for kind, index, host in tasks if host == hosts[me]]
    rank = training.index(me) if me in training else None
    return Launch("tf_config", local.index(me), rank, len(training), len(local), TF_CONFIG_VAR,
                  _given_one_device())


def _parse_launcher() -> object:
    for name, local_var, rank_var, size_var, local_size_var in LAUNCHERS:
        if name == "slurm":  # TF_CONFIG describes this process more closely than the allocation
            described = _parse_tf_config()
            if described is not None:
                return described
        if not os.environ.get(local_var, "").strip():
            continue
        local_rank, rank, world_size = (_whole_number(var, name) for var in (local_var, rank_var, size_var))
        if name == "slurm":
            world_size = 1 if world_size is None else world_size  # no step: a batch script
            local_world_size = _slurm_tasks_on_this_node(os.environ.get(local_size_var, ""))
        else:
            local_world_size = _whole_number(local_size_var, name)
        return Launch(name, local_rank, rank, world_size, local_world_size, local_var, _given_one_device())
    return None


def _get(parser) -> Any:
    """What `parser` made of the environment, parsed once (until `reload`); the error it raised, raised again."""
    try:
        value = _parsed[parser]
    except KeyError:
        try:
            value = parser()
        except DevshimError as err:  # a bad value fails only the functions that need it
            value = type(err)(*err.args)
        _parsed[parser] = value
    if isinstance(value, Exception):
        raise type(value)(*value.args)
    return value


def requested_backend():
    """The name in `DEVSHIM_BACKEND`, or None when unset.

    Example:
        >>> ds.settings.requested_backend()
        'torch'
    """
    return _get(_parse_backend)


def accelerators_hidden() -> bool:
    """True when `DEVSHIM_DEVICE=cpu` asks devshim to act as if no accelerator existed.

    Example:
        >>> ds.settings.accelerators_hidden()
        False
    """
    return _get(_parse_device)


def virtual_device_count() -> int:
    """How many virtual accelerators were asked for (0 when none).

    `ds.testing.virtual_devices(n)` takes precedence over `DEVSHIM_VIRTUAL_DEVICES`.

    Example:
        >>> ds.settings.virtual_device_count()
        2
    """
    if _virtual_override is not None:
        return _virtual_override
    return _get(_parse_virtual)


def virtual_devices_from_environment() -> bool:
    """Whether the virtual device count comes from `DEVSHIM_VIRTUAL_DEVICES` (set before
    Python started, usually), not from `ds.testing.virtual_devices` (a call in the code).

    Example:
        >>> ds.settings.virtual_devices_from_environment()   # DEVSHIM_VIRTUAL_DEVICES=2
        True
    """
    return _virtual_override is None


def default_guard_level() -> str:
    """The process's transfer-guard level from `DEVSHIM_TRANSFER_GUARD` ("allow" when unset).

    Example:
        >>> ds.settings.default_guard_level()
        'allow'
    """
    return _get(_parse_guard)


def launcher() -> Optional["Launch"]:
    """What the launcher that started this process says about it (a `Launch`), or None.

    Read once, like every setting: torchrun's `LOCAL_RANK`, Open MPI's
    `OMPI_COMM_WORLD_LOCAL_RANK`, Horovod's `HOROVOD_LOCAL_RANK`, TensorFlow's
    `TF_CONFIG`, Slurm's `SLURM_LOCALID` (the first one set, in that order), with
    the same launcher's rank and sizes. Under `TF_CONFIG` the rank is the task's
    among the chief and the workers (the chief first, as MultiWorkerMirroredStrategy
    numbers them), the local rank its place among the tasks on its host (the host
    part of each address, compared as written). A value that is not a whole number,
    or a `TF_CONFIG` that is not TensorFlow's JSON, raises
    `LauncherEnvironmentError` from the functions that need it.

    Example:
        >>> ds.settings.launcher()     # a plain process
        >>> ds.settings.launcher()     # under torchrun --nproc_per_node 2
        Launch(name='torchrun', local_rank=1, rank=1, world_size=2, local_world_size=2, ...)
    """
    return _get(_parse_launcher)


def set_virtual_devices(count) -> None:
    """Ask for `count` virtual devices in this process (None: back to the environment).

    `ds.testing.virtual_devices` is the public way to call this.

    Example:
        >>> ds.settings.set_virtual_devices(2)
    """
    global _virtual_override
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        raise VirtualDeviceCountError(f"virtual_devices() takes a non-negative int (0 or more; each backend "
                                      f"has its maximum, torch 128), not {count!r}.")
    if count != _virtual_override:
        _virtual_override = count
        _notify()


def reload() -> None:
    """Read the environment variables again, and forget what was derived from them.

    devshim reads its variables once, at first use. Call this after changing
    `os.environ` in a running process (tests do). A backend chosen with
    `set_backend` stays chosen; one chosen from `DEVSHIM_BACKEND` or
    automatically is chosen again at next use.

    Example:
        >>> os.environ["DEVSHIM_BACKEND"] = "numpy"
        >>> ds.settings.reload()
        >>> ds.get_backend().name
        'numpy'
    """
    _parsed.clear()
    _notify()


def on_change(listener) -> None:
    """Call `listener()` whenever settings change (`reload`, virtual devices).

    Modules that cache anything derived from settings (the backend registry,
    the adapters' resolved devices) register here.

    Example:
        >>> ds.settings.on_change(my_cache.clear)
    """
    if listener not in _listeners:
        _listeners.append(listener)


def _notify() -> None:
    # Every listener runs; the first error (a bad DEVSHIM_TRANSFER_GUARD) is raised after.
    error = None
    for listener in list(_listeners):
        try:
            listener()
        except Exception as err:  # noqa: BLE001 - re-raised below
            error = error or err
    if error is not None:
        raise error


# ------------------------------------------------------------------ the size of a virtual GPU

VIRTUAL_MEMORY_VAR = "DEVSHIM_VIRTUAL_MEMORY"
_virtual_memory_override = None  # set by set_virtual_memory(); wins over the environment
# unit -> bytes: decimal (kB, MB, GB, TB), binary (KiB, MiB, GiB, TiB), and K, M, G, T as binary.
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(value, source: str = VIRTUAL_MEMORY_VAR) -> int:
    """Bytes from a size: an int, or a string of a number and an optional unit (`"64MiB"`,
    `"16GB"`, `"1.5G"`; kB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB and K/M/G/T of 1024).
    `VirtualMemorySizeError` (naming `source`) for anything else, or a size below one byte.

    Example:
        >>> ds.settings.parse_size("64MiB"), ds.settings.parse_size("1GB")
        (67108864, 1000000000)
    """
    import re

    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
        if found is None or found.group(2).lower() not in _UNITS:
            number, unit = -1.0, ""
        else:
            number, unit = float(found.group(1)), found.group(2).lower()
    try:
        size = int(number * _UNITS[unit])
    except (OverflowError, ValueError):  # 1e400 reads as infinity
        size = -1
    if size < 1:
        example = f"{VIRTUAL_MEMORY_VAR}=16GiB" if source == VIRTUAL_MEMORY_VAR else f"{source}='16GiB'"
        raise VirtualMemorySizeError(
            f"{source}={value!r} is not a size: write a positive number of bytes with an optional unit, "
            f"e.g. {example} or 64MiB (KiB, MiB, GiB are powers of 1024, kB, MB, GB of 1000)"
            + (", or unset it for virtual GPUs without a size." if source == VIRTUAL_MEMORY_VAR else ".")
        )
    return size


def _warn_size_without_devices() -> None:
    import warnings

    from devshim.errors import VirtualMemoryWithoutDevicesWarning

    warnings.warn(VirtualMemoryWithoutDevicesWarning(
        f"{VIRTUAL_MEMORY_VAR}={os.environ[VIRTUAL_MEMORY_VAR].strip()!r} gives virtual GPUs a size, but "
        f"{VIRTUAL_DEVICES_VAR} asks for none, so no device has that size and it does nothing. Add "
        f"{VIRTUAL_DEVICES_VAR}=1 (or more) to have virtual GPUs of that size, or unset {VIRTUAL_MEMORY_VAR}."
    ), stacklevel=4)


def _parse_virtual_memory() -> object:
    raw = os.environ.get(VIRTUAL_MEMORY_VAR, "").strip()
    if not raw:
        return None
    return parse_size(raw)


def virtual_memory():
    """The size of each virtual GPU in bytes (`DEVSHIM_VIRTUAL_MEMORY`, or
    `set_virtual_memory`), or None when they have none (then they take what the host has).

    Example:
        >>> ds.settings.virtual_memory()        # DEVSHIM_VIRTUAL_MEMORY=64MiB
        67108864
    """
    if _virtual_memory_override is not None:
        return _virtual_memory_override or None  # 0: no size, whatever the environment says
    return _get(_parse_virtual_memory)


def set_virtual_memory(size) -> None:
    """Give each virtual GPU `size` (bytes, or a string such as `"16GiB"`) in this process;
    `0` takes the size away, `None` goes back to `DEVSHIM_VIRTUAL_MEMORY`. On torch's
    virtual GPUs an allocation past it raises `torch.OutOfMemoryError`, as on a GPU of that size.

    Example:
        >>> ds.settings.set_virtual_memory("64MiB")
        >>> ds.memory("gpu:0").total
        67108864
    """
    global _virtual_memory_override
    if size is not None and size != 0:
        size = parse_size(size, source="set_virtual_memory")
    if size != _virtual_memory_override:
        _virtual_memory_override = size
        _notify()
