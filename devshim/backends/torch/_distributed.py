"""torch.distributed, the way devshim uses it: the process group for this process's device
(`ds.init_distributed`) and the cross-process level of `ds.allreduce`.

Imported only when one of those runs: `import devshim` and the device functions never
import `torch.distributed` themselves.
"""

from __future__ import annotations

import datetime
import os
import threading
import time

import torch.distributed as dist

from devshim import settings
from devshim.backends.torch._internals import TENSOR_USE_COUNT
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.errors import LauncherEnvironmentError

#: Device types whose tensors only gloo reduces here: the host, and devshim's virtual GPUs
#: (whose values live in host memory; they are reduced through a host copy).
_HOST_TYPES = ("cpu", "meta", VIRTUAL_TYPE)


def backend_for(native) -> str:
    """torch.distributed's backend for a process whose device is `native`.

    gloo for the CPU and devshim's virtual GPUs; for an accelerator, torch's default
    backend for it (nccl for CUDA and ROCm, xccl for XPU, ...) for its tensors, with gloo
    for CPU tensors beside it ("cpu:gloo,cuda:nccl", what torch itself creates when given no
    backend), so that `ds.allreduce` of a CPU tensor works in a NCCL job too.

    Example:
        >>> backend_for(torch.device("cuda", 1))
        'cpu:gloo,cuda:nccl'
    """
    kind = native.type
    if kind in _HOST_TYPES:
        return "gloo"
    try:
        name = dist.get_default_backend_for_device(kind)
    except (AttributeError, ValueError):  # torch before 2.6, or a device without a default
        name = "nccl" if kind == "cuda" else "gloo"
    if kind == "cuda" and name == "nccl" and not dist.is_nccl_available():
        name = "gloo"
    if name == "gloo" or not dist.is_gloo_available():
        return name
    return f"cpu:gloo,{kind}:{name}"


def init(adapter, process_group_backend=None, timeout=None) -> None:
    """Initialise torch's default process group for this process, unless one exists."""
    if dist.is_initialized():
        return
    if not dist.is_available():
        raise LauncherEnvironmentError(
            "This torch build has no torch.distributed (torch.distributed.is_available() is False), "
            "so ds.init_distributed() cannot start a process group. Install a torch build with it "
            "(the builds on pytorch.org have it)."
        )
    launch = settings.launcher()
    device = adapter.try_gpu()
    backend = process_group_backend or backend_for(device)
    adapter.make_current(device)
    options = {}
    if timeout is not None:
        options["timeout"] = timeout if isinstance(timeout, datetime.timedelta) else datetime.timedelta(seconds=timeout)
    if launch is None or launch.world_size == 1:
        # One process: a world of one, in memory. DDP needs a process group even then.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **options)
        return
    _check_rank_and_size(launch)
    # torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT: join it, do not start one.
    method = "env://" if launch.name == "torchrun" else _rendezvous_address(launch)
    dist.init_process_group(backend, init_method=method, rank=launch.rank, world_size=launch.world_size, **options)


def _check_rank_and_size(launch) -> None:
    """Refuse a launcher that set the local rank but not the rank in the job or the job's size."""
    if launch.rank is not None and launch.world_size is not None:
        return
    missing = [var for name, _, rank_var, size_var, _ in settings.LAUNCHERS if name == launch.name
               for var in (rank_var, size_var) if not os.environ.get(var, "").strip()]
    raise LauncherEnvironmentError(
        f"{launch.variable}={launch.local_rank} says this process was started by {launch.name}, but "
        f"{' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} not set, so ds.init_distributed() "
        f"cannot tell this process's rank in the job or the job's size. Start it with the launcher, "
        f"which sets them, or call torch.distributed.init_process_group yourself."
    )


#: How each launcher's users set the rendezvous address torch needs (torchrun sets it itself).
_RENDEZVOUS_HINTS = {
    "slurm": 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) MASTER_PORT=29500',
    "openmpi": "mpirun -x MASTER_ADDR=<first host> -x MASTER_PORT=29500 ...",
    "horovod": "MASTER_ADDR=<first host> MASTER_PORT=29500 horovodrun ...",
    "tf_config": ("MASTER_ADDR=<the host of TF_CONFIG's chief, or of worker 0> MASTER_PORT=29500 "
                  "(a port other than the ones TF_CONFIG gives TensorFlow)"),
}


