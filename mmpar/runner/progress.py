"""Progress and ETA of a pass over a dataset, on a terminal only.

``[ 120/500] 24.0 img/s, ETA 0:00:15`` is rewritten in place (``\\r``) on stderr
while images are processed, and ends with the elapsed time and a newline. It is
drawn only when stderr is a terminal and only by rank 0, so that logs, piped
output and the other ranks of a process group see none of it.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Optional, TextIO

from mmpar.dist import get_dist_info

__all__ = ["Progress"]


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=int(round(max(seconds, 0.0)))))


class Progress:
    """A one-line counter of images done, their rate and the time left.

    Args:
        total: Images in the whole pass (all ranks together).
        stream: Where it is drawn; default ``sys.stderr`` at construction.
        enabled: Draw at all; default: rank 0, and ``stream`` is a terminal.
        min_interval: Seconds between redraws (the first and the last are always drawn).
    """

    def __init__(
        self,
        total: int,
        stream: Optional[TextIO] = None,
        enabled: Optional[bool] = None,
        min_interval: float = 0.1,
    ) -> None:
        self.total = max(int(total), 0)
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = get_dist_info()[0] == 0 and bool(isatty and isatty())
        self.enabled = enabled
        self.min_interval = min_interval
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw: Optional[float] = None
        self._width = 0

    def update(self, n: int) -> None:
        """Count ``n`` more images (capped at ``total``) and redraw if it is time."""
        before, self.done = self.done, min(self.done + int(n), self.total)
        if not self.enabled or before == self.total:  # the finished line stays as drawn
            return
        now = time.perf_counter()
        if (
            self._last_draw is None
            or now - self._last_draw >= self.min_interval
            or self.done == self.total
        ):
            self._draw(self.line(now - self._start))
            self._last_draw = now

    def line(self, elapsed: float) -> str:
        """The text for ``done`` images after ``elapsed`` seconds."""
        width = len(str(self.total))
        rate = self.done / elapsed if elapsed > 0 else 0.0
        head = f"[{self.done:>{width}}/{self.total}] {rate:.1f} img/s"
        if self.done >= self.total:
            return f"{head}, done in {_clock(elapsed)}"
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        return f"{head}, ETA {_clock(eta) if eta == eta else '?'}"

    def close(self) -> None:
        """End the line (when anything was drawn)."""
        if self.enabled and self._last_draw is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._last_draw = None

    def _draw(self, text: str) -> None:
        # Spaces over the rest of a longer previous line.
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)
