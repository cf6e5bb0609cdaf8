"""The report's figures: the data each is drawn from, checked against the run files, from real
digits runs (pair verification) and from run folders written here."""

import json
import shutil

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.evaluation.pair_scoring import pairs_of
from bench.evaluation.pairs import pair_distances
from bench.report import embedding, figures
from bench.report import run_figures as report
from bench.report.runs import load_runs
from bench.report.setup import setup_line
from bench.report.write import write_report
from bench.runs import store
from bench.util.atomic import atomic_write_json, atomic_write_text
from tests.test_report_tables import make_run

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def few_tsne_points(monkeypatch):
    monkeypatch.setattr(report, "TSNE_POINTS", 60)


@pytest.fixture(scope="module")
def pairs_results(tmp_path_factory):
    """A real pairs-protocol NNGK run on digits with its untrained baseline, and a copy of it
    relabelled as a contrastive run without centre statistics (a second loss, at the cost of
    one run)."""
    results = tmp_path_factory.mktemp("results")
    args = "run --loss nngk --protocol pairs --dataset digits --epochs 1 --dims 16"
    out = CliRunner().invoke(main, [*args.split(), "--results", str(results)])
    assert out.exit_code == 0, out.output
    nngk = run_dir(results, "nngk")
    copy = results / nngk.name.replace("nngk", "contrastive")
    shutil.copytree(nngk, copy)
    metrics = store.read_metrics(copy)
    metrics.update(loss="contrastive", loss_params={"pos_margin": 0.0, "neg_margin": 0.5})
    atomic_write_json(copy / store.METRICS, metrics)
    config = json.loads((copy / store.CONFIG).read_text())  # relabelled alike: one record
    atomic_write_json(copy / store.CONFIG, {**config, "loss": "contrastive"})
    history = pd.read_csv(copy / store.HISTORY).filter(regex="^(?!mean_)")
    atomic_write_text(copy / store.HISTORY, history.to_csv(index=False))
    return results


def run_dir(results, loss):
    (found,) = results.glob(f"digits-pairs-{loss}-*")
    return found


def test_pair_distances_are_the_test_pairs_of_the_run(pairs_results):
    folder = run_dir(pairs_results, "nngk")
    metrics = store.read_metrics(folder)
    # The seen test pairs, recomputed from the saved test embeddings.
    saved = np.load(folder / store.EMBEDDINGS)
    pairs = pairs_of(saved["labels"], 4)
    seen = pd.read_csv(folder / "pairs_seen.csv")
    np.testing.assert_allclose(seen["distance"], pair_distances(saved["embeddings"], pairs))
    np.testing.assert_array_equal(seen["same"], pairs[:, 2])
    panels = report.distance_panels(load_runs(pairs_results)[0].query("loss == 'nngk'"))
    for split in ("seen", "unseen"):
        (frame,) = [f for title, f in panels.items() if title.endswith(f": {split}")]
        for pair, key in (("similar", "same"), ("dissimilar", "different")):
            part = frame[frame["pair"] == pair]
            mean = metrics[f"{split}_{key}_mean"]
            assert part["distance"].mean() == pytest.approx(mean, rel=1e-6)


