"""`suite --executor local`: runs dispatched as submitit jobs (processes on this machine, as
they would be Slurm jobs on a cluster), each run finished as `run` would finish it."""

import json
import math
import os

import click
import pytest
import submitit

from bench.cli.dispatch import Dispatch, groups, wait
from tests.conftest import cli

# What is checked is the runs and the jobs, not what the runs learn: a small glyphs set (20
# training classes of 12-px glyphs) trains each of the nine runs several times faster than
# digits, whose 900 test images each run embeds and clusters.
SMALL_GLYPHS = "glyphs:classes=40,instances=10,size=12"


def test_suite_with_the_local_executor_finishes_every_run(tmp_path):
    args = f"suite --dataset {SMALL_GLYPHS} --dims 8 --seed 0 --epochs 1 --executor local --jobs 2"
    out = cli(*args.split(), "--losses", "nca,contrastive,softmax", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    runs = [p for p in tmp_path.glob("glyphs-*") if "-untrained-" not in p.name]
    assert len(runs) == 3 and all((p / "metrics.json").is_file() for p in runs)
    losses = {json.loads((p / "metrics.json").read_text())["loss"] for p in runs}
    assert losses == {"nca", "contrastive", "softmax"}
    assert len(list(tmp_path.glob("glyphs-*-untrained-*"))) == 2
    # one job for the first run and its baselines, then two sharing the other two
    logs = list((tmp_path / "jobs").rglob("*_log.err"))
    assert len(logs) == 3, logs
    assert "job(s) submitted" in out.output
    assert not (tmp_path / "jobs" / "%j").exists()  # submitit's template, made as a folder


def test_a_failed_job_is_one_line_naming_its_logs(tmp_path, monkeypatch):
    import submitit

    # submitit waits 15 s for a killed job's result file, in case a slow shared disk shows it
    # late; on the test's own disk 1 s does.
    monkeypatch.setattr(submitit.core.core.Job, "_results_timeout_s", 1)
    executor = Dispatch("local").submitit_executor(tmp_path)
    jobs = [executor.submit(math.sqrt, 4.0), executor.submit(math.sqrt, -1.0)]
    jobs.append(executor.submit(os.abort))  # killed by a signal, as by the OOM killer
    with pytest.raises(click.ClickException) as err:
        wait(jobs, "two square roots and a killed job")
    message = err.value.format_message()
    assert message.startswith("2 job(s) failed: ") and "math domain error" in message
    assert str(tmp_path / "jobs") in message and "\n" not in message
    assert jobs[0].result() == 2.0
    # a killed job was submitit's first line, "Job N (task: 0) with path ..._result.pkl"
    assert "it ended without a result: its process was killed (out of memory, or by a" in message


def test_local_jobs_wait_for_a_core_asleep_unless_told_otherwise(tmp_path, monkeypatch):
    # Their OpenMP threads share this machine's cores with the other jobs': asleep while they
    # wait, not spinning (the same results; the wall time measured in bench/cli/dispatch.py).
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    executor = Dispatch("local").submitit_executor(tmp_path)
    assert executor.submit(os.environ.get, "OMP_WAIT_POLICY").result() == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ  # this process's as it was
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert executor.submit(os.environ.get, "OMP_WAIT_POLICY").result() == "ACTIVE"
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_slurm_gets_one_run_a_job_and_local_its_shares():
    runs = list(range(7))
    assert groups(runs, Dispatch("slurm", jobs=3)) == [[r] for r in runs]
    assert groups(runs, Dispatch("local", jobs=3)) == [[0, 3, 6], [1, 4], [2, 5]]
    assert groups(runs[:1], Dispatch("local", jobs=3)) == [[0]]


def test_slurm_parameters_reach_the_executor(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(
        submitit.AutoExecutor, "update_parameters", lambda self, **kw: seen.update(kw)
    )
    monkeypatch.setattr(submitit.AutoExecutor, "__init__", lambda self, folder, cluster: None)
    Dispatch("slurm", jobs=5, partition="gpu", time_min=90, gpus=1).submitit_executor(tmp_path)
    assert seen == {
        "timeout_min": 90, "cpus_per_task": 4, "name": "nngk-bench", "gpus_per_node": 1,
        "slurm_array_parallelism": 5, "slurm_partition": "gpu",
    }  # fmt: skip


def test_slurm_jobs_read_the_data_where_they_run(tmp_path, monkeypatch):
    # The login node need not hold the data that its jobs read: `run` checks that the data is
    # there before torch is imported, but only where it trains the runs itself or locally.
    submitted = []
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("bench.cli.run.submit_runs", lambda configs, *_: submitted.extend(configs))
    monkeypatch.setenv("NNGK_DATA", str(tmp_path))  # no cub here
    args = ["run", "--dataset", "cub", "--loss", "contrastive", "--results", tmp_path / "r"]
    out = cli(*args, "--executor", "slurm")
    assert out.exit_code == 0, out.output
    assert [c.dataset for c in submitted] == ["cub"]
    out = cli(*args, "--executor", "local")
    assert out.exit_code == 1 and "CUB_200_2011/images.txt not found" in out.output


def test_tune_with_the_local_executor_shares_one_study_between_its_jobs(tmp_path, monkeypatch):
    from tests.test_tune import complete, retrained, studies

    calls = retrained(monkeypatch)
    args = "tune --loss contrastive --dataset digits --dims 8 --trials 3 --epochs 1 --seeds 0,1"
    out = cli(*args.split(), "--executor", "local", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    trials = complete(studies(tmp_path, "contrastive", 3, 1))
    assert len(trials) == 3 and len({tuple(t.params.items()) for t in trials}) == 3
    assert "2 job(s) submitted" in out.output
    # The best settings retrained once by the command, not once by each of its jobs.
    assert calls == [[("contrastive", 0, "tuned"), ("contrastive", 1, "tuned")]]


# What the loser of the race gets: SQLite's unique constraint, or PostgreSQL's type made by
# the winner a moment before (both seen with concurrent workers on a fresh database).
RACE_ERRORS = {
    "unique": ("INSERT INTO alembic_version", "UNIQUE constraint failed"),
    "duplicate-type": ("CREATE TYPE studydirection", 'type "studydirection" already exists'),
}


@pytest.mark.parametrize("race", RACE_ERRORS)
def test_workers_that_race_to_create_the_study_try_again(tmp_path, monkeypatch, race):
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    from bench.tune import study

    real, calls = study.create_or_load, []
    kind = IntegrityError if race == "unique" else ProgrammingError

    def racing(*args):
        calls.append(args)
        if len(calls) == 1:
            sql, message = RACE_ERRORS[race]
            raise kind(sql, {}, Exception(message))
        return real(*args)

    monkeypatch.setattr(study, "create_or_load", racing)
    monkeypatch.setattr(study.time, "sleep", lambda s: None)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    opened = study.open_study(study.TuneSetup("digits", 8, 2, 1), "contrastive", url)
    assert len(calls) == 2 and opened.study_name.startswith("digits-contrastive")


def test_a_jobs_error_is_its_exception_line_not_submitits_trailer():
    from bench.cli.dispatch import error_line

    report = (
        "Job (task=0) failed during processing with trace:\n----------------------\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed\n"
        "[SQL: INSERT INTO alembic_version]\n(Background on this error at: https://x)\n\n"
        "----------------------\nYou can check full logs with 'job.stderr(0)'\n  - /a/log.err\n"
    )
    line = "sqlalchemy.exc.IntegrityError: (sqlite3.IntegrityError) UNIQUE constraint failed"
    assert error_line(Exception(report)) == line


@pytest.mark.parametrize("command", ["run", "suite", "tune"])
def test_slurm_without_slurm_is_one_line_before_any_work(tmp_path, monkeypatch, command):
    # Before: submitit's 'Could not detect "srun"' traceback, after tune had made its study.
    monkeypatch.setattr("shutil.which", lambda name: None)
    loss = "--losses" if command == "suite" else "--loss"
    out = cli(command, loss, "contrastive", "--dataset", "digits", "--executor", "slurm",
              "--results", tmp_path / "r")  # fmt: skip
    assert out.exit_code == 1 and out.output.strip() == (
        "Error: --executor slurm needs Slurm (its sbatch), not found on this machine; run on "
        "the cluster's login node, or give --executor local"
    )
    assert not (tmp_path / "r").exists()


def test_nproc_and_an_executor_together_are_refused(tmp_path):
    # Before: each of the torchrun processes submitted its own jobs (two at once for --jobs 1).
    args = ["run", "--dataset", "digits", "--nproc", "2", "--executor", "local", "--jobs", "1"]
    out = cli(*args, "--results", tmp_path)
    assert out.exit_code == 1 and "--nproc 2 runs here under torchrun" in out.output
    assert not any(tmp_path.iterdir())
