"""The pruned search: the loss's shipped default as the first trial (never pruned), trials
pruned at an epoch where they trail, the epochs they trained counted, and the Sobol points
drawn by trial number."""

import json
import math

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from bench.tune.choices import PRUNER_NAMES
from bench.tune.pruning import EPOCHS_TRAINED, SKIPPED, savings
from bench.tune.sampler import SobolSampler, from_unit, sobol_point
from bench.tune.study import TuneSetup, default_params, default_storage, open_study
from tests.conftest import cli


def test_sobol_points_by_trial_number_share_lr_and_weight_decay_across_losses():
    points = [sobol_point(n, 4, 0) for n in range(64)]
    assert len(set(points)) == 64  # no two trial numbers draw one point
    assert all(0 <= u < 1 for p in points for u in p)
    # The first coordinates (lr, weight decay) do not depend on how many parameters follow.
    assert [p[:2] for p in points] == [sobol_point(n, 2, 0)[:2] for n in range(64)]
    # Low discrepancy: each quarter of each coordinate holds a quarter of 64 points.
    for d in range(4):
        quarters = [sum(int(4 * p[d]) == q for p in points) for q in range(4)]
        assert quarters == [16, 16, 16, 16], (d, quarters)
    assert sobol_point(5, 4, 1) != sobol_point(5, 4, 0)  # the seed shifts the sequence


def test_unit_values_map_onto_log_linear_and_integer_ranges():
    lr = FloatDistribution(1e-4, 1e-1, log=True)
    assert math.isclose(from_unit(0.0, lr), 1e-4) and math.isclose(from_unit(0.5, lr), 10**-2.5)
    assert math.isclose(from_unit(0.25, FloatDistribution(0.0, 2.0)), 0.5)
    k = IntDistribution(20, 23)
    assert [from_unit(u, k) for u in (0.0, 0.24, 0.26, 0.74, 0.76, 0.999)] == [
        20,
        20,
        21,
        22,
        23,
        23,
    ]


def test_the_study_starts_with_the_loss_default_once(tmp_path):
    setup = TuneSetup("glyphs", 64, 4, 2)
    url = default_storage(tmp_path)
    # The glyphs preset's NNGK: lr 0.001, weight decay 5e-4, sigma 1 and k 100.
    expected = {"lr": 0.001, "weight_decay": 5e-4, "sigma": 1.0, "k": 100}
    assert default_params(setup, "nngk") == expected
    study = open_study(setup, "nngk", url)
    open_study(setup, "nngk", url)  # a second worker opening it enqueues nothing more
    (waiting,) = study.get_trials(states=(TrialState.WAITING,))
    assert waiting.system_attrs["fixed_params"] == expected
    sampler = study.sampler
    assert isinstance(sampler, SobolSampler) and sampler.names == [
        "lr",
        "weight_decay",
        "sigma",
        "k",
    ]


def lr_score(monkeypatch):
    """Validation scores made a function of the learning rate alone (best at 0.01), so which
    trials trail at an epoch does not depend on training's noise; training itself is real."""
    from bench.train.trainer import Trainer

    real = Trainer.validate

    def validate(self, epoch):
        metrics = real(self, epoch)
        metrics["score"] = -abs(math.log10(self.cfg.lr) + 2)
        return metrics

    monkeypatch.setattr(Trainer, "validate", validate)


def test_pruned_trials_stop_early_and_their_epochs_are_counted(tmp_path, monkeypatch):
    lr_score(monkeypatch)
    args = ["tune", "--dataset", "digits", "--dims", "8", "--loss", "contrastive"]
    args += ["--trials", "4", "--epochs", "2", "--pruner", "halving", "--no-retrain"]
    out = cli(*args, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    setup = TuneSetup("digits", 8, 4, 2, pruner="halving")
    study = open_study(setup, "contrastive", default_storage(tmp_path))
    trials = [t for t in study.trials if SKIPPED not in t.user_attrs]
    assert len(trials) == 4
    assert trials[0].params["lr"] == 0.001 and trials[0].state == TrialState.COMPLETE  # default
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert pruned and complete
    for t in trials:  # an epoch counted for each score reported
        assert t.user_attrs[EPOCHS_TRAINED] == len(t.intermediate_values)
    assert all(t.user_attrs[EPOCHS_TRAINED] < 2 for t in pruned)
    assert all(t.user_attrs[EPOCHS_TRAINED] == 2 for t in complete)
    # A pruned trial trailed every trial before it at its last epoch (halving, few trials).
    for t in pruned:
        step = max(t.intermediate_values)
        before = [o.intermediate_values[step] for o in trials if o.number < t.number]
        assert t.intermediate_values[step] < max(before)
    assert study.best_value >= trials[0].value  # never below the default on validation
    spent = sum(t.user_attrs[EPOCHS_TRAINED] for t in trials)
    best = json.loads((tmp_path / "tune" / study.study_name / "best.json").read_text())
    assert best["pruning"] == savings(study.trials, 2)
    assert best["pruning"]["epochs_trained"] == spent and best["pruning"]["epochs_unpruned"] == 8
    saved = round(100 * (1 - spent / 8))
    line = f"4 trials ({len(pruned)} pruned by halving) trained {spent} epochs, against 8 unpruned"
    assert f"{line} ({saved} % saved)" in out.output
    from bench.report.tuning import tuning_files  # the report's tuning.md says the same

    budget = f"4 trials ({len(pruned)} pruned by halving) of 2 epochs, 1 fold(s): {spent} of 8"
    assert budget in tuning_files(tmp_path)["tuning.md"].decode()


def test_an_epoch_budget_ends_the_search(tmp_path, monkeypatch):
    lr_score(monkeypatch)
    args = ["tune", "--dataset", "digits", "--dims", "8", "--loss", "contrastive", "--no-retrain"]
    args += ["--trials", "50", "--epochs", "2", "--pruner", "none", "--epoch-budget", "5"]
    out = cli(*args, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    setup = TuneSetup("digits", 8, 50, 2, pruner="none", epoch_budget=5)
    study = open_study(setup, "contrastive", default_storage(tmp_path))
    trained = [t for t in study.trials if SKIPPED not in t.user_attrs]
    # Trials start while fewer than 5 epochs are spent: the third (epochs 5 and 6) is the last.
    assert [t.user_attrs[EPOCHS_TRAINED] for t in trained] == [2, 2, 2]
    assert "3 trials (0 pruned by none) trained 6 epochs, against 6 unpruned" in out.output


@pytest.mark.parametrize("name", PRUNER_NAMES)
def test_every_pruner_is_made_for_the_trials_steps(name):
    from bench.tune.pruning import make_pruner

    assert isinstance(make_pruner(name, 6), optuna.pruners.BasePruner)
