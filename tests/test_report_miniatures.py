"""The report's paper tables from real runs on the data-set miniatures: Meyer et al. 2018 Tables 3-4
from classify runs on CUB, the Tiny ImageNet pair-verification report Table 3 and its figures from a
pairs run on Tiny ImageNet."""

import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.evaluation.pairs import best_and_worst
from bench.report.write import write_report
from tests.fixtures.cub import make_cub
from tests.fixtures.tinyimagenet import make_tinyimagenet
from tests.test_protocols import FAST
from tests.test_report_tables import md_rows, row_of


def run(*args) -> None:
    out = CliRunner().invoke(main, ["run", *[str(a) for a in args]], catch_exceptions=False)
    assert out.exit_code == 0, out.output


def metrics_of(results, prefix: str) -> dict:
    (folder,) = [p for p in results.glob(f"{prefix}*") if (p / "metrics.json").is_file()]
    return {"path": folder, **json.loads((folder / "metrics.json").read_text())}


@pytest.fixture(scope="module")
def miniature_report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("miniatures")
    mp = pytest.MonkeyPatch()
    mp.setenv("NNGK_CACHE", str(tmp / "cache"))
    results = tmp / "results"
    cub = make_cub(tmp / "cub", classes=4, per_class=12)
    for loss in ("softmax", "nngk"):
        run("--protocol", "classify", "--loss", loss, "--dataset", "cub", "--data-root", cub, *FAST,
            "--embedding", "fc", "--results", results)  # fmt: skip
    tiny = make_tinyimagenet(tmp / "tiny", classes=6, train_per_class=12, val_per_class=4)
    run("--protocol", "pairs", "--loss", "contrastive", "--dataset", "tinyimagenet",
        "--data-root", tiny, *FAST, "--results", results)  # fmt: skip
    out = tmp / "reports"
    written, problems, _, _ = write_report(results, out)
    mp.undo()
    return results, out, {p.name for p in written}, problems


def test_classification_table_holds_the_classify_runs_accuracy(miniature_report):
    results, out, written, problems = miniature_report
    assert not problems and {"classification.md", "classification.csv"} <= written
    rows = md_rows((out / "classification.md").read_text())
    header = rows[0]
    row = row_of(rows, "cub", "small_cnn")
    for loss in ("softmax", "nngk"):
        accuracy = metrics_of(results, f"cub-classify-{loss}-")["accuracy"]
        assert row[header.index(loss)] == f"{100 * accuracy:.2f}"
    # The published rows of Tables 3-4 stand apart, under their own heading.
    text = (out / "classification.md").read_text()
    measured, published = text.split("Published", 1)
    assert "78.63" not in measured and "78.63" in published


def test_categories_table_and_pair_figures_come_from_the_pairs_run(miniature_report):
    results, out, written, _ = miniature_report
    # The table is named by the data set and a hash of its identity (location, fingerprint).
    (table,) = {n.removesuffix("-categories.md") for n in written if n.endswith("-categories.md")}
    assert re.fullmatch(r"tinyimagenet-[0-9a-f]{8}-pairs", table)
    assert {f"{table}-pair-distances.png", f"{table}-pr.png"} <= written
    rows = md_rows((out / f"{table}-categories.md").read_text())
    folder = metrics_of(results, "tinyimagenet-pairs-contrastive-")["path"]
    categories = pd.read_csv(folder / "categories_seen.csv")
    ends = best_and_worst(categories, n=3)
    for _, category in ends.iterrows():
        cells = [c for c in rows if category["class_name"] in c and "seen" in c]
        assert cells, category["class_name"]
        assert f"{100 * category['accuracy']:.2f}" in " ".join(cells[0])
    summary = pd.read_csv(out / f"{table}.csv")
    trained = summary[summary["method"] == "contrastive"].iloc[0]
    metrics = metrics_of(results, "tinyimagenet-pairs-contrastive-")
    assert trained["seen_accuracy_mean"] == pytest.approx(metrics["seen_accuracy"], abs=1e-6)
