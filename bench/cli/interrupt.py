"""What a SIGINT or SIGTERM does to a command that submitted jobs: it cancels every unfinished
job, makes sure no process of a local job outlives it, says so in one line and exits 130 or 143.
submitit cancels a local job by a SIGINT to its controller, which ends its tasks but not the
tasks' own children (data loader workers, a shell's background process): those are found in
Linux's /proc and killed."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import NoReturn

import click

from bench.util.errors import first_line

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 5.0  # for a cancelled local job's controller to end its tasks (it kills them at 1 s)


class Interrupted(BaseException):
    """SIGINT or SIGTERM, while the command waits on its jobs (a BaseException, as
    KeyboardInterrupt is, so that no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def stop_signals(hold: bool = False) -> Iterator[list[int]]:
    """Inside, SIGINT and SIGTERM are appended to the list yielded, and the first raises
    `Interrupted` unless `hold` (the caller then looks at the list); later ones are only
    appended, so the cancelling the first one starts is not cut short. Python delivers
    signals to its main thread only: elsewhere this changes nothing."""
    caught: list[int] = []

    def handler(signum: int, frame) -> None:
        caught.append(signum)
        if not hold and len(caught) == 1:
            raise Interrupted(signum)

    with signals_handled(handler, STOP_SIGNALS):
        yield caught


@contextmanager
def signals_handled(handler: Callable, numbers: tuple[int, ...]) -> Iterator[None]:
    """`handler` answers the signals `numbers` while the block runs, in the main thread (Python
    handles signals there only; elsewhere nothing changes); then their handlers as they were."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in numbers}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def stop(jobs: list, signum: int) -> NoReturn:
    """Cancel the jobs not finished, say so in one line and exit 128 + the signal's number
    (130 for SIGINT, 143 for SIGTERM)."""
    running = [job for job in jobs if not job_done(job)]
    failed = cancel(running)
    note = f"; {len(failed)} could not be: {'; '.join(failed)}" if failed else ""
    click.echo(
        f"interrupted; the {len(running) - len(failed)} job(s) were cancelled{note}; "
        "run the same command again to resume",
        err=True,
    )
    sys.exit(128 + signum)


def job_done(job) -> bool:
    try:
        return job.done()
    except Exception:  # a scheduler that does not answer: cancel the job to be sure
        return False


def cancel(jobs: list) -> list[str]:
    """Cancel each job through submitit (Slurm: scancel; local: a SIGINT to its controller,
    which ends its tasks), and make sure every process of a local job ends; a "job-id
    (error)" for each the scheduler refused to cancel."""
    from submitit import LocalJob

    local = [job for job in jobs if isinstance(job, LocalJob)]
    pids = {pid for job in local for pid in process_tree(int(job.job_id))}
    failed = []
    for job in jobs:
        try:
            job.cancel()
        except Exception as err:  # e.g. scancel missing or refusing: the others still go
            failed.append(f"{job.job_id} ({first_line(err)})")
    end_processes(local, pids)
    return failed


def end_processes(jobs: list, pids: set[int]) -> None:
    """Wait (at most GRACE_S) for the cancelled local jobs' controllers to end, then kill what
    is left of their process trees: a task's own children (data loader workers, a shell's
    background process) would outlive it, and their controller kills only its tasks."""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        alive = [job for job in jobs if not job.done()]  # done() also reaps the controller
        if not alive:
            break
        for job in alive:  # children started since (a controller's tasks starting late)
            pids.update(process_tree(int(job.job_id)))
        time.sleep(0.1)
    for pid in pids:
        if running(pid):
            with suppress(OSError):  # ended meanwhile
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + GRACE_S  # a SIGKILL takes effect when the kernel gets to it
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        for job in jobs:
            job.done()  # reaps a controller killed just now
        time.sleep(0.05)


def process_tree(pid: int) -> list[int]:
    """pid and every process under it, from Linux's /proc (elsewhere pid alone)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):  # a process that ended meanwhile
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree = [pid]
    for parent in tree:  # grows as it goes: breadth first
        tree += [child for child, of in parents.items() if of == parent]
    return tree


def running(pid: int) -> bool:
    """Whether pid is a process that has not ended (a zombie has); Linux's /proc."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@contextmanager
def output_to(path: Path | None) -> Iterator[None]:
    """Inside, this process's file descriptors 1 and 2, which a local job's controller
    inherits, go to the end of `path` (nothing is written to them meanwhile); path None: no
    change."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path, "ab") as file:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(file.fileno(), 1)
        os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
