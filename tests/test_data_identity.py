"""A run on other data is another run: the data's location and fingerprint are its identity."""

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.data.identity import data_identity
from bench.runs.config import RunConfig
from tests.fixtures.folder import class_image, make_folder
from tests.test_protocols import FAST


def run(dataset, results, *extra):
    args = ["run", "--loss", "softmax", "--dataset", dataset, *FAST, *extra]
    out = CliRunner().invoke(main, [*args, "--results", str(results)])
    assert out.exit_code == 0, out.output
    return out


def trained_runs(results):
    return sorted(p.name for p in results.iterdir() if "-softmax-" in p.name)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    return make_folder(tmp_path / "a", classes=4, per_class=8)


def test_built_in_sets_keep_their_run_names():
    assert data_identity("digits", "") == {"data_location": "", "data_fingerprint": ""}
    assert data_identity("glyphs:classes=8", "/x") == data_identity("digits", "")
    # Identity fields left empty are not hashed: runs made before them keep their names
    # (this is the id of the default config before the fields existed).
    assert RunConfig().run_id() == "digits-nngk-d64-s0-104c3c42"


def test_the_same_data_is_skipped_and_changed_data_is_trained(tree, tmp_path):
    results = tmp_path / "r"
    run(f"folder:{tree}", results)
    (first,) = trained_runs(results)
    config = json.loads((results / first / "config.json").read_text())
    assert config["data_location"] == str(tree.resolve()) and len(config["data_fingerprint"]) == 16
    assert "finished, skipped" in run(f"folder:{tree}", results).output

    image = tree / "birch" / "birch_0.jpg"
    class_image(7, 99).save(image)  # one image replaced in place
    os.utime(image, ns=(1, 1))
    out = run(f"folder:{tree}", results)
    assert "finished, skipped" not in out.output
    assert len(trained_runs(results)) == 2


def test_another_data_root_is_trained_not_skipped(tmp_path, monkeypatch):
    from tests.fixtures.cars196 import make_cars196

    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    one = make_cars196(tmp_path / "one", classes=4, per_class=6)
    two = tmp_path / "two"
    shutil.copytree(one, two)  # the same files elsewhere: another location
    results = tmp_path / "r"
    run("cars196", results, "--data-root", one)
    out = run("cars196", results, "--data-root", two)
    assert "finished, skipped" not in out.output
    locations = {
        json.loads((results / name / "metrics.json").read_text())["data_location"]
        for name in trained_runs(results)
    }
    assert locations == {str(one.resolve()), str(two.resolve())}


def test_a_missing_listed_file_is_a_one_line_error(tree, tmp_path):
    from tests.fixtures.cars196 import make_cars196

    root = make_cars196(tmp_path / "cars", classes=4, per_class=6)
    victim = sorted((root / "car_ims").iterdir())[0]
    victim.unlink()
    out = CliRunner().invoke(
        main,
        ["run", "--dataset", "cars196", "--data-root", str(root), "--results", str(tmp_path / "r")],
    )
    assert out.exit_code != 0
    assert out.output.strip().splitlines()[-1].startswith("Error: ")
    assert victim.name in out.output and "Traceback" not in out.output


@pytest.mark.parametrize(
    "spelt, name",
    [
        ("glyphs:classes=20,size=28", "glyphs:classes=20"),  # size 28 is the default
        ("glyphs:size=16,classes=40", "glyphs:classes=40,size=16"),
        ("emoji:", "emoji"),
        ("emoji:size=16,classes=30,min_sets=8,sets=all", "emoji:classes=30,size=16"),
    ],
)
def test_one_built_in_set_is_one_run_id_however_spelt(spelt, name):
    # 'emoji:size=16,classes=30,min_sets=8,sets=all' beside 'emoji:classes=30,size=16' trained
    # again under a second id, and the report wrote two tables of one data set.
    from bench.data.identity import canonical_dataset
    from bench.train.presets import make_configs

    assert canonical_dataset(spelt) == name
    (a,) = make_configs(spelt, "contrastive", (16,), {})
    (b,) = make_configs(name, "contrastive", (16,), {})
    assert a.dataset == name and a.run_id() == b.run_id()


def test_the_names_runs_and_reports_use_are_their_own_canonical_names():
    from bench.data.identity import canonical_dataset

    names = ["glyphs", "emoji", "digits", "emoji:classes=300,size=24", "glyphs:classes=20"]
    names += ["glyphs:classes=16,instances=10,size=12", "folder:my-images", "features:x.npz"]
    assert [canonical_dataset(n) for n in names] == names
