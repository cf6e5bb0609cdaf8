"""Cross-validated final models: `tune --cross-validate` trains the chosen settings once per
class fold and seed, and the report gives the folds' mean and their concatenated embeddings."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.evaluation.metrics import METRIC_KEYS, evaluate
from bench.report.folds import CONCATENATED, SEPARATE, fold_rows
from bench.report.runs import load_runs
from tests.conftest import cli


def normalised(emb: np.ndarray) -> np.ndarray:
    return emb / np.linalg.norm(emb, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def folds_report(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("folds")
    args = ["tune", "--dataset", "digits", "--dims", "8", "--loss", "contrastive", "--trials"]
    args += ["1", "--epochs", "1", "--folds", "2", "--cross-validate", "--seeds", "0,1"]
    out = cli(*args, "--final-epochs", "1", "--results", results)
    assert out.exit_code == 0, out.output
    default = ["run", "--dataset", "digits", "--dims", "8", "--loss", "contrastive"]
    for split in ("images", "classes:0/2", "classes:1/2"):  # the last two: the folds' protocol
        out = cli(
            *default, "--epochs", "1", "--seed", "0,1", "--val-split", split, "--results", results
        )
        assert out.exit_code == 0, out.output
    report = cli("report", "--results", results, "--out", results / "report")
    assert report.exit_code == 0, report.output
    return results


def tuned_runs(results: Path) -> list[dict]:
    paths = sorted(results.glob("digits-*/metrics.json"))
    return [{**json.loads(p.read_text()), "path": p} for p in paths]


def test_each_seed_trains_one_model_per_fold(folds_report):
    runs = [m for m in tuned_runs(folds_report) if m.get("preset") == "tuned"]
    assert sorted((m["seed"], m["val_split"]) for m in runs) == [
        (0, "classes:0/2"), (0, "classes:1/2"), (1, "classes:0/2"), (1, "classes:1/2")
    ]  # fmt: skip
    assert all("map@r" in m for m in runs)  # each tested


def test_the_report_gives_the_folds_mean_and_the_concatenation(folds_report):
    per_seed = pd.read_csv(folds_report / "report" / "digits-tuned-folds.csv")
    runs = [m for m in tuned_runs(folds_report) if m.get("preset") == "tuned"]
    for seed in (0, 1):
        models = sorted((m for m in runs if m["seed"] == seed), key=lambda m: m["val_split"])
        row = per_seed[(per_seed.seed == seed) & (per_seed.embedding == SEPARATE)].iloc[0]
        for metric in METRIC_KEYS:
            expected = np.mean([m[metric] for m in models])
            assert row[metric] == pytest.approx(expected, abs=1e-6), metric
        saved = [np.load(m["path"].parent / "test_embeddings.npz") for m in models]
        joined = np.hstack([normalised(s["embeddings"]) for s in saved]).astype(np.float32)
        assert joined.shape[1] == 16  # 2 models x 8 dims
        expected = evaluate(joined, saved[0]["labels"], seed=seed, best_of=False).metrics
        row = per_seed[(per_seed.seed == seed) & (per_seed.embedding == CONCATENATED)].iloc[0]
        assert {m: row[m] for m in METRIC_KEYS} == pytest.approx(
            {m: expected[m] for m in METRIC_KEYS}, abs=1e-6
        )
    table = (folds_report / "report" / "digits-tuned-folds.md").read_text()
    rows = [[c.strip() for c in line.split("|")[1:5]] for line in table.splitlines()]
    assert ["contrastive", "8", "folds' mean (2 models of 8 dims)", "2"] in rows
    assert ["contrastive", "8", "concatenated (2 x 8 = 16 dims)", "2"] in rows
    assert "Musgrave et al. 2020" in table
    assert [x for x in table.splitlines() if x.startswith("Setup: ")][0].endswith("(0, 1).")
    assert "## MAP@R, best first" in table and "## R@1, best first" in table
    ranks = pd.read_csv(folds_report / "report" / "digits-tuned-folds-ranks.csv")
    mapr = ranks[(ranks.metric == "map@r") & (ranks.embedding == SEPARATE)]
    expected = per_seed[per_seed.embedding == SEPARATE]["map@r"].mean()
    assert mapr["mean"].tolist() == pytest.approx([expected], abs=1e-6)
    index = (folds_report / "report" / "README.md").read_text()
    assert "`<table>-folds.md`: cross-validated final models" in index


def test_a_seed_without_every_fold_is_left_out(folds_report):
    df, _ = load_runs(folds_report)
    tuned = df[df["table"] == "digits-tuned"]
    missing = tuned[~((tuned["seed"] == 1) & (tuned["val_split"] == "classes:1/2"))]
    rows = fold_rows(missing)
    assert set(rows["seed"]) == {0}
    assert fold_rows(tuned[tuned["val_split"] == "classes:0/2"]).empty


def test_cross_validation_needs_two_folds(tmp_path):
    args = ["tune", "--dataset", "digits", "--loss", "contrastive", "--cross-validate"]
    out = cli(*args, "--results", tmp_path)
    assert out.exit_code == 1 and "give --folds 2 or more, not 1" in out.output
    assert not list(tmp_path.iterdir())


def test_the_folds_of_another_start_are_rows_of_their_own(folds_report):
    from bench.report.folds import folds_files

    df, _ = load_runs(folds_report)
    tuned = df[df["table"] == "digits-tuned"]
    # The same study from pretrained weights (tune --pretrained): another study, another start.
    label = "small_cnn pretrained on glyphs 1000-1999"
    other = tuned.assign(weights=label)
    table = folds_files(pd.concat([tuned, other]), "digits-tuned")["digits-tuned-folds.md"]
    rows = [[c.strip() for c in line.split("|")[1:5]] for line in table.decode().splitlines()]
    for start in ("random init", label):
        assert [f"contrastive, {start}", "8", "folds' mean (2 models of 8 dims)", "2"] in rows


def test_the_report_sets_the_tuned_fold_models_beside_the_default(folds_report):
    table = pd.read_csv(folds_report / "report" / "tuned-vs-default.csv")
    mapr = table[table["metric"] == "map@r"]
    row = mapr[~mapr["default"].str.contains("class folds")].iloc[0]  # validated on images
    per_seed = pd.read_csv(folds_report / "report" / "digits-tuned-folds.csv")
    means = per_seed[per_seed.embedding == SEPARATE]["map@r"]
    assert row["tuned_mean"] == pytest.approx(means.mean(), abs=1e-6)
    assert row["tuned_seeds"] == row["default_seeds"] == 2
    runs = [m for m in tuned_runs(folds_report) if m.get("preset") == "" and m["dims"] == 8]
    by_split = {s: [m for m in runs if m["val_split"] == s] for s in ("images", "classes:1/2")}
    assert [m["seed"] for m in by_split["classes:1/2"]] == [0, 1]
    assert row["default_mean"] == pytest.approx(
        np.mean([m["map@r"] for m in by_split["images"]]), abs=1e-6
    )
    folds = table[(table["metric"] == "map@r") & table["default"].str.contains("class folds")]
    fold_models = [m["map@r"] for m in runs if m["val_split"].startswith("classes:")]
    assert folds["default_mean"].iloc[0] == pytest.approx(np.mean(fold_models), abs=1e-6)
    index = (folds_report / "report" / "README.md").read_text()
    assert "`tuned-vs-default.md`: each tuned loss against its shipped default" in index


@pytest.mark.parametrize("split", ["classes:2/2", "classes:0/1", "classes:a/b", "folds"])
def test_a_bad_validation_split_is_a_one_line_error(tmp_path, split):
    out = cli("run", "--dataset", "digits", "--val-split", split, "--results", tmp_path)
    assert out.exit_code == 2 and "Invalid value for '--val-split'" in out.output
    assert not any(tmp_path.iterdir())
