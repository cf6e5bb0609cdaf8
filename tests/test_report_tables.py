"""The report's paper tables (Meyer et al. 2018 Tables 3-5, Liu et al. 2019 Table 1, the Tiny
ImageNet pair-verification report Table 3), from run folders written here in the run store's
format."""

import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.report.classification import ablation_table
from bench.report.runs import load_runs, variant_labels
from bench.report.table_format import mean_ci_table
from bench.report.write import write_report
from bench.runs import store
from bench.util.atomic import atomic_save_npz, atomic_write_json, atomic_write_text
from bench.util.knn import knn

KEYS = ("recall@1", "recall@2", "recall@4", "recall@8", "nmi", "map@r")


def make_run(results, name, config=None, history=None, arrays=None, tables=None, **metrics):
    """A finished run folder: metrics.json (retrieval metrics 0.5 unless given), config.json,
    and optionally history.csv, *_embeddings.npz and CSV tables."""
    run_dir = results / name
    values = {k: 0.5 for k in KEYS}
    values["nmi_best_of_5"] = 0.5
    values.update(dataset="digits", protocol="metric", miner=None, dims=16, seed=0)
    values.update(metrics)
    if values.get("loss") == "untrained":  # the raw inputs, as earlier versions recorded them
        values.setdefault("backbone", "none")
    atomic_write_json(run_dir / store.CONFIG, config or {})
    for file_name, (emb, labels) in (arrays or {}).items():
        atomic_save_npz(run_dir / file_name, embeddings=emb, labels=labels)
    for file_name, frame in {**(tables or {}), store.HISTORY: history}.items():
        if frame is not None:
            atomic_write_text(run_dir / file_name, frame.to_csv(index=False))
    atomic_write_json(run_dir / store.METRICS, values)
    return run_dir


def md_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row, header and rule lines left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|--"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def row_of(rows: list[list[str]], *cells: str) -> list[str]:
    (found,) = [r for r in rows if all(c in r for c in cells)]
    return found


# ---------------------------------------------------------------- Tables 3-5


@pytest.fixture
def classify_results(tmp_path):
    r = tmp_path / "results"
    cub = dict(dataset="cub", protocol="classify", backbone="vgg16", pretrained="imagenet")
    cub.update(embedding="backbone", dims=4096, freeze_backbone=False, train_per_class=0)
    learned = {"sigma": 100.0, "k": 100, "update_interval": 10, "learn_weights": True}
    for seed, (soft, ours) in enumerate(((0.70, 0.75), (0.80, 0.85))):
        make_run(r, f"soft{seed}", loss="softmax", seed=seed, accuracy=soft, **cub)
        make_run(
            r, f"ours{seed}", loss="nngk", seed=seed, accuracy=ours, loss_params=learned, **cub
        )
    resnet = {**cub, "backbone": "resnet50", "dims": 2048}
    make_run(r, "resnet", loss="softmax", accuracy=0.6, **resnet)
    fixed = {**learned, "learn_weights": False}
    make_run(r, "fixed", loss="nngk", accuracy=0.5, loss_params=fixed, **cub)
    make_run(
        r,
        "frozen",
        loss="nngk",
        accuracy=0.4,
        loss_params=learned,
        **cub | {"freeze_backbone": True},
    )
    make_run(r, "few", loss="softmax", accuracy=0.3, **cub | {"train_per_class": 5})
    # A run from before metrics.json kept its settings: they come from config.json.
    old = {k: v for k, v in cub.items() if k in ("dataset", "protocol", "dims")}
    config = {**cub, "freeze_backbone": True, "resolved_loss_params": fixed}
    make_run(r, "old", config=config, loss="nngk", accuracy=0.2, **old)
    make_run(r, "base", loss="untrained", dims=64, dataset="cub", protocol="classify")
    return r


