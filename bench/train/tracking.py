"""Experiment logging (`--log`): a run's hyper-parameters, its training loss at every step and
its per-epoch metrics (validation, learning rate, the loss's own statistics, seconds) and test
metrics, to TensorBoard (event files in the run folder) or MLflow (a local SQLite store beside
the runs), so that a sweep can be browsed while it trains. Both packages are optional
(`pip install 'nngk-bench[log]'`); only the first process of a run logs.

Tags: `train/loss` at the global step (epoch * steps per epoch + step, from 1), and at the
epoch: `train/epoch_loss`, `val/<metric>`, `lr`, `<loss>/<statistic>` (e.g. `nngk/
mean_kernel_value`), `time/epoch_seconds`; `test/<metric>` at the tested epoch. MLflow's names
allow no `@`: there `val/map@r` reads `val/map_at_r`."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from collections.abc import Callable
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.protocols import shown_protocol
from bench.util.errors import first_line
from bench.util.progress import log

if TYPE_CHECKING:
    import numpy as np
    import torch

    from bench.runs.config import RunConfig

LOG_KINDS = ("none", "tensorboard", "mlflow")  # each but none needs the module of its name
TENSORBOARD_DIR = "tensorboard"
MLFLOW_RUN_FILE = "mlflow_run_id.txt"  # a resumed run continues its MLflow run
MLFLOW_DB = "mlflow.db"
MLFLOW_ARTIFACTS = "mlartifacts"  # none are logged, but an MLflow experiment names a folder
FLUSH_EVERY = 500  # MLflow metrics kept before a write (a write takes ~20 ms on SQLite)


def require(kind: str) -> None:
    """A one-line ValueError for an unknown kind, one naming the install when its package is
    missing, or one naming $MLFLOW_TRACKING_URI's SQLite file where it cannot be written."""
    if kind not in LOG_KINDS:
        raise ValueError(f"unknown --log {kind!r}; expected one of {', '.join(LOG_KINDS)}")
    if kind != "none" and importlib.util.find_spec(kind) is None:
        package = "mlflow-skinny" if kind == "mlflow" else kind
        raise ValueError(
            f"--log {kind} needs the {kind} package: pip install 'nngk-bench[log]' "
            f"(or pip install {package})"
        )
    if kind == "mlflow" and os.environ.get("MLFLOW_TRACKING_URI"):  # before any run is written
        check_sqlite_store(os.environ["MLFLOW_TRACKING_URI"])
        check_server(os.environ["MLFLOW_TRACKING_URI"])


class RunLog:
    """The interface, logging nothing (`--log none`); a context manager that closes the log
    with the run's status."""

    enabled = False

    def __init__(self, cfg: RunConfig | None = None):
        self.stats_prefix = cfg.loss if cfg is not None else "loss"

    def params(self, values: dict[str, Any]) -> None:
        """The run's hyper-parameters (flat: `loss_params.sigma`)."""

    def scalars(self, values: dict[str, float], step: int) -> None:
        """Values by tag at a step."""

    def flush(self) -> None:
        """Write what is kept so far."""

    def close(self, status: str = "FINISHED") -> None:
        """Flush and end the log: FINISHED, FAILED or KILLED."""

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, kind, error, trace) -> None:
        failed = "KILLED" if kind is not None and issubclass(kind, KeyboardInterrupt) else "FAILED"
        self.close("FINISHED" if kind is None else failed)

    def step_losses(
        self, epoch: int, steps_per_epoch: int
    ) -> Callable[[int, np.ndarray], None] | None:
        """For `StepLosses`: the losses it reads, from its step `first` (1 = the epoch's
        first), as `train/loss` at their global steps; None when nothing is logged."""
        if not self.enabled:
            return None
        start = epoch * steps_per_epoch

        def log_steps(first: int, values: np.ndarray) -> None:
            for i, value in enumerate(values.tolist()):
                self.scalars({"train/loss": value}, start + first + i)

        return log_steps

    def epoch(self, row: dict[str, Any], optimizer: torch.optim.Optimizer) -> None:
        """An epoch's row of history.csv, and the learning rate, at the epoch's number."""
        values = epoch_tags(row, self.stats_prefix)
        values["lr"] = float(optimizer.param_groups[0]["lr"])
        self.scalars(values, int(row["epoch"]))
        self.flush()

    def test(self, metrics: dict[str, Any], epoch: int) -> None:
        """The test metrics of the checkpoint tested, at its epoch."""
        self.scalars({f"test/{k}": v for k, v in metrics.items() if is_number(v)}, epoch)


