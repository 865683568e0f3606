"""Timing that tells the truth on asynchronous devices.

GPU frameworks return from a call as soon as the work is queued, so a timer
that does not wait measures the launch, not the work. `synchronize` waits
for queued work; `Timer` (d2l's API) and `benchmark` wait at the right
moments so their numbers mean what they say. One module per concern:

- `sync`         `synchronize` and the plan of what to wait for;
- `timer`        `Timer`;
- `measurement`  `Measurement`, what `benchmark` returns;
- `benchmark`    `benchmark`.

Waiting is the backends' job (`Backend.synchronize` for a device,
`Backend.wait` for a value); nothing here knows a framework.
"""

from devshim.timing.benchmark import benchmark
from devshim.timing.measurement import Measurement, format_seconds
from devshim.timing.sync import synchronize
from devshim.timing.timer import Timer

__all__ = ["synchronize", "Timer", "benchmark", "Measurement", "format_seconds"]