def test_classification_table_has_a_row_per_backbone_and_a_column_per_loss(
    classify_results, tmp_path
):
    out = tmp_path / "reports"
    written, problems, _, _ = write_report(classify_results, out)
    assert problems == []
    assert {"classification.md", "classification.csv", "classification-ablation.csv"} <= {
        p.name for p in written
    }
    measured, _, published = (out / "classification.md").read_text().partition("## Published")
    rows = md_rows(measured.split("## Ablation")[0])
    assert rows[0] == ["data set", "backbone", "init", "dims", "nngk", "softmax", "runs"]
    assert row_of(rows, "vgg16", "4096") == [
        "cub",
        "vgg16",
        "imagenet",
        "4096",
        "80.00 ± 63.53",
        "75.00 ± 63.53",
        "2",
    ]  # fmt: skip  (runs: the row's distinct seeds, two per loss)
    assert row_of(rows, "resnet50") == ["cub", "resnet50", "imagenet", "2048", "-", "60.00", "1"]
    assert "paper" not in measured
    csv = pd.read_csv(out / "classification.csv")
    vgg = csv[csv["backbone"] == "vgg16"].iloc[0]
    assert vgg["softmax mean"] == pytest.approx(0.75) and vgg["nngk mean"] == pytest.approx(0.80)
    # The 95 % t interval of two seeds, as in the main table: t(0.975, 1) * s / sqrt(2).
    half = stats.t.ppf(0.975, 1) * np.std([0.7, 0.8], ddof=1) / np.sqrt(2)
    assert vgg["softmax ci"] == pytest.approx(half, abs=1e-6)
    # Meyer et al. 2018 Table 3 (CUB) from the reference data, beside the measured rows.
    paper = md_rows(published)
    assert row_of(paper, "Table 3", "vgg16")[-2:] == ["78.63", "75.37"]
    assert row_of(paper, "Table 3", "alexnet")[-2:] == ["66.95", "62.41"]


def test_the_ablation_keeps_other_settings_apart_and_a_seeds_copies_as_one(classify_results):
    # Before: a 3-epoch run joined the 20-epoch row (one mean of both), and a copy of a seed
    # counted as one more run.
    cub = dict(dataset="cub", protocol="classify", backbone="vgg16", pretrained="imagenet")
    cub.update(embedding="backbone", dims=4096, freeze_backbone=False, train_per_class=0)
    learned = {"sigma": 100.0, "k": 100, "update_interval": 10, "learn_weights": True}
    make_run(classify_results, "longer", loss="nngk", seed=0, accuracy=0.3, epochs=3,
             loss_params=learned, **cub)  # fmt: skip
    make_run(classify_results, "copy", loss="nngk", seed=1, accuracy=0.95, loss_params=learned,
             **cub)  # fmt: skip
    table = ablation_table(load_runs(classify_results)[0])
    trained = table[(table["fine_tune"] == "yes") & (table["learn_weights"] == "yes")]
    got = {row.variant: (round(row.mean, 6), row.runs) for row in trained.itertuples()}
    # seeds 0 and 1 at 20 epochs, seed 1 the mean of its copies 0.85 and 0.95
    assert got == {"nngk, 20 epochs": (0.825, 2), "nngk, 3 epochs": (0.3, 1)}


def test_ablation_holds_learned_and_fixed_weights_trained_and_frozen_backbones(
    classify_results, tmp_path
):
    out = tmp_path / "reports"
    write_report(classify_results, out)
    ablation = pd.read_csv(out / "classification-ablation.csv")
    got = {
        (r.learn_weights, r.fine_tune): (round(r.mean, 6), r.runs) for r in ablation.itertuples()
    }
    assert got == {
        ("yes", "yes"): (0.8, 2),
        ("no", "yes"): (0.5, 1),
        ("yes", "no"): (0.4, 1),
        ("no", "no"): (0.2, 1),  # the old run: frozen and fixed, read from its config.json
    }
    text = (out / "classification.md").read_text()
    (setup,) = [x for x in text.splitlines() if x.startswith("Setup of ")]  # one classify table
    assert setup.startswith("Setup of cub-classify: ")
    # the rows' own seeds: the two vgg16 cells ran 2, the ablation's variants and resnet50's 1
    assert setup.endswith(
        "; 1 seed (0); 2 seeds (0, 1) for nngk, vgg16, trained backbone, all per class, learned "
        "weights 4096-d / softmax, vgg16, trained backbone, all per class 4096-d."
    )
    section = text.split("## Ablation")[1].split("## Published")[0]
    by_setting = {(row[5], row[6]): row[7:] for row in md_rows(section)[1:]}
    assert {row[4] for row in md_rows(section)[1:]} == {"nngk"}  # no other setting differs
    assert by_setting == {
        ("yes", "yes"): ["80.00 ± 63.53", "2"],
        ("no", "yes"): ["50.00", "1"],
        ("yes", "no"): ["40.00", "1"],
        ("no", "no"): ["20.00", "1"],
    }
    table5 = md_rows(text.split("Table 5:")[1])
    assert row_of(table5, "Random")[-4:] == ["yes", "no", "no", "1.35"]
    assert row_of(table5, "ImageNet", "49.22")[-4:] == ["yes", "yes", "no", "49.22"]


