"""What a virtual torch GPU costs against the plain CPU: one LeNet epoch, same code, on each."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time

from devshim import settings
from devshim.backends import get_backend, specs
from devshim.bench.experiment import (
    BarPlot, Column, Experiment, Option, Steps, check_count, device_name, int_option, ops_for,
)
from devshim.bench.measure import measure_pair, side_fields
from devshim.bench.threads import framework_threads
from devshim.errors import ExperimentError
from devshim.timing.compare import MIN_PAIRS

#: What the child process runs when this process has no virtual torch GPU.
CHILD_VIRTUAL_DEVICES = 1
#: --clock: wall time, or the CPU time of this process (all its threads), which a machine
#: shared with other work does not inflate.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def run(examples: int = 1024, batch_size: int = 16, rounds: int = MIN_PAIRS, threads: int = 1,
        clock: str = "wall", *, backend=None, min_run_time: float = 1.0, progress=None) -> list:
    """One epoch of D2L's from-scratch LeNet ("Multiple GPUs from scratch", the chapter's own
    torch calls) on the CPU and on virtual GPU 0: `examples` synthetic 28x28 images in
    batches of `batch_size`, each batch copied to the device, forward, backward, SGD.

    The code is the same on both devices; only `device` differs, so the ratio is what
    devshim's virtual GPU (a tensor subclass that runs every operation on host tensors) adds
    per operation. The two are measured side by side (`devshim.timing.compare`): each round is
    one CPU epoch and one virtual GPU epoch back to back (which goes first alternates), so both
    see the same moment of the machine, for `rounds` rounds at least (default and fewest
    accepted: `MIN_PAIRS`, 10; and until each side has run `min_run_time` seconds); the ratio
    is the median of the per-round ratios, with their quartiles, and a comparison whose ratios
    disagree or whose epochs stalled is measured again (`devshim.bench.measure`) and marked.
    torch runs its kernels on `threads` threads meanwhile (default 1, as
    `torch.utils.benchmark.Timer` does: several threads on a busy machine wait for each other
    and time the machine, not the code); its own setting is put back afterwards. `clock="cpu"`
    times the process's CPU time instead of wall time: on a machine shared with other work it
    counts this work only.

    Virtual GPUs are a setting fixed per process. When this process has them on torch
    (`DEVSHIM_VIRTUAL_DEVICES` >= 1) both sides run here; otherwise both run in a child
    process started with `DEVSHIM_VIRTUAL_DEVICES=1`, and each row's note says so. Without
    torch installed the one row is a note. Rows: device, seconds (one epoch) with its spread,
    vs_cpu (this / the CPU's: the median of the per-round ratios, with vs_cpu_low/high their
    quartiles; 1.0 on the CPU's row), the comparison's flags (noisy, stalled, settled) and
    pairs (rounds measured), last_loss (the epoch's last batch loss: the same on both
    devices, within float tolerance).

    Example:
        >>> cpu, gpu = run()
        >>> gpu["vs_cpu"]   # the virtual GPU's time over the CPU's, same epoch
    """
    check_count(examples, "examples")
    check_count(batch_size, "batch_size")
    _check_rounds(rounds)
    check_count(threads, "threads")
    if clock not in CLOCKS:
        raise ExperimentError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}.")
    torch_spec = specs().get("torch")
    if torch_spec is None or not torch_spec.is_installed():
        return [{"backend": "torch", "device": "-", "note": "torch is not installed: no virtual torch GPU to time"}]
    if _has_virtual_gpu():
        return measure_here(examples, batch_size, rounds, threads, clock, min_run_time=min_run_time,
                            progress=progress)
    plan = Steps(progress)
    plan.add(f"torch in a child process ({settings.VIRTUAL_DEVICES_VAR}={CHILD_VIRTUAL_DEVICES})",
             _in_child, examples, batch_size, rounds, threads, clock, min_run_time)
    return plan.run()


def _check_rounds(rounds) -> None:
    check_count(rounds, "rounds")
    if rounds < MIN_PAIRS:
        raise ExperimentError(
            f"rounds (--rounds) must be at least {MIN_PAIRS}, not {rounds}: the ratio is the median over the "
            f"rounds, and over fewer than {MIN_PAIRS} (devshim.timing.compare.MIN_PAIRS) their quartiles say too "
            f"little to trust it. Leave --rounds out (default {MIN_PAIRS}), or give more rounds for a steadier "
            f"ratio; --examples and --batch-size make each epoch shorter.")


def _has_virtual_gpu() -> bool:
    if settings.virtual_device_count() < 1:
        return False
    adapter = get_backend("torch")
    return adapter.describe(adapter.try_gpu()).virtual


def measure_here(examples: int, batch_size: int, rounds: int, threads: int, clock: str = "wall", *,
                 min_run_time: float, progress=None, note: str = "") -> list:
    """`run`'s measurement, in this process (which has a virtual torch GPU), torch on `threads` threads.

    Example:
        >>> cpu, gpu = measure_here(1024, 16, 10, 1, min_run_time=1.0)
    """
    ops, adapter = ops_for("torch"), get_backend("torch")
    with framework_threads("torch", threads):
        batches = ops.lenet_batches(examples, batch_size)
        places = {"cpu": adapter.cpu(), "gpu": adapter.try_gpu()}
        cpu_epoch = functools.partial(ops.lenet_epoch, batches, places["cpu"])
        gpu_epoch = functools.partial(ops.lenet_epoch, batches, places["gpu"])
        plan = Steps(progress)
        plan.add(f"torch cpu vs virtual gpu epochs, {rounds} rounds or more", lambda: measure_pair(
            cpu_epoch, gpu_epoch, warmup=1, min_run_time=min_run_time, min_pairs=rounds, backend="torch",
            clock=CLOCKS[clock], labels=tuple(f"LeNet epoch on {d}" for d in places.values())))
        (c,) = plan.run()
        rows = []
        for device, m, compared in ((places["cpu"], c.first, False), (places["gpu"], c.second, True)):
            last = float(adapter.tensor_to_numpy(ops.lenet_epoch(batches, device)))  # type: ignore[arg-type]
            rows.append({"backend": "torch", "device": device_name(device, "torch"), "examples": examples,
                         "batch_size": batch_size, "threads": threads, "clock": clock,
                         **side_fields(c, m, "vs_cpu", compared), "pairs": len(c.ratios), "last_loss": last,
                         "note": note})
    return rows


def _in_child(examples: int, batch_size: int, rounds: int, threads: int, clock: str,
              min_run_time: float) -> list:
    env = {**os.environ, settings.VIRTUAL_DEVICES_VAR: str(CHILD_VIRTUAL_DEVICES), "DEVSHIM_BACKEND": "torch"}
    arguments = json.dumps([examples, batch_size, rounds, threads, clock, min_run_time])
    code = "import sys; from devshim.bench.experiments.virtual import _child; _child(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", code, arguments], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise ExperimentError(
            f"the child process that runs the virtual GPU epoch ({settings.VIRTUAL_DEVICES_VAR}="
            f"{CHILD_VIRTUAL_DEVICES}) failed with status {done.returncode}:\n{tail}\nRun it in this "
            f"process instead: {settings.VIRTUAL_DEVICES_VAR}=1 devshim bench virtual"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(arguments: str) -> None:
    """The child process's side of `_in_child`: measure, print the rows as one JSON line."""
    examples, batch_size, rounds, threads, clock, min_run_time = json.loads(arguments)
    note = f"measured in a child process with {settings.VIRTUAL_DEVICES_VAR}={CHILD_VIRTUAL_DEVICES}"
    rows = measure_here(examples, batch_size, rounds, threads, clock, min_run_time=min_run_time, note=note)
    print(json.dumps(rows))


EXPERIMENT = Experiment(
    "virtual",
    summary="a virtual torch GPU against the plain CPU: one from-scratch LeNet epoch on each, as a ratio",
    run=run,
    options=[
        int_option("--examples", "synthetic examples per epoch (default 1024)"),
        int_option("--batch-size", "examples per batch (default 16)"),
        int_option("--rounds", "rounds (a CPU epoch and a virtual GPU epoch, taking turns) to measure at least; "
                   f"the ratio is the median over them (default and fewest: {MIN_PAIRS})"),
        int_option("--threads", "torch's kernel threads while measuring (default 1, as torch.utils.benchmark)"),
        Option("--clock", dest="clock", metavar="wall|cpu",
               help="wall time (default), or this process's CPU time (steadier on a shared machine)"),
    ],
    columns=[
        Column("backend", "backend"), Column("device", "device"), Column("batch_size", "batch", form="number"),
        Column("threads", "threads", form="number"), Column("clock", "clock"),
        Column("seconds", "epoch", form="seconds"), Column("vs_cpu", "vs CPU", form="ratio"),
        Column("note", "note"),
    ],
    plot=BarPlot(label="device", value="seconds", xlabel="seconds per epoch (median, IQR bars)"),
    per_backend=False,
    framework="torch",
)
