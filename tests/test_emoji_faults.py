"""The emoji data set's bad inputs (docs/notes bad-inputs #10, #13, #39, #41, #64, #75): each is
refused in one line that says what to do, with nothing written, or its help names it."""

import json

import numpy as np
import pytest

from bench.data.datasets import load_dataset
from bench.data.emoji import EmojiSpec, packages_folder
from bench.data.emoji_render import load_emoji
from bench.data.identity import data_identity
from bench.data.presence import check_data_present
from bench.data.splits import carve_validation
from tests.conftest import cli
from tests.test_emoji import data_root, fixture_spec, own_cache  # noqa: F401 (fixtures)


def edit_icons(root, name: str, edit) -> None:
    path = packages_folder(root) / name / "icons.json"
    data = json.loads(path.read_text())
    edit(data["icons"])
    path.write_text(json.dumps(data))


def refused(done, results) -> str:
    """The one error line a refused command wrote (beside its log); nothing in `results`."""
    assert done.exit_code != 0, done.output
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert not results.exists() or not list(results.rglob("*.json")), list(results.rglob("*"))
    return line


def test_icons_without_an_svg_body_are_refused_not_thinned(data_root, tmp_path):  # noqa: F811
    """#13: half of openmoji's icons with a number for a body were left out silently."""
    edit_icons(
        data_root, "openmoji", lambda icons: [icons[n].update(body=123) for n in list(icons)[:8]]
    )
    with pytest.raises(ValueError) as err:
        load_emoji(fixture_spec(), data_root)
    message = str(err.value)
    assert (
        "\n" not in message and "openmoji/icons.json: 8 of its 17 icons have no SVG body" in message
    )
    assert f"reinstall the emoji sets with: npm install --prefix {data_root / 'emoji'}" in message
    results = tmp_path / "results"
    args = ["--dataset", fixture_spec().name(), "--data-root", data_root, "--results", results]
    done = cli("run", "--loss", "contrastive", *args, "--epochs", "1", "--dims", "8")
    assert "8 of its 17 icons have no SVG body" in refused(done, results)


def test_a_changed_install_of_the_same_versions_is_rendered_anew(data_root):  # noqa: F811
    """#13: the cache was keyed on the versions alone, so a reinstall reused the old images;
    the run's identity stays the versions' (the same run id on every machine)."""
    identity = data_identity(fixture_spec().name(), str(data_root))
    first = np.array(load_emoji(fixture_spec(), data_root).images)
    edit_icons(data_root, "noto", lambda icons: icons["square-0"].update(body='<rect width="9"/>'))
    again = np.array(load_emoji(fixture_spec(), data_root).images)
    assert not np.array_equal(again, first)
    assert data_identity(fixture_spec().name(), str(data_root)) == identity


def test_held_out_sets_leave_two_trained_images_a_class(data_root, tmp_path):  # noqa: F811
    """#64: min_sets 2 with one set held out left one trained image a class: three dead ends."""
    with pytest.raises(ValueError) as err:
        EmojiSpec.parse("emoji:sets=twemoji+noto,min_sets=2,held_out=twemoji")
    message = str(err.value)
    assert "min_sets of at least the held-out sets plus 2 (3)" in message
    assert "choose 3 sets or more (sets=) with min_sets=3, or hold out fewer sets" in message
    with pytest.raises(ValueError, match="give min_sets=3 or more, or hold out fewer sets"):
        EmojiSpec.parse("emoji:sets=twemoji+noto+openmoji,min_sets=2,held_out=twemoji")
    assert EmojiSpec.parse("emoji:sets=twemoji+noto+openmoji,min_sets=3,held_out=twemoji")
    results = tmp_path / "results"
    name = fixture_spec(held_out="twemoji").name()
    args = ["--dataset", name, "--data-root", data_root, "--results", results]
    done = cli("run", "--loss", "contrastive", *args, "--protocol", "cross-style", "--epochs", "1")
    assert "give min_sets=3 or more" in refused(done, results)


def test_too_few_classes_to_validate_on_name_the_remedies(data_root):  # noqa: F811
    """#10: emoji:classes=4 has 2 training classes; the error named no remedy."""
    with pytest.raises(ValueError) as err:
        load_dataset(fixture_spec(classes=4).name(), data_root=data_root, val_split="classes")
    message = str(err.value)
    assert "needs at least 4 training classes, 2 to validate on and 2 to train on; got 2" in message
    assert all(r in message for r in ("larger classes=", "--val-split images", "--val-fraction 0"))
    for remedy in ({"val_split": "images"}, {"val_split": "classes", "val_fraction": 0}):
        load_dataset(fixture_spec(classes=4).name(), data_root=data_root, **remedy)
    with pytest.raises(ValueError, match="--val-fraction 0"):
        carve_validation(np.repeat(np.arange(3), 4), 0.2, by_classes=True)


def test_a_data_root_that_is_a_file_is_refused(tmp_path):
    """#75: a file for --data-root was told to npm install under it."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for dataset in ("emoji", "cub"):
        with pytest.raises(ValueError, match=r"the data root .*afile is a file, not a folder"):
            check_data_present(dataset, afile)
    with pytest.raises(ValueError, match="is under the file .*afile, not a folder"):
        check_data_present("emoji", afile / "deeper")
    results = tmp_path / "results"
    args = ["--dataset", "emoji:classes=30,size=16", "--data-root", afile, "--results", results]
    line = refused(cli("run", "--loss", "contrastive", *args), results)
    assert "not a folder; give --data-root (or $NNGK_DATA) a folder" in line
    assert "npm" not in line


def test_the_dataset_help_names_emoji():
    """#39: run's and features' --dataset help did not list the emoji set."""
    emoji = "emoji[:size=N,min_sets=N,sets=A+B,classes=N"
    for command in ("run", "features", "suite"):
        assert emoji in "".join(cli(command, "--help").output.split()), command
    text = "".join(cli("run", "--help").output.split())  # words broken anywhere at 80 columns
    assert f"{emoji},held_out=A+B](installedbynpm,docs/protocols.md;held_outwith--protocol" in text


def test_tune_points_at_no_option_it_lacks(tmp_path):
    """#41: tune's help and its held_out error named --protocol, which tune does not take."""
    text = "".join(cli("tune", "--help").output.split())
    assert "emoji[:size=N,min_sets=N,sets=A+B,classes=N](installedbynpm,docs/protocols.md)" in text
    assert "--protocol" not in text and "tunesearchesunderthemetricprotocol" in text
    results = tmp_path / "results"
    for dataset, said in [
        ("emoji:classes=30,size=16,held_out=twemoji", "drop held_out=twemoji from emoji:"),
        ("inshop", "tune on another data set"),
    ]:
        args = ["--dataset", dataset, "--results", results, "--trials", "1"]
        line = refused(cli("tune", "--loss", "contrastive", *args), results)
        assert "tune searches under the metric protocol" in line and said in line
        assert "--protocol" not in line
