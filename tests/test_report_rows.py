"""A row of a table is one configuration (issue 43): runs that differ in any setting that changes
what a run computes are rows of their own, named by what differs; the settings that tell rows
apart are RunConfig's hashed fields, not a list kept by hand."""

from __future__ import annotations

from dataclasses import fields

import pytest

from bench.report.runs import KEYED, load_runs
from bench.report.write import write_report
from bench.runs.config import NOT_HASHED, RunConfig
from bench.train.presets import make_configs
from tests.setting_values import other
from tests.test_report_tables import make_run, md_rows

# Each a run of contrastive on digits beside the plain one: --momentum 0.5, --optimizer adam,
# --val-fraction 0.3, --memory 128, --weight-decay 0.01 (issue 43), --pooling max (digits are
# never resized or cropped: --resize and --crop tell no digits run apart, tests/
# test_unused_settings.py).
VARIANTS = {
    "momentum": ({"momentum": 0.5}, "momentum 0.5"),
    "adam": ({"optimizer": "adam"}, "adam"),
    "val": ({"val_fraction": 0.3}, "validation fraction 0.3"),
    "memory": ({"memory": 128}, "memory 128"),
    "decay": ({"weight_decay": 0.01}, "weight decay 0.01"),
    "pooling": ({"pooling": "max"}, "max pooling"),
}


def test_every_setting_that_changes_a_run_tells_rows_apart(tmp_path):
    # A CUB run, whose images are resized and cropped, and a run beside it for each setting
    # hashed into the run's id (but those that name its table or seed), differing in it alone.
    r = tmp_path / "r"
    (plain,) = make_configs("cub", "contrastive", (16,), {})
    make_run(r, "plain", config=plain.to_dict(), loss="contrastive", dataset="cub")
    hashed = [f.name for f in fields(RunConfig) if f.name not in (*NOT_HASHED, *KEYED)]
    for name in hashed:
        config = {**plain.to_dict(), name: other(name)}
        make_run(r, name, config=config, loss="contrastive", dataset="cub", **{name: other(name)})
    df, problems = load_runs(r)
    names = df.set_index("run")["name"]
    assert problems == [] and set(names.index) == {"plain", *hashed}
    assert [name for name in hashed if names[name] == names["plain"]] == []


def contrastive(results, name, recall, **config):
    plain = RunConfig(dataset="digits", loss="contrastive", dims=16, epochs=2).to_dict()
    return make_run(
        results, name, config={**plain, **config}, loss="contrastive", **{"recall@1": recall}
    )


def test_runs_of_other_settings_are_rows_of_their_own(tmp_path):
    r = tmp_path / "r"
    make_run(r, "base", loss="untrained", dims=16)
    contrastive(r, "plain", 0.9375)
    for i, (name, (config, _)) in enumerate(VARIANTS.items()):
        contrastive(r, name, 0.90 + i / 100, **config)
    df, problems = load_runs(r)
    assert not problems
    names = set(df.loc[df["loss"] == "contrastive", "name"])
    assert len(names) == 1 + len(VARIANTS)
    for _, label in VARIANTS.values():
        assert any(label in name for name in names), (label, names)
    write_report(r, tmp_path / "out")
    rows = md_rows((tmp_path / "out" / "digits.md").read_text())
    trained = [row for row in rows[1:] if row[0].startswith("contrastive")]
    assert len(trained) == 1 + len(VARIANTS) and all(row[-1] == "1" for row in trained)
    # Every row names the settings that vary: the plain run's is its own R@1, not a mean of
    # several configurations taken as one seed.
    defaults = ("no memory", "sgd", "momentum 0.9", "weight decay 0.0005", "fraction 0.2", "avg")
    (plain,) = [row for row in trained if all(d in row[0] for d in defaults)]
    assert plain[2] == "93.75"


@pytest.mark.parametrize("same", [{"workers": 4}, {"log": "tensorboard"}, {"data_root": "/x"}])
def test_what_does_not_change_a_run_keeps_it_in_its_row(tmp_path, same):
    r = tmp_path / "r"
    contrastive(r, "a", 0.5)
    contrastive(r, "b", 0.7, seed=1, **same)
    df, _ = load_runs(r)
    assert set(df["name"]) == {"contrastive"}


def test_a_rows_examples_a_class_are_those_its_batches_drew(tmp_path):
    # Before: softmax's random batches read "7 a class in a batch" beside "16 a class", and
    # npair, whose 2 a class was raised to 4 for want of classes, read "2 a class".
    from bench.report.runs import load_runs
    from tests.test_report_tables import make_run

    r = tmp_path / "results"
    for seed, m in ((0, 7), (1, 16)):
        make_run(r, f"softmax-{seed}", loss="softmax", seed=seed, m_per_class=m, sampler="random")
    for seed, m in ((0, 2), (1, 4)):
        make_run(r, f"npair-{seed}", loss="npair", seed=seed, m_per_class=m,
                 sampler="16 classes x 4")  # fmt: skip
    make_run(r, "old", loss="npair", seed=2, m_per_class=4)  # recorded no sampler: as set
    df, _ = load_runs(r)
    names = dict(zip(df["run"], df["name"], strict=True))
    assert names["softmax-0"] == names["softmax-1"] == "softmax"
    assert names["npair-0"] == names["npair-1"] == names["old"] == "npair"
