"""Progress messages on stderr from a command's first second, written between tqdm's bars."""

from __future__ import annotations

import logging
import sys

from tqdm import tqdm

log = logging.getLogger("nngk-bench")


class TqdmHandler(logging.Handler):
    """A message on a line of its own, above any progress bar that is drawn."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def show_progress() -> None:
    """Send the harness's progress messages to stderr (the command line calls this once)."""
    if not any(isinstance(h, TqdmHandler) for h in log.handlers):
        handler = TqdmHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def duration(seconds: float) -> str:
    """'40 s', '12 min' or '3.5 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
