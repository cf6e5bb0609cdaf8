import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.cub import read_cub
from tests.fixtures.cars196 import specimens
from tests.fixtures.cub import class_folder, cub_box, make_cub

URL = "https://www.vision.caltech.edu/datasets/cub_200_2011/"
FILES = [
    "images.txt",
    "image_class_labels.txt",
    "train_test_split.txt",
    "bounding_boxes.txt",
    "classes.txt",
]


def assert_one_line_error(excinfo: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    for needle in (*needles, URL):
        assert needle in message


def test_reads_every_image_in_images_txt_order(tmp_path):
    df = read_cub(make_cub(tmp_path, classes=6, per_class=4))
    specs = specimens(6, 4)
    assert tuple(df.columns) == COLUMNS and len(df) == 24
    assert df["label"].tolist() == [c for c in range(1, 7) for _ in range(4)]
    assert df["class_name"].tolist() == [class_folder(s.label) for s in specs]
    assert df.loc[0, "class_name"] == "001.Species_1"
    images = tmp_path / "CUB_200_2011" / "images"
    assert df.loc[0, "path"] == str(images / "001.Species_1" / "Species_1_0001_101.jpg")
    assert all(
        Path(p).is_file() and Path(p).parent.name == class_folder(label)
        for p, label in zip(df["path"], df["label"], strict=True)
    )
    assert df["split"].tolist() == ["train", "test"] * 12


def test_boxes_are_corners_from_x_y_width_height(tmp_path):
    df = read_cub(make_cub(tmp_path))
    boxes = df[["x1", "y1", "x2", "y2"]].to_numpy()
    assert boxes.dtype == np.float64
    assert boxes[0].tolist() == [2.0, 2.0, 29.0, 18.0]  # the file says "1 2.0 2.0 27.0 16.0"
    expected = [[x, y, x + w, y + h] for x, y, w, h in map(cub_box, specimens(6, 4))]
    assert boxes.tolist() == expected
    for row in df.itertuples():
        w, h = Image.open(row.path).size
        assert 0 <= row.x1 < row.x2 <= w and 0 <= row.y1 < row.y2 <= h
        assert (row.x2 - row.x1, row.y2 - row.y1) != (w, h)


def test_root_may_be_the_cub_folder_itself(tmp_path):
    root = make_cub(tmp_path, classes=2, per_class=2)
    assert read_cub(root / "CUB_200_2011").equals(read_cub(root))


def test_no_data_names_the_layout_and_the_source(tmp_path):
    with pytest.raises(DatasetError) as excinfo:
        read_cub(tmp_path)
    assert_one_line_error(excinfo, str(tmp_path / "CUB_200_2011" / "images.txt"), "classes.txt")


@pytest.mark.parametrize("name", FILES)
def test_each_missing_index_file_is_named(tmp_path, name):
    root = make_cub(tmp_path, classes=2, per_class=2)
    (root / "CUB_200_2011" / name).unlink()
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root)
    assert_one_line_error(excinfo, str(root / "CUB_200_2011" / name))


def test_missing_image_folder_is_named(tmp_path):
    root = make_cub(tmp_path, classes=2, per_class=2)
    shutil.rmtree(root / "CUB_200_2011" / "images")
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root / "CUB_200_2011")
    assert_one_line_error(excinfo, str(root / "CUB_200_2011" / "images"))


@pytest.mark.parametrize("name", FILES[1:4])
def test_ids_missing_from_a_file_are_refused(tmp_path, name):
    root = make_cub(tmp_path, classes=2, per_class=2)
    path = root / "CUB_200_2011" / name
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root)
    assert_one_line_error(excinfo, name, "image ids")


def test_a_class_missing_from_classes_txt_is_refused(tmp_path):
    root = make_cub(tmp_path, classes=2, per_class=2)
    (root / "CUB_200_2011" / "classes.txt").write_text("1 001.Species_1\n")
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root)
    assert_one_line_error(excinfo, "image_class_labels.txt", "class 2")


def test_a_malformed_box_is_refused(tmp_path):
    root = make_cub(tmp_path, classes=1, per_class=2)
    (root / "CUB_200_2011" / "bounding_boxes.txt").write_text("1 2.0 2.0 27.0\n2 1 1 5 5\n")
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root)
    assert_one_line_error(excinfo, "bounding_boxes.txt", "4 numbers")


@pytest.mark.parametrize("missing", ["", "images", "classes.txt"])
def test_not_found_names_the_data_root_the_layout_and_how_to_give_another(tmp_path, missing):
    root = tmp_path / "absent"
    if missing:
        root = make_cub(tmp_path, classes=1, per_class=1)
        target = root / "CUB_200_2011" / missing
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(DatasetError) as excinfo:
        read_cub(root)
    assert_one_line_error(excinfo, "root/CUB_200_2011/ with images.txt", f"data root {root};")
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in str(excinfo.value)


def test_an_image_listed_twice_is_refused_naming_it(tmp_path):
    # Before: a second id for a test image was read as one more test image, which found its
    # copy as its nearest neighbour (R@1 from 0 to 1 on a fixture).
    base = make_cub(tmp_path) / "CUB_200_2011"
    first = (base / "images.txt").read_text().splitlines()[-1].split()[1]
    for name, line in [
        ("images.txt", f"999 {first}"),
        ("image_class_labels.txt", "999 6"),
        ("train_test_split.txt", "999 0"),
        ("bounding_boxes.txt", "999 1.0 1.0 10.0 10.0"),
    ]:
        with open(base / name, "a") as file:
            file.write(line + "\n")
    with pytest.raises(
        DatasetError, match=r"Species_.*\.jpg is listed 2 times .*list each image once"
    ):
        read_cub(tmp_path)


def test_a_byte_order_mark_is_read_past(tmp_path):
    # Before: "classes.txt has '\ufeff1' where a whole number belongs".
    base = make_cub(tmp_path) / "CUB_200_2011"
    expected = read_cub(tmp_path)
    for name in ("classes.txt", "images.txt", "train_test_split.txt"):
        (base / name).write_text("\ufeff" + (base / name).read_text(), encoding="utf-8")
    assert read_cub(tmp_path).equals(expected)
