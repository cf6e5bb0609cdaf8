"""Equal-budget hyper-parameter search per loss with Optuna, on validation data only.

Every loss gets the same number of trials, the same epochs per trial and the same sampler: a
shifted Sobol sequence (bench.tune.sampler), which draws each trial's point by its number, so
processes that share a study draw different points, a restarted study goes on where it stopped,
and every loss is tried at the same learning rates and weight decays.

A trial trains one run per class fold (`classes:F/K`: validation classes never trained
on, k-fold over the training classes as in Musgrave et al.'s "A Metric Learning Reality Check")
and scores the mean of their best validation MAP@R. The test split is never embedded.

The study lives in an SQLite file under the results folder, or in any database Optuna takes
(`--storage postgresql://...`): workers on several machines then share it. A trial whose
process was killed stops sending heartbeats and is failed and retried by the next worker; its
runs resume from their checkpoints.

Each trial reports its validation score after every epoch to a pruner (`--pruner`, Hyperband by
default: bench.tune.pruning), which stops the trials that trail the others; the trials that
survive train every epoch of the budget. The loss's shipped default (its preset's learning rate,
weight decay and loss parameters) is the study's first trial, so the chosen settings are never
below the default on validation. The study ends after `trials` trials (complete or pruned) or
once its trials have trained `epoch_budget` epochs, whichever comes first.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from bench.runs import store
from bench.runs.config import RunConfig
from bench.train.compute import Compute
from bench.train.guards import DivergedAtStart
from bench.train.loaders import with_data_identity
from bench.train.presets import make_configs
from bench.train.trainer import Trainer
from bench.tune.budget import COMMON_SPACE, TuneSetup
from bench.tune.pruning import (
    DEFAULT,
    EPOCHS_REUSED,
    ReportingTrainer,
    count_epochs,
    counts,
    ended,
    epochs_trained,
    make_pruner,
    retried_on_interrupt,
    savings,
    skip,
    trials_table,
)
from bench.tune.sampler import SobolSampler
from bench.tune.storage import rdb_storage, storage_errors
from bench.tune.waiting import places_taken, wait_for_running
from bench.util.atomic import atomic_write_json
from bench.util.progress import log
from losses.registry import loss_defaults

# The matplotlib plots are "experimental" in Optuna, stable for our use.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_storage(results: Path) -> str:
    return f"sqlite:///{Path(results).resolve() / 'tune' / 'studies.db'}"


def open_study(setup: TuneSetup, loss: str, storage_url: str) -> optuna.Study:
    """The loss's study, created if new. Workers that start together may race to create the
    database's tables or the study (a unique-constraint error for the loser, or on PostgreSQL
    a type or table that already exists): it tries again."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    with storage_errors(storage_url):
        for attempt in range(2):
            try:
                return create_or_load(setup, loss, storage_url)
            except (IntegrityError, ProgrammingError):
                time.sleep(1 + attempt)
        return create_or_load(setup, loss, storage_url)


