"""Where the seconds of an image cache's build went, and the threads it decodes on."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field


@dataclass
class CacheTimes:
    """A build's seconds part by part, each lap the time since the last (reading the files'
    headers and reserving the disk space, decoding and writing the images, flushing them to
    disk), and the threads' own seconds summed (their writes). Long writes or flushing point at
    the disk (the kernel holds back a writer while its dirty pages are written)."""

    threads: int
    seconds: dict[str, float] = field(default_factory=dict)  # the build's, one after another
    summed: dict[str, float] = field(default_factory=dict)  # its threads', side by side
    last: float = field(default_factory=lambda: time.perf_counter())
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lap(self, part: str) -> None:
        """The seconds since the last lap, counted to `part`."""
        now = time.perf_counter()
        self.seconds[part] = self.seconds.get(part, 0.0) + now - self.last
        self.last = now

    def add(self, part: str, seconds: float) -> None:
        """A thread's `seconds` of `part`, summed over the threads."""
        with self.lock:
            self.summed[part] = self.summed.get(part, 0.0) + seconds

    def line(self, count: int, size: int, pixels: int) -> str:
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())
        summed = ", ".join(f"{name} {s:.1f} s" for name, s in self.summed.items())
        return (
            f"cached {count} images at {size}px ({pixels / 2**30:.2f} GiB) in "
            f"{sum(self.seconds.values()):.1f} s on {self.threads} threads: {parts}"
            + (f"; summed over the threads: {summed}" if summed else "")
        )


def usable_cpus() -> int:
    """The CPUs this process may run on: a container's or a job's share of the machine, where
    os.cpu_count() counts all of the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