def _rendezvous_address(launch) -> str:
    """`tcp://MASTER_ADDR:MASTER_PORT` for a launcher other than torchrun (which sets neither)."""
    address = os.environ.get("MASTER_ADDR", "").strip()
    port = os.environ.get("MASTER_PORT", "").strip()
    one_machine = launch.local_world_size == launch.world_size
    missing = [var for var, value in (("MASTER_ADDR", address or one_machine), ("MASTER_PORT", port))
               if not value]
    if missing:
        need = " and ".join(missing)
        hint = _RENDEZVOUS_HINTS.get(launch.name, "MASTER_ADDR=<first host> MASTER_PORT=29500")
        raise LauncherEnvironmentError(
            f"ds.init_distributed() under {launch.name} needs {need}: every process must meet rank 0 at "
            f"one address and port, and {launch.name} does not set them (torchrun does). Set them for "
            f"every process before starting it, e.g. {hint} (any free port; MASTER_ADDR may be left out "
            f"when all processes run on one machine)."
        )
    return f"tcp://{address or '127.0.0.1'}:{port}"


def group_backend():
    """The default process group's backend ("gloo", "cpu:gloo,cuda:nccl", ...), or None."""
    if dist.is_available() and dist.is_initialized():
        return str(dist.get_backend())
    return None


def all_reduce_sum(total):
    """A new tensor on `total`'s device: `total` summed over every rank of the default group.

    torch.distributed's collectives work in place, so they work on a copy: the caller's
    tensors stay as they are. Tensors on devshim's virtual GPUs are reduced through a host
    copy (their values live in host memory, and no collective library knows the device).
    The result is not recorded by autograd, as `torch.distributed.all_reduce` is not.
    """
    reduced = total.detach().clone()
    if reduced.device.type == VIRTUAL_TYPE:
        host = reduced.to("cpu")
        _all_reduce_in_place(host)
        return host.to(reduced.device)
    _all_reduce_in_place(reduced)
    return reduced


def _all_reduce_in_place(tensor) -> None:
    """`torch.distributed.all_reduce` (a sum), returning once the group has let go of `tensor`."""
    try:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    finally:
        if tensor.device.type == "cpu":
            _wait_for_gloo_to_let_go(tensor)


#: Longest wait for gloo's worker thread to drop a summed tensor, in seconds. It is usually
#: done before all_reduce returns, else within one thread switch; past this the tensor is kept.
_LET_GO_WAIT = 1.0
#: CPU tensors gloo's worker threads still held when their sum returned (see below).
_still_held: list = []
_still_held_lock = threading.Lock()


def _wait_for_gloo_to_let_go(tensor) -> None:
    """Return once gloo's worker thread has dropped its reference to `tensor`, or keep `tensor`.

    gloo tells the caller a collective is done a moment before its worker thread drops the
    collective's tensors. A tensor whose Python object has gone by then is freed from that
    thread, which must take the GIL to do it; torch before 2.8 holds the GIL while
    `destroy_process_group` joins that thread, so the two wait on each other for ever (seen
    on torch 2.4.1 under load, tests/test_distributed.py). devshim's own tensors never reach
    that point: the sum returns once the thread let go, and a tensor still held after
    `_LET_GO_WAIT` is kept alive until a later call finds it let go.
    """
    use_count = TENSOR_USE_COUNT.get()
    if use_count is not None:
        deadline = time.monotonic() + _LET_GO_WAIT
        while use_count(tensor) > 1 and time.monotonic() < deadline:
            time.sleep(0)  # lets the worker thread run; it needs no GIL to drop a live tensor
    with _still_held_lock:
        if use_count is None:  # cannot tell: keep this call's tensors until the next call
            _still_held[:] = [tensor]
            return
        _still_held[:] = [held for held in _still_held if use_count(held) > 1]
        if use_count(tensor) > 1:
            _still_held.append(tensor)


def world() -> tuple:
    """(rank, world size) of the default process group."""
    return dist.get_rank(), dist.get_world_size()


__all__ = ["backend_for", "init", "group_backend", "all_reduce_sum", "world"]
