"""`--clustering`: which NMI a run's test computes (full, PML's alone, or none, for sets whose
k-means with a cluster per class would cost hours); the retrieval metrics never change."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.cli.run import run
from bench.evaluation.clustering import nmi, nmi_best_of
from bench.evaluation.metrics import CLUSTERING
from bench.protocols import get_protocol
from bench.runs.config import RunConfig
from bench.train.evaluations import retrieval_scores

RETRIEVAL = ["recall@1", "recall@2", "recall@4", "recall@8", "map@r"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def embedded():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(12), 6)
    emb = rng.normal(size=(12, 8))[labels] + rng.normal(scale=0.8, size=(72, 8))
    return emb.astype(np.float32), labels


@pytest.mark.parametrize("protocol", ["metric", "query-gallery"])
def test_each_kind_computes_its_nmi_and_the_same_retrieval(embedded, protocol):
    emb, labels = embedded
    queries = np.arange(len(labels)) % 2 == 0  # half of each class queries the other half
    found = {
        kind: retrieval_scores(get_protocol(protocol), emb, labels, queries, 3, kind)
        for kind in ("full", "pml", "none")
    }
    keys = {
        kind: {k for k in metrics if k.startswith("nmi")} for kind, (metrics, _) in found.items()
    }
    assert keys == {"full": {"nmi", "nmi_best_of_5"}, "pml": {"nmi"}, "none": set()}
    clustered = (emb, labels) if protocol == "metric" else (emb[~queries], labels[~queries])
    assert found["pml"][0]["nmi"] == found["full"][0]["nmi"] == nmi(*clustered)
    assert found["full"][0]["nmi_best_of_5"] == nmi_best_of(*clustered, seed=3, nredo=5)
    for kind in ("pml", "none"):
        assert [found[kind][0][k] for k in RETRIEVAL] == [found["full"][0][k] for k in RETRIEVAL]
        for key, values in found["full"][1].items():
            np.testing.assert_array_equal(found[kind][1][key], values)


def test_the_option_offers_the_kinds_the_evaluator_knows():
    (option,) = [p for p in run.params if p.name == "clustering"]
    assert option.type.choices == tuple(CLUSTERING) and option.default == "full"


def test_the_default_keeps_every_earlier_run_id():
    default = RunConfig(dataset="digits", dims=16)
    assert default.clustering == "full"
    assert RunConfig(dataset="digits", dims=16, clustering="none").run_id() != default.run_id()


def test_a_run_without_clustering_is_reported_with_no_nmi(tmp_path):
    results = tmp_path / "results"
    args = ["--dataset", "digits", "--epochs", "1", "--dims", "16", "--results", results]
    out = cli("run", "--loss", "contrastive", *args, "--clustering", "none")
    assert out.exit_code == 0, out.output
    assert "map@r=" in out.output and "nmi=" not in out.output
    runs = sorted(p for p in results.iterdir() if (p / "metrics.json").is_file())
    assert len(runs) == 3  # the run and both baselines, each tested without k-means
    for folder in runs:
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["clustering"] == "none" and "map@r" in metrics
        assert not [k for k in metrics if "nmi" in k], folder.name
    report = cli("report", "--results", results, "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output
    assert "left out" not in report.output
    table = (tmp_path / "report" / "digits.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| contrastive"))
    header = next(line for line in table.splitlines() if line.startswith("| loss"))
    cells = dict(
        zip(map(str.strip, header.split("|")), map(str.strip, row.split("|")), strict=True)
    )
    assert cells["NMI"] == "-" and cells["MAP@R"] not in ("", "-")
