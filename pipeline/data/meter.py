"""Progress of a long data step as lines a log or a terminal can show: a bar, the share done,
MB/s and the time left, at most one line every `every` seconds (and one at the end)."""

from __future__ import annotations

import time

from pipeline.data.settings import Progress

_BAR = 20  # characters


class Meter:
    """Counts bytes (and documents) through a step; says a line now and then.

    total: the bytes the step will see, when known (then the line has a bar and an ETA).
    """

    def __init__(self, say: Progress, what: str, total: int | None = None,
                 every: float = 5.0) -> None:
        self.say, self.what, self.total, self.every = say, what, total, every
        self.nbytes = self.docs = 0
        self.t0 = self._last = time.perf_counter()

    def add(self, nbytes: int, docs: int = 1) -> None:
        self.nbytes += nbytes
        self.docs += docs
        now = time.perf_counter()
        if now - self._last >= self.every:
            self._last = now
            self.say(self.line(now))

    def rate(self, now: float | None = None) -> float:
        """MB/s (1e6 bytes) so far."""
        elapsed = (now or time.perf_counter()) - self.t0
        return self.nbytes / 1e6 / elapsed if elapsed > 0 else 0.0

    def line(self, now: float | None = None) -> str:
        now = now or time.perf_counter()
        rate = self.rate(now)
        done = f"{self.nbytes / 1e6:,.0f}"
        if self.total:
            share = min(1.0, self.nbytes / self.total)
            bar = "#" * round(share * _BAR) + "-" * (_BAR - round(share * _BAR))
            left = (self.total - self.nbytes) / 1e6 / rate if rate > 0 else float("nan")
            eta = f", {_duration(left)} left" if share < 1 else ""
            return (f"{self.what}: [{bar}] {share:4.0%} {done}/{self.total / 1e6:,.0f} MB, "
                    f"{self.docs:,} documents, {rate:.1f} MB/s{eta}")
        return f"{self.what}: {done} MB, {self.docs:,} documents, {rate:.1f} MB/s"

    def finish(self) -> float:
        """Say the last line; returns the seconds the step took."""
        now = time.perf_counter()
        self.say(self.line(now) + f" in {_duration(now - self.t0)}")
        return now - self.t0


def _duration(seconds: float) -> str:
    if seconds != seconds:  # nan: no rate yet
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"
