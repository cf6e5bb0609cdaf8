"""Each data set's own Recall@K (issue 45, item 4): declared by its source module, computed from
the evaluator's one search beside R-Precision, shown in the tables; runs of earlier versions
(R@1/2/4/8 on every data set, no R-Precision) reported as they were."""

import numpy as np
import pandas as pd
import pytest

from bench.data.recall_ks import recall_ks
from bench.evaluation import retrieval
from bench.evaluation.metrics import evaluate
from bench.report.significance import recorded_ks, run_query_scores
from bench.report.write import write_report
from bench.runs import store
from bench.util.atomic import atomic_write_json
from tests.test_report_tables import make_run, md_rows

SOP_KS = (1, 10, 100, 1000)


def test_each_data_set_declares_its_own_ks():
    assert recall_ks("sop") == SOP_KS
    assert recall_ks("inshop") == (1, 10, 20, 30, 40)
    for name in ("cub", "cars196", "glyphs", "digits", "folder:/data/birds"):
        assert recall_ks(name) == (1, 2, 4, 8)


def blobs(n=120, classes=12, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    centres = rng.normal(size=(classes, 8))
    return (centres[labels] + rng.normal(0, 1.2, (n, 8))).astype(np.float32), labels


def brute_force_recall(x, labels, k):
    """Whether any of each item's k nearest others (float64, full sort) shares its label."""
    d = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    nearest = np.argsort(d, axis=1, kind="stable")[:, :k]
    return float((labels[nearest] == labels[:, None]).any(axis=1).mean())


def test_recall_at_a_data_sets_ks_from_the_one_search(monkeypatch):
    x, labels = blobs()
    searched = []
    real = retrieval.FlatSearch.__call__

    def counted(self, queries, k):
        searched.append(k)
        return real(self, queries, k)

    monkeypatch.setattr(retrieval.FlatSearch, "__call__", counted)
    found = evaluate(x, labels, clustering=False, ks=(1, 10, 100, 1000)).metrics
    # One search (the items' R is 9): for the largest K the set allows, the query itself + 1.
    assert searched == [119 + 1]
    assert [k for k in found if k.startswith("recall@")] == [f"recall@{k}" for k in SOP_KS]
    for k in (1, 10, 100):
        assert found[f"recall@{k}"] == pytest.approx(brute_force_recall(x, labels, k))
    assert found["recall@1000"] == 1.0  # every other item: a match is among them
    assert found["recall@1"] < found["recall@10"] < found["recall@100"]
    default = evaluate(x, labels, clustering=False).metrics
    assert found["map@r"] == default["map@r"]
    assert found["r_precision"] == default["r_precision"]
    assert found["recall@1"] == default["recall@1"]


def runs_of_two_versions(results, seeds=3, old_contrastive=True):
    """SOP runs of contrastive by an earlier version (R@1/2/4/8, no R-Precision; unless not
    `old_contrastive`) and of triplet by today's (SOP's own Ks and R-Precision), both with their
    saved test embeddings."""
    rng = np.random.default_rng(7)
    labels = np.repeat(np.arange(10), 12)
    centres = rng.normal(size=(10, 8))
    for seed in range(seeds):
        for loss, noise, old in (("contrastive", 0.6, old_contrastive), ("triplet", 1.4, False)):
            emb = (centres[labels] + rng.normal(0, noise, (120, 8))).astype(np.float32)
            metrics = evaluate(emb, labels, ks=(1, 2, 4, 8) if old else SOP_KS).metrics
            if old:
                metrics.pop("r_precision")
            arrays = {"test_embeddings.npz": (emb, labels)}
            run = make_run(results, f"{loss}{seed}", arrays=arrays)
            record = dict(dataset="sop", protocol="metric", loss=loss, dims=8, seed=seed)
            atomic_write_json(run / store.METRICS, {**record, **metrics})  # these keys alone
    return labels


def test_older_runs_keep_their_columns_and_today_adds_its_own(tmp_path):
    runs_of_two_versions(tmp_path / "r")
    written, problems, _, _ = write_report(tmp_path / "r", tmp_path / "rep")
    assert problems == []
    rows = md_rows((tmp_path / "rep" / "sop.md").read_text())
    header = rows[0]
    shown = header[header.index("R@1") : header.index("MAP@R") + 1]
    assert shown == [
        "R@1",
        "R@2",
        "R@4",
        "R@8",
        "R@10",
        "R@100",
        "R@1000",
        "NMI",
        "R-Prec.",
        "MAP@R",
    ]
    old = next(r for r in rows if r[0] == "contrastive")
    new = next(r for r in rows if r[0] == "triplet")
    at = {name: header.index(name) for name in shown}
    assert old[at["R@10"]] == old[at["R-Prec."]] == "-" and old[at["R@2"]] != "-"
    assert new[at["R@2"]] == "-" and new[at["R@1000"]] != "-" and new[at["R-Prec."]] != "-"
    # Rows are compared on what every run recorded: R@1 and MAP@R.
    differences = pd.read_csv(tmp_path / "rep" / "sop-differences.csv")
    assert set(differences["metric"]) == {"recall@1", "map@r"}


def test_a_table_of_older_runs_is_the_one_it_was(tmp_path):
    runs_of_two_versions(tmp_path / "r")
    for path in (tmp_path / "r").glob("triplet*"):
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    write_report(tmp_path / "r", tmp_path / "rep")
    header = md_rows((tmp_path / "rep" / "sop.md").read_text())[0]
    shown = header[header.index("R@1") : header.index("MAP@R") + 1]
    assert shown == ["R@1", "R@2", "R@4", "R@8", "NMI", "MAP@R"]
    differences = tmp_path / "rep" / "sop-differences.csv"
    assert not differences.exists() or "r_precision" not in differences.read_text()


def test_a_run_is_scored_again_at_the_ks_it_recorded(tmp_path):
    runs_of_two_versions(tmp_path / "r", seeds=1)
    old, new = tmp_path / "r" / "contrastive0", tmp_path / "r" / "triplet0"
    assert (recorded_ks(old), recorded_ks(new)) == ((1, 2, 4, 8), SOP_KS)
    assert recorded_ks(tmp_path / "nowhere") == (1, 2, 4, 8)
    # Neither saved its per-query scores: the report scores each once, at its own Ks.
    names = {run: list(run_query_scores(run)) for run in (old, new)}
    assert names[old][:4] == ["recall@1", "recall@2", "recall@4", "recall@8"]
    assert names[new][:4] == [f"recall@{k}" for k in SOP_KS]


def test_the_legend_names_what_its_marks_compare(tmp_path):
    runs_of_two_versions(tmp_path / "mixed")
    runs_of_two_versions(tmp_path / "today", old_contrastive=False)
    for name in ("mixed", "today"):
        write_report(tmp_path / name, tmp_path / f"{name}-report")
    mixed = (tmp_path / "mixed-report" / "sop.md").read_text()
    assert "R@K and MAP@R only" in mixed and "R-Precision and MAP@R only" not in mixed
    assert "R@K, R-Precision and MAP@R only" in (tmp_path / "today-report" / "sop.md").read_text()