def test_no_classification_files_without_classify_runs(tmp_path):
    make_run(tmp_path / "results", "a", loss="nngk")
    written, _, _, _ = write_report(tmp_path / "results", tmp_path / "out")
    assert not any(p.name.startswith("classification") for p in written)


# ---------------------------------------------------------------- Liu et al. 2019 Table 1


def test_train_test_table_per_embedding_split_and_method(tmp_path):
    r = tmp_path / "results"
    cub = dict(dataset="cub", protocol="metric", backbone="resnet18")
    values = {  # (method, embedding, dims): (train R@1, test R@1)
        ("all", "fc", 64): (0.9, 0.4),
        ("all", "gap", 512): (0.8, 0.6),
        ("easy-positive", "fc", 64): (0.7, 0.5),
    }
    for (miner, emb, dims), (train, test) in values.items():
        for seed in (0, 1):
            make_run(
                r,
                f"{miner}-{emb}-{seed}",
                loss="triplet-nca",
                miner=miner,
                embedding=emb,
                dims=dims,
                seed=seed,
                **{"recall@1": test + seed / 10, "train_recall@1": train},
                **cub,
            )
    # No train_recall@1 in metrics.json: R@1 of its saved training embeddings. Points 0 and 1
    # are each other's nearest neighbour (same class); 2's is 3 (another class) and 3's is 2.
    emb = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [5.2, 0.0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 2])
    arrays = {store.TRAIN_EMBEDDINGS: (emb, labels)}
    make_run(r, "npair-gap", arrays=arrays, loss="npair", embedding="gap", dims=512, **cub)
    make_run(r, "base", loss="untrained", dims=64, dataset="cub")
    out = tmp_path / "reports"
    written, problems, _, _ = write_report(r, out)
    assert problems == [] and out / "cub-train-test.md" in written
    measured, _, published = (out / "cub-train-test.md").read_text().partition("## Published")
    rows = md_rows(measured)
    assert rows[0] == [
        "embedding (split)",
        "dims",
        "npair",
        "triplet-nca (all)",
        "triplet-nca (easy-positive)",
        "runs",
    ]
    assert [row[0] for row in rows[1:]] == ["FC (train)", "GAP (train)", "FC (test)", "GAP (test)"]
    # runs: the row's distinct seeds (0 and 1), whichever losses ran them
    assert rows[1] == ["FC (train)", "64", "-", "90.00 ± 0.00", "70.00 ± 0.00", "2"]
    assert rows[2] == ["GAP (train)", "512", "50.00", "80.00 ± 0.00", "-", "2"]
    assert rows[3][3:5] == ["45.00 ± 63.53", "55.00 ± 63.53"]
    assert rows[4][2:4] == ["50.00", "65.00 ± 63.53"]  # npair's test R@1 is its 0.5
    _, idx = knn(emb, 1)
    assert (labels[idx[:, 0]] == labels).mean() == 0.5
    csv = pd.read_csv(out / "cub-train-test.csv")
    assert csv.loc[csv["row"] == "GAP (train)", "npair mean"].item() == pytest.approx(0.5)
    # Liu et al. 2019 Table 2 (CUB) beside it, with its own strategy names.
    paper = md_rows(published)
    assert paper[0][-4:] == ["BatchAll", "EPSHN", "Npair", "SHN"]
    assert row_of(paper, "FC (train)")[-4:] == ["90.91", "85.79", "92.18", "86.72"]
    assert row_of(paper, "GAP (test)")[-4:] == ["59.70", "63.51", "63.23", "63.32"]


def test_train_test_table_needs_train_metrics_or_two_embeddings(tmp_path):
    r = tmp_path / "results"
    make_run(r, "a", loss="nngk")
    make_run(r, "b", loss="softmax")
    written, _, _, _ = write_report(r, tmp_path / "out")
    assert not any("train-test" in p.name for p in written)
    make_run(r, "c", loss="nngk", embedding="gap")  # two embeddings: R@1 of the train npz
    written, _, _, _ = write_report(r, tmp_path / "out")
    assert (tmp_path / "out" / "digits-train-test.md") in written


