"""SIGINT and SIGTERM to a command that dispatched its runs as submitit jobs: the jobs not
finished are cancelled, every process of a local job ends, one line says so, and the command
exits 130 or 143 without a traceback (issue 22)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cli import dispatch, interrupt
from bench.cli.dispatch import Dispatch, Submitter, wait

LINE = "interrupted; the {} job(s) were cancelled; run the same command again to resume"
SLOW_RUN = "run --loss contrastive --dataset glyphs --epochs 30 --dims 16 --executor local --jobs 1"


def processes_naming(text: str) -> dict[int, str]:
    """The live processes whose command line holds `text`, with their command lines."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in command:
            found[int(cmdline.parent.name)] = command
    return found


def job_processes(results: Path) -> dict[int, str]:
    """The live processes of the jobs under results (a local job's controller and its task
    both name the jobs folder)."""
    return processes_naming(str(results / "jobs"))


def task_started(results: Path) -> bool:
    return any("submitit.core._submit" in c for c in job_processes(results).values())


def kill_left_over(results: Path, *pids: int) -> None:
    """Whatever a failed test left running: these processes, the jobs' and their children."""
    for pid in [p for job in job_processes(results) for p in interrupt.process_tree(job)] + [*pids]:
        if interrupt.running(pid):
            os.kill(pid, signal.SIGKILL)


def until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.1)


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads Linux's /proc")
# SIGINT and SIGTERM reach the command's one handler (bench/cli/interrupt.py, stop_signals), so
# SIGTERM to the command alone stands for both; Ctrl-C at a terminal (SIGINT to the whole
# group, the jobs' processes too) is the other case. (SIGINT to the command alone, the same
# path as SIGTERM's, was a third variant; the in-process tests below send each signal.)
@pytest.mark.parametrize(
    "signum, whole_group",
    [(signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["sigterm-to-the-command", "ctrl-c-to-the-terminals-group"],
)
def test_a_signal_cancels_the_training_job_in_one_line(tmp_path, signum, whole_group):
    results, output = tmp_path / "results", tmp_path / "output.txt"
    command = [sys.executable, "-m", "bench.cli", *SLOW_RUN.split(), "--results", str(results)]
    with open(output, "w") as out:  # not a pipe: a job left running would hold it open
        parent = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)
    try:
        until(lambda: task_started(results), 60, "job")
        # the parent alone (`kill`), or its whole process group as a terminal's Ctrl-C is
        if whole_group:
            os.killpg(parent.pid, signum)
        else:
            os.kill(parent.pid, signum)
        assert parent.wait(timeout=30) == 128 + signum
        left = job_processes(results)  # as the command exits
    finally:
        if parent.poll() is None:
            parent.kill()
        kill_left_over(results)
    text = output.read_text()
    assert text.strip().splitlines()[-1] == LINE.format(1), text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert left == {}  # the controller and its training task have ended
    assert not list(results.glob("glyphs-contrastive-*/metrics.json"))


class FakeJob:
    def __init__(self, job_id: str, done: bool = False):
        self.job_id, self.finished, self.cancelled = job_id, done, False

    def done(self) -> bool:
        return self.finished

    def cancel(self) -> None:
        self.cancelled = True


class RefusedJob(FakeJob):
    def cancel(self) -> None:
        raise OSError("scancel: not found")


class SignalledExecutor:
    """Submits fake jobs, a signal reaching this process in the middle of each submission."""

    def __init__(self, signum: int, jobs: list[FakeJob]):
        self.signum, self.jobs = signum, jobs

    def submit(self, fn, *args):
        return self.map_array(fn, [args])[0]

    def map_array(self, fn, *iterables):
        os.kill(os.getpid(), self.signum)
        return self.jobs


def test_a_signal_during_a_submission_is_held_then_cancels_what_was_submitted(capsys):
    before = signal.getsignal(signal.SIGTERM)
    jobs = [FakeJob("a"), FakeJob("b", done=True), FakeJob("c")]
    submitter = Submitter(SignalledExecutor(signal.SIGTERM, jobs))
    with pytest.raises(SystemExit) as exit_:
        submitter.map_array(len, [[1], [2], [3]])
    assert exit_.value.code == 143
    assert [job.cancelled for job in jobs] == [True, False, True]  # b had finished
    assert capsys.readouterr().err.strip() == LINE.format(2)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_job_the_scheduler_will_not_cancel_is_named_in_the_line(capsys):
    submitter = Submitter(SignalledExecutor(signal.SIGINT, [RefusedJob("42")]))
    with pytest.raises(SystemExit) as exit_:
        submitter.submit(len, [1])
    assert exit_.value.code == 130
    line = capsys.readouterr().err.strip()
    assert line.startswith("interrupted; the 0 job(s) were cancelled; 1 could not be: 42 (")
    assert "scancel: not found" in line and "\n" not in line


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_cancelled_local_job_leaves_no_process_of_its_tree(tmp_path, monkeypatch, capsys):
    # The job's task starts a shell whose background `sleep` ignores SIGINT (as a shell's
    # background jobs do) and is not the controller's to kill: only the tree kill ends it.
    pid_file = tmp_path / "sleep.pid"
    script = f"sleep 300 & echo $! > {pid_file}; wait"
    executor = Dispatch("local").submitit_executor(tmp_path)
    job = executor.submit(subprocess.call, ["sh", "-c", script])
    sleeper = 0
    try:
        until(lambda: pid_file.is_file() and pid_file.read_text().strip(), 30, "background sleep")
        sleeper = int(pid_file.read_text())
        assert interrupt.running(sleeper)

        def interrupted(jobs):  # SIGINT while wait() waits on the job
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
            raise AssertionError("the SIGINT did not interrupt the wait")

        monkeypatch.setattr(dispatch, "failures", interrupted)
        with pytest.raises(SystemExit) as exit_:
            wait([job], "a job with a background process")
        still = sleeper and interrupt.running(sleeper)
    finally:
        kill_left_over(tmp_path, *([sleeper] if sleeper else []))
    assert exit_.value.code == 130 and not still
    assert capsys.readouterr().err.strip().splitlines()[-1] == LINE.format(1)
    assert job.done()
    assert "KeyboardInterrupt" in (tmp_path / "jobs" / "controllers.log").read_text()
