"""The private CuPy names the cupy backend uses, each behind a probe (`devshim.backends.probes`).

None: the cupy backend uses CuPy's public API only. A private name it comes to need is
declared here (`INTERNALS.add(...)`), with the feature that needs it and that feature's
fallback, so that its canary test (`tests/test_internals.py`) and its warning come with it.
"""

from __future__ import annotations

from devshim.backends.probes import Internals

INTERNALS = Internals("cupy", title="CuPy", tested="no release (CI has no GPU)")

__all__ = ["INTERNALS"]
