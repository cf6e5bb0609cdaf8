"""`tune`: the same budget for every loss, validation only, resumable after kill -9, shared by
several processes without duplicate trials, then retrained with seeds and reported. What
workers share is tested on SQLite and on a PostgreSQL server (the `storage` fixture)."""

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import optuna
import pandas as pd
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from bench.tune.pruning import DEFAULT, EPOCHS_TRAINED
from bench.tune.study import TuneSetup, default_storage, open_study
from tests.conftest import cli

BUDGET = ["--dataset", "digits", "--dims", "8"]


def tune_args(results, *extra):
    return ["tune", *BUDGET, "--results", str(results), *extra]


def studies(results, loss, trials, epochs, url=None, folds=1):
    """The study as `tune` keeps it: in `url`, by default the SQLite file under `results`."""
    setup = TuneSetup("digits", 8, trials, epochs, folds)
    return open_study(setup, loss, url or default_storage(results))


def complete(study):
    return study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


def test_tune_searches_on_validation_then_retrains_and_reports(tmp_path):
    args = ["--loss", "contrastive,nngk", "--trials", "2", "--epochs", "1"]
    out = cli(*tune_args(tmp_path, *args), "--seeds", "0,1")
    assert out.exit_code == 0, out.output
    for loss in ("contrastive", "nngk"):
        study = studies(tmp_path, loss, 2, 1)
        assert len(complete(study)) == 2
        best = json.loads((tmp_path / "tune" / study.study_name / "best.json").read_text())
        assert best["best_params"] == study.best_trial.params and "lr" in best["best_params"]
        assert (tmp_path / "tune" / study.study_name / "history.png").is_file()
    # The trials embedded no test split; the retrained runs did, once per seed.
    trial_runs = list((tmp_path / "tune" / "trials").iterdir())
    assert trial_runs and not any((p / "test_embeddings.npz").exists() for p in trial_runs)
    assert all("map@r" not in json.loads((p / "metrics.json").read_text()) for p in trial_runs)
    tuned = [json.loads(p.read_text()) for p in tmp_path.glob("digits-*-s*/metrics.json")]
    tuned = [m for m in tuned if m.get("preset") == "tuned"]
    assert sorted((m["loss"], m["seed"]) for m in tuned) == [
        ("contrastive", 0), ("contrastive", 1), ("nngk", 0), ("nngk", 1)
    ]  # fmt: skip
    report = cli("report", "--results", tmp_path, "--out", tmp_path / "rep")
    assert report.exit_code == 0, report.output
    assert (tmp_path / "rep" / "digits-tuned.md").is_file()
    assert "| nngk " in (tmp_path / "rep" / "tuning.md").read_text()
    assert "- `tuning-<study>-history.png`: Optuna" in (tmp_path / "rep" / "README.md").read_text()


def contrastive_tune(results, trials, epochs, *extra):
    """`tune` of the contrastive loss alone: `trials` trials of `epochs` epochs, no retraining."""
    args = ["--loss", "contrastive", "--trials", str(trials), "--epochs", str(epochs)]
    return tune_args(results, *args, "--no-retrain", *extra)


