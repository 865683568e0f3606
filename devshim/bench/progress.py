"""Progress reports on stderr: a tqdm bar when tqdm is installed, plain lines otherwise."""

from __future__ import annotations

import sys

__all__ = ["make_progress"]


class _LineProgress:
    """Progress as plain lines on stderr, for when tqdm is not installed."""

    def __init__(self, title: str) -> None:
        self.title = title

    def __call__(self, done: int, total: int, label: str) -> None:
        print(f"{self.title}: [{done}/{total}] {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class _TqdmProgress:
    """A tqdm bar, made on the first report, once the number of steps is known."""

    def __init__(self, tqdm, title: str) -> None:
        self.tqdm, self.title, self.bar = tqdm, title, None

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.bar is None:
            self.bar = self.tqdm(total=total, desc=self.title, file=sys.stderr, unit="step")
        self.bar.set_postfix_str(label, refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_progress(title: str, enabled: bool = True):
    """A `progress(done, total, label)` callable drawing on stderr (with `close()`), or None.

    Example:
        >>> progress = make_progress("matmul on torch")
        >>> progress(0, 4, "torch cpu:0 16x16")
    """
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _LineProgress(title)
    return _TqdmProgress(tqdm, title)
