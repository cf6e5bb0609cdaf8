"""What a study records when a worker is killed, a trial is retried or a run is found finished:
the study is done only when its trials have ended, trials.csv lists the trials that took a
place, and the epochs are counted once (issue 43, item 7)."""

import time

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from bench.data.glyphs import GlyphSpec, load_glyphs
from bench.train.compute import Compute
from bench.tune.pruning import EPOCHS_TRAINED, epochs_trained, savings
from bench.tune.study import (
    TuneSetup,
    default_params,
    open_study,
    pruning_line,
    suggest,
    tune_loss,
    write_summary,
)
from tests.conftest import cli

TINY = "glyphs:classes=20,instances=12"
CPU = Compute.resolve("cpu")  # where the trials train, as `tune --device cpu` resolves it


@pytest.fixture(autouse=True, scope="module")
def tiny_glyphs():
    """TINY made before any test, so that a command's output is the same whichever test runs
    first: on a cold cache it begins with the glyphs' "generating" line."""
    load_glyphs(GlyphSpec.parse(TINY), say=lambda _: None)


def test_a_trial_left_running_by_a_killed_worker_is_waited_for_and_retried(tmp_path):
    setup = TuneSetup(TINY, 4, trials=2, epochs=1, grace_s=2)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = open_study(setup, "contrastive", url)
    killed = study.ask()  # the default, taken by a worker that then died with a heartbeat
    suggest(killed, setup.space("contrastive"))
    study._storage.record_heartbeat(killed._trial_id)
    time.sleep(0.2)  # the same command again at once, well inside the grace period
    study = tune_loss(setup, "contrastive", url, tmp_path, CPU)
    states = {t.number: t.state for t in study.trials}
    assert TrialState.RUNNING not in states.values(), states
    ended = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(ended) == 2, states  # the budget's two trials, none missing
    assert states[killed.number] == TrialState.FAIL
    retry = ended[-1]
    assert retry.params == default_params(setup, "contrastive"), states
    assert savings(study.trials, setup.steps) == {
        "trials": 2, "pruned": 0, "epochs_trained": 2, "epochs_reused": 0, "epochs_unpruned": 2
    }  # fmt: skip
    folder = write_summary(study, setup, "contrastive", tmp_path)
    table = pd.read_csv(folder / "trials.csv")
    # A trial that stopped before training (the study seen full) is no row of its own.
    assert table["number"].tolist() == [killed.number, *(t.number for t in ended)]
    assert table["state"].tolist() == ["FAIL", "COMPLETE", "COMPLETE"]
    assert table["params_lr"].notna().all()


def test_a_resumed_study_waits_for_a_killed_trial_instead_of_storing_a_placeholder(tmp_path):
    # Before: with the killed trial still RUNNING and the budget's other trial done, the next
    # trial was started only to be skipped, and stayed in the study as PRUNED.
    setup = TuneSetup(TINY, 4, trials=2, epochs=1, grace_s=2)
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    study = open_study(setup, "contrastive", url)
    killed = study.ask()
    suggest(killed, setup.space("contrastive"))
    study._storage.record_heartbeat(killed._trial_id)
    study = tune_loss(setup, "contrastive", url, tmp_path, CPU)
    states = [t.state for t in study.trials]
    assert states == [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE], states
    assert pruning_line(study, setup).startswith("2 trials (0 pruned by hyperband)")


def test_a_retried_trial_carries_the_epochs_of_the_one_it_retries_once():
    study = optuna.create_study()
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)}
    lost = optuna.create_trial(
        state=TrialState.FAIL, params={"lr": 0.01}, distributions=dist,
        user_attrs={EPOCHS_TRAINED: 2},
    )  # fmt: skip
    study.add_trial(lost)
    # Optuna's retry copies the user attributes: 2 inherited, then 3 more trained.
    retry = optuna.create_trial(
        state=TrialState.COMPLETE, value=0.5, params={"lr": 0.01}, distributions=dist,
        user_attrs={EPOCHS_TRAINED: 5}, system_attrs={"failed_trial": 0},
    )  # fmt: skip
    study.add_trial(retry)
    assert epochs_trained(study.trials) == 5


def test_runs_found_finished_are_read_not_counted_as_saved_by_pruning(tmp_path):
    setup = TuneSetup(TINY, 4, trials=2, epochs=2, pruner="none")  # every run finished
    tune_loss(setup, "contrastive", f"sqlite:///{tmp_path / 'first.db'}", tmp_path, CPU)
    # The study's database lost, its runs kept: the new study reads them.
    again = tune_loss(setup, "contrastive", f"sqlite:///{tmp_path / 'second.db'}", tmp_path, CPU)
    saved = savings(again.trials, setup.steps)
    assert saved["epochs_trained"] == 0 and saved["epochs_reused"] == 4
    line = pruning_line(again, setup)
    assert "trained 0 epochs and read 4 from runs found finished" in line
    assert "(0 % saved)" in line, line


