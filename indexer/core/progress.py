"""Progress of long work on stderr, in one of three modes: a tqdm bar with ETA on a terminal,
plain lines a log file can read (one every `every_s` seconds, with rate and ETA), or nothing.

Used by encoding (`index`), `annotate` and head training. Only the entry point decides the
mode (`progress_mode`); nothing here reads options or configures logging.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Literal, TextIO

Mode = Literal["off", "bar", "lines"]
ProgressArg = bool | str | None  # what callers pass: a Mode, True (bar), False/None (off)
MODES = ("off", "bar", "lines")
LINE_EVERY_S = 30.0  # lines mode: at most one line per this many seconds of work
_ENV = "BERTINDEX_PROGRESS"


def progress_mode(stream: TextIO | None = None) -> Mode:
    """The mode for this process: `BERTINDEX_PROGRESS` (0/off, 1/bar, lines) when set, else
    a bar when `stream` (stderr) is a terminal and lines when it is not."""
    forced = os.environ.get(_ENV, "").strip().lower()
    if forced in ("0", "off", "false", "no"):
        return "off"
    if forced in ("1", "bar", "true", "yes"):
        return "bar"
    if forced in ("lines", "log"):
        return "lines"
    stream = stream if stream is not None else sys.stderr
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


def as_mode(progress: ProgressArg) -> Mode:
    """A caller's `progress` argument as a Mode (True: bar, the former meaning)."""
    if progress is True:
        return "bar"
    if not progress:
        return "off"
    if progress not in MODES:
        raise ValueError(f"progress must be one of {', '.join(MODES)} or a bool, not {progress!r}")
    return progress  # type: ignore[return-value]


def clock(seconds: float) -> str:
    """Seconds as H:MM:SS, or M:SS under an hour."""
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rate(rate: float, unit: str) -> str:
    """`12.5 doc/s`, or `31.2 s/batch` under one a second."""
    if 0 < rate < 1:
        return f"{1 / rate:,.1f} s/{unit}"
    return f"{rate:,.1f} {unit}/s"


def write_line(text: str, mode: ProgressArg, stream: TextIO | None = None) -> None:
    """One line on stderr unless progress is off (through tqdm with bars, so bars stay whole)."""
    mode = as_mode(mode)
    if mode == "off":
        return
    stream = stream if stream is not None else sys.stderr
    if mode == "bar":
        from tqdm import tqdm

        tqdm.write(text, file=stream)
    else:
        stream.write(text + "\n")
        stream.flush()


class Progress:
    """Counts items of one job of `total` items.

    Bar mode draws a tqdm bar (rate and ETA). Lines mode writes
    `desc: done/total unit (pct), rate unit/s, elapsed M:SS, ETA M:SS` at most once per
    `every_s` seconds, plus a closing line when the job ran long enough to have written one.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str = "item",
        mode: ProgressArg = "off",
        every_s: float = LINE_EVERY_S,
        stream: TextIO | None = None,
        leave: bool = False,
        clock_fn=time.monotonic,
    ):
        self.total, self.desc, self.unit = total, desc, unit
        self.mode = as_mode(mode) if total != 0 else "off"
        self.every_s, self.stream = every_s, stream
        self._now = clock_fn
        self.started = self._last = self._now()
        self.done = 0
        self.lines = 0
        self.postfix = ""
        self._bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                leave=leave,
                dynamic_ncols=True,
                file=stream if stream is not None else sys.stderr,
            )

    def set_postfix(self, text: str) -> None:
        """A short note shown after the counts (e.g. `loss 0.1234`)."""
        self.postfix = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "lines" and self._now() - self._last >= self.every_s:
            self._write(self.status())

    def status(self) -> str:
        """`desc: done/total unit (pct), rate unit/s, elapsed, ETA` as of now."""
        elapsed = self._now() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        count = f"{self.done:,}"
        parts = []
        if self.total:
            count += f"/{self.total:,} {self.unit} ({self.done / self.total:.0%})"
        else:
            count += f" {self.unit}"
        parts.append(_rate(rate, self.unit))
        parts.append(f"elapsed {clock(elapsed)}")
        if self.total and rate > 0:
            parts.append(f"ETA {clock((self.total - self.done) / rate)}")
        note = f", {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {count}, {', '.join(parts)}{note}"

    def _write(self, text: str) -> None:
        self._last = self._now()
        self.lines += 1
        write_line(text, "lines", self.stream)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.lines:
            elapsed = self._now() - self.started
            rate = self.done / elapsed if elapsed > 0 else 0.0
            self._write(
                f"{self.desc}: done, {self.done:,} {self.unit} in {clock(elapsed)} "
                f"({_rate(rate, self.unit)})"
            )
        self.mode = "off"
