"""Runs dispatched as jobs through submitit: on this machine (`--executor local`) or on a Slurm
cluster (`--executor slurm`), for `run`, `suite` and `tune`. Every job trains its runs with the same
code as `run` (finished runs are skipped, interrupted ones resumed), so the same command run
again submits again and only the missing work is done. A SIGINT or SIGTERM while the command
submits or waits cancels its unfinished jobs (`stop`): none trains on behind its back."""

from __future__ import annotations

import shutil
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from bench.cli.interrupt import Interrupted, output_to, stop, stop_signals
from bench.cli.options import stacked
from bench.util.environ import environment
from bench.util.progress import log

if TYPE_CHECKING:
    from submitit import Job

    from bench.train.compute import Compute

EXECUTORS = ("none", "local", "slurm")
CONTROLLER_LOG = "controllers.log"  # under RESULTS/jobs
# Local jobs share this machine's cores, so their OpenMP threads (torch's, faiss's) wait for one
# asleep rather than spinning: the same results to the bit, and on the 2-core machine 3 glyphs
# runs in 2 local jobs took 0.71x the wall time (docs/metrics.md). Set where the user has not.
LOCAL_JOB_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass(frozen=True)
class Dispatch:
    """Where runs go: `none` trains them in this process; `local` and `slurm` submit jobs
    (logs under RESULTS/jobs) and wait for them."""

    executor: str = "none"
    jobs: int = 2  # jobs at once (local: the runs are split between this many processes)
    partition: str = ""
    time_min: int = 240
    gpus: int = 0  # per job
    cpus: int = 4  # per job

    def submitit_executor(self, results: Path) -> Submitter:
        import submitit

        executor = submitit.AutoExecutor(
            folder=Path(results) / "jobs" / "%j", cluster=self.executor
        )
        params = {"timeout_min": self.time_min, "cpus_per_task": self.cpus, "name": "nngk-bench"}
        if self.gpus:
            params["gpus_per_node"] = self.gpus
        if self.executor == "slurm":
            params["slurm_array_parallelism"] = self.jobs
            if self.partition:
                params["slurm_partition"] = self.partition
        executor.update_parameters(**params)
        if self.executor != "local":
            return Submitter(executor)
        return Submitter(executor, Path(results) / "jobs" / CONTROLLER_LOG, LOCAL_JOB_ENVIRONMENT)


class Submitter:
    """submitit's executor, for a command's jobs. A SIGINT or SIGTERM during a submission is
    held until it returns, then cancels every job submitted here (`stop`). A local job's
    controller writes its own output to RESULTS/jobs/controllers.log, not to the terminal:
    a Ctrl-C reaches it too, and it answers with a KeyboardInterrupt traceback.
    `environment`: variables its jobs get where this process has them unset."""

    def __init__(
        self,
        executor,
        controller_log: Path | None = None,
        environment: dict[str, str] | None = None,
    ):
        self.executor = executor
        self.controller_log = controller_log
        self.environment = environment or {}
        self.jobs: list = []

    def submit(self, fn: Callable, *args) -> Job:
        return self._submitted(lambda: [self.executor.submit(fn, *args)])[0]

    def map_array(self, fn: Callable, *iterables) -> list[Job]:
        return self._submitted(lambda: self.executor.map_array(fn, *iterables))

    def _submitted(self, submit: Callable[[], list[Job]]) -> list[Job]:
        with stop_signals(hold=True) as caught:
            with output_to(self.controller_log), environment(self.environment, replace=False):
                jobs = submit()
            self.jobs += jobs
            if caught:
                stop(self.jobs, caught[0])
        return jobs


DISPATCH_OPTIONS = (
    click.option(
        "--executor",
        type=click.Choice(EXECUTORS),
        default=Dispatch.executor,
        show_default=True,
        help="none: in this process; local: as submitit jobs here; slurm: as Slurm jobs.",
    ),
    click.option("--jobs", type=click.IntRange(min=1), default=Dispatch.jobs, show_default=True,
                 help="Jobs at once (local: processes; slurm: the array's parallelism)."),
    click.option("--partition", default=Dispatch.partition, help="Slurm partition."),
    click.option("--time-min", type=click.IntRange(min=1), default=Dispatch.time_min,
                 show_default=True, help="Time limit of a job, minutes."),
    click.option("--gpus", type=click.IntRange(min=0), default=Dispatch.gpus, show_default=True,
                 help="GPUs per job."),
    click.option("--cpus", type=click.IntRange(min=1), default=Dispatch.cpus, show_default=True,
                 help="CPUs per job."),
)  # fmt: skip


dispatch_options = stacked(*DISPATCH_OPTIONS)
DISPATCH_NAMES = tuple(f.name for f in fields(Dispatch))  # each an option of its name