def test_runs_differing_in_a_setting_get_their_own_rows(tmp_path):
    r = tmp_path / "results"
    make_run(r, "fc", loss="npair", embedding="fc", **{"map@r": 0.4})
    make_run(r, "gap", loss="npair", embedding="gap", **{"map@r": 0.6})
    k = {"sigma": 1.0, "update_interval": 1}
    for dims, sigma in ((16, 1.0), (32, 2.0)):  # sigma follows the size: not a variant
        make_run(r, f"k5-{dims}", loss="nngk", dims=dims, loss_params={**k, "k": 5, "sigma": sigma})
    make_run(r, "k50", loss="nngk", loss_params={**k, "k": 50})
    df, _ = load_runs(r)
    names = dict(zip(df["run"], df["name"], strict=True))
    assert names == {
        "fc": "npair, FC",
        "gap": "npair, GAP",
        "k5-16": "nngk, FC, k=5",
        "k5-32": "nngk, FC, k=5",
        "k50": "nngk, FC, k=50",
    }
    assert variant_labels(df, ["embedding", "param_k"]).tolist() == ["npair"] * 2 + ["nngk"] * 3
    write_report(r, tmp_path / "out")
    csv = pd.read_csv(tmp_path / "out" / "digits.csv")
    gap = csv[csv["method"] == "npair, GAP"].iloc[0]
    assert gap["map@r_mean"] == pytest.approx(0.6) and gap["runs"] == 1


# ------------------------------ the Tiny ImageNet pair-verification report Table 3


def categories(seed: int, accuracies) -> pd.DataFrame:
    n = len(accuracies)
    return pd.DataFrame(
        {
            "label": np.arange(n),
            "class_name": [f"c{i:02d}" for i in range(n)],
            "pairs": 20,
            "accuracy": accuracies,
            "far": np.linspace(0, 0.5, n) + seed / 100,
            "frr": np.linspace(0.5, 0, n),
        }
    ).sort_values("accuracy", ascending=False)


def test_best_and_worst_categories_averaged_over_seeds(tmp_path):
    r = tmp_path / "results"
    tiny = dict(dataset="tinyimagenet", protocol="pairs", loss="contrastive", dims=96)
    seen = {
        0: [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2],
        1: [0.5, 0.8, 0.85, 0.6, 0.2, 0.4, 0.3, 0.2],
    }
    for seed, acc in seen.items():
        unseen = categories(seed, [0.6, 0.5, 0.4, 0.3])
        tables = {"categories_seen.csv": categories(seed, acc), "categories_unseen.csv": unseen}
        make_run(r, f"c{seed}", tables=tables, seed=seed, seen_accuracy=0.8, **tiny)
    out = tmp_path / "reports"
    written, problems, _, _ = write_report(r, out)
    assert problems == []
    table = pd.read_csv(out / "tinyimagenet-pairs-categories.csv")
    seen_rows = table[table["split"] == "seen"]
    # Mean accuracy over the two seeds: c00 .7, c01 .8, c02 .775, c03 .6, c04 .35, c05 .4,
    # c06 .3, c07 .2.
    assert seen_rows["class_name"].tolist() == ["c01", "c02", "c00", "c04", "c06", "c07"]
    assert seen_rows["rank"].tolist() == ["best"] * 3 + ["worst"] * 3
    assert seen_rows["position"].tolist() == [1, 2, 3, 6, 7, 8]
    assert seen_rows["accuracy"].tolist() == pytest.approx([0.8, 0.775, 0.7, 0.35, 0.3, 0.2])
    c00 = seen_rows[seen_rows["class_name"] == "c00"].iloc[0]
    assert c00["far"] == pytest.approx(0.005)
    assert c00["accuracy_ci"] == pytest.approx(2.541244, abs=1e-5)  # t(0.975, 1) * 0.2828 / √2
    assert c00["seeds"] == 2
    # Four unseen categories: the best three, and the one left as the worst.
    unseen_rows = table[table["split"] == "unseen"]
    assert unseen_rows["class_name"].tolist() == ["c00", "c01", "c02", "c03"]
    measured, _, published = (
        (out / "tinyimagenet-pairs-categories.md").read_text().partition("## Published")
    )
    row = row_of(md_rows(measured), "seen", "c00")
    assert row[:6] == ["contrastive", "96", "seen", "best", "3 of 8", "c00"]
    assert row[6:] == ["70.00 ± 254.12", "0.50 ± 6.35", "50.00 ± 0.00", "2"]
    paper = md_rows(published)
    assert row_of(paper, "bullet train")[-5:] == [
        "1 of 100",
        "bullet train",
        "97.60",
        "0.00",
        "4.80",
    ]
    assert row_of(paper, "binoculars")[2] == "unseen"
    assert "tinyimagenet-pairs-categories.md" in (out / "README.md").read_text()


# ---------------------------------------------------------------- presets


