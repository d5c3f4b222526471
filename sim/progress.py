"""One progress bar for the long-running commands (``kairos evaluate``, ``kairos train``).

The bar is a single ``\\r`` line on stderr: ``desc done/total pct rate ETA``. It is drawn only
when its stream is a terminal, so CI logs and pipes get nothing from it; it needs no package
beyond the standard library, so it works in every extra's environment.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

#: redraw at most this often (seconds); the first and the last state are always drawn
_REDRAW_S = 0.1


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    """``done`` of ``total`` units, drawn on ``stream`` (stderr by default) when it is a TTY.

    ``enabled=None`` means "when the stream is a terminal"; ``False`` never draws, ``True`` draws
    on any stream. A disabled bar writes nothing at all.
    """

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "it",
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(0, total)
        self.desc = desc
        self.unit = unit
        self.done = 0
        self.postfix = ""
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self._stream) if enabled is None else enabled
        self._clock = clock
        self._start = clock()
        self._drawn_at: float | None = None
        self._closed = False
        if self.enabled:
            self._draw()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def line(self) -> str:
        elapsed = self._clock() - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.desc} {self.done}/{self.total}"]
        if self.total:
            parts.append(f"{100 * self.done // self.total:3d}%")
        parts.append(f"{rate:.2f} {self.unit}/s")
        if rate > 0 and self.total > self.done:
            parts.append(f"ETA {_clock((self.total - self.done) / rate)}")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.postfix:
            parts.append(self.postfix)
        return " ".join(parts)

    def update(self, n: int = 1, postfix: str | None = None) -> None:
        self.done += n
        if postfix is not None:
            self.postfix = postfix
        if not self.enabled or self._closed:
            return
        now = self._clock()
        if self._drawn_at is None or now - self._drawn_at >= _REDRAW_S or self.done >= self.total:
            self._draw()

    def write(self, text: str, file: TextIO | None = None) -> None:
        """Print a line (to stdout by default) without breaking the bar."""
        out = file if file is not None else sys.stdout
        if self.enabled and not self._closed:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
        print(text, file=out, flush=True)
        if self.enabled and not self._closed:
            self._draw()

    def close(self) -> None:
        if self._closed:
            return
        if self.enabled:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()
        self._closed = True

    def _draw(self) -> None:
        self._drawn_at = self._clock()
        self._stream.write("\r\x1b[K" + self.line())
        self._stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False
