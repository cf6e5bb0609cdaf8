import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.cars196 import read_cars196
from tests.fixtures.cars196 import class_names, make_cars196, specimens, struct_array, write_mat

URL = "https://ai.stanford.edu/~jkrause/cars/car_dataset.html"


def assert_one_line_error(excinfo: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    for needle in (*needles, URL):
        assert needle in message


def content(df) -> dict[str, tuple]:
    """Each image's label, name, box and split, keyed by the image file's bytes."""
    return {
        hashlib.sha1(Path(r.path).read_bytes()).hexdigest(): (
            r.label,
            r.class_name,
            r.x1,
            r.y1,
            r.x2,
            r.y2,
            r.split,
        )
        for r in df.itertuples()
    }


def test_annos_layout_reads_every_image_in_index_order(tmp_path):
    df = read_cars196(make_cars196(tmp_path, classes=6, per_class=4))
    specs = specimens(6, 4)
    assert tuple(df.columns) == COLUMNS and len(df) == 24
    assert df["label"].tolist() == [c for c in range(1, 7) for _ in range(4)]
    assert df["class_name"].tolist() == [class_names(6)[s.label - 1] for s in specs]
    assert df["path"].tolist() == [str(tmp_path / f"car_ims/{k:06d}.jpg") for k in range(1, 25)]
    assert df["split"].tolist() == ["train", "test"] * 12
    boxes = df[["x1", "y1", "x2", "y2"]].to_numpy()
    assert boxes.dtype == np.float64
    assert boxes.tolist() == [list(map(float, s.box)) for s in specs]
    assert boxes[0].tolist() == [3.0, 3.0, 29.0, 18.0]
    for row in df.itertuples():
        w, h = Image.open(row.path).size
        assert 1 <= row.x1 < row.x2 <= w and 1 <= row.y1 < row.y2 <= h
        assert (row.x2 - row.x1 + 1, row.y2 - row.y1 + 1) != (w, h)


def test_torchvision_layout_takes_the_split_from_the_folder(tmp_path):
    df = read_cars196(make_cars196(tmp_path, layout="torchvision"))
    assert len(df) == 24 and sorted(set(df["label"])) == list(range(1, 7))
    train, test = df[df["split"] == "train"], df[df["split"] == "test"]
    assert len(train) == len(test) == 12 and df.index[df["split"] == "train"].max() == 11
    assert all("/stanford_cars/cars_train/" in p for p in train["path"])
    assert all("/stanford_cars/cars_test/" in p for p in test["path"])
    assert train["path"].iloc[0].endswith("cars_train/00001.jpg")
    assert all(Path(p).is_file() for p in df["path"])
    assert (df.groupby("label")["split"].value_counts() == 2).all()
    names = class_names(6)
    assert all(names[r.label - 1] == r.class_name for r in df.itertuples())


def test_both_layouts_hold_the_same_images_labels_boxes_and_splits(tmp_path):
    annos = content(read_cars196(make_cars196(tmp_path / "a")))
    tv = content(read_cars196(make_cars196(tmp_path / "b", layout="torchvision")))
    assert len(annos) == 24 and annos == tv


def test_torchvision_reads_the_fixture_as_the_reader_does(tmp_path):
    torchvision = pytest.importorskip("torchvision")
    root = make_cars196(tmp_path, layout="torchvision")
    df = read_cars196(root)
    for split in ("train", "test"):
        ds = torchvision.datasets.StanfordCars(str(root), split=split)
        ours = df[df["split"] == split]
        assert [(str(Path(p)), t + 1) for p, t in ds._samples] == list(
            zip(ours["path"], ours["label"], strict=True)
        )
        assert ds.classes == class_names(6)


def test_root_may_be_the_stanford_cars_folder(tmp_path):
    root = make_cars196(tmp_path, layout="torchvision")
    assert read_cars196(root / "stanford_cars").equals(read_cars196(root))


def reshaped_annotations(root: Path, shape: str) -> None:
    mat = scipy.io.loadmat(str(root / "cars_annos.mat"))
    annotations = mat["annotations"]
    if shape == "column":
        annotations = annotations.T
    elif shape == "struct of columns":
        columns = {f: [a[f].item() for a in annotations[0]] for f in annotations.dtype.names}
        annotations = {  # strings as a 1xN cell, numbers as a 1xN matrix
            f: np.array(v, dtype=object if isinstance(v[0], str) else None).reshape(1, -1)
            for f, v in columns.items()
        }
    write_mat(root / "cars_annos.mat", annotations=annotations, class_names=mat["class_names"])


@pytest.mark.parametrize("shape", ["column", "struct of columns"])
def test_other_shapes_of_the_struct_array_read_the_same(tmp_path, shape):
    root = make_cars196(tmp_path)
    expected = read_cars196(root)
    reshaped_annotations(root, shape)
    assert read_cars196(root).equals(expected)


def test_a_single_image_and_class_still_reads(tmp_path):
    df = read_cars196(make_cars196(tmp_path, classes=1, per_class=1))
    assert len(df) == 1 and df.loc[0, "label"] == 1 and df.loc[0, "class_name"] == class_names(1)[0]
    assert df.loc[0, ["x1", "y1", "x2", "y2"]].tolist() == [3.0, 3.0, 29.0, 18.0]


def test_no_data_names_both_layouts_and_the_source(tmp_path):
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(tmp_path)
    assert_one_line_error(excinfo, "cars_annos.mat", "stanford_cars", "car_ims", "torchvision")


def test_missing_image_folder_is_named(tmp_path):
    root = make_cars196(tmp_path)
    shutil.rmtree(root / "car_ims")
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, str(root / "car_ims"))


