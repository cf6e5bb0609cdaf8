"""Experiment logging (`--log`): TensorBoard's event files and MLflow's local store, read back
with their own readers, hold the history.csv values, the per-step losses and the run's
settings; a resumed run continues its log; the run id is the same with or without a log."""

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from bench.runs.config import RunConfig
from bench.train.guards import StepLosses
from bench.train.tracking import RunLog, open_run_log
from tests.conftest import cli

DATA = "glyphs:classes=16,instances=10,size=12"  # 8 training classes: 4 steps an epoch
RUN = ["run", "--loss", "nngk", "--dataset", DATA, "--dims", "8", "--epochs", "2"]
RUN += ["--batch-size", "16"]
NNGK_STATS = ("mean_centre_distance", "mean_kernel_value", "kernel_exponent_spread")


def train(results: Path, *args: str):
    """The NNGK run of RUN into `results` (an exception: exit code 1, as a user would see)."""
    return cli(*RUN, "--results", results, *args, catch_exceptions=True)


def the_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if "-nngk-" in p.name]
    return run


def interrupted(results: Path, monkeypatch, unlogged: Path, steps: int, *args: str) -> Path:
    """The run stopped (Ctrl-C) after `steps` training steps; the data set's baselines are
    copied from the unlogged run's results, finished, to save their evaluation."""
    for baseline in unlogged.parent.iterdir():
        if baseline != unlogged:
            shutil.copytree(baseline, results / baseline.name)
    real_add, taken = StepLosses.add, []

    def add_then_interrupt(self, value):
        if len(taken) == steps:
            raise KeyboardInterrupt
        taken.append(value)
        real_add(self, value)

    with monkeypatch.context() as patch:
        patch.setattr(StepLosses, "add", add_then_interrupt)
        assert train(results, *args).exit_code == 130
    return the_run(results)


