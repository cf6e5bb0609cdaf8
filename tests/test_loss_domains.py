"""Loss parameters checked against their declared domains (losses/domains.py) when the command
is read (issue 69, item 13): a value out of its range, or of the wrong type, is a one-line error
naming the parameter and its range before the data loads, for the curated losses and `pml:`
ones alike; and no declared domain refuses a loss's default."""

import pytest
from click.testing import CliRunner
from pytorch_metric_learning.losses import BaseMetricLossFunction

from bench.cli import main
from losses.base import PMLLoss
from losses.domains import COUNT_OR_ALL, POSITIVE, Domain
from losses.pml_adapter import pml_loss_names
from losses.registry import build_loss, check_domains, get_loss_class, loss_defaults, loss_names

DATA = ["--dataset", "glyphs:classes=20", "--epochs", "1", "--dims", "16"]


@pytest.mark.parametrize(
    "loss, param, message",
    [
        # Each ended in a traceback after the data loaded: ZeroDivisionError, or TypeError.
        ("pml:HistogramLoss", "n_bins=0", "n_bins=0: n_bins is an integer >= 1"),
        ("fastap", "num_bins=0", "num_bins=0: num_bins is an integer >= 1"),
        ("histogram", "num_bins=0", "num_bins=0: num_bins is an integer >= 1"),
        ("multi-similarity", "alpha=0", "alpha=0: alpha is a number > 0"),
        (
            "pml:MarginLoss",
            "triplets_per_anchor=abc",
            "triplets_per_anchor=abc: triplets_per_anchor is an integer >= 1 or 'all'",
        ),
        # The curated name and its pml: spelling share one declaration.
        ("pml:FastAPLoss", "num_bins=2.5", "num_bins=2.5: num_bins is an integer >= 1"),
        ("pml:MultiSimilarityLoss", "beta=-1", "beta=-1: beta is a number > 0"),
        ("pml:SphereFaceLoss", "margin=0.5", "margin is a whole multiple of the angle"),
        # A negative regulariser: the run diverged, and the error blamed --lr (issue 69, 19).
        ("npair", "l2_reg=-1", "l2_reg=-1: l2_reg is a number >= 0"),
    ],
)
def test_a_parameter_out_of_its_domain_is_a_one_line_error_before_the_data(
    loss, param, message, tmp_path, monkeypatch
):
    def no_data(*_, **__):
        raise AssertionError("the data loaded before the parameters were checked")

    monkeypatch.setattr("bench.cli.run.checked_configs", no_data)
    args = ["run", "--loss", loss, "--loss-param", param, *DATA, "--results", str(tmp_path)]
    out = CliRunner().invoke(main, args)
    lines = out.output.strip().splitlines()
    assert out.exit_code != 0 and len(lines) == 1, out.output
    assert message in lines[0], out.output
    assert not any(tmp_path.iterdir())


def test_a_short_spelling_is_checked_against_the_same_domain(tmp_path):
    args = ["run", "--loss", "large-margin-softmax", "--margin", "0.5", *DATA]
    out = CliRunner().invoke(main, [*args, "--results", str(tmp_path)])
    (line,) = out.output.strip().splitlines()
    assert "bad --margin 0.5: margin is a whole multiple of the angle: an integer >= 1" in line
    assert out.exit_code != 0 and not any(tmp_path.iterdir())


@pytest.mark.parametrize("loss", loss_names() + pml_loss_names())
def test_no_domain_refuses_a_default(loss):
    check_domains(loss, loss_defaults(loss))


@pytest.mark.parametrize("loss", loss_names())
def test_a_curated_loss_declares_the_pml_class_it_builds(loss):
    # Its parameters' domains are that class's: a wrapper that named another would check its
    # parameters against the wrong declaration.
    built = build_loss(loss, {}, num_train=100, num_classes=10, dims=8)
    inner = built.loss if isinstance(built, PMLLoss) else None
    expected = type(inner) if isinstance(inner, BaseMetricLossFunction) else None
    assert get_loss_class(loss).pml_class is expected


def test_build_loss_checks_the_domains_too():
    with pytest.raises(ValueError, match="n_bins=0: n_bins is an integer >= 1"):
        build_loss("pml:HistogramLoss", {"n_bins": 0})


@pytest.mark.parametrize(
    "domain, inside, outside",
    [
        (COUNT_OR_ALL, [1, 7, "all", 3.0], [0, -1, 2.5, "some", True, float("inf")]),
        (POSITIVE, [1e-9, 2, 50.0], [0, -0.1, float("nan"), "x"]),
        (Domain(float, 0, True, 90, True), [1, 89.9], [0, 90, 91]),
    ],
)
def test_a_domain_holds_its_values_only(domain, inside, outside):
    assert all(domain.holds(v) for v in inside)
    assert not any(domain.holds(v) for v in outside)


@pytest.mark.parametrize("loss", ["contrastive", "pml:ContrastiveLoss"])
def test_margins_in_the_wrong_order_are_refused(loss, tmp_path):
    # pos_margin=1 neg_margin=0 trained with the margins inverted: positives pushed out to 1,
    # negatives never penalised (bad inputs #26).
    params = ["--loss-param", "pos_margin=1", "--loss-param", "neg_margin=0"]
    args = ["run", "--loss", loss, *params, *DATA, "--results", str(tmp_path)]
    out = CliRunner().invoke(main, args)
    lines = out.output.strip().splitlines()
    assert out.exit_code != 0 and len(lines) == 1, out.output
    assert f"{loss} needs pos_margin < neg_margin" in lines[0]
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="needs pos_margin < neg_margin"):
        check_domains(loss, {"pos_margin": 1.0})  # against the default neg_margin too
    check_domains(loss, {"pos_margin": 0.1, "neg_margin": 0.9})  # in order: taken