def start_tune(results, trials, epochs, *extra):
    cmd = [sys.executable, "-m", "bench.cli", *contrastive_tune(results, trials, epochs, *extra)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def unfinished_run(results) -> bool:
    """A trial's run past an epoch: a checkpoint and no metrics (the checkpoint looked at
    first: the run was unfinished after it was seen)."""
    runs = list((results / "tune" / "trials").glob("*"))
    started = [r for r in runs if (r / "checkpoint.pt").is_file()]
    return any(not (r / "metrics.json").is_file() for r in started)


def wait_mid_second_trial(proc, results, storage, seconds=120) -> None:
    """Until the first trial (the loss's default) is done and a run of the second is past an
    epoch. The study is read (slow, on PostgreSQL above all) only until the first trial is seen
    done; from then on an unfinished run can only be the second trial's, and the files alone
    are polled, often enough not to miss an epoch of a few tenths of a second."""
    deadline = time.time() + seconds

    def first_trial_done() -> bool:
        return bool(complete(studies(results, "contrastive", 2, 2, storage, folds=2)))

    for done, pause in ((first_trial_done, 0.05), (lambda: unfinished_run(results), 0.005)):
        while not done():
            assert proc.poll() is None, "tune ended before it was seen in its second trial"
            assert time.time() < deadline
            time.sleep(pause)


def test_tune_resumes_after_kill_without_repeating_finished_trials(tmp_path, storage):
    # Pruned (the default pruner), two folds a trial, the loss's default the first trial.
    proc = start_tune(tmp_path, 2, 2, "--storage", storage, "--folds", "2")
    wait_mid_second_trial(proc, tmp_path, storage)
    os.kill(proc.pid, signal.SIGKILL)  # mid-trial: the second trial's run has a checkpoint
    proc.wait()
    study = studies(tmp_path, "contrastive", 2, 2, storage, folds=2)
    (default,) = complete(study)
    assert default.number == 0 and default.user_attrs[DEFAULT]
    assert default.user_attrs[EPOCHS_TRAINED] == 4  # 2 folds x 2 epochs, never pruned
    (killed,) = study.get_trials(states=(TrialState.RUNNING,))
    # Past the grace period below, the killed trial is failed and retried: more than 2 s after
    # its last heartbeat, which SQLite keeps to the whole second, hence 3 s and more.
    time.sleep(3.5)
    # The same command again, in this process: another worker that reads only what the killed
    # one left in the study's database (a second interpreter would only import torch again).
    again = contrastive_tune(tmp_path, 2, 2, "--storage", storage, "--grace", "2", "--folds", "2")
    resumed = cli(*again)
    assert resumed.exit_code == 0, resumed.output
    study = studies(tmp_path, "contrastive", 2, 2, storage, folds=2)
    states = [(t.number, t.state.name, t.params) for t in study.trials]
    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(done) == 2 and done[0].number == 0 and done[0].value == default.value, states
    retry = done[1]  # complete, or pruned by the pruner: either way it took its place once
    assert study.trials[killed.number].state == TrialState.FAIL, states
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == killed.number
    assert retry.params == killed.params  # the same run folder, resumed:
    # Killed after its first epoch or its second (the study's database is read between the
    # two looks at the files, and under load an epoch may end meanwhile), never from scratch.
    assert re.search(r"resuming after epoch [12] of 2", resumed.output), resumed.output
    # The retry inherited what the killed trial had reported, and went on from there.
    assert set(killed.intermediate_values.items()) <= set(retry.intermediate_values.items())


def retrained(monkeypatch) -> list[list[tuple]]:
    """What `tune` hands over to be retrained, each time, as (loss, seed, preset) per run:
    recorded instead of trained (the first test here trains them)."""
    calls = []

    def submit_runs(configs, results, dispatch, force=False, device=None):
        calls.append([(cfg.loss, cfg.seed, cfg.preset) for cfg in configs])

    monkeypatch.setattr(importlib.import_module("bench.cli.tune"), "submit_runs", submit_runs)
    return calls


def test_a_ctrl_c_mid_trial_queues_that_trial_again_and_exits_130(tmp_path):
    # Before: Optuna failed the trial for good and the next command went on to the next point;
    # interrupted in trial 0, the shipped default was never evaluated.
    cmd = [sys.executable, "-m", "bench.cli", *contrastive_tune(tmp_path, 2, 8)]
    # A pytest-xdist worker ignores SIGINT, and its children would inherit that: a terminal's.
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)  # fmt: skip
    deadline = time.time() + 120
    while not unfinished_run(tmp_path):  # the first trial (the default) past an epoch, of 8
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted; run the same command again to resume"
    study = studies(tmp_path, "contrastive", 2, 8)
    failed, queued = study.trials
    assert failed.state == TrialState.FAIL and queued.state == TrialState.WAITING
    assert queued.params == failed.params and queued.user_attrs[DEFAULT]
    again = cli(*contrastive_tune(tmp_path, 2, 8))
    assert again.exit_code == 0, again.output
    study = studies(tmp_path, "contrastive", 2, 8)
    retry = study.trials[1]  # the default again, from its checkpoint; then one more point
    assert retry.state == TrialState.COMPLETE and retry.user_attrs[DEFAULT]
    assert retry.params == failed.params
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == failed.number
    ended = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(ended) == 2