def is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def epoch_tags(row: dict[str, Any], stats_prefix: str) -> dict[str, float]:
    """A history.csv row's numbers by tag; what is neither the loss, validation nor time is
    the loss's `epoch_stats`."""
    named = {"train_loss": "train/epoch_loss", "seconds": "time/epoch_seconds"}
    tags = {}
    for key, value in row.items():
        if key == "epoch" or not is_number(value):
            continue
        if key.startswith("val_"):
            tags[f"val/{key[4:]}"] = float(value)
        else:
            tags[named.get(key, f"{stats_prefix}/{key}")] = float(value)
    return tags


def hyper_parameters(cfg: RunConfig) -> dict[str, Any]:
    """The config, flat, with the loss's parameters resolved (its defaults and the given ones)
    and the run's id; values that are not numbers or text as text."""
    from losses import loss_defaults

    record = {
        **cfg.to_dict(),
        "loss_params": {**loss_defaults(cfg.loss), **cfg.loss_params},
        "run_id": cfg.run_id(),
    }
    flat = {}
    for key, value in record.items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for name, v in items:
            plain = isinstance(v, (bool, int, float, str))
            flat[f"{key}.{name}" if name else key] = v if plain else str(v)
    return flat


class TensorBoardLog(RunLog):
    """Event files in `<run folder>/tensorboard/` (a resumed run adds a file). The
    hyper-parameters go to the HParams tab (a session per run, so that `tensorboard --logdir
    results` compares the runs by them and by every scalar) and, whole, to the Text tab."""

    enabled = True

    def __init__(self, run_dir: Path, cfg: RunConfig):
        from torch.utils.tensorboard import SummaryWriter

        super().__init__(cfg)
        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / TENSORBOARD_DIR))
        self.restarted = False

    def step_losses(
        self, epoch: int, steps_per_epoch: int
    ) -> Callable[[int, np.ndarray], None] | None:
        if not self.restarted:  # a run resumed mid-epoch logs that epoch's steps again
            self.restart_at(epoch * steps_per_epoch + 1)
        return super().step_losses(epoch, steps_per_epoch)

    def restart_at(self, step: int) -> None:
        """TensorBoard's restart mark: it hides what earlier files logged from `step` on (the
        epochs' tags, at steps up to the epoch's number, stay)."""
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        start = SessionLog(status=SessionLog.START)
        self.writer.file_writer.add_event(Event(step=step, session_log=start))
        self.restarted = True

    def params(self, values: dict[str, Any]) -> None:
        from torch.utils.tensorboard.summary import hparams

        # Only the session's start: with no experiment summary, TensorBoard gathers the columns
        # from every run's session and every scalar tag, runs of different losses included.
        _, session_start, _ = hparams(values, {})
        self.writer.file_writer.add_summary(session_start)
        text = json.dumps(values, indent=2)
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, status: str = "FINISHED") -> None:
        self.writer.close()


