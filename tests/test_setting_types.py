"""A run setting's values declared once, in its field's type (bench/runs/values.py: `Bounds`,
`OneOf`): `run` takes and refuses what the field declares, in the same one-line words as before
the declarations moved there (issue 67), and a choice list the command line cannot import
(its module imports torch or faiss) is the one its module reads."""

import click
import pytest

from bench.cli.run import run
from bench.runs.config import RunConfig, declared_values
from bench.runs.values import Bounds, OneOf


def declared(name: str):
    """What the field `name` declares beyond its type (`Bounds` or `OneOf`), else None."""
    return declared_values(name)[1]


def given(option: str, value: str):
    """The option's value as `run` reads it, or its one-line error after "Invalid value for
    '--option': "."""
    try:
        return run.make_context("run", [option, value]).params[option[2:].replace("-", "_")]
    except click.BadParameter as err:
        return err.format_message().removeprefix(f"Invalid value for '{option}': ")


def test_the_choices_the_command_line_cannot_import_are_those_the_modules_read():
    from bench.data.crops import CROP_MODES
    from bench.evaluation.metrics import CLUSTERING

    assert declared("crop_mode") == OneOf(CROP_MODES)
    assert declared("clustering") == OneOf(tuple(CLUSTERING))


@pytest.mark.parametrize(
    "option, value, read",
    [
        ("--epochs", "1", 1),
        ("--epochs", "0", "0 is not in the range x>=1."),
        ("--train-per-class", "0", "0 is not in the range x>=1."),
        ("--warmup-epochs", "0", 0),
        ("--pad", "-1", "-1 is not in the range x>=0."),
        ("--batch-size", "2", 2),
        ("--batch-size", "1", "1 is not in the range x>=2."),
        ("--workers", "0.5", "'0.5' is not a valid integer range."),
        ("--lr", "0", 0.0),
        ("--lr", "-0.1", "-0.1 is not in the range x>=0."),
        ("--weight-decay", "nan", "nan is not a finite number"),
        ("--embedding-lr", "0", "0.0 is not in the range x>0."),
        ("--momentum", "1", 1.0),
        ("--momentum", "inf", "inf is not in the range 0<=x<=1."),
        ("--val-fraction", "0", 0.0),
        ("--val-fraction", "1", "1.0 is not in the range 0<=x<1."),
        ("--crop-mode", "aspect", "aspect"),
        ("--crop-mode", "fit", "'fit' is not one of 'squash', 'aspect'."),
        ("--clustering", "pml", "pml"),
    ],
)  # fmt: skip
def test_run_takes_and_refuses_what_the_field_declares(option, value, read):
    assert given(option, value) == read


def test_every_bounded_setting_refuses_a_value_beyond_its_bound_and_takes_the_bound():
    for name in RunConfig.__dataclass_fields__:
        bounds = declared(name)
        if not isinstance(bounds, Bounds):
            continue
        option, least = "--" + name.replace("_", "-"), bounds.min
        step = 1 if isinstance(getattr(RunConfig(), name), int) else 0.5
        assert isinstance(given(option, str(least - step)), str), name  # an error
        assert given(option, str(least)) == least or bounds.min_open, name


def test_click_errors_makes_the_kinds_named_one_line_and_lets_others_through():
    from bench.cli.options import click_errors
    from bench.util.errors import first_line

    with pytest.raises(click.ClickException, match="^bad value$"):
        with click_errors():
            raise ValueError("bad value")
    with pytest.raises(click.ClickException) as caught:
        with click_errors(ValueError, RuntimeError, line=first_line):
            raise RuntimeError("CUDA out of memory\nTraceback ...")
    assert caught.value.message == "CUDA out of memory"
    with pytest.raises(KeyError):
        with click_errors():
            raise KeyError("not a check's")
