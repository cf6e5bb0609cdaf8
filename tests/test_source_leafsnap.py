import shutil
from pathlib import Path

import pytest

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.leafsnap import INDEX, LAYOUT, SOURCE, read_leafsnap
from tests.fixtures.leafsnap import make_leafsnap, species_names


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_leafsnap(tmp_path_factory.mktemp("leafsnap"))


def _error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_leafsnap(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_all_lab_and_field_rows(root: Path) -> None:
    df = read_leafsnap(root)
    assert list(df.columns) == [*COLUMNS, "source"]
    assert len(df) == 4 * (3 + 5)
    assert df.source.value_counts().to_dict() == {"field": 4 * 5, "lab": 4 * 3}
    assert (df.split == "").all() and df[["x1", "y1", "x2", "y2"]].isna().all().all()
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in df.path)
    assert all(f"/images/{s}/" in p for p, s in zip(df.path, df.source, strict=True))


def test_labels_index_sorted_species_and_name_them(root: Path) -> None:
    df = read_leafsnap(root)
    names = species_names(4)
    assert names != sorted(names) and df.class_name.iloc[0] == names[0]
    assert df.label.tolist() == [sorted(names).index(s) for s in df.class_name]
    assert df.groupby("source").label.nunique().to_dict() == {"field": 4, "lab": 4}
    folder = df.path.map(lambda p: Path(p).parent.name)
    assert (folder == df.class_name.str.lower().str.replace(" ", "_")).all()


def test_accepts_the_dataset_folder_itself(root: Path) -> None:
    assert read_leafsnap(root / "leafsnap-dataset").equals(read_leafsnap(root))


def test_missing_dataset_names_path_and_source(tmp_path: Path) -> None:
    message = _error(tmp_path)
    assert str(tmp_path / "leafsnap-dataset") in message and SOURCE in message
    assert SOURCE in _error(tmp_path / "absent")


def _index(tmp_path: Path) -> Path:
    return make_leafsnap(tmp_path, species=2, lab_per_species=1, field_per_species=1) / (
        f"leafsnap-dataset/{INDEX}"
    )


def test_missing_index_is_named(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.unlink()
    message = _error(index.parent)
    assert str(index) in message and SOURCE in message


def test_missing_column(tmp_path: Path) -> None:
    index = _index(tmp_path)
    index.write_text(index.read_text().replace("\tspecies\t", "\tname\t", 1))
    message = _error(index.parent)
    assert INDEX in message and "species" in message


@pytest.mark.parametrize(
    "edit, expected",
    [(("\tlab\n", "\tmuseum\n"), "museum"), (("\tfield\n", "\n"), "source")],
)
def test_malformed_rows(tmp_path: Path, edit: tuple[str, str], expected: str) -> None:
    index = _index(tmp_path)
    index.write_text(index.read_text().replace(*edit))
    message = _error(index.parent)
    assert INDEX in message and expected in message


def test_listed_image_missing(tmp_path: Path) -> None:
    index = _index(tmp_path)
    image = index.read_text().splitlines()[1].split("\t")[1]
    (index.parent / image).unlink()
    message = _error(index.parent)
    assert INDEX in message and image in message


@pytest.mark.parametrize("missing", ["", "leafsnap-dataset-images.txt"])
def test_not_found_names_the_data_root_the_layout_and_how_to_give_another(
    tmp_path: Path, missing: str
) -> None:
    root = tmp_path / "absent"
    if missing:
        root = make_leafsnap(tmp_path, species=1, lab_per_species=1, field_per_species=1)
        (target,) = root.glob(f"*/{missing}")
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    message = _error(root)
    assert LAYOUT in message and SOURCE in message and f"looked in the data root {root};" in message
    assert "pass --data-root ROOT or set $NNGK_DATA=ROOT" in message


def test_one_species_spelled_two_ways_is_refused(tmp_path: Path) -> None:
    # two of its rows' species in upper case and with a doubled space: two classes of one
    index = _index(tmp_path)
    header, first, *rest = index.read_text().splitlines()
    fields = first.split("\t")
    name = fields[3]
    fields[3] = "  ".join(name.upper().split(" "))
    index.write_text("\n".join([header, "\t".join(fields), *rest]) + "\n")
    message = _error(index.parent)
    assert INDEX in message and f"{name!r}" in message and "spell it one way" in message