def test_pair_verification_figures_and_tables_come_from_the_run_files(pairs_results, tmp_path):
    out = tmp_path / "reports"
    written, problems, _, _ = write_report(pairs_results, out, tsne=True)
    assert problems == []
    names = {p.name for p in written}
    expected = {
        "digits-pairs-categories.md",
        "digits-pairs-categories.csv",
        "digits-pairs-pair-distances.png",
        "digits-pairs-pr.png",
        "digits-pairs-tsne.png",
        "digits-pairs-centres.png",
        "digits-pairs-train-test.md",
    }
    assert expected <= names
    readme = (out / "README.md").read_text()
    assert all(f"[{n}]({n})" in readme for n in names - {"README.md"})
    for name in expected - {"digits-pairs-categories.md", "digits-pairs-categories.csv"}:
        assert (out / name).read_bytes().startswith(PNG) or name.endswith(".md")
    for name in ("digits-pairs-categories.md", "digits-pairs-train-test.md"):  # as every table
        (setup,) = [x for x in (out / name).read_text().splitlines() if x.startswith("Setup: ")]
        assert "backbone " in setup and setup.endswith("; 1 seed (0).")
    # One seed: the best and worst categories are the run's own rows, in its order.
    ranked = pd.read_csv(out / "digits-pairs-categories.csv")
    for loss in ("contrastive", "nngk"):
        for split in ("seen", "unseen"):
            own = pd.read_csv(run_dir(pairs_results, loss) / f"categories_{split}.csv")
            got = ranked[(ranked["method"] == loss) & (ranked["split"] == split)]
            keep = [0, 1, 2, len(own) - 2, len(own) - 1]  # 5 classes: 3 best, 2 worst
            np.testing.assert_allclose(got["accuracy"], own["accuracy"].iloc[keep], atol=1e-6)
            np.testing.assert_allclose(got["frr"], own["frr"].iloc[keep], atol=1e-6)
            assert got["label"].tolist() == own["label"].iloc[keep].tolist()
            assert got["position"].tolist() == [1, 2, 3, 4, 5]
    # The seen split's train-test R@1 rows are the runs' metrics.
    metrics = store.read_metrics(run_dir(pairs_results, "nngk"))
    table = pd.read_csv(out / "digits-pairs-train-test.csv").set_index("row")
    assert table.loc["FC (train)", "nngk mean"] == pytest.approx(
        metrics["train_recall@1"], abs=1e-6
    )
    assert table.loc["FC (test)", "nngk mean"] == pytest.approx(metrics["recall@1"], abs=1e-6)


def test_pr_centre_and_tsne_data(pairs_results):
    df, _ = load_runs(pairs_results)
    panels = report.pr_panels(df)
    assert list(panels) == ["seen pairs", "unseen pairs"]
    curve = panels["unseen pairs"]["nngk, d16, seed 0"]
    pd.testing.assert_frame_equal(
        curve, pd.read_csv(run_dir(pairs_results, "nngk") / "pr_unseen.csv")
    )
    history = report.centre_history(df)
    own = pd.read_csv(run_dir(pairs_results, "nngk") / store.HISTORY)
    assert set(history["run"]) == {"nngk, d16"}
    pd.testing.assert_frame_equal(history.drop(columns="run"), own)
    xs, labels, titles = report.tsne_inputs(df)
    assert titles == ["contrastive, d16, seed 0", "nngk, d16, seed 0"]
    saved = np.load(run_dir(pairs_results, "contrastive") / store.EMBEDDINGS)
    keep = np.sort(np.random.default_rng(0).choice(len(saved["labels"]), 60, replace=False))
    np.testing.assert_array_equal(xs[0], saved["embeddings"][keep])
    np.testing.assert_array_equal(labels, saved["labels"][keep])
    assert xs[1].shape == xs[0].shape


def test_report_with_figures_twice_gives_the_same_bytes(pairs_results, tmp_path):
    write_report(pairs_results, tmp_path / "a")
    write_report(pairs_results, tmp_path / "b")
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}


def test_a_damaged_run_file_leaves_out_that_run_alone_and_names_it(pairs_results, tmp_path):
    results, out = tmp_path / "results", tmp_path / "reports"
    shutil.copytree(pairs_results, results)
    nngk, contrastive = run_dir(results, "nngk"), run_dir(results, "contrastive")
    good = (nngk / "pr_unseen.csv").read_bytes()
    (nngk / "pr_unseen.csv").write_text("precision,recall\n0.5,oops\n")
    written, problems, _, _ = write_report(results, out)
    assert problems == [
        f"{nngk.name}: pr_unseen.csv is damaged (column recall, threshold is not numbers); "
        "the run is left out of digits-pairs"
    ]
    names = {p.name for p in written}
    assert {"digits-pairs.md", "digits-pairs-categories.md", "digits-pairs-pr.png"} <= names
    table = (out / "digits-pairs.md").read_text().split("## Published")[0]
    assert "| contrastive " in table and "| nngk " not in table
    # Its retrieval columns are of the seen classes' test images: the table says so.
    assert "R@K, NMI and MAP@R here are of the seen classes' test images" in table
    assert (
        "seen classes'" not in (out / "digits.md").read_text()
        if (out / "digits.md").exists()
        else True
    )
    (nngk / "pr_unseen.csv").write_bytes(good)
    # The galleries load the data from the best run's configuration: a damaged one is named.
    (contrastive / store.CONFIG).write_text("{not json")
    cli = CliRunner().invoke(main, ["report", "--results", str(results), "--out", str(out)])
    assert cli.exit_code == 0
    (line,) = [x for x in cli.output.splitlines() if x.startswith("skipped")]
    assert line == (
        f"skipped {contrastive.name}: config.json is unreadable (JSONDecodeError: Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1)); the run is left out"
    )
    table = (out / "digits-pairs.md").read_text().split("## Published")[0]
    assert "| nngk " in table and "| contrastive " not in table
    assert (out / "digits-pairs-gallery-nngk.png").is_file()


