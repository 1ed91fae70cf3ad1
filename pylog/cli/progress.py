"""The progress bar the long-running verbs draw on stderr."""
from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Optional


class Progress:
    """A one-line progress bar on stderr with rate and ETA (only when enabled).

    ``total`` is the amount of work (bytes, records or offsets, named by
    ``unit``) or None when it is not known in advance (stdin): then the line
    shows the count and the rate only. Redrawn at most 10 times a second, so
    a tight loop pays one clock read per :meth:`advance`. No dependency
    (tqdm would do the same; the CLI keeps to the standard library).

    Thread-safety: one thread. Complexity: O(1) per :meth:`advance`.
    """

    def __init__(self, total: Optional[int], enabled: bool, stream: Optional[IO[str]] = None, unit: str = "B"):
        self.total = None if total is None else max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.unit = unit
        self._start = time.monotonic()
        self._drawn = 0.0

    @staticmethod
    def _human(n: float, unit: str) -> str:
        for prefix in ("", "k", "M", "G", "T"):
            if abs(n) < 1000 or prefix == "T":
                return f"{n:.0f} {prefix}{unit}" if prefix == "" else f"{n:.1f} {prefix}{unit}"
            n /= 1000.0
        return f"{n:.1f} {unit}"  # pragma: no cover

    def line(self, label: str = "") -> str:
        """The bar as it would be drawn now (without the carriage return)."""
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = self.done / elapsed
        speed = f"{self._human(rate, self.unit)}/s"
        if self.total is None:
            return f"{self._human(self.done, self.unit)} {speed} {label[-40:]}"
        frac = min(1.0, self.done / self.total)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = "--:--" if left == float("inf") else f"{int(left) // 60}:{int(left) % 60:02d}"
        bar = "#" * int(frac * 30)
        return f"[{bar:<30}] {frac * 100:5.1f}% {speed} ETA {eta} {label[-40:]}"

    def advance(self, n: int, label: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        finished = self.total is not None and self.done >= self.total
        if now - self._drawn < 0.1 and not finished:
            return
        self._drawn = now
        self.stream.write("\r" + f"{self.line(label):<100}")
        self.stream.flush()

    def finish(self, complete: bool = False) -> None:
        """End the line; ``complete``: all the work was done (e.g. stdin read to its end, whose byte
        count the caller only approximated)."""
        if complete and self.total is not None:
            self.done = self.total
        if self.enabled:
            self.stream.write("\r" + f"{self.line():<100}" + "\n")
            self.stream.flush()


def progress_enabled(args: argparse.Namespace) -> bool:
    """The bar is drawn when stderr is a terminal, or with ``--progress``."""
    return bool(getattr(args, "progress", False)) or sys.stderr.isatty()
