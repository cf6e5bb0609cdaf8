import shutil
from pathlib import Path

import pytest

from bench.data.sources.base import COLUMNS, DatasetError
from bench.data.sources.folder import read_folder
from tests.fixtures.folder import class_image, class_names, make_folder


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_folder(tmp_path_factory.mktemp("folder"))


def _error(root: Path) -> str:
    with pytest.raises(DatasetError) as info:
        read_folder(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reads_one_label_per_sorted_class_folder(root: Path) -> None:
    df = read_folder(root)
    names = class_names(3)
    assert names != sorted(names)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 3 * 4 and df.class_name.value_counts().to_dict() == dict.fromkeys(names, 4)
    assert df.label.tolist() == [sorted(names).index(n) for n in df.class_name]
    assert (df.split == "").all() and df[["x1", "y1", "x2", "y2"]].isna().all().all()
    assert all(Path(p).is_absolute() and Path(p).is_file() for p in df.path)


def test_counts_nested_and_upper_case_images_and_ignores_the_rest(root: Path) -> None:
    paths = read_folder(root).path
    assert paths.str.contains("/nested/").sum() == 3 and paths.str.endswith(".PNG").sum() == 3
    assert not paths.str.contains(r"/\.").any()  # no hidden file or folder
    assert paths.str.lower().str.endswith((".jpg", ".png")).all()


def test_class_folder_without_images_is_skipped(tmp_path: Path) -> None:
    root = make_folder(tmp_path, classes=2, per_class=1)
    (root / "aaa_empty").mkdir()
    (root / "aaa_empty" / "readme.txt").write_text("no images here\n")
    df = read_folder(root)
    assert sorted(set(df.class_name)) == sorted(class_names(2)) and set(df.label) == {0, 1}


def test_images_left_out_by_their_suffix_and_empty_classes_are_said_once(tmp_path, caplog):
    # Before: a .jfif (an image Pillow reads) and a class of .jpe files were left out silently.
    root = make_folder(tmp_path, classes=2, per_class=1)
    first = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))[0]
    shutil.copy(next(first.glob("*.*")), first / "web.jfif")
    (root / "zz_class").mkdir()
    (root / "zz_class" / "a.jpe").write_bytes(b"")
    (root / "zz_class" / "notes.txt").write_text("not an image: never named\n")
    with caplog.at_level("WARNING", logger="nngk-bench"):
        read_folder(root)
        read_folder(root)  # a command reads its folder more than once: said once
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "2 file(s) left out" in lines[0] and ".jfif, .jpe" in lines[0]
    assert "notes.txt" not in lines[0]
    assert lines[1].endswith("class folder(s) without an image, left out: zz_class")


def test_missing_root_is_named(tmp_path: Path) -> None:
    assert str(tmp_path / "absent") in _error(tmp_path / "absent")


def test_root_without_class_folders(tmp_path: Path) -> None:
    class_image(0, 0).save(tmp_path / "loose.jpg")
    (tmp_path / ".hidden").mkdir()
    message = _error(tmp_path)
    assert str(tmp_path) in message and "class" in message


def test_fewer_than_two_classes_with_images(tmp_path: Path) -> None:
    root = make_folder(tmp_path, classes=2, per_class=2)
    shutil.rmtree(root / class_names(2)[1])
    (root / "empty").mkdir()
    message = _error(root)
    assert str(root) in message and "1 class folder" in message


def test_a_missing_folder_names_its_path_not_the_data_root(tmp_path: Path) -> None:
    message = _error(tmp_path / "absent")  # folder:PATH gives its own path: no data root used
    assert str(tmp_path / "absent") in message and "--data-root" not in message


def test_a_class_folder_linking_to_another_class_is_refused_naming_both(tmp_path: Path) -> None:
    # Issue 69: followed, so a training class's images were tested again under another label.
    root = make_folder(tmp_path, classes=3, per_class=4)
    maple = class_names(3)[0]
    (root / "zelkova").symlink_to(root / maple, target_is_directory=True)
    message = _error(root)
    assert message == (
        f"folder: {root}: classes {maple!r} and 'zelkova' share 4 image(s) by their real path "
        f"(e.g. zelkova/{maple}_0.jpg is {maple}/{maple}_0.jpg, a link), so a training image "
        "would be tested again as another's neighbour; an image belongs to one class folder, "
        "once: remove the link(s) and run again"
    )
    (root / "zelkova").unlink()
    (root / "zelkova").symlink_to(root / maple / "nested", target_is_directory=True)
    assert f"classes {maple!r} and 'zelkova' share 1 image(s)" in _error(root)


def test_an_image_linked_into_another_class_or_twice_into_its_own_is_refused(tmp_path):
    root = make_folder(tmp_path, classes=3, per_class=4)
    maple, birch, _ = class_names(3)
    (root / birch / "borrowed.jpg").symlink_to(root / maple / f"{maple}_0.jpg")
    assert f"classes {birch!r} and {maple!r} share 1 image(s)" in _error(root)
    (root / birch / "borrowed.jpg").unlink()
    (root / maple / "again.jpg").symlink_to(root / maple / f"{maple}_0.jpg")
    assert f"class {maple!r} holds 1 image(s) twice by their real path" in _error(root)


def test_a_class_folder_linked_from_elsewhere_is_read_as_its_own(tmp_path: Path) -> None:
    root = make_folder(tmp_path / "a", classes=2, per_class=2)
    elsewhere = make_folder(tmp_path / "b", classes=1, per_class=2) / class_names(1)[0]
    (root / "linked").symlink_to(elsewhere, target_is_directory=True)
    df = read_folder(root)
    assert df.class_name.value_counts().to_dict() == dict.fromkeys([*class_names(2), "linked"], 2)