def test_a_ctrl_c_before_the_first_trial_is_one_line_and_exit_130(tmp_path, monkeypatch):
    # Before: while tune checked its trials' data, click's "Aborted!" and exit 1.
    def interrupted(setup, names):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module("bench.cli.tune"), "check_trials", interrupted)
    result = cli(*contrastive_tune(tmp_path, 2, 1))
    assert result.exit_code == 130
    assert result.output.strip().splitlines() == [
        "interrupted; nothing finished was lost: run the same command again"
    ]


def test_two_processes_share_one_study_without_duplicates(tmp_path, storage, monkeypatch):
    studies(tmp_path, "contrastive", 4, 1, storage)  # created before the workers race for it
    workers = [start_tune(tmp_path, 4, 1, "--storage", storage) for _ in range(2)]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    study = studies(tmp_path, "contrastive", 4, 1, storage)
    finished, trials_made = complete(study), len(study.trials)  # beside them, pruned ones
    assert len(finished) == 4
    assert len({tuple(sorted(t.params.items())) for t in finished}) == 4
    trials = pd.DataFrame([t.params for t in finished])
    assert trials["lr"].between(1e-4, 1e-1).all()
    # Then one command retrains the best settings once (docs/tuning.md), running no trial.
    calls = retrained(monkeypatch)
    args = ["--loss", "contrastive", "--trials", "4", "--epochs", "1", "--seeds", "0,1"]
    final = cli(*tune_args(tmp_path, *args, "--storage", storage))
    assert final.exit_code == 0, final.output
    assert len(studies(tmp_path, "contrastive", 4, 1, storage).trials) == trials_made
    assert calls == [[("contrastive", 0, "tuned"), ("contrastive", 1, "tuned")]]


def test_a_trial_that_diverges_at_once_scores_zero_and_the_study_goes_on(tmp_path, monkeypatch):
    # e.g. N-pair at a sampled lr of 0.036 went NaN in its first epoch and stopped the study.
    import torch

    from losses.softmax import SoftmaxLoss

    real = SoftmaxLoss.forward

    def forward(self, embeddings, labels, indices=None):
        return real(self, embeddings, labels, indices) * torch.tensor(float("nan"))

    monkeypatch.setattr(SoftmaxLoss, "forward", forward)
    args = ["--loss", "softmax", "--trials", "2", "--epochs", "1", "--no-retrain"]
    out = cli(*tune_args(tmp_path, *args))
    assert out.exit_code == 0, out.output
    assert [t.value for t in complete(studies(tmp_path, "softmax", 2, 1))] == [0.0, 0.0]
    assert "before any epoch finished" in out.output and "the trial scores 0" in out.output


def test_two_trials_started_at_once_for_the_last_place_run_one_and_prune_one(tmp_path):
    from bench.tune.study import budget_taken

    study = studies(tmp_path, "contrastive", 2, 1)
    first = study.ask()
    study.tell(first, 0.5)
    one, other = study.ask(), study.ask()  # two workers' trials, started together
    setup = TuneSetup("digits", 8, 2, 1)
    assert not budget_taken(one, setup) and budget_taken(other, setup)


def test_a_missing_driver_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails: not installed
    url = "postgresql://nngk:s3cret@db.example:5432/studies"
    expected = (
        "Error: --storage postgresql://nngk:***@db.example:5432/studies needs the database "
        'driver psycopg, not installed: pip install -e ".[cluster]" (the package psycopg[binary])'
    )
    for executor in ("none", "local"):  # the workers' study opened here first, or the study
        out = cli(*contrastive_tune(tmp_path, 1, 1, "--storage", url, "--executor", executor))
        assert out.exit_code == 1 and out.output.strip() == expected, out.output
    assert not (tmp_path / "jobs").exists()