def mlflow_store(results: Path) -> tuple[str, str | None]:
    """The tracking URI and the artifacts' folder of new experiments: $MLFLOW_TRACKING_URI and
    its own; else a SQLite file beside the runs (MLflow 3 refuses its file store unless
    $MLFLOW_ALLOW_FILE_STORE is set), artifacts beside it (not in the working folder)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    results = Path(results).resolve()
    return f"sqlite:///{results / MLFLOW_DB}", (results / MLFLOW_ARTIFACTS).as_uri()


def check_sqlite_store(uri: str) -> None:
    """A one-line ValueError where an SQLite store cannot be written (its folder read-only or
    not creatable): MLflow would retry for 100 s, then end in SQLAlchemy's traceback."""
    import sqlite3

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(uri)
    except ArgumentError:
        return  # not a database URL: MLflow's own store, or its error
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    path = Path(url.database)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as db:
            db.execute("BEGIN IMMEDIATE")  # takes the write lock: fails where none is allowed
            db.rollback()
        db.close()
    except (OSError, sqlite3.Error) as err:
        raise ValueError(
            f"--log mlflow: cannot write the tracking store {path} ({err}); point "
            "$MLFLOW_TRACKING_URI at a file in a folder you can write, or unset it "
            "(RESULTS/mlflow.db)"
        ) from None


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """A one-line ValueError where an http(s) tracking server does not answer: MLflow retries
    each request for minutes before it fails."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as err:
        raise ValueError(
            f"--log mlflow: the tracking server {uri} does not answer ({err}); start it "
            "(mlflow server), or unset $MLFLOW_TRACKING_URI to log into RESULTS/mlflow.db"
        ) from None


def mlflow_name(tag: str) -> str:
    """A tag as MLflow takes it: letters, digits, `_-. /:` only."""
    return re.sub(r"[^\w.\- /:]", "_", tag.replace("@", "_at_"))


class MlflowLog(RunLog):
    """A run of the experiment named after the data set (and protocol), named by the run id;
    its MLflow id is kept in the run folder, so that a resumed run continues it."""

    enabled = True

    def __init__(self, run_dir: Path, cfg: RunConfig):
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        super().__init__(cfg)
        run_dir = Path(run_dir)
        # A forced rerun trains in a staging folder beside the others: its parent is the results.
        uri, self.artifacts = mlflow_store(run_dir.parent)
        self.pending: list = []
        check_sqlite_store(uri)
        try:
            self.client = MlflowClient(tracking_uri=uri)
            self.run_id = self.resumed(run_dir) or self.started(run_dir, cfg)
        except MlflowException as err:
            raise ValueError(f"--log mlflow: cannot log to {uri} ({first_line(err)})") from None

    def resumed(self, run_dir: Path) -> str | None:
        from mlflow.exceptions import MlflowException

        saved = run_dir / MLFLOW_RUN_FILE
        if not saved.is_file():
            return None
        run_id = saved.read_text().strip()
        try:
            self.client.update_run(run_id, status="RUNNING")
        except MlflowException:  # another store ($MLFLOW_TRACKING_URI), or a deleted run
            return None
        return run_id

    def started(self, run_dir: Path, cfg: RunConfig) -> str:
        from mlflow.exceptions import MlflowException

        from bench.util.atomic import atomic_write_text

        name = f"{cfg.dataset} ({cfg.protocol})" if shown_protocol(cfg.protocol) else cfg.dataset
        experiment = self.client.get_experiment_by_name(name)
        try:
            experiment_id = experiment.experiment_id if experiment else None
            experiment_id = experiment_id or self.client.create_experiment(name, self.artifacts)
        except MlflowException:  # created by another process meanwhile
            experiment_id = self.client.get_experiment_by_name(name).experiment_id
        run_id = self.client.create_run(experiment_id, run_name=cfg.run_id()).info.run_id
        atomic_write_text(run_dir / MLFLOW_RUN_FILE, run_id + "\n")
        return run_id

    def params(self, values: dict[str, Any]) -> None:
        from mlflow.entities import Param

        # A resumed run keeps what it logged: MLflow refuses to change a parameter.
        known = self.client.get_run(self.run_id).data.params
        named = {mlflow_name(k): str(v) for k, v in values.items()}
        new = [Param(k, v) for k, v in named.items() if k not in known]
        for i in range(0, len(new), 100):  # MLflow's limit per call
            self.client.log_batch(self.run_id, params=new[i : i + 100])

    def scalars(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.pending += [Metric(mlflow_name(k), float(v), now, step) for k, v in values.items()]
        if len(self.pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Write the metrics kept; a store that fails (a locked SQLite file) costs a warning,
        not the run: they are kept for the next write."""
        from mlflow.exceptions import MlflowException

        try:
            while self.pending:
                self.client.log_batch(self.run_id, metrics=self.pending[:1000])
                self.pending = self.pending[1000:]
        except MlflowException as err:
            log.warning(f"MLflow: {first_line(err)}; {len(self.pending)} values kept to retry")

    def close(self, status: str = "FINISHED") -> None:
        from mlflow.exceptions import MlflowException

        self.flush()
        try:
            self.client.set_terminated(self.run_id, status)
        except MlflowException as err:
            log.warning(f"MLflow: the run's status not written ({first_line(err)})")


def open_run_log(kind: str, run_dir: Path, cfg: RunConfig) -> RunLog:
    """The run's log of `kind` (none, tensorboard, mlflow), its hyper-parameters logged; a
    one-line ValueError naming the install when the package is missing."""
    require(kind)
    if kind == "none":
        return RunLog(cfg)
    run_log = TensorBoardLog(run_dir, cfg) if kind == "tensorboard" else MlflowLog(run_dir, cfg)
    run_log.params(hyper_parameters(cfg))
    return run_log