def dispatch_from(options: dict) -> Dispatch:
    """Take the dispatch options out of a command's keyword arguments."""
    dispatch = Dispatch(**{name: options.pop(name) for name in DISPATCH_NAMES})
    if dispatch.executor == "slurm" and shutil.which("sbatch") is None:  # before any work
        raise click.ClickException(
            "--executor slurm needs Slurm (its sbatch), not found on this machine; run on the "
            "cluster's login node, or give --executor local"
        )
    return dispatch


def run_group(
    configs: list, results: Path, force: bool = False, device: str | Compute | None = None
):
    """A job: train these runs (and their data set's baseline) as `run` would, where --device
    resolves in this job; in the process that resolved it already (tune's), its `Compute`."""
    from bench.cli.training import run_all, run_compute
    from bench.train.compute import Compute
    from bench.util.progress import show_progress

    show_progress()
    compute = device if isinstance(device, Compute) else run_compute(device)
    run_all(configs, Path(results), force, compute)


def groups(configs: list, dispatch: Dispatch) -> list[list]:
    """Slurm: one run a job (each its own time limit and retry); local: `jobs` shares."""
    if dispatch.executor == "slurm":
        return [[cfg] for cfg in configs]
    return [share for share in (configs[i :: dispatch.jobs] for i in range(dispatch.jobs)) if share]


def submit_runs(
    configs: list,
    results: Path,
    dispatch: Dispatch,
    force: bool = False,
    device: str | Compute | None = None,
) -> None:
    """Train `configs` in this process, or as jobs: first the data set's baseline with the
    first run as one job, then the others; wait for every job and name the ones that failed.
    A job checks `device` where it runs (a login node may have no GPU); a `Compute` this
    process resolved trains in it."""
    if dispatch.executor == "none":
        run_group(configs, results, force, device)
        return
    executor = dispatch.submitit_executor(results)
    first = executor.submit(run_group, configs[:1], results, force, device)
    wait([first], "the first run with its baseline")
    rest = groups(configs[1:], dispatch)
    if rest:
        n = len(rest)
        jobs = executor.map_array(run_group, rest, [results] * n, [force] * n, [device] * n)
        wait(jobs, f"{len(configs) - 1} runs")


def wait(jobs: list, what: str) -> None:
    """Wait for the jobs, logging each as it ends; one line for those that failed. A SIGINT or
    SIGTERM meanwhile cancels those not finished (`stop`)."""
    folder = Path(jobs[0].paths.folder).parent if jobs else ""
    ids = ", ".join(job.job_id for job in jobs)
    with stop_signals():
        try:
            log.info(f"{what}: {len(jobs)} job(s) submitted ({ids}); logs in {folder}")
            failed = failures(jobs)
        except Interrupted as signalled:
            stop(jobs, signalled.signum)
        finally:  # submitit's folder template, made as a folder and left empty
            with suppress(OSError):
                (Path(folder) / "%j").rmdir()
    if failed:
        raise click.ClickException(
            f"{len(failed)} job(s) failed: {'; '.join(failed)}; their logs are in {folder}; "
            "run the same command again to resume"
        )


def failures(jobs: list) -> list[str]:
    """Each job as it ends, logged; a "job-id (its error)" for each that failed."""
    import submitit

    failed = []
    for job in submitit.helpers.as_completed(jobs, poll_frequency=2):
        error = job.exception()
        log.info(f"job {job.job_id}: {'failed' if error else 'done'}")
        if error is not None:
            failed.append(f"{job.job_id} ({error_line(error)})")
    return failed


# A job that ended without a result, by its state (a local job's, then Slurm's): why. It had
# not raised (that would be its result), so its process ended without writing one.
KILLED = "its process was killed (out of memory, or by a signal)"
UNFINISHED = {
    "FINISHED": KILLED,  # a local job's process that ended with no result written
    "NO PROCESS AND NO RESULT": KILLED,
    "COMPLETED": KILLED,
    "OUT_OF_MEMORY": "Slurm's state OUT_OF_MEMORY: it ran out of memory",
    "TIMEOUT": "Slurm's state TIMEOUT: it ran past --time-min",
}


def error_line(error: Exception) -> str:
    """The exception a job raised, from submitit's report (its traceback, then log paths)."""
    import re

    text = str(error)
    if found := re.search(r"has not produced any output \(state: (.*)\)", text):
        return f"it ended without a result: {UNFINISHED.get(found[1], f'state {found[1]}')}"
    trace = text.split("Traceback", 1)[-1].split("\n----", 1)[0]
    named = re.findall(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*$", trace, re.M)
    return named[-1] if named else text.strip().splitlines()[0]