def test_postgresql_opens_with_psycopg_unless_the_url_names_its_driver():
    from bench.tune.storage import engine_url

    # SQLAlchemy 2.0 (the newest on Python 3.10) would load psycopg2 for a bare postgresql://.
    bare = "postgresql://nngk:s3cret@db.example:5432/studies"
    assert engine_url(bare) == "postgresql+psycopg://nngk:s3cret@db.example:5432/studies"
    for kept in ("postgresql+psycopg2://nngk@db/studies", "sqlite:///t/studies.db", "not a url"):
        assert engine_url(kept) == kept


def test_a_server_that_cannot_be_reached_is_one_line_without_the_password(tmp_path):
    from tests.fixtures.postgresql import free_port

    port = free_port()  # nothing listens on it
    url = f"postgresql://nngk:s3cret@127.0.0.1:{port}/studies"
    out = cli(*contrastive_tune(tmp_path, 1, 1, "--storage", url))
    assert out.exit_code == 1 and "s3cret" not in out.output
    (line,) = out.output.strip().splitlines()
    shown = f"postgresql://nngk:***@127.0.0.1:{port}/studies"
    assert line.startswith(f"Error: the study's database {shown} cannot be used: "), line
    assert "Connection refused" in line, line
    assert f"check that the server is running and reachable at 127.0.0.1:{port}" in line, line


def test_a_server_url_naming_no_database_is_one_line_saying_so(tmp_path):
    # Before: the server was asked, and the line ended "that the database None exists".
    for url, shown in (
        ("postgresql://", "postgresql://"),
        ("postgresql://nngk:s3cret@db.example:5432", "postgresql://nngk:***@db.example:5432"),
        ("mysql://nngk@db.example/", "mysql://nngk@db.example/"),
    ):
        out = cli(*contrastive_tune(tmp_path, 1, 1, "--storage", url))
        assert out.exit_code == 1 and out.output.strip() == (
            f"Error: --storage {shown} names no database; give one after the server, e.g. "
            f"{url.split(':')[0]}://USER:PASSWORD@HOST:PORT/DATABASE, or leave --storage out "
            "(RESULTS/tune/studies.db)"
        ), out.output
    assert list(tmp_path.iterdir()) == []


def test_a_storage_file_that_is_no_database_is_one_line(tmp_path):
    # Before: sqlalchemy's DatabaseError traceback ("file is not a database").
    bad = tmp_path / "notes.db"
    bad.write_text("my notes, not a study\n" * 100)
    out = cli(*contrastive_tune(tmp_path, 1, 1, "--storage", f"sqlite:///{bad}"))
    assert out.exit_code == 1 and "Traceback" not in out.output
    (line,) = out.output.strip().splitlines()
    assert line.startswith(f"Error: the study's database sqlite:///{bad} cannot be used: file is")
    assert line.endswith("check that the file is a study's SQLite database, or give --storage "
                         "another file")  # fmt: skip
    assert bad.read_text() == "my notes, not a study\n" * 100


def test_a_grace_shorter_than_the_heartbeat_shortens_the_heartbeat():
    # Before: --grace 1 with heartbeats every 10 s failed trials still running (a worker then
    # crashed: "Cannot tell a FAIL trial").
    from bench.tune.storage import heartbeat_s

    assert [heartbeat_s(g) for g in (2, 3, 12, 20, 60, 600)] == [1, 1, 6, 10, 10, 10]
    out = cli("tune", "--loss", "contrastive", "--grace", "1")
    assert out.exit_code == 2 and "'--grace': 1 is not in the range x>=2" in out.output


def test_refused_credentials_are_one_line_without_the_password(tmp_path, postgresql_server):
    url = postgresql_server.url("postgres", password="wrong-s3cret")
    out = cli(*contrastive_tune(tmp_path, 1, 1, "--storage", url))
    assert out.exit_code == 1 and "wrong-s3cret" not in out.output
    (line,) = out.output.strip().splitlines()
    assert 'password authentication failed for user "nngk"' in line, line
    assert "the user name and password" in line, line