def test_a_study_in_memory_is_refused(tmp_path):
    for url in ("sqlite:///:memory:", "sqlite://", "sqlite:///"):
        args = ["--loss", "contrastive", "--dataset", TINY, "--trials", "2", "--storage", url]
        out = cli("tune", *args, "--results", tmp_path)
        assert out.exit_code == 1
        assert "is a database in memory" in out.output and "Traceback" not in out.output
        assert len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "tune").exists()


def test_trials_that_cannot_run_are_refused_before_any_study(tmp_path):
    # Issue 43: --folds 50 failed each trial, after Optuna's 40-line traceback.
    args = ["--loss", "contrastive", "--dataset", TINY, "--trials", "2", "--folds", "50"]
    out = cli("tune", *args, "--results", tmp_path)
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
    assert "fold 0 of 50 over 10 training classes" in out.output
    assert "(here 5 folds at most)" in out.output
    assert not (tmp_path / "tune").exists()


def test_settings_given_to_tune_reach_its_runs_unless_the_preset_has_them():
    from bench.cli.tune import held_settings

    # The sop preset trains with RMSprop: --optimizer sgd (a run's default) is a change.
    assert held_settings({"optimizer": "sgd", "memory": None}, "sop", ["contrastive"]) == {
        "optimizer": "sgd"
    }
    assert held_settings({"optimizer": "rmsprop"}, "sop", ["contrastive"]) == {}
    # A batch the trials could not draw was refused with "give a smaller --batch-size",
    # an option tune did not have.
    given = {"batch_size": 32, "m_per_class": 4}
    assert held_settings(given, TINY, ["contrastive", "npair"]) == given


def test_tune_takes_a_batch_size_and_names_its_study_with_it(tmp_path):
    args = ["--loss", "contrastive", "--dataset", TINY, "--dims", "4", "--trials", "1"]
    args += ["--epochs", "1", "--folds", "2", "--batch-size", "32", "--no-retrain"]
    out = cli("tune", *args, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    (study,) = [p.name for p in (tmp_path / "tune").iterdir() if p.is_dir() and "-t1-" in p.name]
    assert study.endswith("-hyperband-batch_size-32")
    runs = list((tmp_path / "tune" / "trials").glob("*/config.json"))
    assert len(runs) == 2 and all('"batch_size": 32' in r.read_text() for r in runs)  # 2 folds


def test_workers_that_ask_at_once_never_take_the_same_queued_trial(tmp_path):
    # SQLite ignores Optuna's SELECT ... FOR UPDATE: without BEGIN IMMEDIATE, 15 of 50 rounds
    # gave one queued trial to two of four workers, which both ran it (optuna#4002).
    import threading

    from bench.tune.storage import rdb_storage

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    optuna.create_study(study_name="s", storage=rdb_storage(url, 60))
    workers = [optuna.load_study(study_name="s", storage=rdb_storage(url, 60)) for _ in range(4)]
    for round_ in range(20):
        workers[0].enqueue_trial({"x": float(round_)})
        start, taken = threading.Barrier(len(workers)), []
        threads = [
            threading.Thread(target=ask_at_once, args=(study, start, taken)) for study in workers
        ]
        [thread.start() for thread in threads]
        [thread.join() for thread in threads]
        assert len(set(taken)) == len(workers), f"round {round_}: trials {sorted(taken)}"


def ask_at_once(study, start, taken):
    start.wait()
    taken.append(study.ask().number)


def test_tune_takes_the_offline_settings_its_dataset_help_gives(tmp_path, monkeypatch):
    # `--dataset`'s help says to add --backbone small_cnn --pretrained none --resize --crop
    # for a folder offline; tune had no --backbone, --resize or --crop.
    from tests.fixtures.folder import make_folder

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    images = make_folder(tmp_path / "imgs", classes=8, per_class=8)
    args = ["--backbone", "small_cnn", "--pretrained", "none", "--resize", "32", "--crop", "28"]
    out = cli("tune", "--loss", "contrastive", "--dataset", f"folder:{images}", *args,
              "--batch-size", "8", "--trials", "1", "--epochs", "1", "--pruner", "none",
              "--no-retrain", "--results", tmp_path / "r")  # fmt: skip
    assert out.exit_code == 0, out.output
    (study,) = (tmp_path / "r" / "tune").glob("folder-*")
    assert "-backbone-small_cnn-" in study.name and "-crop-28-" in study.name
    (config,) = (tmp_path / "r" / "tune" / "trials").rglob("config.json")
    assert '"backbone": "small_cnn"' in config.read_text()
