"""The private NumPy names the numpy backend uses, each behind a probe (`devshim.backends.probes`).

None: the numpy backend uses NumPy's public API only. A private name it comes to need is
declared here (`INTERNALS.add(...)`), with the feature that needs it and that feature's
fallback, so that its canary test (`tests/test_internals.py`) and its warning come with it.
"""

from __future__ import annotations

from devshim.backends.probes import Internals

INTERNALS = Internals("numpy", title="NumPy", tested="1.23 to 2.5")

__all__ = ["INTERNALS"]
