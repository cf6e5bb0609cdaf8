"""Each run setting is declared once, on its RunConfig field (issue 67, step 1): whether it is
hashed only where set, held by `tune`, a recipe stated in the setup line, and how it reads in a
row's label. Each derived use is tested here by what it does, for every field declaring it."""

from dataclasses import fields, replace

import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.report.runs import load_runs
from bench.report.setup import setup_line
from bench.report.texts import setting_text
from bench.runs.config import RunConfig, declared
from tests.setting_values import other
from tests.test_report_tables import make_run

DEFAULTS = RunConfig()


def test_a_setting_hashed_only_where_set_keeps_every_earlier_run_id():
    # digits' default run id on main before any if_set setting existed (commit 6bc9b62)
    assert DEFAULTS.run_id() == "digits-nngk-d64-s0-104c3c42"
    for name in declared("if_set"):
        assert replace(DEFAULTS, **{name: other(name)}).run_id() != DEFAULTS.run_id(), name


def test_tune_holds_each_held_setting_as_an_option():
    out = CliRunner().invoke(main, ["tune", "--help"], terminal_width=200)
    assert out.exit_code == 0
    for name in declared("held"):
        assert f"--{name.replace('_', '-')}" in out.output, name


@pytest.mark.parametrize("name", declared("recipe"))
def test_a_recipe_some_run_set_is_stated_in_the_setup_line(tmp_path, name):
    r = tmp_path / "r"
    make_run(r, "plain", loss="contrastive", dataset="cub")
    set_one = make_run(r, "set", loss="nngk", dataset="cub", **{name: other(name)})
    df = load_runs(r)[0]
    assert set_one.name in set(df["run"])
    line = setup_line(df[df["dataset"] == "cub"])
    text = setup_line(df[df["run"] == "plain"])
    assert line != text, name  # the plain run's setup states no recipe
    # The wording of the recipes committed reports state, pinned; a new one reads as its label.
    expected = {
        "pooling": "max pooling",
        "warmup_epochs": "warm-up epochs 1",
        "schedule": "cosine lr schedule",
        "freeze_bn": "frozen BN",
        "crop_scale": "crop area 0.16,1",
    }.get(name) or setting_text(name, other(name))
    assert expected in line


def test_each_declared_label_reads_in_a_row_that_differs_in_it(tmp_path):
    r = tmp_path / "r"
    make_run(r, "plain", loss="contrastive", dataset="cub", lr=0.01, epochs=10)
    make_run(r, "other", loss="contrastive", dataset="cub", lr=0.001, epochs=20)
    names = load_runs(r)[0].set_index("run")["name"]
    assert names["plain"] == "contrastive, lr=0.01, 10 epochs"
    assert names["other"] == "contrastive, lr=0.001, 20 epochs"


def test_every_field_has_its_help():
    for f in fields(RunConfig):
        assert f.metadata["help"], f.name
