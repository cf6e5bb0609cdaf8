"""The `report` speed benchmark (issue 26): the run folders it generates are finished runs of
today's format that the report reads without a search, and its row is the ratio of the two
times it measured."""

import json

import faiss
import numpy as np
import pytest

import bench.report.significance as significance
from bench.evaluation.retrieval import query_scores
from bench.report.runs import load_runs
from bench.report.write import write_report
from bench.runs import store
from bench.speed import report_runs


def refuse_search(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(faiss, "IndexFlatL2", refuse)
    monkeypatch.setattr(significance, "query_scores", refuse)


def test_the_sweep_covers_every_row_before_a_second_seed():
    rows = len(report_runs.LOSSES) * len(report_runs.DIMS) * len(report_runs.LRS)
    runs = report_runs.sweep(rows + 3)
    assert len(set(runs)) == rows + 3
    assert {seed for *_, seed in runs[:rows]} == {0} and {r[3] for r in runs[rows:]} == {1}
    assert {r[:3] for r in runs[:rows]} == {r[:3] for r in runs}


def test_generated_runs_are_finished_runs_whose_saved_scores_are_their_embeddings(tmp_path):
    folders = report_runs.write_runs(tmp_path, 6, queries=40)
    runs, problems = load_runs(tmp_path)
    assert problems == [] and len(runs) == 6 == len(folders)
    assert sorted(runs["loss"].value_counts().items()) == [("contrastive", 4), ("untrained", 2)]
    assert set(runs.loc[runs["loss"] == "contrastive", "lr"]) == set(report_runs.LRS[:4])
    for folder in folders:
        with np.load(folder / store.EMBEDDINGS) as saved:
            emb, labels = saved["embeddings"], saved["labels"]
        assert emb.shape == (40, json.loads((folder / store.METRICS).read_text())["dims"])
        expected = query_scores(emb, labels)
        saved_scores = store.read_query_scores(folder)
        for key, values in expected.items():
            np.testing.assert_array_equal(saved_scores[key], values)
        metrics = store.read_metrics(folder)
        assert metrics["map@r"] == pytest.approx(np.nanmean(expected["map@r"]))
        assert metrics["recall@1"] == pytest.approx(expected["recall@1"].mean())


def test_a_few_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="3 runs or more"):
        report_runs.write_runs(tmp_path, 2)
    with pytest.raises(ValueError, match="20 queries or more"):
        report_runs.write_runs(tmp_path, 10, queries=10)


def test_the_benchmark_times_a_report_that_searches_nothing_against_reading_metrics(
    monkeypatch,
):
    reports = []

    def report(results, out):
        refuse_search(monkeypatch)  # the runs were generated with their scores: none is searched
        written, problems, _, _ = write_report(results, out)
        monkeypatch.undo()
        assert problems == []
        tables = [p for p in written if p.name.startswith("features-sweep") and p.suffix == ".md"]
        table = min(tables, key=lambda p: len(p.name))  # <table>.md, beside <table>-health.md
        lines = [line for line in table.read_text().splitlines() if line.startswith("| ")]
        reports.append((len(lines) - 1, sorted(p.name for p in written)))

    loads = []

    def load(results):
        loads.append(load_runs(results)[0])

    fewer, row, added = report_runs.report_benchmark(report, load, count=20, queries=40, repeats=2)
    assert [len(df) for df in loads] == [4, 4, 20, 20]  # the best of 2 readings of each
    (_, _), (table_rows, names) = reports  # a report over 4 runs, then over 20
    assert table_rows == 20 and any(name.endswith("-differences.csv") for name in names)
    assert (fewer["runs"], fewer["rows"]) == (4, 2)  # the two baselines, a loss at two lrs
    assert (row["runs"], row["rows"], row["queries"]) == (20, 18, 40)
    assert row["metrics.json_s"] > 0 and row["report_s"] > 0
    assert row["report / metrics.json"] == row["report_s"] / row["metrics.json_s"]
    assert 0 < row["reading_s"] < row["report_s"]
    assert row["reading / metrics.json"] == row["reading_s"] / row["metrics.json_s"]
    assert added["runs"] == "each of 4-20"
    per_run = (row["report_s"] - fewer["report_s"]) / 16
    assert added["report_s"] == pytest.approx(per_run)
    read = (row["metrics.json_s"] - fewer["metrics.json_s"]) / 16
    assert added["metrics.json_s"] == pytest.approx(read)
    assert added["reading_s"] == pytest.approx((row["reading_s"] - fewer["reading_s"]) / 16)


def test_the_added_run_row_is_the_difference_per_run_between_two_rows():
    size = {"rows": 100, "queries": 100}
    fewer = {"runs": 200, **size, "metrics.json_s": 0.01, "reading_s": 0.04, "report_s": 9.0}
    more = {"runs": 1000, **size, "metrics.json_s": 0.05, "reading_s": 0.16, "report_s": 11.0}
    added = report_runs.added_run_row(fewer, more)
    assert added["metrics.json_s"] == pytest.approx(0.04 / 800)
    assert added["report_s"] == pytest.approx(2.0 / 800)
    assert added["report / metrics.json"] == pytest.approx(50.0)
    assert added["reading / metrics.json"] == pytest.approx(3.0)
    still = report_runs.added_run_row(fewer, {**more, "metrics.json_s": 0.01})
    assert np.isnan(still["report / metrics.json"])
