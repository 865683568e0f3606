"""A fake asynchronous device for the timing tests: work queued on it finishes on a fake clock,
and waiting moves that clock on (`FakeQueue`), with a backend whose values are such queues and
which waits per value, as JAX does (`FakeQueueBackend`, registered by `fake_queue_backend`).
tests/test_timing.py and tests/test_mutants_compare.py both time work on it."""

from __future__ import annotations

import contextlib

from devshim import backends
from devshim._device import Device
from devshim.backends.spec import BackendSpec


class FakeQueue:
    """An asynchronous device on a fake clock (anything with a ``now``), waited on JAX-style
    (``block_until_ready``).

    ``launch`` returns at once; the work finishes ``cost`` seconds after the
    queue's earlier work, and waiting moves the clock to that moment.
    """

    def __init__(self, clock) -> None:
        self.clock, self.busy_until, self.waits = clock, 0.0, 0

    def launch(self, cost: float) -> "FakeQueue":
        self.busy_until = max(self.clock.now, self.busy_until) + cost
        return self

    def block_until_ready(self):
        self.waits += 1
        self.clock.now = max(self.clock.now, self.busy_until)
        return self


class FakeQueueBackend(backends.Backend):
    """A backend whose values are FakeQueues and which waits per value, as JAX does."""

    spec = BackendSpec("fakequeue", import_name=__name__, title="A fake asynchronous device")
    waits_per_value = True

    def is_tensor(self, x):
        return isinstance(x, FakeQueue)

    def is_native_device(self, obj):
        return False

    def accelerator_count(self):
        return 0

    def make_native_device(self, kind, index):
        return kind

    def describe(self, native):
        return Device("cpu", backend="fakequeue")

    def tensor_device(self, x):
        return Device("cpu", backend="fakequeue")

    def copy_to(self, x, native, non_blocking):
        raise AssertionError("FakeQueues are not copied")

    def tensor_to_numpy(self, x):
        raise AssertionError("FakeQueues are not read")

    def wait(self, x):
        x.block_until_ready()


@contextlib.contextmanager
def fake_queue_backend():
    """`FakeQueueBackend` registered while the block runs."""
    backends.register_backend(FakeQueueBackend.spec, FakeQueueBackend)
    try:
        yield
    finally:
        backends.unregister_backend(FakeQueueBackend.spec.name)