# ---------------------------------------------------------------- Fig. 3, Fig. 4a


def test_accuracy_against_examples_per_class(tmp_path):
    r = tmp_path / "results"
    classify = dict(protocol="classify", embedding="fc", freeze_backbone=False)
    sizes = np.repeat(np.arange(3), [30, 40, 50])  # median class size 40
    arrays = {store.TRAIN_EMBEDDINGS: (np.zeros((len(sizes), 2), np.float32), sizes)}
    for loss, accuracies in (("softmax", (0.2, 0.4, 0.7)), ("nngk", (0.3, 0.5, 0.8))):
        for per_class, acc in zip((5, 20, 0), accuracies, strict=True):
            make_run(
                r,
                f"{loss}-{per_class}",
                arrays=arrays,
                loss=loss,
                train_per_class=per_class,
                accuracy=acc,
                **classify,
            )
    make_run(
        r,
        "frozen",
        loss="nngk",
        train_per_class=5,
        accuracy=0.1,
        **classify | {"freeze_backbone": True},
    )
    df, _ = load_runs(r)
    frame = report.examples_frame(df).sort_values(["method", "train_per_class"])
    assert frame["method"].tolist() == ["nngk"] * 3 + ["softmax"] * 3
    assert frame["train_per_class"].tolist() == [5, 20, 40] * 2
    assert frame["accuracy"].tolist() == [0.3, 0.5, 0.8, 0.2, 0.4, 0.7]
    written, problems, _, _ = write_report(r, tmp_path / "out")
    assert problems == []
    png = tmp_path / "out" / "digits-classify-accuracy-vs-examples.png"
    assert png in written and png.read_bytes().startswith(PNG)


def test_effect_of_neighbours_reads_k_from_metrics_or_config(tmp_path):
    r = tmp_path / "results"
    params = {"sigma": 1.0, "update_interval": 1, "learn_weights": True}
    for seed in (0, 1):
        for k, value in ((5, 0.6), (50, 0.8)):
            make_run(
                r,
                f"k{k}-s{seed}",
                loss="nngk",
                seed=seed,
                loss_params={**params, "k": k},
                **{"recall@1": value + seed / 10},
            )
    # An older run: its parameters only in config.json.
    make_run(
        r,
        "old",
        config={"resolved_loss_params": {**params, "k": 200}},
        loss="nngk",
        **{"recall@1": 0.9},
    )
    make_run(r, "softmax", loss="softmax")
    df, _ = load_runs(r)
    frame = report.neighbours_frame(df).sort_values(["k", "recall@1"])
    assert list(frame.columns) == ["method", "dims", "k", "recall@1"]
    assert frame["k"].tolist() == [5, 5, 50, 50, 200]
    assert frame["recall@1"].tolist() == pytest.approx([0.6, 0.7, 0.8, 0.9, 0.9])
    assert set(frame["method"]) == {"nngk"}
    written, _, _, _ = write_report(r, tmp_path / "out")
    assert tmp_path / "out" / "digits-neighbours.png" in written