def create_or_load(setup: TuneSetup, loss: str, storage_url: str) -> optuna.Study:
    if storage_url.startswith("sqlite:///"):
        Path(storage_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    storage = rdb_storage(storage_url, setup.grace_s)
    sampler = SobolSampler(list(setup.space(loss)), seed=setup.seed)
    study = optuna.create_study(
        study_name=setup.study_name(loss),
        storage=storage,
        sampler=sampler,
        pruner=make_pruner(setup.pruner, setup.steps),
        direction="maximize",
        load_if_exists=True,
    )
    if not study.get_trials(deepcopy=False):
        defaults = default_params(setup, loss)
        study.enqueue_trial(defaults, user_attrs={DEFAULT: True}, skip_if_exists=True)
    return study


def preset_epochs(dataset: str, losses: list[str], settings: dict[str, Any]) -> int:
    """The epochs the data set's preset trains: every loss's trials take the longest of them
    (one number for all, so that the losses' budgets are equal)."""
    return max(make_configs(dataset, loss, None, {}, **settings)[0].epochs for loss in losses)


def pruning_line(study: optuna.Study, setup: TuneSetup) -> str:
    """What the study's trials trained, and what pruning saved against training them all."""
    saved = savings(study.get_trials(deepcopy=False), setup.steps)
    spent, full = saved["epochs_trained"], saved["epochs_unpruned"]
    reused = saved["epochs_reused"]
    read = f" and read {reused} from runs found finished" if reused else ""
    share = f" ({100 * (1 - (spent + reused) / full):.0f} % saved)" if full else ""
    return (
        f"{saved['trials']} trials ({saved['pruned']} pruned by {setup.pruner}) trained "
        f"{spent} epochs{read}, against {full} unpruned{share}"
    )


def default_params(setup: TuneSetup, loss: str) -> dict:
    """The loss's shipped settings in its search space: the preset's learning rate and weight
    decay on the data set, the preset's or the loss's own defaults for its parameters."""
    (cfg,) = make_configs(setup.dataset, loss, (setup.dims,), {}, **setup.settings)
    own = {**loss_defaults(loss), **cfg.loss_params}
    values = {"lr": cfg.lr, "weight_decay": cfg.weight_decay, **own}
    return {name: values[name] for name in setup.space(loss) if name in values}


def suggest(trial: optuna.Trial, space: dict[str, tuple[str, float, float]]) -> dict:
    values = {}
    for name, (kind, low, high) in space.items():
        if kind == "int":
            values[name] = trial.suggest_int(name, int(low), int(high))
        else:
            values[name] = trial.suggest_float(name, low, high, log=kind == "log")
    return values


def params_config(setup: TuneSetup, loss: str, params: dict, **given: Any) -> RunConfig:
    """The loss's run with these searched parameters (the run settings every loss searches,
    and its own, beside those held fixed), the settings held and `given` (a trial's epochs, a
    retrained run's seed)."""
    common = {k: params[k] for k in COMMON_SPACE}
    own = {k: v for k, v in params.items() if k not in COMMON_SPACE}
    own = {**own, **setup.fixed.get(loss, {})}
    (cfg,) = make_configs(
        setup.dataset, loss, (setup.dims,), own, **given, **common, **setup.settings
    )
    return cfg


def fold_splits(setup: TuneSetup) -> list[str]:
    """The validation splits of the class folds: `classes:F/K`, each fold's classes held out."""
    return [f"classes:{f}/{setup.folds}" for f in range(setup.folds)]


def trial_configs(setup: TuneSetup, loss: str, params: dict) -> list[RunConfig]:
    """One run per class fold with these parameters and the tuning budget."""
    base = replace(params_config(setup, loss, params, epochs=setup.epochs), seed=setup.seed)
    splits = fold_splits(setup) if setup.folds > 1 else ["classes"]
    return with_data_identity([replace(base, val_split=split) for split in splits])


def trial_score(
    configs: list[RunConfig], trials_dir: Path, compute: Compute, trial: optuna.Trial | None = None
) -> float:
    """Mean best validation score of the trial's runs (a finished run is read, not redone),
    trained on `compute` (as the command resolved it), each epoch reported to the trial's
    pruner where a `trial` is given. A run that diverges before its first epoch ends scores 0,
    the least MAP@R: the settings are the loss's to avoid, and the trial still counts against
    its budget."""
    scores = []
    for fold, cfg in enumerate(configs):
        run_dir = trials_dir / cfg.run_id()
        try:
            if store.is_finished(run_dir):
                metrics = store.read_metrics(run_dir)
                if trial is not None:
                    count_epochs(trial, cfg.epochs, EPOCHS_REUSED)
            elif trial is None:
                metrics = Trainer(cfg, run_dir, compute).fit(test=False)
            else:
                steps = {"offset": fold * cfg.epochs, "steps": len(configs) * cfg.epochs}
                trainer = ReportingTrainer(cfg, run_dir, compute, trial=trial, **steps)
                metrics = trainer.fit(test=False)
        except DivergedAtStart as err:
            log.warning(f"{err}: the trial scores 0")
            metrics = {"val_score": 0.0}
        scores.append(float(metrics["val_score"]))
    return sum(scores) / len(scores)


def objective(setup: TuneSetup, loss: str, trials_dir: Path, compute: Compute):
    space = setup.space(loss)

    def run_trial(trial: optuna.Trial) -> float:
        if budget_taken(trial, setup):  # the others' trials fill it: no extra trial
            trial.study.stop()
            raise skip(trial, "the study's trials are done or under way")
        params = suggest(trial, space)
        # Two workers drew one point: it counts once.
        if any(t.params == params for t in earlier(trial)):
            raise skip(trial, f"the same parameters as another trial: {params}")
        score = trial_score(trial_configs(setup, loss, params), trials_dir, compute, trial)
        log.info(f"{trial.study.study_name}: trial {trial.number} validation {score:.4f}")
        return score

    return retried_on_interrupt(run_trial)


def budget_taken(trial: optuna.Trial, setup: TuneSetup) -> bool:
    """Whether the trials before this one (done, pruned or under way) fill the budget of
    trials, or the study's trials have trained its epoch budget. Only trials before it: two
    workers that start the last trial at once then run one, not skip both."""
    if len(earlier(trial)) >= setup.trials:
        return True
    return epoch_budget_spent(trial.study.get_trials(deepcopy=False), setup)


def epoch_budget_spent(trials: list[optuna.trial.FrozenTrial], setup: TuneSetup) -> bool:
    """Whether the trials have trained the study's epoch budget (never without one)."""
    return setup.epoch_budget is not None and epochs_trained(trials) >= setup.epoch_budget


def earlier(trial: optuna.Trial) -> list[optuna.trial.FrozenTrial]:
    """The study's trials numbered before `trial` that take a place (`pruning.counts`)."""
    found = trial.study.get_trials(deepcopy=False)
    return [t for t in found if t.number < trial.number and counts(t)]


def tune_loss(
    setup: TuneSetup, loss: str, storage_url: str, results: Path, compute: Compute
) -> optuna.Study:
    """Run this process's share of the study's trials on `compute` (resolved once by the
    command, or by the job), until the study has `trials` complete ones (with other
    processes on the same study, between them)."""
    study = open_study(setup, loss, storage_url)
    with storage_errors(storage_url):  # the server lost while the trials run
        while not study_done(study, setup):
            done = len(ended(study.get_trials(deepcopy=False)))  # took their place and ended
            log.info(f"{study.study_name}: {done} of {setup.trials} trials done")
            if not places_taken(study, setup.trials):
                trials_dir = Path(results) / "tune" / "trials"
                stop = [stop_when_done(setup)]
                run_trial = objective(setup, loss, trials_dir, compute)
                study.optimize(run_trial, setup.trials, callbacks=stop)
            if not study_done(study, setup):  # its last trials under way, or left by a kill
                wait_for_running(study, setup.grace_s)
    return study


def study_done(study: optuna.Study, setup: TuneSetup) -> bool:
    trials = study.get_trials(deepcopy=False)
    return len(ended(trials)) >= setup.trials or epoch_budget_spent(trials, setup)


def stop_when_done(setup: TuneSetup):
    """A callback that stops this worker once the study has its trials or its epochs, or
    trials under way take its last places (`tune_loss` waits for them)."""

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if study_done(study, setup) or places_taken(study, setup.trials):
            study.stop()

    return callback


def best_params(study: optuna.Study) -> dict:
    return dict(study.best_trial.params)


def write_summary(study: optuna.Study, setup: TuneSetup, loss: str, results: Path) -> Path:
    """results/tune/<study>/: best.json (the chosen parameters), trials.csv, and Optuna's
    optimisation history and parameter importances as PNG."""
    out = Path(results) / "tune" / study.study_name
    trials = study.trials_dataframe(attrs=("number", "value", "params", "state", "user_attrs"))
    trials = trials_table(trials)
    (out).mkdir(parents=True, exist_ok=True)
    trials.to_csv(out / "trials.csv", index=False)
    record = {
        "loss": loss,
        "study": study.study_name,
        "setup": setup.__dict__,
        "best_value": study.best_value,
        "best_params": best_params(study),
        "fixed_params": setup.fixed.get(loss, {}),  # tune --loss-param: held, not searched
        "trials": len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))),
        "pruning": savings(study.get_trials(deepcopy=False), setup.steps),
    }
    atomic_write_json(out / "best.json", record)
    save_plots(study, out)
    return out


