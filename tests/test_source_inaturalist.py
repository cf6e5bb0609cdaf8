import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.inaturalist import LAYOUT, SOURCE, read_inaturalist
from bench.data.splits import make_splits
from tests.fixtures.inaturalist import SPLIT_FILES, make_inaturalist, photos


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_inaturalist(tmp_path_factory.mktemp("inat"), train=5, test=3)


def error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_inaturalist(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_the_train_file_then_the_test_file(root: Path) -> None:
    df = read_inaturalist(root)
    listed = photos(5, 3)
    expected = [p for split in ("train", "test") for p in listed if p.split == split]
    assert list(df.columns) == [*COLUMNS, "supercategory"]
    assert df.path.tolist() == [str(root / "inaturalist" / p.path) for p in expected]
    assert df.label.tolist() == [p.category for p in expected]  # the category folder
    assert df.class_name.tolist() == [f"{p.supercategory} {p.category}" for p in expected]
    assert df.split.tolist() == [p.split for p in expected]
    assert df.supercategory.tolist() == [p.supercategory for p in expected]
    assert all(Path(p).is_file() for p in df.path)
    assert df.groupby("split").label.nunique().to_dict() == {"test": 3, "train": 5}


def test_pml_reads_the_fixture_as_the_reader_does(root: Path) -> None:
    """PML takes each image's label from the competition's json files, the reader from the
    category folder, as Brown et al. 2020's loader does: the same classes."""
    from pytorch_metric_learning.datasets import INaturalist2018

    df = read_inaturalist(root)
    for split in ("train", "test"):
        theirs = INaturalist2018(str(root / "inaturalist"), split=split)
        ours = df[df.split == split]
        assert list(zip(theirs.paths, theirs.labels, strict=True)) == list(
            zip(ours.path, ours.label, strict=True)
        )


def test_the_split_files_may_lie_beside_the_images(tmp_path: Path, root: Path) -> None:
    beside = make_inaturalist(tmp_path, train=5, test=3, splits_beside=True) / "inaturalist"
    assert not (beside / "Inat_dataset_splits").exists()
    theirs = read_inaturalist(beside)  # the data set's folder itself
    ours = read_inaturalist(root)
    assert theirs.drop(columns="path").equals(ours.drop(columns="path"))


def test_the_metric_protocol_takes_the_published_split(root: Path) -> None:
    table = read_inaturalist(root)
    labels, split = table.label.to_numpy(), table.split.to_numpy()
    s = make_splits("metric", table, 0.2, val_split="classes")
    assert s.test.tolist() == np.nonzero(split == "test")[0].tolist()
    train_classes = np.unique(labels[split == "train"])  # 6953 ... 7477
    assert set(labels[s.val]) == set(train_classes[-2:]) and len(s.queries) == 0
    assert set(labels[s.train]) == set(train_classes[:-2])
    halves = make_splits("metric", table.assign(split=""), 0.2, val_split="classes")
    assert halves.test.tolist() != s.test.tolist()  # what the paper protocol would take


def test_not_found_names_the_layout_the_source_and_the_data_root(tmp_path: Path) -> None:
    message = error(tmp_path / "absent")
    assert LAYOUT in message and SOURCE in message
    assert f"looked in the data root {tmp_path / 'absent'};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message
    assert str(tmp_path / "inaturalist") in error(tmp_path)


@pytest.mark.parametrize(
    "missing",
    [f"Inat_dataset_splits/{SPLIT_FILES['test']}", "train_val2018/Aves", "train_val2018"],
)
def test_a_missing_part_of_the_layout_is_named(tmp_path: Path, missing: str) -> None:
    base = make_inaturalist(tmp_path, train=2, test=2) / "inaturalist"
    target = base / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = error(base)
    assert str(target) in message and SOURCE in message and "--data-root" in message


@pytest.mark.parametrize(
    "which, old, new, expected",
    [
        ("train", "train_val2018/Plantae/", "Plantae/", "line 1 is not train_val2018/"),
        ("test", "/7346/", "/seven/", "line 1 is not train_val2018/"),
        ("test", "Insecta/7346/", "Plantae/7477/", "lists category 7477, which "),
    ],
)
def test_a_malformed_split_file_is_one_line_naming_it(
    tmp_path: Path, which: str, old: str, new: str, expected: str
) -> None:
    path = make_inaturalist(tmp_path, train=2, test=2) / "inaturalist/Inat_dataset_splits"
    path /= SPLIT_FILES[which]
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    message = error(path.parents[1])
    assert SPLIT_FILES[which] in message and expected in message
    assert "--data-root" not in message


def test_an_empty_split_file_is_refused(tmp_path: Path) -> None:
    base = make_inaturalist(tmp_path, train=2, test=2) / "inaturalist"
    (base / "Inat_dataset_splits" / SPLIT_FILES["test"]).write_text("\n")
    assert f"{SPLIT_FILES['test']}: lists no images" in error(base)
