import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.io import loadmat, savemat

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.flowers102 import LAYOUT, SOURCE, read_flowers102
from tests.fixtures.flowers102 import make_flowers102


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_flowers102(tmp_path_factory.mktemp("flowers"))


def _error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_flowers102(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_every_image_with_official_labels_and_splits(root: Path) -> None:
    df = read_flowers102(root)
    base = root / "flowers-102"
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 30 and df.label.value_counts().to_dict() == dict.fromkeys(range(1, 6), 6)
    labels = loadmat(base / "imagelabels.mat")["labels"].ravel()
    assert df.label.tolist() == labels.astype(int).tolist()
    assert (df.class_name == "flower " + df.label.astype(str)).all()
    assert df.path.tolist() == [str(base / "jpg" / f"image_{i:05d}.jpg") for i in range(1, 31)]
    assert all(Path(p).is_file() for p in df.path)
    setid = loadmat(base / "setid.mat")
    for key, split in (("trnid", "train"), ("valid", "val"), ("tstid", "test")):
        ids = setid[key].ravel().astype(int)
        assert sorted(df.index[df.split == split] + 1) == sorted(ids)
        assert df[df.split == split].label.nunique() == 5
    assert df[["x1", "y1", "x2", "y2"]].isna().all().all()


def test_accepts_the_files_directly_in_root(root: Path) -> None:
    assert read_flowers102(root / "flowers-102").equals(read_flowers102(root))


def _copy(tmp_path: Path) -> Path:
    return make_flowers102(tmp_path, classes=2, per_class=3) / "flowers-102"


def test_missing_dataset_names_path_and_source(tmp_path: Path) -> None:
    message = _error(tmp_path)
    assert str(tmp_path / "flowers-102") in message and SOURCE in message
    assert SOURCE in _error(tmp_path / "absent")


@pytest.mark.parametrize("relative", ["jpg", "imagelabels.mat", "setid.mat"])
def test_missing_file_or_folder_is_named(tmp_path: Path, relative: str) -> None:
    base = _copy(tmp_path)
    target = base / relative
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _error(base)
    assert str(target) in message and SOURCE in message


def test_missing_image_is_named(tmp_path: Path) -> None:
    base = _copy(tmp_path)
    (base / "jpg" / "image_00004.jpg").unlink()
    assert "image_00004.jpg" in _error(base)


def test_split_id_out_of_range(tmp_path: Path) -> None:
    base = _copy(tmp_path)
    setid = {k: v for k, v in loadmat(base / "setid.mat").items() if not k.startswith("__")}
    setid["tstid"] = np.array([[5, 6, 7]], dtype=np.uint16)
    savemat(base / "setid.mat", setid)
    message = _error(base)
    assert "setid.mat" in message and "7" in message and "tstid" in message


def test_id_in_two_splits(tmp_path: Path) -> None:
    base = _copy(tmp_path)
    setid = {k: v for k, v in loadmat(base / "setid.mat").items() if not k.startswith("__")}
    setid["valid"] = setid["trnid"]
    savemat(base / "setid.mat", setid)
    assert "setid.mat" in _error(base)


def test_missing_variable_or_corrupt_mat(tmp_path: Path) -> None:
    base = _copy(tmp_path)
    savemat(base / "imagelabels.mat", {"other": np.ones((1, 6))})
    message = _error(base)
    assert "imagelabels.mat" in message and "labels" in message
    (base / "imagelabels.mat").write_bytes(b"not a mat file\n" * 20)
    assert "imagelabels.mat" in _error(base)


@pytest.mark.parametrize("missing", ["", "jpg", "setid.mat"])
def test_not_found_names_the_data_root_the_layout_and_how_to_give_another(
    tmp_path: Path, missing: str
) -> None:
    root = tmp_path / "absent"
    if missing:
        root = make_flowers102(tmp_path, classes=1, per_class=1)
        (target,) = root.glob(f"*/{missing}")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _error(root)
    assert LAYOUT in message and SOURCE in message and f"looked in the data root {root};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message
