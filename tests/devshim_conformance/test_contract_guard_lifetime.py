"""Conformance (issue 19): the guard's levels live as long as the contexts that hold them.

An asyncio task created inside a "disallow" block keeps that level (asyncio copies
context variables into the task), so the hooks must stay installed while the task
can still run, even after the block that created it has exited; they go once the
last context holding a checking level is gone.
"""

from __future__ import annotations

import asyncio
import gc

import pytest

import devshim as ds
from devshim.guard import lifecycle


@pytest.fixture
def on_accelerator(harness):
    if not ds.get_backend().spec.has_module("guard") or not harness.host_reads():
        pytest.skip(f"{harness.name} has no host reads for the guard to see")
    gpus = [d for d in ds.devices() if ds.get_backend().describe(d).kind != "cpu"]
    if not gpus:
        pytest.skip(f"{harness.name} has no accelerator here, real or virtual")
    return harness.tensor(2.0, device=gpus[0])


def test_a_task_created_in_a_disallow_block_keeps_the_level_after_the_block_exits(harness, on_accelerator):
    # Each task reads a tensor of its own: a value read once may stay on the host (JAX keeps a GPU
    # array's host copy), and the task's read must be a transfer to be refused.
    x, own = on_accelerator, harness.tensor(2.0, device=ds.device_of(on_accelerator))
    how, read = harness.host_reads()[0]

    async def main():
        go = asyncio.Event()

        async def reader():
            await go.wait()  # runs only after the block below has exited
            try:
                read(x)
            except ds.ImplicitTransferError as err:
                return f"refused: {err}"
            return "read"

        with ds.transfer_guard("disallow"):
            task = asyncio.get_running_loop().create_task(reader())
        assert lifecycle.installed(), "the task can still run: its level must keep the hooks in"
        read(own)  # this task's own level is "allow" again
        go.set()
        return await task

    outcome = asyncio.run(main())
    assert outcome.startswith("refused"), (how, outcome)
    gc.collect()
    if not ds.guard.current().checking:
        assert lifecycle.installed() == (), "no context holds a checking level: the hooks go"


def test_hooks_go_when_the_block_exits_and_no_task_holds_its_level(harness, on_accelerator):
    with ds.transfer_guard("disallow"):
        assert lifecycle.installed()
    if not ds.guard.current().checking:
        assert lifecycle.installed() == ()
    _, read = harness.host_reads()[0]
    read(on_accelerator)  # allowed again