def save_plots(study: optuna.Study, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    plots = {"history.png": ovm.plot_optimization_history}
    # Importances need trials whose scores differ: equal scores (every trial diverged, scoring
    # 0) have none to show, and Optuna 4 raises on them.
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len({trial.value for trial in complete}) > 1:
        plots["importance.png"] = ovm.plot_param_importances
    # Optuna's plots switch the process's matplotlib style to ggplot (7 colours a cycle);
    # keep that to them, not to every figure drawn after them.
    with matplotlib.rc_context():
        for name, plot in plots.items():
            ax = plot(study)
            ax.figure.tight_layout()
            ax.figure.savefig(out / name, dpi=100)
            plt.close(ax.figure)


def tuned_configs(
    study: optuna.Study,
    setup: TuneSetup,
    loss: str,
    seeds: tuple[int, ...],
    epochs: int | None,
    cross_validate: bool = False,
) -> list[RunConfig]:
    """The best parameters, trained as a normal run (the preset's validation split and
    epochs unless `epochs`) once per seed, each tested once; report's `<table>-tuned` table.
    `cross_validate`: once per seed and class fold instead, each fold's validation classes
    held out (Musgrave et al. 2020's final models; report's `<table>-tuned-folds`)."""
    configs, best = [], best_params(study)  # the study's best trial, read from its storage once
    for seed in seeds:
        cfg = params_config(setup, loss, best, seed=seed, epochs=epochs)
        cfg = replace(cfg, preset="tuned", tuned=study.study_name)
        if not cross_validate:
            configs.append(cfg)
            continue
        configs += [replace(cfg, val_split=split) for split in fold_splits(setup)]
    return configs