@pytest.fixture(scope="module")
def unlogged(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("none")
    out = train(results)
    assert out.exit_code == 0, out.output
    return the_run(results)


def test_tensorboard_reads_the_history_the_steps_and_the_settings(tmp_path, monkeypatch, unlogged):
    pytest.importorskip("tensorboard", reason="--log tensorboard needs nngk-bench[log]")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    # Stopped in the second epoch's third step: the resumed run logs steps 5 and 6 again.
    run = interrupted(tmp_path, monkeypatch, unlogged, 6, "--log", "tensorboard")
    assert len(list((run / "tensorboard").iterdir())) == 1
    assert train(tmp_path, "--log", "tensorboard").exit_code == 0
    assert run.name == unlogged.name  # the log changes no run id
    assert len(list((run / "tensorboard").iterdir())) == 2  # the resumed run's own file
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    values = {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}
    history = pd.read_csv(run / "history.csv")
    for tag, column in [
        ("val/map@r", "val_map@r"),
        ("val/recall@1", "val_recall@1"),
        ("train/epoch_loss", "train_loss"),
        ("time/epoch_seconds", "seconds"),
        *((f"nngk/{stat}", stat) for stat in NNGK_STATS),
    ]:
        assert [e.step for e in values[tag]] == [1, 2]
        assert [e.value for e in values[tag]] == pytest.approx(history[column].tolist(), rel=1e-6)
    steps = values["train/loss"]
    assert [e.step for e in steps] == list(range(1, 9))  # 4 an epoch, none twice
    for epoch in (0, 1):  # the epoch's loss is the mean of its steps'
        mean = sum(e.value for e in steps[4 * epoch : 4 * epoch + 4]) / 4
        assert mean == pytest.approx(history["train_loss"][epoch], rel=1e-5)
    config = json.loads((run / "config.json").read_text())
    assert [e.value for e in values["lr"]] == pytest.approx([config["lr"]] * 2)
    metrics = json.loads((run / "metrics.json").read_text())
    (tested,) = values["test/map@r"]
    assert (tested.step, tested.value) == (metrics["best_epoch"], pytest.approx(metrics["map@r"]))
    content = events.PluginTagToContent("hparams")[metadata.SESSION_START_INFO_TAG]
    hparams = metadata.parse_session_start_info_plugin_data(content).hparams
    assert hparams["loss"].string_value == "nngk" and hparams["dims"].number_value == 8
    assert hparams["loss_params.sigma"].number_value == config["resolved_loss_params"]["sigma"]
    assert hparams["run_id"].string_value == run.name


def test_mlflow_keeps_one_run_through_a_resume_in_a_local_store(tmp_path, monkeypatch, unlogged):
    pytest.importorskip("mlflow", reason="--log mlflow needs nngk-bench[log]")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = interrupted(tmp_path, monkeypatch, unlogged, 4, "--log", "mlflow")  # after epoch 1
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = (run / "mlflow_run_id.txt").read_text().strip()
    assert client.get_run(run_id).info.status == "KILLED"
    assert train(tmp_path, "--log", "mlflow").exit_code == 0
    assert run.name == unlogged.name
    experiment = client.get_experiment_by_name(DATA)
    (logged,) = client.search_runs([experiment.experiment_id])
    assert logged.info.run_id == run_id and logged.info.run_name == run.name
    assert logged.info.status == "FINISHED"

    def history_of(name):
        return [(m.step, m.value) for m in client.get_metric_history(run_id, name)]

    # round_trip: pandas 2's default float parser does not always read back the float written
    history = pd.read_csv(run / "history.csv", float_precision="round_trip")
    assert history_of("val/map_at_r") == list(zip([1, 2], history["val_map@r"], strict=True))
    assert history_of("train/epoch_loss") == list(zip([1, 2], history["train_loss"], strict=True))
    for stat in NNGK_STATS:
        assert history_of(f"nngk/{stat}") == list(zip([1, 2], history[stat], strict=True))
    steps = history_of("train/loss")
    assert [step for step, _ in steps] == list(range(1, 9))
    assert sum(v for _, v in steps[4:]) / 4 == pytest.approx(history["train_loss"][1])
    config = json.loads((run / "config.json").read_text())
    assert history_of("lr") == [(1, config["lr"]), (2, config["lr"])]
    params = logged.data.params
    assert params["loss"] == "nngk" and params["dims"] == "8" and params["run_id"] == run.name
    assert float(params["loss_params.sigma"]) == config["resolved_loss_params"]["sigma"]
    assert (
        logged.data.metrics["test/map_at_r"]
        == json.loads((run / "metrics.json").read_text())["map@r"]
    )
    assert experiment.artifact_location == (tmp_path / "mlartifacts").resolve().as_uri()


def test_no_log_writes_nothing_beside_the_run(unlogged):
    assert sorted(p.name for p in unlogged.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "history.csv",
        "metrics.json",
        "test_embeddings.npz",
        "test_query_scores.npz",
        "train_embeddings.npz",
    ]
    assert not [p for p in unlogged.parent.iterdir() if p.name.startswith(("mlflow", "mlartif"))]


@pytest.mark.parametrize("kind, package", [("tensorboard", "tensorboard"), ("mlflow", "mlflow")])
def test_a_missing_package_is_one_line_naming_the_install(tmp_path, monkeypatch, kind, package):
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed
    out = train(tmp_path, "--log", kind)
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1
    assert f"--log {kind} needs the {package} package: pip install" in out.output
    assert "nngk-bench[log]" in out.output and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="pip install"):
        open_run_log(kind, tmp_path, RunConfig())


def test_mlflow_takes_the_tracking_uri_from_the_environment(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="--log mlflow needs nngk-bench[log]")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://store")
    with pytest.raises(ValueError, match=r"^--log mlflow: cannot log to nosuchscheme://store \("):
        open_run_log("mlflow", tmp_path, RunConfig())
    assert not list(tmp_path.iterdir())


