"""devshim's conformance suite: the contract every backend meets, written once and run against
each backend's harness (`Harness`), on whatever devices the machine has (real GPUs, or virtual
ones with ``DEVSHIM_VIRTUAL_DEVICES``). What a backend cannot do (no GPU, no transfer guard, no
model placement) skips by the contract's own rules, saying why.

It ships with devshim, so a backend that lives in its own package runs it as devshim's own
backends do (docs/adapters.md, "A backend outside devshim")::

    pip install "devshim[test]" your-backend
    pytest --pyargs devshim_conformance

Every registered backend that has a harness and whose framework is installed is tested: the
suite finds a harness through the ``devshim.harnesses`` entry point, or as
``harnesses.<name>_harness`` on ``sys.path`` (devshim's own: tests/harnesses/).

Example:
    >>> from devshim_conformance import Harness, load_harness
"""

from devshim_conformance.harness import (
    HARNESS_GROUP, Harness, backends_with_harness, gpus_reachable, installed_backends, load_harness, require_module,
)

__all__ = ["HARNESS_GROUP", "Harness", "backends_with_harness", "gpus_reachable", "installed_backends",
           "load_harness", "require_module"]