def test_tuned_studies_that_chose_k_among_others_draw_no_effect_of_k(tmp_path):
    # Two starts, each tuned: k differs, but with the learning rate and sigma.
    r = tmp_path / "results"
    starts = (("none", "random init", 46, 0.001), ("w.pt", "w pretrained on glyphs 1-2", 57, 0.01))
    for pretrained, start, k, lr in starts:
        for fold in (0, 1):
            params = {"sigma": lr * 100, "update_interval": 1, "k": k}
            history = pd.DataFrame(
                {"epoch": [1, 2], "mean_centre_distance": [1.0 + k, 2.0 + k]}
                | {"mean_kernel_value": [0.1, 0.01]}
            )
            make_run(
                r, f"{k}-{fold}", loss="nngk", pretrained=pretrained, weights=start, lr=lr,
                loss_params=params,
                val_split=f"classes:{fold}/2", history=history,
            )  # fmt: skip
    df, _ = load_runs(r)
    assert report.neighbours_figure(df, "digits") == {}
    history = report.centre_history(df)  # a line per setting, its 2 fold models in it
    lines = history.groupby("run")["mean_centre_distance"].mean().to_dict()
    assert lines == {
        "nngk, random init, lr=0.001, k=46, sigma=0.1, 2 class folds, d16": 47.5,
        "nngk, w pretrained on glyphs 1-2, lr=0.01, k=57, sigma=1, 2 class folds, d16": 58.5,
    }
    assert report.centres_figure(df, "digits")["digits-centres.png"].startswith(PNG)


def tuned_rows(results):
    """Two losses, each tuned once per start (its own lr and parameter per start), two class
    folds a start, two seeds: the rows of a two-regime tuned table."""
    starts = {"random init": "none", "small_cnn pretrained on glyphs 1000-1999": "w.pt"}
    for (weights, path), lr in zip(starts.items(), (0.01, 0.001), strict=True):
        for loss, params in (("nngk", {"sigma": 0.5 / lr}), ("triplet", {"margin": lr * 20})):
            for fold in (0, 1):
                for seed in (0, 1):
                    make_run(
                        results,
                        f"{loss}-{path}-{fold}-{seed}",
                        loss=loss,
                        seed=seed,
                        weights=weights,
                        pretrained=path,
                        lr=lr + (loss == "nngk") * lr,
                        val_split=f"classes:{fold}/2",
                        loss_params=params,
                        **{"recall@1": 0.5 + seed / 10 + fold / 20},
                    )
    return load_runs(results)[0]


def test_a_tuned_table_draws_a_panel_per_start_and_fold_not_per_row(tmp_path, monkeypatch):
    df = tuned_rows(tmp_path / "r")
    assert df["name"].nunique() == 8  # loss x start x fold: each row labelled by its settings
    drawn = []
    monkeypatch.setattr(figures, "png_bytes", lambda fig: drawn.append(fig) or PNG)
    embedding.dims_figure(df)
    embedding.recall_figure(df)
    dims, recall = ([ax for ax in fig.axes if ax.get_visible()] for fig in drawn)
    # R@1 and NMI: a row of panels per start and fold (4), each with a line per loss.
    assert len(dims) == 8
    titles = [" ".join(ax.get_title().splitlines()[1:]) for ax in dims[::2]]
    assert titles == sorted(set(titles)) and all("held-out classes:" in t for t in titles)
    assert all(len(ax.get_lines()) == 2 for ax in dims)
    # Recall@K: a panel per loss, a line per start and fold in it.
    assert [ax.get_title() for ax in recall] == ["nngk", "triplet"]
    (legend,) = drawn[1].legends  # one for the figure, the same lines in every panel
    assert len(legend.get_texts()) == 4 and not any(ax.get_legend() for ax in recall)
    for ax in recall:
        assert len(ax.get_lines()) == 4
        assert ax.get_lines()[0].get_ydata()[0] == pytest.approx(0.55)  # mean over the seeds
    # The setup names no rows where each row's label states the value.
    line = setup_line(df)
    assert "weights random init / small_cnn pretrained on glyphs 1000-1999 (as each row's" in line
    assert "lr 0.001 / 0.002 / 0.01 / 0.02 (as each row's label says)" in line
    for fig in drawn:
        plt.close(fig)
