import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import normalized_mutual_info_score

from bench.cli import main
from bench.data.datasets import load_dataset, query_flags
from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.inshop import LAYOUT, PARTITION, SOURCE, read_inshop
from bench.data.splits import make_splits
from bench.evaluation.clustering import nmi
from bench.evaluation.metrics import evaluate, evaluate_gallery
from bench.evaluation.retrieval import gallery_scores
from bench.protocols import get_protocol
from bench.train.evaluations import retrieval_scores
from tests.fixtures.inshop import FOLDER, images, make_inshop


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_inshop(tmp_path_factory.mktemp("inshop"), items=16)


def error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_inshop(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_every_image_of_the_partition_in_order(root: Path) -> None:
    df = read_inshop(root)
    expected = images(16)
    assert list(df.columns) == list(COLUMNS)
    assert df.path.tolist() == [str(root / FOLDER / image.name) for image in expected]
    assert df.class_name.tolist() == [image.item for image in expected]
    assert df.label.tolist() == [int(image.item.removeprefix("id_")) for image in expected]
    assert df.split.tolist() == [image.status for image in expected]
    assert df.split.value_counts().to_dict() == {"train": 24, "query": 16, "gallery": 16}
    assert all(Path(p).is_file() for p in df.path)
    trained = set(df.label[df.split == "train"])
    assert trained.isdisjoint(df.label[df.split != "train"]) and len(trained) == 8


def test_images_may_be_under_img_in_the_img_folder(tmp_path: Path, root: Path) -> None:
    other = read_inshop(make_inshop(tmp_path, items=16, layout="Img"))
    assert all(f"/{FOLDER}/Img/img/" in p for p in other.path)
    assert other.drop(columns="path").equals(read_inshop(root).drop(columns="path"))


def test_root_may_be_the_benchmark_folder_or_its_other_name(tmp_path: Path, root: Path) -> None:
    assert read_inshop(root / FOLDER).equals(read_inshop(root))
    renamed = tmp_path / "Inshop_Clothes"
    shutil.copytree(root / FOLDER, renamed)
    assert read_inshop(tmp_path).label.tolist() == read_inshop(root).label.tolist()


def test_the_query_gallery_protocol_tests_queries_and_gallery(root: Path) -> None:
    table = read_inshop(root)
    split, labels = table.split.to_numpy(), table.label.to_numpy()
    s = make_splits("query-gallery", table, 0.2, val_split="classes")
    assert s.test.tolist() == np.nonzero(split != "train")[0].tolist()
    assert s.queries.tolist() == (split[s.test] == "query").tolist()
    train_items = np.unique(labels[split == "train"])
    assert set(labels[s.val]) == set(train_items[-2:])  # whole items held out
    assert set(labels[s.train]) == set(train_items[:-2])


def test_the_metric_protocol_refuses_it_in_one_line(root: Path) -> None:
    with pytest.raises(
        ValueError, match="searches query images in a separate gallery .In-Shop."
    ) as e:
        make_splits("metric", read_inshop(root), 0.2)
    assert str(e.value).endswith("use --protocol query-gallery")


def test_the_test_split_carries_its_query_flags(root: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    opts = dict(data_root=root, resize=16, crop=16, val_split="classes")
    data = load_dataset("inshop", "query-gallery", 0.2, **opts)
    table = read_inshop(root)
    tested = table[table.split != "train"]
    assert query_flags(data.test).tolist() == (tested.split == "query").tolist()
    assert len(data.test) == 32 and query_flags(data.val) is None


def test_not_found_names_the_layout_the_source_and_the_data_root(tmp_path: Path) -> None:
    message = error(tmp_path / "absent")
    assert LAYOUT in message and SOURCE in message
    assert f"looked in the data root {tmp_path / 'absent'};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message
    assert str(tmp_path / FOLDER) in error(tmp_path)


def test_the_command_line_says_it_in_one_line(tmp_path: Path) -> None:
    args = ["run", "--dataset", "inshop", "--protocol", "query-gallery"]
    out = CliRunner().invoke(
        main, [*args, "--data-root", str(tmp_path), "--results", str(tmp_path / "r")]
    )
    assert out.exit_code != 0
    lines = [line for line in out.output.strip().splitlines() if "run(s) into" not in line]
    assert len(lines) == 1 and lines[0].startswith("Error: inshop: "), out.output
    assert "list_eval_partition.txt" in lines[0] and "mmlab.ie.cuhk.edu.hk" in lines[0]


@pytest.mark.parametrize("missing", [PARTITION, "img", "img/MEN/Denim/id_00000005"])
def test_a_missing_part_of_the_layout_is_named(tmp_path: Path, missing: str) -> None:
    base = make_inshop(tmp_path, items=4) / FOLDER
    target = base / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = error(tmp_path)
    assert str(target) in message and SOURCE in message and "--data-root" in message


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("14\n", "15\n", "says 15 images but lists 14"),
        ("14\n", "fourteen\n", "does not start with the number of images"),
        ("evaluation_status", "status", "has no header line"),
        (" query\n", " probe\n", "line 6 is not 'image_name id_NNNNNNNN status'"),
        ("id_00000005            query", "id_00000002            query", "item id_00000002"),
    ],
)
def test_a_malformed_partition_is_one_line_naming_it(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    base = make_inshop(tmp_path, items=4) / FOLDER
    path = base / PARTITION
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    message = error(base)
    assert str(path) in message and expected in message and "--data-root" not in message


def test_inshop_trains_end_to_end_and_scores_queries_in_the_gallery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    root = make_inshop(tmp_path / "data", items=16, by_view=True)  # retrieval far from perfect
    fast = "--backbone small_cnn --pretrained none --resize 20 --crop 16 --epochs 1 --dims 8"
    out = CliRunner().invoke(
        main,
        ["run", "--loss", "contrastive", "--dataset", "inshop", "--protocol", "query-gallery",
         "--data-root", str(root), *fast.split(), "--batch-size", "8",
         "--results", str(tmp_path / "r")],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    (run,) = [p for p in (tmp_path / "r").iterdir() if "-contrastive-" in p.name]
    assert run.name.startswith("inshop-query-gallery-contrastive-d8-s0-")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["protocol"] == "query-gallery" and metrics["val_split"] == "classes"
    saved = np.load(run / "test_embeddings.npz")
    emb, labels = saved["embeddings"], saved["labels"]
    table = read_inshop(root)
    queries = (table.split[table.split != "train"] == "query").to_numpy()
    assert len(labels) == len(queries) == 32
    # In-Shop's own Recall@K (bench.data.recall_ks), from the same gallery search.
    recalls = [k for k in metrics if k.startswith("recall@")]
    assert recalls == ["recall@1", "recall@10", "recall@20", "recall@30", "recall@40"]
    expected = evaluate_gallery(
        emb[queries], labels[queries], emb[~queries], labels[~queries], ks=(1, 10, 20, 30, 40)
    ).metrics
    assert {k: metrics[k] for k in expected} == pytest.approx(expected, abs=1e-6)
    assert set(expected) == {*recalls, "r_precision", "map@r"}
    assert metrics["nmi"] == pytest.approx(nmi(emb[~queries], labels[~queries]), abs=1e-6)
    # every item among all
    every = evaluate(emb, labels, clustering=False, ks=(1, 10, 20, 30, 40)).metrics
    assert {k: every[k] for k in expected} != pytest.approx(expected, abs=1e-3)
    history = (run / "history.csv").read_text().splitlines()[0]
    assert "val_map@r" in history
    # The saved query flags and scores are the gallery search's: the report's bootstrap
    # resamples them, and re-scores a run without them as its protocol searched.
    assert saved["queries"].tolist() == queries.tolist()
    from bench.report.significance import run_query_scores, searched_as_saved
    from bench.runs import store

    kept = store.read_query_scores(run)
    gallery = gallery_scores(
        emb[queries], labels[queries], emb[~queries], labels[~queries], ks=(1, 10, 20, 30, 40)
    )
    again = searched_as_saved(run, emb, labels)
    for name in gallery:
        np.testing.assert_array_equal(kept[name], gallery[name])
        np.testing.assert_array_equal(again[name], gallery[name])
    (run / store.QUERY_SCORES).unlink()
    np.testing.assert_array_equal(run_query_scores(run)["map@r"], gallery["map@r"])
    # Both baseline rows (raw inputs, the untrained network) are searched the same way.
    baselines = [p for p in (tmp_path / "r").iterdir() if "-untrained-" in p.name]
    assert len(baselines) == 2
    for baseline in baselines:
        base = json.loads((baseline / "metrics.json").read_text())
        saved = np.load(baseline / "test_embeddings.npz")
        emb, labels = saved["embeddings"], saved["labels"]
        expected = evaluate_gallery(
            emb[queries], labels[queries], emb[~queries], labels[~queries], ks=(1, 10, 20, 30, 40)
        ).metrics
        assert {k: base[k] for k in expected} == pytest.approx(expected, abs=1e-6), baseline.name
    # The report's table shows In-Shop's own Recall@K and R-Precision beside MAP@R.
    report = CliRunner().invoke(
        main, ["report", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "out")]
    )
    assert report.exit_code == 0, report.output
    (table,) = (tmp_path / "out").glob("inshop-????????-query-gallery.md")
    header = next(line for line in table.read_text().splitlines() if line.startswith("| loss"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    shown = ["R@1", "R@10", "R@20", "R@30", "R@40", "NMI", "R-Prec.", "MAP@R"]
    assert columns[columns.index("R@1") : columns.index("MAP@R") + 1] == shown


def test_a_gallery_protocol_searches_queries_in_the_gallery_only():
    """By hand: query A at 0 and B at 10; gallery B 0.1, A 0.2, B 10.1. A's nearest gallery
    image is B (R@1 miss, AP@R 0 with R = 1); B's is B, then A (R = 2: AP@R = 1/2)."""
    x = np.array([[0.0, 0], [10.0, 0], [0.1, 0], [0.2, 0], [10.1, 0]], dtype=np.float32)
    labels = np.array([0, 1, 1, 0, 1])
    queries = np.array([True, True, False, False, False])
    metrics, _ = retrieval_scores(get_protocol("query-gallery"), x, labels, queries, seed=0)
    expected = {"recall@1": 0.5, "recall@2": 1.0, "recall@4": 1.0, "recall@8": 1.0}
    assert {k: metrics[k] for k in expected} == expected and metrics["map@r"] == 0.25
    # NMI over the gallery alone: k-means finds {0.1, 0.2} and {10.1}
    gallery_nmi = normalized_mutual_info_score([1, 0, 1], [0, 0, 1])
    assert metrics["nmi"] == metrics["nmi_best_of_5"] == pytest.approx(gallery_nmi)
    assert list(metrics) == ["recall@1", "recall@2", "recall@4", "recall@8", "nmi",
                             "nmi_best_of_5", "r_precision", "map@r"]  # fmt: skip
    assert metrics["r_precision"] == 0.25  # A: 0 of its R = 1; B: 1 of its R = 2
    every, _ = retrieval_scores(get_protocol("metric"), x, labels, None, seed=0)
    assert every["map@r"] != 0.25 and every["nmi"] != pytest.approx(gallery_nmi)
    with pytest.raises(ValueError, match="needs the test split's query flags"):
        retrieval_scores(get_protocol("query-gallery"), x, labels, None, seed=0)


def test_the_query_gallery_protocol_needs_queries_and_a_gallery(tmp_path):
    with pytest.raises(ValueError, match="no query or no gallery image: use --protocol metric"):
        make_splits("query-gallery", pd.DataFrame({"label": [0, 0, 1, 1], "split": ""}), 0.0)
    args = ["run", "--protocol", "query-gallery", "--dataset", "digits", "--epochs", "1"]
    out = CliRunner().invoke(main, [*args, "--results", str(tmp_path)])
    lines = [line for line in out.output.strip().splitlines() if "run(s) into" not in line]
    assert out.exit_code != 0 and len(lines) == 1, out.output
    assert lines[0].startswith("Error: the --protocol query-gallery searches query images")


def test_a_features_file_under_the_query_gallery_protocol_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "features.npz"
    split = np.array(["train"] * 8 + ["test"] * 8)
    np.savez(path, features=np.eye(16, 4, dtype=np.float32), labels=np.arange(16) // 4, split=split)
    assert len(load_dataset(f"features:{path}", "metric").test) == 8
    with pytest.raises(ValueError, match="has no query images: a features file's split is train"):
        load_dataset(f"features:{path}", "query-gallery")


def test_features_of_inshop_says_what_to_run_instead(tmp_path):
    # Before: "use --protocol query-gallery", which features refused as no choice of its.
    from click.testing import CliRunner

    from bench.cli import main

    out = CliRunner().invoke(
        main, ["features", "--dataset", "inshop", "--out", str(tmp_path / "f.npz")]
    )
    assert out.exit_code == 1 and "run it with `run --protocol query-gallery`" in out.output
    assert not (tmp_path / "f.npz").exists()