def test_an_sqlite_store_that_cannot_be_written_is_one_line_before_any_run(tmp_path, monkeypatch):
    # Issue 43: on a read-only file system MLflow retried for 100 s, then gave a traceback.
    pytest.importorskip("mlflow", reason="--log mlflow needs nngk-bench[log]")
    (tmp_path / "a-file").write_text("not a folder")
    store = tmp_path / "a-file" / "mlflow.db"  # a folder that cannot be made, even by root
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    out = train(tmp_path / "results", "--log", "mlflow")
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
    assert out.output.startswith(f"Error: --log mlflow: cannot write the tracking store {store}")
    assert "$MLFLOW_TRACKING_URI" in out.output and not (tmp_path / "results").exists()
    with pytest.raises(ValueError, match="cannot write the tracking store"):
        open_run_log("mlflow", tmp_path, RunConfig())


def test_a_tracking_server_that_does_not_answer_is_one_line_at_once(tmp_path, monkeypatch):
    # Issue 43: MLflow retried each request for minutes (killed after 200 s, nothing said).
    pytest.importorskip("mlflow", reason="--log mlflow needs nngk-bench[log]")
    import socket

    with socket.socket() as closed:  # a port that was free a moment ago: nothing listens
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    out = train(tmp_path / "results", "--log", "mlflow")
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
    assert f"the tracking server http://127.0.0.1:{port} does not answer" in out.output
    assert not (tmp_path / "results").exists()


def test_the_log_is_not_part_of_the_run_id():
    assert RunConfig(log="tensorboard").run_id() == RunConfig(log="mlflow").run_id()
    assert RunConfig(log="mlflow").run_id() == RunConfig().run_id()


def test_suite_and_tune_take_the_log(tmp_path, monkeypatch):
    import bench.cli.suite

    submitted = []
    monkeypatch.setattr(bench.cli.suite, "submit_runs", lambda runs, *_: submitted.extend(runs))
    args = ["suite", "--dataset", DATA, "--seed", "0", "--results", str(tmp_path)]
    assert cli(*args, "--log", "tensorboard").exit_code == 0
    assert len(submitted) > 1 and {cfg.log for cfg in submitted} == {"tensorboard"}
    logged, submitted[:] = [cfg.run_id() for cfg in submitted], []
    assert cli(*args).exit_code == 0
    assert [cfg.run_id() for cfg in submitted] == logged and submitted[0].log == "none"
    assert "--log [none|tensorboard|mlflow]" in cli("tune", "--help").output


class Recorded(RunLog):
    enabled = True

    def __init__(self):
        super().__init__(RunConfig(loss="nngk"))
        self.logged = []

    def scalars(self, values, step):
        self.logged += [(step, tag, value) for tag, value in values.items()]


def test_step_losses_reach_the_log_at_each_read_with_their_global_steps():
    # Read every 2 steps (50 on a GPU): the log gets them at the reads, not a host sync a step.
    log = Recorded()
    losses = StepLosses(3, every=2, on_read=log.step_losses(epoch=2, steps_per_epoch=5))
    for value in (1.0, 2.0, 3.0):
        losses.add(torch.tensor(value))
    assert log.logged == [(11, "train/loss", 1.0), (12, "train/loss", 2.0)]
    assert losses.mean() == 2.0 and log.logged[-1] == (13, "train/loss", 3.0)
    assert RunLog().step_losses(2, 5) is None  # --log none: no callback at all


def test_an_epoch_row_becomes_tagged_scalars():
    log = Recorded()
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.25)
    row = {"epoch": 3, "train_loss": 1.5, "val_map@r": 0.5, "mean_kernel_value": 0.7}
    log.epoch({**row, "seconds": 2.0}, optimizer)
    assert sorted(log.logged) == [
        (3, "lr", 0.25),
        (3, "nngk/mean_kernel_value", 0.7),
        (3, "time/epoch_seconds", 2.0),
        (3, "train/epoch_loss", 1.5),
        (3, "val/map@r", 0.5),
    ]