@pytest.mark.parametrize(
    "missing",
    [
        "cars_test",
        "cars_train",
        "cars_test_annos_withlabels.mat",
        "devkit/cars_meta.mat",
        "devkit/cars_train_annos.mat",
    ],
)
def test_torchvision_layout_names_what_is_missing(tmp_path, missing):
    root = make_cars196(tmp_path, layout="torchvision")
    target = root / "stanford_cars" / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, str(target))


def test_mat_without_a_field_names_the_file_and_field(tmp_path):
    root = make_cars196(tmp_path)
    mat = scipy.io.loadmat(str(root / "cars_annos.mat"))
    fields = [f for f in mat["annotations"].dtype.names if f != "bbox_y2"]
    records = [{f: a[f] for f in fields} for a in mat["annotations"][0]]
    write_mat(
        root / "cars_annos.mat", annotations=struct_array(records), class_names=mat["class_names"]
    )
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, "cars_annos.mat", "bbox_y2")


def test_mat_without_class_names_names_the_variable(tmp_path):
    root = make_cars196(tmp_path)
    mat = scipy.io.loadmat(str(root / "cars_annos.mat"))
    write_mat(root / "cars_annos.mat", annotations=mat["annotations"])
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, "cars_annos.mat", "class_names")


def test_test_annotations_without_labels_are_refused(tmp_path):
    root = make_cars196(tmp_path, layout="torchvision") / "stanford_cars"
    shutil.copy(root / "devkit/cars_test_annos.mat", root / "cars_test_annos_withlabels.mat")
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, "cars_test_annos_withlabels.mat", "class")


def test_a_class_outside_the_class_names_is_refused(tmp_path):
    root = make_cars196(tmp_path, classes=2, per_class=2)
    mat = scipy.io.loadmat(str(root / "cars_annos.mat"))
    write_mat(root / "cars_annos.mat", annotations=mat["annotations"], class_names=["only one"])
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert_one_line_error(excinfo, "cars_annos.mat", "class 2")


def assert_names_the_data_root(message: str, root: Path) -> None:
    assert f"looked in the data root {root};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message


@pytest.mark.parametrize("layout", ["annos", "torchvision"])
def test_not_found_names_the_data_root_the_layouts_and_how_to_give_another(tmp_path, layout):
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(tmp_path / "absent")
    assert_one_line_error(excinfo, "root/cars_annos.mat", "root/stanford_cars/")
    assert_names_the_data_root(str(excinfo.value), tmp_path / "absent")
    root = make_cars196(tmp_path / "copy", classes=1, per_class=1, layout=layout)
    shutil.rmtree(root / ("car_ims" if layout == "annos" else "stanford_cars/cars_train"))
    with pytest.raises(DatasetError) as excinfo:  # a part of the layout missing
        read_cars196(root)
    assert_names_the_data_root(str(excinfo.value), root)


def test_a_malformed_copy_gets_no_data_root_advice(tmp_path):
    root = make_cars196(tmp_path, classes=2, per_class=2)
    mat = scipy.io.loadmat(str(root / "cars_annos.mat"))
    write_mat(root / "cars_annos.mat", annotations=mat["annotations"], class_names=["only one"])
    with pytest.raises(DatasetError) as excinfo:
        read_cars196(root)
    assert "--data-root" not in str(excinfo.value)
