"""More than one process: which process of a launched job this is, and torch's process group.

A launcher (torchrun, Slurm's `srun`, Open MPI's `mpirun`, Horovod's `horovodrun`)
starts one process per device and tells each which one it is through environment
variables (TensorFlow's `TF_CONFIG` describes the job likewise), which
`devshim.settings` reads once; `jax.distributed` tells JAX's processes itself.
The device functions use them (`ds.try_gpu()` is this process's GPU); this
module reports them (`ds.process_info()`) and starts `torch.distributed` from
them (`ds.init_distributed()`). Training itself is the framework's engine (DDP,
`tf.distribute`, `jax.distributed`): devshim only places things right inside it.

Example:
    >>> info = ds.init_distributed()        # under torchrun --nproc_per_node 2, on the CPU
    >>> info.rank, info.world_size, info.device, info.process_group
    (1, 2, device(type='cpu'), 'gloo')
"""

from __future__ import annotations

import sys

from devshim.backends import get_backend, load_backend
from devshim.backends.registry import loaded_adapters
from devshim.settings import _FieldRecord

__all__ = ["ProcessInfo", "process_info", "init_distributed"]


class ProcessInfo(_FieldRecord):
    """This process's place in a launched job, and its device (`ds.process_info()`).

    `launcher`          "torchrun", "openmpi", "horovod", "tf_config" (TensorFlow's `TF_CONFIG`),
                          "slurm", "jax.distributed" (started with several processes), or None.
    `rank`              rank in the whole job (0 without a launcher).
    `local_rank`        rank on this machine: what picks the device.
    `world_size`        processes in the job (1 without a launcher).
    `local_world_size`  processes on this machine (1 without a launcher).
    `device`            this process's device, the backend's native object (`ds.try_gpu()`).
    `backend`           the devshim backend `device` belongs to ("torch", ...).
    `process_group`     torch.distributed's backend ("gloo", "cpu:gloo,cuda:nccl") when its
                          default process group is initialised, else None.

    `rank`, `world_size` and `local_world_size` are None when the launcher's variables
    do not say; once a torch process group is initialised, `rank` and `world_size` are
    the group's.

    Example:
        >>> ds.process_info().as_dict()
        {'launcher': 'torchrun', 'rank': 1, 'local_rank': 1, 'world_size': 2, ...}
    """

    __slots__ = ("launcher", "rank", "local_rank", "world_size", "local_world_size", "device",
                 "backend", "process_group")

    def __init__(self, launcher, rank, local_rank, world_size, local_world_size, device, backend,
                 process_group=None) -> None:
        for name, value in zip(self.__slots__, (launcher, rank, local_rank, world_size, local_world_size,
                                                device, backend, process_group)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value) -> None:
        raise AttributeError("ProcessInfo is immutable")

    def as_dict(self) -> dict:
        """Plain data (the device as its `ds.Device` string, "gpu:1"): what `devshim info --json` prints.

        Example:
            >>> ds.process_info().as_dict()["device"]
            'cpu:0'
        """
        data = {name: getattr(self, name) for name in self.__slots__}
        data["device"] = str(get_backend(self.backend).describe(self.device))
        return data


def process_info(*, backend=None) -> ProcessInfo:
    """Which process of a launched job this is, and its device.

    From the launcher's variables (torchrun, Slurm, Open MPI, Horovod, TensorFlow's
    `TF_CONFIG`; see docs/distributed.md), read once like every devshim setting, or,
    without them, from `jax.distributed` when JAX runs with several processes. Without
    either this is rank 0 of 1, with `launcher=None`. `device` is `ds.try_gpu()` of
    the selected backend, or of `backend=`.

    Example:
        >>> info = ds.process_info()      # under torchrun --nproc_per_node 2, second process
        >>> info.launcher, info.rank, info.local_rank, info.world_size
        ('torchrun', 1, 1, 2)
    """
    adapter = get_backend(backend)
    device = adapter.try_gpu()
    launch = adapter.launch()
    for other in loaded_adapters() if launch is None else ():
        launch = other.launch()  # a job a framework knows of (jax.distributed), another backend selected
        if launch is not None:
            break
    if launch is None:
        values = [None, 0, 0, 1, 1]
    else:
        values = [launch.name, launch.rank, launch.local_rank, launch.world_size, launch.local_world_size]
    group = None
    if "torch.distributed" in sys.modules:  # a process group can only exist once torch is imported
        from devshim.backends.torch import _distributed

        group = _distributed.group_backend()
        if group is not None:
            values[1], values[3] = _distributed.world()
    return ProcessInfo(*values, device=device, backend=adapter.name, process_group=group)


def init_distributed(process_group_backend=None, *, timeout=None) -> ProcessInfo:
    """Start torch.distributed's default process group from the launcher's variables; idempotent.

    Rank and world size come from the launcher (torchrun, Slurm, Open MPI, Horovod). The
    backend suits this process's device (`ds.try_gpu()`): gloo on the CPU and on
    devshim's virtual GPUs, nccl for CUDA tensors (with gloo beside it for CPU tensors),
    torch's default for other accelerators; `process_group_backend` overrides it. An
    accelerator becomes the current device of its kind (`torch.cuda.set_device`).
    torchrun provides the rendezvous; under Slurm, Open MPI or Horovod set
    `MASTER_ADDR` and `MASTER_PORT` (`MASTER_ADDR` defaults to 127.0.0.1 when all
    processes share one machine). Without a launcher it starts a world of one process,
    so the same script runs alone. Called again, or after the user's own
    `init_process_group`, it starts nothing. `timeout` is in seconds (or a
    `timedelta`). Returns `ds.process_info(backend="torch")`.

    Example:
        >>> info = ds.init_distributed()
        >>> net = DistributedDataParallel(ds.place_model(net, info.device))
    """
    adapter = load_backend("torch")
    from devshim.backends.torch import _distributed

    _distributed.init(adapter, process_group_backend, timeout)
    return process_info(backend="torch")