def test_a_papers_preset_gets_its_own_table_with_the_baseline(tmp_path):
    r = tmp_path / "results"
    make_run(r, "base", loss="untrained", dims=64, **{"map@r": 0.61})
    make_run(r, "plain", loss="npair", dims=64, **{"map@r": 0.40})
    # A run recorded before the preset's rename (seed003) joins the one recorded after.
    for seed, preset in [(0, "seed003"), (1, "liu2019")]:
        make_run(r, f"s{seed}", loss="npair", dims=64, seed=seed, preset=preset, **{"map@r": 0.3})
    df, problems = load_runs(r)
    assert not problems
    tables = {t: sorted(part["loss"]) for t, part in df.groupby("table")}
    assert tables == {
        "digits": ["npair", "untrained"],
        "digits-liu2019": ["npair", "npair", "untrained"],
    }
    write_report(r, tmp_path / "out")
    rows = md_rows((tmp_path / "out" / "digits-liu2019.md").read_text())
    assert row_of(rows, "raw inputs")[7] == "61.00"  # MAP@R
    assert row_of(rows, "npair")[7:] == ["30.00 ± 0.00", "50.00 ± 0.00", "-", "2"]  # NMI best of 5
    assert row_of(md_rows((tmp_path / "out" / "digits.md").read_text()), "npair")[-1] == "1"


# ---------------------------------------------------------------- Sharma et al. 2015


def test_linear_methods_get_a_table_per_split_with_mprec_and_its_figure(tmp_path):
    r = tmp_path / "results"
    make_run(r, "base", loss="untrained", dims=64, protocol="classify", **{"map@r": 0.6})
    for method, value in (("nml", 0.9), ("pca", 0.8)):
        curve = pd.DataFrame({"K": np.arange(1, 51), "mprec": np.linspace(value, 0.5, 50)})
        for split in ("classify", "metric"):
            make_run(
                r,
                f"{method}-{split}",
                loss=method,
                dims=8,
                protocol="linear",
                data_protocol=split,
                tables={"mprec.csv": curve},
                config={"feature_dims": 64, "fit_size": 900, "params": {"lr": value / 9}},
                **{"mprec@1": value, "mprec@10": curve["mprec"][9], "mprec@50": 0.5},
            )
    df, _ = load_runs(r)
    assert sorted(df["table"].unique()) == [
        "digits-classify",
        "digits-classify-linear",
        "digits-linear",
    ]
    written, problems, _, _ = write_report(r, tmp_path / "out")
    assert not problems
    rows = md_rows((tmp_path / "out" / "digits-classify-linear.md").read_text())
    assert rows[0][8:12] == ["NMI (best of 5)", "mprec@1", "mprec@10", "mprec@50"]
    assert row_of(rows, "nml")[9:12] == [
        "90.00",
        f"{100 * np.linspace(0.9, 0.5, 50)[9]:.2f}",
        "50.00",
    ]
    assert row_of(rows, "raw inputs")[7:10] == ["60.00", "50.00", "-"]
    assert (
        (tmp_path / "out" / "digits-classify-linear-mprec.png").read_bytes().startswith(b"\x89PNG")
    )
    assert "digits-linear-mprec.png" in (tmp_path / "out" / "README.md").read_text()
    # no network was trained: not the defaults' "backbone small_cnn; epochs 20" (their record
    # has none), but what the methods were fitted on and with
    page = (tmp_path / "out" / "digits-linear.md").read_text()
    assert "Setup: linear methods (Sharma et al. 2015), no network trained, fitted on the " \
        "inputs as given (64-d, 900 training items); parameters: nml: lr 0.1; pca: lr 0.0888889; " \
        "1 seed (0)." in page  # fmt: skip
    table = pd.read_csv(tmp_path / "out" / "digits-linear.csv").set_index("method")
    assert table.loc["nml", ["backbone", "epochs", "lr"]].tolist() == ["-", "-", "-"]


def test_a_table_with_many_methods_is_built_without_pandas_warnings():
    # 60 methods as columns (a learning-rate sweep): each column inserted alone fragmented the
    # frame, and pandas printed a PerformanceWarning into every report over such a sweep.
    df = pd.DataFrame(
        [
            {"row": "test", "column": f"m{c:02d}", "seed": seed, "value": c + seed}
            for c in range(60)
            for seed in (0, 1)
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wide = mean_ci_table(df, ["row"], "column", "value")
    assert list(wide.columns[:3]) == ["row", "m00 mean", "m00 ci"]
    assert wide.loc[0, "m59 mean"] == 59.5 and wide.loc[0, "runs"] == 2
    # seeds 7 and 8: sd 1/sqrt(2), so the 95 % t half-width is t(0.975, 1) x 1/2
    assert wide.loc[0, "m07 ci"] == pytest.approx(stats.t.ppf(0.975, 1) * 0.5)
