import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.sop import LAYOUT, SOURCE, read_sop
from bench.data.splits import make_splits
from bench.evaluation.metrics import evaluate
from tests.fixtures.sop import HEADER, make_sop, products

SOP_KS = (1, 10, 100, 1000)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_sop(tmp_path_factory.mktemp("sop"), train=5, test=3)


def error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_sop(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_both_split_files_in_order(root: Path) -> None:
    df = read_sop(root)
    specs = products(5, 3)
    expected = [(p, path) for p in specs for path in p.paths()]
    assert list(df.columns) == [*COLUMNS, "super_class", "super_class_id"]
    assert len(df) == len(expected) == sum(2 + c % 3 for c in range(1, 9))
    base = root / "Stanford_Online_Products"
    assert df.path.tolist() == [str(base / path) for _, path in expected]
    assert df.label.tolist() == [p.class_id for p, _ in expected]
    assert df.split.tolist() == [p.split for p, _ in expected]
    assert df.super_class.tolist() == [p.category for p, _ in expected]
    assert df.class_name.tolist() == [f"{p.category} {p.product}" for p, _ in expected]
    assert df[["x1", "y1", "x2", "y2"]].isna().all().all()
    assert all(Path(p).is_file() for p in df.path)
    assert set(df.label[df.split == "train"]) == {1, 2, 3, 4, 5}
    assert set(df.label[df.split == "test"]) == {6, 7, 8}


def test_pml_reads_the_fixture_as_the_reader_does(root: Path) -> None:
    from pytorch_metric_learning.datasets import StanfordOnlineProducts

    df = read_sop(root)
    for split in ("train", "test"):
        theirs = StanfordOnlineProducts(str(root), split=split)
        ours = df[df.split == split]
        assert list(zip(theirs.paths, theirs.labels, strict=True)) == list(
            zip(ours.path, ours.label, strict=True)
        )


def test_root_may_be_the_data_set_folder(root: Path) -> None:
    assert read_sop(root / "Stanford_Online_Products").equals(read_sop(root))


def test_the_metric_protocol_takes_the_published_split(root: Path) -> None:
    table = read_sop(root)
    labels, split = table.label.to_numpy(), table.split.to_numpy()
    s = make_splits("metric", table, 0.25, val_split="classes")
    assert s.test.tolist() == np.nonzero(split == "test")[0].tolist()  # not the halves: 4 / 4
    assert set(labels[s.train]) == {1, 2, 3} and set(labels[s.val]) == {4, 5}
    assert sorted([*s.train, *s.val]) == np.nonzero(split == "train")[0].tolist()


def test_not_found_names_the_layout_the_source_and_the_data_root(tmp_path: Path) -> None:
    message = error(tmp_path / "absent")
    assert LAYOUT in message and SOURCE in message
    assert f"looked in the data root {tmp_path / 'absent'};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message
    assert str(tmp_path / "Stanford_Online_Products") in error(tmp_path)


@pytest.mark.parametrize("missing", ["Ebay_test.txt", "Ebay_train.txt", "bicycle_final"])
def test_a_missing_part_of_the_layout_is_named(tmp_path: Path, missing: str) -> None:
    base = make_sop(tmp_path, train=4, test=2) / "Stanford_Online_Products"
    target = base / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = error(base)
    assert str(target) in message and SOURCE in message and "--data-root" in message


def edited(tmp_path: Path, name: str, old: str, new: str) -> Path:
    base = make_sop(tmp_path, train=2, test=2) / "Stanford_Online_Products"
    path = base / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return base


@pytest.mark.parametrize(
    "name, old, new, expected",
    [
        ("Ebay_train.txt", HEADER, "id class super path\n", "does not start with the header"),
        ("Ebay_train.txt", " 1 ", " one ", "line 2 is not"),
        ("Ebay_test.txt", ".JPG\n", ".JPG extra\n", "line 2 is not"),
        ("Ebay_test.txt", " 3 ", " 2 ", "lists class 2, which Ebay_train.txt lists too"),
    ],
)
def test_a_malformed_split_file_is_one_line_naming_it(
    tmp_path: Path, name: str, old: str, new: str, expected: str
) -> None:
    message = error(edited(tmp_path, name, old, new))
    assert name in message and expected in message and "--data-root" not in message


def test_an_empty_split_file_is_refused(tmp_path: Path) -> None:
    base = make_sop(tmp_path, train=2, test=2) / "Stanford_Online_Products"
    (base / "Ebay_test.txt").write_text(HEADER)
    assert "Ebay_test.txt: lists no images" in error(base)


def test_sop_trains_end_to_end_under_the_metric_protocol(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    args = "--backbone small_cnn --pretrained none --resize 20 --crop 16 --epochs 1 --dims 8"
    out = CliRunner().invoke(
        main,
        [
            "run",
            "--loss",
            "contrastive",
            "--dataset",
            "sop",
            "--data-root",
            str(root),
            *args.split(),
            "--batch-size",
            "8",
            "--results",
            str(tmp_path / "r"),
        ],
    )
    assert out.exit_code == 0, out.output
    (run,) = [p for p in (tmp_path / "r").iterdir() if "-contrastive-" in p.name]
    config = json.loads((run / "config.json").read_text())
    # the Reality Check preset's class-disjoint validation, under the options given
    assert (config["val_split"], config["val_fraction"], config["lr"]) == ("classes", 0.25, 3e-4)
    saved = np.load(run / "test_embeddings.npz")
    assert sorted(set(saved["labels"].tolist())) == [5, 6, 7]  # classes 6-8, numbered from 0
    # SOP's own Recall@K (Song et al. 2016) and R-Precision, from the same search, in
    # metrics.json and in the report's table beside MAP@R.
    metrics = json.loads((run / "metrics.json").read_text())
    recalls = [key for key in metrics if key.startswith("recall@")]
    assert recalls == ["recall@1", "recall@10", "recall@100", "recall@1000"]
    expected = evaluate(saved["embeddings"], saved["labels"], clustering=False, ks=SOP_KS).metrics
    assert {key: metrics[key] for key in expected} == pytest.approx(expected, abs=1e-6)
    assert "r_precision" in expected and "recall@2" not in expected
    report = CliRunner().invoke(
        main, ["report", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "out")]
    )
    assert report.exit_code == 0, report.output
    (table,) = (tmp_path / "out").glob("sop-????????.md")  # named with its data's hash
    header = next(line for line in table.read_text().splitlines() if line.startswith("| loss"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    shown = ["R@1", "R@10", "R@100", "R@1000", "NMI", "R-Prec.", "MAP@R"]
    assert columns[columns.index("R@1") : columns.index("MAP@R") + 1] == shown


def test_a_byte_order_mark_is_read_past(tmp_path):
    # Before: a file saved by Windows Notepad "does not start with the header".
    root = make_sop(tmp_path)
    base = root / "Stanford_Online_Products"
    expected = read_sop(root)
    for name in ("Ebay_train.txt", "Ebay_test.txt"):
        (base / name).write_text("\ufeff" + (base / name).read_text(), encoding="utf-8")
    assert read_sop(root).equals(expected)
