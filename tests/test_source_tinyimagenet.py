import shutil
from pathlib import Path

import pytest

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.tinyimagenet import LAYOUT, SOURCE, read_tinyimagenet
from tests.fixtures.tinyimagenet import make_tinyimagenet


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tinyimagenet(tmp_path_factory.mktemp("tin"))


def _copy(tmp_path: Path) -> Path:
    return make_tinyimagenet(tmp_path, classes=3, train_per_class=2, val_per_class=1)


def _error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_tinyimagenet(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_train_and_val_with_labels_in_sorted_wnid_order(root: Path) -> None:
    df = read_tinyimagenet(root)
    base = root / "tiny-imagenet-200"
    listed = (base / "wnids.txt").read_text().split()
    assert listed != sorted(listed)
    assert list(df.columns) == [*COLUMNS, "wnid"]
    assert df.split.value_counts().to_dict() == {"train": 6 * 4, "val": 6 * 2}
    assert df.label.tolist() == [sorted(listed).index(w) for w in df.wnid]
    assert df.groupby("split").label.nunique().to_dict() == {"train": 6, "val": 6}
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in df.path)
    assert not df.path.str.contains("/test/").any()
    train = df[df.split == "train"]
    assert all(Path(p).parent.parent.name == w for p, w in zip(train.path, train.wnid, strict=True))


def test_class_name_is_first_name_from_words(root: Path) -> None:
    df = read_tinyimagenet(root)
    words = dict(line.split("\t") for line in (root / "tiny-imagenet-200/words.txt").open())
    for wnid, name in zip(df.wnid, df.class_name, strict=True):
        assert name == words[wnid].split(",")[0].strip()


def test_boxes_come_from_the_box_and_annotation_files(root: Path) -> None:
    df = read_tinyimagenet(root).set_index("path")
    assert df[["x1", "y1", "x2", "y2"]].notna().all().all()
    base = root / "tiny-imagenet-200"
    wnid = (base / "wnids.txt").read_text().split()[0]
    for line in (base / "train" / wnid / f"{wnid}_boxes.txt").read_text().splitlines():
        name, *box = line.split("\t")
        row = df.loc[str(base / "train" / wnid / "images" / name)]
        assert row[["x1", "y1", "x2", "y2"]].tolist() == [float(v) for v in box]
    for line in (base / "val" / "val_annotations.txt").read_text().splitlines():
        name, wnid, *box = line.split("\t")
        row = df.loc[str(base / "val" / "images" / name)]
        assert row.wnid == wnid and row.split == "val"
        assert row[["x1", "y1", "x2", "y2"]].tolist() == [float(v) for v in box]


def test_accepts_the_dataset_folder_itself(root: Path) -> None:
    assert read_tinyimagenet(root / "tiny-imagenet-200").equals(read_tinyimagenet(root))


def test_clashing_first_names_fall_back_to_all_words(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    words = root / "tiny-imagenet-200" / "words.txt"
    words.write_text(words.read_text().replace("thing ", "thing, "))
    names = set(read_tinyimagenet(root).class_name)
    assert len(names) == 3 and all(n.startswith("thing, ") for n in names)


def test_missing_dataset_names_path_and_source(tmp_path: Path) -> None:
    message = _error(tmp_path)
    assert str(tmp_path / "tiny-imagenet-200") in message and SOURCE in message
    message = _error(tmp_path / "absent")
    assert str(tmp_path / "absent") in message and SOURCE in message


@pytest.mark.parametrize(
    "relative", ["wnids.txt", "words.txt", "val/val_annotations.txt", "val/images", "train"]
)
def test_missing_file_or_folder_is_named(tmp_path: Path, relative: str) -> None:
    base = _copy(tmp_path) / "tiny-imagenet-200"
    target = base / relative
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _error(base)
    assert str(target) in message and SOURCE in message


def test_val_annotation_with_unknown_wnid(tmp_path: Path) -> None:
    base = _copy(tmp_path) / "tiny-imagenet-200"
    path = base / "val" / "val_annotations.txt"
    lines = path.read_text().splitlines()
    fields = lines[0].split("\t")
    fields[1] = "n99999999"
    path.write_text("\n".join(["\t".join(fields), *lines[1:]]) + "\n")
    message = _error(base)
    assert "val_annotations.txt" in message and "n99999999" in message


def test_wnid_without_words_and_malformed_boxes(tmp_path: Path) -> None:
    base = _copy(tmp_path) / "tiny-imagenet-200"
    wnid = sorted((base / "wnids.txt").read_text().split())[0]
    boxes = base / "train" / wnid / f"{wnid}_boxes.txt"
    boxes.write_text(boxes.read_text().replace("\t", " ", 1))
    assert "boxes.txt" in _error(base)
    words = base / "words.txt"
    words.write_text("".join(x for x in words.open() if not x.startswith(wnid)))
    message = _error(base)
    assert "words.txt" in message and wnid in message


@pytest.mark.parametrize("missing", ["", "wnids.txt", "val/images"])
def test_not_found_names_the_data_root_the_layout_and_how_to_give_another(
    tmp_path: Path, missing: str
) -> None:
    root = tmp_path / "absent"
    if missing:
        root = make_tinyimagenet(tmp_path, classes=1, train_per_class=1, val_per_class=1)
        (target,) = root.glob(f"*/{missing}")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _error(root)
    assert LAYOUT in message and SOURCE in message and f"looked in the data root {root};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message


def test_macos_companion_files_are_not_read_as_images(tmp_path):
    # Before: train/<wnid>/images/._<name>.JPEG stopped the run ("cannot decode the image").
    root = make_tinyimagenet(tmp_path)
    images = next((root / "tiny-imagenet-200" / "train").iterdir()) / "images"
    (images / f"._{next(images.iterdir()).name}").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    table = read_tinyimagenet(root)
    assert not table["path"].str.contains("/._").any() and len(table) == 6 * 4 + 6 * 2
